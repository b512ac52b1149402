//! Where a rank finds its number and the job's size in its environment: eckpt's own
//! variables when `eckpt run` launched it itself, else the launcher's (Open MPI, MPICH's
//! Hydra and PMI, Slurm). Read by the rank's checkpointer and by `eckpt run-rank`, which
//! gives the rank torch.distributed's variables from them.

/// Environment variables that give the rank, first found wins.
pub const RANK_VARIABLES: [&str; 4] = ["ECKPT_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"];

/// Environment variables that give the job size, first found wins.
pub const WORLD_VARIABLES: [&str; 4] = ["ECKPT_WORLD", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"];
