//! The binary delta formats: what a rank's store writes, what the cluster codes and decodes,
//! what `eckpt patch` applies and what peers send in an update epoch.

/// The serialized epoch delta (what the cluster erasure-codes and decodes): never allocates
/// from a bogus length.
pub fn store_delta(data: &[u8]) {
    if let Ok(delta) = eckpt_store::parse_delta(data) {
        let _ = delta.encoded_len();
    }
}

/// The block delta behind `eckpt patch`, and applying what is accepted to a base.
pub fn capture_delta(data: &[u8]) {
    if let Ok(delta) = eckpt_capture::decode(data) {
        let base = vec![0u8; (delta.header.old_len as usize).min(1 << 20)];
        let _ = delta.apply(&base);
    }
}

/// A stripe blob (a node's serialized deltas, possibly decoded from other nodes' shards):
/// every delta it accepts is its rank's, and re-encodes to a delta that parses again to the
/// same thing.
pub fn stripe_blob(data: &[u8]) {
    if let Ok(deltas) = eckpt_agent::stripe_blob::parse_stripe_blob(data) {
        for (rank, bytes) in deltas {
            let delta = eckpt_store::parse_delta(bytes).expect("an accepted delta parses");
            assert_eq!(delta.rank, rank);
            let again = delta.encode().expect("a parsed delta encodes");
            assert_eq!(eckpt_store::parse_delta(&again).expect("re-parses"), delta);
        }
    }
}

/// An update-epoch batch from a peer: every accepted record lies inside the batch and inside
/// one chunk. The first two bytes pick the chunk size.
pub fn update_records(data: &[u8]) {
    let Some((chunk, batch)) = data.split_first_chunk::<2>() else {
        return;
    };
    let chunk = usize::from(u16::from_le_bytes(*chunk)).max(1);
    if let Ok(records) = eckpt_coding::records::parse_batch(batch, chunk) {
        let mut total = 0;
        for record in &records {
            assert!(record.offset as usize + record.bytes.len() <= chunk);
            total += eckpt_coding::records::RECORD_HEADER + record.bytes.len();
        }
        assert_eq!(total, batch.len());
    }
}
