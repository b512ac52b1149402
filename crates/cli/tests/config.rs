//! eckpt.toml through the real binary: the site, user and job files, the environment and
//! flags, each winning over the ones below it — in what `eckpt config` reports and in what
//! `up`, `status` and `encode` do — and files refused, with one line naming the file and
//! the key, when they are wrong or could have been written by someone else.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A home and a site file of their own, so no file or variable of the machine's leaks in.
struct Env {
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            tmp: tempfile::tempdir().expect("temp dir"),
        };
        std::fs::create_dir_all(env.home().join(".config")).unwrap();
        env
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }

    fn site(&self) -> PathBuf {
        self.tmp.path().join("site.toml")
    }

    fn user(&self) -> PathBuf {
        self.home().join(".config/eckpt.toml")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// `eckpt` with this home and site file, and none of the variables the layers read.
    fn eckpt(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_eckpt"));
        command
            .env("HOME", self.home())
            .env("ECKPT_SITE_CONFIG", self.site())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("ECKPT_CONFIG")
            .env_remove("ECKPT_CLUSTER");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.eckpt().args(args).output().expect("eckpt runs")
    }

    /// `eckpt config --json COMMAND…`'s setting `key`.
    fn setting(&self, command: &mut Command, key: &str) -> Value {
        let out = command.output().expect("eckpt config runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        report["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .unwrap_or_else(|| panic!("no setting {key} in {report}"))
            .clone()
    }
}

/// Writes a configuration file as a user would (mode 0644).
fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The one line an eckpt that refused to start printed.
fn refused(out: Output) -> String {
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

/// Stops the cluster when the test ends, however it ends.
struct Down<'a>(&'a Env, &'a str);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["down", "--dir", self.1, "--purge"]);
    }
}

#[test]
fn each_layer_wins_over_the_ones_below_it() {
    let env = Env::new();
    let cluster = env.path("cluster");
    let d = cluster.to_str().unwrap();

    // `up` takes its shape from three files at once: k from the user's over the site's,
    // the node count from the site's, m, the block size and the switches from the job's.
    write(&env.site(), "[up]\nk = 3\nnodes = 4\n");
    write(&env.user(), "[up]\nk = 2\n");
    let job = env.path("job.toml");
    write(
        &job,
        "[up]\nm = 1\nblock-size = \"8KiB\"\ndetach = true\njson = true\n",
    );
    let summary: Value = serde_json::from_str(&ok(env
        .eckpt()
        .args(["--config", job.to_str().unwrap(), "up", "--dir", d])
        .output()
        .unwrap()))
    .expect("up --json from the job file");
    let _down = Down(&env, d);
    assert_eq!(summary["coding"]["k"], 2, "{summary}");
    assert_eq!(summary["coding"]["m"], 1, "{summary}");
    assert_eq!(summary["coding"]["chunk"], 8192, "{summary}");
    assert_eq!(summary["nodes"].as_array().unwrap().len(), 4, "{summary}");

    // `status --dir`: the highest layer that sets it names the cluster; every layer below
    // names a directory that is none, so the command succeeds only if it took the winner's.
    let bogus = |layer: &str| env.path(&format!("not-a-cluster-{layer}"));
    let job = env.path("status.toml");
    let layers = ["site", "user", "job", "env", "flag"];
    for (top, winner) in layers.iter().enumerate() {
        let dir_of = |layer: usize| {
            if layer == top {
                cluster.clone()
            } else {
                bogus(layers[layer])
            }
        };
        // The files of the layers up to the top one set `dir`; those above it are empty.
        let text = |layer: usize| match layer <= top {
            true => format!("dir = {:?}\n", dir_of(layer).to_str().unwrap()),
            false => String::new(),
        };
        write(&env.site(), &text(0));
        write(&env.user(), &text(1));
        write(&job, &text(2));
        let with_layers = |command: &mut Command| {
            command.args(["--config", job.to_str().unwrap()]);
            if top >= 3 {
                command.env("ECKPT_CLUSTER", dir_of(3));
            }
            if top >= 4 {
                command.args(["--dir", d]);
            }
        };

        let mut config = env.eckpt();
        config.args(["config", "--json", "status"]);
        with_layers(&mut config);
        let setting = env.setting(&mut config, "dir");
        assert_eq!(setting["value"], d, "{winner}: {setting}");
        assert_eq!(setting["source"], *winner, "{setting}");
        let from = match *winner {
            "site" => env.site().to_str().unwrap().to_string(),
            "user" => env.user().to_str().unwrap().to_string(),
            "job" => job.to_str().unwrap().to_string(),
            "env" => "ECKPT_CLUSTER".to_string(),
            _ => "--dir".to_string(),
        };
        assert_eq!(setting["from"], from.as_str(), "{setting}");

        let mut status = env.eckpt();
        status.args(["status", "--json"]);
        with_layers(&mut status);
        let report: Value = serde_json::from_str(&ok(status.output().unwrap())).unwrap();
        assert_eq!(report["nodes"].as_array().unwrap().len(), 4, "{winner}");
    }

    // Below every layer, the built-in default: none for status's --dir, which is then
    // missing; 4 for up's k.
    write(&env.site(), "");
    write(&env.user(), "");
    let setting = env.setting(env.eckpt().args(["config", "--json", "status"]), "dir");
    assert_eq!(
        (&setting["source"], &setting["value"]),
        (&"unset".into(), &Value::Null)
    );
    let out = env.run(&["status"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dir <DIR>"));
    let setting = env.setting(env.eckpt().args(["config", "--json", "up"]), "k");
    assert_eq!(
        (&setting["source"], &setting["value"]),
        (&"default".into(), &"4".into())
    );
}

#[test]
fn encode_takes_its_code_from_the_files_and_flags() {
    let env = Env::new();
    let input = env.path("input");
    std::fs::write(&input, vec![7u8; 100_000]).unwrap();
    write(&env.site(), "[encode]\nk = 5\nm = 1\n");
    write(
        &env.user(),
        "[encode]\nk = 3\nblock-size = \"4KiB\"\njson = true\n",
    );
    let encode = |out: &str, flags: &[&str]| -> Value {
        let out = env.path(out);
        let mut args = vec!["encode", input.to_str().unwrap(), "--out", out.to_str().unwrap()];
        args.extend_from_slice(flags);
        serde_json::from_str(&ok(env.run(&args))).expect("encode --json from the user file")
    };
    let summary = encode("shards", &[]);
    assert_eq!(
        (&summary["k"], &summary["m"], &summary["block_size"]),
        (&3.into(), &1.into(), &4096.into()),
        "{summary}"
    );
    assert_eq!(
        std::fs::read_dir(env.path("shards")).unwrap().count(),
        3 + 1 + 1,
        "shards and the manifest"
    );
    let summary = encode("shards-flag", &["--k", "2"]);
    assert_eq!(
        (&summary["k"], &summary["m"]),
        (&2.into(), &1.into()),
        "{summary}"
    );
}

#[test]
fn xdg_config_home_holds_the_user_file() {
    let env = Env::new();
    let xdg = env.path("xdg");
    std::fs::create_dir(&xdg).unwrap();
    write(&xdg.join("eckpt.toml"), "[encode]\nk = 9\n");
    write(&env.user(), "[encode]\nk = 8\n");
    let setting = env.setting(
        env.eckpt()
            .env("XDG_CONFIG_HOME", &xdg)
            .args(["config", "--json", "encode"]),
        "k",
    );
    assert_eq!(
        (&setting["value"], &setting["source"]),
        (&"9".into(), &"user".into())
    );
    assert_eq!(setting["from"], xdg.join("eckpt.toml").to_str().unwrap());
}

#[test]
fn mistakes_are_one_line_naming_the_file_and_key() {
    let env = Env::new();
    let user = env.user();
    let u = user.to_str().unwrap();
    let cases = [
        (
            "[run]\nlauncher = \"sbatch\"\n",
            "[run] launcher: invalid value \"sbatch\"",
        ),
        (
            "[up]\nk = \"six\"\n",
            "[up] k: invalid value \"six\": invalid digit found in string",
        ),
        (
            "[up]\nnetns = \"yes\"\n",
            "[up] netns: expected true or false, not \"yes\"",
        ),
        (
            "[up]\nk = [1, 2]\n",
            "[up] k: expected one value, not the list [1, 2]",
        ),
        (
            "[up]\nlancher = \"srun\"\n",
            "[up] lancher: unknown key: `eckpt up` has no option --lancher",
        ),
        (
            "colour = true\n",
            "colour: unknown key: no eckpt command has an option --colour",
        ),
        ("[rnu]\nranks = 2\n", "[rnu]: no such command"),
        ("[run\nranks = 2\n", "line 1, column 5"),
        // A mistyped key or table gets the suggestion clap gives a mistyped flag.
        (
            "[up]\nk-value = 6\n",
            "[up] k-value: unknown key: `eckpt up` has no option --k-value; did you mean `k`?",
        ),
        (
            "[run]\nlauncher-args = 1\nlaunchr = \"srun\"\n",
            "did you mean `launcher`?",
        ),
        ("[rnu]\nranks = 2\n", "did you mean [run]?"),
    ];
    for (text, expected) in cases {
        write(&user, text);
        // Every command refuses to start, whichever keys it would read.
        for args in [&["status", "--dir", "/nonexistent"][..], &["config"]] {
            let line = refused(env.run(args));
            assert!(line.starts_with(&format!("eckpt: error: {u}: ")), "{line}");
            assert!(line.contains(expected), "{text:?}: {line}");
        }
    }
    write(&user, "");
    let missing = env.path("missing.toml");
    let line = refused(env.run(&["--config", missing.to_str().unwrap(), "config"]));
    assert!(
        line.contains(&format!("{}: no such file", missing.display())),
        "{line}"
    );
}

#[test]
fn untrusted_files_are_refused() {
    let env = Env::new();
    let user = env.user();
    write(&user, "[encode]\nk = 3\n");
    for mode in [0o666, 0o620] {
        std::fs::set_permissions(&user, std::fs::Permissions::from_mode(mode)).unwrap();
        let line = refused(env.run(&["config"]));
        assert!(
            line.contains(&format!(
                "{}: others can write it (mode {mode:04o}",
                user.display()
            )),
            "{line}"
        );
    }
    std::fs::set_permissions(&user, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(env.run(&["config"]));

    std::fs::create_dir(env.site()).unwrap();
    let line = refused(env.run(&["config"]));
    assert!(
        line.contains(&format!("{}: not a regular file", env.site().display())),
        "{line}"
    );
    std::fs::remove_dir(env.site()).unwrap();

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Only root can give a file to another user.
        std::os::unix::fs::chown(&user, Some(65534), None).unwrap();
        let line = refused(env.run(&["config"]));
        assert!(
            line.contains("owned by user 65534, not by root or this user"),
            "{line}"
        );
    }
}

#[test]
fn a_relative_job_file_is_exported_as_an_absolute_path() {
    let env = Env::new();
    let job = env.path("job.toml");
    write(&job, "[encode]\nk = 7\n");
    // Relative, from another directory: exported as an absolute path.
    let setting = env.setting(
        env.eckpt()
            .current_dir(env.tmp.path())
            .args(["--config", "job.toml", "config", "--json", "encode"]),
        "k",
    );
    assert_eq!(
        (&setting["value"], &setting["source"]),
        (&"7".into(), &"job".into())
    );
    assert_eq!(setting["from"], job.to_str().unwrap());
}
