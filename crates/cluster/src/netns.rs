//! Emulated hosts: each agent in its own network namespace, joined to a bridge in the root
//! namespace by a veth pair shaped with `tc tbf` in both directions, so encode traffic
//! crosses a link of a chosen rate (1 GbE, 100 Mbit/s …) as between real hosts.

use std::process::Command;

use eckpt_cluster_api::ClusterError;

/// Names and addresses of one cluster's emulated network.
#[derive(Debug, Clone)]
pub struct Network {
    /// Short tag derived from the cluster directory, in every interface name.
    pub tag: String,
    /// `10.a.b.0/24` as `(a, b)`.
    pub subnet: (u8, u8),
}

/// Parses a `tc` rate (`1gbit`, `100mbit`, `500kbit`, `1000000bit`) into bits per second.
pub fn parse_rate(rate: &str) -> Result<u64, ClusterError> {
    let lower = rate.trim().to_ascii_lowercase();
    let lower = lower.trim_end_matches("/s").trim_end_matches("ps");
    let (number, unit) = lower.split_at(
        lower
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(lower.len()),
    );
    let bad = |why: String| ClusterError::Invalid(format!("link rate {rate:?}{why}"));
    let value: f64 = number
        .parse()
        .map_err(|_| bad(": expected e.g. 1gbit or 100mbit".into()))?;
    let scale = match unit {
        "gbit" | "g" => 1e9,
        "mbit" | "m" => 1e6,
        "kbit" | "k" => 1e3,
        "bit" | "" => 1.0,
        _ => return Err(bad(format!(": unknown unit {unit:?}"))),
    };
    let bits = value * scale;
    if bits.is_nan() || bits < 1e5 {
        return Err(bad(" is below 100kbit".into()));
    }
    Ok(bits as u64)
}

fn run(program: &str, args: &[&str]) -> Result<(), ClusterError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| ClusterError::Refused(format!("{program}: {e} (install iproute2)")))?;
    if !out.status.success() {
        return Err(ClusterError::Refused(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl Network {
    /// The network of the cluster in `dir`.
    pub fn for_dir(dir: &std::path::Path) -> Network {
        let h = xxhash_rust::xxh3::xxh3_64(dir.as_os_str().as_encoded_bytes());
        Network {
            tag: format!("{:04x}", h & 0xffff),
            subnet: (100 + ((h >> 16) % 100) as u8, ((h >> 24) & 0xff) as u8),
        }
    }

    /// The bridge interface.
    pub fn bridge(&self) -> String {
        format!("eckbr{}", self.tag)
    }

    /// The bridge's address: where the coordinator listens.
    pub fn bridge_ip(&self) -> String {
        format!("10.{}.{}.1", self.subnet.0, self.subnet.1)
    }

    /// Address of the node with index `index`.
    pub fn node_ip(&self, index: usize) -> String {
        format!("10.{}.{}.{}", self.subnet.0, self.subnet.1, 10 + index)
    }

    /// The root namespace's end of the link of the node with index `index` (its port on
    /// the bridge): set down, the node is cut off; shaped, its link is slow.
    pub fn node_link(&self, index: usize) -> String {
        format!("eck{}v{index}", self.tag)
    }

    /// The namespace of node `name`.
    pub fn namespace(&self, name: &str) -> String {
        format!("eck{}-{name}", self.tag)
    }

    /// Creates the bridge.
    pub fn create_bridge(&self) -> Result<(), ClusterError> {
        let br = self.bridge();
        let _ = run("ip", &["link", "del", &br]);
        run("ip", &["link", "add", &br, "type", "bridge"])?;
        // A fixed address: a bridge otherwise takes its lowest port's, so it changes as nodes
        // join, and nodes that cached the old one in ARP lose the coordinator for a while.
        let mac = format!(
            "02:ec:{}:{}:{:02x}:{:02x}",
            &self.tag[..2],
            &self.tag[2..],
            self.subnet.0,
            self.subnet.1
        );
        run("ip", &["link", "set", &br, "address", &mac])?;
        run(
            "ip",
            &["addr", "add", &format!("{}/24", self.bridge_ip()), "dev", &br],
        )?;
        run("ip", &["link", "set", &br, "up"])
    }

    /// Creates node `name`'s namespace with address `index`, linked to the bridge and
    /// shaped to `rate` (a `tc` rate) in both directions when given.
    pub fn add_node(&self, name: &str, index: usize, rate: Option<&str>) -> Result<(), ClusterError> {
        if index > 240 {
            return Err(ClusterError::Invalid("at most 240 namespaced nodes".into()));
        }
        let ns = self.namespace(name);
        let outside = self.node_link(index);
        let inside = format!("eck{}p{index}", self.tag);
        let _ = run("ip", &["netns", "del", &ns]);
        let _ = run("ip", &["link", "del", &outside]);
        run("ip", &["netns", "add", &ns])?;
        run(
            "ip",
            &["link", "add", &outside, "type", "veth", "peer", "name", &inside],
        )?;
        run("ip", &["link", "set", &inside, "netns", &ns])?;
        run("ip", &["link", "set", &outside, "master", &self.bridge()])?;
        run("ip", &["link", "set", &outside, "up"])?;
        let exec = |args: &[&str]| {
            let mut full = vec!["netns", "exec", &ns];
            full.extend_from_slice(args);
            run("ip", &full)
        };
        exec(&["ip", "link", "set", "lo", "up"])?;
        exec(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", self.node_ip(index)),
            "dev",
            &inside,
        ])?;
        exec(&["ip", "link", "set", &inside, "up"])?;
        if let Some(rate) = rate {
            let bits = parse_rate(rate)?;
            // A burst of 10 ms of traffic (at least 64 KiB, one GSO segment) keeps tbf
            // accurate without dropping offloaded segments.
            let burst = format!("{}", (bits / 8 / 100).max(64 << 10));
            let shape = |dev: &str, ns: Option<&str>| {
                let args = [
                    "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", &burst, "latency",
                    "100ms",
                ];
                match ns {
                    Some(ns) => {
                        let mut full = vec!["netns", "exec", ns, "tc"];
                        full.extend_from_slice(&args);
                        run("ip", &full)
                    }
                    None => run("tc", &args),
                }
            };
            shape(&outside, None)?;
            shape(&inside, Some(&ns))?;
        }
        Ok(())
    }

    /// Removes node `name`'s namespace (and with it the veth pair).
    pub fn remove_node(&self, name: &str) {
        let _ = run("ip", &["netns", "del", &self.namespace(name)]);
    }

    /// Removes the bridge.
    pub fn remove_bridge(&self) {
        let _ = run("ip", &["link", "del", &self.bridge()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_like_tc() {
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("2.5Gbit").unwrap(), 2_500_000_000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10bit").is_err());
    }

    #[test]
    fn names_fit_linux_interface_limits() {
        let net = Network::for_dir(std::path::Path::new("/tmp/some/cluster"));
        assert!(net.bridge().len() <= 15);
        assert!(format!("eck{}v{}", net.tag, 240).len() <= 15);
        assert!(net.node_ip(3).starts_with("10."));
    }
}
