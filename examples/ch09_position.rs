//! Chapter 9, *Where is each word? Position*: self-attention cannot tell "the dog bit the man"
//! from "the man bit the dog"; sinusoidal encodings (both layouts, an odd width, the shift as
//! a rotation, the dot product against distance) and a learned table.
//!
//! ```text
//! cargo run --release --example ch09_position [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch09_output.txt`) and draws
//! `ch09_shuffled.png`, `ch09_sinusoidal.png` and `ch09_dot_distance.png`.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::position::{
    LearnedPositions, SinusoidLayout, add_positions, frequencies, permute_rows, permute_weights,
    shift_matrix, sinusoidal,
};
use attention::sdpa::Attention;
use attention::self_attention::SelfAttention;
use figures::{ColorScheme, HeatmapGrid, LineChart, Panel, ValueRange};
use ndarray::{Array2, ArrayRef, Dimension, Ix2, s};
use rand::{SeedableRng, rngs::StdRng};

/// The sentence, and the order of its tokens in the other one: "the man bit the dog".
const SENTENCE: &str = "the dog bit the man";
const SWAP: [usize; 5] = [0, 4, 2, 3, 1];
/// The token that keeps its place: "bit".
const BIT: usize = 2;
/// Width of the embeddings, the queries, keys and values of the chapter's layer.
const D_MODEL: usize = 8;

/// The two sentences run through one seeded layer, with and without positions.
struct Sentences {
    tokens: Vec<&'static str>,
    swapped: Vec<&'static str>,
    /// `X` of "the dog bit the man", its rows permuted by [`SWAP`], and the encodings.
    x: Array2<f64>,
    x_swapped: Array2<f64>,
    pe: Array2<f64>,
    layer: SelfAttention<f64>,
}

impl Sentences {
    fn new() -> Result<Sentences, Box<dyn Error>> {
        let tokens: Vec<&str> = SENTENCE.split_whitespace().collect();
        let swapped = SWAP.iter().map(|&i| tokens[i]).collect();
        let vocab = Vocabulary::from_sentence(SENTENCE);
        let mut rng = StdRng::seed_from_u64(9);
        let table = EmbeddingTable::<f64>::random(vocab.len(), D_MODEL, &mut rng)?;
        let layer = SelfAttention::<f64>::random(D_MODEL, D_MODEL, D_MODEL, &mut rng)?;
        let x = table.lookup(&vocab.encode(SENTENCE)?)?;
        let x_swapped = permute_rows(&x, &SWAP)?;
        let pe = sinusoidal(0, tokens.len(), D_MODEL, SinusoidLayout::Interleaved)?;
        Ok(Sentences { tokens, swapped, x, x_swapped, pe, layer })
    }

    /// The layer on both sentences: without positions, or with `pe` added to each.
    fn run(&self, with_positions: bool) -> Result<[Attention<f64, Ix2>; 2], Box<dyn Error>> {
        let mut runs = Vec::new();
        for x in [&self.x, &self.x_swapped] {
            let x = if with_positions { add_positions(x, &self.pe)? } else { x.clone() };
            runs.push(self.layer.forward(&x, None)?);
        }
        let [a, b]: [Attention<f64, Ix2>; 2] = runs.try_into().expect("two runs");
        Ok([a, b])
    }
}

/// The largest absolute difference between two arrays of one shape.
fn max_diff<D: Dimension>(a: &ArrayRef<f64, D>, b: &ArrayRef<f64, D>) -> f64 {
    (a - b).iter().fold(0.0, |m: f64, d| m.max(d.abs()))
}

/// A vector with `decimals` decimals: `[0.1234, -0.5000]`.
fn row<'a>(values: impl IntoIterator<Item = &'a f64>, decimals: usize) -> String {
    let items: Vec<String> = values.into_iter().map(|v| format!("{v:.decimals$}")).collect();
    format!("[{}]", items.join(", "))
}

/// `PE(p)·PE(p + k) / (d_model / 2)`: 1 at `k = 0`, where the dot product is `d_model / 2`.
fn dot_at_distance(d_model: usize, p: usize, k: i64) -> Result<f64, Box<dyn Error>> {
    let at = |p: usize| sinusoidal::<f64>(p, 1, d_model, SinusoidLayout::Interleaved);
    let (a, b) = (at(p)?, at(p.checked_add_signed(k as isize).ok_or("a negative position")?)?);
    Ok(a.row(0).dot(&b.row(0)) / (d_model as f64 / 2.0))
}

/// Everything the example prints, as one text (also written to `ch09_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    let s = Sentences::new()?;
    writeln!(out, "Attention has no sense of order (d_model = {D_MODEL}, one seeded layer)")?;
    writeln!(out, "  \"{}\" and \"{}\"", s.tokens.join(" "), s.swapped.join(" "))?;
    writeln!(out, "  the second is the first with its rows in the order {SWAP:?}")?;
    for (with_positions, title) in [(false, "without positions"), (true, "with positions")] {
        let [a, b] = s.run(with_positions)?;
        writeln!(out, "\n{title}:")?;
        let out_moved = max_diff(&permute_rows(&a.output, &SWAP)?, &b.output);
        let w_moved = max_diff(&permute_weights(&a.weights, &SWAP)?, &b.weights);
        if out_moved < 1e-12 && w_moved < 1e-12 {
            writeln!(out, "  output and weights of the swapped sentence = the first's, swapped")?;
            writeln!(out, "  (within 1e-12)")?;
        } else {
            writeln!(out, "  the swapped sentence's output differs from the first's, swapped,")?;
            writeln!(out, "  by up to {out_moved:.4}, and its weights by up to {w_moved:.4}")?;
        }
        writeln!(out, "  output of \"bit\", dog bit man: {}", row(a.output.row(BIT), 4))?;
        writeln!(out, "  output of \"bit\", man bit dog: {}", row(b.output.row(BIT), 4))?;
        let w = |att: &Attention<f64, Ix2>, j: usize| att.weights[[BIT, j]];
        writeln!(out, "  weight of \"bit\" on dog: {:.4} and {:.4}", w(&a, 1), w(&b, 4))?;
        writeln!(out, "  weight of \"bit\" on man: {:.4} and {:.4}", w(&a, 4), w(&b, 1))?;
    }

    writeln!(out, "\nSinusoidal encoding, d_model = 4 (interleaved: sin, cos, sin, cos)")?;
    writeln!(out, "  frequencies: {:?}", frequencies(4))?;
    let pe = sinusoidal::<f64>(0, 3, 4, SinusoidLayout::Interleaved)?;
    for (p, r) in pe.rows().into_iter().enumerate() {
        writeln!(out, "  PE({p}) = {}", row(r, 4))?;
    }
    let concatenated = sinusoidal::<f64>(1, 1, 4, SinusoidLayout::Concatenated)?;
    writeln!(out, "  concatenated (sin, sin, cos, cos): PE(1) = {}", row(concatenated.row(0), 4))?;
    writeln!(out, "\nAn odd width, d_model = 5: frequencies 10000^(-2i/5), i = 0, 1, 2")?;
    writeln!(out, "  frequencies: {}", row(&frequencies(5), 6))?;
    let odd = sinusoidal::<f64>(1, 1, 5, SinusoidLayout::Interleaved)?;
    writeln!(out, "  PE(1) = {} (column 4: a sine without a cosine)", row(odd.row(0), 4))?;

    writeln!(out, "\nMoving one position on is a rotation of each pair: PE(p + 1) = PE(p) M_1")?;
    let m: Array2<f64> = shift_matrix(4, 1, SinusoidLayout::Interleaved);
    writeln!(out, "M_1 for d_model = 4:\n{m:.4}")?;
    let moved = pe.slice(s![1..2, ..]).dot(&m);
    writeln!(out, "  PE(1) M_1 = {}", row(moved.row(0), 4))?;
    writeln!(out, "  PE(2)     = {}", row(pe.row(2), 4))?;
    let mut worst: f64 = 0.0;
    let table = sinusoidal::<f64>(0, 1100, 64, SinusoidLayout::Interleaved)?;
    for k in [1, 7, 100] {
        let m: Array2<f64> = shift_matrix(64, k, SinusoidLayout::Interleaved);
        let moved = table.slice(s![..1000, ..]).dot(&m);
        worst = worst.max(max_diff(&moved, &table.slice(s![k as usize..1000 + k as usize, ..])));
    }
    let ok = worst < 1e-12;
    writeln!(
        out,
        "  d_model = 64, p < 1000, k = 1, 7, 100: PE(p) M_k = PE(p + k) within 1e-12: {ok}"
    )?;

    writeln!(out, "\nPE(p).PE(p + k) / (d_model / 2), against the distance k:")?;
    const KS: [i64; 7] = [0, 1, 2, 10, 50, 100, -10];
    let header: Vec<String> = KS.iter().map(|k| format!("{:>6}", format!("k={k}"))).collect();
    writeln!(out, "  {:>11}{}", "", header.join(""))?;
    for d in [16, 64, 512] {
        let mut line = format!("  d_model={d:<3}");
        let mut same = true; // the same from p = 200 as from p = 500
        for k in KS {
            let value = dot_at_distance(d, 200, k)?;
            same &= (value - dot_at_distance(d, 500, k)?).abs() < 1e-12;
            write!(line, " {value:>5.3}")?;
        }
        writeln!(out, "{line}{}", if same { "" } else { "  (depends on p!)" })?;
    }
    writeln!(out, "  (the same from p = 200 and from p = 500, within 1e-12)")?;

    writeln!(out, "\nA learned table: (max_len, d_model) = (16, {D_MODEL}), seeded")?;
    let learned = LearnedPositions::<f64>::random(16, D_MODEL, &mut StdRng::seed_from_u64(10))?;
    writeln!(out, "  lookup(0, 5): {:?}", learned.lookup(0, 5)?.shape())?;
    writeln!(out, "  lookup(14, 3): error: {}", learned.lookup(14, 3).unwrap_err())?;
    Ok(common::wrap_wide_rows(&out))
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let s = Sentences::new()?;
    let mut grid = HeatmapGrid::new().title("Weights of one layer: the same words, swapped");
    for (with_positions, suffix) in [(false, ""), (true, " + PE")] {
        let runs = s.run(with_positions)?;
        for (att, tokens) in runs.iter().zip([&s.tokens, &s.swapped]) {
            let title = format!("\"{}\"{suffix}", tokens.join(" "));
            grid = grid.panel(Panel::new(&att.weights).title(title).labels(tokens));
        }
    }
    let shuffled = out_dir.join("ch09_shuffled.png");
    grid.range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .columns(2)
        .save(&shuffled)?;

    let (l, d) = (64, 64);
    let mut grid = HeatmapGrid::new()
        .title(format!("Sinusoidal encodings of positions 0…{}, d_model = {d}", l - 1));
    for (layout, name) in [
        (SinusoidLayout::Interleaved, "interleaved (paper)"),
        (SinusoidLayout::Concatenated, "concatenated (sines, then cosines)"),
    ] {
        let pe = sinusoidal::<f64>(0, l, d, layout)?;
        grid = grid.panel(Panel::new(&pe).title(name));
    }
    let table = out_dir.join("ch09_sinusoidal.png");
    grid.scheme(ColorScheme::Diverging)
        .range(ValueRange::Fixed(-1.0, 1.0))
        .row_title("position p")
        .col_title("column")
        .colorbar_label("PE(p)")
        .columns(2)
        .save(&table)?;

    let mut chart = LineChart::new()
        .title("Encodings of nearby positions are more alike")
        .x_label("distance k")
        .y_label("PE(p)·PE(p + k) / (d_model / 2)")
        .markers(false);
    for d in [16, 64, 512] {
        let points: Vec<(f64, f64)> = (-100i64..=100)
            .map(|k| Ok((k as f64, dot_at_distance(d, 200, k)?)))
            .collect::<Result<_, Box<dyn Error>>>()?;
        chart = chart.series(format!("d_model = {d}"), points);
    }
    let dots = out_dir.join("ch09_dot_distance.png");
    chart.save(&dots)?;

    let text = out_dir.join("ch09_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![shuffled, table, dots, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 9, Where is each word? Position: attention cannot tell word order; sinusoidal \
    encodings and a learned table.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch09_output.txt) and draws \
    ch09_shuffled.png, ch09_sinusoidal.png and ch09_dot_distance.png into book/img/ (or \
    --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
