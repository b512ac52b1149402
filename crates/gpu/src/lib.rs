//! GPU memory a rank protects: found changed on the device, copied over the bus only where it
//! changed, put back in place at restart.
//!
//! - [`fingerprint`]: the per-block fingerprint, defined once (the host reference of the GPU
//!   kernel).
//! - [`Device`] / [`DeviceRegion`]: what the client needs from memory it protects by address,
//!   and [`stage_changes`], the checkpoint path over them.
//! - [`Cuda`]: NVIDIA GPUs, the driver API and NVRTC loaded at run time, so that nothing of
//!   CUDA is needed to build, and a machine without a GPU says so when asked to protect one.
//! - [`HostMemory`]: the same path over host memory; the tests of the whole path run on it.
//! - [`DeviceMirror`]: host copies of device memory kept current by copying what changed, the
//!   staging area of background saves of GPU tensors.

mod cuda;
mod device;
mod error;
pub mod fingerprint;
mod host;
mod mirror;

pub use cuda::Cuda;
pub use device::{stage_changes, Changes, Device, DeviceRegion, Staged};
pub use error::GpuError;
pub use host::HostMemory;
pub use mirror::{DeviceMirror, DeviceRefreshed};
