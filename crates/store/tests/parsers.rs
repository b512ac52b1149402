//! Property tests for the two parsers that read untrusted bytes: manifests (from damaged
//! media) and serialized deltas (from erasure decoding). Both must round-trip what the
//! encoders produce and reject anything else with an error — never a panic.

use eckpt_store::{
    parse_delta, parse_manifest, BlockEntry, Delta, DeltaItem, ItemManifest, Manifest, MANIFEST_FORMAT,
};
use proptest::prelude::*;

/// An item: name, length, block size, and which blocks are stored (a mask over the first
/// blocks; all of them when `full`).
fn item_shape() -> impl Strategy<Value = (String, u64, u32, Vec<bool>)> {
    (
        "[a-z/._-]{1,12}",
        0u64..5_000,
        1u32..700,
        prop::collection::vec(any::<bool>(), 0..40),
    )
}

fn manifest_strategy() -> impl Strategy<Value = Manifest> {
    (
        any::<u32>(),
        2u64..1_000,
        any::<u32>(),
        any::<bool>(),
        prop::collection::vec(item_shape(), 0..6),
        any::<u32>(),
    )
        .prop_map(|(rank, epoch, generation, full, shapes, salt)| {
            let mut items: Vec<ItemManifest> = Vec::new();
            for (i, (name, len, bs, mask)) in shapes.into_iter().enumerate() {
                let count = len.div_ceil(u64::from(bs));
                let blocks = (0..count)
                    .filter(|&b| full || mask.get(b as usize).copied().unwrap_or(false))
                    .map(|b| BlockEntry {
                        index: b,
                        crc32c: salt ^ b as u32,
                    })
                    .collect();
                items.push(ItemManifest {
                    name: format!("{i}{name}"),
                    len,
                    block_size: bs,
                    blocks,
                });
            }
            let data_len = items.iter().map(ItemManifest::stored_bytes).sum();
            Manifest {
                format: MANIFEST_FORMAT,
                rank,
                epoch,
                generation,
                parent: Some(epoch - 1),
                full,
                chain_len: if full { 0 } else { 1 + salt % 7 },
                chain_bytes: if full { 0 } else { data_len + u64::from(salt % 100) },
                data_len,
                items,
            }
        })
}

fn delta_strategy() -> impl Strategy<Value = Delta> {
    (
        any::<u32>(),
        2u64..1_000,
        any::<bool>(),
        prop::collection::vec(item_shape(), 0..5),
        any::<u8>(),
    )
        .prop_map(|(rank, epoch, has_parent, shapes, fill)| {
            let items = shapes
                .into_iter()
                .enumerate()
                .map(|(i, (name, len, bs, mask))| {
                    let count = len.div_ceil(u64::from(bs));
                    let blocks = (0..count)
                        .filter(|&b| !has_parent || mask.get(b as usize).copied().unwrap_or(false))
                        .map(|b| {
                            let n = (len - b * u64::from(bs)).min(u64::from(bs)) as usize;
                            (b, vec![fill.wrapping_add(b as u8); n])
                        })
                        .collect();
                    DeltaItem {
                        name: format!("{i}{name}"),
                        len,
                        block_size: bs,
                        blocks,
                    }
                })
                .collect();
            Delta {
                rank,
                epoch,
                parent: has_parent.then_some(epoch - 1),
                items,
            }
        })
}

/// Re-wraps a (possibly mutated) JSON body in a correct header, so the mutation reaches
/// the JSON and structural checks instead of stopping at the checksum.
fn with_header(body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "ECKPT-MANIFEST v{MANIFEST_FORMAT} crc32c={:08x} len={}\n",
        crc32c::crc32c(body),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn manifest_roundtrips(m in manifest_strategy()) {
        prop_assert!(m.validate().is_ok());
        prop_assert_eq!(parse_manifest(&m.encode()).unwrap(), m);
    }

    #[test]
    fn manifest_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_manifest(&bytes);
        let _ = parse_manifest(&with_header(&bytes));
    }

    #[test]
    fn mutated_manifest_is_rejected_or_valid(
        m in manifest_strategy(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let enc = m.encode();
        let nl = enc.iter().position(|&b| b == b'\n').unwrap();
        // Without fixing the checksum, any change is rejected.
        let mut raw = enc.clone();
        let (at, v) = edits[0];
        let i = at.index(raw.len());
        if raw[i] != v {
            raw[i] = v;
            prop_assert!(parse_manifest(&raw).is_err());
        }
        // With a fixed-up checksum, whatever parses must obey every rule.
        let mut body = enc[nl + 1..].to_vec();
        for (at, v) in edits {
            let i = at.index(body.len());
            body[i] = v;
        }
        if let Ok(parsed) = parse_manifest(&with_header(&body)) {
            prop_assert!(parsed.validate().is_ok());
            prop_assert_eq!(parse_manifest(&parsed.encode()).unwrap(), parsed);
        }
    }

    #[test]
    fn delta_roundtrips_with_padding(d in delta_strategy(), pad in 0u64..200) {
        let len = d.encoded_len() + pad;
        let enc = d.encode_padded(len).unwrap();
        prop_assert_eq!(enc.len() as u64, len);
        prop_assert_eq!(parse_delta(&enc).unwrap(), d.clone());
        if pad > 0 {
            // Cutting into the padding keeps it valid; cutting into the body does not.
            prop_assert_eq!(parse_delta(&enc[..enc.len() - 1]).unwrap(), d.clone());
        }
        let body = d.encoded_len() as usize;
        prop_assert!(parse_delta(&enc[..body - 1]).is_err());
    }

    #[test]
    fn delta_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_delta(&bytes);
        // Same garbage behind a plausible header with a matching checksum.
        let mut framed = b"ECKPTDLT\x01\x00\x01\x00".to_vec();
        framed.extend_from_slice(&3u32.to_le_bytes());
        framed.extend_from_slice(&9u64.to_le_bytes());
        framed.extend_from_slice(&8u64.to_le_bytes());
        framed.extend_from_slice(&(44 + bytes.len() as u64 + 4).to_le_bytes());
        framed.extend_from_slice(&u32::from(bytes.first().copied().unwrap_or(0) % 4).to_le_bytes());
        framed.extend_from_slice(&bytes);
        let crc = crc32c::crc32c(&framed);
        framed.extend_from_slice(&crc.to_le_bytes());
        if let Ok(d) = parse_delta(&framed) {
            prop_assert!(d.validate().is_ok());
        }
    }

    #[test]
    fn mutated_delta_is_rejected_or_valid(
        d in delta_strategy(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let enc = d.encode_padded(d.encoded_len() + 16).unwrap();
        let mut raw = enc.clone();
        let (at, v) = edits[0];
        let i = at.index(raw.len());
        if raw[i] != v {
            raw[i] = v;
            prop_assert!(parse_delta(&raw).is_err(), "single change at {} accepted", i);
        }
        // Mutate the body and fix the checksum: the structural checks must still hold.
        let body = d.encoded_len() as usize - 4;
        let mut m = enc[..body].to_vec();
        for (at, v) in edits {
            let i = at.index(m.len());
            m[i] = v;
        }
        let crc = crc32c::crc32c(&m);
        m.extend_from_slice(&crc.to_le_bytes());
        if let Ok(parsed) = parse_delta(&m) {
            prop_assert!(parsed.validate().is_ok());
            prop_assert_eq!(parse_delta(&parsed.encode().unwrap()).unwrap(), parsed);
        }
    }
}
