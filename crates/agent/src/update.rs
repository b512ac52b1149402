//! An agent's part in an `update` epoch ([`UpdateTask`]): data members send `old ⊕ new` of
//! their changed blocks to every parity holder of each row, whatever the encode topology;
//! parity holders fold `X·(old ⊕ new)` into a staged update of their parity chunks.
//!
//! Every parity holder must receive each changed byte of its rows, so its in-link carries
//! `k·δ` however the records travel; sent directly, that is the busiest link and the epoch
//! takes one pass over it. Relaying through the first parity holder (as the encode's
//! pipeline does) would spare a data member's out-link `(m−1)·δ`, which is never the busiest,
//! and add a second pass behind the first: measured on 16 namespaced nodes at 100 Mbit/s,
//! a 2 % update took 1.47 s relayed against 0.84 s sent directly (docs/PERFORMANCE.md).
//! (Fan-in has no tree to build over sparse records either.)
//!
//! Records travel in phases, one per parity index: phase `p` delivers to the holders of
//! parity `p`, over links of its own. Every sender of a phase ends each of its streams with
//! an empty message; no phase waits on another.
//!
//! A member plays the data role ([`DataRole`]), the parity role ([`ParityRole`]) or both
//! (rotated layout), at once. Store reads and the GF arithmetic run on blocking threads;
//! the async tasks only move messages, one batch at a time per stream, so a slow consumer
//! still pushes back on its producers.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use eckpt_codec::{Code, LinearMap};
use eckpt_daemon::worker;
use tokio::task::JoinHandle;

use super::links::{failure_of, Failure, LinkPlan, TaskLinks};
use super::{blocking, Agent};
use crate::chunk_crc::ChunkDifference;
use crate::parity_store::StagedUpdate;
use eckpt_cluster_api::msg::{TaskReport, UpdateTask};
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::exec::xor_into;
use eckpt_coding::geometry::Geometry;
use eckpt_coding::records::{parse_batch, push_record, RecordRef, BATCH};
use eckpt_store::XorBlock;

/// A stream of record batches to one peer.
type Out = worker::Sender<Vec<u8>>;

/// Runs this agent's part of an update: the roles it holds, at once (in the rotated layout
/// members send to each other, and both directions must drain), then stages the new parity.
pub async fn run(agent: Arc<Agent>, task: UpdateTask) -> Result<TaskReport, ClusterError> {
    let started = Instant::now();
    let (part, generator) = Part::new(agent, task)?;
    let mut links = part.open_links()?;
    let data = part
        .phases
        .holds_data()
        .then(|| tokio::spawn(DataRole::new(&part, &links).run()));
    let mut parity = match part.phases.holds_parity() {
        true => Some(ParityRole::start(&part, generator, &mut links).await?),
        false => None,
    };
    let mut report = TaskReport::default();
    if let Some(parity) = &mut parity {
        parity.drain().await?;
        report.bytes_received = parity.received.load(Ordering::Relaxed);
    }
    if let Some(data) = data {
        let (sent, crcs) = joined(data, "update sender").await??;
        report.bytes_sent += sent;
        report.crcs = crcs;
    }
    for l in links {
        l.finish().await?;
    }
    if let Some(parity) = parity {
        parity.stage().await?;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A spawned task's result, its panic or cancellation named after `what`.
async fn joined<T>(handle: JoinHandle<T>, what: &str) -> Result<T, ClusterError> {
    handle
        .await
        .map_err(|e| ClusterError::Internal(format!("{what}: {e}")))
}

/// This member's view of an update task.
struct Part {
    agent: Arc<Agent>,
    task: UpdateTask,
    me: usize,
    geometry: Geometry,
    phases: Phases,
}

impl Part {
    /// The member's position, the object's geometry and who talks to whom; and the code's
    /// generator matrix.
    fn new(agent: Arc<Agent>, task: UpdateTask) -> Result<(Part, Vec<u8>), ClusterError> {
        let me = task
            .participants
            .iter()
            .position(|p| p.name == agent.info.name)
            .ok_or_else(|| {
                ClusterError::Protocol(format!("{} is not in update task {}", agent.info.name, task.task))
            })?;
        let (k, m) = (task.group.k, task.group.m);
        let geometry = task.check()?;
        let generator = Code::new(task.coding.code, k, m)?.generator().to_vec();
        let phases = Phases::new(&geometry, me);
        let part = Part {
            agent,
            task,
            me,
            geometry,
            phases,
        };
        Ok((part, generator))
    }

    /// One set of links per phase.
    fn open_links(&self) -> Result<Vec<TaskLinks>, ClusterError> {
        let nodes: Vec<_> = self.task.participants.iter().cloned().map(Some).collect();
        (0..self.phases.count())
            .map(|p| {
                let plan = LinkPlan {
                    task: self.task.task,
                    phase: p as u32,
                    me: self.me,
                    nodes: &nodes,
                    send_to: &self.phases.send_to(p),
                    recv_from: &self.phases.recv_from(p),
                };
                TaskLinks::open(&self.agent, &plan)
            })
            .collect()
    }

    fn chunk(&self) -> usize {
        self.task.object.chunk as usize
    }
}

/// Who sends to and receives from whom in each phase (one per parity index), as seen by
/// member `me`: every data holder sends to the holders of parity `p` in phase `p`.
struct Phases {
    me: usize,
    data_holders: BTreeSet<usize>,
    /// `receivers[p]`: the holders of parity `p`.
    receivers: Vec<BTreeSet<usize>>,
}

impl Phases {
    fn new(geometry: &Geometry, me: usize) -> Phases {
        let (k, m) = (geometry.k(), geometry.m());
        Phases {
            me,
            data_holders: (0..k + m).filter(|&x| geometry.holds_data(x)).collect(),
            receivers: (0..m).map(|p| holders_of(geometry, p)).collect(),
        }
    }

    fn count(&self) -> usize {
        self.receivers.len()
    }

    fn others(&self, members: &BTreeSet<usize>) -> BTreeSet<usize> {
        members.iter().copied().filter(|&x| x != self.me).collect()
    }

    /// The members this one sends to in phase `p`.
    fn send_to(&self, p: usize) -> BTreeSet<usize> {
        match self.holds_data() {
            true => self.others(&self.receivers[p]),
            false => BTreeSet::new(),
        }
    }

    /// The members this one receives from in phase `p`.
    fn recv_from(&self, p: usize) -> BTreeSet<usize> {
        match self.receivers[p].contains(&self.me) {
            true => self.others(&self.data_holders),
            false => BTreeSet::new(),
        }
    }

    fn holds_data(&self) -> bool {
        self.data_holders.contains(&self.me)
    }

    fn holds_parity(&self) -> bool {
        self.receivers.iter().any(|r| r.contains(&self.me))
    }
}

/// Members holding parity `p` in some row (the assignment repeats within `members` rows).
fn holders_of(geometry: &Geometry, p: usize) -> BTreeSet<usize> {
    (0..geometry.rows().min(geometry.members() as u64))
        .map(|row| geometry.holder(row, geometry.k() + p))
        .collect()
}

/// One changed piece of a data shard, within one chunk.
struct Piece<'a> {
    /// The chunk of the member's shard.
    chunk: u64,
    row: u64,
    offset: u32,
    shard: u16,
    /// `old ⊕ new`.
    bytes: &'a [u8],
}

/// The data role: streams `old ⊕ new` of this member's changed blocks, as the store yields
/// them, to every parity holder of each piece's row.
struct DataRole {
    changes: Arc<Changes>,
    /// The stream to each parity holder, by phase (parity index) and member.
    outs: Arc<Outs>,
}

/// The streams of the data role, by phase (parity index) and member.
type Outs = BTreeMap<(usize, usize), Out>;

impl DataRole {
    fn new(part: &Part, links: &[TaskLinks]) -> DataRole {
        let outs = (0..part.phases.count())
            .flat_map(|p| {
                let to = part.phases.send_to(p);
                to.into_iter()
                    .filter_map(move |to| links[p].sender(to).map(|s| ((p, to), s)))
            })
            .collect();
        let changes = Changes {
            agent: part.agent.clone(),
            layout: part.task.layouts[part.me].clone(),
            epoch: part.task.epoch,
            geometry: part.geometry.clone(),
            me: part.me,
            chunk: part.chunk(),
            old_crcs: part.task.object.shards[part.me].crcs.clone(),
        };
        DataRole {
            changes: Arc::new(changes),
            outs: Arc::new(outs),
        }
    }

    /// Sends the changes, then ends every stream; the bytes sent and the CRCs of the changed
    /// chunks. The store is read on a blocking thread that hands each batch to its link as
    /// soon as it fills, so the first records travel while the rest are still being read.
    async fn run(self) -> Result<(u64, Vec<(u64, u32)>), ClusterError> {
        let (changes, outs) = (self.changes.clone(), self.outs.clone());
        let sent = blocking(move || changes.send(&outs)).await?;
        // Fault injection: records are on their way but no stream has ended.
        let agent = &self.changes.agent;
        eckpt_daemon::debug::pause_point_async(
            &agent.dir.debug(),
            eckpt_daemon::debug::Phase::MidEncode,
            &agent.info.name,
        )
        .await;
        for ((_, to), out) in self.outs.iter() {
            out.send(Vec::new()).await.map_err(|_| link_failed(*to))?;
        }
        Ok(sent)
    }
}

fn link_failed(to: usize) -> ClusterError {
    ClusterError::Link(format!("link to member {to} failed"))
}

/// Record batches being filled, one per stream, each handed to its link when it reaches
/// [`BATCH`] bytes (blocking while the link is [`super::links`]' queue depth behind).
struct Batches<'a> {
    outs: &'a Outs,
    open: BTreeMap<(usize, usize), Vec<u8>>,
    sent: u64,
}

impl<'a> Batches<'a> {
    fn new(outs: &'a Outs) -> Batches<'a> {
        Batches {
            outs,
            open: BTreeMap::new(),
            sent: 0,
        }
    }

    /// Adds `piece` to the batch of phase `p` for member `to`.
    fn push(&mut self, p: usize, to: usize, piece: &Piece) -> Result<(), ClusterError> {
        let batch = self.open.entry((p, to)).or_default();
        push_record(batch, piece.row, piece.offset, piece.shard, piece.bytes);
        if batch.len() >= BATCH {
            let full = std::mem::take(batch);
            self.send(p, to, full)?;
        }
        Ok(())
    }

    fn send(&mut self, p: usize, to: usize, batch: Vec<u8>) -> Result<(), ClusterError> {
        self.sent += batch.len() as u64;
        self.outs
            .get(&(p, to))
            .ok_or_else(|| ClusterError::Protocol(format!("no link to member {to}")))?
            .blocking_send(batch)
            .map_err(|_| link_failed(to))
    }

    /// Sends what the batches still hold; the bytes sent in all.
    fn finish(mut self) -> Result<u64, ClusterError> {
        for ((p, to), batch) in std::mem::take(&mut self.open) {
            if !batch.is_empty() {
                self.send(p, to, batch)?;
            }
        }
        Ok(self.sent)
    }
}

/// Where this member's changes are: its shard's layout at `epoch`, as member `me` of the
/// object's geometry.
struct Changes {
    agent: Arc<Agent>,
    layout: ShardLayout,
    epoch: u64,
    geometry: Geometry,
    me: usize,
    chunk: usize,
    /// The CRC-32C of each chunk of this member's shard at the base version (the
    /// coordinator's record).
    old_crcs: Vec<u32>,
}

impl Changes {
    /// Reads the `old ⊕ new` blocks of this member's ranks, cuts them into per-chunk pieces
    /// and sends each to the holder of every parity of its row (blocking: reads the store
    /// and waits on the links); the bytes sent and the CRCs of the changed chunks' new
    /// contents.
    fn send(&self, outs: &Outs) -> Result<(u64, Vec<(u64, u32)>), ClusterError> {
        let (k, m) = (self.geometry.k(), self.geometry.m());
        let mut batches = Batches::new(outs);
        let mut crcs = ChunkCrcs::new(self.chunk);
        for rank in self.layout.ranks() {
            self.agent.store.dirty_xor_each(rank, self.epoch, |block| {
                self.cut(rank, &block, |piece| {
                    crcs.add(piece.chunk, piece.offset as usize, piece.bytes);
                    (0..m).try_for_each(|p| batches.push(p, self.geometry.holder(piece.row, k + p), &piece))
                })
            })?;
        }
        Ok((batches.finish()?, crcs.finish(&self.old_crcs, self.me)?))
    }

    /// Cuts one changed block into pieces, one per chunk it spans.
    fn cut(
        &self,
        rank: u32,
        block: &XorBlock,
        mut each: impl FnMut(Piece) -> Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        let (geometry, me, chunk) = (&self.geometry, self.me, self.chunk);
        let extent = self.layout.extent(rank, &block.item).ok_or_else(|| {
            ClusterError::Protocol(format!("rank {rank} item {:?} is not in the layout", block.item))
        })?;
        let mut at = extent.offset + block.index * u64::from(block.block_size);
        let mut rest: &[u8] = &block.bytes;
        while !rest.is_empty() {
            let q = at / chunk as u64;
            let offset = (at % chunk as u64) as usize;
            let n = rest.len().min(chunk - offset);
            let row = geometry.data_row(me, q);
            each(Piece {
                chunk: q,
                row,
                offset: offset as u32,
                shard: geometry.shard_at(row, me) as u16,
                bytes: &rest[..n],
            })?;
            rest = &rest[n..];
            at += n as u64;
        }
        Ok(())
    }
}

/// The CRC-32C of each changed chunk's new contents, from the changes alone (moved by
/// linearity, [`ChunkDifference`]). Reading every touched chunk back instead cost more than
/// the changes themselves (the MAT pattern touches 28 % of the chunks with 2 % of the
/// pages). The pieces of a chunk come one after another: they are gathered in one chunk of
/// scratch and its move taken when another chunk's piece comes.
struct ChunkCrcs {
    difference: ChunkDifference,
    /// The chunk gathered in `difference`.
    gathering: Option<u64>,
    /// Each changed chunk's move so far.
    moves: BTreeMap<u64, u32>,
}

impl ChunkCrcs {
    fn new(chunk: usize) -> ChunkCrcs {
        ChunkCrcs {
            difference: ChunkDifference::new(chunk),
            gathering: None,
            moves: BTreeMap::new(),
        }
    }

    /// Notes that `old ⊕ new` of chunk `chunk`'s bytes from `offset` is `bytes`.
    fn add(&mut self, chunk: u64, offset: usize, bytes: &[u8]) {
        if self.gathering != Some(chunk) {
            self.take_move();
            self.gathering = Some(chunk);
        }
        xor_into(
            &mut self.difference.bytes_mut()[offset..offset + bytes.len()],
            bytes,
        );
    }

    fn take_move(&mut self) {
        if let Some(chunk) = self.gathering.take() {
            *self.moves.entry(chunk).or_default() ^= self.difference.take_move();
        }
    }

    /// The new CRC of every changed chunk of member `me`, whose CRCs were `old`.
    fn finish(mut self, old: &[u32], me: usize) -> Result<Vec<(u64, u32)>, ClusterError> {
        self.take_move();
        self.moves
            .into_iter()
            .map(|(chunk, moved)| {
                let old = old.get(chunk as usize).ok_or_else(|| {
                    ClusterError::Protocol(format!("chunk {chunk} of member {me} has no recorded CRC"))
                })?;
                Ok((chunk, old ^ moved))
            })
            .collect()
    }
}

/// Staged new contents of this member's changed parity chunks, and what it takes to fold
/// records into them. Used on blocking threads only: it reads parity and multiplies.
struct Stage {
    staged: StagedUpdate,
    geometry: Geometry,
    generator: Vec<u8>,
    me: usize,
    chunk: usize,
    maps: BTreeMap<u8, LinearMap>,
}

impl Stage {
    /// Folds a batch of phase `p` into the staged chunks.
    fn fold(&mut self, p: usize, batch: &[u8]) -> Result<(), ClusterError> {
        let k = self.geometry.k();
        for RecordRef {
            row,
            offset,
            shard,
            bytes,
        } in parse_batch(batch, self.chunk)?
        {
            if row >= self.geometry.rows()
                || self.geometry.holder(row, k + p) != self.me
                || shard as usize >= k
            {
                return Err(ClusterError::Protocol(format!(
                    "update record for row {row} shard {shard} sent to the wrong member"
                )));
            }
            let pc = self
                .geometry
                .parity_chunk(row, self.me)
                .ok_or_else(|| ClusterError::Protocol(format!("no parity of row {row} here")))?;
            let coefficient = self.generator[(k + p) * k + shard as usize];
            self.add(pc, offset, coefficient, bytes)?;
        }
        Ok(())
    }

    /// `parity_chunk[offset..] ^= coefficient · delta`, in the staged update.
    fn add(
        &mut self,
        parity_chunk: u64,
        offset: u32,
        coefficient: u8,
        delta: &[u8],
    ) -> Result<(), ClusterError> {
        let map = match self.maps.entry(coefficient) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(LinearMap::new(1, 1, vec![coefficient])?),
        };
        self.staged
            .modify(parity_chunk, offset as usize, delta.len(), |target| {
                Ok(map.accumulate(0, delta, &mut [target])?)
            })
    }
}

/// The parity role: a reader per incoming stream (every phase's at once) folds what it
/// receives into the [`Stage`].
struct ParityRole {
    stage: Arc<Mutex<Stage>>,
    /// Bytes received over every phase.
    received: Arc<AtomicU64>,
    readers: Vec<JoinHandle<Result<(), ClusterError>>>,
}

impl ParityRole {
    /// Opens the parity to update and starts a reader on every incoming stream.
    async fn start(
        part: &Part,
        generator: Vec<u8>,
        links: &mut [TaskLinks],
    ) -> Result<ParityRole, ClusterError> {
        let (coded, id, epoch) = (part.agent.coded.clone(), part.task.object.id, part.task.epoch);
        let parent = part.task.object.version;
        let staged = blocking(move || coded.stage(id, parent, epoch)).await?;
        let stage = Arc::new(Mutex::new(Stage {
            staged,
            geometry: part.geometry.clone(),
            generator,
            me: part.me,
            chunk: part.chunk(),
            maps: BTreeMap::new(),
        }));
        let received: Arc<AtomicU64> = Arc::default();
        let mut readers = Vec::new();
        for (p, phase_links) in links.iter_mut().enumerate() {
            for from in part.phases.recv_from(p) {
                let (rx, failure) = receiver(phase_links, part.task.task, p, from)?;
                let stream = StreamIn {
                    phase: p,
                    // In range: `TaskLinks::open` opened the link only for a participant of
                    // the task.
                    name: part.task.participants[from].name.clone(),
                    rx,
                    failure,
                    stage: stage.clone(),
                    received: received.clone(),
                };
                readers.push(tokio::spawn(stream.run()));
            }
        }
        Ok(ParityRole {
            stage,
            received,
            readers,
        })
    }

    /// Waits until every incoming stream is drained.
    async fn drain(&mut self) -> Result<(), ClusterError> {
        for reader in self.readers.drain(..) {
            joined(reader, "update reader").await??;
        }
        Ok(())
    }

    /// Stages the new parity chunks for the commit.
    async fn stage(self) -> Result<(), ClusterError> {
        let stage = Arc::try_unwrap(self.stage)
            .map_err(|_| ClusterError::Internal("update stage still shared".into()))?
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        blocking(move || stage.staged.seal()).await
    }
}

/// The receiving half of the link from member `from` in phase `p` of update `task`. The
/// links were opened from the same [`Phases`] the parity role reads them by, so each sender
/// has one: a miss is a bug of this agent (an internal error), not a panic.
fn receiver(
    links: &mut TaskLinks,
    task: u64,
    p: usize,
    from: usize,
) -> Result<(worker::Receiver<Vec<u8>>, Failure), ClusterError> {
    links.take_receiver(from).ok_or_else(|| {
        ClusterError::Internal(format!(
            "update task {task}: no link from member {from} in phase {p} (taken twice, or never opened)"
        ))
    })
}

/// One incoming stream of the parity role: phase `phase`'s records from member `name`,
/// folded batch by batch on a blocking thread.
struct StreamIn {
    phase: usize,
    name: String,
    rx: worker::Receiver<Vec<u8>>,
    failure: Failure,
    stage: Arc<Mutex<Stage>>,
    received: Arc<AtomicU64>,
}

impl StreamIn {
    /// Folds every batch until the sender ends the stream.
    async fn run(mut self) -> Result<(), ClusterError> {
        while let Some(batch) = self.next_batch().await? {
            self.received.fetch_add(batch.len() as u64, Ordering::Relaxed);
            self.fold(batch).await?;
        }
        Ok(())
    }

    /// The next batch; `None` at the sender's end of stream, an error if the link broke.
    async fn next_batch(&mut self) -> Result<Option<Vec<u8>>, ClusterError> {
        match self.rx.recv().await {
            Some(batch) => Ok((!batch.is_empty()).then_some(batch)),
            None => Err(failure_of(&self.failure, &self.name, "stream")),
        }
    }

    async fn fold(&self, batch: Vec<u8>) -> Result<(), ClusterError> {
        let (stage, p) = (self.stage.clone(), self.phase);
        blocking(move || eckpt_daemon::crash_only::lock(&stage).fold(p, &batch)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_sender_without_a_link_is_an_internal_error_not_a_panic() {
        let mut links = TaskLinks::none();
        let e = receiver(&mut links, 3, 1, 2).unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Internal, "{e}");
        assert!(e.to_string().contains("no link from member 2 in phase 1"), "{e}");
    }

    proptest! {
        /// The CRCs taken from the changes alone are the CRCs of the changed chunks, however
        /// the pieces of different chunks interleave.
        #[test]
        fn chunk_crcs_follow_their_changes(
            chunk in 1usize..1500,
            old in proptest::collection::vec(any::<u8>(), 3 * 1500),
            changes in proptest::collection::vec(
                (0u64..3, any::<prop::sample::Index>(), proptest::collection::vec(any::<u8>(), 1..300)),
                0..10,
            ),
        ) {
            let old = &old[..3 * chunk];
            let mut new = old.to_vec();
            let mut crcs = ChunkCrcs::new(chunk);
            for (q, at, bytes) in &changes {
                let at = at.index(chunk);
                let bytes = &bytes[..bytes.len().min(chunk - at)];
                let start = *q as usize * chunk + at;
                xor_into(&mut new[start..start + bytes.len()], bytes);
                crcs.add(*q, at, bytes);
            }
            let old_crcs: Vec<u32> = old.chunks(chunk).map(crc32c::crc32c).collect();
            let got = crcs.finish(&old_crcs, 0).unwrap();
            let changed: BTreeSet<u64> = changes.iter().map(|c| c.0).collect();
            prop_assert_eq!(got.iter().map(|c| c.0).collect::<BTreeSet<_>>(), changed);
            for (q, crc) in got {
                prop_assert_eq!(crc, crc32c::crc32c(&new[q as usize * chunk..][..chunk]));
            }
        }
    }
}
