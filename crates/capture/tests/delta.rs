//! Block delta format: roundtrips (including length changes) and a strict parser.

use eckpt_capture::delta::{self, DeltaReader, HEADER_LEN};
use eckpt_capture::{decode, encode, encode_blocks, DeltaError, DeltaHeader, DeltaWriter};
use proptest::prelude::*;

/// An old image and a new one derived from it: some bytes changed, then grown or shrunk.
fn image_pair() -> impl Strategy<Value = (Vec<u8>, Vec<u8>, u32)> {
    (
        proptest::collection::vec(any::<u8>(), 0..6000),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..20),
        -3000i64..3000,
        prop::sample::select(vec![1u32, 7, 64, 512, 4096]),
    )
        .prop_map(|(old, edits, grow, bs)| {
            let mut new = old.clone();
            for (i, v) in edits {
                if !new.is_empty() {
                    let at = i.index(new.len());
                    new[at] = v;
                }
            }
            let len = (new.len() as i64 + grow).max(0) as usize;
            let fill = new.len();
            new.resize(len, 0);
            for (k, b) in new[fill.min(len)..].iter_mut().enumerate() {
                *b = (k * 31 + 7) as u8;
            }
            (old, new, bs)
        })
}

/// Bytes of the blocks of `new` that differ from `old` at the same offsets, computed
/// independently of the encoder.
fn changed_bytes(old: &[u8], new: &[u8], bs: usize) -> u64 {
    new.chunks(bs)
        .enumerate()
        .filter(|(i, nb)| {
            let s = i * bs;
            old.get(s..(s + nb.len()).min(old.len())).unwrap_or(&[]) != *nb
        })
        .map(|(_, nb)| nb.len() as u64)
        .sum()
}

fn stream_decode_ok(bytes: &[u8]) -> Result<u64, DeltaError> {
    let mut r = DeltaReader::new(bytes)?;
    let mut buf = [0u8; 97];
    let mut n = 0;
    while r.next_run()?.is_some() {
        r.copy_run_data(&mut std::io::sink(), &mut buf)?;
        n += 1;
    }
    Ok(n)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn roundtrip_with_length_changes((old, new, bs) in image_pair()) {
        let enc = encode(&old, &new, bs).unwrap();
        let d = decode(&enc).unwrap();
        prop_assert_eq!(d.header, DeltaHeader { block_size: bs, old_len: old.len() as u64, new_len: new.len() as u64 });
        prop_assert_eq!(d.apply(&old).unwrap(), new.clone());
        // Only changed blocks are carried.
        prop_assert_eq!(d.payload_bytes(), changed_bytes(&old, &new, bs as usize));
        // The streaming parser agrees.
        prop_assert_eq!(stream_decode_ok(&enc).unwrap(), d.runs.len() as u64);
        // Applying against a base of the wrong length is refused.
        let mut wrong = old.clone();
        wrong.push(0);
        let is_base_length_err = matches!(d.apply(&wrong), Err(DeltaError::BaseLength { .. }));
        prop_assert!(is_base_length_err);
    }

    #[test]
    fn dirty_block_encoding_roundtrips(
        image in proptest::collection::vec(any::<u8>(), 1..20000),
        picks in proptest::collection::btree_set(0u64..64, 0..20),
        bs in prop::sample::select(vec![256u32, 1000, 4096]),
    ) {
        let nblocks = (image.len() as u64).div_ceil(bs as u64);
        let blocks: Vec<u64> = picks.into_iter().filter(|&b| b < nblocks).collect();
        // A stale copy that differs from `image` only inside the dirty blocks.
        let mut stale = image.clone();
        for &b in &blocks {
            let s = (b * bs as u64) as usize;
            let e = (s + bs as usize).min(image.len());
            stale[s..e].iter_mut().for_each(|x| *x = x.wrapping_add(1));
        }
        let mut enc = Vec::new();
        let n = encode_blocks(&image, bs, &blocks, &mut enc).unwrap();
        prop_assert_eq!(n, enc.len() as u64);
        prop_assert_eq!(decode(&enc).unwrap().apply(&stale).unwrap(), image);
    }

    #[test]
    fn truncation_is_rejected((old, new, bs) in image_pair(), cut in any::<prop::sample::Index>()) {
        let enc = encode(&old, &new, bs).unwrap();
        let cut = cut.index(enc.len());
        prop_assert!(decode(&enc[..cut]).is_err());
        prop_assert!(stream_decode_ok(&enc[..cut]).is_err());
    }

    #[test]
    fn bit_flips_are_rejected((old, new, bs) in image_pair(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut enc = encode(&old, &new, bs).unwrap();
        let i = at.index(enc.len());
        enc[i] ^= 1 << bit;
        prop_assert!(decode(&enc).is_err());
        prop_assert!(stream_decode_ok(&enc).is_err());
    }

    #[test]
    fn trailing_bytes_are_rejected((old, new, bs) in image_pair(), extra in proptest::collection::vec(any::<u8>(), 1..8)) {
        let mut enc = encode(&old, &new, bs).unwrap();
        enc.extend_from_slice(&extra);
        let is_trailing_err = matches!(decode(&enc), Err(DeltaError::TrailingBytes(_)));
        prop_assert!(is_trailing_err);
        prop_assert!(stream_decode_ok(&enc).is_err());
    }

    #[test]
    fn garbage_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..400), valid_head in any::<bool>()) {
        if valid_head && bytes.len() >= HEADER_LEN {
            // Get past the magic/version checks so the record parser is exercised too.
            bytes[..8].copy_from_slice(&delta::MAGIC);
            bytes[8..12].copy_from_slice(&[1, 0, 0, 0]);
        }
        let a = decode(&bytes).is_ok();
        let b = stream_decode_ok(&bytes).is_ok();
        prop_assert_eq!(a, b);
        prop_assert!(!a, "random bytes almost surely lack a valid crc");
    }
}

/// Builds a delta with a correct crc around arbitrary records, to reach the checks behind it.
fn framed(header: DeltaHeader, records: &[u8]) -> Vec<u8> {
    let mut out = delta::MAGIC.to_vec();
    out.extend_from_slice(&[1, 0, 0, 0]);
    out.extend_from_slice(&header.block_size.to_le_bytes());
    out.extend_from_slice(&header.old_len.to_le_bytes());
    out.extend_from_slice(&header.new_len.to_le_bytes());
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn trailer(runs: u64, bytes: u64) -> Vec<u8> {
    let mut t = vec![0xFF];
    t.extend_from_slice(&runs.to_le_bytes());
    t.extend_from_slice(&bytes.to_le_bytes());
    t
}

fn run(offset: u64, data: &[u8]) -> Vec<u8> {
    let mut r = vec![0x01];
    r.extend_from_slice(&offset.to_le_bytes());
    r.extend_from_slice(&(data.len() as u64).to_le_bytes());
    r.extend_from_slice(data);
    r
}

#[test]
fn huge_lengths_are_rejected_without_allocating() {
    let h = DeltaHeader {
        block_size: 4096,
        old_len: 0,
        new_len: u64::MAX,
    };
    // Claims a 16 EiB image with no data for it.
    let d = framed(h, &trailer(0, 0));
    assert!(matches!(
        decode(&d),
        Err(DeltaError::UncoveredTail { from: 0, .. })
    ));
    // A run header claiming more bytes than the input has.
    let mut rec = vec![0x01];
    rec.extend_from_slice(&0u64.to_le_bytes());
    rec.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let d = framed(h, &rec);
    assert!(matches!(decode(&d), Err(DeltaError::Truncated(t)) if t.what == "run data"));
    assert!(matches!(stream_decode_ok(&d), Err(DeltaError::Truncated(_))));
}

#[test]
fn layout_violations_are_named() {
    let h = DeltaHeader {
        block_size: 4,
        old_len: 16,
        new_len: 16,
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            [run(4, b"abcd"), run(0, b"efgh"), trailer(2, 8)].concat(),
            "out of order",
        ),
        ([run(2, b"abcd"), trailer(1, 4)].concat(), "block boundary"),
        (
            [run(12, b"abcdefgh"), trailer(1, 8)].concat(),
            "past the new image",
        ),
        ([run(0, b"abc"), trailer(1, 3)].concat(), "partial block"),
        ([run(0, b""), trailer(1, 0)].concat(), "empty run"),
        ([run(0, b"abcd"), trailer(2, 4)].concat(), "trailer says"),
    ];
    for (records, want) in cases {
        let e = decode(&framed(h, &records)).unwrap_err().to_string();
        assert!(e.contains(want), "expected {want:?} in {e:?}");
    }
    let ok = framed(h, &[run(0, b"abcd"), run(4, b"efgh"), trailer(2, 8)].concat());
    assert_eq!(decode(&ok).unwrap().runs.len(), 2);
}

#[test]
fn header_checks() {
    let good = encode(b"abcdefgh", b"abcdefgX", 4).unwrap();
    let mut bad_magic = good.clone();
    bad_magic[0] = b'X';
    assert!(matches!(decode(&bad_magic), Err(DeltaError::BadMagic)));
    let mut v2 = good.clone();
    v2[8] = 2;
    assert!(matches!(decode(&v2), Err(DeltaError::UnsupportedVersion(2))));
    let zero_bs = DeltaHeader {
        block_size: 0,
        old_len: 0,
        new_len: 0,
    };
    assert!(DeltaWriter::new(Vec::new(), zero_bs).is_err());
    assert!(matches!(decode(&[]), Err(DeltaError::Truncated(t)) if t.what == "header"));
}

#[test]
fn writer_refuses_runs_a_parser_would_reject() {
    let h = DeltaHeader {
        block_size: 4,
        old_len: 8,
        new_len: 12,
    };
    let mut w = DeltaWriter::new(Vec::new(), h).unwrap();
    w.push_run(4, b"abcd").unwrap();
    assert!(w.push_run(0, b"abcd").is_err(), "out of order");
    assert!(w.push_run(9, b"abc").is_err(), "unaligned");
    // The grown tail 8..12 is not covered yet.
    assert!(w.finish().is_err());
    let mut w = DeltaWriter::new(Vec::new(), h).unwrap();
    w.push_run(8, b"tail").unwrap();
    let (bytes, n) = w.finish().unwrap();
    assert_eq!(n, bytes.len() as u64);
    assert_eq!(
        decode(&bytes).unwrap().apply(b"01234567").unwrap(),
        b"01234567tail"
    );
}
