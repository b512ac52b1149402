//! A coding task's chunk moved in byte ranges on several threads (`--agent-threads`), its
//! CRC-32C computed range by range while each range's bytes are still in the cache of the
//! core that moved them, then combined: one pass over the chunk instead of a copy and a
//! checksum pass, and that pass shared by the threads.
//!
//! The ranges run on the codec's worker pool (the threads the multiplication uses too), so an
//! agent has one set of threads whatever it does.

use eckpt_cluster_api::ClusterError;

/// Fills `buf` with `read(offset, part)` for its parts (`offset`: where `part` starts in
/// `buf`) on up to `threads` threads; the CRC-32C of the whole of `buf`. The first failing
/// part's error is returned (every part has ended by then).
pub fn read_checksummed<F>(buf: &mut [u8], threads: usize, read: F) -> Result<u32, ClusterError>
where
    F: Fn(usize, &mut [u8]) -> Result<(), ClusterError> + Sync,
{
    let parts = eckpt_codec::map_parts_mut(buf, threads, &|offset, part| {
        read(offset, part)?;
        Ok((crc32c::crc32c(part), part.len()))
    });
    combined(parts)
}

/// Hands `data`'s parts to `write(offset, part)` on up to `threads` threads; the CRC-32C of
/// the whole of `data`. The first failing part's error is returned.
pub fn write_checksummed<F>(data: &[u8], threads: usize, write: F) -> Result<u32, ClusterError>
where
    F: Fn(usize, &[u8]) -> Result<(), ClusterError> + Sync,
{
    let parts = eckpt_codec::map_ranges(data.len(), threads, &|range| {
        let part = &data[range.clone()];
        write(range.start, part)?;
        Ok((crc32c::crc32c(part), part.len()))
    });
    combined(parts)
}

/// The CRC-32C of consecutive parts from theirs and their lengths.
fn combined(parts: Vec<Result<(u32, usize), ClusterError>>) -> Result<u32, ClusterError> {
    parts.into_iter().try_fold(0, |crc, part| {
        let (part_crc, len) = part?;
        Ok(crc32c::crc32c_combine(crc, part_crc, len))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn reads_fill_every_byte_and_the_crc_is_the_whole_chunks() {
        for len in [0, 1, 4096, (1 << 20) + 12_345] {
            let source = bytes(len);
            for threads in [1, 2, 4] {
                let mut buf = vec![0xEEu8; len];
                let crc = read_checksummed(&mut buf, threads, |offset, part| {
                    part.copy_from_slice(&source[offset..offset + part.len()]);
                    Ok(())
                })
                .unwrap();
                assert_eq!(buf, source, "{len} bytes, {threads} threads");
                assert_eq!(crc, crc32c::crc32c(&source), "{len} bytes, {threads} threads");
            }
        }
    }

    #[test]
    fn writes_hand_over_every_byte_once_and_the_crc_is_the_whole_chunks() {
        let data = bytes((3 << 20) + 64);
        for threads in [1, 3] {
            let out = Mutex::new(vec![0u8; data.len()]);
            let crc = write_checksummed(&data, threads, |offset, part| {
                let mut out = out.lock().unwrap();
                assert!(
                    out[offset..offset + part.len()].iter().all(|&b| b == 0),
                    "written twice"
                );
                out[offset..offset + part.len()].copy_from_slice(part);
                Ok(())
            })
            .unwrap();
            assert_eq!(out.into_inner().unwrap(), data);
            assert_eq!(crc, crc32c::crc32c(&data));
        }
    }

    #[test]
    fn a_failing_part_fails_the_whole() {
        let mut buf = vec![0u8; 1 << 20];
        let e = read_checksummed(&mut buf, 4, |offset, _| {
            if offset > 0 {
                Err(ClusterError::Invalid(format!("part at {offset} is damaged")))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("is damaged"), "{e}");
    }
}
