//! torch.distributed under `eckpt run`: the variables `init_process_group("env://")` reads,
//! as torchrun sets them — `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT` — in every rank of every attempt, on every launcher, so a
//! relaunch after a node loss forms its process group anew on the nodes left.
//!
//! The attempt's share ([`attempt_vars`]: the job size, rank 0's node, a port of the
//! attempt's own) travels in the launch's environment; a rank's own ([`rank_vars`]) is set
//! where the rank starts: by the local launcher, or by `eckpt run-rank` under `mpirun`,
//! `mpiexec` and srun, from the launcher's rank and `ECKPT_NODES` ([`rank_vars_from_env`]).

use std::net::IpAddr;
use std::ops::Range;

use eckpt_cluster_api::msg::NodeInfo;
use eckpt_cluster_api::rank_env::RANK_VARIABLES;
use eckpt_proto::Endpoint;

/// The ports `MASTER_PORT` is taken from: below Linux's default ephemeral range
/// (32768–60999), so that no outgoing connection of the host holds the port a new attempt's
/// rank 0 listens on.
const MASTER_PORTS: Range<u16> = 20000..32768;

/// `MASTER_PORT` of attempt `attempt` of run `run_id`: a run starts at a place of its own in
/// [`MASTER_PORTS`] (a hash of its id, so runs sharing a host rarely meet) and each attempt
/// takes the next port, so a relaunch never listens where the attempt before it — whose
/// rank 0 may have died holding the port — did.
pub fn master_port(run_id: &str, attempt: u32) -> u16 {
    let span = u64::from(MASTER_PORTS.end - MASTER_PORTS.start);
    let start = xxhash_rust::xxh3::xxh3_64(run_id.as_bytes());
    let offset = start.wrapping_add(u64::from(attempt)) % span;
    MASTER_PORTS.start + offset as u16
}

/// `MASTER_ADDR`: where rank 0's node is reached — its agent's TCP address (in an emulated
/// cluster, the node's namespaced address); an agent that listens on every address is named
/// by its host name.
pub fn master_addr(node: &NodeInfo) -> String {
    let listens_everywhere = |host: &str| host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
    match &node.tcp {
        Endpoint::Tcp { host, .. } if !listens_everywhere(host) => host.clone(),
        _ => node
            .host
            .split_once('/')
            .map_or(node.host.as_str(), |(name, _)| name)
            .to_string(),
    }
}

/// The variables every rank of an attempt shares: `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`.
pub fn attempt_vars(world: u32, master_addr: &str, master_port: u16) -> Vec<(String, String)> {
    vec![
        ("WORLD_SIZE".into(), world.to_string()),
        ("MASTER_ADDR".into(), master_addr.to_string()),
        ("MASTER_PORT".into(), master_port.to_string()),
    ]
}

/// A rank's own variables — `RANK`, `LOCAL_RANK` (its place among the ranks of its node, in
/// rank order) and `LOCAL_WORLD_SIZE` — from every rank's node, in rank order. `None` for a
/// rank `nodes` does not name.
pub fn rank_vars(rank: u32, nodes: &[&str]) -> Option<Vec<(String, String)>> {
    let node = *nodes.get(rank as usize)?;
    let before = nodes[..rank as usize].iter().filter(|n| **n == node).count();
    let on_node = nodes.iter().filter(|n| **n == node).count();
    Some(vec![
        ("RANK".into(), rank.to_string()),
        ("LOCAL_RANK".into(), before.to_string()),
        ("LOCAL_WORLD_SIZE".into(), on_node.to_string()),
    ])
}

/// [`rank_vars`] for a rank a whole-job launcher started: its number from the launcher's
/// variables ([`RANK_VARIABLES`]), every rank's node from `ECKPT_NODES` (the launch gives
/// both). `None` outside an `eckpt run` launch.
pub fn rank_vars_from_env(lookup: impl Fn(&str) -> Option<String>) -> Option<Vec<(String, String)>> {
    let rank: u32 = RANK_VARIABLES.iter().find_map(|v| lookup(v))?.parse().ok()?;
    let nodes = lookup("ECKPT_NODES")?;
    rank_vars(rank, &nodes.split(',').collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn vars(list: Vec<(String, String)>) -> BTreeMap<String, String> {
        list.into_iter().collect()
    }

    /// Four ranks on three nodes, as the placement puts them: local ranks count within a node
    /// in rank order, whatever order the nodes come in.
    #[test]
    fn local_ranks_count_within_a_node() {
        let nodes = ["n1", "n0", "n1", "n2"];
        let local = |rank| {
            let v = vars(rank_vars(rank, &nodes).unwrap());
            (
                v["RANK"].clone(),
                v["LOCAL_RANK"].clone(),
                v["LOCAL_WORLD_SIZE"].clone(),
            )
        };
        assert_eq!(local(0), ("0".into(), "0".into(), "2".into()));
        assert_eq!(local(1), ("1".into(), "0".into(), "1".into()));
        assert_eq!(local(2), ("2".into(), "1".into(), "2".into()));
        assert_eq!(local(3), ("3".into(), "0".into(), "1".into()));
        assert!(rank_vars(4, &nodes).is_none());
    }

    /// Under mpirun, mpiexec and srun the rank comes from the launcher's variable.
    #[test]
    fn a_launchers_rank_is_read() {
        let env: BTreeMap<&str, &str> = [("SLURM_PROCID", "2"), ("ECKPT_NODES", "a,a,b")].into();
        let v = vars(rank_vars_from_env(|k| env.get(k).map(|s| s.to_string())).unwrap());
        assert_eq!((v["RANK"].as_str(), v["LOCAL_RANK"].as_str()), ("2", "0"));
        let env: BTreeMap<&str, &str> = [("SLURM_PROCID", "2")].into();
        assert!(rank_vars_from_env(|k| env.get(k).map(|s| s.to_string())).is_none());
    }

    /// Every attempt of a run listens on a port of its own, inside the range.
    #[test]
    fn each_attempt_gets_a_port_of_its_own() {
        let ports: Vec<u16> = (1..=50).map(|a| master_port("run-7", a)).collect();
        assert!(ports.iter().all(|p| MASTER_PORTS.contains(p)));
        for pair in ports.windows(2) {
            assert_ne!(pair[0], pair[1]);
        }
    }

    fn node(tcp_host: &str) -> NodeInfo {
        NodeInfo {
            name: "n0".into(),
            spare: false,
            tcp: Endpoint::Tcp {
                host: tcp_host.into(),
                port: 7000,
            },
            unix: Endpoint::Unix(PathBuf::from("/tmp/s")),
            host: "hostA/net:[1]".into(),
            cores: 2,
            store: PathBuf::from("/tmp/store"),
            pid: 1,
        }
    }

    /// Rank 0's node is reached at its agent's address, or by its host name when the agent
    /// listens on every address.
    #[test]
    fn the_master_is_rank_zeros_node() {
        assert_eq!(master_addr(&node("10.1.2.3")), "10.1.2.3");
        assert_eq!(master_addr(&node("0.0.0.0")), "hostA");
        assert_eq!(master_addr(&node("::")), "hostA");
    }
}
