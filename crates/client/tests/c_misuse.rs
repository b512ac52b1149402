//! The C API used as a careless user or an attacker would (`tests/c/misuse.c`), as real
//! processes: each sequence here once ended in a wrong restore, a deadlock or a file eckpt was
//! never given being changed, with no error. Now each is refused with its code and a message
//! saying why, before anything is changed, or restores the right bytes.

mod native;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use eckpt::capi::{ECKPT_EINVAL, ECKPT_EMISMATCH, ECKPT_ESTATE};

/// A scratch working directory with the misuse program built into it.
struct Scene {
    dir: tempfile::TempDir,
    exe: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let exe = native::build_c(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/misuse.c"),
            dir.path(),
        );
        std::fs::create_dir(dir.path().join("work")).unwrap();
        Scene { dir, exe }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `misuse ARGS` as rank 0 of the scene's store, in its working directory, whatever
    /// eckpt settings the test run's environment holds.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = native::rank_command(&self.exe, &self.dir.path().join("store"));
        command.args(args).current_dir(self.work());
        command
    }

    /// Runs a scenario to its end (it exits 0 unless a call it needed failed).
    fn run(&self, args: &[&str]) -> String {
        let output: Output = self.command(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "misuse {args:?}: {}\n{stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

/// The rest of the line of `stdout` starting with `name `.
fn line<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name:?} line in:\n{stdout}"))
}

/// The return code a call printed, and its message.
fn code<'a>(stdout: &'a str, name: &str) -> (i32, &'a str) {
    let rest = line(stdout, name);
    let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
    (code.parse().unwrap_or_else(|_| panic!("{name}: {rest}")), message)
}

fn assert_refused(stdout: &str, name: &str, expected: i32, reason: &str) {
    let (rc, message) = code(stdout, name);
    assert!(
        rc == expected && message.contains(reason),
        "{name}: expected {expected} saying {reason:?}, got {rc} {message:?}"
    );
}

/// A checkpoint that panicked (a Latin-1 file name in a protected directory) had consumed
/// the pages written before it, and nothing made the next one compare them: page 3 came back
/// as 0. Such a name is now checkpointed like any other, and a failed checkpoint of any
/// kind, panic included, leaves the next one comparing every page.
#[test]
fn a_latin1_file_name_in_a_protected_directory_loses_no_page() {
    let scene = Scene::new();
    let saved = scene.run(&["latin1-name"]);
    assert!(code(&saved, "checkpoint-latin1").0 > 0, "{saved}");
    assert!(code(&saved, "checkpoint-after").0 > 0, "{saved}");
    let restored = scene.run(&["show-pages"]);
    assert_eq!(code(&restored, "restart").0, 3, "{restored}");
    for (page, value) in [("page1", "11"), ("page3", "33"), ("page40", "44")] {
        assert_eq!(line(&restored, page), value, "{restored}");
    }
}

/// A forked child used the inherited userfaultfd and pagemap, which act on the parent's
/// memory: a mere `eckpt_restart()` in it re-protected the parent's written page, and the
/// parent's next epoch missed it. Every call of the child is now refused, its own init for
/// the parent's rank too, and the parent's epoch holds its write.
#[test]
fn a_forked_child_cannot_act_on_its_parents_checkpoints() {
    let scene = Scene::new();
    let out = scene.run(&["forked-child"]);
    assert_refused(&out, "child-restart", ECKPT_ESTATE, "forked");
    assert_refused(&out, "child-checkpoint", ECKPT_ESTATE, "forked");
    assert_refused(&out, "child-init-same-rank", ECKPT_ESTATE, "in use by process");
    assert_eq!(code(&out, "parent-checkpoint").0, 2, "{out}");
    let restored = scene.run(&["show-pages"]);
    assert_eq!(line(&restored, "page5"), "55", "{restored}");
}

/// Two live processes on one rank took turns, each epoch a delta on the other's memory, and
/// a restore mixed both. The second is now refused at init, naming the first; once the first
/// is gone the rank is free.
#[test]
fn a_second_live_process_on_one_rank_is_refused_naming_the_first() {
    let scene = Scene::new();
    let mut holder = scene
        .command(&["hold"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let pid = first_line
        .strip_prefix("holding ")
        .unwrap_or_else(|| panic!("{first_line}"))
        .trim()
        .to_string();
    let second = scene.run(&["second-holder"]);
    assert_refused(
        &second,
        "second-init",
        ECKPT_ESTATE,
        &format!("in use by process {pid} on "),
    );
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let after = scene.run(&["show-pages"]);
    assert_eq!(code(&after, "restart").0, 1, "{after}");
}

/// An append file swapped for a link to another file between protect and restart: restart
/// cut the link's target to the checkpointed length. It is now refused, the target intact;
/// protecting a link as an append file is refused too.
#[test]
fn restart_never_cuts_the_target_of_a_link_swapped_for_an_append_file() {
    let scene = Scene::new();
    scene.run(&["append-link", "save"]);
    let victim = scene.work().join("victim.txt");
    let precious = "29 bytes of someone's notes.\n";
    std::fs::write(&victim, precious).unwrap();
    let out = scene.run(&["append-link", "restart"]);
    assert_refused(&out, "restart", ECKPT_EMISMATCH, "is a symbolic link");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), precious);

    let refused = scene.command(&["append-link", "restart"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(
        stdout.contains(&format!("failed protect_file: {ECKPT_EINVAL} ")) && stdout.contains("symbolic link"),
        "{stdout}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), precious);
}

/// A restart that found a protected directory gone, a snapshot file turned into a link, or
/// a region made read-only failed half way, with memory already restored, so the program's
/// `if (eckpt_restart() > 0)` ran a fresh start on restored memory. Now each is refused
/// before anything changes.
#[test]
fn a_restart_that_cannot_finish_changes_nothing() {
    for (phase, expected, reason) in [
        ("dir-gone", ECKPT_EMISMATCH, "protected directory"),
        ("snapshot-is-link", ECKPT_EMISMATCH, "is a symbolic link"),
        ("read-only-region", ECKPT_ESTATE, "read-only"),
    ] {
        let scene = Scene::new();
        scene.run(&["all-or-nothing", "save"]);
        let out = scene.run(&["all-or-nothing", phase]);
        assert_refused(&out, "restart", expected, reason);
        assert_eq!(
            line(&out, "page0"),
            "0",
            "{phase}: memory changed by a refused restart"
        );
        if phase == "snapshot-is-link" {
            let elsewhere = std::fs::read_to_string(scene.work().join("elsewhere.dat")).unwrap();
            assert_eq!(elsewhere, "not eckpt's\n");
        }
    }
}

/// `protect` took a `const` global and a `PROT_READ` mapping (restart then failed half done)
/// and a pointer to nothing (the next checkpoint crashed the process).
#[test]
fn memory_that_cannot_be_written_back_is_refused_at_protect() {
    let scene = Scene::new();
    let out = scene.run(&["unwritable"]);
    assert_refused(&out, "protect-const", ECKPT_EINVAL, "read-only");
    assert_refused(&out, "protect-prot-read", ECKPT_EINVAL, "read-only");
    assert_refused(&out, "protect-bogus", ECKPT_EINVAL, "not mapped");
    assert_refused(&out, "protect-past-end", ECKPT_EINVAL, "not mapped");
    assert_eq!(code(&out, "checkpoint").0, 1, "{out}");
}

/// Protecting regions {1, 2} of a checkpoint of {1, 2, 3} restarted and dropped region 3 at
/// the next checkpoint.
#[test]
fn a_restart_must_protect_every_region_the_checkpoint_holds() {
    let scene = Scene::new();
    scene.run(&["region-sets", "save"]);
    let out = scene.run(&["region-sets", "restart"]);
    assert_refused(
        &out,
        "restart",
        ECKPT_EMISMATCH,
        "saved region \"3\", which is not protected now",
    );
}

/// A SIGALRM handler checkpointing while the main loop is inside `eckpt_checkpoint` (the
/// SIGTERM pattern of batch jobs) deadlocked on the library's lock.
#[test]
fn a_checkpoint_from_a_signal_handler_is_refused_never_deadlocked() {
    let scene = Scene::new();
    let mut child = scene
        .command(&["signal-handler"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the program checkpointing from a signal handler hung (deadlock)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    assert!(
        line(&out, "refused").parse::<u32>().unwrap() >= 1,
        "no handler call landed inside a checkpoint: {out}"
    );
    assert_eq!(
        (line(&out, "other"), line(&out, "main-failed")),
        ("0", "0"),
        "{out}"
    );
}

/// Refusals of bad arguments say which argument and why, with `ECKPT_EINVAL`, and leave the
/// checkpointer usable.
#[test]
fn bad_arguments_get_einval_and_a_message_naming_them() {
    let scene = Scene::new();
    let out = scene.run(&["bad-arguments"]);
    assert_refused(&out, "init-block-2^31", ECKPT_EINVAL, "hash block size");
    assert_refused(
        &out,
        "protect-overlap",
        ECKPT_EINVAL,
        "region \"7\" overlaps region \"0\"",
    );
    assert_refused(&out, "protect-dir-as-snapshot", ECKPT_EINVAL, "is a directory");
    assert_refused(&out, "protect-empty-path", ECKPT_EINVAL, "empty path");
    assert_eq!(code(&out, "checkpoint").0, 1, "{out}");
}
