//! One `eckpt.toml`: read only when it can be trusted, parsed, and checked against the
//! command tree before any value is used, so that a mistake is one line naming the file
//! and the key — never a value silently ignored, nor a clap error about a flag nobody typed.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use clap::error::{ContextKind, ContextValue};
use clap::{Arg, ArgAction, Command};
use serde::Serialize;

use super::{commands, is_switch, key, takes_several};

/// Which file a value comes from; later layers win.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// The site's file (`ECKPT_SITE_CONFIG`, else `/etc/eckpt.toml`).
    Site,
    /// The user's file (`$XDG_CONFIG_HOME/eckpt.toml`, else `~/.config/eckpt.toml`).
    User,
    /// The job's file (`--config FILE`, else `ECKPT_CONFIG`).
    Job,
}

impl Layer {
    /// Its name in `eckpt config`'s output, text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Site => "site",
            Layer::User => "user",
            Layer::Job => "job",
        }
    }
}

impl Serialize for Layer {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// A command path: `[]` for the top level, `["bench", "cluster"]` for `[bench.cluster]`.
pub type TablePath = Vec<String>;

/// A checked configuration file: per table, the values of its keys as the strings clap
/// parses (`"true"`/`"false"` for switches).
#[derive(Debug)]
pub struct ConfigFile {
    pub layer: Layer,
    pub path: PathBuf,
    tables: BTreeMap<TablePath, BTreeMap<String, Vec<String>>>,
}

impl ConfigFile {
    /// Reads, checks and parses the file at `path`; `None` when there is none.
    pub fn read(layer: Layer, path: &Path, root: &Command) -> Result<Option<ConfigFile>> {
        let Some(text) = read_trusted(path)? else {
            return Ok(None);
        };
        ConfigFile::parse(layer, path, &text, root)
            .map(Some)
            .map_err(|why| anyhow!("{}: {why}", path.display()))
    }

    /// Parses `text` and checks every table and key against `root`'s command tree.
    pub fn parse(layer: Layer, path: &Path, text: &str, root: &Command) -> Result<ConfigFile, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| toml_error(&e, text))?;
        let mut tables = BTreeMap::new();
        check_table(root, &mut Vec::new(), table, &mut tables)?;
        Ok(ConfigFile {
            layer,
            path: path.to_path_buf(),
            tables,
        })
    }

    /// The value of option `key` of the command at `path`, and the table that gave it: the
    /// command's own table, else the nearest one above it (a key in `[bench]` applies to
    /// every `bench` subcommand, a key at the top level to every command).
    pub fn lookup<'a>(&'a self, path: &[String], key: &str) -> Option<(&'a [String], &'a [String])> {
        (0..=path.len()).rev().find_map(|depth| {
            let (table, keys) = self.tables.get_key_value(&path[..depth])?;
            Some((keys.get(key)?.as_slice(), table.as_slice()))
        })
    }
}

/// The file's text, if it exists and only its owner — root or this user — may change it:
/// its values choose where checkpoints go and what `eckpt run` executes. Checked with
/// `fstat` on the descriptor that is then read, so the file checked is the file read;
/// opened without waiting (a FIFO is refused, not waited on). The directories holding it
/// — as named, and where a symbolic link leads — must be ones only root or this user can
/// change ([`eckpt_private_dir::check_ancestors`]): whoever may write into one could put
/// another file in its place.
fn read_trusted(path: &Path) -> Result<Option<String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let at = |e: std::io::Error| anyhow!("{}: {e}", path.display());
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let mut file = match opened {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        opened => opened.map_err(at)?,
    };
    let meta = file.metadata().map_err(at)?;
    let me = eckpt_private_dir::euid();
    let refuse = |why: String| anyhow!("{}: {why}; refusing to read it", path.display());
    if !meta.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    let resolved = std::fs::canonicalize(path).map_err(at)?;
    for named in [path, &resolved] {
        eckpt_private_dir::check_ancestors(named, me).map_err(|e| refuse(e.why()))?;
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(refuse(format!(
            "owned by user {}, not by root or this user ({me})",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(refuse(format!(
            "others can write it (mode {mode:04o}; `chmod go-w` it)"
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(at)?;
    Ok(Some(text))
}

/// A TOML syntax error on one line: where, and what.
fn toml_error(e: &toml::de::Error, text: &str) -> String {
    let place = e.span().map(|span| {
        let before = &text[..span.start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rfind('\n').map_or(before.len(), |n| before.len() - n - 1) + 1;
        format!("line {line}, column {column}: ")
    });
    format!(
        "{}{}",
        place.unwrap_or_default(),
        e.message().trim().replace('\n', "; ")
    )
}

/// How a key is named in messages: `[run] launcher`, or `launcher` at the top level.
fn key_name(table: &[String], key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("[{}] {key}", table.join("."))
    }
}

/// `eckpt` and the command path, as a user types it.
fn command_name(path: &[String]) -> String {
    std::iter::once("eckpt")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks the table of the command `cmd` at `path` and, recursively, the tables of its
/// subcommands, collecting their values into `out`.
fn check_table(
    cmd: &Command,
    path: &mut TablePath,
    table: toml::Table,
    out: &mut BTreeMap<TablePath, BTreeMap<String, Vec<String>>>,
) -> Result<(), String> {
    let mut keys = BTreeMap::new();
    for (name, value) in table {
        if let toml::Value::Table(sub) = value {
            let Some(subcommand) = commands(cmd).find(|c| c.get_name() == name) else {
                let hint = did_you_mean(&name, commands(cmd).map(Command::get_name))
                    .map(|close| {
                        let mut table = path.clone();
                        table.push(close.to_string());
                        format!("; did you mean [{}]?", table.join("."))
                    })
                    .unwrap_or_default();
                path.push(name);
                return Err(format!(
                    "[{}]: no such command (a table is named after a command: [run], [bench.cluster]){hint}",
                    path.join(".")
                ));
            };
            path.push(name);
            check_table(subcommand, path, sub, out)?;
            path.pop();
            continue;
        }
        let named = key_name(path, &name);
        let mut options = Vec::new();
        options_named(cmd, path, &name, &mut options);
        if options.is_empty() {
            let unknown = if path.is_empty() {
                "no eckpt command has an option".to_string()
            } else if cmd.has_subcommands() {
                format!("no command of `{}` has an option", command_name(path))
            } else {
                format!("`{}` has no option", command_name(path))
            };
            let mut keys = Vec::new();
            keys_below(cmd, &mut keys);
            let hint = did_you_mean(&name, keys)
                .map(|close| format!("; did you mean `{close}`?"))
                .unwrap_or_default();
            return Err(format!("{named}: unknown key: {unknown} --{name}{hint}"));
        }
        let mut values = None;
        for (command, arg) in options {
            let these = strings(arg, &value)
                .and_then(|these| check_values(arg, &these).map(|()| these))
                .map_err(|why| format!("{named}: {why} (`{} --{name}`)", command_name(&command)))?;
            values.get_or_insert(these);
        }
        keys.insert(name, values.expect("at least one option"));
    }
    out.insert(path.clone(), keys);
    Ok(())
}

/// The closest of `candidates` to `typed`, if one is close enough: clap's own rule for a
/// mistyped flag (Jaro similarity above 0.7, the most similar first), so that a key in a
/// file gets the suggestion its flag would — and one edit or two letters swapped away, which
/// Jaro misses in short names (`rnu` for `run`; not below three letters).
fn did_you_mean<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro(typed, c), strsim::osa_distance(typed, c), c))
        // One edit away from a one- or two-letter name is any other such name.
        .filter(|&(confidence, edits, _)| confidence > 0.7 || (edits <= 1 && typed.chars().count() >= 3))
        .max_by(|a, b| b.1.min(2).cmp(&a.1.min(2)).then(a.0.total_cmp(&b.0)))
        .map(|(_, _, c)| c)
}

/// The keys a table of `cmd` may hold: its options' and those of the commands below it.
fn keys_below<'a>(cmd: &'a Command, out: &mut Vec<&'a str>) {
    for k in cmd.get_arguments().filter_map(key) {
        if !out.contains(&k) {
            out.push(k);
        }
    }
    for subcommand in commands(cmd) {
        keys_below(subcommand, out);
    }
}

/// Every option with key `name` of `cmd` (at `path`) and of the commands below it.
fn options_named<'a>(cmd: &'a Command, path: &[String], name: &str, out: &mut Vec<(TablePath, &'a Arg)>) {
    out.extend(
        cmd.get_arguments()
            .filter(|arg| key(arg) == Some(name))
            .map(|arg| (path.to_vec(), arg)),
    );
    for subcommand in commands(cmd) {
        let mut below = path.to_vec();
        below.push(subcommand.get_name().to_string());
        options_named(subcommand, &below, name, out);
    }
}

/// A TOML value as the strings clap parses: a boolean for a switch; a string or a number
/// for an option that takes a value; an array of them where it takes several.
fn strings(arg: &Arg, value: &toml::Value) -> Result<Vec<String>, String> {
    if is_switch(arg) {
        return match value {
            toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
            other => Err(format!("expected true or false, not {other}")),
        };
    }
    let scalar = |value: &toml::Value| match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(_)
        | toml::Value::Float(_)
        | toml::Value::Boolean(_)
        | toml::Value::Datetime(_) => Ok(value.to_string()),
        other => Err(format!("expected a value, not {other}")),
    };
    match value {
        toml::Value::Array(items) if takes_several(arg) => items.iter().map(scalar).collect(),
        toml::Value::Array(_) => Err(format!("expected one value, not the list {value}")),
        other => scalar(other).map(|s| vec![s]),
    }
}

/// Runs each value through the option's own value parser, so that a value clap would
/// refuse is refused here, where the file and key are known.
fn check_values(arg: &Arg, values: &[String]) -> Result<(), String> {
    if is_switch(arg) {
        return Ok(());
    }
    let probe = Command::new("probe").no_binary_name(true).arg(
        Arg::new("value")
            .long("value")
            .action(ArgAction::Set)
            .allow_hyphen_values(true)
            .value_parser(arg.get_value_parser().clone()),
    );
    for value in values {
        if let Err(e) = probe.clone().try_get_matches_from([format!("--value={value}")]) {
            let mut why = format!("invalid value {value:?}");
            if let Some(cause) = std::error::Error::source(&e) {
                why.push_str(&format!(": {cause}"));
            }
            if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
                why.push_str(&format!(" (possible values: {})", valid.join(", ")));
            }
            return Err(why);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::tree;

    #[test]
    fn a_fifo_or_a_file_in_a_directory_others_can_write_is_refused_at_once() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo.toml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo of a path in this test's directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Without a writer, opening it to read would wait forever.
        let e = read_trusted(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");

        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let file = open.join("eckpt.toml");
        std::fs::write(&file, "k = 3\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = read_trusted(&file).unwrap_err().to_string();
        assert!(
            e.contains("others can write into") && e.contains("refusing to read it"),
            "{e}"
        );
        // Through a link in a directory of this user's: where it leads counts.
        let link = tmp.path().join("eckpt.toml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = read_trusted(&link).unwrap_err().to_string();
        assert!(
            e.contains(&format!("others can write into {}", open.display())),
            "{e}"
        );

        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(read_trusted(&link).unwrap().as_deref(), Some("k = 3\n"));
    }

    fn parse(text: &str) -> Result<ConfigFile, String> {
        ConfigFile::parse(Layer::User, Path::new("u.toml"), text, &tree())
    }

    #[test]
    fn values_become_the_strings_clap_parses() {
        let file = parse(
            "k = 6\n[up]\nnetns = true\nblock-size = \"64KiB\"\ntag = [\"a\", \"b\"]\n[bench.cluster]\nk = 3\n",
        )
        .unwrap();
        let up = ["up".to_string()];
        assert_eq!(file.lookup(&up, "k"), Some((&["6".to_string()][..], &[][..])));
        assert_eq!(file.lookup(&up, "netns").unwrap().0, ["true"]);
        assert_eq!(file.lookup(&up, "block-size").unwrap().0, ["64KiB"]);
        assert_eq!(file.lookup(&up, "tag").unwrap().0, ["a", "b"]);
        let bench = ["bench".to_string(), "cluster".to_string()];
        assert_eq!(
            file.lookup(&bench, "k").unwrap(),
            (&["3".to_string()][..], &bench[..])
        );
    }

    #[test]
    fn mistakes_name_the_key() {
        let cases = [
            (
                "lancher = 1",
                "lancher: unknown key: no eckpt command has an option --lancher",
            ),
            (
                "[up]\nranks = 1",
                "[up] ranks: unknown key: `eckpt up` has no option --ranks",
            ),
            (
                "[bench]\nranks = 1",
                "[bench] ranks: unknown key: no command of `eckpt bench` has an option --ranks",
            ),
            ("[upp]\nk = 1", "[upp]: no such command"),
            (
                "[up]\nk-value = 1",
                "[up] k-value: unknown key: `eckpt up` has no option --k-value; did you mean `k`?",
            ),
            ("[up]\nnetnss = true", "; did you mean `netns`?"),
            (
                "[upp]\nk = 1",
                "[upp]: no such command (a table is named after a command: [run], [bench.cluster]); did you mean [up]?",
            ),
            ("[bench.clustr]\nk = 1", "did you mean [bench.cluster]?"),
            (
                "[up]\nnetns = \"yes\"",
                "[up] netns: expected true or false, not \"yes\" (`eckpt up --netns`)",
            ),
            (
                "[up]\nk = \"six\"",
                "[up] k: invalid value \"six\": invalid digit found in string (`eckpt up --k`)",
            ),
            (
                "[up]\nk = [1, 2]",
                "[up] k: expected one value, not the list [1, 2]",
            ),
            ("[up]\nmode = \"fast\"", "possible values: full, update"),
            ("k = 6\nk = 7", "line 2, column 1: duplicate key"),
        ];
        for (text, expected) in cases {
            let e = parse(text).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_key_nothing_resembles_gets_no_suggestion() {
        let e = parse("[up]\nzzzzzz = 1").unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
        // The suggestion comes from the table's own command tree: `[bench]` suggests a key of
        // `bench cluster`, never one only `up` has (`netns`).
        let e = parse("[bench]\nnetnss = true").unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
        assert_eq!(did_you_mean("nodez", ["nodes", "k"]), Some("nodes"));
        assert_eq!(did_you_mean("x", ["nodes", "k"]), None);
    }

    #[test]
    fn a_top_level_key_must_suit_every_command_it_applies_to() {
        // `mode` takes full|update in `up` but any string in `bench cluster`.
        let e = parse("mode = \"stripe\"").unwrap_err();
        assert!(
            e.contains("mode: invalid value \"stripe\"") && e.contains("`eckpt up --mode`"),
            "{e}"
        );
        parse("[bench]\nmode = \"stripe\"").unwrap();
    }

    #[test]
    fn untrusted_files_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("eckpt.toml");
        assert!(read_trusted(&path).unwrap().is_none(), "absent");
        std::fs::write(&path, "k = 1\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_trusted(&path).unwrap().as_deref(), Some("k = 1\n"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = read_trusted(&path).unwrap_err().to_string();
        assert!(e.contains("others can write it (mode 0666"), "{e}");
        assert!(read_trusted(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
    }
}
