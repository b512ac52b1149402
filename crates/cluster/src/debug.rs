//! Fault-injection pause points for tests and demos. `eckpt debug pause --at PHASE` writes
//! `D/debug/pause`; a process reaching that phase writes `D/debug/reached-<who>` and waits
//! until the pause is lifted (`eckpt debug resume` removes the file), so a test can kill
//! nodes at exactly that moment. Without the file, a pause point costs one `stat`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The phases a test can stop the cluster at.
pub const PHASES: &[&str] = &[
    "before-encode",
    "mid-encode",
    "before-commit",
    "after-commit",
    "mid-recovery",
];

fn wanted(debug_dir: &Path, phase: &str) -> bool {
    std::fs::read_to_string(debug_dir.join("pause")).is_ok_and(|p| p.trim() == phase)
}

/// Marks `who` as paused at `phase` if a pause is asked for there; the marker to remove.
fn enter(debug_dir: &Path, phase: &str, who: &str) -> Option<PathBuf> {
    if !wanted(debug_dir, phase) {
        return None;
    }
    let reached = debug_dir.join(format!("reached-{who}"));
    let _ = std::fs::write(&reached, phase);
    tracing::warn!(phase, who, "paused for fault injection");
    Some(reached)
}

/// How often a paused process looks whether the pause was lifted.
const POLL: Duration = Duration::from_millis(20);

/// Blocks while `D/debug/pause` names `phase` (for threads that may block).
pub fn pause_point(debug_dir: &Path, phase: &str, who: &str) {
    if let Some(reached) = enter(debug_dir, phase, who) {
        while wanted(debug_dir, phase) {
            std::thread::sleep(POLL);
        }
        let _ = std::fs::remove_file(reached);
    }
}

/// [`pause_point`] for async code.
pub async fn pause_point_async(debug_dir: &Path, phase: &str, who: &str) {
    if let Some(reached) = enter(debug_dir, phase, who) {
        while wanted(debug_dir, phase) {
            tokio::time::sleep(POLL).await;
        }
        let _ = std::fs::remove_file(reached);
    }
}
