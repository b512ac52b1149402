//! The C and Fortran examples (`examples/c`, `examples/fortran`, `include/eckpt.f90`) compiled
//! against the libeckpt.so that cargo built for this test run, and run as real processes:
//! - SIGKILLed at random instants (some aimed into `eckpt_checkpoint`) and restarted until they
//!   finish, they end with the checksum of an uninterrupted run and an append log holding each
//!   step's line exactly once; every restart restores the last committed epoch;
//! - the Fortran module reaches the whole C API and restores real data; its typed
//!   `eckpt_protect(id, x)` refuses array sections with a message and restores whole arrays of
//!   every kind it takes byte for byte;
//! - a changed input file makes restart fail with a clear message and a non-zero exit.
//!
//! `ECKPT_TEST_SEED=N` replays the random kill schedule of an earlier run (it is printed).

mod native;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use native::{compile, lib_dir, repo};

/// Compiles `examples/c/<name>.c` into `out/<name>` (see [`native::build_c`]).
fn build_c(name: &str, out: &Path) -> PathBuf {
    native::build_c(&repo().join("examples/c").join(format!("{name}.c")), out)
}

/// Compiles the Fortran module and `examples/fortran/<name>.f90` into `out/<name>`, warnings
/// as errors, linked to libeckpt.so as [`native::build_c`] links C programs.
fn build_fortran(name: &str, out: &Path) -> PathBuf {
    let lib = lib_dir();
    let exe = out.join(name);
    let mut gfortran = Command::new("gfortran");
    gfortran
        .args(["-std=f2018", "-O2", "-Wall", "-Werror", "-fno-backtrace", "-J"])
        .arg(out)
        .arg(repo().join("include/eckpt.f90"))
        .arg(repo().join("examples/fortran").join(format!("{name}.f90")))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .arg("-leckpt");
    compile(gfortran);
    exe
}

/// A command for an example checkpointing into `store` as rank 0 (see
/// [`native::rank_command`]).
fn example_command(exe: &Path, store: &Path) -> Command {
    native::rank_command(exe, store)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `command` to completion, failing the test unless it succeeds.
fn run_ok(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

/// The `checksum: <hex>` line of an example's stdout.
fn checksum(output: &Output) -> String {
    let stdout = text(&output.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("checksum: "))
        .unwrap_or_else(|| panic!("no checksum line in {stdout:?}"))
        .to_string()
}

/// splitmix64: the kill schedule, reproducible from its printed seed.
struct Rng(u64);

impl Rng {
    // A seed when none is given: the wall clock only names the run.
    #[allow(clippy::disallowed_methods)]
    fn from_env_or_clock() -> Rng {
        let seed = std::env::var("ECKPT_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock after 1970")
                    .as_nanos() as u64
            });
        eprintln!("kill schedule seed: ECKPT_TEST_SEED={seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One line of an example's trace file: `<monotonic ns> <event> [<number>]`.
struct Event {
    ns: u64,
    name: String,
    arg: i64,
}

fn read_trace(path: &Path) -> Vec<Event> {
    let content = std::fs::read_to_string(path).unwrap_or_default();
    content
        .lines()
        // A kill can cut the last line short: only complete lines count.
        .take(content.matches('\n').count())
        .map(|line| {
            let mut fields = line.split(' ');
            let ns = fields
                .next()
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("bad trace line {line:?}"));
            let name = fields
                .next()
                .unwrap_or_else(|| panic!("bad trace line {line:?}"))
                .to_string();
            let arg = fields.next().map_or(0, |f| {
                f.parse().unwrap_or_else(|_| panic!("bad trace line {line:?}"))
            });
            Event { ns, name, arg }
        })
        .collect()
}

/// Where the kills of one example landed.
#[derive(Default)]
struct Tally {
    trials: usize,
    attempts: usize,
    kills: usize,
    /// Before the example reached `eckpt_restart` (loading, eckpt_init, protect).
    in_startup: usize,
    in_restart: usize,
    in_checkpoint: usize,
    /// Of `in_checkpoint`: the epoch turned out committed (the kill came after the commit,
    /// before the call returned or its trace line was written).
    in_checkpoint_committed: usize,
    in_compute: usize,
}

impl Tally {
    /// Whether enough kills landed, some inside a checkpoint, for the trials to prove
    /// something about crash safety.
    fn meaningful(&self, trials: usize, kills_per_trial: usize) -> bool {
        self.kills * 2 >= trials * kills_per_trial && self.in_checkpoint > 0
    }
}

/// What the kills taught about the store: the last epoch known committed, and whether a kill
/// inside a checkpoint may have committed the next one.
struct Committed {
    epoch: i64,
    maybe_next: bool,
}

impl Committed {
    /// Checks one attempt's trace against what was committed before it, and updates it: a
    /// restart must bring back exactly the last committed epoch (or the one a kill interrupted
    /// while committing), and each checkpoint must commit the next epoch.
    fn follow(&mut self, events: &[Event], tally: &mut Tally, context: &str) {
        for event in events {
            match event.name.as_str() {
                "restart-end" => {
                    let restored = event.arg;
                    if self.maybe_next && restored == self.epoch + 1 {
                        tally.in_checkpoint_committed += 1;
                    } else {
                        assert_eq!(
                            restored, self.epoch,
                            "{context}: restart restored the wrong epoch"
                        );
                    }
                    self.epoch = restored;
                    self.maybe_next = false;
                }
                "checkpoint-end" => {
                    assert_eq!(
                        event.arg,
                        self.epoch + 1,
                        "{context}: checkpoint did not commit the next epoch"
                    );
                    self.epoch = event.arg;
                }
                _ => {}
            }
        }
        if events.last().is_some_and(|e| e.name == "checkpoint-begin") {
            self.maybe_next = true;
        }
    }
}

/// Counts a kill by the last thing the example traced before dying.
fn classify(events: &[Event], tally: &mut Tally) {
    tally.kills += 1;
    match events.last().map(|e| e.name.as_str()) {
        None => tally.in_startup += 1,
        Some("restart-begin") => tally.in_restart += 1,
        Some("checkpoint-begin") => tally.in_checkpoint += 1,
        Some(_) => tally.in_compute += 1,
    }
}

/// Waits until the trace at `path` holds `count` `event` lines, or the process exits. Polls:
/// the point is to land the kill shortly after.
fn wait_for_event(child: &mut std::process::Child, path: &Path, event: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if child.try_wait().expect("try_wait").is_some() {
            return;
        }
        if read_trace(path).iter().filter(|e| e.name == event).count() >= count {
            return;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    panic!("{} did not reach {event} {count} in 30 s", path.display());
}

/// Asserts the log holds the line of every step `0..steps` exactly once, then that it is
/// byte-identical to the uninterrupted run's.
fn assert_log(log: &str, reference: &str, steps: u64, context: &str) {
    let mut counts = vec![0usize; steps as usize];
    for line in log.lines() {
        let step: usize = line
            .strip_prefix("step ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{context}: bad log line {line:?}"));
        assert!(
            step < counts.len(),
            "{context}: log line for step {step} beyond {steps}"
        );
        counts[step] += 1;
    }
    let wrong: Vec<String> = counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c != 1)
        .map(|(s, c)| format!("step {s}: {c}×"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{context}: log lines not exactly once: {}",
        wrong.join(", ")
    );
    assert_eq!(
        log, reference,
        "{context}: log differs from the uninterrupted run's"
    );
}

/// Builds `examples/c/<name>.c`, runs it once uninterrupted for reference, then `trials`
/// times from scratch with `kills_per_trial` SIGKILLs at random instants and restarts, and
/// checks each ends like the reference. A quarter of the kills are uniform over a whole run;
/// half wait for the example to enter a checkpoint and land within about one checkpoint's
/// duration of that, so that most of those hit `eckpt_checkpoint` itself; a quarter aim the
/// same way at `eckpt_restart`.
fn survive_kills(name: &str, args: &[&str], steps: u64, trials: usize, kills_per_trial: usize) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(name, dir.path());
    let mut rng = Rng::from_env_or_clock();
    let run = |root: &Path, trace: &Path| {
        let mut command = example_command(&exe, &root.join("store"));
        command
            .args(args)
            .arg("-l")
            .arg(root.join("log"))
            .arg("-t")
            .arg(trace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };

    let reference_dir = dir.path().join("reference");
    std::fs::create_dir(&reference_dir).unwrap();
    let reference_trace = reference_dir.join("trace");
    let started = Instant::now();
    let reference = run_ok(&mut run(&reference_dir, &reference_trace));
    let run_ns = started.elapsed().as_nanos() as u64;
    let reference_sum = checksum(&reference);
    let reference_log = std::fs::read_to_string(reference_dir.join("log")).unwrap();
    let events = read_trace(&reference_trace);
    let checkpoint_ns: Vec<u64> = events
        .windows(2)
        .filter(|w| w[0].name == "checkpoint-begin" && w[1].name == "checkpoint-end")
        .map(|w| w[1].ns - w[0].ns)
        .collect();
    assert!(
        !checkpoint_ns.is_empty(),
        "{name}: the reference run took no checkpoint"
    );
    let checkpoints = checkpoint_ns.len() as u64;
    let mean_checkpoint_ns = checkpoint_ns.iter().sum::<u64>() / checkpoints;
    eprintln!(
        "{name}: uninterrupted run {:.3} s, {checkpoints} checkpoints of {:.3} ms on average",
        run_ns as f64 / 1e9,
        mean_checkpoint_ns as f64 / 1e6
    );

    // How long restoring takes, learnt from the restarts seen so far (a guess until then).
    let mut restart_ns = mean_checkpoint_ns / 4;
    let mut tally = Tally::default();
    // A kill drawn after the attempt has already finished lands on nothing, and a slow machine
    // (or one busy with other tests) makes that likelier: run more trials until the kills
    // that landed make the test meaningful, within a bound.
    for trial in 0..4 * trials {
        if trial >= trials && tally.meaningful(trials, kills_per_trial) {
            break;
        }
        let root = dir.path().join(format!("trial-{trial}"));
        std::fs::create_dir(&root).unwrap();
        let mut committed = Committed {
            epoch: 0,
            maybe_next: false,
        };
        let mut finished = None;
        for attempt in 0.. {
            let context = format!("{name} trial {trial} attempt {attempt}");
            let trace = root.join(format!("trace-{attempt}"));
            let killing = attempt < kills_per_trial;
            let mut child = run(&root, &trace).spawn().unwrap();
            if killing {
                match rng.below(4) {
                    0 => std::thread::sleep(Duration::from_nanos(rng.below(run_ns))),
                    1 | 2 => {
                        let nth = 1 + rng.below(checkpoints.min(3)) as usize;
                        wait_for_event(&mut child, &trace, "checkpoint-begin", nth);
                        std::thread::sleep(Duration::from_nanos(rng.below(mean_checkpoint_ns * 3 / 2)));
                    }
                    _ => {
                        wait_for_event(&mut child, &trace, "restart-begin", 1);
                        std::thread::sleep(Duration::from_nanos(rng.below(2 * restart_ns)));
                    }
                }
                // A child that already exited is still a zombie here: the signal is harmless
                // and the exit status below tells which happened.
                child.kill().unwrap();
            }
            let output = child.wait_with_output().unwrap();
            tally.attempts += 1;
            let events = read_trace(&trace);
            if let [begin, end, ..] = &events[..] {
                if begin.name == "restart-begin" && end.name == "restart-end" && end.arg > 0 {
                    restart_ns = restart_ns.max(end.ns - begin.ns);
                }
            }
            committed.follow(&events, &mut tally, &context);
            if output.status.signal() == Some(libc::SIGKILL) && killing {
                classify(&events, &mut tally);
                continue;
            }
            assert!(
                output.status.success(),
                "{context} failed ({}):\n{}",
                output.status,
                text(&output.stderr)
            );
            finished = Some(output);
            break;
        }
        let output = finished.expect("the last attempt runs to completion");
        let context = format!("{name} trial {trial}");
        assert_eq!(
            checksum(&output),
            reference_sum,
            "{context}: checksum differs from the uninterrupted run's"
        );
        let log = std::fs::read_to_string(root.join("log")).unwrap();
        assert_log(&log, &reference_log, steps, &context);
        tally.trials += 1;
    }
    eprintln!(
        "{name}: {} trials, {} attempts, {} kills: {} in startup, {} in eckpt_restart, {} in eckpt_checkpoint \
         ({} of them after the commit), {} in compute",
        tally.trials,
        tally.attempts,
        tally.kills,
        tally.in_startup,
        tally.in_restart,
        tally.in_checkpoint,
        tally.in_checkpoint_committed,
        tally.in_compute
    );
    tally
}

/// The kills must have happened and some must have hit a checkpoint, else the test proved
/// nothing about crash safety.
fn assert_meaningful(name: &str, tally: &Tally, trials: usize, kills_per_trial: usize) {
    assert!(tally.trials >= trials, "{name}: only {} trials", tally.trials);
    assert!(
        tally.kills * 2 >= trials * kills_per_trial,
        "{name}: only {} kills",
        tally.kills
    );
    assert!(
        tally.in_checkpoint > 0,
        "{name}: no kill landed inside eckpt_checkpoint"
    );
}

#[test]
fn mat_survives_random_kills_with_exact_result_and_log() {
    // 4 MiB of matrices, a 64x64 tile per step: few pages change per epoch. 56 steps visit
    // all 49 tiles, so every byte of the result matters to the checksum.
    let (trials, kills) = (8, 3);
    let tally = survive_kills("mat", &["-m", "4", "-s", "56", "-k", "4"], 56, trials, kills);
    assert_meaningful("mat", &tally, trials, kills);
}

#[test]
fn lu_survives_random_kills_with_exact_result_and_log() {
    // A 2 MiB grid rewritten by every SSOR step.
    let (trials, kills) = (8, 3);
    let tally = survive_kills("lu", &["-m", "2", "-s", "24", "-k", "3"], 24, trials, kills);
    assert_meaningful("lu", &tally, trials, kills);
}

#[test]
fn changed_input_file_makes_restart_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c("mat", dir.path());
    let input = dir.path().join("input.txt");
    let log = dir.path().join("mat.log");
    let store = dir.path().join("store");
    let mat = |store: &Path| {
        let mut command = example_command(&exe, store);
        command
            .args(["-m", "1", "-s", "8", "-k", "4", "-i"])
            .arg(&input)
            .arg("-l")
            .arg(&log);
        command
    };

    std::fs::write(&input, "seed one\n").unwrap();
    let first = run_ok(&mut mat(&store));
    let first_log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(first_log.lines().count(), 8);

    // Unchanged input: the rerun restores the final epoch and has nothing left to do.
    let again = run_ok(&mut mat(&store));
    assert!(
        text(&again.stderr).contains("restarted from epoch"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(checksum(&again), checksum(&first));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), first_log);

    std::fs::write(&input, "seed two\n").unwrap();
    let refused = mat(&store).output().unwrap();
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("eckpt_restart failed: checkpoint does not match what is protected")
            && stderr.contains(&format!(
                "input file {} changed since the checkpoint",
                input.display()
            )),
        "unclear message: {stderr}"
    );
    assert!(
        !text(&refused.stdout).contains("checksum"),
        "the job ran anyway: {}",
        text(&refused.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        first_log,
        "a refused restart changed the log"
    );

    // The input really feeds the computation: from scratch, the new one gives another result.
    let fresh = run_ok(&mut mat(&dir.path().join("fresh-store")));
    assert_ne!(checksum(&fresh), checksum(&first));
}

/// The value after `prefix` on the line of `stdout` that starts with it.
fn field<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in {stdout:?}"))
        .trim()
}

#[test]
fn fortran_example_restores_its_array() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fortran("heat", dir.path());
    let store = dir.path().join("store");
    let heat = |store: &Path, args: &[&str]| {
        let mut command = example_command(&exe, store);
        command.args(args);
        command.output().unwrap()
    };

    let uninterrupted = heat(&dir.path().join("reference"), &["20000", "30", "10"]);
    assert!(uninterrupted.status.success(), "{}", text(&uninterrupted.stdout));
    let reference = field(&text(&uninterrupted.stdout), "checksum:").to_string();

    // Stops after step 25: epochs 1 and 2 (steps 10, 20) are committed, 21..25 are lost.
    let crashed = heat(&store, &["20000", "30", "10", "25"]);
    assert_eq!(crashed.status.code(), Some(3), "{}", text(&crashed.stdout));
    let crashed = text(&crashed.stdout);
    let at_checkpoint = field(&crashed, "checkpoint epoch 2 step 20 checksum");

    let resumed = heat(&store, &["20000", "30", "10"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stdout));
    let resumed = text(&resumed.stdout);
    // The grid and the counter right after restart are what epoch 2 saved, bit for bit...
    assert_eq!(
        field(&resumed, "restarted epoch 2 step 20 checksum"),
        at_checkpoint
    );
    // ...and the job ends exactly as if it had never stopped.
    assert_eq!(field(&resumed, "checksum:"), reference);

    // A grid of another size does not fit the checkpoint: the Fortran side gets the code and
    // the library's message through eckpt_error_message.
    let mismatch = heat(&store, &["10000", "30", "10"]);
    assert_eq!(mismatch.status.code(), Some(1));
    let mismatch = text(&mismatch.stdout);
    assert!(
        mismatch.contains("eckpt_restart failed: checkpoint does not match what is protected: ")
            && mismatch.contains("region \"0\" is 80000 bytes but epoch 3 saved 160000"),
        "{mismatch}"
    );
}

/// The Fortran module's typed `eckpt_protect(id, x)` (`examples/fortran/arrays.f90`). A
/// section is not the bytes at its address: protecting one used to succeed and a restart then
/// wrote into the wrong memory (or a freed copy). Sections given directly or through an
/// assumed-shape dummy, and an assumed-size dummy, must be refused with `ECKPT_EINVAL` and the
/// reason, protecting nothing (the whole arrays take their ids afterwards); whole arrays of
/// every kind, ranks 0 to 3, must come back byte for byte in a second run.
#[test]
fn fortran_typed_protect_refuses_sections_and_restores_whole_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fortran("arrays", dir.path());
    let store = dir.path().join("store");
    let fresh = text(&run_ok(&mut example_command(&exe, &store)).stdout);
    let rerun = text(&run_ok(&mut example_command(&exe, &store)).stdout);

    let not_contiguous = "the array is not contiguous (an array section such as a(1::2) or m(1,:)?): \
                          protect the whole array";
    let code = eckpt::capi::ECKPT_EINVAL;
    for stdout in [&fresh, &rerun] {
        for (what, id, reason) in [
            ("a(1::2)", 1, not_contiguous),
            ("m(1,:)", 2, not_contiguous),
            ("b(:) given a(2::3)", 3, not_contiguous),
            (
                "b(*) given a",
                4,
                "elements of 8 bytes are more than memory holds (an assumed-size array",
            ),
        ] {
            let result = field(stdout, &format!("protect {what}:"));
            assert!(
                result.starts_with(&format!("{code} invalid argument: "))
                    && result.contains(&format!("region \"{id}\": "))
                    && result.contains(reason),
                "protect {what}: {result}"
            );
        }
    }

    assert!(fresh.contains("fresh start, checkpoint epoch 1"), "{fresh}");
    assert!(rerun.contains("restarted epoch 1"), "{rerun}");
    // The arrays are zeroed before the restart: the rerun prints only what was restored.
    assert_eq!(field(&rerun, "a(999) ="), "999.0");
    let bytes = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| l.starts_with("bytes "))
            .map(String::from)
            .collect()
    };
    assert_eq!(bytes(&fresh).len(), 8, "{fresh}");
    assert_eq!(bytes(&rerun), bytes(&fresh));
}

/// `eckpt.h` must compile on its own, in C and in C++, as the first and only include: users
/// include it before anything else. Calls every function with the types a user has at hand.
#[test]
fn header_compiles_alone_in_c_and_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("only_eckpt.c");
    std::fs::write(
        &source,
        r#"#include "eckpt.h"
int main(void) {
    static char buffer[4096];
    size_t len = sizeof buffer;
    int rc = eckpt_init(NULL) + eckpt_protect(0, buffer, len) + eckpt_protect_array(2, buffer, sizeof buffer[0], len, 1)
             + eckpt_protect_file("f", ECKPT_FILE_APPEND)
             + eckpt_protect_device(1, buffer, len) + eckpt_protect_dir(".") + eckpt_checkpoint() + eckpt_restart() + eckpt_finalize();
    const char *text = rc < 0 ? eckpt_strerror(rc) : eckpt_last_error();
    return text[0];
}
"#,
    )
    .unwrap();
    for (compiler, language) in [
        ("cc", &["-std=c11"][..]),
        ("c++", &["-x", "c++", "-std=c++17"][..]),
    ] {
        let mut command = Command::new(compiler);
        command
            .args(language)
            .args(["-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(repo().join("include"))
            .arg(&source);
        compile(command);
    }
}
