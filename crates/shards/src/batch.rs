//! Sizing of the batches that stream through encode and decode: whole stripes, about
//! [`TARGET_BATCH_BYTES`] of input each, so memory stays bounded whatever the file size.

/// Input bytes per batch aimed for.
pub const TARGET_BATCH_BYTES: u64 = 32 << 20;

/// Stripes per batch for a `k`-data-shard code with `block_size`-byte blocks.
pub fn stripes_per_batch(k: usize, block_size: u64) -> u64 {
    (TARGET_BATCH_BYTES / (k as u64 * block_size)).max(1)
}

/// Splits `0..n` into at most `threads` contiguous ranges of near-equal size.
pub fn split_ranges(n: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let parts = threads.clamp(1, n.max(1));
    let per = n.div_ceil(parts);
    (0..parts)
        .map(|t| (t * per).min(n)..((t + 1) * per).min(n))
        .filter(|r| !r.is_empty())
        .collect()
}

/// Splits each buffer into the byte ranges `[r.start·unit, r.end·unit)` of `ranges`, returning
/// for every range the list of its pieces, so each range can be worked on by its own thread.
pub fn split_buffers<'a>(
    buffers: &'a mut [Vec<u8>],
    ranges: &[std::ops::Range<usize>],
    unit: usize,
) -> Vec<Vec<&'a mut [u8]>> {
    let mut parts: Vec<Vec<&mut [u8]>> = ranges.iter().map(|_| Vec::with_capacity(buffers.len())).collect();
    for buffer in buffers.iter_mut() {
        let mut rest: &mut [u8] = buffer.as_mut_slice();
        let mut consumed = 0;
        for (part, range) in parts.iter_mut().zip(ranges) {
            let (_, tail) = rest.split_at_mut(range.start * unit - consumed);
            let (piece, tail) = tail.split_at_mut(range.len() * unit);
            part.push(piece);
            consumed = range.end * unit;
            rest = tail;
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_everything_once() {
        for n in 0..40 {
            for t in 1..6 {
                let r = split_ranges(n, t);
                assert_eq!(r.iter().map(|r| r.len()).sum::<usize>(), n);
                assert!(r.windows(2).all(|w| w[0].end == w[1].start));
            }
        }
    }

    #[test]
    fn buffers_split_along_ranges() {
        let mut bufs = vec![(0..12u8).collect::<Vec<_>>(), (100..112u8).collect()];
        let ranges = split_ranges(6, 4);
        let parts = split_buffers(&mut bufs, &ranges, 2);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[1][0], &[4, 5, 6, 7]);
        assert_eq!(parts[2][1], &[108, 109, 110, 111]);
    }
}
