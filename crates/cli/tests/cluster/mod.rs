//! A local cluster driven through the `eckpt` binary, as a user would: real coordinator and
//! agent processes on loopback, brought down (and purged) when dropped.

#![allow(dead_code)]

pub mod hosts;
pub mod programs;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn eckpt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_eckpt"))
}

/// Runs `eckpt` and returns its output, whatever the exit status.
pub fn run(args: &[&str]) -> Output {
    eckpt().args(args).output().expect("eckpt runs")
}

/// Runs `eckpt`, which must succeed; its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "eckpt {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Starts `eckpt` in the background, its output captured.
pub fn spawn(args: &[&str]) -> Child {
    eckpt()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eckpt starts")
}

/// Waits for a background `eckpt` to exit; one still running after a minute (far beyond
/// anything it should take) is killed and fails the test instead of hanging it.
pub fn finish(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("eckpt {what} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// Runs `eckpt` with a time limit (see `finish`); its output, whatever the exit status.
pub fn run_bounded(args: &[&str]) -> Output {
    finish(spawn(args), &args.join(" "))
}

/// Starts `eckpt run ARGS` in `work` in the background, its output captured.
pub fn spawn_job(work: &std::path::Path, args: &[&str]) -> Child {
    eckpt()
        .arg("run")
        .args(args)
        .current_dir(work)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eckpt runs")
}

/// Waits for a background `eckpt run` (see `spawn_job`), killed (and the test failed)
/// after `limit`; its output.
pub fn finish_job(mut child: Child, limit: Duration) -> Output {
    // Drain the pipes while waiting, so a chatty job never blocks on a full pipe.
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut buf).unwrap();
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut buf).unwrap();
        buf
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("eckpt run still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Runs `eckpt run ARGS` in `work`, killed (and the test failed) after `limit`.
pub fn run_job(work: &std::path::Path, args: &[&str], limit: Duration) -> Output {
    finish_job(spawn_job(work, args), limit)
}

/// `eckpt status --json`'s node list without `fields` (what changes on its own: how long
/// ago each node was last heard, its port after a restart), for comparing what is recorded.
pub fn nodes_without(status: &serde_json::Value, fields: &[&str]) -> serde_json::Value {
    let mut nodes = status["nodes"].clone();
    for node in nodes
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_object_mut())
    {
        for field in fields {
            node.remove(*field);
        }
    }
    nodes
}

/// The name of the node that hosts `rank`, from `eckpt status --json`.
pub fn node_of_rank(status: &serde_json::Value, rank: u32) -> String {
    status["nodes"]
        .as_array()
        .expect("status lists nodes")
        .iter()
        .find(|n| n["ranks"].as_array().is_some_and(|r| r.contains(&rank.into())))
        .and_then(|n| n["name"].as_str())
        .unwrap_or_else(|| panic!("no node hosts rank {rank}: {status}"))
        .to_string()
}

/// Polls `check` every 50 ms for up to `limit`; fails the test with `what` after.
pub fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Cuts every node of the namespaced cluster in `dir` (`up --netns`) off the coordinator —
/// its bridge down — until the coordinator reports `seconds` without hearing any agent,
/// then restores the links, checking that the coordinator declared nobody dead meanwhile
/// (it suspects its own link). `cut` runs once the link is down (to let a job go on into
/// the partition).
pub fn partition_for(dir: &Path, seconds: f64, cut: impl FnOnce()) {
    let bridge = eckpt_cluster::netns::Network::for_dir(dir).bridge();
    let link = |state: &str| {
        let out = Command::new("ip")
            .args(["link", "set", &bridge, state])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip link set {bridge} {state}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let d = dir.to_str().unwrap();
    link("down");
    cut();
    let mut during = Value::Null;
    wait_for(
        Duration::from_secs(60 + 2 * seconds as u64),
        "the partition",
        || {
            let out = run(&["status", "--dir", d, "--json"]);
            during = serde_json::from_slice(&out.stdout).unwrap_or_default();
            during["isolated_seconds"].as_f64().unwrap_or(0.0) >= seconds
        },
    );
    link("up");
    assert!(
        during["nodes"]
            .as_array()
            .is_some_and(|nodes| nodes.iter().all(|n| n["alive"].as_bool() == Some(true))),
        "nobody is declared dead while the coordinator hears nobody: {during}"
    );
}

/// Brings the cluster in a directory down and deletes it when the test ends, passed or
/// failed (runs with `--keep` leave their cluster running, namespaces included).
pub struct PurgeAtEnd(pub String);

impl Drop for PurgeAtEnd {
    fn drop(&mut self) {
        if Path::new(&self.0).join("cluster.json").exists() {
            let _ = run(&["down", "--dir", &self.0, "--purge"]);
        }
    }
}

/// Asserts that `out` is a failure whose one-line message contains `expected`.
pub fn assert_refused(out: &Output, expected: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "succeeded, expected {expected:?}");
    assert!(err.contains(expected), "expected {expected:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// SIGKILLs process `pid` and waits until its descriptors are closed (a lock it held is
/// then free): gone, or a zombie whose every other thread is gone. A zombie alone is not
/// enough: the group leader of a killed multi-threaded process turns zombie (and its
/// `/proc/PID/fd` empty) while its other threads still exit, holding the files they share
/// until the last one is gone.
pub fn kill_and_wait(pid: &str) {
    let status = Command::new("kill").args(["-9", pid]).status().unwrap();
    assert!(status.success(), "kill -9 {pid}");
    let proc_dir = PathBuf::from("/proc").join(pid);
    let exited = || {
        let zombie = std::fs::read_to_string(proc_dir.join("stat")).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        });
        let threads = std::fs::read_dir(proc_dir.join("task")).map_or(0, |t| t.count());
        zombie && threads <= 1
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !exited() {
        assert!(Instant::now() < deadline, "process {pid} outlived SIGKILL");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Pids of live processes (zombies left out) whose environment holds `key=value`: the
/// ranks of an attempt by their `ECKPT_GENERATION`, a run's by its `ECKPT_LAUNCH`.
pub fn processes_with(key: &str, value: &str) -> Vec<i32> {
    let wanted = format!("{key}={value}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == wanted.as_bytes()))
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
        })
        .collect()
}

/// A shell command that leaves `sleep SECONDS` running in a session of its own, holding
/// the shell's output, and goes on only once it runs as `sleep` (until its exec, the
/// leftover is named `setsid`).
pub fn leave_a_process(seconds: &str) -> String {
    format!("setsid sleep {seconds} & while [ \"$(cat /proc/$!/comm)\" != sleep ]; do :; done")
}

/// The pids of live processes whose command line is exactly `words`.
pub fn processes_running(words: &[&str]) -> Vec<String> {
    let wanted: Vec<u8> = words.iter().flat_map(|w| w.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A control connection to node `node`'s agent of the cluster in `dir`, opened as the
/// coordinator of term `term` would open it: what a coordinator replaced (or cut off)
/// could still send.
pub async fn connect_as_coordinator(dir: &str, node: &str, term: u64) -> eckpt_proto::Connection {
    use eckpt_cluster_api::msg::{Hello, Nodes};
    let dir = eckpt_cluster_api::dirs::ClusterDir::new(dir).unwrap();
    let secret = dir.load_secret().unwrap();
    let nodes = eckpt_cluster_api::commands::coordinator_call(&dir, Nodes, |_| {})
        .await
        .unwrap();
    let info = nodes
        .into_iter()
        .find(|n| n.name == node)
        .expect("the node is alive");
    let host = eckpt_cluster_api::net::host_identity();
    eckpt_cluster_api::net::open_node_as(&info, &host, &secret, &Hello::Coordinator { term })
        .await
        .unwrap()
}

/// Whether the tests run as root (namespaces, mounts); CI does.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

/// Deterministic pseudo-random bytes.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Changes a few scattered bytes (a MAT-like epoch).
pub fn touch(data: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for _ in 0..16 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x as usize) % data.len();
        data[at] = data[at].wrapping_add(1 + (x >> 40) as u8 % 200);
    }
}

pub struct Cluster {
    pub dir: PathBuf,
    /// The file system `dir` is on, when it is one of its own: unmounted after `down`,
    /// before the temporary directory is removed.
    _mounted: Option<Tmpfs>,
    _tmp: tempfile::TempDir,
    /// Each rank's data per epoch checkpointed (committed or not).
    pub history: std::collections::BTreeMap<u64, Vec<Vec<u8>>>,
}

impl Cluster {
    /// `eckpt up --detach` with the given extra arguments.
    pub fn up(extra: &[&str]) -> Cluster {
        Cluster::up_in(tempfile::tempdir().expect("temp dir"), extra)
    }

    /// [`Cluster::up`] on a tmpfs of `size` of its own (needs root), which a test may fill.
    pub fn up_on_tmpfs(size: &str, extra: &[&str]) -> Cluster {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mounted = Tmpfs::mount(&tmp.path().join("cluster"), size);
        let mut c = Cluster::up_in(tmp, extra);
        c._mounted = Some(mounted);
        c
    }

    /// [`Cluster::up`] in `tmp/cluster`.
    fn up_in(tmp: tempfile::TempDir, extra: &[&str]) -> Cluster {
        let dir = tmp.path().join("cluster");
        let d = dir.to_str().unwrap().to_string();
        let mut args = vec!["up", "--dir", &d, "--detach"];
        args.extend_from_slice(extra);
        ok(&args);
        Cluster {
            dir,
            _mounted: None,
            _tmp: tmp,
            history: Default::default(),
        }
    }

    pub fn d(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// The arguments of `eckpt checkpoint` by rank `rank` of a `world`-rank job on this
    /// cluster, followed by `rest` (options, then the files).
    pub fn checkpoint_args<'a>(&'a self, world: &'a str, rank: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["checkpoint", "--dir", self.d(), "--world", world, "--rank", rank];
        args.extend_from_slice(rest);
        args
    }

    pub fn status(&self) -> Value {
        serde_json::from_str(&ok(&["status", "--dir", self.d(), "--json"])).expect("status JSON")
    }

    /// `node`'s entry in `status`.
    pub fn node_status(&self, node: &str) -> Value {
        let status = self.status();
        let entry = status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == node);
        entry
            .cloned()
            .unwrap_or_else(|| panic!("{node} is not in {status}"))
    }

    pub fn committed(&self) -> u64 {
        self.status()["committed_epoch"].as_u64().unwrap()
    }

    /// The node rank `rank` is placed on.
    pub fn status_placement(&self, rank: u64) -> String {
        self.status()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["ranks"].as_array().unwrap().contains(&rank.into()))
            .unwrap_or_else(|| panic!("rank {rank} is placed nowhere"))["name"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Nodes that host ranks, in name order.
    pub fn nodes_with_ranks(&self) -> Vec<String> {
        self.status()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| !n["ranks"].as_array().unwrap().is_empty())
            .map(|n| n["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Members of the first group, by position.
    pub fn members(&self) -> Vec<String> {
        self.status()["groups"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    }

    /// Writes rank `rank`'s image beside the cluster directory (not on a file system of
    /// its own that a test fills up); its path.
    pub fn write_rank(&self, rank: usize, data: &[u8]) -> PathBuf {
        let path = self.dir.parent().unwrap().join(format!("rank{rank}.img"));
        std::fs::write(&path, data).unwrap();
        path
    }

    /// Checkpoints `data[r]` as rank r for the open epoch; the last rank waits for the
    /// decision when `wait`, and its JSON report is returned.
    pub fn checkpoint(&mut self, data: Vec<Vec<u8>>, wait: bool) -> Option<Value> {
        let epoch = self.status()["open_epoch"].as_u64().unwrap();
        let world = data.len().to_string();
        let mut last = None;
        for (rank, d) in data.iter().enumerate() {
            let path = self.write_rank(rank, d);
            let r = rank.to_string();
            let mut args = vec![
                "checkpoint",
                "--dir",
                self.d(),
                "--world",
                &world,
                "--rank",
                &r,
                "--json",
            ];
            if wait && rank == data.len() - 1 {
                args.push("--wait");
            }
            args.push(path.to_str().unwrap());
            let out = run_bounded(&args);
            assert!(
                out.status.success() || wait,
                "checkpoint of rank {rank} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            last = serde_json::from_slice(&out.stdout).ok();
            if last.is_none() && wait {
                eprintln!(
                    "checkpoint of rank {rank} gave no report: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        self.history.insert(epoch, data);
        if wait {
            last
        } else {
            None
        }
    }

    /// Waits until the open epoch moves past `epoch` (it was decided).
    pub fn wait_decided(&self, epoch: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.status()["open_epoch"].as_u64().unwrap() <= epoch {
            assert!(Instant::now() < deadline, "epoch {epoch} was never decided");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Flips one bit of byte `byte` (modulo its length) of the data file of rank `rank`'s
    /// committed epoch on the node that hosts it: silent corruption of a stored block.
    pub fn corrupt_rank_block(&self, rank: u64, byte: usize) {
        assert!(
            self.try_corrupt_rank_block(rank, byte),
            "rank {rank} has no stored epoch"
        );
    }

    /// A committed epoch's directory of rank `rank` in its node's store; `None` when the
    /// node holds none (a recovery is moving it).
    pub fn rank_epoch_dir(&self, rank: u64) -> Option<PathBuf> {
        let node = self.status_placement(rank);
        let rank_dir = self
            .dir
            .join("nodes")
            .join(&node)
            .join("store")
            .join(format!("rank.{rank}"));
        std::fs::read_dir(&rank_dir).ok().and_then(|entries| {
            entries
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with("epoch-"))
                .map(|e| e.path())
        })
    }

    /// [`Cluster::corrupt_rank_block`]; `false` when the rank's node holds no epoch of it
    /// (a recovery is moving it).
    pub fn try_corrupt_rank_block(&self, rank: u64, byte: usize) -> bool {
        let Some(epoch_dir) = self.rank_epoch_dir(rank) else {
            return false;
        };
        let data_file = epoch_dir.join("data");
        let Ok(mut on_disk) = std::fs::read(&data_file) else {
            return false;
        };
        if on_disk.is_empty() {
            return false;
        }
        let at = byte % on_disk.len();
        on_disk[at] ^= 0x40;
        std::fs::write(&data_file, on_disk).unwrap();
        true
    }

    /// Flips one bit in the middle of every committed parity file of `node`.
    pub fn corrupt_parity(&self, node: &str) {
        let coded = self.dir.join("nodes").join(node).join("coded");
        let mut flipped = 0;
        for object in std::fs::read_dir(&coded).unwrap().flatten() {
            let parity = object.path().join("parity");
            if object.file_name().to_string_lossy().starts_with("obj-") && parity.is_file() {
                let mut bytes = std::fs::read(&parity).unwrap();
                let at = bytes.len() / 2;
                bytes[at] ^= 0x08;
                std::fs::write(&parity, bytes).unwrap();
                flipped += 1;
            }
        }
        assert!(flipped > 0, "{node} holds no parity");
    }

    pub fn kill(&self, node: &str, wipe: bool) {
        let mut args = vec!["kill-node", "--dir", self.d(), node];
        if wipe {
            args.push("--wipe");
        }
        ok(&args);
    }

    pub fn pause(&self, phase: &str) {
        ok(&["debug", "pause", "--dir", self.d(), "--at", phase]);
    }

    pub fn wait_paused(&self) {
        ok(&["debug", "wait", "--dir", self.d(), "--timeout", "60"]);
    }

    pub fn resume(&self) {
        ok(&["debug", "resume", "--dir", self.d()]);
    }

    /// Waits until the coordinator has noticed that `node` is down.
    pub fn wait_down(&self, node: &str) {
        self.wait_alive_is(node, false);
    }

    /// Waits until the coordinator counts `node` alive again (after SIGCONT, a restart).
    pub fn wait_up(&self, node: &str) {
        self.wait_alive_is(node, true);
    }

    fn wait_alive_is(&self, node: &str, alive: bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status();
            let now = s["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["name"] == node)
                .is_some_and(|n| n["alive"].as_bool().unwrap());
            if now == alive {
                return;
            }
            assert!(Instant::now() < deadline, "{node} still alive={now}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of a cluster process: `coordinator`, or `nodes/<name>` (its pid file's first
    /// line; the second names the host).
    pub fn pid(&self, process: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join(process).join("pid")).unwrap();
        text.lines().next().unwrap_or_default().trim().to_string()
    }

    /// SIGKILLs the coordinator (the agents keep running and reconnect to a new one) and
    /// waits until it has exited: until then it holds the coordinator's lock, and a
    /// coordinator started at once was refused as a second one (on a loaded machine).
    pub fn kill_coordinator(&self) {
        kill_and_wait(&self.pid("coordinator"));
    }

    /// `eckpt coordinator` started by hand, as after a crash; its stderr in `log2`.
    pub fn start_coordinator(&self) -> Child {
        let log = std::fs::File::create(self.dir.join("coordinator/log2")).unwrap();
        eckpt()
            .args(["coordinator", "--dir", self.d()])
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Waits until the coordinator answers: one just started may take a while to listen on
    /// a loaded machine.
    pub fn wait_coordinator(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = run(&["status", "--dir", self.d()]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the coordinator did not come up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the coordinator answers and every node it knows is alive.
    pub fn wait_all_alive(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = run(&["status", "--dir", self.d(), "--json"]);
            let all = out.status.success()
                && serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|s| {
                    s["nodes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|n| n["alive"].as_bool().unwrap() || n["removed"].as_bool().unwrap())
                });
            if all {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not come back");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn recover(&self) -> Output {
        run(&["recover", "--dir", self.d(), "--json"])
    }

    /// Starts `recover` without waiting for it.
    pub fn recover_in_background(&self) -> Child {
        eckpt()
            .args(["recover", "--dir", self.d(), "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Rank `rank`'s committed image, exported (decoded if need be).
    pub fn restore(&self, rank: usize) -> Result<Vec<u8>, String> {
        let out_path = self.dir.parent().unwrap().join(format!("restored{rank}"));
        let r = rank.to_string();
        let out = run(&[
            "restore",
            "--dir",
            self.d(),
            "--rank",
            &r,
            "-o",
            out_path.to_str().unwrap(),
        ]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(std::fs::read(&out_path).unwrap())
    }

    /// Kills the agents of the first `count` nodes hosting ranks with their data, checks
    /// that every rank still restores (decoded), recovers, and checks again.
    pub fn lose_and_recover(&self, count: usize) {
        let victims = self.nodes_with_ranks();
        for v in &victims[..count] {
            self.kill(v, true);
        }
        for v in &victims[..count] {
            self.wait_down(v);
        }
        self.assert_restorable();
        let out = self.recover();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        self.assert_restorable();
    }

    /// Every rank restores to exactly what it checkpointed at the committed epoch.
    pub fn assert_restorable(&self) {
        let committed = self.committed();
        let expected = &self.history[&committed];
        for (rank, data) in expected.iter().enumerate() {
            let got = self
                .restore(rank)
                .unwrap_or_else(|e| panic!("rank {rank} at epoch {committed}: {e}"));
            assert!(
                got == *data,
                "rank {rank} restored different bytes at epoch {committed}"
            );
        }
    }
}

/// A tmpfs mounted at a directory (created), owner-only; unmounted when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let options = format!("size={size},mode=0700");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("--lazy").arg(&self.0).status();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = run(&["down", "--dir", self.d()]);
    }
}

/// A rank's shell command printing torch.distributed's variables as `eckpt run` gives them,
/// and its node: `torch RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
/// NODE` ([`assert_torch_env`] reads it back).
pub const PRINT_TORCH_ENV: &str =
    "echo torch $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT \
     ${ECKPT_NODE:-$(echo $ECKPT_NODES | cut -d, -f$((RANK + 1)))}";

/// Checks the lines [`PRINT_TORCH_ENV`] printed in `out` (each after `[rank] ` and `prefix`):
/// one per rank, each with its own rank and the job's size, one rendezvous (address and a
/// port of eckpt's range) for all, and local ranks numbering each node's ranks in rank order.
pub fn assert_torch_env(out: &str, prefix: &str, world: u32) {
    let mut by_node: std::collections::BTreeMap<String, Vec<(u32, u32, u32)>> = Default::default();
    let mut rendezvous = std::collections::BTreeSet::new();
    for rank in 0..world {
        let start = format!("[{rank}] {prefix}torch ");
        let lines: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix(start.as_str()))
            .collect();
        assert_eq!(lines.len(), 1, "rank {rank}'s torch variables: {out}");
        let fields: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(fields.len(), 7, "rank {rank}: {}", lines[0]);
        let number = |i: usize| -> u32 {
            fields[i]
                .parse()
                .unwrap_or_else(|_| panic!("rank {rank}: {}", lines[0]))
        };
        assert_eq!(
            (number(0), number(1)),
            (rank, world),
            "RANK and WORLD_SIZE: {}",
            lines[0]
        );
        let port = number(5);
        assert!((20000..32768).contains(&port), "MASTER_PORT {port}");
        rendezvous.insert((fields[4].to_string(), port));
        by_node
            .entry(fields[6].to_string())
            .or_default()
            .push((rank, number(2), number(3)));
    }
    assert_eq!(
        rendezvous.len(),
        1,
        "one MASTER_ADDR:MASTER_PORT for all: {rendezvous:?}"
    );
    for (node, mut ranks) in by_node {
        ranks.sort();
        for (local, (rank, local_rank, local_world)) in ranks.iter().enumerate() {
            assert_eq!(
                (*local_rank, *local_world),
                (local as u32, ranks.len() as u32),
                "rank {rank} on {node}: LOCAL_RANK and LOCAL_WORLD_SIZE"
            );
        }
    }
}
