//! A cluster of simulated hosts: its directory made as `eckpt up` makes it, the real
//! coordinator on host `coord` and the real agent of each node on a host of the node's
//! name, each with a node-local store of its own.

use std::path::PathBuf;

use anyhow::Result;
use eckpt_cluster::launch::{self, NewCluster, UpOptions};
use eckpt_cluster_api::dirs::{ClusterDir, Deadlines, FlushConfig};
use eckpt_cluster_api::msg::Status;
use eckpt_coding::config::CodingConfig;

use crate::trace::Trace;

/// The coordinator's host.
pub const COORDINATOR: &str = "coord";

/// What a simulated cluster is made of.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Member nodes (`n0`…).
    pub nodes: usize,
    /// Spare nodes (`s0`…).
    pub spares: usize,
    /// The erasure code and its layout.
    pub coding: CodingConfig,
    /// The cluster's time bounds.
    pub deadlines: Deadlines,
    /// Flush a committed epoch to shared storage (the scratch directory's `flush/`) every
    /// this many epochs; `None`: no flushes.
    pub flush_every: Option<u64>,
}

/// A simulated cluster's files: its directory, shared by every host as a shared file system
/// is, and each node's local storage.
pub struct SimCluster {
    root: tempfile::TempDir,
    dir: ClusterDir,
    /// Member nodes' names.
    pub nodes: Vec<String>,
    /// Spare nodes' names.
    pub spares: Vec<String>,
    /// The shape it was made with.
    pub shape: Shape,
}

impl SimCluster {
    /// Makes the cluster directory of `shape` in a new scratch directory.
    pub fn create(shape: Shape) -> Result<SimCluster> {
        let root = tempfile::Builder::new()
            .prefix("eckpt-sim-")
            .tempdir_in(scratch_parent())?;
        let dir = ClusterDir::new(root.path().join("cluster"))?;
        let NewCluster { nodes, spares, .. } = launch::create(
            &dir,
            &UpOptions {
                dir: dir.root().to_path_buf(),
                nodes: Some(shape.nodes),
                spares: shape.spares,
                names: Vec::new(),
                coding: shape.coding,
                netns: false,
                tls: false,
                link_rate: None,
                exe: PathBuf::from("eckpt"),
                agents: false,
                bind: Some(COORDINATOR.into()),
                flush: shape.flush_every.map(|every| FlushConfig {
                    dir: flush_dir(root.path()),
                    every,
                    rate: None,
                    keep: 2,
                    restore_from_job: None,
                }),
                job: None,
                deadlines: shape.deadlines,
                domains: Default::default(),
                agent_placement: Default::default(),
            },
        )?;
        Ok(SimCluster {
            root,
            dir,
            nodes,
            spares,
            shape,
        })
    }

    /// The scratch directory everything of the cluster is in.
    pub fn root(&self) -> &std::path::Path {
        self.root.path()
    }

    /// The cluster directory.
    pub fn dir(&self) -> &ClusterDir {
        &self.dir
    }

    /// Node `name`'s local storage (its store and parity).
    pub fn local(&self, name: &str) -> PathBuf {
        self.locals().join(name)
    }

    /// Where the nodes' local storage lies, one directory per node.
    pub fn locals(&self) -> PathBuf {
        self.root.path().join("local")
    }

    /// Every node, members then spares.
    pub fn all_nodes(&self) -> impl Iterator<Item = &String> {
        self.nodes.iter().chain(&self.spares)
    }

    /// Registers the coordinator's host and every node's with `sim`. A host that crashes
    /// and is bounced starts its daemon again, which is the daemons' recovery path.
    pub fn add_hosts(&self, sim: &mut turmoil::Sim<'_>, trace: &Trace) {
        let (dir, trace_c) = (self.dir.root().to_path_buf(), trace.clone());
        sim.host(COORDINATOR, move || coordinator(dir.clone(), trace_c.clone()));
        for (name, spare) in self
            .nodes
            .iter()
            .map(|n| (n, false))
            .chain(self.spares.iter().map(|n| (n, true)))
        {
            let options = eckpt_agent::AgentOptions {
                dir: self.dir.root().to_path_buf(),
                name: name.clone(),
                spare,
                bind: name.clone(),
                cores: Some(1),
                local: Some(self.local(name)),
                domain: None,
                host: Some(identity(name)),
            };
            let trace = trace.clone();
            sim.host(name.as_str(), move || agent(options.clone(), trace.clone()));
        }
    }
}

/// Waits until every node of the cluster in `dir` is registered and alive, at most the
/// cluster's start wait (as `eckpt up` waits for its agents).
pub async fn until_registered(dir: &ClusterDir) -> Result<()> {
    let wait = dir.load()?.deadlines.start_wait();
    let every_node = async {
        loop {
            let status = eckpt_cluster_api::commands::coordinator_call(dir, Status, |_| {}).await;
            if status.is_ok_and(|s| s.nodes.iter().all(|n| n.alive)) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(wait, every_node)
        .await
        .map_err(|_| anyhow::anyhow!("the nodes did not all register within {wait:?}"))
}

/// Where runs make their scratch directories: `ECKPT_SIM_DIR`, else memory (`/dev/shm`)
/// when there is one — the daemons sync what they write, and a disk's syncs would be most
/// of a run's time — else the temporary directory.
fn scratch_parent() -> PathBuf {
    match std::env::var_os("ECKPT_SIM_DIR") {
        Some(dir) => PathBuf::from(dir),
        None if std::path::Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    }
}

/// The flush directory of the cluster whose scratch directory is `root`, shared by every
/// host as shared storage is.
fn flush_dir(root: &std::path::Path) -> PathBuf {
    root.join("flush")
}

/// The machine identity a simulated host says it is: one of its own, not the process's.
fn identity(host: &str) -> String {
    format!("sim:{host}")
}

/// The coordinator's daemon; its end (an error, or fenced by a successor) is a trace line,
/// not a failure of the simulation.
async fn coordinator(dir: PathBuf, trace: Trace) -> turmoil::Result {
    let options = eckpt_coordinator::CoordinatorOptions {
        dir,
        bind: COORDINATOR.into(),
        host: Some(identity(COORDINATOR)),
    };
    let ended = eckpt_coordinator::run_until(options, std::future::pending()).await;
    trace.event(COORDINATOR, format!("coordinator ended: {ended:?}"));
    Ok(())
}

/// A node's agent, as [`coordinator`].
async fn agent(options: eckpt_agent::AgentOptions, trace: Trace) -> turmoil::Result {
    let name = options.name.clone();
    let ended = eckpt_agent::run_hosted(options, std::future::pending()).await;
    trace.event(&name, format!("agent ended: {ended:?}"));
    Ok(())
}
