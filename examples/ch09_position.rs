//! Chapter 9, *Where is each word? Position*: self-attention cannot tell "the dog bit the man"
//! from "the man bit the dog"; sinusoidal encodings (both layouts, an odd width, the shift as
//! a rotation, the dot product against distance), a learned table, RoPE (both layouts, the
//! relative property, two bases) and ALiBi (slopes, biases).
//!
//! ```text
//! cargo run --release --example ch09_position [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch09_output.txt`) and draws
//! `ch09_shuffled.png`, `ch09_sinusoidal.png`, `ch09_dot_distance.png`,
//! `ch09_rope_distance.png`, `ch09_alibi.png` and the diagram `ch09_rope_rotation.svg` (one
//! pair of coordinates of a query and a key, rotated by their positions).

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::alibi::{alibi_bias, alibi_slopes};
use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::mask::Mask;
use attention::position::{
    LearnedPositions, SinusoidLayout, add_positions, frequencies, permute_rows, permute_weights,
    shift_matrix, sinusoidal,
};
use attention::rope::{Rope, RopeLayout, layout_permutation};
use attention::sdpa::Attention;
use attention::self_attention::SelfAttention;
use attention::softmax::softmax;
use common::colors;
use figures::diagram::{Anchor, Color, Diagram, Style, TextStyle, polar};
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
    rope_report(&mut out)?;
    alibi_report(&mut out)?;
    Ok(common::wrap_wide_rows(&out))
}

/// `q` rotated as the token at position `m`, dotted with `k` rotated as the token at `n`.
fn rope_score(rope: &Rope, q: &Array2<f64>, m: usize, k: &Array2<f64>, n: usize) -> f64 {
    let (q, k) = (rope.apply(q, m).expect("q is (1, d_head)"), rope.apply(k, n).expect("k too"));
    q.row(0).dot(&k.row(0))
}

/// The score of `q = k = (1, …, 1)` of width [`ROPE_D`] at relative distance `k`.
fn ones_score(base: f64, k: usize) -> Result<f64, Box<dyn Error>> {
    let rope = Rope::new(ROPE_D, base, RopeLayout::RotateHalf)?;
    let ones = Array2::ones((1, ROPE_D));
    Ok(rope_score(&rope, &ones, k, &ones, 0))
}

/// Head width of the RoPE figure, and its two bases.
const ROPE_D: usize = 64;
const BASES: [f64; 2] = [10_000.0, 100.0];

/// The RoPE part of the report.
fn rope_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    writeln!(out, "\nRoPE, d_head = 2 (one pair, theta_0 = 1): q = k = (1, 0)")?;
    let rope = Rope::new(2, 10_000.0, RopeLayout::RotateHalf)?;
    let e = ndarray::array![[1.0, 0.0]];
    for (m, n) in [(3, 1), (7, 5), (1003, 1001), (1, 3)] {
        writeln!(out, "  q at {m:>4}, k at {n:>4}: score {:.4}", rope_score(&rope, &e, m, &e, n))?;
    }

    let mut rng = StdRng::seed_from_u64(11);
    let x = attention::embeddings::EmbeddingTable::<f64>::random(2, 8, &mut rng)?.table().clone();
    let (q, k) = (x.slice(s![0..1, ..]).to_owned(), x.slice(s![1..2, ..]).to_owned());
    writeln!(
        out,
        "\nRoPE, d_head = 8, base 10000, seeded q and k (unrotated q.k = {:.4}):",
        q.row(0).dot(&k.row(0))
    )?;
    for layout in [RopeLayout::RotateHalf, RopeLayout::Interleaved] {
        let rope = Rope::new(8, 10_000.0, layout)?;
        let scores: Vec<String> = [(3, 0), (50, 47), (1000, 997), (0, 3)]
            .into_iter()
            .map(|(m, n)| format!("({m}, {n}): {:.4}", rope_score(&rope, &q, m, &k, n)))
            .collect();
        writeln!(out, "  {layout:?}: {}", scores.join(", "))?;
    }
    let rope = Rope::new(8, 10_000.0, RopeLayout::RotateHalf)?;
    let turned = rope.apply(&q, 1000)?;
    let norm = |v: ndarray::ArrayView1<f64>| v.dot(&v).sqrt();
    writeln!(
        out,
        "  |q| = {:.4}, |q rotated to position 1000| = {:.4}",
        norm(q.row(0)),
        norm(turned.row(0))
    )?;
    writeln!(out, "  thetas: {}", row(&rope.thetas(), 4))?;

    writeln!(
        out,
        "\nThe two layouts, d_head = 8: layout_permutation(8) = {:?}",
        layout_permutation(8)?
    )?;
    let (d_model, len) = (8, 12);
    let mut rng = StdRng::seed_from_u64(12);
    let x = attention::embeddings::EmbeddingTable::<f64>::random(len, d_model, &mut rng)?
        .table()
        .clone();
    let layer = SelfAttention::<f64>::random(d_model, 8, 8, &mut rng)?;
    let (q, k) = (layer.w_q().apply(&x)?, layer.w_k().apply(&x)?);
    let scores = |layout: RopeLayout,
                  q: &Array2<f64>,
                  k: &Array2<f64>|
     -> Result<Array2<f64>, Box<dyn Error>> {
        let rope = Rope::new(8, 10_000.0, layout)?;
        Ok(rope.apply(q, 0)?.dot(&rope.apply(k, 0)?.t()))
    };
    let right = scores(RopeLayout::RotateHalf, &q, &k)?;
    let perm = layout_permutation(8)?;
    let inverse = attention::position::inverse_permutation(&perm)?;
    let (q_moved, k_moved) =
        (q.select(ndarray::Axis(1), &inverse), k.select(ndarray::Axis(1), &inverse));
    let moved = scores(RopeLayout::Interleaved, &q_moved, &k_moved)?;
    writeln!(
        out,
        "  rotate-half weights, columns moved for interleaved: scores agree within 1e-12: {}",
        max_diff(&right, &moved) < 1e-12
    )?;
    let wrong = scores(RopeLayout::Interleaved, &q, &k)?;
    let diagonal = (0..len).map(|i| (right[[i, i]] - wrong[[i, i]]).abs()).fold(0.0, f64::max);
    let first = right[[0, 0]] == wrong[[0, 0]];
    writeln!(out, "  the same weights run with the wrong layout (interleaved):")?;
    writeln!(
        out,
        "    token 0 with itself: exactly equal: {first}; any q_m.k_m: within 1e-12: {}",
        diagonal < 1e-12
    )?;
    let largest = right.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    writeln!(
        out,
        "    other scores: off by up to {:.4} (the largest |score| is {largest:.4})",
        max_diff(&right, &wrong)
    )?;
    let one_apart = (1..len).map(|i| (right[[i, i - 1]] - wrong[[i, i - 1]]).abs());
    writeln!(out, "    one position apart: off by up to {:.4}", one_apart.fold(0.0, f64::max))?;

    writeln!(
        out,
        "\nScore of q = k = (1, ..., 1), d_head = {ROPE_D}, against the distance m - n:"
    )?;
    for base in BASES {
        let values: Vec<String> = [0, 1, 10, 100, 500]
            .into_iter()
            .map(|k| Ok(format!("{k}: {:.2}", ones_score(base, k)?)))
            .collect::<Result<_, Box<dyn Error>>>()?;
        writeln!(out, "  base {base:>6}: {}", values.join(", "))?;
    }
    let twice_pe = 2.0 * dot_at_distance(ROPE_D, 0, 10)? * (ROPE_D as f64 / 2.0);
    let same = (ones_score(10_000.0, 10)? - twice_pe).abs() < 1e-9;
    writeln!(
        out,
        "  (base 10000: twice the sinusoidal PE(p).PE(p + k) of d_model = {ROPE_D}: {same})"
    )?;
    Ok(())
}

/// The ALiBi part of the report.
fn alibi_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    writeln!(out, "\nALiBi slopes")?;
    for heads in [8, 6, 12] {
        writeln!(out, "  {heads:>2} heads: {}", row(&alibi_slopes(heads)?, 4))?;
    }
    let naive: Vec<f64> = (1..=6).map(|h| 2f64.powf(-8.0 * h as f64 / 6.0)).collect();
    writeln!(out, "   6 heads, 2^(-8h/6) (not the rule): {}", row(&naive, 4))?;
    let slopes = alibi_slopes(8)?;
    let bias: ndarray::Array3<f64> = alibi_bias(&slopes, 5, 5);
    writeln!(
        out,
        "\nbias of head 0 (m = 1/2), L = 5 (above the diagonal: masked by the causal mask):"
    )?;
    writeln!(out, "{:.2}", bias.index_axis(ndarray::Axis(0), 0))?;
    writeln!(out, "\nEqual scores, causal mask, L = 8: the weights of the last query")?;
    let l = 8;
    let bias: ndarray::Array3<f64> = alibi_bias(&slopes, l, l);
    let mut scores = bias.clone();
    Mask::causal(l).apply(&mut scores)?;
    let weights = softmax(&scores);
    for h in [0, 3, 7] {
        let last = weights.slice(s![h, l - 1, ..]);
        writeln!(out, "  head {h} (m = {:.4}): {}", slopes[h], row(last, 3))?;
    }
    Ok(())
}

/// The diagram of RoPE in the plane of one pair of coordinates: a query rotated by `mθ`, a key
/// by `nθ`, the angle between them `(m − n)θ + φ`; then both moved by the same number of
/// positions, the angle unchanged. Angles in degrees: `θ` is drawn as 30°, `q` starts at 20°
/// and `k` at −40° (so `φ = 60°`).
fn rope_rotation() -> Diagram {
    const THETA: f64 = 30.0;
    const Q_ANGLE: f64 = 20.0;
    const K_ANGLE: f64 = -40.0;
    let phi = Q_ANGLE - K_ANGLE;
    let label = TextStyle::new(15.0);
    let note = TextStyle::new(14.0).color(Color::MUTED);
    let positions = [(3u32, 1u32), (5, 3)];
    let between = |(m, n): (u32, u32)| (m - n) as f64 * THETA + phi;
    let mut d = Diagram::new(760, 470, "RoPE rotates a query by mθ and a key by nθ: the angle between them depends on m − n only");
    d.describe(format!(
        "Two panels, each the plane of one pair of coordinates of a query and a key. Before \
         rotation (dashed), q points at {Q_ANGLE}° and k at {K_ANGLE}°, φ = {phi}° apart. Left: \
         the query at position m = 3 turns by mθ = 90° and the key at position n = 1 by \
         nθ = 30°, with θ drawn as {THETA}°; the rotated vectors are (m − n)θ + φ = {}° apart. \
         Right: both moved 2 positions, m = 5 and n = 3: the query turns by 150°, the key by \
         90°, and they are still {}° apart. Their dot product is |q| |k| cos((m − n)θ + φ), \
         the same in both panels.",
        between(positions[0]),
        between(positions[1])
    ));
    d.text(20.0, 28.0, "One pair of coordinates: the query turns by mθ, the key by nθ", &TextStyle::new(16.0).bold());
    for (panel, (m, n)) in positions.into_iter().enumerate() {
        d.group((panel as f64 * 380.0, 0.0), |d| {
            let center = (190.0, 265.0);
            let r = 150.0;
            let (q_len, k_len) = (0.95 * r, 0.75 * r);
            let title = if panel == 0 { format!("m = {m}, n = {n}") } else { format!("both moved {}: m = {m}, n = {n}", m - positions[0].0) };
            d.text(center.0, 66.0, &title, &label.bold().centered());
            let angles = format!("mθ = {}°, nθ = {}°, (m − n)θ + φ = {}°", m as f64 * THETA, n as f64 * THETA, between((m, n)));
            d.text(center.0, 88.0, &angles, &label.centered());
            // The plane's axes.
            let axis = Style::stroke(Color::GREY, 1.0);
            d.arrow((center.0 - r - 25.0, center.1), (center.0 + r + 25.0, center.1), &axis);
            d.arrow((center.0, center.1 + r * 0.75), (center.0, center.1 - r - 8.0), &axis);
            let (mq, nk) = (Q_ANGLE + m as f64 * THETA, K_ANGLE + n as f64 * THETA);
            // The angle between the rotated vectors, under them.
            d.arc(center, 0.64 * r, nk, mq, &Style::stroke(Color::INK, 1.5));
            let at = polar(center, 0.64 * r + 12.0, (nk + mq) / 2.0);
            let side = if (nk + mq) / 2.0 > 90.0 { Anchor::End } else { Anchor::Start };
            d.text(at.0, at.1, "(m − n)θ + φ", &TextStyle::new(14.0).anchor(side).middle());
            // Before the rotation (dashed), the rotation (an arc), after (solid).
            for (color, from, to, len, name, turned, arc_r, turn, turn_r) in [
                (colors::Q, Q_ANGLE, mq, q_len, "q", "R(mθ) q", 0.42 * r, "mθ", -14.0),
                (colors::K, K_ANGLE, nk, k_len, "k", "R(nθ) k", 0.3 * r, "nθ", 16.0),
            ] {
                d.line(center, polar(center, len, from), &Style::stroke(color, 1.5).dashed());
                let name_at = polar(center, len + 14.0, from);
                d.text(name_at.0, name_at.1, name, &label.color(color).centered().middle());
                d.arc_arrow(center, arc_r, from, to, &Style::stroke(color, 1.5));
                let turn_at = polar(center, arc_r + turn_r, (from + to) / 2.0);
                d.text(turn_at.0, turn_at.1, turn, &TextStyle::new(14.0).bold().color(color).centered().middle());
                d.arrow(center, polar(center, len, to), &Style::stroke(color, 3.0));
                let tip = polar(center, len + 14.0, to);
                let side = if to > 100.0 { Anchor::End } else if to > 80.0 { Anchor::Middle } else { Anchor::Start };
                d.text(tip.0, tip.1, turned, &label.bold().color(color).anchor(side).middle());
            }
        });
    }
    d.text(380.0, 422.0, "R(mθ) q · R(nθ) k = |q| |k| cos((m − n)θ + φ): it depends on m − n, not on m and n", &label.bold().centered());
    d.text(380.0, 448.0, "dashed: q and k before rotation, φ apart (position 0 is not turned); θ = θ_{i}, drawn as 30°", &note.centered());
    d
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

    let mut chart = LineChart::new()
        .title(format!("RoPE: the score of q = k = (1, …, 1), d_head = {ROPE_D}"))
        .x_label("relative distance m − n")
        .y_label("rotated q · rotated k")
        .markers(false);
    for base in BASES {
        let points: Vec<(f64, f64)> = (0..=512)
            .map(|k| Ok((k as f64, ones_score(base, k)?)))
            .collect::<Result<_, Box<dyn Error>>>()?;
        chart = chart.series(format!("base {base}"), points);
    }
    let rope_png = out_dir.join("ch09_rope_distance.png");
    chart.save(&rope_png)?;

    let (heads, l) = (4, 8);
    let slopes = alibi_slopes(heads)?;
    let bias: ndarray::Array3<f64> = alibi_bias(&slopes, l, l);
    // The penalty m·(i − j) ≥ 0 under the mask, on a sequential scale from 0 (`0.0 − b`, not
    // `−b`, so that no cell reads −0.00).
    let penalty = bias.mapv(|b| 0.0 - b);
    let causal = Array2::from_shape_fn((l, l), |(i, j)| j <= i);
    let mut grid = HeatmapGrid::new()
        .title(format!("ALiBi: the penalty each of {heads} heads subtracts from its scores"));
    for (h, m) in slopes.iter().enumerate() {
        let title = format!("head {h}: m = 1/{}", (1.0 / m).round());
        let panel =
            Panel::new(&penalty.index_axis(ndarray::Axis(0), h)).title(title).allowed(&causal);
        grid = grid.panel(panel);
    }
    let alibi_png = out_dir.join("ch09_alibi.png");
    grid.scheme(ColorScheme::Sequential)
        .range(ValueRange::Fixed(0.0, 1.75))
        .row_title("query i")
        .col_title("key j")
        .colorbar_label("penalty m·(i − j)")
        .precision(2)
        .save(&alibi_png)?;

    let text = out_dir.join("ch09_output.txt");
    std::fs::write(&text, report()?)?;
    let rotation = rope_rotation().save(out_dir.join("ch09_rope_rotation.svg"))?;
    Ok(vec![shuffled, table, dots, rope_png, alibi_png, rotation, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 9, Where is each word? Position: attention cannot tell word order; sinusoidal \
    encodings, a learned table, RoPE and ALiBi.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch09_output.txt) and draws \
    ch09_shuffled.png, ch09_sinusoidal.png, ch09_dot_distance.png, ch09_rope_distance.png, \
    ch09_alibi.png and the diagram ch09_rope_rotation.svg into book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
