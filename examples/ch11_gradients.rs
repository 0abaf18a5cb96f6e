//! Chapter 11, *Gradients: the backward pass of attention*: the hand example, finite
//! differences against the step `h`, a masked example's `P`, `dP` and `dS`, and the gradients
//! against PyTorch's autograd.
//!
//! ```text
//! cargo run --release --example ch11_gradients [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch11_output.txt`) and draws
//! `ch11_finite_differences.png`, `ch11_weights.png`, `ch11_d_weights.png` and
//! `ch11_d_scores.png` (the gradients of the weights and of the scores, each on its own colour
//! scale).
//!
//! Everything the figures show is computed with `attention::exact` (products summed in a fixed
//! order, `exp` from `libm`), never with ndarray's `dot` or `f64::exp`, so that the figures come
//! out the same, byte for byte, on every x86-64 machine.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::exact;
use attention::grad::{SdpaGrads, sdpa_backward};
use attention::mask::Mask;
use attention::multihead::MultiHeadAttention;
use attention::{AttentionError, Float};
use figures::{Axis, ColorScheme, Heatmap, LineChart, ValueRange};
use ndarray::{Array, Array2, ArrayD, Dimension, Ix2, Ix3, array};
use ndarray_npy::{ReadableElement, read_npy};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Seed of everything random in this example.
const SEED: u64 = 11;

/// The hand example: one query, three visible keys and a fourth that is masked.
pub struct Hand {
    pub q: Array2<f64>,
    pub k: Array2<f64>,
    pub v: Array2<f64>,
    pub mask: Mask,
}

/// `q = (1, 1)`; keys `(1, 0)`, `(0, 1)`, `(1, 1)` and a masked `(2, 2)`; values 1, 2, 4, 10.
pub fn hand() -> Result<Hand, AttentionError> {
    Ok(Hand {
        q: array![[1.0, 1.0]],
        k: array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0]],
        v: array![[1.0], [2.0], [4.0], [10.0]],
        mask: Mask::from_array(array![[true, true, true, false]])?,
    })
}

/// A row of numbers to 4 decimals: `[0.2483, 0.2483, 0.5035, 0.0000]`.
fn row<'a>(values: impl IntoIterator<Item = &'a f64>) -> String {
    let items: Vec<String> = values.into_iter().map(|&v| format!("{:.4}", v + 0.0)).collect();
    format!("[{}]", items.join(", "))
}

/// A matrix, one row per line, `decimals` decimals, each line indented by `indent`.
fn matrix(m: &Array2<f64>, decimals: usize, indent: &str) -> String {
    m.rows()
        .into_iter()
        .map(|r| {
            // `+ 0.0` turns −0 (P = 0 times a negative number) into 0 for printing.
            let cells: Vec<String> =
                r.iter().map(|&v| format!("{:>8.decimals$}", v + 0.0)).collect();
            format!("{indent}{}\n", cells.join(""))
        })
        .collect()
}

/// `Σ a ∘ b`, left to right: the loss `ℓ = Σ O ∘ dO` whose gradient with respect to `O` is `dO`.
fn inner<A: Float, D: Dimension>(a: &Array<A, D>, b: &Array<A, D>) -> A {
    a.iter().zip(b).fold(A::zero(), |acc, (&x, &y)| acc + x * y)
}

/// The small problem of the finite-difference figure: `q: (3, 4)`, `k: (4, 4)`, `v: (4, 3)`,
/// `dO: (3, 3)`, entries uniform in [−1.5, 1.5), no mask.
pub struct Problem {
    pub q: Array2<f64>,
    pub k: Array2<f64>,
    pub v: Array2<f64>,
    pub grad_o: Array2<f64>,
}

pub fn problem() -> Problem {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut random =
        |rows, cols| Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.5..1.5));
    Problem { q: random(3, 4), k: random(4, 4), v: random(4, 3), grad_o: random(3, 3) }
}

/// The entry of `Q` whose gradient the figure differentiates numerically.
pub const ENTRY: (usize, usize) = (0, 2);

/// The steps of the sweep: `h = 10^(−e/4)` for `e = 0, 1, …, 60` (1 down to `10⁻¹⁵`), each
/// read from its decimal digits (`10^(−1/4)`, `10^(−1/2)`, `10^(−3/4)` to 17 digits, times a
/// power of ten), so that every machine gets the same bits: `f64::powf` calls the system's
/// maths library, which may round the last bit differently from one machine to another, and in
/// the rounding-dominated half of the figure one bit of `h` moves the point.
pub fn steps() -> Vec<f64> {
    const QUARTERS: [&str; 4] =
        ["1", "0.5623413251903491", "0.31622776601683794", "0.1778279410038923"];
    (0..=60)
        .map(|e| format!("{}e-{}", QUARTERS[e % 4], e / 4).parse().expect("a decimal"))
        .collect()
}

/// The central difference `(ℓ(x + h) − ℓ(x − h)) / (x_up − x_down)` of `ℓ = Σ O ∘ dO` with
/// respect to `Q[ENTRY]`, computed entirely in `A` (the inputs rounded to `A` first); the
/// division uses the step actually taken, `x_up − x_down`, both rounded to `A`.
pub fn central_difference<A: Float>(p: &Problem, h: f64) -> Result<f64, AttentionError> {
    let cast = |m: &Array2<f64>| m.mapv(A::from_f64_lossy);
    let (q, k, v, grad_o) = (cast(&p.q), cast(&p.k), cast(&p.v), cast(&p.grad_o));
    let x = q[ENTRY];
    let (up, down) = (x + A::from_f64_lossy(h), x - A::from_f64_lossy(h));
    let loss = |value: A| -> Result<A, AttentionError> {
        let mut moved = q.clone();
        moved[ENTRY] = value;
        Ok(inner(&exact::sdpa(&moved, &k, &v, None)?.output, &grad_o))
    };
    let (l_up, l_down) = (loss(up)?, loss(down)?);
    let as_f64 = |a: A| a.to_f64().expect("f32 and f64 convert");
    Ok((as_f64(l_up) - as_f64(l_down)) / (as_f64(up) - as_f64(down)))
}

/// The analytic gradient of the figure's entry, from `sdpa_backward` in `f64`.
pub fn analytic(p: &Problem) -> Result<f64, AttentionError> {
    let weights = exact::sdpa(&p.q, &p.k, &p.v, None)?.weights;
    Ok(sdpa_backward(&p.q, &p.k, &p.v, &weights, &p.grad_o)?.grad_q[ENTRY])
}

/// The finite-difference error `|FD − analytic|` for each step, in `A`; steps where the two
/// agree exactly (no point on a log axis) or where `x ± h` rounds back to `x` are left out.
pub fn sweep<A: Float>(p: &Problem) -> Result<Vec<(f64, f64)>, AttentionError> {
    let exact_grad = analytic(p)?;
    let mut points = Vec::new();
    for h in steps() {
        let x = A::from_f64_lossy(p.q[ENTRY]);
        if x + A::from_f64_lossy(h) == x {
            continue; // the step is lost in rounding: no difference at all
        }
        let error = (central_difference::<A>(p, h)? - exact_grad).abs();
        if error > 0.0 {
            points.push((h, error));
        }
    }
    Ok(points)
}

/// The masked example of the heatmaps: a sentence of 4 tokens left-padded to 5, causal, so
/// that the padding query sees no key at all.
pub const TOKENS: [&str; 5] = ["<pad>", "the", "cat", "sat", "on"];

/// The mask of the heatmaps: key `j` visible to query `i` iff `1 ≤ j ≤ i` (causal, and key 0 is
/// padding). Query 0 sees nothing.
pub fn padded_causal() -> Result<Mask, AttentionError> {
    Mask::from_array(Array2::from_shape_fn((5, 5), |(i, j)| j >= 1 && j <= i))
}

/// `P`, `dP = dO·Vᵀ` and `dS` of the masked example (`d_k = 4`, `d_v = 3`, seeded inputs).
pub struct Masked {
    pub weights: Array2<f64>,
    pub grad_weights: Array2<f64>,
    pub grad_scores: Array2<f64>,
    pub grads: SdpaGrads<f64, Ix2>,
    pub mask: Mask,
}

pub fn masked() -> Result<Masked, AttentionError> {
    let mut rng = StdRng::seed_from_u64(SEED + 1);
    let mut random =
        |rows, cols| Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.5..1.5));
    let (q, k, v, grad_o) = (random(5, 4), random(5, 4), random(5, 3), random(5, 3));
    let mask = padded_causal()?;
    let att = exact::sdpa(&q, &k, &v, Some(&mask))?;
    let grad_weights = exact::matmul(&grad_o, &exact::transposed(&v))?;
    let grad_scores = attention::grad::softmax_backward(&att.weights, &grad_weights)?;
    let grads = sdpa_backward(&q, &k, &v, &att.weights, &grad_o)?;
    Ok(Masked { weights: att.weights, grad_weights, grad_scores, grads, mask })
}

/// The largest `|ours − PyTorch| / (1 + |PyTorch|)` over every SDPA gradient case of one
/// dtype (`tests/fixtures/grad`), and the number of cases.
fn worst_sdpa<A: Float + ReadableElement>(dtype: &str) -> Result<(usize, f64), Box<dyn Error>> {
    let mut worst = 0.0_f64;
    let dirs = fixture_cases("grad", dtype)?;
    for dir in &dirs {
        let load = |name: &str| -> Result<ArrayD<A>, Box<dyn Error>> {
            Ok(read_npy(dir.join(format!("{name}.npy")))?)
        };
        let (q, k, v) = (load("q")?, load("k")?, load("v")?);
        let n = q.ndim();
        let mask = if dir.join("mask.npy").exists() {
            Some(Mask::from_array(read_npy::<_, ArrayD<bool>>(dir.join("mask.npy"))?)?)
        } else if dir.join("causal.npy").exists() {
            Some(Mask::causal_rect(q.shape()[n - 2], k.shape()[n - 2]))
        } else {
            None
        };
        let att = exact::sdpa(&q, &k, &v, mask.as_ref())?;
        let g = sdpa_backward(&q, &k, &v, &att.weights, &load("do")?)?;
        for (ours, theirs) in [(&g.grad_q, "dq"), (&g.grad_k, "dk"), (&g.grad_v, "dv")] {
            worst = worst.max(relative(ours, &load(theirs)?));
        }
    }
    Ok((dirs.len(), worst))
}

/// The same for the multi-head layer's five gradients (`tests/fixtures/grad_mha`).
fn worst_layer<A: Float + ReadableElement>(dtype: &str) -> Result<(usize, f64), Box<dyn Error>> {
    let mut worst = 0.0_f64;
    let dirs = fixture_cases("grad_mha", dtype)?;
    for dir in &dirs {
        let load = |name: &str| -> Result<ArrayD<A>, Box<dyn Error>> {
            Ok(read_npy(dir.join(format!("{name}.npy")))?)
        };
        let w = |name| -> Result<Array2<A>, Box<dyn Error>> {
            Ok(load(name)?.into_dimensionality::<Ix2>()?)
        };
        let heads: ArrayD<i64> = read_npy(dir.join("heads.npy"))?;
        let mha = MultiHeadAttention::new(
            w("w_q")?,
            w("w_k")?,
            w("w_v")?,
            w("w_o")?,
            *heads.first().ok_or("heads.npy is empty")? as usize,
        )?;
        let x = load("x")?.into_dimensionality::<Ix3>()?;
        let grad_y = load("dy")?.into_dimensionality::<Ix3>()?;
        let mask = if dir.join("mask.npy").exists() {
            Some(Mask::from_array(read_npy::<_, ArrayD<bool>>(dir.join("mask.npy"))?)?)
        } else {
            None
        };
        let (_, tape) = mha.forward_train(&x, mask.as_ref(), None)?;
        let g = mha.backward(&tape, &grad_y)?;
        for (ours, theirs) in [
            (g.grad_x.into_dyn(), "dx"),
            (g.grad_w_q.into_dyn(), "dw_q"),
            (g.grad_w_k.into_dyn(), "dw_k"),
            (g.grad_w_v.into_dyn(), "dw_v"),
            (g.grad_w_o.into_dyn(), "dw_o"),
        ] {
            worst = worst.max(relative(&ours, &load(theirs)?));
        }
    }
    Ok((dirs.len(), worst))
}

/// `max |a − b| / (1 + |b|)`, in `f64`.
fn relative<A: Float>(ours: &ArrayD<A>, theirs: &ArrayD<A>) -> f64 {
    let f = |x: A| x.to_f64().expect("f32 and f64 convert");
    ours.iter()
        .zip(theirs)
        .map(|(&a, &b)| (f(a) - f(b)).abs() / (1.0 + f(b).abs()))
        .fold(0.0, f64::max)
}

/// The case directories `tests/fixtures/<kind>/<dtype>_*`, sorted.
fn fixture_cases(kind: &str, dtype: &str) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(kind);
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(&root)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if path.is_dir() && name.starts_with(&format!("{dtype}_")) {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Everything the example prints, as one text (also written to `ch11_output.txt`).
fn report(f64_points: &[(f64, f64)], f32_points: &[(f64, f64)]) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();

    let h = hand()?;
    let att = exact::sdpa(&h.q, &h.k, &h.v, Some(&h.mask))?;
    let grad_o = array![[1.0]];
    let g = sdpa_backward(&h.q, &h.k, &h.v, &att.weights, &grad_o)?;
    let mut scores = exact::matmul(&h.q, &exact::transposed(&h.k))? / 2f64.sqrt();
    h.mask.apply(&mut scores)?;
    writeln!(
        out,
        "The hand example: q = (1, 1), keys (1, 0), (0, 1), (1, 1), (2, 2) (the last one"
    )?;
    writeln!(out, "masked), values 1, 2, 4, 10, and dO = 1 (the loss is the output itself)")?;
    writeln!(out, "  scores q·kⱼ/√2      {}", row(&scores))?;
    writeln!(out, "  weights P            {}", row(&att.weights))?;
    writeln!(out, "  output o = P·v       {:.4}", att.output[[0, 0]])?;
    let grad_p = exact::matmul(&grad_o, &exact::transposed(&h.v))?;
    writeln!(out, "  dV = Pᵀ·dO           {}", row(&g.grad_v))?;
    writeln!(out, "  dP = dO·Vᵀ           {}", row(&grad_p))?;
    let big_d = inner(&grad_p, &att.weights);
    writeln!(out, "  D = rowsum(dP ∘ P)   {big_d:.4}   (= rowsum(dO ∘ O) = o)")?;
    let grad_s = attention::grad::softmax_backward(&att.weights, &grad_p)?;
    writeln!(out, "  dS = P ∘ (dP − D)    {}", row(&grad_s))?;
    writeln!(out, "  dq = dS·K/√2         {}", row(&g.grad_q))?;
    let keys: Vec<String> = g.grad_k.rows().into_iter().map(row).collect();
    writeln!(out, "  dK = dSᵀ·q/√2        {}", keys.join(" "))?;
    writeln!(out)?;

    let p = problem();
    let grad = analytic(&p)?;
    writeln!(out, "Finite differences of ℓ = Σ O ∘ dO with respect to Q{ENTRY:?} (seed {SEED}):")?;
    writeln!(out, "sdpa_backward gives {grad:.12}")?;
    writeln!(out, "  {:>8}  {:>12}  {:>12}", "h", "f64 error", "f32 error")?;
    for h in steps().into_iter().step_by(4) {
        let find = |points: &[(f64, f64)]| {
            points
                .iter()
                .find(|(x, _)| *x == h)
                .map_or("-".to_string(), |(_, e)| format!("{e:.1e}"))
        };
        writeln!(out, "  {h:>8.0e}  {:>12}  {:>12}", find(f64_points), find(f32_points))?;
    }
    let best = |points: &[(f64, f64)]| {
        points.iter().copied().fold((0.0, f64::INFINITY), |b, p| if p.1 < b.1 { p } else { b })
    };
    let (h64, e64) = best(f64_points);
    let (h32, e32) = best(f32_points);
    writeln!(
        out,
        "  smallest error: f64 {e64:.1e} at h = {h64:.1e}; f32 {e32:.1e} at h = {h32:.1e}"
    )?;
    // How much the f64 error falls per decade of h, down to its lowest point: 100 (h²) while
    // truncation dominates, less once rounding takes its share.
    let decades: Vec<f64> = steps().into_iter().step_by(4).collect();
    let error_at = |h: f64| f64_points.iter().find(|(x, _)| *x == h).map(|&(_, e)| e);
    let mut falls = Vec::new();
    for pair in decades.windows(2).take_while(|w| w[0] > h64) {
        if let (Some(a), Some(b)) = (error_at(pair[0]), error_at(pair[1])) {
            falls.push(format!("{:.0}×", a / b));
        }
    }
    writeln!(
        out,
        "  f64 error, fall per tenfold smaller h down to h = {h64:.0e}: {}",
        falls.join(", ")
    )?;
    writeln!(out)?;

    let m = masked()?;
    writeln!(
        out,
        "The masked example: {} left-padded, causal (query 0 sees no key)",
        TOKENS.join(" ")
    )?;
    writeln!(out, "  P:\n{}", matrix(&m.weights, 4, "  "))?;
    writeln!(out, "  dP = dO·Vᵀ:\n{}", matrix(&m.grad_weights, 4, "  "))?;
    let grad_scores = matrix(&m.grad_scores, 4, "  ");
    writeln!(out, "  dS = P ∘ (dP − rowsum(dP ∘ P)):\n{grad_scores}")?;
    let blocked = m.mask.as_array().iter().filter(|&&a| !a).count();
    let zero_ds =
        m.grad_scores.iter().zip(m.mask.as_array()).filter(|(d, a)| !**a && **d == 0.0).count();
    let nonzero_dp =
        m.grad_weights.iter().zip(m.mask.as_array()).filter(|(d, a)| !**a && **d != 0.0).count();
    writeln!(
        out,
        "  blocked entries: {blocked}; dS exactly 0 at {zero_ds} of them, dP nonzero at {nonzero_dp}"
    )?;
    writeln!(out, "  dq of query 0: {}", row(m.grads.grad_q.row(0)))?;
    writeln!(
        out,
        "  dK and dV of key 0 (<pad>): {} and {}",
        row(m.grads.grad_k.row(0)),
        row(m.grads.grad_v.row(0))
    )?;
    writeln!(out)?;

    writeln!(
        out,
        "Against PyTorch's autograd (tests/fixtures), largest |ours − torch| / (1 + |torch|):"
    )?;
    for (what, (n32, w32), (n64, w64)) in [
        ("SDPA dq, dk, dv", worst_sdpa::<f32>("f32")?, worst_sdpa::<f64>("f64")?),
        (
            "layer dX, dW_Q, dW_K, dW_V, dW_O",
            worst_layer::<f32>("f32")?,
            worst_layer::<f64>("f64")?,
        ),
    ] {
        writeln!(out, "  {what:<34} f32 {w32:.1e} ({n32} cases)   f64 {w64:.1e} ({n64} cases)")?;
        // The chapter says: below 1e-6 in f32 and 1e-15 in f64.
        if w32 >= 1e-6 || w64 >= 1e-15 {
            return Err(format!("{what}: {w32:e} (f32), {w64:e} (f64) against PyTorch").into());
        }
    }
    Ok(out)
}

/// Draws this chapter's figures into `out_dir` and writes the report; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let p = problem();
    let (f64_points, f32_points) = (sweep::<f64>(&p)?, sweep::<f32>(&p)?);
    let fd_png = out_dir.join("ch11_finite_differences.png");
    LineChart::new()
        .title(format!("Central difference of ∂ℓ/∂Q{ENTRY:?} against the step h"))
        .x_label("step h")
        .y_label("|finite difference − backward|")
        .x_axis(Axis::Log10)
        .y_axis(Axis::Log10)
        .series("f64", f64_points.iter().copied())
        .series("f32", f32_points.iter().copied())
        .save(&fd_png)?;

    let m = masked()?;
    let allowed = m.mask.as_array().clone().into_dimensionality::<Ix2>()?;
    let weights_png = out_dir.join("ch11_weights.png");
    Heatmap::new(&m.weights)
        .title("P: causal, with a padded first token")
        .labels(&TOKENS)
        .allowed(&allowed)
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .mask_mark("0")
        .save(&weights_png)?;
    // dP and dS differ in size by a factor of about 7 (1.77 against 0.26 at most): each gets
    // its own figure and its own colour scale, so that neither is drawn in near-white.
    let grad_weights_png = out_dir.join("ch11_d_weights.png");
    Heatmap::new(&m.grad_weights)
        .title("dP = dO·Vᵀ: a value in every cell")
        .labels(&TOKENS)
        .scheme(ColorScheme::Diverging)
        .colorbar_label("dP, gradient of the weights")
        .annotate(true)
        .save(&grad_weights_png)?;
    let grad_scores_png = out_dir.join("ch11_d_scores.png");
    Heatmap::new(&m.grad_scores)
        .title("dS = P ∘ (dP − D): 0 wherever P is")
        .labels(&TOKENS)
        .allowed(&allowed)
        .scheme(ColorScheme::Diverging)
        .colorbar_label("dS, gradient of the scores")
        .annotate(true)
        .mask_mark("0")
        .mask_legend("masked: exactly 0")
        .save(&grad_scores_png)?;

    let text = out_dir.join("ch11_output.txt");
    std::fs::write(&text, report(&f64_points, &f32_points)?)?;
    Ok(vec![fd_png, weights_png, grad_weights_png, grad_scores_png, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 11, Gradients: the backward pass of attention.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch11_output.txt) and draws \
    ch11_finite_differences.png, ch11_weights.png, ch11_d_weights.png and ch11_d_scores.png into \
    book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
