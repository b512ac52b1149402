//! What crosses the wire: frames and the control messages in them (with the JSON files
//! commands read, which share their serde types).

use eckpt_cluster_api::dirs::ClusterFile;
use eckpt_cluster_api::msg::{AgentRequest, AgentResponse, CoordRequest, CoordResponse, Hello};
use eckpt_coordinator::Journal;

/// The wire frame decoder: never reads past the input, and every accepted frame re-encodes
/// to exactly the bytes it came from. The first two bytes pick the size limit, so the
/// oversize path is reached too.
pub fn proto_frame(data: &[u8]) {
    let Some((limit, mut rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let limit = u32::from(u16::from_le_bytes(*limit));
    while let Ok(eckpt_proto::Decoded::Frame {
        kind,
        payload,
        consumed,
    }) = eckpt_proto::decode_frame(rest, limit)
    {
        assert!(consumed <= rest.len());
        assert!(payload.len() as u64 <= u64::from(limit));
        let again = eckpt_proto::encode_frame(kind, payload).expect("decoded payload fits a frame");
        assert_eq!(again.as_slice(), &rest[..consumed]);
        rest = &rest[consumed..];
    }
}

/// Control messages and the files commands read (cluster.json, the coordinator's journal):
/// accepted ones serialize back.
pub fn control_messages(data: &[u8]) {
    round_trips::<Hello>(data);
    round_trips::<AgentRequest>(data);
    round_trips::<AgentResponse>(data);
    round_trips::<CoordRequest>(data);
    round_trips::<CoordResponse>(data);
    round_trips::<ClusterFile>(data);
    round_trips::<Journal>(data);
}

fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<T>(data) {
        serde_json::to_vec(&value).expect("an accepted message serializes");
    }
}
