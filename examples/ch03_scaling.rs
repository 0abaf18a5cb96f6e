//! Chapter 3, *Scores, scaling and variance*: why `Q·Kᵀ` is divided by `√d_k`, measured.
//!
//! ```text
//! cargo run --release --example ch03_scaling [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch03_output.txt`) and draws
//! `ch03_variance.png`, `ch03_max_weight.png`, `ch03_entropy.png` and `ch03_jacobian.png`.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::notebooks::{nb002, nb004};
use attention::scores::{scaled_scores, scores, variance};
use attention::softmax::softmax;
use attention::stats::{RowStats, ScalingMeasurement, measure_scaling, sample_scores};
use figures::{Axis, LineChart};
use ndarray::{arr1, arr2};
use rand::{SeedableRng, rngs::StdRng};

/// Keys per query in the experiment (a short sentence).
const L: usize = 16;
/// Independent `(Q, K)` pairs per `d_k`: `TRIALS·L` rows of scores, `TRIALS·L·L` scores.
const TRIALS: usize = 64;
/// The seed of the experiment; `d_k` is added to it, so each `d_k` has its own stream.
const SEED: u64 = 3;

/// `d_k = 1, 2, 4, …, 1024`.
fn d_ks() -> impl Iterator<Item = usize> {
    (0..=10).map(|p| 1 << p)
}

/// The experiment, one measurement per `d_k`.
fn experiment() -> Result<Vec<ScalingMeasurement>, attention::AttentionError> {
    d_ks().map(|d_k| measure_scaling(d_k, L, TRIALS, &mut StdRng::seed_from_u64(SEED + d_k as u64))).collect()
}

/// Everything the example prints, as one text (also written to `ch03_output.txt`).
fn report(runs: &[ScalingMeasurement]) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();

    let small = arr1(&[2.0, 1.0, 0.0]);
    for factor in [1.0, 8.0, 32.0] {
        let s = &small * factor;
        writeln!(out, "{:<20} = {:.4}", format!("softmax({s:.0})"), softmax(&s))?;
    }
    writeln!(out)?;

    let (q, k) = (arr2(&nb004::Q), arr2(&nb004::K));
    let (raw, scaled) = (scores(&q, &k)?, scaled_scores(&q, &k)?);
    writeln!(out, "Notebook 004 (d_k = {}): variances of Q, K, Q·Kᵀ, Q·Kᵀ/√d_k", nb004::D_K)?;
    let ours = [variance(&q)?, variance(&k)?, variance(&raw)?, variance(&scaled)?];
    writeln!(out, "  ours:    {ours:.8?}")?;
    writeln!(out, "  printed: {:.8?}", nb004::VARIANCES)?;
    writeln!(out, "  Q·Kᵀ variance / scaled variance = {:.6}\n", ours[2] / ours[3])?;

    let (q, k) = (arr2(&nb002::Q), arr2(&nb002::K));
    writeln!(out, "Notebook 002: Q·Kᵀ\n{:.8}", scores(&q, &k)?)?;
    writeln!(out, "and Q·Kᵀ / √8\n{:.8}\n", scaled_scores(&q, &k)?)?;

    writeln!(out, "Experiment: L = {L} keys per query, {TRIALS} trials per d_k, seed {SEED} + d_k")?;
    writeln!(out, "({} rows of weights and {} scores per d_k)\n", TRIALS * L, TRIALS * L * L)?;
    writeln!(out, "            variance          max weight       entropy (nats)    Jacobian norm")?;
    writeln!(out, " d_k       raw  scaled       raw  scaled       raw  scaled       raw  scaled")?;
    for m in runs {
        writeln!(
            out,
            "{:>4} {:>9.2} {:>7.3}    {:>6.3} {:>7.3}    {:>6.3} {:>7.3}    {:>6.3} {:>7.3}",
            m.d_k,
            m.raw_variance,
            m.scaled_variance,
            m.raw.max_weight,
            m.scaled.max_weight,
            m.raw.entropy,
            m.scaled.entropy,
            m.raw.jacobian_norm,
            m.scaled.jacobian_norm
        )?;
    }
    writeln!(out, "uniform weights over {L} keys: max weight {:.4}, entropy ln {L} = {:.3}\n", 1.0 / L as f64, (L as f64).ln())?;

    // The d_model pitfall: 8 heads of d_k = 64 in a d_model = 512 layer, scaled by √512.
    let raw = sample_scores(64, L, TRIALS, &mut StdRng::seed_from_u64(SEED + 64))?;
    let right = RowStats::of_scores(&(&raw / 64f64.sqrt()));
    let wrong = RowStats::of_scores(&(&raw / 512f64.sqrt()));
    writeln!(out, "d_k = 64 (one of 8 heads of d_model = 512):")?;
    writeln!(out, "  / √d_k     = / 8:     variance {:.3}, max weight {:.3}, entropy {:.3}", variance(&(&raw / 8.0))?, right.max_weight, right.entropy)?;
    writeln!(out, "  / √d_model = / 22.63: variance {:.3}, max weight {:.3}, entropy {:.3}", variance(&(&raw / 512f64.sqrt()))?, wrong.max_weight, wrong.entropy)?;
    Ok(out)
}

/// One chart of a softmax statistic: (file, title, y label, top of the y axis, the statistic).
type SoftmaxChart = (&'static str, String, &'static str, f64, fn(&RowStats) -> f64);

/// A line chart against `d_k` (log2 axis) of one quantity, raw and scaled: `value` gives both.
fn chart(title: &str, y_label: &str, runs: &[ScalingMeasurement], value: impl Fn(&ScalingMeasurement) -> (f64, f64)) -> LineChart {
    let points = |pick: fn((f64, f64)) -> f64| runs.iter().map(|m| (m.d_k as f64, pick(value(m)))).collect::<Vec<_>>();
    LineChart::new()
        .title(title)
        .x_label("d_k (width of queries and keys)")
        .y_label(y_label)
        .x_axis(Axis::Log2)
        .series("raw q·k", points(|(raw, _)| raw))
        .series("scaled q·k / √d_k", points(|(_, scaled)| scaled))
}

/// Draws this chapter's figures into `out_dir` and writes the report; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let runs = experiment()?;
    let mut written = Vec::new();

    let variance_png = out_dir.join("ch03_variance.png");
    chart("Variance of a score", "variance", &runs, |m| (m.raw_variance, m.scaled_variance))
        .y_axis(Axis::Log2)
        .save(&variance_png)?;
    written.push(variance_png);

    let softmax_charts: [SoftmaxChart; 3] = [
        ("ch03_max_weight.png", format!("Largest softmax weight in a row of {L}"), "mean largest weight", 1.0, |s| s.max_weight),
        (
            "ch03_entropy.png",
            format!("Entropy of a row of {L} weights (uniform: ln {L} = {:.2})", (L as f64).ln()),
            "mean entropy (nats)",
            3.0,
            |s| s.entropy,
        ),
        ("ch03_jacobian.png", "Size of softmax's Jacobian, ‖diag(p) − p·pᵀ‖".into(), "mean Frobenius norm", 0.5, |s| s.jacobian_norm),
    ];
    for (file, title, y_label, top, stat) in softmax_charts {
        let path = out_dir.join(file);
        chart(&title, y_label, &runs, |m| (stat(&m.raw), stat(&m.scaled))).y_range(0.0, top).save(&path)?;
        written.push(path);
    }

    let text = out_dir.join("ch03_output.txt");
    std::fs::write(&text, report(&runs)?)?;
    written.push(text);
    Ok(written)
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 3, Scores, scaling and variance: why Q·Kᵀ is divided by √d_k, measured.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch03_output.txt) and \
    draws ch03_variance.png, ch03_max_weight.png, ch03_entropy.png and ch03_jacobian.png \
    into book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
