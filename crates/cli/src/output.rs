//! How commands report: a progress bar on a terminal, JSON with `--json`, text otherwise.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// A byte-progress bar drawn on stderr only when it is a terminal and JSON was not asked for.
pub fn byte_progress(total: u64, label: &str, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>8} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("reports always serialise")
    );
}

/// Threads to use when the user did not say: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
