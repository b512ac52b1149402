//! Nodes on "other hosts": the cluster directory is shared, but every node keeps its
//! checkpoints on storage of its own. The test builds the hosts itself — a network
//! namespace per node on a bridge, a tmpfs per node for `eckpt agent --store` — starts
//! only the coordinator with `eckpt up --no-agents`, and the agents in the namespaces by
//! hand, as `mpirun -npernode 1 eckpt agent …` or srun would on a real cluster. The agents
//! reach the coordinator over TCP; `eckpt run` starts each rank in its node's namespace,
//! kills two nodes with their stores mid-run, recovers, and the job ends with the result
//! of a failure-free run. Nothing is ever stored in the cluster directory. Needs root.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cluster::programs::build_c;
use cluster::{is_root, ok, run_job};

/// Runs a system command that must succeed.
fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The emulated hosts: a bridge, a namespace and a tmpfs per node, an agent per node.
struct Hosts {
    tag: String,
    nodes: Vec<String>,
    locals: Vec<PathBuf>,
    agents: Vec<Child>,
}

impl Hosts {
    fn namespace(&self, i: usize) -> String {
        format!("eckmh{}-{}", self.tag, self.nodes[i])
    }

    fn ip(i: usize) -> String {
        format!("10.203.9.{}", 10 + i)
    }

    fn new(root: &Path, nodes: &[&str]) -> Hosts {
        let tag = format!("{:x}", std::process::id() % 0xfff);
        let mut hosts = Hosts {
            tag: tag.clone(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            locals: Vec::new(),
            agents: Vec::new(),
        };
        let bridge = format!("eckmh{tag}");
        let _ = Command::new("ip").args(["link", "del", &bridge]).output();
        sh("ip", &["link", "add", &bridge, "type", "bridge"]);
        sh("ip", &["link", "set", &bridge, "address", "02:ec:00:00:00:09"]);
        sh("ip", &["addr", "add", "10.203.9.1/24", "dev", &bridge]);
        sh("ip", &["link", "set", &bridge, "up"]);
        for (i, name) in nodes.iter().enumerate() {
            let ns = hosts.namespace(i);
            let (outside, inside) = (format!("eckmh{tag}v{i}"), format!("eckmh{tag}p{i}"));
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
            sh("ip", &["netns", "add", &ns]);
            sh(
                "ip",
                &["link", "add", &outside, "type", "veth", "peer", "name", &inside],
            );
            sh("ip", &["link", "set", &inside, "netns", &ns]);
            sh("ip", &["link", "set", &outside, "master", &bridge]);
            sh("ip", &["link", "set", &outside, "up"]);
            sh("ip", &["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
            let address = format!("{}/24", Hosts::ip(i));
            sh(
                "ip",
                &[
                    "netns", "exec", &ns, "ip", "addr", "add", &address, "dev", &inside,
                ],
            );
            sh("ip", &["netns", "exec", &ns, "ip", "link", "set", &inside, "up"]);
            let local = root.join(format!("local-{name}"));
            std::fs::create_dir_all(&local).unwrap();
            sh(
                "mount",
                &["-t", "tmpfs", "-o", "size=256m", "tmpfs", local.to_str().unwrap()],
            );
            hosts.locals.push(local);
        }
        hosts
    }

    /// Starts node `i`'s agent in its namespace with its store on its tmpfs.
    fn start_agent(&mut self, dir: &str, i: usize) {
        let ns = self.namespace(i);
        let mut command = Command::new("ip");
        command
            .args([
                "netns",
                "exec",
                &ns,
                env!("CARGO_BIN_EXE_eckpt"),
                "agent",
                "--dir",
                dir,
            ])
            .args(["--name", &self.nodes[i], "--bind", &Hosts::ip(i)])
            .arg("--store")
            // A directory of its own on the node's storage: the mount point itself is
            // writable by everyone (tmpfs mounts are 1777), which eckpt refuses to adopt.
            .arg(self.locals[i].join("eckpt"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.nodes[i].starts_with('s') {
            command.arg("--spare");
        }
        self.agents.push(command.spawn().unwrap());
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for agent in &mut self.agents {
            let _ = agent.kill();
            let _ = agent.wait();
        }
        for (i, local) in self.locals.iter().enumerate() {
            let _ = Command::new("umount").arg(local).output();
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace(i)])
                .output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &format!("eckmh{}", self.tag)])
            .output();
    }
}

#[test]
fn agents_on_their_own_hosts_keep_checkpoints_on_their_own_storage() {
    if !is_root() {
        eprintln!("skipped: network namespaces and tmpfs mounts need root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let names = ["n0", "n1", "n2", "n3", "n4", "n5", "s0"];
    let mut hosts = Hosts::new(tmp.path(), &names);
    let dir = tmp.path().join("shared/cluster");
    let d = dir.to_str().unwrap();
    let up = format!("up --dir {d} --nodes 6 --spares 1 --k 4 --m 2 --no-agents --bind 10.203.9.1 --detach");
    ok(&up.split(' ').collect::<Vec<_>>());
    for i in 0..names.len() {
        hosts.start_agent(d, i);
    }

    // A failure-free reference, standalone.
    let reference = tmp.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    let args = ["-m", "8", "-s", "48", "-k", "4", "-l", "log%r", "-i", "input%r"];
    let work = tmp.path().join("job");
    std::fs::create_dir_all(&work).unwrap();
    let mut expected = Vec::new();
    for r in 0..4 {
        for place in [&reference, &work] {
            std::fs::write(place.join(format!("input{r}")), format!("rank {r}")).unwrap();
        }
        let out = Command::new(&mat)
            .args(args)
            .current_dir(&reference)
            .env("ECKPT_DIR", reference.join("store"))
            .env("ECKPT_RANK", r.to_string())
            .output()
            .unwrap();
        assert!(out.status.success());
        expected.push(String::from_utf8(out.stdout).unwrap().trim().to_string());
    }

    let mut run = vec![
        "--dir",
        d,
        "-n",
        "4",
        "--kill-at",
        "4:2",
        "--",
        mat.to_str().unwrap(),
    ];
    run.extend(args);
    let out = run_job(&work, &run, Duration::from_secs(300));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("waiting for the agents") || err.contains("launched 4 ranks"),
        "{err}"
    );
    assert!(err.contains("eckpt run: recovered epoch"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (r, sum) in expected.iter().enumerate() {
        assert!(stdout.contains(&format!("[{r}] {sum}")), "rank {r}: {stdout}");
        let log = |place: &Path| std::fs::read(place.join(format!("log{r}"))).unwrap();
        assert!(log(&work) == log(&reference), "rank {r}'s log");
    }

    // Every rank ran in its node's namespace: the agents' TCP sessions to the coordinator
    // are there, and the checkpoints are on the nodes' own storage, none in the cluster
    // directory.
    let sessions = Command::new("ip")
        .args([
            "netns",
            "exec",
            &hosts.namespace(0),
            "ss",
            "-tn",
            "state",
            "established",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&sessions.stdout).contains("10.203.9.1:"),
        "n0 talks to the coordinator over TCP: {}",
        String::from_utf8_lossy(&sessions.stdout)
    );
    for node in std::fs::read_dir(dir.join("nodes")).unwrap().flatten() {
        assert!(
            !node.path().join("store").exists(),
            "{} holds a store",
            node.path().display()
        );
    }
    let status: serde_json::Value = serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap();
    let mut hosting = 0;
    for node in status["nodes"].as_array().unwrap() {
        let name = node["name"].as_str().unwrap();
        let local = hosts.locals[names.iter().position(|n| *n == name).unwrap()].join("eckpt");
        if node["removed"].as_bool().unwrap() {
            assert!(!local.join("store").exists(), "{name} was wiped");
        }
        for rank in node["ranks"].as_array().unwrap() {
            hosting += 1;
            assert!(
                local.join(format!("store/rank.{rank}")).is_dir(),
                "rank {rank} on {name}'s storage"
            );
        }
    }
    assert_eq!(hosting, 4);
    ok(&["down", "--dir", d]);
}
