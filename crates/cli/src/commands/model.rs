//! `eckpt model`: predicted checkpoint, encode, update and recovery times, storage overhead
//! and checkpoint interval for a configuration — of a running cluster (`--dir`), or of one
//! this machine cannot run (`--nodes 4096 --link-rate 100gbit`) — and, with `--recommend`,
//! the configuration to run. `--calibrate` measures a running cluster's costs first.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use eckpt_cluster::netns::parse_rate;
use eckpt_cluster_api::dirs::{ClusterDir, ClusterFile};
use eckpt_coding::{CodingConfig, Layout, Mode, Topology};
use eckpt_model::interval::{interval, Interval};
use eckpt_model::machine::{Hosts, Machine};
use eckpt_model::predict::ControlPart;
use eckpt_model::recommend::{recommend_with_progress, Choice, Constraints};
use eckpt_model::risk::{loss_risk, LossRisk, DAY_S};
use eckpt_model::time::Estimate;
use eckpt_model::{predict, Prediction, Scenario};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::calibrate::{self, Calibration};
use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// A cluster directory: nodes, coding and link rate come from it, and the costs its
    /// last `--calibrate` measured (`model.json` there).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Measure the running cluster in --dir first (links between its agents, the costs of
    /// their code on this host) and save the result as its model.json.
    #[arg(long, requires = "dir")]
    calibrate: bool,
    /// Costs from this calibration file (a model.json) instead.
    #[arg(long)]
    machine: Option<PathBuf>,
    /// Nodes holding ranks and parity.
    #[arg(long)]
    nodes: Option<usize>,
    /// Data shards per group.
    #[arg(long)]
    k: Option<usize>,
    /// Parity shards per group.
    #[arg(long)]
    m: Option<usize>,
    /// Incremental mode: full, stripe or update.
    #[arg(long)]
    mode: Option<Mode>,
    /// Parity layout: dedicated or rotated.
    #[arg(long)]
    layout: Option<Layout>,
    /// Encode topology: pipeline, fanin, broadcast or ring.
    #[arg(long)]
    topology: Option<Topology>,
    /// Transfer unit (chunk) of the coding pipeline.
    #[arg(long, value_parser = parse_size)]
    block_size: Option<u64>,
    /// Rank image bytes per data-holding node.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    size_per_node: u64,
    /// Fraction of pages a rank changes between checkpoints (0.001: MAT-like, 0.6: LU-like).
    #[arg(long, default_value_t = 0.001)]
    dirty_fraction: f64,
    /// Link rate of every node (e.g. 100mbit, 1gbit, 100gbit).
    #[arg(long)]
    link_rate: Option<String>,
    /// All nodes share one host with this many cores (an emulated cluster; its agents get
    /// the reference share of them).
    #[arg(long, conflicts_with = "own_hosts")]
    host_cores: Option<f64>,
    /// Every node on a host of its own with real links (no shaper's burst), whatever the
    /// calibrated cluster was: to predict a real cluster from costs measured on an emulated one.
    #[arg(long)]
    own_hosts: bool,
    /// Cores of each node that its ranks keep busy and its agent shares: the agent's CPU
    /// seconds per epoch, over these cores, count as the job's checkpoint cost (0: the
    /// agents run on cores set aside, `eckpt up --agent-cpus`). Default: for the running
    /// cluster of --dir (its own node count), the cores its nodes registered with (the
    /// fewest); for a modelled machine (no --dir, or --nodes other than its count) 32, a
    /// common node of two 16-core sockets — never this host's cores; give the real count.
    #[arg(long)]
    rank_cores: Option<f64>,
    /// Mean time between failures of one node (e.g. 5y, 30d, 12h, 600s).
    #[arg(long, default_value = "5y", value_parser = parse_duration)]
    mtbf: f64,
    /// How long the job runs (e.g. 1d, 30d): the period the risk of losing a checkpoint
    /// (more than m nodes of a group lost before redundancy is restored) is stated and
    /// bounded over.
    #[arg(long, default_value = "1d", value_parser = parse_duration)]
    job_length: f64,
    /// Recommend a configuration: every group size, mode, layout, topology and transfer
    /// unit meeting --m, --max-overhead and --max-loss-risk, best first.
    #[arg(long)]
    recommend: bool,
    /// With --recommend: the most parity bytes per byte of data.
    #[arg(long, default_value_t = 0.5)]
    max_overhead: f64,
    /// With --recommend: the highest acceptable probability, over --job-length, that some
    /// group loses more than m nodes while exposed after a loss (from the loss until the
    /// model's predicted recovery has restored redundancy), nodes failing independently at
    /// --mtbf; the job then restarts from the flush level. Default 1e-6, per job-day at
    /// --job-length's default: once in about 2,700 years of running, far below a job's
    /// other risks, so it costs no
    /// efficiency — it rules out groups too large, recoveries too slow or nodes too
    /// unreliable (k=254 m=2 on 4,096 nodes of 16 GiB failing once a year). Correlated
    /// failures (a rack) are not in it: form groups across failure domains (`up --domain`).
    #[arg(long, default_value_t = eckpt_model::risk::DEFAULT_MAX_LOSS_RISK)]
    max_loss_risk: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// A duration: a number with an optional unit (s, m, h, d, y; seconds without one).
pub fn parse_duration(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 600s, 12h, 30d, 5y)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "y" => 365.25 * 86_400.0,
        _ => return Err(format!("unknown unit in {text:?} (use s, m, h, d or y)")),
    };
    if value <= 0.0 {
        return Err(format!("{text:?}: a duration must be positive"));
    }
    Ok(value * scale)
}

/// Where the machine's costs came from.
#[derive(Serialize)]
struct Source {
    /// `calibration` (a model.json) or `reference` (costs measured on the development
    /// machine, with the given link rate).
    kind: &'static str,
    /// The calibration file, if any.
    file: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    scenario: Scenario,
    machine: Machine,
    source: Source,
    /// A later epoch's encode seconds (comparable to `eckpt bench cluster`'s).
    encode_seconds: f64,
    /// The first (full) epoch's encode seconds (`bench cluster`'s `full_encode_seconds`).
    full_encode_seconds: f64,
    /// A later epoch from the ranks' checkpoint calls to its commit: its encode plus the
    /// control plane's part (`prediction.next.commit`).
    epoch_seconds: f64,
    prediction: Prediction,
    /// Cores the ranks keep busy beside each agent (`--rank-cores`).
    rank_cores: f64,
    /// Where `rank_cores` came from: `option` (--rank-cores), `cluster` (the cores the
    /// nodes of --dir registered with), `host` (this host's, for a cluster whose nodes
    /// did not say) or `default` (a modelled machine: 32).
    rank_cores_from: &'static str,
    /// What a later epoch costs the job: the local checkpoint plus the agent's CPU taken
    /// from the ranks (the interval's checkpoint cost).
    job_checkpoint_seconds: f64,
    /// Interval advice for a node MTBF of `--mtbf`.
    interval: Interval,
    /// The risk, over `--job-length`, that some group loses more than m nodes within the
    /// predicted recovery after a loss.
    loss_risk: LossRisk,
    /// With --recommend: the best configurations, best first.
    #[serde(skip_serializing_if = "Option::is_none")]
    recommendations: Option<Vec<Choice>>,
}

pub fn run(args: Args) -> Result<i32> {
    let cluster = args.dir.as_ref().map(ClusterDir::new).transpose()?;
    let file = match &cluster {
        Some(dir) => Some(read_cluster(dir)?),
        None => None,
    };
    let calibration = match (&cluster, &args.machine) {
        (_, Some(path)) => Some((calibrate::load(path)?, path.clone())),
        (Some(dir), None) if args.calibrate => {
            let c = calibrate::calibrate(dir)?;
            let path = calibrate::path_in(dir.root());
            std::fs::write(&path, serde_json::to_vec_pretty(&c)?)
                .with_context(|| format!("writing {}", path.display()))?;
            Some((c, path))
        }
        (Some(dir), None) => {
            let path = calibrate::path_in(dir.root());
            match path.exists() {
                true => Some((calibrate::load(&path)?, path)),
                false => None,
            }
        }
        (None, None) => None,
    };
    let scenario = scenario(&args, file.as_ref().map(|c| (&c.file, c.nodes)))?;
    let (machine, source) = machine(&args, file.as_ref().map(|c| &c.file), calibration.as_ref())?;
    let prediction = predict(&scenario, &machine)?;
    let job_mtbf = args.mtbf / scenario.nodes as f64;
    let (rank_cores, rank_cores_from) = match (args.rank_cores, &file) {
        (Some(cores), _) if cores >= 0.0 && cores.is_finite() => (cores, "option"),
        (Some(cores), _) => bail!("--rank-cores {cores}: a number of cores (0 or more)"),
        // The running cluster itself: its nodes' cores.
        (None, Some(c)) if c.nodes == scenario.nodes => match c.cores {
            Some(cores) => (f64::from(cores), "cluster"),
            None => (crate::output::default_threads() as f64, "host"),
        },
        // Another machine than this host's cluster: not this host's cores.
        (None, _) => (DEFAULT_RANK_CORES, "default"),
    };
    if !(args.max_loss_risk > 0.0 && args.max_loss_risk.is_finite()) {
        bail!(
            "--max-loss-risk {}: a probability above 0 (e.g. 1e-6)",
            args.max_loss_risk
        );
    }
    let job_checkpoint_seconds = prediction.job_checkpoint_seconds(rank_cores);
    let advice = interval(
        job_checkpoint_seconds,
        prediction.next.seconds,
        prediction.recovery.seconds,
        job_mtbf,
    );
    let risk = loss_risk(
        &prediction.groups,
        args.mtbf,
        prediction.recovery.seconds,
        args.job_length,
    );
    let recommendations = if args.recommend {
        let constraints = Constraints {
            m: scenario.coding.m,
            max_overhead: args.max_overhead,
            node_mtbf_s: args.mtbf,
            rank_cores,
            max_loss_risk: args.max_loss_risk,
            period_s: args.job_length,
        };
        let bar = search_progress(args.json);
        let found = recommend_with_progress(&scenario, &machine, &constraints, |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        });
        bar.finish_and_clear();
        let mut all = found?;
        all.truncate(5);
        Some(all)
    } else {
        None
    };
    let report = Report {
        encode_seconds: prediction.next.encode_seconds,
        full_encode_seconds: prediction.first.encode_seconds,
        epoch_seconds: prediction.next.seconds,
        scenario,
        machine,
        source,
        prediction,
        rank_cores,
        rank_cores_from,
        job_checkpoint_seconds,
        interval: advice,
        loss_risk: risk,
        recommendations,
    };
    let max_loss_risk = args.max_loss_risk;
    if args.json {
        print_json(&report);
    } else {
        print_text(&report, max_loss_risk);
    }
    Ok(0)
}

/// `--rank-cores` of a modelled machine (not this host's cluster): a common HPC node of two
/// 16-core sockets, the same wherever the model runs.
const DEFAULT_RANK_CORES: f64 = 32.0;

/// A bar over the configurations `--recommend` predicts, on a terminal and without --json
/// (as `encode` and `recover` show theirs): thousands of nodes in groups of up to 256
/// take a while.
fn search_progress(json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("recommend [{bar:30}] {pos}/{len} configurations, eta {eta}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar
}

/// What `--dir` says of a cluster.
struct ClusterInfo {
    /// Its `cluster.json`.
    file: ClusterFile,
    /// Its nodes (spares excluded).
    nodes: usize,
    /// The fewest cores any of its group members registered with, if any did.
    cores: Option<u32>,
}

/// `cluster.json` of a cluster, how many nodes it has and their cores.
fn read_cluster(dir: &ClusterDir) -> Result<ClusterInfo> {
    let path = dir.cluster_file();
    let text = std::fs::read(&path).with_context(|| format!("{} is not a cluster", dir.root().display()))?;
    let file: ClusterFile =
        serde_json::from_slice(&text).with_context(|| format!("reading {}", path.display()))?;
    let journal =
        std::fs::read(dir.journal()).with_context(|| format!("reading {}", dir.journal().display()))?;
    let journal: eckpt_coordinator::Journal =
        serde_json::from_slice(&journal).with_context(|| format!("reading {}", dir.journal().display()))?;
    let members: Vec<&String> = journal.groups.iter().flat_map(|g| &g.group.members).collect();
    let cores = members
        .iter()
        .filter_map(|n| journal.nodes.get(*n)?.info.as_ref().map(|i| i.cores))
        .filter(|&c| c > 0)
        .min();
    Ok(ClusterInfo {
        file,
        nodes: members.len(),
        cores,
    })
}

/// The scenario: the cluster's configuration if given, the arguments over it.
fn scenario(args: &Args, cluster: Option<(&ClusterFile, usize)>) -> Result<Scenario> {
    let base = cluster.map(|(f, _)| f.coding).unwrap_or_default();
    let coding = CodingConfig {
        k: args.k.unwrap_or(base.k),
        m: args.m.unwrap_or(base.m),
        mode: args.mode.unwrap_or(base.mode),
        layout: args.layout.unwrap_or(base.layout),
        topology: args.topology.unwrap_or(base.topology),
        chunk: match args.block_size {
            Some(b) => u32::try_from(b).context("block size too large")?,
            None => base.chunk,
        },
        ..base
    };
    let nodes = args
        .nodes
        .or(cluster.map(|(_, n)| n))
        .unwrap_or(coding.k + coding.m);
    let scenario = Scenario {
        nodes,
        coding,
        size_per_node: args.size_per_node,
        dirty_fraction: args.dirty_fraction,
    };
    scenario.validate()?;
    Ok(scenario)
}

/// The machine: a calibration if there is one, else the reference costs at the given (or
/// the cluster's, or 1 Gbit/s) link rate; `--link-rate` and `--host-cores` override.
fn machine(
    args: &Args,
    cluster: Option<&ClusterFile>,
    calibration: Option<&(Calibration, PathBuf)>,
) -> Result<(Machine, Source)> {
    let cluster_rate = cluster
        .and_then(|f| f.netns.as_ref())
        .and_then(|n| n.rate.clone());
    let rate = |r: &str| -> Result<f64> { Ok(parse_rate(r)? as f64) };
    let (mut machine, source) = match calibration {
        Some((c, path)) => (
            c.machine,
            Source {
                kind: "calibration",
                file: Some(path.clone()),
            },
        ),
        None => {
            let bits = match args.link_rate.as_deref().or(cluster_rate.as_deref()) {
                Some(r) => rate(r)?,
                None => 1e9,
            };
            let mut m = Machine::reference(bits);
            if cluster.is_some_and(|f| f.netns.is_some()) {
                m = m.emulated(bits, crate::output::default_threads() as f64);
            }
            (
                m,
                Source {
                    kind: "reference",
                    file: None,
                },
            )
        }
    };
    if let (Some(r), Some(_)) = (&args.link_rate, calibration) {
        machine = machine.with_link_rate(rate(r)?);
    }
    if args.own_hosts {
        machine.hosts = Hosts::PerNode;
        machine.burst_bytes = 0.0;
    }
    if let Some(cores) = args.host_cores {
        machine.hosts = Hosts::Shared {
            cores: cores * eckpt_model::machine::SHARED_HOST_SHARE,
        };
    }
    machine.validate()?;
    Ok((machine, source))
}

fn seconds(s: f64) -> String {
    match s {
        s if s >= 365.25 * 86_400.0 => format!("{:.1} y", s / (365.25 * 86_400.0)),
        s if s >= 86_400.0 => format!("{:.1} d", s / 86_400.0),
        s if s >= 3600.0 => format!("{:.1} h", s / 3600.0),
        s if s >= 1.0 => format!("{s:.2} s"),
        s if s >= 1e-3 || s == 0.0 => format!("{:.1} ms", s * 1e3),
        s => format!("{:.0} µs", s * 1e6),
    }
}

/// `n thing` or `n things`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How an encode's seconds are made, so that the terms add up to the total:
/// `encode T (B-bound) = overlapped link and CPU + pipeline fill (hops × per hop) + work
/// before and after the transfers + the task's fixed cost`, the terms that are zero left
/// out. The link and the CPU overlap, so together they take between the larger and their
/// sum (`(link³ + CPU³)^⅓`): both are shown beside the term they make.
fn encode_terms(e: &Estimate) -> String {
    let mut terms = Vec::new();
    match (e.network_s > 0.0, e.cpu_s > 0.0) {
        (true, true) => terms.push(format!(
            "{} link and CPU overlapped (link {}, CPU {})",
            seconds(e.overlap_s),
            seconds(e.network_s),
            seconds(e.cpu_s)
        )),
        (true, false) => terms.push(format!("{} link", seconds(e.network_s))),
        (false, true) => terms.push(format!("{} CPU", seconds(e.cpu_s))),
        (false, false) => {}
    }
    if e.fill_s > 0.0 {
        terms.push(format!(
            "{} pipeline fill ({} × {})",
            seconds(e.fill_s),
            count(e.hops, "hop", "hops"),
            seconds(e.hop_s)
        ));
    }
    if e.serial_s > 0.0 {
        terms.push(format!("{} before and after the transfers", seconds(e.serial_s)));
    }
    if e.fixed_s > 0.0 {
        terms.push(format!("{} task", seconds(e.fixed_s)));
    }
    format!(
        "encode {} ({}-bound) = {}",
        seconds(e.seconds),
        e.bound(),
        terms.join(" + ")
    )
}

/// The control plane's part of an epoch or a recovery: `1.76 s (1.9 ms + 4096 nodes × 430 µs)`,
/// so that what grows with the cluster shows.
fn control_terms(c: &ControlPart) -> String {
    format!(
        "{} ({} + {} × {})",
        seconds(c.seconds),
        seconds(c.fixed_s),
        count(c.nodes, "node", "nodes"),
        seconds(c.per_node_s)
    )
}

/// A probability over a period: `3.1e-6 per 1.0 d`.
fn risk_text(r: &LossRisk) -> String {
    let period = if (r.period_s - DAY_S).abs() < 1e-9 {
        "day".to_string()
    } else {
        seconds(r.period_s)
    };
    format!("{:.1e} per {period}", r.probability)
}

fn bytes(b: f64) -> String {
    match b {
        b if b >= 1e9 => format!("{:.2} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.1} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.1} kB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

fn print_text(r: &Report, max_loss_risk: f64) {
    let (s, p, c) = (&r.scenario, &r.prediction, &r.scenario.coding);
    let shapes: Vec<String> = p.groups.iter().map(|g| format!("{}+{}", g.k, g.m)).collect();
    println!(
        "{} in {} ({}), {} {} {}, {} transfer unit, {} per node, {:.2} % of pages dirty",
        count(s.nodes, "node", "nodes"),
        count(p.groups.len(), "group", "groups"),
        summarize(&shapes),
        c.mode,
        c.layout,
        c.topology,
        bytes(f64::from(c.chunk)),
        bytes(s.size_per_node as f64),
        s.dirty_fraction * 100.0
    );
    let hosts = match r.machine.hosts {
        Hosts::PerNode => "a host per node".to_string(),
        Hosts::Shared { cores } => format!("one host, {cores:.2} cores' worth for the agents"),
    };
    println!(
        "machine: link {}/s per node, {hosts}; costs: {}{}",
        bytes(r.machine.link_bps),
        r.source.kind,
        r.source
            .file
            .as_ref()
            .map(|f| format!(" ({})", f.display()))
            .unwrap_or_default()
    );
    for (label, e) in [("first epoch", &p.first), ("later epochs", &p.next)] {
        println!(
            "{label} ({}): {}; control plane's commit {}: {} from checkpoint to commit; {} on the \
             busiest link",
            e.kind,
            encode_terms(&e.estimate),
            control_terms(&e.commit),
            seconds(e.seconds),
            bytes(e.busiest_link_bytes)
        );
    }
    let cores_from = match r.rank_cores_from {
        "option" => "",
        "cluster" => ", as the cluster's nodes registered",
        "host" => ", this host's",
        _ => ", a modelled machine's default --rank-cores",
    };
    println!(
        "local checkpoint (ranks stopped): first {}, later {}; the agent's CPU per later epoch {} \
         ({} of the ranks' time on {} cores{cores_from}): {} per checkpoint for the job",
        seconds(p.first_checkpoint_seconds),
        seconds(p.checkpoint_seconds),
        seconds(p.next.agent_cpu_seconds),
        seconds(r.job_checkpoint_seconds - p.checkpoint_seconds),
        r.rank_cores,
        seconds(r.job_checkpoint_seconds)
    );
    let rec = &p.recovery;
    println!(
        "recovery of {}: {} (detect {} = liveness {} + control plane's delay {}, plan {}, scrub {}, \
         decode {}, install {}, re-encode {})",
        count(rec.lost, "lost data member", "lost data members"),
        seconds(rec.seconds),
        seconds(rec.detect_s),
        seconds(r.machine.detect_s),
        control_terms(&rec.detect_delay),
        control_terms(&rec.plan),
        seconds(rec.scrub_s),
        seconds(rec.decode_s),
        seconds(rec.install_s),
        seconds(rec.reencode_s)
    );
    println!(
        "storage: parity {:.3} × data ({:.3} with a full stripe chain)",
        p.storage.parity_per_data, p.storage.parity_per_data_chain
    );
    let i = &r.interval;
    println!(
        "interval: job MTBF {}, Young {}, advised {} → {:.2} % useful work",
        seconds(i.job_mtbf_s),
        seconds(i.young_s),
        seconds(i.interval_s),
        i.efficiency * 100.0
    );
    let above = if r.loss_risk.probability > max_loss_risk {
        format!(", above the {max_loss_risk:e} of --max-loss-risk")
    } else {
        String::new()
    };
    println!(
        "risk of a group losing more than m={} nodes within the {} its recovery takes after a \
         loss: {} (node MTBF {}{above})",
        c.m,
        seconds(r.loss_risk.window_s),
        risk_text(&r.loss_risk),
        seconds(r.interval.job_mtbf_s * s.nodes as f64),
    );
    if let Some(choices) = &r.recommendations {
        println!("recommended (best first):");
        for ch in choices {
            let c = &ch.coding;
            println!(
                "  k={} m={} {} {} {} {}: {} epochs of {} ({} to commit), recovery {}, overhead {:.2}, loss risk {}, \
                 every {} → {:.2} %",
                c.k,
                c.m,
                c.mode,
                c.layout,
                c.topology,
                bytes(f64::from(c.chunk)),
                ch.epoch_kind,
                seconds(ch.encode_seconds),
                seconds(ch.epoch_seconds),
                seconds(ch.recovery_seconds),
                ch.overhead,
                risk_text(&ch.loss_risk),
                seconds(ch.interval.interval_s),
                ch.interval.efficiency * 100.0
            );
        }
    }
}

/// `["4+2", "4+2", "5+2"]` as `2 × 4+2, 5+2`.
fn summarize(shapes: &[String]) -> String {
    let mut out: Vec<(usize, &String)> = Vec::new();
    for s in shapes {
        match out.last_mut() {
            Some((n, last)) if *last == s => *n += 1,
            _ => out.push((1, s)),
        }
    }
    out.iter()
        .map(|(n, s)| {
            if *n > 1 {
                format!("{n} × {s}")
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("600"), Ok(600.0));
        assert_eq!(parse_duration("12h"), Ok(43_200.0));
        assert_eq!(parse_duration("1.5d"), Ok(129_600.0));
        assert!(parse_duration("5 years").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("h").is_err());
    }

    #[test]
    fn group_shapes_are_summarized() {
        let s: Vec<String> = ["4+2", "4+2", "5+2"].iter().map(|s| s.to_string()).collect();
        assert_eq!(summarize(&s), "2 × 4+2, 5+2");
    }
}
