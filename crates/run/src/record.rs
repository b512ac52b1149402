//! The journal of one `eckpt run`: what ran, each attempt, every epoch, every failure and
//! recovery, with times in seconds since the run started. `eckpt run` writes it to
//! `<cluster dir>/runs/<name>.json` (and `--record FILE`); `eckpt report` draws it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use eckpt_cluster_api::msg::{EpochOutcome, RecoveryReport};
use eckpt_coding::CodingConfig;

/// Format of the record written by this version.
pub const RECORD_FORMAT: u32 = 1;

/// One `eckpt run`, start to end.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunRecord {
    /// Always [`RECORD_FORMAT`].
    pub format: u32,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The job's id in the cluster.
    #[serde(default)]
    pub job: Option<String>,
    /// Ranks of the job.
    pub ranks: u32,
    /// `local` or `mpirun`.
    pub launcher: String,
    /// `balanced` or `pack`.
    pub placement: String,
    /// How the cluster codes checkpoints.
    pub coding: Option<CodingConfig>,
    /// Nodes when the run started.
    pub nodes: Vec<String>,
    /// Spares when the run started.
    pub spares: Vec<String>,
    /// Shaped link rate of namespaced clusters.
    pub link_rate: Option<String>,
    /// When the run started (seconds since the Unix epoch).
    pub started_unix: f64,
    /// How long it took.
    pub seconds: f64,
    /// The program's exit status (`None` when the run failed on its own account).
    pub exit_code: Option<i32>,
    /// Why the run failed, if it did.
    pub error: Option<String>,
    /// Each launch of the ranks.
    pub attempts: Vec<AttemptRecord>,
    /// Each epoch decided while the run lasted.
    pub epochs: Vec<EpochRecord>,
    /// Nodes lost.
    pub failures: Vec<FailureRecord>,
    /// Recoveries.
    pub recoveries: Vec<RecoveryRecord>,
}

/// One launch of every rank.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// 1 for the first launch.
    pub attempt: u32,
    /// When the ranks were started.
    pub start_s: f64,
    /// The attempt's generation: its ranks' requests carry it.
    #[serde(default)]
    pub generation: u64,
    /// When the attempt ended.
    pub end_s: f64,
    /// Rank → node.
    pub placement: BTreeMap<u32, String>,
    /// How it ended (`exited 0`, `node n3 lost`, …).
    pub end: String,
}

/// One decided epoch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EpochRecord {
    /// Epoch.
    pub epoch: u64,
    /// When the run saw it decided.
    pub t_s: f64,
    /// Whether it committed.
    pub committed: bool,
    /// Why not.
    pub reason: Option<String>,
    /// Each group's encode (`full`, `stripe`, `update`).
    pub kinds: Vec<String>,
    /// Seconds of encoding.
    pub encode_seconds: f64,
    /// Bytes of every rank's complete image.
    pub image_bytes: u64,
    /// Bytes the ranks stored.
    pub stored_bytes: u64,
    /// Padded data-shard bytes per member.
    pub shard_bytes: u64,
    /// Bytes each node sent while encoding.
    pub bytes_sent: BTreeMap<String, u64>,
}

impl EpochRecord {
    /// The record of `outcome`, seen at `t_s`.
    pub fn new(outcome: &EpochOutcome, t_s: f64) -> EpochRecord {
        EpochRecord {
            epoch: outcome.epoch,
            t_s,
            committed: outcome.committed,
            reason: outcome.reason.clone(),
            kinds: outcome.kinds.clone(),
            encode_seconds: outcome.encode_seconds,
            image_bytes: outcome.image_bytes,
            stored_bytes: outcome.stored_bytes,
            shard_bytes: outcome.shard_bytes,
            bytes_sent: outcome.bytes_sent.clone(),
        }
    }
}

/// Nodes lost at one moment.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FailureRecord {
    /// When.
    pub t_s: f64,
    /// Which nodes.
    pub nodes: Vec<String>,
    /// `kill-at 30:2`, `kill during recovery`, `node declared dead`, `rank 3 killed by signal 9`
    /// (a rank's crash loses no node: `nodes` is empty).
    pub cause: String,
}

/// One recovery and relaunch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RecoveryRecord {
    /// When the run started recovering.
    pub start_s: f64,
    /// When every rank was running again.
    pub end_s: f64,
    /// The committed epoch it restored.
    pub epoch: u64,
    /// Nodes lost.
    pub lost: Vec<String>,
    /// Where the lost nodes' ranks went (rank → node).
    pub placement: BTreeMap<u32, String>,
    /// Ranks copied between living nodes: `(rank, from, to)`.
    pub moved: Vec<(u32, String, String)>,
    /// From the run seeing the first failure (a node declared dead, a rank's end) to the
    /// start of recovery. The silence before the loss was declared is `silence_seconds`.
    pub detect_seconds: f64,
    /// From the loss — when the coordinator last heard the first lost node: its last
    /// heartbeat, or its connection's end for a killed agent — to the run seeing the failure:
    /// the detection delay, at least the liveness period for a node that fell silent. 0
    /// when the run saw the loss at once (it killed the node, a rank ended).
    #[serde(default)]
    pub silence_seconds: f64,
    /// Decoding: the decode tasks, installing what they rebuilt, and moving ranks.
    pub decode_seconds: f64,
    /// The decode tasks alone (part of `decode_seconds`).
    #[serde(default)]
    pub decode_task_seconds: f64,
    /// Payload bytes of the decode tasks over their busiest node link (the most one node
    /// sent or received): over the link rate, how long a decode at link speed would take.
    #[serde(default)]
    pub decode_link_bytes: u64,
    /// Re-encoding (redundancy restored).
    pub encode_seconds: f64,
    /// From the end of recovery to every rank started again.
    pub relaunch_seconds: f64,
    /// From the run seeing the first failure to every rank started again: the loss's
    /// detection is not in it (`loss_to_running_seconds` is the whole time).
    pub downtime_seconds: f64,
    /// From the loss (see `silence_seconds`) to every rank started again: the job's time
    /// lost to the failure, detection included (`silence_seconds + downtime_seconds`).
    #[serde(default)]
    pub loss_to_running_seconds: f64,
    /// The flushed epoch the job restarted from, when the node level could not serve.
    #[serde(default)]
    pub from_flush: Option<u64>,
}

impl RecoveryRecord {
    /// Fills in what the coordinator's report says.
    pub fn absorb(&mut self, report: &RecoveryReport) {
        self.epoch = report.epoch;
        if let Some(restore) = &report.from_flush {
            self.from_flush = Some(restore.flushed_epoch);
            self.placement.clone_from(&restore.placement);
            self.decode_seconds += restore.import_seconds;
            self.encode_seconds += restore.encode_seconds;
        }
        for (node, ranks) in &report.rebuilt {
            if !self.lost.contains(node) {
                self.lost.push(node.clone());
            }
            self.placement.extend(ranks.clone());
        }
        self.moved.extend(report.moved.iter().cloned());
        self.decode_seconds += report.decode_seconds;
        self.decode_task_seconds += report.decode_task_seconds;
        // Successive reports of one recovery decode one after the other.
        self.decode_link_bytes += report
            .decode_traffic
            .values()
            .map(|&(sent, received)| sent.max(received))
            .max()
            .unwrap_or(0);
        self.encode_seconds += report.encode_seconds;
    }
}

impl RunRecord {
    /// Writes the record as JSON, crash-safely: a reader never sees half of it.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Cannot fail: its maps have string or integer keys, it holds no path, and its only
        // serializer of its own (the code's name) writes a string; a `Vec` takes any length.
        let bytes = serde_json::to_vec_pretty(self).expect("the record serializes");
        eckpt_durable::write_atomic(path, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorbing_reports_adds_their_decodes_and_their_busiest_links() {
        let report = |traffic: &[(&str, u64, u64)]| RecoveryReport {
            epoch: 7,
            rebuilt: vec![("n1".into(), BTreeMap::from([(1, "s0".to_string())]))],
            decode_seconds: 2.0,
            decode_task_seconds: 1.5,
            decode_traffic: traffic
                .iter()
                .map(|&(node, sent, received)| (node.to_string(), (sent, received)))
                .collect(),
            ..RecoveryReport::default()
        };
        let mut record = RecoveryRecord::default();
        record.absorb(&report(&[("n0", 100, 0), ("s0", 0, 300), ("n2", 200, 200)]));
        assert_eq!(
            record.decode_link_bytes, 300,
            "the busiest node, sent or received"
        );
        record.absorb(&report(&[("n0", 50, 0)]));
        assert_eq!(record.decode_link_bytes, 350);
        assert_eq!(record.decode_task_seconds, 3.0);
        assert_eq!(record.decode_seconds, 4.0);
        assert_eq!(record.lost, ["n1"]);
        assert_eq!(record.epoch, 7);
    }
}
