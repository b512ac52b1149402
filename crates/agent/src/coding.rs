//! An agent's part in an encode or decode ([`CodingTask`]): its local chunks (data shard,
//! parity, rebuilt shards) behind [`Chunks`], its peers behind [`TaskLinks`], and the
//! executor in a blocking thread between them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::time::Instant;

use eckpt_codec::Code;

use super::links::{LinkPlan, TaskLinks};
use super::{blocking, Agent};
use crate::chunk_io::read_checksummed;
use crate::parity_store::{ParityReader, ParityStore, ParityWriter};
use crate::shard::ImageShard;
use crate::stripe_blob::{BlobShard, BlobTee};
use eckpt_cluster_api::io_at;
use eckpt_cluster_api::msg::{CodingTask, ObjectKind, TaskReport};
use eckpt_cluster_api::ClusterError;
use eckpt_coding::exec::{needs, run_participant, Chunks, ExecOptions, Needs};
use eckpt_coding::geometry::Geometry;
use eckpt_coding::plan::{CodingPlan, Input, Output, Work};

/// Where a participant's data shard comes from.
enum DataSource {
    Image(ImageShard),
    /// A stripe blob written earlier (a decode's survivor).
    Blob(BlobShard),
    /// A stripe blob being written as this encode reads it.
    Tee(BlobTee),
}

impl DataSource {
    /// Fills `buf` with shard bytes from `offset` (each source may be read from several
    /// threads at once: positional reads only).
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        match self {
            DataSource::Image(s) => s.read(offset, buf),
            DataSource::Blob(s) => s.read(offset, buf),
            DataSource::Tee(s) => s.read(offset, buf),
        }
    }
}

/// One participant's local side of a coding task.
struct LocalChunks {
    chunk: usize,
    /// Threads each chunk's read or write is shared by.
    threads: usize,
    data: Option<DataSource>,
    parity: Option<ParityReader>,
    parity_out: Option<ParityWriter>,
    /// Rebuilt shards written here, by member.
    rebuilt: BTreeMap<usize, (File, PathBuf)>,
    /// CRC of each data chunk read (the coordinator records them for later verification).
    crcs: Vec<(u64, u32)>,
}

impl Chunks<ClusterError> for LocalChunks {
    fn read(&mut self, input: Input, buf: &mut [u8]) -> Result<(), ClusterError> {
        match input {
            Input::Data(q) => {
                let at = q * self.chunk as u64;
                let source = self
                    .data
                    .as_ref()
                    .ok_or_else(|| ClusterError::Protocol("no data shard here".into()))?;
                let crc = read_checksummed(buf, self.threads, |offset, part| {
                    source.read(at + offset as u64, part)
                })?;
                self.crcs.push((q, crc));
                Ok(())
            }
            Input::Parity(q) => self
                .parity
                .as_ref()
                .ok_or_else(|| ClusterError::Protocol("no parity here".into()))?
                .read(q, buf),
        }
    }

    fn write(&mut self, output: &Output, data: &[u8]) -> Result<(), ClusterError> {
        if let Some((file, path)) = self.rebuilt.get(&output.stream) {
            return file
                .write_all_at(data, output.chunk * self.chunk as u64)
                .map_err(io_at(path));
        }
        self.parity_out
            .as_mut()
            .ok_or_else(|| {
                ClusterError::Protocol(format!("output stream {} is not kept here", output.stream))
            })?
            .write(output.chunk, data, self.threads)
    }
}

/// Path of the shard of `member` rebuilt by `task`.
pub fn rebuilt_path(agent: &Agent, task: u64, member: usize) -> PathBuf {
    agent
        .coded_dir()
        .join(format!("rebuild-t{task}"))
        .join(format!("m{member}"))
}

/// Runs this agent's part of `task`.
pub async fn run(agent: Arc<Agent>, task: CodingTask) -> Result<TaskReport, ClusterError> {
    let started = Instant::now();
    let me = task
        .participants
        .iter()
        .position(|p| p.as_ref().is_some_and(|n| n.name == agent.info.name))
        .ok_or_else(|| {
            ClusterError::Protocol(format!(
                "{} is not a participant of task {}",
                agent.info.name, task.task
            ))
        })?;
    let geometry = task.check()?;
    let n = geometry.members();
    let code = Code::new(task.coding.code, geometry.k(), geometry.m())?;
    let members: Vec<Option<usize>> = (0..n).map(|i| task.participants[i].as_ref().map(|_| i)).collect();
    let work = match &task.decode {
        Some(spec) => Work::Decode {
            unavailable: spec.unavailable.clone(),
            rebuild: spec.rebuild.clone(),
        },
        None => Work::Encode,
    };
    let mut plan = CodingPlan::new(geometry.clone(), code, members, work.clone())?;

    let needs = needs(me, &mut plan, task.coding.topology)?;
    let chunk = task.object.chunk as usize;
    // Opening shards and parity reads manifests and creates files: not on the runtime.
    let local = {
        let (a, t, g, w, n) = (
            agent.clone(),
            task.clone(),
            geometry.clone(),
            work.clone(),
            needs.clone(),
        );
        blocking(move || open_local(&a, &t, me, &g, &w, &n)).await?
    };
    let links = TaskLinks::open(
        &agent,
        &LinkPlan {
            task: task.task,
            phase: 0,
            me,
            nodes: &task.participants,
            send_to: &needs.send_to,
            recv_from: &needs.recv_from,
        },
    )?;
    let debug = agent.dir.debug();
    let who = agent.info.name.clone();
    let phase = match task.decode {
        Some(_) => eckpt_daemon::debug::Phase::MidDecode,
        None => eckpt_daemon::debug::Phase::MidEncode,
    };
    let topology = task.coding.topology;
    let options = ExecOptions {
        chunk,
        threads: agent.coding_threads,
    };
    let (result, links, local) = eckpt_daemon::worker::spawn(move || {
        let mut links = links;
        let mut local = local;
        let mut progress = |done: u64, total: u64| {
            if eckpt_daemon::debug::pause_row(total) == Some(done) {
                eckpt_daemon::debug::pause_point(&debug, phase, &who);
            }
        };
        let result = run_participant(
            me,
            &mut plan,
            topology,
            options,
            &mut links,
            &mut local,
            &mut progress,
        );
        (result, links, local)
    })
    .await?;
    let stats = result?;
    links.finish().await?;
    let report = TaskReport {
        bytes_sent: stats.bytes_sent,
        bytes_received: stats.bytes_received,
        crcs: local.crcs.clone(),
        seconds: 0.0,
    };
    let coded = agent.coded.clone();
    eckpt_daemon::worker::spawn(move || finish_local(local, &coded)).await??;
    Ok(TaskReport {
        seconds: started.elapsed().as_secs_f64(),
        ..report
    })
}

fn open_local(
    agent: &Agent,
    task: &CodingTask,
    me: usize,
    geometry: &Geometry,
    work: &Work,
    needs: &Needs,
) -> Result<LocalChunks, ClusterError> {
    let object = &task.object;
    let chunk = object.chunk as usize;
    let n = task.group.k + task.group.m;
    let data = match object.kind {
        // A blob describe planned here is written by this encode, read or not.
        ObjectKind::Stripe { .. } if agent.coded.has_blob_plan(object.id) => Some(DataSource::Tee(
            BlobTee::start(&agent.store, &agent.coded, object.id)?,
        )),
        _ if !needs.reads_data => None,
        ObjectKind::Image => Some(DataSource::Image(ImageShard::open(
            &agent.store,
            object.shards[me].layout.clone(),
            object.version,
        )?)),
        ObjectKind::Stripe { .. } => Some(DataSource::Blob(BlobShard::open(
            &agent.coded.blob_path(object.id)?,
        )?)),
    };
    let parity = if needs.reads_parity {
        Some(agent.coded.parity_reader(object.id)?)
    } else {
        None
    };
    let mut parity_out = None;
    let mut rebuilt = BTreeMap::new();
    match work {
        Work::Encode if me < n && geometry.parity_chunks(me) > 0 => {
            parity_out = Some(agent.coded.parity_writer(
                object.id,
                geometry.parity_chunks(me),
                object.chunk,
                object.version,
            )?);
        }
        Work::Decode { rebuild, .. } => {
            let mine: Vec<usize> = rebuild
                .iter()
                .filter(|(_, t)| *t == me)
                .map(|(m, _)| *m)
                .collect();
            if !mine.is_empty() {
                agent.coded.scratch(&format!("t{}", task.task))?;
            }
            for member in mine {
                let path = rebuilt_path(agent, task.task, member);
                let file = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(io_at(&path))?;
                file.set_len(geometry.data_chunks(member) * chunk as u64)
                    .map_err(io_at(&path))?;
                rebuilt.insert(member, (file, path));
            }
        }
        Work::Encode => {}
    }
    Ok(LocalChunks {
        chunk,
        threads: agent.coding_threads,
        data,
        parity,
        parity_out,
        rebuilt,
        crcs: Vec::new(),
    })
}

fn finish_local(local: LocalChunks, coded: &ParityStore) -> Result<(), ClusterError> {
    if let Some(DataSource::Tee(tee)) = local.data {
        tee.finish(coded)?;
    }
    if let Some(w) = local.parity_out {
        w.finish()?;
    }
    for (file, path) in local.rebuilt.values() {
        file.sync_all().map_err(io_at(path))?;
    }
    Ok(())
}
