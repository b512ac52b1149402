//! Property tests of the sans-IO codec: roundtrips under any split of the byte stream, and
//! garbage, truncation and bit flips are refused without panicking.

use eckpt_proto::frame::{HEADER_LEN, MAGIC, PROTOCOL_VERSION};
use eckpt_proto::{decode_frame, encode_frame, Decoded, FrameError, FrameKind, DEFAULT_MAX_PAYLOAD};
use proptest::prelude::*;

const MAX: u32 = 1 << 16;

fn kind() -> impl Strategy<Value = FrameKind> {
    prop_oneof![
        Just(FrameKind::Auth),
        Just(FrameKind::Control),
        Just(FrameKind::Data)
    ]
}

fn frames() -> impl Strategy<Value = Vec<(FrameKind, Vec<u8>)>> {
    prop::collection::vec((kind(), prop::collection::vec(any::<u8>(), 0..3000)), 1..6)
}

/// Feeds `stream` to the decoder in chunks ending at `cuts`, the way a socket delivers it,
/// and returns the decoded frames. Asserts `NeedMore` always asks for more than it has.
fn decode_in_chunks(stream: &[u8], cuts: &[usize]) -> Vec<(FrameKind, Vec<u8>)> {
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    ends.push(stream.len());
    ends.sort_unstable();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut fed = 0;
    for end in ends {
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
        loop {
            match decode_frame(&buf, MAX).expect("valid stream") {
                Decoded::Frame {
                    kind,
                    payload,
                    consumed,
                } => {
                    out.push((kind, payload.to_vec()));
                    buf.drain(..consumed);
                }
                Decoded::NeedMore { at_least } => {
                    assert!(
                        at_least > buf.len(),
                        "NeedMore({at_least}) with {} buffered",
                        buf.len()
                    );
                    break;
                }
            }
        }
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    out
}

proptest! {
    #[test]
    fn frames_roundtrip_under_random_splits(
        frames in frames(),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let stream: Vec<u8> = frames.iter().flat_map(|(k, p)| encode_frame(*k, p).unwrap()).collect();
        prop_assert_eq!(decode_in_chunks(&stream, &cuts), frames);
    }

    #[test]
    fn byte_by_byte_every_prefix_needs_more(kind in kind(), payload in prop::collection::vec(any::<u8>(), 0..600)) {
        let frame = encode_frame(kind, &payload).unwrap();
        for len in 0..frame.len() {
            match decode_frame(&frame[..len], MAX) {
                Ok(Decoded::NeedMore { at_least }) => prop_assert!(at_least > len && at_least <= frame.len()),
                other => prop_assert!(false, "prefix of {} bytes gave {:?}", len, other),
            }
        }
        let cuts: Vec<usize> = (0..frame.len()).collect();
        prop_assert_eq!(decode_in_chunks(&frame, &cuts), vec![(kind, payload)]);
    }

    #[test]
    fn every_single_bit_flip_is_rejected(kind in kind(), payload in prop::collection::vec(any::<u8>(), 0..200)) {
        let frame = encode_frame(kind, &payload).unwrap();
        for bit in 0..frame.len() * 8 {
            let mut bad = frame.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode_frame(&bad, MAX).is_err(), "flip of bit {} accepted", bit);
        }
    }

    #[test]
    fn random_corruption_never_yields_a_wrong_frame(
        kind in kind(),
        payload in prop::collection::vec(any::<u8>(), 0..2000),
        flips in prop::collection::vec((any::<usize>(), 1u8..=255), 1..8),
    ) {
        let frame = encode_frame(kind, &payload).unwrap();
        let mut bad = frame.clone();
        for (at, mask) in flips {
            bad[at % frame.len()] ^= mask;
        }
        if let Ok(Decoded::Frame { kind: k, payload: p, .. }) = decode_frame(&bad, MAX) {
            // Only possible if the flips cancelled out.
            prop_assert_eq!(&bad, &frame);
            prop_assert_eq!((k, p), (kind, payload.as_slice()));
        }
    }

    #[test]
    fn garbage_is_refused_without_panicking(garbage in prop::collection::vec(any::<u8>(), 0..4096)) {
        match decode_frame(&garbage, DEFAULT_MAX_PAYLOAD) {
            Err(_) => {}
            Ok(Decoded::NeedMore { at_least }) => prop_assert!(at_least > garbage.len()),
            Ok(Decoded::Frame { consumed, .. }) => prop_assert!(consumed <= garbage.len()),
        }
        if garbage.len() >= 4 && garbage[..4] != MAGIC {
            let refused = matches!(decode_frame(&garbage, DEFAULT_MAX_PAYLOAD), Err(FrameError::BadMagic { .. }));
            prop_assert!(refused);
        }
    }

    #[test]
    fn valid_looking_headers_with_random_fields_never_panic(
        fields in any::<[u8; 15]>(),
        tail in prop::collection::vec(any::<u8>(), 0..512),
        fix_crc in any::<bool>(),
    ) {
        // Right magic and version, so the fuzz reaches the deeper checks.
        let mut buf = MAGIC.to_vec();
        buf.push(PROTOCOL_VERSION);
        buf.extend_from_slice(&fields);
        if fix_crc {
            let crc = crc32c::crc32c(&buf[..16]);
            buf[16..20].copy_from_slice(&crc.to_le_bytes());
        }
        buf.extend_from_slice(&tail);
        let _ = decode_frame(&buf, 1024);
    }
}

#[test]
fn a_header_claiming_4_gib_is_refused_from_the_header_alone() {
    let mut header = encode_frame(FrameKind::Data, &[]).unwrap();
    header[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let crc = crc32c::crc32c(&header[..16]);
    header[16..20].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(header.len(), HEADER_LEN);
    let err = decode_frame(&header, DEFAULT_MAX_PAYLOAD).unwrap_err();
    assert_eq!(
        err,
        FrameError::Oversize {
            len: u64::from(u32::MAX),
            max: u64::from(DEFAULT_MAX_PAYLOAD)
        }
    );
    assert!(
        err.to_string()
            .contains("4294967295 bytes exceeds the limit of 67108864"),
        "{err}"
    );
}
