//! `attend`: scaled dot-product attention on Q, K, V read from `.npy` files.

use attention::Float;
use attention::mask::Mask;
use attention::sdpa::sdpa_batched;
use ndarray::ArrayD;
use ndarray_npy::WritableElement;

use super::{
    Args, Outputs, Picture, Tensor, distinct_outputs, explain, labels_need_png, load_bool, same_dtype, shape_text,
};

/// The command line, as `--help`-less usage text.
pub const USAGE: &str = "attend --q Q.npy --k K.npy --v V.npy [--mask causal | --mask M.npy] --out OUT.npy \
                         [--weights W.npy] [--png HEATMAP.png [--labels \"my,name,is,Aj\"]]";

/// Runs the tool: reads the inputs, attends, writes OUT (and W); returns a one-line summary.
pub fn run(args: &[String]) -> Result<String, String> {
    let args = Args::parse(args, &["q", "k", "v", "mask", "out", "weights", "png", "labels"], USAGE)?;
    labels_need_png(&args)?;
    let paths = Paths {
        q: args.required("q", USAGE)?,
        k: args.required("k", USAGE)?,
        v: args.required("v", USAGE)?,
        mask: args.optional("mask"),
        out: args.required("out", USAGE)?,
        weights: args.optional("weights"),
        png: args.optional("png"),
        labels: args.optional("labels"),
    };
    let mut inputs = vec![paths.q, paths.k, paths.v];
    inputs.extend(paths.mask.filter(|m| *m != "causal"));
    let outputs: Vec<&str> = [Some(paths.out), paths.weights, paths.png].into_iter().flatten().collect();
    distinct_outputs(&inputs, &outputs)?;

    let (q, k, v) = (Tensor::load(paths.q)?, Tensor::load(paths.k)?, Tensor::load(paths.v)?);
    same_dtype(&[(paths.q, &q), (paths.k, &k), (paths.v, &v)])?;
    for (path, t) in [(paths.q, &q), (paths.k, &k), (paths.v, &v)] {
        if !(2..=4).contains(&t.shape().len()) {
            return Err(format!(
                "{path}: has shape {} but (L, d), (batch, L, d) or (batch, heads, L, d) was expected",
                shape_text(t.shape())
            ));
        }
    }
    match (q, k, v) {
        (Tensor::F32(q), Tensor::F32(k), Tensor::F32(v)) => attend(&paths, q, k, v),
        (Tensor::F64(q), Tensor::F64(k), Tensor::F64(v)) => attend(&paths, q, k, v),
        _ => unreachable!("same_dtype checked that all three agree"),
    }
}

struct Paths<'a> {
    q: &'a str,
    k: &'a str,
    v: &'a str,
    mask: Option<&'a str>,
    out: &'a str,
    weights: Option<&'a str>,
    png: Option<&'a str>,
    labels: Option<&'a str>,
}

fn attend<A: Float + WritableElement>(
    paths: &Paths,
    q: ArrayD<A>,
    k: ArrayD<A>,
    v: ArrayD<A>,
) -> Result<String, String> {
    let files = [("q", paths.q), ("k", paths.k), ("v", paths.v), ("mask", paths.mask.unwrap_or("--mask"))];
    let n = q.ndim();
    if k.ndim() != n || v.ndim() != n {
        let (path, other) = if k.ndim() != n { (paths.k, &k) } else { (paths.v, &v) };
        return Err(format!(
            "{path}: has {} axes but {} has {n}: Q, K and V need the same leading axes",
            other.ndim(),
            paths.q
        ));
    }
    let (l_q, l_k) = (q.shape()[n - 2], k.shape()[n - 2]);
    let mask = match paths.mask {
        None => None,
        Some("causal") => Some(Mask::causal_rect(l_q, l_k)),
        Some(path) => {
            let allowed = load_bool(path)?;
            let mut with_lead = q.shape()[..n - 2].to_vec();
            with_lead.extend([l_q, l_k]);
            if allowed.shape() != [l_q, l_k] && allowed.shape() != with_lead.as_slice() {
                let mut expected = shape_text(&[l_q, l_k]);
                if n > 2 {
                    expected = format!("{expected} or {}", shape_text(&with_lead));
                }
                return Err(format!(
                    "{path}: mask has shape {} but {expected} was expected (true = may attend)",
                    shape_text(allowed.shape())
                ));
            }
            Some(Mask::from_array(allowed).map_err(|e| explain(&e, &files))?)
        }
    };
    let att = sdpa_batched(&q, &k, &v, mask.as_ref()).map_err(|e| explain(&e, &files))?;
    let mut outputs = Outputs::default();
    outputs.write(paths.out, &att.output)?;
    if let Some(path) = paths.weights {
        outputs.write(path, &att.weights)?;
    }
    if let Some(path) = paths.png {
        let picture = Picture {
            path,
            labels: paths.labels,
            title: format!("Attention weights ({})", paths.mask.map_or("no mask".to_string(), |m| format!("mask: {m}"))),
            axes: &["batch", "head"][..n - 2],
        };
        outputs.write_bytes(path, &picture.render(&att.weights, mask.as_ref().map(Mask::as_array))?)?;
    }
    let written = outputs.commit()?;
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    Ok(format!(
        "attention over {} with L_q = {l_q}, L_k = {l_k}: wrote {} (output {}, weights {})",
        shape_text(q.shape()),
        names.join(" and "),
        shape_text(att.output.shape()),
        shape_text(att.weights.shape()),
    ))
}
