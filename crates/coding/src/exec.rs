//! Runs one participant's part of a coding task: the [`actions`] of every row that involve
//! it, in order, over abstract links and chunk storage — real sockets and files in the
//! agent, channels and vectors in tests, the same code either way.
//!
//! Buffers move rather than copy where the topology allows: a pipeline hop receives the
//! partial sums, adds its product in place and sends the same buffer on.
//!
//! The links and chunks report failures in the caller's own error type `E` (a lost node, a
//! file error); the executor's own failures (a message of the wrong size, a codec refusal)
//! become `E` through `From<CodingError>`.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, VecDeque};

use eckpt_codec::{CodecError, LinearMap};

use crate::config::Topology;
use crate::plan::{actions, Action, Buf, CodingPlan, Input, Output, Payload, RowPlan};
use crate::CodingError;

/// Messages to and from other participants, in order per peer.
pub trait Links<E> {
    /// Queues `message` for participant `to`.
    fn send(&mut self, to: usize, message: Vec<u8>) -> Result<(), E>;
    /// The next message from participant `from`.
    fn recv(&mut self, from: usize) -> Result<Vec<u8>, E>;
    /// Messages a link holds between a sender's [`Links::send`] and the receiver's
    /// [`Links::recv`] before the sender blocks (at least). A participant receives outputs
    /// delivered to it up to this many rows late (at most [`MAX_LOOKAHEAD`]), so that it
    /// can go on sending the next rows meanwhile. 0: every row in lockstep.
    fn capacity(&self) -> usize {
        0
    }
    /// A buffer the links have finished with, for the participant to reuse (its contents
    /// and length are whatever it last held); `None`: allocate one.
    fn take_buffer(&mut self) -> Option<Vec<u8>> {
        None
    }
    /// A buffer the participant has finished with, for the links to receive into. Buffers
    /// passed around instead of freed spare a chunk-sized allocation per message, and with
    /// it the page faults and zeroing of fresh memory — as much CPU as the transfer itself.
    fn give_buffer(&mut self, _buffer: Vec<u8>) {}
}

/// Spare buffers a participant keeps for itself; more go back to the links.
const KEPT_SPARES: usize = 4;

/// The most rows a participant runs ahead of the outputs delivered to it.
pub const MAX_LOOKAHEAD: usize = 8;

/// The participant's local chunks: what it reads as a source and where outputs go.
pub trait Chunks<E> {
    /// Fills `buf` (one chunk) with the local input chunk.
    fn read(&mut self, input: Input, buf: &mut [u8]) -> Result<(), E>;
    /// Writes one finished output chunk.
    fn write(&mut self, output: &Output, data: &[u8]) -> Result<(), E>;
}

/// What one participant did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Rows this participant took part in.
    pub rows: u64,
    /// Chunks read locally.
    pub chunks_read: u64,
    /// Chunks written to output streams.
    pub chunks_written: u64,
    /// Payload bytes sent to other participants.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
}

/// Multiplication by a column of coefficients, with the tables of each distinct column
/// built once per task, each chunk's byte range cut over `threads` threads.
struct Columns {
    maps: HashMap<Vec<u8>, LinearMap>,
    threads: usize,
}

impl Columns {
    fn map(&mut self, column: Vec<u8>) -> Result<&LinearMap, CodecError> {
        Ok(match self.maps.entry(column) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let map = LinearMap::new(e.key().len(), 1, e.key().clone())?;
                e.insert(map)
            }
        })
    }

    /// `outs[i] (^)= column[i] · input`: overwritten when `overwrite`, else added.
    fn multiply(
        &mut self,
        column: Vec<u8>,
        input: &[u8],
        mut outs: Vec<&mut [u8]>,
        overwrite: bool,
    ) -> Result<(), CodingError> {
        let threads = self.threads;
        let map = self.map(column)?;
        if overwrite {
            map.apply_threaded(&[input], &mut outs, threads)?;
        } else {
            map.accumulate_threaded(0, input, &mut outs, threads)?;
        }
        Ok(())
    }
}

/// `dst ^= src` over their common length, eight bytes at a time: adding in GF(2^8), and
/// applying an `old ⊕ new` difference.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
        let v = u64::from_ne_bytes(d[..].try_into().expect("8 bytes"))
            ^ u64::from_ne_bytes(s.try_into().expect("8 bytes"));
        d.copy_from_slice(&v.to_ne_bytes());
    }
    let tail = dst.len() - dst.len() % 8;
    for (d, s) in dst[tail..].iter_mut().zip(&src[tail..]) {
        *d ^= s;
    }
}

/// One participant's buffers for the row in progress. `None` stands for all zero, so a
/// buffer received whole can simply be adopted.
#[derive(Default)]
struct RowState {
    acc: Option<Vec<u8>>,
    out: Option<Vec<u8>>,
    input: Option<Vec<u8>>,
}

impl RowState {
    fn slot(&mut self, which: Buf) -> &mut Option<Vec<u8>> {
        match which {
            Buf::Acc => &mut self.acc,
            Buf::Out => &mut self.out,
        }
    }
}

/// The `outputs` chunks of a row buffer, in that order.
fn output_slices<'a>(buf: &'a mut [u8], chunk: usize, outputs: &[usize]) -> Vec<&'a mut [u8]> {
    let mut parts: Vec<Option<&mut [u8]>> = buf.chunks_mut(chunk).map(Some).collect();
    outputs
        .iter()
        .map(|&o| parts[o].take().expect("outputs are distinct"))
        .collect()
}

/// Whether `outputs` is every output of the row in order: the buffer then moves whole.
fn is_whole(outputs: &[usize], all: usize) -> bool {
    outputs.len() == all && outputs.iter().enumerate().all(|(i, &o)| i == o)
}

/// How a participant works through its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecOptions {
    /// Bytes per chunk.
    pub chunk: usize,
    /// Threads of the codec's pool that each multiplication of a chunk may use (1: the
    /// calling thread alone). Rows stay in order: a row's chunk is cut into byte ranges, so
    /// the memory in flight is the same whatever the count.
    pub threads: usize,
}

/// Participant `me` working through a task: its links and chunks, the multiplication tables
/// built so far, spare buffers for reuse, and what it has done.
struct Participant<'a, E> {
    me: usize,
    chunk: usize,
    links: &'a mut dyn Links<E>,
    chunks: &'a mut dyn Chunks<E>,
    columns: Columns,
    spare: Vec<Vec<u8>>,
    stats: ExecStats,
}

impl<E: From<CodingError>> Participant<'_, E> {
    /// Performs `steps` (this participant's, of one row, in the row's global order).
    fn run_steps(&mut self, rp: &RowPlan, st: &mut RowState, steps: &[Action]) -> Result<(), E> {
        let me = self.me;
        for step in steps {
            match step {
                Action::Contribute {
                    source,
                    outputs,
                    into,
                    ..
                } => self.contribute(rp, st, *source, outputs, *into)?,
                Action::Send {
                    from,
                    to,
                    outputs,
                    payload,
                } if *from == me => self.send(rp, st, *to, outputs, payload)?,
                Action::Send {
                    from,
                    outputs,
                    payload,
                    ..
                } => self.receive(rp, st, *from, outputs, payload)?,
                Action::Keep { outputs, .. } => self.keep(rp, st, outputs),
                Action::Store { output, .. } => self.store(rp, st, *output)?,
            }
        }
        Ok(())
    }

    /// Keeps a finished row's buffers for the next rows.
    fn recycle(&mut self, mut st: RowState) {
        self.spare.extend(st.acc.take());
        self.spare.extend(st.out.take());
        self.spare.extend(st.input.take());
        while self.spare.len() > KEPT_SPARES {
            let extra = self.spare.pop().expect("more than kept");
            self.links.give_buffer(extra);
        }
    }

    /// A buffer to reuse (any length and contents), or a new empty one.
    fn spare_buffer(&mut self) -> Vec<u8> {
        self.spare
            .pop()
            .or_else(|| self.links.take_buffer())
            .unwrap_or_default()
    }

    /// Finishes the oldest deferred row.
    fn finish_deferred(&mut self, pending: &mut VecDeque<Deferred>) -> Result<(), E> {
        if let Some(mut d) = pending.pop_front() {
            self.run_steps(&d.rp, &mut d.st, &d.steps)?;
            self.recycle(d.st);
        }
        Ok(())
    }

    /// The row buffer `which`, zero-filled from a spare if it does not exist yet.
    fn buffer<'s>(&mut self, st: &'s mut RowState, which: Buf, all: usize) -> &'s mut Vec<u8> {
        self.buffer_filled(st, which, all, true)
    }

    /// The row buffer `which`; one taken from a spare is zero-filled when `zeroed`, else
    /// left with whatever it held (for a caller that overwrites every byte: zeroing it
    /// first would be one more pass over memory).
    fn buffer_filled<'s>(
        &mut self,
        st: &'s mut RowState,
        which: Buf,
        all: usize,
        zeroed: bool,
    ) -> &'s mut Vec<u8> {
        let len = all * self.chunk;
        if st.slot(which).is_none() {
            let mut b = self.spare_buffer();
            if zeroed {
                b.clear();
            }
            b.resize(len, 0);
            *st.slot(which) = Some(b);
        }
        st.slot(which).as_mut().expect("filled above")
    }

    /// Reads the local input chunk of `source` once per row.
    fn read_input(&mut self, rp: &RowPlan, st: &mut RowState, source: usize) -> Result<(), E> {
        if st.input.is_none() {
            // `Chunks::read` fills every byte: a recycled buffer is cut (or grown) to a chunk
            // without zeroing it first, which cost as much as the read.
            let mut buf = self.spare_buffer();
            buf.resize(self.chunk, 0);
            self.chunks.read(rp.sources[source].input, &mut buf)?;
            self.stats.chunks_read += 1;
            st.input = Some(buf);
        }
        Ok(())
    }

    /// Adds (or writes, into a fresh buffer) this source's products into `into`.
    fn contribute(
        &mut self,
        rp: &RowPlan,
        st: &mut RowState,
        source: usize,
        outputs: &[usize],
        into: Buf,
    ) -> Result<(), E> {
        let all = rp.outputs.len();
        self.read_input(rp, st, source)?;
        let input = st.input.take().expect("read above");
        // A fresh buffer is zero: multiplying over it is the same as adding to it, and
        // when every output is written it need not be zeroed first.
        let overwrite = st.slot(into).is_none() && outputs.len() == all;
        let chunk = self.chunk;
        let column = rp.column(source, outputs);
        let buf = self.buffer_filled(st, into, all, !overwrite);
        let result = self
            .columns
            .multiply(column, &input, output_slices(buf, chunk, outputs), overwrite);
        st.input = Some(input);
        Ok(result?)
    }

    /// Sends a raw input chunk, the partial sums or delivered outputs to `to`.
    fn send(
        &mut self,
        rp: &RowPlan,
        st: &mut RowState,
        to: usize,
        outputs: &[usize],
        payload: &Payload,
    ) -> Result<(), E> {
        let all = rp.outputs.len();
        let message = match payload {
            Payload::Raw(source) => {
                self.read_input(rp, st, *source)?;
                st.input.clone().expect("read above")
            }
            Payload::Partial | Payload::Deliver(_) => {
                let which = match payload {
                    Payload::Deliver(b) => *b,
                    _ => Buf::Acc,
                };
                if is_whole(outputs, all) {
                    // The whole buffer goes: move it (the sender does not use it again).
                    st.slot(which)
                        .take()
                        .unwrap_or_else(|| vec![0u8; all * self.chunk])
                } else {
                    let chunk = self.chunk;
                    let mut message = self.spare_buffer();
                    message.clear();
                    let buf = self.buffer(st, which, all);
                    for &o in outputs {
                        message.extend_from_slice(&buf[o * chunk..(o + 1) * chunk]);
                    }
                    message
                }
            }
        };
        self.stats.bytes_sent += message.len() as u64;
        self.links.send(to, message)
    }

    /// Receives from `from` and folds the message into the row's buffers.
    fn receive(
        &mut self,
        rp: &RowPlan,
        st: &mut RowState,
        from: usize,
        outputs: &[usize],
        payload: &Payload,
    ) -> Result<(), E> {
        let all = rp.outputs.len();
        let chunk = self.chunk;
        let message = self.links.recv(from)?;
        self.stats.bytes_received += message.len() as u64;
        let expected = match payload {
            Payload::Raw(_) => chunk,
            _ => outputs.len() * chunk,
        };
        if message.len() != expected {
            return Err(CodingError::Protocol(format!(
                "row {}: {} bytes from participant {from}, expected {expected}",
                rp.row,
                message.len()
            ))
            .into());
        }
        let whole = is_whole(outputs, all);
        match payload {
            Payload::Partial if whole && st.acc.is_none() => st.acc = Some(message),
            Payload::Deliver(_) if whole => {
                if let Some(old) = st.out.replace(message) {
                    self.spare.push(old);
                }
            }
            Payload::Partial | Payload::Deliver(_) => {
                let into = if matches!(payload, Payload::Partial) {
                    Buf::Acc
                } else {
                    Buf::Out
                };
                let buf = self.buffer(st, into, all);
                for (part, &o) in message.chunks(chunk).zip(outputs) {
                    let dst = &mut buf[o * chunk..(o + 1) * chunk];
                    if into == Buf::Acc {
                        xor_into(dst, part);
                    } else {
                        dst.copy_from_slice(part);
                    }
                }
                self.spare.push(message);
            }
            Payload::Raw(source) => {
                let overwrite = st.out.is_none() && outputs.len() == all;
                let column = rp.column(*source, outputs);
                let buf = self.buffer_filled(st, Buf::Out, all, !overwrite);
                let result =
                    self.columns
                        .multiply(column, &message, output_slices(buf, chunk, outputs), overwrite);
                self.spare.push(message);
                result?;
            }
        }
        Ok(())
    }

    /// Keeps `outputs` of the partial sums as this member's own finished outputs.
    fn keep(&mut self, rp: &RowPlan, st: &mut RowState, outputs: &[usize]) {
        let all = rp.outputs.len();
        let chunk = self.chunk;
        let acc = st.acc.take().unwrap_or_else(|| vec![0u8; all * chunk]);
        if outputs.len() == all && st.out.is_none() {
            st.out = Some(acc);
        } else {
            let out = self.buffer(st, Buf::Out, all);
            for &o in outputs {
                out[o * chunk..(o + 1) * chunk].copy_from_slice(&acc[o * chunk..(o + 1) * chunk]);
            }
            st.acc = Some(acc);
        }
    }

    /// Writes finished output `output` to its local stream.
    fn store(&mut self, rp: &RowPlan, st: &mut RowState, output: usize) -> Result<(), E> {
        let all = rp.outputs.len();
        let chunk = self.chunk;
        let out = self.buffer(st, Buf::Out, all);
        self.chunks
            .write(&rp.outputs[output], &out[output * chunk..(output + 1) * chunk])?;
        self.stats.chunks_written += 1;
        Ok(())
    }
}

/// What participant `me` needs before it runs its part of a task: the links to open and
/// the local inputs to open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Participants it sends to in some row.
    pub send_to: BTreeSet<usize>,
    /// Participants it receives from in some row.
    pub recv_from: BTreeSet<usize>,
    /// Whether it reads chunks of its data shard.
    pub reads_data: bool,
    /// Whether it reads chunks of its parity.
    pub reads_parity: bool,
}

/// What participant `me` needs for `plan` under `topology`. Rows differ only in chunk
/// indices from one cycle of the geometry to the next (the assignment of shards to members
/// repeats every cycle, at most `members` rows, and a task covers whole cycles), so one
/// cycle of rows tells them all.
pub fn needs(me: usize, plan: &mut CodingPlan, topology: Topology) -> Result<Needs, CodingError> {
    let g = plan.geometry();
    let rows = g.rows().min(g.members() as u64);
    let mut needs = Needs::default();
    for row in 0..rows {
        let Some(rp) = plan.row(row)? else { continue };
        for action in actions(&rp, topology) {
            match action {
                Action::Send { from, to, .. } if from == me => needs.send_to.insert(to),
                Action::Send { from, to, .. } if to == me => needs.recv_from.insert(from),
                _ => false,
            };
        }
        for s in rp.sources.iter().filter(|s| s.node == me) {
            match s.input {
                Input::Data(_) => needs.reads_data = true,
                Input::Parity(_) => needs.reads_parity = true,
            }
        }
    }
    Ok(needs)
}

/// Performs participant `me`'s steps of every row of `plan`, calling `progress(rows_done,
/// rows_total)` after each row. Fails on the first error of a link, a local read or write,
/// or a message of the wrong size; refuses a chunk of 0 bytes.
pub fn run_participant<E: From<CodingError>>(
    me: usize,
    plan: &mut CodingPlan,
    topology: Topology,
    options: ExecOptions,
    links: &mut dyn Links<E>,
    chunks: &mut dyn Chunks<E>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ExecStats, E> {
    if options.chunk == 0 {
        return Err(CodingError::Invalid("a coding task with 0-byte chunks".into()).into());
    }
    let rows = plan.geometry().rows();
    let mut participant = Participant {
        me,
        chunk: options.chunk,
        links,
        chunks,
        columns: Columns {
            maps: HashMap::new(),
            threads: options.threads,
        },
        spare: Vec::new(),
        stats: ExecStats::default(),
    };
    let lookahead = participant.links.capacity().min(MAX_LOOKAHEAD);
    let mut pending = VecDeque::new();
    for row in 0..rows {
        if let Some(rp) = plan.row(row)? {
            let mine: Vec<Action> = actions(&rp, topology)
                .into_iter()
                .filter(|a| involves(a, me))
                .collect();
            if !mine.is_empty() {
                participant.stats.rows += 1;
                // With no lookahead a deferred tail is finished below at once: lockstep.
                let (now, later) = mine.split_at(deliveries_from(&mine, me));
                // Messages from a peer are received in the order it sent them: deferred
                // rows that receive from a peer this row hears from now go first.
                let peers = senders_to(now, me);
                while pending.iter().any(|d: &Deferred| !d.from.is_disjoint(&peers)) {
                    participant.finish_deferred(&mut pending)?;
                }
                let mut st = RowState::default();
                participant.run_steps(&rp, &mut st, now)?;
                if later.is_empty() {
                    participant.recycle(st);
                } else {
                    participant.spare.extend(st.input.take());
                    pending.push_back(Deferred {
                        from: senders_to(later, me),
                        steps: later.to_vec(),
                        rp,
                        st,
                    });
                    while pending.len() > lookahead {
                        participant.finish_deferred(&mut pending)?;
                    }
                }
            }
        }
        progress(row + 1, rows);
    }
    while !pending.is_empty() {
        participant.finish_deferred(&mut pending)?;
    }
    Ok(participant.stats)
}

/// The rest of a row for a participant that has sent its part and waits for outputs
/// delivered to it (a decode target at the head of a pipeline, a spare): received later,
/// while the next rows go on.
struct Deferred {
    rp: RowPlan,
    steps: Vec<Action>,
    st: RowState,
    /// The peers these steps receive from.
    from: BTreeSet<usize>,
}

/// Where `mine` (a participant's steps of one row) ends in receiving delivered outputs and
/// storing them, and nothing else: the index of that tail (`mine.len()`: no such tail).
fn deliveries_from(mine: &[Action], me: usize) -> usize {
    let deferrable = |a: &Action| match a {
        Action::Send { to, payload, .. } => *to == me && matches!(payload, Payload::Deliver(_)),
        Action::Store { .. } => true,
        _ => false,
    };
    let start = mine.len() - mine.iter().rev().take_while(|a| deferrable(a)).count();
    // The tail starts with a receive (a row that ends storing what it computed itself has
    // nothing to wait for).
    (start..mine.len())
        .find(|&i| matches!(mine[i], Action::Send { .. }))
        .unwrap_or(mine.len())
}

/// The peers that send to `me` in `steps`.
fn senders_to(steps: &[Action], me: usize) -> BTreeSet<usize> {
    steps
        .iter()
        .filter_map(|a| match a {
            Action::Send { from, to, .. } if *to == me => Some(*from),
            _ => None,
        })
        .collect()
}

fn involves(action: &Action, me: usize) -> bool {
    match action {
        Action::Contribute { node, .. } | Action::Keep { node, .. } | Action::Store { node, .. } => {
            *node == me
        }
        Action::Send { from, to, .. } => *from == me || *to == me,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Layout;
    use crate::geometry::Geometry;
    use crate::plan::Work;
    use eckpt_codec::{Code, CodeKind};

    /// [`needs`] the long way: every row of the task.
    fn needs_over_every_row(me: usize, plan: &mut CodingPlan, topology: Topology) -> Needs {
        let mut needs = Needs::default();
        for row in 0..plan.geometry().rows() {
            let Some(rp) = plan.row(row).unwrap() else {
                continue;
            };
            for action in actions(&rp, topology) {
                if let Action::Send { from, to, .. } = action {
                    if from == me {
                        needs.send_to.insert(to);
                    }
                    if to == me {
                        needs.recv_from.insert(from);
                    }
                }
            }
            for s in rp.sources.iter().filter(|s| s.node == me) {
                match s.input {
                    Input::Data(_) => needs.reads_data = true,
                    Input::Parity(_) => needs.reads_parity = true,
                }
            }
        }
        needs
    }

    fn plan(layout: Layout, k: usize, m: usize, chunks: u64, work: Work) -> CodingPlan {
        let code = Code::new(CodeKind::Cauchy, k, m).unwrap();
        let members = (0..k + m).map(Some).collect();
        CodingPlan::new(Geometry::new(layout, k, m, chunks), code, members, work).unwrap()
    }

    #[test]
    fn a_pipeline_member_sends_to_the_next_and_hears_from_the_previous() {
        let mut p = plan(Layout::Dedicated, 3, 2, 4, Work::Encode);
        let got = needs(1, &mut p, Topology::Pipeline).unwrap();
        assert_eq!(got.send_to, BTreeSet::from([2]));
        assert_eq!(got.recv_from, BTreeSet::from([0]));
        assert!(got.reads_data && !got.reads_parity);
        let last = needs(2, &mut p, Topology::Pipeline).unwrap();
        assert_eq!(last.send_to, BTreeSet::from([3, 4]));
        let parity = needs(4, &mut p, Topology::Pipeline).unwrap();
        assert_eq!(parity.recv_from, BTreeSet::from([2]));
        assert!(parity.send_to.is_empty() && !parity.reads_data && !parity.reads_parity);
    }

    #[test]
    fn one_cycle_tells_what_every_row_needs() {
        let decode =
            |unavailable: Vec<usize>, rebuild: Vec<(usize, usize)>| Work::Decode { unavailable, rebuild };
        for layout in [Layout::Dedicated, Layout::Rotated] {
            for (k, m) in [(1, 1), (3, 2), (4, 2), (5, 3)] {
                let n = k + m;
                for chunks in [0, 1, 2, 7] {
                    let works = [
                        Work::Encode,
                        decode(vec![1], vec![(1, 1)]),
                        decode(vec![0, n - 1], vec![(0, 1)]),
                        decode((0..m).collect(), (0..m).map(|x| (x, (x + m) % n)).collect()),
                    ];
                    for work in works.into_iter().filter(|w| match w {
                        Work::Decode { unavailable, .. } => unavailable.len() <= m,
                        Work::Encode => true,
                    }) {
                        for topology in [
                            Topology::Pipeline,
                            Topology::Ring,
                            Topology::Fanin,
                            Topology::Broadcast,
                        ] {
                            let mut p = plan(layout, k, m, chunks, work.clone());
                            for me in 0..n {
                                assert_eq!(
                                    needs(me, &mut p, topology).unwrap(),
                                    needs_over_every_row(me, &mut p, topology),
                                    "{layout:?} {k}+{m} {chunks} chunks {work:?} {topology:?} member {me}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Links over bounded channels that log what their participant does: `'S'` per send,
    /// `'R'` per receive.
    struct LoggedLinks {
        to: HashMap<usize, std::sync::mpsc::SyncSender<Vec<u8>>>,
        from: HashMap<usize, std::sync::mpsc::Receiver<Vec<u8>>>,
        capacity: usize,
        log: String,
    }

    impl Links<CodingError> for LoggedLinks {
        fn send(&mut self, to: usize, message: Vec<u8>) -> Result<(), CodingError> {
            self.log.push('S');
            self.to[&to]
                .send(message)
                .map_err(|_| CodingError::Protocol("hung up".into()))
        }
        fn recv(&mut self, from: usize) -> Result<Vec<u8>, CodingError> {
            self.log.push('R');
            self.from[&from]
                .recv()
                .map_err(|_| CodingError::Protocol("hung up".into()))
        }
        fn capacity(&self) -> usize {
            self.capacity
        }
    }

    struct Zeros;

    impl Chunks<CodingError> for Zeros {
        fn read(&mut self, _: Input, buf: &mut [u8]) -> Result<(), CodingError> {
            buf.fill(1);
            Ok(())
        }
        fn write(&mut self, _: &Output, _: &[u8]) -> Result<(), CodingError> {
            Ok(())
        }
    }

    /// Each participant's log of a pipeline decode of members 0 and 1 onto survivors 2 and
    /// 3 (k=4, m=2, 6 rows) over links of `capacity` messages.
    fn logs_of_a_decode_onto_survivors(capacity: usize) -> Vec<String> {
        let n = 6;
        let mut to: Vec<HashMap<_, _>> = (0..n).map(|_| HashMap::new()).collect();
        let mut from: Vec<HashMap<_, _>> = (0..n).map(|_| HashMap::new()).collect();
        for (a, to) in to.iter_mut().enumerate() {
            for (b, from) in from.iter_mut().enumerate() {
                let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
                to.insert(b, tx);
                from.insert(a, rx);
            }
        }
        let work = Work::Decode {
            unavailable: vec![0, 1],
            rebuild: vec![(0, 2), (1, 3)],
        };
        let threads: Vec<_> = to
            .into_iter()
            .zip(from)
            .enumerate()
            .map(|(me, (to, from))| {
                let mut p = plan(Layout::Dedicated, 4, 2, 6, work.clone());
                std::thread::spawn(move || {
                    let mut links = LoggedLinks {
                        to,
                        from,
                        capacity,
                        log: String::new(),
                    };
                    run_participant(
                        me,
                        &mut p,
                        Topology::Pipeline,
                        ExecOptions {
                            chunk: 64,
                            threads: 1,
                        },
                        &mut links,
                        &mut Zeros,
                        &mut |_, _| {},
                    )
                    .unwrap();
                    links.log
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn a_target_at_the_head_of_the_route_sends_ahead_of_the_outputs_it_waits_for() {
        // The head sends a row's partial sums and receives the row's output from the
        // route's end: in lockstep it idles a whole round trip per row.
        let lockstep = logs_of_a_decode_onto_survivors(0);
        let head = lockstep
            .iter()
            .position(|l| l.starts_with('S') && l.contains('R'));
        let head = head.expect("a participant that sends first and receives later");
        assert_eq!(lockstep[head], "SR".repeat(6));
        // With links that hold 2 messages, it runs up to 2 rows ahead, never more: the
        // first row's output is received when the third row is sent, and every row's
        // messages are still exchanged.
        let ahead = logs_of_a_decode_onto_survivors(2);
        assert_eq!(ahead[head], "SSSRSRSRSRRR");
        for (a, b) in lockstep.iter().zip(&ahead) {
            let count = |l: &str, c: char| l.chars().filter(|&x| x == c).count();
            assert_eq!((count(a, 'S'), count(a, 'R')), (count(b, 'S'), count(b, 'R')));
        }
    }
}
