//! Runs one participant's part of a coding task: the [`actions`] of every row that involve
//! it, in order, over abstract links and chunk storage — real sockets and files in the
//! agent, channels and vectors in tests, the same code either way.
//!
//! Buffers move rather than copy where the topology allows: a pipeline hop receives the
//! partial sums, adds its product in place and sends the same buffer on.

use std::collections::HashMap;

use eckpt_codec::LinearMap;

use crate::config::Topology;
use crate::plan::{actions, Action, Buf, CodingPlan, Input, Output, Payload, RowPlan};
use crate::ClusterError;

/// Messages to and from other participants, in order per peer.
pub trait Links {
    /// Queues `message` for participant `to`.
    fn send(&mut self, to: usize, message: Vec<u8>) -> Result<(), ClusterError>;
    /// The next message from participant `from`.
    fn recv(&mut self, from: usize) -> Result<Vec<u8>, ClusterError>;
}

/// The participant's local chunks: what it reads as a source and where outputs go.
pub trait Chunks {
    /// Fills `buf` (one chunk) with the local input chunk.
    fn read(&mut self, input: Input, buf: &mut [u8]) -> Result<(), ClusterError>;
    /// Writes one finished output chunk.
    fn write(&mut self, output: &Output, data: &[u8]) -> Result<(), ClusterError>;
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
/// built once per task.
#[derive(Default)]
struct Columns {
    maps: HashMap<Vec<u8>, LinearMap>,
}

impl Columns {
    fn map(&mut self, column: Vec<u8>) -> &LinearMap {
        self.maps
            .entry(column)
            .or_insert_with_key(|c| LinearMap::new(c.len(), 1, c.clone()))
    }

    /// `outs[i] (^)= column[i] · input`: overwritten when `overwrite`, else added.
    fn multiply(
        &mut self,
        column: Vec<u8>,
        input: &[u8],
        mut outs: Vec<&mut [u8]>,
        overwrite: bool,
    ) -> Result<(), ClusterError> {
        let map = self.map(column);
        if overwrite {
            map.apply(&[input], &mut outs)?;
        } else {
            map.accumulate(0, input, &mut outs)?;
        }
        Ok(())
    }
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
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
struct RowState {
    outputs: usize,
    chunk: usize,
    acc: Option<Vec<u8>>,
    out: Option<Vec<u8>>,
    input: Option<Vec<u8>>,
}

impl RowState {
    fn buffer(&mut self, which: Buf, spare: &mut Vec<Vec<u8>>) -> &mut Vec<u8> {
        let len = self.outputs * self.chunk;
        let slot = match which {
            Buf::Acc => &mut self.acc,
            Buf::Out => &mut self.out,
        };
        slot.get_or_insert_with(|| {
            let mut b = spare.pop().unwrap_or_default();
            b.clear();
            b.resize(len, 0);
            b
        })
    }

    fn slices<'a>(buf: &'a mut [u8], chunk: usize, outputs: &[usize]) -> Vec<&'a mut [u8]> {
        let mut parts: Vec<Option<&mut [u8]>> = buf.chunks_mut(chunk).map(Some).collect();
        outputs
            .iter()
            .map(|&o| parts[o].take().expect("outputs are distinct"))
            .collect()
    }
}

/// Performs participant `me`'s steps of every row of `plan`, calling `progress(rows_done,
/// rows_total)` after each row. Fails on the first error of a link, a local read or write,
/// or a message of the wrong size.
pub fn run_participant(
    me: usize,
    plan: &mut CodingPlan,
    topology: Topology,
    chunk: usize,
    links: &mut dyn Links,
    chunks: &mut dyn Chunks,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ExecStats, ClusterError> {
    let rows = plan.geometry().rows();
    let mut stats = ExecStats::default();
    let mut columns = Columns::default();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    for row in 0..rows {
        if let Some(rp) = plan.row(row)? {
            let steps = actions(&rp, topology);
            if steps.iter().any(|a| involves(a, me)) {
                stats.rows += 1;
                run_row(
                    me,
                    &rp,
                    &steps,
                    chunk,
                    links,
                    chunks,
                    &mut columns,
                    &mut spare,
                    &mut stats,
                )?;
            }
        }
        progress(row + 1, rows);
    }
    Ok(stats)
}

fn involves(action: &Action, me: usize) -> bool {
    match action {
        Action::Contribute { node, .. } | Action::Keep { node, .. } | Action::Store { node, .. } => {
            *node == me
        }
        Action::Send { from, to, .. } => *from == me || *to == me,
    }
}

#[allow(clippy::too_many_arguments)]
fn run_row(
    me: usize,
    rp: &RowPlan,
    steps: &[Action],
    chunk: usize,
    links: &mut dyn Links,
    chunks: &mut dyn Chunks,
    columns: &mut Columns,
    spare: &mut Vec<Vec<u8>>,
    stats: &mut ExecStats,
) -> Result<(), ClusterError> {
    let all = rp.outputs.len();
    let mut st = RowState {
        outputs: all,
        chunk,
        acc: None,
        out: None,
        input: None,
    };
    let read_input = |st: &mut RowState, source: usize, chunks: &mut dyn Chunks, stats: &mut ExecStats| {
        if st.input.is_none() {
            let mut buf = vec![0u8; chunk];
            chunks.read(rp.sources[source].input, &mut buf)?;
            stats.chunks_read += 1;
            st.input = Some(buf);
        }
        Ok::<(), ClusterError>(())
    };
    for step in steps.iter().filter(|a| involves(a, me)) {
        match step {
            Action::Contribute {
                source,
                outputs,
                into,
                ..
            } => {
                read_input(&mut st, *source, chunks, stats)?;
                let input = st.input.take().expect("read above");
                let fresh = match into {
                    Buf::Acc => st.acc.is_none(),
                    Buf::Out => st.out.is_none(),
                };
                let buf = st.buffer(*into, spare);
                let outs = RowState::slices(buf, chunk, outputs);
                // A fresh buffer is zero: multiplying over it is the same as adding to it.
                columns.multiply(
                    rp.column(*source, outputs),
                    &input,
                    outs,
                    fresh && outputs.len() == all,
                )?;
                st.input = Some(input);
            }
            Action::Send {
                from,
                to,
                outputs,
                payload,
            } if *from == me => {
                let message = match payload {
                    Payload::Raw(source) => {
                        read_input(&mut st, *source, chunks, stats)?;
                        st.input.clone().expect("read above")
                    }
                    Payload::Partial | Payload::Deliver(_) => {
                        let which = match payload {
                            Payload::Deliver(b) => *b,
                            _ => Buf::Acc,
                        };
                        if outputs.len() == all && outputs.iter().enumerate().all(|(i, &o)| i == o) {
                            // The whole buffer goes: move it (the sender does not use it again).
                            let slot = match which {
                                Buf::Acc => &mut st.acc,
                                Buf::Out => &mut st.out,
                            };
                            slot.take().unwrap_or_else(|| vec![0u8; all * chunk])
                        } else {
                            let buf = st.buffer(which, spare);
                            let mut message = spare.pop().unwrap_or_default();
                            message.clear();
                            for &o in outputs {
                                message.extend_from_slice(&buf[o * chunk..(o + 1) * chunk]);
                            }
                            message
                        }
                    }
                };
                stats.bytes_sent += message.len() as u64;
                links.send(*to, message)?;
            }
            Action::Send {
                from,
                outputs,
                payload,
                ..
            } => {
                let message = links.recv(*from)?;
                stats.bytes_received += message.len() as u64;
                let expected = match payload {
                    Payload::Raw(_) => chunk,
                    _ => outputs.len() * chunk,
                };
                if message.len() != expected {
                    return Err(ClusterError::Protocol(format!(
                        "row {}: {} bytes from participant {from}, expected {expected}",
                        rp.row,
                        message.len()
                    )));
                }
                let whole = outputs.len() == all && outputs.iter().enumerate().all(|(i, &o)| i == o);
                match payload {
                    Payload::Partial if whole && st.acc.is_none() => st.acc = Some(message),
                    Payload::Deliver(_) if whole => {
                        if let Some(old) = st.out.replace(message) {
                            spare.push(old);
                        }
                    }
                    Payload::Partial | Payload::Deliver(_) => {
                        let into = if matches!(payload, Payload::Partial) {
                            Buf::Acc
                        } else {
                            Buf::Out
                        };
                        let buf = st.buffer(into, spare);
                        for (part, &o) in message.chunks(chunk).zip(outputs) {
                            let dst = &mut buf[o * chunk..(o + 1) * chunk];
                            if into == Buf::Acc {
                                xor_into(dst, part);
                            } else {
                                dst.copy_from_slice(part);
                            }
                        }
                        spare.push(message);
                    }
                    Payload::Raw(source) => {
                        let fresh = st.out.is_none();
                        let buf = st.buffer(Buf::Out, spare);
                        let outs = RowState::slices(buf, chunk, outputs);
                        columns.multiply(
                            rp.column(*source, outputs),
                            &message,
                            outs,
                            fresh && outputs.len() == all,
                        )?;
                        spare.push(message);
                    }
                }
            }
            Action::Keep { outputs, .. } => {
                let acc = st.acc.take().unwrap_or_else(|| vec![0u8; all * chunk]);
                if outputs.len() == all && st.out.is_none() {
                    st.out = Some(acc);
                } else {
                    let out = st.buffer(Buf::Out, spare);
                    for &o in outputs {
                        out[o * chunk..(o + 1) * chunk].copy_from_slice(&acc[o * chunk..(o + 1) * chunk]);
                    }
                    st.acc = Some(acc);
                }
            }
            Action::Store { output, .. } => {
                let out = st.buffer(Buf::Out, spare);
                chunks.write(&rp.outputs[*output], &out[output * chunk..(output + 1) * chunk])?;
                stats.chunks_written += 1;
            }
        }
    }
    spare.extend(st.acc.take());
    spare.extend(st.out.take());
    spare.truncate(4);
    Ok(())
}
