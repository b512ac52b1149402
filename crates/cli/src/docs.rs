//! The man pages and shell completions that are installed with the `eckpt` command. `make
//! install` and the wheel (scripts/install.sh and scripts/wheel.sh, through
//! scripts/released-eckpt.sh) run the binary they install with [`VARIABLE`] naming a directory,
//! and it writes them there, in the layout of `PREFIX/share`, from its own clap command tree:
//!
//! ```text
//! man/man1/eckpt.1, eckpt-run.1, eckpt-bench-cluster.1, …   one page per command (clap_mangen)
//! bash-completion/completions/eckpt                          bash (clap_complete)
//! zsh/site-functions/_eckpt                                  zsh
//! fish/vendor_completions.d/eckpt.fish                       fish
//! ```
//!
//! Why the installed binary writes them, not a generator of their own (an example or a second
//! binary): the pages and completions then describe exactly the binary beside them. The
//! released build has no fault injection (no `eckpt debug`, no `eckpt run --kill-at`), which
//! a generator built with the crate's default features would document; and the CLI's command
//! tree lives in this binary crate (`Cli` in main.rs), which no other target can reach. An
//! environment variable, not a subcommand: nothing is added to `eckpt --help`, to the pages or
//! to the completions themselves.
//!
//! Hidden commands (`mpirun-agent`, `run-guard`, `run-rank`: eckpt's own plumbing) get no page and are not
//! completed. The tree is the one a command line is parsed with, without what configuration
//! files would add (their values become defaults at run time: `eckpt config` shows them).

use std::path::Path;

use anyhow::{Context, Result};
use clap::Command;
use clap_complete::Shell;

/// The variable that names the directory to write into; `eckpt` then writes and exits.
pub const VARIABLE: &str = "ECKPT_GENERATE_DOCS";

/// Writes the man pages and completions of `root` (the `eckpt` command tree) below `share`.
pub fn write(root: Command, share: &Path) -> Result<()> {
    let man = share.join("man/man1");
    create_dir(&man)?;
    // clap_mangen leaves out hidden commands itself.
    clap_mangen::generate_to(root.clone(), &man)
        .with_context(|| format!("writing the man pages in {}", man.display()))?;

    let mut root = without_hidden_subcommands(root);
    let name = root.get_name().to_owned();
    for (shell, file) in [
        (Shell::Bash, format!("bash-completion/completions/{name}")),
        (Shell::Zsh, format!("zsh/site-functions/_{name}")),
        (Shell::Fish, format!("fish/vendor_completions.d/{name}.fish")),
    ] {
        let path = share.join(file);
        create_dir(path.parent().expect("a file below share"))?;
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut root, &name, &mut script);
        std::fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// `cmd` without its hidden subcommands, at every level: clap_complete completes them (it
/// leaves out only hidden values). clap cannot remove a subcommand, so a command that has
/// hidden ones is rebuilt with its name, texts, version, arguments, groups and shown
/// subcommands — what completions are made of.
fn without_hidden_subcommands(cmd: Command) -> Command {
    let cmd = cmd.mut_subcommands(without_hidden_subcommands);
    if !cmd.get_subcommands().any(Command::is_hide_set) {
        return cmd;
    }
    let mut shown = Command::new(cmd.get_name().to_owned())
        .args(cmd.get_arguments().cloned())
        .groups(cmd.get_groups().cloned())
        .subcommands(cmd.get_subcommands().filter(|sub| !sub.is_hide_set()).cloned());
    if let Some(about) = cmd.get_about() {
        shown = shown.about(about.clone());
    }
    if let Some(about) = cmd.get_long_about() {
        shown = shown.long_about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        shown = shown.version(version.to_owned());
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn tree() -> Command {
        Command::new("tool")
            .version("1.2.3")
            .about("A tool")
            .arg(Arg::new("config").long("config").global(true))
            .subcommand(Command::new("run").arg(Arg::new("nodes").long("nodes")))
            .subcommand(Command::new("run-guard").hide(true))
            .subcommand(
                Command::new("bench")
                    .subcommand(
                        Command::new("cluster").arg(Arg::new("json").long("json").action(ArgAction::SetTrue)),
                    )
                    .subcommand(Command::new("secret").hide(true)),
            )
    }

    fn names(cmd: &Command) -> Vec<&str> {
        cmd.get_subcommands().map(Command::get_name).collect()
    }

    #[test]
    fn hidden_subcommands_are_removed_at_every_level_and_the_rest_is_kept() {
        let shown = without_hidden_subcommands(tree());
        assert_eq!(names(&shown), ["run", "bench"]);
        assert_eq!(names(shown.find_subcommand("bench").unwrap()), ["cluster"]);
        assert_eq!(shown.get_version(), Some("1.2.3"));
        assert_eq!(
            shown.get_about().map(ToString::to_string).as_deref(),
            Some("A tool")
        );
        assert!(shown.get_arguments().any(|a| a.get_id() == "config"));
        let cluster = shown
            .find_subcommand("bench")
            .unwrap()
            .find_subcommand("cluster")
            .unwrap();
        assert!(cluster.get_arguments().any(|a| a.get_id() == "json"));
        // Still a valid tree: clap checks it when it is built.
        shown.clone().debug_assert();
    }

    #[test]
    fn pages_and_completions_are_written_in_the_share_layout() {
        let share = tempfile::tempdir().unwrap();
        write(tree(), share.path()).unwrap();
        let file = |path: &str| std::fs::read_to_string(share.path().join(path)).unwrap();
        for page in ["tool.1", "tool-run.1", "tool-bench.1", "tool-bench-cluster.1"] {
            assert!(file(&format!("man/man1/{page}")).starts_with(".ie"), "{page}");
        }
        for hidden in ["tool-run-guard.1", "tool-bench-secret.1"] {
            assert!(!share.path().join("man/man1").join(hidden).exists(), "{hidden}");
        }
        let bash = file("bash-completion/completions/tool");
        assert!(bash.contains("_tool()") && !bash.contains("run-guard") && !bash.contains("secret"));
        assert!(file("zsh/site-functions/_tool").starts_with("#compdef tool"));
        assert!(file("fish/vendor_completions.d/tool.fish").contains("complete -c tool"));
    }
}
