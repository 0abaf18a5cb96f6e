//! Chapter 4, *Masking*: the causal mask in its two forms, what a fully masked row does under
//! each convention, padding masks for a batch, and the causal invariant.
//!
//! ```text
//! cargo run --release --example ch04_masking [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch04_output.txt`) and draws
//! `ch04_standard_vs_causal.png` and `ch04_padded_batch.png`.

mod common;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::mask::Mask;
use attention::notebooks::nb004;
use attention::sdpa::sdpa;
use attention::self_attention::SelfAttention;
use attention::softmax::{naive_softmax, softmax};
use figures::{HeatmapGrid, Panel, ValueRange};
use ndarray::{Array2, Array3, Axis, arr2, s};
use rand::{SeedableRng, rngs::StdRng};

/// The sentence of notebook 004, one label per token.
const TOKENS: [&str; 4] = ["my", "name", "is", "Aj"];

/// The padded batch of the padding section: three sentences of different lengths.
const BATCH: [&str; 3] = ["my name is Aj", "hello world", "hi"];

/// The padding token that fills the shorter sentences up to the longest one.
const PAD: &str = "<pad>";

/// Notebook 004's scaled scores with and without the causal mask: (unmasked, causal) weights.
fn nb004_weights() -> Result<(Array2<f64>, Array2<f64>), Box<dyn Error>> {
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    let standard = sdpa(&q, &k, &v, None)?.weights;
    let causal = sdpa(&q, &k, &v, Some(&Mask::causal(4)))?.weights;
    Ok((standard, causal))
}

/// The padded batch: its token labels, valid lengths, padding mask and attention weights
/// `(batch, L, L)` from a seeded single-head layer over seeded embeddings.
struct PaddedBatch {
    labels: Vec<Vec<String>>,
    valid: Vec<usize>,
    mask: Mask,
    weights: Array3<f64>,
}

fn padded_batch() -> Result<PaddedBatch, Box<dyn Error>> {
    let words = BATCH.iter().flat_map(|s| s.split_whitespace()).chain([PAD]);
    let vocab = Vocabulary::new(words);
    let mut rng = StdRng::seed_from_u64(4);
    let table = EmbeddingTable::<f64>::random(vocab.len(), 8, &mut rng)?;
    let layer = SelfAttention::<f64>::random(8, 8, 8, &mut rng)?;
    let len = BATCH.iter().map(|s| s.split_whitespace().count()).max().unwrap_or(0);
    let pad = vocab.encode(PAD)?[0];
    let mut x = Array3::zeros((BATCH.len(), len, 8));
    let (mut labels, mut valid) = (Vec::new(), Vec::new());
    for (b, sentence) in BATCH.iter().enumerate() {
        let mut ids = vocab.encode(sentence)?;
        valid.push(ids.len());
        ids.resize(len, pad); // pad on the right up to the longest sentence
        x.index_axis_mut(Axis(0), b).assign(&table.lookup(&ids)?);
        labels.push(ids.iter().map(|&id| vocab.word(id).unwrap_or("?").to_string()).collect());
    }
    let mask = Mask::padding(&valid, len, len)?;
    let weights = layer.forward_batched(&x, Some(&mask))?.weights;
    Ok(PaddedBatch { labels, valid, mask, weights })
}

/// Everything the example prints, as one text (also written to `ch04_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    let causal = Mask::causal(4);
    writeln!(out, "Causal mask for L = 4 (true = may attend):\n{}\n", causal.as_array())?;
    writeln!(out, "The same mask in additive form (0 = keep, -inf = block):\n{}\n", causal.to_additive::<f64>())?;

    let mut masked = arr2(&nb004::SCALED);
    causal.apply(&mut masked)?;
    writeln!(out, "Notebook 004: scaled scores after the causal mask:\n{masked:.8}\n")?;
    let (standard, causal_weights) = nb004_weights()?;
    writeln!(out, "Attention weights without a mask:\n{standard:.8}\n")?;
    writeln!(out, "Causal attention weights:\n{causal_weights:.8}\n")?;
    let new_v = sdpa(&arr2(&nb004::Q), &arr2(&nb004::K), &arr2(&nb004::V), Some(&causal))?.output;
    writeln!(out, "Causal output (notebook 004's new V):\n{new_v:.8}\n")?;

    // A query with no visible key, under three conventions.
    let row = arr2(&[[0.3, -1.2, 2.0, 0.7]]);
    let filled = row.mapv(|_| -1e9); // masked_fill(-1e9) on every key
    let blocked = row.mapv(|_| f64::NEG_INFINITY);
    writeln!(out, "A row with every key masked:")?;
    writeln!(out, "  filled with -1e9, then softmax:     {:.4}", softmax(&filled).row(0))?;
    writeln!(out, "  -inf, naive exp/sum:                {:.4}", naive_softmax(&blocked).row(0))?;
    writeln!(out, "  -inf, this book's softmax:          {:.4}\n", softmax(&blocked).row(0))?;

    let batch = padded_batch()?;
    writeln!(out, "Padded batch, valid lengths {:?}:", batch.valid)?;
    for (b, labels) in batch.labels.iter().enumerate() {
        writeln!(out, "  item {b}: {}", labels.join(" "))?;
    }
    writeln!(out, "Padding mask of item 1:\n{}", batch.mask.as_array().index_axis(Axis(0), 1))?;
    writeln!(out, "Weights of item 1:\n{:.4}\n", batch.weights.index_axis(Axis(0), 1))?;

    // The causal invariant: change the last token, the outputs before it do not move.
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    let (mut q2, mut k2, mut v2) = (q.clone(), k.clone(), v.clone());
    for m in [&mut q2, &mut k2, &mut v2] {
        m.row_mut(3).mapv_inplace(|x| -3.0 * x + 1.0); // a different last token
    }
    for (name, mask) in [("causal", Some(&causal)), ("no mask", None)] {
        let before = sdpa(&q, &k, &v, mask)?.output;
        let after = sdpa(&q2, &k2, &v2, mask)?.output;
        let diff = (&before.slice(s![..3, ..]) - &after.slice(s![..3, ..])).mapv(f64::abs);
        writeln!(
            out,
            "Changing token 3 moves outputs 0..=2 by at most {:.3e} ({name})",
            diff.fold(0.0, |m, &d| d.max(m))
        )?;
    }
    Ok(out)
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let (standard, causal) = nb004_weights()?;
    let allowed = Mask::causal(4).as_array().into_dimensionality()?.to_owned();
    let both = out_dir.join("ch04_standard_vs_causal.png");
    HeatmapGrid::new()
        .title("Notebook 004's sentence without and with the causal mask")
        .panel(Panel::new(&standard).title("no mask (encoder)").labels(&TOKENS))
        .panel(Panel::new(&causal).title("causal (decoder)").labels(&TOKENS).allowed(&allowed))
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .mask_mark("0")
        .save(&both)?;

    let batch = padded_batch()?;
    let padded = out_dir.join("ch04_padded_batch.png");
    let mut grid = HeatmapGrid::new().title("A padded batch: no query attends to <pad> keys");
    for (b, labels) in batch.labels.iter().enumerate() {
        let allowed = batch.mask.as_array().index_axis(Axis(0), b).into_dimensionality()?.to_owned();
        let weights = batch.weights.index_axis(Axis(0), b);
        let title = format!("item {b}: {} real token{}", batch.valid[b], if batch.valid[b] == 1 { "" } else { "s" });
        grid = grid.panel(Panel::new(&weights).title(title).labels(labels).allowed(&allowed));
    }
    grid.range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .mask_mark("0")
        .columns(3)
        .save(&padded)?;

    let text = out_dir.join("ch04_output.txt");
    std::fs::write(&text, common::wrap_wide_rows(&report()?))?;
    Ok(vec![both, padded, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 4, Masking: the causal mask, fully masked rows, padding masks and the causal \
    invariant.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch04_output.txt) and \
    draws ch04_standard_vs_causal.png and ch04_padded_batch.png into book/img/ (or \
    --out-dir).";

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}
