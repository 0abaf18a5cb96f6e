//! Chapter 5, *Softmax*: its properties, where the naive formula overflows, the notebooks'
//! softmax bugs, temperature and the Jacobian.
//!
//! ```text
//! cargo run --release --example ch05_softmax [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch05_output.txt`) and draws
//! `ch05_temperature.png` and `ch05_whole_matrix_bug.png`.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::mask::Mask;
use attention::notebooks::{nb001, nb002, nb004};
use attention::scores::scale;
use attention::softmax::{naive_softmax, softmax};
use figures::{Axis, HeatmapGrid, LineChart, Panel, ValueRange};
use ndarray::{Array1, Array2, arr1, arr2};

/// The score row the temperature section varies: notebook 004's first scaled row ("my").
const TEMPERATURE_ROW: usize = 0;

/// The temperatures the report lists (the figure uses a finer grid).
const TEMPERATURES: [f64; 5] = [0.1, 0.5, 1.0, 2.0, 10.0];

/// `softmax(x / T)` of one row.
fn with_temperature(row: &Array1<f64>, t: f64) -> Array1<f64> {
    softmax(&row.mapv(|x| x / t))
}

/// The Jacobian of softmax at the weights `p`: `diag(p) − p pᵀ`.
fn jacobian(p: &Array1<f64>) -> Array2<f64> {
    let outer = Array2::from_shape_fn((p.len(), p.len()), |(i, j)| p[i] * p[j]);
    Array2::from_diag(p) - outer
}

/// Notebook 002's scaled scores with its causal mask: the input of its softmax.
fn nb002_masked() -> Result<Array2<f64>, Box<dyn Error>> {
    let mut masked = arr2(&nb002::SCALED);
    Mask::causal(4).apply(&mut masked)?;
    Ok(masked)
}

/// Notebook 002's softmax: exp of every entry divided by the sum of the whole matrix.
fn whole_matrix_softmax(scores: &Array2<f64>) -> Array2<f64> {
    let exp = scores.mapv(f64::exp);
    let total = exp.sum();
    exp / total
}

/// Everything the example prints, as one text (also written to `ch05_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    let x = arr1(&[1.0, 2.0, 3.0]);
    writeln!(out, "softmax([1, 2, 3])          = {:.4}", softmax(&x))?;
    writeln!(out, "softmax([1001, 1002, 1003]) = {:.4}\n", softmax(&(&x + 1000.0)))?;

    writeln!(out, "exp overflows above ln(MAX): f32 {:.4}, f64 {:.4}", f32::MAX.ln(), f64::MAX.ln())?;
    let (a32, a64) = (arr1(&[89.0_f32, 88.0]), arr1(&[710.0_f64, 709.0]));
    writeln!(out, "f32 [89, 88]:   naive {:.4}, stable {:.4}", naive_softmax(&a32), softmax(&a32))?;
    writeln!(out, "f64 [710, 709]: naive {:.4}, stable {:.4}\n", naive_softmax(&a64), softmax(&a64))?;
    let big = arr2(&nb004::SCALED).mapv(|s| (50.0 * s) as f32);
    writeln!(out, "Notebook 004's scaled scores times 50, in f32, naive softmax:\n{:.4}", naive_softmax(&big))?;
    writeln!(out, "...and stable softmax:\n{:.4}\n", softmax(&big))?;

    let masked = nb002_masked()?;
    let buggy = whole_matrix_softmax(&masked);
    writeln!(out, "Notebook 002, softmax over the whole matrix:\n{buggy:.8}")?;
    writeln!(out, "  its row sums: {:.8}", buggy.sum_axis(ndarray::Axis(1)))?;
    writeln!(out, "  the correct row softmax:\n{:.8}\n", softmax(&masked))?;

    let weights = softmax(&scale(arr2(&nb001::SCORES), nb001::D_K));
    let diff = (&weights - &arr2(&nb001::WEIGHTS)).mapv(f64::abs).fold(0.0, |m: f64, &d| m.max(d));
    writeln!(out, "Notebook 001, softmax(scores / sqrt(3)):\n{weights:.4}")?;
    writeln!(out, "  largest difference from its printed weights: {diff:.1e}\n")?;

    let row = arr2(&nb004::SCALED).row(TEMPERATURE_ROW).to_owned();
    writeln!(out, "Temperature, scores {row:.4}:")?;
    for t in TEMPERATURES {
        writeln!(out, "  T = {t:>4}: {:.4}", with_temperature(&row, t))?;
    }

    let p = softmax(&arr1(&[1.0, 2.0, 3.0]));
    writeln!(out, "\nJacobian diag(p) - p p^T at p = softmax([1, 2, 3]):\n{:.4}", jacobian(&p))?;
    writeln!(out, "Largest entry p(1 - p) for two scores [x, 0]:")?;
    for gap in [1.0, 5.0, 10.0, 20.0] {
        let p = softmax(&arr1(&[gap, 0.0]));
        writeln!(out, "  x = {gap:>2}: {:.3e}", jacobian(&p)[[0, 0]])?;
    }
    Ok(out)
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let row = arr2(&nb004::SCALED).row(TEMPERATURE_ROW).to_owned();
    let temps: Vec<f64> = (0..=40).map(|i| 10f64.powf(-1.0 + i as f64 / 20.0)).collect(); // 0.1 .. 10
    let curves: Vec<Array1<f64>> = temps.iter().map(|&t| with_temperature(&row, t)).collect();
    let mut chart = LineChart::new()
        .title("softmax(s / T) for the scores of \"my\" in notebook 004")
        .x_label("temperature T (log scale)")
        .y_label("attention weight")
        .x_axis(Axis::Log10)
        .y_range(0.0, 1.0)
        .markers(false);
    for (j, token) in ["my", "name", "is", "Aj"].iter().enumerate() {
        let name = format!("key \"{token}\" (score {:.2})", row[j]);
        chart = chart.series(name, temps.iter().zip(&curves).map(|(&t, w)| (t, w[j])));
    }
    let temperature = out_dir.join("ch05_temperature.png");
    chart.save(&temperature)?;

    let masked = nb002_masked()?;
    let allowed = Mask::causal(4).as_array().into_dimensionality()?.to_owned();
    let bug = out_dir.join("ch05_whole_matrix_bug.png");
    HeatmapGrid::new()
        .title("Notebook 002's causal softmax, two ways")
        .panel(Panel::new(&whole_matrix_softmax(&masked)).title("÷ sum of the matrix").allowed(&allowed))
        .panel(Panel::new(&softmax(&masked)).title("÷ sum of each row").allowed(&allowed))
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .mask_mark("0")
        .save(&bug)?;

    let text = out_dir.join("ch05_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![temperature, bug, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 5, Softmax: its properties, where the naive formula overflows, the \
    notebooks' softmax bugs, temperature.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch05_output.txt) and \
    draws ch05_temperature.png and ch05_whole_matrix_bug.png into book/img/ (or --out- \
    dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
