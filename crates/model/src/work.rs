//! The work of one group's coding task or update, member by member: bytes sent and
//! received, messages, GF arithmetic, store reads and writes. Encode and decode are counted
//! by walking the very steps the agents execute ([`eckpt_coding::plan::actions`]) over one
//! cycle of rows of the object's [`Geometry`] (the assignment of shards to members repeats
//! every cycle); an update follows the agents' record routing (`agent/update.rs`): each
//! changed piece goes from its data member to every parity holder of its row, whatever the
//! topology.

use std::collections::BTreeSet;

use eckpt_coding::geometry::Geometry;
use eckpt_coding::plan::{actions, Action, Input, Output, Payload, RowPlan, Source};
use eckpt_coding::records::{BATCH, RECORD_HEADER};
use eckpt_coding::{Layout, Topology};

use crate::scenario::{GroupShape, BLOCK};

/// What one participant does in a task, in bytes and messages.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeWork {
    /// Payload bytes sent to other participants.
    pub sent: f64,
    /// Payload bytes received.
    pub received: f64,
    /// Messages sent plus messages received.
    pub messages: f64,
    /// Bytes of GF(2^8) multiply-accumulate output computed.
    pub gf: f64,
    /// Bytes read from the node-local store (data chunks, parity chunks, changed blocks).
    pub read: f64,
    /// Bytes written to the node-local store (parity, staged updates, rebuilt shards).
    pub written: f64,
    /// Bytes of rank images looked at for changes (a checkpoint).
    pub scanned: f64,
    /// Bytes a checkpoint writes into the store.
    pub stored: f64,
    /// Stored blocks of the epochs the node opens (each opening reads their manifests).
    pub opened_blocks: f64,
    /// Rounds of the task the node takes part in (connections, start, report).
    pub rounds: f64,
}

impl NodeWork {
    fn add_scaled(&mut self, other: &NodeWork, scale: f64) {
        self.sent += other.sent * scale;
        self.received += other.received * scale;
        self.messages += other.messages * scale;
        self.gf += other.gf * scale;
        self.read += other.read * scale;
        self.written += other.written * scale;
        self.scanned += other.scanned * scale;
        self.stored += other.stored * scale;
        self.opened_blocks += other.opened_blocks * scale;
        self.rounds += other.rounds * scale;
    }
}

/// One group's task: what each participant does, in three stretches that follow each
/// other (`before` the transfers start, the overlapped transfers and arithmetic, `after`
/// they end), and how deep a row's dependency chain is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskWork {
    /// Work done before anything is sent (a stripe's members writing their blob), by
    /// participant.
    pub before: Vec<NodeWork>,
    /// Work overlapped with the transfers, by participant.
    pub during: Vec<NodeWork>,
    /// Work done after everything arrived (an update's parity holders staging), by
    /// participant.
    pub after: Vec<NodeWork>,
    /// Hops from a row's first source to its last output: how many transfers the first
    /// row waits for before the pipeline is full.
    pub depth: usize,
    /// Bytes of the largest message on those hops.
    pub hop_bytes: f64,
    /// What a node does with a hop's message before it can pass it on (one row of a coding
    /// task).
    pub hop_work: NodeWork,
}

impl TaskWork {
    fn new(participants: usize) -> TaskWork {
        TaskWork {
            before: vec![NodeWork::default(); participants],
            during: vec![NodeWork::default(); participants],
            after: vec![NodeWork::default(); participants],
            depth: 0,
            hop_bytes: 0.0,
            hop_work: NodeWork::default(),
        }
    }

    /// The largest number of bytes any participant sends or receives.
    pub fn busiest_link(&self) -> f64 {
        self.during
            .iter()
            .map(|w| w.sent.max(w.received))
            .fold(0.0, f64::max)
    }

    /// Bytes all participants send.
    pub fn total_sent(&self) -> f64 {
        self.during.iter().map(|w| w.sent).sum()
    }
}

/// Rows of one cycle of `g` (after which the assignment of shards to members repeats:
/// one row dedicated, `k + m` rotated) and how many cycles the object has.
fn cycle(layout: Layout, g: &Geometry) -> (u64, f64) {
    let per_cycle = Geometry::new(layout, g.k(), g.m(), 1).rows();
    (per_cycle, (g.rows() / per_cycle) as f64)
}

/// Adds the steps of one row to `work` (participant-indexed), `c` bytes per chunk; returns
/// the row's depth and largest hop message.
fn count_row(plan: &RowPlan, topology: Topology, c: f64, work: &mut [NodeWork]) -> (usize, f64) {
    let mut hop = vec![0usize; work.len()];
    let mut read: BTreeSet<usize> = BTreeSet::new();
    let mut largest: f64 = 0.0;
    for step in actions(plan, topology) {
        match step {
            Action::Contribute { node, outputs, .. } => {
                if read.insert(node) {
                    work[node].read += c;
                }
                work[node].gf += outputs.len() as f64 * c;
            }
            Action::Send {
                from,
                to,
                outputs,
                payload,
            } => {
                let bytes = match payload {
                    Payload::Raw(_) => {
                        if read.insert(from) {
                            work[from].read += c;
                        }
                        work[to].gf += outputs.len() as f64 * c;
                        c
                    }
                    Payload::Partial | Payload::Deliver(_) => outputs.len() as f64 * c,
                };
                work[from].sent += bytes;
                work[from].messages += 1.0;
                work[to].received += bytes;
                work[to].messages += 1.0;
                hop[to] = hop[to].max(hop[from] + 1);
                largest = largest.max(bytes);
            }
            Action::Keep { .. } => {}
            Action::Store { node, .. } => work[node].written += c,
        }
    }
    let depth = plan.outputs.iter().map(|o| hop[o.node]).max().unwrap_or(0);
    (depth, largest)
}

/// Walks one cycle of rows, `row_plan` giving each row's plan (or none), and scales to the
/// whole object.
fn count_task(
    layout: Layout,
    g: &Geometry,
    participants: usize,
    topology: Topology,
    chunk: u64,
    mut row_plan: impl FnMut(u64) -> Option<RowPlan>,
) -> TaskWork {
    let mut task = TaskWork::new(participants);
    let (rows, cycles) = cycle(layout, g);
    if g.rows() == 0 {
        return task;
    }
    let mut one = vec![NodeWork::default(); participants];
    for row in 0..rows {
        if let Some(plan) = row_plan(row) {
            let (depth, largest) = count_row(&plan, topology, chunk as f64, &mut one);
            task.depth = task.depth.max(depth);
            task.hop_bytes = task.hop_bytes.max(largest);
        }
    }
    for (w, o) in task.during.iter_mut().zip(&one) {
        w.add_scaled(o, cycles);
    }
    if let Some(busiest) = one.iter().max_by(|a, b| a.sent.total_cmp(&b.sent)) {
        task.hop_work.add_scaled(busiest, 1.0 / rows as f64);
    }
    task
}

/// The geometry of an object whose longest data shard is `shard_bytes`, cut in `chunk`s.
pub fn geometry(layout: Layout, shape: GroupShape, shard_bytes: u64, chunk: u64) -> Geometry {
    Geometry::new(layout, shape.k, shape.m, shard_bytes.div_ceil(chunk.max(1)))
}

/// A full encode: members `0..k+m` are the participants.
pub fn encode(
    layout: Layout,
    topology: Topology,
    shape: GroupShape,
    shard_bytes: u64,
    chunk: u64,
) -> TaskWork {
    let g = geometry(layout, shape, shard_bytes, chunk);
    let (k, m) = (shape.k, shape.m);
    count_task(layout, &g, k + m, topology, chunk, |row| {
        Some(RowPlan {
            row,
            sources: (0..k)
                .map(|l| Source {
                    node: g.holder(row, l),
                    input: Input::Data(0),
                })
                .collect(),
            outputs: (k..k + m)
                .map(|s| Output {
                    node: g.holder(row, s),
                    stream: g.holder(row, s),
                    chunk: 0,
                })
                .collect(),
            coef: vec![1; k * m],
        })
    })
}

/// A decode of the data of `lost` members (positions, at most `m`), each rebuilt at a
/// participant of its own after the group's members (a spare): participants `0..k+m` are
/// the members, `k+m+i` the target of `lost[i]`. Survivors are the first `k` shards of a
/// row that are not erased, as the codec's decoder picks them.
pub fn decode(
    layout: Layout,
    topology: Topology,
    shape: GroupShape,
    lost: &[usize],
    shard_bytes: u64,
    chunk: u64,
) -> TaskWork {
    let g = geometry(layout, shape, shard_bytes, chunk);
    let (k, n) = (shape.k, shape.members());
    count_task(layout, &g, n + lost.len(), topology, chunk, |row| {
        let erased: Vec<usize> = lost.iter().map(|&x| g.shard_at(row, x)).collect();
        let outputs: Vec<Output> = lost
            .iter()
            .enumerate()
            .filter(|(_, &x)| g.shard_at(row, x) < k)
            .map(|(i, &x)| Output {
                node: n + i,
                stream: x,
                chunk: 0,
            })
            .collect();
        if outputs.is_empty() {
            return None;
        }
        let sources: Vec<Source> = (0..n)
            .filter(|s| !erased.contains(s))
            .take(k)
            .map(|s| Source {
                node: g.holder(row, s),
                input: if s < k { Input::Data(0) } else { Input::Parity(0) },
            })
            .collect();
        let coef = vec![1; outputs.len() * sources.len()];
        Some(RowPlan {
            row,
            sources,
            outputs,
            coef,
        })
    })
}

/// Probability that a span of `bytes` holds at least one of the changed pages, when a
/// fraction `dirty` of the pages changed, scattered.
pub fn touched(bytes: u64, dirty: f64) -> f64 {
    let pages = bytes.div_ceil(BLOCK) as f64;
    1.0 - (1.0 - dirty).powf(pages)
}

/// An update of the parity after a fraction `dirty` of every data member's pages changed:
/// each changed page travels as a record (`RECORD_HEADER` + the page's `old ⊕ new`) to
/// every parity holder of its row. Data members read old and new of each changed page and
/// take the new CRC of every touched chunk from its changes (one checksum pass over the
/// chunk, no store read), streaming records as they go; parity holders fold the records
/// into their changed bytes while they arrive, and at the end stage those bytes' new
/// contents (a checksum pass over each touched chunk, the changed bytes read from the fold
/// and from the old parity, and written). Nothing is relayed, so no pipeline fills: every
/// stream starts at once.
pub fn update(layout: Layout, shape: GroupShape, shard_bytes: u64, chunk: u64, dirty: f64) -> TaskWork {
    let g = geometry(layout, shape, shard_bytes, chunk);
    let (k, m, n) = (shape.k, shape.m, shape.members());
    let mut task = TaskWork::new(n);
    if g.rows() == 0 {
        return task;
    }
    let c = chunk as f64;
    let changed = c * dirty;
    let record = changed + RECORD_HEADER as f64 * (c / BLOCK as f64) * dirty;
    let touched_data = touched(chunk, dirty);
    let touched_row = touched(chunk * k as u64, dirty);
    // The parity bytes a row's changes reach: a page's worth wherever any of the k changed.
    let parity_changed = c * touched(BLOCK * k as u64, dirty);
    let (rows, cycles) = cycle(layout, &g);
    let mut streams: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut during = vec![NodeWork::default(); n];
    let mut after = vec![NodeWork::default(); n];
    for row in 0..rows {
        for l in 0..k {
            let from = g.holder(row, l);
            during[from].read += 2.0 * changed + touched_data * c;
            for p in 0..m {
                let to = g.holder(row, k + p);
                during[from].sent += record;
                during[to].received += record;
                streams.insert((from, to));
            }
        }
        for p in 0..m {
            let h = g.holder(row, k + p);
            during[h].gf += k as f64 * changed;
            during[h].read += k as f64 * changed;
            during[h].written += k as f64 * changed;
            after[h].read += touched_row * c + 2.0 * parity_changed;
            after[h].written += parity_changed;
        }
    }
    for w in during.iter_mut().chain(&mut after) {
        *w = {
            let mut s = NodeWork::default();
            s.add_scaled(w, cycles);
            s
        };
    }
    // Records go in batches of about `BATCH` bytes; each stream ends with an empty message.
    for w in &mut during {
        w.messages = (w.sent + w.received) / BATCH as f64;
    }
    for &(from, to) in &streams {
        during[from].messages += 1.0;
        during[to].messages += 1.0;
    }
    task.during = during;
    task.after = after;
    task
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_codec::{Code, CodeKind};
    use eckpt_coding::exec::{run_participant, ExecOptions};
    use eckpt_coding::plan::{CodingPlan, Work};

    const MIB: u64 = 1 << 20;

    fn shape(k: usize, m: usize) -> GroupShape {
        GroupShape { k, m }
    }

    /// Bytes each participant sends when the coding crate's executor really runs the task
    /// (over channels, as in its own tests).
    fn executed_sent(
        layout: Layout,
        topology: Topology,
        k: usize,
        m: usize,
        chunks: u64,
        c: usize,
    ) -> Vec<u64> {
        use std::sync::mpsc;
        let n = k + m;
        let g = Geometry::new(layout, k, m, chunks);
        let code = Code::new(CodeKind::Cauchy, k, m).unwrap();
        let mut txs: Vec<Vec<Option<mpsc::Sender<Vec<u8>>>>> = vec![vec![None; n]; n];
        let mut rxs: Vec<Vec<Option<mpsc::Receiver<Vec<u8>>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for a in 0..n {
            for b in 0..n {
                let (tx, rx) = mpsc::channel();
                txs[a][b] = Some(tx);
                rxs[b][a] = Some(rx);
            }
        }
        struct L(
            Vec<Option<mpsc::Sender<Vec<u8>>>>,
            Vec<Option<mpsc::Receiver<Vec<u8>>>>,
        );
        impl eckpt_coding::exec::Links<eckpt_coding::CodingError> for L {
            fn send(&mut self, to: usize, m: Vec<u8>) -> Result<(), eckpt_coding::CodingError> {
                self.0[to].as_ref().unwrap().send(m).unwrap();
                Ok(())
            }
            fn recv(&mut self, from: usize) -> Result<Vec<u8>, eckpt_coding::CodingError> {
                Ok(self.1[from].as_ref().unwrap().recv().unwrap())
            }
        }
        struct C;
        impl eckpt_coding::exec::Chunks<eckpt_coding::CodingError> for C {
            fn read(&mut self, _: Input, buf: &mut [u8]) -> Result<(), eckpt_coding::CodingError> {
                buf.fill(7);
                Ok(())
            }
            fn write(&mut self, _: &Output, _: &[u8]) -> Result<(), eckpt_coding::CodingError> {
                Ok(())
            }
        }
        let handles: Vec<_> = (0..n)
            .map(|me| {
                let links = L(std::mem::take(&mut txs[me]), std::mem::take(&mut rxs[me]));
                let (g, code) = (g.clone(), code.clone());
                std::thread::spawn(move || {
                    let mut links = links;
                    let members = (0..n).map(Some).collect();
                    let mut plan = CodingPlan::new(g, code, members, Work::Encode).unwrap();
                    run_participant(
                        me,
                        &mut plan,
                        topology,
                        ExecOptions { chunk: c, threads: 1 },
                        &mut links,
                        &mut C,
                        &mut |_, _| {},
                    )
                    .unwrap()
                    .bytes_sent
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn counted_traffic_is_what_the_executor_sends() {
        for layout in [Layout::Dedicated, Layout::Rotated] {
            for topology in Topology::ALL.iter().copied() {
                for (k, m) in [(2, 1), (4, 2), (5, 3)] {
                    let (chunks, c) = (3 * k as u64, 512);
                    let counted = encode(layout, topology, shape(k, m), chunks * c as u64, c as u64);
                    let sent: Vec<u64> = counted.during.iter().map(|w| w.sent as u64).collect();
                    assert_eq!(
                        sent,
                        executed_sent(layout, topology, k, m, chunks, c),
                        "{layout} {topology} {k}+{m}"
                    );
                }
            }
        }
    }

    /// The closed forms of docs/REPRODUCTION.md: the busiest link of a full encode carries
    /// `m·D` (pipeline, ring dedicated), `2m·D` (fan-in, k ≥ 3), `max(k, m)·D` (broadcast,
    /// dedicated), `m·D` (rotated pipeline, fan-in, broadcast) and
    /// `((k−1)·m + m(m+1)/2)/k · D` (rotated ring).
    #[test]
    fn busiest_links_have_closed_forms() {
        for (k, m) in [(3, 1), (4, 2), (6, 3), (10, 4), (30, 2)] {
            let d = k as u64 * 4 * MIB;
            let (kf, mf, df) = (k as f64, m as f64, d as f64);
            let busiest = |l, t| encode(l, t, shape(k, m), d, MIB).busiest_link() / df;
            use Layout::*;
            use Topology::*;
            assert_eq!(busiest(Dedicated, Pipeline), mf);
            assert_eq!(busiest(Dedicated, Ring), mf);
            assert_eq!(busiest(Dedicated, Fanin), 2.0 * mf);
            assert_eq!(busiest(Dedicated, Broadcast), kf.max(mf));
            assert_eq!(busiest(Rotated, Pipeline), mf);
            assert_eq!(busiest(Rotated, Fanin), mf);
            assert_eq!(busiest(Rotated, Broadcast), mf);
            let ring = ((kf - 1.0) * mf + mf * (mf + 1.0) / 2.0) / kf;
            assert!((busiest(Rotated, Ring) - ring).abs() < 1e-9, "{k}+{m}");
        }
    }

    #[test]
    fn pipeline_depth_grows_with_k_and_fanin_with_its_log() {
        let depth = |t, k| encode(Layout::Dedicated, t, shape(k, 2), 8 * MIB, MIB).depth;
        assert_eq!(depth(Topology::Pipeline, 4), 4);
        assert_eq!(depth(Topology::Pipeline, 30), 30);
        assert_eq!(depth(Topology::Ring, 4), 5);
        assert_eq!(depth(Topology::Broadcast, 30), 1);
        assert_eq!(
            depth(Topology::Fanin, 30),
            5,
            "4 tree levels below the root, then delivery"
        );
    }

    #[test]
    fn decode_of_one_member_moves_its_shard_once_per_hop() {
        let d = 16 * MIB;
        let w = decode(Layout::Dedicated, Topology::Pipeline, shape(4, 2), &[1], d, MIB);
        assert_eq!(w.during[6].received, d as f64, "the spare receives the shard");
        assert_eq!(w.during[1], NodeWork::default(), "the lost member does nothing");
        assert_eq!(w.busiest_link(), d as f64);
        let parity_only = decode(Layout::Dedicated, Topology::Pipeline, shape(4, 2), &[5], d, MIB);
        assert_eq!(
            parity_only.total_sent(),
            0.0,
            "no data of a parity member to decode"
        );
    }

    #[test]
    fn update_sends_changes_to_every_holder_which_receives_k_times_as_much() {
        let d = 64 * MIB;
        let dirty = 0.1;
        let w = update(Layout::Dedicated, shape(4, 2), d, MIB, dirty);
        let changed = d as f64 * dirty;
        let record = changed * (1.0 + RECORD_HEADER as f64 / BLOCK as f64);
        assert!(
            (w.during[0].sent - 2.0 * record).abs() < 1.0,
            "to each of m holders"
        );
        for holder in [4, 5] {
            assert!(
                (w.during[holder].received - 4.0 * record).abs() < 1.0,
                "every holder receives k"
            );
            assert_eq!(w.during[holder].sent, 0.0, "and relays nothing");
        }
        assert_eq!(w.busiest_link(), w.during[4].received);
        assert_eq!(w.depth, 0, "no relay hop");
        let r = update(Layout::Rotated, shape(4, 2), d, MIB, dirty);
        for node in &r.during {
            assert!(
                (node.sent - 2.0 * record).abs() < 1.0,
                "rotated: m·δ on every link"
            );
        }
    }

    #[test]
    fn touched_chunks_grow_with_chunk_and_dirt() {
        assert_eq!(touched(MIB, 0.0), 0.0);
        assert_eq!(touched(MIB, 1.0), 1.0);
        assert!(touched(MIB, 0.001) > touched(64 << 10, 0.001));
        assert!((touched(4096, 0.25) - 0.25).abs() < 1e-12);
    }
}
