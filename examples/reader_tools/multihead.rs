//! `multihead`: multi-head self-attention on X with weights read from `.npy` files.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use attention::Float;
use attention::mask::Mask;
use attention::multihead::MultiHeadAttention;
use clap::Parser;
use clap::error::ErrorKind;
use ndarray::{Array2, ArrayD, Ix2, Ix3};
use ndarray_npy::WritableElement;

use super::outputs::{Named, Outputs, check_distinct};
use super::{
    Failure, MaskArg, Picture, Tensor, Written, at_least_one, explain, load_bool, same_dtype,
    shape_text, usage, wrote,
};

/// Multi-head self-attention on your own tensors: X·W_Q, W_K, W_V split into heads, scaled
/// dot-product attention per head (scale √d_head), merged, times W_O.
///
/// Reads X and the four (d_model, d_model) matrices from NumPy .npy files (all float32 or all
/// float64; applied as X·W, so a PyTorch nn.Linear weight must be transposed first) and writes
/// the output, X's shape, and every head's weights, (heads, L, L) or (batch, heads, L, L), in
/// the same dtype; it can also draw the weights. There are no biases.
#[derive(Parser, Debug)]
#[command(
    name = "multihead",
    version,
    after_help = "Example (from the repository root):\n  \
        F=tests/fixtures/mha/f64_d12_h3_L6_causal\n  \
        cargo run --release --example multihead -- --x $F/x_q.npy --wq $F/w_q.npy \\\n      \
        --wk $F/w_k.npy --wv $F/w_v.npy --wo $F/w_o.npy --heads 3 --mask causal \\\n      \
        --out out.npy --png heads.png\n\n\
        Exit codes: 0 done; 1 bad data (a file missing, malformed, of the wrong dtype or shape, \
        or not writable); 2 bad usage (options); 128 + N interrupted by signal N while writing.\n\
        A failed run changes no file. Reference: Appendix C of the book."
)]
pub struct Cli {
    /// The tokens: (L, d_model) or (batch, L, d_model)
    #[arg(long, value_name = "X.npy")]
    pub x: PathBuf,
    /// W_Q, (d_model, d_model)
    #[arg(long, value_name = "WQ.npy")]
    pub wq: PathBuf,
    /// W_K, (d_model, d_model)
    #[arg(long, value_name = "WK.npy")]
    pub wk: PathBuf,
    /// W_V, (d_model, d_model)
    #[arg(long, value_name = "WV.npy")]
    pub wv: PathBuf,
    /// W_O, (d_model, d_model)
    #[arg(long, value_name = "WO.npy")]
    pub wo: PathBuf,
    /// The number of heads; it must divide d_model
    #[arg(long, value_name = "H", value_parser = at_least_one, allow_negative_numbers = true)]
    pub heads: u32,
    /// `causal`, or a bool .npy, True = may attend: (L, L), or (batch, L, L) for a batch (one
    /// mask per item, e.g. padding, applied to every head)
    #[arg(long, value_name = "causal|M.npy", value_parser = MaskArg::parse)]
    pub mask: Option<MaskArg>,
    #[command(flatten)]
    pub written: Written,
}

/// Runs the tool on its arguments (the program name first): reads X and the four matrices,
/// attends, writes OUT (and W, and the PNG); returns the summary.
pub fn run(args: Vec<OsString>) -> Result<String, Failure> {
    let cli = Cli::try_parse_from(args)?;
    let w_paths = [&cli.wq, &cli.wk, &cli.wv, &cli.wo];
    let mut inputs = vec![Named { flag: "--x", path: &cli.x }];
    for (flag, path) in ["--wq", "--wk", "--wv", "--wo"].into_iter().zip(w_paths) {
        inputs.push(Named { flag, path });
    }
    let mask_file = cli.mask.as_ref().and_then(MaskArg::file);
    inputs.extend(mask_file.map(|path| Named { flag: "--mask", path }));
    check_distinct(&inputs, &cli.written.named())
        .map_err(|message| usage::<Cli>(ErrorKind::ArgumentConflict, message))?;

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
            multihead(&cli, x, [q, k, v, o])
        }
        (Tensor::F64(x), [Tensor::F64(q), Tensor::F64(k), Tensor::F64(v), Tensor::F64(o)]) => {
            multihead(&cli, x, [q, k, v, o])
        }
        _ => unreachable!("same_dtype checked that all five agree"),
    }
}

fn multihead<A: Float + WritableElement>(
    cli: &Cli,
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
    let mut matrices: Vec<Array2<A>> = Vec::new();
    for (path, w) in [&cli.wq, &cli.wk, &cli.wv, &cli.wo].into_iter().zip(w) {
        if w.shape() != [d_model, d_model] {
            return Err(Failure::Data(format!(
                "{}: has shape {} but (d_model, d_model) = ({d_model}, {d_model}) was expected, \
                 d_model being the last axis of {x_shown}",
                path.display(),
                shape_text(w.shape()),
            )));
        }
        matrices.push(w.into_dimensionality::<Ix2>().expect("checked: 2 axes"));
    }
    let [w_q, w_k, w_v, w_o]: [Array2<A>; 4] = matrices.try_into().expect("four matrices");
    let heads = cli.heads as usize;
    let mha = MultiHeadAttention::new(w_q, w_k, w_v, w_o, heads).map_err(|e| {
        Failure::Data(format!("{x_shown}: {e} (d_model is the last axis of X)"))
    })?;

    let l = x.shape()[x.ndim() - 2];
    let mask = match &cli.mask {
        None => None,
        Some(MaskArg::Causal) => Some(Mask::causal(l)),
        Some(MaskArg::File(path)) => {
            let allowed = load_bool(path)?;
            let per_item = [x.shape()[0], l, l];
            if allowed.shape() != [l, l] && !(x.ndim() == 3 && allowed.shape() == per_item) {
                let expected = if x.ndim() == 3 {
                    format!(
                        "{} (every item) or {} (one per item)",
                        shape_text(&[l, l]),
                        shape_text(&per_item)
                    )
                } else {
                    shape_text(&[l, l])
                };
                return Err(Failure::Data(format!(
                    "{}: mask has shape {} but {expected} was expected (True = may attend)",
                    path.display(),
                    shape_text(allowed.shape())
                )));
            }
            Some(
                Mask::from_array(allowed)
                    .map_err(|e| Failure::Data(format!("{}: {e}", path.display())))?,
            )
        }
    };
    let mask_path = cli.mask.as_ref().and_then(MaskArg::file).unwrap_or(Path::new("--mask"));
    let files = [("x", cli.x.as_path()), ("mask", mask_path)];
    let panel_axes: &[&str] = if x.ndim() == 2 { &["head"] } else { &["batch", "head"] };
    let (output, weights) = if x.ndim() == 2 {
        let x = x.into_dimensionality::<Ix2>().expect("checked: 2 axes");
        let out = mha.forward(&x, mask.as_ref()).map_err(|e| explain(&e, &files))?;
        (out.output.into_dyn(), out.weights.into_dyn())
    } else {
        let x = x.into_dimensionality::<Ix3>().expect("checked: 3 axes");
        let out = mha.forward_batched(&x, mask.as_ref()).map_err(|e| explain(&e, &files))?;
        (out.output.into_dyn(), out.weights.into_dyn())
    };

    let mut outputs = Outputs::new();
    let mut written = vec![format!("output {}", shape_text(output.shape()))];
    outputs.write_npy(&cli.written.out, &output)?;
    if let Some(path) = &cli.written.weights {
        outputs.write_npy(path, &weights)?;
        written.push(format!("weights {}", shape_text(weights.shape())));
    }
    if let Some(path) = &cli.written.png {
        let picture = Picture {
            path,
            labels: cli.written.labels.as_deref(),
            title: format!("{heads}-head attention weights"),
            axes: panel_axes,
        };
        // A (batch, L, L) mask applies to every head, as in the computation itself.
        let per_head = mask.as_ref().map(Mask::for_heads);
        let png = picture.render(&weights, per_head.as_ref().map(Mask::as_array))?;
        outputs.write_bytes(path, &png)?;
        written.push("heatmap of the weights".into());
    }
    let paths = outputs.commit()?;
    Ok(format!(
        "{heads}-head attention over {}: {}",
        shape_text(output.shape()),
        wrote(&paths.into_iter().zip(written).collect::<Vec<_>>())
    ))
}
