//! The wire format of `update` epochs: batches of records, each `(row, offset in the chunk,
//! data shard, old ⊕ new)`. Parsed as untrusted input (fuzzed).

use crate::CodingError;

/// Header of one record in a batch: row, offset in the chunk, length, data shard index.
pub const RECORD_HEADER: usize = 8 + 4 + 4 + 2;
/// Batches are cut at about this size.
pub const BATCH: usize = 1 << 20;

/// Appends one record to a batch.
pub fn push_record(batch: &mut Vec<u8>, row: u64, offset: u32, shard: u16, bytes: &[u8]) {
    batch.extend_from_slice(&row.to_le_bytes());
    batch.extend_from_slice(&offset.to_le_bytes());
    batch.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    batch.extend_from_slice(&shard.to_le_bytes());
    batch.extend_from_slice(bytes);
}

/// One record of a received batch.
#[derive(Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Row.
    pub row: u64,
    /// Offset within the row's chunk.
    pub offset: u32,
    /// Data shard index of the origin in that row.
    pub shard: u16,
    /// `old ⊕ new`.
    pub bytes: &'a [u8],
}

/// Splits a batch into its records; refuses malformed input.
pub fn parse_batch(batch: &[u8], chunk: usize) -> Result<Vec<RecordRef<'_>>, CodingError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < batch.len() {
        let header = batch
            .get(at..at + RECORD_HEADER)
            .ok_or_else(|| CodingError::Protocol("truncated update record".into()))?;
        let row = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let offset = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes")) as usize;
        let shard = u16::from_le_bytes(header[16..18].try_into().expect("2 bytes"));
        let bytes = batch
            .get(at + RECORD_HEADER..at + RECORD_HEADER + len)
            .ok_or_else(|| CodingError::Protocol("truncated update record".into()))?;
        if offset as usize + len > chunk {
            return Err(CodingError::Protocol(format!(
                "update record at {offset}+{len} crosses a {chunk}-byte chunk"
            )));
        }
        out.push(RecordRef {
            row,
            offset,
            shard,
            bytes,
        });
        at += RECORD_HEADER + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_bad_ones_are_refused() {
        let mut batch = Vec::new();
        push_record(&mut batch, 7, 100, 2, &[1, 2, 3]);
        push_record(&mut batch, 9, 0, 0, &[4]);
        let parsed = parse_batch(&batch, 512).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[0],
            RecordRef {
                row: 7,
                offset: 100,
                shard: 2,
                bytes: &[1, 2, 3]
            }
        );
        assert!(parse_batch(&batch[..batch.len() - 1], 512).is_err());
        assert!(
            parse_batch(&batch, 101).is_err(),
            "a record crossing the chunk end"
        );
    }
}
