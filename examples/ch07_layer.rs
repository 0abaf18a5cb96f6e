//! Chapter 7, *The complete layer*: notebook 004's run from Q, K, V to the new V, one function
//! for encoders and decoders, and cross-attention between two sentences.
//!
//! ```text
//! cargo run --release --example ch07_layer [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch07_output.txt`) and draws
//! `ch07_masked_scores.png`, `ch07_cross_attention.png` and, by running the reader tool
//! `multihead` on one of the PyTorch fixtures, `ch07_multihead_tool.png`.

mod common;
#[allow(dead_code)] // the tools' module has more than this example uses
#[path = "reader_tools/mod.rs"]
mod reader_tools;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::mask::Mask;
use attention::notebooks::nb004;
use attention::scores::{scale, scores, variance};
use attention::sdpa::sdpa;
use attention::self_attention::SelfAttention;
use attention::softmax::softmax;
use figures::{ColorScheme, Heatmap, ValueRange};
use ndarray::{Array2, ArrayD, arr2};
use ndarray_npy::read_npy;
use rand::{SeedableRng, rngs::StdRng};

/// Notebook 004's tokens.
const TOKENS: [&str; 4] = ["my", "name", "is", "Aj"];

/// The cross-attention example: a German decoder sentence attending to an English encoder one.
const SOURCE: &str = "the cat sat on the mat";
const TARGET: &str = "die Katze saß";

/// The PyTorch fixture the "check your own model" section runs the `multihead` tool on: an
/// `nn.MultiheadAttention(12, 3, bias=False)` with a causal mask, its weights exported as `.npy`.
const FIXTURE: &str = "tests/fixtures/mha/f64_d12_h3_L6_causal";

/// Runs the `multihead` tool on [`FIXTURE`] (writing `out.npy` into `work`, and the heatmap
/// to `png` if given) and returns the largest difference from PyTorch's output.
fn run_multihead_tool(work: &Path, png: Option<&Path>) -> Result<f64, Box<dyn Error>> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let file = |name: &str| fixture.join(name).display().to_string();
    let out = work.join("out.npy").display().to_string();
    let mut args = vec!["multihead".to_string(), "--x".to_string(), file("x_q.npy")];
    for (flag, name) in [("--wq", "w_q"), ("--wk", "w_k"), ("--wv", "w_v"), ("--wo", "w_o")] {
        args.extend([flag.to_string(), file(&format!("{name}.npy"))]);
    }
    args.extend(["--heads", "3", "--mask", "causal", "--out", &out].map(String::from));
    if let Some(png) = png {
        args.extend(["--png".to_string(), png.display().to_string()]);
    }
    reader_tools::multihead::run(args.into_iter().map(Into::into).collect())
        .map_err(|failure| failure.message())?;
    let ours: ArrayD<f64> = read_npy(&out)?;
    let torch: ArrayD<f64> = read_npy(fixture.join("out.npy"))?;
    Ok((ours - torch).iter().fold(0.0, |m: f64, d| m.max(d.abs())))
}

/// Notebook 004's scaled scores with the causal mask applied: what goes into softmax.
fn masked_scores() -> Result<Array2<f64>, Box<dyn Error>> {
    let raw = scores(&arr2(&nb004::Q), &arr2(&nb004::K))?;
    let mut s = scale(raw, nb004::D_K);
    Mask::causal(4).apply(&mut s)?;
    Ok(s)
}

/// Cross-attention's result: the target tokens (queries), the source tokens (keys) and the
/// weights `(L_q, L_k)`.
type Cross = (Vec<&'static str>, Vec<&'static str>, Array2<f64>);

/// The cross-attention weights `(L_q, L_k)`: target tokens (queries) over source tokens.
fn cross_weights() -> Result<Cross, Box<dyn Error>> {
    let (source, target): (Vec<&str>, Vec<&str>) =
        (SOURCE.split_whitespace().collect(), TARGET.split_whitespace().collect());
    let vocab = Vocabulary::new(source.iter().chain(&target).copied());
    let mut rng = StdRng::seed_from_u64(7);
    let table = EmbeddingTable::<f64>::random(vocab.len(), 8, &mut rng)?;
    let layer = SelfAttention::<f64>::random(8, 8, 8, &mut rng)?;
    let x_enc = table.lookup(&vocab.encode(SOURCE)?)?; // (L_k, d_model) = (6, 8)
    let x_dec = table.lookup(&vocab.encode(TARGET)?)?; // (L_q, d_model) = (3, 8)
    let att = layer.cross(&x_dec, &x_enc, None)?;
    Ok((target, source, att.weights))
}

/// Everything the example prints, as one text (also written to `ch07_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    writeln!(out, "Notebook 004, \"{}\": Q, K, V are {:?}", nb004::SENTENCE, q.shape())?;
    let raw = scores(&q, &k)?;
    writeln!(out, "1. Q K^T:\n{raw:.8}")?;
    let scaled = scale(raw.clone(), nb004::D_K);
    writeln!(out, "2. divided by sqrt(d_k) = sqrt(8):\n{scaled:.8}")?;
    writeln!(
        out,
        "   variances: Q {:.6}, K {:.6}, Q K^T {:.6}, scaled {:.6}",
        variance(&q)?,
        variance(&k)?,
        variance(&raw)?,
        variance(&scaled)?
    )?;
    let masked = masked_scores()?;
    writeln!(out, "3. plus the causal mask:\n{masked:.8}")?;
    let weights = softmax(&masked);
    writeln!(out, "4. softmax, row by row:\n{weights:.8}")?;
    writeln!(out, "5. times V, the new V:\n{:.8}\n", weights.dot(&v))?;

    let decoder = sdpa(&q, &k, &v, Some(&Mask::causal(4)))?;
    let encoder = sdpa(&q, &k, &v, None)?;
    writeln!(out, "The same through one call, sdpa(q, k, v, mask):")?;
    writeln!(out, "  decoder (causal) output row 0: {:.8}", decoder.output.row(0))?;
    writeln!(out, "  encoder (no mask) output row 0: {:.8}", encoder.output.row(0))?;
    let same = (&decoder.output.row(3) - &encoder.output.row(3)).iter().all(|d| d.abs() < 1e-12);
    writeln!(out, "  the last row, which sees every token either way, is the same: {same}\n")?;

    let (target, _, cross) = cross_weights()?;
    writeln!(out, "Cross-attention, queries \"{TARGET}\" over keys \"{SOURCE}\": weights {:?}", cross.shape())?;
    for (i, word) in target.iter().enumerate() {
        writeln!(out, "  {word:>5}: {:.4}", cross.row(i))?;
    }

    let work = tempfile::tempdir()?;
    let diff = run_multihead_tool(work.path(), None)?;
    writeln!(out, "\nThe multihead tool on {FIXTURE}:")?;
    writeln!(out, "  output within 1e-12 of PyTorch's: {}", diff < 1e-12)?;
    Ok(out)
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let scores_png = out_dir.join("ch07_masked_scores.png");
    Heatmap::new(&masked_scores()?)
        .labels(&TOKENS)
        .title("Notebook 004: Q·Kᵀ/√8 plus the causal mask")
        .scheme(ColorScheme::Diverging)
        .colorbar_label("scaled score")
        .save(&scores_png)?;

    let (target, source, cross) = cross_weights()?;
    let cross_png = out_dir.join("ch07_cross_attention.png");
    Heatmap::new(&cross)
        .row_labels(&target)
        .col_labels(&source)
        .title("Cross-attention: decoder queries, encoder keys")
        .row_title("decoder token (query)")
        .col_title("encoder token (key)")
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .save(&cross_png)?;

    let tool_png = out_dir.join("ch07_multihead_tool.png");
    run_multihead_tool(tempfile::tempdir()?.path(), Some(&tool_png))?;

    let text = out_dir.join("ch07_output.txt");
    std::fs::write(&text, common::wrap_wide_rows(&report()?))?;
    Ok(vec![scores_png, cross_png, tool_png, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 7, The complete layer: notebook 004's run end to end, encoders and decoders, \
    cross-attention.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch07_output.txt) and \
    draws ch07_masked_scores.png, ch07_cross_attention.png and ch07_multihead_tool.png \
    into book/img/ (or --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
