//! The job the cluster benchmarks measure: rank threads, each owning page-aligned memory and a
//! `Checkpointer` in cluster mode, checkpointing on command as an application does. The rank
//! library writes each epoch into its node's store itself; the agents only code it — so the
//! agents' CPU measured around an epoch is what protection costs, not an artefact of how the
//! benchmark hands them data.

use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use eckpt::{Checkpointer, Config};

use super::workload::{apply_pattern, workload_image, Pattern};

/// Page-aligned memory, as an application's large arrays are: the rank library tracks it
/// with the kernel's write protection (a `Vec` is hashed instead).
struct PageAligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl PageAligned {
    /// A page-aligned copy of `bytes` (whole pages).
    fn new(bytes: &[u8]) -> PageAligned {
        let layout = std::alloc::Layout::from_size_align(bytes.len().max(1), 4096).expect("a valid layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` holds `layout.size() >= bytes.len()` bytes and does not overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
        PageAligned { ptr, layout }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is an allocation of `layout.size()` initialized bytes, owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for PageAligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// How the ranks' memory changes before each checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct Change {
    pub pattern: Pattern,
    /// Share of the pages changed instead of the pattern's own.
    pub fraction: Option<f64>,
}

/// One checkpoint of every rank.
pub struct Step {
    /// The slowest rank's `checkpoint()` call (seconds): what the application waits for.
    pub checkpoint: f64,
    /// From the first rank's call to the epoch's commit by the cluster (seconds): the
    /// encode across the group, in the background of the application.
    pub commit: f64,
    /// When the first rank called `checkpoint()` and when the last call returned.
    pub began: Instant,
    pub returned: Instant,
    /// The epoch committed.
    pub epoch: u64,
    /// Pages the last rank changed before this checkpoint.
    pub changed_pages: usize,
    /// Each rank's memory as checkpointed (xxh3), by rank: what a restart must restore.
    pub digests: Vec<u64>,
}

/// What a rank thread reports per checkpoint.
struct RankStep {
    began: Instant,
    returned: Instant,
    committed: Instant,
    epoch: u64,
    changed_pages: usize,
    digest: u64,
}

/// One rank: a thread owning its memory and its `Checkpointer`, checkpointing on command.
struct Rank {
    steps: Sender<u64>,
    done: Receiver<Result<RankStep, String>>,
    thread: std::thread::JoinHandle<()>,
}

impl Rank {
    /// Starts rank `rank` of `world` with `size` bytes, launched on `node` when given:
    /// protects them and, told a seed, changes them by `change` and checkpoints.
    fn start(dir: &Path, rank: u32, world: u32, size: usize, node: Option<String>, change: Change) -> Rank {
        let (steps, step_rx) = channel::<u64>();
        let (done_tx, done) = channel();
        let config = Config {
            cluster: Some(dir.to_path_buf()),
            world: Some(world),
            rank,
            node,
            ..Config::default()
        };
        let thread = std::thread::spawn(move || {
            let mut memory = PageAligned::new(&workload_image(size, u64::from(rank) + 1));
            let mut ck = match Checkpointer::new(config) {
                Ok(ck) => ck,
                Err(e) => return drop(done_tx.send(Err(e.to_string()))),
            };
            let region = memory.as_mut();
            // SAFETY: `memory` lives, unmoved, until `ck` is dropped at the end of this thread.
            if let Err(e) = unsafe { ck.protect("mem/0", region.as_mut_ptr(), region.len()) } {
                return drop(done_tx.send(Err(e.to_string())));
            }
            for seed in step_rx {
                let changed_pages = apply_pattern(
                    memory.as_mut(),
                    change.pattern,
                    change.fraction,
                    seed ^ u64::from(rank),
                );
                let began = Instant::now();
                let result = ck.checkpoint().and_then(|epoch| {
                    let returned = Instant::now();
                    // Committed before the next step, so that each step has an epoch of its own.
                    ck.wait().map(|_| RankStep {
                        began,
                        returned,
                        committed: Instant::now(),
                        epoch,
                        changed_pages,
                        digest: xxhash_rust::xxh3::xxh3_64(memory.as_mut()),
                    })
                });
                if done_tx.send(result.map_err(|e| e.to_string())).is_err() {
                    return;
                }
            }
        });
        Rank { steps, done, thread }
    }
}

/// Every rank of a job, as threads of this process.
pub struct RankJob {
    ranks: Vec<Rank>,
}

impl RankJob {
    /// Starts `world` ranks of `size` bytes each on the cluster in `dir`; rank `r` is
    /// launched on `nodes[r]` when `nodes` names them (else the coordinator places it).
    pub fn start(dir: &Path, world: u32, size: usize, nodes: Option<&[String]>, change: Change) -> RankJob {
        Self::start_some(dir, 0..world, world, size, nodes, change)
    }

    /// [`RankJob::start`] of the ranks `ranks` of the job only (`nodes` is still indexed
    /// by rank): the rest run elsewhere.
    pub fn start_some(
        dir: &Path,
        ranks: std::ops::Range<u32>,
        world: u32,
        size: usize,
        nodes: Option<&[String]>,
        change: Change,
    ) -> RankJob {
        let ranks = ranks
            .map(|r| {
                let node = nodes.map(|n| n[r as usize].clone());
                Rank::start(dir, r, world, size, node, change)
            })
            .collect();
        RankJob { ranks }
    }

    /// Every rank changes its memory (from `seed`) and checkpoints once; the epoch commits.
    pub fn checkpoint_all(&self, seed: u64) -> Result<Step> {
        for r in &self.ranks {
            if r.steps.send(seed).is_err() {
                // The thread ended on an error it sent first.
                let why = r
                    .done
                    .recv()
                    .map_or_else(|_| "no reason".into(), |e| e.err().unwrap_or_default());
                bail!("a rank thread ended: {why}");
            }
        }
        let mut steps = Vec::with_capacity(self.ranks.len());
        for r in &self.ranks {
            steps.push(
                r.done
                    .recv()
                    .context("a rank thread ended")?
                    .map_err(anyhow::Error::msg)?,
            );
        }
        let began = steps.iter().map(|s| s.began).min().context("no ranks")?;
        let returned = steps.iter().map(|s| s.returned).max().context("no ranks")?;
        let committed = steps.iter().map(|s| s.committed).max().context("no ranks")?;
        let last = steps.last().context("no ranks")?;
        let digests = steps.iter().map(|s| s.digest).collect();
        let checkpoint = steps
            .iter()
            .map(|s| (s.returned - s.began).as_secs_f64())
            .fold(0.0, f64::max);
        Ok(Step {
            checkpoint,
            commit: (committed - began).as_secs_f64(),
            began,
            returned,
            epoch: last.epoch,
            changed_pages: last.changed_pages,
            digests,
        })
    }

    /// Ends every rank thread (each drops its checkpointer, as a job's ranks do on exit).
    pub fn finish(self) {
        for rank in self.ranks {
            drop(rank.steps);
            let _ = rank.thread.join();
        }
    }
}

/// Restarts every rank of a job of `digests.len()` ranks of `size` bytes on the cluster in
/// `dir`, each into fresh memory, on `threads` threads, and checks each holds what it
/// checkpointed (`digests`, by rank); the seconds until every rank was restored.
pub fn restart_all(dir: &Path, size: usize, digests: &[u64], threads: usize) -> Result<f64> {
    let world = digests.len() as u32;
    let began = Instant::now();
    let next = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let rank = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if rank >= world {
                            return Ok(());
                        }
                        let restored = restart_one(dir, rank, world, size)
                            .with_context(|| format!("restarting rank {rank}"))?;
                        if restored != digests[rank as usize] {
                            bail!("rank {rank} restarted with other bytes than it checkpointed");
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .map_err(|_| anyhow::anyhow!("a restart thread panicked"))?
        })
    })?;
    Ok(began.elapsed().as_secs_f64())
}

/// Restarts rank `rank` as a relaunched rank does (wherever the cluster placed it) into
/// fresh memory; the xxh3 of what it restored.
fn restart_one(dir: &Path, rank: u32, world: u32, size: usize) -> Result<u64> {
    let mut memory = PageAligned::new(&vec![0; size]);
    let mut ck = Checkpointer::new(Config {
        cluster: Some(dir.to_path_buf()),
        world: Some(world),
        rank,
        ..Config::default()
    })?;
    let region = memory.as_mut();
    // SAFETY: `memory` lives, unmoved, until `ck` is dropped below.
    unsafe { ck.protect("mem/0", region.as_mut_ptr(), region.len()) }?;
    ck.restart()?.context("no committed epoch to restart from")?;
    drop(ck);
    Ok(xxhash_rust::xxh3::xxh3_64(memory.as_mut()))
}
