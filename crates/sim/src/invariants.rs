//! What must hold after every step of a simulated run, whatever the faults: read from the
//! coordinator's journal as it is on disk (only when it changed) and from what the job was
//! told.
//!
//! - A committed epoch never goes back, nor does the coordinator's term.
//! - An epoch a rank was told was committed is committed in the journal.

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
