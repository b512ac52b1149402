//! eckpt's erasure codec: GF(2^8) arithmetic (polynomial 0x11D), the generator matrices of
//! ISA-L (`gf_gen_cauchy1_matrix`, `gf_gen_rs_matrix`), and the operations checkpoint
//! protection needs — full-stripe encode, one shard's contribution (pipeline step and parity
//! update), and decode of up to `m` erasures. No I/O: callers own the buffers.
//!
//! Output is byte-identical to ISA-L's for the same matrix. The kernel is chosen at run time
//! ([`Kernel`], [`kernel`]): on x86-64 eckpt's own, one per ISA level (SSSE3, AVX2,
//! AVX-512, AVX-512 + GFNI), `ECKPT_ISA` forcing a level; elsewhere ISA-L built from source
//! (feature `isal`, on by default); [`reference`] holds portable kernels used as a test
//! oracle and as the last fallback.

mod code;
pub mod gf;
mod isa;
mod kernel;
mod linear;
pub mod matrix;
mod pool;
pub mod reference;
#[cfg(target_arch = "x86_64")]
mod simd;

pub use code::{Code, Decoder, DecoderCache, MAX_SHARDS};
pub use isa::{cpu_isa, kernel, supported_kernels, Kernel, ISA_VARIABLE};
pub use linear::LinearMap;
pub use matrix::CodeKind;
pub use pool::{map_parts_mut, map_ranges};

/// Why a codec operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// More shards are lost than the code has parity.
    #[error("{erased} shards lost but the code tolerates at most m={m}")]
    TooManyErasures {
        /// How many shards are erased.
        erased: usize,
        /// The code's parity count.
        m: usize,
    },
    /// The survivors' generator rows are linearly dependent (possible with `rs` codes).
    #[error(
        "the decode matrix for these survivors is singular (this code is not MDS for this erasure pattern)"
    )]
    SingularMatrix,
    /// Buffer counts or lengths do not fit the code.
    #[error("{0}")]
    Shape(String),
    /// The kernel asked for (`ECKPT_ISA`) cannot run in this process.
    #[error("{0}")]
    Kernel(String),
}
