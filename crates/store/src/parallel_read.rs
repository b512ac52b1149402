//! Reading whole items of one epoch with a pool of threads, piece by piece, each piece
//! reported to the caller as soon as it is in its buffer.
//!
//! A restart reads gigabytes: one core reads (and checks) a few GB/s out of a tmpfs store, so
//! the pieces of all the items are shared among the cores. Reporting each piece as it lands
//! lets the caller move it on — a GPU region's image travels over the bus piece by piece,
//! while the rest is still being read — so that the copy adds one piece's time, not one
//! item's, to the restart.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

use crate::error::{Result, StoreError};
use crate::read::Chain;

/// Bytes a thread reads (and checks) before it reports them: small enough that the copy of
/// the last piece adds little to a restart, large enough that a report per piece costs
/// nothing next to its reading.
const PIECE: usize = 16 << 20;

/// One piece of one item's buffer.
struct Piece<'a> {
    item: usize,
    offset: usize,
    buf: &'a mut [u8],
}

/// Fills each `items[i].1` with the whole item `items[i].0` of `chain`'s epoch (the buffers
/// have the items' lengths), with up to `threads` threads. `landed(i, range)` is called on
/// the calling thread for every piece of item `i` once its bytes are in place and verified;
/// the ranges of an item cover it exactly once, in no set order. The first error — a read,
/// or `landed`'s — stops the threads from starting new pieces and `landed` from being
/// called, and is returned once the pieces under way are done (none still writes a buffer
/// when this returns).
pub(crate) fn read_items<E: From<StoreError>>(
    chain: &Chain,
    items: Vec<(&str, &mut [u8])>,
    threads: usize,
    landed: &mut dyn FnMut(usize, Range<usize>) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let names: Vec<&str> = items.iter().map(|(name, _)| *name).collect();
    let pieces: Vec<Piece> = items
        .into_iter()
        .enumerate()
        .flat_map(|(item, (_, buf))| {
            buf.chunks_mut(PIECE).enumerate().map(move |(k, buf)| Piece {
                item,
                offset: k * PIECE,
                buf,
            })
        })
        .collect();
    let threads = threads.clamp(1, pieces.len().max(1));
    if threads == 1 {
        // One thread: the calling one (a small item, the metadata, a file), no pool.
        for piece in pieces {
            let range = piece.offset..piece.offset + piece.buf.len();
            chain.read_padded(names[piece.item], piece.offset as u64, piece.buf)?;
            landed(piece.item, range)?;
        }
        return Ok(());
    }
    let queue = Mutex::new(pieces.into_iter());
    let stop = AtomicBool::new(false);
    let (report, reports) = mpsc::channel::<Result<(usize, Range<usize>)>>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (queue, stop, names, report) = (&queue, &stop, &names, report.clone());
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // The queue's lock is only held to take a piece; a thread that panicked
                    // there aborts the process (crash-only), so a poisoned lock is not seen.
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                    let Some(piece) = next else { break };
                    let range = piece.offset..piece.offset + piece.buf.len();
                    let read = chain.read_padded(names[piece.item], piece.offset as u64, piece.buf);
                    if report.send(read.map(|()| (piece.item, range))).is_err() {
                        break;
                    }
                }
            });
        }
        // The calling thread only hears from the readers; the channel closes when the last
        // of them is done.
        drop(report);
        // After an error, what lands is no longer reported: the call fails whatever else
        // was read.
        let mut outcome = Ok(());
        for reported in reports {
            if outcome.is_ok() {
                outcome = reported
                    .map_err(E::from)
                    .and_then(|(item, range)| landed(item, range));
                if outcome.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
        outcome
    })
}
