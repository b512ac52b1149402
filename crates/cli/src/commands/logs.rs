//! `eckpt logs`: a cluster's logs in one stream — the coordinator's (`D/coordinator/log`)
//! and every node's (`D/nodes/NAME/log`, written by the agents `up` or `eckpt run` start),
//! each line prefixed with where it comes from and all merged in time order (every log line
//! starts with its UTC timestamp); `--follow` then prints what is appended, as `tail -f`.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use eckpt_cluster_api::dirs::{check_node_name, ClusterDir};

/// The source name of the coordinator's log.
const COORDINATOR: &str = "coordinator";

/// How often `--follow` looks for appended lines.
const FOLLOW_TICK: Duration = Duration::from_millis(200);

#[derive(clap::Args)]
pub struct LogsArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Only this node's log (repeatable); `coordinator` for the coordinator's. Default:
    /// the coordinator's and every node's.
    #[arg(long = "node", value_name = "NAME")]
    nodes: Vec<String>,
    /// Then keep printing the lines appended, until interrupted.
    #[arg(long, short = 'f')]
    follow: bool,
}

/// One log file and how far it was printed.
struct Source {
    name: String,
    path: PathBuf,
    offset: u64,
    /// A last line not yet ended by a newline (still being written).
    partial: String,
}

pub fn run_logs(args: LogsArgs) -> Result<i32> {
    let dir = ClusterDir::new(&args.dir)?;
    dir.load()?;
    let mut sources = sources(&dir, &args.nodes)?;
    let width = sources.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let mut lines = Vec::new();
    for (order, source) in sources.iter_mut().enumerate() {
        for line in source.read_new()? {
            lines.push((order, line));
        }
    }
    let mut out = std::io::stdout().lock();
    for (order, line) in merge_by_time(lines) {
        writeln!(out, "{:>width$} | {line}", sources[order].name)?;
    }
    out.flush()?;
    if !args.follow {
        return Ok(0);
    }
    loop {
        std::thread::sleep(FOLLOW_TICK);
        for source in &mut sources {
            for line in source.read_new()? {
                writeln!(out, "{:>width$} | {line}", source.name)?;
            }
        }
        out.flush()?;
    }
}

/// The logs `nodes` names (checked names only: they become paths), or every log there is.
fn sources(dir: &ClusterDir, nodes: &[String]) -> Result<Vec<Source>> {
    let source = |name: &str| Source {
        name: name.to_string(),
        path: if name == COORDINATOR {
            ClusterDir::log_file(&dir.coordinator())
        } else {
            ClusterDir::log_file(&dir.node(name))
        },
        offset: 0,
        partial: String::new(),
    };
    if !nodes.is_empty() {
        let mut chosen = Vec::new();
        for name in nodes {
            if name != COORDINATOR {
                check_node_name(name)?;
            }
            let found = source(name);
            if !found.path.is_file() {
                anyhow::bail!("no log of {name} in {}", dir.root().display());
            }
            chosen.push(found);
        }
        return Ok(chosen);
    }
    let mut all = vec![source(COORDINATOR)];
    let nodes_dir = dir.root().join("nodes");
    let mut names: Vec<String> = std::fs::read_dir(&nodes_dir)
        .with_context(|| format!("{}", nodes_dir.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| check_node_name(name).is_ok())
        .collect();
    names.sort();
    all.extend(names.iter().map(|n| source(n)));
    all.retain(|s| s.path.is_file());
    Ok(all)
}

impl Source {
    /// The whole lines appended since the last call (from the start after a truncation).
    fn read_new(&mut self) -> Result<Vec<String>> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            // A node's log appears when its agent starts.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("{}", self.path.display())),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.take(len - self.offset).read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let Some(end) = self.partial.rfind('\n') else {
            return Ok(Vec::new());
        };
        let complete: Vec<String> = self.partial[..end].lines().map(str::to_string).collect();
        self.partial.drain(..=end);
        Ok(complete)
    }
}

/// The timestamp a log line starts with (`2026-11-26T10:43:56.587140Z`), if it does.
fn timestamp(line: &str) -> Option<&str> {
    let word = line.split(' ').next()?;
    let looks_like_one =
        word.len() >= 20 && word.as_bytes()[4] == b'-' && word.as_bytes()[10] == b'T' && word.ends_with('Z');
    looks_like_one.then_some(word)
}

/// Lines of several logs in time order: a line without a timestamp (a continuation, a
/// panic's message) stays after the line before it in its own log; equal times keep the
/// sources' order.
fn merge_by_time(lines: Vec<(usize, String)>) -> Vec<(usize, String)> {
    let mut keyed: BTreeMap<(String, usize, usize), String> = BTreeMap::new();
    let mut last_time: BTreeMap<usize, String> = BTreeMap::new();
    for (index, (order, line)) in lines.into_iter().enumerate() {
        let time = match timestamp(&line) {
            Some(t) => {
                last_time.insert(order, t.to_string());
                t.to_string()
            }
            None => last_time.get(&order).cloned().unwrap_or_default(),
        };
        keyed.insert((time, order, index), line);
    }
    keyed
        .into_iter()
        .map(|((_, order, _), line)| (order, line))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_merge_in_time_order_and_continuations_follow_their_line() {
        let lines = vec![
            (
                0,
                "2026-11-26T10:43:56.500000Z  INFO coordinator started".to_string(),
            ),
            (0, "2026-11-26T10:43:57.000000Z  WARN node n1 dead".to_string()),
            (1, "2026-11-26T10:43:56.600000Z  INFO agent started".to_string()),
            (1, "2026-11-26T10:43:58.000000Z ERROR panicked".to_string()),
            (1, "  at src/agent.rs:10".to_string()),
            (0, "2026-11-26T10:43:58.000000Z  INFO recovered".to_string()),
        ];
        let merged: Vec<String> = merge_by_time(lines)
            .into_iter()
            .map(|(o, l)| format!("{o}:{l}"))
            .collect();
        assert_eq!(
            merged,
            [
                "0:2026-11-26T10:43:56.500000Z  INFO coordinator started",
                "1:2026-11-26T10:43:56.600000Z  INFO agent started",
                "0:2026-11-26T10:43:57.000000Z  WARN node n1 dead",
                "0:2026-11-26T10:43:58.000000Z  INFO recovered",
                "1:2026-11-26T10:43:58.000000Z ERROR panicked",
                "1:  at src/agent.rs:10",
            ]
        );
        assert_eq!(timestamp("not a log line"), None);
        assert_eq!(timestamp(""), None);
    }
}
