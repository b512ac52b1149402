//! `eckpt`: erasure-coded incremental checkpoint/restart. Every subcommand prints a one-line
//! reason and exits non-zero on error, and prints JSON with `--json` where it reports results.

mod commands;
mod config;
mod docs;
mod output;
mod size;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "eckpt",
    version,
    about = "Fast, fault-tolerant checkpoint/restart with erasure-coded node-local checkpoints"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Split a file into k data + m parity shard files (any m may be lost).
    Encode(commands::encode::Args),
    /// Rebuild a file from a shard directory (any k intact shards per stripe).
    Decode(commands::decode::Args),
    /// Check every shard block against the manifest; writes nothing.
    Verify(commands::verify::Args),
    /// Write the block delta between two checkpoint images (any checkpointer's files).
    Delta(commands::delta::DeltaArgs),
    /// Rebuild a new image from its base and an `eckpt delta`.
    Patch(commands::delta::PatchArgs),
    /// Measure throughput next to references measured in the same run.
    #[command(subcommand)]
    Bench(commands::bench::Bench),
    /// Start a local cluster: a coordinator and N agents (optionally in network namespaces).
    Up(Box<commands::cluster::UpArgs>),
    /// Stop a cluster (its checkpoints stay unless --purge).
    Down(commands::cluster::DownArgs),
    /// Delete what a failed or killed job left on this host: its node stores and, with
    /// --dir, its cluster directory (only what eckpt made; refused while its coordinator runs).
    Clean(commands::clean::CleanArgs),
    /// Show nodes, groups, ranks and the committed epoch.
    Status(commands::cluster::StatusArgs),
    /// Print the coordinator's and the nodes' logs merged in time order (--follow: then
    /// what is appended).
    Logs(commands::logs::LogsArgs),
    /// Start an agent and add it to a running cluster (a spare, or a node coming back).
    Join(commands::cluster::NodeArgs),
    /// Stop a node on purpose; the next `recover` rebuilds its ranks elsewhere.
    Leave(commands::cluster::LeaveArgs),
    /// Fault injection: SIGKILL a node's agent (--wipe: and delete its local data).
    KillNode(commands::cluster::KillArgs),
    /// Checkpoint a file as a rank's image for the open epoch.
    Checkpoint(commands::ckpt::CheckpointArgs),
    /// Rebuild lost or damaged nodes' data from the survivors and restore redundancy.
    Recover(commands::ckpt::RecoverArgs),
    /// Export a rank's committed image (decoded from the survivors if its node is gone or
    /// its copy fails its checksums), or its flushed image from a flush directory.
    Restore(commands::ckpt::RestoreArgs),
    /// Copy a committed epoch of every rank to the cluster's flush directory now.
    Flush(commands::ckpt::FlushArgs),
    /// Run a job on a cluster and carry it through node failures: launch its ranks, forward
    /// their output, recover and relaunch them when nodes are lost.
    // Boxed: its options outweigh every other command's (clippy's large_enum_variant).
    Run(Box<commands::run::RunArgs>),
    /// Open MPI's rsh agent for `eckpt run --launcher mpirun` (enters a node's namespaces).
    #[command(hide = true)]
    MpirunAgent(commands::run::MpirunAgentArgs),
    /// Ends a run's ranks when its supervisor dies (started by `eckpt run`).
    #[command(hide = true)]
    RunGuard(commands::run::RunGuardArgs),
    /// Runs one rank under an MPI launcher and ends what it leaves running (started by
    /// `eckpt run --launcher mpirun|mpiexec`).
    #[command(hide = true)]
    RunRank(commands::run::RunRankArgs),
    /// A node agent (started by `eckpt up` or `eckpt join`).
    Agent(commands::daemons::AgentArgs),
    /// Many node agents in one process, killed one by one on request (started by
    /// `eckpt bench control`).
    #[command(hide = true)]
    Agents(commands::daemons::AgentsArgs),
    /// The cluster coordinator (started by `eckpt up`).
    Coordinator(commands::daemons::CoordinatorArgs),
    /// Predict checkpoint, encode, update and recovery times, storage and the checkpoint
    /// interval; calibrate on a running cluster; recommend a configuration.
    Model(commands::model::Args),
    /// Write one self-contained HTML page of plots from bench results and run records.
    Report(commands::report::Args),
    /// Fault-injection pause points for tests and demos.
    #[command(subcommand)]
    #[cfg(feature = "fault-injection")]
    Debug(commands::debug::Debug),
    /// Show the settings a command runs with and where each came from: a flag, an
    /// environment variable, a configuration file (eckpt.toml) or the built-in default.
    Config(commands::config::Args),
}

fn main() {
    quiet_on_closed_stdout();
    // `make install` and the wheel have the binary they install write its own man pages and
    // shell completions (`ECKPT_GENERATE_DOCS=DIR eckpt`): see `docs`.
    if let Some(share) = std::env::var_os(docs::VARIABLE) {
        match docs::write(config::with_option(Cli::command()), share.as_ref()) {
            Ok(()) => return,
            Err(e) => fail(&e),
        }
    }
    // Flags > environment > job file > user file > site file > default: see `config`.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let tree = || config::with_option(Cli::command());
    let invocation = config::Invocation::read(&tree(), &argv);
    let config = config::Config::load(&tree(), &invocation)
        .and_then(|config| config.export_job_file().map(|()| config))
        .unwrap_or_else(|e| fail(&e));
    // Built again: clap reads an option's environment variable when the option is built,
    // and `ECKPT_CONFIG` may have just been set.
    let root = tree();
    let parsed = config
        .parse(&root, &invocation.path, &argv)
        .unwrap_or_else(|e| e.exit());
    let cli = Cli::from_arg_matches(&parsed.matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Encode(args) => commands::encode::run(args),
        Command::Decode(args) => commands::decode::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Delta(args) => commands::delta::run_delta(args),
        Command::Patch(args) => commands::delta::run_patch(args),
        Command::Bench(bench) => commands::bench::run(bench),
        Command::Up(args) => commands::cluster::run_up(*args),
        Command::Down(args) => commands::cluster::run_down(args),
        Command::Clean(args) => commands::clean::run(args),
        Command::Status(args) => commands::cluster::run_status(args),
        Command::Logs(args) => commands::logs::run_logs(args),
        Command::Join(args) => commands::cluster::run_join(args),
        Command::Leave(args) => commands::cluster::run_leave(args),
        Command::KillNode(args) => commands::cluster::run_kill(args),
        Command::Checkpoint(args) => commands::ckpt::run_checkpoint(args),
        Command::Recover(args) => commands::ckpt::run_recover(args),
        Command::Restore(args) => commands::ckpt::run_restore(args),
        Command::Flush(args) => commands::ckpt::run_flush(args),
        Command::Run(args) => commands::run::run(*args),
        Command::MpirunAgent(args) => commands::run::run_mpirun_agent(args),
        Command::RunGuard(args) => commands::run::run_guard(args),
        Command::RunRank(args) => commands::run::run_rank(args),
        Command::Agent(args) => commands::daemons::run_agent(args),
        Command::Agents(args) => commands::daemons::run_agents(args),
        Command::Coordinator(args) => commands::daemons::run_coordinator(args),
        Command::Model(args) => commands::model::run(args),
        Command::Report(args) => commands::report::run(args),
        #[cfg(feature = "fault-injection")]
        Command::Debug(debug) => commands::debug::run_debug(debug),
        Command::Config(args) => commands::config::run(args, &root),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => fail(&e),
    }
}

/// Says why in one line and exits with [`exit_status`].
fn fail(e: &anyhow::Error) -> ! {
    eprintln!("eckpt: error: {}", one_line(e));
    std::process::exit(exit_status(e));
}

/// The exit status of a failure, by what a script can do about it: for a cluster failure,
/// its kind's code of sysexits.h ([`exit_code_of`]); 1 for any other.
fn exit_status(e: &anyhow::Error) -> i32 {
    e.chain()
        .find_map(|c| c.downcast_ref::<eckpt_cluster_api::ClusterError>())
        .map_or(1, |cause| exit_code_of(cause.kind()))
}

/// The exit code of each kind of cluster failure (the table in the README).
fn exit_code_of(kind: eckpt_cluster_api::ErrorKind) -> i32 {
    use eckpt_cluster_api::ErrorKind as K;
    match kind {
        // EX_TEMPFAIL: may pass by itself; try again.
        K::Node | K::Link => 75,
        // EX_USAGE: the arguments, or the job's size, must change.
        K::Invalid | K::Mismatch => 64,
        // EX_NOINPUT: what was named does not exist.
        K::NotFound => 66,
        // EX_UNAVAILABLE: the cluster must change first, as the message says.
        K::Refused => 69,
        // EX_NOPERM: not the owner (a superseded run, another job's writer).
        K::Fenced => 77,
        // EX_DATAERR: the data cannot serve; restore from a flush.
        K::Corrupt | K::Unrecoverable => 65,
        // EX_IOERR: a disk is full or unwritable.
        K::Io => 74,
        // EX_SOFTWARE: a bug, or a peer of another version.
        K::Protocol | K::Internal => 70,
    }
}

/// Like every Unix filter, `eckpt status | head -2` ends quietly when the reader goes away
/// (exit 141, as if killed by SIGPIPE) instead of panicking on the write to a closed pipe.
/// SIGPIPE itself stays ignored: a peer socket that closes must be an error the command
/// reports, not a signal that kills an agent in the middle of a decode.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info)
    }));
}

/// The error and its causes on one line; a cause whose text an outer message already
/// quotes (`path: No space left on device` caused by `No space left on device`) is said once.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;
    use eckpt_cluster_api::ClusterError;

    #[test]
    fn a_cluster_failure_exits_with_the_code_of_its_kind_and_any_other_with_1() {
        let unreachable: anyhow::Result<()> = Err(ClusterError::Unreachable(
            "no coordinator at 10.0.0.1:7000".into(),
        ))
        .context("eckpt checkpoint");
        assert_eq!(exit_status(&unreachable.unwrap_err()), 75);
        let cases = [
            (ClusterError::Mismatch("the job has 3 ranks".into()), 64),
            (ClusterError::NotFound("rank 9 never checkpointed".into()), 66),
            (
                ClusterError::Refused("node n1 is down: run `eckpt recover`".into()),
                69,
            ),
            (ClusterError::Fenced("superseded by generation 4".into()), 77),
            (ClusterError::Unrecoverable("group 0 lost 3 of 4".into()), 65),
            (ClusterError::Internal("a worker thread panicked".into()), 70),
        ];
        for (e, code) in cases {
            let remote = ClusterError::from_coordinator(eckpt_cluster_api::WireError::from(&e));
            assert_eq!(exit_status(&anyhow::Error::from(e)), code);
            assert_eq!(
                exit_status(&anyhow::Error::from(remote)),
                code,
                "the same across the wire"
            );
        }
        assert_eq!(exit_status(&anyhow::anyhow!("--nodes must be at least 2")), 1);
    }
}
