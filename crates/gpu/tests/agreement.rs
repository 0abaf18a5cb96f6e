//! Both kernels against the crate's plain path ([`sdpa_batched`]) on the machine's Vulkan
//! adapter: shapes that are not multiples of the tiles, `L_q ≠ L_k`, causal and boolean masks,
//! rows that see no key, batches and heads, the widest head, and the errors; then again on a
//! device with WebGPU's default limits, where the tiled kernel's tiles, sized by the head
//! width, fit 16 KiB at `d = 64` and are refused at `d = 128`.
//!
//! A test binary of its own (`harness = false`): one device for every case, and one line
//! saying why it skipped on a machine with no Vulkan at all (`ATTENTION_GPU_REQUIRED=1`, set in
//! CI, turns that into a failure). Run it with `cargo test -p gpu --test agreement`.

use attention::mask::Mask;
use attention::sdpa::sdpa_batched;
use attention::tiled::Masking;
use gpu::{Gpu, GpuError, Kernel, REQUIRED_VAR};
use ndarray::{Array, ArrayD, Axis, IxDyn};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// The largest |GPU − plain| allowed on an output (both in `f32`). The outputs are weighted
/// averages of values of size about 1 (3 in `large_scores`); the kernels sum in another order
/// and use the GPU's `exp`. Measured on lavapipe: see the printed table.
const TOLERANCE: f32 = 1e-5;

fn random(shape: &[usize], scale: f32, rng: &mut StdRng) -> ArrayD<f32> {
    Array::from_shape_simple_fn(IxDyn(shape), || scale * (rng.random::<f32>() * 2.0 - 1.0))
}

/// One problem: Q, K, V and how it is masked.
struct Case {
    name: &'static str,
    q: ArrayD<f32>,
    k: ArrayD<f32>,
    v: ArrayD<f32>,
    causal: bool,
    mask: Option<Mask>,
}

impl Case {
    fn new(
        name: &'static str,
        lead: &[usize],
        (l_q, l_k): (usize, usize),
        (d_k, d_v): (usize, usize),
        seed: u64,
    ) -> Case {
        Case::scaled(name, lead, (l_q, l_k), (d_k, d_v), seed, 1.0)
    }

    fn scaled(
        name: &'static str,
        lead: &[usize],
        (l_q, l_k): (usize, usize),
        (d_k, d_v): (usize, usize),
        seed: u64,
        scale: f32,
    ) -> Case {
        let mut rng = StdRng::seed_from_u64(seed);
        let shape = |rows, cols| [lead, &[rows, cols]].concat();
        Case {
            name,
            q: random(&shape(l_q, d_k), scale, &mut rng),
            k: random(&shape(l_k, d_k), scale, &mut rng),
            v: random(&shape(l_k, d_v), 1.0, &mut rng),
            causal: false,
            mask: None,
        }
    }

    fn causal(mut self) -> Case {
        self.causal = true;
        self
    }

    fn masked(mut self, mask: Mask) -> Case {
        self.mask = Some(mask);
        self
    }

    /// The plain path's output and the largest |GPU − plain| of each kernel.
    fn run(&self, gpu: &Gpu) -> Result<[f32; 2], String> {
        let (l_q, l_k) =
            (self.q.shape()[self.q.ndim() - 2], self.k.shape()[self.k.ndim() - 2]);
        let causal = Mask::causal_rect(l_q, l_k);
        let mask = if self.causal { Some(&causal) } else { self.mask.as_ref() };
        let plain =
            sdpa_batched(&self.q, &self.k, &self.v, mask).map_err(|e| e.to_string())?;
        let masking = match (self.causal, &self.mask) {
            (true, _) => Masking::Causal,
            (false, Some(mask)) => Masking::Mask(mask),
            (false, None) => Masking::All,
        };
        let mut worst = [0.0; 2];
        for (kernel, worst) in Kernel::ALL.into_iter().zip(&mut worst) {
            let out = gpu
                .attend(&self.q, &self.k, &self.v, masking, kernel)
                .map_err(|e| e.to_string())?;
            if out.shape() != plain.output.shape() {
                return Err(format!(
                    "{}: shape {:?} vs {:?}",
                    kernel.name(),
                    out.shape(),
                    plain.output.shape()
                ));
            }
            *worst = (&out - &plain.output).iter().fold(0.0f32, |m, d| m.max(d.abs()));
            if worst.is_nan() || *worst > TOLERANCE {
                return Err(format!(
                    "{}: |GPU − plain| = {worst:e} > {TOLERANCE:e}",
                    kernel.name()
                ));
            }
            // Rows that see no key are exactly zero, as in the plain path.
            for (row, plain_row) in out.rows().into_iter().zip(plain.output.rows()) {
                if plain_row.iter().all(|&x| x == 0.0) && row.iter().any(|&x| x != 0.0) {
                    return Err(format!(
                        "{}: a row that sees no key is not zero: {row}",
                        kernel.name()
                    ));
                }
            }
        }
        Ok(worst)
    }
}

/// A random boolean mask of `shape` (`keep` = chance of true), with the rows listed in `blind`
/// (of the last matrix) all false.
fn random_mask(shape: &[usize], keep: f64, blind: &[usize], seed: u64) -> Mask {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut allowed = Array::from_shape_simple_fn(IxDyn(shape), || rng.random_bool(keep));
    let n = allowed.ndim();
    for &row in blind {
        let mut last = allowed.view_mut();
        while last.ndim() > 2 {
            let len = last.len_of(Axis(0));
            last = last.index_axis_move(Axis(0), len - 1);
        }
        last.index_axis_mut(Axis(0), row).fill(false);
    }
    assert_eq!(allowed.ndim(), n);
    Mask::from_array(allowed).expect("a boolean array of at least two axes")
}

fn cases() -> Vec<Case> {
    vec![
        Case::new("37 × 53, not multiples of the tiles", &[], (37, 53), (8, 5), 1),
        Case::new("one query, one key", &[], (1, 1), (4, 4), 2),
        Case::new("batch 2 × 8 heads of 64, L = 300", &[2, 8], (300, 300), (64, 64), 3),
        Case::new("causal, L = 300, d = 64", &[8], (300, 300), (64, 64), 4).causal(),
        Case::new("causal, L_q = 100 > L_k = 70", &[2, 3], (100, 70), (16, 24), 5).causal(),
        Case::new("causal, L_q = 70 < L_k = 130", &[3], (70, 130), (16, 8), 6).causal(),
        Case::new("boolean (L_q, L_k) mask, blind rows", &[2, 3], (90, 77), (32, 16), 7)
            .masked(random_mask(&[90, 77], 0.3, &[0, 45, 89], 70)),
        Case::new("boolean (batch, 1, L_q, L_k) mask", &[2, 4], (65, 97), (16, 16), 8)
            .masked(random_mask(&[2, 1, 65, 97], 0.1, &[64], 80)),
        Case::new("every key masked", &[2], (10, 40), (8, 8), 9)
            .masked(Mask::from_array(Array::from_elem(IxDyn(&[10, 40]), false)).unwrap()),
        Case::new("heads of 128 (MAX_D), d_v = 1", &[2], (129, 200), (128, 1), 10),
        Case::scaled("large scores (|q|, |k| up to 3)", &[4], (200, 200), (64, 64), 11, 3.0)
            .causal(),
        Case::new(
            "L_k = 1700, d = 64 (near lavapipe's limit)",
            &[2],
            (70, 1700),
            (64, 64),
            13,
        ),
    ]
}

/// Errors are errors, named: never a panic, never a wrong answer.
fn errors(gpu: &Gpu) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(12);
    let q = random(&[4, 129], 1.0, &mut rng);
    let expect = |got: Result<ArrayD<f32>, GpuError>, want: &str| match got {
        Err(e) if e.to_string() == want => Ok(()),
        other => Err(format!("expected the error {want:?}, got {other:?}")),
    };
    for kernel in Kernel::ALL {
        expect(
            gpu.attend(&q, &q, &q, Masking::All, kernel),
            "d_k = 129 but the GPU kernels take heads of at most 128 numbers",
        )?;
        let (q, k) = (random(&[5, 8], 1.0, &mut rng), random(&[6, 8], 1.0, &mut rng));
        let v = random(&[7, 8], 1.0, &mut rng);
        expect(
            gpu.attend(&q, &k, &v, Masking::All, kernel),
            "k has L_k = 6 but v has L_k = 7",
        )?;
        let mask = Mask::causal(5);
        expect(
            gpu.attend(&q, &k, &k, Masking::Mask(&mask), kernel),
            "mask has shape [5, 5], which does not broadcast to the scores' shape [5, 6]",
        )?;
        // lavapipe's loop limit: refused rather than computed wrong.
        if gpu.is_lavapipe() {
            let (q, k) = (random(&[3, 64], 1.0, &mut rng), random(&[2000, 64], 1.0, &mut rng));
            let needed = gpu::loop_iterations(kernel, 2000, 64, 64);
            expect(
                gpu.attend(&q, &k, &k, Masking::All, kernel),
                &format!(
                    "the {} kernel would make up to {needed} loop iterations per invocation, \
                     and lavapipe (Mesa's software Vulkan) stops an invocation's loops after \
                     65535, which would leave the output wrong: use fewer keys or narrower \
                     heads, a real GPU, or the CPU's tiled path",
                    kernel.name()
                ),
            )?;
        }
        let empty = random(&[0, 8], 1.0, &mut rng);
        expect(
            gpu.attend(&empty, &k, &k, Masking::All, kernel),
            "q has L_q = 0: it must be at least 1",
        )?;
    }
    Ok(())
}

/// On a device with WebGPU's default limits (16 KiB of workgroup memory): heads of 64 run on
/// both kernels and agree with the plain path (the tiles take exactly 16384 bytes); wider heads
/// run on the naive kernel and are refused, by name, on the tiled one.
fn webgpu_defaults() -> Result<Vec<(&'static str, [f32; 2])>, String> {
    let limits = gpu::wgpu::Limits::default();
    let available = limits.max_compute_workgroup_storage_size;
    if available != 16384 || gpu::tile_bytes(64, 64) != available {
        return Err(format!(
            "WebGPU's default is {available} bytes; d = 64 tiles take {}",
            gpu::tile_bytes(64, 64)
        ));
    }
    let gpu = Gpu::with_limits(limits).map_err(|e| e.to_string())?;
    if gpu.limits().max_compute_workgroup_storage_size != available {
        return Err(format!("asked for {available} bytes, got {:?}", gpu.limits()));
    }
    let cases = [
        Case::new(
            "defaults: batch 2 × 4 heads of 64, L = 300",
            &[2, 4],
            (300, 300),
            (64, 64),
            21,
        ),
        Case::new("defaults: causal, 100 × 70, d = 64", &[3], (100, 70), (64, 64), 22)
            .causal(),
        Case::new("defaults: boolean mask, d_k = 64, d_v = 60", &[2], (90, 77), (64, 60), 23)
            .masked(random_mask(&[90, 77], 0.3, &[0, 89], 24)),
    ];
    let mut worst = Vec::new();
    for case in cases {
        worst.push((case.name, case.run(&gpu).map_err(|e| format!("{}: {e}", case.name))?));
    }
    let mut rng = StdRng::seed_from_u64(25);
    let (q, k) = (random(&[2, 70, 128], 1.0, &mut rng), random(&[2, 50, 128], 1.0, &mut rng));
    let v = random(&[2, 50, 128], 1.0, &mut rng);
    let plain = sdpa_batched(&q, &k, &v, None).map_err(|e| e.to_string())?.output;
    let naive =
        gpu.attend(&q, &k, &v, Masking::All, Kernel::Naive).map_err(|e| e.to_string())?;
    let diff = (&naive - &plain).iter().fold(0.0f32, |m, d| m.max(d.abs()));
    if diff.is_nan() || diff > TOLERANCE {
        return Err(format!("d = 128, naive kernel: |GPU − plain| = {diff:e}"));
    }
    for (d_k, d_v) in [(128, 128), (64, 68)] {
        let (q, k) = (random(&[5, d_k], 1.0, &mut rng), random(&[6, d_k], 1.0, &mut rng));
        let v = random(&[6, d_v], 1.0, &mut rng);
        let needed = gpu::tile_bytes(d_k, d_v);
        let want = format!(
            "the tiled kernel's tiles take {needed} bytes of workgroup memory at d_k = {d_k}, \
             d_v = {d_v}, but this device on "
        );
        match gpu.attend(&q, &k, &v, Masking::All, Kernel::Tiled) {
            Err(e @ GpuError::WorkgroupMemory { available: 16384, .. })
                if e.to_string().starts_with(&want)
                    && e.to_string().ends_with(" allows 16384") => {}
            other => return Err(format!("expected the error {want:?}…, got {other:?}")),
        }
    }
    Ok(worst)
}

/// What the chapter says of wgpu 30: it does not check a pipeline's workgroup memory against
/// the device's limit (WebGPU's rules say it must), so `Gpu::attend` checks it itself.
///
/// On the adapter `Gpu::new` picks, with a device granted WebGPU's default 16 KiB, a pipeline
/// that declares more than 16 KiB but no more than the adapter's own limit (32 KiB where the
/// adapter allows that much, as lavapipe does) is made without an error. The shader stays
/// within what the driver itself allows (a larger one would be invalid Vulkan, which a driver
/// may refuse or mishandle), so only wgpu's own check could refuse it: if a later wgpu does,
/// this fails and the chapter's sentence must change. Every error scope is pushed, so that a
/// driver's refusal is reported here rather than by wgpu's default handler, which panics. An
/// adapter that allows no more than 16 KiB skips this, saying so. (That the tiled kernel's
/// tiles fit 16 KiB at `d = 64` is shown without a device, by naga:
/// `tile_bytes_is_the_shaders_workgroup_memory` in `src/lib.rs`.)
///
/// Returns the line to print: what was made, or why it was skipped.
fn wgpu_leaves_workgroup_memory_unchecked(gpu: &Gpu) -> Result<String, String> {
    use gpu::wgpu;
    let granted = wgpu::Limits::default().max_compute_workgroup_storage_size;
    let own = gpu.limits().max_compute_workgroup_storage_size; // the adapter's own limit
    if own <= granted {
        return Ok(format!(
            "wgpu: skipped, the adapter allows {own} bytes of workgroup memory, not more than \
             {granted}"
        ));
    }
    let bytes = own.min(32 * 1024);
    let what = format!("wgpu: {bytes} B pipeline on a {granted} B device");
    let web = Gpu::with_limits(wgpu::Limits::default()).map_err(|e| e.to_string())?;
    let device = web.device();
    if device.limits().max_compute_workgroup_storage_size != granted {
        return Err(format!("the device was granted {:?}", device.limits()));
    }
    use wgpu::ErrorFilter::{Internal, OutOfMemory, Validation};
    let scopes = [Internal, OutOfMemory, Validation].map(|f| device.push_error_scope(f));
    let vec4s = bytes / 16;
    let source = format!(
        "var<workgroup> tile: array<vec4<f32>, {vec4s}>; // {bytes} bytes
        @group(0) @binding(0) var<storage, read_write> out: array<f32>;
        @compute @workgroup_size(64)
        fn main(@builtin(local_invocation_index) i: u32) {{
            tile[i] = vec4(f32(i));
            workgroupBarrier();
            out[i] = tile[{last}u - i].x;
        }}",
        last = vec4s - 1
    );
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("workgroup memory over the device's limit"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let _pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("workgroup memory over the device's limit"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let [internal, out_of_memory, validation] = scopes;
    let pop = |scope: wgpu::ErrorScopeGuard| pollster::block_on(scope.pop());
    let validation = pop(validation); // innermost first
    let (out_of_memory, internal) = (pop(out_of_memory), pop(internal));
    if let Some(e) = validation {
        return Err(format!("wgpu now checks workgroup memory (update chapter 14): {e}"));
    }
    if let Some(e) = internal.or(out_of_memory) {
        return Err(format!("the driver refused {bytes} bytes within its own limit: {e}"));
    }
    Ok(what)
}

/// The software driver's loop limit, which `Gpu::attend` guards against on lavapipe: a loop of
/// `n` iterations makes `n` of them on a GPU, at most 65535 on lavapipe.
fn loop_limit(gpu: &Gpu) -> Result<(), String> {
    let count = |n| gpu.loop_count(n).map_err(|e| e.to_string());
    let expected = |n: u32| if gpu.is_lavapipe() { n.min(65_535) } else { n };
    for n in [1_000, 65_535, 65_536, 100_000] {
        let got = count(n)?;
        if got != expected(n) {
            return Err(format!(
                "a loop of {n} made {got} iterations, expected {}",
                expected(n)
            ));
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let gpu = match Gpu::optional() {
        Ok(Some(gpu)) => gpu,
        Ok(None) => {
            println!(
                "gpu agreement tests skipped: no Vulkan adapter on this machine (the GPU \
                 chapter's README section says how to get Mesa's software one; set \
                 {REQUIRED_VAR}=1 to make this a failure)"
            );
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("gpu agreement tests FAILED: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("gpu agreement tests on {}", gpu.adapter_name());
    println!("{:<44} {:>10} {:>10}", "case", "naive", "tiled");
    let mut failed = 0;
    for case in cases() {
        match case.run(&gpu) {
            Ok([naive, tiled]) => println!("{:<44} {naive:>10.2e} {tiled:>10.2e}", case.name),
            Err(e) => {
                failed += 1;
                println!("{:<44} FAILED: {e}", case.name);
            }
        }
    }
    match webgpu_defaults() {
        Ok(rows) => {
            for (name, [naive, tiled]) in rows {
                println!("{name:<44} {naive:>10.2e} {tiled:>10.2e}");
            }
            println!("{:<44} ok", "defaults: d = 128 naive runs, tiled refused");
        }
        Err(e) => {
            failed += 1;
            println!("{:<44} FAILED: {e}", "WebGPU's default limits");
        }
    }
    match wgpu_leaves_workgroup_memory_unchecked(&gpu) {
        Ok(what) => println!("{what:<44} ok"),
        Err(e) => {
            failed += 1;
            println!("{:<44} FAILED: {e}", "wgpu: workgroup memory over the device's limit");
        }
    }
    let limit = match (gpu.is_lavapipe(), gpu.mesa_version()) {
        (true, Some(mesa)) => format!("loop limit 65535 (lavapipe, Mesa {mesa})"),
        (true, None) => "loop limit 65535 (lavapipe)".to_string(),
        (false, _) => "no loop limit (not lavapipe)".to_string(),
    };
    match loop_limit(&gpu) {
        Ok(()) => println!("{limit:<44} ok"),
        Err(e) => {
            failed += 1;
            println!("{:<44} FAILED: {e}", "loop limit");
        }
    }
    match errors(&gpu) {
        Ok(()) => println!("{:<44} ok", "errors named, no panic"),
        Err(e) => {
            failed += 1;
            println!("{:<44} FAILED: {e}", "errors named, no panic");
        }
    }
    if failed > 0 {
        println!("{failed} GPU case(s) failed (tolerance {TOLERANCE:e})");
        return std::process::ExitCode::FAILURE;
    }
    println!("all GPU cases agree with the plain path within {TOLERANCE:e}");
    std::process::ExitCode::SUCCESS
}
