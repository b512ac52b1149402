//! The time the coordinator itself ran. A lease is a promise about time the coordinator
//! judges; when the coordinator does not run — its process stopped (SIGSTOP, a debugger), its
//! host suspended or starved — the monotonic clock goes on, and on waking every lease would
//! look expired although no supervisor had a chance to renew it: a coordinator stalled for
//! 30 s would stop a live job. So leases are judged on this clock, which leaves out every
//! gap in the coordinator's own running, the way it suspects itself, not every node, when
//! it hears nobody (`sessions.rs`).
//!
//! A ticker notes the time every [`TICK`]; a gap between two notes longer than [`STALL`] is
//! time the coordinator did not run. Every reading notes the time too, so a request handled
//! first thing after a stall — before the ticker runs again — already sees the stall left
//! out.
//!
//! Time the coordinator heard from no agent at all is left out too
//! ([`RunClock::leave_out_silence`]): that silence is its own link's, and the holder's
//! renewals were as cut off as the agents' heartbeats. Without it, a partition of the
//! coordinator longer than a lease and shorter than the partition grace — which the ranks
//! outlive — took the job from its live supervisor (found by the simulator).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

/// How often the ticker notes the time.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// A gap between two notes longer than this is a stall: far beyond a loaded scheduler's
/// delays of a 100 ms timer, far below any lease.
pub(super) const STALL: Duration = Duration::from_secs(1);

/// A moment on the coordinator's running clock: the time it ran since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct RunTime(Duration);

/// The coordinator's running clock; clones share it.
#[derive(Debug, Clone)]
pub(super) struct RunClock {
    inner: Arc<Mutex<Notes>>,
}

#[derive(Debug)]
struct Notes {
    started: Instant,
    /// The last time noted.
    last: Instant,
    /// Every stall and silence left out so far, added up.
    stalled: Duration,
    /// The end of the last time left out: none of it is left out twice.
    covered_until: Instant,
}

impl RunClock {
    /// A clock starting now, with its ticker running on the current runtime for as long as
    /// a clone of the clock exists.
    pub(super) fn start() -> RunClock {
        let clock = RunClock::unticked();
        tokio::spawn(tick(Arc::downgrade(&clock.inner)));
        clock
    }

    /// A clock nobody ticks: every gap between two readings beyond [`STALL`] counts as a
    /// stall (the tests' way of stalling it without stopping a process).
    fn unticked() -> RunClock {
        let now = Instant::now();
        RunClock {
            inner: Arc::new(Mutex::new(Notes {
                started: now,
                last: now,
                stalled: Duration::ZERO,
                covered_until: now,
            })),
        }
    }

    /// Now, on the running clock.
    pub(super) fn now(&self) -> RunTime {
        let mut notes = eckpt_daemon::crash_only::lock(&self.inner);
        let now = notes.note();
        RunTime(now.duration_since(notes.started).saturating_sub(notes.stalled))
    }

    /// The running time since `then`.
    pub(super) fn since(&self, then: RunTime) -> Duration {
        self.now().0.saturating_sub(then.0)
    }

    /// Leaves out the coordinator's silence — no agent heard — from `since` until now, at
    /// most `longest` of it (the partition grace: past it, the silence is the cluster's
    /// and no longer the coordinator's own), and none of what was left out already.
    pub(super) fn leave_out_silence(&self, since: Instant, longest: Duration) {
        let mut notes = eckpt_daemon::crash_only::lock(&self.inner);
        let now = notes.note();
        let from = since.max(notes.covered_until);
        let until = now.min(since + longest);
        if until > from {
            notes.stalled += until - from;
            notes.covered_until = until;
        }
    }
}

impl Notes {
    /// Notes the time, counting a gap since the last note beyond [`STALL`] as a stall (less
    /// the tick the ticker would have waited anyway).
    fn note(&mut self) -> Instant {
        let now = Instant::now();
        let gap = now.duration_since(self.last);
        if gap > STALL {
            self.stalled += gap - TICK;
            self.covered_until = now;
            tracing::warn!(
                seconds = gap.as_secs_f64(),
                "the coordinator did not run for {:.1} s (stopped or starved): leases are judged on the time it ran",
                gap.as_secs_f64()
            );
        }
        self.last = now;
        now
    }
}

/// Notes the time every [`TICK`] until the clock is dropped.
async fn tick(clock: Weak<Mutex<Notes>>) {
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(clock) = clock.upgrade() else {
            return;
        };
        eckpt_daemon::crash_only::lock(&clock).note();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gap in the coordinator's running is left out of the time it judges leases on; the
    /// time it ran is not.
    #[test]
    fn a_stall_is_left_out_and_running_time_is_not() {
        let clock = RunClock::unticked();
        let start = clock.now();
        std::thread::sleep(Duration::from_millis(300));
        let ran = clock.since(start);
        assert!(ran >= Duration::from_millis(300), "{ran:?}");
        std::thread::sleep(STALL + Duration::from_millis(500));
        let after_stall = clock.since(start);
        assert!(
            after_stall < ran + TICK + Duration::from_millis(200),
            "a stall of {:?} counted: {after_stall:?} after {ran:?}",
            STALL + Duration::from_millis(500)
        );
    }

    /// The coordinator's silence is left out once, however often it is reported while it
    /// goes on, and at most `longest` of it; the time before and after it counts.
    #[test]
    fn a_silence_is_left_out_once_and_at_most_its_longest() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let secs = Duration::from_secs;
        runtime.block_on(async {
            let clock = RunClock::start();
            let start = clock.now();
            tokio::time::sleep(secs(2)).await;
            let silent_from = Instant::now();
            tokio::time::sleep(secs(5)).await;
            clock.leave_out_silence(silent_from, secs(60));
            tokio::time::sleep(secs(1)).await;
            clock.leave_out_silence(silent_from, secs(60));
            let ran = clock.since(start);
            assert!(ran >= secs(2) && ran < secs(2) + TICK, "{ran:?}");
            tokio::time::sleep(secs(1)).await;
            let second = Instant::now();
            tokio::time::sleep(secs(3)).await;
            clock.leave_out_silence(second, secs(1));
            let ran = clock.since(start);
            assert!(ran >= secs(5) && ran < secs(5) + TICK, "{ran:?}");
        });
    }

    /// A ticking clock is not stalled by a quiet coordinator: time without requests is
    /// time it ran.
    #[test]
    fn a_ticking_clock_counts_quiet_time() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let clock = RunClock::start();
            let start = clock.now();
            tokio::time::sleep(STALL * 2).await;
            let ran = clock.since(start);
            assert!(ran >= STALL * 2, "quiet time was left out: {ran:?}");
        });
    }
}
