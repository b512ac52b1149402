//! When `snapshot()` checkpoints. A rank calls it every step; it checkpoints when the
//! interval has elapsed — fixed (`30s`) or Young/Daly's `sqrt(2·C·MTBF)` from the measured
//! checkpoint cost `C` — and **every rank decides the same at the same call**, so no rank
//! waits for an epoch the others skip.
//!
//! How the ranks agree without talking at every step: decisions are taken at call numbers,
//! not at instants. Each decision point fixes the next one as `call + n`, where `n` comes
//! from the *job's* pace (the slowest rank's seconds per call, the longest checkpoint) as
//! the coordinator aggregated it from every rank's report — identical figures for all ranks,
//! so identical `n`. A checkpoint's `OpenEpoch` hands out the figures every rank reported
//! with the previous epoch (it waits for that epoch's decision anyway); when none are known
//! (a fresh launch, or the previous epoch aborted before every rank was in), the next call
//! is a pace point instead: a barrier at which the ranks report and receive the figures.
//! A launch starts with one at its second call, which measures exactly one step.

use std::time::{Duration, Instant};

use eckpt_cluster_api::msg::{PaceReport, PaceStats};

use crate::Error;

/// What Young/Daly assumes a checkpoint costs before the first one is measured.
const FIRST_COST_GUESS: Duration = Duration::from_secs(1);

/// Calls between checkpoints are capped so that a step measured as ~0 s does not push the
/// next checkpoint out of reach.
const MAX_CALLS: u64 = 1 << 40;

/// How often `snapshot()` checkpoints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Interval {
    /// Every this long.
    Every(Duration),
    /// Young/Daly's optimum `sqrt(2·C·MTBF)`, re-evaluated as the checkpoint cost `C`
    /// changes; needs the job's MTBF ([`crate::Config::mtbf`]).
    Auto,
}

impl Default for Interval {
    fn default() -> Self {
        Interval::Every(Duration::from_secs(30))
    }
}

impl Interval {
    /// Parses `30s`, `5m`, `1h 30m`, a number of seconds (a fixed interval) or `auto`.
    pub fn parse(text: &str) -> Result<Interval, Error> {
        match text.trim() {
            "auto" => Ok(Interval::Auto),
            text => Ok(Interval::Every(parse_duration("interval", text)?)),
        }
    }
}

/// An interval with what it needs to be computed: the schedule's rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Policy {
    /// Every this long.
    Every(Duration),
    /// Young/Daly with this MTBF.
    Auto {
        /// Mean time between failures of the job.
        mtbf: Duration,
    },
}

impl Policy {
    /// The rule for `interval`; `auto` needs `mtbf`.
    pub(crate) fn new(interval: Interval, mtbf: Option<Duration>) -> Result<Policy, Error> {
        match interval {
            Interval::Every(d) => Ok(Policy::Every(d)),
            Interval::Auto => mtbf.map(|mtbf| Policy::Auto { mtbf }).ok_or_else(|| {
                Error::Invalid("interval auto needs the MTBF: mtbf=… or ECKPT_MTBF (e.g. 24h)".into())
            }),
        }
    }

    /// Says the rule in the words every rank must match (`30s`, `auto/mtbf=86400s`).
    pub(crate) fn describe(&self) -> String {
        match self {
            Policy::Every(d) => format!("{}s", d.as_secs_f64()),
            Policy::Auto { mtbf } => format!("auto/mtbf={}s", mtbf.as_secs_f64()),
        }
    }

    /// Seconds between checkpoints at the job's pace.
    pub(crate) fn seconds(&self, pace: &PaceStats) -> f64 {
        match self {
            Policy::Every(d) => d.as_secs_f64(),
            Policy::Auto { mtbf } => {
                let cost = pace.checkpoint_seconds.unwrap_or(FIRST_COST_GUESS.as_secs_f64());
                (2.0 * cost * mtbf.as_secs_f64()).sqrt()
            }
        }
    }

    /// Why the interval at the job's pace is what it is (`auto` only): the Young/Daly
    /// formula with its figures.
    pub(crate) fn explain(&self, pace: &PaceStats) -> Option<String> {
        let Policy::Auto { mtbf } = self else {
            return None;
        };
        let cost = match pace.checkpoint_seconds {
            Some(measured) => format!("checkpoint cost {measured:.3} s, measured"),
            None => format!(
                "checkpoint cost {:.0} s, assumed until one is measured",
                FIRST_COST_GUESS.as_secs_f64()
            ),
        };
        Some(format!(
            "interval auto: a checkpoint every {:.1} s ({} calls of {:.3} s) = sqrt(2 × {cost} × MTBF {} s), Young/Daly",
            self.seconds(pace),
            self.calls(pace),
            pace.step_seconds,
            mtbf.as_secs_f64()
        ))
    }

    /// Calls between two checkpoints at the job's pace: at least one.
    pub(crate) fn calls(&self, pace: &PaceStats) -> u64 {
        let calls = self.seconds(pace) / pace.step_seconds.max(1e-9);
        if calls.is_finite() {
            (calls.round() as u64).clamp(1, MAX_CALLS)
        } else {
            MAX_CALLS
        }
    }
}

/// A duration such as `30s`, `250ms`, `1h 30m`, or a plain number of seconds.
pub fn parse_duration(what: &str, text: &str) -> Result<Duration, Error> {
    let d = match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs),
        Ok(_) => return Err(Error::Invalid(format!("{what} {text:?} must be a duration ≥ 0"))),
        Err(_) => humantime::parse_duration(text.trim())
            .map_err(|e| Error::Invalid(format!("{what} {text:?}: {e} (e.g. 30s, 5m, 2h)")))?,
    };
    if d.is_zero() {
        return Err(Error::Invalid(format!("{what} {text:?} must be longer than 0")));
    }
    Ok(d)
}

/// The next decision point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// A pace point at this call.
    Pace(u64),
    /// A checkpoint at this call.
    Checkpoint(u64),
}

/// What a `snapshot()` call must do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Nothing: keep computing.
    Skip,
    /// Meet the other ranks at a pace point with this report.
    Pace(PaceReport),
    /// Checkpoint, reporting this.
    Checkpoint(PaceReport),
}

/// One rank's schedule of `snapshot()` decisions.
#[derive(Debug)]
pub(crate) struct Pacer {
    policy: Policy,
    /// `snapshot()` calls so far in this launch.
    calls: u64,
    next: Next,
    /// Since the last decision point (or the first call): compute time and calls.
    window_start: Instant,
    window_calls: u64,
    /// How long the last checkpoint blocked the rank.
    last_checkpoint: Option<f64>,
    /// Pace points met so far (names the next one).
    rounds: u64,
    /// The `auto` interval last explained (seconds), to say it again only when it moved.
    explained: Option<f64>,
}

/// How far (a fraction) the `auto` interval moves before it is explained again.
const EXPLAIN_AGAIN: f64 = 0.2;

impl Pacer {
    /// A fresh launch: the first call starts the clock, the second is a pace point.
    pub(crate) fn new(policy: Policy) -> Pacer {
        Pacer {
            policy,
            calls: 0,
            next: Next::Pace(2),
            window_start: Instant::now(),
            window_calls: 0,
            last_checkpoint: None,
            rounds: 0,
            explained: None,
        }
    }

    /// Counts a call and says what it must do.
    pub(crate) fn tick(&mut self) -> Decision {
        self.calls += 1;
        if self.calls == 1 {
            self.start_window();
            return Decision::Skip;
        }
        self.window_calls += 1;
        match self.next {
            Next::Pace(at) if at == self.calls => Decision::Pace(self.report()),
            Next::Checkpoint(at) if at == self.calls => Decision::Checkpoint(self.report()),
            _ => Decision::Skip,
        }
    }

    /// The count of the pace point being met now (1 for the launch's first).
    pub(crate) fn round(&self) -> u64 {
        self.rounds + 1
    }

    /// A pace point answered with the job's pace: the next checkpoint is fixed. Returns
    /// why the interval is what it is, when that is news (see [`Pacer::news`]).
    pub(crate) fn paced(&mut self, pace: &PaceStats) -> Option<String> {
        self.rounds += 1;
        self.next = Next::Checkpoint(self.calls + self.policy.calls(pace));
        self.start_window();
        self.news(pace)
    }

    /// A checkpoint that blocked the rank for `blocked`, with the job's pace as of the
    /// previous epoch if known: the next checkpoint is fixed, or a pace point comes first.
    /// Returns why the interval is what it is, when that is news.
    pub(crate) fn checkpointed(&mut self, blocked: Duration, pace: Option<&PaceStats>) -> Option<String> {
        self.last_checkpoint = Some(blocked.as_secs_f64());
        self.next = match pace {
            Some(p) => Next::Checkpoint(self.calls + self.policy.calls(p)),
            None => Next::Pace(self.calls + 1),
        };
        self.start_window();
        self.news(pace?)
    }

    /// The `auto` interval's explanation the first time, and again when the interval
    /// moved by more than [`EXPLAIN_AGAIN`] since (the measured cost changed).
    fn news(&mut self, pace: &PaceStats) -> Option<String> {
        let seconds = self.policy.seconds(pace);
        if let Some(said) = self.explained {
            if (seconds - said).abs() <= EXPLAIN_AGAIN * said {
                return None;
            }
        }
        let line = self.policy.explain(pace)?;
        self.explained = Some(seconds);
        Some(line)
    }

    /// A decision point that failed: meet the other ranks again at the next call.
    pub(crate) fn failed(&mut self) {
        self.next = Next::Pace(self.calls + 1);
        self.start_window();
    }

    /// The job's pace as this rank alone sees it (a standalone rank is the whole job).
    pub(crate) fn alone(report: &PaceReport) -> PaceStats {
        PaceStats {
            step_seconds: report.seconds / report.calls.max(1) as f64,
            checkpoint_seconds: report.checkpoint_seconds,
        }
    }

    fn report(&self) -> PaceReport {
        PaceReport {
            calls: self.window_calls.max(1),
            seconds: self.window_start.elapsed().as_secs_f64(),
            checkpoint_seconds: self.last_checkpoint,
            policy: self.policy.describe(),
        }
    }

    fn start_window(&mut self) {
        self.window_start = Instant::now();
        self.window_calls = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(step: f64, checkpoint: Option<f64>) -> PaceStats {
        PaceStats {
            step_seconds: step,
            checkpoint_seconds: checkpoint,
        }
    }

    #[test]
    fn the_auto_interval_is_explained_when_it_is_news() {
        let mut every = Pacer::new(Policy::Every(Duration::from_secs(30)));
        assert_eq!(
            every.paced(&pace(0.5, Some(1.0))),
            None,
            "a fixed interval needs no reason"
        );
        let mut auto = Pacer::new(Policy::Auto {
            mtbf: Duration::from_secs(3600),
        });
        let first = auto.paced(&pace(1.0, None)).expect("the first interval is said");
        assert!(first.contains("every 84.9 s (85 calls of 1.000 s)"), "{first}");
        assert!(
            first.contains("checkpoint cost 1 s, assumed") && first.contains("MTBF 3600 s"),
            "{first}"
        );
        // 2 s measured: sqrt(2·2·3600) = 120 s, moved by more than a fifth.
        let measured = auto.checkpointed(Duration::from_secs(2), Some(&pace(1.0, Some(2.0))));
        assert!(measured
            .unwrap()
            .contains("every 120.0 s (120 calls of 1.000 s) = sqrt(2 × checkpoint cost 2.000 s, measured"));
        // 2.2 s: 125.9 s, within a fifth of what was said.
        assert_eq!(
            auto.checkpointed(Duration::from_secs(2), Some(&pace(1.0, Some(2.2)))),
            None
        );
        assert_eq!(
            auto.checkpointed(Duration::from_secs(2), None),
            None,
            "no pace: nothing to say"
        );
    }

    #[test]
    fn intervals_parse_and_say_their_policy() {
        let every = |t| Policy::new(Interval::parse(t).unwrap(), None).unwrap();
        assert_eq!(every("30s"), Policy::Every(Duration::from_secs(30)));
        assert_eq!(every("1h 30m"), Policy::Every(Duration::from_secs(5400)));
        assert_eq!(every("2.5").describe(), "2.5s");
        let auto = Policy::new(Interval::parse("auto").unwrap(), Some(Duration::from_secs(3600)));
        assert_eq!(auto.unwrap().describe(), "auto/mtbf=3600s");
        let e = Policy::new(Interval::Auto, None).unwrap_err().to_string();
        assert!(e.contains("MTBF"), "{e}");
        assert!(Interval::parse("soon").is_err());
        assert!(Interval::parse("0s").is_err());
        assert!(Interval::parse("-3").is_err());
    }

    #[test]
    fn calls_follow_the_interval_and_young_daly() {
        let every = Policy::Every(Duration::from_secs(30));
        assert_eq!(every.calls(&pace(0.5, None)), 60);
        assert_eq!(every.calls(&pace(100.0, None)), 1, "at least one call");
        assert_eq!(every.calls(&pace(0.0, None)), 30_000_000_000, "a step of ~0 s");
        // sqrt(2 · 2 s · 3600 s) = 120 s: 120 calls of 1 s.
        let auto = Policy::Auto {
            mtbf: Duration::from_secs(3600),
        };
        assert_eq!(auto.calls(&pace(1.0, Some(2.0))), 120);
        // A costlier checkpoint stretches the interval (by the square root).
        assert_eq!(auto.calls(&pace(1.0, Some(8.0))), 240);
        // Before the first checkpoint is measured: 1 s assumed.
        assert_eq!(auto.calls(&pace(1.0, None)), 85);
    }

    /// Two ranks of different speeds given the same figures take the same decision at every
    /// call, whatever their clocks say.
    #[test]
    fn ranks_given_the_same_figures_decide_alike() {
        let policy = Policy::Every(Duration::from_millis(50));
        let mut fast = Pacer::new(policy);
        let mut slow = Pacer::new(policy);
        let figures = [Some(pace(0.01, Some(0.002))), None, Some(pace(0.02, Some(0.004)))];
        let mut checkpoints = 0;
        for call in 1..=200u64 {
            let (a, b) = (fast.tick(), slow.tick());
            if call % 7 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            match (&a, &b) {
                (Decision::Skip, Decision::Skip) => {}
                (Decision::Pace(_), Decision::Pace(_)) => {
                    let p = pace(0.01, None);
                    fast.paced(&p);
                    slow.paced(&p);
                }
                (Decision::Checkpoint(_), Decision::Checkpoint(_)) => {
                    let p = figures[checkpoints % figures.len()];
                    checkpoints += 1;
                    fast.checkpointed(Duration::from_millis(1), p.as_ref());
                    slow.checkpointed(Duration::from_millis(9), p.as_ref());
                }
                _ => panic!("call {call}: the ranks decided differently: {a:?} vs {b:?}"),
            }
        }
        assert!(
            checkpoints >= 20,
            "{checkpoints} checkpoints in 200 calls of 10-20 ms at 50 ms"
        );
    }

    #[test]
    fn a_launch_meets_at_its_second_call_and_a_checkpoint_without_figures_at_the_next() {
        let mut p = Pacer::new(Policy::Every(Duration::from_secs(1)));
        assert_eq!(p.tick(), Decision::Skip);
        let Decision::Pace(report) = p.tick() else {
            panic!("the second call is a pace point")
        };
        assert_eq!(report.calls, 1, "exactly one step measured");
        assert_eq!(p.round(), 1);
        p.paced(&pace(0.25, None));
        assert_eq!(p.round(), 2);
        for _ in 0..3 {
            assert_eq!(p.tick(), Decision::Skip);
        }
        assert!(matches!(p.tick(), Decision::Checkpoint(r) if r.calls == 4));
        p.checkpointed(Duration::from_millis(3), None);
        assert!(matches!(p.tick(), Decision::Pace(r) if r.checkpoint_seconds == Some(0.003)));
    }
}
