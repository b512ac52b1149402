//! The model's prediction for each benchmark result: the same nodes, coding, sizes and
//! dirty pages, on a machine with the link rate the benchmark measured.

use eckpt_model::machine::{Hosts, Machine, TCP_PAYLOAD};
use eckpt_model::{predict, Prediction, Scenario};

use crate::inputs::BenchResult;

/// What the predictions are priced with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// A calibration's machine, or the model's reference costs.
    pub machine: Machine,
    /// Cores of the host a namespaced (emulated) cluster ran on.
    pub host_cores: f64,
}

impl Costs {
    /// The machine `result` ran on: its measured link rate; one shared host when its agents
    /// ran in namespaces (with the shaper's burst), hosts of their own otherwise.
    pub fn machine_for(&self, result: &BenchResult) -> Machine {
        let mut m = self.machine;
        if result.netns && m.hosts == Hosts::PerNode {
            m = m.emulated(1e9, self.host_cores);
            if result.link_rate.is_none() {
                m.burst_bytes = 0.0;
            }
        }
        if result.link_gbps > 0.0 && result.link_gbps.is_finite() {
            m = m.with_link_rate(result.link_gbps * 1e9 / TCP_PAYLOAD);
        }
        m
    }
}

/// The scenario `result` measured, if it says enough to predict it.
pub fn scenario_of(result: &BenchResult) -> Option<Scenario> {
    let scenario = Scenario {
        nodes: result.nodes,
        coding: result.coding?,
        size_per_node: result.size_per_node,
        dirty_fraction: result.dirty_fraction(),
    };
    scenario.validate().ok()?;
    Some(scenario)
}

/// The prediction for `result`, if it can be made.
pub fn prediction_for(result: &BenchResult, costs: &Costs) -> Option<Prediction> {
    let machine = costs.machine_for(result);
    predict(&scenario_of(result)?, &machine).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_coding::CodingConfig;

    #[test]
    fn namespaced_results_are_predicted_on_a_shared_host_at_the_measured_rate() {
        let result = BenchResult {
            nodes: 6,
            coding: Some(CodingConfig::default()),
            size_per_node: 64 << 20,
            netns: true,
            link_rate: Some("1gbit".into()),
            link_gbps: 0.965,
            ..BenchResult::default()
        };
        let costs = Costs {
            machine: Machine::reference(1e9),
            host_cores: 2.0,
        };
        let m = costs.machine_for(&result);
        assert_eq!(
            m.hosts,
            Hosts::Shared {
                cores: 2.0 * eckpt_model::machine::SHARED_HOST_SHARE
            }
        );
        assert!((m.link_bps - 0.965e9 / 8.0).abs() < 1.0);
        assert!(m.burst_bytes > 0.0);
        assert!(prediction_for(&result, &costs).is_some());
        let unpredictable = BenchResult {
            coding: None,
            ..result
        };
        assert!(prediction_for(&unpredictable, &costs).is_none());
    }
}
