//! eckpt's erasure codec: GF(2^8) arithmetic (polynomial 0x11D), the generator matrices of
//! ISA-L (`gf_gen_cauchy1_matrix`, `gf_gen_rs_matrix`), and the operations checkpoint
//! protection needs — full-stripe encode, one shard's contribution (pipeline step and parity
//! update), and decode of up to `m` erasures. No I/O: callers own the buffers.
//!
//! Kernels come from ISA-L built from source (feature `isal`, on by default), so output is
//! byte-identical to ISA-L's for the same matrix; [`reference`] holds portable kernels used
//! as a test oracle and as the fallback.

mod code;
pub mod gf;
#[cfg(all(feature = "isal", target_arch = "x86_64"))]
mod gfni;
mod kernel;
mod linear;
pub mod matrix;
pub mod reference;

pub use code::{Code, Decoder, MAX_SHARDS};
pub use kernel::{is_native, kernel_name};
pub use linear::LinearMap;
pub use matrix::CodeKind;

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
}
