//! The host side: the device, the buffers, one pipeline per kernel and head width, the
//! dispatch and the read-back (chapter *Attention on a GPU*). Anchors: `new_device`, `checks`,
//! `dispatch`.

use std::time::Instant;

use attention::mask::Mask;
use attention::sdpa::check_shapes;
use attention::tiled::Masking;
use ndarray::{Array, ArrayRef, Dimension, IxDyn};
use wgpu::util::DeviceExt;

use crate::{B_K, B_Q, Gpu, GpuError, Kernel, MAX_D, REQUIRED_VAR, Result, tile_bytes};

/// How long one [`Gpu::attend_timed`] call took.
///
/// ```
/// let t = gpu::Timing { kernel_ms: Some(1.5), total_ms: 4.0 };
/// assert!(t.kernel_ms.unwrap() < t.total_ms);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// The kernel alone, measured by the GPU's own clock (timestamp queries), when the device
    /// has them.
    pub kernel_ms: Option<f64>,
    /// End to end on the host's clock: making and uploading the buffers, the kernel, and
    /// reading the output back.
    pub total_ms: f64,
}

/// The uniform block of `common.wgsl` (`Params`), field for field.
#[repr(C)]
#[derive(Clone, Copy)]
struct Params {
    l_q: u32,
    l_k: u32,
    masking: u32,
    mask_words: u32,
    scale: f32,
    _pad: [u32; 3],
}

impl Params {
    fn bytes(&self) -> Vec<u8> {
        let words = [self.l_q, self.l_k, self.masking, self.mask_words, self.scale.to_bits()];
        le_bytes(words.into_iter().chain(self._pad))
    }
}

impl Gpu {
    /// The first Vulkan adapter (a discrete GPU if there is one), with a device that has all
    /// the adapter's limits (WebGPU's defaults are smaller: 16 KiB of workgroup memory, 128 MiB
    /// per storage buffer) and timestamp queries when it offers them.
    ///
    /// ```
    /// match gpu::Gpu::new() {
    ///     Ok(gpu) => println!("running on {}", gpu.adapter_name()),
    ///     Err(gpu::GpuError::NoAdapter { reason }) => println!("no adapter: {reason}"),
    ///     Err(other) => panic!("{other}"),
    /// }
    /// ```
    pub fn new() -> Result<Gpu> {
        Gpu::open(wgpu::Adapter::limits)
    }

    /// [`Gpu::new`], but a device with exactly `limits`, e.g. `wgpu::Limits::default()`,
    /// WebGPU's defaults, what a web page gets unless it asks for more; the adapter must offer
    /// them. [`Gpu::attend`] then refuses what does not fit them, e.g. the tiled kernel's
    /// tiles above 16 KiB, with an error.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// # if gpu::Gpu::optional()?.is_none() { return Ok(()) }
    /// let gpu = gpu::Gpu::with_limits(gpu::wgpu::Limits::default())?;
    /// assert_eq!(gpu.limits().max_compute_workgroup_storage_size, 16384);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_limits(limits: wgpu::Limits) -> Result<Gpu> {
        Gpu::open(|_| limits)
    }

    /// The device on the first adapter, with the limits `limits` picks for that adapter.
    // ANCHOR: new_device
    fn open(limits: impl FnOnce(&wgpu::Adapter) -> wgpu::Limits) -> Result<Gpu> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let options = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        };
        let adapter = pollster::block_on(instance.request_adapter(&options))
            .map_err(|e| GpuError::NoAdapter { reason: e.to_string() })?;
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let descriptor = wgpu::DeviceDescriptor {
            label: Some("attention"),
            required_features: if timestamps {
                wgpu::Features::TIMESTAMP_QUERY
            } else {
                wgpu::Features::empty()
            },
            required_limits: limits(&adapter), // the adapter's own, unless asked otherwise
            ..Default::default()
        };
        let info = adapter.get_info();
        let (device, queue) =
            pollster::block_on(adapter.request_device(&descriptor)).map_err(|e| {
                GpuError::Device { adapter: info.name.clone(), reason: e.to_string() }
            })?;
        // ANCHOR_END: new_device
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("attention bindings"),
            entries: &(0..6).map(binding_entry).collect::<Vec<_>>(),
        });
        Ok(Gpu {
            adapter: info,
            limits: device.limits(),
            device,
            queue,
            timestamps,
            layout,
            pipelines: Default::default(),
        })
    }

    /// [`Gpu::new`], but `Ok(None)` when there is no adapter, so that tests and examples can
    /// say they were skipped on a machine without Vulkan; with the variable [`REQUIRED_VAR`]
    /// set (to anything but `0`), a missing adapter is the error it is.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// match gpu::Gpu::optional()? {
    ///     Some(gpu) => println!("running on {}", gpu.adapter_name()),
    ///     None => println!("skipped: no Vulkan adapter"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn optional() -> Result<Option<Gpu>> {
        let required =
            std::env::var_os(REQUIRED_VAR).is_some_and(|v| v != "0" && !v.is_empty());
        match Gpu::new() {
            Ok(gpu) => Ok(Some(gpu)),
            Err(GpuError::NoAdapter { .. }) if !required => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// `softmax(Q·Kᵀ/√d_k + M)·V` on the GPU for `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)`,
    /// `v: (..., L_k, d_v)` with the same leading axes: the output `(..., L_q, d_v)` of
    /// [`attention::tiled::tiled_sdpa_batched`], in `f32`. A query that sees no key gets zeros.
    ///
    /// Errors: the plain path's shape errors, a head wider than [`MAX_D`], a tensor or a
    /// dispatch beyond the device's limits, the tiled kernel on a device with too little
    /// workgroup memory, a problem lavapipe's loop limit would cut short
    /// ([`loop_iterations`]), or an error the device reports.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// use attention::{mask::Mask, sdpa::sdpa, tiled::Masking};
    /// use gpu::{Gpu, Kernel};
    /// use ndarray::Array2;
    ///
    /// let Some(gpu) = Gpu::optional()? else { return Ok(()) };
    /// let q = Array2::from_shape_fn((70, 8), |(i, j)| ((i * 3 + j) % 7) as f32 / 7.0);
    /// let k = Array2::from_shape_fn((50, 8), |(i, j)| ((i + 2 * j) % 5) as f32 / 5.0);
    /// let v = Array2::from_shape_fn((50, 3), |(i, j)| (i + j) as f32);
    /// let plain = sdpa(&q, &k, &v, Some(&Mask::causal_rect(70, 50)))?.output;
    /// for kernel in Kernel::ALL {
    ///     let out = gpu.attend(&q, &k, &v, Masking::Causal, kernel)?;
    ///     assert!((&out - &plain).iter().all(|d| d.abs() < 1e-4));
    /// }
    /// let err = gpu.attend(&q, &q, &v, Masking::All, Kernel::Tiled).unwrap_err();
    /// assert_eq!(err.to_string(), "k has L_k = 70 but v has L_k = 50");
    /// # Ok(())
    /// # }
    /// ```
    pub fn attend<D: Dimension>(
        &self,
        q: &ArrayRef<f32, D>,
        k: &ArrayRef<f32, D>,
        v: &ArrayRef<f32, D>,
        masking: Masking,
        kernel: Kernel,
    ) -> Result<Array<f32, D>> {
        Ok(self.attend_timed(q, k, v, masking, kernel)?.0)
    }

    /// [`Gpu::attend`], timed: the kernel alone on the GPU's clock (when the device has
    /// timestamp queries) and the whole call on the host's.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// use attention::tiled::Masking;
    /// use ndarray::Array3;
    ///
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// let x = Array3::from_shape_fn((2, 100, 16), |(b, i, j)| ((b + i * j) % 9) as f32 / 9.0);
    /// let (out, time) = gpu.attend_timed(&x, &x, &x, Masking::All, gpu::Kernel::Tiled)?;
    /// assert_eq!(out.dim(), (2, 100, 16));
    /// assert_eq!(time.kernel_ms.is_some(), gpu.has_timestamps());
    /// # Ok(())
    /// # }
    /// ```
    pub fn attend_timed<D: Dimension>(
        &self,
        q: &ArrayRef<f32, D>,
        k: &ArrayRef<f32, D>,
        v: &ArrayRef<f32, D>,
        masking: Masking,
        kernel: Kernel,
    ) -> Result<(Array<f32, D>, Timing)> {
        let start = Instant::now();
        let (l_q, l_k, d_k, d_v) = check_shapes(q.shape(), k.shape(), v.shape())?;
        // ANCHOR: checks
        for (what, size) in [("d_k", d_k), ("d_v", d_v)] {
            if size > MAX_D {
                return Err(GpuError::HeadTooWide { what, size, max: MAX_D });
            }
        }
        // ANCHOR_END: checks
        let lead = &q.shape()[..q.ndim() - 2];
        let count: usize = lead.iter().product();
        let mut out_shape = lead.to_vec();
        out_shape.extend([l_q, d_v]);
        let mask_words = l_k.div_ceil(32);
        let (mode, mask) = match masking {
            Masking::All => (0, vec![0]),
            Masking::Causal => (1, vec![0]),
            Masking::Mask(mask) => {
                let mut scores = lead.to_vec();
                scores.extend([l_q, l_k]);
                (2, mask_bits(mask, &scores, mask_words)?)
            }
        };
        // ANCHOR: checks
        let (needed, available) =
            (tile_bytes(d_k, d_v), self.limits.max_compute_workgroup_storage_size);
        if kernel == Kernel::Tiled && needed > available {
            return Err(GpuError::WorkgroupMemory {
                adapter: self.adapter.name.clone(),
                d_k,
                d_v,
                needed,
                available,
            });
        }
        if self.is_lavapipe() {
            let needed = loop_iterations(kernel, l_k, d_k, d_v);
            if needed > LAVAPIPE_LOOP_LIMIT {
                return Err(GpuError::LoopBudget {
                    kernel: kernel.name(),
                    needed,
                    limit: LAVAPIPE_LOOP_LIMIT,
                });
            }
        }
        let blocks = l_q.div_ceil(B_Q);
        let max_groups = self.limits.max_compute_workgroups_per_dimension;
        for (what, n) in [("query blocks", blocks), ("matrices (batch × heads)", count)] {
            if n > max_groups as usize {
                return Err(GpuError::TooManyWorkgroups { what, count: n, limit: max_groups });
            }
        }
        // ANCHOR_END: checks
        let params = Params {
            l_q: l_q as u32,
            l_k: l_k as u32,
            masking: mode,
            mask_words: mask_words as u32,
            scale: 1.0 / (d_k as f32).sqrt(),
            _pad: [0; 3],
        };
        // Rows padded with zeros to whole vec4s (a dot product does not change).
        let (d_k4, d_v4) = (d_k.div_ceil(4), d_v.div_ceil(4));
        let out_len = count * l_q * d_v4 * 4;
        let sizes = [
            ("q", count * l_q * d_k4 * 16),
            ("k", count * l_k * d_k4 * 16),
            ("v", count * l_k * d_v4 * 16),
            ("mask", mask.len() * 4),
            ("output", out_len * 4),
        ];
        // ANCHOR: checks
        let limit =
            self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size);
        for (what, bytes) in sizes {
            if bytes as u64 > limit {
                return Err(GpuError::TooLarge { what, bytes: bytes as u64, limit });
            }
        }
        // ANCHOR_END: checks
        let inputs = [("q", padded(q, d_k4)), ("k", padded(k, d_k4)), ("v", padded(v, d_v4))];
        let pipeline = self.pipeline(kernel, d_k4, d_v4)?;
        let (output, kernel_ms) =
            self.dispatch(&pipeline, &params, &inputs, &mask, out_len, (blocks, count))?;
        let output: Vec<f32> =
            output.chunks_exact(d_v4 * 4).flat_map(|row| &row[..d_v]).copied().collect();
        let output = Array::from_shape_vec(IxDyn(&out_shape), output)
            .expect("the output buffer holds (..., L_q, d_v)")
            .into_dimensionality::<D>()
            .expect("the output has the inputs' number of axes");
        let total_ms = start.elapsed().as_secs_f64() * 1e3;
        Ok((output, Timing { kernel_ms, total_ms }))
    }

    /// Whether the adapter is Mesa's software Vulkan, llvmpipe ("lavapipe"), whose loop limit
    /// ([`LAVAPIPE_LOOP_LIMIT`]) [`Gpu::attend`] then checks before it dispatches.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// assert_eq!(gpu.is_lavapipe(), gpu.adapter_name().starts_with("llvmpipe"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lavapipe(&self) -> bool {
        self.adapter.driver == "llvmpipe" || self.adapter.name.starts_with("llvmpipe")
    }

    /// Runs `shaders/loop_count.wgsl`: one invocation makes a loop of `n` iterations and
    /// returns how many it made: `n` on a GPU; on lavapipe `min(n, 65535)` (measured on Mesa
    /// 22.3.6), [`LAVAPIPE_LOOP_LIMIT`], the software driver's guard against loops that never
    /// end, which is why [`Gpu::attend`] refuses problems that would need more.
    ///
    /// ```
    /// # fn main() -> gpu::Result<()> {
    /// let Some(gpu) = gpu::Gpu::optional()? else { return Ok(()) };
    /// assert_eq!(gpu.loop_count(1000)?, 1000);
    /// if gpu.is_lavapipe() {
    ///     assert!(gpu.loop_count(100_000)? <= gpu::LAVAPIPE_LOOP_LIMIT as u32);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn loop_count(&self, n: u32) -> Result<u32> {
        let device = &self.device;
        let scopes = ErrorScopes::push(device);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("loop_count"),
            source: wgpu::ShaderSource::Wgsl(
                include_str!("../shaders/loop_count.wgsl").into(),
            ),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("loop_count"),
            layout: None,
            module: &module,
            entry_point: Some("loop_count"),
            compilation_options: Default::default(),
            cache: None,
        });
        let data = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("loop_count"),
            contents: &le_bytes([n, 0].into_iter()),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("loop_count read back"),
            size: 8,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("loop_count"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: data.as_entire_binding(),
            }],
        });
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        encoder.copy_buffer_to_buffer(&data, 0, &readback, 0, 8);
        self.queue.submit([encoder.finish()]);
        let bytes = read_back(device, &readback);
        scopes.pop()?;
        let bytes = bytes?;
        Ok(u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]))
    }

    /// The compute pipeline of `kernel` for heads of `d_k` and `d_v`, made once and kept.
    fn pipeline(
        &self,
        kernel: Kernel,
        d_k4: usize,
        d_v4: usize,
    ) -> Result<wgpu::ComputePipeline> {
        let mut pipelines = self.pipelines.lock().expect("no thread panics holding the lock");
        if let Some(pipeline) = pipelines.get(&(kernel, d_k4, d_v4)) {
            return Ok(pipeline.clone());
        }
        let scopes = ErrorScopes::push(&self.device);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name()),
            source: wgpu::ShaderSource::Wgsl(kernel.source().into()),
        });
        let layout = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("attention"),
            bind_group_layouts: &[Some(&self.layout)],
            immediate_size: 0,
        });
        let constants = [("D_K4", d_k4 as f64), ("D_V4", d_v4 as f64)];
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name()),
            layout: Some(&layout),
            module: &module,
            entry_point: Some(kernel.name()),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                ..Default::default()
            },
            cache: None,
        });
        scopes.pop()?;
        pipelines.insert((kernel, d_k4, d_v4), pipeline.clone());
        Ok(pipeline)
    }

    /// Uploads the inputs, runs the kernel on `groups` = (query blocks, matrices)
    /// workgroups, reads the output back; the kernel's time too, when the device has
    /// timestamps.
    // ANCHOR: dispatch
    fn dispatch(
        &self,
        pipeline: &wgpu::ComputePipeline,
        params: &Params,
        inputs: &[(&str, Vec<u8>); 3],
        mask: &[u32],
        out_len: usize,
        groups: (usize, usize),
    ) -> Result<(Vec<f32>, Option<f64>)> {
        let device = &self.device;
        let scopes = ErrorScopes::push(device);
        let upload = |label: &str, bytes: &[u8], usage| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytes,
                usage,
            })
        };
        let storage = wgpu::BufferUsages::STORAGE;
        let mut buffers = vec![upload("params", &params.bytes(), wgpu::BufferUsages::UNIFORM)];
        for (label, data) in inputs {
            buffers.push(upload(label, data, storage));
        }
        buffers.push(upload("mask", &le_bytes(mask.iter().copied()), storage));
        let out_bytes = (out_len * 4) as u64;
        let new_buffer = |label, size, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        buffers.push(new_buffer("output", out_bytes, storage | wgpu::BufferUsages::COPY_SRC));
        let read_usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let readback = new_buffer("readback", out_bytes, read_usage);
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("attention"),
            layout: &self.layout,
            entries: &buffers
                .iter()
                .enumerate()
                .map(|(i, buffer)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: buffer.as_entire_binding(),
                })
                .collect::<Vec<_>>(),
        });
        let timer = self.timestamps.then(|| Timer::new(device));
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("attention"),
                timestamp_writes: timer.as_ref().map(Timer::writes),
            });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups.0 as u32, groups.1 as u32, 1);
        }
        encoder.copy_buffer_to_buffer(&buffers[5], 0, &readback, 0, out_bytes);
        if let Some(timer) = &timer {
            timer.resolve(&mut encoder);
        }
        self.queue.submit([encoder.finish()]);
        let output = read_back(device, &readback);
        let kernel_ms = match (&timer, &output) {
            (Some(timer), Ok(_)) => Some(timer.millis(device, &self.queue)),
            _ => None,
        };
        scopes.pop()?; // the device's own error first: it explains a failed read-back
        Ok((f32s_from_le(&output?), kernel_ms.transpose()?))
    }
    // ANCHOR_END: dispatch
}

/// Mesa's software Vulkan (llvmpipe, "lavapipe") ends every loop of an invocation once the
/// invocation has made this many loop iterations in all, a guard against shaders that never
/// stop (Mesa 22.3); what the kernel had not computed by then is silently missing.
pub const LAVAPIPE_LOOP_LIMIT: u64 = 65_535;

/// The most loop iterations one invocation of `kernel` makes for `l_k` keys and heads of
/// `d_k` and `d_v`, counted from the shaders as lavapipe counts them (a loop of `n` iterations
/// takes `n + 1`), every key visible and no loop unrolled by the compiler: an upper bound.
///
/// ```
/// use gpu::{Kernel, loop_iterations, LAVAPIPE_LOOP_LIMIT};
///
/// // One key costs the naive kernel 1 + (16 + 1) + (16 + 1) iterations at d = 64.
/// let one = loop_iterations(Kernel::Naive, 1001, 64, 64) - loop_iterations(Kernel::Naive, 1000, 64, 64);
/// assert_eq!(one, 35);
/// assert!(loop_iterations(Kernel::Naive, 1800, 64, 64) <= LAVAPIPE_LOOP_LIMIT);
/// assert!(loop_iterations(Kernel::Tiled, 4096, 64, 64) > LAVAPIPE_LOOP_LIMIT);
/// ```
pub fn loop_iterations(kernel: Kernel, l_k: usize, d_k: usize, d_v: usize) -> u64 {
    let (k4, v4, b_k) = (d_k.div_ceil(4), d_v.div_ceil(4), B_K);
    let ends = (k4 + 1) + 1 + (v4 + 1); // load_query, the main loop's exit, write_row
    let body = match kernel {
        Kernel::Naive => l_k * (1 + (k4 + 1) + (v4 + 1)),
        Kernel::Tiled => {
            let copies = (b_k * k4).div_ceil(B_Q) + 1 + (b_k * v4).div_ceil(B_Q) + 1;
            let scores = (b_k + 1) + b_k * (k4 + 1);
            let values = (v4 + 1) + (b_k + 1) + b_k * (v4 + 1);
            l_k.div_ceil(b_k) * (1 + copies + scores + values)
        }
    };
    (ends + body) as u64
}

/// Binding `i` of `common.wgsl`: 0 the uniform `params`, 1–4 read-only storage (q, k, v,
/// mask), 5 the output.
fn binding_entry(i: u32) -> wgpu::BindGroupLayoutEntry {
    let ty = match i {
        0 => wgpu::BufferBindingType::Uniform,
        5 => wgpu::BufferBindingType::Storage { read_only: false },
        _ => wgpu::BufferBindingType::Storage { read_only: true },
    };
    wgpu::BindGroupLayoutEntry {
        binding: i,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

/// The tensor's rows in row-major order, each padded with zeros to `d4` vec4s, as the
/// little-endian bytes of a storage buffer.
fn padded(a: &ArrayRef<f32, impl Dimension>, d4: usize) -> Vec<u8> {
    let d = a.shape()[a.ndim() - 1];
    let mut out = Vec::with_capacity(a.len() / d * d4 * 16);
    for (n, &x) in a.iter().enumerate() {
        out.extend(x.to_le_bytes());
        if n % d == d - 1 {
            out.resize(out.len() + (d4 * 4 - d) * 4, 0); // the row's padding (0.0 is all zeros)
        }
    }
    out
}

/// The device's error scopes around one piece of work: validation, out of memory and internal
/// errors (a driver failing to compile a shader), which would otherwise reach wgpu's default
/// handler, and it panics.
struct ErrorScopes(Vec<wgpu::ErrorScopeGuard>);

impl ErrorScopes {
    fn push(device: &wgpu::Device) -> ErrorScopes {
        use wgpu::ErrorFilter::{Internal, OutOfMemory, Validation};
        ErrorScopes(
            [Internal, OutOfMemory, Validation].map(|f| device.push_error_scope(f)).into(),
        )
    }

    /// Pops them all, innermost first; the first error any of them caught.
    fn pop(self) -> Result<()> {
        let mut first = None;
        for scope in self.0.into_iter().rev() {
            if let Some(error) = pollster::block_on(scope.pop()) {
                first.get_or_insert(GpuError::Run(error.to_string()));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Little-endian bytes of 32-bit words (what every GPU API expects on every host we target).
fn le_bytes(words: impl Iterator<Item = u32>) -> Vec<u8> {
    words.flat_map(u32::to_le_bytes).collect()
}

/// Little-endian bytes back to `f32`.
fn f32s_from_le(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The mask broadcast to the scores' shape `(..., L_q, L_k)`, one bit per score, each row
/// starting a new word of 32: bit `j % 32` of word `j / 32` is key `j`.
fn mask_bits(mask: &Mask, scores: &[usize], words: usize) -> Result<Vec<u32>> {
    let allowed = mask.broadcast_to(scores)?;
    let l_k = scores[scores.len() - 1];
    let rows = allowed.len() / l_k;
    let flat = allowed.to_shape((rows, l_k)).expect("a broadcast view flattens");
    let mut bits = vec![0u32; rows * words];
    for ((r, j), &ok) in flat.indexed_iter() {
        bits[r * words + j / 32] |= u32::from(ok) << (j % 32);
    }
    Ok(bits)
}

/// Maps `buffer` and copies its bytes out.
fn read_back(device: &wgpu::Device, buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
    let (sender, receiver) = std::sync::mpsc::channel();
    buffer.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = sender.send(r); // the receiver waits below; nothing to do if it has gone
    });
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| GpuError::Run(e.to_string()))?;
    receiver
        .recv()
        .map_err(|e| GpuError::Run(e.to_string()))?
        .map_err(|e| GpuError::Run(e.to_string()))?;
    let bytes = buffer
        .slice(..)
        .get_mapped_range()
        .map_err(|e| GpuError::Run(e.to_string()))?
        .to_vec();
    buffer.unmap();
    Ok(bytes)
}

/// Two timestamps around the compute pass, on the GPU's clock.
struct Timer {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl Timer {
    fn new(device: &wgpu::Device) -> Timer {
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 16,
                usage,
                mapped_at_creation: false,
            })
        };
        use wgpu::BufferUsages as U;
        Timer {
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kernel time"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            }),
            resolved: buffer("timestamps", U::QUERY_RESOLVE | U::COPY_SRC),
            readback: buffer("timestamps read back", U::MAP_READ | U::COPY_DST),
        }
    }

    fn writes(&self) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        }
    }

    fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.resolve_query_set(&self.queries, 0..2, &self.resolved, 0);
        encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readback, 0, 16);
    }

    fn millis(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> Result<f64> {
        let bytes = read_back(device, &self.readback)?;
        let tick =
            |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
        let ticks = tick(1).saturating_sub(tick(0));
        Ok(ticks as f64 * f64::from(queue.get_timestamp_period()) / 1e6)
    }
}
