//! `eckpt model` and `eckpt report` as a user runs them: predictions for configurations
//! this machine cannot run, a calibration of a running cluster used by later predictions,
//! and one-line refusals of bad input.

mod cluster;

use cluster::{assert_refused, ok, run, Cluster};
use serde_json::Value;

/// Two objects of numbers equal to a part in 10¹² (JSON round trips may move the last bit).
fn assert_close(a: &Value, b: &Value) {
    let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
    assert_eq!(a.len(), b.len());
    for (k, x) in a {
        let (x, y) = (x.as_f64().unwrap(), b[k].as_f64().unwrap());
        assert!((x - y).abs() <= 1e-12 * x.abs().max(y.abs()), "{k}: {x} vs {y}");
    }
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).expect("JSON")
}

#[test]
fn predicts_a_configuration_this_machine_cannot_run() {
    let v = json(&[
        "model",
        "--nodes",
        "4096",
        "--k",
        "14",
        "--m",
        "2",
        "--mode",
        "update",
        "--link-rate",
        "100gbit",
        "--size-per-node",
        "16GiB",
        "--dirty-fraction",
        "0.01",
        "--json",
    ]);
    assert_eq!(v["prediction"]["groups"].as_array().unwrap().len(), 256);
    let full = v["full_encode_seconds"].as_f64().unwrap();
    let later = v["encode_seconds"].as_f64().unwrap();
    assert!(full > 0.0 && later > 0.0 && later < full, "{full} {later}");
    assert_eq!(v["prediction"]["next"]["kind"], "update");
    assert!((v["prediction"]["storage"]["parity_per_data"].as_f64().unwrap() - 2.0 / 14.0).abs() < 1e-9);
    let interval = &v["interval"];
    assert!(interval["interval_s"].as_f64().unwrap() > 0.0);
    assert!(interval["efficiency"].as_f64().unwrap() < 1.0);
    assert_eq!(v["source"]["kind"], "reference");
    // The control plane's part of an epoch and of a recovery, apart, per node at 4,096 nodes.
    let number = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    let next = &v["prediction"]["next"];
    let commit = &next["commit"];
    assert_eq!(commit["nodes"], 4096);
    assert!(number(&commit["per_node_s"]) > 0.0, "{commit}");
    let parts = number(&commit["fixed_s"]) + 4096.0 * number(&commit["per_node_s"]);
    assert!((number(&commit["seconds"]) - parts).abs() < 1e-9, "{commit}");
    let epoch = number(&v["epoch_seconds"]);
    assert!(
        (epoch - later - number(&commit["seconds"])).abs() < 1e-9,
        "{epoch}"
    );
    assert_eq!(v["epoch_seconds"], next["seconds"]);
    let recovery = &v["prediction"]["recovery"];
    for part in ["detect_delay", "plan"] {
        assert_eq!(recovery[part]["nodes"], 4096, "{recovery}");
        assert!(number(&recovery[part]["per_node_s"]) > 0.0, "{recovery}");
    }
    let liveness = number(&v["machine"]["detect_s"]);
    let detect = liveness + number(&recovery["detect_delay"]["seconds"]);
    assert!(
        (number(&recovery["detect_s"]) - detect).abs() < 1e-9,
        "{recovery}"
    );
    // The agents' CPU is the job's cost on the cores it shares with them, not on its own.
    let shape = [
        "model", "--nodes", "64", "--k", "6", "--m", "2", "--mode", "full", "--json",
    ];
    let cost = |cores: &str| {
        let v = json(&[&shape[..], &["--rank-cores", cores]].concat());
        let stopped = v["prediction"]["checkpoint_seconds"].as_f64().unwrap();
        let agent = v["prediction"]["next"]["agent_cpu_seconds"].as_f64().unwrap();
        (v["job_checkpoint_seconds"].as_f64().unwrap() - stopped, agent)
    };
    assert_eq!(cost("0").0, 0.0);
    let (lost, agent) = cost("8");
    assert!(agent > 0.0 && (lost - agent / 8.0).abs() < 1e-9, "{lost} {agent}");
}

#[test]
fn recommends_within_the_constraints() {
    let v = json(&[
        "model",
        "--nodes",
        "64",
        "--m",
        "2",
        "--size-per-node",
        "1GiB",
        "--dirty-fraction",
        "0.001",
        "--recommend",
        "--max-overhead",
        "0.25",
        "--json",
    ]);
    let choices = v["recommendations"].as_array().unwrap();
    assert!(!choices.is_empty() && choices.len() <= 5);
    for c in choices {
        assert_eq!(c["coding"]["m"], 2);
        assert!(c["overhead"].as_f64().unwrap() <= 0.25 + 1e-9, "{c}");
    }
    let text = ok(&["model", "--nodes", "64", "--recommend", "--max-overhead", "0.25"]);
    assert!(text.contains("recommended (best first):"), "{text}");
}

/// 4,096 nodes of 16 GiB on 100 Gbit/s links whose nodes fail once a year: groups of 256
/// (k=254) stay exposed for the 1.5 minutes of a recovery, and two more of their members
/// fail within it about 3 times in a million days — above the default bound of 10⁻⁶ per
/// job-day, so k=254 is no longer recommended; without the bound it ranks second.
#[test]
fn recommendations_bound_the_risk_of_losing_more_than_m_nodes_of_a_group() {
    let shape = [
        "model",
        "--nodes",
        "4096",
        "--m",
        "2",
        "--mtbf",
        "1y",
        "--link-rate",
        "100gbit",
        "--size-per-node",
        "16GiB",
        "--dirty-fraction",
        "0.01",
        "--recommend",
        "--json",
    ];
    let out = run(&shape);
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "--json: no progress bar, nothing on stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let risk = &v["loss_risk"];
    assert_eq!(risk["period_s"], 86_400.0, "per job-day by default");
    assert_eq!(
        risk["window_s"], v["prediction"]["recovery"]["seconds"],
        "exposed for the model's own recovery time"
    );
    for c in v["recommendations"].as_array().unwrap() {
        assert!(c["coding"]["k"].as_u64().unwrap() < 254, "{c}");
        let p = c["loss_risk"]["probability"].as_f64().unwrap();
        assert!(p > 0.0 && p <= 1e-6, "{c}");
    }
    let unbounded = json(&[&shape[..], &["--max-loss-risk", "1"]].concat());
    let ks: Vec<u64> = unbounded["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["coding"]["k"].as_u64().unwrap())
        .collect();
    assert!(ks.contains(&254), "the bound is what removes k=254: {ks:?}");
    // A job of 30 days carries 30 times the risk of one day.
    let month = json(&[&shape[..], &["--job-length", "30d"]].concat());
    let ratio = month["loss_risk"]["probability"].as_f64().unwrap() / risk["probability"].as_f64().unwrap();
    assert!((ratio - 30.0).abs() < 1e-6, "{ratio}");
    // Nodes failing every day: nothing with m=2 is safe enough, and the refusal says why.
    assert_refused(
        &run(&["model", "--nodes", "4096", "--mtbf", "1d", "--recommend"]),
        "raise --m, or accept more risk with --max-loss-risk",
    );
    let text = ok(&["model", "--nodes", "64", "--mtbf", "1y"]);
    assert!(
        text.contains("risk of a group losing more than m=2 nodes within the") && text.contains("per day"),
        "{text}"
    );
}

/// The encode line says what bounds the time and shows terms that add up to it:
/// `encode T (B-bound) = overlapped link and CPU + fill (hops × per hop) + serial + task`.
#[test]
fn encode_times_are_shown_as_terms_that_add_up() {
    let args = [
        "model",
        "--nodes",
        "256",
        "--k",
        "254",
        "--m",
        "2",
        "--layout",
        "dedicated",
        "--topology",
        "pipeline",
        "--mode",
        "full",
        "--size-per-node",
        "64MiB",
        "--link-rate",
        "100gbit",
    ];
    let text = ok(&args);
    let line = text
        .lines()
        .find(|l| l.starts_with("first epoch (full): encode "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("-bound) = "), "{line}");
    assert!(line.contains("pipeline fill (254 hops × "), "{line}");
    assert!(line.contains("link and CPU overlapped (link "), "{line}");
    let v = json(&[&args[..], &["--json"]].concat());
    let e = &v["prediction"]["first"]["estimate"];
    let term = |k: &str| e[k].as_f64().unwrap();
    let sum = term("fixed_s") + term("serial_s") + term("overlap_s") + term("fill_s");
    assert!((sum - term("seconds")).abs() <= 1e-9 * term("seconds"), "{e}");
    assert!(
        (term("fill_s") - e["hops"].as_f64().unwrap() * term("hop_s")).abs() < 1e-9,
        "{e}"
    );
}

/// The text shows the control plane's part of every epoch and recovery, as a fixed part and a
/// part per node, next to the encode.
#[test]
fn the_control_plane_is_shown_per_node() {
    let text = ok(&["model", "--nodes", "4096", "--k", "14", "--m", "2"]);
    let line = |start: &str| {
        text.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start:?} in {text}"))
            .to_string()
    };
    let later = line("later epochs (");
    assert!(later.contains(" from checkpoint to commit; "), "{later}");
    assert!(
        later.contains("control plane's commit ") && later.contains(" + 4096 nodes × "),
        "{later}"
    );
    let recovery = line("recovery of ");
    for said in ["= liveness 3.00 s + control plane's delay ", ", plan "] {
        assert!(recovery.contains(said), "{said}: {recovery}");
    }
}

/// A calibration saved before the model counted the control plane loads, with the reference's
/// control costs.
#[test]
fn an_older_calibration_loads_with_the_reference_control_costs() {
    let older = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/results/calibration-32x1gbit-quiet.json"
    );
    let v = json(&["model", "--machine", older, "--nodes", "4096", "--json"]);
    assert_eq!(v["source"]["kind"], "calibration");
    let reference = json(&["model", "--nodes", "4096", "--json"]);
    assert_eq!(v["machine"]["control"], reference["machine"]["control"]);
    assert!(v["prediction"]["next"]["commit"]["seconds"].as_f64().unwrap() > 0.0);
}

/// `--rank-cores` of a machine that is not this host's cluster is a documented constant,
/// not this host's core count.
#[test]
fn a_modelled_machine_does_not_take_this_hosts_cores() {
    let v = json(&["model", "--nodes", "1024", "--json"]);
    assert_eq!(v["rank_cores"], 32.0);
    assert_eq!(v["rank_cores_from"], "default");
    let v = json(&["model", "--nodes", "1024", "--rank-cores", "64", "--json"]);
    assert_eq!(
        (v["rank_cores"].as_f64(), v["rank_cores_from"].as_str()),
        (Some(64.0), Some("option"))
    );
    let help = ok(&["model", "--help"]);
    for said in [
        "never this host's cores",
        "32",
        "--max-loss-risk",
        "1e-6, per job-day",
    ] {
        assert!(help.contains(said), "{said}: {help}");
    }
}

#[test]
fn bad_input_is_refused_in_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["model", "--nodes", "6", "--k", "0"], "both must be at least 1"),
        (&["model", "--dirty-fraction", "2"], "dirty fraction 2 outside"),
        (&["model", "--link-rate", "fast"], "link rate \"fast\""),
        (&["model", "--nodes", "2", "--m", "2"], "cannot hold a group"),
        (&["model", "--dir", "/nonexistent/eckpt"], "is not a cluster"),
        (
            &["model", "--machine", "/nonexistent/model.json"],
            "reading /nonexistent/model.json",
        ),
        (&["model", "--recommend", "--max-overhead", "0.01"], "needs k ≥"),
        (
            &["model", "--rank-cores=-1"],
            "--rank-cores -1: a number of cores",
        ),
        (
            &["model", "--recommend", "--max-loss-risk", "0"],
            "--max-loss-risk 0: a probability above 0",
        ),
        (&["report"], "nothing to report"),
        (&["report", "/nonexistent/r.json"], "reading /nonexistent/r.json"),
    ];
    for (args, expected) in cases {
        assert_refused(&run(args), expected);
    }
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other.json");
    std::fs::write(&other, r#"{"something": "else"}"#).unwrap();
    assert_refused(
        &run(&["report", other.to_str().unwrap(), "-o", "/dev/null"]),
        "other.json: neither",
    );
}

/// The calibration measures the running cluster's agents and is what later predictions of
/// that cluster (and its report) are priced with.
#[test]
fn calibration_of_a_running_cluster_prices_its_predictions() {
    let c = Cluster::up(&["--nodes", "3", "--k", "2", "--m", "1"]);
    let v = json(&["model", "--dir", c.d(), "--calibrate", "--json"]);
    assert_eq!(v["source"]["kind"], "calibration");
    assert_eq!(v["scenario"]["nodes"], 3);
    let machine = &v["machine"];
    assert!(machine["link_bps"].as_f64().unwrap() > 1e6, "{machine}");
    for cost in [
        "message_s",
        "link_byte_s",
        "gf_byte_s",
        "read_byte_s",
        "write_byte_s",
        "store_byte_s",
    ] {
        assert!(machine["cpu"][cost].as_f64().unwrap() > 0.0, "{cost}: {machine}");
    }
    // The control plane measured on clusters of tiny images at two sizes on this host: the
    // coordinator's CPU per node, a recovery's planning.
    let control = &machine["control"];
    assert!(control["coordinator_node_s"].as_f64().unwrap() > 0.0, "{control}");
    let plan = &control["plan"];
    assert!(
        plan["fixed_s"].as_f64().unwrap() + plan["per_node_s"].as_f64().unwrap() > 0.0,
        "{control}"
    );
    let saved: Value = serde_json::from_slice(&std::fs::read(c.dir.join("model.json")).unwrap()).unwrap();
    assert_eq!(
        saved["samples"]["control_nodes"],
        serde_json::json!([128.0, 512.0])
    );
    assert!(c.dir.join("model.json").is_file());
    let again = json(&["model", "--dir", c.d(), "--json"]);
    assert_eq!(
        again["source"]["kind"], "calibration",
        "the saved calibration is used"
    );
    // The cluster itself: its nodes' cores as they registered (cores of this host).
    assert_eq!(again["rank_cores_from"], "cluster");
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    let registered = again["rank_cores"].as_f64().unwrap();
    assert!(
        registered >= 1.0 && registered <= cores,
        "{registered} of {cores}"
    );
    assert_close(&again["machine"]["cpu"], &v["machine"]["cpu"]);
    assert_close(
        &again["machine"]["control"]["plan"],
        &v["machine"]["control"]["plan"],
    );
    let faster = json(&["model", "--dir", c.d(), "--link-rate", "100gbit", "--json"]);
    assert!(faster["machine"]["link_bps"].as_f64().unwrap() > 1e10);
    let real = json(&[
        "model",
        "--dir",
        c.d(),
        "--nodes",
        "4096",
        "--own-hosts",
        "--json",
    ]);
    assert_eq!(real["machine"]["hosts"]["kind"], "pernode");
    assert_eq!(
        real["rank_cores_from"], "default",
        "4,096 nodes are not this cluster"
    );
    assert_close(&real["machine"]["cpu"], &v["machine"]["cpu"]);
}
