//! The worker threads of the codec's threaded calls, started once per process.
//!
//! A threaded encode of a 1 MiB stripe is a few hundred microseconds of work: starting a
//! thread per part cost as much as the part itself, so that two threads ran slower than one
//! and sixteen at a third of one's speed. The pool's threads wait between calls; a call wakes
//! as many as it may use beside the calling thread, and returns once every part is done.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// Runs `work(0)`, …, `work(parts - 1)` on up to `threads` threads — the calling thread and
/// workers of the process's pool (one per further core) — each taking the next part until
/// none is left, and returns when all are done. A part that panics makes this call panic
/// once all parts have ended. When another call holds the pool, the calling thread runs
/// every part itself.
pub(crate) fn run_parts(parts: usize, threads: usize, work: &(dyn Fn(usize) + Sync)) {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    let pool =
        POOL.get_or_init(|| Pool::start(std::thread::available_parallelism().map_or(1, |n| n.get()) - 1));
    pool.run(parts, threads, work);
}

struct Pool {
    /// Worker threads (the calling thread is one more).
    workers: usize,
    /// Held by the call using the workers.
    turn: Mutex<()>,
    posted: Mutex<Posted>,
    /// `posted.generation`, for lingering workers to watch without the lock.
    generation: AtomicU64,
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
    /// Workers that may still join (the call's threads beside the calling one): a worker
    /// woken by chance, or back from an earlier job, finds none left and stays out.
    seats: AtomicUsize,
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
    /// A pool of `workers` threads, for the life of the process.
    fn start(workers: usize) -> &'static Pool {
        let pool = Pool::leaked(workers);
        let started = (0..workers).all(|i| {
            std::thread::Builder::new()
                .name(format!("eckpt-codec-{i}"))
                .spawn(move || pool.serve())
                .is_ok()
        });
        // A pool that cannot start its threads runs calls on the caller alone (the workers
        // that did start wait for jobs that never come).
        if started {
            pool
        } else {
            Pool::leaked(0)
        }
    }

    /// A pool with no job posted yet, never freed (its workers hold it).
    fn leaked(workers: usize) -> &'static Pool {
        Box::leak(Box::new(Pool {
            workers,
            turn: Mutex::new(()),
            posted: Mutex::new(Posted::default()),
            generation: AtomicU64::new(0),
            wake: Condvar::new(),
        }))
    }

    /// [`run_parts`] on this pool.
    fn run(&self, parts: usize, threads: usize, work: &(dyn Fn(usize) + Sync)) {
        let turn = match self.turn.try_lock() {
            Ok(turn) => Some(turn),
            // The lock guards no data: a call that panicked while holding it left nothing
            // behind.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if turn.is_none() || parts <= 1 || threads <= 1 || self.workers == 0 {
            (0..parts).for_each(work);
            return;
        }
        // SAFETY: the reference is used by the workers only while a part remains unclaimed,
        // and this function returns only after every claimed part has finished (`wait_all`
        // below); a worker that looks at the job later finds no part to claim and never calls
        // `work`.
        let work: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(work) };
        let helpers = (parts.min(threads) - 1).min(self.workers);
        let job = Arc::new(Job {
            work,
            parts,
            seats: AtomicUsize::new(helpers),
            next: AtomicUsize::new(0),
            finished: Mutex::new(Finished::default()),
            all_finished: Condvar::new(),
        });
        {
            let mut posted = lock(&self.posted);
            posted.generation += 1;
            posted.job = Some(Arc::clone(&job));
            self.generation.store(posted.generation, Ordering::Release);
        }
        for _ in 0..helpers {
            self.wake.notify_one();
        }
        job.work_through();
        let panicked = job.wait_all();
        lock(&self.posted).job = None;
        drop(turn);
        if panicked {
            panic!("a codec worker panicked");
        }
    }

    /// A worker's life: wait for a job it has not seen, work through it, again.
    fn serve(&self) {
        let mut seen = 0;
        loop {
            self.linger(seen);
            let job = {
                let mut posted = lock(&self.posted);
                while posted.generation == seen {
                    posted = self.wake.wait(posted).unwrap_or_else(PoisonError::into_inner);
                }
                seen = posted.generation;
                posted.job.clone()
            };
            if let Some(job) = job.filter(|job| job.take_seat()) {
                job.work_through();
            }
        }
    }
}

impl Pool {
    /// Spins for [`LINGER`] while no job after generation `seen` is posted. Calls come back
    /// to back (a stripe after a stripe); a worker gone to sleep is woken some tens of
    /// microseconds late, a tenth of a 1 MiB stripe's time on four threads.
    fn linger(&self, seen: u64) {
        let start = Instant::now();
        while self.generation.load(Ordering::Acquire) == seen && start.elapsed() < LINGER {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
    }
}

/// How long a worker that finished its part keeps looking for the next job before it
/// sleeps.
const LINGER: Duration = Duration::from_micros(50);

impl Job {
    /// Whether a worker may join: takes one of the seats left.
    fn take_seat(&self) -> bool {
        self.seats
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_sub(1))
            .is_ok()
    }

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

    #[test]
    fn every_part_runs_exactly_once_from_many_callers_at_once() {
        std::thread::scope(|scope| {
            for caller in 0..4u64 {
                scope.spawn(move || {
                    for round in 0..200u64 {
                        let parts = 1 + ((caller + round) % 17) as usize;
                        let hits: Vec<AtomicU64> = (0..parts).map(|_| AtomicU64::new(0)).collect();
                        run_parts(parts, 1 + (round % 5) as usize, &|i| {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        });
                        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                    }
                });
            }
        });
    }

    #[test]
    fn no_more_threads_than_asked_run_parts_at_once() {
        // More workers than asked, whatever this machine's cores.
        let pool = Pool::start(4);
        for threads in [1, 2, 3] {
            let (running, most) = (AtomicU64::new(0), AtomicU64::new(0));
            pool.run(60, threads, &|_| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(2));
                running.fetch_sub(1, Ordering::SeqCst);
            });
            let most = most.load(Ordering::SeqCst);
            assert!(
                most <= threads as u64,
                "{most} threads ran parts, {threads} asked"
            );
            // The sleeping parts leave a helper time to join.
            assert!(
                threads == 1 || most >= 2,
                "{threads} threads asked, only the caller ran"
            );
        }
    }

    #[test]
    fn a_panicking_part_panics_the_call_after_the_others_finish() {
        let done = AtomicU64::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            run_parts(8, 8, &|i| {
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
        run_parts(5, 3, &|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 5);
    }
}
