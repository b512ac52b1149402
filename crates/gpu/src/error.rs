//! Why device memory could not be protected, scanned, copied or restored.

/// A failure of the device layer. Each variant names what failed so that a caller can say
/// "no GPU here" apart from "this pointer is not device memory" and "the driver failed".
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No usable CUDA driver (or no NVRTC to compile the kernels): the machine has no NVIDIA
    /// GPU, or its libraries are not on the loader's path.
    #[error("no CUDA device: {0}")]
    Unavailable(String),
    /// The range given is not memory of one device allocation, or the block size is unusable.
    #[error("device region: {0}")]
    InvalidRegion(String),
    /// A driver call failed: the call and the driver's own name for the error.
    #[error("CUDA {call}: {error}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// `cuGetErrorName`'s and `cuGetErrorString`'s words.
        error: String,
    },
    /// NVRTC could not compile the kernels (its log is included).
    #[error("compiling the fingerprint kernel: {0}")]
    Compile(String),
}
