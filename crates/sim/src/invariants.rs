//! What must hold after every step of a simulated run, whatever the faults: read from the
//! coordinator's journal as it is on disk (only when it changed, which the kernel tells:
//! looking at its files after every step was a fifth of the simulator's time) and from what
//! the job was told.
//!
//! - A committed epoch never goes back, nor does the coordinator's term.
//! - An epoch a rank was told was committed is committed in the journal.
//! - The job's supervisor keeps its lease unless it was cut off from the coordinator
//!   (`lease.rs`).
//! - No node is rebuilt elsewhere, and no group given up for lost, that was neither
//!   damaged nor out of the coordinator's reach on its own side lately (`outages.rs`).

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_coordinator::Journal;
use inotify::{EventMask, Inotify, WatchMask};

use crate::run::Shared;

/// The invariants of one run, and what they last saw.
pub struct Invariants {
    journal: PathBuf,
    shared: Rc<RefCell<Shared>>,
    /// Changes to the coordinator's directory, to read the journal again only when one of
    /// its files changed.
    changes: Inotify,
    /// Whether `changes` watches the directory yet (the coordinator makes it).
    watching: bool,
    committed: u64,
    term: u64,
    checks: u64,
}

impl Invariants {
    /// The invariants of the cluster in `dir`, whose job shares `shared`.
    pub(crate) fn new(dir: &ClusterDir, shared: Rc<RefCell<Shared>>) -> Result<Invariants> {
        Ok(Invariants {
            journal: dir.journal(),
            shared,
            changes: Inotify::init().context("inotify, to watch the journal")?,
            watching: false,
            committed: 0,
            term: 0,
            checks: 0,
        })
    }

    /// Invariant checks made so far.
    pub fn checks(&self) -> u64 {
        self.checks
    }

    /// Checks every invariant at virtual time `now`.
    pub fn check(&mut self, now: Duration) -> Result<()> {
        self.checks += 1;
        if let Some(why) = &self.shared.borrow().lease_lost {
            bail!("a live holder lost the job's lease: {why}");
        }
        if let Some(why) = &self.shared.borrow().lost_without_cause {
            bail!("a node was declared lost that was not: {why}");
        }
        if let Some(why) = &self.shared.borrow().stopped_under_successor {
            bail!("a superseded run stopped the cluster its successor holds: {why}");
        }
        let told = self.shared.borrow().committed_told;
        if self.journal_changed() {
            let journal = Journal::load(&self.journal)?;
            if journal.committed < self.committed {
                bail!(
                    "at {now:?}: the committed epoch went back from {} to {}",
                    self.committed,
                    journal.committed
                );
            }
            if journal.term < self.term {
                bail!(
                    "at {now:?}: the coordinator's term went back from {} to {}",
                    self.term,
                    journal.term
                );
            }
            (self.committed, self.term) = (journal.committed, journal.term);
        }
        if told > self.committed {
            bail!(
                "at {now:?}: a rank was told epoch {told} was committed, the journal says {}",
                self.committed
            );
        }
        Ok(())
    }

    /// Whether any file of the journal (`journal.json`, its copy, the previous one, their
    /// logs) changed since it was last read. The kernel queues a directory's changes as
    /// they are made, so after a step every change the step made is known.
    fn journal_changed(&mut self) -> bool {
        let dir = self.journal.parent().map(PathBuf::from).unwrap_or_default();
        if !self.watching {
            let mask = WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::DELETE;
            // Read once the directory is watched: the journal may predate the watch.
            self.watching = self.changes.watches().add(&dir, mask).is_ok();
            return self.watching;
        }
        let name = self
            .journal
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut changed = false;
        let mut buffer = [0u8; 4096];
        loop {
            match self.changes.read_events(&mut buffer) {
                Ok(events) => {
                    for event in events {
                        // The directory was removed: watch the one made in its place.
                        self.watching &= !event.mask.contains(EventMask::IGNORED);
                        // No name: the queue overflowed, or the directory itself changed.
                        changed |= event.name.is_none_or(|n| n.to_string_lossy().starts_with(&name));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return changed,
                // Whatever else went wrong, read the journal rather than miss a change.
                Err(_) => return true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_coding::config::CodingConfig;

    fn journal_at(dir: &ClusterDir, committed: u64, term: u64) {
        let nodes: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
        let mut journal = Journal::in_domains(CodingConfig::default(), &nodes, &[], &Default::default());
        (journal.committed, journal.term) = (committed, term);
        std::fs::create_dir_all(dir.coordinator()).unwrap();
        journal.save(&dir.journal()).unwrap();
    }

    #[test]
    fn a_committed_epoch_that_goes_back_or_was_told_too_soon_is_caught() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(root.path()).unwrap();
        let shared = Rc::new(RefCell::new(Shared::default()));
        let mut invariants = Invariants::new(&dir, shared.clone()).unwrap();
        journal_at(&dir, 5, 2);
        invariants.check(Duration::ZERO).unwrap();
        shared.borrow_mut().committed_told = 5;
        invariants.check(Duration::ZERO).unwrap();
        shared.borrow_mut().committed_told = 6;
        let e = invariants.check(Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("was told epoch 6"), "{e}");
        shared.borrow_mut().committed_told = 5;
        journal_at(&dir, 4, 2);
        let e = invariants.check(Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("went back from 5 to 4"), "{e}");
        let mut invariants = Invariants::new(&dir, shared).unwrap();
        journal_at(&dir, 5, 3);
        invariants.check(Duration::ZERO).unwrap();
        // The journal fences a lower term itself: only a journal replaced whole has one.
        std::fs::remove_dir_all(dir.coordinator()).unwrap();
        journal_at(&dir, 5, 2);
        let e = invariants.check(Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("term went back"), "{e}");
        assert_eq!(invariants.checks(), 2);
    }
}
