//! `attend`: scaled dot-product attention on Q, K, V read from `.npy` files.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use attention::Float;
use attention::grad::{SdpaGrads, sdpa_backward};
use attention::mask::Mask;
use attention::sdpa::sdpa_batched;
use attention::tiled::{Masking, Tiles, tiled_sdpa_batched};
use attention::tiled_grad::{tiled_sdpa_backward, tiled_sdpa_with_lse};
use clap::error::ErrorKind;
use clap::{Parser, ValueEnum};
use gpu::{Gpu, GpuError, Kernel};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::WritableElement;

use super::outputs::{Named, Outputs, check_distinct, check_outputs};
use super::npy;
use super::progress::Progress;
use super::{
    Failure, MaskArg, Picture, Tensor, View, Written, after_help, at_least_one,
    check_weight_bytes, drawing, dtype_name, explain, load_mask, note_if_debug, same_dtype,
    shape_text, usage, wrote,
};

#[path = "../common/timing.rs"]
mod timing;

/// Below this many scores per matrix (`L_q · L_k`, 256 × 256) the default is the plain path.
pub const TILED_FROM: usize = 256 * 256;

/// Scaled dot-product attention, softmax(Q·Kᵀ/√d_k + mask)·V, on your own tensors.
///
/// Reads Q, K and V (and a mask) from NumPy .npy files and writes the output, (…, L_q, d_v),
/// and the weights, (…, L_q, L_k), as .npy files in the inputs' dtype; it can also draw the
/// weights as a PNG heatmap or show them in an interactive HTML page (a head view). Q, K and V
/// are float32 or float64 (all the same), with the same 0, 1 or 2
/// leading axes (batch, heads). d_k is the last axis of Q; the scale is √d_k. Given dO, the
/// gradient of a loss with respect to the output, it also runs the backward pass and writes
/// dQ, dK and dV.
#[derive(Parser, Debug)]
#[command(
    name = "attend",
    version,
    group(drawing()),
    after_help = after_help(
        "Examples (from the repository root):\n  \
        cargo run --release --example attend -- --q q.npy --k k.npy --v v.npy --mask causal \\\n      \
        --out out.npy --weights w.npy --png w.png --labels \"my,name,is,Aj\"\n  \
        cargo run --release --example attend -- --q q.npy --k k.npy --v v.npy --mask causal \\\n      \
        --out out.npy --view heads.html --labels \"my,name,is,Aj\"\n  \
        cargo run --release --example attend -- --q q.npy --k k.npy --v v.npy --mask causal \\\n      \
        --out out.npy --grad-out do.npy --dq dq.npy --dk dk.npy --dv dv.npy"
    )
)]
pub struct Cli {
    /// Queries: (L_q, d_k), (batch, L_q, d_k) or (batch, heads, L_q, d_k)
    #[arg(long, value_name = "Q.npy")]
    pub q: PathBuf,
    /// Keys: (L_k, d_k), with Q's leading axes
    #[arg(long, value_name = "K.npy")]
    pub k: PathBuf,
    /// Values: (L_k, d_v), with Q's leading axes
    #[arg(long, value_name = "V.npy")]
    pub v: PathBuf,
    /// `causal` (query i sees keys 0..=i, aligned at the top left), or a bool .npy, True = may
    /// attend, that broadcasts to the weights (…, L_q, L_k) as PyTorch's attn_mask does
    #[arg(long, value_name = "causal|M.npy", value_parser = MaskArg::parse)]
    pub mask: Option<MaskArg>,
    #[command(flatten)]
    pub written: Written,
    /// dO, the gradient of a loss with respect to the output: OUT's shape, the inputs'
    /// dtype. Also runs the backward pass and writes the gradients of sum(O ∘ dO) with respect
    /// to Q, K and V (PyTorch's out.backward(dO)) to --dq, --dk, --dv: at least one of them
    #[arg(long = "grad-out", value_name = "DO.npy")]
    pub grad_out: Option<PathBuf>,
    /// Where to write dQ, the gradient with respect to Q (Q's shape; needs --grad-out)
    #[arg(long, value_name = "DQ.npy", requires = "grad_out")]
    pub dq: Option<PathBuf>,
    /// Where to write dK, the gradient with respect to K (K's shape; needs --grad-out)
    #[arg(long, value_name = "DK.npy", requires = "grad_out")]
    pub dk: Option<PathBuf>,
    /// Where to write dV, the gradient with respect to V (V's shape; needs --grad-out)
    #[arg(long, value_name = "DV.npy", requires = "grad_out")]
    pub dv: Option<PathBuf>,
    /// How to compute (the backward too, with --grad-out). Default: plain when the weights are
    /// asked for or a matrix has fewer than 256 × 256 scores, else tiled (RAYON_NUM_THREADS=N
    /// limits its threads); gpu only when asked for
    #[arg(long = "impl", value_name = "IMPL", value_enum)]
    pub implementation: Option<Impl>,
    /// Time the computation alone (forward + backward with --grad-out): one warm-up, then N
    /// runs; the summary ends with `median_ms=<number>` (the files are written once)
    #[arg(long, value_name = "N", value_parser = at_least_one, allow_negative_numbers = true)]
    pub bench: Option<u32>,
}

/// Which implementation computes the attention (`--impl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Impl {
    /// sdpa_batched (and sdpa_backward), which forms the weights (needed for --weights,
    /// --png and --view)
    Plain,
    /// tiled_sdpa_batched (and FlashAttention-2's tiled_sdpa_backward): never forms the
    /// L_q × L_k matrix, runs on every core
    Tiled,
    /// chapter 14's tiled WGSL kernel on the machine's Vulkan adapter (a GPU, or Mesa's
    /// software one): float32 only, the output only (no weights, no gradients)
    Gpu,
}

impl Impl {
    /// `--impl`, or the default: plain when the weights are asked for (only the plain path
    /// forms them) or when a matrix has fewer than [`TILED_FROM`] scores, tiled otherwise;
    /// gradients change nothing (each path has its backward).
    fn choose(flag: Option<Impl>, wants_weights: bool, scores: usize) -> Impl {
        match flag {
            Some(choice) => choice,
            None if wants_weights || scores < TILED_FROM => Impl::Plain,
            None => Impl::Tiled,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Impl::Plain => "plain",
            Impl::Tiled => "tiled",
            Impl::Gpu => "gpu",
        }
    }
}

/// Runs the tool on its arguments (the program name first): reads the inputs, attends, writes
/// OUT (and W, and the PNG, and the gradients); returns the summary (with `--bench`, followed
/// by the timing, whose last line is `median_ms=<number>`).
pub fn run(args: Vec<OsString>) -> Result<String, Failure> {
    let cli = Cli::try_parse_from(args)?;
    if let Some(MaskArg::Window(w)) = cli.mask {
        return Err(usage::<Cli>(
            ErrorKind::InvalidValue,
            format!(
                "--mask window:{w} is a sliding window over one sequence, which the multihead \
                 tool applies; attend takes causal or a bool .npy mask (a file named \
                 window:{w}: ./window:{w})"
            ),
        ));
    }
    for chosen in [Impl::Tiled, Impl::Gpu] {
        if cli.implementation == Some(chosen) && cli.written.wants_weights() {
            return Err(usage::<Cli>(
                ErrorKind::ArgumentConflict,
                format!(
                    "--impl {} never forms the weights: drop --weights, --png and --view, or \
                     use --impl plain",
                    chosen.name()
                ),
            ));
        }
    }
    if cli.implementation == Some(Impl::Gpu) && cli.grad_out.is_some() {
        return Err(usage::<Cli>(
            ErrorKind::ArgumentConflict,
            "--impl gpu computes the forward pass only: drop --grad-out, or use --impl tiled \
             or --impl plain for the gradients",
        ));
    }
    if let (Some(grad_o), None, None, None) = (&cli.grad_out, &cli.dq, &cli.dk, &cli.dv) {
        return Err(usage::<Cli>(
            ErrorKind::MissingRequiredArgument,
            format!(
                "--grad-out {} asks for the backward pass but names no file for its result: \
                 add --dq DQ.npy, --dk DK.npy or --dv DV.npy (any of them, or all three)",
                grad_o.display()
            ),
        ));
    }
    let mut inputs = vec![
        Named { flag: "--q", path: &cli.q },
        Named { flag: "--k", path: &cli.k },
        Named { flag: "--v", path: &cli.v },
    ];
    let mask_file = cli.mask.as_ref().and_then(MaskArg::file);
    inputs.extend(mask_file.map(|path| Named { flag: "--mask", path }));
    inputs.extend(cli.grad_out.as_deref().map(|path| Named { flag: "--grad-out", path }));
    check_distinct(&inputs, &cli.outputs())
        .map_err(|message| usage::<Cli>(ErrorKind::ArgumentConflict, message))?;
    // An output's folder is checked now, not after the work when the output is written.
    check_outputs(&cli.outputs()).map_err(Failure::Data)?;

    if let Some((weights_shape, element)) = weights_from_headers(&cli) {
        let n = weights_shape.len();
        let scores = weights_shape[n - 2].saturating_mul(weights_shape[n - 1]);
        let implementation =
            Impl::choose(cli.implementation, cli.written.wants_weights(), scores);
        check_sizes(&cli, implementation, &weights_shape, element)?;
    }
    let (q, k, v) = (Tensor::load(&cli.q)?, Tensor::load(&cli.k)?, Tensor::load(&cli.v)?);
    let grad_o = cli.grad_out.as_deref().map(Tensor::load).transpose()?;
    let mut loaded = vec![(cli.q.as_path(), &q), (&cli.k, &k), (&cli.v, &v)];
    loaded.extend(cli.grad_out.as_deref().zip(grad_o.as_ref()));
    same_dtype(&loaded)?;
    for (path, t) in [(&cli.q, &q), (&cli.k, &k), (&cli.v, &v)] {
        if !(2..=4).contains(&t.shape().len()) {
            return Err(Failure::Data(format!(
                "{}: has shape {} but (L, d), (batch, L, d) or (batch, heads, L, d) was expected",
                path.display(),
                shape_text(t.shape())
            )));
        }
    }
    use Tensor::{F32, F64};
    if cli.implementation == Some(Impl::Gpu)
        && let F64(_) = q
    {
        return Err(Failure::Data(format!(
            "{}: is float64, but --impl gpu computes in float32 (WGSL has no float64): save \
             Q, K and V as float32, or use --impl tiled or --impl plain",
            cli.q.display()
        )));
    }
    match (q, k, v, grad_o) {
        (F32(q), F32(k), F32(v), None) => attend(&cli, q, k, v, None),
        (F32(q), F32(k), F32(v), Some(F32(grad_o))) => attend(&cli, q, k, v, Some(grad_o)),
        (F64(q), F64(k), F64(v), None) => attend(&cli, q, k, v, None),
        (F64(q), F64(k), F64(v), Some(F64(grad_o))) => attend(&cli, q, k, v, Some(grad_o)),
        _ => unreachable!("same_dtype checked that all of them agree"),
    }
}

impl Cli {
    /// Every output path with the option that named it, for [`check_distinct`].
    fn outputs(&self) -> Vec<Named<'_>> {
        let mut named = self.written.named();
        for (flag, path) in [("--dq", &self.dq), ("--dk", &self.dk), ("--dv", &self.dv)] {
            named.extend(path.as_deref().map(|path| Named { flag, path }));
        }
        named
    }
}

/// What the forward pass leaves for the files and for the backward pass: the output, the
/// weights (the plain path) or each query's log-sum-exp (the tiled path, given dO).
struct Forward<A> {
    output: ArrayD<A>,
    weights: Option<ArrayD<A>>,
    lse: Option<ArrayD<A>>,
}

/// The element types `--impl gpu` takes: `f32`, since WGSL has no `f64`.
trait OnGpu: Sized {
    /// The output of the tiled kernel on `gpu`, or why this type cannot go there.
    fn on_gpu(
        gpu: &Gpu,
        qkv: [&ArrayD<Self>; 3],
        masking: Masking,
    ) -> Result<ArrayD<Self>, GpuError>;
}

impl OnGpu for f32 {
    fn on_gpu(
        gpu: &Gpu,
        [q, k, v]: [&ArrayD<f32>; 3],
        masking: Masking,
    ) -> Result<ArrayD<f32>, GpuError> {
        gpu.attend(q, k, v, masking, Kernel::Tiled)
    }
}

impl OnGpu for f64 {
    fn on_gpu(_: &Gpu, _: [&ArrayD<f64>; 3], _: Masking) -> Result<ArrayD<f64>, GpuError> {
        unreachable!("run refuses float64 inputs with --impl gpu")
    }
}

/// A GPU error as the tool reports it: a shape error names the files, as on the CPU paths.
fn gpu_failure(error: GpuError, files: &[(&str, &Path)]) -> Failure {
    match error {
        GpuError::Shape(e) => explain(&e, files),
        other => Failure::Data(format!("--impl gpu: {other}")),
    }
}

/// Checks every size that follows from the headers of Q and K, before any work: the weights
/// the plain path would form ([`check_weight_bytes`]), the PNG's pixels and the page's
/// weights. `run` calls it on the headers alone, before reading the data.
fn check_sizes(
    cli: &Cli,
    implementation: Impl,
    weights_shape: &[usize],
    element: usize,
) -> Result<(), Failure> {
    if implementation == Impl::Plain {
        let way_out = if cli.written.wants_weights() {
            "leave out --weights, --png and --view and use --impl tiled, which computes the \
             output without forming them"
        } else {
            "use --impl tiled, which computes the output without forming them"
        };
        let files = format!("{}, {}", cli.q.display(), cli.k.display());
        check_weight_bytes(&files, weights_shape, dtype_name(element), element, way_out)?;
    }
    let (picture, view) = pictures(cli, weights_shape.len());
    if let Some(picture) = &picture {
        picture.check(weights_shape)?;
    }
    if let Some(view) = &view {
        view.check(weights_shape)?;
    }
    Ok(())
}

/// The PNG and the head view asked for, for weights of `n` axes: titled with the mask, the
/// leading axes named, and labelled with `--labels`. The size checks measure the very
/// pictures that are drawn.
fn pictures(cli: &Cli, n: usize) -> (Option<Picture<'_>>, Option<View<'_>>) {
    let title = format!(
        "Attention weights ({})",
        cli.mask.as_ref().map_or("no mask".to_string(), |m| format!("mask: {}", m.describe()))
    );
    let axes = &["batch", "head"][..n - 2];
    let labels = cli.written.labels.as_deref();
    let picture = cli.written.png.as_deref().map(|path| Picture {
        path,
        labels,
        title: title.clone(),
        axes,
        scale: cli.written.png_scale,
    });
    let view = cli.written.view.as_deref().map(|path| View { path, labels, title, axes });
    (picture, view)
}

/// The shape of the weights, `(…, L_q, L_k)`, and the bytes of an element, from the headers
/// of Q and K alone, when both are readable float arrays of 2 to 4 axes (otherwise loading
/// them reports the problem).
fn weights_from_headers(cli: &Cli) -> Option<(Vec<usize>, usize)> {
    let (q, k) = (npy::read_header(&cli.q).ok()?, npy::read_header(&cli.k).ok()?);
    let element = q.dtype.filter(|d| d.kind == 'f' && matches!(d.size, 4 | 8))?.size;
    let (nq, nk) = (q.shape.len(), k.shape.len());
    if !(2..=4).contains(&nq) || nk != nq {
        return None;
    }
    let mut shape = q.shape[..nq - 2].to_vec();
    shape.extend([q.shape[nq - 2], k.shape[nk - 2]]);
    Some((shape, element))
}

fn attend<A: Float + WritableElement + OnGpu>(
    cli: &Cli,
    q: ArrayD<A>,
    k: ArrayD<A>,
    v: ArrayD<A>,
    grad_o: Option<ArrayD<A>>,
) -> Result<String, Failure> {
    let mask_path = cli.mask.as_ref().and_then(MaskArg::file).unwrap_or(Path::new("--mask"));
    let grad_o_path = cli.grad_out.as_deref().unwrap_or(Path::new("--grad-out"));
    let files = [
        ("q", cli.q.as_path()),
        ("k", &cli.k),
        ("v", &cli.v),
        ("mask", mask_path),
        ("grad_o", grad_o_path),
    ];
    let n = q.ndim();
    if k.ndim() != n || v.ndim() != n {
        let (path, other) = if k.ndim() != n { (&cli.k, &k) } else { (&cli.v, &v) };
        return Err(Failure::Data(format!(
            "{}: has {} axes but {} has {n}: Q, K and V need the same leading axes",
            path.display(),
            other.ndim(),
            cli.q.display()
        )));
    }
    let (l_q, l_k) = (q.shape()[n - 2], k.shape()[n - 2]);
    let mut weights_shape = q.shape()[..n - 2].to_vec();
    weights_shape.extend([l_q, l_k]);
    let implementation = Impl::choose(cli.implementation, cli.written.wants_weights(), l_q * l_k);
    let (picture, view) = pictures(cli, n);
    check_sizes(cli, implementation, &weights_shape, size_of::<A>())?;
    let d_v = v.shape()[n - 1];
    let pairs = weights_shape.iter().map(|&s| s as f64).product::<f64>();
    let passes = if grad_o.is_some() { 3.0 } else { 1.0 };
    note_if_debug("attend", pairs * (q.shape()[n - 1] + d_v) as f64 * passes);
    let mask = match &cli.mask {
        None => None,
        Some(MaskArg::Causal) => Some(Mask::causal_rect(l_q, l_k)),
        Some(MaskArg::File(path)) => Some(load_mask(path, &weights_shape)?),
        Some(MaskArg::Window(_)) => unreachable!("run refused --mask window:W"),
    };
    let masking = match (&cli.mask, &mask) {
        (Some(MaskArg::Causal), _) => Masking::Causal,
        (_, Some(mask)) => Masking::Mask(mask),
        (_, None) => Masking::All,
    };
    // The device is made once, before anything is timed.
    let gpu = match implementation {
        Impl::Gpu => Some(Gpu::new().map_err(|e| gpu_failure(e, &files))?),
        _ => None,
    };
    // The computation alone, without file I/O: what --bench times (the backward too when
    // gradients are asked for).
    let forward = || match (implementation, &gpu) {
        (Impl::Plain, _) => sdpa_batched(&q, &k, &v, mask.as_ref())
            .map(|att| Forward { output: att.output, weights: Some(att.weights), lse: None })
            .map_err(|e| explain(&e, &files)),
        (Impl::Tiled, _) if grad_o.is_some() => {
            tiled_sdpa_with_lse(&q, &k, &v, masking, Tiles::default())
                .map(|(output, lse)| Forward { output, weights: None, lse: Some(lse) })
                .map_err(|e| explain(&e, &files))
        }
        (Impl::Tiled, _) => tiled_sdpa_batched(&q, &k, &v, masking, Tiles::default())
            .map(|output| Forward { output, weights: None, lse: None })
            .map_err(|e| explain(&e, &files)),
        (Impl::Gpu, Some(gpu)) => A::on_gpu(gpu, [&q, &k, &v], masking)
            .map(|output| Forward { output, weights: None, lse: None })
            .map_err(|e| gpu_failure(e, &files)),
        (Impl::Gpu, None) => unreachable!("the device was made above"),
    };
    let backward = |forward: &Forward<A>, grad_o: &ArrayD<A>| match forward {
        Forward { weights: Some(weights), .. } => sdpa_backward(&q, &k, &v, weights, grad_o),
        Forward { output, lse: Some(lse), .. } => {
            tiled_sdpa_backward(&q, &k, &v, masking, output, lse, grad_o, Tiles::default())
        }
        _ => unreachable!("the tiled forward keeps the log-sum-exp when dO is given"),
    };
    let what = if grad_o.is_some() { "attention and its backward" } else { "attention" };
    let progress = Progress::start(format!(
        "attend: {what} ({}) over {}",
        implementation.name(),
        shape_text(q.shape())
    ));
    let done = forward()?;
    let grads: Option<SdpaGrads<A, IxDyn>> = match &grad_o {
        None => None,
        Some(grad_o) => {
            if grad_o.shape() != done.output.shape() {
                return Err(Failure::Data(format!(
                    "{}: has shape {} but the output (…, L_q, d_v) has shape {}: dO must \
                     have the output's shape",
                    grad_o_path.display(),
                    shape_text(grad_o.shape()),
                    shape_text(done.output.shape()),
                )));
            }
            Some(backward(&done, grad_o).map_err(|e| explain(&e, &files))?)
        }
    };
    let median_ms = cli.bench.map(|runs| {
        timing::median_ms(runs as usize, || {
            let forward = forward();
            let grads = match (&forward, &grad_o) {
                (Ok(forward), Some(grad_o)) => Some(backward(forward, grad_o)),
                _ => None,
            };
            (forward, grads)
        })
    });
    progress.finish();
    let Forward { output, weights, .. } = done;

    let mut outputs = Outputs::new();
    let mut written = vec![format!("output {}", shape_text(output.shape()))];
    outputs.write_npy(&cli.written.out, &output)?;
    if let (Some(path), Some(weights)) = (&cli.written.weights, &weights) {
        outputs.write_npy(path, weights)?;
        written.push(format!("weights {}", shape_text(weights.shape())));
    }
    if let (Some(path), Some(picture)) = (&cli.written.png, &picture) {
        let weights = weights.as_ref().expect("the plain path runs whenever --png is given");
        let png = picture.render(weights, mask.as_ref().map(Mask::as_array))?;
        outputs.write_bytes(path, &png)?;
        written.push(picture.scale.describe().into());
    }
    if let (Some(path), Some(view)) = (&cli.written.view, &view) {
        let weights = weights.as_ref().expect("the plain path runs whenever --view is given");
        outputs.write_bytes(path, &view.render(weights)?)?;
        written.push("head view of the weights".into());
    }
    if let Some(grads) = &grads {
        for (path, name, grad) in
            [
                (&cli.dq, "dQ", &grads.grad_q),
                (&cli.dk, "dK", &grads.grad_k),
                (&cli.dv, "dV", &grads.grad_v),
            ]
        {
            if let Some(path) = path {
                outputs.write_npy(path, grad)?;
                written.push(format!("gradient {name} {}", shape_text(grad.shape())));
            }
        }
    }
    let paths = outputs.commit()?;
    let what = if grads.is_some() { " and its backward" } else { "" };
    let on = gpu.as_ref().map_or(String::new(), |gpu| format!(" on {}", gpu.adapter_name()));
    let mut summary = format!(
        "attention ({}{on}){what} over {} with L_q = {l_q}, L_k = {l_k}: {}",
        implementation.name(),
        shape_text(q.shape()),
        wrote(&paths.into_iter().zip(written).collect::<Vec<_>>()),
    );
    if let (Some(runs), Some(ms)) = (cli.bench, median_ms) {
        let timed = match (&gpu, grads.is_some()) {
            (Some(_), _) => " (upload, kernel and read-back)",
            (None, true) => " forward + backward",
            (None, false) => "",
        };
        summary += &format!(
            "\n{}{timed} median of {runs} runs after one warm-up, without file I/O:\n\
             median_ms={ms:.3}",
            implementation.name()
        );
    }
    Ok(summary)
}
