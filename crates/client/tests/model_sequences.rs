//! Random sequences of what a rank does — write memory, append to its log, rewrite its
//! snapshot file, checkpoint (some checkpoints failing half way), fork a child that tries to
//! use eckpt, restart in a new checkpointer — checked against a model of what must come back:
//! after every restart the memory and the files are exactly what the last committed epoch
//! saw, or untouched when none was committed. Kernel-tracked (userfaultfd) and hashed
//! regions both; a checkpoint that failed after consuming the tracker's changes must not
//! make a later epoch lose them.

mod common;

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use eckpt::{Checkpointer, FileMode, TrackMode};
use eckpt_capture::{page_size, AlignedBuf};
use proptest::prelude::*;

/// Pages per kernel-trackable region, bytes of the unaligned one.
const PAGES: usize = 6;
const UNALIGNED: usize = 5000;

#[derive(Debug, Clone)]
enum Step {
    /// Region, page-sized slot within it, value.
    Write(usize, usize, u8),
    AppendLine(u8),
    RewriteSnapshot(u8),
    Checkpoint,
    /// The snapshot file is a directory for one checkpoint, which fails after the memory's
    /// changes were consumed; then it is a file again.
    FailingCheckpoint,
    /// A forked child tries to restart and to checkpoint, and exits.
    Fork,
    /// The process "restarts": a new checkpointer, memory scrambled first.
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3usize, 0..PAGES, 1..=255u8).prop_map(|(r, p, v)| Step::Write(r, p, v)),
        2 => (1..=255u8).prop_map(Step::AppendLine),
        1 => (1..=255u8).prop_map(Step::RewriteSnapshot),
        4 => Just(Step::Checkpoint),
        1 => Just(Step::FailingCheckpoint),
        1 => Just(Step::Fork),
        2 => Just(Step::Restart),
    ]
}

/// The rank's memory: two page-aligned regions (kernel tracking where it works) and one that
/// is not (always hashed).
struct Memory {
    aligned: [AlignedBuf; 2],
    unaligned: Vec<u8>,
}

impl Memory {
    fn new() -> Memory {
        let page = page_size();
        let mut aligned = [
            AlignedBuf::new(PAGES * page).unwrap(),
            AlignedBuf::new(PAGES * page).unwrap(),
        ];
        for (seed, buf) in aligned.iter_mut().enumerate() {
            common::fill(buf, seed as u64);
        }
        let mut unaligned = vec![0; UNALIGNED + 1];
        common::fill(&mut unaligned, 7);
        Memory { aligned, unaligned }
    }

    /// The unaligned region starts one byte into its vector.
    fn regions(&mut self) -> [&mut [u8]; 3] {
        let [a, b] = &mut self.aligned;
        [&mut a[..], &mut b[..], &mut self.unaligned[1..]]
    }

    fn snapshot(&mut self) -> Vec<Vec<u8>> {
        self.regions().iter().map(|r| r.to_vec()).collect()
    }
}

/// What the files and memory hold, as the model sees it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    memory: Vec<Vec<u8>>,
    log: String,
    snapshot: Vec<u8>,
}

struct Rank {
    dir: PathBuf,
    track: TrackMode,
    ck: Option<Checkpointer>,
}

impl Rank {
    fn log(&self) -> PathBuf {
        self.dir.join("work/log.txt")
    }

    fn snapshot(&self) -> PathBuf {
        self.dir.join("work/state.bin")
    }

    /// A new checkpointer protecting the memory and the files (the old one dropped first).
    fn open(&mut self, memory: &mut Memory) -> &mut Checkpointer {
        self.ck = None;
        let mut ck = Checkpointer::new(common::config(&self.dir.join("store"), self.track)).unwrap();
        for (i, region) in memory.regions().into_iter().enumerate() {
            // SAFETY: the memory outlives the checkpointer (dropped at the end of the case
            // or when replaced) and is never reallocated.
            unsafe {
                ck.protect(&format!("r{i}"), region.as_mut_ptr(), region.len())
                    .unwrap()
            };
        }
        ck.protect_file(self.log(), FileMode::Append).unwrap();
        ck.protect_file(self.snapshot(), FileMode::Snapshot).unwrap();
        self.ck.insert(ck)
    }

    fn seen(&self, memory: &mut Memory) -> Seen {
        Seen {
            memory: memory.snapshot(),
            log: fs::read_to_string(self.log()).unwrap(),
            snapshot: fs::read(self.snapshot()).unwrap(),
        }
    }
}

/// A forked child's tries: both must be refused. Exits 0 if they were, 1 otherwise.
fn fork_and_try(ck: &mut Checkpointer) {
    // SAFETY: the child only makes these calls and `_exit`s; glibc makes malloc usable in a
    // child of a multithreaded parent.
    match unsafe { libc::fork() } {
        0 => {
            let refused = ck.restart().is_err() && ck.checkpoint().is_err();
            // SAFETY: ends the child without running the parent's destructors or test harness.
            unsafe { libc::_exit(if refused { 0 } else { 1 }) }
        }
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        child => {
            let mut status = 0;
            // SAFETY: waits for the child just forked.
            unsafe { libc::waitpid(child, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the forked child could use its parent's checkpointer"
            );
        }
    }
}

/// Cases run one at a time: a fork duplicates every descriptor of the process, so a child
/// forked by one case would hold the other case's claim on its rank until it exits.
static ONE_CASE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(track: TrackMode, steps: &[Step]) -> Result<(), TestCaseError> {
    let _alone = ONE_CASE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("work")).unwrap();
    let mut rank = Rank {
        dir: tmp.path().to_path_buf(),
        track,
        ck: None,
    };
    fs::write(rank.log(), "").unwrap();
    fs::write(rank.snapshot(), [0u8]).unwrap();
    let mut memory = Memory::new();
    rank.open(&mut memory);
    let mut committed: Option<Seen> = None;
    for (n, step) in steps.iter().enumerate() {
        match *step {
            Step::Write(region, slot, value) => {
                let region = &mut memory.regions()[region];
                let at = (slot * page_size()).min(region.len() - 1);
                region[at] = value;
            }
            Step::AppendLine(value) => {
                let mut log = fs::OpenOptions::new().append(true).open(rank.log()).unwrap();
                log.write_all(format!("line {value}\n").as_bytes()).unwrap();
            }
            Step::RewriteSnapshot(value) => fs::write(rank.snapshot(), vec![value; value as usize]).unwrap(),
            Step::Checkpoint => {
                rank.ck.as_mut().unwrap().checkpoint().unwrap();
                committed = Some(rank.seen(&mut memory));
            }
            Step::FailingCheckpoint => {
                let content = fs::read(rank.snapshot()).unwrap();
                fs::remove_file(rank.snapshot()).unwrap();
                fs::create_dir(rank.snapshot()).unwrap();
                prop_assert!(
                    rank.ck.as_mut().unwrap().checkpoint().is_err(),
                    "step {n}: a checkpoint reading a directory as a file succeeded"
                );
                fs::remove_dir(rank.snapshot()).unwrap();
                fs::write(rank.snapshot(), content).unwrap();
            }
            Step::Fork => fork_and_try(rank.ck.as_mut().unwrap()),
            Step::Restart => {
                for region in memory.regions() {
                    region.fill(0xEE);
                }
                // With no epoch committed, memory and the snapshot stay as they are and the log
                // is cut back to its length when first protected: empty.
                let fresh = Seen {
                    log: String::new(),
                    ..rank.seen(&mut memory)
                };
                let restored = rank.open(&mut memory).restart().unwrap();
                let expected = committed.clone().unwrap_or(fresh);
                prop_assert_eq!(restored.is_some(), committed.is_some(), "step {}", n);
                prop_assert_eq!(
                    &rank.seen(&mut memory),
                    &expected,
                    "step {}: restart of {:?}",
                    n,
                    steps
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn kernel_tracked_ranks_restore_what_the_model_committed(steps in proptest::collection::vec(step(), 1..40)) {
        run(TrackMode::Auto, &steps)?;
    }

    #[test]
    fn hashed_ranks_restore_what_the_model_committed(steps in proptest::collection::vec(step(), 1..40)) {
        run(TrackMode::Hash, &steps)?;
    }
}
