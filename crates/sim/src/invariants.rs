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
//! - A node the journal names as holding a coded object holds it on its disk, committed or
//!   prepared and awaiting the decision the journal already made — unless the simulation
//!   damaged or took that disk. Checked when the journal changes and every
//!   [`HOLDINGS_EVERY`] between: a recovery that journals "redundancy restored" while a
//!   member lacks the new parity fails at once, not only if the final loss happens to need
//!   that parity.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_coding::ObjectId;
use eckpt_coordinator::Journal;
use inotify::{EventMask, Inotify, WatchMask};

use crate::run::Shared;

/// How often, in virtual time, the nodes' coded objects are compared with the journal
/// between its changes (a comparison on every step would be most of a run's time).
const HOLDINGS_EVERY: Duration = Duration::from_millis(100);

/// The invariants of one run, and what they last saw.
pub struct Invariants {
    journal: PathBuf,
    /// Where each node's local storage lies (`<locals>/<node>`).
    locals: PathBuf,
    /// The journal as last read.
    seen: Option<Journal>,
    /// When the holdings were last compared with it.
    holdings_checked: Duration,
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
    /// The invariants of the cluster in `dir`, whose nodes keep their local storage in
    /// `<locals>/<node>` and whose job shares `shared`.
    pub(crate) fn new(dir: &ClusterDir, locals: &Path, shared: Rc<RefCell<Shared>>) -> Result<Invariants> {
        Ok(Invariants {
            journal: dir.journal(),
            locals: locals.to_path_buf(),
            seen: None,
            holdings_checked: Duration::ZERO,
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

    /// Checks every invariant at virtual time `now`, the nodes `lost` gone for good with
    /// their disks.
    pub fn check(&mut self, now: Duration, lost: &BTreeSet<String>) -> Result<()> {
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
        let changed = self.journal_changed();
        if changed {
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
            self.seen = Some(journal);
        }
        if told > self.committed {
            bail!(
                "at {now:?}: a rank was told epoch {told} was committed, the journal says {}",
                self.committed
            );
        }
        if changed || now >= self.holdings_checked + HOLDINGS_EVERY {
            self.holdings_checked = now;
            self.check_holdings(now, lost)?;
        }
        Ok(())
    }

    /// Every coded object the journal last read names is on the disk of each member that
    /// holds part of it, but for disks the simulation damaged or took (`lost`).
    fn check_holdings(&self, now: Duration, lost: &BTreeSet<String>) -> Result<()> {
        let Some(journal) = &self.seen else {
            return Ok(());
        };
        let damaged = &self.shared.borrow().damaged;
        for node in journal.members() {
            let coded = ClusterDir::coded_beside(&ClusterDir::local_store(&self.locals.join(&node)));
            let wanted = journal.held_objects(&node);
            if wanted.is_empty() || damaged.contains(&node) || lost.contains(&node) {
                continue;
            }
            let held = objects_in(&coded);
            if let Some(id) = wanted.iter().find(|id| !held.contains(id)) {
                bail!(
                    "at {now:?}: the journal (epoch {}) says {node} holds coded object {id}, and its disk has no such object (it has {held:?})",
                    journal.committed
                );
            }
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

/// The coded objects in an agent's parity directory `coded`, committed (`obj-<id>`) or
/// prepared (`prepared-<id>`): read from the directory's names as the agent lays it out,
/// not through the agent's own code, which the check is about.
fn objects_in(coded: &Path) -> Vec<ObjectId> {
    let Ok(entries) = std::fs::read_dir(coded) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let id = name
                .strip_prefix("obj-")
                .or_else(|| name.strip_prefix("prepared-"))?;
            ObjectId::parse(id)
        })
        .collect()
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
        let mut invariants = Invariants::new(&dir, &root.path().join("local"), shared.clone()).unwrap();
        journal_at(&dir, 5, 2);
        invariants.check(Duration::ZERO, &BTreeSet::new()).unwrap();
        shared.borrow_mut().committed_told = 5;
        invariants.check(Duration::ZERO, &BTreeSet::new()).unwrap();
        shared.borrow_mut().committed_told = 6;
        let e = invariants.check(Duration::ZERO, &BTreeSet::new()).unwrap_err();
        assert!(e.to_string().contains("was told epoch 6"), "{e}");
        shared.borrow_mut().committed_told = 5;
        journal_at(&dir, 4, 2);
        let e = invariants.check(Duration::ZERO, &BTreeSet::new()).unwrap_err();
        assert!(e.to_string().contains("went back from 5 to 4"), "{e}");
        let mut invariants = Invariants::new(&dir, &root.path().join("local"), shared).unwrap();
        journal_at(&dir, 5, 3);
        invariants.check(Duration::ZERO, &BTreeSet::new()).unwrap();
        // The journal fences a lower term itself: only a journal replaced whole has one.
        std::fs::remove_dir_all(dir.coordinator()).unwrap();
        journal_at(&dir, 5, 2);
        let e = invariants.check(Duration::ZERO, &BTreeSet::new()).unwrap_err();
        assert!(e.to_string().contains("term went back"), "{e}");
        assert_eq!(invariants.checks(), 2);
    }

    /// Writes a journal naming a coded object of its first group at epoch 1: the object and
    /// the members that hold parity of it.
    fn journal_with_object(dir: &ClusterDir) -> (ObjectId, Vec<String>) {
        let nodes: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
        let mut journal = Journal::in_domains(CodingConfig::default(), &nodes, &[], &Default::default());
        journal.committed = 1;
        let group = &mut journal.groups[0];
        let id = ObjectId {
            group: group.group.id,
            epoch: 1,
        };
        group.objects.push(eckpt_cluster_api::msg::ObjectRecord {
            id,
            kind: eckpt_cluster_api::msg::ObjectKind::Image,
            version: 1,
            chunk: 4096,
            data_chunks: 1,
            shards: vec![Default::default(); group.group.members.len()],
        });
        let holders = journal
            .members()
            .into_iter()
            .filter(|n| !journal.held_objects(n).is_empty())
            .collect();
        std::fs::create_dir_all(dir.coordinator()).unwrap();
        journal.save(&dir.journal()).unwrap();
        (id, holders)
    }

    #[test]
    fn a_coded_object_the_journal_names_and_a_holder_lacks_is_caught_unless_its_disk_was_taken() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(root.path().join("cluster")).unwrap();
        let locals = root.path().join("local");
        let (id, holders) = journal_with_object(&dir);
        assert!(!holders.is_empty());
        let coded = |node: &str| ClusterDir::coded_beside(&ClusterDir::local_store(&locals.join(node)));
        let object = |node: &str, state: &str| {
            std::fs::create_dir_all(coded(node).join(format!("{state}-{id}"))).unwrap();
        };
        // Prepared, awaiting the decision the journal made, or committed: held.
        for (i, node) in holders.iter().enumerate() {
            object(node, if i % 2 == 0 { "obj" } else { "prepared" });
        }
        let shared = Rc::new(RefCell::new(Shared::default()));
        let mut invariants = Invariants::new(&dir, &locals, shared.clone()).unwrap();
        invariants.check(Duration::ZERO, &BTreeSet::new()).unwrap();
        // The first holder's object goes: caught at the next check after HOLDINGS_EVERY,
        // the journal unchanged.
        let gone = &holders[0];
        std::fs::remove_dir_all(coded(gone)).unwrap();
        invariants.check(HOLDINGS_EVERY / 2, &BTreeSet::new()).unwrap();
        let e = invariants.check(HOLDINGS_EVERY, &BTreeSet::new()).unwrap_err();
        assert!(
            e.to_string().contains(&format!("says {gone} holds coded object")),
            "{e}"
        );
        // Lost with its disk, or damaged by the simulation: not held to it.
        invariants
            .check(2 * HOLDINGS_EVERY, &BTreeSet::from([gone.clone()]))
            .unwrap();
        shared.borrow_mut().damaged.insert(gone.clone());
        invariants.check(3 * HOLDINGS_EVERY, &BTreeSet::new()).unwrap();
    }
}
