//! A systematic `k + m` erasure code: shards `0..k` are data, `k..k+m` parity.

use crate::matrix::{self, CodeKind};
use crate::{CodecError, Kernel, LinearMap};

/// Largest shard count a GF(2^8) code supports.
pub const MAX_SHARDS: usize = 256;

/// An erasure code ready to encode: the generator matrix and the parity map `X` (the bottom
/// `m × k` of the generator) expanded for the kernel.
#[derive(Debug, Clone)]
pub struct Code {
    kind: CodeKind,
    k: usize,
    m: usize,
    generator: Vec<u8>,
    parity: LinearMap,
}

impl Code {
    /// A `k + m` code of the given kind, for the process's kernel ([`crate::kernel`]).
    /// Refuses shapes the field cannot hold, and an `ECKPT_ISA` this CPU cannot run.
    pub fn new(kind: CodeKind, k: usize, m: usize) -> Result<Code, CodecError> {
        Code::with_kernel(kind, k, m, crate::kernel()?)
    }

    /// A `k + m` code whose encodes, updates and decoders use `kernel` (tests compare every
    /// kernel the CPU has).
    pub fn with_kernel(kind: CodeKind, k: usize, m: usize, kernel: Kernel) -> Result<Code, CodecError> {
        if k == 0 || m == 0 || k + m > MAX_SHARDS {
            return Err(CodecError::Shape(format!(
                "k={k}, m={m}: need k ≥ 1, m ≥ 1 and k + m ≤ {MAX_SHARDS}"
            )));
        }
        let generator = matrix::generator(kind, k, m);
        let parity = LinearMap::with_kernel(kernel, m, k, generator[k * k..].to_vec())?;
        Ok(Code {
            kind,
            k,
            m,
            generator,
            parity,
        })
    }

    /// The generator matrix family.
    pub fn kind(&self) -> CodeKind {
        self.kind
    }

    /// Data shards per stripe.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Parity shards per stripe (erasures tolerated).
    pub fn m(&self) -> usize {
        self.m
    }

    /// The `(k + m) × k` generator, row-major (what ISA-L's `gf_gen_*_matrix` fills).
    pub fn generator(&self) -> &[u8] {
        &self.generator
    }

    /// The parity map `X` (`m × k`): parity `i` = `Σ_j X_ij · D_j`.
    pub fn parity_map(&self) -> &LinearMap {
        &self.parity
    }

    /// Full-stripe encode: fills the `m` parity buffers from the `k` data buffers.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodecError> {
        self.parity.apply(data, parity)
    }

    /// Adds data shard `j`'s contribution to the `m` parity (or partial parity) buffers:
    /// `P_i ^= X_ij · D_j`. Called with `D_j` it is one hop of the encode pipeline; called with
    /// `old ⊕ new` it updates existing parity for a changed data shard.
    pub fn add_data_contribution(
        &self,
        j: usize,
        data_j: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodecError> {
        self.parity.accumulate(j, data_j, parity)
    }

    /// A decoder rebuilding the shards in `erased` (indices in `0..k+m`) from `k` survivors.
    /// Fails if more than `m` are erased or, for codes that are not MDS, no `k` of the
    /// remaining shards have an invertible matrix.
    pub fn decoder(&self, erased: &[usize]) -> Result<Decoder, CodecError> {
        let n = self.k + self.m;
        let mut erased: Vec<usize> = erased.to_vec();
        erased.sort_unstable();
        erased.dedup();
        if let Some(&bad) = erased.iter().find(|&&e| e >= n) {
            return Err(CodecError::Shape(format!("shard {bad} outside 0..{n}")));
        }
        if erased.len() > self.m {
            return Err(CodecError::TooManyErasures {
                erased: erased.len(),
                m: self.m,
            });
        }
        if erased.is_empty() {
            return Err(CodecError::Shape("nothing to decode: no shard is erased".into()));
        }
        let available: Vec<usize> = (0..n).filter(|i| !erased.contains(i)).collect();
        let (survivors, b_inv) = self.invertible_survivors(&available)?;
        let k = self.k;
        // Row for each erased shard: a data shard's row of B⁻¹, or for a parity shard its
        // generator row times B⁻¹ (re-encode from the rebuilt data, in one step).
        let mut rows = Vec::with_capacity(erased.len() * k);
        for &e in &erased {
            if e < k {
                rows.extend_from_slice(&b_inv[e * k..(e + 1) * k]);
            } else {
                rows.extend(matrix::multiply(
                    &self.generator[e * k..(e + 1) * k],
                    &b_inv,
                    1,
                    k,
                    k,
                ));
            }
        }
        Ok(Decoder {
            erased,
            survivors,
            map: LinearMap::with_kernel(self.parity.kernel(), rows.len() / k, k, rows)?,
        })
    }

    /// Picks `k` of the `available` shards whose generator rows are invertible and returns
    /// them with the inverse. The first `k` always work for Cauchy codes; for `rs` codes,
    /// which are not MDS, other subsets are tried (in lexicographic order, a bounded number)
    /// so that a decodable pattern is not refused just because the first choice is singular.
    fn invertible_survivors(&self, available: &[usize]) -> Result<(Vec<usize>, Vec<u8>), CodecError> {
        const MAX_ATTEMPTS: usize = 4096;
        let k = self.k;
        let mut pick: Vec<usize> = (0..k).collect(); // positions in `available`
        for _ in 0..MAX_ATTEMPTS {
            let survivors: Vec<usize> = pick.iter().map(|&p| available[p]).collect();
            let rows: Vec<u8> = survivors
                .iter()
                .flat_map(|&s| &self.generator[s * k..(s + 1) * k])
                .copied()
                .collect();
            if let Ok(inverse) = matrix::invert(&rows, k) {
                return Ok((survivors, inverse));
            }
            // Next k-combination of 0..available.len().
            let Some(i) = (0..k).rev().find(|&i| pick[i] < available.len() - k + i) else {
                break;
            };
            pick[i] += 1;
            for j in i + 1..k {
                pick[j] = pick[j - 1] + 1;
            }
        }
        Err(CodecError::SingularMatrix)
    }
}

/// The decoders of one code by erasure pattern: inverting a `k × k` matrix per row of a
/// decode would cost more than the row, and the pattern rarely changes within an object.
#[derive(Debug, Clone, Default)]
pub struct DecoderCache {
    decoders: std::collections::HashMap<Vec<usize>, Decoder>,
}

impl DecoderCache {
    /// The decoder of `code` rebuilding `erased` (made once per pattern; every call of one
    /// cache must pass the same code).
    pub fn get(&mut self, code: &Code, erased: &[usize]) -> Result<&Decoder, CodecError> {
        if !self.decoders.contains_key(erased) {
            let decoder = code.decoder(erased)?;
            self.decoders.insert(erased.to_vec(), decoder);
        }
        Ok(&self.decoders[erased])
    }

    /// The decoder already made for `erased`, if any.
    pub fn cached(&self, erased: &[usize]) -> Option<&Decoder> {
        self.decoders.get(erased)
    }
}

/// Rebuilds a fixed set of erased shards from a fixed set of `k` survivors:
/// `lost = Y · survivors`.
#[derive(Debug, Clone)]
pub struct Decoder {
    erased: Vec<usize>,
    survivors: Vec<usize>,
    map: LinearMap,
}

impl Decoder {
    /// The erased shard indices, ascending; outputs come in this order.
    pub fn erased(&self) -> &[usize] {
        &self.erased
    }

    /// The `k` shard indices the decoder reads, ascending; inputs go in this order.
    pub fn survivors(&self) -> &[usize] {
        &self.survivors
    }

    /// The decode map `Y` (`erased × k`).
    pub fn map(&self) -> &LinearMap {
        &self.map
    }

    /// Rebuilds every erased shard from the survivors (in [`Decoder::survivors`] order).
    pub fn decode(&self, survivors: &[&[u8]], erased: &mut [&mut [u8]]) -> Result<(), CodecError> {
        self.map.apply(survivors, erased)
    }

    /// Adds survivor number `s` (position in [`Decoder::survivors`]) to partial results: the
    /// step of a parallel decode where each survivor computes `Y_ls · B_s` and the sum is
    /// reduced toward the node that rebuilds.
    pub fn add_survivor_contribution(
        &self,
        s: usize,
        survivor: &[u8],
        erased: &mut [&mut [u8]],
    ) -> Result<(), CodecError> {
        self.map.accumulate(s, survivor, erased)
    }
}
