//! `eckpt config`: the settings a command runs with and where each came from (a flag, an
//! environment variable, a configuration file, the built-in default), so that "why does
//! my run use mpirun?" has an answer. The layers themselves are `crate::config`'s.

use std::ffi::OsString;

use anyhow::{bail, Result};
use clap::Command;
use serde::Serialize;
use serde_json::Value;

use crate::config::{self, Config, Layer, Looked, Setting, Source, JOB_VARIABLE};
use crate::output::print_json;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON: the files looked for, and every setting with its source.
    #[arg(long)]
    json: bool,
    /// A command line without `eckpt` (`run`, `bench cluster`, `run --launcher mpirun`):
    /// the settings it would run with; a command with subcommands (`bench`): theirs.
    /// Default: every command's.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Serialize)]
struct Report<'a> {
    /// Lowest precedence first.
    files: &'a [Looked],
    settings: Vec<Setting>,
}

pub fn run(args: Args, root: &Command) -> Result<i32> {
    let argv = |words: &[String]| -> Vec<OsString> {
        std::iter::once("eckpt")
            .chain(words.iter().map(String::as_str))
            .map(OsString::from)
            .collect()
    };
    // The command line shown may name its own job file (`config run --config job.toml`);
    // one given to `eckpt --config job.toml config` is in the environment by now.
    let invocation = config::Invocation::read(root, &argv(&args.command));
    let config = Config::load(root, &invocation)?;
    let path = invocation.path;
    let leaves = config::leaves(root, &path);
    let named = if leaves == [path.clone()] {
        path.len()
    } else {
        args.command.len()
    };
    if !config::is_command(root, &path) || path.len() < named {
        bail!("`eckpt {}`: no such command", args.command.join(" "));
    }
    let mut settings = Vec::new();
    for leaf in &leaves {
        let line = if *leaf == path { &args.command } else { leaf };
        settings.extend(
            config
                .settings(root, leaf, &argv(line))
                .unwrap_or_else(|e| e.exit()),
        );
    }
    if args.json {
        print_json(&Report {
            files: &config.looked,
            settings,
        });
    } else {
        print_table(&config.looked, &settings);
    }
    Ok(0)
}

/// The files, then one line per setting in aligned columns.
fn print_table(files: &[Looked], settings: &[Setting]) {
    println!("files (a later one wins; flags and the environment win over all):");
    for file in files {
        println!(
            "  {:<4}  {}  ({})",
            file.layer.name(),
            file.path.display(),
            if file.found { "read" } else { "not found" }
        );
    }
    if !files.iter().any(|f| f.layer == Layer::Job) {
        println!("  job   none (--config FILE or {JOB_VARIABLE})");
    }
    let rows: Vec<[String; 4]> = settings
        .iter()
        .map(|s| {
            [
                s.command.clone(),
                s.key.clone(),
                value_text(&s.value),
                source_text(s),
            ]
        })
        .collect();
    let header = ["COMMAND", "KEY", "VALUE", "SOURCE"].map(String::from);
    for line in aligned(std::iter::once(header).chain(rows).collect()) {
        println!("{line}");
    }
}

/// `rows` in columns as wide as their widest cell, two spaces apart. Padded by hand: a
/// format width is limited to 65535, and a file's value may be longer.
fn aligned(rows: Vec<[String; 4]>) -> Vec<String> {
    let mut widths = [0; 4];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(widths) {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
            }
            line.trim_end().to_string()
        })
        .collect()
}

fn value_text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join(" "),
        other => other.to_string(),
    }
}

fn source_text(setting: &Setting) -> String {
    let from = setting.from.as_deref().unwrap_or_default();
    match setting.source {
        Source::Flag => format!("flag {from}"),
        Source::Env => format!("env {from}"),
        Source::File(layer) => format!(
            "{} {from} [{}]",
            layer.name(),
            match setting.table.as_deref() {
                Some("") | None => "top level",
                Some(table) => table,
            }
        ),
        Source::Default => "default".into(),
        Source::Unset => "unset".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_take_values_of_any_length() {
        let long = "x".repeat(100_000);
        let row = |a: &str, b: &str| [a, "k", b, "default"].map(String::from);
        let lines = aligned(vec![row("up", &long), row("run", "1")]);
        assert_eq!(lines[0], format!("up   k  {long}  default"));
        assert_eq!(lines[1], format!("run  k  1{}  default", " ".repeat(99_999)));
    }
}
