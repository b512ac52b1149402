//! Where a node's processes run: the host and network namespace of its agent, from the
//! host identity the agent registered (`hostname/net:[inode]`). A rank runs in its node's
//! network namespace — entered with setns(2) through the agent's `/proc/<pid>/ns/net` —
//! so that what it sends to ranks on other nodes crosses the node's (shaped) link.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use eckpt_cluster_api::msg::NodeInfo;
use eckpt_cluster_api::net::host_identity;

use crate::procs;
use crate::RunError;

/// Where a node is, seen from this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeHost {
    /// This host and network namespace.
    Here,
    /// This host, the network namespace of the agent with this `/proc/<pid>/ns/net`.
    Namespace {
        /// The namespace file.
        path: PathBuf,
        /// Its identity (`net:[…]`), to find the processes inside.
        id: String,
    },
    /// Another host.
    Remote {
        /// Its host name.
        hostname: String,
    },
}

/// Splits a host identity into host name and network namespace.
fn split(identity: &str) -> (&str, &str) {
    identity.split_once('/').unwrap_or((identity, ""))
}

impl NodeHost {
    /// Where `node` runs.
    pub fn of(node: &NodeInfo) -> Result<NodeHost, RunError> {
        let mine = host_identity();
        let (my_host, my_ns) = split(&mine);
        let (host, ns) = split(&node.host);
        if host != my_host {
            return Ok(NodeHost::Remote {
                hostname: host.to_string(),
            });
        }
        if ns == my_ns {
            return Ok(NodeHost::Here);
        }
        match procs::netns(node.pid) {
            Some(found) if found == ns => Ok(NodeHost::Namespace {
                path: PathBuf::from(format!("/proc/{}/ns/net", node.pid)),
                id: ns.to_string(),
            }),
            _ => Err(RunError::Launch(format!(
                "node {}: its agent (pid {}) is not running in the namespace it registered from",
                node.name, node.pid
            ))),
        }
    }

    /// Makes `command` start inside this node's network namespace (nothing to do here).
    pub fn enter(&self, command: &mut Command) -> Result<(), RunError> {
        match self {
            NodeHost::Here => Ok(()),
            NodeHost::Namespace { path, .. } => {
                let ns =
                    File::open(path).map_err(|e| RunError::Launch(format!("{}: {e}", path.display())))?;
                // SAFETY: setns(2) is async-signal-safe; the file stays open (moved into the
                // closure) until the child has entered the namespace.
                unsafe {
                    command.pre_exec(move || {
                        if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                Ok(())
            }
            NodeHost::Remote { hostname } => Err(RunError::Launch(format!(
                "the node runs on host {hostname}: start the ranks with --launcher mpirun"
            ))),
        }
    }
}
