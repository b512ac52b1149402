//! What must hold after every step of a simulated run, whatever the faults: read from the
//! coordinator's journal as it is on disk (only when it changed) and from what the job was
//! told.
//!
//! - A committed epoch never goes back, nor does the coordinator's term.
//! - An epoch a rank was told was committed is committed in the journal.
//! - The job's supervisor keeps its lease unless it was cut off from the coordinator
//!   (`lease.rs`).

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Result};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_coordinator::Journal;

use crate::run::Shared;

/// The invariants of one run, and what they last saw.
pub struct Invariants {
    journal: PathBuf,
    shared: Rc<RefCell<Shared>>,
    /// The journal's files as last read (lengths and times), to read them again only
    /// when they changed.
    seen: Vec<Option<(u64, SystemTime)>>,
    committed: u64,
    term: u64,
    checks: u64,
}

impl Invariants {
    /// The invariants of the cluster in `dir`, whose job shares `shared`.
    pub(crate) fn new(dir: &ClusterDir, shared: Rc<RefCell<Shared>>) -> Invariants {
        Invariants {
            journal: dir.journal(),
            shared,
            seen: Vec::new(),
            committed: 0,
            term: 0,
            checks: 0,
        }
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

    /// Whether any file of the journal changed since it was last read.
    fn journal_changed(&mut self) -> bool {
        let dir = self.journal.parent().map(PathBuf::from).unwrap_or_default();
        // `journal.json`, its log, its copy and the previous one.
        let name = self
            .journal
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&name))
            })
            .collect();
        files.sort();
        let now: Vec<Option<(u64, SystemTime)>> = files
            .iter()
            .map(|f| {
                std::fs::metadata(f)
                    .ok()
                    .and_then(|m| Some((m.len(), m.modified().ok()?)))
            })
            .collect();
        let changed = now != self.seen;
        self.seen = now;
        changed
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
        let mut invariants = Invariants::new(&dir, shared.clone());
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
        let mut invariants = Invariants::new(&dir, shared);
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
