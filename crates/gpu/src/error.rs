//! What can go wrong on the way to the GPU, one variant each (chapter *Attention on a GPU*).

use attention::error::AttentionError;
use thiserror::Error;

/// The result of the GPU functions.
pub type Result<T> = std::result::Result<T, GpuError>;

/// An error of the GPU path: no adapter, a problem too big for the device, shapes that do not
/// fit (the plain path's own errors), or the device reporting a failure.
///
/// ```
/// use gpu::GpuError;
///
/// let err = GpuError::TooLarge { what: "k", bytes: 1 << 31, limit: 1 << 27 };
/// assert_eq!(
///     err.to_string(),
///     "k needs a buffer of 2147483648 bytes but this device binds at most 134217728"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GpuError {
    /// No Vulkan adapter was found (no driver, or no device).
    #[error(
        "no GPU adapter: {reason}. Install a Vulkan driver; on a machine without a GPU, Mesa's \
         software one runs the kernels on the CPU (Debian/Ubuntu: apt-get install \
         mesa-vulkan-drivers); on macOS this build has no backend (wgpu's Vulkan there needs \
         MoltenVK and its vulkan-portability feature)"
    )]
    NoAdapter {
        /// What wgpu said.
        reason: String,
    },
    /// The adapter was found but would not give a device.
    #[error("the adapter {adapter} refused a device: {reason}")]
    Device {
        /// The adapter's name.
        adapter: String,
        /// What wgpu said.
        reason: String,
    },
    /// The shapes (or the mask) do not fit together: the plain path's error.
    #[error(transparent)]
    Shape(#[from] AttentionError),
    /// A head is wider than the kernels' per-invocation arrays.
    #[error("{what} = {size} but the GPU kernels take heads of at most {max} numbers")]
    HeadTooWide {
        /// `"d_k"` or `"d_v"`.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The kernels' `MAX_D`.
        max: usize,
    },
    /// A tensor is larger than one storage buffer may be on this device.
    #[error("{what} needs a buffer of {bytes} bytes but this device binds at most {limit}")]
    TooLarge {
        /// `"q"`, `"k"`, `"v"`, `"mask"` or `"output"`.
        what: &'static str,
        /// The bytes it needs.
        bytes: u64,
        /// `max_storage_buffer_binding_size` (or `max_buffer_size`, whichever is smaller).
        limit: u64,
    },
    /// More workgroups along one axis than the device dispatches.
    #[error("{what} = {count} workgroups but this device dispatches at most {limit} per axis")]
    TooManyWorkgroups {
        /// What the axis counts, e.g. `"query blocks"`.
        what: &'static str,
        /// How many were needed.
        count: usize,
        /// `max_compute_workgroups_per_dimension`.
        limit: u32,
    },
    /// The tiled kernel's tiles do not fit in this device's workgroup memory.
    #[error(
        "the tiled kernel's tiles take {needed} bytes of workgroup memory at d_k = {d_k}, \
         d_v = {d_v}, but this device on {adapter} allows {available}"
    )]
    WorkgroupMemory {
        /// The adapter's name.
        adapter: String,
        /// The queries' and keys' width.
        d_k: usize,
        /// The values' width.
        d_v: usize,
        /// The bytes the K and V tiles take: [`tile_bytes`](crate::tile_bytes).
        needed: u32,
        /// `max_compute_workgroup_storage_size`.
        available: u32,
    },
    /// A problem too long for Mesa's software Vulkan, which would stop the kernel's loops
    /// early and return wrong numbers ([`LAVAPIPE_LOOP_LIMIT`](crate::LAVAPIPE_LOOP_LIMIT)).
    #[error(
        "the {kernel} kernel would make up to {needed} loop iterations per invocation, and \
         lavapipe (Mesa's software Vulkan) stops an invocation's loops after {limit}, which \
         would leave the output wrong: use fewer keys or narrower heads, a real GPU, or the \
         CPU's tiled path"
    )]
    LoopBudget {
        /// `"naive"` or `"tiled"`.
        kernel: &'static str,
        /// [`loop_iterations`](crate::loop_iterations) for the problem.
        needed: u64,
        /// [`LAVAPIPE_LOOP_LIMIT`](crate::LAVAPIPE_LOOP_LIMIT).
        limit: u64,
    },
    /// The device reported an error while running (validation, out of memory, lost device).
    #[error("the GPU reported an error: {0}")]
    Run(String),
}
