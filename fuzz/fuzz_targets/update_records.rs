//! An update-epoch batch from a peer on arbitrary bytes: refuse or accept, never panic, and
//! every accepted record lies inside the batch and inside one chunk.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((chunk, batch)) = data.split_first_chunk::<2>() else {
        return;
    };
    let chunk = usize::from(u16::from_le_bytes(*chunk)).max(1);
    if let Ok(records) = eckpt_coding::records::parse_batch(batch, chunk) {
        let mut total = 0;
        for r in &records {
            assert!(r.offset as usize + r.bytes.len() <= chunk);
            total += eckpt_coding::records::RECORD_HEADER + r.bytes.len();
        }
        assert_eq!(total, batch.len());
    }
});
