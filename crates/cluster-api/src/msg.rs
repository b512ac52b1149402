//! Control messages (JSON frames) between commands, the coordinator and agents, and the
//! records the coordinator journals and hands out.

use std::collections::BTreeMap;
use std::path::PathBuf;

use eckpt_coding::{CodingConfig, Layout, Mode, ObjectId, Topology};
use eckpt_proto::Endpoint;
use serde::{Deserialize, Serialize};

use crate::dirs::FlushConfig;
use crate::error::WireError;
use crate::shard_layout::ShardLayout;

/// The item name `eckpt checkpoint FILE` stores a file under.
pub const FILE_ITEM: &str = "file";

/// Frames of bulk data are at most this long.
pub const DATA_FRAME: usize = 4 << 20;

/// First frame on every connection after authentication: what the connection is for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Hello {
    /// Requests and responses.
    Control,
    /// Requests and responses from the coordinator of `term` (see `Registered::term`): an
    /// agent refuses a coordinator older than the newest it has heard of.
    Coordinator {
        /// The coordinator's term.
        term: u64,
    },
    /// An agent's long-lived session with the coordinator (registration, what it holds,
    /// heartbeats).
    Session(Registration),
    /// A stream of coding data from participant `from` of task `task`, in `phase`.
    Peer {
        /// Task id.
        task: u64,
        /// Sending participant.
        from: usize,
        /// Phase (update mode sends each parity index's records over links of their own; 0
        /// otherwise).
        phase: u32,
    },
}

/// How to reach an agent and what it offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node name (`n0`, `s1`, …).
    pub name: String,
    /// Joined as a spare (holds nothing until it replaces a lost node).
    pub spare: bool,
    /// TCP listener.
    pub tcp: Endpoint,
    /// Unix socket (used by peers on the same host).
    pub unix: Endpoint,
    /// Host identity: peers with the same identity share a kernel network namespace and a
    /// filesystem, so Unix sockets work between them.
    pub host: String,
    /// CPU cores the node offers (placement balances ranks per core).
    pub cores: u32,
    /// The node-local store root.
    pub store: PathBuf,
    /// Agent process id.
    pub pid: u32,
}

/// What an agent registers with: how to reach it, and the proof that it is the node it
/// names — the token kept in its store since its first registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registration {
    /// How to reach the agent.
    pub info: NodeInfo,
    /// The node's token, from its store (`agent/identity.rs`). Not part of [`NodeInfo`],
    /// which every rank and peer sees.
    pub token: String,
    /// The token was made just now: the store was new or wiped, so the node holds nothing
    /// of what the cluster committed.
    pub fresh: bool,
    /// The failure domain the agent says it runs in (`eckpt agent --domain`): where a node
    /// is, its host knows best. `None` keeps what the journal says (`up --domain`, or none).
    #[serde(default)]
    pub domain: Option<String>,
}

/// What an agent holds after resolving what was left undecided: the first message of its
/// session. The coordinator compares it with its journal; a node missing committed data is
/// damaged, not healthy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// Every rank in the store, with its newest committed epoch (`None`: none committed).
    pub ranks: Vec<(u32, Option<u64>)>,
    /// Committed coded objects (parity, stripe blobs).
    pub objects: Vec<ObjectId>,
}

/// Who runs a job: the `eckpt run` that holds its lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseHolder {
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// When it took the lease (seconds since the Unix epoch).
    pub since_unix: f64,
    /// Its command line, for messages.
    pub command: String,
    /// Its run id, which names its launches (`ECKPT_LAUNCH` is `<run>-<attempt>`): the run
    /// that takes the job over from it ends its processes on its host by it.
    #[serde(default)]
    pub run: Option<String>,
}

impl std::fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "eckpt run pid {} on host {}", self.pid, self.host)
    }
}

/// How `eckpt run` starts a job the cluster may already hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStart {
    /// Resume its last committed epoch, if any; a finished job is refused.
    #[default]
    Default,
    /// Discard the cluster's checkpoints of the job and start over.
    Fresh,
    /// Continue a finished job from its final epoch.
    Resume,
}

/// `eckpt run`'s claim on a cluster's job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobClaim {
    /// The job's id: given (`--job`), or the batch system's; `None` takes the job the
    /// cluster holds, or a new one.
    pub job: Option<String>,
    /// Who claims it.
    pub holder: LeaseHolder,
    /// Resume, start over, or continue a finished job.
    pub start: JobStart,
    /// The ranks the claimer runs the job with: a claim of a job checkpointed with another
    /// number is refused (unless `--fresh`) before anything changes.
    #[serde(default)]
    pub world: Option<u32>,
}

/// The job granted to a supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobGrant {
    /// The job's id.
    pub job: String,
    /// The attempt's generation: every rank request carries it; older ones are refused.
    pub generation: u64,
    /// The job's last committed epoch (0: it starts fresh).
    pub committed: u64,
    /// `--fresh` discarded the job's checkpoint of this epoch.
    pub discarded: Option<u64>,
    /// The holder whose lease expired unreleased and whom this claim replaced: its ranks
    /// may still run, and the new holder ends those on its host before it launches.
    #[serde(default)]
    pub superseded: Option<LeaseHolder>,
}

/// The job a cluster holds, in `eckpt status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobStatus {
    /// Its id.
    pub id: String,
    /// The current attempt's generation.
    pub generation: u64,
    /// The supervisor holding its lease, if any.
    pub holder: Option<LeaseHolder>,
    /// Seconds since the holder last renewed the lease.
    pub renewed_seconds_ago: Option<f64>,
    /// Seconds until the lease expires unless renewed (0: expired).
    pub lease_left_seconds: Option<f64>,
    /// When the job finished (every rank exited 0), seconds since the Unix epoch.
    pub finished_unix: Option<f64>,
}

/// What `eckpt down --purge` did with one node's node-local data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodePurge {
    /// The node.
    pub node: String,
    /// The directories deleted, or why not.
    pub result: Result<Vec<PathBuf>, String>,
}

impl NodeInfo {
    /// The endpoint a peer on host `from_host` should use.
    pub fn endpoint_from(&self, from_host: &str) -> &Endpoint {
        if from_host == self.host {
            &self.unix
        } else {
            &self.tcp
        }
    }
}

/// A group as formed: `k + m` members in position order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// Id, new each time groups are formed.
    pub id: u64,
    /// Data shards per row.
    pub k: usize,
    /// Parity shards per row.
    pub m: usize,
    /// Member node names by position.
    pub members: Vec<String>,
}

/// What kind of data shards an object codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    /// Node images laid out by [`ShardLayout`]s (modes `full` and `update`).
    Image,
    /// Stripe blobs of deltas; `complete` for the first of a chain.
    Stripe {
        /// Whether the blobs hold complete images.
        complete: bool,
    },
}

/// One member's data shard in an object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRecord {
    /// Where each rank item sits (image objects).
    pub layout: ShardLayout,
    /// Ranks in the shard (stripe objects list them here too).
    pub ranks: Vec<u32>,
    /// Unpadded length.
    pub len: u64,
    /// CRC-32C of each chunk of the zero-padded shard: decoded data is checked against them.
    pub crcs: Vec<u32>,
}

/// A committed coded object of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    /// Object id.
    pub id: ObjectId,
    /// Image or stripe.
    pub kind: ObjectKind,
    /// The epoch whose state the object describes (an `update` lineage moves it forward).
    pub version: u64,
    /// Chunk size.
    pub chunk: u32,
    /// Chunks in the longest data shard (the geometry's size).
    pub data_chunks: u64,
    /// Per member position (parity-only members have empty records).
    pub shards: Vec<ShardRecord>,
}

/// A group and the objects that protect its committed state (one for image modes; the
/// stripe chain, oldest first, in stripe mode). Empty until the group's first encode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The group.
    pub group: Group,
    /// Objects, oldest first.
    pub objects: Vec<ObjectRecord>,
}

/// What a decode target does with rebuilt shards once verified.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Deliver {
    /// Install each rank's image at `epoch` on its node (rank → node).
    Import {
        /// Rank → node that now hosts it.
        placement: BTreeMap<u32, NodeInfo>,
    },
    /// Keep rank `rank`'s image in a scratch store for [`AgentRequest::Export`].
    Export {
        /// The rank to export.
        rank: u32,
    },
}

/// What a decode rebuilds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecodeSpec {
    /// Members whose shards cannot be read.
    pub unavailable: Vec<usize>,
    /// `(member, target participant)` for each member to rebuild.
    pub rebuild: Vec<(usize, usize)>,
}

/// A coding task: encode or decode one object of one group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CodingTask {
    /// Task id (unique per coordinator).
    pub task: u64,
    /// The group.
    pub group: Group,
    /// Code and layout.
    pub coding: CodingConfig,
    /// The object: for an encode its id, kind, version and layouts; for a decode the
    /// committed record.
    pub object: ObjectRecord,
    /// Participant nodes; members come first, in position order (`None` for members that
    /// take no part), then extra targets.
    pub participants: Vec<Option<NodeInfo>>,
    /// Decode: what to rebuild, from what (`None`: encode).
    pub decode: Option<DecodeSpec>,
}

/// An `update` epoch: changed blocks' `X·(old ⊕ new)` folded into staged parity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateTask {
    /// Task id.
    pub task: u64,
    /// The group (all members take part).
    pub group: Group,
    /// Code, layout and topology.
    pub coding: CodingConfig,
    /// The committed object being updated (its `version` is the parent state).
    pub object: ObjectRecord,
    /// The epoch the update brings the object to.
    pub epoch: u64,
    /// Member nodes by position.
    pub participants: Vec<NodeInfo>,
    /// The members' layouts at `epoch` (same offsets, new lengths).
    pub layouts: Vec<ShardLayout>,
}

/// What the coordinator asks of a data member before an encode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DescribeRequest {
    /// Epoch being encoded.
    pub epoch: u64,
    /// The ranks this node hosts.
    pub ranks: Vec<u32>,
    /// Mode in force.
    pub mode: Mode,
    /// The object the encode will create (stripe blobs are stored under it).
    pub object: ObjectId,
    /// Stripe: whether this stripe starts a chain (complete images).
    pub complete: bool,
    /// Update: the member's current layout and the parity's version; the answer says
    /// whether the epoch can be an update.
    pub update_from: Option<(ShardLayout, u64)>,
}

/// A data member's answer to [`DescribeRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardInfo {
    /// Unpadded shard length.
    pub len: u64,
    /// Image modes: the layout (refitted for an update).
    pub layout: ShardLayout,
    /// Update: whether the epoch fits the existing layout and parity version.
    pub updatable: bool,
    /// Update: bytes the epoch stores as changed blocks (what an update would send).
    pub changed: u64,
}

/// Result of a task at one participant.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskReport {
    /// Payload bytes sent to other participants.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// CRCs of the participant's data-shard chunks read (encode) or changed (update).
    pub crcs: Vec<(u64, u32)>,
    /// Seconds the participant spent.
    pub seconds: f64,
}

/// Requests an agent serves: each carries its request type, which names the answer it
/// gets ([`Call`](crate::call::Call)).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AgentRequest {
    /// Store a rank's file as its prepared epoch (`eckpt checkpoint`).
    PutRank(PutRank),
    /// Install an image as a rank's committed epoch.
    ImportRank(ImportRank),
    /// Describe this node's shard for an encode.
    Describe(DescribeRequest),
    /// Take part in an encode or decode.
    Code(CodingTask),
    /// Take part in an update.
    Update(UpdateTask),
    /// Verify rebuilt shards and deliver the ranks.
    Install(Install),
    /// The coordinator's decision to commit an epoch.
    Commit(Commit),
    /// The coordinator's decision to abort an epoch.
    Abort(Abort),
    /// Verify what is held; report damage.
    Scrub(Scrub),
    /// Stop waiting for the peer streams of a task.
    CancelTask(CancelTask),
    /// Copy a rank's committed image to another node.
    MoveRank(MoveRank),
    /// Stream a rank's items.
    Export(ExportItems),
    /// Copy committed images into a flush's staging directory.
    Flush(FlushRanks),
    /// Prepare flushed images as an epoch of this node.
    ImportFlushed(ImportFlushed),
    /// Send bytes to a peer as fast as possible.
    LinkTest(LinkTest),
    /// Receive and discard a link test.
    LinkSink(LinkSink),
    /// Delete the node-local data and exit.
    Purge(PurgeNode),
    /// Delete every rank's epochs and every coded object.
    Discard(Discard),
    /// Exit.
    Shutdown(StopAgent),
}

impl AgentRequest {
    /// Whether the agent's work for it does not grow with a rank's bytes (a cancel, a
    /// shard's description, a decision, a deletion): its answer is due within the peer
    /// wait, so an agent that heartbeats but whose handler hangs cannot hold its caller.
    /// The others move or read checkpoint bytes: each of their frames has the peer wait on
    /// both ends, and the coordinator gives up on an agent that stops heartbeating.
    pub fn is_constant_work(&self) -> bool {
        matches!(
            self,
            AgentRequest::Describe(_)
                | AgentRequest::Commit(_)
                | AgentRequest::Abort(_)
                | AgentRequest::CancelTask(_)
                | AgentRequest::Purge(_)
                | AgentRequest::Discard(_)
                | AgentRequest::Shutdown(_)
        )
    }

    /// Whether the agent reports [`AgentResponse::Working`] while it works on it: a request
    /// of one exchange whose work grows with the data (a coding task, a flush). Its caller
    /// cannot bound the whole exchange, so it bounds the silence between frames instead,
    /// and an answer lost on a connection that stays up (or an agent wedged on it while its
    /// heartbeats go on) ends the wait as a dead agent would.
    pub fn reports_working(&self) -> bool {
        self.is_one_exchange() && !self.is_constant_work()
    }

    /// Whether its exchange is this request and one answer, after which the connection
    /// can carry the next request. Not so for those that stream data frames after the
    /// request or the answer, nor for those that end the agent.
    pub fn is_one_exchange(&self) -> bool {
        !matches!(
            self,
            AgentRequest::PutRank(_)
                | AgentRequest::ImportRank(_)
                | AgentRequest::Export(_)
                | AgentRequest::LinkSink(_)
                | AgentRequest::Purge(_)
                | AgentRequest::Shutdown(_)
        )
    }
}

/// Store `item` (`len` bytes, sent as data frames next) as rank `rank`'s prepared epoch
/// `epoch`, then report it ready (`eckpt checkpoint`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutRank {
    /// Rank.
    pub rank: u32,
    /// Epoch.
    pub epoch: u64,
    /// Item name.
    pub item: String,
    /// Bytes that follow.
    pub len: u64,
    /// The writer's attempt generation, passed on with the rank's `RankReady`.
    #[serde(default)]
    pub generation: Option<u64>,
}

/// Install an image as committed epoch `epoch` of `rank`; the items follow as data
/// frames in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportRank {
    /// Rank.
    pub rank: u32,
    /// Epoch.
    pub epoch: u64,
    /// `(item, length)` in the order sent.
    pub items: Vec<(String, u64)>,
}

/// After decode tasks: verify this node's rebuilt shards of `member` (one per object of
/// the chain) and deliver the ranks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Install {
    /// Tasks whose rebuilt shards to use, in chain order, with their object records.
    pub parts: Vec<(u64, ObjectRecord)>,
    /// Member position rebuilt.
    pub member: usize,
    /// Epoch of the resulting images.
    pub epoch: u64,
    /// What to do with them.
    pub deliver: Deliver,
}

/// The coordinator's decision: commit `epoch` for `ranks`, commit the prepared
/// objects listed (and apply staged updates to `version`), keep only `keep`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Commit {
    /// Epoch.
    pub epoch: u64,
    /// Ranks whose prepared epoch to commit.
    pub ranks: Vec<u32>,
    /// Objects to commit: `(id, staged update version or None)`.
    pub objects: Vec<(ObjectId, Option<u64>)>,
    /// Objects this node keeps; others are removed.
    pub keep: Vec<ObjectId>,
}

/// The coordinator's decision: abort `epoch` (prepared rank epochs, prepared objects,
/// staged updates).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Abort {
    /// Epoch.
    pub epoch: u64,
}

/// Verify every committed rank epoch and coded object held; report damage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scrub {
    /// Ranks and the epoch to check.
    pub ranks: Vec<u32>,
    /// Epoch.
    pub epoch: u64,
    /// Objects to check.
    pub objects: Vec<ObjectId>,
}

/// Stop waiting for peer streams of `task`: a participant is gone (sent by the
/// coordinator, so the survivors fail at once instead of after the peer wait).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelTask {
    /// Task id.
    pub task: u64,
    /// Why, for the participants' errors.
    pub reason: String,
}

/// Copy rank `rank`'s committed image of `epoch` to node `to` (recovery moves ranks off a
/// node that becomes a parity-only member of the re-formed groups).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MoveRank {
    /// Rank.
    pub rank: u32,
    /// Epoch (committed).
    pub epoch: u64,
    /// The node that hosts the rank from now on.
    pub to: NodeInfo,
}

/// Stream a rank's items at `epoch` (from a scratch store left by a decode when
/// `scratch` names its task).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportItems {
    /// Rank.
    pub rank: u32,
    /// Epoch.
    pub epoch: u64,
    /// Scratch task, if the image was decoded.
    pub scratch: Option<u64>,
}

/// Copy committed `epoch` of each of `ranks` (deltas resolved) into the flush's staging
/// directory, pinned in the store meanwhile, at most `rate` bytes per second.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlushRanks {
    /// The epoch (committed).
    pub epoch: u64,
    /// The ranks this node hosts.
    pub ranks: Vec<u32>,
    /// The staging directory of the flush (on storage every node sees).
    pub staging: PathBuf,
    /// Bytes per second at most (`None`: unbounded).
    pub rate: Option<u64>,
}

/// Prepare flushed epoch `epoch` of each of `ranks`, read from the flush directory
/// `flush` and verified, as this node's epoch `as_epoch` (committed on the
/// coordinator's decision like any epoch).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportFlushed {
    /// The flush directory.
    pub flush: PathBuf,
    /// The flushed epoch.
    pub epoch: u64,
    /// The epoch number the images take in the cluster.
    pub as_epoch: u64,
    /// The ranks this node hosts from now on.
    pub ranks: Vec<u32>,
}

/// Send `bytes` to `peer` as fast as possible: the link reference of benchmarks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkTest {
    /// Receiver.
    pub peer: NodeInfo,
    /// Bytes to send.
    pub bytes: u64,
}

/// Receive and discard a link test (sent by the tester on its own connection).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LinkSink;

/// Delete the node-local data (store, parity, token) and exit (`eckpt down --purge`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PurgeNode;

/// Delete every rank's epochs and every coded object: the job starts over (`eckpt run
/// --fresh`; the coordinator's journal already forgot them).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Discard;

/// Exit.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct StopAgent;

/// What an agent answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AgentResponse {
    /// Done.
    Ok,
    /// Still at work on the request ([`AgentRequest::reports_working`]); the answer follows.
    Working,
    /// Failed: what kind of failure, and the reason.
    Error(WireError),
    /// Answer to `Describe`.
    Shard(ShardInfo),
    /// Answer to `Code` and `Update`.
    Task(TaskReport),
    /// Answer to `Scrub`.
    Damage(Damage),
    /// Answer to `Export`: items and lengths, followed by data frames.
    Items(Vec<(String, u64)>),
    /// Answer to `LinkTest`: seconds taken.
    Link(f64),
    /// Answer to `Flush`: this node's ranks as flushed.
    Flushed(FlushPart),
    /// Answer to `Purge`: the directories deleted.
    Purged(Vec<PathBuf>),
}

impl std::fmt::Display for FlushRestore {
    /// The one line that says the job restarted from its flush, and why.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for node in self.placement.values() {
            *per_node.entry(node).or_default() += 1;
        }
        let nodes: Vec<String> = per_node.iter().map(|(n, c)| format!("{n}:{c}")).collect();
        write!(
            f,
            "restored the {}-rank job from flushed epoch {} as epoch {} ({}); ranks per node {}; import {:.2} s, encode {:.2} s",
            self.world,
            self.flushed_epoch,
            self.epoch,
            self.reason,
            nodes.join(" "),
            self.import_seconds,
            self.encode_seconds
        )?;
        if !self.skipped.is_empty() {
            write!(f, "; skipped {}", self.skipped.join("; "))?;
        }
        Ok(())
    }
}

/// One node's part of a flush.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlushPart {
    /// Each rank's items with their checksums, for the epoch's manifest.
    pub ranks: Vec<eckpt_flush::RankEntry>,
    /// Bytes written.
    pub bytes: u64,
    /// Seconds the node spent (pacing included).
    pub seconds: f64,
}

/// A flush published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlushReport {
    /// The epoch flushed.
    pub epoch: u64,
    /// Ranks in it.
    pub ranks: u32,
    /// Bytes of every rank's image.
    pub bytes: u64,
    /// Seconds from the start of the flush to its publication.
    pub seconds: f64,
    /// Seconds of the slowest node's copy.
    pub slowest_node_seconds: f64,
    /// Where it was published.
    pub dir: PathBuf,
}

/// The cluster's flushing, in `eckpt status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlushStatus {
    /// The configuration.
    pub config: FlushConfig,
    /// The epoch being flushed, if any.
    pub running: Option<u64>,
    /// Published epochs in the flush directory, ascending.
    pub flushed: Vec<u64>,
    /// The last flush published by this coordinator.
    pub last: Option<FlushReport>,
    /// Why the last flush failed, if it did (cleared by the next success).
    pub last_error: Option<String>,
}

/// A restart from a flushed epoch (more than `m` losses in a group, empty node stores).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlushRestore {
    /// The flushed epoch the job resumes from.
    pub flushed_epoch: u64,
    /// The epoch number it takes in the cluster (epochs never go back: later epochs are
    /// numbered after it).
    pub epoch: u64,
    /// Ranks of the job.
    pub world: u32,
    /// Where each rank now lives.
    pub placement: BTreeMap<u32, String>,
    /// Why the node-level levels could not serve (what was lost).
    pub reason: String,
    /// Newer flushed epochs that could not be used, and why.
    pub skipped: Vec<String>,
    /// Seconds spent reading the flush into the node stores.
    pub import_seconds: f64,
    /// Seconds spent encoding the new groups' parity.
    pub encode_seconds: f64,
}

/// One node in a status report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Name.
    pub name: String,
    /// Whether its agent is connected.
    pub alive: bool,
    /// `host:port` of its TCP listener.
    pub addr: String,
    /// Ranks it hosts.
    pub ranks: Vec<u32>,
    /// Whether it is a spare.
    pub spare: bool,
    /// Group id and position, if a member.
    pub group: Option<(u64, usize)>,
    /// Whether its data was rebuilt elsewhere after a loss (it holds nothing now).
    pub removed: bool,
    /// Whether it holds a data position of its group: only such nodes host ranks (a rank
    /// on a parity-only member would be in no data shard).
    #[serde(default)]
    pub hosts_ranks: bool,
    /// Alive but missing committed data it should hold (its store was wiped, or lost
    /// epochs): `eckpt recover` rebuilds it.
    #[serde(default)]
    pub damaged: Option<String>,
    /// Its failure domain, if known.
    #[serde(default)]
    pub domain: Option<String>,
    /// Not heard from since the coordinator started, which gives every node an agent's
    /// longest reconnection to register again (after a restart or a failover): down but
    /// not lost, unless it stays silent beyond that.
    #[serde(default)]
    pub awaited: bool,
    /// Seconds since the coordinator last heard the node: its last heartbeat (or request),
    /// or the moment its connection closed when that came within the liveness period of
    /// the last heartbeat (an agent killed). A node declared dead was lost no earlier:
    /// `eckpt run` measures a recovery from then. `None`: not heard since the coordinator
    /// started.
    #[serde(default)]
    pub silent_seconds: Option<f64>,
}

/// `eckpt status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    /// Coding configuration.
    pub coding: CodingConfig,
    /// Latest committed epoch (0: none).
    pub committed_epoch: u64,
    /// Epoch ranks checkpoint next.
    pub open_epoch: u64,
    /// Ranks that reported the open epoch.
    pub ranks_ready: Vec<u32>,
    /// Job size, once known.
    pub world: Option<u32>,
    /// Nodes.
    pub nodes: Vec<NodeStatus>,
    /// Groups with their members and protection.
    pub groups: Vec<GroupStatus>,
    /// Flushes to shared storage, when the cluster makes them.
    #[serde(default)]
    pub flush: Option<FlushStatus>,
    /// The job the cluster holds, once a supervisor claimed it.
    #[serde(default)]
    pub job: Option<JobStatus>,
    /// The coordinator has heard from no agent for this many seconds and suspects its own
    /// link rather than every node: nobody is declared dead meanwhile (up to the cluster's
    /// partition grace).
    #[serde(default)]
    pub isolated_seconds: Option<f64>,
    /// The coordinator's term (one more at each start on the cluster's journal).
    #[serde(default)]
    pub coordinator_term: u64,
    /// Bytes the coordinator wrote to its journal's files since it started.
    #[serde(default)]
    pub journal_bytes_written: u64,
}

/// A group in a status report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupStatus {
    /// Id.
    pub id: u64,
    /// Shape.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Members.
    pub members: Vec<String>,
    /// Members whose agent is down.
    pub lost: Vec<String>,
    /// Epoch the group's parity protects (0: none).
    pub protected_epoch: u64,
    /// A failure domain holding more than `m` of its members, and how many.
    #[serde(default)]
    pub exposed: Option<(String, usize)>,
    /// Stripe chain length (1 for image modes).
    pub objects: usize,
}

/// How an epoch ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpochOutcome {
    /// Epoch.
    pub epoch: u64,
    /// Whether it committed.
    pub committed: bool,
    /// Why not.
    pub reason: Option<String>,
    /// Seconds from the start of encoding to the last participant finishing.
    pub encode_seconds: f64,
    /// What each group's encode was (`full`, `stripe`, `update`).
    pub kinds: Vec<String>,
    /// Payload bytes each node sent while encoding.
    pub bytes_sent: BTreeMap<String, u64>,
    /// Padded data-shard bytes per group member.
    pub shard_bytes: u64,
    /// Bytes of every rank's complete image at this epoch (what a full checkpoint writes).
    #[serde(default)]
    pub image_bytes: u64,
    /// Bytes the ranks actually stored for this epoch (changed blocks of a delta epoch).
    #[serde(default)]
    pub stored_bytes: u64,
    /// The job's attempt generation when the epoch was decided (its ranks'), so that a
    /// supervisor records only its own epochs; `None` when the coordinator no longer knows.
    #[serde(default)]
    pub generation: Option<u64>,
}

impl EpochOutcome {
    /// The decision alone: the outcome without its figures per group (`kinds`) and per node
    /// (`bytes_sent`).
    pub fn decision(&self) -> EpochOutcome {
        EpochOutcome {
            reason: self.reason.clone(),
            kinds: Vec::new(),
            bytes_sent: BTreeMap::new(),
            ..*self
        }
    }
}

/// What a rank says about the epoch it reports ready: its sizes, for the epoch's outcome,
/// and its pace, from which every rank derives the same checkpoint schedule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankReport {
    /// Bytes of the rank's complete image at this epoch.
    pub image_bytes: u64,
    /// Bytes the rank stored for this epoch.
    pub stored_bytes: u64,
    /// The rank's pace since its previous decision point (ranks that checkpoint through
    /// `snapshot()`).
    pub pace: Option<PaceReport>,
}

/// One rank's measurements between two decision points of `snapshot()`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaceReport {
    /// `snapshot()` calls in the window.
    pub calls: u64,
    /// Seconds the rank computed in the window (time inside checkpoints excluded).
    pub seconds: f64,
    /// Seconds its last checkpoint blocked it (`None` before its first).
    pub checkpoint_seconds: Option<f64>,
    /// The rank's interval policy (`30s`, `auto/mtbf=86400s`): every rank must use the same.
    pub policy: String,
}

/// The job's pace, aggregated over every rank's [`PaceReport`] of one decision point: the
/// slowest rank sets it. Every rank receives the same figures and so computes the same
/// next checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaceStats {
    /// Seconds per `snapshot()` call of the slowest rank.
    pub step_seconds: f64,
    /// The longest time a checkpoint blocked a rank (`None` before the first).
    pub checkpoint_seconds: Option<f64>,
}

/// Where recovery puts the ranks of a lost node when no spare replaces it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Relocation {
    /// Each rank on its own to the least loaded survivor (per process): the load stays
    /// balanced, ranks per node differ by at most one.
    #[default]
    Process,
    /// All ranks of a lost node together to one survivor (per node, what node-level restart
    /// does): for comparison.
    Node,
}

impl std::str::FromStr for Relocation {
    type Err = String;
    fn from_str(s: &str) -> Result<Relocation, String> {
        match s {
            "process" => Ok(Relocation::Process),
            "node" => Ok(Relocation::Node),
            _ => Err(format!("relocation {s:?}: expected process or node")),
        }
    }
}

impl std::fmt::Display for Relocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Relocation::Process => "process",
            Relocation::Node => "node",
        })
    }
}

/// What `eckpt recover` did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// Epoch recovered.
    pub epoch: u64,
    /// Nodes whose data was rebuilt, and where each rank now lives.
    pub rebuilt: Vec<(String, BTreeMap<u32, String>)>,
    /// Nodes whose damaged data was repaired in place.
    pub repaired: Vec<String>,
    /// Ranks copied between living nodes so that each sits at a data position:
    /// `(rank, from, to)`.
    #[serde(default)]
    pub moved: Vec<(u32, String, String)>,
    /// Groups re-encoded.
    pub reencoded: Vec<u64>,
    /// Seconds spent decoding (the decode tasks, installing what they rebuilt, and moving
    /// ranks).
    pub decode_seconds: f64,
    /// Seconds of the decode tasks alone: the parallel decode, before anything is installed.
    #[serde(default)]
    pub decode_task_seconds: f64,
    /// Payload bytes each node sent and received in the decode tasks.
    #[serde(default)]
    pub decode_traffic: BTreeMap<String, (u64, u64)>,
    /// Seconds spent re-encoding.
    pub encode_seconds: f64,
    /// Seconds from the recovery's start (once no agent is awaited) to its plan: verifying
    /// what the survivors hold, and planning what to rebuild where.
    #[serde(default)]
    pub plan_seconds: f64,
    /// Of `plan_seconds`, verifying the survivors: a scrub of what each alive node holds.
    #[serde(default)]
    pub verify_seconds: f64,
    /// What could not be recovered (more than `m` losses in a group).
    pub unrecoverable: Vec<String>,
    /// Warnings (e.g. too few nodes left to restore full redundancy).
    pub warnings: Vec<String>,
    /// The node-level data could not serve and the job was restored from a flushed epoch.
    #[serde(default)]
    pub from_flush: Option<FlushRestore>,
}

/// Requests the coordinator serves: each carries its request type, which names the
/// answer it gets ([`Call`](crate::call::Call)).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CoordRequest {
    /// An agent is alive (on its session).
    Heartbeat(Heartbeat),
    /// What an agent holds (the first request of its session).
    Holds(Inventory),
    /// Report.
    Status(Status),
    /// How to reach every alive agent.
    Nodes(Nodes),
    /// Where and as which epoch a rank checkpoints next.
    OpenEpoch(OpenEpoch),
    /// A rank's epoch is prepared on a node.
    RankReady(RankReady),
    /// A pace point of `snapshot()` without a checkpoint.
    Pace(Pace),
    /// Wait until an epoch is decided.
    WaitEpoch(WaitEpoch),
    /// Where a rank finds its latest committed epoch.
    Locate(Locate),
    /// Rebuild every lost node's data and restore redundancy.
    Recover(Recover),
    /// Prepare an export of a rank's image.
    Export(ExportRank),
    /// Check a rank's copy that failed its checksums when read.
    CheckCopy(CheckCopy),
    /// Flush an epoch now.
    Flush(FlushEpoch),
    /// Wait until no flush is running.
    WaitFlush(WaitFlush),
    /// Remove a node on purpose.
    Leave(Leave),
    /// Take the job's lease for a supervisor (`eckpt run`).
    ClaimJob(JobClaim),
    /// Renew a job lease.
    RenewLease(RenewLease),
    /// A new attempt of the job.
    NextAttempt(NextAttempt),
    /// Give a job lease up.
    ReleaseJob(ReleaseJob),
    /// Delete every agent's node-local data, then stop the cluster.
    Purge(PurgeCluster),
    /// Stop every agent and the coordinator.
    Shutdown(StopCluster),
}

/// An agent is alive (on its session); answered [`CoordResponse::Alive`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Heartbeat;

/// The cluster's report.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Status;

/// How to reach every alive agent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Nodes;

/// Where and as which epoch rank `rank` checkpoints next (waits while the rank's previous
/// checkpoint is undecided).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenEpoch {
    /// Rank.
    pub rank: u32,
    /// World size.
    pub world: u32,
    /// Node the rank must live on (first checkpoint only).
    pub node: Option<String>,
    /// The epoch the caller expects, if any.
    pub epoch: Option<u64>,
    /// The generation of the attempt the rank belongs to (`eckpt run` sets it).
    #[serde(default)]
    pub generation: Option<u64>,
}

/// Rank `rank`'s epoch is prepared on `node`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankReady {
    /// Rank.
    pub rank: u32,
    /// Epoch.
    pub epoch: u64,
    /// Node.
    pub node: String,
    /// Sizes and pace (absent from `eckpt checkpoint FILE`).
    #[serde(default)]
    pub report: RankReport,
    /// The rank's attempt generation.
    #[serde(default)]
    pub generation: Option<u64>,
}

/// A pace point of `snapshot()` without a checkpoint: waits until every rank of the job
/// reached the same point (`round` of launch `launch`) and answers the job's pace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pace {
    /// Rank.
    pub rank: u32,
    /// World size.
    pub world: u32,
    /// Which launch of the job (ranks of another launch never meet this one's).
    pub launch: String,
    /// The rank's count of pace points in this launch.
    pub round: u64,
    /// The rank's measurements.
    pub report: PaceReport,
    /// The rank's attempt generation.
    #[serde(default)]
    pub generation: Option<u64>,
}

/// Wait until `epoch` is decided.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WaitEpoch {
    /// Epoch.
    pub epoch: u64,
    /// Only whether it committed and why not ([`EpochOutcome::decision`]): what a rank
    /// waits for, without the figures per node and per group, which would make every
    /// rank's answer — and the coordinator's work per epoch — grow with the cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decision_only: bool,
}

/// Where rank `rank` of a job of `world` ranks finds its latest committed epoch. An error
/// when the committed epoch cannot be read now (the rank's node is down) or the job size is
/// not the checkpointed job's: a restarting rank must never take either for a fresh start.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Locate {
    /// Rank.
    pub rank: u32,
    /// World size the restarting job runs with.
    pub world: u32,
    /// The rank's attempt generation.
    #[serde(default)]
    pub generation: Option<u64>,
}

/// Rebuild every lost node's data and restore redundancy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Recover {
    /// Where the ranks of lost nodes go when no spare replaces them.
    #[serde(default)]
    pub relocation: Relocation,
}

/// Prepare an export of rank `rank` at `epoch` (decoding if its node is gone).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ExportRank {
    /// Rank.
    pub rank: u32,
    /// Epoch (default: the committed one).
    pub epoch: Option<u64>,
    /// The copy on the rank's node failed its checksums when the caller read it: the
    /// coordinator checks that copy itself and, if it is damaged, marks the node damaged and
    /// decodes the rank from its group instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub damaged_copy: bool,
}

/// Rank `rank`'s copy of its committed epoch failed its checksums when the rank read it on
/// its node (a restart): the coordinator checks that copy itself and, if it is damaged,
/// marks the node damaged, so that `status` says so and `eckpt run` or `eckpt recover`
/// rebuilds it from its group. Answered with what is wrong with the copy, or `None` when
/// it reads back sound.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CheckCopy {
    /// Rank.
    pub rank: u32,
}

/// Flush `epoch` (default: the committed one) now and answer when it is published.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct FlushEpoch {
    /// The epoch (committed and still in the node stores).
    pub epoch: Option<u64>,
}

/// Wait until no flush is running; answers the flush status.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WaitFlush;

/// Remove a node on purpose (its data is rebuilt elsewhere on the next recover).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Leave {
    /// Node.
    pub node: String,
}

/// Renew the lease of generation `generation`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RenewLease {
    /// The holder's generation.
    pub generation: u64,
}

/// A new attempt of the job (a relaunch): a new generation; the ranks of older ones are
/// refused from now on.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct NextAttempt {
    /// The holder's generation.
    pub generation: u64,
}

/// Give the lease up; `finished`: every rank exited 0, so a run of the job again is refused
/// unless `--resume` or `--fresh`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ReleaseJob {
    /// The holder's generation.
    pub generation: u64,
    /// The job finished.
    pub finished: bool,
}

/// Delete every agent's node-local data (store, parity, token), then stop every agent and
/// the coordinator (`eckpt down --purge`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PurgeCluster {
    /// Who asks: see [`StopCluster::by_run`].
    #[serde(default)]
    pub by_run: Option<u64>,
}

/// Stop every agent and the coordinator.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct StopCluster {
    /// `None`: the operator (`eckpt down`), obeyed. `Some(g)`: the `eckpt run` that started
    /// the cluster, with its job generation (0: it never held the lease), refused while
    /// another generation holds a live job lease — the cluster is then left to its idle
    /// rule, not stopped under the run that took the job over.
    #[serde(default)]
    pub by_run: Option<u64>,
}

impl CoordRequest {
    /// Whether sending the request again, after its answer was lost (a coordinator that
    /// stopped answering, a connection that broke), does nothing the first did not: reads,
    /// the lease's renewal, and what a rank asks (the coordinator answers a rank's repeated
    /// `OpenEpoch`, `RankReady` or `Pace` as it did the first). The others change what
    /// a repeat would find — a claim, a new attempt, a release, a recovery, a flush, a stop —
    /// and end with the error instead.
    pub fn may_repeat(&self) -> bool {
        matches!(
            self,
            CoordRequest::Status(_)
                | CoordRequest::Nodes(_)
                | CoordRequest::OpenEpoch(_)
                | CoordRequest::RankReady(_)
                | CoordRequest::Pace(_)
                | CoordRequest::WaitEpoch(_)
                | CoordRequest::Locate(_)
                | CoordRequest::CheckCopy(_)
                | CoordRequest::WaitFlush(_)
                | CoordRequest::RenewLease(_)
        )
    }
}

/// What the coordinator answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CoordResponse {
    /// Done.
    Ok,
    /// Failed: what kind of failure, and the reason.
    Error(WireError),
    /// `Status`.
    Status(Box<StatusReport>),
    /// `Nodes`.
    Nodes(Vec<NodeInfo>),
    /// `OpenEpoch`.
    Opened(Opened),
    /// `Pace`: the job's pace at that point.
    Paced(PaceStats),
    /// `WaitEpoch`.
    Outcome(EpochOutcome),
    /// `Locate`: the node and epoch, or `None` when the cluster has no committed epoch.
    Located(Option<(NodeInfo, u64)>),
    /// `CheckCopy`: what is wrong with the copy, or `None` when it reads back sound.
    CopyDamage(Option<String>),
    /// `Export`.
    ExportFrom(ExportFrom),
    /// `Recover`.
    Recovered(RecoveryReport),
    /// `Flush`: the flush published.
    Flushed(FlushReport),
    /// `WaitFlush`: the flushing now that none runs (`None`: the cluster does not flush).
    FlushState(Option<FlushStatus>),
    /// The coordinator is still at work on the request: sent every
    /// [`Deadlines::keepalive`](crate::dirs::Deadlines::keepalive) until the answer, so that
    /// a caller tells a coordinator at work on a long request (a recovery, a flush, an epoch
    /// waited for) from one that stopped, and gives up on the second within
    /// [`Deadlines::answer`](crate::dirs::Deadlines::answer).
    Working,
    /// Progress of a long request (sent before the final answer).
    Progress {
        /// What is happening.
        what: String,
        /// Done so far.
        done: u64,
        /// Total.
        total: u64,
    },
    /// Answer to `Session` registration.
    Registered(Registered),
    /// Heartbeat acknowledgement.
    Alive,
    /// `ClaimJob`.
    JobGranted(JobGrant),
    /// `NextAttempt`: the new generation.
    Generation(u64),
    /// `Purge`: what each node deleted.
    Purged(Vec<NodePurge>),
}

/// Answer to [`Scrub`]: damaged ranks and objects, each with what is wrong.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Damage {
    /// Ranks whose committed epoch fails verification.
    pub ranks: Vec<(u32, String)>,
    /// Objects failing verification.
    pub objects: Vec<(ObjectId, String)>,
}

impl Damage {
    /// Whether everything verified.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty() && self.objects.is_empty()
    }

    /// What failed, in one line: `rank R: why; object O: why`.
    pub fn summary(&self) -> String {
        let ranks = self.ranks.iter().map(|(r, e)| format!("rank {r}: {e}"));
        let objects = self.objects.iter().map(|(o, e)| format!("object {o}: {e}"));
        ranks.chain(objects).collect::<Vec<_>>().join("; ")
    }
}

/// Answer to an agent's registration ([`Hello::Session`]): what the agent must resolve
/// from before it restarted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registered {
    /// The coordinator's term: every coordinator started on a cluster's journal takes the
    /// next one, so that after a failover the one replaced, if it still runs, is refused by
    /// the agents that follow its successor.
    #[serde(default)]
    pub term: u64,
    /// Latest committed epoch.
    pub committed: u64,
    /// Objects this node must keep.
    pub keep: Vec<ObjectId>,
    /// Update versions committed per object (apply staged updates up to them).
    pub versions: Vec<(ObjectId, u64)>,
    /// The node was rebuilt elsewhere while it was away: nothing it holds is the cluster's
    /// any more. It discards its ranks' epochs and its coded objects instead of resolving
    /// them, and rejoins as a spare once it reports holding nothing.
    #[serde(default)]
    pub discard: bool,
}

/// Answer to [`OpenEpoch`]: where and as which epoch the rank checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Opened {
    /// Epoch to write.
    pub epoch: u64,
    /// Node hosting the rank.
    pub node: NodeInfo,
    /// The job's pace as of the previous epoch (every rank of it reported), if known.
    #[serde(default)]
    pub pace: Option<PaceStats>,
}

/// Answer to [`ExportRank`]: read the rank from this agent (from a scratch store if
/// `scratch`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportFrom {
    /// Agent to read from.
    pub node: NodeInfo,
    /// Epoch.
    pub epoch: u64,
    /// Scratch task, when decoded.
    pub scratch: Option<u64>,
}

/// Summary of the cluster configuration for `eckpt up`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpSummary {
    /// Cluster directory.
    pub dir: PathBuf,
    /// Coding.
    pub coding: CodingConfig,
    /// Nodes started.
    pub nodes: Vec<String>,
    /// Spares started.
    pub spares: Vec<String>,
    /// Whether agents run in network namespaces.
    pub netns: bool,
    /// Shaped link rate, if any.
    pub link_rate: Option<String>,
    /// Layout and topology in force (repeated for readability of the JSON).
    pub layout: Layout,
    /// Topology.
    pub topology: Topology,
    /// A stopped cluster was brought back rather than a new one created.
    pub restarted: bool,
    /// Groups that hold more than `m` members of one failure domain (the domains given do
    /// not allow better): losing that domain loses the group's data.
    #[serde(default)]
    pub exposed: Vec<String>,
    /// Flushes to shared storage, when the cluster makes them.
    #[serde(default)]
    pub flush: Option<FlushConfig>,
    /// The new cluster resumed a job from its flush directory.
    #[serde(default)]
    pub from_flush: Option<FlushRestore>,
}
