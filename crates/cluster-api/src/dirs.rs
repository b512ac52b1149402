//! The cluster directory `D` that `eckpt up` creates and every command takes (`--dir D`).
//!
//! ```text
//! D/
//!   secret                 per-cluster HMAC secret, 0600
//!   cluster.json           the coding configuration, the coordinator's endpoints, the
//!                          cluster's deadlines
//!   coordinator/           journal.json (the coordinator's durable state), pid, log, lock
//!   nodes/<name>/          one per agent: store/ (node-local checkpoints, and node.json:
//!                          the node's name and token), coded/ (parity, stripe blobs,
//!                          staged updates) — both elsewhere when the agent was given
//!                          `--store PATH` (PATH/store, PATH/coded) — agent.sock, pid, log
//!   runs/                  one record per `eckpt run`
//!   append-baseline.<R>.json  each rank's append files' lengths when first protected
//!   model.json             what `eckpt model --calibrate` measured of this cluster
//!   (flushed epochs live in the cluster's --flush-dir, on shared storage: `eckpt-flush`)
//!   debug/                 fault-injection pause points (tests and demos)
//! ```
//!
//! The directory is owner-only (0700); `up` makes it only when it is new or empty, and
//! `down --purge` deletes only these entries ([`is_created_entry`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::io_at;
use crate::ClusterError;
use eckpt_coding::CodingConfig;
use eckpt_proto::Endpoint;

/// Paths inside a cluster directory.
#[derive(Debug, Clone)]
pub struct ClusterDir {
    root: PathBuf,
}

/// What `cluster.json` records: how to reach the coordinator and how data is coded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterFile {
    /// Format version of this file.
    pub format: u32,
    /// Coding configuration.
    pub coding: CodingConfig,
    /// The coordinator's Unix socket (for commands on this host).
    pub coordinator_unix: Endpoint,
    /// The coordinator's TCP endpoint (for agents in other network namespaces or hosts).
    pub coordinator_tcp: Option<Endpoint>,
    /// The coordinator's host identity (host name and network namespace): a process with
    /// the same identity reaches it over the Unix socket, any other over TCP.
    #[serde(default)]
    pub coordinator_host: Option<String>,
    /// Network namespaces, when agents run in them.
    pub netns: Option<NetnsConfig>,
    /// Flushes to shared storage, when the cluster makes them.
    #[serde(default)]
    pub flush: Option<FlushConfig>,
    /// How long the cluster's processes wait for one another.
    #[serde(default)]
    pub deadlines: Deadlines,
    /// Where the agents run on their hosts' cores (`eckpt up --agent-nice/--agent-cpus`).
    #[serde(default)]
    pub agent_placement: AgentPlacement,
}

/// Where and on how many threads every agent of a cluster runs on its host's cores, so
/// that protection takes little from the ranks beside it and keeps up with fast links
/// (applied by `eckpt_agent::placement`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPlacement {
    /// The agents' nice value (0–19: higher gives the ranks the cores first under
    /// contention); `None`: as started.
    #[serde(default)]
    pub nice: Option<i32>,
    /// The CPUs the agents may run on, as a list (`0-3,8`): cores set aside for them;
    /// `None`: any.
    #[serde(default)]
    pub cpus: Option<String>,
    /// Threads each chunk of an encode or decode is read, multiplied and written on, per
    /// agent; `None`: as many as the cores the agent may run on.
    #[serde(default)]
    pub threads: Option<usize>,
}

/// The cluster's time bounds, recorded in `cluster.json` so that every process of the
/// cluster (coordinator, agents, `eckpt run`, ranks) uses the same, and tests can scale
/// them instead of sleeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deadlines {
    /// An agent silent this long is dead (agents heartbeat six times per period).
    pub liveness_ms: u64,
    /// A job's lease lasts this long after its supervisor last renewed it: a second
    /// `eckpt run` of a job whose supervisor died may take it over only then, and the
    /// dead supervisor's ranks are refused from then on.
    pub lease_ms: u64,
    /// How long a coordinator that hears from no agent at all suspects itself (a partition
    /// of its own link) rather than the agents: it declares nobody dead meanwhile. Ranks
    /// retry a coordinator they cannot reach for this long plus the liveness period.
    pub partition_grace_ms: u64,
    /// A cluster where no job runs this long (no live lease, no epoch written or committed)
    /// stops itself as `eckpt down` does, its checkpoints kept; 0: never. A cluster started
    /// with `up --detach` and forgotten then does not hold its hosts for ever.
    #[serde(default)]
    pub idle_ms: u64,
    /// How long a task's participant waits for a peer's stream to arrive: a peer alive but
    /// slow to start its part (a loaded host reading its store). A peer declared dead cancels
    /// the task long before.
    #[serde(default = "default_peer_wait_ms")]
    pub peer_wait_ms: u64,
    /// How long `OpenEpoch` and `Pace` wait for the other ranks (a rank's previous epoch to
    /// be decided, every rank at a pace point) before they give up with an error: long
    /// enough for the other ranks to reach their checkpoint and for the encode, bounded so
    /// that a rank whose peers never come does not hang without a word.
    #[serde(default = "default_open_wait_ms")]
    pub open_wait_ms: u64,
    /// How long a process waits for another to start: `up` for the coordinator and the
    /// agents, a new node's agent for the coordinator to accept it (the coordinator may
    /// start after the agents when another launcher starts them; a known node's agent says
    /// so and keeps trying), `eckpt run` for agents that never registered.
    #[serde(default = "default_start_wait_ms")]
    pub start_wait_ms: u64,
    /// How long a command or rank waits to reach the coordinator (a coordinator cut off by
    /// a partition would otherwise hold it for the kernel's SYN retries, two minutes).
    #[serde(default = "default_connect_ms")]
    pub connect_ms: u64,
    /// How long a daemon gives a peer that connected to prove it holds the cluster's secret
    /// before it drops the connection.
    #[serde(default = "default_handshake_ms")]
    pub handshake_ms: u64,
}

fn default_peer_wait_ms() -> u64 {
    120_000
}

fn default_open_wait_ms() -> u64 {
    600_000
}

fn default_start_wait_ms() -> u64 {
    60_000
}

fn default_connect_ms() -> u64 {
    5_000
}

fn default_handshake_ms() -> u64 {
    eckpt_proto::HANDSHAKE_TIMEOUT.as_millis() as u64
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines {
            liveness_ms: 3_000,
            lease_ms: 10_000,
            partition_grace_ms: 60_000,
            idle_ms: 0,
            peer_wait_ms: default_peer_wait_ms(),
            open_wait_ms: default_open_wait_ms(),
            start_wait_ms: default_start_wait_ms(),
            connect_ms: default_connect_ms(),
            handshake_ms: default_handshake_ms(),
        }
    }
}

impl Deadlines {
    /// An agent silent this long is dead.
    pub fn liveness(&self) -> Duration {
        Duration::from_millis(self.liveness_ms)
    }

    /// How often an agent heartbeats: six times per liveness period.
    pub fn heartbeat(&self) -> Duration {
        self.liveness() / 6
    }

    /// A job lease's length.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// How often a supervisor renews its lease: five times per lease.
    pub fn lease_renewal(&self) -> Duration {
        self.lease() / 5
    }

    /// How long a coordinator hearing nobody suspects itself.
    pub fn partition_grace(&self) -> Duration {
        Duration::from_millis(self.partition_grace_ms)
    }

    /// How long a task's participant waits for a peer's stream.
    pub fn peer_wait(&self) -> Duration {
        Duration::from_millis(self.peer_wait_ms)
    }

    /// How long a rank waits for the other ranks of its job.
    pub fn open_wait(&self) -> Duration {
        Duration::from_millis(self.open_wait_ms)
    }

    /// How long a process waits for another to start.
    pub fn start_wait(&self) -> Duration {
        Duration::from_millis(self.start_wait_ms)
    }

    /// How long a command or rank waits to reach the coordinator.
    pub fn connect(&self) -> Duration {
        Duration::from_millis(self.connect_ms)
    }

    /// How long a daemon gives a connected peer to authenticate.
    pub fn handshake(&self) -> Duration {
        Duration::from_millis(self.handshake_ms)
    }

    /// How long the coordinator may take to declare a dead node dead: its liveness period,
    /// or, while it hears from nobody and suspects its own link, the partition grace too.
    pub fn declaration(&self) -> Duration {
        self.partition_grace() + self.liveness()
    }

    /// How long an agent keeps a control connection that carries no request: ten liveness
    /// periods. The coordinator keeps its connections to agents open between requests (a
    /// connection and its handshake per request cost it more than the request), and reuses
    /// one only within half of this, so an agent never closes one under a request.
    pub fn control_idle(&self) -> Duration {
        self.liveness() * 10
    }

    /// How long a cluster with no job runs before it stops itself (`None`: for ever).
    pub fn idle(&self) -> Option<Duration> {
        (self.idle_ms > 0).then(|| Duration::from_millis(self.idle_ms))
    }

    /// How long a cluster that an `eckpt run` started waits with no job before it stops
    /// itself, where `--idle-lease` does not say: six leases. A job whose supervisor
    /// stalled past its lease (stopped, starved, cut off) must find its cluster still up when
    /// it, or the run that takes it over, claims the job again: a lease long for a stall, a
    /// few more for the claim.
    pub fn run_idle(&self) -> Duration {
        self.lease() * 6
    }

    /// How long an agent waits for the answer to its registration: registering journals
    /// the agent and the agent then resolves its store, so it gets at least the time of a
    /// connection.
    pub fn registration(&self) -> Duration {
        self.liveness().max(self.connect())
    }

    /// The longest an agent can take to open a new session once its link is back: the
    /// heartbeat in flight times out (one liveness period), it pauses, a connection whose
    /// SYN was lost times out (another), it pauses, then connects and registers. A
    /// coordinator that heard nobody gives every node this long before it may be declared
    /// dead again.
    pub fn reconnection(&self) -> Duration {
        3 * self.liveness() + 2 * self.heartbeat() + self.registration()
    }

    /// How often the coordinator tells a caller waiting on a long request that it is still
    /// at work on it ([`CoordResponse::Working`](crate::msg::CoordResponse::Working)), and
    /// an agent tells the coordinator ([`AgentResponse::Working`](crate::msg::AgentResponse::Working)):
    /// as often as agents heartbeat.
    pub fn keepalive(&self) -> Duration {
        self.heartbeat()
    }

    /// How long a caller waits for the coordinator's next word once its request was sent:
    /// the retry window ([`Deadlines::coordinator_retry`]: as long as the cluster bears with
    /// a coordinator it cannot reach), and never less than a connection's wait. A
    /// coordinator silent that long stopped or was cut off: the call ends, and is tried
    /// again where that is safe ([`CoordRequest::may_repeat`](crate::msg::CoordRequest::may_repeat)).
    pub fn answer(&self) -> Duration {
        self.coordinator_retry().max(self.connect())
    }

    /// How long a rank retries a coordinator it cannot reach.
    pub fn coordinator_retry(&self) -> Duration {
        self.partition_grace() + self.liveness()
    }

    /// Refuses bounds the cluster cannot work with.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let check = |name: &str, ms: u64, min: u64| {
            if ms < min {
                return Err(ClusterError::Invalid(format!(
                    "{name} {ms} ms is too short (at least {min} ms)"
                )));
            }
            Ok(())
        };
        check("--liveness", self.liveness_ms, 600)?;
        check("--lease", self.lease_ms, 1_000)?;
        check("--partition-grace", self.partition_grace_ms, self.liveness_ms)?;
        check("--peer-wait", self.peer_wait_ms, self.liveness_ms)?;
        check("--open-wait", self.open_wait_ms, self.liveness_ms)?;
        check("--start-wait", self.start_wait_ms, 1_000)?;
        check("--connect-wait", self.connect_ms, 100)?;
        check("--handshake-wait", self.handshake_ms, 100)?;
        if self.idle_ms > 0 {
            // Shorter, and a run between two renewals of its lease would look idle.
            check("--idle-lease", self.idle_ms, self.lease_ms)?;
        }
        Ok(())
    }
}

/// The last level of checkpointing (`--flush-dir`): committed epochs copied by the agents to
/// a directory every host sees (a parallel file system), in `eckpt-flush`'s layout, so that
/// a job survives more than `m` lost nodes of a group or the whole cluster, and restarts on
/// another number of nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushConfig {
    /// The shared directory (absolute: agents and the coordinator run elsewhere).
    pub dir: PathBuf,
    /// Flush a committed epoch when at least this many epochs passed since the last flush
    /// (1: every epoch); 0: only on demand (`eckpt flush`).
    pub every: u64,
    /// Bytes per second each node writes at most, so that a flush does not starve the
    /// encode of later epochs (`None`: unbounded).
    pub rate: Option<u64>,
    /// Flushed epochs kept (the oldest beyond are deleted once a newer one is published).
    pub keep: usize,
    /// `--restore-from-job`: the other job whose flushed epochs this cluster's job may
    /// restore and continue (`-`: epochs that record no job id); `None`: only its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from_job: Option<String>,
}

impl ClusterFile {
    /// How a process with host identity `me` reaches the coordinator: its Unix socket from
    /// the same host and network namespace, TCP from anywhere else (a Unix socket in a
    /// shared cluster directory does not cross hosts).
    pub fn coordinator_from(&self, me: &str) -> &Endpoint {
        match (&self.coordinator_tcp, &self.coordinator_host) {
            (Some(tcp), Some(host)) if host != me => tcp,
            _ => &self.coordinator_unix,
        }
    }
}

/// The emulated network of a cluster whose agents run in network namespaces.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NetnsConfig {
    /// `tc` rate of every node's link, if shaped.
    pub rate: Option<String>,
    /// Address index of each node.
    pub nodes: std::collections::BTreeMap<String, usize>,
}

/// The entries eckpt creates in a cluster directory (see the module documentation):
/// `down --purge` deletes these and nothing else, so a file someone put in the directory
/// stays, and so does the directory then.
pub const CREATED_ENTRIES: [&str; 8] = [
    "secret",
    "tls.pem",
    "cluster.json",
    "coordinator",
    "nodes",
    "runs",
    "debug",
    CALIBRATION_FILE,
];

/// What `eckpt model --dir D --calibrate` measured of the cluster, in `D`.
pub const CALIBRATION_FILE: &str = "model.json";

/// Where rank `rank` records its append files' lengths when first protected, in `dir` (a
/// standalone store root, or the cluster directory in cluster mode).
pub fn append_baseline_file(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("append-baseline.{rank}.json"))
}

/// Whether `name` is an entry eckpt creates in a cluster directory (see
/// [`CREATED_ENTRIES`] and [`append_baseline_file`]), or the temporary name of one being
/// written ([`is_temp_of`]: `.cluster.json.eckpt-tmp-…`).
pub fn is_created_entry(name: &str) -> bool {
    let baseline = |name: &str| {
        name.strip_prefix("append-baseline.")
            .and_then(|rest| rest.strip_suffix(".json"))
            .is_some_and(|rank| rank.parse::<u32>().is_ok())
    };
    let made = |name: &str| baseline(name) || CREATED_ENTRIES.contains(&name);
    made(name) || temp_base(name).is_some_and(made)
}

/// Whether `name` is the temporary name a file `base` is written under before it is
/// renamed into place ([`eckpt_durable::temp_path`]), left behind when its writer died.
pub fn is_temp_of(name: &str, base: &str) -> bool {
    temp_base(name) == Some(base)
}

/// The file a temporary name stands for: [`eckpt_durable::temp_path`]'s
/// (`.NAME.eckpt-tmp-…`), or the secret's and older writers' (`.NAME.tmp-…`, `NAME.tmp-…`).
fn temp_base(name: &str) -> Option<&str> {
    let hidden = name.strip_prefix('.');
    hidden
        .and_then(|rest| rest.split_once(eckpt_durable::TEMP_MARK))
        .or_else(|| hidden.unwrap_or(name).split_once(".tmp-"))
        .map(|(base, _)| base)
}

/// The host file a launch of `eckpt run` writes in its scratch directory
/// ([`ClusterDir::launch_scratch`]) for `mpirun`, `mpiexec` or `srun`.
pub const LAUNCH_HOSTFILE: &str = "hostfile";

/// The one-line remote-shell script a launch writes beside its host file for `mpiexec`.
pub const LAUNCH_RSH_SCRIPT: &str = "ssh";

/// Whether `name` is a launch of `eckpt run`, `<run>-<attempt>` with `<run>` its start time
/// in hexadecimal seconds and its pid (`66f1c2a0-4242-3`): the name of a scratch directory.
pub fn is_launch_id(name: &str) -> bool {
    let mut parts = name.split('-');
    let time = parts
        .next()
        .is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit()));
    let numbers = parts
        .by_ref()
        .take(2)
        .filter(|n| n.parse::<u64>().is_ok())
        .count()
        == 2;
    time && numbers && parts.next().is_none()
}

/// Current `cluster.json` format.
pub const CLUSTER_FORMAT: u32 = 1;

impl ClusterDir {
    /// The cluster directory at `root` (made absolute: agents and ranks run elsewhere).
    pub fn new(root: impl AsRef<Path>) -> Result<ClusterDir, ClusterError> {
        let root = root.as_ref();
        let root = if root.is_absolute() {
            root.to_path_buf()
        } else {
            std::env::current_dir().map_err(io_at(root))?.join(root)
        };
        Ok(ClusterDir { root })
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The shared secret file.
    pub fn secret(&self) -> PathBuf {
        eckpt_proto::secret_path(&self.root)
    }

    /// `cluster.json`.
    pub fn cluster_file(&self) -> PathBuf {
        self.root.join("cluster.json")
    }

    /// The coordinator's directory.
    pub fn coordinator(&self) -> PathBuf {
        self.root.join("coordinator")
    }

    /// The coordinator's durable state.
    pub fn journal(&self) -> PathBuf {
        self.coordinator().join("journal.json")
    }

    /// The coordinator's Unix socket.
    pub fn coordinator_socket(&self) -> PathBuf {
        self.coordinator().join("coordinator.sock")
    }

    /// The scratch directory of launch `launch_id` ([`is_launch_id`]) of `eckpt run`: what
    /// its launcher reads ([`LAUNCH_HOSTFILE`], [`LAUNCH_RSH_SCRIPT`]), removed when the
    /// attempt ends.
    pub fn launch_scratch(&self, launch_id: &str) -> PathBuf {
        self.root.join("runs").join(launch_id)
    }

    /// An agent's directory.
    pub fn node(&self, name: &str) -> PathBuf {
        self.root.join("nodes").join(name)
    }

    /// An agent's node-local checkpoint store, unless it was given `--store`.
    pub fn store(&self, name: &str) -> PathBuf {
        ClusterDir::local_store(&self.node(name))
    }

    /// An agent's coded objects (parity, stripe blobs, staged updates, rebuilt shards),
    /// unless it was given `--store`.
    pub fn coded(&self, name: &str) -> PathBuf {
        ClusterDir::coded_beside(&self.store(name))
    }

    /// An agent's Unix socket.
    pub fn agent_socket(&self, name: &str) -> PathBuf {
        self.node(name).join("agent.sock")
    }

    /// Pid file of a process directory (`coordinator()` or `node(name)`): the pid, and on a
    /// second line the host name it runs on (the directory may be shared by hosts).
    pub fn pid_file(dir: &Path) -> PathBuf {
        dir.join("pid")
    }

    /// The local directory of node `name` whose agent keeps its node-local data in `local`
    /// (`--store`): its store and parity live under it, not in the cluster directory.
    pub fn local_store(local: &Path) -> PathBuf {
        local.join("store")
    }

    /// The parity directory beside a node's store root `store` (see [`ClusterDir::local_store`]).
    pub fn coded_beside(store: &Path) -> PathBuf {
        store.with_file_name("coded")
    }

    /// Log file of a process directory.
    pub fn log_file(dir: &Path) -> PathBuf {
        dir.join("log")
    }

    /// Fault-injection pause points.
    pub fn debug(&self) -> PathBuf {
        self.root.join("debug")
    }

    /// Reads `cluster.json`.
    pub fn load(&self) -> Result<ClusterFile, ClusterError> {
        let path = self.cluster_file();
        let bytes = std::fs::read(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ClusterError::NotFound(format!(
                    "{} is not a cluster directory (no cluster.json): start one with `eckpt up --dir {}`",
                    self.root.display(),
                    self.root.display()
                ))
            } else {
                io_at(&path)(e)
            }
        })?;
        let file: ClusterFile = serde_json::from_slice(&bytes).map_err(|e| {
            ClusterError::Corrupt(format!(
                "{}: unreadable ({e}); `eckpt down --dir {}` still stops the cluster's processes",
                path.display(),
                self.root.display()
            ))
        })?;
        if file.format != CLUSTER_FORMAT {
            return Err(ClusterError::Refused(format!(
                "{}: format {} (this eckpt reads {CLUSTER_FORMAT})",
                path.display(),
                file.format
            )));
        }
        file.coding.validate()?;
        Ok(file)
    }

    /// The cluster's TLS identity, in a cluster made with `--tls`.
    pub fn tls(&self) -> PathBuf {
        eckpt_proto::tls_path(&self.root)
    }

    /// Loads the cluster secret, with the cluster's TLS identity if it has one (then every
    /// TCP connection is inside TLS).
    pub fn load_secret(&self) -> Result<eckpt_proto::ClusterSecret, ClusterError> {
        let secret = eckpt_proto::ClusterSecret::load(&self.secret())?;
        let tls = self.tls();
        Ok(match tls.try_exists().map_err(io_at(&tls))? {
            true => secret.with_tls(eckpt_proto::ClusterTls::load(&tls)?),
            false => secret,
        })
    }
}

/// Writes `bytes` to `path` crash-safely ([`eckpt_durable::write_atomic`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClusterError> {
    eckpt_durable::write_atomic(path, bytes).map_err(io_at(path))
}

/// Writes this process's pid file in process directory `dir` (see [`ClusterDir::pid_file`]).
pub fn write_pid_file(dir: &Path) -> Result<(), ClusterError> {
    let text = format!("{}\n{}\n", std::process::id(), crate::net::host_name());
    write_atomic(&ClusterDir::pid_file(dir), text.as_bytes())
}

/// The pid a pid file in `dir` records, if it runs on this host.
pub fn read_pid_file(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(ClusterDir::pid_file(dir)).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    match lines.next().map(str::trim) {
        Some(host) if host != crate::net::host_name() => None,
        _ => Some(pid),
    }
}

/// fsyncs a directory so the names in it are durable.
pub fn fsync_dir(dir: &Path) -> Result<(), ClusterError> {
    eckpt_durable::sync_dir(dir).map_err(io_at(dir))
}

/// Validates a node name: it becomes a directory name and appears in logs and JSON.
pub fn check_node_name(name: &str) -> Result<(), ClusterError> {
    check_name("node name", name, "")
}

/// A failure domain's name (a rack, a switch, a power feed) as an agent gives it: the
/// characters of a node name, and '.'.
pub fn check_domain_name(name: &str) -> Result<(), ClusterError> {
    check_name("failure domain", name, ".")
}

/// `name` is 1 to 32 ASCII letters, digits, '-', '_' or one of `also`.
fn check_name(what: &str, name: &str, also: &str) -> Result<(), ClusterError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || also.contains(c);
    if !name.is_empty() && name.len() <= 32 && name.chars().all(allowed) {
        return Ok(());
    }
    let extra: String = also.chars().map(|c| format!(", '{c}'")).collect();
    Err(ClusterError::Invalid(format!(
        "{what} {name:?}: use 1 to 32 letters, digits, '-', '_'{extra}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_eckpt_creates_is_its_own() {
        for name in [
            "secret",
            "tls.pem",
            "cluster.json",
            "nodes",
            ".cluster.json.tmp-42",
            ".secret.tmp-42-00ff",
            "append-baseline.3.json",
            "append-baseline.3.json.tmp-42",
            "model.json",
            ".model.json.tmp-7",
            ".cluster.json.eckpt-tmp-42-0",
        ] {
            assert!(is_created_entry(name), "{name}");
        }
        for name in [
            "thesis.tex",
            "secrets",
            ".cluster.json",
            "append-baseline.x.json",
            "append-baseline.3.jsonx",
            "nodes2",
            "model.json.bak",
            ".notes.txt.eckpt-tmp-1-0",
        ] {
            assert!(!is_created_entry(name), "{name}");
        }
        let file = append_baseline_file(Path::new("/d"), 3);
        assert!(is_created_entry(file.file_name().unwrap().to_str().unwrap()));
    }

    #[test]
    fn a_launch_is_named_by_its_run_and_attempt() {
        assert!(is_launch_id("66f1c2a0-4242-3"));
        for name in [
            "66f1c2a0-4242",
            "66f1c2a0-4242-3-1",
            "run-1-2.json",
            "x6f-1-2",
            "-1-2",
            "66f1-1-x",
        ] {
            assert!(!is_launch_id(name), "{name}");
        }
    }
}
