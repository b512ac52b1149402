//! `eckpt-sim`: seeded runs of the real coordinator and agents in the deterministic
//! simulator, with a summary of what they did and which failed (`scripts/sim-soak.sh`).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Parser;
use eckpt_sim::run::{run, Plan};
use serde::Serialize;

/// Runs seeds of the simulation: a cluster of simulated hosts running the real daemons,
/// faults drawn from each seed, invariants checked after every step.
#[derive(Parser)]
#[command(name = "eckpt-sim", version)]
struct Args {
    /// Seeds to run, `FROM..TO` (TO excluded).
    #[arg(long, value_name = "FROM..TO", conflicts_with = "hours")]
    seeds: Option<String>,
    /// Run seeds from `--from` on until this many hours (real time) have passed.
    #[arg(long)]
    hours: Option<f64>,
    /// The first seed of `--hours`.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Print one seed's trace as it runs (to replay a failure).
    #[arg(long, value_name = "SEED", conflicts_with_all = ["seeds", "hours"])]
    replay: Option<u64>,
    /// Each seed in a storm: 40 to 200 short faults (restarts, cuts, stalls, freezes of
    /// up to half a second) besides its others. A stormy seed replays with `--storm` too.
    #[arg(long)]
    storm: bool,
    /// Draw no isolation of the coordinator (one seed in four draws one): a seed named
    /// before isolations were drawn replays the run it was found in with this.
    #[arg(long)]
    no_isolation: bool,
    /// Draw no stops of hosts (SIGSTOP; one seed in four draws them): a seed named before
    /// stops were drawn replays the run it was found in with this.
    #[arg(long)]
    no_stops: bool,
    /// Disks answer at once (one seed in four draws disks that take up to 1 to 20 ms): a
    /// seed named before disk latency was drawn replays the run it was found in with this.
    #[arg(long)]
    no_disk_latency: bool,
    /// The summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// What the seeds came to.
#[derive(Serialize, Default)]
struct Summary {
    seeds: u64,
    simulated_hours: f64,
    real_seconds: f64,
    faults: BTreeMap<&'static str, u64>,
    invariant_checks: u64,
    /// Seeds whose final loss ran (`status` said the cluster was healthy at the end, and m
    /// members of each group were lost) and every rank read back after it.
    final_losses_survived: u64,
    /// Flushed epochs whose every rank read back byte for byte from shared storage.
    flushed_epochs_checked: u64,
    /// Seeds whose job was restarted from its flush after a loss beyond m, every rank read
    /// back byte for byte.
    restarts_from_flush: u64,
    failed_seeds: Vec<u64>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let plan = |seed| {
        let mut plan = match args.storm {
            true => Plan::stormy(seed),
            false => Plan::drawn(seed),
        };
        if args.no_isolation {
            plan.faults.isolations = 0;
        }
        if args.no_stops {
            plan.faults.stops = 0;
        }
        if args.no_disk_latency {
            plan.disk_latency = None;
        }
        plan
    };
    if let Some(seed) = args.replay {
        let outcome = run(&plan(seed), true);
        if let Some(why) = outcome.failure {
            bail!("seed {seed} failed: {why}");
        }
        return Ok(());
    }
    let (first, end, until) = match (&args.seeds, args.hours) {
        (Some(range), _) => {
            let (a, b) = range
                .split_once("..")
                .ok_or_else(|| anyhow::anyhow!("--seeds {range}: expected FROM..TO"))?;
            (a.parse()?, b.parse()?, None)
        }
        (None, Some(hours)) if hours > 0.0 => (
            args.from,
            u64::MAX,
            Some(Instant::now() + Duration::from_secs_f64(hours * 3600.0)),
        ),
        _ => bail!("say which seeds: --seeds FROM..TO, --hours H or --replay SEED"),
    };
    let started = Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = match until {
            Some(_) => indicatif::ProgressBar::new_spinner(),
            None => indicatif::ProgressBar::new(end.saturating_sub(first)),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {pos} seeds {msg}")
                .expect("a valid template"),
        );
        bar
    });
    let mut summary = Summary::default();
    let mut seed = first;
    while seed < end && until.is_none_or(|t| Instant::now() < t) {
        let outcome = run(&plan(seed), false);
        summary.seeds += 1;
        summary.simulated_hours += outcome.simulated.as_secs_f64() / 3600.0;
        summary.invariant_checks += outcome.checks;
        summary.final_losses_survived += u64::from(outcome.final_loss_survived);
        summary.flushed_epochs_checked += outcome.flushes_checked;
        summary.restarts_from_flush += u64::from(outcome.restarted_from_flush);
        for (kind, n) in &outcome.faults {
            *summary.faults.entry(kind).or_default() += n;
        }
        if let Some(why) = &outcome.failure {
            summary.failed_seeds.push(seed);
            eprintln!("seed {seed} FAILED: {why}\n{}\n", outcome.trace.join("\n"));
        }
        if let Some(bar) = &bar {
            bar.inc(1);
            bar.set_message(format!("{} failed", summary.failed_seeds.len()));
        }
        seed += 1;
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    summary.real_seconds = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_table(&summary);
    }
    if !summary.failed_seeds.is_empty() {
        bail!("{} of {} seeds failed", summary.failed_seeds.len(), summary.seeds);
    }
    Ok(())
}

fn print_table(s: &Summary) {
    let faults: u64 = s.faults.values().sum();
    println!("seeds              {}", s.seeds);
    println!("simulated hours    {:.2}", s.simulated_hours);
    println!("real seconds       {:.0}", s.real_seconds);
    println!("faults             {faults}");
    for (kind, n) in &s.faults {
        println!("  {kind:<16} {n}");
    }
    println!("invariant checks   {}", s.invariant_checks);
    println!("final losses       {}", s.final_losses_survived);
    println!("flushed epochs     {}", s.flushed_epochs_checked);
    println!("flush restarts     {}", s.restarts_from_flush);
    println!("failed seeds       {:?}", s.failed_seeds);
}
