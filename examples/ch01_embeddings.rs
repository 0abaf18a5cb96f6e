//! Chapter 1, *Input embeddings*: from a sentence to token ids to the rows of `X`, why those
//! rows carry no context, and attention before any learned weights.
//!
//! ```text
//! cargo run --release --example ch01_embeddings [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch01_output.txt`) and draws
//! `ch01_embeddings.png`, `ch01_dot_products.png` and `ch01_weights.png`.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::notebooks::nb003;
use attention::sdpa::{plain_self_attention, single_query};
use figures::{ColorScheme, Heatmap, ValueRange};
use ndarray::{Array2, arr2};
use rand::{SeedableRng, rngs::StdRng};

/// The chapter's running sentence; "the" appears twice.
const SENTENCE: &str = "the cat sat on the mat";
/// A second sentence that shares the word "the" with the first.
const OTHER: &str = "the dog ran";
/// The width of the seeded embeddings.
const D_MODEL: usize = 8;
/// The seed of the embedding table.
const SEED: u64 = 1;

/// The vocabulary of both sentences and its seeded `(vocab_size, d_model)` table.
fn seeded_table() -> Result<(Vocabulary, EmbeddingTable<f64>), Box<dyn Error>> {
    let vocab = Vocabulary::new(SENTENCE.split_whitespace().chain(OTHER.split_whitespace()));
    let table = EmbeddingTable::random(vocab.len(), D_MODEL, &mut StdRng::seed_from_u64(SEED))?;
    Ok((vocab, table))
}

/// The embeddings `X: (L, d_model)` of a sentence under the seeded table.
fn embed(sentence: &str) -> Result<Array2<f64>, Box<dyn Error>> {
    let (vocab, table) = seeded_table()?;
    Ok(table.lookup(&vocab.encode(sentence)?)?)
}

/// The running sentence's tokens, one label per row.
fn tokens() -> Vec<&'static str> {
    SENTENCE.split_whitespace().collect()
}

/// Everything the example prints, as one text (also written to `ch01_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();

    let (vocab, table) = EmbeddingTable::the_cat_sat();
    let ids = vocab.encode("The cat sat")?;
    writeln!(out, "Notebook 000: \"The cat sat\" -> token ids {ids:?}")?;
    writeln!(out, "X = (L, d_model) = {:?}\n{}\n", table.lookup(&ids)?.dim(), table.lookup(&ids)?)?;

    let (vocab, _) = seeded_table()?;
    let ids = vocab.encode(SENTENCE)?;
    let x = embed(SENTENCE)?;
    writeln!(out, "Vocabulary of both sentences: {:?}", vocab.words())?;
    writeln!(out, "\"{SENTENCE}\" -> token ids {ids:?}")?;
    writeln!(out, "X = (L, d_model) = {:?}, seed {SEED}:\n{x:.3}\n", x.dim())?;
    let other = embed(OTHER)?;
    writeln!(out, "\"{OTHER}\" -> token ids {:?}", vocab.encode(OTHER)?)?;
    writeln!(out, "row of \"the\" in \"{OTHER}\":   {:.3}", other.row(0))?;
    writeln!(out, "row of \"the\" in \"{SENTENCE}\": {:.3}", x.row(0))?;
    writeln!(out, "identical: {}\n", other.row(0) == x.row(0))?;

    let x3 = arr2(&nb003::X);
    let att = single_query(&x3.row(nb003::QUERY_ROW), &x3, &x3)?;
    writeln!(out, "Notebook 003: query X[0] over keys = values = X (4, 5)")?;
    writeln!(out, "weights: {:.4}  (sum {:.6})", att.weights, att.weights.sum())?;
    writeln!(out, "output:  {:.4}\n", att.output)?;

    let dots = x.dot(&x.t());
    writeln!(out, "X·Xᵀ for \"{SENTENCE}\" (L, L) = {:?}:\n{dots:.2}\n", dots.dim())?;
    let att = plain_self_attention(&x)?;
    writeln!(out, "softmax(X·Xᵀ / √{D_MODEL}), row by row:\n{:.3}\n", att.weights)?;
    let own: Vec<usize> = (0..x.nrows()).filter(|&i| is_row_max(&att.weights, i)).collect();
    writeln!(out, "rows whose largest weight is on the diagonal: {own:?} of 0..{}", x.nrows())?;

    let in_other = plain_self_attention(&other)?.output;
    writeln!(out, "\nafter attention, \"the\" in \"{SENTENCE}\": {:.3}", att.output.row(0))?;
    writeln!(out, "after attention, \"the\" in \"{OTHER}\":   {:.3}", in_other.row(0))?;
    Ok(out)
}

/// Whether the diagonal entry of row `i` is the largest of its row.
fn is_row_max(m: &Array2<f64>, i: usize) -> bool {
    m.row(i).iter().all(|&w| w <= m[[i, i]])
}

/// Draws this chapter's figures into `out_dir` and writes the report; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let x = embed(SENTENCE)?;
    let tokens = tokens();
    let dims: Vec<String> = (0..D_MODEL).map(|d| d.to_string()).collect();

    let table = out_dir.join("ch01_embeddings.png");
    Heatmap::new(&x)
        .title(format!("X for \"{SENTENCE}\": one row per token"))
        .row_labels(&tokens)
        .col_labels(&dims)
        .row_title("token")
        .col_title("embedding dimension")
        .colorbar_label("value")
        .scheme(ColorScheme::Diverging)
        .save(&table)?;

    let dots = x.dot(&x.t());
    let limit = dots.iter().fold(0.0_f64, |m, d| m.max(d.abs())).ceil();
    let dot_products = out_dir.join("ch01_dot_products.png");
    Heatmap::new(&dots)
        .title("X·Xᵀ: all the dot products of tokens")
        .labels(&tokens)
        .colorbar_label("dot product")
        .scheme(ColorScheme::Diverging)
        .range(ValueRange::Fixed(-limit, limit))
        .precision(1)
        .save(&dot_products)?;

    let weights = out_dir.join("ch01_weights.png");
    Heatmap::new(&plain_self_attention(&x)?.weights)
        .title(format!("softmax(X·Xᵀ / √{D_MODEL}), row by row"))
        .labels(&tokens)
        .colorbar_label("attention weight")
        .range(ValueRange::Fixed(0.0, 1.0))
        .save(&weights)?;

    let text = out_dir.join("ch01_output.txt");
    std::fs::write(&text, common::wrap_wide_rows(&report()?))?;
    Ok(vec![table, dot_products, weights, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 1, Input embeddings: from a sentence to token ids to the rows of X, and \
    attention before any learned weights.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch01_output.txt) and \
    draws ch01_embeddings.png, ch01_dot_products.png and ch01_weights.png into book/img/ \
    (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
