//! The wire format of `update` epochs: batches of records, each `(row, offset in the chunk,
//! data shard, old ⊕ new)`. Parsed as untrusted input (fuzzed).

use eckpt_cursor::{Cursor, Truncated};

use crate::CodingError;

/// Header of one record in a batch: row, offset in the chunk, length, data shard index.
pub const RECORD_HEADER: usize = 8 + 4 + 4 + 2;
/// Batches are cut at about this size: small enough that a parity holder folds the first
/// batches while the rest are on the link (at 1 MiB, a 2 % update of 32 MiB per node sent
/// each stream as one batch, folded only after it had all arrived), large enough that the
/// per-message costs stay a few per cent of a batch's time on a 1 Gbit/s link.
pub const BATCH: usize = 128 << 10;

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
    let mut cursor = Cursor::new(batch);
    let truncated = |e: Truncated| CodingError::Protocol(format!("truncated update record: {e}"));
    while !cursor.is_empty() {
        let row = cursor.u64("row").map_err(truncated)?;
        let offset = cursor.u32("offset").map_err(truncated)?;
        let len = cursor.u32("length").map_err(truncated)?;
        let shard = cursor.u16("shard").map_err(truncated)?;
        let bytes = cursor.take(len.into(), "record bytes").map_err(truncated)?;
        if offset as usize + bytes.len() > chunk {
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
