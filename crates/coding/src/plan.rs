//! What every participant of a coding task does, row by row.
//!
//! Encode and decode are the same computation: for each row, outputs `O_o = Σ_s A[o][s]·B_s`
//! over source chunks `B_s` held by different nodes, delivered to the nodes that keep them
//! (parity holders when encoding; rebuild targets when decoding). A [`RowPlan`] names the
//! sources, the outputs and `A`; [`actions`] turns it into a sequence of steps for the
//! chosen [`Topology`]. Every participant derives the same plans and the same action list
//! from the task, and performs its own steps in that order, rows in ascending order — one
//! global order of steps, so a participant waiting to receive always waits on a peer that
//! is behind it, never on one that waits for it (no deadlock with bounded queues).
//!
//! Each participant keeps two buffers per row: `acc`, the partial sum it reduces into as a
//! source, and `out`, the outputs it is delivered or computes as a holder (kept apart
//! because in a decode a source can also be the rebuild target).

use std::collections::HashSet;

use eckpt_codec::{Code, DecoderCache};

use crate::config::Topology;
use crate::geometry::Geometry;
use crate::CodingError;

/// The local chunk a source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Chunk `n` of the node's data shard.
    Data(u64),
    /// Chunk `n` of the node's parity file.
    Parity(u64),
}

/// One source of a row: a participant and the chunk it contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Participant index.
    pub node: usize,
    /// What it reads.
    pub input: Input,
}

/// One output of a row: who keeps it, in which of its output streams, at which chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output {
    /// Participant index.
    pub node: usize,
    /// Output stream at that participant: its own parity (encode) or the shard of the
    /// member being rebuilt (decode), by member position.
    pub stream: usize,
    /// Chunk index within the stream.
    pub chunk: u64,
}

/// One row of a coding task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPlan {
    /// Row number.
    pub row: u64,
    /// Sources in route order.
    pub sources: Vec<Source>,
    /// Outputs.
    pub outputs: Vec<Output>,
    /// `coef[o * sources.len() + s]`: the coefficient of source `s` in output `o`.
    pub coef: Vec<u8>,
}

impl RowPlan {
    /// The coefficients of source `s` for the given outputs.
    pub fn column(&self, s: usize, outputs: &[usize]) -> Vec<u8> {
        let n = self.sources.len();
        outputs.iter().map(|&o| self.coef[o * n + s]).collect()
    }

    /// Participants holding outputs, in order of first appearance, each with its outputs.
    pub fn output_nodes(&self) -> Vec<(usize, Vec<usize>)> {
        let mut nodes: Vec<(usize, Vec<usize>)> = Vec::new();
        for (o, out) in self.outputs.iter().enumerate() {
            match nodes.iter_mut().find(|(n, _)| *n == out.node) {
                Some((_, outs)) => outs.push(o),
                None => nodes.push((out.node, vec![o])),
            }
        }
        nodes
    }
}

/// Which buffer of a participant an action reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    /// The partial sum of the reduction.
    Acc,
    /// Delivered or locally computed outputs.
    Out,
}

/// What a transfer carries and how the receiver folds it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The sender's partial sums; the receiver XORs them into its `acc`.
    Partial,
    /// Finished outputs from the sender's `from` buffer; the receiver stores them in `out`.
    Deliver(Buf),
    /// Source `s`'s raw chunk; the receiver adds `A[o][s]·chunk` to its `out`.
    Raw(usize),
}

/// One step of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `node`'s `into[o] ^= A[o][source]·input` for each listed output.
    Contribute {
        /// Participant.
        node: usize,
        /// Source index in the row plan.
        source: usize,
        /// Outputs affected.
        outputs: Vec<usize>,
        /// Buffer added into.
        into: Buf,
    },
    /// `from` sends the listed outputs (or a raw chunk) to `to`.
    Send {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// Outputs carried, in this order.
        outputs: Vec<usize>,
        /// What is carried.
        payload: Payload,
    },
    /// `node`'s `out[o] = acc[o]` for each listed output (the reduction ended at a holder).
    Keep {
        /// Participant.
        node: usize,
        /// Outputs.
        outputs: Vec<usize>,
    },
    /// `node` writes `out[output]` to its output stream.
    Store {
        /// Participant.
        node: usize,
        /// Output index.
        output: usize,
    },
}

/// The steps of one row under `topology`, in the global order every participant follows.
pub fn actions(plan: &RowPlan, topology: Topology) -> Vec<Action> {
    let all: Vec<usize> = (0..plan.outputs.len()).collect();
    let holders = plan.output_nodes();
    let mut steps = Vec::new();
    match topology {
        Topology::Broadcast => {
            for (node, outs) in &holders {
                for (s, src) in plan.sources.iter().enumerate() {
                    if src.node == *node {
                        steps.push(Action::Contribute {
                            node: *node,
                            source: s,
                            outputs: outs.clone(),
                            into: Buf::Out,
                        });
                    } else {
                        steps.push(Action::Send {
                            from: src.node,
                            to: *node,
                            outputs: outs.clone(),
                            payload: Payload::Raw(s),
                        });
                    }
                }
            }
            store_all(&holders, &mut steps);
            return steps;
        }
        Topology::Pipeline | Topology::Ring => {
            for (s, src) in plan.sources.iter().enumerate() {
                if s > 0 {
                    steps.push(Action::Send {
                        from: plan.sources[s - 1].node,
                        to: src.node,
                        outputs: all.clone(),
                        payload: Payload::Partial,
                    });
                }
                steps.push(Action::Contribute {
                    node: src.node,
                    source: s,
                    outputs: all.clone(),
                    into: Buf::Acc,
                });
            }
        }
        Topology::Fanin => {
            // Binary tree over route positions: the parent of s is (s - 1) / 2. Children
            // have larger positions, so walking positions downwards reduces leaves first.
            for s in (0..plan.sources.len()).rev() {
                steps.push(Action::Contribute {
                    node: plan.sources[s].node,
                    source: s,
                    outputs: all.clone(),
                    into: Buf::Acc,
                });
                if s > 0 {
                    steps.push(Action::Send {
                        from: plan.sources[s].node,
                        to: plan.sources[(s - 1) / 2].node,
                        outputs: all.clone(),
                        payload: Payload::Partial,
                    });
                }
            }
        }
    }
    // The reduction ended at `last`, which holds every output in `acc`.
    let last = match topology {
        Topology::Fanin => plan.sources[0].node,
        _ => plan.sources[plan.sources.len() - 1].node,
    };
    if topology == Topology::Ring {
        // On around the ring: each holder keeps its outputs and passes the rest on — starting
        // with `last` when it holds outputs itself (a decode's target), so that they do not
        // travel round the ring back to it.
        let mut around = holders.clone();
        if let Some(at) = around.iter().position(|(node, _)| *node == last) {
            around[..=at].rotate_right(1);
        }
        let mut from = (last, Buf::Acc);
        let mut remaining = all;
        for (node, outs) in &around {
            if *node == from.0 {
                steps.push(Action::Keep {
                    node: *node,
                    outputs: outs.clone(),
                });
            } else {
                steps.push(Action::Send {
                    from: from.0,
                    to: *node,
                    outputs: remaining.clone(),
                    payload: Payload::Deliver(from.1),
                });
                from = (*node, Buf::Out);
            }
            remaining.retain(|o| !outs.contains(o));
        }
    } else {
        for (node, outs) in &holders {
            steps.push(if *node == last {
                Action::Keep {
                    node: *node,
                    outputs: outs.clone(),
                }
            } else {
                Action::Send {
                    from: last,
                    to: *node,
                    outputs: outs.clone(),
                    payload: Payload::Deliver(Buf::Acc),
                }
            });
        }
    }
    store_all(&holders, &mut steps);
    steps
}

fn store_all(holders: &[(usize, Vec<usize>)], steps: &mut Vec<Action>) {
    for (node, outs) in holders {
        for &o in outs {
            steps.push(Action::Store {
                node: *node,
                output: o,
            });
        }
    }
}

/// What a coding task computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Parity of every row from the data shards.
    Encode,
    /// The data shards of `lost` members, each rebuilt at a target participant, from the
    /// shards of members not in `unavailable` (which includes `lost`).
    Decode {
        /// Members whose shards cannot be read (lost or damaged).
        unavailable: Vec<usize>,
        /// `(member, target participant)`: members whose data is rebuilt, and where.
        rebuild: Vec<(usize, usize)>,
    },
}

/// Row plans of one coding task over one group.
pub struct CodingPlan {
    geometry: Geometry,
    code: Code,
    /// Participant index of each member (`None`: the member takes no part).
    members: Vec<Option<usize>>,
    work: Work,
    decoders: DecoderCache,
}

impl CodingPlan {
    /// A plan for `work` on the object described by `geometry`, coded with `code`, where
    /// member `i` is participant `members[i]`. The work comes from a peer's task, so it is
    /// checked here and a malformed one refused: members out of range or listed twice, more
    /// unavailable members than the code tolerates, a rebuilt member that is not unavailable,
    /// two members on one participant, or a member whose shard the work reads or writes
    /// without a participant.
    pub fn new(
        geometry: Geometry,
        code: Code,
        members: Vec<Option<usize>>,
        work: Work,
    ) -> Result<CodingPlan, CodingError> {
        let invalid = |why: String| Err(CodingError::Invalid(why));
        let (n, m) = (geometry.members(), geometry.m());
        if members.len() != n || code.k() != geometry.k() || code.m() != m {
            return invalid(format!(
                "plan for {} members with a {}+{} code over a {}+{} geometry",
                members.len(),
                code.k(),
                code.m(),
                geometry.k(),
                m
            ));
        }
        let mut participants = HashSet::new();
        if let Some(p) = members.iter().flatten().find(|&&p| !participants.insert(p)) {
            return invalid(format!("participant {p} stands for two members"));
        }
        let unavailable: &[usize] = match &work {
            Work::Encode => &[],
            Work::Decode { unavailable, rebuild } => {
                if let Some(u) = unavailable.iter().find(|&&u| u >= n) {
                    return invalid(format!("unavailable member {u} outside the group of {n}"));
                }
                if has_duplicate(unavailable.iter()) {
                    return invalid(format!("unavailable members {unavailable:?} repeat"));
                }
                if unavailable.len() > m {
                    return invalid(format!(
                        "{} members unavailable, the code tolerates {m}",
                        unavailable.len()
                    ));
                }
                if let Some((lost, _)) = rebuild.iter().find(|(l, _)| !unavailable.contains(l)) {
                    return invalid(format!("member {lost} is rebuilt but not marked unavailable"));
                }
                if has_duplicate(rebuild.iter().map(|(l, _)| l)) {
                    return invalid("a member is rebuilt twice".into());
                }
                unavailable
            }
        };
        if let Some(x) = (0..n).find(|x| !unavailable.contains(x) && members[*x].is_none()) {
            return invalid(format!("member {x} is read or written but has no participant"));
        }
        Ok(CodingPlan {
            geometry,
            code,
            members,
            work,
            decoders: DecoderCache::default(),
        })
    }

    /// The geometry the plan covers.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn participant(&self, member: usize) -> Result<usize, CodingError> {
        self.members
            .get(member)
            .copied()
            .flatten()
            .ok_or_else(|| inconsistent(format!("member {member} has no participant")))
    }

    fn input(&self, row: u64, shard: usize) -> Result<Source, CodingError> {
        let g = &self.geometry;
        let member = g.holder(row, shard);
        let input = if shard < g.k() {
            Input::Data(data_chunk(g, row, member)?)
        } else {
            Input::Parity(parity_chunk(g, row, member)?)
        };
        Ok(Source {
            node: self.participant(member)?,
            input,
        })
    }

    /// The plan of `row`, or `None` when the row has nothing to compute (a decode row where
    /// no rebuilt member holds data).
    pub fn row(&mut self, row: u64) -> Result<Option<RowPlan>, CodingError> {
        let g = &self.geometry;
        let (k, m) = (g.k(), g.m());
        match &self.work {
            Work::Encode => {
                let sources = (0..k).map(|l| self.input(row, l)).collect::<Result<_, _>>()?;
                let outputs = (k..k + m)
                    .map(|shard| {
                        let member = g.holder(row, shard);
                        Ok(Output {
                            node: self.participant(member)?,
                            stream: member,
                            chunk: parity_chunk(g, row, member)?,
                        })
                    })
                    .collect::<Result<_, CodingError>>()?;
                Ok(Some(RowPlan {
                    row,
                    sources,
                    outputs,
                    coef: self.code.generator()[k * k..].to_vec(),
                }))
            }
            Work::Decode { unavailable, rebuild } => {
                let wanted: Vec<(usize, usize, usize)> = rebuild
                    .iter()
                    .filter_map(|&(member, target)| {
                        let shard = g.shard_at(row, member);
                        (shard < k).then_some((shard, member, target))
                    })
                    .collect();
                if wanted.is_empty() {
                    return Ok(None);
                }
                let mut erased: Vec<usize> = unavailable.iter().map(|&u| g.shard_at(row, u)).collect();
                erased.sort_unstable();
                let decoder = self.decoders.get(&self.code, &erased)?.clone();
                let sources = decoder
                    .survivors()
                    .iter()
                    .map(|&s| self.input(row, s))
                    .collect::<Result<_, _>>()?;
                let mut outputs = Vec::with_capacity(wanted.len());
                let mut coef = Vec::with_capacity(wanted.len() * k);
                for (shard, member, target) in wanted {
                    let at = decoder.erased().iter().position(|&e| e == shard).ok_or_else(|| {
                        inconsistent(format!("rebuilt member {member} is not erased in row {row}"))
                    })?;
                    coef.extend_from_slice(&decoder.map().coefficients()[at * k..(at + 1) * k]);
                    outputs.push(Output {
                        node: target,
                        stream: member,
                        chunk: data_chunk(g, row, member)?,
                    });
                }
                Ok(Some(targets_at_the_ends(RowPlan {
                    row,
                    sources,
                    outputs,
                    coef,
                })))
            }
        }
    }
}

/// `plan` with the sources that also keep an output moved to the ends of the route. A
/// rebuild target that is a survivor too would otherwise receive the partial sums on the
/// way *and* its output from the route's end (`(outputs + 1) × chunk` over its link). The
/// first on the route only sends partial sums and receives its output; the last keeps its
/// output where the sums end. With up to two such targets (m = 2) no link then carries more
/// than the partial sums (`outputs × chunk`), as in an encode.
fn targets_at_the_ends(plan: RowPlan) -> RowPlan {
    let n = plan.sources.len();
    let keeps = |s: &usize| plan.outputs.iter().any(|o| o.node == plan.sources[*s].node);
    let (targets, others): (Vec<usize>, Vec<usize>) = (0..n).partition(keeps);
    let order: Vec<usize> = match targets.split_first() {
        Some((first, later)) => std::iter::once(*first)
            .chain(others)
            .chain(later.iter().copied())
            .collect(),
        None => others,
    };
    let coef = (0..plan.outputs.len())
        .flat_map(|o| order.iter().map(move |&s| (o, s)))
        .map(|(o, s)| plan.coef[o * n + s])
        .collect();
    RowPlan {
        sources: order.iter().map(|&s| plan.sources[s]).collect(),
        coef,
        ..plan
    }
}

/// A plan that contradicts its own geometry: [`CodingPlan::new`] refuses the tasks that
/// could lead here, so this is a bug, reported instead of a panic.
fn inconsistent(what: String) -> CodingError {
    CodingError::Invalid(format!("inconsistent coding plan: {what}"))
}

fn data_chunk(g: &Geometry, row: u64, member: usize) -> Result<u64, CodingError> {
    g.data_chunk(row, member)
        .ok_or_else(|| inconsistent(format!("member {member} holds no data in row {row}")))
}

fn parity_chunk(g: &Geometry, row: u64, member: usize) -> Result<u64, CodingError> {
    g.parity_chunk(row, member)
        .ok_or_else(|| inconsistent(format!("member {member} holds no parity in row {row}")))
}

fn has_duplicate<'a>(mut items: impl Iterator<Item = &'a usize>) -> bool {
    let mut seen = HashSet::new();
    items.any(|x| !seen.insert(*x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_codec::CodeKind;

    fn plan_of(sources: &[usize], outputs: &[usize]) -> RowPlan {
        RowPlan {
            row: 0,
            sources: sources
                .iter()
                .map(|&node| Source {
                    node,
                    input: Input::Data(0),
                })
                .collect(),
            outputs: outputs
                .iter()
                .map(|&node| Output {
                    node,
                    stream: node,
                    chunk: 0,
                })
                .collect(),
            coef: vec![1; sources.len() * outputs.len()],
        }
    }

    fn sends(steps: &[Action]) -> Vec<(usize, usize)> {
        steps
            .iter()
            .filter_map(|a| match a {
                Action::Send { from, to, .. } => Some((*from, *to)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn pipeline_passes_partials_along_then_delivers() {
        let steps = actions(&plan_of(&[0, 1, 2, 3], &[4, 5]), Topology::Pipeline);
        assert_eq!(sends(&steps), vec![(0, 1), (1, 2), (2, 3), (3, 4), (3, 5)]);
    }

    #[test]
    fn ring_uses_only_next_hops() {
        let steps = actions(&plan_of(&[0, 1, 2, 3], &[4, 5]), Topology::Ring);
        assert_eq!(sends(&steps), vec![(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]);
    }

    #[test]
    fn fanin_reduces_over_a_binary_tree() {
        let steps = actions(&plan_of(&[0, 1, 2, 3, 4], &[9]), Topology::Fanin);
        assert_eq!(sends(&steps), vec![(4, 1), (3, 1), (2, 0), (1, 0), (0, 9)]);
    }

    #[test]
    fn broadcast_sends_each_chunk_to_each_holder() {
        let steps = actions(&plan_of(&[0, 1, 2], &[3, 4]), Topology::Broadcast);
        assert_eq!(
            sends(&steps),
            vec![(0, 3), (1, 3), (2, 3), (0, 4), (1, 4), (2, 4)]
        );
    }

    #[test]
    fn survivors_rebuilding_lost_data_receive_no_more_than_the_partial_sums() {
        let g = Geometry::new(crate::config::Layout::Dedicated, 4, 2, 3);
        let code = Code::new(CodeKind::Cauchy, 4, 2).unwrap();
        let mut members: Vec<Option<usize>> = (0..6).map(Some).collect();
        members[1] = None;
        members[3] = None;
        let work = Work::Decode {
            unavailable: vec![1, 3],
            rebuild: vec![(1, 2), (3, 4)],
        };
        let mut plan = CodingPlan::new(g.clone(), code, members, work).unwrap();
        for row in 0..g.rows() {
            let p = plan.row(row).unwrap().unwrap();
            let route: Vec<usize> = p.sources.iter().map(|s| s.node).collect();
            assert_eq!(route, [2, 0, 5, 4], "targets at the ends of the route");
            for topology in [Topology::Pipeline, Topology::Ring] {
                let mut received = [0usize; 6];
                for action in actions(&p, topology) {
                    if let Action::Send { to, outputs, .. } = action {
                        received[to] += outputs.len();
                    }
                }
                assert!(
                    received.iter().all(|&r| r <= 2),
                    "{topology}: chunks received per node {received:?}"
                );
            }
        }
    }

    #[test]
    fn decode_rows_use_survivors_and_skip_rows_without_lost_data() {
        let g = Geometry::new(crate::config::Layout::Rotated, 3, 2, 6);
        let code = Code::new(CodeKind::Cauchy, 3, 2).unwrap();
        let members = (0..5).map(Some).collect();
        let work = Work::Decode {
            unavailable: vec![1],
            rebuild: vec![(1, 7)],
        };
        let mut plan = CodingPlan::new(g.clone(), code, members, work).unwrap();
        let mut computed = 0;
        for row in 0..g.rows() {
            match plan.row(row).unwrap() {
                Some(p) => {
                    computed += 1;
                    assert!(
                        p.sources.iter().all(|s| s.node != 1),
                        "the lost member is no source"
                    );
                    assert_eq!(p.outputs.len(), 1);
                    assert_eq!(p.outputs[0].node, 7);
                }
                None => assert!(g.data_chunk(row, 1).is_none()),
            }
        }
        assert_eq!(computed, g.data_chunks(1));
    }

    #[test]
    fn malformed_work_is_refused() {
        let g = Geometry::new(crate::config::Layout::Rotated, 3, 2, 6);
        let code = Code::new(CodeKind::Cauchy, 3, 2).unwrap();
        let all: Vec<Option<usize>> = (0..5).map(Some).collect();
        let decode =
            |unavailable: Vec<usize>, rebuild: Vec<(usize, usize)>| Work::Decode { unavailable, rebuild };
        let mut without_1 = all.clone();
        without_1[1] = None;
        let mut twice = all.clone();
        twice[4] = Some(0);
        let cases: Vec<(Vec<Option<usize>>, Work, &str)> = vec![
            (all[..4].to_vec(), Work::Encode, "plan for 4 members"),
            (twice, Work::Encode, "participant 0 stands for two members"),
            (without_1.clone(), Work::Encode, "member 1 is read or written"),
            (all.clone(), decode(vec![5], vec![(5, 0)]), "outside the group"),
            (all.clone(), decode(vec![usize::MAX], vec![]), "outside the group"),
            (all.clone(), decode(vec![1, 1], vec![(1, 0)]), "repeat"),
            (
                all.clone(),
                decode(vec![0, 1, 2], vec![(1, 0)]),
                "3 members unavailable",
            ),
            (
                all.clone(),
                decode(vec![1], vec![(2, 0)]),
                "member 2 is rebuilt but not",
            ),
            (
                all.clone(),
                decode(vec![1, 2], vec![(1, 0), (1, 3)]),
                "rebuilt twice",
            ),
            (
                without_1.clone(),
                decode(vec![2], vec![(2, 0)]),
                "member 1 is read or written",
            ),
        ];
        for (members, work, expected) in cases {
            let err = match CodingPlan::new(g.clone(), code.clone(), members, work.clone()) {
                Ok(_) => panic!("{work:?} accepted"),
                Err(e) => e,
            };
            assert!(
                matches!(&err, CodingError::Invalid(why) if why.contains(expected)),
                "{work:?}: {err}, expected {expected:?}"
            );
        }
        // An unavailable member needs no participant.
        let mut plan = CodingPlan::new(g.clone(), code, without_1, decode(vec![1], vec![(1, 7)])).unwrap();
        for row in 0..g.rows() {
            plan.row(row).unwrap();
        }
    }
}
