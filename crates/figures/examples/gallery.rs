//! Renders a sample of every kind of figure into a directory and times it:
//! `cargo run --release -p figures --example gallery -- /tmp/gallery`.

use std::time::Instant;

use figures::{Axis, ColorScheme, Heatmap, HeatmapGrid, LineChart, Panel, ValueRange};
use ndarray::Array2;

/// A deterministic pseudo-random matrix (no RNG crate needed here).
fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<f64> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    Array2::from_shape_fn((rows, cols), |_| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    })
}

/// Row-wise softmax of `scores * sharpness`, with `-inf` where `allowed` is false.
fn softmax(scores: &Array2<f64>, sharpness: f64, causal: bool) -> Array2<f64> {
    let mut w = scores * sharpness;
    for (i, mut row) in w.rows_mut().into_iter().enumerate() {
        if causal {
            row.iter_mut()
                .skip(i + 1)
                .for_each(|v| *v = f64::NEG_INFINITY);
        }
        let m = row.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        row.mapv_inplace(|v| (v - m).exp());
        let s = row.sum();
        row.mapv_inplace(|v| v / s);
    }
    w
}

fn time<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    println!("{what:<40} {:>8.1} ms", t.elapsed().as_secs_f64() * 1e3);
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "/tmp/gallery".into()),
    );
    std::fs::create_dir_all(&dir)?;
    let tokens = ["The", "cat", "sat", "on", "the", "mat"];
    let s6 = matrix(6, 6, 1) * 3.0;
    let w6 = softmax(&s6, 1.0, false);
    let c6 = softmax(&s6, 1.0, true);
    let allowed = Array2::from_shape_fn((6, 6), |(i, j)| j <= i);

    time("heatmap 6x6 (weights)", || {
        Heatmap::new(&w6)
            .labels(&tokens)
            .title("Attention weights\n(row i: how token i attends to every token)")
            .colorbar_label("attention weight")
            .range(ValueRange::Fixed(0.0, 1.0))
            .precision(3)
            .save(dir.join("weights6.png"))
    })?;
    let mut masked_scores = s6.clone();
    masked_scores
        .indexed_iter_mut()
        .filter(|((i, j), _)| j > i)
        .for_each(|(_, v)| *v = f64::NEG_INFINITY);
    time("heatmap 6x6 (scores, diverging, -inf)", || {
        Heatmap::new(&masked_scores)
            .labels(&tokens)
            .title("Causal scores")
            .scheme(ColorScheme::Diverging)
            .colorbar_label("score")
            .save(dir.join("scores6.png"))
    })?;
    let long = ["attending", "to", "representations", "of", "tokens", "here"];
    time("heatmap 6x6 (long labels)", || {
        Heatmap::new(&c6)
            .labels(&long)
            .allowed(&allowed)
            .colorbar_label("attention weight")
            .save(dir.join("long6.png"))
    })?;
    let s64 = matrix(64, 64, 2) * 4.0;
    let w64 = softmax(&s64, 1.0, true);
    let a64 = Array2::from_shape_fn((64, 64), |(i, j)| j <= i);
    time("heatmap 64x64", || {
        Heatmap::new(&w64)
            .title("64 tokens, causal")
            .allowed(&a64)
            .colorbar_label("attention weight")
            .save(dir.join("w64.png"))
    })?;
    time("grid standard vs causal", || {
        HeatmapGrid::new()
            .title("Standard vs causal self-attention")
            .panel(Panel::new(&w6).title("standard").labels(&tokens))
            .panel(
                Panel::new(&c6)
                    .title("causal")
                    .labels(&tokens)
                    .allowed(&allowed),
            )
            .range(ValueRange::Fixed(0.0, 1.0))
            .colorbar_label("attention weight")
            .save(dir.join("pair.png"))
    })?;
    time("grid 8 heads 6x6", || {
        let mut g = HeatmapGrid::new()
            .title("Eight heads")
            .colorbar_label("attention weight")
            .range(ValueRange::Fixed(0.0, 1.0));
        for h in 0..8 {
            let w = softmax(&(matrix(6, 6, 10 + h) * 3.0), 1.0, false);
            g = g.panel(Panel::new(&w).title(format!("head {h}")).labels(&tokens));
        }
        g.save(dir.join("heads8.png"))
    })?;
    let emb = matrix(3, 4, 5);
    time("heatmap 3x4 embeddings", || {
        Heatmap::new(&emb)
            .row_labels(&["The", "cat", "sat"])
            .col_labels(&["d0", "d1", "d2", "d3"])
            .row_title("token")
            .col_title("embedding dimension")
            .scheme(ColorScheme::Diverging)
            .title("Embeddings")
            .save(dir.join("emb.png"))
    })?;
    let d_k: Vec<f64> = (0..=10).map(|k| 2f64.powi(k)).collect();
    time("line chart (log2 x, log10 y)", || {
        LineChart::new()
            .title("Variance of the scores against d_k")
            .x_label("d_k (dimension of queries and keys)")
            .y_label("variance")
            .x_axis(Axis::Log2)
            .y_axis(Axis::Log10)
            .series("q·k", d_k.iter().map(|&d| (d, d * 1.03)))
            .series("q·k / √d_k", d_k.iter().map(|&d| (d, 1.0 + 0.02 * d.ln())))
            .series("q·k / d_k", d_k.iter().map(|&d| (d, 1.0 / d)))
            .save(dir.join("variance.png"))
    })?;
    time("line chart (linear, y in [0, 1])", || {
        let temps: Vec<f64> = (1..=40).map(|i| i as f64 / 10.0).collect();
        LineChart::new()
            .title("Softmax temperature")
            .x_label("temperature τ")
            .y_label("value")
            .y_range(0.0, 1.0)
            .markers(false)
            .series(
                "max weight",
                temps
                    .iter()
                    .map(|&t| (t, 1.0 / (1.0 + 2.0 * (-1.0 / t).exp()))),
            )
            .series(
                "normalised entropy",
                temps.iter().map(|&t| (t, 1.0 - (-t).exp())),
            )
            .save(dir.join("temperature.png"))
    })?;
    time("edge: 1x8 row, long title", || {
        Heatmap::new(&softmax(&matrix(1, 8, 7), 2.0, false))
            .title("A single query attending over eight keys, with a title longer than the matrix")
            .precision(2)
            .save(dir.join("edge_row.png"))
    })?;
    time("edge: 16x16 annotated", || {
        Heatmap::new(&softmax(&(matrix(16, 16, 8) * 3.0), 1.0, false))
            .colorbar_label("attention weight")
            .save(dir.join("edge_16.png"))
    })?;
    time("edge: 4 heads 64x64", || {
        let mut g = HeatmapGrid::new()
            .title("Four heads, 64 tokens")
            .colorbar_label("attention weight");
        for h in 0..4 {
            g = g.panel(
                Panel::new(&softmax(&(matrix(64, 64, 20 + h) * 4.0), 1.0, true))
                    .title(format!("head {h}"))
                    .allowed(&a64),
            );
        }
        g.save(dir.join("edge_heads64.png"))
    })?;
    time("edge: legend wrapping", || {
        let mut c = LineChart::new()
            .title("Many series")
            .x_label("x")
            .y_label("y")
            .x_axis(Axis::Log10);
        for k in 0..7 {
            c = c.series(
                format!("series number {k}"),
                (0..6).map(move |i| (10f64.powi(i), (i * k) as f64)),
            );
        }
        c.save(dir.join("edge_legend.png"))
    })?;
    time("edge: clipped to a fixed y range", || {
        LineChart::new()
            .title("Clipped")
            .y_range(0.0, 1.0)
            .series(
                "wild",
                [
                    (0.0, 0.5),
                    (1.0, 1e300),
                    (2.0, -1e300),
                    (3.0, 0.5),
                    (4.0, 0.9),
                ],
            )
            .save(dir.join("edge_clipped.png"))
    })?;
    time("edge: panels of different shapes", || {
        HeatmapGrid::new()
            .title("Cross-attention: 2 queries, 5 keys")
            .panel(
                Panel::new(&softmax(&matrix(2, 5, 30), 2.0, false))
                    .title("head 0")
                    .row_labels(&["Le", "chat"]),
            )
            .panel(Panel::new(&softmax(&matrix(3, 3, 31), 2.0, false)).title("head 1 (3×3)"))
            .panel(Panel::new(&softmax(&matrix(2, 5, 32), 2.0, false)).title("head 2"))
            .columns(2)
            .save(dir.join("edge_shapes.png"))
    })?;
    Ok(())
}
