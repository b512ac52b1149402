//! Control messages and the files commands read (cluster.json, the coordinator's journal)
//! on arbitrary bytes: refused with an error or accepted, never a panic; accepted ones
//! serialize back.
#![no_main]

use eckpt_cluster::coordinator::Journal;
use eckpt_cluster_api::dirs::ClusterFile;
use eckpt_cluster_api::msg::{AgentRequest, AgentResponse, CoordRequest, CoordResponse, Hello};
use libfuzzer_sys::fuzz_target;

fn check<T: serde::de::DeserializeOwned + serde::Serialize>(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<T>(data) {
        serde_json::to_vec(&value).expect("an accepted message serializes");
    }
}

fuzz_target!(|data: &[u8]| {
    check::<Hello>(data);
    check::<AgentRequest>(data);
    check::<AgentResponse>(data);
    check::<CoordRequest>(data);
    check::<CoordResponse>(data);
    check::<ClusterFile>(data);
    check::<Journal>(data);
});
