//! eckpt's codes against Debian's own ISA-L (`libisal2`, loaded at run time): the same
//! generator matrices, and parity byte-equal to its `ec_encode_data` and
//! `ec_encode_data_update` with every kernel this CPU runs.
//! Set `ECKPT_REQUIRE_SYSTEM_ISAL=1` (CI does) to make a missing library a failure, not a skip.

use eckpt_codec::{supported_kernels, Code, CodeKind};
use eckpt_system_isal::SystemIsal;

fn system_isal() -> Option<SystemIsal> {
    match SystemIsal::load() {
        Ok(lib) => Some(lib),
        Err(e) if std::env::var_os("ECKPT_REQUIRE_SYSTEM_ISAL").is_some() => panic!("{e}"),
        Err(e) => {
            eprintln!("SKIPPED: {e} (apt-get install libisal2)");
            None
        }
    }
}

fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

#[test]
fn generator_matrices_equal_isal() {
    let Some(isal) = system_isal() else { return };
    for k in 1..=32 {
        for m in 1..=8 {
            for (kind, cauchy) in [(CodeKind::Cauchy, true), (CodeKind::Rs, false)] {
                let ours = Code::new(kind, k, m).unwrap();
                assert_eq!(
                    ours.generator(),
                    isal.generator(cauchy, k, m).as_slice(),
                    "{kind:?} k={k} m={m}"
                );
            }
        }
    }
}

#[test]
fn parity_and_update_equal_isal_with_every_kernel() {
    let Some(isal) = system_isal() else { return };
    for kernel in supported_kernels() {
        parity_and_update_equal_isal(&isal, kernel);
    }
}

fn parity_and_update_equal_isal(isal: &SystemIsal, kernel: eckpt_codec::Kernel) {
    for (k, m, len) in [
        (10, 4, 1 << 16),
        (4, 2, 100_003),
        (32, 4, 4096),
        (3, 1, 77),
        (17, 3, 65_537),
        (20, 8, 100_000),
        (5, 6, 4096),
    ] {
        for kind in [CodeKind::Cauchy, CodeKind::Rs] {
            let code = Code::with_kernel(kind, k, m, kernel).unwrap();
            let data = pseudo_random(k * len, (k * 1000 + m) as u64);
            let shards: Vec<&[u8]> = data.chunks(len).collect();
            let tables = isal.init_tables(k, m, &code.generator()[k * k..]);

            let mut ours = vec![vec![0u8; len]; m];
            let mut theirs = vec![vec![0u8; len]; m];
            code.encode(
                &shards,
                &mut ours.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
            )
            .unwrap();
            isal.encode(
                &tables,
                &shards,
                &mut theirs.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
            );
            assert_eq!(ours, theirs, "{kernel}: {kind:?} k={k} m={m} encode");

            let delta = pseudo_random(len, 99);
            let j = k / 2;
            code.add_data_contribution(
                j,
                &delta,
                &mut ours.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
            )
            .unwrap();
            isal.update(
                &tables,
                k,
                j,
                &delta,
                &mut theirs.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
            );
            assert_eq!(ours, theirs, "{kernel}: {kind:?} k={k} m={m} update");
        }
    }
}
