//! The worker threads of the codec's threaded calls, started once per process.
//!
//! A threaded encode of a 1 MiB stripe is a few hundred microseconds of work: starting a
//! thread per part cost as much as the part itself, so that two threads ran slower than one
//! and sixteen at a third of one's speed. The pool's threads wait between calls; a call wakes
//! as many as it has parts beyond the one the calling thread runs itself, and returns once
//! every part is done.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};

/// Runs `work(0)`, …, `work(parts - 1)`, in parallel on the calling thread and the pool's
/// workers (one per further core), and returns when all are done. A part that panics makes
/// this call panic once all parts have ended. When another call holds the pool, the calling
/// thread runs every part itself.
pub(crate) fn run_parts(parts: usize, work: &(dyn Fn(usize) + Sync)) {
    let pool = Pool::global();
    let turn = match pool.turn.try_lock() {
        Ok(turn) => Some(turn),
        // The lock guards no data: a call that panicked while holding it left nothing behind.
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    if turn.is_none() || parts <= 1 || pool.workers == 0 {
        (0..parts).for_each(work);
        return;
    }
    // SAFETY: the reference is used by the workers only while a part remains unclaimed, and
    // this function returns only after every claimed part has finished (`wait_all` below); a
    // worker that looks at the job later finds no part to claim and never calls `work`.
    let work: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(work) };
    let job = Arc::new(Job {
        work,
        parts,
        next: AtomicUsize::new(0),
        finished: Mutex::new(Finished::default()),
        all_finished: Condvar::new(),
    });
    {
        let mut posted = lock(&pool.posted);
        posted.generation += 1;
        posted.job = Some(Arc::clone(&job));
    }
    for _ in 0..(parts - 1).min(pool.workers) {
        pool.wake.notify_one();
    }
    job.work_through();
    let panicked = job.wait_all();
    lock(&pool.posted).job = None;
    drop(turn);
    if panicked {
        panic!("a codec worker panicked");
    }
}

struct Pool {
    /// Worker threads (the calling thread is one more).
    workers: usize,
    /// Held by the call using the workers.
    turn: Mutex<()>,
    posted: Mutex<Posted>,
    wake: Condvar,
}

/// The job on offer, and a count that tells a worker whether it has seen it.
#[derive(Default)]
struct Posted {
    generation: u64,
    job: Option<Arc<Job>>,
}

struct Job {
    work: &'static (dyn Fn(usize) + Sync),
    parts: usize,
    /// The next part to claim.
    next: AtomicUsize,
    finished: Mutex<Finished>,
    all_finished: Condvar,
}

#[derive(Default)]
struct Finished {
    parts: usize,
    panicked: bool,
}

impl Pool {
    fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let workers = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
            let pool = Pool {
                workers,
                turn: Mutex::new(()),
                posted: Mutex::new(Posted::default()),
                wake: Condvar::new(),
            };
            for i in 0..workers {
                // A pool that cannot start its threads runs calls on the caller alone.
                let started = std::thread::Builder::new()
                    .name(format!("eckpt-codec-{i}"))
                    .spawn(|| Pool::global().serve());
                if started.is_err() {
                    return Pool { workers: 0, ..pool };
                }
            }
            pool
        })
    }

    /// A worker's life: wait for a job it has not seen, work through it, again.
    fn serve(&self) {
        let mut seen = 0;
        loop {
            let job = {
                let mut posted = lock(&self.posted);
                while posted.generation == seen {
                    posted = self.wake.wait(posted).unwrap_or_else(PoisonError::into_inner);
                }
                seen = posted.generation;
                posted.job.clone()
            };
            if let Some(job) = job {
                job.work_through();
            }
        }
    }
}

impl Job {
    /// Claims and runs parts until none is left.
    fn work_through(&self) {
        loop {
            let part = self.next.fetch_add(1, Ordering::Relaxed);
            if part >= self.parts {
                return;
            }
            let ok = catch_unwind(AssertUnwindSafe(|| (self.work)(part))).is_ok();
            let mut finished = lock(&self.finished);
            finished.parts += 1;
            finished.panicked |= !ok;
            if finished.parts == self.parts {
                self.all_finished.notify_all();
            }
        }
    }

    /// Waits until every part has finished; whether one panicked.
    fn wait_all(&self) -> bool {
        let mut finished = lock(&self.finished);
        while finished.parts < self.parts {
            finished = self
                .all_finished
                .wait(finished)
                .unwrap_or_else(PoisonError::into_inner);
        }
        finished.panicked
    }
}

/// The pool's locks guard plain counters that stay consistent whoever panicked.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_part_runs_exactly_once_from_many_callers_at_once() {
        std::thread::scope(|scope| {
            for caller in 0..4u64 {
                scope.spawn(move || {
                    for round in 0..200u64 {
                        let parts = 1 + ((caller + round) % 17) as usize;
                        let hits: Vec<AtomicU64> = (0..parts).map(|_| AtomicU64::new(0)).collect();
                        run_parts(parts, &|i| {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        });
                        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_part_panics_the_call_after_the_others_finish() {
        let done = AtomicU64::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            run_parts(8, &|i| {
                if i == 3 {
                    panic!("part 3 fails");
                }
                done.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(result.is_err());
        assert_eq!(done.load(Ordering::Relaxed), 7);
        // The pool still serves calls.
        let hits = AtomicU64::new(0);
        run_parts(5, &|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 5);
    }
}
