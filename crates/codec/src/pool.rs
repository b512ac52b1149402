//! The worker threads of the codec's threaded calls, started once per process.
//!
//! A threaded encode of a 1 MiB stripe is a few hundred microseconds of work: starting a
//! thread per part cost as much as the part itself, so that two threads ran slower than one
//! and sixteen at a third of one's speed. The pool's threads wait between calls; a call wakes
//! as many as it may use beside the calling thread, and returns once every part is done.
//!
//! Its byte-range forms ([`map_ranges`], [`map_parts_mut`]) serve work beside the codec's own calls — the
//! reads, checksums and writes of a coding task's chunks — so that an agent's threads share
//! one pool.

use std::ops::Range;
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
    // One thread asked for: the pool is not even started (a process that never shares work
    // has no idle workers).
    if parts <= 1 || threads <= 1 {
        (0..parts).for_each(work);
        return;
    }
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    let pool =
        POOL.get_or_init(|| Pool::start(std::thread::available_parallelism().map_or(1, |n| n.get()) - 1));
    pool.run(parts, threads, work);
}

/// Smallest byte range worth a part of its own (a thread's turn on the pool).
const MIN_BYTES_PER_PART: usize = 64 * 1024;

/// Parts per thread of a call, at most: a thread woken late (the calling thread starts at
/// once, a worker some microseconds later) then takes fewer of them, where with one range
/// each the call waited for the latest thread's whole share.
const PARTS_PER_THREAD: usize = 4;

/// `[0, len)` cut into consecutive, non-empty, 64-byte-aligned ranges for `threads` threads:
/// one range when one thread is asked for or `len` is too short to share (an empty `len`
/// gives one empty range), else up to [`PARTS_PER_THREAD`] per thread and no more than
/// `len` holds [`MIN_BYTES_PER_PART`]s (so each is over half of it).
pub(crate) fn ranges(len: usize, threads: usize) -> Vec<Range<usize>> {
    let most = len.div_ceil(MIN_BYTES_PER_PART).max(1);
    let threads = threads.max(1).min(most);
    if threads == 1 {
        return std::iter::once(0..len).collect();
    }
    let count = (threads * PARTS_PER_THREAD).min(most);
    let per = len.div_ceil(count).div_ceil(64) * 64;
    (0..len.div_ceil(per))
        .map(|i| i * per..((i + 1) * per).min(len))
        .collect()
}

/// `work(range)` for every range [`ranges`] cuts `[0, len)` into, run on up to `threads`
/// threads of the pool; the results in the ranges' order. A range that panics makes this
/// call panic once all have ended.
pub fn map_ranges<R: Send>(len: usize, threads: usize, work: &(dyn Fn(Range<usize>) -> R + Sync)) -> Vec<R> {
    let ranges = ranges(len, threads);
    map_indexed(ranges.len(), threads, &|i| work(ranges[i].clone()))
}

/// `work(offset, part)` for every part of `buf` cut as [`map_ranges`] cuts its length
/// (`offset`: where the part starts in `buf`), each part written by one thread only; the
/// results in order.
pub fn map_parts_mut<R: Send>(
    buf: &mut [u8],
    threads: usize,
    work: &(dyn Fn(usize, &mut [u8]) -> R + Sync),
) -> Vec<R> {
    let ranges = ranges(buf.len(), threads);
    let mut parts = Vec::with_capacity(ranges.len());
    let mut rest = buf;
    for range in &ranges {
        let (head, tail) = rest.split_at_mut(range.len());
        parts.push(head);
        rest = tail;
    }
    map_owned(parts, threads, &|i, part| work(ranges[i].start, part))
}

/// `work(i, parts[i])` for every part, each part moved to the one thread that runs it, on
/// up to `threads` threads; the results in order. For parts that are disjoint mutable
/// pieces of one buffer (or of several).
pub(crate) fn map_owned<P: Send, R: Send>(
    parts: Vec<P>,
    threads: usize,
    work: &(dyn Fn(usize, P) -> R + Sync),
) -> Vec<R> {
    let count = parts.len();
    let parts: Vec<Mutex<Option<P>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    map_indexed(count, threads, &|i| {
        let part = lock(&parts[i]).take().expect("each part is taken once");
        work(i, part)
    })
}

/// `work(i)` for `i` in `0..parts`, on up to `threads` threads; the results in order.
fn map_indexed<R: Send>(parts: usize, threads: usize, work: &(dyn Fn(usize) -> R + Sync)) -> Vec<R> {
    let results: Vec<Mutex<Option<R>>> = (0..parts).map(|_| Mutex::new(None)).collect();
    run_parts(parts, threads, &|i| {
        let result = work(i);
        *lock(&results[i]) = Some(result);
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .expect("every part ran")
        })
        .collect()
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
    fn ranges_cover_the_length_in_order_aligned_and_within_the_bounds() {
        for len in [
            0,
            1,
            63,
            64 * 1024,
            64 * 1024 + 1,
            1 << 20,
            (1 << 20) + 17,
            3 << 22,
        ] {
            for threads in [0, 1, 2, 3, 4, 16] {
                let got = ranges(len, threads);
                assert_eq!(got.first().map(|r| r.start), Some(0), "{len} {threads}");
                assert_eq!(got.last().map(|r| r.end), Some(len), "{len} {threads}");
                assert!(got.windows(2).all(|w| w[0].end == w[1].start));
                assert!(got.iter().all(|r| r.start % 64 == 0));
                assert!(got.len() == 1 || got.iter().all(|r| !r.is_empty()));
                assert!(got.len() <= threads.max(1) * PARTS_PER_THREAD);
                // Every range but the last is a full share, at least half the minimum.
                let shares = &got[..got.len() - 1];
                assert!(shares.iter().all(|r| r.len() > MIN_BYTES_PER_PART / 2));
                if threads <= 1 {
                    assert!(got.len() == 1 && got[0] == (0..len));
                }
            }
        }
        assert_eq!(ranges(1 << 20, 4).len(), 16);
    }

    #[test]
    fn parts_are_handed_out_once_each_and_results_come_back_in_order() {
        for threads in [1, 2, 5] {
            let mut buf = vec![0u8; (1 << 20) + 100];
            let offsets = map_parts_mut(&mut buf, threads, &|offset, part| {
                for (i, b) in part.iter_mut().enumerate() {
                    *b = b.wrapping_add((offset + i) as u8 ^ 0x5A);
                }
                offset
            });
            assert!(buf.iter().enumerate().all(|(i, &b)| b == (i as u8 ^ 0x5A)));
            let starts: Vec<usize> = ranges(buf.len(), threads).iter().map(|r| r.start).collect();
            assert_eq!(offsets, starts);
            let lens = map_ranges(buf.len(), threads, &|r| r.len());
            assert_eq!(lens.iter().sum::<usize>(), buf.len());
        }
    }

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
