//! `eckpt status` as text. A small cluster is listed whole: every group and every node on a
//! line of its own. A large one is summarized, so that the answer stays a screen at 4,096
//! nodes: one line per node state with the nodes in it as a compressed host list
//! (`n[0001-4090]`), one line for the groups that protect the committed epoch and are whole,
//! and a line of its own for every node and group that needs attention (down, awaited,
//! damaged; a group with lost members, exposed to a failure domain or behind). `--all` lists
//! everything, `--json` gives everything to programs.

use std::collections::BTreeMap;
use std::fmt::Write;

use eckpt_cluster_api::msg::{GroupStatus, NodeStatus, StatusReport};

/// Nodes listed one per line without `--all`; more are summarized.
const LISTED_NODES: usize = 32;

/// Groups listed one per line without `--all`; more are summarized.
const LISTED_GROUPS: usize = 16;

/// The report as `eckpt status` prints it; `all`: every node and group on a line of its own.
pub fn render(s: &StatusReport, all: bool) -> String {
    let mut out = String::new();
    header(&mut out, s);
    if all || s.groups.len() <= LISTED_GROUPS {
        s.groups.iter().for_each(|g| group_line(&mut out, g));
    } else {
        groups_summary(&mut out, s);
    }
    flush_line(&mut out, s);
    if all || s.nodes.len() <= LISTED_NODES {
        s.nodes.iter().for_each(|n| node_line(&mut out, n));
    } else {
        nodes_summary(&mut out, s);
    }
    out
}

fn header(out: &mut String, s: &StatusReport) {
    let _ = writeln!(
        out,
        "committed epoch {} (open {}, {} of {} ranks in); k={} m={} {} mode, {} layout, {} topology; coordinator term {}",
        s.committed_epoch,
        s.open_epoch,
        s.ranks_ready.len(),
        s.world.map_or("?".into(), |w| w.to_string()),
        s.coding.k,
        s.coding.m,
        s.coding.mode,
        s.coding.layout,
        s.coding.topology,
        s.coordinator_term
    );
    if let Some(job) = &s.job {
        let _ = writeln!(
            out,
            "job {} (generation {}){}{}",
            job.id,
            job.generation,
            match (&job.holder, job.lease_left_seconds) {
                (Some(holder), Some(left)) if left > 0.0 =>
                    format!(": run by {holder}, lease {left:.1} s left"),
                (Some(holder), _) => format!(": lease of {holder} EXPIRED (a new run may take the job over)"),
                (None, _) => String::new(),
            },
            // A finished job a run resumes shows as run by it until that run moves it on.
            if job.finished_unix.is_some() && job.holder.is_none() {
                ", finished"
            } else {
                ""
            }
        );
    }
    if let Some(seconds) = s.isolated_seconds {
        let _ = writeln!(
            out,
            "ISOLATED: the coordinator has heard from no agent for {seconds:.1} s (a partition?): nobody is declared dead meanwhile"
        );
    }
}

fn group_line(out: &mut String, g: &GroupStatus) {
    let _ = writeln!(
        out,
        "group {}: k={} m={} [{}] protects epoch {}{}",
        g.id,
        g.k,
        g.m,
        g.members.join(" "),
        g.protected_epoch,
        if g.lost.is_empty() {
            String::new()
        } else {
            format!(", LOST: {}", g.lost.join(" "))
        }
    );
    if let Some((domain, count)) = &g.exposed {
        let _ = writeln!(
            out,
            "  EXPOSED: {count} members in failure domain {domain}, more than m={}: losing it loses this group's data",
            g.m
        );
    }
}

/// One line for the groups that are whole, not exposed and protect the committed epoch; the
/// others listed whole.
fn groups_summary(out: &mut String, s: &StatusReport) {
    let (settled, attention): (Vec<&GroupStatus>, Vec<&GroupStatus>) = s
        .groups
        .iter()
        .partition(|g| g.lost.is_empty() && g.exposed.is_none() && g.protected_epoch == s.committed_epoch);
    let _ = writeln!(
        out,
        "groups: {} of {} whole and protecting epoch {}{}",
        settled.len(),
        s.groups.len(),
        s.committed_epoch,
        if attention.is_empty() {
            String::new()
        } else {
            "; the others:".into()
        }
    );
    attention.into_iter().for_each(|g| group_line(out, g));
}

fn flush_line(out: &mut String, s: &StatusReport) {
    let Some(f) = &s.flush else { return };
    let _ = writeln!(
        out,
        "flush to {} every {} epoch(s), keep {}: flushed epochs {:?}{}{}{}",
        f.config.dir.display(),
        f.config.every,
        f.config.keep,
        f.flushed,
        f.running
            .map(|e| format!(", flushing epoch {e}"))
            .unwrap_or_default(),
        f.last
            .as_ref()
            .map(|l| format!(
                ", last: epoch {} ({} bytes in {:.2} s)",
                l.epoch, l.bytes, l.seconds
            ))
            .unwrap_or_default(),
        f.last_error
            .as_ref()
            .map(|e| format!(", LAST FLUSH FAILED: {e}"))
            .unwrap_or_default()
    );
}

/// A node's state word: up, AWAITED (a rank placed on it waits for its agent) or DOWN.
fn state_word(n: &NodeStatus) -> &'static str {
    match (n.alive, n.awaited) {
        (true, _) => "up",
        (false, true) => "AWAITED",
        (false, false) => "DOWN",
    }
}

fn node_line(out: &mut String, n: &NodeStatus) {
    let _ = writeln!(
        out,
        "  {:<6} {:<5} {:<22} {}{}{}{}",
        n.name,
        state_word(n),
        n.addr,
        match n.ranks.len() {
            0 => "no ranks".to_string(),
            1 => format!("rank {}", n.ranks[0]),
            _ => format!(
                "ranks {}",
                n.ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        },
        if n.spare { " (spare)" } else { "" },
        if n.removed { " (removed)" } else { "" },
        n.damaged
            .as_ref()
            .map(|d| format!(" DAMAGED: {d} (`eckpt recover` rebuilds it)"))
            .unwrap_or_default()
    );
}

/// A line per state (spares and removed nodes apart), the nodes as a compressed host list;
/// then every node that is not up, or damaged, on a line of its own.
fn nodes_summary(out: &mut String, s: &StatusReport) {
    let mut by_state: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in &s.nodes {
        let mut state = state_word(n).to_string();
        if n.spare {
            state.push_str(", spare");
        }
        if n.removed {
            state.push_str(", removed");
        }
        by_state.entry(state).or_default().push(n.name.clone());
    }
    let ranks: usize = s.nodes.iter().map(|n| n.ranks.len()).sum();
    let hosting = s.nodes.iter().filter(|n| !n.ranks.is_empty()).count();
    let _ = writeln!(
        out,
        "nodes: {} ({ranks} ranks on {hosting} of them; `eckpt status --all` lists each)",
        s.nodes.len()
    );
    for (state, names) in &by_state {
        let _ = writeln!(
            out,
            "  {state:<14} {:>5}  {}",
            names.len(),
            eckpt_run::hostlist::compress(names)
        );
    }
    s.nodes
        .iter()
        .filter(|n| !n.alive || n.damaged.is_some())
        .for_each(|n| node_line(out, n));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of `nodes` nodes in groups of 16, from JSON as the coordinator sends it.
    fn report(nodes: usize, down: &[usize]) -> StatusReport {
        let node = |i: usize| {
            serde_json::json!({
                "name": format!("n{i:04}"), "alive": !down.contains(&i), "addr": format!("10.0.{}.{}:7100", i / 256, i % 256),
                "ranks": [i], "spare": false, "group": [i / 16, i % 16], "removed": false, "hosts_ranks": true,
            })
        };
        let group = |g: usize| {
            let members: Vec<String> = (g * 16..g * 16 + 16).map(|i| format!("n{i:04}")).collect();
            let lost: Vec<String> = members
                .iter()
                .enumerate()
                .filter(|(j, _)| down.contains(&(g * 16 + j)))
                .map(|(_, name)| name.clone())
                .collect();
            serde_json::json!({"id": g, "k": 14, "m": 2, "members": members, "lost": lost, "protected_epoch": 12, "objects": 2})
        };
        serde_json::from_value(serde_json::json!({
            "coding": eckpt_coding::CodingConfig { k: 14, m: 2, ..Default::default() },
            "committed_epoch": 12, "open_epoch": 13, "ranks_ready": [], "world": nodes,
            "nodes": (0..nodes).map(node).collect::<Vec<_>>(),
            "groups": (0..nodes / 16).map(group).collect::<Vec<_>>(),
            "coordinator_term": 1,
        }))
        .unwrap()
    }

    #[test]
    fn a_large_cluster_is_a_screen_with_what_needs_attention() {
        let text = render(&report(4096, &[17, 18, 4000]), false);
        assert!(text.lines().count() < 20, "{text}");
        assert!(
            text.contains("groups: 254 of 256 whole and protecting epoch 12; the others:"),
            "{text}"
        );
        assert!(text.contains("group 1: k=14 m=2 [n0016 "), "{text}");
        assert!(text.contains(", LOST: n0017 n0018"), "{text}");
        assert!(text.contains(", LOST: n4000"), "{text}");
        assert!(
            text.contains("nodes: 4096 (4096 ranks on 4096 of them;"),
            "{text}"
        );
        assert!(
            text.contains("  up              4093  n[0000-0016,0019-3999,4001-4095]"),
            "{text}"
        );
        assert!(
            text.contains("  DOWN               3  n[0017-0018,4000]"),
            "{text}"
        );
        assert!(text.contains("  n0017  DOWN  10.0.0.17:7100"), "{text}");
    }

    #[test]
    fn all_lists_every_node_and_group_and_a_small_cluster_is_listed_whole() {
        let text = render(&report(4096, &[17]), true);
        assert_eq!(text.lines().filter(|l| l.starts_with("group ")).count(), 256);
        assert_eq!(text.lines().filter(|l| l.starts_with("  n")).count(), 4096);
        let small = render(&report(32, &[3]), false);
        assert_eq!(small.lines().filter(|l| l.starts_with("group ")).count(), 2);
        assert_eq!(small.lines().filter(|l| l.starts_with("  n")).count(), 32);
        assert!(!small.contains("nodes:"), "{small}");
    }
}
