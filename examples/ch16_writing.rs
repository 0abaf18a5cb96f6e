//! Chapter 16, *Writing, token by token*: what the committed model writes with each way of
//! choosing, how its writer uses the KV cache, what its heads do, how fast it writes beside
//! PyTorch, and which positions read past the training length.
//!
//! ```text
//! cargo run --release --example ch16_writing [-- --out-dir DIR]
//! ```
//!
//! Prints what the chapter quotes (the same text goes to `ch16_output.txt`, the samples to
//! `ch16_samples.txt`) and draws `ch16_writer.svg` (the writer's window and cache over time),
//! `ch16_head_grid.png` and `ch16_head_view.js` (every head's weights on a passage the model
//! wrote: the static picture, and the data of the interactive head view),
//! `ch16_heads.png` (every head's score for each pattern beside an even spread's),
//! `ch16_speed.png` (characters per second against the prompt's length, with and without the
//! cache, beside PyTorch) and `ch16_positions.png` (validation loss at and past the training
//! length for each kind of position). The samples and the heads are computed here on the
//! exact path, the same on every machine; the speed and the positions come from committed
//! measurements: `examples/data/ch16_speed.csv` (from `tools/bench_generate.py --save`) and
//! `examples/data/ch16_positions.csv` (from the `positions` example's `evaluate`).

mod common;
use common::colors;
#[allow(dead_code)] // only the committed measurements' reader
#[path = "common/timing.rs"]
mod timing;

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::gpt::config::GptConfig;
use attention::gpt::generate::Writer;
use attention::gpt::heads::Pattern;
use attention::gpt::kernels::Exact;
use attention::gpt::sample::Sampler;
use attention::gpt::weights::Gpt;
use figures::diagram::{Color, Diagram, Grid, Style, TextStyle};
use figures::{Axis, BarChart, HeadView, HeatmapGrid, LineChart, Panel, ValueRange};
use pretrained::writing::{self, HeadStudy};
use rand::{SeedableRng, rngs::StdRng};

const ABOUT: &str = "Chapter 16, Writing, token by token: prints what the committed model \
    writes with each sampler, the cache's size, its heads' scores, the generation speed beside \
    PyTorch's and the positions experiment, and draws the writer, the heads, the speed and the \
    positions.";

/// `tools/bench_generate.py --save examples/data/ch16_speed.csv`.
const SPEED_CSV: &str = include_str!("data/ch16_speed.csv");
/// `cargo run --release --example positions -- evaluate`.
const POSITIONS_CSV: &str = include_str!("data/ch16_positions.csv");

/// The prompt of every sample.
const PROMPT: &str = "ROMEO:\n";
/// Characters written per sample.
const SAMPLE_LENGTH: usize = 160;
/// The seed of every sample.
const SEED: u64 = 16;

/// The samplers the chapter shows, with their names.
fn samplers() -> Vec<(&'static str, Sampler)> {
    let t = |temperature| Sampler { temperature, ..Sampler::default() };
    vec![
        ("greedy (temperature 0)", Sampler::greedy()),
        ("temperature 0.8", t(0.8)),
        ("temperature 1 (chapter 15's)", Sampler::default()),
        ("temperature 1.5", t(1.5)),
        ("top-k 10", Sampler { top_k: Some(10), ..Sampler::default() }),
        ("top-p 0.9", Sampler { top_p: Some(0.9), ..Sampler::default() }),
        ("min-p 0.1", Sampler { min_p: Some(0.1), ..Sampler::default() }),
    ]
}

fn main() -> Result<(), Box<dyn Error>> {
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)
}

/// Draws the chapter's figures and writes its report and samples into `out_dir`.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let (gpt, vocab) = pretrained::gpt2::load(&pretrained::shakespeare_dir())?;
    let corpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/shakespeare/input.txt"),
    )?;
    let study = writing::head_study(&gpt, &vocab, &corpus)?;
    let speed = Speed::parse(SPEED_CSV)?;
    let positions = Positions::parse(POSITIONS_CSV)?;

    let writer = writer_diagram()?.save(out_dir.join("ch16_writer.svg"))?;
    let passage = view_passage(&gpt, &vocab)?;
    let weights = writing::attention_on(&gpt, &vocab, &passage)?;
    let grid = head_grid(&weights, &passage).save(out_dir.join("ch16_head_grid.png"))?;
    let view = out_dir.join("ch16_head_view.js");
    head_view(&weights, &passage)?.write_data_script(&view)?;
    let heads = heads_chart(&study).save(out_dir.join("ch16_heads.png"))?;
    let speed_png = speed.chart().save(out_dir.join("ch16_speed.png"))?;
    let positions_png = positions.chart().save(out_dir.join("ch16_positions.png"))?;
    let samples = out_dir.join("ch16_samples.txt");
    std::fs::write(&samples, samples_report(&gpt, &vocab)?)?;
    let text = out_dir.join("ch16_output.txt");
    let mut report = String::new();
    cache_report(&mut report, &gpt, &vocab)?;
    sampling_report(&mut report)?;
    heads_report(&mut report, &study);
    speed.report(&mut report);
    positions.report(&mut report);
    std::fs::write(&text, report)?;
    Ok(vec![writer, grid, view, heads, speed_png, positions_png, samples, text])
}

// ---------------------------------------------------------------------------------------
// What it writes, and the cache.

fn samples_report(
    gpt: &Gpt<f32>,
    vocab: &attention::gpt::data::CharVocab,
) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    for (name, sampler) in samplers() {
        let w = writing::write_with(gpt, vocab, PROMPT, SAMPLE_LENGTH, &sampler, SEED, true)?;
        writeln!(out, "--- {name}, seed {SEED} ---")?;
        writeln!(out, "{}{}", PROMPT, w.text)?;
    }
    Ok(out)
}

fn cache_report(
    out: &mut String,
    gpt: &Gpt<f32>,
    vocab: &attention::gpt::data::CharVocab,
) -> Result<(), Box<dyn Error>> {
    let c = &gpt.config;
    let per_token = gpt.new_cache()?.bytes() / c.block_size;
    writeln!(
        out,
        "The cache of chapter 15's model ({} blocks of {} heads of {}, {} positions)",
        c.n_layer,
        c.n_head,
        c.d_head(),
        c.block_size
    )?;
    writeln!(out, "  keys and values of one token, f32    = {per_token} bytes")?;
    writeln!(
        out,
        "  a full window of {}                   = {} bytes ({} KiB)",
        c.block_size,
        per_token * c.block_size,
        per_token * c.block_size / 1024
    )?;
    let greedy = Sampler::greedy();
    let cached = writing::write_with(gpt, vocab, "R", 200, &greedy, 0, true)?;
    let plain = writing::write_with(gpt, vocab, "R", 200, &greedy, 0, false)?;
    writeln!(out, "  200 characters after a prompt of 1, greedy: {} prefills", cached.prefills)?;
    let same = if cached.text == plain.text { "the same" } else { "other" };
    writeln!(out, "  without the cache (a full pass per character): {same} text")?;
    writeln!(out)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The intuition's example: three characters with probabilities 0.5, 0.3 and 0.2.

fn sampling_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    let logits = [0.5f64.ln(), 0.3f64.ln(), 0.2f64.ln()];
    writeln!(out, "Choosing among e, a, o with probabilities 0.5, 0.3, 0.2 (logits ln p)")?;
    writeln!(out, "  setting                    e       a       o")?;
    let t = |temperature| Sampler { temperature, ..Sampler::default() };
    let rows = [
        ("temperature 1", Sampler::default()),
        ("temperature 0.5", t(0.5)),
        ("temperature 2", t(2.0)),
        ("temperature 0 (greedy)", Sampler::greedy()),
        ("top-k 2", Sampler { top_k: Some(2), ..Sampler::default() }),
        ("top-p 0.6", Sampler { top_p: Some(0.6), ..Sampler::default() }),
        ("top-p 0.5", Sampler { top_p: Some(0.5), ..Sampler::default() }),
        ("min-p 0.5", Sampler { min_p: Some(0.5), ..Sampler::default() }),
        ("min-p 0.7", Sampler { min_p: Some(0.7), ..Sampler::default() }),
        ("temperature 2, min-p 0.7", Sampler { min_p: Some(0.7), ..t(2.0) }),
    ];
    for (name, sampler) in rows {
        let p = sampler.distribution(&logits)?;
        writeln!(out, "  {name:<24} {:>7.4} {:>7.4} {:>7.4}", p[0], p[1], p[2])?;
    }
    writeln!(out)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The heads.

/// Characters of the passage the head view shows.
const VIEW_LENGTH: usize = 40;

/// The passage the head view shows: the prompt and the start of what the model wrote after
/// it at temperature 0.8 (the samples' seed), on the exact path.
fn view_passage(
    gpt: &Gpt<f32>,
    vocab: &attention::gpt::data::CharVocab,
) -> Result<String, Box<dyn Error>> {
    let sampler = Sampler { temperature: 0.8, ..Sampler::default() };
    let n = VIEW_LENGTH - PROMPT.chars().count();
    let w = writing::write_with(gpt, vocab, PROMPT, n, &sampler, SEED, true)?;
    Ok(format!("{PROMPT}{}", w.text))
}

/// A character as the head view labels it: a space as `␣`, a newline as `↵`.
fn shown(c: char) -> String {
    match c {
        ' ' => "␣".to_string(),
        '\n' => "↵".to_string(),
        c => c.to_string(),
    }
}

/// The 4 × 4 grid of every head's weights on `passage`, one panel per head (`block.head`).
fn head_grid(weights: &[ndarray::Array3<f32>], passage: &str) -> HeatmapGrid {
    let title = format!(
        "Every head (block.head) on {:?}: rows = queries, columns = keys",
        passage.replace('\n', " ")
    );
    let mut grid = HeatmapGrid::new().title(title);
    for (b, block) in weights.iter().enumerate() {
        for (h, w) in block.outer_iter().enumerate() {
            grid = grid.panel(Panel::new(&w.mapv(f64::from)).title(format!("{b}.{h}")));
        }
    }
    grid.columns(weights[0].shape()[0])
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
}

/// The data of the interactive head view, opening on block 1's head 0, the strongest
/// previous-character head.
fn head_view(weights: &[ndarray::Array3<f32>], passage: &str) -> Result<HeadView, Box<dyn Error>> {
    let tokens: Vec<String> = passage.chars().map(shown).collect();
    let mut view = HeadView::new("ch16", &tokens, &tokens)
        .title(&passage.replace('\n', " ↵ "))
        .axis_names("block", "head")
        .start(1, Some(0));
    for (b, w) in weights.iter().enumerate() {
        view = view.layer(&format!("block {b}"), w.mapv(f64::from).view())?;
    }
    Ok(view)
}

fn pattern_name(p: Pattern) -> &'static str {
    match p {
        Pattern::Previous => "previous character",
        Pattern::WordStart => "start of the word",
        Pattern::Speaker => "speaker's name",
        Pattern::Sink => "first position",
        Pattern::PrefixMatch => "prefix match",
    }
}

fn heads_report(out: &mut String, study: &HeadStudy) {
    let _ = writeln!(out, "The heads on 100 held-out windows of 64 characters (exact path)");
    let _ = writeln!(out, "  pattern              best head   score   even spread");
    for p in &study.patterns {
        let ((block, head), score) = p.best();
        let name = if p.pattern == Pattern::PrefixMatch {
            "prefix match (copies)"
        } else {
            pattern_name(p.pattern)
        };
        let _ = writeln!(out, "  {name:<21} {block}.{head}        {score:.3}   {:.3}", p.even);
    }
    for p in &study.patterns {
        let _ = writeln!(out, "  every head's score, {}, block by block:", pattern_name(p.pattern));
        for row in p.scores.rows() {
            let cells: Vec<String> = row.iter().map(|v| format!("{v:.3}")).collect();
            let _ = writeln!(out, "    {}", cells.join("  "));
        }
    }
    let (first, second) = study.halves;
    let (n, half) = writing::REPEATED;
    let _ = writeln!(out, "  {n} random strings of {half} letters written twice, nats a letter:");
    let _ = writeln!(out, "    {first:.3} on the first half, {second:.3} on the copy");
    let rise = &study.rise;
    let (low, high) = rise.indexed_iter().fold(
        (((0, 0), f64::INFINITY), ((0, 0), f64::NEG_INFINITY)),
        |(lo, hi), (at, &v)| {
            (if v < lo.1 { (at, v) } else { lo }, if v > hi.1 { (at, v) } else { hi })
        },
    );
    let _ = writeln!(
        out,
        "  removing one head raises the loss of {:.4} by {:.3} ({}.{}) to {:.3} ({}.{})",
        study.loss, low.1, low.0.0, low.0.1, high.1, high.0.0, high.0.1
    );
    let _ = writeln!(out, "  the loss each head's removal costs, block by block:");
    for row in rise.rows() {
        let _ = writeln!(
            out,
            "    {}",
            row.iter().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join("  ")
        );
    }
    let _ = writeln!(out);
}

fn heads_chart(study: &HeadStudy) -> BarChart {
    let mut labels: Vec<String> = Vec::new();
    let c = study.rise.dim();
    for b in 0..c.0 {
        for h in 0..c.1 {
            labels.push(format!("{b}.{h}"));
        }
    }
    labels.push("even".into());
    let mut chart = BarChart::new()
        .title("Each head's weight on what a pattern names (block.head), and an even spread's")
        .labels(&labels)
        .x_label("head (block.head), and a head that spreads its weight evenly")
        .y_label("weight")
        .y_range(0.0, 0.35)
        .size(900, 150);
    for p in &study.patterns {
        let values: Vec<f64> = p.scores.iter().copied().chain([p.even]).collect();
        let name = if p.pattern == Pattern::PrefixMatch {
            "prefix match, on random letters written twice"
        } else {
            pattern_name(p.pattern)
        };
        chart = chart.panel(name, values);
    }
    chart
}

// ---------------------------------------------------------------------------------------
// The writer's window over time, drawn from a small model's writer.

/// The small model the diagram follows: 16 positions, so that each row fits.
const DIAGRAM_CONTEXT: usize = 16;
const DIAGRAM_PROMPT: usize = 5;

/// One row of the diagram: the text's length, where the window starts, and whether the
/// whole window went through the model (a prefill) or only the last token (a step).
struct Row {
    label: String,
    text: usize,
    start: usize,
    prefill: bool,
}

fn writer_rows() -> Result<Vec<Row>, Box<dyn Error>> {
    let config = GptConfig {
        n_layer: 1,
        n_embd: 8,
        n_head: 2,
        block_size: DIAGRAM_CONTEXT,
        ..GptConfig::shakespeare(5)
    };
    let gpt = Gpt::<f64>::zeros(config);
    let prompt: Vec<usize> = (0..DIAGRAM_PROMPT).map(|i| i % 5).collect();
    let mut w = Writer::new(&gpt, &Exact, &prompt, true)?;
    let mut rng = StdRng::seed_from_u64(0);
    let mut all = vec![Row {
        label: format!("prefill of the prompt ({DIAGRAM_PROMPT} rows)"),
        text: DIAGRAM_PROMPT,
        start: 0,
        prefill: true,
    }];
    for _ in 0..DIAGRAM_CONTEXT - DIAGRAM_PROMPT + 2 {
        let before = w.window().len();
        w.next(&Sampler::greedy(), &mut rng)?;
        let (text, window) = (w.text().len(), w.window().len());
        let prefill = window <= before;
        let label = if prefill {
            format!("full: the last {window} again (a prefill)")
        } else {
            "step: the new character, 1 row".to_string()
        };
        all.push(Row { label, text, start: text - window, prefill });
    }
    // The first two steps, the step that fills the window, the restart and one step after.
    let full = all.iter().position(|r| r.prefill && r.text > DIAGRAM_PROMPT).ok_or("no restart")?;
    let mut rows: Vec<Row> = Vec::new();
    for (i, r) in all.into_iter().enumerate() {
        if i <= 2 || i + 1 >= full {
            rows.push(r);
        }
    }
    Ok(rows)
}

fn writer_diagram() -> Result<Diagram, Box<dyn Error>> {
    const CELL: f64 = 27.0;
    const ROW: f64 = 52.0;
    const LEFT: f64 = 280.0;
    let rows = writer_rows()?;
    let widest = rows.iter().map(|r| r.text).max().unwrap_or(0);
    let width = LEFT + widest as f64 * CELL + 20.0;
    let height = 90.0 + (rows.len() as f64 + 0.6) * ROW + 44.0;
    let mut d = Diagram::new(
        width as u32,
        height as u32,
        "The writer: one prefill, steps of one row, and a restart from the last half when the window is full",
    );
    d.describe(format!(
        "A model of {DIAGRAM_CONTEXT} positions writes after a prompt of {DIAGRAM_PROMPT} \
         characters. Each row is one call of the model; each square is one character of the \
         text so far, numbered by its position in the window. First the prompt's prefill: all \
         {DIAGRAM_PROMPT} characters go through the model, and their keys and values fill the \
         cache. Then each step runs only the newest character, at the next position, its \
         query attending over the cached keys. When the text would outgrow the {DIAGRAM_CONTEXT} \
         positions, the writer keeps the last {} characters, runs them through the model at \
         positions 0 onwards into a fresh cache (a prefill), and goes on stepping; the \
         characters before them are out of the window.",
        DIAGRAM_CONTEXT / 2
    ));
    let label = TextStyle::new(14.0);
    let small = TextStyle::new(13.0).color(Color::MUTED);
    d.text(
        20.0,
        28.0,
        "Writing through the cache: which characters each call runs",
        &TextStyle::new(16.0).bold(),
    );
    let legend_y = 46.0;
    let computed = colors::Q.tint(colors::FILL);
    let cached = Color::GREY.tint(0.7);
    d.rect(20.0, legend_y, 16.0, 16.0, &Style::fill(computed).and_stroke(colors::Q, 1.5));
    d.text(42.0, legend_y + 8.0, "through the model in this call", &label.middle());
    d.rect(290.0, legend_y, 16.0, 16.0, &Style::fill(cached).and_stroke(Color::GREY, 1.0));
    d.text(312.0, legend_y + 8.0, "read from the cache", &label.middle());
    d.rect(
        480.0,
        legend_y,
        16.0,
        16.0,
        &Style::fill(Color::WHITE).and_stroke(Color::GREY.tint(0.5), 1.0),
    );
    d.text(502.0, legend_y + 8.0, "out of the window", &label.middle());
    let mut y = 90.0;
    for (i, r) in rows.iter().enumerate() {
        if i == 3 {
            d.text(LEFT - 12.0, y + 12.0, "⋮", &label.bold());
            y += ROW * 0.6;
        }
        d.text(20.0, y + CELL / 2.0, &r.label, &label.middle());
        let grid = Grid::new((LEFT, y), (1, r.text), (CELL, CELL))
            .fill_with(|_, c| {
                Some(if c < r.start {
                    Color::WHITE
                } else if r.prefill || c + 1 == r.text {
                    computed
                } else {
                    cached
                })
            })
            .lines(Color::GREY.tint(0.4))
            .text_with(|_, c| (c >= r.start).then(|| format!("{}", c - r.start)))
            .text_style(TextStyle::new(13.0));
        d.grid(&grid);
        let window = Style::stroke(Color::INK, 2.0);
        d.rect(LEFT + r.start as f64 * CELL, y, (r.text - r.start) as f64 * CELL, CELL, &window);
        d.text(
            LEFT + r.text as f64 * CELL + 6.0,
            y + CELL / 2.0,
            &format!("{}", r.text - r.start),
            &small.middle(),
        );
        y += ROW;
    }
    d.text(
        20.0,
        y + 4.0,
        "the text so far, left to right; in the outlined window, each character's position;",
        &small,
    );
    d.text(20.0, y + 22.0, "at the right of each row, the window's length", &small);
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// Speed, from the committed measurement.

struct Speed {
    header: Vec<String>,
    /// (prompt, ours with cache, PyTorch with cache, ours without, PyTorch without)
    rows: Vec<(usize, [f64; 4])>,
}

impl Speed {
    fn parse(csv: &str) -> Result<Speed, Box<dyn Error>> {
        let (header, fields) = timing::committed_csv(csv);
        let mut rows = Vec::new();
        for f in fields {
            if f.len() != 5 {
                return Err(format!(
                    "examples/data/ch16_speed.csv: a row of {} fields, not 5",
                    f.len()
                )
                .into());
            }
            let v: Vec<f64> = f[1..].iter().map(|x| x.parse()).collect::<Result<_, _>>()?;
            rows.push((f[0].parse()?, [v[0], v[1], v[2], v[3]]));
        }
        Ok(Speed { header, rows })
    }

    fn report(&self, out: &mut String) {
        let _ = writeln!(out, "Characters written per second (examples/data/ch16_speed.csv)");
        for h in self.header.iter().skip(1) {
            wrapped(out, h);
        }
        let _ = writeln!(
            out,
            "  prompt   ours, cache   PyTorch, cache   ours, no cache   PyTorch, no cache"
        );
        for (prompt, v) in &self.rows {
            let _ = writeln!(
                out,
                "  {prompt:>6}   {:>11.1}   {:>14.1}   {:>14.1}   {:>17.1}",
                v[0], v[1], v[2], v[3]
            );
        }
        let ratios: Vec<f64> = self.rows.iter().map(|(_, v)| v[0] / v[1]).collect();
        let (lo, hi) = ratios.iter().fold((f64::INFINITY, 0f64), |(a, b), &r| (a.min(r), b.max(r)));
        let _ = writeln!(out, "  with the cache, ours / PyTorch: {lo:.1}× to {hi:.1}×");
        let (first, last) = (&self.rows[0], &self.rows[self.rows.len() - 1]);
        let _ = writeln!(
            out,
            "  from prompt {} to {}: with the cache {:.1}× slower, without it {:.1}×",
            first.0,
            last.0,
            first.1[0] / last.1[0],
            first.1[2] / last.1[2]
        );
        let _ = writeln!(out);
    }

    fn chart(&self) -> LineChart {
        let series =
            |i: usize| self.rows.iter().map(move |(p, v)| (*p as f64, v[i])).collect::<Vec<_>>();
        LineChart::new()
            .size(840, 500)
            .title("Writing 64 characters after a prompt: characters per second")
            .x_label("prompt length (characters)")
            .y_label("characters per second")
            .x_axis(Axis::Log2)
            .y_axis(Axis::Log10)
            .series("the book's Rust, with the cache (one core)", series(0))
            .series("PyTorch generate, with the cache (two threads)", series(1))
            .series("the book's Rust, no cache", series(2))
            .series("PyTorch generate, no cache", series(3))
    }
}

// ---------------------------------------------------------------------------------------
// Positions, from the committed experiment.

/// The kinds in the report's order, with their names: (positions, scaling, name).
const KINDS: [(&str, &str, &str); 8] = [
    ("none", "none", "none"),
    ("learned", "none", "learned"),
    ("sinusoidal", "none", "sinusoidal"),
    ("rope", "none", "RoPE"),
    ("rope", "linear", "RoPE + interpolation"),
    ("rope", "ntk", "RoPE + NTK-aware"),
    ("rope", "llama3", "RoPE + Llama 3"),
    ("alibi", "none", "ALiBi"),
];

struct Positions {
    header: Vec<String>,
    /// (kind index, context) → the loss of each seed.
    loss: BTreeMap<(usize, usize), Vec<f64>>,
    /// kind index → the loss of each seed on positions 0–63, 64–127 and 128–255 of windows
    /// of 256 (for learned positions, 0–63 of windows of 64).
    buckets: BTreeMap<usize, [Vec<f64>; 3]>,
}

/// The position ranges of [`Positions::buckets`], and the middle of each (the chart's x).
const BUCKETS: [(&str, f64); 3] = [("0-63", 31.5), ("64-127", 95.5), ("128-255", 191.5)];

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn spread(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)))
}

impl Positions {
    fn parse(csv: &str) -> Result<Positions, Box<dyn Error>> {
        let (header, fields) = timing::committed_csv(csv);
        let (mut loss, mut buckets) = (BTreeMap::new(), BTreeMap::<usize, [Vec<f64>; 3]>::new());
        for f in fields {
            let what = || format!("examples/data/ch16_positions.csv: row {f:?}");
            let kind = KINDS
                .iter()
                .position(|k| k.0 == f[0] && k.1 == f[1])
                .ok_or_else(|| format!("{}: unknown kind", what()))?;
            let context: usize = f[3].parse().map_err(|_| what())?;
            let value: f64 = f[4].parse().map_err(|_| what())?;
            loss.entry((kind, context)).or_insert_with(Vec::new).push(value);
            let learned = KINDS[kind].0 == "learned";
            if context == 256 || learned {
                let b = buckets.entry(kind).or_default();
                for (i, field) in f[5..8].iter().enumerate().filter(|(_, x)| !x.is_empty()) {
                    b[i].push(field.parse().map_err(|_| what())?);
                }
            }
        }
        Ok(Positions { header, loss, buckets })
    }

    fn report(&self, out: &mut String) {
        let _ = writeln!(out, "Validation loss by positions (examples/data/ch16_positions.csv)");
        for h in &self.header {
            wrapped(out, h);
        }
        let table = |out: &mut String, f: &dyn Fn(&[f64]) -> String| {
            let _ = writeln!(
                out,
                "  positions              seeds  at 64        at 128       at 256       128-255"
            );
            for (k, (_, _, name)) in KINDS.iter().enumerate() {
                let mut line = format!("  {name:<22}");
                let seeds =
                    self.loss.get(&(k, 64)).or(self.loss.get(&(k, 128))).map_or(0, Vec::len);
                let _ = write!(line, " {seeds:>5}");
                let cells = [64, 128, 256].map(|c| self.loss.get(&(k, c))).into_iter();
                let tail = self.buckets.get(&k).filter(|b| !b[2].is_empty()).map(|b| &b[2]);
                for v in cells.chain([tail]) {
                    let _ = write!(line, "  {:<11}", v.map_or("—".to_string(), |v| f(v)));
                }
                let _ = writeln!(out, "{}", line.trim_end());
            }
        };
        let _ = writeln!(out, "  the mean of the seeds:");
        table(out, &|v| format!("{:.3}", mean(v)));
        let _ = writeln!(out, "  the lowest and the highest seed:");
        table(out, &|v| {
            let (lo, hi) = spread(v);
            format!("{lo:.3}-{hi:.3}")
        });
        let _ = writeln!(
            out,
            "  by position in windows of 256, the mean of the seeds (learned: of 64):"
        );
        let _ = writeln!(
            out,
            "  positions              {}",
            BUCKETS.map(|(name, _)| format!("{name:<11}")).join("  ").trim_end()
        );
        for (k, (_, _, name)) in KINDS.iter().enumerate() {
            let Some(b) = self.buckets.get(&k) else { continue };
            let cells = b
                .each_ref()
                .map(|v| if v.is_empty() { "—".to_string() } else { format!("{:.3}", mean(v)) });
            let line = format!("  {name:<22} {}", cells.map(|c| format!("{c:<11}")).join("  "));
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }

    fn chart(&self) -> LineChart {
        let mut chart = LineChart::new()
            .size(840, 520)
            .title("Loss by position in windows of 256, trained on 64 (mean of 3 seeds)")
            .x_label("position in the window: the mean over 0-63, 64-127 and 128-255")
            .y_label("validation loss (nats per character)");
        for (k, (_, _, name)) in KINDS.iter().enumerate() {
            let Some(b) = self.buckets.get(&k) else { continue };
            let points: Vec<(f64, f64)> = (b.iter().zip(BUCKETS))
                .filter(|(v, _)| !v.is_empty())
                .map(|(v, (_, x))| (x, mean(v)))
                .collect();
            let name = if KINDS[k].0 == "learned" {
                "learned (windows of 64 only)".to_string()
            } else {
                name.to_string()
            };
            chart = chart.series(name, points);
        }
        chart
    }
}

/// A committed file's header line, as `  # ` lines that fit the book's code column.
fn wrapped(out: &mut String, text: &str) {
    let mut line = String::from("  #");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > common::MAX_COLUMNS - 4 && line.len() > 3 {
            let _ = writeln!(out, "{line}");
            line = String::from("  #  ");
        } else {
            line.push(' ');
        }
        line.push_str(word);
    }
    let _ = writeln!(out, "{line}");
}
