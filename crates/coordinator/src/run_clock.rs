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
    /// Every stall so far, added up.
    stalled: Duration,
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
}

impl Notes {
    /// Notes the time, counting a gap since the last note beyond [`STALL`] as a stall (less
    /// the tick the ticker would have waited anyway).
    fn note(&mut self) -> Instant {
        let now = Instant::now();
        let gap = now.duration_since(self.last);
        if gap > STALL {
            self.stalled += gap - TICK;
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
