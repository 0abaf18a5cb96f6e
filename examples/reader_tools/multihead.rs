//! `multihead`: multi-head self-attention on X with weights read from `.npy` files.

use attention::Float;
use attention::mask::Mask;
use attention::multihead::MultiHeadAttention;
use ndarray::{Array2, ArrayD, Ix2, Ix3};
use ndarray_npy::WritableElement;

use super::{
    Args, Outputs, Picture, Tensor, distinct_outputs, explain, labels_need_png, load_bool, same_dtype, shape_text,
};

/// The command line.
pub const USAGE: &str = "multihead --x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy --wo WO.npy --heads H \
                         [--mask causal | --mask M.npy] --out OUT.npy [--weights W.npy] \
                         [--png GRID.png [--labels \"my,name,is,Aj\"]]";

const WEIGHTS: [&str; 4] = ["wq", "wk", "wv", "wo"];

/// Runs the tool: reads X and the four matrices, attends, writes OUT (and W).
pub fn run(args: &[String]) -> Result<String, String> {
    let args =
        Args::parse(args, &["x", "wq", "wk", "wv", "wo", "heads", "mask", "out", "weights", "png", "labels"], USAGE)?;
    labels_need_png(&args)?;
    let x_path = args.required("x", USAGE)?;
    let mut w_paths = [""; 4];
    for (slot, name) in w_paths.iter_mut().zip(WEIGHTS) {
        *slot = args.required(name, USAGE)?;
    }
    let heads_text = args.required("heads", USAGE)?;
    let heads: usize = heads_text
        .parse()
        .ok()
        .filter(|&h| h > 0)
        .ok_or_else(|| format!("--heads: {heads_text:?} is not a positive whole number"))?;
    let paths = Paths {
        x: x_path,
        w: w_paths,
        heads,
        mask: args.optional("mask"),
        out: args.required("out", USAGE)?,
        weights: args.optional("weights"),
        png: args.optional("png"),
        labels: args.optional("labels"),
    };
    let mut inputs = vec![paths.x];
    inputs.extend(paths.w);
    inputs.extend(paths.mask.filter(|m| *m != "causal"));
    let outputs: Vec<&str> = [Some(paths.out), paths.weights, paths.png].into_iter().flatten().collect();
    distinct_outputs(&inputs, &outputs)?;

    let x = Tensor::load(paths.x)?;
    let w =
        [Tensor::load(paths.w[0])?, Tensor::load(paths.w[1])?, Tensor::load(paths.w[2])?, Tensor::load(paths.w[3])?];
    let mut files = vec![(paths.x, &x)];
    files.extend(paths.w.iter().copied().zip(&w));
    same_dtype(&files)?;
    match (x, w) {
        (Tensor::F32(x), [Tensor::F32(q), Tensor::F32(k), Tensor::F32(v), Tensor::F32(o)]) => {
            multihead(&paths, x, [q, k, v, o])
        }
        (Tensor::F64(x), [Tensor::F64(q), Tensor::F64(k), Tensor::F64(v), Tensor::F64(o)]) => {
            multihead(&paths, x, [q, k, v, o])
        }
        _ => unreachable!("same_dtype checked that all five agree"),
    }
}

struct Paths<'a> {
    x: &'a str,
    w: [&'a str; 4],
    heads: usize,
    mask: Option<&'a str>,
    out: &'a str,
    weights: Option<&'a str>,
    png: Option<&'a str>,
    labels: Option<&'a str>,
}

fn multihead<A: Float + WritableElement>(paths: &Paths, x: ArrayD<A>, w: [ArrayD<A>; 4]) -> Result<String, String> {
    if !(2..=3).contains(&x.ndim()) {
        return Err(format!(
            "{}: has shape {} but (L, d_model) or (batch, L, d_model) was expected",
            paths.x,
            shape_text(x.shape())
        ));
    }
    let d_model = x.shape()[x.ndim() - 1];
    let mut matrices: Vec<Array2<A>> = Vec::new();
    for (path, w) in paths.w.iter().zip(w) {
        if w.shape() != [d_model, d_model] {
            return Err(format!(
                "{path}: has shape {} but (d_model, d_model) = ({d_model}, {d_model}) was expected, \
                 d_model being the last axis of {}",
                shape_text(w.shape()),
                paths.x
            ));
        }
        matrices.push(w.into_dimensionality::<Ix2>().expect("checked: 2 axes"));
    }
    let [w_q, w_k, w_v, w_o]: [Array2<A>; 4] = matrices.try_into().expect("four matrices");
    let mha = MultiHeadAttention::new(w_q, w_k, w_v, w_o, paths.heads)
        .map_err(|e| format!("{}: {e} (d_model is the last axis of X)", paths.x))?;

    let l = x.shape()[x.ndim() - 2];
    let mask = match paths.mask {
        None => None,
        Some("causal") => Some(Mask::causal(l)),
        Some(path) => {
            let allowed = load_bool(path)?;
            let per_item = [x.shape()[0], l, l];
            if allowed.shape() != [l, l] && !(x.ndim() == 3 && allowed.shape() == per_item) {
                let expected = if x.ndim() == 3 {
                    format!("{} or {}", shape_text(&[l, l]), shape_text(&per_item))
                } else {
                    shape_text(&[l, l])
                };
                return Err(format!(
                    "{path}: mask has shape {} but {expected} was expected (true = may attend)",
                    shape_text(allowed.shape())
                ));
            }
            Some(Mask::from_array(allowed).map_err(|e| format!("{path}: {e}"))?)
        }
    };
    let files = [("x", paths.x), ("mask", paths.mask.unwrap_or("--mask"))];
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
    let mut outputs = Outputs::default();
    outputs.write(paths.out, &output)?;
    if let Some(path) = paths.weights {
        outputs.write(path, &weights)?;
    }
    if let Some(path) = paths.png {
        let picture = Picture {
            path,
            labels: paths.labels,
            title: format!("{}-head attention weights", paths.heads),
            axes: panel_axes,
        };
        // A (batch, L, L) mask applies to every head, as in the computation itself.
        let per_head = mask.as_ref().map(Mask::for_heads);
        outputs.write_bytes(path, &picture.render(&weights, per_head.as_ref().map(Mask::as_array))?)?;
    }
    let written = outputs.commit()?;
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    Ok(format!(
        "{}-head attention over {}: wrote {} (output {}, weights {})",
        paths.heads,
        shape_text(output.shape()),
        names.join(" and "),
        shape_text(output.shape()),
        shape_text(weights.shape()),
    ))
}
