//! Fault-injection pause points for tests and demos. `eckpt debug pause --at PHASE` writes
//! `D/debug/pause`; a process reaching that phase writes `D/debug/reached-<who>` and waits
//! until the pause is lifted (`eckpt debug resume` removes the file), so a test can kill
//! nodes at exactly that moment. Without the file, a pause point costs one `stat`.
//!
//! `eckpt debug panic --at PHASE` writes `D/debug/panic` instead: the first process to reach
//! that phase removes the file and panics there (once: the daemon restarted after the
//! crash goes on), which is how tests check that a panic aborts a daemon and that its
//! restart path recovers.
//!
//! Only a build with the `fault-injection` feature pauses (the test and demo builds); in the
//! released binary (`make build`, `make install`) a pause point is empty and no daemon
//! reads `D/debug/`, which may lie on a parallel file system.

use std::path::Path;
#[cfg(feature = "fault-injection")]
use std::{path::PathBuf, time::Duration};

/// The phases a test can stop the cluster at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The coordinator is about to send an epoch's coding tasks.
    BeforeEncode,
    /// An agent is inside a coding task, after its first row.
    MidEncode,
    /// An agent is inside a decode task (a recovery's or a restore's), after its first row
    /// of the object's half.
    MidDecode,
    /// Every member prepared the epoch (or a recovery's new groups); the coordinator has
    /// not decided yet.
    BeforeCommit,
    /// The epoch is committed in the journal; agents have not been told.
    AfterCommit,
    /// A recovery is between decode and re-encode.
    MidRecovery,
    /// An agent is copying its ranks to a flush, after its first rank.
    MidFlush,
    /// Every node's part of a flush is written; the coordinator has not published it.
    BeforePublish,
    /// An agent is streaming a rank to `eckpt restore`, after its first frame.
    MidExport,
    /// An agent is shipping a rank to another (a rebuilt rank to its new host, a moved
    /// rank), after its first frame.
    MidShip,
    /// An agent's registration was accepted; it has not resolved its store against the
    /// coordinator's answer yet.
    BeforeResolve,
}

impl Phase {
    /// Every phase, in the order an epoch, a recovery and a flush reach them.
    pub const ALL: [Phase; 11] = [
        Phase::BeforeEncode,
        Phase::MidEncode,
        Phase::MidDecode,
        Phase::BeforeCommit,
        Phase::AfterCommit,
        Phase::MidRecovery,
        Phase::MidFlush,
        Phase::BeforePublish,
        Phase::MidExport,
        Phase::MidShip,
        Phase::BeforeResolve,
    ];

    /// The name `eckpt debug pause --at` takes and the pause file holds.
    pub fn name(self) -> &'static str {
        match self {
            Phase::BeforeEncode => "before-encode",
            Phase::MidEncode => "mid-encode",
            Phase::MidDecode => "mid-decode",
            Phase::BeforeCommit => "before-commit",
            Phase::AfterCommit => "after-commit",
            Phase::MidRecovery => "mid-recovery",
            Phase::MidFlush => "mid-flush",
            Phase::BeforePublish => "before-publish",
            Phase::MidExport => "mid-export",
            Phase::MidShip => "mid-ship",
            Phase::BeforeResolve => "before-resolve",
        }
    }

    /// The phase called `name`, or a one-line error listing the phases.
    pub fn parse(name: &str) -> Result<Phase, String> {
        Phase::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
            format!("phase {name:?}: expected one of {}", names.join(", "))
        })
    }
}

/// The row after which a coding task over `rows` rows reaches its pause point (half-way:
/// every stream is up and carrying data); none without fault injection.
pub fn pause_row(rows: u64) -> Option<u64> {
    cfg!(feature = "fault-injection").then(|| (rows / 2).max(1))
}

#[cfg(feature = "fault-injection")]
fn wanted(debug_dir: &Path, phase: Phase) -> bool {
    std::fs::read_to_string(debug_dir.join("pause")).is_ok_and(|p| p.trim() == phase.name())
}

/// Panics if a panic is asked for at `phase`, removing the request first (one shot).
#[cfg(feature = "fault-injection")]
fn panic_if_asked(debug_dir: &Path, phase: Phase, who: &str) {
    let request = debug_dir.join("panic");
    if std::fs::read_to_string(&request).is_ok_and(|p| p.trim() == phase.name()) {
        let _ = std::fs::remove_file(&request);
        panic!("injected panic at {} in {who}", phase.name());
    }
}

/// Marks `who` as paused at `phase` if a pause is asked for there; the marker to remove.
/// Panics there instead if a panic is asked for.
#[cfg(feature = "fault-injection")]
fn enter(debug_dir: &Path, phase: Phase, who: &str) -> Option<PathBuf> {
    panic_if_asked(debug_dir, phase, who);
    if !wanted(debug_dir, phase) {
        return None;
    }
    let reached = debug_dir.join(format!("reached-{who}"));
    let _ = std::fs::write(&reached, phase.name());
    tracing::warn!(phase = phase.name(), who, "paused for fault injection");
    Some(reached)
}

/// How often a paused process looks whether the pause was lifted.
#[cfg(feature = "fault-injection")]
const POLL: Duration = Duration::from_millis(20);

/// Blocks while `D/debug/pause` names `phase` (for threads that may block).
pub fn pause_point(debug_dir: &Path, phase: Phase, who: &str) {
    #[cfg(feature = "fault-injection")]
    if let Some(reached) = enter(debug_dir, phase, who) {
        while wanted(debug_dir, phase) {
            std::thread::sleep(POLL);
        }
        let _ = std::fs::remove_file(reached);
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = (debug_dir, phase, who);
}

/// [`pause_point`] for async code.
pub async fn pause_point_async(debug_dir: &Path, phase: Phase, who: &str) {
    #[cfg(feature = "fault-injection")]
    if let Some(reached) = enter(debug_dir, phase, who) {
        while wanted(debug_dir, phase) {
            tokio::time::sleep(POLL).await;
        }
        let _ = std::fs::remove_file(reached);
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = (debug_dir, phase, who);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_parses_back_from_its_name() {
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.name()), Ok(p));
        }
        let e = Phase::parse("mid-commit").unwrap_err();
        assert!(e.contains("before-encode") && e.contains("mid-recovery"), "{e}");
    }
}
