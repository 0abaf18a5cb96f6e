//! Chapter 6, *Multi-head attention*: the head split and merge with every shape, every
//! head's weights for one sentence, one head against plain self-attention, the parameter
//! count and the error for a head count that does not divide `d_model`.
//!
//! ```text
//! cargo run --release --example ch06_multihead [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch06_output.txt`) and draws
//! `ch06_heads.png`.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::multihead::{MultiHeadAttention, merge_heads, split_heads};
use attention::self_attention::SelfAttention;
use figures::{HeatmapGrid, Panel, ValueRange};
use ndarray::{Array2, Axis};
use rand::{SeedableRng, rngs::StdRng};

/// The sentence whose heads the figure shows.
const SENTENCE: &str = "the cat sat on the mat";

/// Model width and number of heads of the chapter's layer: `d_head = 8 / 4 = 2`.
const D_MODEL: usize = 8;
const HEADS: usize = 4;

/// The sentence's tokens, its embeddings `X: (L, d_model)` and a seeded 4-head layer.
type Layer = (Vec<&'static str>, Array2<f64>, MultiHeadAttention<f64>);

/// Builds the chapter's [`Layer`] from seeded random numbers.
fn layer() -> Result<Layer, Box<dyn Error>> {
    let tokens: Vec<&str> = SENTENCE.split_whitespace().collect();
    let vocab = Vocabulary::from_sentence(SENTENCE);
    let mut rng = StdRng::seed_from_u64(6);
    let table = EmbeddingTable::<f64>::random(vocab.len(), D_MODEL, &mut rng)?;
    let x = table.lookup(&vocab.encode(SENTENCE)?)?;
    let mha = MultiHeadAttention::<f64>::random(D_MODEL, HEADS, &mut rng)?;
    Ok((tokens, x, mha))
}

/// Everything the example prints, as one text (also written to `ch06_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    let (tokens, x, mha) = layer()?;
    let l = tokens.len();
    writeln!(out, "\"{SENTENCE}\": L = {l}, d_model = {D_MODEL}, heads = {HEADS}, d_head = {}", mha.d_head())?;

    let [w_q, ..] = mha.projections();
    let q = w_q.apply(&x)?;
    let split = split_heads(&q, HEADS)?;
    writeln!(out, "Q = X W_Q:                  {:?}", q.shape())?;
    writeln!(out, "reshape to (L, h, d_head):  {:?}", [l, HEADS, mha.d_head()])?;
    writeln!(out, "swap to (h, L, d_head):     {:?}", split.shape())?;
    writeln!(out, "merge back:                 {:?}", merge_heads(&split)?.shape())?;
    writeln!(
        out,
        "head 1 of Q is columns 2..4 of Q: {}",
        split.index_axis(Axis(0), 1) == q.slice(ndarray::s![.., 2..4])
    )?;

    let att = mha.forward(&x, None)?;
    writeln!(out, "\nweights: {:?}, output: {:?}", att.weights.shape(), att.output.shape())?;
    for (h, w) in att.weights.outer_iter().enumerate() {
        let (i, j) = argmax(&w.to_owned());
        writeln!(out, "  head {h}: strongest link {} -> {} ({:.4})", tokens[i], tokens[j], w[[i, j]])?;
    }

    let looped = mha.forward_per_head(&x, None)?;
    let diff = (&looped.output - &att.output).mapv(f64::abs).fold(0.0, |m: f64, &d| m.max(d));
    writeln!(out, "explicit loop and reshape agree within 1e-12: {}", diff < 1e-12)?;

    let [w_q, w_k, w_v, w_o] = mha.projections().map(|w| w.weight().clone());
    let one = MultiHeadAttention::new(w_q.clone(), w_k.clone(), w_v.clone(), w_o.clone(), 1)?.forward(&x, None)?;
    let single = SelfAttention::new(w_q, w_k, w_v)?.forward(&x, None)?;
    let diff = (&one.output - &single.output.dot(&w_o)).mapv(f64::abs).fold(0.0, |m: f64, &d| m.max(d));
    writeln!(out, "1 head and self-attention followed by W_O agree within 1e-12: {}", diff < 1e-12)?;

    writeln!(out, "\nparameters (no biases), 4 d_model^2:")?;
    for (d_model, heads) in [(8, 1), (8, 4), (512, 1), (512, 8)] {
        let mha = MultiHeadAttention::<f32>::random(d_model, heads, &mut StdRng::seed_from_u64(0))?;
        writeln!(out, "  d_model = {d_model:>3}, heads = {heads}: {}", mha.parameter_count())?;
    }
    let err = MultiHeadAttention::<f64>::random(D_MODEL, 3, &mut StdRng::seed_from_u64(0)).unwrap_err();
    writeln!(out, "\n3 heads for d_model = 8: error: {err}")?;
    Ok(out)
}

/// The (row, column) of the largest entry.
fn argmax(w: &Array2<f64>) -> (usize, usize) {
    let mut best = (0, 0);
    for ((i, j), &v) in w.indexed_iter() {
        if v > w[best] {
            best = (i, j);
        }
    }
    best
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let (tokens, x, mha) = layer()?;
    let att = mha.forward(&x, None)?;
    let mut grid = HeatmapGrid::new().title(format!("\"{SENTENCE}\": the weights of each of {HEADS} heads"));
    for (h, w) in att.weights.outer_iter().enumerate() {
        grid = grid.panel(Panel::new(&w).title(format!("head {h}")).labels(&tokens));
    }
    let heads = out_dir.join("ch06_heads.png");
    grid.range(ValueRange::Fixed(0.0, 1.0)).colorbar_label("attention weight").columns(2).save(&heads)?;

    let text = out_dir.join("ch06_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![heads, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 6, Multi-head attention: the head split and merge, every head's weights for \
    one sentence, the parameter count.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch06_output.txt) and \
    draws ch06_heads.png into book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
