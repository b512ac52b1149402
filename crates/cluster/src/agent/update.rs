//! An agent's part in an `update` epoch ([`UpdateTask`]): data members send `old ⊕ new` of
//! their changed blocks, once, to the first parity holder of each row; parity holders fold
//! `X·(old ⊕ new)` into a staged copy of their parity chunks and (pipeline, ring) pass the
//! same records on to the next parity holder, so each data member's link carries its
//! changed bytes once. With `broadcast` (and `fanin`, which has no tree to build over
//! sparse records) data members send to every parity holder themselves.
//!
//! Records travel in phases, one per parity index: phase `p` delivers to the holders of
//! parity `p`. Every sender of a phase ends each of its streams with an empty message, and a
//! relay ends its phase-`p+1` streams only after all its phase-`p` streams ended, so the
//! phases cannot wait on each other in a circle.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use eckpt_codec::{Code, LinearMap};
use tokio::sync::mpsc;

use super::links::TaskLinks;
use super::Agent;
use crate::parity_store::ParityReader;
use crate::shard::ImageShard;
use eckpt_cluster_api::msg::{TaskReport, UpdateTask};
use eckpt_cluster_api::net::node_error;
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::Topology;
use eckpt_coding::geometry::Geometry;
use eckpt_coding::records::{parse_batch, push_record, RecordRef, BATCH};

/// One changed piece of a data shard, within one chunk.
struct Record {
    row: u64,
    offset: u32,
    shard: u16,
    bytes: Vec<u8>,
}

/// The changed pieces of this member's shard (`old ⊕ new`), and the CRCs of the changed
/// chunks' new contents.
struct DataUpdate {
    records: Vec<Record>,
    crcs: Vec<(u64, u32)>,
}

fn data_records(
    agent: &Agent,
    layout: &ShardLayout,
    epoch: u64,
    geometry: &Geometry,
    me: usize,
    chunk: usize,
) -> Result<DataUpdate, ClusterError> {
    let mut records = Vec::new();
    let mut touched = BTreeSet::new();
    for rank in layout.ranks() {
        for block in agent.store.dirty_xor(rank, epoch)? {
            let extent = layout.extent(rank, &block.item).ok_or_else(|| {
                ClusterError::Invalid(format!("rank {rank} item {:?} is not in the layout", block.item))
            })?;
            let mut at = extent.offset + block.index * u64::from(block.block_size);
            let mut rest: &[u8] = &block.bytes;
            while !rest.is_empty() {
                let q = at / chunk as u64;
                let offset = (at % chunk as u64) as usize;
                let n = rest.len().min(chunk - offset);
                let row = geometry.data_row(me, q);
                records.push(Record {
                    row,
                    offset: offset as u32,
                    shard: geometry.shard_at(row, me) as u16,
                    bytes: rest[..n].to_vec(),
                });
                touched.insert(q);
                rest = &rest[n..];
                at += n as u64;
            }
        }
    }
    let shard = ImageShard::open(&agent.store, layout.clone(), epoch)?;
    let mut buf = vec![0u8; chunk];
    let mut crcs = Vec::with_capacity(touched.len());
    for q in touched {
        shard.read(q * chunk as u64, &mut buf)?;
        crcs.push((q, crc32c::crc32c(&buf)));
    }
    Ok(DataUpdate { records, crcs })
}

/// Staged new contents of this member's changed parity chunks.
struct Stage {
    reader: ParityReader,
    chunk: usize,
    chunks: BTreeMap<u64, Vec<u8>>,
    maps: HashMap<u8, LinearMap>,
}

impl Stage {
    fn add(
        &mut self,
        parity_chunk: u64,
        offset: u32,
        coefficient: u8,
        delta: &[u8],
    ) -> Result<(), ClusterError> {
        if !self.chunks.contains_key(&parity_chunk) {
            let mut buf = vec![0u8; self.chunk];
            self.reader.read(parity_chunk, &mut buf)?;
            self.chunks.insert(parity_chunk, buf);
        }
        let target = self.chunks.get_mut(&parity_chunk).expect("inserted above");
        let map = self
            .maps
            .entry(coefficient)
            .or_insert_with(|| LinearMap::new(1, 1, vec![coefficient]));
        let offset = offset as usize;
        map.accumulate(0, delta, &mut [&mut target[offset..offset + delta.len()]])?;
        Ok(())
    }
}

/// Members holding parity `p` in some row.
fn holders_of(geometry: &Geometry, p: usize) -> BTreeSet<usize> {
    (0..geometry.rows().min(geometry.members() as u64))
        .map(|row| geometry.holder(row, geometry.k() + p))
        .collect()
}

/// Runs this agent's part of an update.
pub async fn run(agent: Arc<Agent>, task: UpdateTask) -> Result<TaskReport, ClusterError> {
    let started = Instant::now();
    let me = task
        .participants
        .iter()
        .position(|p| p.name == agent.info.name)
        .ok_or_else(|| {
            ClusterError::Invalid(format!("{} is not in update task {}", agent.info.name, task.task))
        })?;
    let (k, m) = (task.group.k, task.group.m);
    let geometry = task.check()?;
    let code = Code::new(task.coding.code, k, m)?;
    let chunk = task.object.chunk as usize;
    let relay = matches!(task.coding.topology, Topology::Pipeline | Topology::Ring);
    let data_holders: BTreeSet<usize> = (0..k + m).filter(|&x| geometry.holds_data(x)).collect();
    let receivers: Vec<BTreeSet<usize>> = (0..m).map(|p| holders_of(&geometry, p)).collect();
    let senders: Vec<BTreeSet<usize>> = (0..m)
        .map(|p| {
            if relay && p > 0 {
                receivers[p - 1].clone()
            } else {
                data_holders.clone()
            }
        })
        .collect();
    let nodes: Vec<_> = task.participants.iter().cloned().map(Some).collect();
    let mut links: Vec<TaskLinks> = (0..m)
        .map(|p| {
            let without_me =
                |s: &BTreeSet<usize>| s.iter().copied().filter(|&x| x != me).collect::<BTreeSet<_>>();
            let send_to = if senders[p].contains(&me) {
                without_me(&receivers[p])
            } else {
                BTreeSet::new()
            };
            let recv_from = if receivers[p].contains(&me) {
                without_me(&senders[p])
            } else {
                BTreeSet::new()
            };
            TaskLinks::open(
                task.task,
                p as u32,
                me,
                &nodes,
                &send_to,
                &recv_from,
                &agent.host,
                &agent.secret,
                &agent.inbox,
            )
        })
        .collect();

    let mut report = TaskReport::default();
    // Data role, concurrently with the parity role: in the rotated layout members send to
    // each other, and both directions must drain.
    let data_role = if data_holders.contains(&me) {
        let phases: Vec<usize> = if relay { vec![0] } else { (0..m).collect() };
        let mut outs: BTreeMap<(usize, usize), mpsc::Sender<Vec<u8>>> = BTreeMap::new();
        for &p in &phases {
            for &to in receivers[p].iter().filter(|&&x| x != me) {
                if let Some(s) = links[p].sender(to) {
                    outs.insert((p, to), s);
                }
            }
        }
        let layout = task.layouts[me].clone();
        let (a, g, epoch) = (agent.clone(), geometry.clone(), task.epoch);
        let (debug, who) = (agent.dir.debug(), agent.info.name.clone());
        Some(tokio::spawn(async move {
            let g2 = g.clone();
            let DataUpdate { records, crcs } =
                tokio::task::spawn_blocking(move || data_records(&a, &layout, epoch, &g2, me, chunk))
                    .await
                    .map_err(|e| ClusterError::Invalid(format!("update thread: {e}")))??;
            let mut sent = 0u64;
            let send = |p: usize, to: usize, batch: Vec<u8>| {
                let s = outs.get(&(p, to)).cloned();
                async move {
                    s.ok_or_else(|| ClusterError::Protocol(format!("no link to member {to}")))?
                        .send(batch)
                        .await
                        .map_err(|_| ClusterError::Protocol(format!("link to member {to} failed")))
                }
            };
            for p in phases {
                let mut batches: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
                for r in &records {
                    let dest = g.holder(r.row, k + p);
                    let batch = batches.entry(dest).or_default();
                    push_record(batch, r.row, r.offset, r.shard, &r.bytes);
                    if batch.len() >= BATCH {
                        let full = std::mem::take(batch);
                        sent += full.len() as u64;
                        send(p, dest, full).await?;
                    }
                }
                for (dest, batch) in batches.into_iter().filter(|(_, b)| !b.is_empty()) {
                    sent += batch.len() as u64;
                    send(p, dest, batch).await?;
                }
                // Fault injection: records are on their way but no stream has ended.
                crate::debug::pause_point_async(&debug, "mid-encode", &who).await;
                // Phase 0 (and every phase of a broadcast) has data members as its only
                // senders: they end their streams here.
                for &(q, to) in outs.keys().filter(|(q, _)| *q == p) {
                    send(q, to, Vec::new()).await?;
                }
            }
            Ok::<_, ClusterError>((sent, crcs))
        }))
    } else {
        None
    };

    // Parity role: fold incoming records phase by phase, relaying onwards.
    let holds_parity = (0..m).any(|p| receivers[p].contains(&me));
    let stage = if holds_parity {
        Some(Arc::new(Mutex::new(Stage {
            reader: agent.coded.parity_reader(task.object.id)?,
            chunk,
            chunks: BTreeMap::new(),
            maps: HashMap::new(),
        })))
    } else {
        None
    };
    let generator = code.generator().to_vec();
    let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let forwarded = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Every phase's streams are drained at once: a relay forwards phase-p records into
    // phase p+1 while it still receives phase p, so a phase that waited for the previous
    // one to finish could stall the relays feeding it.
    let mut phases = Vec::new();
    for p in 0..m {
        let mut readers = Vec::new();
        if receivers[p].contains(&me) {
            let stage = stage.clone().expect("a receiver holds parity");
            let next: Option<BTreeMap<usize, mpsc::Sender<Vec<u8>>>> = (relay && p + 1 < m).then(|| {
                receivers[p + 1]
                    .iter()
                    .filter(|&&x| x != me)
                    .filter_map(|&x| links[p + 1].sender(x).map(|s| (x, s)))
                    .collect()
            });
            for from in senders[p].iter().copied().filter(|&x| x != me) {
                let (mut rx, failure) = links[p].take_receiver(from).expect("a link from each sender");
                let (stage, next, geometry, generator) =
                    (stage.clone(), next.clone(), geometry.clone(), generator.clone());
                let (received, forwarded) = (received.clone(), forwarded.clone());
                let name = task.participants[from].name.clone();
                readers.push(tokio::spawn(async move {
                    loop {
                        let Some(batch) = rx.recv().await else {
                            let reason = failure.lock().expect("failure lock").clone();
                            return Err(node_error(
                                &name,
                                reason.unwrap_or_else(|| "stream ended early".into()),
                            ));
                        };
                        if batch.is_empty() {
                            return Ok(());
                        }
                        received.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        let mut relayed: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
                        {
                            let mut stage = stage.lock().expect("stage lock");
                            for RecordRef {
                                row,
                                offset,
                                shard,
                                bytes,
                            } in parse_batch(&batch, chunk)?
                            {
                                if row >= geometry.rows()
                                    || geometry.holder(row, k + p) != me
                                    || shard as usize >= k
                                {
                                    return Err(ClusterError::Protocol(format!(
                                        "update record for row {row} shard {shard} sent to the wrong member"
                                    )));
                                }
                                let pc = geometry.parity_chunk(row, me).ok_or_else(|| {
                                    ClusterError::Protocol(format!("no parity of row {row} here"))
                                })?;
                                let coefficient = generator[(k + p) * k + shard as usize];
                                stage.add(pc, offset, coefficient, bytes)?;
                                if next.is_some() {
                                    let dest = geometry.holder(row, k + p + 1);
                                    push_record(relayed.entry(dest).or_default(), row, offset, shard, bytes);
                                }
                            }
                        }
                        if let Some(next) = &next {
                            for (dest, batch) in relayed {
                                forwarded.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                                let sender = next.get(&dest).ok_or_else(|| {
                                    ClusterError::Protocol(format!("no relay link to member {dest}"))
                                })?;
                                sender.send(batch).await.map_err(|_| {
                                    ClusterError::Protocol(format!("relay to member {dest} failed"))
                                })?;
                            }
                        }
                    }
                }));
            }
        }
        // A relay ends its next-phase streams once everything of this phase is in.
        let enders: Vec<mpsc::Sender<Vec<u8>>> = if relay && p + 1 < m && senders[p + 1].contains(&me) {
            receivers[p + 1]
                .iter()
                .filter(|&&x| x != me)
                .filter_map(|&x| links[p + 1].sender(x))
                .collect()
        } else {
            Vec::new()
        };
        phases.push(tokio::spawn(async move {
            for reader in readers {
                reader
                    .await
                    .map_err(|e| ClusterError::Invalid(format!("update reader: {e}")))??;
            }
            for end in enders {
                end.send(Vec::new())
                    .await
                    .map_err(|_| ClusterError::Protocol("relay link failed".into()))?;
            }
            Ok::<(), ClusterError>(())
        }));
    }
    for phase in phases {
        phase
            .await
            .map_err(|e| ClusterError::Invalid(format!("update phase: {e}")))??;
    }
    if let Some(data_role) = data_role {
        let (sent, crcs) = data_role
            .await
            .map_err(|e| ClusterError::Invalid(format!("update sender: {e}")))??;
        report.bytes_sent += sent;
        report.crcs = crcs;
    }
    report.bytes_sent += forwarded.load(std::sync::atomic::Ordering::Relaxed);
    report.bytes_received = received.load(std::sync::atomic::Ordering::Relaxed);
    for l in links {
        l.finish().await?;
    }
    if let Some(stage) = stage {
        let stage = Arc::try_unwrap(stage)
            .map_err(|_| ClusterError::Invalid("update stage still shared".into()))?
            .into_inner()
            .expect("stage lock");
        let (coded, id, epoch) = (agent.coded.clone(), task.object.id, task.epoch);
        tokio::task::spawn_blocking(move || coded.stage_update(id, epoch, &stage.chunks))
            .await
            .map_err(|e| ClusterError::Invalid(format!("update thread: {e}")))??;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}
