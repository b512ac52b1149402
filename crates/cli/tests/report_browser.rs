//! `eckpt report`'s page in a real headless browser (Debian's chromium, driven through
//! chromedriver's WebDriver protocol): it loads without console errors, its charts are
//! drawn, the run's timeline shows both failures, and a screenshot is left in the target
//! directory (`report-browser.png`) for a person to look at.
//!
//! Skipped, with a line saying so, where chromium or chromedriver is missing, unless
//! `ECKPT_REQUIRE_BROWSER=1` (then missing ones fail the test); `scripts/setup.sh` installs
//! both.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const BENCH: &str = r#"[
 {"nodes":6,"coding":{"k":4,"m":2,"code":"cauchy","mode":"update","layout":"dedicated","topology":"pipeline",
  "chunk":262144,"max_stripes":8},"size_per_node":67108864,"pattern":"mat","netns":true,"link_rate":"1gbit",
  "link_gbps":0.965,"shard_bytes":67108864,"full_encode_seconds":1.126,"encode_seconds":0.033,
  "encode_seconds_samples":[0.033,0.035],"kinds":["update","update"],"bytes_sent_per_node":65824,
  "changed_bytes_per_node":65536},
 {"nodes":4,"coding":{"k":2,"m":2,"code":"cauchy","mode":"full","layout":"dedicated","topology":"pipeline",
  "chunk":65536,"max_stripes":8},"size_per_node":33554432,"pattern":"mat","netns":true,"link_rate":"100mbit",
  "link_gbps":0.0965,"full_encode_seconds":5.626,"encode_seconds":5.626,"encode_seconds_samples":[5.63],
  "kinds":["full"],"changed_bytes_per_node":32768},
 {"nodes":32,"coding":{"k":30,"m":2,"code":"cauchy","mode":"full","layout":"dedicated","topology":"pipeline",
  "chunk":65536,"max_stripes":8},"size_per_node":33554432,"pattern":"mat","netns":true,"link_rate":"100mbit",
  "link_gbps":0.0965,"full_encode_seconds":5.713,"encode_seconds":5.713,"encode_seconds_samples":[5.71],
  "kinds":["full"],"changed_bytes_per_node":32768}
]"#;

/// A run that lost n1 at 30 s and n3 at 61 s, recovered onto a spare and then per process.
fn run_record() -> Value {
    let epochs: Vec<Value> = (1..=40)
        .map(|e| {
            json!({"epoch": e, "t_s": 2.0 * e as f64, "committed": e != 15,
                   "kinds": [if e == 1 || e == 16 || e == 31 { "full" } else { "update" }],
                   "encode_seconds": if e == 1 { 1.1 } else { 0.04 },
                   "image_bytes": 268435456u64, "stored_bytes": if e == 1 { 268435456u64 } else { 524288 }})
        })
        .collect();
    json!({
        "format": 1, "command": ["./mat", "-m", "64", "-s", "400"], "ranks": 4, "launcher": "local",
        "placement": "balanced", "nodes": ["n0","n1","n2","n3","n4","n5"], "spares": ["s0"],
        "link_rate": "1gbit", "started_unix": 1764000000.5, "seconds": 93.2, "exit_code": 0, "error": null,
        "attempts": [
            {"attempt": 1, "start_s": 0.0, "end_s": 30.0, "placement": {"0": "n0", "1": "n1"}, "end": "node n1 lost"},
            {"attempt": 2, "start_s": 33.0, "end_s": 61.0, "placement": {"0": "n0", "1": "s0"}, "end": "node n3 lost"},
            {"attempt": 3, "start_s": 64.5, "end_s": 93.2, "end": "exit 0"}
        ],
        "epochs": epochs,
        "failures": [
            {"t_s": 30.0, "nodes": ["n1"], "cause": "kill-at 30:1"},
            {"t_s": 61.0, "nodes": ["n3"], "cause": "kill-at 61:3"}
        ],
        "recoveries": [
            {"start_s": 30.1, "end_s": 33.0, "epoch": 14, "lost": ["n1"], "placement": {"1": "s0"}, "moved": [],
             "detect_seconds": 0.2, "decode_seconds": 0.9, "encode_seconds": 1.2, "relaunch_seconds": 0.3},
            {"start_s": 61.1, "end_s": 64.5, "epoch": 30, "lost": ["n3"], "placement": {"3": "n2"},
             "moved": [[3, "n4", "n0"]], "detect_seconds": 0.2, "decode_seconds": 1.0, "encode_seconds": 1.4,
             "relaunch_seconds": 0.3}
        ]
    })
}

fn found(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One HTTP/1.1 request to the driver; the JSON body of a 200 answer.
fn request(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let fail = |e: std::io::Error| format!("{method} {path}: {e}");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(fail)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(fail)?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .map_err(fail)?;
    // The driver may keep the connection open: read the head, then Content-Length bytes.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).map_err(fail)? == 0 {
            return Err(format!("{method} {path}: connection closed"));
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .ok_or_else(|| format!("{method} {path}: no Content-Length in {head}"))?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).map_err(fail)?;
    let body = String::from_utf8_lossy(&body);
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{method} {path}: {head}\n{body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("{method} {path}: {e}: {body}"))
}

/// [`request`], which must succeed.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    request(port, method, path, body).unwrap_or_else(|e| panic!("{e}"))
}

/// A browser session, ended (the browser quits) when dropped, even when a check failed.
struct Session {
    port: u16,
    id: String,
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = request(self.port, "DELETE", &format!("/session/{}", self.id), None);
    }
}

/// chromedriver on a free port, its browsers started with `profile`. When dropped, it is
/// asked to shut down (it quits its browsers), killed if it has not within seconds, and any
/// browser process still running with the profile is ended by its pid.
struct Driver {
    child: Child,
    port: u16,
    profile: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = request(self.port, "GET", "/shutdown", None);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in processes_with(&self.profile) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

/// Processes whose command line mentions `text`.
fn processes_with(text: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(text))
        })
        .collect()
}

fn start_driver(profile: &Path) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver {
        child,
        port,
        profile: profile.display().to_string(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn the_report_loads_in_chromium_with_its_plots_drawn() {
    let required = std::env::var("ECKPT_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
    if !(found("chromium") && found("chromedriver")) {
        assert!(
            !required,
            "ECKPT_REQUIRE_BROWSER=1 but chromium or chromedriver is missing"
        );
        eprintln!("skipped: chromium and chromedriver are not installed (scripts/setup.sh installs them)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let bench = write(tmp.path(), "bench.json", BENCH);
    let run = write(tmp.path(), "run.json", &run_record().to_string());
    let page = tmp.path().join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .args(["report", &bench, &run, "-o", page.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["bench_results"], 3);
    assert_eq!(summary["runs"], 1);

    let profile = tmp.path().join("profile");
    let driver = start_driver(&profile);
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
    ];
    let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.display()));
    let caps = json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
        "goog:loggingPrefs": {"browser": "ALL"}
    }}});
    let session = http(driver.port, "POST", "/session", Some(&caps));
    let session = Session {
        port: driver.port,
        id: session["value"]["sessionId"]
            .as_str()
            .expect("a session")
            .to_string(),
    };
    let at = |p: &str| format!("/session/{}{p}", session.id);
    http(
        driver.port,
        "POST",
        &at("/url"),
        Some(&json!({"url": format!("file://{}", page.display())})),
    );
    let script = "return {ready: document.readyState, \
        charts: document.querySelectorAll('svg.chart').length, \
        points: document.querySelectorAll('svg.chart circle').length, \
        lines: document.querySelectorAll('svg.chart path').length, \
        failures: document.querySelectorAll('#run-run-json .marker.failure').length, \
        relocations: document.querySelectorAll('#run-run-json .marker.relocation').length, \
        empty: document.querySelectorAll('svg.chart .empty').length, \
        width: Math.max(...[...document.querySelectorAll('svg.chart')].map(s => s.getBoundingClientRect().width))};";
    let dom = http(
        driver.port,
        "POST",
        &at("/execute/sync"),
        Some(&json!({"script": script, "args": []})),
    )["value"]
        .clone();
    let log = http(
        driver.port,
        "POST",
        &at("/se/log"),
        Some(&json!({"type": "browser"})),
    );
    let shot = http(driver.port, "GET", &at("/screenshot"), None);
    drop(session);
    drop(driver);

    let errors: Vec<&Value> = log["value"]
        .as_array()
        .expect("a log")
        .iter()
        .filter(|e| e["level"] == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    assert_eq!(dom["ready"], "complete");
    assert!(dom["charts"].as_u64().unwrap() >= 7, "{dom}");
    assert!(dom["points"].as_u64().unwrap() >= 40, "{dom}");
    assert!(dom["lines"].as_u64().unwrap() >= 8, "{dom}");
    assert_eq!(dom["failures"], 2, "both failures on the timeline: {dom}");
    assert_eq!(
        dom["relocations"], 3,
        "spare, per-process placement and a move: {dom}"
    );
    assert_eq!(dom["empty"], 0, "every chart has data: {dom}");
    assert!(
        dom["width"].as_f64().unwrap() > 300.0,
        "charts are laid out: {dom}"
    );
    let png = shot["value"].as_str().expect("a screenshot");
    assert!(png.len() > 10_000, "a screenshot with something on it");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-browser.png");
    std::fs::write(&target, base64_decode(png)).unwrap();
    eprintln!("screenshot: {}", target.display());
}

/// Standard base64 (the driver's screenshot encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let sextets: Vec<u8> = text.bytes().filter_map(value).collect();
    sextets
        .chunks(4)
        .flat_map(|q| {
            let n = q.iter().fold(0u32, |acc, &s| acc << 6 | u32::from(s)) << (6 * (4 - q.len()));
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            bytes[..q.len().saturating_sub(1)].to_vec()
        })
        .collect()
}
