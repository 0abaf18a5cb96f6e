//! Chapter 15, *A model that writes*: the model's shape and cost, its training run beside
//! PyTorch's, what it writes along the way, and where a training step's time goes.
//!
//! ```text
//! cargo run --release --example ch15_writing [-- --out-dir DIR]
//! cargo run --release --example ch15_writing -- --time [--steps N] [--save FILE]
//! cargo run --release --example ch15_writing -- --help
//! ```
//!
//! The first form prints what the chapter quotes (the same text goes to `ch15_output.txt`)
//! (its parts also in `ch15_profile.txt` and `ch15_samples.txt`) and draws `ch15_gpt.svg` (the model, block by block) and `ch15_loss.png` (the committed
//! run's loss curve beside the PyTorch reference's). Everything in it comes from committed
//! data: the model in `crates/pretrained/model/shakespeare-char/` with its log and its
//! snapshots, the PyTorch reference's record `examples/data/ch15_pytorch.json` (written by
//! `tools/gpt_reference.py`), the Rust runs' times `examples/data/ch15_rust.csv` (from the
//! `train` tool) and the profile `examples/data/ch15_profile.csv` (from `--time`). What the
//! model writes is drawn on the exact path, so the text is the same on every machine.
//!
//! `--time` measures on this machine, one thread: training steps on the fast path, each
//! kernel's share of the step, the rate of the step's matrix products in GFLOP/s, and the
//! same GEMM's rate on one large product. `--save FILE` writes it in the committed file's
//! format (`--save examples/data/ch15_profile.csv` replaces the book's).

#[allow(dead_code)] // `run_chapter`: this example parses more options, with `common::parse`
mod common;
use common::colors;
use common::stdout;
#[path = "common/allocator.rs"]
mod allocator;
#[path = "common/timing.rs"]
mod timing;

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use attention::gpt::config::GptConfig;
use attention::gpt::data::{CharVocab, batch, train_and_validation};
use attention::gpt::kernels::{Fast, Kernels};
use attention::gpt::optim::{AdamW, clip_global_norm};
use attention::gpt::weights::{Gpt, Norm};
use figures::LineChart;
use figures::diagram::{Color, Diagram, Style, TextStyle};
use ndarray::{Array1, Array2, Array4, ArrayView2, ArrayView3};
use rand::{SeedableRng, rngs::StdRng};

const ABOUT: &str = "Chapter 15, A model that writes: prints the model's size and cost, its \
    training run beside PyTorch's and what it writes after 0, 200, 500 and 2000 steps, and draws \
    the model and the loss curves; --time measures where a training step's time goes on this \
    machine.";

/// The PyTorch reference's record, written by `tools/gpt_reference.py`.
const PYTORCH_JSON: &str = include_str!("data/ch15_pytorch.json");
/// The book's own runs of the `train` tool, three seeds, on the same machine.
const RUST_CSV: &str = include_str!("data/ch15_rust.csv");
/// Where a training step's time goes: `--time --save examples/data/ch15_profile.csv`.
const PROFILE_CSV: &str = include_str!("data/ch15_profile.csv");

/// The prompt of every sample the chapter shows.
pub const PROMPT: &str = "ROMEO:\n";
/// Characters written per sample.
pub const SAMPLE_CHARS: usize = 240;
/// The seed of the samples' draws.
pub const SAMPLE_SEED: u64 = 0;
/// The steps whose samples the chapter shows (0: the initial weights of the run, seed 0).
pub const SAMPLE_STEPS: [usize; 4] = [0, 200, 500, 2000];
/// The steps over which the per-step training loss is averaged in the figure.
const SMOOTH: usize = 50;

#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    output: common::Output,
    /// Measure where a training step's time goes on this machine instead of drawing
    #[arg(long)]
    time: bool,
    /// With --time: training steps timed, after two warm-up steps (the median is reported)
    #[arg(long, default_value_t = 20, requires = "time")]
    steps: usize,
    /// With --time: also write the measurement to FILE, in the committed file's format
    #[arg(long, value_name = "FILE", requires = "time")]
    save: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------
// The committed data.

/// One run's validation losses, by step.
type Evaluations = BTreeMap<usize, f64>;

/// The committed model's training log: the loss at every step, the validation losses.
pub struct RustLog {
    /// The training loss of steps 1, 2, ...
    pub loss: Vec<f64>,
    /// The gradient's norm before clipping, at steps 1, 2, ...
    pub grad_norm: Vec<f64>,
    /// The validation loss every 250 steps, over the whole validation text.
    pub val: Evaluations,
}

/// Reads the committed model's `log.csv`.
pub fn rust_log() -> Result<RustLog, Box<dyn Error>> {
    let path = pretrained::shakespeare_dir().join("log.csv");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut loss = Vec::new();
    let mut grad_norm = Vec::new();
    let mut val = Evaluations::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let bad =
            || format!("{}: line {} is not step,loss,lr,grad_norm,val_loss", path.display(), n + 1);
        if f.len() != 5 {
            return Err(bad().into());
        }
        let step: usize = f[0].parse().map_err(|_| bad())?;
        if step != loss.len() + 1 {
            return Err(format!(
                "{}: line {} is step {step}, not {}",
                path.display(),
                n + 1,
                loss.len() + 1
            )
            .into());
        }
        loss.push(f[1].parse().map_err(|_| bad())?);
        grad_norm.push(f[3].parse().map_err(|_| bad())?);
        if !f[4].is_empty() {
            val.insert(step, f[4].parse().map_err(|_| bad())?);
        }
    }
    Ok(RustLog { loss, grad_norm, val })
}

/// One seed's run of the PyTorch reference.
pub struct TorchRun {
    /// The seed.
    pub seed: u64,
    /// Seconds of training (evaluations excluded).
    pub train_seconds: f64,
    /// Milliseconds per step.
    pub ms_per_step: f64,
    /// The training loss of steps 1, 2, ...
    pub loss: Vec<f64>,
    /// The validation losses, by step.
    pub val: Evaluations,
}

/// The PyTorch reference's record: its version, threads, CPU, and its runs.
pub struct Torch {
    /// PyTorch's version.
    pub version: String,
    /// The threads it ran on.
    pub threads: u64,
    /// The CPU and its SIMD flags.
    pub cpu: String,
    /// Its runs, one per seed.
    pub runs: Vec<TorchRun>,
}

/// Reads `examples/data/ch15_pytorch.json`.
pub fn torch() -> Result<Torch, Box<dyn Error>> {
    let json: serde_json::Value = serde_json::from_str(PYTORCH_JSON)?;
    let bad =
        |what: &str| format!("examples/data/ch15_pytorch.json: {what} is missing or malformed");
    let mut runs = Vec::new();
    for run in json["runs"].as_array().ok_or_else(|| bad("runs"))? {
        let num = |key: &str| run[key].as_f64().ok_or_else(|| bad(key));
        let loss = run["train_loss"].as_array().ok_or_else(|| bad("train_loss"))?;
        let loss = loss
            .iter()
            .map(|v| v.as_f64().ok_or_else(|| bad("train_loss")))
            .collect::<Result<_, _>>()?;
        let mut val = Evaluations::new();
        for (step, v) in run["val_loss"].as_object().ok_or_else(|| bad("val_loss"))? {
            val.insert(step.parse()?, v.as_f64().ok_or_else(|| bad("val_loss"))?);
        }
        runs.push(TorchRun {
            seed: run["seed"].as_u64().ok_or_else(|| bad("seed"))?,
            train_seconds: num("train_seconds")?,
            ms_per_step: num("ms_per_step")?,
            loss,
            val,
        });
    }
    let simd: Vec<&str> = json["simd"]
        .as_array()
        .ok_or_else(|| bad("simd"))?
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    Ok(Torch {
        version: json["torch"]
            .as_str()
            .ok_or_else(|| bad("torch"))?
            .split('+')
            .next()
            .unwrap_or("")
            .to_string(),
        threads: json["threads"].as_u64().ok_or_else(|| bad("threads"))?,
        cpu: format!("{}, {}", json["cpu"].as_str().ok_or_else(|| bad("cpu"))?, simd.join(" + ")),
        runs,
    })
}

/// One seed's run of the book's `train` tool.
pub struct RustRun {
    /// The seed.
    pub seed: u64,
    /// Seconds of training (evaluations excluded).
    pub train_seconds: f64,
    /// The validation loss at the last step.
    pub val_loss: f64,
}

/// Reads `examples/data/ch15_rust.csv`: its header lines and its runs.
pub fn rust_runs() -> Result<(Vec<String>, Vec<RustRun>), Box<dyn Error>> {
    let (header, rows) = timing::committed_csv(RUST_CSV);
    let runs = rows
        .iter()
        .map(|r| -> Result<RustRun, Box<dyn Error>> {
            match r[..] {
                [seed, seconds, val] => Ok(RustRun {
                    seed: seed.parse()?,
                    train_seconds: seconds.parse()?,
                    val_loss: val.parse()?,
                }),
                _ => {
                    Err("examples/data/ch15_rust.csv: a row is not seed,train_seconds,val_loss"
                        .into())
                }
            }
        })
        .collect::<Result<_, _>>()?;
    Ok((header, runs))
}

/// The committed profile: its header lines, and each measured quantity by name.
pub fn profile() -> Result<(Vec<String>, BTreeMap<String, f64>), Box<dyn Error>> {
    let (header, rows) = timing::committed_csv(PROFILE_CSV);
    let mut values = BTreeMap::new();
    for r in rows {
        match r[..] {
            [name, value] => {
                values.insert(name.to_string(), value.parse()?);
            }
            _ => return Err("examples/data/ch15_profile.csv: a row is not what,value".into()),
        }
    }
    Ok((header, values))
}

/// The best (smallest) of some times.
pub fn best(times: impl IntoIterator<Item = f64>) -> f64 {
    times.into_iter().fold(f64::INFINITY, f64::min)
}

/// The mean of some values.
pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

// ---------------------------------------------------------------------------------------
// What the model writes.

/// The model after `step` steps of the documented run: the initial weights (seed 0) for step
/// 0, the committed snapshots for 200 and 500, the committed model for 2000.
pub fn model_at(step: usize) -> Result<(Gpt<f32>, CharVocab), Box<dyn Error>> {
    let dir = pretrained::shakespeare_dir();
    let (gpt, vocab) = pretrained::gpt2::load(&dir)?;
    Ok(match step {
        0 => (Gpt::<f32>::init(gpt.config, &mut StdRng::seed_from_u64(0))?, vocab),
        2000 => (gpt, vocab),
        s => pretrained::gpt2::load(&dir.join(format!("step-{s}")))?,
    })
}

/// What the model writes after `step` steps: [`SAMPLE_CHARS`] characters after [`PROMPT`],
/// drawn at temperature 1 with seed [`SAMPLE_SEED`] on the exact path.
pub fn writes(step: usize) -> Result<String, Box<dyn Error>> {
    let (gpt, vocab) = model_at(step)?;
    Ok(pretrained::gpt2::write(&gpt, &vocab, PROMPT, SAMPLE_CHARS, SAMPLE_SEED)?)
}

// ---------------------------------------------------------------------------------------
// The report.

/// What the chapter quotes.
fn report() -> Result<String, Box<dyn Error>> {
    let (gpt, vocab) = pretrained::gpt2::load(&pretrained::shakespeare_dir())?;
    let c = gpt.config;
    let mut out = String::new();
    writeln!(out, "== The model ==")?;
    writeln!(
        out,
        "vocabulary V = {}, context T = {}, d_model = {}, {} blocks of {} heads of {}",
        c.vocab_size,
        c.block_size,
        c.n_embd,
        c.n_layer,
        c.n_head,
        c.d_head()
    )?;
    let d = c.n_embd;
    writeln!(out, "token table        {:>7} × {:<3} = {:>7}", c.vocab_size, d, c.vocab_size * d)?;
    writeln!(out, "position table     {:>7} × {:<3} = {:>7}", c.block_size, d, c.block_size * d)?;
    writeln!(out, "one block: 12·d² + 2·d           = {:>7}", 12 * d * d + 2 * d)?;
    writeln!(out, "final layer norm gain             = {:>7}", d)?;
    writeln!(out, "parameters in all                 = {:>7}", c.parameter_count())?;
    writeln!(out, "training FLOPs per token          = {:>7}", c.training_flops_per_token())?;
    let tokens = 12 * c.block_size;
    writeln!(
        out,
        "one step (12 × {} = {tokens} tokens): {:.2} GFLOP",
        c.block_size,
        (c.training_flops_per_token() * tokens) as f64 / 1e9
    )?;

    let log = rust_log()?;
    let torch = torch()?;
    let seed0 =
        torch.runs.iter().find(|r| r.seed == 0).ok_or("the PyTorch record has no seed 0")?;
    writeln!(out, "\n== Validation loss, seed 0 (nats per character, whole validation text) ==")?;
    writeln!(out, "{:>6} {:>10} {:>10}", "step", "Rust", "PyTorch")?;
    let steps: std::collections::BTreeSet<usize> =
        log.val.keys().chain(seed0.val.keys()).copied().collect();
    let cell = |v: Option<&f64>| v.map_or("—".to_string(), |v| format!("{v:.4}"));
    for s in steps {
        writeln!(out, "{s:>6} {:>10} {:>10}", cell(log.val.get(&s)), cell(seed0.val.get(&s)))?;
    }
    writeln!(
        out,
        "uniform guess: ln {} = {:.4}; training loss at step 1: Rust {:.4}, PyTorch {:.4}",
        vocab.len(),
        (vocab.len() as f64).ln(),
        log.loss[0],
        seed0.loss[0]
    )?;
    let clipped = log.grad_norm.iter().filter(|&&g| g > 1.0).count();
    writeln!(
        out,
        "gradient norm above 1 (clipped): {clipped} of {} steps ({:.1} %)",
        log.grad_norm.len(),
        100.0 * clipped as f64 / log.grad_norm.len() as f64
    )?;

    let (header, runs) = rust_runs()?;
    writeln!(out, "\n== Side by side: 2000 steps, three seeds, the same machine ==")?;
    for h in &header {
        writeln!(out, "# {h}")?;
    }
    writeln!(out, "# PyTorch {} eager, {} threads ({})", torch.version, torch.threads, torch.cpu)?;
    writeln!(out, "{:<8} {:>5} {:>9} {:>8} {:>9}", "", "seed", "seconds", "ms/step", "val loss")?;
    for r in &runs {
        writeln!(
            out,
            "{:<8} {:>5} {:>9.1} {:>8.1} {:>9.4}",
            "Rust",
            r.seed,
            r.train_seconds,
            1000.0 * r.train_seconds / 2000.0,
            r.val_loss
        )?;
    }
    for r in &torch.runs {
        writeln!(
            out,
            "{:<8} {:>5} {:>9.1} {:>8.1} {:>9.4}",
            "PyTorch", r.seed, r.train_seconds, r.ms_per_step, r.val[&2000]
        )?;
    }
    let rust_best = best(runs.iter().map(|r| r.train_seconds));
    let torch_best = best(torch.runs.iter().map(|r| r.train_seconds));
    let rust_mean = mean(&runs.iter().map(|r| r.val_loss).collect::<Vec<_>>());
    let torch_mean = mean(&torch.runs.iter().map(|r| r.val[&2000]).collect::<Vec<_>>());
    writeln!(
        out,
        "best time: Rust {rust_best:.1} s, PyTorch {torch_best:.1} s, ratio {:.2}",
        rust_best / torch_best
    )?;
    writeln!(out, "mean val loss: Rust {rust_mean:.4}, PyTorch {torch_mean:.4}")?;

    out += "\n";
    out += &profile_report()?;
    out += "\n";
    out += &samples_report()?;
    Ok(out)
}

/// The widest line the book's code column shows.
const PAGE: usize = 95;

/// `text` with every line wider than the page broken, each break marked with `↩`.
pub fn fit_page(text: &str) -> String {
    let lines = text.split('\n').map(|line| {
        let chars: Vec<char> = line.chars().collect();
        if chars.len() <= PAGE {
            return line.to_string();
        }
        let pieces: Vec<String> = chars.chunks(PAGE - 1).map(|c| c.iter().collect()).collect();
        pieces.join("↩\n")
    });
    lines.collect::<Vec<_>>().join("\n")
}

/// Where a training step's time goes, from the committed profile.
fn profile_report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    let (header, p) = profile()?;
    writeln!(out, "== Where a step's time goes (one thread, fast path) ==")?;
    for h in &header {
        writeln!(out, "# {h}")?;
    }
    let step_ms = p["step_ms"];
    for part in PARTS {
        let ms = p[&format!("{part}_ms")];
        writeln!(out, "{part:<22} {ms:>7.1} ms {:>5.1} %", 100.0 * ms / step_ms)?;
    }
    writeln!(out, "{:<22} {step_ms:>7.1} ms", "one step in all")?;
    writeln!(
        out,
        "matrix products in a step: {:.2} GFLOP at {:.1} GFLOP/s",
        p["matmul_gflop"],
        p["matmul_gflop"] / (p["matmul_ms"] / 1000.0)
    )?;
    writeln!(out, "one 512 × 512 × 512 product: {:.1} GFLOP/s", p["gemm512_gflops"])?;

    Ok(out)
}

/// What the model writes after each of [`SAMPLE_STEPS`].
fn samples_report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    writeln!(
        out,
        "== What it writes (prompt {PROMPT:?}, temperature 1, seed {SAMPLE_SEED}, exact path) =="
    )?;
    for step in SAMPLE_STEPS {
        writeln!(out, "-- after {step} steps --")?;
        writeln!(out, "{}", fit_page(&format!("{PROMPT}{}", writes(step)?)))?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The figures.

/// The mean of every `SMOOTH` steps' training losses, at the last step of each.
fn smoothed(loss: &[f64]) -> Vec<(f64, f64)> {
    loss.chunks(SMOOTH)
        .enumerate()
        .map(|(i, c)| (((i * SMOOTH) + c.len()) as f64, mean(c)))
        .collect()
}

/// The loss curves: the committed run's and the PyTorch reference's (seed 0).
fn loss_chart() -> Result<LineChart, Box<dyn Error>> {
    let log = rust_log()?;
    let torch = torch()?;
    let seed0 =
        torch.runs.iter().find(|r| r.seed == 0).ok_or("the PyTorch record has no seed 0")?;
    let points = |val: &Evaluations| val.iter().map(|(&s, &v)| (s as f64, v)).collect::<Vec<_>>();
    Ok(LineChart::new()
        .title(format!("Shakespeare, seed 0: the book's Rust and PyTorch {}", torch.version))
        .x_label("training step")
        .y_label("cross-entropy (nats per character)")
        .y_range(1.5, 4.5)
        .series(format!("Rust, training loss ({SMOOTH}-step mean)"), smoothed(&log.loss))
        .series(format!("PyTorch, training loss ({SMOOTH}-step mean)"), smoothed(&seed0.loss))
        .series("Rust, validation loss", points(&log.val))
        .series("PyTorch, validation loss", points(&seed0.val)))
}

/// The model as a diagram: embeddings, the residual stream through the pre-LN blocks, the
/// final norm, the tied head and the loss, with each tensor's shape.
fn model_diagram(c: &GptConfig) -> Diagram {
    let (w, h) = (760u32, 670u32);
    let mut d = Diagram::new(
        w,
        h,
        "The character-level GPT: embeddings, four pre-LN blocks on a residual stream, a final layer norm and the tied head",
    );
    d.describe(format!(
        "From top to bottom. Character ids of shape (B, T) select rows of the token table wte \
         (V = {v} by d = {dm}) and the positions 0 to T − 1 select rows of the position table wpe \
         (T = {t} by d); their sum is the residual stream x of shape (B·T, d). A block, repeated \
         {n} times: x plus causal multi-head attention of LN_1(x), then x plus the MLP of \
         LN_2(x), where the MLP multiplies by W_fc (d by 4d), applies GELU and multiplies by \
         W_proj (4d by d). The stream itself only ever has things added to it. After the blocks: \
         the final layer norm LN_f, then the logits h · wteᵀ of shape (B·T, V), using the token \
         table again (the tied head), and the cross-entropy with the next character.",
        v = c.vocab_size,
        dm = c.n_embd,
        t = c.block_size,
        n = c.n_layer
    ));
    let ink = Style::stroke(Color::INK, 1.5);
    let label = TextStyle::new(15.0);
    let small = TextStyle::new(13.0).color(Color::MUTED);
    let stream_x = 170.0;
    let boxed = |d: &mut Diagram, x: f64, y: f64, width: f64, text: &str, color: Color| {
        d.rect(
            x,
            y,
            width,
            34.0,
            &Style::fill(color.tint(colors::FILL)).and_stroke(color, 1.5).rounded(6.0),
        );
        d.text(x + width / 2.0, y + 17.0, text, &label.centered().middle());
    };
    d.text(
        20.0,
        28.0,
        "A GPT: the stream, the blocks that add to it, the head that reads it",
        &TextStyle::new(16.0).bold(),
    );
    // Inputs and embeddings.
    boxed(&mut d, stream_x - 110.0, 50.0, 220.0, "character ids (B, T)", Color::GREY);
    d.arrow((stream_x, 84.0), (stream_x, 108.0), &ink);
    boxed(&mut d, stream_x - 140.0, 108.0, 280.0, "wte[id] + wpe[position]", colors::X);
    d.text(stream_x + 150.0, 125.0, &format!("x: (B·T, d = {})", c.n_embd), &small.middle());
    // The block.
    let (top, bottom) = (166.0, 456.0);
    d.rect(
        30.0,
        top,
        700.0,
        bottom - top,
        &Style::stroke(Color::MUTED, 1.5).dashed().rounded(10.0),
    );
    d.text(44.0, top + 22.0, &format!("block, × {} (pre-LN)", c.n_layer), &label.bold());
    d.line((stream_x, 142.0), (stream_x, bottom + 40.0), &Style::stroke(Color::INK, 3.0));
    d.text(stream_x - 12.0, top + 60.0, "residual", &small.anchor(figures::diagram::Anchor::End));
    d.text(stream_x - 12.0, top + 78.0, "stream", &small.anchor(figures::diagram::Anchor::End));
    let branch = |d: &mut Diagram,
                  y: f64,
                  first: &str,
                  second: &str,
                  second_color: Color,
                  note: &str| {
        let (x1, x2) = (250.0, 380.0);
        d.arrow((stream_x, y + 17.0), (x1, y + 17.0), &ink);
        boxed(d, x1, y, 110.0, first, Color::ORANGE);
        d.arrow((x1 + 110.0, y + 17.0), (x2, y + 17.0), &ink);
        boxed(d, x2, y, 330.0, second, second_color);
        d.text(x2 + 165.0, y + 52.0, note, &small.centered());
        // back into the stream, lower down, at a "+"
        let plus_y = y + 82.0;
        d.polyline(
            &[(x2 + 300.0, y + 34.0), (x2 + 300.0, plus_y), (stream_x + 14.0, plus_y)],
            &ink,
        );
        d.arrow((stream_x + 40.0, plus_y), (stream_x + 14.0, plus_y), &ink);
        d.circle((stream_x, plus_y), 13.0, &Style::fill(Color::WHITE).and_stroke(Color::INK, 1.5));
        d.text(stream_x, plus_y + 1.0, "+", &TextStyle::new(18.0).bold().centered().middle());
    };
    branch(
        &mut d,
        top + 40.0,
        "LN₁",
        "causal multi-head attention",
        colors::Q,
        &format!("{} heads of {}: chapters 4, 6, 7", c.n_head, c.d_head()),
    );
    branch(
        &mut d,
        top + 180.0,
        "LN₂",
        "MLP: · W_{fc}, GELU, · W_{proj}",
        colors::V,
        &format!("d → 4d = {} → d", 4 * c.n_embd),
    );
    // The head.
    let y = bottom + 40.0;
    d.arrow((stream_x, y - 2.0), (stream_x, y + 4.0), &ink);
    boxed(&mut d, stream_x - 60.0, y + 4.0, 120.0, "LN_{f}", Color::ORANGE);
    d.arrow((stream_x, y + 38.0), (stream_x, y + 58.0), &ink);
    boxed(&mut d, stream_x - 140.0, y + 58.0, 280.0, "logits = h · wteᵀ", Color::REDDISH_PURPLE);
    d.text(
        stream_x + 150.0,
        y + 75.0,
        &format!("(B·T, V = {}): the token table again, tied", c.vocab_size),
        &small.middle(),
    );
    d.arrow((stream_x, y + 92.0), (stream_x, y + 112.0), &ink);
    boxed(
        &mut d,
        stream_x - 140.0,
        y + 112.0,
        280.0,
        "cross-entropy vs next character",
        Color::GREY,
    );
    d
}

/// Draws this chapter's figures into `out_dir` and writes its report; returns the files.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let (gpt, _) = pretrained::gpt2::load(&pretrained::shakespeare_dir())?;
    let diagram = model_diagram(&gpt.config).save(out_dir.join("ch15_gpt.svg"))?;
    let loss = loss_chart()?.save(out_dir.join("ch15_loss.png"))?;
    let text = out_dir.join("ch15_output.txt");
    std::fs::write(&text, report()?)?;
    let profile = out_dir.join("ch15_profile.txt");
    std::fs::write(&profile, profile_report()?)?;
    let samples = out_dir.join("ch15_samples.txt");
    std::fs::write(&samples, samples_report()?)?;
    Ok(vec![diagram, loss, text, profile, samples])
}

// ---------------------------------------------------------------------------------------
// --time: where a step's time goes.

/// The parts of a step the profile times, in the report's order.
const PARTS: [&str; 7] = [
    "matrix products",
    "attention",
    "layer norm",
    "GELU",
    "cross-entropy",
    "optimizer",
    "everything else",
];

/// Kernels that time every call of another's, by part, and count the matrix products' FLOPs.
struct Timed<K> {
    inner: K,
    seconds: Mutex<BTreeMap<&'static str, f64>>,
    matmul_flops: Mutex<f64>,
}

impl<K> Timed<K> {
    fn new(inner: K) -> Self {
        Timed { inner, seconds: Mutex::new(BTreeMap::new()), matmul_flops: Mutex::new(0.0) }
    }
    fn time<T>(&self, part: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        *self.seconds.lock().expect("not poisoned").entry(part).or_default() +=
            start.elapsed().as_secs_f64();
        out
    }
}

impl<K: Kernels<f32>> Kernels<f32> for Timed<K> {
    fn matmul(&self, a: &ArrayView2<f32>, b: &ArrayView2<f32>) -> Array2<f32> {
        *self.matmul_flops.lock().expect("not poisoned") +=
            2.0 * (a.nrows() * a.ncols() * b.ncols()) as f64;
        self.time("matrix products", || self.inner.matmul(a, b))
    }
    fn norm(
        &self,
        x: &ArrayView2<f32>,
        norm: &Norm<f32>,
        eps: f64,
    ) -> attention::Result<Array2<f32>> {
        self.time("layer norm", || self.inner.norm(x, norm, eps))
    }
    fn norm_backward(
        &self,
        x: &ArrayView2<f32>,
        norm: &Norm<f32>,
        eps: f64,
        grad_y: &ArrayView2<f32>,
    ) -> (Array2<f32>, Array1<f32>, Array1<f32>) {
        self.time("layer norm", || self.inner.norm_backward(x, norm, eps, grad_y))
    }
    fn gelu(&self, u: &ArrayView2<f32>) -> Array2<f32> {
        self.time("GELU", || self.inner.gelu(u))
    }
    fn gelu_backward(&self, u: &ArrayView2<f32>, grad_g: &ArrayView2<f32>) -> Array2<f32> {
        self.time("GELU", || self.inner.gelu_backward(u, grad_g))
    }
    fn causal_attention(
        &self,
        qkv: &ArrayView2<f32>,
        batch: usize,
        heads: usize,
        alibi: Option<&[f64]>,
    ) -> attention::Result<(Array2<f32>, Array4<f32>)> {
        self.time("attention", || self.inner.causal_attention(qkv, batch, heads, alibi))
    }
    fn causal_attention_backward(
        &self,
        qkv: &ArrayView2<f32>,
        weights: &Array4<f32>,
        grad_y: &ArrayView2<f32>,
    ) -> attention::Result<Array2<f32>> {
        self.time("attention", || self.inner.causal_attention_backward(qkv, weights, grad_y))
    }
    fn cached_attention(
        &self,
        q: &ArrayView2<f32>,
        keys: &ArrayView3<f32>,
        values: &ArrayView3<f32>,
        alibi: Option<&[f64]>,
    ) -> attention::Result<Array2<f32>> {
        self.time("attention", || self.inner.cached_attention(q, keys, values, alibi))
    }
    fn cross_entropy(
        &self,
        logits: &ArrayView2<f32>,
        targets: &[usize],
    ) -> attention::Result<(f64, Array2<f32>)> {
        self.time("cross-entropy", || self.inner.cross_entropy(logits, targets))
    }
}

/// Times `--steps` training steps on one thread and one large GEMM; returns the profile.
fn measure(steps: usize) -> Result<BTreeMap<String, f64>, Box<dyn Error>> {
    let corpus = std::fs::read_to_string("data/shakespeare/input.txt").map_err(|e| {
        format!("cannot read data/shakespeare/input.txt (run from the repository root): {e}")
    })?;
    let vocab = CharVocab::from_text(&corpus)?;
    let ids = vocab.encode(&corpus)?;
    let (train, _) = train_and_validation(&ids);
    let config = GptConfig::shakespeare(vocab.len());
    let mut gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0))?;
    let mut adamw = AdamW::nanogpt(&gpt);
    let mut rng = StdRng::seed_from_u64(15);
    let mut per_step: Vec<BTreeMap<String, f64>> = Vec::new();
    for step in 0..steps + 2 {
        let (x, y) = batch(train, 12, config.block_size, &mut rng)?;
        let timed = Timed::new(Fast);
        let start = Instant::now();
        let (_, mut grads) = gpt.loss_and_grads_with(&timed, &x.view(), &y.view())?;
        let backprop = start.elapsed().as_secs_f64();
        let start = Instant::now();
        clip_global_norm(&mut grads, 1.0);
        adamw.step(&mut gpt, &grads, 1e-3)?;
        let optimizer = start.elapsed().as_secs_f64();
        if step < 2 {
            continue; // warm-up
        }
        let mut row: BTreeMap<String, f64> = timed
            .seconds
            .into_inner()?
            .into_iter()
            .map(|(k, v)| (format!("{k}_ms"), 1000.0 * v))
            .collect();
        let kernels: f64 = row.values().sum();
        row.insert("optimizer_ms".into(), 1000.0 * optimizer);
        row.insert("everything else_ms".into(), 1000.0 * backprop - kernels);
        row.insert("step_ms".into(), 1000.0 * (backprop + optimizer));
        row.insert("matmul_gflop".into(), timed.matmul_flops.into_inner()? / 1e9);
        per_step.push(row);
    }
    let mut profile = BTreeMap::new();
    for key in per_step[0].keys() {
        profile.insert(key.clone(), timing::median(per_step.iter().map(|r| r[key]).collect()));
    }
    profile.insert("matmul_ms".into(), profile["matrix products_ms"]);
    let a = Array2::from_shape_fn((512, 512), |(i, j)| ((i * 7 + j * 3) % 13) as f32 / 13.0);
    let ms = timing::median_ms(50, || Fast.matmul(&a.view(), &a.view()));
    profile.insert("gemm512_gflops".into(), 2.0 * 512f64.powi(3) / (ms / 1000.0) / 1e9);
    Ok(profile)
}

/// The profile in the committed file's format.
fn profile_csv(profile: &BTreeMap<String, f64>, steps: usize) -> String {
    let (cpu, features) = timing::machine();
    let mut out = format!("# CPU: {cpu}; {features}\n");
    out += &format!(
        "# one thread, fast f32 path, batches of 12 × 64; median of {steps} steps after 2 warm-up\n"
    );
    out += "what,value\n";
    for (k, v) in profile {
        out += &format!("{k},{v:.4}\n");
    }
    out
}

fn main() -> Result<(), Box<dyn Error>> {
    let cli: Cli = common::parse(env!("CARGO_CRATE_NAME"), ABOUT);
    if !cli.time {
        let dir = cli.output.dir()?;
        return common::render_into(&dir, render_figures);
    }
    // One thread: each part's time is its own, not shared with a second core; the allocator
    // as the `train` tool sets it.
    allocator::keep_freed_memory();
    let profile = measure(cli.steps.max(1))?;
    let csv = profile_csv(&profile, cli.steps.max(1));
    stdout::print(&csv);
    if let Some(path) = &cli.save {
        std::fs::write(path, &csv)?;
        stdout::line(format_args!("wrote {}", path.display()));
    }
    Ok(())
}
