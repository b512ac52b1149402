//! `eckpt agent` and `eckpt coordinator`: the long-running processes `eckpt up` starts
//! (they can also be started by hand, e.g. one agent per real host).

use std::path::PathBuf;

use anyhow::Result;
use eckpt_cluster_api::dirs::{check_domain_name, ClusterDir};

use super::cluster::NodeArgs;

/// Logs go to stderr (the log file when started by `eckpt up`); `RUST_LOG` filters.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: `eckpt up` sends stderr to a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written (its file system full) is lost, not fatal:
        // tracing would report the failure with eprintln!, which panics when stderr fails,
        // and a panic aborts a daemon (crash-only).
        .log_internal_errors(false)
        .try_init();
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

#[derive(clap::Args)]
pub struct AgentArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Address for the TCP listener (a host name is resolved; `%n`: the node's name).
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// Cores offered to ranks (placement balances ranks per core; default: all).
    #[arg(long)]
    cores: Option<u32>,
    /// Node-local directory for this node's checkpoints and parity (PATH/store,
    /// PATH/coded); default: the node's directory inside the cluster directory. Give one
    /// when the cluster directory is on a shared file system. `%n` stands for the node's
    /// name, so one command line serves every host (`--store /local/eckpt-%n`).
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

pub fn run_agent(args: AgentArgs) -> Result<i32> {
    init_logging();
    if let Some(domain) = &args.node.domain {
        check_domain_name(domain)?;
    }
    // Before the runtime starts its threads: they inherit it. A directory that is no
    // cluster's yet is the agent's to report below.
    if let Ok(file) = ClusterDir::new(&args.node.dir).and_then(|d| d.load()) {
        eckpt_agent::placement::apply(&file.agent_placement)?;
    }
    let name = args.node.name;
    let for_node = |text: &str| text.replace("%n", &name);
    runtime()?.block_on(eckpt_agent::run(eckpt_agent::AgentOptions {
        dir: args.node.dir,
        bind: for_node(&args.bind),
        local: args
            .store
            .map(|store| PathBuf::from(for_node(&store.to_string_lossy()))),
        name,
        spare: args.node.spare,
        cores: args.cores,
        domain: args.node.domain,
        host: None,
    }))?;
    Ok(0)
}

#[derive(clap::Args)]
pub struct AgentsArgs {
    /// Cluster directory.
    #[arg(long)]
    dir: PathBuf,
    /// The nodes whose agents run here, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<String>,
}

/// `eckpt agents`: the agents of `--nodes`, each on a thread and runtime of its own
/// (`eckpt_agent::host`). Reads `kill NODE` lines on stdin and answers `killed NODE` (or `error:
/// …`) once every task of that agent has ended; stops every agent at the end of stdin.
pub fn run_agents(args: AgentsArgs) -> Result<i32> {
    use std::io::{BufRead, Write};
    init_logging();
    eckpt_daemon::crash_only::install();
    let options = args
        .nodes
        .iter()
        .map(|name| eckpt_agent::AgentOptions {
            dir: args.dir.clone(),
            name: name.clone(),
            spare: false,
            bind: "127.0.0.1".into(),
            cores: Some(1),
            local: None,
            domain: None,
            host: None,
        })
        .collect();
    let mut host = eckpt_agent::host::AgentHost::start(options)?;
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let answer = match line.strip_prefix("kill ") {
            Some(node) => match host.kill(node.trim()) {
                Ok(()) => format!("killed {}", node.trim()),
                Err(e) => format!("error: {e}"),
            },
            None => format!("error: unknown request {line:?} (kill NODE)"),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct CoordinatorArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Address for the TCP listener agents in other namespaces or hosts use (default: the
    /// bridge of a cluster in network namespaces, the last coordinator's address when it
    /// ran on this host, else 127.0.0.1).
    #[arg(long)]
    bind: Option<String>,
}

/// The coordinator holds a few small buffers per connection, allocated and freed by
/// whichever worker thread runs the connection's task, and glibc keeps an arena per thread
/// (up to eight per core), each holding on to what was freed in it. Two arenas keep a
/// 4,096-node coordinator within 256 MiB (docs/PERFORMANCE.md, "Local recovery").
fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: sets an allocator parameter; called before the runtime starts its threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

pub fn run_coordinator(args: CoordinatorArgs) -> Result<i32> {
    limit_malloc_arenas();
    init_logging();
    let bind = match args.bind {
        Some(bind) => bind,
        None => {
            let dir = ClusterDir::new(&args.dir)?;
            let file = dir.load()?;
            eckpt_cluster::launch::default_coordinator_bind(&dir, &file)
        }
    };
    runtime()?.block_on(eckpt_coordinator::run(eckpt_coordinator::CoordinatorOptions {
        dir: args.dir,
        bind,
        host: None,
    }))?;
    Ok(0)
}
