//! `attend`: scaled dot-product attention on Q, K, V read from `.npy` files.

use attention::Float;
use attention::mask::Mask;
use attention::sdpa::sdpa_batched;
use attention::tiled::{Masking, Tiles, tiled_sdpa_batched};
use ndarray::ArrayD;
use ndarray_npy::WritableElement;

use super::{
    Args, Outputs, Picture, Tensor, distinct_outputs, explain, labels_need_png, load_bool, same_dtype, shape_text,
};

#[path = "../common/timing.rs"]
mod timing;

/// The command line, as `--help`-less usage text.
pub const USAGE: &str = "attend --q Q.npy --k K.npy --v V.npy [--mask causal | --mask M.npy] --out OUT.npy \
                         [--weights W.npy] [--png HEATMAP.png [--labels \"my,name,is,Aj\"]] \
                         [--impl plain|tiled] [--bench N]";

/// Below this many scores per matrix (`L_q · L_k`, 256 × 256) the default is the plain path.
pub const TILED_FROM: usize = 256 * 256;

/// Which implementation computes the attention (`--impl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Impl {
    /// `sdpa_batched`: forms the weights (needed for `--weights` and `--png`).
    Plain,
    /// `tiled_sdpa_batched`: the output only, without the `L_q × L_k` matrix, on all cores.
    Tiled,
}

impl Impl {
    /// `--impl plain|tiled`, or the default: plain when the weights are asked for (only the
    /// plain path forms them) or when a matrix has fewer than [`TILED_FROM`] scores, tiled
    /// otherwise.
    fn choose(flag: Option<&str>, wants_weights: bool, scores: usize) -> Result<Impl, String> {
        match flag {
            Some("plain") => Ok(Impl::Plain),
            Some("tiled") if wants_weights => Err(
                "--impl tiled: the tiled path never forms the weights; drop --weights and --png, or use --impl plain"
                    .into(),
            ),
            Some("tiled") => Ok(Impl::Tiled),
            Some(other) => Err(format!("--impl {other}: expected plain or tiled (usage: {USAGE})")),
            None if wants_weights || scores < TILED_FROM => Ok(Impl::Plain),
            None => Ok(Impl::Tiled),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Impl::Plain => "plain",
            Impl::Tiled => "tiled",
        }
    }
}

/// `--bench N`: a whole number of runs, at least 1.
fn bench_runs(flag: Option<&str>) -> Result<Option<usize>, String> {
    flag.map(|n| match n.parse::<usize>() {
        Ok(runs) if runs >= 1 => Ok(runs),
        _ => Err(format!("--bench {n}: expected a number of runs, at least 1")),
    })
    .transpose()
}

/// Runs the tool: reads the inputs, attends, writes OUT (and W); returns a one-line summary
/// (with `--bench`, followed by the timing, whose last line is `median_ms=<number>`).
pub fn run(args: &[String]) -> Result<String, String> {
    let args = Args::parse(args, &["q", "k", "v", "mask", "out", "weights", "png", "labels", "impl", "bench"], USAGE)?;
    labels_need_png(&args)?;
    let bench = bench_runs(args.optional("bench"))?;
    let wants_weights = args.optional("weights").is_some() || args.optional("png").is_some();
    Impl::choose(args.optional("impl"), wants_weights, 0)?; // a bad --impl fails before any file is read
    let paths = Paths {
        q: args.required("q", USAGE)?,
        k: args.required("k", USAGE)?,
        v: args.required("v", USAGE)?,
        mask: args.optional("mask"),
        out: args.required("out", USAGE)?,
        weights: args.optional("weights"),
        png: args.optional("png"),
        labels: args.optional("labels"),
        implementation: args.optional("impl"),
        bench,
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
    implementation: Option<&'a str>,
    bench: Option<usize>,
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
    let wants_weights = paths.weights.is_some() || paths.png.is_some();
    let implementation = Impl::choose(paths.implementation, wants_weights, l_q * l_k)?;
    let masking = match (paths.mask, &mask) {
        (Some("causal"), _) => Masking::Causal,
        (_, Some(mask)) => Masking::Mask(mask),
        (_, None) => Masking::All,
    };
    // The computation alone, without file I/O: what --bench times.
    let compute = || match implementation {
        Impl::Plain => sdpa_batched(&q, &k, &v, mask.as_ref()).map(|att| (att.output, Some(att.weights))),
        Impl::Tiled => tiled_sdpa_batched(&q, &k, &v, masking, Tiles::default()).map(|output| (output, None)),
    };
    let (output, weights) = compute().map_err(|e| explain(&e, &files))?;
    let median_ms = paths.bench.map(|runs| timing::median_ms(runs, compute));
    let mut outputs = Outputs::default();
    outputs.write(paths.out, &output)?;
    if let (Some(path), Some(weights)) = (paths.weights, &weights) {
        outputs.write(path, weights)?;
    }
    if let Some(path) = paths.png {
        let picture = Picture {
            path,
            labels: paths.labels,
            title: format!(
                "Attention weights ({})",
                paths.mask.map_or("no mask".to_string(), |m| format!("mask: {m}"))
            ),
            axes: &["batch", "head"][..n - 2],
        };
        let weights = weights.as_ref().expect("the plain path runs whenever --png is given");
        outputs.write_bytes(path, &picture.render(weights, mask.as_ref().map(Mask::as_array))?)?;
    }
    let written = outputs.commit()?;
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    let weights_shape = weights.map_or("not formed".to_string(), |w| shape_text(w.shape()));
    let mut summary = format!(
        "attention ({}) over {} with L_q = {l_q}, L_k = {l_k}: wrote {} (output {}, weights {weights_shape})",
        implementation.name(),
        shape_text(q.shape()),
        names.join(" and "),
        shape_text(output.shape()),
    );
    if let (Some(runs), Some(ms)) = (paths.bench, median_ms) {
        summary += &format!(
            "\n{} median of {runs} runs after one warm-up, without file I/O:\nmedian_ms={ms:.3}",
            implementation.name()
        );
    }
    Ok(summary)
}
