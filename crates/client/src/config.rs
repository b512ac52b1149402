//! Where and how a rank checkpoints: from the environment (`ECKPT_DIR`, `ECKPT_RANK`, …) and
//! from a `key=value;key=value` string (what `eckpt_init` takes), the string winning.

use std::path::PathBuf;
use std::time::Duration;

use eckpt_capture::TrackMode;
use eckpt_cluster_api::rank_env::{RANK_VARIABLES, WORLD_VARIABLES};
use eckpt_store::RetentionPolicy;

use crate::pacing::{parse_duration, Interval};
use crate::Error;

/// A rank's checkpoint configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Store root (node-local: tmpfs when present). `None`: the per-user, per-job default
    /// (see [`Config::store_root`]).
    pub dir: Option<PathBuf>,
    /// This process's rank.
    pub rank: u32,
    /// Dirty tracking: kernel write-protect when possible (`Auto`), or hashing.
    pub track: TrackMode,
    /// Block size of hash-tracked regions.
    pub hash_block_size: usize,
    /// Delta chains and retention.
    pub retention: RetentionPolicy,
    /// Cluster mode: the cluster directory of a running `eckpt up` (its nodes' agents
    /// erasure-code the epochs); `dir` is then ignored.
    pub cluster: Option<PathBuf>,
    /// Ranks in the job (cluster mode: an epoch commits when all have checkpointed).
    pub world: Option<u32>,
    /// Cluster mode: the node the launcher started this rank on (`eckpt run` says it). The
    /// coordinator refuses a checkpoint or restart of a rank that lives elsewhere.
    pub node: Option<String>,
    /// Cluster mode: every rank's node, by rank (`ECKPT_NODES`, how `eckpt run` tells ranks
    /// started by `mpirun`); `node` wins when both are given.
    pub nodes: Vec<String>,
    /// How often `snapshot()` checkpoints.
    pub interval: Interval,
    /// Mean time between failures, which `interval=auto` needs.
    pub mtbf: Option<Duration>,
    /// Which launch of the job this process belongs to: ranks meet at `snapshot()` pace
    /// points only with ranks of the same launch.
    pub launch: String,
    /// Cluster mode: the generation of the attempt `eckpt run` started this rank in
    /// (`ECKPT_GENERATION`). Every request carries it; once a newer attempt replaced this
    /// one, the coordinator refuses it and the rank ends itself.
    pub generation: Option<u64>,
    /// Whether `checkpoint()` may return once the device (GPU) regions are staged in host
    /// memory, the epoch being written and committed (standalone) or reported (cluster mode)
    /// by a thread while the job computes: the async-save pattern. The next call that needs
    /// the epoch's outcome (`checkpoint`, `wait`, `restart`, a new `protect`) waits for it
    /// first and reports its failure. Host regions and files are written before the call
    /// returns either way.
    pub background: bool,
}

/// Batch schedulers' job ids (Slurm, PBS/Torque, LSF). They stay the same when a job is
/// relaunched within its allocation (a new `srun` or `mpirun`), which is what restart from a
/// node-local store needs; a launcher's own ids (Open MPI's jobid, the PMIx namespace) change
/// with every `mpirun`, so a relaunch would miss its checkpoint: they are not used.
const JOB_VARIABLES: [&str; 3] = ["SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"];

/// Variables that name one launch of a job when `ECKPT_LAUNCH` is absent: a launcher's own
/// ids, new with every `mpirun` or `srun` (unlike the batch job ids above).
const LAUNCH_VARIABLES: [&str; 3] = ["OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "SLURM_STEP_ID"];

/// The default store root from the job id found through `var` (the environment), or why there
/// is none.
fn default_dir(var: impl Fn(&str) -> Option<String>) -> Result<PathBuf, Error> {
    JOB_VARIABLES
        .iter()
        .find_map(|v| var(v).filter(|id| !id.is_empty()))
        .map(|job| Ok(eckpt_store::default_root(&job)?))
        .unwrap_or_else(|| {
            Err(
            Error::Invalid(format!(
                "no checkpoint directory: set ECKPT_DIR or dir=… (the per-job default needs a batch job id: {})",
                JOB_VARIABLES.join(", ")
            )))
        })
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dir: None,
            rank: 0,
            track: TrackMode::Auto,
            hash_block_size: 64 << 10,
            retention: RetentionPolicy::default(),
            cluster: None,
            world: None,
            node: None,
            nodes: Vec::new(),
            interval: Interval::default(),
            mtbf: None,
            launch: String::new(),
            generation: None,
            background: false,
        }
    }
}

impl Config {
    /// The standalone store root: `dir`, or by default one per user and per batch job
    /// (`/dev/shm/eckpt-<uid>/job-<id>` on a tmpfs, from `SLURM_JOB_ID`, `PBS_JOBID` or
    /// `LSB_JOBID`), so that a job never resumes another job's checkpoints. Without a job id
    /// there is no safe default: an error asks for a directory.
    pub fn store_root(&self) -> Result<PathBuf, Error> {
        match &self.dir {
            Some(dir) => Ok(dir.clone()),
            None => default_dir(|v| std::env::var(v).ok()),
        }
    }

    /// Defaults overridden by `ECKPT_DIR`, `ECKPT_RANK` (or the MPI launcher's rank),
    /// `ECKPT_TRACK`, `ECKPT_BLOCK_SIZE`, `ECKPT_KEEP`, `ECKPT_MAX_CHAIN`, `ECKPT_CLUSTER`,
    /// `ECKPT_WORLD` (or the launcher's job size), `ECKPT_NODE`, `ECKPT_NODES`,
    /// `ECKPT_INTERVAL`, `ECKPT_MTBF`, `ECKPT_LAUNCH` (or the launcher's launch id),
    /// `ECKPT_GENERATION`, `ECKPT_BACKGROUND`.
    pub fn from_env() -> Result<Config, Error> {
        let mut config = Config::default();
        config.read_env()?;
        Ok(config)
    }

    fn read_env(&mut self) -> Result<(), Error> {
        if let Some(rank) = RANK_VARIABLES.iter().find_map(|v| std::env::var(v).ok()) {
            self.set("rank", &rank)?;
        }
        if let Some(world) = WORLD_VARIABLES.iter().find_map(|v| std::env::var(v).ok()) {
            self.set("world", &world)?;
        }
        if let Some(launch) = LAUNCH_VARIABLES.iter().find_map(|v| std::env::var(v).ok()) {
            self.set("launch", &launch)?;
        }
        for key in [
            "dir",
            "track",
            "block_size",
            "keep",
            "max_chain",
            "cluster",
            "node",
            "nodes",
            "interval",
            "mtbf",
            "launch",
            "generation",
            "background",
        ] {
            if let Ok(value) = std::env::var(format!("ECKPT_{}", key.to_ascii_uppercase())) {
                self.set(key, &value)?;
            }
        }
        Ok(())
    }

    /// The node this rank was started on, if the launcher said: `node`, or its entry in
    /// `nodes`.
    pub fn launched_on(&self) -> Option<&str> {
        self.node
            .as_deref()
            .or_else(|| self.nodes.get(self.rank as usize).map(String::as_str))
    }

    /// The environment's configuration overridden by `text`: `key=value` pairs separated by
    /// `;`, `,` or newlines, keys as in [`Config::from_env`] without the prefix
    /// (`dir=/scratch/ck;rank=3;track=hash`).
    pub fn from_env_and(text: &str) -> Result<Config, Error> {
        let mut config = Config::default();
        config.read_env()?;
        for pair in text
            .split([';', ',', '\n'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| Error::Invalid(format!("config entry {pair:?} is not key=value")))?;
            config.set(key.trim(), value.trim())?;
        }
        Ok(config)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let number = |what: &str| -> Result<u64, Error> {
            value
                .parse()
                .map_err(|_| Error::Invalid(format!("{what} {value:?} is not a number")))
        };
        match key {
            "dir" => self.dir = Some(PathBuf::from(value)),
            "rank" => {
                self.rank =
                    u32::try_from(number("rank")?).map_err(|_| Error::Invalid("rank too large".into()))?
            }
            "track" => {
                self.track = match value {
                    "auto" => TrackMode::Auto,
                    "uffd" => TrackMode::Uffd,
                    "hash" => TrackMode::Hash,
                    _ => {
                        return Err(Error::Invalid(format!(
                            "track {value:?} (expected auto, uffd or hash)"
                        )))
                    }
                }
            }
            "block_size" => self.hash_block_size = number("block_size")? as usize,
            "keep" => self.retention.keep_committed = number("keep")? as usize,
            "max_chain" => self.retention.max_chain = number("max_chain")? as u32,
            "cluster" => self.cluster = Some(PathBuf::from(value)),
            "world" => {
                let world = u32::try_from(number("world")?)
                    .ok()
                    .filter(|&w| w > 0)
                    .ok_or_else(|| Error::Invalid(format!("world {value:?} must be 1 or more")))?;
                self.world = Some(world);
            }
            "node" => self.node = Some(value.to_string()).filter(|n| !n.is_empty()),
            "nodes" => {
                self.nodes = value
                    .split([',', ' ', ':'])
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect()
            }
            "interval" => self.interval = Interval::parse(value)?,
            "mtbf" => self.mtbf = Some(parse_duration("mtbf", value)?),
            "launch" => self.launch = value.to_string(),
            "generation" => self.generation = Some(number("generation")?),
            "background" => {
                self.background = match value {
                    "1" | "true" | "yes" | "on" => true,
                    "0" | "false" | "no" | "off" => false,
                    _ => return Err(Error::Invalid(format!("background {value:?} (expected 1 or 0)"))),
                }
            }
            _ => return Err(Error::Invalid(format!("unknown config key {key:?}"))),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_overrides_defaults() {
        let c = Config::from_env_and(
            "dir=/x/y; rank=7,track=hash\nblock_size=4096;keep=3;max_chain=2;cluster=/c;world=8",
        )
        .unwrap();
        assert_eq!(c.dir, Some(PathBuf::from("/x/y")));
        assert_eq!(c.rank, 7);
        assert_eq!(c.track, TrackMode::Hash);
        assert_eq!(c.hash_block_size, 4096);
        assert_eq!(c.retention.keep_committed, 3);
        assert_eq!(c.retention.max_chain, 2);
        assert_eq!(c.cluster, Some(PathBuf::from("/c")));
        assert_eq!(c.world, Some(8));
    }

    #[test]
    fn the_node_and_the_interval_come_from_the_launcher() {
        let c = Config::from_env_and("rank=2;nodes=n0:n0:n1:n1").unwrap();
        assert_eq!(c.launched_on(), Some("n1"));
        let c = Config::from_env_and("rank=2;nodes=n0:n0:n1:n1;node=s0").unwrap();
        assert_eq!(c.launched_on(), Some("s0"));
        assert_eq!(
            Config::from_env_and("rank=9;nodes=n0").unwrap().launched_on(),
            None
        );
        let c = Config::from_env_and("interval=auto;mtbf=2h").unwrap();
        assert_eq!(c.interval, Interval::Auto);
        assert_eq!(c.mtbf, Some(Duration::from_secs(7200)));
        assert!(Config::from_env_and("interval=often").is_err());
        assert!(Config::from_env_and("mtbf=often").is_err());
    }

    #[test]
    fn the_default_store_is_per_job_or_refused() {
        let slurm = default_dir(|v| (v == "SLURM_JOB_ID").then(|| "77".to_string())).unwrap();
        assert!(slurm.ends_with("job-77"), "{}", slurm.display());
        let pbs = default_dir(|v| (v == "PBS_JOBID").then(|| "9.server".to_string())).unwrap();
        assert!(pbs.ends_with("job-9.server"), "{}", pbs.display());
        let none = default_dir(|_| None).unwrap_err().to_string();
        assert!(
            none.contains("ECKPT_DIR") && none.contains("SLURM_JOB_ID"),
            "{none}"
        );
        assert!(default_dir(|_| Some(String::new())).is_err());
    }

    #[test]
    fn bad_entries_are_refused() {
        assert!(Config::from_env_and("rank=x")
            .unwrap_err()
            .to_string()
            .contains("rank"));
        assert!(Config::from_env_and("colour=blue")
            .unwrap_err()
            .to_string()
            .contains("colour"));
        assert!(Config::from_env_and("rank").is_err());
        assert!(Config::from_env_and("track=soft-dirty").is_err());
        assert!(Config::from_env_and("world=0").is_err());
    }
}
