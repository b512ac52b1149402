//! The wire frame decoder on arbitrary bytes: refuse or accept, never panic, never read
//! past the input, and every accepted frame re-encodes to exactly the bytes it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first two bytes pick the size limit so the fuzzer also reaches the oversize path.
    let (limit, mut rest) = match data.split_first_chunk::<2>() {
        Some((l, rest)) => (u32::from(u16::from_le_bytes(*l)), rest),
        None => return,
    };
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
});
