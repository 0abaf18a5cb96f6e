//! Chapter 2, *Queries, keys and values*: three projections of the same tokens, the shapes of
//! their weights, the raw scores `Q·Kᵀ`, and why they need not be symmetric.
//!
//! ```text
//! cargo run --release --example ch02_qkv [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch02_output.txt`) and draws
//! `ch02_qkv.png`, `ch02_symmetry.png`, `ch02_scores.png` and the diagram
//! `ch02_qkv_blocks.svg` (X times each weight matrix, row by row).

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::EmbeddingTable;
use attention::projection::Linear;
use attention::scores::scores;
use attention::self_attention::SelfAttention;
use common::colors;
use figures::diagram::{Anchor, Color, Diagram, Grid, Style, TextStyle};
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

/// The diagram of `Q = X·W_Q`, `K = X·W_K`, `V = X·W_V` for the chapter's layer: `X` as a block
/// of one row per token, the three weight matrices, and `Q`, `K`, `V` as blocks in one colour
/// each, with the row of `cat` outlined in `X` and in all three results.
fn qkv_blocks(d_model: usize) -> Diagram {
    const CELL: f64 = 26.0;
    let (l, hi) = (TOKENS.len(), 1); // the highlighted row: "cat"
    let label = TextStyle::new(15.0);
    let note = TextStyle::new(14.0).color(Color::MUTED);
    let thick = Style::stroke(Color::INK, 3.5);
    let mut d = Diagram::new(
        760,
        575,
        "Q, K and V are three projections of the same rows of X",
    );
    d.describe(format!(
        "X has one row per token ({}) and d_model = {d_model} columns. It is multiplied by W_Q \
         and W_K, of shape ({d_model}, {D_K}), and by W_V, of shape ({d_model}, {D_V}), giving Q \
         and K of shape ({l}, {D_K}) and V of shape ({l}, {D_V}), still one row per token. The \
         row of cat is outlined in X and in Q, K and V: each comes from that row alone.",
        TOKENS.join(", ")
    ));
    d.text(20.0, 28.0, "Rows are tokens: row i of Q, K and V is row i of X times W_{Q}, W_{K}, W_{V}", &TextStyle::new(16.0).bold());

    // X, centred on the three lanes.
    let lanes = [125.0, 292.0, 459.0];
    let x = Grid::new((70.0, lanes[1] - l as f64 * CELL / 2.0), (l, d_model), (CELL, CELL)).fill(colors::X.tint(colors::FILL));
    d.grid(&x);
    d.rect(x.left(), x.top() + hi as f64 * CELL, x.width(), CELL, &thick);
    for (i, token) in TOKENS.iter().enumerate() {
        d.text(x.left() - 8.0, x.cell(i, 0).1, token, &label.anchor(Anchor::End).middle());
    }
    d.text(x.center().0, x.top() - 28.0, "X", &label.bold().centered());
    d.text(x.center().0, x.top() - 10.0, format!("(L, d_{{model}}) = ({l}, {d_model})").as_str(), &label.centered());
    d.text(x.center().0, x.bottom() + 22.0, "one row per token,", &note.centered());
    d.text(x.center().0, x.bottom() + 40.0, format!("{d_model} features each").as_str(), &note.centered());

    let lane = [
        ("Q", "W_{Q}", "d_{k}", D_K, colors::Q, "query q_{i} = x_{i}·W_{Q}:", "what token i looks for"),
        ("K", "W_{K}", "d_{k}", D_K, colors::K, "key k_{j} = x_{j}·W_{K}:", "what token j is found by"),
        ("V", "W_{V}", "d_{v}", D_V, colors::V, "value v_{j} = x_{j}·W_{V}:", "what token j hands over"),
    ];
    for (&y, (name, w_name, width_name, width, color, role, meaning)) in lanes.iter().zip(lane) {
        // The weight matrix, (d_model, width), centred on the lane.
        let w = Grid::new((300.0, y - d_model as f64 * CELL / 2.0), (d_model, width), (CELL, CELL)).fill(color.tint(colors::LIGHT));
        d.grid(&w);
        d.text(w.center().0, w.top() - 10.0, format!("{w_name} ({d_model}, {width})").as_str(), &label.centered());
        d.text(w.center().0, w.bottom() + 18.0, format!("(d_{{model}}, {width_name})").as_str(), &note.centered());
        d.text(w.left() - 14.0, y, "X ·", &label.anchor(Anchor::End).middle());
        d.arrow((x.right() + 6.0, x.center().1), (w.left() - 48.0, y), &Style::stroke(Color::MUTED, 1.5));
        d.text(w.right() + 22.0, y, "=", &label.centered().middle());
        // The result, (L, width): one row per token, in the lane's colour.
        let r = Grid::new((w.right() + 44.0, y - l as f64 * CELL / 2.0), (l, width), (CELL, CELL)).fill(color.tint(colors::FILL)).border(color, 2.0);
        d.grid(&r);
        d.rect(r.left(), r.top() + hi as f64 * CELL, r.width(), CELL, &thick);
        for (i, token) in TOKENS.iter().enumerate() {
            d.text(r.right() + 8.0, r.cell(i, 0).1, token, &note.middle());
        }
        d.text(r.center().0, r.top() - 28.0, name, &label.bold().centered());
        d.text(r.center().0, r.top() - 10.0, format!("(L, {width_name}) = ({l}, {width})").as_str(), &label.centered());
        d.text(565.0, y - 8.0, role, &label);
        d.text(565.0, y + 12.0, meaning, &note);
    }
    d.text(20.0, 560.0, "The outlined row of Q, K and V is the row of cat in X times each matrix: no other token enters it.", &note);
    d
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

    let blocks = qkv_blocks(x.ncols()).save(out_dir.join("ch02_qkv_blocks.svg"))?;

    let text = out_dir.join("ch02_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![qkv_png, symmetry, scores_png, blocks, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 2, Queries, keys and values: three projections of the same tokens and the \
    raw scores Q·Kᵀ.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch02_output.txt) and \
    draws ch02_qkv.png, ch02_symmetry.png, ch02_scores.png and the diagram \
    ch02_qkv_blocks.svg into book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
