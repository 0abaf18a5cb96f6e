//! Chapter 14 of *Attention, Step by Step*, *Attention on a GPU*: chapter 8's tiled attention
//! as a WGSL compute shader, run through [`wgpu`] on any Vulkan device, including Mesa's
//! software one ("lavapipe") on a plain CPU.
//!
//! [`Gpu`] holds the device; [`Gpu::attend`] runs one of two [`Kernel`]s on a stack of
//! `(L_q, d_k)`, `(L_k, d_k)`, `(L_k, d_v)` matrices in `f32` and returns what
//! [`attention::sdpa::sdpa_batched`] returns, within a rounding error. [`traffic`] counts what
//! each kernel reads from global memory.
//!
//! The shaders are files of their own: `shaders/common.wgsl` (the bindings, the mask, writing a
//! row), `shaders/naive.wgsl` and `shaders/tiled.wgsl`. Rows travel as `vec4`s: the host pads
//! `d_k` and `d_v` with zeros to a multiple of 4 and drops the output's padding. Anchors (below the doc comments):
//! `kernel` in this file; `new_device`, `checks`, `dispatch` in `run.rs`; `traffic` in `traffic.rs`.

#![warn(missing_docs)]

mod error;
mod run;
pub mod traffic;

pub use error::{GpuError, Result};
pub use run::{LAVAPIPE_LOOP_LIMIT, Timing, loop_iterations};
/// The `wgpu` this crate is built on (for its types, e.g. `wgpu::Limits` in [`Gpu::limits`]).
pub use wgpu;

use std::collections::HashMap;
use std::sync::Mutex;

/// The variable that makes a missing adapter an error in [`Gpu::optional`]: CI sets it, so that
/// the GPU tests fail instead of skipping when its software Vulkan is missing.
pub const REQUIRED_VAR: &str = "ATTENTION_GPU_REQUIRED";

/// The widest head the kernels take: `MAX_D4` vec4s in `shaders/common.wgsl`.
pub const MAX_D: usize = 128;
/// Queries per workgroup in the tiled kernel, and invocations per workgroup in both kernels
/// (`B_Q` in `shaders/common.wgsl`).
pub const B_Q: usize = 64;
/// Keys per tile in the tiled kernel (`B_K` in `shaders/tiled.wgsl`).
pub const B_K: usize = 32;
/// The workgroup memory the tiled kernel's K and V tiles take for heads of `d_k` and `d_v`:
/// `B_K` rows of each, padded to whole `vec4`s, in `f32`. The shader sizes its tiles by the
/// widths the host sets when it makes the pipeline (`override` constants), so a narrow head
/// takes less: 16 KiB at `d = 64`, WebGPU's default, and 32 KiB at [`MAX_D`].
///
/// ```
/// use gpu::{MAX_D, tile_bytes};
///
/// assert_eq!(tile_bytes(64, 64), 16384);
/// assert_eq!(tile_bytes(MAX_D, MAX_D), 32768);
/// assert_eq!(tile_bytes(61, 63), tile_bytes(64, 64)); // rows padded to whole vec4s
/// ```
pub const fn tile_bytes(d_k: usize, d_v: usize) -> u32 {
    (B_K * (d_k.div_ceil(4) + d_v.div_ceil(4)) * 16) as u32
}

/// Which compute shader runs the attention.
///
/// ```
/// use gpu::Kernel;
///
/// assert_eq!(Kernel::Tiled.name(), "tiled");
/// assert_eq!(Kernel::ALL, [Kernel::Naive, Kernel::Tiled]);
/// ```
// ANCHOR: kernel
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// One invocation per query, reading every key and value from global memory itself.
    Naive,
    /// Chapter 8's tiles: a workgroup per block of `B_Q` queries stages each tile of `B_K`
    /// keys and values in workgroup memory, where all its invocations read them.
    Tiled,
}
// ANCHOR_END: kernel

impl Kernel {
    /// Both kernels, naive first.
    pub const ALL: [Kernel; 2] = [Kernel::Naive, Kernel::Tiled];

    /// `"naive"` or `"tiled"`: the entry point's name in the shader.
    ///
    /// ```
    /// assert_eq!(gpu::Kernel::Naive.name(), "naive");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Naive => "naive",
            Kernel::Tiled => "tiled",
        }
    }

    /// The WGSL source of the kernel: `common.wgsl` followed by its own file.
    ///
    /// ```
    /// let source = gpu::Kernel::Tiled.source();
    /// assert!(source.contains("var<workgroup> k_tile"));
    /// assert!(!gpu::Kernel::Naive.source().contains("var<workgroup>"));
    /// ```
    pub fn source(self) -> String {
        let own = match self {
            Kernel::Naive => include_str!("../shaders/naive.wgsl"),
            Kernel::Tiled => include_str!("../shaders/tiled.wgsl"),
        };
        format!("{}\n{own}", include_str!("../shaders/common.wgsl"))
    }
}

/// A GPU device with the two kernels: made once, used for many calls.
///
/// ```
/// # fn main() -> gpu::Result<()> {
/// // `optional` returns None on a machine without any Vulkan adapter (unless
/// // ATTENTION_GPU_REQUIRED is set); `Gpu::new` would return GpuError::NoAdapter.
/// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
/// assert!(!gpu.adapter_name().is_empty());
/// # Ok(())
/// # }
/// ```
pub struct Gpu {
    adapter: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    device: wgpu::Device,
    queue: wgpu::Queue,
    timestamps: bool,
    layout: wgpu::BindGroupLayout,
    pipelines: Mutex<HashMap<(Kernel, usize, usize), wgpu::ComputePipeline>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("adapter", &self.adapter_name()).finish_non_exhaustive()
    }
}

impl Gpu {
    /// The adapter's name and driver, e.g. `"llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, llvmpipe
    /// Mesa 22.3.6 (LLVM 15.0.6))"`: what every measured time should be quoted with.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// assert!(gpu.adapter_name().contains("Vulkan"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn adapter_name(&self) -> String {
        let info = &self.adapter;
        let driver = [info.driver.as_str(), info.driver_info.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        format!("{} ({:?}, {driver})", info.name, info.backend)
    }

    /// The version of Mesa when the driver is one of Mesa's (lavapipe is), e.g. `"22.3.6"`,
    /// read from the driver's description: lavapipe's loop limit
    /// ([`LAVAPIPE_LOOP_LIMIT`]) is Mesa's, so say which Mesa measured it.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// if gpu.is_lavapipe() {
    ///     let version = gpu.mesa_version().expect("lavapipe is Mesa's");
    ///     assert!(version.split('.').all(|n| n.parse::<u32>().is_ok()), "{version}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn mesa_version(&self) -> Option<&str> {
        mesa_version(&self.adapter.driver_info)
    }

    /// Whether the device can time a kernel by itself (timestamp queries): then
    /// [`Timing::kernel_ms`] is `Some`.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// println!("timestamps: {}", gpu.has_timestamps());
    /// # Ok(())
    /// # }
    /// ```
    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    /// The device's limits, as granted (the adapter's own, all of them).
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// assert!(gpu.limits().max_compute_workgroup_storage_size >= 16384);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The `wgpu` device itself, for work of one's own on the adapter and limits this `Gpu`
    /// chose (the crate's tests make pipelines of their own on it). Work on it should sit in
    /// error scopes: what the device reports outside them goes to `wgpu`'s default handler,
    /// which panics.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// assert_eq!(&gpu.device().limits(), gpu.limits());
    /// # Ok(())
    /// # }
    /// ```
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }
}

/// The version of Mesa named in a driver's description, `"22.3.6"` from
/// `"Mesa 22.3.6 (LLVM 15.0.6)"`: the digits and dots after the first `"Mesa "`, or `None`
/// when there are none. [`Gpu::mesa_version`] reads it from the adapter's own description;
/// this reads any text that holds one (a recorded adapter's name, say).
///
/// ```
/// assert_eq!(gpu::mesa_version("Mesa 22.3.6 (LLVM 15.0.6)"), Some("22.3.6"));
/// assert_eq!(gpu::mesa_version("llvmpipe Mesa 24.2.8-1ubuntu1"), Some("24.2.8"));
/// assert_eq!(gpu::mesa_version("570.86.15"), None); // NVIDIA's driver
/// ```
pub fn mesa_version(driver_info: &str) -> Option<&str> {
    let (_, rest) = driver_info.split_once("Mesa ")?;
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::Kernel;
    use wgpu::naga;

    /// Parses and validates WGSL as wgpu does (naga), without a device.
    fn compile(source: &str) -> Result<(), String> {
        let module =
            naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
        let flags = naga::valid::ValidationFlags::all();
        naga::valid::Validator::new(flags, naga::valid::Capabilities::all())
            .validate(&module)
            .map(drop)
            .map_err(|e| e.emit_to_string(source))
    }

    #[test]
    fn mesa_version_from_the_driver_info() {
        assert_eq!(super::mesa_version("Mesa 22.3.6 (LLVM 15.0.6)"), Some("22.3.6"));
        assert_eq!(super::mesa_version("llvmpipe Mesa 24.2.8-1ubuntu1"), Some("24.2.8"));
        assert_eq!(super::mesa_version("Mesa 25.0"), Some("25.0"));
        assert_eq!(super::mesa_version("570.86.15"), None); // NVIDIA's driver
        assert_eq!(super::mesa_version("Mesa devel"), None);
    }

    /// The Rust constants are the shaders' own.
    #[test]
    fn constants_match_the_shaders() {
        let source = Kernel::Tiled.source();
        for line in [
            format!("const B_Q: u32 = {}u;", super::B_Q),
            format!("const B_K: u32 = {}u;", super::B_K),
            format!("const MAX_D4: u32 = {}u;", super::MAX_D / 4),
            "var<workgroup> k_tile: array<vec4<f32>, B_K * D_K4>;".to_string(),
            "var<workgroup> v_tile: array<vec4<f32>, B_K * D_V4>;".to_string(),
        ] {
            assert!(source.contains(&line), "the shaders lack `{line}`");
        }
        assert!(Kernel::Naive.source().contains("@workgroup_size(B_Q)"));
    }

    /// `tile_bytes` is what the shader declares: its workgroup arrays, sized by the head
    /// widths the host sets, measured by naga once the pipeline constants are in.
    #[test]
    fn tile_bytes_is_the_shaders_workgroup_memory() {
        let source = Kernel::Tiled.source();
        let module = naga::front::wgsl::parse_str(&source).expect("the tiled kernel parses");
        let flags = naga::valid::ValidationFlags::all();
        let info = naga::valid::Validator::new(flags, naga::valid::Capabilities::all())
            .validate(&module)
            .expect("the tiled kernel validates");
        for (d_k, d_v) in [(64usize, 64usize), (128, 128), (8, 5), (128, 1), (61, 63)] {
            let mut constants = naga::back::PipelineConstants::default();
            constants.insert("D_K4".into(), d_k.div_ceil(4) as f64);
            constants.insert("D_V4".into(), d_v.div_ceil(4) as f64);
            let entry = Some((naga::ShaderStage::Compute, "tiled"));
            let (module, _) = naga::back::pipeline_constants::process_overrides(
                &module, &info, entry, &constants,
            )
            .expect("the overrides resolve");
            let bytes: u32 = module
                .global_variables
                .iter()
                .filter(|(_, var)| var.space == naga::AddressSpace::WorkGroup)
                .map(|(_, var)| module.types[var.ty].inner.size(module.to_ctx()))
                .sum();
            assert_eq!(bytes, super::tile_bytes(d_k, d_v), "d_k = {d_k}, d_v = {d_v}");
        }
        assert_eq!(super::tile_bytes(64, 64), 16384); // WebGPU's default fits d = 64 exactly
    }

    /// The chapter's claim: an array may take an override's size in workgroup memory only, so
    /// each invocation's query row and accumulator keep the fixed `MAX_D4`.
    #[test]
    fn override_sized_arrays_only_in_workgroup_memory() {
        let shader = |declaration: &str| {
            format!(
                "override D4: u32;\n{declaration}\n@compute @workgroup_size(1) fn main() {{ \
                 {} }}",
                if declaration.starts_with("var<workgroup>") { "t[0] = 1.0;" } else { "" }
            )
        };
        assert_eq!(compile(&shader("var<workgroup> t: array<f32, 4 * D4>;")), Ok(()));
        let inside = |size: &str| {
            format!("fn f() -> f32 {{ var t: array<f32, {size}>; return t[0]; }}")
        };
        assert_eq!(compile(&shader(&inside("4 * 32"))), Ok(())); // a constant size: fine
        let err = compile(&shader(&inside("4 * D4"))).unwrap_err();
        assert!(err.contains("can't be stored in a local variable"), "{err}");
    }

    #[test]
    fn both_kernels_compile() {
        for kernel in Kernel::ALL {
            assert_eq!(compile(&kernel.source()), Ok(()), "{}", kernel.name());
        }
    }

    /// The chapter's claim: WGSL has no way to write −∞ (or any float beyond f32's range).
    #[test]
    fn negative_infinity_does_not_compile() {
        let shader = |value: &str| {
            format!("@compute @workgroup_size(1) fn main() {{ var m: f32 = {value}; }}")
        };
        assert_eq!(compile(&shader("-3.4028234e38")), Ok(())); // f32::MIN, the tiled kernel's
        for value in ["-1.0 / 0.0", "-1e39"] {
            let err = compile(&shader(value)).unwrap_err();
            assert!(
                err.contains("overflow") || err.contains("cannot represent"),
                "{value}: {err}"
            );
        }
    }

    /// The chapter's pitfall: an invocation that leaves before a barrier breaks the tiled
    /// kernel, and naga (wgpu 30) does not catch it, so only the reader's care does.
    #[test]
    fn naga_accepts_an_early_return_before_a_barrier() {
        let source = Kernel::Tiled.source();
        let rows = "let has_row = i < params.l_q;";
        assert!(source.contains(rows));
        let broken =
            source.replacen(rows, &format!("{rows}\n    if !has_row {{ return; }}"), 1);
        assert_eq!(compile(&broken), Ok(()));
    }
}
