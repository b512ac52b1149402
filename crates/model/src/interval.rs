//! How often to checkpoint: Young's interval `√(2·C·M)` and Daly's higher-order one, and
//! the fraction of the machine's time the job spends on useful work at an interval.
//!
//! `C` is what a checkpoint costs the job: the time its ranks are stopped (eckpt encodes
//! while the job runs on). `M` is the job's mean time between failures: a node's over the
//! number of nodes. `R` is what a failure costs beyond the lost work: recovery, plus the
//! lag of the newest committed epoch behind the newest checkpoint (its encode and commit),
//! since a failure before the commit rolls back to the epoch before. The interval is never
//! shorter than that epoch: a rank that checkpoints again before the previous epoch
//! committed waits.

use serde::{Deserialize, Serialize};

/// The interval advice for a job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The job's mean time between failures (seconds).
    pub job_mtbf_s: f64,
    /// Checkpoint cost `C` (seconds the ranks stop).
    pub checkpoint_s: f64,
    /// Failure cost `R` beyond the lost work (seconds).
    pub restart_s: f64,
    /// Young: `√(2·C·M)`.
    pub young_s: f64,
    /// Daly's higher-order optimum, and never below an epoch's lag (the advised interval).
    pub interval_s: f64,
    /// Expected fraction of time spent on useful work at `interval_s`.
    pub efficiency: f64,
}

/// Expected useful fraction of a job checkpointing every `tau` seconds of work at cost `c`,
/// failing every `m` seconds on average, each failure costing `r` (Daly 2006:
/// `T_wall = M·e^{R/M}·(e^{(τ+C)/M} − 1)·T/τ`).
pub fn efficiency(tau: f64, c: f64, r: f64, m: f64) -> f64 {
    if tau <= 0.0 || m <= 0.0 {
        return 0.0;
    }
    tau / (m * (r / m).exp() * ((tau + c) / m).exp_m1())
}

/// The interval for checkpoint cost `c`, epoch lag `lag`, recovery `recovery` and the
/// job's mean time between failures `m` (all seconds).
pub fn interval(c: f64, lag: f64, recovery: f64, m: f64) -> Interval {
    let young = (2.0 * c * m).sqrt();
    let daly = if c < 2.0 * m {
        let x = c / (2.0 * m);
        young * (1.0 + x.sqrt() / 3.0 + x / 9.0) - c
    } else {
        m
    };
    let interval_s = daly.max(lag).max(f64::MIN_POSITIVE);
    let restart_s = recovery + lag;
    Interval {
        job_mtbf_s: m,
        checkpoint_s: c,
        restart_s,
        young_s: young,
        interval_s,
        efficiency: efficiency(interval_s, c, restart_s, m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn youngs_interval_for_a_textbook_case() {
        // 60 s checkpoints, a failure a day: √(2·60·86400) ≈ 3220 s.
        let i = interval(60.0, 0.0, 0.0, 86_400.0);
        assert!((i.young_s - 3219.9).abs() < 0.1);
        assert!(i.interval_s > i.young_s - 60.0 && i.interval_s < i.young_s);
        assert!(i.efficiency > 0.95 && i.efficiency < 1.0);
    }

    #[test]
    fn daly_optimum_is_a_maximum_of_the_efficiency() {
        for (c, r, m) in [(10.0, 30.0, 3600.0), (1.0, 5.0, 100.0), (120.0, 600.0, 86_400.0)] {
            let i = interval(c, 0.0, r, m);
            let at = |t: f64| efficiency(t, c, i.restart_s, m);
            assert!(at(i.interval_s) >= at(i.interval_s * 0.8), "{c} {m}");
            assert!(at(i.interval_s) >= at(i.interval_s * 1.25), "{c} {m}");
        }
    }

    #[test]
    fn efficiency_falls_as_failures_come_faster_and_checkpoints_cost_more() {
        let e = |c: f64, m: f64| interval(c, 1.0, 10.0, m).efficiency;
        assert!(e(1.0, 1e5) > e(1.0, 1e3));
        assert!(e(1.0, 1e4) > e(10.0, 1e4));
        assert!(e(0.0, 1e4) <= 1.0);
        assert!(
            interval(1.0, 1.0, 10.0, 1e12).efficiency > 0.999,
            "no failures: no loss"
        );
    }

    #[test]
    fn interval_is_never_shorter_than_an_encode() {
        let i = interval(0.001, 5.0, 1.0, 1000.0);
        assert_eq!(i.interval_s, 5.0);
        let frequent = interval(100.0, 0.0, 0.0, 10.0);
        assert_eq!(frequent.interval_s, 10.0, "C ≥ 2M: Daly says checkpoint every M");
    }
}
