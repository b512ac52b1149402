//! Property tests: the fast kernels agree with the portable reference, and every pattern of at
//! most `m` erasures decodes byte-exact (or, for `rs` codes, is refused as singular only when
//! the survivors' matrix really is singular).

use eckpt_codec::{matrix, reference, Code, CodeKind, CodecError};
use proptest::prelude::*;

fn kind_strategy() -> impl Strategy<Value = CodeKind> {
    prop_oneof![Just(CodeKind::Cauchy), Just(CodeKind::Rs)]
}

/// (kind, k, m, shard length, data bytes, erasure set)
fn case() -> impl Strategy<Value = (CodeKind, usize, usize, usize, Vec<u8>, Vec<usize>)> {
    (kind_strategy(), 1usize..=32, 1usize..=4, 1usize..=700).prop_flat_map(|(kind, k, m, len)| {
        let data = proptest::collection::vec(any::<u8>(), k * len);
        let erased = proptest::sample::subsequence((0..k + m).collect::<Vec<_>>(), 1..=m);
        (Just(kind), Just(k), Just(m), Just(len), data, erased)
    })
}

/// All `k`-element subsets of `items`, in lexicographic order.
fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![vec![]];
    }
    if items.len() < k {
        return vec![];
    }
    let mut with_first: Vec<Vec<usize>> = combinations(&items[1..], k - 1)
        .into_iter()
        .map(|mut rest| {
            rest.insert(0, items[0]);
            rest
        })
        .collect();
    with_first.extend(combinations(&items[1..], k));
    with_first
}

fn encode(code: &Code, data: &[u8], len: usize) -> Vec<Vec<u8>> {
    let shards: Vec<&[u8]> = data.chunks(len).collect();
    let mut parity = vec![vec![0u8; len]; code.m()];
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    code.encode(&shards, &mut outs).unwrap();
    shards.iter().map(|s| s.to_vec()).chain(parity).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn encode_matches_reference_kernels((kind, k, m, len, data, _erased) in case()) {
        let code = Code::new(kind, k, m).unwrap();
        let all = encode(&code, &data, len);
        let shards: Vec<&[u8]> = data.chunks(len).collect();
        let mut expected = vec![vec![0u8; len]; m];
        let mut outs: Vec<&mut [u8]> = expected.iter_mut().map(|p| p.as_mut_slice()).collect();
        reference::apply(&code.generator()[k * k..], k, &shards, &mut outs);
        prop_assert_eq!(&all[k..], &expected[..]);
    }

    #[test]
    fn any_erasures_up_to_m_decode_byte_exact((kind, k, m, len, data, erased) in case()) {
        let code = Code::new(kind, k, m).unwrap();
        let all = encode(&code, &data, len);
        match code.decoder(&erased) {
            Ok(decoder) => {
                let inputs: Vec<&[u8]> = decoder.survivors().iter().map(|&s| all[s].as_slice()).collect();
                let mut rebuilt = vec![vec![0xA5u8; len]; erased.len()];
                let mut outs: Vec<&mut [u8]> = rebuilt.iter_mut().map(|p| p.as_mut_slice()).collect();
                decoder.decode(&inputs, &mut outs).unwrap();
                for (out, &e) in rebuilt.iter().zip(decoder.erased()) {
                    prop_assert_eq!(out, &all[e], "shard {} rebuilt wrong", e);
                }
            }
            Err(CodecError::SingularMatrix) => {
                prop_assert_eq!(kind, CodeKind::Rs, "a Cauchy code must decode every pattern");
                // Refusal is right only if no k of the remaining shards are invertible.
                let available: Vec<usize> = (0..k + m).filter(|i| !erased.contains(i)).collect();
                for subset in combinations(&available, k).into_iter().take(4096) {
                    let rows: Vec<u8> = subset.iter().flat_map(|&s| code.generator()[s * k..(s + 1) * k].to_vec()).collect();
                    prop_assert!(matrix::invert(&rows, k).is_err(), "survivors {:?} were decodable", subset);
                }
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn parity_update_equals_full_reencode((kind, k, m, len, data, _erased) in case(), j_seed in any::<usize>(), new_seed in any::<u64>()) {
        let code = Code::new(kind, k, m).unwrap();
        let mut all = encode(&code, &data, len);
        let j = j_seed % k;
        let mut state = new_seed | 1;
        let new: Vec<u8> = (0..len).map(|_| { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state as u8 }).collect();
        let delta: Vec<u8> = all[j].iter().zip(&new).map(|(a, b)| a ^ b).collect();
        {
            let (_, parity) = all.split_at_mut(k);
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            code.add_data_contribution(j, &delta, &mut outs).unwrap();
        }
        let mut changed = data.clone();
        changed[j * len..(j + 1) * len].copy_from_slice(&new);
        let fresh = encode(&code, &changed, len);
        prop_assert_eq!(&all[k..], &fresh[k..]);
    }

    #[test]
    fn pipeline_of_contributions_equals_encode((kind, k, m, len, data, _erased) in case()) {
        let code = Code::new(kind, k, m).unwrap();
        let all = encode(&code, &data, len);
        let mut partial = vec![vec![0u8; len]; m];
        for (j, shard) in data.chunks(len).enumerate() {
            let mut outs: Vec<&mut [u8]> = partial.iter_mut().map(|p| p.as_mut_slice()).collect();
            code.add_data_contribution(j, shard, &mut outs).unwrap();
        }
        prop_assert_eq!(&all[k..], &partial[..]);
    }
}

#[test]
fn more_than_m_erasures_are_refused() {
    let code = Code::new(CodeKind::Cauchy, 6, 2).unwrap();
    assert_eq!(
        code.decoder(&[0, 3, 7]).unwrap_err(),
        CodecError::TooManyErasures { erased: 3, m: 2 }
    );
}

#[test]
fn parallel_decode_by_survivor_contributions_equals_decode() {
    let (k, m, len) = (5, 3, 4096);
    let code = Code::new(CodeKind::Cauchy, k, m).unwrap();
    let data: Vec<u8> = (0..k * len).map(|i| (i * 31 % 251) as u8).collect();
    let all = encode(&code, &data, len);
    let decoder = code.decoder(&[1, 4, 6]).unwrap();
    let mut partial = vec![vec![0u8; len]; 3];
    for (s, &idx) in decoder.survivors().iter().enumerate() {
        let mut outs: Vec<&mut [u8]> = partial.iter_mut().map(|p| p.as_mut_slice()).collect();
        decoder
            .add_survivor_contribution(s, &all[idx], &mut outs)
            .unwrap();
    }
    assert_eq!(partial, vec![all[1].clone(), all[4].clone(), all[6].clone()]);
}

#[test]
fn threaded_encode_equals_single_threaded() {
    let (k, m, len) = (10, 4, 1 << 20 | 333);
    let code = Code::new(CodeKind::Cauchy, k, m).unwrap();
    let data: Vec<u8> = (0..k * len)
        .map(|i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) as u8)
        .collect();
    let single = encode(&code, &data, len);
    let shards: Vec<&[u8]> = data.chunks(len).collect();
    let mut threaded = vec![vec![0u8; len]; m];
    let mut outs: Vec<&mut [u8]> = threaded.iter_mut().map(|p| p.as_mut_slice()).collect();
    code.parity_map().apply_threaded(&shards, &mut outs, 3).unwrap();
    assert_eq!(&single[k..], &threaded[..]);
}

#[test]
fn rs_decoder_looks_past_a_singular_first_choice_of_survivors() {
    // ISA-L's rs matrix for k=8, m=8 with these 7 shards lost: the first 8 survivors are
    // linearly dependent, yet another 8 of the 9 are not, so the data is recoverable.
    let (k, m, len) = (8, 8, 256);
    let lost = [1, 4, 5, 8, 10, 12, 13];
    let code = Code::new(CodeKind::Rs, k, m).unwrap();
    let first: Vec<usize> = (0..k + m).filter(|i| !lost.contains(i)).take(k).collect();
    let rows: Vec<u8> = first
        .iter()
        .flat_map(|&s| code.generator()[s * k..(s + 1) * k].to_vec())
        .collect();
    assert!(
        matrix::invert(&rows, k).is_err(),
        "the first choice must be singular for this test to mean anything"
    );

    let data: Vec<u8> = (0..k * len).map(|i| (i * 7 + 3) as u8).collect();
    let all = encode(&code, &data, len);
    let decoder = code
        .decoder(&lost)
        .expect("another subset of survivors is invertible");
    assert_ne!(decoder.survivors(), first.as_slice());
    let inputs: Vec<&[u8]> = decoder.survivors().iter().map(|&s| all[s].as_slice()).collect();
    let mut out = vec![vec![0u8; len]; lost.len()];
    let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
    decoder.decode(&inputs, &mut outs).unwrap();
    let expected: Vec<Vec<u8>> = lost.iter().map(|&l| all[l].clone()).collect();
    assert_eq!(out, expected);
}
