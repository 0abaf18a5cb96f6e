//! Chapter 3, *Scores, scaling and variance*: why `Q·Kᵀ` is divided by `√d_k`, measured.
//!
//! ```text
//! cargo run --release --example ch03_scaling [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch03_output.txt`) and draws
//! `ch03_variance.png`, `ch03_max_weight.png`, `ch03_entropy.png`, `ch03_jacobian.png` and
//! `ch03_row_bars.png` (one query's weights at `d_k = 1024`, raw and scaled).

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::exact;
use attention::notebooks::{nb002, nb004};
use attention::scores::{scaled_scores, scores, variance};
use attention::softmax::softmax;
use attention::stats::{RowStats, ScalingMeasurement, entropy, measure_scaling, sample_queries_keys, sample_scores};
use figures::{Axis, BarChart, LineChart};
use ndarray::{Array1, arr1, arr2};
use rand::{SeedableRng, rngs::StdRng};

/// Keys per query in the experiment (a short sentence).
const L: usize = 16;
/// Independent `(Q, K)` pairs per `d_k`: `TRIALS·L` rows of scores, `TRIALS·L·L` scores.
const TRIALS: usize = 64;
/// The seed of the experiment; `d_k` is added to it, so each `d_k` has its own stream.
const SEED: u64 = 3;

/// The width of the one row of weights drawn as bars: the experiment's widest.
const ROW_D_K: usize = 1024;

/// `d_k = 1, 2, 4, …, 1024`.
fn d_ks() -> impl Iterator<Item = usize> {
    (0..=10).map(|p| 1 << p)
}

/// The experiment, one measurement per `d_k`.
fn experiment() -> Result<Vec<ScalingMeasurement>, attention::AttentionError> {
    d_ks().map(|d_k| measure_scaling(d_k, L, TRIALS, &mut StdRng::seed_from_u64(SEED + d_k as u64))).collect()
}

/// One query's scores against the keys of its trial, and their softmax without and with the
/// division by `√d_k`.
struct OneRow {
    /// Which query of the trial (from 0).
    query: usize,
    /// The experiment's mean entropy of a raw row at this `d_k`, which picked the query.
    mean_entropy: f64,
    scores: Array1<f64>,
    raw: Array1<f64>,
    scaled: Array1<f64>,
}

/// A typical row of the experiment at `d_k = 1024`: of the 16 queries of its first trial (the
/// same generator, seeded `SEED + 1024`), the one whose raw row's entropy is nearest the
/// experiment's mean entropy there. The dot products add their 1024 terms in a fixed order
/// (`exact::matmul`) and the softmax uses `exact::exp`, so the bars and the numbers printed
/// are the same on every machine.
fn one_row(runs: &[ScalingMeasurement]) -> Result<OneRow, Box<dyn Error>> {
    let mean_entropy = runs.iter().find(|m| m.d_k == ROW_D_K).ok_or("no run at d_k = 1024")?.raw.entropy;
    let mut rng = StdRng::seed_from_u64(SEED + ROW_D_K as u64);
    let (q, k) = sample_queries_keys(ROW_D_K, L, &mut rng)?;
    let all = exact::matmul(&q, &exact::transposed(&k))?; // (L, L): row i is query i's scores
    let raw = exact::softmax(&all);
    let distance = |i: usize| (entropy(&raw.row(i)) - mean_entropy).abs();
    let query = (0..L).min_by(|&a, &b| distance(a).total_cmp(&distance(b))).ok_or("no queries")?;
    let scores = all.row(query).to_owned();
    let scaled = exact::softmax(&(&scores / (ROW_D_K as f64).sqrt()));
    Ok(OneRow { query, mean_entropy, raw: raw.row(query).to_owned(), scores, scaled })
}

/// The largest entry of `w`, its index, and the second largest.
fn top_two(w: &Array1<f64>) -> (f64, usize, f64) {
    let mut order: Vec<usize> = (0..w.len()).collect();
    order.sort_by(|&a, &b| w[b].total_cmp(&w[a]));
    (w[order[0]], order[0], w[order[1]])
}

/// Everything the example prints, as one text (also written to `ch03_output.txt`): `runs`, the
/// experiment, and `row`, its [`one_row`].
fn report(runs: &[ScalingMeasurement], row: &OneRow) -> Result<String, Box<dyn Error>> {
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

    let (lo, hi) = row.scores.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let root = (ROW_D_K as f64).sqrt();
    writeln!(out, "\nOne query at d_k = {ROW_D_K} (ch03_row_bars.png): query {} of the first trial (seed {SEED} + {ROW_D_K}),", row.query)?;
    writeln!(out, "the one whose raw entropy, {:.3}, is nearest the mean above, {:.3}", entropy(&row.raw), row.mean_entropy)?;
    writeln!(out, "  scores q·k_j from {lo:.2} to {hi:.2}; divided by √{ROW_D_K} = {root}: from {:.3} to {:.3}", lo / root, hi / root)?;
    for (name, w) in [("raw q·k:        ", &row.raw), ("scaled q·k/√d_k:", &row.scaled)] {
        let (first, key, second) = top_two(w);
        writeln!(out, "  {name} largest weight {first:.4} (key {key}), next {second:.4}, entropy {:.3}", entropy(w))?;
    }
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

    let row = one_row(&runs)?;
    let bars = out_dir.join("ch03_row_bars.png");
    let keys: Vec<String> = (0..L).map(|j| j.to_string()).collect();
    BarChart::new()
        .title(format!("Query {}'s weights over {L} keys at d_k = {ROW_D_K}", row.query))
        .labels(&keys)
        .x_label("key j")
        .y_label("weight")
        .y_range(0.0, 1.0)
        .panel("raw: softmax(q·k_j)", row.raw.iter().copied())
        .panel(format!("scaled: softmax(q·k_j / √{ROW_D_K})"), row.scaled.iter().copied())
        .annotate(2)
        .save(&bars)?;
    written.push(bars);

    let text = out_dir.join("ch03_output.txt");
    std::fs::write(&text, report(&runs, &row)?)?;
    written.push(text);
    Ok(written)
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 3, Scores, scaling and variance: why Q·Kᵀ is divided by √d_k, measured.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch03_output.txt) and \
    draws ch03_variance.png, ch03_max_weight.png, ch03_entropy.png, ch03_jacobian.png and \
    ch03_row_bars.png into book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}

/// The numbers `ch03_output.txt` prints for `ch03_row_bars.png`, which the chapter quotes,
/// asserted (this module runs in `cargo test --test figures_fresh`, which includes every
/// chapter example).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_at_d_k_1024_is_nearly_one_hot_raw_and_spread_scaled() {
        let runs = experiment().unwrap();
        let row = one_row(&runs).unwrap();
        assert_eq!((row.query, row.raw.len(), row.scaled.len()), (5, L, L));
        assert!((row.mean_entropy - 0.096).abs() < 5e-4, "{}", row.mean_entropy);
        let close = |x: f64, printed: f64, decimals: i32| (x - printed).abs() <= 0.5 * 10f64.powi(-decimals);
        // The scores and their range, raw and divided by √1024 = 32.
        let (lo, hi) = row.scores.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        assert!(close(lo, -68.27, 2) && close(hi, 57.39, 2), "{lo} {hi}");
        assert!(close(lo / 32.0, -2.133, 3) && close(hi / 32.0, 1.794, 3));
        // Raw: nearly one-hot on key 9.
        let (first, key, second) = top_two(&row.raw);
        assert_eq!(key, 9);
        assert!(close(first, 0.9865, 4) && close(second, 0.0135, 4), "{first} {second}");
        assert!(close(entropy(&row.raw), 0.071, 3));
        // Scaled: the same key first, but spread over the 16 keys.
        let (first, key, second) = top_two(&row.scaled);
        assert_eq!(key, 9);
        assert!(close(first, 0.2259, 4) && close(second, 0.1976, 4), "{first} {second}");
        assert!(close(entropy(&row.scaled), 2.354, 3));
        for w in [&row.raw, &row.scaled] {
            assert!((w.sum() - 1.0).abs() < 1e-12);
        }
        // The chosen query is the one whose raw entropy is nearest the experiment's mean.
        let report = report(&runs, &row).unwrap();
        assert!(report.contains("query 5 of the first trial"), "{report}");
        assert!(report.contains("largest weight 0.9865 (key 9), next 0.0135, entropy 0.071"));
        assert!(report.contains("largest weight 0.2259 (key 9), next 0.1976, entropy 2.354"));
    }
}
