//! Chapter 13, *Inside a real model*: all-MiniLM-L6-v2, a pretrained BERT encoder, run through
//! the book's own layers: its 72 heads on one sentence, heads found by what they do (and the
//! two positional ones on random token ids), where "looking at nothing" goes (position 0, and
//! the token `[CLS]` wherever it stands), the entropy of every head, which sentences the model
//! calls close, and what removing one head changes.
//!
//! ```text
//! cargo run --release --example ch13_real_model [-- --out-dir DIR] [--help]
//! cargo run --release --example ch13_real_model -- "your sentence" [--out FILE.png] [--view FILE.html]
//!     [--weights-out FILE.npy]
//! cargo run --release --example ch13_real_model -- --compare "a sentence" "another sentence"
//! cargo run --release --example ch13_real_model -- --time ["a sentence"]
//! ... [--model DIR]   (any BERT-layout directory: config.json, model.safetensors, tokenizer.json)
//! ```
//!
//! The first form prints the numbers the chapter quotes (the same text goes to
//! `ch13_output.txt`) and draws `ch13_heads.png`, `ch13_entropy.png`, `ch13_similarity.png`
//! and `ch13_ablation.png`, and writes `ch13_head_view.js`, the data of the chapter's
//! interactive head view.
//!
//! `--time` times the forward pass two ways, taking turns: the plain path (`Bert::forward`,
//! the layers as the chapters built them, where the chapter's numbers come from) and the fast
//! path (`Bert::fast`, `f32` kernels with the weights packed once), and prints how far apart
//! their last hidden states are; `tools/bench_bert.py --compare` runs it beside transformers.
//!
//! With a sentence of your own, every output name is checked before the model is loaded (its
//! extension, its folder, no two the same file), and the outputs are written together or
//! not at all, as the reader tools write theirs (`reader_tools::outputs`). Without `--out`
//! the grid goes to `target/ch13/ch13_your_sentence.png` of this repository, never into its
//! root.

#[allow(dead_code)] // `run_chapter`: this example parses more options, with `common::parse`
mod common;
#[allow(dead_code)] // the tools' module has more than this example uses
#[path = "reader_tools/mod.rs"]
pub mod reader_tools;
use common::stdout;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use attention::inspect::Pattern;
use attention::pooling::cosine_similarity;
use figures::{Heatmap, HeatmapGrid, HeadView, Panel, ValueRange};
use ndarray::{Array2, Array4, Axis};
use reader_tools::outputs::{Named, Outputs, check_distinct, check_outputs};
use reader_tools::{Failure, html_path, png_path};
use pretrained::study::{self, Run};
use pretrained::{SentenceEncoder, Tokens};

/// The sentence whose 72 heads the grid and the head view show.
const SENTENCE: &str = "The cat sat on the mat because it was tired.";

/// The fixed sentences over which heads are scored: varied structure, repeated words.
const PROBE: [&str; 10] = [
    "The cat sat on the mat because it was tired.",
    "She said that the report would be ready by Friday.",
    "A small boat drifted slowly across the quiet lake.",
    "The dog chased the ball, and the ball rolled under the car.",
    "Rain fell all night, so the river rose above the old bridge.",
    "He opened the door, looked around the room, and closed the door again.",
    "Many students find linear algebra harder than calculus.",
    "The library keeps its rarest books in a cold, dry basement.",
    "When the music stopped, everyone turned to look at the stage.",
    "My sister bought a red bike and my brother bought a blue bike.",
];

/// The sentences of the similarity demo and of the ablation: three pairs that say the same
/// thing in other words.
const SIMILAR: [&str; 6] = [
    "A man is playing a guitar.",
    "Someone is strumming an instrument.",
    "The stock market fell sharply today.",
    "Share prices dropped this afternoon.",
    "A cat is sleeping on the sofa.",
    "The kitten naps on the couch.",
];

/// The 16-token sentence that `--time` runs when given none (the chapter's measurement).
const TIME_SENTENCE: &str = "The quick brown fox jumps over the lazy dog near the river bank.";

/// The patterns of the head-finding table, with their names in the report.
const PATTERNS: [(Pattern, &str); 5] = [
    (Pattern::PreviousToken, "previous token"),
    (Pattern::NextToken, "next token"),
    (Pattern::FirstToken, "first token ([CLS])"),
    (Pattern::LastToken, "[SEP] (last)"),
    (Pattern::SameToken, "same word elsewhere"),
];

/// A head's score above which the report counts it as "parking" its weight on a token.
const PARK: f64 = 0.5;

/// How many random sequences the positional heads are tried on, and how many random pieces
/// each holds between its `[CLS]` and `[SEP]` (seeds 1 to `RANDOM_RUNS`).
const RANDOM_RUNS: u64 = 10;
const RANDOM_LEN: usize = 20;

/// The ids of `[CLS]` and `[SEP]` in the model's vocabulary.
const CLS: u32 = 101;
const SEP: u32 = 102;

/// `layer.head`, the name of a head in the report and the figures (both counted from 0).
fn head_name(layer: usize, head: usize) -> String {
    format!("{layer}.{head}")
}

/// The median of some numbers (the upper one of the two middle ones for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// The number at `p` of the way through numbers sorted in increasing order (index `⌊p · n⌋`,
/// as [`median`]).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((p * sorted.len() as f64) as usize).min(sorted.len() - 1)]
}

/// How many heads put more than [`PARK`] of their weight, averaged over the queries, on the
/// keys `keys` together (one key: on that key).
fn parked_on(r: &Run, keys: &[usize]) -> pretrained::Result<usize> {
    let on_each = keys.iter().map(|&k| study::weight_on(r, k)).collect::<pretrained::Result<Vec<_>>>()?;
    let together = on_each.into_iter().reduce(|a, b| a + b);
    Ok(together.map_or(0, |w| w.iter().filter(|&&s| s > PARK).count()))
}

/// The mean over the heads of the weight on `key`, averaged over the queries.
fn mean_on(r: &Run, key: usize) -> pretrained::Result<f64> {
    Ok(study::weight_on(r, key)?.mean().unwrap_or(0.0))
}

/// Token ids chosen by hand run through the model, their positions' rows starting at `first`.
fn run_ids(encoder: &SentenceEncoder, ids: &[u32], first: usize) -> Result<Run, Box<dyn Error>> {
    Ok(study::run_tokens(encoder, encoder.tokenizer().tokens_of(ids)?, first)?)
}

/// The grid sentence changed at its start, run through the model: what the experiment of the
/// chapter prints, the weight on position 0 and on the token `[CLS]` wherever it stands.
fn first_position(encoder: &SentenceEncoder, out: &mut String) -> Result<(), Box<dyn Error>> {
    let ids = encoder.tokenizer().encode(SENTENCE)?.ids;
    let run = |ids: &[u32], first: usize| run_ids(encoder, ids, first);
    let without: Vec<u32> = ids[1..].to_vec();
    let mut sep_first = ids.clone();
    sep_first[0] = SEP;
    let with_at = |ids: &[u32], at: usize, id: u32| {
        let mut v = ids.to_vec();
        v.insert(at, id);
        v
    };
    writeln!(out, "\nWhere the parked weight goes: the grid sentence changed at its start. The weight a head puts")?;
    writeln!(out, "on a key, averaged over the queries: its mean over the 72 heads, and how many heads put over")?;
    writeln!(out, "{PARK} there (one column: over 0.2), on position 0, on [CLS] where it is not at 0, and on both:")?;
    writeln!(out, "{:<40}{:>12}   {:>17}   {:>6}", "", "position 0", "[CLS] elsewhere", "both")?;
    writeln!(out, "{:<40}{:>6} {:>5}   {:>5} {:>5} {:>5}   {:>6}", "", "mean", ">0.5", "mean", ">0.5", ">0.2", ">0.5")?;
    let row = |out: &mut String, what: &str, r: &Run, cls: Option<usize>| -> Result<(), Box<dyn Error>> {
        write!(out, "  {what:<38}{:>6.3} {:>5}", mean_on(r, 0)?, parked_on(r, &[0])?)?;
        if let Some(k) = cls {
            let over = study::weight_on(r, k)?.iter().filter(|&&w| w > 0.2).count();
            write!(out, "   {:>5.3} {:>5} {over:>5}   {:>6}", mean_on(r, k)?, parked_on(r, &[k])?, parked_on(r, &[0, k])?)?;
        }
        Ok(writeln!(out)?)
    };
    row(out, "as the tokenizer gives it", &run(&ids, 0)?, None)?;
    let no_cls = run(&without, 0)?;
    row(out, &format!("without [CLS] (\"{}\" first)", no_cls.tokens.tokens[0]), &no_cls, None)?;
    let on_first = study::weight_on(&no_cls, 0)?;
    let mut ratio = Vec::new();
    for ((l, h), &v) in on_first.indexed_iter() {
        if v > PARK {
            ratio.push(study::head_writes(encoder, &no_cls, l, h)?.first_value_ratio());
        }
    }
    writeln!(out, "    (its value through their rows of W_O: median {:.3} of a word's)", median(ratio))?;
    row(out, "[SEP] in [CLS]'s place", &run(&sep_first, 0)?, None)?;
    let moved = run(&with_at(&without, 6, CLS), 0)?;
    row(out, "[CLS] moved to position 6", &moved, Some(6))?;
    let second = run(&with_at(&ids, 7, CLS), 0)?;
    row(out, "a second [CLS] at position 7", &second, Some(7))?;
    row(out, "positions 50 to 62 instead of 0 to 12", &run(&ids, 50)?, None)?;
    row(out, "without [CLS], positions 50 to 62", &run(&without, 50)?, None)?;

    // [CLS] moved: how far each head goes towards it, and what its value is there.
    let (w0, w6) = (study::weight_on(&moved, 0)?, study::weight_on(&moved, 6)?);
    let mut split = Vec::new();
    let (mut cls_value, mut first_value) = (Vec::new(), Vec::new());
    for ((l, h), &a) in w0.indexed_iter() {
        let b = w6[[l, h]];
        if a + b > PARK {
            let writes = study::head_writes(encoder, &moved, l, h)?;
            cls_value.push(writes.value_ratio(6, &[0])?);
            first_value.push(writes.value_ratio(0, &[6])?);
            if a <= PARK && b <= PARK {
                split.push(((l, h), a, b));
            }
        }
    }
    split.sort_by(|x, y| (y.1 + y.2).total_cmp(&(x.1 + x.2)));
    let most: Vec<String> =
        split.iter().take(3).map(|((l, h), a, b)| format!("{} ({a:.2}, {b:.2})", head_name(*l, *h))).collect();
    let over_03 = w6.iter().filter(|&&w| w > 0.3).count();
    writeln!(out, "[CLS] moved to position 6: {over_03} heads over 0.3 on it. {} heads put over {PARK} on both and on", split.len())?;
    writeln!(out, "  neither alone, the most: {}.", most.join(", "))?;
    writeln!(
        out,
        "  [CLS]'s value through W_O in the {} heads over {PARK} on both: median {:.3} of a word's\n  (position 0's: {:.3})",
        cls_value.len(),
        median(cls_value),
        median(first_value)
    )?;
    let controls: [(&str, u32); 4] = [("[SEP]", SEP), ("\".\"", 1012), ("\"dog\"", 3899), ("[MASK]", 103)];
    let mut others = Vec::new();
    for (name, id) in controls {
        let r = run(&with_at(&without, 6, id), 0)?;
        others.push(format!("{name} {:.3}", mean_on(&r, 6)?));
    }
    writeln!(out, "Other tokens at position 6, without [CLS], mean weight on them:\n  {}", others.join(", "))?;
    Ok(())
}

/// Heads 0.2 and 1.8 on random token ids: what the positional experiment of the chapter prints.
fn positional(encoder: &SentenceEncoder, probe: &[Run], out: &mut String) -> Result<(), Box<dyn Error>> {
    let runs = (1..=RANDOM_RUNS)
        .map(|seed| {
            let mut ids = vec![CLS];
            ids.extend(study::random_ids(RANDOM_LEN, 999..30522, seed));
            ids.push(SEP);
            run_ids(encoder, &ids, 0)
        })
        .collect::<Result<Vec<_>, Box<dyn Error>>>()?;
    let previous = study::head_scores(&runs, Pattern::PreviousToken)?;
    let next = study::head_scores(&runs, Pattern::NextToken)?;
    let first = study::head_scores(&runs, Pattern::FirstToken)?;
    let ((lp, hp), p) = argmax(&previous);
    let ((ln, hn), n) = argmax(&next);
    writeln!(out, "\nOn random token ids: {RANDOM_RUNS} runs of [CLS], {RANDOM_LEN} random pieces, [SEP]")?;
    writeln!(out, "(the first run: [CLS] {} ...)", runs[0].tokens.tokens[1..6].join(" "))?;
    writeln!(out, "  best previous-token head {} {p:.3}, best next-token head {} {n:.3}", head_name(lp, hp), head_name(ln, hn))?;
    writeln!(out, "  heads over {PARK} on the first token: {}", first.iter().filter(|&&v| v > PARK).count())?;
    let share = |runs: &[Run], (l, h): (usize, usize), offset| -> Result<f64, Box<dyn Error>> {
        Ok(100.0 * study::argmax_share(runs, l, h, offset)?)
    };
    writeln!(
        out,
        "  queries whose largest weight is on the token before (0.2) / after (1.8): {:.1} % / {:.1} %\n    (on the probe: {:.1} % / {:.1} %)",
        share(&runs, (0, 2), -1)?,
        share(&runs, (1, 8), 1)?,
        share(probe, (0, 2), -1)?,
        share(probe, (1, 8), 1)?
    )?;
    Ok(())
}

/// The largest entry of a `(layers, heads)` table and where it is.
fn argmax(a: &Array2<f64>) -> ((usize, usize), f64) {
    study::top(a, 1)[0]
}

/// Everything the chapter's run computes, from the committed model.
struct Findings {
    grid_run: Run,
    entropy: Array2<f64>,
    similarity: Array2<f64>,
    ablation: Array2<f64>,
    report: String,
}

fn findings(encoder: &SentenceEncoder) -> Result<Findings, Box<dyn Error>> {
    let config = encoder.bert().config();
    let (layers, heads) = (config.num_hidden_layers, config.num_attention_heads);
    let mut out = String::new();
    writeln!(
        out,
        "all-MiniLM-L6-v2 (the committed f16 copy, computed in f32):\n  {layers} layers × {heads} \
         heads of {}, d_model = {}, d_ff = {}",
        config.d_head(),
        config.hidden_size,
        config.intermediate_size
    )?;

    let grid_run = study::run(encoder, SENTENCE)?;
    writeln!(out, "\n\"{SENTENCE}\" → {} tokens:", grid_run.tokens.ids.len())?;
    writeln!(out, "  {}", grid_run.tokens.tokens.join(" "))?;
    writeln!(out, "  ids {:?}", grid_run.tokens.ids)?;

    let runs = PROBE.iter().map(|t| study::run(encoder, t)).collect::<Result<Vec<_>, _>>()?;
    let queries: usize = runs.iter().map(|r| r.tokens.ids.len()).sum();
    writeln!(out, "\nHeads found by what they do ({} sentences, {queries} tokens); score = mean weight", PROBE.len())?;
    writeln!(out, "on the pattern's key, averaged over the queries where it is defined:")?;
    let scores = PATTERNS.iter().map(|(p, _)| study::head_scores(&runs, *p)).collect::<Result<Vec<_>, _>>()?;
    for ((_, name), table) in PATTERNS.iter().zip(&scores) {
        let best: Vec<String> =
            study::top(table, 3).iter().map(|((l, h), v)| format!("{} {v:.3}", head_name(*l, *h))).collect();
        let over = table.iter().filter(|&&v| v > PARK).count();
        writeln!(out, "  {name:<20} best {:<34} heads over {PARK}: {over}", best.join(", "))?;
    }
    positional(encoder, &runs, &mut out)?;

    let first = &scores[2];
    let (mut cls_ratio, mut parked_writes, mut other_writes) = (Vec::new(), Vec::new(), Vec::new());
    for ((l, h), &on_cls) in first.indexed_iter() {
        for r in &runs {
            let writes = study::head_writes(encoder, r, l, h)?;
            if on_cls > PARK {
                cls_ratio.push(writes.first_value_ratio());
                parked_writes.push(writes.written_ratio());
            } else {
                other_writes.push(writes.written_ratio());
            }
        }
    }
    cls_ratio.sort_by(f64::total_cmp);
    let parked = first.iter().filter(|&&v| v > PARK).count();
    writeln!(out, "\nLooking at nothing: the {parked} heads with over half their weight on the first token, [CLS]")?;
    writeln!(out, "  [CLS]'s value through the head's rows of W_O, over the other tokens' mean ({} cases):", cls_ratio.len())?;
    writeln!(
        out,
        "    median {:.3}, quartiles {:.3} and {:.3}, largest {:.3}",
        quantile(&cls_ratio, 0.5), // the median
        quantile(&cls_ratio, 0.25),
        quantile(&cls_ratio, 0.75),
        cls_ratio.iter().copied().fold(0.0, f64::max)
    )?;
    writeln!(
        out,
        "  what it writes into a token, over a word's value: median {:.3} (the other {} heads: {:.3})",
        median(parked_writes),
        layers * heads - parked,
        median(other_writes)
    )?;
    first_position(encoder, &mut out)?;

    let entropy = study::entropies(&runs)?;
    let ((l_min, h_min), _) = argmax(&entropy.mapv(|e| -e));
    let ((l_max, h_max), e_max) = argmax(&entropy);
    let uniform = runs.iter().map(|r| (r.tokens.ids.len() as f64).ln()).sum::<f64>() / runs.len() as f64;
    writeln!(out, "\nMean entropy of a row (nats; a uniform row's, ln L, averaged over the sentences: {uniform:.3}):")?;
    writeln!(out, "  sharpest head {} {:.4}, flattest head {} {e_max:.3}", head_name(l_min, h_min), entropy[[l_min, h_min]], head_name(l_max, h_max))?;
    for (l, row) in entropy.outer_iter().enumerate() {
        writeln!(out, "  layer {l}: mean {:.3}", row.mean().unwrap_or(0.0))?;
    }

    let e = encoder.embed(&SIMILAR)?;
    let similarity = study::similarities(&e)?;
    writeln!(out, "\nCosine similarity of the sentence embeddings:")?;
    for (row, text) in similarity.outer_iter().zip(SIMILAR) {
        let row: Vec<String> = row.iter().map(|v| format!("{v:6.3}")).collect();
        writeln!(out, "  {}  {}", row.join(" "), text)?;
    }
    let ablation = study::ablation(encoder, &SIMILAR)?;
    let ((l, h), worst) = argmax(&ablation);
    let mean = ablation.mean().unwrap_or(0.0);
    writeln!(out, "\nRemoving one head at a time (72 runs), the largest change of any pair's cosine:")?;
    writeln!(out, "  at most {worst:.4} (head {}), on average {mean:.4}", head_name(l, h))?;
    let small = ablation.iter().filter(|&&v| v < 0.01).count();
    writeln!(out, "  heads whose removal moves no pair by 0.01 or more: {small} of {}", layers * heads)?;

    Ok(Findings { grid_run, entropy, similarity, ablation, report: out })
}

/// Up to this many tokens, the grid's panels are labelled with the tokens (beyond, with their
/// positions, which stay legible).
const LABELLED: usize = 32;

/// A token as the grid labels it: punctuation in quotes (`"."`), which alone is a dot too
/// small to see; every other token as it is.
fn label(token: &str) -> String {
    if token.chars().any(char::is_alphanumeric) { token.to_string() } else { format!("\"{token}\"") }
}

/// The 6 × 12 grid of one run's heads, one panel per head, titled `layer.head`, its rows and
/// columns labelled with the tokens ([`label`]).
fn head_grid(r: &Run, title: &str) -> HeatmapGrid {
    let labels: Vec<String> = r.tokens.tokens.iter().map(|t| label(t)).collect();
    let mut grid = HeatmapGrid::new().title(title);
    for (l, layer) in r.weights.iter().enumerate() {
        for (h, w) in layer.outer_iter().enumerate() {
            let mut panel = Panel::new(&w.mapv(f64::from)).title(head_name(l, h));
            if r.tokens.tokens.len() <= LABELLED {
                panel = panel.labels(&labels);
            }
            grid = grid.panel(panel);
        }
    }
    grid.columns(r.weights[0].shape()[0]).range(ValueRange::Fixed(0.0, 1.0)).colorbar_label("attention weight")
}

/// The head all-MiniLM-L6-v2's views open on: 0.2, the previous-token head, one line per token,
/// where all twelve heads at once would be a tangle of faint lines.
const OPENING: (usize, Option<usize>) = (0, Some(2));

/// The data of the interactive head view: every layer's heads for one run, opening on `start`
/// (`None`: the first layer, all heads).
fn head_view(id: &str, r: &Run, title: &str, start: Option<(usize, Option<usize>)>) -> Result<HeadView, Box<dyn Error>> {
    let mut view = HeadView::new(id, &r.tokens.tokens, &r.tokens.tokens).title(title);
    if let Some((layer, head)) = start {
        view = view.start(layer, head);
    }
    for (l, w) in r.weights.iter().enumerate() {
        view = view.layer(&format!("layer {l}"), w.mapv(f64::from).view())?;
    }
    Ok(view)
}

/// A `(layers, heads)` table as a heatmap: layers down, heads across, both counted from 0.
fn by_layer_and_head(table: &Array2<f64>) -> Heatmap {
    let heads: Vec<String> = (0..table.ncols()).map(|h| h.to_string()).collect();
    let layers: Vec<String> = (0..table.nrows()).map(|l| l.to_string()).collect();
    Heatmap::new(table).row_labels(&layers).col_labels(&heads).row_title("layer").col_title("head")
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let encoder = SentenceEncoder::load(pretrained::minilm_dir())?;
    let f = findings(&encoder)?;

    let grid = head_grid(&f.grid_run, &format!("\"{SENTENCE}\": every head (layer.head), rows = queries, columns = keys"))
        .save(out_dir.join("ch13_heads.png"))?;
    let entropy = by_layer_and_head(&f.entropy)
        .title("Mean entropy of each head's rows (nats)")
        .colorbar_label("entropy (nats)")
        .precision(2)
        .save(out_dir.join("ch13_entropy.png"))?;
    let short: Vec<String> = SIMILAR.iter().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ") + "…").collect();
    let similarity = Heatmap::new(&f.similarity)
        .labels(&short)
        .title("Cosine similarity of sentence embeddings")
        .row_title("sentence")
        .col_title("sentence")
        .colorbar_label("cosine similarity")
        .precision(2)
        .save(out_dir.join("ch13_similarity.png"))?;
    let ablation = by_layer_and_head(&f.ablation)
        .title("Largest change of a pair's similarity with the head removed")
        .colorbar_label("|Δ cosine|")
        .precision(3)
        .save(out_dir.join("ch13_ablation.png"))?;
    let view = out_dir.join("ch13_head_view.js");
    head_view("ch13", &f.grid_run, SENTENCE, Some(OPENING))?.write_data_script(&view)?;

    let text = out_dir.join("ch13_output.txt");
    std::fs::write(&text, &f.report)?;
    Ok(vec![grid, entropy, similarity, ablation, view, text])
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 13, Inside a real model: all-MiniLM-L6-v2 run through the book's own layers.\n\n\
    With no sentence: prints the numbers the chapter quotes (the same text goes to \
    ch13_output.txt) and draws ch13_heads.png, ch13_entropy.png, ch13_similarity.png, \
    ch13_ablation.png and ch13_head_view.js into book/img/ (or --out-dir).\n\
    With a sentence: prints its tokens and draws the grid of its 72 heads (--out, by default \
    target/ch13/ch13_your_sentence.png in the repository), with --view an interactive page of \
    them, and with --weights-out their weights as a .npy file. Every output name is checked \
    before the model is loaded; the outputs are written together or not at all.";

/// The command line (`pub` for `tests/ch13_cli.rs`, which runs [`main_with`] in-process).
#[derive(clap::Parser, Debug)]
pub struct Cli {
    /// A sentence of your own: print its tokens and draw its heads (instead of the chapter's run)
    #[arg(value_name = "SENTENCE")]
    sentence: Option<String>,
    /// Where the grid of your sentence's heads goes [default:
    /// target/ch13/ch13_your_sentence.png in the repository]
    #[arg(long, value_name = "FILE.png", value_parser = png_path, requires = "sentence")]
    out: Option<PathBuf>,
    /// Also write an interactive head view of your sentence: one offline HTML file
    #[arg(long, value_name = "FILE.html", value_parser = html_path, requires = "sentence")]
    view: Option<PathBuf>,
    /// Also save your sentence's attention weights: float32, (layers, heads, L, L)
    #[arg(long, value_name = "FILE.npy", value_parser = npy_path, requires = "sentence")]
    weights_out: Option<PathBuf>,
    /// Print the cosine similarity of two sentences' embeddings
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with_all = ["sentence", "time"])]
    compare: Option<Vec<String>>,
    /// Time the plain and the fast forward pass, taking turns (medians of 50 after 5 warm-up runs), of SENTENCE or a 16-token one
    #[arg(long)]
    time: bool,
    /// Read another BERT-layout model directory (config.json, model.safetensors, tokenizer.json)
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The options every chapter example has.
    #[command(flatten)]
    output: common::Output,
}

/// Tokenizes `text`, saying on stderr when it was cut.
fn tokens_of(encoder: &SentenceEncoder, text: &str) -> Result<Tokens, Box<dyn Error>> {
    let tokens = encoder.tokenizer().encode(text)?;
    if let Some(n) = tokens.truncated_from {
        eprintln!(
            "note: the text has {n} tokens; like sentence-transformers, the model reads only the first {} ([SEP] included)",
            encoder.tokenizer().max_len()
        );
    }
    Ok(tokens)
}

/// `--weights-out`'s value: a path ending in `.npy` (the weights are written as NumPy data).
fn npy_path(text: &str) -> Result<PathBuf, String> {
    reader_tools::path_ending_in(text, &["npy"], "the weights are written as a NumPy array: \
        give a file name ending in .npy")
}

/// Where the grid goes without `--out`: `target/ch13/` of this repository (ignored by git,
/// like every build output), never the repository's root or the book's `book/img/`.
pub fn default_out() -> PathBuf {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    repository.join("target").join("ch13").join("ch13_your_sentence.png")
}

/// The outputs of a run on your own sentence, each with its option: `--out` (or its default),
/// `--view`, `--weights-out`.
fn your_outputs(cli: &Cli) -> Vec<(&'static str, PathBuf)> {
    let mut outputs = vec![("--out", cli.out.clone().unwrap_or_else(default_out))];
    outputs.extend(cli.view.clone().map(|p| ("--view", p)));
    outputs.extend(cli.weights_out.clone().map(|p| ("--weights-out", p)));
    outputs
}

/// Checks every output name before the model is loaded: its folder exists (the default's is
/// created), it is not a directory itself, and no two name the same file. (The extensions were
/// checked when the command line was parsed.)
fn check_your_outputs(cli: &Cli) -> Result<(), Box<dyn Error>> {
    let outputs = your_outputs(cli);
    if cli.out.is_none() {
        let dir = default_out().parent().map(Path::to_path_buf).unwrap_or_default();
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create the folder {}: {e}", dir.display()))?;
    }
    let named: Vec<Named> = outputs.iter().map(|(flag, path)| Named { flag, path }).collect();
    check_outputs(&named)?;
    Ok(check_distinct(&[], &named)?)
}

/// A tool's failure as this example's error (its message without the `error: ` prefix, which
/// `main` adds).
fn failed(failure: Failure) -> Box<dyn Error> {
    match failure {
        Failure::Usage(e) => e.to_string().into(),
        Failure::Data(message) | Failure::Interrupted { message, .. } => message.into(),
    }
}

/// A run's attention weights as one array, `(layers, heads, L, L)`, the layout of
/// `--weights-out`.
pub fn stacked_weights(r: &Run) -> Result<Array4<f32>, Box<dyn Error>> {
    let layers: Vec<_> = r.weights.iter().map(|w| w.view()).collect();
    Ok(ndarray::stack(Axis(0), &layers)?)
}

/// A path as the summary shows it: relative to the working directory when inside it.
fn shown(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&cwd).unwrap_or(path).display().to_string()
}

fn yours(encoder: &SentenceEncoder, cli: &Cli, text: &str) -> Result<(), Box<dyn Error>> {
    tokens_of(encoder, text)?; // says so when the text is cut
    let r = study::run(encoder, text)?;
    stdout::line(format_args!("{} tokens: {}", r.tokens.ids.len(), r.tokens.tokens.join(" ")));
    stdout::line(format_args!("ids: {:?}", r.tokens.ids));
    let title = format!("\"{}\": every head (layer.head)", shorten(text, 60));
    let png = head_grid(&r, &title).to_png()?;
    let mut outputs = Outputs::new();
    let paths = your_outputs(cli);
    for (flag, path) in &paths {
        match *flag {
            "--out" => outputs.write_bytes(path, &png),
            "--view" => {
                // Head 0.2 is the committed model's previous-token head; another model
                // opens on all heads.
                let start = if cli.model.is_none() { Some(OPENING) } else { None };
                let page = head_view("yours", &r, text, start)?.to_html()?;
                outputs.write_bytes(path, page.as_bytes())
            }
            _ => outputs.write_npy(path, &stacked_weights(&r)?),
        }
        .map_err(failed)?;
    }
    outputs.commit().map_err(failed)?;
    for (_, path) in &paths {
        stdout::line(format_args!("wrote {}", shown(path)));
    }
    Ok(())
}

fn shorten(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// `--time`: the plain and the fast forward pass of `text`, taking turns (the median and
/// the minimum of 50 runs each after 5 warm-up runs), and how far apart their results are.
/// Returns the report's lines; `tools/bench_bert.py` reads its `fast path:  median X ms` and
/// `plain path: median Y ms`.
pub fn time_report(encoder: &SentenceEncoder, text: &str) -> Result<String, Box<dyn Error>> {
    let tokens = tokens_of(encoder, text)?;
    let (bert, ids) = (encoder.bert(), tokens.ids.as_slice());
    let fast = bert.fast()?; // every layer's weights packed once, before the clock starts
    let plain = bert.forward(&[ids])?.hidden_states.pop().expect("the last layer's");
    let differs = (&fast.forward(ids)? - &plain.index_axis(Axis(0), 0))
        .iter()
        .fold(0f32, |m, d| m.max(d.abs()));
    for _ in 0..5 {
        fast.forward(ids)?;
        bert.forward(&[ids])?;
    }
    // The two paths take turns, so that a change in the machine's load affects both alike.
    let (mut fast_ms, mut plain_ms) = (Vec::new(), Vec::new());
    let ms = |start: Instant| start.elapsed().as_secs_f64() * 1e3;
    for _ in 0..50 {
        let start = Instant::now();
        fast.forward(ids)?;
        fast_ms.push(ms(start));
        let start = Instant::now();
        bert.forward(&[ids])?;
        plain_ms.push(ms(start));
    }
    let threads = match rayon::current_num_threads() {
        1 => "1 thread".to_string(),
        n => format!("{n} threads"),
    };
    let mut report =
        format!("forward pass of {} tokens, {threads}, 50 runs of each after 5 warm-up runs:\n", ids.len());
    for (name, times) in [("fast path: ", &mut fast_ms), ("plain path:", &mut plain_ms)] {
        times.sort_by(f64::total_cmp);
        let median = (times[24] + times[25]) / 2.0; // of 50
        writeln!(report, "  {name} median {median:.3} ms, min {:.3} ms", times[0])?;
    }
    write!(report, "  the two paths' last hidden states differ by at most {differs:.1e}")?;
    Ok(report)
}

fn time(encoder: &SentenceEncoder, text: &str) -> Result<(), Box<dyn Error>> {
    let report = time_report(encoder, text)?;
    for line in report.lines() {
        stdout::line(format_args!("{line}"));
    }
    Ok(())
}

/// Everything `main` does but print the error: the chapter's run, a sentence of your own,
/// `--compare` or `--time`.
pub fn main_with(cli: Cli) -> Result<(), Box<dyn Error>> {
    let dir = cli.model.clone().unwrap_or_else(pretrained::minilm_dir);
    if cli.sentence.is_some() && cli.compare.is_none() && !cli.time {
        check_your_outputs(&cli)?; // before the model is loaded
    }
    if cli.model.is_none() && cli.sentence.is_none() && cli.compare.is_none() && !cli.time {
        return common::render_into(&cli.output.dir()?, render_figures);
    }
    let encoder = SentenceEncoder::load(&dir)?;
    if let Some(pair) = &cli.compare {
        for text in pair {
            tokens_of(&encoder, text)?;
        }
        let e = encoder.embed(&[&pair[0], &pair[1]])?;
        stdout::line(format_args!("cosine similarity: {:.4}", cosine_similarity(&e.row(0), &e.row(1))?));
        return Ok(());
    }
    if cli.time {
        return time(&encoder, cli.sentence.as_deref().unwrap_or(TIME_SENTENCE));
    }
    match &cli.sentence {
        Some(text) => yours(&encoder, &cli, text),
        None => {
            let r = study::run(&encoder, SENTENCE)?;
            stdout::line(format_args!("{}: {} tokens: {}", dir.display(), r.tokens.ids.len(), r.tokens.tokens.join(" ")));
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli: Cli = common::parse(env!("CARGO_CRATE_NAME"), ABOUT);
    match main_with(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
