//! Seeded runs of the real coordinator and agents under faults: every invariant holds, and
//! a seed replays its run line for line.

use std::io::Write;

use eckpt_sim::run::{run, Plan};

fn plan(seed: u64) -> Plan {
    Plan::drawn(seed)
}

/// Fails the test with `why`, written straight to the process's stderr first: the daemons'
/// crash-only panic hook aborts the process on this panic too, and the test harness's
/// captured output would go with it.
fn fail(why: String) -> ! {
    let _ = writeln!(std::io::stderr(), "{why}");
    panic!("{why}");
}

#[test]
fn a_seed_replays_its_run_line_for_line() {
    for seed in [3, 5] {
        let first = run(&plan(seed), false);
        let again = run(&plan(seed), false);
        if let Some(why) = &first.failure {
            fail(format!("seed {seed}: {why}\n{}", first.trace.join("\n")));
        }
        if first.trace.len() < 100 {
            fail(format!("seed {seed}: only {} lines", first.trace.len()));
        }
        if let Some(at) =
            (0..first.trace.len().max(again.trace.len())).find(|&i| first.trace.get(i) != again.trace.get(i))
        {
            fail(format!(
                "seed {seed}: the runs part at line {at}:\n{:?}\n{:?}",
                first.trace.get(at),
                again.trace.get(at)
            ));
        }
    }
}

#[test]
fn seeded_runs_hold_every_invariant() {
    let mut failed = Vec::new();
    for seed in 0..50 {
        let outcome = run(&plan(seed), false);
        eprintln!(
            "seed {seed}: {:?} simulated, {} checks, faults {:?}{}",
            outcome.simulated,
            outcome.checks,
            outcome.faults,
            outcome
                .failure
                .as_deref()
                .map(|f| format!(", FAILED: {f}"))
                .unwrap_or_default()
        );
        if outcome.failure.is_some() {
            failed.push((seed, outcome.trace.join("\n")));
        }
    }
    if !failed.is_empty() {
        fail(
            failed
                .iter()
                .map(|(s, t)| format!("seed {s}:\n{t}"))
                .collect::<Vec<_>>()
                .join("\n\n"),
        );
    }
}

/// `SEED=n cargo test -p eckpt-sim --test seeds -- --ignored --nocapture one_seed`: the
/// trace of one run, printed as it goes.
#[test]
#[ignore]
fn one_seed() {
    let seed = std::env::var("SEED").map_or(0, |s| s.parse().unwrap());
    let outcome = run(&plan(seed), true);
    assert!(outcome.failure.is_none(), "{:?}", outcome.failure);
}
