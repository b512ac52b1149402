//! What the machine offers: link rate, where the nodes' CPUs are, and what each unit of
//! work costs there. Measured by `eckpt model --calibrate` on a running cluster, or given.

use serde::{Deserialize, Serialize};

use crate::control::Control;
use crate::ModelError;

/// Payload bytes per link byte of TCP over Ethernet with 1500-byte frames (1448 of 1500):
/// what a link of a nominal rate carries of eckpt's data.
pub const TCP_PAYLOAD: f64 = 1448.0 / 1500.0;

/// Share of a shared host's cores its agents' work gets when all are busy, as the ring
/// test of `eckpt model --calibrate` measured on the development machine (32 namespaced
/// agents on 2 cores): used where a calibration cannot load the host's cores.
pub const SHARED_HOST_SHARE: f64 = 0.85;

/// Where the nodes run, which decides whether their CPU work adds up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Hosts {
    /// Each node on a host of its own: nodes work in parallel, each with an executor thread
    /// (reads, GF arithmetic) beside the threads moving its sockets.
    PerNode,
    /// Every node on one host, as an emulated cluster (`eckpt up --netns`) on one machine:
    /// all nodes' CPU work shares its cores.
    Shared {
        /// Cores the nodes' work gets: the host's cores times the share of their time it
        /// gets when all are busy (the rest goes to the kernel's network processing outside
        /// the agents, to other processes, and to idle gaps while threads wait on each other).
        cores: f64,
    },
}

/// CPU seconds per unit of work on one core (the costs the agents' code pays).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    /// Per message sent, and again per message received: frame, queue hops, wake-ups.
    pub message_s: f64,
    /// Per payload byte sent, and again per byte received: socket copies and the kernel's
    /// network stack (including an emulated link's veth, bridge and shaper).
    pub link_byte_s: f64,
    /// Per byte of GF(2^8) multiply-accumulate output (`X_ij · D_j` added into a partial).
    pub gf_byte_s: f64,
    /// Per byte read from the node-local store and checksummed (CRC-32C).
    pub read_byte_s: f64,
    /// Per byte written to the node-local store (a RAM disk: a copy).
    pub write_byte_s: f64,
    /// Per byte of a rank's protected memory looked at to find what changed at a checkpoint
    /// (kernel write tracking's `PAGEMAP_SCAN`; hashing, the fallback, costs about 100×).
    pub scan_byte_s: f64,
    /// Per byte a rank's checkpoint writes into its node-local store (copy, block
    /// checksums, files, sync).
    pub store_byte_s: f64,
    /// Per stored block of a rank's epoch, each time an agent opens the epoch (its manifest
    /// and its parents', read and checked): a fixed cost of every encode and update that
    /// grows with the size of the images, not with what changed.
    pub chain_block_s: f64,
    /// Per member and round of a task (describe, code or update, report): connections and
    /// their handshakes, task start and report, hand-offs between threads. A reference
    /// constant fitted to epochs of tiny images (docs/REPRODUCTION.md); calibrations keep it.
    pub round_s: f64,
}

/// A machine: links, hosts, and costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Payload bytes per second a node's link carries in each direction.
    pub link_bps: f64,
    /// Bytes a shaped link passes at once before its rate applies (a `tc tbf` burst; 0 for
    /// a real link, whose first chunk takes its full transfer time per hop).
    pub burst_bytes: f64,
    /// Seconds one message takes to cross a hop, beyond its bytes over the rate.
    pub latency_s: f64,
    /// Where the nodes run.
    pub hosts: Hosts,
    /// What work costs.
    pub cpu: Cpu,
    /// Seconds of an encode or update that do not depend on its size or its members' CPU:
    /// the coordinator's round trips (describe, task, report).
    pub task_s: f64,
    /// The liveness period: a node silent this long is counted dead (the control plane's
    /// delay beyond it is `control.detect`).
    pub detect_s: f64,
    /// What the control plane adds to every epoch and recovery. A calibration made before
    /// the model counted it loads with the reference's.
    #[serde(default = "Control::reference")]
    pub control: Control,
}

/// `tc tbf` burst of a link shaped by `eckpt up --netns --link-rate` at `bits` per second:
/// 10 ms of traffic, at least 64 KiB (as `eckpt_cluster::netns` sets it).
pub fn netns_burst(bits: f64) -> f64 {
    (bits / 8.0 / 100.0).max(65536.0)
}

impl Machine {
    /// Costs measured on the machine this project is developed on (2 cores with AVX-512
    /// GFNI; agents in network namespaces; RAM-disk stores) with `eckpt model --calibrate`,
    /// taken as the costs of one core elsewhere. With a link rate of `bits` per second
    /// carrying TCP payload, nodes on hosts of their own, real links.
    pub fn reference(bits: f64) -> Machine {
        Machine {
            link_bps: bits / 8.0 * TCP_PAYLOAD,
            burst_bytes: 0.0,
            latency_s: 50e-6,
            hosts: Hosts::PerNode,
            cpu: Cpu {
                message_s: 6e-6,
                link_byte_s: 0.5e-9,
                gf_byte_s: 0.02e-9,
                read_byte_s: 0.3e-9,
                write_byte_s: 0.25e-9,
                scan_byte_s: 0.4e-12,
                store_byte_s: 0.9e-9,
                chain_block_s: 50e-9,
                round_s: 0.2e-3,
            },
            task_s: 0.003,
            detect_s: 3.0,
            control: Control::reference(),
        }
    }

    /// Refuses a machine no time can be computed on: a link without rate, a host without
    /// cores, negative or non-finite costs.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |what: &str, v: f64| ModelError::Invalid(format!("{what} {v} must be a finite number ≥ 0"));
        if !(self.link_bps.is_finite() && self.link_bps > 0.0) {
            return Err(ModelError::Invalid(format!(
                "link rate {} bytes/s must be positive",
                self.link_bps
            )));
        }
        if let Hosts::Shared { cores } = self.hosts {
            if !(cores.is_finite() && cores > 0.0) {
                return Err(ModelError::Invalid(format!("a host needs cores, not {cores}")));
            }
        }
        let c = &self.cpu;
        for (what, v) in [
            ("burst", self.burst_bytes),
            ("latency", self.latency_s),
            ("task time", self.task_s),
            ("detection time", self.detect_s),
            ("message cost", c.message_s),
            ("link byte cost", c.link_byte_s),
            ("GF byte cost", c.gf_byte_s),
            ("read byte cost", c.read_byte_s),
            ("write byte cost", c.write_byte_s),
            ("scan byte cost", c.scan_byte_s),
            ("store byte cost", c.store_byte_s),
            ("chain block cost", c.chain_block_s),
            ("round cost", c.round_s),
        ]
        .into_iter()
        .chain(self.control.figures())
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(what, v));
            }
        }
        Ok(())
    }

    /// This machine with links of `bits` per second nominal, carrying TCP's payload share
    /// of it; a shaped (emulated) link keeps its burst of 10 ms at the new rate.
    pub fn with_link_rate(self, bits: f64) -> Machine {
        Machine {
            link_bps: bits / 8.0 * TCP_PAYLOAD,
            burst_bytes: if self.burst_bytes > 0.0 {
                netns_burst(bits)
            } else {
                0.0
            },
            ..self
        }
    }

    /// The same machine emulated on one host of `cores` cores with links shaped by
    /// `eckpt up --netns` (their burst passes the first chunk of a hop at once); the agents
    /// get [`SHARED_HOST_SHARE`] of the cores.
    pub fn emulated(self, bits: f64, cores: f64) -> Machine {
        Machine {
            burst_bytes: netns_burst(bits),
            hosts: Hosts::Shared {
                cores: cores * SHARED_HOST_SHARE,
            },
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_is_ten_milliseconds_or_64_kib() {
        assert_eq!(netns_burst(1e9), 1.25e6);
        assert_eq!(netns_burst(100e6), 125_000.0);
        assert_eq!(netns_burst(10e6), 65536.0);
    }

    #[test]
    fn reference_link_carries_tcp_payload() {
        let m = Machine::reference(1e9);
        assert!((m.link_bps - 120.67e6).abs() < 0.1e6, "{}", m.link_bps);
        let e = m.emulated(1e9, 2.0);
        assert_eq!(
            e.hosts,
            Hosts::Shared {
                cores: 2.0 * SHARED_HOST_SHARE
            }
        );
        assert_eq!(e.cpu, m.cpu);
        assert!(e.validate().is_ok());
        let fast = e.with_link_rate(100e9);
        assert_eq!(fast.burst_bytes, 125e6);
        assert_eq!(m.with_link_rate(100e9).burst_bytes, 0.0, "real links have none");
    }

    /// `docs/results/calibration-32x1gbit-quiet.json` was saved before the model counted the
    /// control plane: it loads, with the reference's control costs.
    #[test]
    fn a_calibration_without_control_costs_loads_with_the_reference() {
        let file: serde_json::Value = serde_json::from_str(include_str!(
            "../../../docs/results/calibration-32x1gbit-quiet.json"
        ))
        .unwrap();
        assert!(file["machine"].get("control").is_none(), "an older calibration");
        let m: Machine = serde_json::from_value(file["machine"].clone()).unwrap();
        assert_eq!(m.control, Control::reference());
        assert_eq!(m.detect_s, 3.0);
        assert!(m.validate().is_ok());
        let again: Machine = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(again, m, "and saves them");
    }

    #[test]
    fn impossible_machines_are_refused() {
        let ok = Machine::reference(1e9);
        assert!(Machine { link_bps: 0.0, ..ok }.validate().is_err());
        assert!(Machine {
            task_s: f64::NAN,
            ..ok
        }
        .validate()
        .is_err());
        assert!(Machine {
            hosts: Hosts::Shared { cores: 0.0 },
            ..ok
        }
        .validate()
        .is_err());
        let mut control = ok.control;
        control.plan.per_node_s = -1e-3;
        assert!(Machine { control, ..ok }.validate().is_err());
        control.plan.per_node_s = f64::INFINITY;
        assert!(Machine { control, ..ok }.validate().is_err());
    }
}
