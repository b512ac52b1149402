//! `eckpt.toml`: every long option of every command, settable in configuration files.
//!
//! A setting is looked up in layers, the first that has it wins:
//!
//! 1. the command line (`--k 6`);
//! 2. the environment, for the options that name a variable (`--dir` ← `ECKPT_CLUSTER`);
//! 3. the job's file: `--config FILE`, else `$ECKPT_CONFIG`;
//! 4. the user's file: `$XDG_CONFIG_HOME/eckpt.toml`, else `~/.config/eckpt.toml`;
//! 5. the site's file: `$ECKPT_SITE_CONFIG`, else `/etc/eckpt.toml`;
//! 6. the option's built-in default.
//!
//! The keys are not a second list kept in step with the flags: they are read from clap's
//! command tree, so an option added to any command has its key at once. A table is named
//! after a command (`[run]`, `[bench.cluster]`) and its keys are the long names of the
//! command's options (`launcher`, `max-restarts`); a key in a table applies to that
//! command and every command below it, the top level to every command that has the
//! option. Within a file the most specific table wins; a higher file wins over a lower one
//! whatever its table, so a job's top-level `dir` beats a user's `[run] dir`. Hidden
//! commands (`mpirun-agent`, `run-guard`: eckpt's own plumbing, always started with what
//! they need) and global options (`--config` itself) have no keys.
//!
//! How: the winning file value becomes the clap default of its option before the command
//! line is parsed, so clap itself ranks it below flags and environment variables, parses
//! it with the option's own parser, and a file may give what a command requires
//! (`status`'s `--dir`). A file's value gives way to a flag that conflicts with its option
//! (`restore --from-flush` against a file's `dir`), as a default would.

mod file;

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::builder::Resettable;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, Id};
use serde::Serialize;
use serde_json::Value;

use file::ConfigFile;
pub use file::Layer;

/// The variable that names the site's file (default [`SITE_FILE`]): for sites that keep
/// configuration elsewhere, and for tests.
pub const SITE_VARIABLE: &str = "ECKPT_SITE_CONFIG";
/// The site's file when [`SITE_VARIABLE`] is not set.
pub const SITE_FILE: &str = "/etc/eckpt.toml";
/// The variable `--config` reads when not given; set for the processes eckpt starts.
pub const JOB_VARIABLE: &str = "ECKPT_CONFIG";
/// The id of the global `--config` option.
const JOB_OPTION: &str = "config";

/// `root` with the global `--config FILE` option.
pub fn with_option(root: Command) -> Command {
    root.arg(
        Arg::new(JOB_OPTION)
            .long("config")
            .global(true)
            .env(JOB_VARIABLE)
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .help("The job's configuration file (eckpt.toml), above the user's and the site's; `eckpt config` shows the settings"),
    )
}

/// The commands that have tables: those clap shows.
fn commands(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set())
}

/// The option's key, if it has one: its long name, for an option clap shows that takes
/// values or is a switch — not `--help`, `--version` or a global option.
fn key(arg: &Arg) -> Option<&str> {
    let settable = matches!(
        arg.get_action(),
        ArgAction::Set | ArgAction::Append | ArgAction::SetTrue | ArgAction::SetFalse
    );
    (settable && !arg.is_hide_set() && !arg.is_global_set())
        .then(|| arg.get_long())
        .flatten()
}

/// Whether the option is a switch (`--netns`), whose key takes `true` or `false`.
fn is_switch(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse)
}

/// Whether the option takes several values, whose key then takes a list.
fn takes_several(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Append) || arg.get_num_args().is_some_and(|n| n.max_values() > 1)
}

/// The command at `path` below `root` (a path clap parsed or listed).
fn find<'a>(root: &'a Command, path: &[String]) -> &'a Command {
    path.iter().fold(root, |cmd, name| {
        cmd.find_subcommand(name).expect("a path of the command tree")
    })
}

/// `cmd` with the command at `path` below it changed by `change`.
fn change_at(cmd: Command, path: &[String], change: impl FnOnce(Command) -> Command) -> Command {
    match path.split_first() {
        None => change(cmd),
        Some((first, rest)) => cmd.mut_subcommand(first, |sub| change_at(sub, rest, change)),
    }
}

/// The matches of the command at `path`.
fn matches_at<'a>(matches: &'a ArgMatches, path: &[String]) -> &'a ArgMatches {
    path.iter().fold(matches, |m, name| {
        m.subcommand_matches(name).expect("the parsed command path")
    })
}

/// What a command line asks for, read before any file: which file is the job's, and which
/// command's options the files give values to. clap's `ignore_errors` is made for this: an
/// option a file will give is not missing yet.
pub struct Invocation {
    /// The command path (`["bench", "cluster"]`); empty when there is none.
    pub path: Vec<String>,
    job_file: Option<PathBuf>,
}

impl Invocation {
    /// Reads `argv` (program name first) against `root`.
    pub fn read(root: &Command, argv: &[OsString]) -> Invocation {
        // Without help and version, `eckpt run --help` is read as `run` too, so that its
        // help shows the defaults the files give.
        fn quiet(cmd: Command) -> Command {
            cmd.disable_help_flag(true)
                .disable_help_subcommand(true)
                .disable_version_flag(true)
                .mut_subcommands(quiet)
        }
        let matches = quiet(root.clone())
            .ignore_errors(true)
            .try_get_matches_from(argv)
            .ok();
        let job_file = matches
            .as_ref()
            .and_then(|m| m.get_one::<PathBuf>(JOB_OPTION).cloned());
        let mut path = Vec::new();
        let mut at = matches.as_ref();
        while let Some((name, sub)) = at.and_then(ArgMatches::subcommand) {
            path.push(name.to_string());
            at = Some(sub);
        }
        Invocation { path, job_file }
    }
}

/// A file looked for, and whether it was there.
#[derive(Debug, Serialize)]
pub struct Looked {
    pub layer: Layer,
    pub path: PathBuf,
    pub found: bool,
}

/// The configuration files of this invocation, checked.
pub struct Config {
    /// The files looked for, site first.
    pub looked: Vec<Looked>,
    /// The files found, job first: the order values are looked up in.
    files: Vec<ConfigFile>,
}

/// The site's file.
fn site_file() -> PathBuf {
    std::env::var_os(SITE_VARIABLE)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(SITE_FILE), PathBuf::from)
}

/// The user's file, where the XDG base directory specification puts it (a relative
/// `XDG_CONFIG_HOME` is ignored, as it says); none without a home.
fn user_file() -> Option<PathBuf> {
    let absolute = |v: OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os("XDG_CONFIG_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".config"))
        })
        .map(|dir| dir.join("eckpt.toml"))
}

/// A file's value for an option of the invoked command.
pub struct FileValue<'a> {
    id: Id,
    values: &'a [String],
    file: &'a ConfigFile,
    table: &'a [String],
}

/// A parsed command line and which of its options took their values from files.
pub struct Parsed<'a> {
    pub matches: ArgMatches,
    from_files: Vec<FileValue<'a>>,
}

impl Config {
    /// Reads the site's, the user's and the job's files; a missing site or user file is no
    /// error, a missing job file is.
    pub fn load(root: &Command, invocation: &Invocation) -> Result<Config> {
        let candidates = [
            Some((Layer::Site, site_file())),
            user_file().map(|path| (Layer::User, path)),
            invocation.job_file.clone().map(|path| (Layer::Job, path)),
        ];
        let mut config = Config {
            looked: Vec::new(),
            files: Vec::new(),
        };
        for (layer, path) in candidates.into_iter().flatten() {
            let file = ConfigFile::read(layer, &path, root)?;
            if layer == Layer::Job && file.is_none() {
                bail!("{}: no such file (--config or {JOB_VARIABLE})", path.display());
            }
            config.looked.push(Looked {
                layer,
                path,
                found: file.is_some(),
            });
            config.files.extend(file);
        }
        config.files.reverse();
        Ok(config)
    }

    /// Makes the job's file the job's: every eckpt process this one starts (the agents and
    /// coordinator of `up`, a rank of `run` calling `eckpt checkpoint`) reads it too, from
    /// any working directory. Call before any thread starts (it sets the environment).
    pub fn export_job_file(&self) -> Result<()> {
        if let Some(job) = self.looked.iter().find(|l| l.layer == Layer::Job) {
            let path = std::path::absolute(&job.path).map_err(|e| anyhow!("{}: {e}", job.path.display()))?;
            std::env::set_var(JOB_VARIABLE, path);
        }
        Ok(())
    }

    /// The files' values for the options of `leaf`, the command at `path`.
    fn values_for(&self, leaf: &Command, path: &[String]) -> Vec<FileValue<'_>> {
        leaf.get_arguments()
            .filter_map(|arg| {
                let key = key(arg)?;
                self.files.iter().find_map(|file| {
                    let (values, table) = file.lookup(path, key)?;
                    Some(FileValue {
                        id: arg.get_id().clone(),
                        values,
                        file,
                        table,
                    })
                })
            })
            .collect()
    }

    /// Parses `argv`, an invocation of the command at `path`, with the files' values as the
    /// defaults of that command's options (see the module documentation).
    pub fn parse(
        &self,
        root: &Command,
        path: &[String],
        argv: &[OsString],
    ) -> Result<Parsed<'_>, clap::Error> {
        let leaf = find(root, path);
        let mut from_files = self.values_for(leaf, path);
        loop {
            let tree = change_at(root.clone(), path, |mut leaf| {
                for value in &from_files {
                    leaf = leaf.mut_arg(value.id.as_str(), |arg| {
                        arg.required(false)
                            .required_unless_present(Resettable::Reset)
                            .default_values(value.values.iter().cloned())
                    });
                }
                leaf
            });
            let matches = tree.try_get_matches_from(argv)?;
            let given: Vec<&Arg> = leaf
                .get_arguments()
                .filter(|arg| {
                    matches!(
                        matches_at(&matches, path).value_source(arg.get_id().as_str()),
                        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
                    )
                })
                .collect();
            let before = from_files.len();
            from_files.retain(|value| !conflicts(leaf, &value.id, &given));
            if from_files.len() == before {
                return Ok(Parsed { matches, from_files });
            }
        }
    }

    /// What the command line `argv` would run with: every option of the command at `path`,
    /// its value and where it came from. Missing required options are no error here.
    pub fn settings(
        &self,
        root: &Command,
        path: &[String],
        argv: &[OsString],
    ) -> Result<Vec<Setting>, clap::Error> {
        let root = root.clone().ignore_errors(true);
        let parsed = self.parse(&root, path, argv)?;
        let matches = matches_at(&parsed.matches, path);
        let command = path.join(" ");
        Ok(find(&root, path)
            .get_arguments()
            .filter_map(|arg| {
                let key = key(arg)?;
                let id = arg.get_id().as_str();
                let file = parsed.from_files.iter().find(|v| v.id == id);
                let (source, from, table) = match (matches.value_source(id), file) {
                    (Some(ValueSource::CommandLine), _) => (Source::Flag, Some(format!("--{key}")), None),
                    (Some(ValueSource::EnvVariable), _) => (
                        Source::Env,
                        arg.get_env().map(|v| v.to_string_lossy().into_owned()),
                        None,
                    ),
                    (Some(ValueSource::DefaultValue), Some(file)) => (
                        Source::File(file.file.layer),
                        Some(file.file.path.display().to_string()),
                        Some(file.table.join(".")),
                    ),
                    (Some(ValueSource::DefaultValue), None) => (Source::Default, None, None),
                    _ => (Source::Unset, None, None),
                };
                Some(Setting {
                    command: command.clone(),
                    key: key.to_string(),
                    value: if source == Source::Unset {
                        Value::Null
                    } else {
                        value_of(arg, matches)
                    },
                    source,
                    from,
                    table,
                })
            })
            .collect())
    }
}

/// Whether the option `id` of `leaf` conflicts with an option given on the command line or
/// by the environment (clap records a conflict on either side).
fn conflicts(leaf: &Command, id: &Id, given: &[&Arg]) -> bool {
    let arg = leaf
        .get_arguments()
        .find(|a| a.get_id() == id)
        .expect("an option of the command");
    let with = |a: &Arg, other: &Id| leaf.get_arg_conflicts_with(a).iter().any(|c| c.get_id() == other);
    given.iter().any(|g| with(arg, g.get_id()) || with(g, id))
}

/// The option's value as JSON: a boolean for a switch, a list where it takes several.
fn value_of(arg: &Arg, matches: &ArgMatches) -> Value {
    let id = arg.get_id().as_str();
    if is_switch(arg) {
        return Value::Bool(matches.get_flag(id));
    }
    let mut raw: Vec<Value> = matches
        .get_raw(id)
        .into_iter()
        .flatten()
        .map(|v| Value::String(v.to_string_lossy().into_owned()))
        .collect();
    if takes_several(arg) {
        Value::Array(raw)
    } else {
        raw.pop().unwrap_or(Value::Null)
    }
}

/// Where a setting came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Flag,
    Env,
    Default,
    /// Neither given nor defaulted.
    Unset,
    /// A configuration file: `site`, `user` or `job`.
    #[serde(untagged)]
    File(Layer),
}

/// One option of a command: its value and where it came from.
#[derive(Debug, Serialize)]
pub struct Setting {
    /// The command path, `bench cluster`.
    pub command: String,
    /// The option's key (its long name).
    pub key: String,
    /// A string, a boolean for a switch, a list where it takes several, null when unset.
    pub value: Value,
    pub source: Source,
    /// The flag, the environment variable or the file.
    pub from: Option<String>,
    /// The file's table (`bench.cluster`; empty: the top level).
    pub table: Option<String>,
}

/// The command paths below `path` (itself if it has no subcommands) that have tables.
pub fn leaves(root: &Command, path: &[String]) -> Vec<Vec<String>> {
    let cmd = find(root, path);
    if !cmd.has_subcommands() {
        return vec![path.to_vec()];
    }
    commands(cmd)
        .flat_map(|sub| {
            let mut below = path.to_vec();
            below.push(sub.get_name().to_string());
            leaves(root, &below)
        })
        .collect()
}

/// Whether `path` names a command that has a table.
pub fn is_command(root: &Command, path: &[String]) -> bool {
    let mut cmd = root;
    path.iter()
        .all(|name| match commands(cmd).find(|c| c.get_name() == name) {
            Some(sub) => {
                cmd = sub;
                true
            }
            None => false,
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    /// A command tree with the shapes eckpt's has: a required option, a switch, a list, an
    /// enumerated value, an option required unless another is given and conflicting with
    /// it, nested commands and a hidden one.
    pub fn tree() -> Command {
        let k = || {
            Arg::new("k")
                .long("k")
                .default_value("4")
                .value_parser(clap::value_parser!(usize))
        };
        with_option(
            Command::new("eckpt")
                .subcommand(
                    Command::new("up")
                        .arg(Arg::new("dir").long("dir").required(true))
                        .arg(k())
                        .arg(Arg::new("mode").long("mode").value_parser(["full", "update"]))
                        .arg(Arg::new("block-size").long("block-size"))
                        .arg(Arg::new("tag").long("tag").action(ArgAction::Append))
                        .arg(Arg::new("netns").long("netns").action(ArgAction::SetTrue)),
                )
                .subcommand(
                    Command::new("restore")
                        .arg(Arg::new("dir").long("dir").required_unless_present("from-flush"))
                        .arg(Arg::new("from-flush").long("from-flush").conflicts_with("dir")),
                )
                .subcommand(
                    Command::new("bench").subcommand(
                        Command::new("cluster")
                            .arg(k())
                            .arg(Arg::new("mode").long("mode")),
                    ),
                )
                .subcommand(Command::new("guard").hide(true).arg(Arg::new("run").long("run"))),
        )
    }

    impl Config {
        /// A configuration of the given files (the lowest layer first).
        fn of(mut files: Vec<ConfigFile>) -> Config {
            files.reverse();
            Config {
                looked: Vec::new(),
                files,
            }
        }
    }

    fn file(layer: Layer, text: &str) -> ConfigFile {
        ConfigFile::parse(layer, Path::new(&format!("{layer:?}.toml")), text, &tree()).unwrap()
    }

    fn argv(words: &[&str]) -> Vec<OsString> {
        std::iter::once("eckpt")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn path(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_file_gives_what_a_command_requires() {
        let config = Config::of(vec![file(
            Layer::User,
            "[up]\ndir = \"/c\"\nnetns = true\ntag = [\"a\", \"b\"]",
        )]);
        let parsed = config.parse(&tree(), &path(&["up"]), &argv(&["up"])).unwrap();
        let up = parsed.matches.subcommand_matches("up").unwrap();
        assert_eq!(up.get_one::<String>("dir").unwrap(), "/c");
        assert!(up.get_flag("netns"));
        let tags: Vec<&String> = up.get_many("tag").unwrap().collect();
        assert_eq!(tags, ["a", "b"]);
        assert_eq!(*up.get_one::<usize>("k").unwrap(), 4, "the built-in default");
    }

    #[test]
    fn a_file_value_gives_way_to_a_conflicting_flag() {
        let config = Config::of(vec![file(Layer::Site, "dir = \"/c\"")]);
        let restore = path(&["restore"]);
        let parsed = config
            .parse(&tree(), &restore, &argv(&["restore", "--from-flush", "/f"]))
            .unwrap();
        let m = parsed.matches.subcommand_matches("restore").unwrap();
        assert_eq!(m.get_one::<String>("dir"), None);
        assert_eq!(m.get_one::<String>("from-flush").unwrap(), "/f");
        let parsed = config.parse(&tree(), &restore, &argv(&["restore"])).unwrap();
        let m = parsed.matches.subcommand_matches("restore").unwrap();
        assert_eq!(m.get_one::<String>("dir").unwrap(), "/c");
    }

    #[test]
    fn settings_say_where_each_value_came_from() {
        let config = Config::of(vec![
            file(Layer::Site, "k = 5\n[up]\nmode = \"update\""),
            file(Layer::Job, "[up]\nnetns = true"),
        ]);
        let settings = config
            .settings(&tree(), &path(&["up"]), &argv(&["up", "--dir", "/d"]))
            .unwrap();
        let of = |key: &str| settings.iter().find(|s| s.key == key).unwrap();
        assert_eq!(
            (of("dir").source, of("dir").from.as_deref()),
            (Source::Flag, Some("--dir"))
        );
        assert_eq!(of("k").source, Source::File(Layer::Site));
        assert_eq!(
            (of("k").value.as_str(), of("k").table.as_deref()),
            (Some("5"), Some(""))
        );
        assert_eq!(of("mode").table.as_deref(), Some("up"));
        assert_eq!(
            (of("netns").source, &of("netns").value),
            (Source::File(Layer::Job), &Value::Bool(true))
        );
        assert_eq!(
            (of("block-size").source, &of("block-size").value),
            (Source::Unset, &Value::Null)
        );
        assert_eq!(serde_json::to_value(Source::File(Layer::Job)).unwrap(), "job");
        assert_eq!(serde_json::to_value(Source::Unset).unwrap(), "unset");
    }

    /// Every option of eckpt's own commands that has a default (a switch: `true`) can be
    /// set in a file, and the command then runs with the file's value — whatever shape an
    /// option added later takes.
    #[test]
    fn every_option_of_eckpt_can_be_set_in_a_file() {
        use clap::CommandFactory;
        let root = with_option(crate::Cli::command());
        let toml_string = |v: &clap::builder::OsStr| format!("{:?}", v.to_str().unwrap());
        let mut checked = 0;
        for path in leaves(&root, &[]) {
            let leaf = find(&root, &path);
            let set: Vec<(&str, String)> = leaf
                .get_arguments()
                .filter_map(|arg| {
                    let defaults = arg.get_default_values();
                    let value = if is_switch(arg) {
                        "true".to_string()
                    } else if defaults.is_empty() {
                        return None;
                    } else if takes_several(arg) {
                        format!(
                            "[{}]",
                            defaults.iter().map(toml_string).collect::<Vec<_>>().join(", ")
                        )
                    } else {
                        toml_string(&defaults[0])
                    };
                    Some((key(arg)?, value))
                })
                .collect();
            let text: String = std::iter::once(format!("[{}]\n", path.join(".")))
                .chain(set.iter().map(|(key, value)| format!("{key} = {value}\n")))
                .collect();
            let config = Config::of(vec![ConfigFile::parse(Layer::User, Path::new("u"), &text, &root)
                .unwrap_or_else(|e| panic!("{text}: {e}"))]);
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            for setting in config.settings(&root, &path, &argv(&words)).unwrap() {
                if set.iter().any(|(key, _)| *key == setting.key) {
                    assert_eq!(setting.source, Source::File(Layer::User), "{setting:?}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 100, "{checked} options checked");
    }

    #[test]
    fn commands_and_leaves() {
        let root = tree();
        assert_eq!(
            leaves(&root, &[]),
            [path(&["up"]), path(&["restore"]), path(&["bench", "cluster"])],
            "hidden commands have no table"
        );
        assert!(is_command(&root, &path(&["bench"])) && !is_command(&root, &path(&["guard"])));
        let e = ConfigFile::parse(Layer::Job, Path::new("j"), "[guard]\nrun = \"x\"", &root).unwrap_err();
        assert!(e.contains("no such command"), "{e}");
    }

    /// Tables a layer's file may set `k` in, for `bench cluster`: top level, `[bench]`,
    /// `[bench.cluster]`.
    const TABLES: [&str; 3] = ["", "[bench]\n", "[bench.cluster]\n"];

    proptest! {
        /// Whatever files set `k` in whatever tables, `bench cluster` gets the flag's value
        /// if given, else the highest file's, from its most specific table, else the default
        /// — in what it parses and in what `eckpt config` says.
        #[test]
        fn the_highest_layer_then_the_most_specific_table_wins(
            set in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 3), 3),
            flag in proptest::option::of(100usize..200),
        ) {
            let layers = [Layer::Site, Layer::User, Layer::Job];
            let value = |layer: usize, table: usize| 10 * (layer + 1) + table;
            let files = layers.iter().enumerate().map(|(l, &layer)| {
                let text: String = (0..3)
                    .filter(|&t| set[l][t])
                    .map(|t| format!("{}k = {}\n", TABLES[t], value(l, t)))
                    .collect();
                file(layer, &text)
            }).collect();
            let config = Config::of(files);
            let expected = (0..3).rev().find_map(|l| (0..3).rev().find(|&t| set[l][t]).map(|t| (l, t)));
            let mut words = vec!["bench", "cluster"];
            let flag_text = flag.map(|f| f.to_string());
            if let Some(f) = &flag_text {
                words.extend(["--k", f]);
            }
            let bench = path(&["bench", "cluster"]);
            let parsed = config.parse(&tree(), &bench, &argv(&words)).unwrap();
            let k = *matches_at(&parsed.matches, &bench).get_one::<usize>("k").unwrap();
            let setting = config.settings(&tree(), &bench, &argv(&words)).unwrap().into_iter().find(|s| s.key == "k").unwrap();
            match (flag, expected) {
                (Some(f), _) => {
                    prop_assert_eq!(k, f);
                    prop_assert_eq!(setting.source, Source::Flag);
                }
                (None, Some((l, t))) => {
                    prop_assert_eq!(k, value(l, t));
                    prop_assert_eq!(setting.source, Source::File(layers[l]));
                    prop_assert_eq!(setting.table, Some(["", "bench", "bench.cluster"][t].to_string()));
                }
                (None, None) => {
                    prop_assert_eq!(k, 4);
                    prop_assert_eq!(setting.source, Source::Default);
                }
            }
            prop_assert_eq!(setting.value, Value::String(k.to_string()));
        }
    }
}
