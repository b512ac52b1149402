//! The report's figures, from its inputs: benchmark results grouped into sweeps (node
//! count, transfer unit), each next to the model's prediction, and each run's timeline and
//! per-epoch bytes and encode times.

use std::collections::BTreeMap;

use crate::inputs::{BenchResult, RunRecord};
use crate::predictions::{prediction_for, Costs};
use crate::svg::{colour, format, Axis, Chart, Kind, Lane, Mark, Marker, Series, Span, Timeline, Unit, GREY};

/// Most points drawn per series: a record with more epochs is thinned evenly.
pub const MAX_POINTS: usize = 2000;

/// Every `n`-th element so that at most [`MAX_POINTS`] remain.
fn thin<T: Clone>(items: &[T]) -> Vec<T> {
    let step = items.len().div_ceil(MAX_POINTS).max(1);
    items.iter().step_by(step).cloned().collect()
}

/// What a result varies in a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Node count (and `k` with it).
    Nodes,
    /// Transfer unit.
    Chunk,
}

/// A short description of `r`, leaving out what `sweep` varies.
pub fn describe(r: &BenchResult, sweep: Option<Sweep>) -> String {
    let mut parts = Vec::new();
    if let Some(c) = &r.coding {
        if sweep != Some(Sweep::Nodes) {
            parts.push(format!("{} nodes {}+{}", r.nodes, c.k, c.m));
        } else {
            parts.push(format!("m={}", c.m));
        }
        parts.push(format!("{} {} {}", c.mode, c.layout, c.topology));
        if sweep != Some(Sweep::Chunk) {
            parts.push(format(f64::from(c.chunk), Unit::Bytes));
        }
    }
    parts.push(format(r.size_per_node as f64, Unit::Bytes) + "/node");
    parts.push(r.pattern.clone());
    parts.push(r.link_rate.clone().unwrap_or_else(|| "unshaped".into()));
    parts.join(", ")
}

fn sweep_value(r: &BenchResult, sweep: Sweep) -> f64 {
    match sweep {
        Sweep::Nodes => r.nodes as f64,
        Sweep::Chunk => r.coding.map_or(0.0, |c| f64::from(c.chunk)),
    }
}

/// Results that differ only in what `sweep` varies, with at least two values of it.
fn sweeps(results: &[BenchResult], sweep: Sweep) -> BTreeMap<String, Vec<&BenchResult>> {
    let mut groups: BTreeMap<String, Vec<&BenchResult>> = BTreeMap::new();
    for r in results.iter().filter(|r| r.coding.is_some()) {
        groups.entry(describe(r, Some(sweep))).or_default().push(r);
    }
    groups.retain(|_, rs| {
        let mut values: Vec<u64> = rs.iter().map(|r| sweep_value(r, sweep) as u64).collect();
        values.sort_unstable();
        values.dedup();
        values.len() >= 2
    });
    for rs in groups.values_mut() {
        rs.sort_by(|a, b| sweep_value(a, sweep).total_cmp(&sweep_value(b, sweep)));
    }
    groups
}

/// Full-encode seconds over `sweep`, measured and predicted, one pair of series per sweep
/// found in `results`.
pub fn sweep_chart(results: &[BenchResult], sweep: Sweep, costs: &Costs) -> Option<Chart> {
    let groups = sweeps(results, sweep);
    if groups.is_empty() {
        return None;
    }
    let mut series = Vec::new();
    for (i, rs) in groups.values().enumerate() {
        let measured = rs
            .iter()
            .map(|r| (sweep_value(r, sweep), r.full_encode_seconds))
            .collect();
        let predicted = rs
            .iter()
            .filter_map(|r| {
                Some((
                    sweep_value(r, sweep),
                    prediction_for(r, costs)?.first.encode_seconds,
                ))
            })
            .collect();
        let tag = if groups.len() > 1 {
            format!("#{} ", i + 1)
        } else {
            String::new()
        };
        series.push(Series::new(&format!("{tag}measured"), Mark::Line, measured).coloured(colour(i)));
        series.push(Series::new(&format!("{tag}model"), Mark::Guide, predicted).coloured(colour(i)));
    }
    let (title, x) = match sweep {
        Sweep::Nodes => ("Full encode time vs node count", Axis::log("nodes", Unit::Plain)),
        Sweep::Chunk => (
            "Full encode time vs transfer unit",
            Axis::log("transfer unit", Unit::Bytes),
        ),
    };
    Some(Chart {
        title: title.into(),
        x,
        y: Axis::linear("encode seconds", Unit::Seconds),
        series,
    })
}

/// The sweeps' descriptions, numbered as in [`sweep_chart`]'s legend.
pub fn sweep_names(results: &[BenchResult], sweep: Sweep) -> Vec<String> {
    sweeps(results, sweep).into_keys().collect()
}

/// One measured-vs-predicted pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Which result and which epoch (`full` or the incremental kind).
    pub what: String,
    /// Measured seconds.
    pub measured: f64,
    /// Predicted seconds.
    pub predicted: f64,
    /// What the model says limits it.
    pub bound: String,
}

impl Comparison {
    /// `predicted / measured − 1`.
    pub fn error(&self) -> f64 {
        self.predicted / self.measured - 1.0
    }
}

/// Every result's first and later epochs, measured and predicted.
pub fn comparisons(results: &[BenchResult], costs: &Costs) -> Vec<Comparison> {
    let mut out = Vec::new();
    for r in results {
        let Some(p) = prediction_for(r, costs) else {
            continue;
        };
        let name = describe(r, None);
        out.push(Comparison {
            what: format!("{name}: first epoch (full)"),
            measured: r.full_encode_seconds,
            predicted: p.first.encode_seconds,
            bound: p.first.estimate.bound().into(),
        });
        if r.kind() != "full" && !r.encode_seconds_samples.is_empty() {
            out.push(Comparison {
                what: format!("{name}: later epochs ({})", r.kind()),
                measured: r.encode_seconds,
                predicted: p.next.encode_seconds,
                bound: p.next.estimate.bound().into(),
            });
        }
    }
    out.retain(|c| c.measured > 0.0 && c.measured.is_finite() && c.predicted.is_finite());
    out
}

/// Predicted against measured on log axes, with `y = x` and ±15 %.
pub fn comparison_chart(comparisons: &[Comparison]) -> Option<Chart> {
    if comparisons.is_empty() {
        return None;
    }
    let split = |full: bool| -> Vec<(f64, f64)> {
        comparisons
            .iter()
            .filter(|c| c.what.ends_with("(full)") == full)
            .map(|c| (c.measured, c.predicted))
            .collect()
    };
    let lo = comparisons
        .iter()
        .map(|c| c.measured.min(c.predicted))
        .fold(f64::INFINITY, f64::min)
        / 1.2;
    let hi = comparisons
        .iter()
        .map(|c| c.measured.max(c.predicted))
        .fold(0.0, f64::max)
        * 1.2;
    let guide = |f: f64| vec![(lo, lo * f), (hi, hi * f)];
    Some(Chart {
        title: "Model vs measurement: encode seconds".into(),
        x: Axis::log("measured", Unit::Seconds),
        y: Axis::log("predicted", Unit::Seconds),
        series: vec![
            Series::new("full epochs", Mark::Points, split(true)),
            Series::new("incremental epochs", Mark::Points, split(false)),
            Series::new("equal", Mark::Guide, guide(1.0)).coloured("#000000"),
            Series::new("±15 %", Mark::Guide, guide(1.15)).coloured(GREY),
            Series::new("", Mark::Guide, guide(1.0 / 1.15)).coloured(GREY),
        ],
    })
}

/// Bytes per node and encode seconds per epoch of benchmark results (epoch 1 full, then the
/// incremental epochs): one series per result, at most `limit` results.
pub fn bench_epochs(results: &[BenchResult], limit: usize) -> Option<(Chart, Chart)> {
    let shown: Vec<&BenchResult> = results
        .iter()
        .filter(|r| r.coding.is_some())
        .take(limit)
        .collect();
    if shown.is_empty() {
        return None;
    }
    let name = |i: usize, r: &BenchResult| {
        let c = r.coding.expect("filtered");
        format!("#{} {} {}", i + 1, c.mode, r.pattern)
    };
    let bytes = shown
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let later = r.encode_seconds_samples.len().max(1);
            let mut points = vec![(1.0, r.size_per_node as f64)];
            points.extend((0..later).map(|e| (e as f64 + 2.0, r.changed_bytes_per_node as f64)));
            Series::new(&name(i, r), Mark::Line, points)
        })
        .collect();
    let times = shown
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut points = vec![(1.0, r.full_encode_seconds)];
            points.extend(
                r.encode_seconds_samples
                    .iter()
                    .enumerate()
                    .map(|(e, s)| (e as f64 + 2.0, *s)),
            );
            Series::new(&name(i, r), Mark::Line, points)
        })
        .collect();
    Some((
        Chart {
            title: "Checkpoint bytes per rank: full first epoch, then what changed".into(),
            x: Axis::numbered("epoch"),
            y: Axis::log("bytes", Unit::Bytes),
            series: bytes,
        },
        Chart {
            title: "Encode time per epoch".into(),
            x: Axis::numbered("epoch"),
            y: Axis::log("encode seconds", Unit::Seconds),
            series: times,
        },
    ))
}

/// A run's committed epochs (aborted ones encoded nothing; the timeline shows them).
fn committed(run: &RunRecord) -> Vec<crate::inputs::Epoch> {
    let done: Vec<_> = run.epochs.iter().filter(|e| e.committed).cloned().collect();
    thin(&done)
}

/// A run's checkpoint bytes per epoch: all ranks' full images against what they stored.
pub fn run_bytes(run: &RunRecord) -> Chart {
    let epochs = committed(run);
    Chart {
        title: "Checkpoint bytes per epoch: full images vs incremental".into(),
        x: Axis::numbered("epoch"),
        y: Axis::log("bytes (all ranks)", Unit::Bytes),
        series: vec![
            Series::new(
                "full image",
                Mark::Line,
                epochs.iter().map(|e| (e.epoch as f64, e.image_bytes)).collect(),
            ),
            Series::new(
                "stored (incremental)",
                Mark::Line,
                epochs.iter().map(|e| (e.epoch as f64, e.stored_bytes)).collect(),
            ),
        ],
    }
}

/// A run's encode seconds per committed epoch, by kind of encode.
pub fn run_encodes(run: &RunRecord) -> Chart {
    let mut by_kind: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for e in committed(run) {
        let kind = e.kinds.first().cloned().unwrap_or_else(|| "?".into());
        by_kind
            .entry(kind)
            .or_default()
            .push((e.epoch as f64, e.encode_seconds));
    }
    Chart {
        title: "Encode / update time per epoch".into(),
        x: Axis::numbered("epoch"),
        y: Axis::log("seconds", Unit::Seconds),
        series: by_kind
            .into_iter()
            .map(|(kind, points)| Series::new(&kind, Mark::Points, points))
            .collect(),
    }
}

/// A run's timeline: attempts, epochs, failures, recoveries and relocations.
pub fn run_timeline(run: &RunRecord) -> Timeline {
    let attempts = Lane {
        name: "job".into(),
        spans: run
            .attempts
            .iter()
            .map(|a| Span {
                start: a.start_s,
                end: a.end_s,
                label: format!(
                    "attempt {}{}",
                    a.attempt,
                    a.end.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
                ),
                kind: Kind::Run,
            })
            .collect(),
        markers: Vec::new(),
    };
    let epochs = Lane {
        name: "epochs".into(),
        spans: Vec::new(),
        markers: thin(&run.epochs)
            .iter()
            .map(|e| {
                // An aborted epoch often encoded nothing: no kinds, no seconds to show.
                let mut what = Vec::new();
                if !e.kinds.is_empty() {
                    what.push(e.kinds.join("/"));
                }
                if e.encode_seconds > 0.0 {
                    what.push(format(e.encode_seconds, Unit::Seconds));
                }
                Marker {
                    at: e.t_s,
                    label: format!(
                        "epoch {} {}{}{}",
                        e.epoch,
                        if e.committed { "committed" } else { "aborted" },
                        if what.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", what.join(", "))
                        },
                        e.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
                    ),
                    kind: if e.committed { Kind::Epoch } else { Kind::Aborted },
                }
            })
            .collect(),
    };
    let failures = Lane {
        name: "failures".into(),
        spans: Vec::new(),
        markers: run
            .failures
            .iter()
            .map(|f| Marker {
                at: f.t_s,
                // A rank's crash loses no node: its cause says which rank and how.
                label: match (f.nodes.is_empty(), f.cause.as_deref()) {
                    (true, Some(cause)) => cause.to_string(),
                    (_, cause) => format!(
                        "lost {}{}",
                        f.nodes.join(", "),
                        cause.map(|c| format!(" ({c})")).unwrap_or_default()
                    ),
                },
                kind: Kind::Failure,
            })
            .collect(),
    };
    let recoveries = Lane {
        name: "recoveries".into(),
        spans: run
            .recoveries
            .iter()
            .map(|r| Span {
                start: r.start_s,
                end: r.end_s,
                label: match (r.from_flush, r.lost.is_empty()) {
                    (Some(flushed), _) => format!("restarted from flushed epoch {flushed}"),
                    (None, true) => format!("epoch {}: no node lost", r.epoch),
                    (None, false) => format!("epoch {}: rebuilt {}", r.epoch, r.lost.join(", ")),
                },
                kind: Kind::Recovery,
            })
            .collect(),
        markers: Vec::new(),
    };
    let relocations = Lane {
        name: "relocations".into(),
        spans: Vec::new(),
        markers: run
            .recoveries
            .iter()
            .flat_map(|r| {
                let placed = r
                    .placement
                    .iter()
                    .flatten()
                    .map(|(rank, node)| format!("rank {rank} → {node}"));
                let moved = r
                    .moved
                    .iter()
                    .flatten()
                    .map(|(rank, from, to)| format!("rank {rank} {from} → {to}"));
                placed.chain(moved).map(|label| Marker {
                    at: r.end_s,
                    label,
                    kind: Kind::Relocation,
                })
            })
            .collect(),
    };
    Timeline {
        title: "Run timeline".into(),
        lanes: vec![attempts, epochs, failures, recoveries, relocations],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{Attempt, Epoch, Failure, Recovery};
    use eckpt_coding::CodingConfig;
    use eckpt_model::Machine;

    fn result(nodes: usize, chunk: u32, seconds: f64) -> BenchResult {
        BenchResult {
            nodes,
            coding: Some(CodingConfig {
                k: nodes - 2,
                chunk,
                ..CodingConfig::default()
            }),
            size_per_node: 32 << 20,
            pattern: "mat".into(),
            netns: true,
            link_rate: Some("100mbit".into()),
            link_gbps: 0.0965,
            full_encode_seconds: seconds,
            encode_seconds: seconds,
            encode_seconds_samples: vec![seconds],
            kinds: vec!["full".into()],
            changed_bytes_per_node: 32 << 10,
            ..BenchResult::default()
        }
    }

    fn costs() -> Costs {
        Costs {
            machine: Machine::reference(1e9),
            host_cores: 2.0,
        }
    }

    #[test]
    fn sweeps_group_what_differs_in_one_parameter() {
        let results = vec![
            result(4, 65536, 5.6),
            result(8, 65536, 5.6),
            result(32, 65536, 5.7),
            result(6, 4096, 1.4),
            result(6, 65536, 1.1),
        ];
        assert_eq!(sweep_names(&results, Sweep::Nodes).len(), 1);
        assert_eq!(sweep_names(&results, Sweep::Chunk).len(), 1);
        let chart = sweep_chart(&results, Sweep::Nodes, &costs()).unwrap();
        assert_eq!(chart.series[0].points.len(), 4, "4, 6, 8, 32 nodes");
        assert_eq!(chart.series[1].points.len(), 4, "and the model at each");
        assert!(sweep_chart(&results[..1], Sweep::Nodes, &costs()).is_none());
    }

    #[test]
    fn comparisons_pair_measurement_and_model() {
        let c = comparisons(&[result(6, 1 << 20, 5.6)], &costs());
        assert_eq!(c.len(), 1, "a full-mode result has one comparison");
        assert!(c[0].predicted > 0.0);
        assert!(comparison_chart(&c).is_some());
        assert!(comparison_chart(&[]).is_none());
    }

    #[test]
    fn a_run_with_two_failures_shows_both_on_its_timeline() {
        let run = RunRecord {
            attempts: vec![
                Attempt {
                    attempt: 1,
                    start_s: 0.0,
                    end_s: 30.0,
                    ..Attempt::default()
                },
                Attempt {
                    attempt: 2,
                    start_s: 32.0,
                    end_s: 60.0,
                    ..Attempt::default()
                },
            ],
            epochs: (1..=50)
                .map(|e| Epoch {
                    epoch: e,
                    t_s: e as f64,
                    committed: true,
                    reason: None,
                    kinds: vec![if e == 1 { "full" } else { "update" }.into()],
                    encode_seconds: 0.1,
                    image_bytes: 1e9,
                    stored_bytes: if e == 1 { 1e9 } else { 1e6 },
                })
                .collect(),
            failures: vec![
                Failure {
                    t_s: 30.0,
                    nodes: vec!["n1".into()],
                    cause: None,
                },
                Failure {
                    t_s: 45.0,
                    nodes: vec!["n3".into()],
                    cause: None,
                },
                Failure {
                    t_s: 50.0,
                    nodes: vec![],
                    cause: Some("rank 2 killed by signal 9".into()),
                },
            ],
            recoveries: vec![
                Recovery {
                    start_s: 30.1,
                    end_s: 32.0,
                    epoch: 29,
                    moved: Some(vec![(3, "n4".into(), "n0".into())]),
                    ..Recovery::default()
                },
                Recovery {
                    start_s: 0.0,
                    end_s: 0.5,
                    epoch: 12,
                    from_flush: Some(12),
                    ..Recovery::default()
                },
            ],
            ..RunRecord::default()
        };
        let svg = run_timeline(&run).render();
        assert_eq!(svg.matches(r#"class="marker failure""#).count(), 3);
        assert!(
            svg.contains("rank 2 killed by signal 9") && !svg.contains("lost  ("),
            "a rank's crash"
        );
        assert!(
            svg.contains("restarted from flushed epoch 12"),
            "a restart from the flush"
        );
        assert_eq!(svg.matches(r#"class="marker relocation""#).count(), 1);
        assert_eq!(run_encodes(&run).series.len(), 2, "full and update");
        assert_eq!(run_bytes(&run).series[1].points.len(), 50);
    }

    /// An epoch a recovery aborted encoded nothing, and a rank's crash loses no node: their
    /// labels say so instead of `(, 0)` and `rebuilt ` with nothing after it.
    #[test]
    fn timeline_labels_leave_out_what_did_not_happen() {
        let run = RunRecord {
            epochs: vec![Epoch {
                epoch: 6,
                t_s: 5.0,
                reason: Some("aborted by recovery".into()),
                ..Epoch::default()
            }],
            recoveries: vec![Recovery {
                start_s: 5.0,
                end_s: 6.0,
                epoch: 5,
                ..Recovery::default()
            }],
            ..RunRecord::default()
        };
        let lanes = run_timeline(&run).lanes;
        let epochs = &lanes.iter().find(|l| l.name == "epochs").unwrap().markers;
        assert_eq!(epochs[0].label, "epoch 6 aborted: aborted by recovery");
        let recoveries = &lanes.iter().find(|l| l.name == "recoveries").unwrap().spans;
        assert_eq!(recoveries[0].label, "epoch 5: no node lost");
    }

    #[test]
    fn long_records_are_thinned() {
        let many: Vec<u32> = (0..10 * MAX_POINTS as u32).collect();
        assert!(thin(&many).len() <= MAX_POINTS);
        assert_eq!(thin(&many[..5]).len(), 5);
    }
}
