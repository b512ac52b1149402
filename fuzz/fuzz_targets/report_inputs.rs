//! The result files `eckpt report` reads and the calibrations `eckpt model` loads, on
//! arbitrary bytes: refused with an error or accepted, never a panic — and an accepted
//! result renders into a page, an accepted machine into a prediction, whatever numbers
//! they hold.
#![no_main]

use eckpt_model::{predict, Machine, Scenario};
use eckpt_report::inputs::parse;
use eckpt_report::predictions::Costs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(input) = parse("fuzz.json", data) {
        let costs = Costs {
            machine: Machine::reference(1e9),
            host_cores: 2.0,
        };
        let page = eckpt_report::report(&[("fuzz.json".into(), input)], &costs, "fuzz");
        assert!(page.ends_with("</html>\n"));
        assert!(!page.contains("<script"));
    }
    if let Ok(machine) = serde_json::from_slice::<Machine>(data) {
        if machine.validate().is_ok() {
            let scenario = Scenario {
                nodes: 6,
                coding: Default::default(),
                size_per_node: 64 << 20,
                dirty_fraction: 0.01,
            };
            let _ = predict(&scenario, &machine);
        }
    }
});
