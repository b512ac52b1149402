//! What commands do against a running cluster: ask the coordinator, checkpoint a file as a
//! rank, export a rank's committed image — or, without a cluster, a rank's flushed image.

use std::io::{Read, Write};
use std::path::Path;

use eckpt_proto::{Connection, FrameKind};
use serde::Serialize;

use crate::call::{agent_answer, answer_of, Call, ToCoordinator};
use crate::dirs::{ClusterDir, Deadlines};
use crate::msg::{AgentResponse, CoordRequest, CoordResponse, EpochOutcome, Hello};
use crate::msg::{ExportFrom, ExportItems, ExportRank, OpenEpoch, Opened, PutRank, WaitEpoch};
use crate::msg::{DATA_FRAME, FILE_ITEM};
use crate::net::{ask_agent, host_identity, open, open_node, with_agent};
use crate::ClusterError;
use crate::ErrorKind;

/// Opens a control connection to the coordinator of the cluster in `dir`, waiting at most
/// the cluster's connection wait (`Deadlines::connect`); with the cluster's deadlines.
async fn coordinator(dir: &ClusterDir) -> Result<(Connection, Deadlines), ClusterError> {
    let file = dir.load()?;
    let secret = dir.load_secret()?;
    let endpoint = file.coordinator_from(&host_identity());
    let wait = file.deadlines.connect();
    let opened = tokio::time::timeout(wait, open(endpoint, &secret, &Hello::Control)).await;
    let why = match opened {
        Ok(Ok(conn)) => return Ok((conn, file.deadlines)),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {:.1} s", wait.as_secs_f64()),
    };
    let root = dir.root().display();
    Err(ClusterError::Unreachable(format!(
        "the coordinator of {root} is not reachable ({why}): if the cluster was stopped, `eckpt up --dir {root}` starts it again with its data"
    )))
}

/// Sends one request to the coordinator of the cluster in `dir` ([`ask_coordinator`]),
/// reaching it within `Deadlines::connect` and waiting for each of its words at most
/// `Deadlines::answer`.
pub async fn coordinator_call<C: ToCoordinator>(
    dir: &ClusterDir,
    call: C,
    on_progress: impl FnMut(&CoordResponse),
) -> Result<C::Answer, ClusterError> {
    let who = who(dir);
    let answer = call_once(dir, &who, &call.request(), on_progress).await?;
    answer_of::<C>(&who, answer)
}

/// [`coordinator_call`] bounded by `within`, the connection included: for a call whose
/// answer is worth nothing late. A lease renewal is one — the lease runs out while a renewal
/// waits out a connection that lost its answer, so the renewal is abandoned after a renewal
/// period and the next one goes out on a new connection.
pub async fn coordinator_call_within<C: ToCoordinator>(
    dir: &ClusterDir,
    call: C,
    within: std::time::Duration,
) -> Result<C::Answer, ClusterError> {
    match tokio::time::timeout(within, coordinator_call(dir, call, |_| {})).await {
        Ok(answer) => answer,
        Err(_) => Err(ClusterError::NoAnswer(format!(
            "{} did not answer within {:.1} s",
            who(dir),
            within.as_secs_f64()
        ))),
    }
}

fn who(dir: &ClusterDir) -> String {
    format!("the coordinator of {}", dir.root().display())
}

async fn call_once(
    dir: &ClusterDir,
    who: &str,
    request: &CoordRequest,
    on_progress: impl FnMut(&CoordResponse),
) -> Result<CoordResponse, ClusterError> {
    let (mut conn, deadlines) = coordinator(dir).await?;
    ask(&mut conn, who, request, deadlines.answer(), on_progress).await
}

/// Sends `call` on `conn`, an open control connection to the coordinator (`who` names it
/// in errors), and reads its answer: progress reports go to `on_progress`, an error answer
/// becomes the error. Each word is awaited at most `answer`: a coordinator at work on a
/// long request says so every `Deadlines::keepalive` ([`CoordResponse::Working`]), so only
/// one that stopped or was cut off lets that pass ([`ClusterError::NoAnswer`]).
pub async fn ask_coordinator<C: ToCoordinator>(
    conn: &mut Connection,
    who: &str,
    call: C,
    answer: std::time::Duration,
    on_progress: impl FnMut(&CoordResponse),
) -> Result<C::Answer, ClusterError> {
    let response = ask(conn, who, &call.request(), answer, on_progress).await?;
    answer_of::<C>(who, response)
}

async fn ask(
    conn: &mut Connection,
    who: &str,
    request: &CoordRequest,
    answer: std::time::Duration,
    mut on_progress: impl FnMut(&CoordResponse),
) -> Result<CoordResponse, ClusterError> {
    let unanswered = |why: String| ClusterError::NoAnswer(format!("{who} took the request and {why}"));
    conn.send_control(request)
        .await
        .map_err(|e| unanswered(format!("then the connection failed ({e})")))?;
    loop {
        let word = tokio::time::timeout(answer, conn.recv_control())
            .await
            .map_err(|_| {
                unanswered(format!(
                    "then said nothing for {:.1} s (stopped, or cut off)",
                    answer.as_secs_f64()
                ))
            })?;
        match word {
            Ok(CoordResponse::Working) => {}
            Ok(p @ CoordResponse::Progress { .. }) => on_progress(&p),
            Ok(CoordResponse::Error(e)) => return Err(ClusterError::from_coordinator(e)),
            Ok(other) => return Ok(other),
            Err(e) => {
                let e = ClusterError::from(e);
                return Err(if e.is_retryable() {
                    unanswered(format!("the connection failed before the answer ({e})"))
                } else {
                    e
                });
            }
        }
    }
}

/// [`coordinator_call`], tried again for up to `retry` while the coordinator cannot be
/// reached — restarting, being replaced on another host, cut off for a while — with pauses
/// growing from 0.1 to 2 s. A coordinator never reached is tried again for any request (it
/// was not sent); one that took the request and did not answer, only for a request that may
/// be sent twice ([`CoordRequest::may_repeat`]).
pub async fn coordinator_call_retrying<C: ToCoordinator>(
    dir: &ClusterDir,
    call: C,
    retry: std::time::Duration,
) -> Result<C::Answer, ClusterError> {
    CoordinatorLink::new(dir)?.call_retrying(call, retry).await
}

/// The coordinator of a cluster as a caller of many requests (a rank) reaches it: the
/// connection of a request answered is kept for the next, unless the coordinator has closed
/// it meanwhile (it restarted, was replaced, or closed it idle: it keeps one for
/// [`Deadlines::control_idle`], and the link reuses one only within half of that). A
/// connection and its handshake per request cost the coordinator more than the request
/// itself, and a rank asks it three times per epoch.
pub struct CoordinatorLink {
    dir: ClusterDir,
    who: String,
    /// How long the coordinator's next word may take (`Deadlines::answer`).
    answer: std::time::Duration,
    reuse_within: std::time::Duration,
    kept: Option<(Connection, tokio::time::Instant)>,
}

impl CoordinatorLink {
    /// A link to the coordinator of the cluster in `dir`; it connects on its first request.
    pub fn new(dir: &ClusterDir) -> Result<CoordinatorLink, ClusterError> {
        let deadlines = dir.load()?.deadlines;
        Ok(CoordinatorLink {
            dir: dir.clone(),
            who: who(dir),
            answer: deadlines.answer(),
            reuse_within: deadlines.control_idle() / 2,
            kept: None,
        })
    }

    /// [`coordinator_call_retrying`] over this link.
    pub async fn call_retrying<C: ToCoordinator>(
        &mut self,
        call: C,
        retry: std::time::Duration,
    ) -> Result<C::Answer, ClusterError> {
        let request = call.request();
        let deadline = tokio::time::Instant::now() + retry;
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            let answer = self.call_once(&request).await;
            let again = match &answer {
                Err(ClusterError::Unreachable(_)) => true,
                Err(ClusterError::NoAnswer(_)) => request.may_repeat(),
                _ => false,
            };
            if !again || tokio::time::Instant::now() + pause >= deadline {
                return answer_of::<C>(&self.who, answer?);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_secs(2));
        }
    }

    /// One exchange, on the kept connection when it can carry one, else on a new one.
    async fn call_once(&mut self, request: &CoordRequest) -> Result<CoordResponse, ClusterError> {
        let reuse_within = self.reuse_within;
        let kept = self
            .kept
            .take()
            .filter(|(_, since)| since.elapsed() < reuse_within)
            .and_then(|(mut conn, _)| (!conn.is_spent()).then_some(conn));
        let mut conn = match kept {
            Some(conn) => conn,
            None => coordinator(&self.dir).await?.0,
        };
        let answer = ask(&mut conn, &self.who, request, self.answer, |_| {}).await;
        // An error may have left a word unread: only a connection answered whole is kept.
        if answer.is_ok() {
            self.kept = Some((conn, tokio::time::Instant::now()));
        }
        answer
    }
}

/// What `eckpt checkpoint` did.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointReport {
    /// Rank.
    pub rank: u32,
    /// Epoch written.
    pub epoch: u64,
    /// Node holding the rank.
    pub node: String,
    /// Bytes of the file.
    pub bytes: u64,
    /// The epoch's outcome, when waited for.
    pub outcome: Option<EpochOutcome>,
}

/// What [`checkpoint_file`] checkpoints: `file` as rank `rank` of a job of `world` ranks.
#[derive(Debug, Clone)]
pub struct FileCheckpoint<'a> {
    /// Ranks in the job.
    pub world: u32,
    /// This rank.
    pub rank: u32,
    /// The epoch to write (`None`: the one the coordinator opens).
    pub epoch: Option<u64>,
    /// The node to keep the rank on (`None`: the coordinator's choice).
    pub node: Option<String>,
    /// The checkpoint file.
    pub file: &'a Path,
    /// Return only once the epoch is decided.
    pub wait: bool,
    /// The attempt generation of the job this checkpoint belongs to (`ECKPT_GENERATION`
    /// when `eckpt run` started the caller).
    pub generation: Option<u64>,
}

/// Checkpoints `what.file` as rank `what.rank` of a job of `what.world` ranks: the file
/// becomes the rank's image for the open epoch on its node; with `what.wait`, returns once
/// the epoch is decided.
pub async fn checkpoint_file(
    dir: &ClusterDir,
    what: FileCheckpoint<'_>,
    on_bytes: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<CheckpointReport, ClusterError> {
    let FileCheckpoint {
        world,
        rank,
        epoch,
        node,
        file,
        wait,
        generation,
    } = what;
    let mut input = std::fs::File::open(file).map_err(crate::io_at(file))?;
    let meta = input.metadata().map_err(crate::io_at(file))?;
    // A device or a pipe has no length to checkpoint (`/dev/zero` would be stored as 0 bytes).
    if !meta.is_file() {
        return Err(ClusterError::Invalid(format!(
            "{}: not a regular file; checkpoint a file's copy instead",
            file.display()
        )));
    }
    let len = meta.len();
    // A rank rides out what ranks linking the library ride out: a coordinator restarting,
    // stalled or cut off for up to the retry window.
    let deadlines = dir.load()?.deadlines;
    let retry = deadlines.coordinator_retry();
    let open = OpenEpoch {
        rank,
        world,
        node,
        epoch,
        generation,
    };
    let Opened { epoch, node, .. } = coordinator_call_retrying(dir, open, retry).await?;
    let secret = dir.load_secret()?;
    let mut conn = open_node(&node, &host_identity(), &secret).await?;
    let put = PutRank {
        rank,
        epoch,
        item: FILE_ITEM.into(),
        len,
        generation,
    };
    // Every frame, and the answer once the agent has the whole file, within the wait a
    // peer's stream gets: an agent that stops mid-transfer ends the checkpoint, not the rank.
    let limit = deadlines.peer_wait();
    with_agent(
        &node.name,
        "the checkpoint",
        limit,
        conn.send_control(&put.request()),
    )
    .await?;
    let mut buf = vec![0u8; DATA_FRAME];
    let mut sent = 0u64;
    while sent < len {
        let n = ((len - sent) as usize).min(buf.len());
        input.read_exact(&mut buf[..n]).map_err(crate::io_at(file))?;
        with_agent(&node.name, "the checkpoint", limit, conn.send_data(&buf[..n])).await?;
        sent += n as u64;
        on_bytes(sent, len);
    }
    // The agent answers once the coordinator heard the rank is ready: its own call to the
    // coordinator may take `Deadlines::answer`.
    let answer_wait = limit + deadlines.answer();
    let answer = with_agent(&node.name, "the checkpoint", answer_wait, conn.recv_control()).await?;
    agent_answer::<PutRank>(&node.name, answer)?;
    let outcome = if wait {
        Some(
            coordinator_call_retrying(
                dir,
                WaitEpoch {
                    epoch,
                    decision_only: false,
                },
                retry,
            )
            .await?,
        )
    } else {
        None
    };
    Ok(CheckpointReport {
        rank,
        epoch,
        node: node.name,
        bytes: len,
        outcome,
    })
}

/// What [`receive_items`] hands each piece of an item's data to: the item's index and the bytes.
type TakePiece<'a> = dyn FnMut(usize, &[u8]) -> Result<(), ClusterError> + 'a;

/// Receives an export's items, in the order `items` lists them, handing each piece of data
/// to `take(item index, bytes)`, and stops after the last item `wanted(name)` keeps (`what`:
/// the command, named when the agent stops answering). An
/// error the agent hit mid-stream (a block failing its checksum) arrives as a control frame
/// and becomes the error. Each frame is awaited at most `limit`.
async fn receive_items(
    conn: &mut Connection,
    node: &str,
    what: &str,
    items: &[(String, u64)],
    wanted: impl Fn(&str) -> bool,
    limit: std::time::Duration,
    take: &mut TakePiece<'_>,
) -> Result<(), ClusterError> {
    let Some(last) = items.iter().rposition(|(name, _)| wanted(name)) else {
        return Ok(());
    };
    let mut buf = Vec::new();
    for (index, (name, len)) in items[..=last].iter().enumerate() {
        let mut got = 0u64;
        while got < *len {
            if with_agent(node, what, limit, conn.recv_into(&mut buf)).await? == FrameKind::Control {
                return Err(match serde_json::from_slice(&buf) {
                    Ok(AgentResponse::Error(e)) => ClusterError::remote(node, e),
                    _ => ClusterError::Protocol("unexpected control frame in an export".into()),
                });
            }
            got += buf.len() as u64;
            if got > *len {
                return Err(ClusterError::Protocol(format!(
                    "item {name:?} of the export is longer than the {len} bytes announced"
                )));
            }
            if wanted(name) {
                take(index, &buf)?;
            }
        }
    }
    Ok(())
}

/// Writes item `wanted` of `export` to `path` (made anew), fsynced; the bytes written.
async fn receive_item(export: &mut Export, wanted: &str, path: &Path) -> Result<u64, ClusterError> {
    let mut file = std::fs::File::create(path).map_err(crate::io_at(path))?;
    let mut written = 0u64;
    receive_items(
        &mut export.conn,
        &export.node,
        "the restore",
        &export.items,
        |name| name == wanted,
        export.limit,
        &mut |_, bytes| {
            written += bytes.len() as u64;
            file.write_all(bytes).map_err(crate::io_at(path))
        },
    )
    .await?;
    file.sync_all().map_err(crate::io_at(path))?;
    Ok(written)
}

/// Items of rank `rank`'s committed image at `epoch` (default: the committed epoch), read
/// from its node or decoded from its group when the node is gone — the path of `eckpt
/// restore`, kept in memory: the epoch, and each item `wanted(name)` keeps with its bytes.
/// Every block was verified by the agent that read it; the frames carry their checksums.
pub async fn export_items(
    dir: &ClusterDir,
    rank: u32,
    epoch: Option<u64>,
    wanted: impl Fn(&str) -> bool,
) -> Result<(u64, Vec<(String, Vec<u8>)>), ClusterError> {
    let mut export = Export::start(dir, rank, epoch, false).await?;
    match receive_all(&mut export, &wanted).await {
        Err(e) if export.copy_failed(&e) => {
            let mut decoded = Export::start(dir, rank, epoch, true).await?;
            let kept = receive_all(&mut decoded, &wanted).await?;
            Ok((decoded.epoch, kept))
        }
        received => Ok((export.epoch, received?)),
    }
}

/// The items of `export` that `wanted` keeps, with their bytes.
async fn receive_all(
    export: &mut Export,
    wanted: &impl Fn(&str) -> bool,
) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
    // Reserved up to 64 MiB ahead: the length is the agent's word, not yet the bytes.
    let mut kept: Vec<(String, Vec<u8>)> = export
        .items
        .iter()
        .map(|(name, len)| {
            (
                name.clone(),
                Vec::with_capacity(if wanted(name) {
                    (*len).min(1 << 26) as usize
                } else {
                    0
                }),
            )
        })
        .collect();
    receive_items(
        &mut export.conn,
        &export.node,
        "the export",
        &export.items,
        wanted,
        export.limit,
        &mut |index, bytes| {
            kept[index].1.extend_from_slice(bytes);
            Ok(())
        },
    )
    .await?;
    kept.retain(|(name, _)| wanted(name));
    Ok(kept)
}

/// A rank's committed image being exported: the agent that streams it, and what it streams.
struct Export {
    conn: Connection,
    /// The agent's node.
    node: String,
    epoch: u64,
    /// Whether it was decoded (its node is gone).
    decoded: bool,
    /// The items in the order they come, with their lengths.
    items: Vec<(String, u64)>,
    /// How long each frame may take: the agent reads the rank from its store, as long as a
    /// peer's stream may take to come.
    limit: std::time::Duration,
}

impl Export {
    /// Asks the coordinator where rank `rank` at `epoch` (default: the committed one) is read
    /// from — decoded onto a helper when its node is gone, or when `damaged_copy` and the
    /// coordinator finds the node's copy damaged — and that agent to stream it. A copy the
    /// node cannot even list is damaged too, and asked for again that way.
    async fn start(
        dir: &ClusterDir,
        rank: u32,
        epoch: Option<u64>,
        damaged_copy: bool,
    ) -> Result<Export, ClusterError> {
        let export = ExportRank {
            rank,
            epoch,
            damaged_copy,
        };
        let ExportFrom { node, epoch, scratch } = coordinator_call(dir, export, |_| {}).await?;
        let secret = dir.load_secret()?;
        let limit = dir.load()?.deadlines.peer_wait();
        let mut conn = open_node(&node, &host_identity(), &secret).await?;
        let items = match ask_agent(&mut conn, &node.name, ExportItems { rank, epoch, scratch }, limit).await
        {
            // The copy on the node is damaged before a byte of it came (its manifest fails
            // its seal, its data file is cut short): asked for again, decoded from the group.
            Err(e) if scratch.is_none() && !damaged_copy && e.kind() == ErrorKind::Corrupt => {
                return Box::pin(Export::start(dir, rank, Some(epoch), true)).await;
            }
            items => items?,
        };
        Ok(Export {
            conn,
            node: node.name,
            epoch,
            decoded: scratch.is_some(),
            items,
            limit,
        })
    }

    /// Whether `e`, which ended this export, says the copy on the rank's node is damaged:
    /// the export is then asked for again, decoded from the rank's group.
    fn copy_failed(&self, e: &ClusterError) -> bool {
        !self.decoded && e.kind() == ErrorKind::Corrupt
    }
}

/// What `eckpt restore` did.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    /// Rank.
    pub rank: u32,
    /// Epoch restored.
    pub epoch: u64,
    /// Item written.
    pub item: String,
    /// Bytes written.
    pub bytes: u64,
    /// Agent it was read from.
    pub from: String,
    /// Whether it had to be decoded (its node is gone).
    pub decoded: bool,
    /// Whether it was read from a flush directory (`from` is its path).
    pub from_flush: bool,
}

/// Writes item `item` (default: the rank's only item, or the checkpointed file) of rank
/// `rank`'s committed image to `out`, decoding it when its node is gone. The output
/// appears only when complete (written to a temporary name, then renamed).
pub async fn restore(
    dir: &ClusterDir,
    rank: u32,
    epoch: Option<u64>,
    item: Option<&str>,
    out: &Path,
) -> Result<RestoreReport, ClusterError> {
    refuse_directory(out)?;
    let mut export = Export::start(dir, rank, epoch, false).await?;
    let names: Vec<&str> = export.items.iter().map(|(n, _)| n.as_str()).collect();
    let wanted = choose_item(rank, &names, item)?;
    let tmp = temp_output(out);
    let mut received = receive_item(&mut export, &wanted, &tmp).await;
    if received.as_ref().is_err_and(|e| export.copy_failed(e)) {
        received = match Export::start(dir, rank, epoch, true).await {
            Ok(decoded) => {
                export = decoded;
                receive_item(&mut export, &wanted, &tmp).await
            }
            Err(e) => Err(e),
        };
    }
    let written = publish_output(&tmp, out, received)?;
    Ok(RestoreReport {
        rank,
        epoch: export.epoch,
        item: wanted,
        bytes: written,
        from: export.node,
        decoded: export.decoded,
        from_flush: false,
    })
}

/// The item a restore writes: the one asked for, else the rank's only item, else the
/// checkpointed file; one line naming the items when the choice is not clear.
fn choose_item(rank: u32, names: &[&str], item: Option<&str>) -> Result<String, ClusterError> {
    let wanted = match item {
        Some(i) => i.to_string(),
        None if names.len() == 1 => names[0].to_string(),
        None if names.contains(&FILE_ITEM) => FILE_ITEM.to_string(),
        None => {
            return Err(ClusterError::Invalid(format!(
                "rank {rank} holds several items ({}): choose one with --item",
                names.join(", ")
            )))
        }
    };
    if !names.contains(&wanted.as_str()) {
        return Err(ClusterError::NotFound(format!(
            "rank {rank} has no item {wanted:?} (it has {})",
            names.join(", ")
        )));
    }
    Ok(wanted)
}

/// Where a restore writes before its output is complete.
fn temp_output(out: &Path) -> std::path::PathBuf {
    eckpt_durable::temp_path(out)
}

/// Publishes the complete (fsynced) temporary output, or removes it after a failure.
fn publish_output(tmp: &Path, out: &Path, written: Result<u64, ClusterError>) -> Result<u64, ClusterError> {
    let written = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(tmp);
            return Err(e);
        }
    };
    if let Err(e) = eckpt_durable::rename_durably(tmp, out) {
        let _ = std::fs::remove_file(tmp);
        return Err(crate::io_at(out)(e));
    }
    Ok(written)
}

/// A restore's output must name a file, not a directory.
fn refuse_directory(out: &Path) -> Result<(), ClusterError> {
    if out.is_dir() {
        return Err(ClusterError::Invalid(format!(
            "{}: is a directory; give the file to write",
            out.display()
        )));
    }
    Ok(())
}

/// `eckpt restore --from-flush`: writes item `item` of rank `rank` of flushed epoch `epoch`
/// (default: the newest that opens) from the flush directory `flush` to `out` — no cluster
/// needed. Every block is verified before it is written, the item's hash at its end; the
/// output appears only when complete and intact.
pub fn restore_flushed(
    flush: &Path,
    rank: u32,
    epoch: Option<u64>,
    item: Option<&str>,
    out: &Path,
) -> Result<RestoreReport, ClusterError> {
    refuse_directory(out)?;
    let dir = eckpt_flush::FlushDir::new(flush);
    let flushed = match epoch {
        Some(e) => dir.open(e)?,
        None => dir.newest()?.0,
    };
    let entry = flushed.manifest().rank(rank).ok_or_else(|| {
        ClusterError::NotFound(format!(
            "flushed epoch {} has no rank {rank} (the job had {} ranks)",
            flushed.epoch(),
            flushed.manifest().world
        ))
    })?;
    let names: Vec<&str> = entry.items.iter().map(|i| i.name.as_str()).collect();
    let wanted = choose_item(rank, &names, item)?;
    let tmp = temp_output(out);
    let copied = std::fs::File::create(&tmp)
        .map_err(crate::io_at(&tmp))
        .and_then(|mut file| {
            let n = flushed.copy_item(rank, &wanted, &mut file)?;
            file.sync_all().map_err(crate::io_at(&tmp))?;
            Ok(n)
        });
    let written = publish_output(&tmp, out, copied)?;
    Ok(RestoreReport {
        rank,
        epoch: flushed.epoch(),
        item: wanted,
        bytes: written,
        from: flush.display().to_string(),
        decoded: false,
        from_flush: true,
    })
}
