//! Emulated hosts for tests of clusters spread over several hosts: a network namespace per
//! host on a bridge of the test's own, a tmpfs per host for its node-local storage, the
//! agents started in them by hand (as `mpirun -npernode 1 eckpt agent …` or srun would).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Runs a system command that must succeed.
pub fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The emulated hosts: a bridge, a namespace and a tmpfs per node, an agent per node. Each
/// test takes a subnet of its own (`10.SUITE.NET.0/24`, `SUITE` from the test process's id,
/// 200–249, above the 10.100–199 of the clusters `eckpt up --netns` makes): tests run side by
/// side, and so do two test suites on one machine.
pub struct Hosts {
    suite: u8,
    net: u8,
    tag: String,
    pub nodes: Vec<String>,
    pub locals: Vec<PathBuf>,
    agents: Vec<Child>,
}

impl Hosts {
    pub fn namespace(&self, i: usize) -> String {
        format!("eckmh{}-{}", self.tag, self.nodes[i])
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("10.{}.{}.{}", self.suite, self.net, 10 + i)
    }

    /// Host `i`'s link to the bridge, inside its namespace.
    pub fn link(&self, i: usize) -> String {
        format!("eckmh{}p{i}", self.tag)
    }

    /// The bridge's address, in the root namespace.
    pub fn bridge_ip(&self) -> String {
        format!("10.{}.{}.1", self.suite, self.net)
    }

    pub fn new(root: &Path, nodes: &[&str], net: u8) -> Hosts {
        let tag = format!("{:x}{net}", std::process::id() % 0xfff);
        let suite = 200 + (std::process::id() % 50) as u8;
        let mut hosts = Hosts {
            suite,
            net,
            tag: tag.clone(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            locals: Vec::new(),
            agents: Vec::new(),
        };
        let bridge = format!("eckmh{tag}");
        let _ = Command::new("ip").args(["link", "del", &bridge]).output();
        sh("ip", &["link", "add", &bridge, "type", "bridge"]);
        sh(
            "ip",
            &[
                "link",
                "set",
                &bridge,
                "address",
                &format!("02:ec:00:00:{suite:02x}:{net:02x}"),
            ],
        );
        sh(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", hosts.bridge_ip()),
                "dev",
                &bridge,
            ],
        );
        sh("ip", &["link", "set", &bridge, "up"]);
        for (i, name) in nodes.iter().enumerate() {
            let ns = hosts.namespace(i);
            let (outside, inside) = (format!("eckmh{tag}v{i}"), hosts.link(i));
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
            let address = format!("{}/24", hosts.ip(i));
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
    pub fn start_agent(&mut self, dir: &str, i: usize) {
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
            .args(["--name", &self.nodes[i], "--bind", &self.ip(i)])
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
