//! `multihead`: multi-head self-attention on X with weights read from `.npy` files.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use attention::gqa::GroupedQueryAttention;
use attention::mask::Mask;
use attention::multihead::head_width;
use attention::rope::{Rope, RopeLayout};
use attention::{AttentionError, Float};
use clap::Parser;
use clap::error::ErrorKind;
use ndarray::{Array2, Array3, Array4, ArrayD, Axis, Ix2, Ix3, IxDyn};
use ndarray_npy::WritableElement;

use super::outputs::{Named, Outputs, check_distinct, check_outputs};
use super::progress::Progress;
use super::{
    Failure, MaskArg, Picture, Tensor, View, Written, after_help, at_least_one,
    check_weight_bytes, drawing, dtype_name, explain, load_mask, note, note_if_debug, npy,
    same_dtype, shape_text, usage, wrote,
};

/// Multi-head self-attention on your own tensors: X·W_Q, X·W_K, X·W_V split into heads,
/// scaled dot-product attention per head (scale √d_head), merged, times W_O; with options,
/// grouped-query heads, RoPE, a sliding window, and token-by-token decoding through a KV cache.
///
/// Reads X and the four matrices from NumPy .npy files (all float32 or all float64; applied as
/// X·W, so a PyTorch nn.Linear weight must be transposed first) and writes the output, X's
/// shape, and every head's weights, (heads, L, L) or (batch, heads, L, L), in the same dtype;
/// it can also draw the weights, or show them in an interactive HTML page (a head view). There
/// are no biases. W_Q and W_O are (d_model, d_model); W_K and W_V are (d_model, G·d_head) with
/// d_head = d_model / heads and G from --kv-heads (without it G = heads, and they are
/// (d_model, d_model) too).
#[derive(Parser, Debug)]
#[command(
    name = "multihead",
    version,
    group(drawing()),
    after_help = after_help(
        "Example (from the repository root):\n  \
        F=tests/fixtures/mha/f64_d12_h3_L6_causal\n  \
        cargo run --release --example multihead -- --x $F/x_q.npy --wq $F/w_q.npy \\\n      \
        --wk $F/w_k.npy --wv $F/w_v.npy --wo $F/w_o.npy --heads 3 --mask causal \\\n      \
        --out out.npy --png heads.png --view heads.html\n\
        4 query heads sharing 2 key/value heads, RoPE (base 100), a window of 3 keys, decoded:\n  \
        G=tests/fixtures/gqa/f64_d16_h4_g2_L8_window3_rope100\n  \
        cargo run --release --example multihead -- --x $G/x.npy --wq $G/w_q.npy \\\n      \
        --wk $G/w_k.npy --wv $G/w_v.npy --wo $G/w_o.npy --heads 4 --kv-heads 2 --rope \\\n      \
        --rope-base 100 --mask window:3 --decode --out out.npy --weights w.npy"
    )
)]
pub struct Cli {
    /// The tokens: (L, d_model) or (batch, L, d_model)
    #[arg(long, value_name = "X.npy")]
    pub x: PathBuf,
    /// W_Q, (d_model, d_model)
    #[arg(long, value_name = "WQ.npy")]
    pub wq: PathBuf,
    /// W_K, (d_model, G·d_head): (d_model, d_model) unless --kv-heads is given
    #[arg(long, value_name = "WK.npy")]
    pub wk: PathBuf,
    /// W_V, (d_model, G·d_head), like W_K
    #[arg(long, value_name = "WV.npy")]
    pub wv: PathBuf,
    /// W_O, (d_model, d_model)
    #[arg(long, value_name = "WO.npy")]
    pub wo: PathBuf,
    /// The number of (query) heads, H; it must divide d_model, and d_head = d_model / H
    #[arg(long, value_name = "H", value_parser = at_least_one, allow_negative_numbers = true)]
    pub heads: u32,
    /// Grouped-query attention: G key/value heads, each shared by H / G query heads (kv head j
    /// serves query heads j·H/G … (j+1)·H/G − 1, the order of PyTorch's enable_gqa); G must
    /// divide H, and G = 1 is multi-query attention. [default: H, plain multi-head attention]
    #[arg(long, value_name = "G", value_parser = at_least_one, allow_negative_numbers = true)]
    pub kv_heads: Option<u32>,
    /// Rotary position embeddings (RoPE) on every head's queries and keys after the
    /// projection, at positions 0 … L−1 (each batch item from 0), rotate-half layout (Llama,
    /// GPT-NeoX: column i pairs with i + d_head/2); d_head must be even
    #[arg(long)]
    pub rope: bool,
    /// RoPE's base B, θ_i = B^(−2i/d_head): a number greater than 1; needs --rope [default:
    /// 10000]
    #[arg(
        long,
        value_name = "B",
        requires = "rope",
        value_parser = rope_base,
        allow_negative_numbers = true
    )]
    pub rope_base: Option<f64>,
    /// `causal`; `window:W`, a causal sliding window (query i sees keys j with 0 ≤ i − j < W:
    /// itself and the W − 1 before it); or a bool .npy, True = may attend: (L, L), or
    /// (batch, L, L) for a batch (one mask per item, e.g. padding, applied to every head)
    #[arg(long, value_name = "causal|window:W|M.npy", value_parser = MaskArg::parse)]
    pub mask: Option<MaskArg>,
    /// Compute the same result token by token: each new token's keys and values go into a KV
    /// cache (the last W of them with --mask window:W) and its query attends to the cache.
    /// Always causal (or the window), so it takes no mask file; a batch is decoded item by
    /// item
    #[arg(long)]
    pub decode: bool,
    #[command(flatten)]
    pub written: Written,
}

/// RoPE's base when `--rope` is given without `--rope-base` (the RoFormer paper's value, and
/// GPT-NeoX's and Llama 2's).
pub const DEFAULT_ROPE_BASE: f64 = 10_000.0;

/// `--rope-base`'s value: a finite number greater than 1 (with a base of 1 every pair of
/// columns would turn at the same rate, below 1 the later pairs would turn faster, and a base
/// of 0 or less gives no real angles).
fn rope_base(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(b) if b.is_finite() && b > 1.0 => Ok(b),
        _ => {
            Err("expected a number greater than 1 (RoPE's base; 10000 in most models)".into())
        }
    }
}

/// What a run computes, from the options alone (the sizes come from the files).
struct Plan {
    heads: usize,
    kv_heads: usize,
    rope_base: Option<f64>,
    decode: bool,
}

impl Plan {
    /// Checks the options against each other: G divides H, no mask file with `--decode`.
    fn of(cli: &Cli) -> Result<Plan, Failure> {
        let heads = cli.heads as usize;
        let kv_heads = cli.kv_heads.map_or(heads, |g| g as usize);
        if !heads.is_multiple_of(kv_heads) {
            return Err(usage::<Cli>(
                ErrorKind::ArgumentConflict,
                format!(
                    "--kv-heads {kv_heads} does not divide --heads {heads}: every key/value head \
                     serves the same number of query heads, H / G"
                ),
            ));
        }
        if let (true, Some(path)) = (cli.decode, cli.mask.as_ref().and_then(MaskArg::file)) {
            return Err(usage::<Cli>(
                ErrorKind::ArgumentConflict,
                format!(
                    "--decode computes causal attention through a KV cache (a sliding window \
                     with --mask window:W), so it takes no mask file: drop --mask {} or \
                     --decode",
                    path.display()
                ),
            ));
        }
        let rope_base = cli.rope.then(|| cli.rope_base.unwrap_or(DEFAULT_ROPE_BASE));
        Ok(Plan { heads, kv_heads, rope_base, decode: cli.decode })
    }

    /// What was done, for the summary: `2-head attention over (5, 8)`, or e.g. `4 query heads
    /// sharing 2 key/value heads over (6, 12), RoPE base 10000, sliding window W = 3, decoded
    /// token by token through a KV cache`.
    fn describe(&self, x_shape: &[usize], mask: Option<&MaskArg>) -> String {
        let (h, g) = (self.heads, self.kv_heads);
        let heads = match g {
            _ if g == h => format!("{h}-head attention"),
            1 => format!("{h} query heads sharing 1 key/value head (multi-query attention)"),
            _ => format!("{h} query heads sharing {g} key/value heads"),
        };
        let mut parts = vec![format!("{heads} over {}", shape_text(x_shape))];
        if let Some(base) = self.rope_base {
            parts.push(format!("RoPE base {base}"));
        }
        match mask {
            Some(MaskArg::Causal) => parts.push("causal".into()),
            Some(MaskArg::Window(w)) => parts.push(format!("sliding window W = {w}")),
            Some(MaskArg::File(path)) => parts.push(format!("mask {}", path.display())),
            None if self.decode => parts.push("causal".into()),
            None => {}
        }
        if self.decode {
            parts.push("decoded token by token through a KV cache".into());
        }
        parts.join(", ")
    }

    /// The heatmap's title: `3-head attention weights`, or e.g. `4 query heads, 2 key/value
    /// heads: attention weights`.
    fn title(&self) -> String {
        if self.kv_heads == self.heads {
            format!("{}-head attention weights", self.heads)
        } else {
            let g = self.kv_heads;
            let s = if g == 1 { "" } else { "s" };
            format!("{} query heads, {g} key/value head{s}: attention weights", self.heads)
        }
    }
}

/// Runs the tool on its arguments (the program name first): reads X and the four matrices,
/// attends, writes OUT (and W, and the PNG); returns the summary.
pub fn run(args: Vec<OsString>) -> Result<String, Failure> {
    let cli = Cli::try_parse_from(args)?;
    let plan = Plan::of(&cli)?;
    let w_paths = [&cli.wq, &cli.wk, &cli.wv, &cli.wo];
    let mut inputs = vec![Named { flag: "--x", path: &cli.x }];
    for (flag, path) in ["--wq", "--wk", "--wv", "--wo"].into_iter().zip(w_paths) {
        inputs.push(Named { flag, path });
    }
    let mask_file = cli.mask.as_ref().and_then(MaskArg::file);
    inputs.extend(mask_file.map(|path| Named { flag: "--mask", path }));
    check_distinct(&inputs, &cli.written.named())
        .map_err(|message| usage::<Cli>(ErrorKind::ArgumentConflict, message))?;
    // An output's folder is checked now, not after the work when the output is written.
    check_outputs(&cli.written.named()).map_err(Failure::Data)?;

    if let Some((weights_shape, element)) = weights_from_header(&cli, &plan) {
        check_sizes(&cli, &plan, &weights_shape, element)?;
    }
    let x = Tensor::load(&cli.x)?;
    let w = [
        Tensor::load(&cli.wq)?,
        Tensor::load(&cli.wk)?,
        Tensor::load(&cli.wv)?,
        Tensor::load(&cli.wo)?,
    ];
    let mut files = vec![(cli.x.as_path(), &x)];
    files.extend(w_paths.iter().map(|p| p.as_path()).zip(&w));
    same_dtype(&files)?;
    match (x, w) {
        (Tensor::F32(x), [Tensor::F32(q), Tensor::F32(k), Tensor::F32(v), Tensor::F32(o)]) => {
            multihead(&cli, &plan, x, [q, k, v, o])
        }
        (Tensor::F64(x), [Tensor::F64(q), Tensor::F64(k), Tensor::F64(v), Tensor::F64(o)]) => {
            multihead(&cli, &plan, x, [q, k, v, o])
        }
        _ => unreachable!("same_dtype checked that all five agree"),
    }
}

/// The layer the options ask for, from the four matrices (checked against X's d_model).
fn layer<A: Float>(
    cli: &Cli,
    plan: &Plan,
    d_model: usize,
    w: [ArrayD<A>; 4],
) -> Result<GroupedQueryAttention<A>, Failure> {
    let x_shown = cli.x.display();
    let (heads, kv_heads) = (plan.heads, plan.kv_heads);
    let in_x = |e: AttentionError| {
        Failure::Data(format!("{x_shown}: {e} (d_model is the last axis of X)"))
    };
    let d_head = head_width(d_model, heads).map_err(in_x)?;
    let kv_width = kv_heads * d_head;
    let mut matrices: Vec<Array2<A>> = Vec::new();
    for ((path, w), width) in [&cli.wq, &cli.wk, &cli.wv, &cli.wo]
        .into_iter()
        .zip(w)
        .zip([d_model, kv_width, kv_width, d_model])
    {
        if w.shape() != [d_model, width] {
            let expected = if width == d_model {
                format!(
                    "(d_model, d_model) = ({d_model}, {d_model}) was expected, d_model being the \
                     last axis of {x_shown}"
                )
            } else {
                format!(
                    "(d_model, G·d_head) = ({d_model}, {width}) was expected, with d_model = \
                     {d_model} the last axis of {x_shown}, G = {kv_heads} key/value heads \
                     (--kv-heads) and d_head = d_model / H = {d_model} / {heads} = {d_head}"
                )
            };
            return Err(Failure::Data(format!(
                "{}: has shape {} but {expected}",
                path.display(),
                shape_text(w.shape()),
            )));
        }
        matrices.push(w.into_dimensionality::<Ix2>().expect("checked: 2 axes"));
    }
    let [w_q, w_k, w_v, w_o]: [Array2<A>; 4] = matrices.try_into().expect("four matrices");
    let layer =
        GroupedQueryAttention::new(w_q, w_k, w_v, w_o, heads, kv_heads).map_err(in_x)?;
    let Some(base) = plan.rope_base else {
        return Ok(layer);
    };
    if d_head % 2 != 0 {
        return Err(Failure::Data(format!(
            "{x_shown}: --rope turns pairs of columns, so d_head must be even, but d_head = \
             d_model / H = {d_model} / {heads} = {d_head} (d_model is the last axis of X)"
        )));
    }
    let rope = Rope::new(d_head, base, RopeLayout::RotateHalf).map_err(in_x)?;
    layer.with_rope(rope).map_err(in_x)
}

/// Loads a mask file for the layer's weights `(H, L, L)` or `(batch, H, L, L)` by the rule
/// `attend` follows (it broadcasts to the weights as PyTorch's `attn_mask` does), with one
/// addition for a batch: a `(batch, L, L)` mask is one mask per item, applied to every head,
/// as `(batch, 1, L, L)` is (with a note when batch = H, where `attend` would read one mask
/// per head). The mask returned has the weights' full shape.
fn load_layer_mask(path: &Path, weights_shape: &[usize]) -> Result<Mask, Failure> {
    let fail = |problem: String| Failure::Data(format!("{}: {problem}", path.display()));
    let shape = npy::read_header(path).map_err(fail)?.shape;
    let per_item = weights_shape.len() == 4
        && shape.len() == 3
        && shape[0] == weights_shape[0]
        && shape[0] != 1
        && shape[1..] == weights_shape[2..];
    let mask = if per_item {
        if shape[0] == weights_shape[1] {
            let (b, l) = (shape[0], shape[1]);
            note(format!(
                "{}: a ({b}, {l}, {l}) mask with batch = H = {b} is read as one mask per batch \
                 item, applied to every head (attend reads it as one per head); to say which, \
                 save it as ({b}, 1, {l}, {l}) for one per item or (1, {b}, {l}, {l}) for one \
                 per head",
                path.display()
            ));
        }
        let items = [weights_shape[0], weights_shape[2], weights_shape[3]];
        load_mask(path, &items)?.for_heads()
    } else {
        load_mask(path, weights_shape)?
    };
    let full = mask
        .as_array()
        .broadcast(IxDyn(weights_shape))
        .map(|a| a.to_owned())
        .ok_or_else(|| fail(format!("the mask does not broadcast to {}", shape_text(weights_shape))))?;
    Mask::from_array(full).map_err(|e| fail(e.to_string()))
}

/// The PNG and the page the options ask for, with panels named by head (and batch item,
/// when X of `x_axes` axes has a batch).
fn pictures<'a>(
    cli: &'a Cli,
    plan: &Plan,
    x_axes: usize,
) -> (Option<Picture<'a>>, Option<View<'a>>) {
    let panel_axes: &[&str] = if x_axes == 2 { &["head"] } else { &["batch", "head"] };
    let labels = cli.written.labels.as_deref();
    let picture = cli.written.png.as_deref().map(|path| Picture {
        path,
        labels,
        title: plan.title(),
        axes: panel_axes,
        scale: cli.written.png_scale,
    });
    let view = cli.written.view.as_deref().map(|path| View {
        path,
        labels,
        title: plan.title(),
        axes: panel_axes,
    });
    (picture, view)
}

/// Checks every size that follows from X's shape: the weights the layer forms
/// ([`check_weight_bytes`]), the PNG's pixels and the page's weights.
fn check_sizes(
    cli: &Cli,
    plan: &Plan,
    weights_shape: &[usize],
    element: usize,
) -> Result<(), Failure> {
    check_weight_bytes(
        &cli.x.display().to_string(),
        weights_shape,
        dtype_name(element),
        element,
        "multihead always forms every head's weights: pass fewer tokens or a smaller batch \
         (attend --impl tiled computes one head's attention without them)",
    )?;
    let (picture, view) = pictures(cli, plan, weights_shape.len() - 1);
    if let Some(picture) = &picture {
        picture.check(weights_shape)?;
    }
    if let Some(view) = &view {
        view.check(weights_shape)?;
    }
    Ok(())
}

/// The shape of the weights, `(…, H, L, L)`, and the bytes of an element, from X's header
/// alone, when it is a readable float array of 2 or 3 axes (otherwise loading it reports the
/// problem).
fn weights_from_header(cli: &Cli, plan: &Plan) -> Option<(Vec<usize>, usize)> {
    let x = npy::read_header(&cli.x).ok()?;
    let element = x.dtype.filter(|d| d.kind == 'f' && matches!(d.size, 4 | 8))?.size;
    let n = x.shape.len();
    if !(2..=3).contains(&n) {
        return None;
    }
    let mut shape = x.shape[..n - 2].to_vec();
    shape.extend([plan.heads, x.shape[n - 2], x.shape[n - 2]]);
    Some((shape, element))
}

fn multihead<A: Float + WritableElement>(
    cli: &Cli,
    plan: &Plan,
    x: ArrayD<A>,
    w: [ArrayD<A>; 4],
) -> Result<String, Failure> {
    let x_shown = cli.x.display();
    if !(2..=3).contains(&x.ndim()) {
        return Err(Failure::Data(format!(
            "{x_shown}: has shape {} but (L, d_model) or (batch, L, d_model) was expected",
            shape_text(x.shape())
        )));
    }
    let d_model = x.shape()[x.ndim() - 1];
    let layer = layer(cli, plan, d_model, w)?;

    let l = x.shape()[x.ndim() - 2];
    let mut weights_shape = x.shape()[..x.ndim() - 2].to_vec();
    weights_shape.extend([plan.heads, l, l]);
    let (picture, view) = pictures(cli, plan, x.ndim());
    // Every size that follows from the shapes, checked before any work (`run` checked them
    // from X's header already, before reading the data; this covers the rest).
    check_sizes(cli, plan, &weights_shape, size_of::<A>())?;
    let tokens: f64 = x.shape()[..x.ndim() - 1].iter().map(|&s| s as f64).product();
    let d = d_model as f64;
    note_if_debug("multihead", tokens * (4.0 * d * d + 2.0 * l as f64 * d));
    let window = match cli.mask {
        Some(MaskArg::Window(w)) => Some(w),
        _ => None,
    };
    let mask = match &cli.mask {
        None if plan.decode => Some(Mask::causal(l)), // what decoding computes, for the PNG
        None => None,
        Some(MaskArg::Causal) => Some(Mask::causal(l)),
        Some(MaskArg::Window(w)) => Some(
            Mask::sliding_window(l, *w)
                .map_err(|e| Failure::Data(format!("--mask window:{w}: {e}")))?,
        ),
        Some(MaskArg::File(path)) => Some(load_layer_mask(path, &weights_shape)?),
    };
    let mask_path = cli.mask.as_ref().and_then(MaskArg::file).unwrap_or(Path::new("--mask"));
    let files = [("x", cli.x.as_path()), ("mask", mask_path)];
    let summary = plan.describe(x.shape(), cli.mask.as_ref());
    let progress = Progress::start(format!("multihead: {summary}"));
    let (output, weights) = if x.ndim() == 2 {
        let x = x.into_dimensionality::<Ix2>().expect("checked: 2 axes");
        let out = if plan.decode {
            layer.decode(&x, window)
        } else {
            layer.forward(&x, mask.as_ref())
        };
        let out = out.map_err(|e| explain(&e, &files))?;
        (out.output.into_dyn(), out.weights.into_dyn())
    } else {
        let x = x.into_dimensionality::<Ix3>().expect("checked: 3 axes");
        if plan.decode {
            // Each item is a sequence of its own, decoded from position 0 with an empty cache.
            let (batch, l, d_model) = x.dim();
            let mut output = Array3::zeros((batch, l, d_model));
            let mut weights = Array4::zeros((batch, plan.heads, l, l));
            for (b, item) in x.outer_iter().enumerate() {
                let out = layer.decode(&item, window).map_err(|e| explain(&e, &files))?;
                output.index_axis_mut(Axis(0), b).assign(&out.output);
                weights.index_axis_mut(Axis(0), b).assign(&out.weights);
            }
            (output.into_dyn(), weights.into_dyn())
        } else {
            let out =
                layer.forward_batched(&x, mask.as_ref()).map_err(|e| explain(&e, &files))?;
            (out.output.into_dyn(), out.weights.into_dyn())
        }
    };

    progress.finish();
    let mut outputs = Outputs::new();
    let mut written = vec![format!("output {}", shape_text(output.shape()))];
    outputs.write_npy(&cli.written.out, &output)?;
    if let Some(path) = &cli.written.weights {
        outputs.write_npy(path, &weights)?;
        written.push(format!("weights {}", shape_text(weights.shape())));
    }
    if let (Some(path), Some(picture)) = (&cli.written.png, &picture) {
        let png = picture.render(&weights, mask.as_ref().map(Mask::as_array))?;
        outputs.write_bytes(path, &png)?;
        written.push(picture.scale.describe().into());
    }
    if let (Some(path), Some(view)) = (&cli.written.view, &view) {
        outputs.write_bytes(path, &view.render(&weights)?)?;
        written.push("head view of the weights".into());
    }
    let paths = outputs.commit()?;
    Ok(format!("{summary}: {}", wrote(&paths.into_iter().zip(written).collect::<Vec<_>>())))
}
