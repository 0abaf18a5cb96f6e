//! Chapter 2, *Queries, keys and values*: three projections of the same tokens, the shapes of
//! their weights, the raw scores `Q·Kᵀ`, and why they need not be symmetric.
//!
//! ```text
//! cargo run --release --example ch02_qkv [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch02_output.txt`) and draws
//! `ch02_qkv.png`, `ch02_symmetry.png` and `ch02_scores.png`.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::EmbeddingTable;
use attention::projection::Linear;
use attention::scores::scores;
use attention::self_attention::SelfAttention;
use figures::{ColorScheme, Heatmap, HeatmapGrid, Panel, ValueRange};
use ndarray::{Array2, ArrayRef2};
use rand::{SeedableRng, rngs::StdRng};

/// The tokens of notebook 000's sentence, one label per row.
const TOKENS: [&str; 3] = ["The", "cat", "sat"];
/// The query/key width and the value width of the chapter's layer (`d_model` is 4).
const D_K: usize = 3;
/// The value width.
const D_V: usize = 2;
/// The seed of the layer's weights.
const SEED: u64 = 2;

/// Notebook 000's `X: (3, 4)` and the chapter's seeded layer.
fn setup() -> Result<(Array2<f64>, SelfAttention<f64>), Box<dyn Error>> {
    let (vocab, table) = EmbeddingTable::the_cat_sat();
    let x = table.lookup(&vocab.encode("The cat sat")?)?;
    let layer = SelfAttention::random(x.ncols(), D_K, D_V, &mut StdRng::seed_from_u64(SEED))?;
    Ok((x, layer))
}

/// The queries, keys and values of `x` under `layer`.
fn qkv(x: &ArrayRef2<f64>, layer: &SelfAttention<f64>) -> Result<[Array2<f64>; 3], Box<dyn Error>> {
    Ok([layer.w_q().apply(x)?, layer.w_k().apply(x)?, layer.w_v().apply(x)?])
}

/// The largest `|m[i][j] − m[j][i]|`: 0 exactly when `m` is symmetric.
fn asymmetry(m: &Array2<f64>) -> f64 {
    (m - &m.t()).iter().fold(0.0, |a, d| a.max(d.abs()))
}

/// Everything the example prints, as one text (also written to `ch02_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    let (x, layer) = setup()?;
    let [q, k, v] = qkv(&x, &layer)?;
    writeln!(out, "X = (L, d_model) = {:?} (notebook 000)", x.dim())?;
    for (name, width, w) in [("W_Q", "d_k", layer.w_q()), ("W_K", "d_k", layer.w_k()), ("W_V", "d_v", layer.w_v())] {
        writeln!(out, "{name} = (d_model, {width}) = {:?}, seed {SEED}:\n{:.3}", w.weight().dim(), w.weight())?;
    }
    writeln!(out)?;
    for (name, m) in [("Q = X·W_Q", &q), ("K = X·W_K", &k), ("V = X·W_V", &v)] {
        writeln!(out, "{name} {:?}:\n{m:.3}", m.dim())?;
    }

    let s = scores(&q, &k)?;
    writeln!(out, "\nraw scores Q·Kᵀ (L_q, L_k) = {:?}:\n{s:.3}", s.dim())?;
    let (i, j) = (1, 2);
    let terms: Vec<String> = (0..D_K).map(|d| format!("({:.3})·({:.3})", q[[i, d]], k[[j, d]])).collect();
    writeln!(out, "entry ({i}, {j}) = q_{} · k_{} = {} = {:.3}", TOKENS[i], TOKENS[j], terms.join(" + "), s[[i, j]])?;
    writeln!(out, "entry ({j}, {i}) = q_{} · k_{} = {:.3}", TOKENS[j], TOKENS[i], s[[j, i]])?;

    let xx = x.dot(&x.t());
    writeln!(out, "\nlargest |S[i][j] - S[j][i]|: X·Xᵀ {:.3}, Q·Kᵀ {:.3}", asymmetry(&xx), asymmetry(&s))?;

    writeln!(out, "\nparameters: d_model·(2·d_k + d_v) = 4·(2·{D_K} + {D_V}) = {}", layer.parameter_count())?;
    let big = SelfAttention::<f64>::random(512, 64, 64, &mut StdRng::seed_from_u64(SEED))?;
    writeln!(out, "a layer with d_model = 512, d_k = d_v = 64: {} parameters", big.parameter_count())?;

    // Notebook 001's shapes: W is (context_len, context_len) = (6, 6) for X: (6, 3).
    let nb001_w = Linear::new(Array2::<f64>::zeros((6, 6)))?;
    let err = nb001_w.apply(&Array2::<f64>::zeros((6, 3))).unwrap_err();
    writeln!(out, "\nnotebook 001's (context_len, context_len) weight on X: (6, 3):\n  {err}")?;
    Ok(out)
}

/// Draws this chapter's figures into `out_dir` and writes the report; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let (x, layer) = setup()?;
    let [q, k, v] = qkv(&x, &layer)?;
    let s = scores(&q, &k)?;

    let qkv_png = out_dir.join("ch02_qkv.png");
    let dims = |n: usize| (0..n).map(|d| d.to_string()).collect::<Vec<_>>();
    HeatmapGrid::new()
        .title("Three projections of the same three tokens")
        .panel(Panel::new(&q).title("Q = X·W_Q: (3, 3)").row_labels(&TOKENS).col_labels(&dims(D_K)))
        .panel(Panel::new(&k).title("K = X·W_K: (3, 3)").row_labels(&TOKENS).col_labels(&dims(D_K)))
        .panel(Panel::new(&v).title("V = X·W_V: (3, 2)").row_labels(&TOKENS).col_labels(&dims(D_V)))
        .row_title("token")
        .col_title("dimension")
        .scheme(ColorScheme::Diverging)
        .colorbar_label("value")
        .columns(3)
        .save(&qkv_png)?;

    let symmetry = out_dir.join("ch02_symmetry.png");
    let xx = x.dot(&x.t());
    let limit = xx.iter().chain(s.iter()).fold(0.0_f64, |m, d| m.max(d.abs()));
    HeatmapGrid::new()
        .title("Same tokens, two kinds of scores")
        .panel(Panel::new(&xx).title("X·Xᵀ (symmetric)").labels(&TOKENS))
        .panel(Panel::new(&s).title("Q·Kᵀ (not symmetric)").labels(&TOKENS))
        .scheme(ColorScheme::Diverging)
        .range(ValueRange::Fixed(-limit, limit))
        .colorbar_label("score")
        .save(&symmetry)?;

    let scores_png = out_dir.join("ch02_scores.png");
    Heatmap::new(&s)
        .title("Raw scores Q·Kᵀ for \"The cat sat\"")
        .labels(&TOKENS)
        .scheme(ColorScheme::Diverging)
        .range(ValueRange::Fixed(-limit, limit))
        .precision(3)
        .colorbar_label("score q_i · k_j")
        .save(&scores_png)?;

    let text = out_dir.join("ch02_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![qkv_png, symmetry, scores_png, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 2, Queries, keys and values: three projections of the same tokens and the \
    raw scores Q·Kᵀ.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch02_output.txt) and \
    draws ch02_qkv.png, ch02_symmetry.png and ch02_scores.png into book/img/ (or --out- \
    dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
