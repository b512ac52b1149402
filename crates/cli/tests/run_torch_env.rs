//! torch.distributed under `eckpt run`: every rank gets `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` as torchrun sets them, on each launcher
//! this machine has (srun's is checked by tests/slurm.rs), so `init_process_group("env://")`
//! works in every attempt. crates/py/tests/test_torch.py trains through a node loss with them.

mod cluster;

use std::time::Duration;

use cluster::programs::text;
use cluster::{assert_torch_env, run_job, PRINT_TORCH_ENV};

#[test]
fn every_launcher_gives_ranks_torch_distributed_variables() {
    let tmp = tempfile::tempdir().unwrap();
    for launcher in ["local", "mpirun", "mpiexec"] {
        // Four ranks on the two data nodes of a k=2, m=1 group: two per node.
        let shape = format!("--nodes 3 --k 2 --m 1 --launcher {launcher} -n 4 -- sh -c");
        let mut args: Vec<&str> = shape.split(' ').collect();
        args.push(PRINT_TORCH_ENV);
        let out = run_job(tmp.path(), &args, Duration::from_secs(120));
        assert!(out.status.success(), "{launcher}: {}", text(&out.stderr));
        assert_torch_env(&text(&out.stdout), "", 4);
    }
}
