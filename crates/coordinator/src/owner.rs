//! The coordinator's state has one owner: a task that holds it and runs, one at a time, the
//! reads and changes that request handlers send it as messages. Nothing else touches it, so
//! no lock guards it and none can be poisoned: a panic inside a message aborts the daemon
//! (crash-only), and its restart resumes from the journal.
//!
//! Two kinds of message:
//! - a **visit** reads or changes the in-memory state (liveness, the open epoch, pace
//!   points, flushes, the lease) and sees the journal as it is on disk;
//! - a **change** also decides something the journal records. Changes are **group
//!   committed**: every change that arrives while a journal write is in flight waits, and
//!   the next write commits all of them at once — at the start of a job, W ranks placing
//!   themselves cost a few writes instead of W. The write runs on a blocking thread; visits
//!   go on being answered meanwhile (heartbeats never wait for a disk). A change is
//!   answered only once its write is durable, and a write that fails answers every change
//!   it carried with the error and leaves the journal as it was on disk.
//!
//! A write refused because another coordinator took the journal over (a newer term on
//! disk, see `journal_file`) **fences** the owner: it refuses every later change at once,
//! writes nothing more, and says so to [`Owner::fenced`], on which the daemon stops. The
//! changes refused are answered as by a coordinator that cannot be reached (retryable):
//! the one fenced is this coordinator, not the agent or the rank that asked, which goes
//! on to the coordinator `cluster.json` names — an agent told "fenced" would exit.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::epoch_state::EpochState;
use super::flush::FlushState;
use super::journal_file::Writer;
use super::pace::PacePoints;
use super::run_clock::{RunClock, RunTime};
use super::sessions::Live;
use super::sightings::Sightings;
use super::Journal;
use eckpt_cluster_api::dirs::Deadlines;
use eckpt_cluster_api::{ClusterError, WireError};

/// Messages waiting for the owner; a sender waits when it is full.
const INBOX: usize = 1024;

/// Everything the coordinator decides with, held by its owner task.
pub(super) struct State {
    /// The journal as last written: changes go through a [`Draft`], which shares it until
    /// a change writes (a copy of the whole journal per message would make the control
    /// plane quadratic: most changes, a rank's report among them, decide nothing new).
    journal: Arc<Journal>,
    /// The next task id, ahead of the journal's record of it by the ids handed out since
    /// its last write.
    next_task: u64,
    /// Agents' sessions by node name.
    pub live: BTreeMap<String, Live>,
    /// When each agent with a session was last seen (for judging it alive).
    pub sightings: Sightings,
    /// When the coordinator last heard each node whose session ended (and that has not
    /// registered again since).
    pub ended: BTreeMap<String, Instant>,
    /// The ranks' progress through the open epoch, and decided epochs.
    pub epochs: EpochState,
    /// `snapshot()` pace points waiting for every rank.
    pub pace_points: PacePoints,
    /// The flush running and the last ones.
    pub flush: FlushState,
    /// When the job's lease holder last renewed it (`None`: no holder), on the time the
    /// coordinator ran (`clock`).
    pub lease_renewed: Option<RunTime>,
    /// The time the coordinator ran: what leases are judged on ([`RunClock`]).
    pub clock: RunClock,
    /// The cluster's time bounds (`cluster.json`).
    pub deadlines: Deadlines,
    /// Since when nodes are awaited — this coordinator's start, or its hearing agents again
    /// after a silence of its own beyond the partition grace — and those that have not
    /// registered since: awaited, not lost, for an agent's longest reconnection from then
    /// ([`State::awaited`]).
    pub awaiting_since: Instant,
    pub unregistered: BTreeSet<String>,
    /// When the coordinator last heard any agent (`State::end_silence`, called as it hears
    /// one), or its start — heard, unlike a sighting set ahead to give a node its
    /// reconnection time: where a silence of its own begins, which leases do not count
    /// (`State::leave_out_silence`).
    pub heard_any: Instant,
    /// Bytes this coordinator wrote to the journal's files since it started (what its
    /// decisions cost the disk: `eckpt status --json`, `eckpt bench control`).
    pub journal_bytes_written: u64,
}

impl State {
    /// The state of a coordinator resuming `journal`: no agent alive yet, its next epoch
    /// open; `flushed` are the epochs the flush directory holds.
    pub fn new(journal: Journal, deadlines: Deadlines, flushed: Vec<u64>) -> State {
        // A holder the journal names gets a whole lease from this start: it renews with the
        // restarted coordinator as soon as it reaches it.
        let clock = RunClock::start();
        let lease_renewed = journal.job.holder.as_ref().map(|_| clock.now());
        let unregistered = journal
            .nodes
            .iter()
            .filter(|(_, entry)| !entry.removed)
            .map(|(name, _)| name.clone())
            .collect();
        State {
            epochs: EpochState::new(journal.next_epoch),
            next_task: journal.next_task,
            journal: Arc::new(journal),
            live: BTreeMap::new(),
            sightings: Sightings::default(),
            ended: BTreeMap::new(),
            pace_points: PacePoints::default(),
            flush: FlushState::new(flushed),
            lease_renewed,
            clock,
            deadlines,
            awaiting_since: Instant::now(),
            unregistered,
            // A silence of its own may begin at its start: a coordinator restarted while cut
            // off hears nobody from then on, and the lease it gave its holder at the start
            // must not run out meanwhile (found by the simulator).
            heard_any: Instant::now(),
            journal_bytes_written: 0,
        }
    }

    /// The journal as last written.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// A task id never handed out before. Not written at once: a restarted coordinator
    /// skips ahead past any id handed out after the last write.
    pub fn next_task_id(&mut self) -> u64 {
        let id = self.next_task;
        self.next_task += 1;
        id
    }

    /// Takes a written draft as the journal.
    fn install(&mut self, written: Arc<Journal>) {
        self.journal = written;
    }
}

/// The journal a commit will write: changes of one commit see those made before them.
/// Reading it reads the journal as written; the first mutable access copies it, and makes
/// a write.
pub(super) struct Draft {
    written: Arc<Journal>,
    edited: Option<Journal>,
}

impl Draft {
    fn of(written: &Arc<Journal>) -> Draft {
        Draft {
            written: written.clone(),
            edited: None,
        }
    }
}

impl Deref for Draft {
    type Target = Journal;
    fn deref(&self) -> &Journal {
        self.edited.as_ref().unwrap_or(&self.written)
    }
}

impl DerefMut for Draft {
    fn deref_mut(&mut self) -> &mut Journal {
        self.edited.get_or_insert_with(|| (*self.written).clone())
    }
}

/// What a change answers once its commit's write is known.
type Answer = Box<dyn FnOnce(Result<(), ClusterError>) + Send>;
type Visit = Box<dyn FnOnce(&mut State) + Send>;
type Change = Box<dyn FnOnce(&mut State, &mut Draft) -> Answer + Send>;

enum Message {
    Visit(Visit),
    Change(Change),
}

/// How to reach the owner of a coordinator's state.
pub(super) struct Owner {
    inbox: mpsc::Sender<Message>,
    /// Why the owner was fenced, once it is.
    fenced: watch::Receiver<Option<String>>,
}

impl Owner {
    /// Starts the task owning `state`, which writes the journal at `journal_path`. It ends
    /// when the last `Owner` is dropped.
    pub fn start(state: State, journal_path: PathBuf) -> Owner {
        let (inbox, messages) = mpsc::channel(INBOX);
        let (fence, fenced) = watch::channel(None);
        tokio::spawn(own(state, messages, journal_path, fence));
        Owner { inbox, fenced }
    }

    /// Resolves once a newer coordinator has taken the journal over, with what says so.
    pub async fn fenced(&self) -> String {
        let mut fenced = self.fenced.clone();
        let why = fenced
            .wait_for(Option::is_some)
            .await
            .map(|why| why.clone().unwrap_or_default());
        match why {
            Ok(why) => why,
            // The owner ended (its last `Owner` dropped): nothing can be fenced any more.
            Err(_) => std::future::pending().await,
        }
    }

    async fn send(&self, message: Message) {
        // The owner runs as long as any `Owner` exists; it ends early only by a panic, which
        // aborts the daemon.
        if self.inbox.send(message).await.is_err() {
            panic!("the coordinator's state owner ended");
        }
    }

    /// Runs `visit` on the state, after every message sent before it.
    pub async fn visit<T: Send + 'static>(&self, visit: impl FnOnce(&mut State) -> T + Send + 'static) -> T {
        let (tx, rx) = oneshot::channel();
        self.send(Message::Visit(Box::new(move |state| {
            let _ = tx.send(visit(state));
        })))
        .await;
        // The owner runs every visit it took (`own`: at once) and ends only when every
        // `Owner`, this one too, is gone, or by a panic, which aborts the daemon (crash-only).
        rx.await
            .expect("the coordinator's state owner answers every visit")
    }

    /// Runs `change` in the next commit and answers once the journal it changed is written
    /// (at once when it changed nothing of the journal). `change` must decide before it
    /// writes to the draft: a change that refuses leaves the draft as it found it, since
    /// the draft carries the other changes of its commit.
    pub async fn change<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut State, &mut Draft) -> T + Send + 'static,
    ) -> Result<T, ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.send(Message::Change(Box::new(move |state, draft| {
            let out = change(state, draft);
            Box::new(move |written: Result<(), ClusterError>| {
                let _ = tx.send(written.map(|()| out));
            })
        })))
        .await;
        // Every change taken is answered (`start_commit`, `finish_commit`, or refused once
        // fenced); should one be dropped unanswered, its caller gets an error, not a crash.
        rx.await.unwrap_or_else(|_| {
            Err(ClusterError::Internal(
                "the coordinator's state owner dropped a change unanswered".into(),
            ))
        })
    }
}

/// The answer to a change refused because a newer coordinator took the journal over
/// (`why`): the asker is to look for that one, as for a coordinator it cannot reach.
fn superseded(why: &str) -> ClusterError {
    ClusterError::Unreachable(format!("{why}; ask the coordinator cluster.json names now"))
}

/// A journal write in flight: the draft, what to answer, and the blocking write.
struct Commit {
    draft: Arc<Journal>,
    answers: Vec<Answer>,
    /// The writer back, and the bytes written, once written.
    write: eckpt_daemon::worker::Worker<(Writer, Result<u64, ClusterError>)>,
}

/// The owner's loop: visits at once, changes batched into one write at a time; once
/// fenced, changes refused.
async fn own(
    mut state: State,
    mut messages: mpsc::Receiver<Message>,
    journal_path: PathBuf,
    fence: watch::Sender<Option<String>>,
) {
    let mut waiting: Vec<Change> = Vec::new();
    let mut writing: Option<Commit> = None;
    // With the write in flight, if one is.
    let mut writer = Some(Writer::new(journal_path));
    loop {
        if let Some(why) = fence.borrow().as_ref() {
            for change in waiting.drain(..) {
                let mut draft = Draft::of(&state.journal);
                change(&mut state, &mut draft)(Err(superseded(why)));
            }
        }
        if writing.is_none() && !waiting.is_empty() {
            writing = start_commit(&mut state, std::mem::take(&mut waiting), &mut writer);
        }
        tokio::select! {
            message = messages.recv() => match message {
                Some(Message::Visit(visit)) => visit(&mut state),
                Some(Message::Change(change)) => waiting.push(change),
                None => break,
            },
            // Polled only when its precondition held (`select!` creates a disabled branch's
            // future but never polls it), and `writing` is borrowed by it until it resolves.
            written = async { (&mut writing.as_mut().expect("a write in flight").write).await },
                if writing.is_some() =>
            {
                // This branch ran: `writing` was `Some`, and nothing took it since.
                let commit = writing.take().expect("a write in flight");
                writer = Some(finish_commit(&mut state, commit, written, &fence));
            }
        }
    }
    if let Some(mut commit) = writing {
        let written = (&mut commit.write).await;
        finish_commit(&mut state, commit, written, &fence);
    }
}

/// Applies `changes` in order to one draft and starts writing it; `None` when none of them
/// changed the journal (they are answered at once).
fn start_commit(state: &mut State, changes: Vec<Change>, writer: &mut Option<Writer>) -> Option<Commit> {
    let mut draft = Draft::of(&state.journal);
    let answers: Vec<Answer> = changes
        .into_iter()
        .map(|change| change(state, &mut draft))
        .collect();
    let Some(mut journal) = draft.edited else {
        for answer in answers {
            answer(Ok(()));
        }
        return None;
    };
    // Task ids handed out so far are recorded, so that a restart never hands them out again.
    journal.next_task = journal.next_task.max(state.next_task);
    let journal = Arc::new(journal);
    let (before, after) = (state.journal.clone(), journal.clone());
    // Back after each write, and writes do not overlap.
    let mut writer = writer.take().expect("the journal's writer between writes");
    let write = eckpt_daemon::worker::spawn(move || {
        let written = writer.write(&before, &after);
        (writer, written)
    });
    Some(Commit {
        draft: journal,
        answers,
        write,
    })
}

/// Installs a written draft and answers its changes; a failed write answers each with the
/// error and keeps the journal that is on disk, and a refused one fences the owner. Returns
/// the journal's writer.
fn finish_commit(
    state: &mut State,
    commit: Commit,
    written: Result<(Writer, Result<u64, ClusterError>), ClusterError>,
    fence: &watch::Sender<Option<String>>,
) -> Writer {
    // A worker ends early only by a panic, which aborts the daemon (crash-only), or at the
    // runtime's shutdown, when nothing is answered any more.
    let (writer, written) = match written {
        Ok(done) => done,
        Err(e) => panic!("the journal write did not finish: {e}"),
    };
    match written {
        Ok(bytes) => {
            state.journal_bytes_written += bytes;
            state.install(commit.draft);
            for answer in commit.answers {
                answer(Ok(()));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, changes = commit.answers.len(), "the journal write failed: nothing it carried is decided");
            let e = if e.kind() == eckpt_cluster_api::ErrorKind::Fenced {
                let why = e.to_string();
                fence.send_replace(Some(why.clone()));
                superseded(&why)
            } else {
                e
            };
            let wire = WireError::from(&e);
            let mut first = Some(e);
            for answer in commit.answers {
                answer(Err(first
                    .take()
                    .unwrap_or_else(|| ClusterError::from_coordinator(wire.clone()))));
            }
        }
    }
    writer
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use eckpt_coding::config::CodingConfig;
    use tokio::task::JoinSet;

    fn state(nodes: usize) -> State {
        let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
        let journal = Journal::new(CodingConfig::default(), &names, &[]);
        State::new(journal, Deadlines::default(), Vec::new())
    }

    /// Places `ranks` ranks, each by a change of its own sent at once; the answers.
    async fn place_concurrently(owner: &Arc<Owner>, ranks: u32) -> Vec<Result<u32, ClusterError>> {
        let mut set = JoinSet::new();
        for rank in 0..ranks {
            let owner = owner.clone();
            set.spawn(async move {
                owner
                    .change(move |_, j| {
                        j.placement.insert(rank, format!("n{}", rank % 4));
                        rank
                    })
                    .await
            });
        }
        let mut out = set.join_all().await;
        out.sort_by_key(|r| *r.as_ref().unwrap_or(&u32::MAX));
        out
    }

    #[tokio::test]
    async fn changes_sent_together_are_written_together_and_answered_once_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let owner = Arc::new(Owner::start(state(4), path.clone()));
        let placed = place_concurrently(&owner, 64).await;
        assert_eq!(
            placed.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            (0..64).collect::<Vec<_>>()
        );
        assert_eq!(
            Journal::load(&path).unwrap().placement.len(),
            64,
            "every change answered is on disk"
        );
        assert_eq!(owner.visit(|s| s.journal().placement.len()).await, 64);
        // The first write is a snapshot, each later one a record of the log: one write per
        // change would leave 63 records; fewer means writes carried several changes.
        let log = std::fs::read_to_string(super::super::journal_log::log_path(&path)).unwrap();
        let records = log.lines().count() - 1;
        assert!(records < 63, "{records} records");
    }

    #[tokio::test]
    async fn a_change_that_writes_nothing_is_answered_without_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let owner = Owner::start(state(2), path.clone());
        assert_eq!(owner.change(|_, j| j.committed).await.unwrap(), 0);
        assert!(!path.exists(), "reading the draft wrote no journal");
    }

    #[tokio::test]
    async fn a_failed_write_answers_every_change_it_carried_and_keeps_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-dir").join("journal.json");
        let owner = Arc::new(Owner::start(state(4), path));
        let results = place_concurrently(&owner, 3).await;
        assert!(results.iter().all(Result::is_err), "{results:?}");
        assert!(
            owner.visit(|s| s.journal().placement.is_empty()).await,
            "nothing unwritten is served"
        );
    }

    /// A coordinator whose journal another coordinator took over (a newer term on disk)
    /// decides nothing more: the change that found out is refused, so is every later one
    /// without a write, and the daemon is told to stop. The askers are told to try again
    /// (at the newer coordinator), not that they are fenced.
    #[tokio::test]
    async fn a_journal_taken_over_by_a_newer_term_fences_the_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let owner = Owner::start(state(2), path.clone());
        owner.change(|_, j| j.committed = 1).await.unwrap();
        let mut successor = Journal::load(&path).unwrap();
        successor.term += 1;
        successor.save(&path).unwrap();
        let taken_over = std::fs::read(&path).unwrap();

        let e = owner.change(|_, j| j.committed = 2).await.unwrap_err();
        assert!(
            e.kind().is_retryable(),
            "the asker looks for the new coordinator: {e}"
        );
        assert!(e.to_string().contains("has taken this journal over"), "{e}");
        let why = tokio::time::timeout(std::time::Duration::from_secs(5), owner.fenced())
            .await
            .expect("the owner says it is fenced");
        assert!(why.contains("has taken this journal over"), "{why}");
        let e = owner.change(|_, j| j.committed = 3).await.unwrap_err();
        assert!(e.kind().is_retryable(), "{e}");
        assert!(e.to_string().contains("has taken this journal over"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), taken_over, "a fenced owner wrote");
        assert_eq!(
            owner.visit(|s| s.journal().committed).await,
            1,
            "nothing refused is served"
        );
    }

    #[tokio::test]
    async fn task_ids_handed_out_during_a_write_survive_it() {
        let dir = tempfile::tempdir().unwrap();
        let owner = Owner::start(state(2), dir.path().join("journal.json"));
        let first = owner.visit(|s| s.next_task_id()).await;
        let (written, during) = tokio::join!(
            owner.change(|_, j| j.committed = 1),
            owner.visit(|s| s.next_task_id())
        );
        written.unwrap();
        let after = owner.visit(|s| s.next_task_id()).await;
        assert!(first < during && during < after, "{first} {during} {after}");
    }
}
