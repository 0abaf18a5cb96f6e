//! Chapter 1, *Input embeddings*: from a sentence to token ids to the rows of `X`, why those
//! rows carry no context, and attention before any learned weights.
//!
//! ```text
//! cargo run --release --example ch01_embeddings [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch01_output.txt`) and draws
//! `ch01_embeddings.png`, `ch01_dot_products.png`, `ch01_weights.png` and the diagram
//! `intro_pipeline.svg` (the whole formula, step by step, with every shape: the book's
//! introduction shows it).

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::notebooks::nb003;
use attention::sdpa::{plain_self_attention, single_query};
use common::colors;
use figures::diagram::{Color, Diagram, Grid, Style, TextStyle, text_width};
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

/// One step of the pipeline diagram: the chapter that teaches it, the formula, a line of
/// explanation, the shape of its result, and the small blocks that draw that shape.
struct Step {
    chapter: u32,
    formula: &'static str,
    meaning: &'static str,
    shape: &'static [&'static str],
    blocks: Vec<Block>,
}

/// A small block of `rows × cols` cells in the pipeline diagram: its fill, and whether its
/// upper triangle is masked.
#[derive(Clone, Copy)]
struct Block {
    rows: usize,
    cols: usize,
    color: Color,
    causal: bool,
}

impl Block {
    const fn new(rows: usize, cols: usize, color: Color) -> Block {
        Block { rows, cols, color, causal: false }
    }
}

/// The introduction's diagram: `softmax(Q·Kᵀ/√d_k + M)·V` and the heads around it as a
/// pipeline of steps, each with the chapter that teaches it and the shape of its result, drawn
/// for L = 5 tokens, d_model = 8, d_k = d_v = 4 and h = 2 heads of 4 columns.
fn pipeline() -> Diagram {
    const L: usize = 5;
    const ROW: f64 = 60.0;
    const CELL: f64 = 8.0;
    let grey = colors::X;
    let steps = [
        Step { chapter: 1, formula: "tokens → X", meaning: "one row per token: its embedding", shape: &["(L, d_{model})"], blocks: vec![Block::new(L, 8, grey)] },
        Step {
            chapter: 2,
            formula: "Q = X·W_{Q},  K = X·W_{K},  V = X·W_{V}",
            meaning: "three projections of the same rows",
            shape: &["Q, K: (L, d_{k})", "V: (L, d_{v})"],
            blocks: vec![Block::new(L, 4, colors::Q), Block::new(L, 4, colors::K), Block::new(L, 4, colors::V)],
        },
        Step { chapter: 3, formula: "S = Q·Kᵀ / √d_{k}", meaning: "every query against every key, scaled", shape: &["(L_{q}, L_{k})"], blocks: vec![Block::new(L, L, colors::Q)] },
        Step {
            chapter: 4,
            formula: "S + M",
            meaning: "the mask: −∞ where a query may not look",
            shape: &["(L_{q}, L_{k})"],
            blocks: vec![Block { rows: L, cols: L, color: colors::Q, causal: true }],
        },
        Step {
            chapter: 5,
            formula: "A = softmax(S + M), row by row",
            meaning: "weights: each row sums to 1",
            shape: &["(L_{q}, L_{k})"],
            blocks: vec![Block { rows: L, cols: L, color: Color::ORANGE, causal: true }],
        },
        Step { chapter: 5, formula: "A·V", meaning: "each row a weighted average of rows of V", shape: &["(L_{q}, d_{v})"], blocks: vec![Block::new(L, 4, colors::V)] },
        Step {
            chapter: 6,
            formula: "h heads side by side",
            meaning: "the steps above, per head, on d_{head} columns",
            shape: &["(h, L, d_{head})"],
            blocks: vec![Block::new(L, 4, Color::ORANGE), Block::new(L, 4, Color::SKY_BLUE)],
        },
        Step { chapter: 7, formula: "concat(heads)·W_{O}", meaning: "the heads' outputs mixed into one", shape: &["(L, d_{model})"], blocks: vec![Block::new(L, 8, grey)] },
    ];
    let label = TextStyle::new(15.0);
    let note = TextStyle::new(14.0).color(Color::MUTED);
    let top = 60.0;
    let height = top + steps.len() as f64 * ROW + 56.0;
    let mut d = Diagram::new(760, height as u32, "The attention formula as a pipeline, with the shape of every step and the chapter that teaches it");
    d.describe(
        "Eight steps from top to bottom. Chapter 1: tokens become X, one row per token, shape \
         (L, d_model). Chapter 2: Q = X·W_Q, K = X·W_K, V = X·W_V, shapes (L, d_k), (L, d_k) \
         and (L, d_v). Chapter 3: the scores S = Q·Kᵀ / √d_k, shape (L_q, L_k). Chapter 4: \
         the mask M adds −∞ where a query may not look. Chapter 5: A = softmax(S + M), row by \
         row, each row summing to 1, shape (L_q, L_k); then A·V, shape (L_q, d_v), with V \
         coming from chapter 2's step. Chapter 6: h heads run these steps side by side on \
         slices of d_model / h columns, shape (h, L, d_head). Chapter 7: the heads are \
         concatenated and multiplied by W_O, shape (L, d_model).",
    );
    d.text(20.0, 28.0, "softmax(Q·Kᵀ / √d_{k} + M)·V, step by step", &TextStyle::new(17.0).bold());
    d.text(512.0, top - 12.0, "shape of the result", &note);
    let box_left = 128.0;
    let box_w = 366.0;
    for (i, step) in steps.iter().enumerate() {
        let y = top + i as f64 * ROW;
        let mid = y + (ROW - 12.0) / 2.0;
        // The chapter, the step, the arrow to the next one.
        d.rect(20.0, mid - 13.0, 62.0, 26.0, &Style::fill(Color::GREY.tint(0.85)).and_stroke(Color::GREY, 1.0).rounded(13.0));
        d.text(51.0, mid, &format!("ch. {}", step.chapter), &label.bold().centered().middle());
        d.rect(box_left, y, box_w, ROW - 12.0, &Style::fill(Color::WHITE).and_stroke(Color::MUTED, 1.2).rounded(6.0));
        d.text(box_left + 12.0, y + 20.0, step.formula, &label.bold());
        d.text(box_left + 12.0, y + 39.0, step.meaning, &note);
        let widest = text_width(step.formula, &label.bold()).max(text_width(step.meaning, &note));
        assert!(widest + 24.0 <= box_w, "{:?} does not fit its box", step.formula);
        if i + 1 < steps.len() {
            d.arrow((box_left + box_w / 2.0, y + ROW - 12.0), (box_left + box_w / 2.0, y + ROW), &Style::stroke(Color::MUTED, 1.5));
        }
        // The shape: small blocks, then its name.
        let mut x = 512.0;
        for block in &step.blocks {
            let b = Grid::new((x, mid - block.rows as f64 * CELL / 2.0), (block.rows, block.cols), (CELL, CELL))
                .fill_with(|r, c| Some(if block.causal && c > r { Color::GREY.tint(0.45) } else { block.color.tint(colors::FILL) }))
                .lines(Color::WHITE)
                .border(Color::MUTED, 1.0);
            d.grid(&b);
            x = b.right() + 8.0;
        }
        let lines = step.shape.len() as f64;
        for (j, text) in step.shape.iter().enumerate() {
            let ty = mid + (j as f64 - (lines - 1.0) / 2.0) * 19.0;
            d.text(x + 6.0, ty, text, &label.middle());
        }
    }
    // V goes from chapter 2's step to A·V, past the steps between.
    let y_v = top + ROW + (ROW - 12.0) / 2.0;
    let y_av = top + 5.0 * ROW + (ROW - 12.0) / 2.0;
    let side = Style::stroke(colors::V, 1.5);
    d.polyline(&[(box_left, y_v), (box_left - 22.0, y_v), (box_left - 22.0, y_av)], &side);
    d.arrow((box_left - 22.0, y_av), (box_left, y_av), &side);
    d.text(box_left - 11.0, (y_v + y_av) / 2.0, "V", &label.bold().color(colors::V).centered().middle());
    d.text(20.0, height - 34.0, "Grey cells in the square blocks: masked (−∞ in S + M, weight 0 in A); here a causal mask.", &note);
    d.text(20.0, height - 14.0, "Drawn for L = 5 tokens, d_{model} = 8, d_{k} = d_{v} = 4 and h = 2 heads of d_{head} = d_{model} / h = 4.", &note);
    d
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

    let pipeline = pipeline().save(out_dir.join("intro_pipeline.svg"))?;

    let text = out_dir.join("ch01_output.txt");
    std::fs::write(&text, common::wrap_wide_rows(&report()?))?;
    Ok(vec![table, dot_products, weights, pipeline, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 1, Input embeddings: from a sentence to token ids to the rows of X, and \
    attention before any learned weights.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch01_output.txt) and \
    draws ch01_embeddings.png, ch01_dot_products.png, ch01_weights.png and the \
    introduction's diagram intro_pipeline.svg into book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
