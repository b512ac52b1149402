//! `eckpt report`: one self-contained HTML page of results — the model against every
//! benchmark measurement, encode time over node counts and transfer units, per-epoch bytes
//! and encode times, and each run's timeline with its failures, recoveries and
//! relocations. Pure: result files in (as bytes), the page out (as a string).
//!
//! - [`inputs`]: tolerant parsing of `eckpt bench cluster --json` results and `eckpt run`
//!   records (untrusted input, fuzzed).
//! - [`predictions`]: the model's prediction for each benchmark result.
//! - [`figures`]: which charts the inputs make.
//! - [`svg`]: the plotting module (inline SVG, no scripts).
//! - [`page`]: the HTML document.

#![warn(missing_docs)]

pub mod figures;
pub mod inputs;
pub mod page;
pub mod predictions;
pub mod svg;

use figures::{Comparison, Sweep};
use inputs::{BenchResult, Input, RunRecord};
use page::{Block, Cell, Section, Table};
use predictions::Costs;
use svg::{format, Unit};

/// Why a report cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file that is not a result the report reads.
    #[error("{0}")]
    Input(String),
}

/// Benchmark results shown per epoch (more make the chart unreadable).
const EPOCH_SERIES: usize = 6;

/// The page for `inputs` (file name, contents parsed), predictions priced with `costs`;
/// `meta` says where it came from.
pub fn report(inputs: &[(String, Input)], costs: &Costs, meta: &str) -> String {
    let bench: Vec<BenchResult> = inputs
        .iter()
        .flat_map(|(_, i)| match i {
            Input::Bench(b) => b.clone(),
            Input::Run(_) => Vec::new(),
        })
        .collect();
    let mut sections = Vec::new();
    if !bench.is_empty() {
        sections.extend(bench_sections(&bench, costs));
    }
    let runs: Vec<(&str, &RunRecord)> = inputs
        .iter()
        .filter_map(|(name, input)| match input {
            Input::Run(run) => Some((name.as_str(), &**run)),
            Input::Bench(_) => None,
        })
        .collect();
    for ((name, run), title) in runs.iter().zip(run_titles(&runs)) {
        sections.push(run_section(name, run, title));
    }
    page::render("eckpt report", meta, &sections)
}

/// `n thing` or `n things`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `2026-11-28 20:44:12 UTC` for seconds since the Unix epoch (proleptic Gregorian
/// calendar; Hinnant's `civil_from_days`), or `None` for a time a record does not give.
pub fn utc(unix: f64) -> Option<String> {
    // Years 1970 to 9999: anything else is not a run's start.
    if !(unix.is_finite() && unix > 0.0 && unix < 253_402_300_800.0) {
        return None;
    }
    let secs = unix.floor() as i64;
    let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Some(format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    ))
}
fn percent(x: f64) -> String {
    format!("{:+.1} %", x * 100.0)
}

fn comparison_table(comparisons: &[Comparison]) -> Table {
    Table {
        headers: [
            "configuration and epoch",
            "measured",
            "model",
            "error",
            "model says",
        ]
        .map(String::from)
        .to_vec(),
        rows: comparisons
            .iter()
            .map(|c| {
                let class = if c.error().abs() <= 0.15 { "good" } else { "bad" };
                vec![
                    Cell::text(&c.what),
                    Cell::num(format(c.measured, Unit::Seconds)),
                    Cell::num(format(c.predicted, Unit::Seconds)),
                    Cell::with(percent(c.error()), class),
                    Cell::text(format!("{}-bound", c.bound)),
                ]
            })
            .collect(),
    }
}

fn bench_table(bench: &[BenchResult]) -> Table {
    Table {
        headers: [
            "configuration",
            "link measured",
            "full encode",
            "later epochs",
            "were",
            "sent per data node",
            "changed per node",
        ]
        .map(String::from)
        .to_vec(),
        rows: bench
            .iter()
            .map(|r| {
                vec![
                    Cell::text(figures::describe(r, None)),
                    Cell::num(format!("{:.3} Gbit/s", r.link_gbps)),
                    Cell::num(format(r.full_encode_seconds, Unit::Seconds)),
                    Cell::num(format(r.encode_seconds, Unit::Seconds)),
                    Cell::text(r.kind()),
                    Cell::num(format(r.bytes_sent_per_node as f64, Unit::Bytes)),
                    Cell::num(format(r.changed_bytes_per_node as f64, Unit::Bytes)),
                ]
            })
            .collect(),
    }
}

fn bench_sections(bench: &[BenchResult], costs: &Costs) -> Vec<Section> {
    let mut sections = Vec::new();
    let comparisons = figures::comparisons(bench, costs);
    if let Some(chart) = figures::comparison_chart(&comparisons) {
        let within = comparisons.iter().filter(|c| c.error().abs() <= 0.15).count();
        sections.push(Section {
            id: "model".into(),
            title: "Model vs measurement".into(),
            blocks: vec![
                Block::Text(format!(
                    "{within} of {} predictions within 15 % of the measurement. Each benchmark \
                     result is predicted for its nodes, coding, sizes and dirty pages at the link \
                     rate it measured.",
                    comparisons.len()
                )),
                Block::Figures(vec![chart.render()]),
                Block::Table(comparison_table(&comparisons)),
            ],
        });
    }
    for (sweep, id, title) in [
        (Sweep::Nodes, "nodes", "Encode time vs node count"),
        (Sweep::Chunk, "chunk", "Transfer unit"),
    ] {
        if let Some(chart) = figures::sweep_chart(bench, sweep, costs) {
            let names = figures::sweep_names(bench, sweep);
            let mut blocks = vec![Block::Figures(vec![chart.render()])];
            blocks.extend(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| Block::Text(format!("#{}: {n}", i + 1))),
            );
            sections.push(Section {
                id: id.into(),
                title: title.into(),
                blocks,
            });
        }
    }
    if let Some((bytes, times)) = figures::bench_epochs(bench, EPOCH_SERIES) {
        sections.push(Section {
            id: "epochs".into(),
            title: "Per epoch: checkpoint bytes and encode time".into(),
            blocks: vec![
                Block::Text(format!(
                    "The first {} benchmark results: epoch 1 encodes every image in full, later \
                     epochs what the mode does with the pages that changed.",
                    bench.len().min(EPOCH_SERIES)
                )),
                Block::Figures(vec![bytes.render(), times.render()]),
            ],
        });
    }
    sections.push(Section {
        id: "bench".into(),
        title: "Benchmark results".into(),
        blocks: vec![Block::Table(bench_table(bench))],
    });
    sections
}

fn run_section(name: &str, run: &RunRecord, title: String) -> Section {
    let committed = run.epochs.iter().filter(|e| e.committed).count();
    let summary = format!(
        "{name}: `{}`{}, {} on {}{}; {} committed, {}, {}, {}{}.",
        run.command.join(" "),
        utc(run.started_unix)
            .map(|t| format!(", started {t}"))
            .unwrap_or_default(),
        count(run.ranks as usize, "rank", "ranks"),
        shape(run),
        if run.seconds > 0.0 {
            format!(", {}", format(run.seconds, Unit::Seconds))
        } else {
            String::new()
        },
        count(committed, "epoch", "epochs"),
        count(run.failures.len(), "failure", "failures"),
        count(run.recoveries.len(), "recovery", "recoveries"),
        count(run.attempts.len(), "attempt", "attempts"),
        match (&run.error, run.exit_code) {
            (Some(e), _) => format!("; failed: {e}"),
            (None, Some(code)) => format!("; exit code {code}"),
            (None, None) => String::new(),
        }
    );
    let recoveries = Table {
        headers: [
            "recovery",
            "epoch",
            "lost",
            "detect",
            "decode",
            "encode",
            "relaunch",
            "total",
            "loss to running",
            "ranks placed or moved",
        ]
        .map(String::from)
        .to_vec(),
        rows: run
            .recoveries
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let placed: Vec<String> = r
                    .placement
                    .iter()
                    .flatten()
                    .map(|(rank, node)| format!("{rank}→{node}"))
                    .chain(
                        r.moved
                            .iter()
                            .flatten()
                            .map(|(rank, from, to)| format!("{rank}: {from}→{to}")),
                    )
                    .collect();
                vec![
                    Cell::text(format!("#{} at {}", i + 1, format(r.start_s, Unit::Seconds))),
                    Cell::num(r.epoch.to_string()),
                    Cell::text(if r.lost.is_empty() {
                        "none".to_string()
                    } else {
                        r.lost.join(", ")
                    }),
                    // Detection from the loss: the silence until the loss was declared,
                    // then the run's reaction.
                    Cell::num(format(r.silence_seconds + r.detect_seconds, Unit::Seconds)),
                    Cell::num(format(r.decode_seconds, Unit::Seconds)),
                    Cell::num(format(r.encode_seconds, Unit::Seconds)),
                    Cell::num(format(r.relaunch_seconds, Unit::Seconds)),
                    Cell::num(format(r.end_s - r.start_s, Unit::Seconds)),
                    // Records written before the loss was measured from the lost node's
                    // last heartbeat have only the time from its detection.
                    Cell::num(format(
                        if r.loss_to_running_seconds > 0.0 {
                            r.loss_to_running_seconds
                        } else {
                            r.downtime_seconds
                        },
                        Unit::Seconds,
                    )),
                    Cell::text(placed.join(", ")),
                ]
            })
            .collect(),
    };
    let mut blocks = vec![
        Block::Text(summary),
        Block::Figures(vec![figures::run_timeline(run).render()]),
        Block::Figures(vec![
            figures::run_bytes(run).render(),
            figures::run_encodes(run).render(),
        ]),
    ];
    if !run.recoveries.is_empty() {
        blocks.push(Block::Table(recoveries));
    }
    Section {
        id: format!("run-{}", name.replace(|c: char| !c.is_ascii_alphanumeric(), "-")),
        title,
        blocks,
    }
}

/// `8 nodes + 1 spare`.
fn shape(run: &RunRecord) -> String {
    let nodes = count(run.nodes.len(), "node", "nodes");
    match run.spares.len() {
        0 => nodes,
        n => format!("{nodes} + {}", count(n, "spare", "spares")),
    }
}

/// How a run ended, in a few words.
fn outcome(run: &RunRecord) -> String {
    match (&run.error, run.exit_code) {
        (Some(_), _) => "failed".into(),
        (None, Some(code)) => format!("exit {code}"),
        (None, None) => String::new(),
    }
}

/// The facts a title may add to tell a run from others of the same job and command, in
/// the order they are shown.
fn facts(run: &RunRecord) -> [String; 6] {
    [
        shape(run),
        count(run.ranks as usize, "rank", "ranks"),
        run.coding
            .map(|c| format!("k={} m={} {}", c.k, c.m, c.mode))
            .unwrap_or_default(),
        run.link_rate.clone().unwrap_or_default(),
        match run.failures.len() {
            0 => String::new(),
            n => count(n, "failure", "failures"),
        },
        outcome(run),
    ]
}

/// Each run's title: its job and command and when it started ([`run_title`]), and — where
/// another run's would read the same — what differs between them (nodes and spares, ranks,
/// coding, link rate, failures, how it ended), or else the record's name.
fn run_titles(runs: &[(&str, &RunRecord)]) -> Vec<String> {
    let titles: Vec<String> = runs.iter().map(|(name, run)| run_title(name, run)).collect();
    titles
        .iter()
        .enumerate()
        .map(|(i, title)| {
            let twins: Vec<usize> = (0..runs.len())
                .filter(|&j| j != i && titles[j] == *title)
                .collect();
            if twins.is_empty() {
                return title.clone();
            }
            let mine = facts(runs[i].1);
            let theirs: Vec<[String; 6]> = twins.iter().map(|&j| facts(runs[j].1)).collect();
            let differ: Vec<&str> = mine
                .iter()
                .enumerate()
                .filter(|(f, fact)| !fact.is_empty() && theirs.iter().any(|t| t[*f] != **fact))
                .map(|(_, fact)| fact.as_str())
                .collect();
            // Runs alike in all of these are told apart by their records' names.
            let same = theirs.contains(&mine);
            let name = same.then(|| format!("record {}", runs[i].0));
            let what: Vec<&str> = differ.into_iter().chain(name.as_deref()).collect();
            if what.is_empty() {
                title.clone()
            } else {
                format!("{title} ({})", what.join(", "))
            }
        })
        .collect()
}

/// A run's title: its job and command (shortened), the record's name without a job, and
/// when it started if the record says.
fn run_title(name: &str, run: &RunRecord) -> String {
    /// Characters of the command a title shows.
    const COMMAND_CHARS: usize = 80;
    let command = run.command.join(" ");
    let command = if command.chars().count() > COMMAND_CHARS {
        let cut: String = command.chars().take(COMMAND_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        command
    };
    let started = utc(run.started_unix)
        .map(|t| format!(", started {t}"))
        .unwrap_or_default();
    match &run.job {
        Some(job) => format!("Job {job}: {command}{started}"),
        None => format!("Run {name}: {command}{started}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_model::Machine;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// Any JSON value a field might hold: numbers of every size and sign, strings, lists.
    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e300f64..1e300).prop_map(Value::from),
            prop::sample::select(vec![0.0, -1.0, 1e-300, 5e-324, 1e308]).prop_map(Value::from),
            "[a-z0-9 <>&\"]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop::collection::vec(inner, 0..6).prop_map(Value::Array)
        })
    }

    const FIELDS: &[&str] = &[
        "nodes",
        "coding",
        "size_per_node",
        "pattern",
        "netns",
        "link_rate",
        "link_gbps",
        "full_encode_seconds",
        "encode_seconds",
        "encode_seconds_samples",
        "kinds",
        "changed_bytes_per_node",
        "command",
        "ranks",
        "seconds",
        "attempts",
        "epochs",
        "failures",
        "recoveries",
        "epoch",
        "t_s",
        "start_s",
        "end_s",
        "moved",
        "placement",
    ];

    fn any_record() -> impl Strategy<Value = Value> {
        prop::collection::btree_map(prop::sample::select(FIELDS.to_vec()), any_value(), 0..12).prop_map(|m| {
            let mut o: serde_json::Map<String, Value> =
                m.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            // Half look like runs, half like bench results, nested entries included.
            o.entry("full_encode_seconds").or_insert(json!(1.0));
            Value::Object(o)
        })
    }

    proptest! {
        /// Whatever a result file holds, a report of it renders: one document, no script.
        #[test]
        fn any_result_renders(record in any_record(), run in any::<bool>()) {
            let mut record = record;
            if run {
                record["epochs"] = json!([record.clone()]);
                record["failures"] = json!([record.clone()]);
                record["recoveries"] = json!([record.clone()]);
            }
            let bytes = serde_json::to_vec(&record).unwrap();
            if let Ok(input) = inputs::parse("p.json", &bytes) {
                let costs = Costs { machine: Machine::reference(1e9), host_cores: 2.0 };
                let page = report(&[("p.json".into(), input)], &costs, "prop");
                prop_assert!(page.ends_with("</html>\n"));
                prop_assert!(!page.contains("<script") && !page.contains("NaN"));
            }
        }
    }

    #[test]
    fn a_report_of_a_bench_result_and_a_run_has_their_sections() {
        let bench = br#"{"nodes":6,"coding":{"k":4,"m":2,"code":"cauchy","mode":"full","layout":"dedicated",
            "topology":"pipeline","chunk":1048576,"max_stripes":8},"size_per_node":67108864,"pattern":"mat",
            "netns":true,"link_rate":"1gbit","link_gbps":0.965,"full_encode_seconds":1.13,
            "encode_seconds":1.13,"encode_seconds_samples":[1.13],"kinds":["full"]}"#;
        let run = br#"{"command":["./mat"],"ranks":4,"attempts":[{"attempt":1,"start_s":0,"end_s":9}],
            "epochs":[{"epoch":1,"t_s":3,"committed":true,"kinds":["full"],"encode_seconds":0.5,
            "image_bytes":1000,"stored_bytes":1000}],"failures":[{"t_s":8,"nodes":["n1"]}]}"#;
        let inputs = vec![
            ("b.json".to_string(), inputs::parse("b.json", bench).unwrap()),
            ("r.json".to_string(), inputs::parse("r.json", run).unwrap()),
        ];
        let costs = Costs {
            machine: Machine::reference(1e9),
            host_cores: 2.0,
        };
        let page = report(&inputs, &costs, "test");
        for id in [
            "id=\"model\"",
            "id=\"bench\"",
            "id=\"epochs\"",
            "id=\"run-r-json\"",
        ] {
            assert!(page.contains(id), "{id}");
        }
        assert!(page.matches("<svg").count() >= 5);
        assert!(page.contains("Run r.json: ./mat"), "the run's title");
    }

    #[test]
    fn a_run_is_titled_by_its_job_and_command() {
        let long = "x".repeat(200);
        let run = RunRecord {
            job: Some("4711".into()),
            command: vec!["./stencil".into(), "-m".into(), long],
            ..RunRecord::default()
        };
        let title = run_title("run-1.json", &run);
        assert!(title.starts_with("Job 4711: ./stencil -m xxx"), "{title}");
        assert!(title.ends_with('…') && title.chars().count() < 100, "{title}");
        let anonymous = RunRecord {
            command: vec!["./mat".into()],
            ..RunRecord::default()
        };
        assert_eq!(run_title("run-1.json", &anonymous), "Run run-1.json: ./mat");
    }

    #[test]
    fn utc_times_are_calendar_dates() {
        assert_eq!(utc(0.0), None, "a record that does not say");
        assert_eq!(utc(f64::NAN), None);
        assert_eq!(utc(1.0).unwrap(), "1970-01-01 00:00:01 UTC");
        assert_eq!(
            utc(951_782_400.0).unwrap(),
            "2000-02-29 00:00:00 UTC",
            "a leap day"
        );
        assert_eq!(utc(1_795_898_652.9).unwrap(), "2026-11-28 20:44:12 UTC");
        assert_eq!(utc(4_102_444_799.0).unwrap(), "2099-12-31 23:59:59 UTC");
    }

    /// Two runs of one job and command (a job requeued, or run twice in one allocation)
    /// used to get one title and no start time: now each carries its start, and where the
    /// starts are unknown or equal, what tells them apart.
    #[test]
    fn runs_of_one_job_get_titles_that_tell_them_apart() {
        let run = |started: f64, spares: usize, failures: usize, exit: i64| RunRecord {
            job: Some("4711".into()),
            command: vec!["./stencil".into()],
            ranks: 8,
            nodes: (0..8).map(|i| format!("n{i}")).collect(),
            spares: (0..spares).map(|i| format!("s{i}")).collect(),
            started_unix: started,
            failures: vec![Default::default(); failures],
            exit_code: Some(exit),
            ..RunRecord::default()
        };
        let (a, b) = (run(1_795_898_652.0, 1, 0, 0), run(1_795_902_252.0, 1, 0, 0));
        let titles = run_titles(&[("a.json", &a), ("b.json", &b)]);
        assert_eq!(titles[0], "Job 4711: ./stencil, started 2026-11-28 20:44:12 UTC");
        assert_eq!(titles[1], "Job 4711: ./stencil, started 2026-11-28 21:44:12 UTC");
        // No start time in the records (older ones): what differs.
        let (c, d) = (run(0.0, 1, 2, 1), run(0.0, 0, 0, 0));
        let titles = run_titles(&[("c.json", &c), ("d.json", &d)]);
        assert_eq!(
            titles[0],
            "Job 4711: ./stencil (8 nodes + 1 spare, 2 failures, exit 1)"
        );
        assert_eq!(titles[1], "Job 4711: ./stencil (8 nodes, exit 0)");
        // Nothing differs: the records' names.
        let titles = run_titles(&[("c.json", &c), ("e.json", &c.clone())]);
        assert_eq!(titles[0], "Job 4711: ./stencil (record c.json)");
        assert_ne!(titles[0], titles[1]);
    }

    #[test]
    fn counts_are_singular_or_plural_as_they_are() {
        let run = RunRecord {
            command: vec!["./mat".into()],
            ranks: 1,
            nodes: vec!["n0".into(), "n1".into()],
            spares: vec!["s0".into()],
            attempts: vec![Default::default()],
            started_unix: 1_795_898_652.0,
            ..RunRecord::default()
        };
        let page = report(
            &[("r.json".into(), Input::Run(Box::new(run)))],
            &Costs {
                machine: Machine::reference(1e9),
                host_cores: 2.0,
            },
            "test",
        );
        assert!(
            page.contains(
                "1 rank on 2 nodes + 1 spare; 0 epochs committed, 0 failures, 0 recoveries, 1 attempt"
            ),
            "{page}"
        );
        assert!(page.contains(", started 2026-11-28 20:44:12 UTC"), "{page}");
        assert!(!page.contains("1 spares") && !page.contains("1 attempts"));
    }

    /// A record `eckpt run` wrote for a real run that lost one node and then two
    /// (docs/results/run-two-failures.json, the run docs/REPRODUCTION.md shows): its
    /// timeline carries both failures and the relocations of both recoveries.
    #[test]
    fn a_real_run_with_two_failures_shows_both_on_its_timeline() {
        let bytes = include_bytes!("../../../docs/results/run-two-failures.json");
        let input = inputs::parse("run.json", bytes).unwrap();
        let Input::Run(run) = &input else {
            panic!("not read as a run record")
        };
        assert_eq!(run.failures.len(), 2);
        assert_eq!(run.recoveries.len(), 2);
        let costs = Costs {
            machine: Machine::reference(1e9),
            host_cores: 2.0,
        };
        let page = report(&[("run.json".into(), input)], &costs, "test");
        assert_eq!(page.matches("class=\"marker failure\"").count(), 2);
        assert!(page.matches("class=\"marker relocation\"").count() >= 2);
    }
}
