//! Chapter 6, *Multi-head attention*: the head split and merge with every shape, every
//! head's weights for one sentence, one head against plain self-attention, the parameter
//! count and the error for a head count that does not divide `d_model`.
//!
//! ```text
//! cargo run --release --example ch06_multihead [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch06_output.txt`) and draws
//! `ch06_heads.png` and the diagram `ch06_split_merge.svg` (the split and merge of the
//! chapter's tiny `Q`, beside the reshape without the swap).

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::multihead::{MultiHeadAttention, merge_heads, split_heads};
use attention::self_attention::SelfAttention;
use figures::diagram::{Anchor, Color, Diagram, Grid, Style, TextStyle};
use figures::{HeatmapGrid, Panel, ValueRange};
use ndarray::{Array2, ArrayView2, Axis, arr2};
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

/// Draws `values`, entries of the intuition's `Q = [[1, 2, 3, 4], [5, 6, 7, 8]]`, as a block
/// with its top-left corner at `at`: each cell shows its number and has the colour of the head
/// its column of `Q` belongs to; `title` above, `rows` (the rows' names) on the right.
fn numbered_block(d: &mut Diagram, at: (f64, f64), values: ArrayView2<i32>, d_head: usize, title: &str, rows: &[&str]) -> Grid {
    let d_model = 4;
    let head_of = |v: i32| ((v - 1) as usize % d_model) / d_head;
    let grid = Grid::new(at, values.dim(), (34.0, 30.0))
        .fill_with(|r, c| Some(Color::okabe_ito(head_of(values[[r, c]])).tint(0.55)))
        .text_with(|r, c| Some(values[[r, c]].to_string()))
        .text_style(TextStyle::new(15.0).bold());
    d.grid(&grid);
    d.text(grid.center().0, grid.top() - 8.0, title, &TextStyle::new(15.0).bold().centered());
    for (r, name) in rows.iter().enumerate() {
        d.text(grid.right() + 6.0, grid.cell(r, 0).1, name, &TextStyle::new(14.0).color(Color::MUTED).middle());
    }
    grid
}

/// The diagram of the head split and merge for the intuition's `Q: (2, 4)` and `h = 2`, every
/// number placed by the crate's own `split_heads` and `merge_heads`, and beside it the reshape
/// without the swap, which hands a "head" the two halves of one token.
fn split_merge() -> Result<Diagram, Box<dyn Error>> {
    let q = arr2(&[[1, 2, 3, 4], [5, 6, 7, 8]]);
    let (l, d_model, h) = (q.nrows(), q.ncols(), 2);
    let d_head = d_model / h;
    let reshaped = q.to_shape((l, h, d_head))?.to_owned(); // split, step 1: (L, h, d_head)
    let split = split_heads(&q, h)?; // step 2, the swap: (h, L, d_head)
    let wrong = q.to_shape((h, l, d_head))?.to_owned(); // the reshape without the swap
    let merged = merge_heads(&split)?;
    assert_eq!(merged, q, "the merge undoes the split");

    let heading = TextStyle::new(16.0).bold();
    let label = TextStyle::new(15.0);
    let note = TextStyle::new(14.0).color(Color::MUTED);
    let arrow = Style::stroke(Color::MUTED, 1.5);
    let mut d = Diagram::new(760, 640, format!("Splitting Q of shape ({l}, {d_model}) into {h} heads, and merging them back"));
    d.describe(
        "Q = [[1, 2, 3, 4], [5, 6, 7, 8]], two tokens of width 4, with columns 0 and 1 belonging \
         to head 0 and columns 2 and 3 to head 1. The right split: reshape to (L, h, d_head) = \
         (2, 2, 2), giving each token its two head slices [[1, 2], [3, 4]] and [[5, 6], [7, 8]], \
         then swap the first two axes to (h, L, d_head): head 0 = [[1, 2], [5, 6]] and head 1 = \
         [[3, 4], [7, 8]], each head its own columns for every token. The wrong split reshapes \
         straight to (h, L, d_head): head 0 = [[1, 2], [3, 4]], the two halves of token 0 read \
         as if they were two tokens, and head 1 = [[5, 6], [7, 8]], token 1's halves. The merge \
         swaps back to (L, h, d_head) and reshapes to (L, d_model), giving Q again.",
    );

    // Q, its columns coloured by head.
    let names = ["token 0", "token 1"];
    let top = numbered_block(&mut d, (300.0, 62.0), q.view(), d_head, "", &names);
    d.text(top.left() - 12.0, top.center().1 - 9.0, "Q = X·W_{Q}", &label.bold().anchor(Anchor::End).middle());
    d.text(top.left() - 12.0, top.center().1 + 11.0, format!("(L, d_{{model}}) = ({l}, {d_model})").as_str(), &label.anchor(Anchor::End).middle());
    for head in 0..h {
        let (x0, x1) = (top.left() + (head * d_head) as f64 * 34.0, top.left() + ((head + 1) * d_head) as f64 * 34.0);
        d.line((x0 + 3.0, top.top() - 8.0), (x1 - 3.0, top.top() - 8.0), &Style::stroke(Color::okabe_ito(head), 3.0));
        d.text((x0 + x1) / 2.0, top.top() - 16.0, format!("head {head}").as_str(), &note.centered());
    }
    d.text(20.0, 26.0, format!("h = {h} heads of d_{{head}} = d_{{model}} / h = {d_head} columns each").as_str(), &heading);

    // The right way, on the left: reshape, then swap.
    let (left, right) = (30.0, 430.0);
    d.text(left, 170.0, "✓ Right: reshape, then swap axes", &heading.color(Color::BLUE));
    d.arrow((top.center().0 - 40.0, top.bottom() + 8.0), (left + 150.0, 148.0), &arrow);
    d.text(left, 198.0, format!("1. reshape to (L, h, d_{{head}}) = ({l}, {h}, {d_head})").as_str(), &label);
    for (t, name) in names.iter().enumerate() {
        let block = reshaped.index_axis(Axis(0), t);
        numbered_block(&mut d, (left + 20.0 + t as f64 * 160.0, 232.0), block, d_head, name, &["head 0", "head 1"]);
    }
    d.text(left, 316.0, format!("2. swap the first two axes: (h, L, d_{{head}}) = ({h}, {l}, {d_head})").as_str(), &label);
    for head in 0..h {
        let block = split.index_axis(Axis(0), head);
        numbered_block(&mut d, (left + 20.0 + head as f64 * 160.0, 350.0), block, d_head, &format!("head {head}"), &names);
    }
    d.text(left, 434.0, "each head: its own columns, for every token", &note);

    // The wrong way, on the right: reshape straight to (h, L, d_head).
    d.text(right, 170.0, "✗ Wrong: reshape, no swap", &heading.color(Color::VERMILLION));
    d.arrow((top.center().0 + 40.0, top.bottom() + 8.0), (right + 110.0, 148.0), &arrow);
    d.text(right, 198.0, format!("reshape to (h, L, d_{{head}}) = ({h}, {l}, {d_head})").as_str(), &label);
    for head in 0..h {
        let block = wrong.index_axis(Axis(0), head);
        let rows = [&format!("token {head}, first half")[..], &format!("token {head}, second half")[..]];
        numbered_block(&mut d, (right + 20.0, 232.0 + head as f64 * 100.0), block, d_head, &format!("“head {head}”"), &rows);
    }
    d.text(right, 434.0, "a “head” gets the two halves of one token,", &note);
    d.text(right, 452.0, "as if they were two tokens; the shapes are", &note);
    d.text(right, 470.0, "right and nothing fails", &note);

    // The merge: swap back, reshape.
    let y = 540.0;
    d.line((20.0, 490.0), (750.0, 490.0), &Style::stroke(Color::GREY, 1.0).dashed());
    d.text(left, 516.0, "Merge, after attention: swap back, then reshape (the split in reverse)", &heading);
    let mut x = left + 20.0;
    for head in 0..h {
        numbered_block(&mut d, (x, y + 20.0), split.index_axis(Axis(0), head), d_head, &format!("head {head}"), &[]);
        x += 80.0;
    }
    d.arrow((x - 4.0, y + 50.0), (x + 60.0, y + 50.0), &arrow);
    d.text(x + 28.0, y + 82.0, "swap", &note.centered());
    x += 72.0;
    for (t, name) in names.iter().enumerate() {
        numbered_block(&mut d, (x, y + 20.0), reshaped.index_axis(Axis(0), t), d_head, name, &[]);
        x += 80.0;
    }
    d.arrow((x - 4.0, y + 50.0), (x + 60.0, y + 50.0), &arrow);
    d.text(x + 28.0, y + 82.0, "reshape", &note.centered());
    x += 72.0;
    let back = numbered_block(&mut d, (x, y + 20.0), merged.view(), d_head, format!("(L, d_{{model}}) = ({l}, {d_model})").as_str(), &[]);
    d.text(back.right() + 10.0, back.center().1, "= Q", &label.bold().middle());
    Ok(d)
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

    let diagram = split_merge()?.save(out_dir.join("ch06_split_merge.svg"))?;

    let text = out_dir.join("ch06_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![heads, diagram, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 6, Multi-head attention: the head split and merge, every head's weights for \
    one sentence, the parameter count.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch06_output.txt) and \
    draws ch06_heads.png and the diagram ch06_split_merge.svg into book/img/ (or \
    --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
