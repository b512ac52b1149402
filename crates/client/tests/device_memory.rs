//! Device memory through the Rust API, on the host-memory implementation of the device layer
//! (the CUDA one is exercised by `scripts/gpu-check.sh` on a machine with a GPU): the first
//! epoch saves the region whole, later ones only the blocks whose fingerprint changed, restart
//! fills the region in place through the staging buffer, and a region of another size is
//! refused before anything is touched.

use std::path::Path;

mod common;

use common::{fill, RANK};
use eckpt::{Checkpointer, Config, Error, TrackMode};
use eckpt_gpu::HostMemory;

const BLOCK: usize = 4096;

fn config(dir: &Path) -> Config {
    common::config(dir, TrackMode::Hash)
}

/// The stored blocks of device region `name` in `epoch`, and whether the epoch holds it whole.
fn stored(dir: &Path, epoch: u64, name: &str) -> (usize, bool) {
    let store = eckpt_store::Store::open(dir).unwrap();
    let manifest = store.manifest(RANK, epoch).unwrap();
    let item = manifest
        .items
        .iter()
        .find(|i| i.name == format!("gpu/{name}"))
        .unwrap_or_else(|| panic!("epoch {epoch} has no item gpu/{name}"));
    (item.blocks.len(), item.blocks.len() as u64 == item.block_count())
}

#[test]
fn device_regions_save_changed_blocks_and_restore_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    // 40 blocks and a short one: the last block's length is not the block size.
    let len = 40 * BLOCK + 1000;
    let mut weights = vec![0u8; len];
    fill(&mut weights, 1);
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    // SAFETY: `weights` outlives the checkpointer and is not moved.
    unsafe { ck.protect_on(&HostMemory, "w", weights.as_mut_ptr() as u64, len as u64) }.unwrap();
    assert_eq!(ck.restart().unwrap(), None);
    assert_eq!(ck.checkpoint().unwrap(), 1);
    assert_eq!(stored(tmp.path(), 1, "w"), (41, true), "the first epoch is whole");

    // Three blocks change, one of them the short last block.
    for at in [5 * BLOCK + 7, 6 * BLOCK, len - 1] {
        weights[at] ^= 0x5A;
    }
    assert_eq!(ck.checkpoint().unwrap(), 2);
    assert_eq!(
        stored(tmp.path(), 2, "w"),
        (3, false),
        "only changed blocks are stored"
    );
    assert_eq!(ck.checkpoint().unwrap(), 3);
    assert_eq!(stored(tmp.path(), 3, "w").0, 0, "nothing changed, nothing stored");
    let expected = weights.clone();

    // The job goes on, then dies: a new process restarts into fresh memory.
    fill(&mut weights, 2);
    drop(ck);
    let mut fresh = vec![0xEEu8; len];
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    // SAFETY: as above.
    unsafe { ck.protect_on(&HostMemory, "w", fresh.as_mut_ptr() as u64, len as u64) }.unwrap();
    assert_eq!(ck.restart().unwrap(), Some(3));
    assert!(fresh == expected, "the restored region differs from epoch 3");

    // The restored memory is the next delta's baseline: one changed block is one stored block.
    fresh[0] ^= 1;
    assert_eq!(ck.checkpoint().unwrap(), 4);
    assert_eq!(stored(tmp.path(), 4, "w"), (1, false));
}

/// A restart reads every region at once, in pieces shared by a pool of threads, and starts
/// each device piece's copy as soon as it is read: regions spanning several pieces (one with
/// a short last piece), beside a host region, are restored byte for byte.
#[test]
fn regions_larger_than_a_read_piece_are_restored_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let lens = [(20 << 20) + 3 * BLOCK, 17 << 20];
    let mut devices: Vec<Vec<u8>> = lens.iter().map(|&len| vec![0u8; len]).collect();
    let mut host = vec![0u8; (5 << 20) + 123];
    for (seed, memory) in devices.iter_mut().chain([&mut host]).enumerate() {
        fill(memory, seed as u64 + 7);
    }
    let protect = |ck: &mut Checkpointer, devices: &mut [Vec<u8>], host: &mut Vec<u8>| {
        for (i, memory) in devices.iter_mut().enumerate() {
            // SAFETY: the regions outlive the checkpointer and are not moved.
            unsafe {
                ck.protect_on(
                    &HostMemory,
                    &format!("d{i}"),
                    memory.as_mut_ptr() as u64,
                    memory.len() as u64,
                )
            }
            .unwrap();
        }
        // SAFETY: as above.
        unsafe { ck.protect("h", host.as_mut_ptr(), host.len()) }.unwrap();
    };
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    protect(&mut ck, &mut devices, &mut host);
    assert_eq!(ck.checkpoint().unwrap(), 1);
    // A delta over every piece of each region.
    for memory in devices.iter_mut().chain([&mut host]) {
        for at in (0..memory.len()).step_by(3 << 20).chain([memory.len() - 1]) {
            memory[at] ^= 0x77;
        }
    }
    assert_eq!(ck.checkpoint().unwrap(), 2);
    drop(ck);
    let (expected_devices, expected_host) = (devices.clone(), host.clone());

    let mut fresh: Vec<Vec<u8>> = lens.iter().map(|&len| vec![0xEEu8; len]).collect();
    let mut fresh_host = vec![0xEEu8; host.len()];
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    protect(&mut ck, &mut fresh, &mut fresh_host);
    assert_eq!(ck.restart().unwrap(), Some(2));
    for (i, (got, want)) in fresh.iter().zip(&expected_devices).enumerate() {
        assert!(got == want, "device region d{i} differs from epoch 2");
    }
    assert!(
        fresh_host == expected_host,
        "the host region differs from epoch 2"
    );
}

#[test]
fn a_device_region_of_another_size_is_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let mut saved = vec![7u8; 8 * BLOCK];
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    // SAFETY: `saved` outlives the checkpointer.
    unsafe { ck.protect_on(&HostMemory, "w", saved.as_mut_ptr() as u64, saved.len() as u64) }.unwrap();
    ck.checkpoint().unwrap();
    drop(ck);

    let mut other = vec![1u8; 9 * BLOCK];
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    // SAFETY: `other` outlives the checkpointer.
    unsafe { ck.protect_on(&HostMemory, "w", other.as_mut_ptr() as u64, other.len() as u64) }.unwrap();
    let err = ck.restart().unwrap_err();
    assert!(matches!(err, Error::Mismatch(_)), "{err}");
    assert!(
        err.to_string()
            .contains("\"w\" is 36864 bytes but epoch 1 saved 32768"),
        "{err}"
    );
    assert!(
        other.iter().all(|&b| b == 1),
        "a refused restart wrote into the region"
    );

    // A byte is protected once: a range overlapping a device region is refused.
    // SAFETY: refused before the range is used.
    let overlapping = unsafe { ck.protect_on(&HostMemory, "v", other.as_ptr() as u64 + 100, 10) };
    assert!(
        matches!(&overlapping, Err(Error::Invalid(m)) if m.contains("overlaps region \"w\"")),
        "{overlapping:?}"
    );

    // A name is one region, host or device.
    // SAFETY: only the name is checked; nothing is attached.
    let again = unsafe { ck.protect("w", other.as_mut_ptr(), other.len()) };
    assert!(matches!(again, Err(Error::Invalid(_))));
}

#[test]
fn without_a_cuda_driver_protecting_device_memory_says_so() {
    if eckpt_gpu::Cuda::open().is_ok() {
        eprintln!("skipped: this machine has a CUDA driver (scripts/gpu-check.sh covers it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    // SAFETY: refused before the pointer is used.
    let err = unsafe { ck.protect_device("w", 0x7000_0000, 4096) }.unwrap_err();
    assert_eq!(err.code(), eckpt::capi::ECKPT_EDEVICE);
    assert!(err.to_string().starts_with("no CUDA device: "), "{err}");
    assert!(err.to_string().contains("libcuda.so.1"), "{err}");
}

#[test]
fn in_the_background_an_epoch_holds_the_bytes_of_its_call_and_commits_by_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let background = || Config {
        background: true,
        ..config(tmp.path())
    };
    let len = 64 * BLOCK;
    let mut state = vec![0u8; len];
    fill(&mut state, 3);
    let mut ck = Checkpointer::new(background()).unwrap();
    // SAFETY: `state` outlives the checkpointer and is not moved.
    unsafe { ck.protect_on(&HostMemory, "s", state.as_mut_ptr() as u64, len as u64) }.unwrap();
    let mut epochs = Vec::new();
    for step in 0..5u8 {
        // The job writes its state again right after each call returns: the epoch must hold
        // what the memory was at the call, not what the thread may see later.
        let epoch = ck.checkpoint().unwrap();
        epochs.push((epoch, state.clone()));
        for block in [step as usize, 10 + 3 * step as usize, 63] {
            state[block * BLOCK + 11] = state[block * BLOCK + 11].wrapping_add(1);
        }
    }
    // `wait()` returns once the last one is committed.
    assert_eq!(ck.wait().unwrap(), Some(5));
    let (last, expected) = epochs.last().unwrap().clone();
    assert_eq!(
        stored(tmp.path(), last, "s"),
        (3, false),
        "background epochs are deltas too"
    );
    drop(ck);

    let mut fresh = vec![0u8; len];
    let mut ck = Checkpointer::new(background()).unwrap();
    // SAFETY: as above.
    unsafe { ck.protect_on(&HostMemory, "s", fresh.as_mut_ptr() as u64, len as u64) }.unwrap();
    assert_eq!(ck.restart().unwrap(), Some(last));
    assert!(
        fresh == expected,
        "the restored epoch is not the state at its checkpoint call"
    );

    // Dropping the checkpointer right after a call still completes that epoch.
    fresh[5] ^= 1;
    assert_eq!(ck.checkpoint().unwrap(), last + 1);
    let expected = fresh.clone();
    fresh[5] ^= 1;
    drop(ck);
    let mut again = vec![0u8; len];
    let mut ck = Checkpointer::new(config(tmp.path())).unwrap();
    // SAFETY: as above.
    unsafe { ck.protect_on(&HostMemory, "s", again.as_mut_ptr() as u64, len as u64) }.unwrap();
    assert_eq!(ck.restart().unwrap(), Some(last + 1));
    assert!(again == expected);
}
