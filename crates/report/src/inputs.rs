//! The result files a report reads, parsed as untrusted input: `eckpt bench cluster --json`
//! output and `eckpt run` records. Parsing is tolerant — a missing or malformed field takes
//! its default, so files written by older or newer versions still load — but a file that is
//! neither kind is refused with a one-line reason, and nothing in a file can make parsing
//! panic (fuzzed).

use std::collections::BTreeMap;

use eckpt_coding::CodingConfig;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::ReportError;

/// `T` if the value is one, else `None`: one bad field does not refuse a whole file.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// A number, or 0 when absent or not a number.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Value::deserialize(d)?.as_f64().unwrap_or(0.0))
}

/// Numbers of a list, non-numbers left out.
fn numbers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items.iter().filter_map(Value::as_f64).collect(),
        _ => Vec::new(),
    })
}

/// Strings of a list, others left out.
fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    })
}

/// One `eckpt bench cluster --json` result.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct BenchResult {
    /// Nodes of the benchmark's cluster.
    pub nodes: usize,
    /// Its coding.
    #[serde(deserialize_with = "lenient")]
    pub coding: Option<CodingConfig>,
    /// Rank image bytes per data node.
    pub size_per_node: u64,
    /// `mat` or `lu`.
    pub pattern: String,
    /// Whether agents ran in network namespaces.
    pub netns: bool,
    /// Shaped link rate (`tc` rate).
    #[serde(deserialize_with = "lenient")]
    pub link_rate: Option<String>,
    /// Link measured in the same run (Gbit/s).
    #[serde(deserialize_with = "number")]
    pub link_gbps: f64,
    /// Data shard bytes per member.
    pub shard_bytes: u64,
    /// The first (full) epoch's encode seconds.
    #[serde(deserialize_with = "number")]
    pub full_encode_seconds: f64,
    /// Median encode seconds of the incremental epochs.
    #[serde(deserialize_with = "number")]
    pub encode_seconds: f64,
    /// Each incremental epoch's encode seconds.
    #[serde(deserialize_with = "numbers")]
    pub encode_seconds_samples: Vec<f64>,
    /// What each incremental epoch was.
    #[serde(deserialize_with = "strings")]
    pub kinds: Vec<String>,
    /// Most payload a data node sent in an incremental epoch.
    pub bytes_sent_per_node: u64,
    /// Bytes each rank changed per epoch.
    pub changed_bytes_per_node: u64,
}

impl BenchResult {
    /// Fraction of a rank's pages changed per epoch.
    pub fn dirty_fraction(&self) -> f64 {
        if self.size_per_node == 0 {
            return 0.0;
        }
        (self.changed_bytes_per_node as f64 / self.size_per_node as f64).clamp(0.0, 1.0)
    }

    /// What the incremental epochs were (`update`, `full`, …; the first kind seen).
    pub fn kind(&self) -> &str {
        self.kinds.first().map_or("?", String::as_str)
    }
}

/// One attempt of a run: the job from a launch to its end.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Attempt {
    /// 1, 2, …
    pub attempt: u64,
    /// Seconds since the run started.
    #[serde(deserialize_with = "number")]
    pub start_s: f64,
    /// Seconds since the run started.
    #[serde(deserialize_with = "number")]
    pub end_s: f64,
    /// Rank → node.
    #[serde(deserialize_with = "lenient")]
    pub placement: Option<BTreeMap<String, String>>,
    /// Why it ended.
    #[serde(deserialize_with = "lenient")]
    pub end: Option<String>,
}

/// One epoch of a run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Epoch {
    /// Epoch number.
    pub epoch: u64,
    /// When it was decided (seconds since the run started).
    #[serde(deserialize_with = "number")]
    pub t_s: f64,
    /// Whether it committed.
    pub committed: bool,
    /// Why not.
    #[serde(deserialize_with = "lenient")]
    pub reason: Option<String>,
    /// What each group's encode was.
    #[serde(deserialize_with = "strings")]
    pub kinds: Vec<String>,
    /// Encode seconds.
    #[serde(deserialize_with = "number")]
    pub encode_seconds: f64,
    /// Full size of all ranks' images.
    #[serde(deserialize_with = "number")]
    pub image_bytes: f64,
    /// Bytes the ranks wrote (incremental).
    #[serde(deserialize_with = "number")]
    pub stored_bytes: f64,
}

/// A failure seen during a run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Failure {
    /// When (seconds since the run started).
    #[serde(deserialize_with = "number")]
    pub t_s: f64,
    /// Nodes lost.
    #[serde(deserialize_with = "strings")]
    pub nodes: Vec<String>,
    /// What caused it.
    #[serde(deserialize_with = "lenient")]
    pub cause: Option<String>,
}

/// A recovery during a run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Recovery {
    /// Start (seconds since the run started).
    #[serde(deserialize_with = "number")]
    pub start_s: f64,
    /// End.
    #[serde(deserialize_with = "number")]
    pub end_s: f64,
    /// Epoch restored.
    pub epoch: u64,
    /// Nodes lost.
    #[serde(deserialize_with = "strings")]
    pub lost: Vec<String>,
    /// Where ranks were placed anew (rank → node).
    #[serde(deserialize_with = "lenient")]
    pub placement: Option<BTreeMap<String, String>>,
    /// Ranks moved between living nodes: `(rank, from, to)`.
    #[serde(deserialize_with = "lenient")]
    pub moved: Option<Vec<(u64, String, String)>>,
    /// Seconds from the run seeing the failure to the start of recovery.
    #[serde(deserialize_with = "number")]
    pub detect_seconds: f64,
    /// Seconds from the loss (the lost node last heard) to the run seeing it declared: the
    /// detection delay (0 in records written before it was measured).
    #[serde(deserialize_with = "number")]
    pub silence_seconds: f64,
    /// Seconds decoding.
    #[serde(deserialize_with = "number")]
    pub decode_seconds: f64,
    /// Seconds re-encoding.
    #[serde(deserialize_with = "number")]
    pub encode_seconds: f64,
    /// Seconds relaunching the job.
    #[serde(deserialize_with = "number")]
    pub relaunch_seconds: f64,
    /// From the run seeing the failure to every rank running again.
    #[serde(deserialize_with = "number")]
    pub downtime_seconds: f64,
    /// From the loss (the lost node last heard) to every rank running again, detection
    /// included (0 in records written before it was measured).
    #[serde(deserialize_with = "number")]
    pub loss_to_running_seconds: f64,
    /// The flushed epoch the job restarted from, when the nodes could not serve.
    #[serde(deserialize_with = "lenient")]
    pub from_flush: Option<u64>,
}

/// An `eckpt run` record (`<cluster>/runs/<name>.json`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct RunRecord {
    /// The job's command line.
    #[serde(deserialize_with = "strings")]
    pub command: Vec<String>,
    /// The job's id (records before jobs had ids have none).
    #[serde(deserialize_with = "lenient")]
    pub job: Option<String>,
    /// Ranks.
    pub ranks: u64,
    /// `local`, `mpirun`.
    #[serde(deserialize_with = "lenient")]
    pub launcher: Option<String>,
    /// Placement policy.
    #[serde(deserialize_with = "lenient")]
    pub placement: Option<String>,
    /// The cluster's coding.
    #[serde(deserialize_with = "lenient")]
    pub coding: Option<CodingConfig>,
    /// Nodes.
    #[serde(deserialize_with = "strings")]
    pub nodes: Vec<String>,
    /// Spares.
    #[serde(deserialize_with = "strings")]
    pub spares: Vec<String>,
    /// Link rate, if shaped.
    #[serde(deserialize_with = "lenient")]
    pub link_rate: Option<String>,
    /// When the run started (seconds since the Unix epoch; 0 when the record does not say).
    #[serde(deserialize_with = "number")]
    pub started_unix: f64,
    /// Wall seconds of the whole run.
    #[serde(deserialize_with = "number")]
    pub seconds: f64,
    /// The job's exit code.
    #[serde(deserialize_with = "lenient")]
    pub exit_code: Option<i64>,
    /// Why the run failed, if it did.
    #[serde(deserialize_with = "lenient")]
    pub error: Option<String>,
    /// Launches of the job.
    #[serde(deserialize_with = "lenient_list")]
    pub attempts: Vec<Attempt>,
    /// Epochs.
    #[serde(deserialize_with = "lenient_list")]
    pub epochs: Vec<Epoch>,
    /// Failures.
    #[serde(deserialize_with = "lenient_list")]
    pub failures: Vec<Failure>,
    /// Recoveries.
    #[serde(deserialize_with = "lenient_list")]
    pub recoveries: Vec<Recovery>,
}

/// The entries of a list that parse, others left out.
fn lenient_list<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// What one file held.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Benchmark results (a file may hold one or a list).
    Bench(Vec<BenchResult>),
    /// A run record.
    Run(Box<RunRecord>),
}

fn classify(name: &str, v: Value) -> Result<Input, ReportError> {
    let is_run = |o: &serde_json::Map<String, Value>| o.contains_key("attempts") || o.contains_key("epochs");
    let is_bench = |o: &serde_json::Map<String, Value>| o.contains_key("full_encode_seconds");
    let refuse = || {
        ReportError::Input(format!(
            "{name}: neither an `eckpt bench cluster --json` result nor an `eckpt run` record"
        ))
    };
    match v {
        Value::Object(o) if is_run(&o) => serde_json::from_value(Value::Object(o))
            .map(|r| Input::Run(Box::new(r)))
            .map_err(|e| ReportError::Input(format!("{name}: {e}"))),
        Value::Object(o) if is_bench(&o) => serde_json::from_value(Value::Object(o))
            .map(|b| Input::Bench(vec![b]))
            .map_err(|e| ReportError::Input(format!("{name}: {e}"))),
        Value::Array(items) if !items.is_empty() => {
            let mut all = Vec::new();
            for item in items {
                match classify(name, item)? {
                    Input::Bench(b) => all.extend(b),
                    Input::Run(_) => return Err(refuse()),
                }
            }
            Ok(Input::Bench(all))
        }
        _ => Err(refuse()),
    }
}

/// Parses the file `name` (for messages) with contents `bytes`.
pub fn parse(name: &str, bytes: &[u8]) -> Result<Input, ReportError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ReportError::Input(format!("{name}: not JSON: {e}")))?;
    classify(name, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bench_result_parses_with_what_it_has() {
        let text = br#"{"nodes":6,"coding":{"k":4,"m":2,"code":"cauchy","mode":"update","layout":"dedicated",
            "topology":"pipeline","chunk":262144,"max_stripes":8},"size_per_node":67108864,"pattern":"mat",
            "netns":true,"link_rate":"1gbit","link_gbps":0.965,"full_encode_seconds":1.13,
            "encode_seconds":0.033,"encode_seconds_samples":[0.033,"x",0.034],"kinds":["update",3],
            "changed_bytes_per_node":65536,"future_field":{"a":1}}"#;
        let Input::Bench(b) = parse("b.json", text).unwrap() else {
            panic!("not a bench result")
        };
        assert_eq!(b[0].coding.unwrap().k, 4);
        assert_eq!(b[0].encode_seconds_samples, vec![0.033, 0.034]);
        assert_eq!(b[0].kind(), "update");
        assert!((b[0].dirty_fraction() - 65536.0 / 67108864.0).abs() < 1e-12);
    }

    #[test]
    fn a_run_record_with_odd_fields_still_loads() {
        let text = br#"{"format":1,"command":["./mat"],"ranks":4,"coding":"weird","seconds":"long",
            "attempts":[{"attempt":1,"start_s":0,"end_s":35.2,"end":"node n1 lost"},"junk"],
            "epochs":[{"epoch":1,"t_s":3.2,"committed":true,"kinds":["full"],"encode_seconds":0.5,
            "image_bytes":268435456,"stored_bytes":268435456}],
            "failures":[{"t_s":30.1,"nodes":["n1","n3"],"cause":"kill-at 30:2"}],
            "recoveries":[{"start_s":30.2,"end_s":32.0,"epoch":30,"lost":["n1"],"moved":[[3,"n4","n0"]]}]}"#;
        let Input::Run(r) = parse("r.json", text).unwrap() else {
            panic!("not a run")
        };
        assert_eq!(r.coding, None);
        assert_eq!(r.seconds, 0.0);
        assert_eq!(r.attempts.len(), 1);
        assert_eq!(r.failures[0].nodes, vec!["n1", "n3"]);
        assert_eq!(r.recoveries[0].moved.as_ref().unwrap()[0].2, "n0");
    }

    /// What `eckpt run` writes (`eckpt_run::record::RunRecord`) reads back whole.
    #[test]
    fn eckpt_runs_records_parse() {
        use eckpt_run::record as run;
        let record = run::RunRecord {
            format: run::RECORD_FORMAT,
            command: vec!["./stencil".into(), "-s".into(), "200".into()],
            ranks: 8,
            launcher: "mpirun".into(),
            placement: "balanced".into(),
            coding: Some(CodingConfig::default()),
            nodes: vec!["n0".into(), "n1".into()],
            spares: vec!["s0".into()],
            link_rate: Some("1gbit".into()),
            started_unix: 1_795_000_000.5,
            seconds: 93.2,
            exit_code: Some(0),
            attempts: vec![run::AttemptRecord {
                attempt: 1,
                end_s: 35.2,
                placement: BTreeMap::from([(0, "n0".to_string())]),
                end: "node n1 lost".into(),
                ..Default::default()
            }],
            epochs: vec![run::EpochRecord {
                epoch: 1,
                t_s: 3.2,
                committed: true,
                kinds: vec!["full".into()],
                encode_seconds: 0.51,
                image_bytes: 1 << 28,
                stored_bytes: 1 << 20,
                ..Default::default()
            }],
            failures: vec![run::FailureRecord {
                t_s: 30.1,
                nodes: vec!["n1".into()],
                cause: "kill-at 30:1".into(),
            }],
            recoveries: vec![run::RecoveryRecord {
                start_s: 30.2,
                end_s: 32.0,
                epoch: 30,
                lost: vec!["n1".into()],
                placement: BTreeMap::from([(1, "s0".to_string())]),
                moved: vec![(3, "n4".into(), "n0".into())],
                downtime_seconds: 1.9,
                silence_seconds: 3.1,
                loss_to_running_seconds: 5.0,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = serde_json::to_vec(&record).unwrap();
        let Input::Run(r) = parse("run.json", &text).unwrap() else {
            panic!("not a run")
        };
        assert_eq!(r.command, record.command);
        assert_eq!(r.ranks, 8);
        assert_eq!(r.started_unix, 1_795_000_000.5);
        assert_eq!(r.coding, record.coding);
        assert_eq!(r.attempts[0].placement.as_ref().unwrap()["0"], "n0");
        assert_eq!(r.attempts[0].end.as_deref(), Some("node n1 lost"));
        assert_eq!(r.epochs[0].image_bytes, (1u64 << 28) as f64);
        assert_eq!(r.epochs[0].stored_bytes, (1u64 << 20) as f64);
        assert_eq!(r.failures[0].cause.as_deref(), Some("kill-at 30:1"));
        assert_eq!(r.recoveries[0].placement.as_ref().unwrap()["1"], "s0");
        assert_eq!(
            r.recoveries[0].moved.as_ref().unwrap()[0],
            (3, "n4".into(), "n0".into())
        );
        assert_eq!(r.recoveries[0].downtime_seconds, 1.9);
        assert_eq!(r.recoveries[0].silence_seconds, 3.1);
        assert_eq!(r.recoveries[0].loss_to_running_seconds, 5.0);
    }

    #[test]
    fn other_files_are_refused_in_one_line() {
        for bad in [
            &b"[]"[..],
            b"{}",
            b"3",
            b"not json",
            b"[{\"full_encode_seconds\":1},{\"epochs\":[]}]",
        ] {
            let err = parse("x.json", bad).unwrap_err().to_string();
            assert!(err.starts_with("x.json: "), "{err}");
            assert!(!err.contains('\n'));
        }
    }
}
