//! Trains chapter 15's character-level GPT on a text: Shakespeare by default, or any UTF-8
//! text a reader brings.
//!
//! ```text
//! cargo run --release --example train -- [--corpus FILE] [--steps N] [--out DIR]
//!     [--resume DIR] [--seed S] [--eval-every N] [--sample N]
//! ```
//!
//! - The corpus's characters are the vocabulary; its last 10 % is the validation text.
//! - The model and the run are nanoGPT's small CPU configuration (4 blocks of 4 heads,
//!   `d_model = 128`, contexts of 64 characters, batches of 12, AdamW with warm-up and cosine
//!   decay over `--steps`, gradients clipped at norm 1), trained by the `attention` crate's
//!   fast `f32` path, each batch split in two halves computed side by side (two cores).
//! - Every `--eval-every` steps and at the end, the validation loss (every position of the
//!   validation text once) is printed and logged, and a checkpoint is saved in `--out`: the
//!   model in Hugging Face's GPT-2 layout (`config.json`, `model.safetensors`, `vocab.json`,
//!   readable by `transformers`), the optimizer's state (`optimizer.safetensors`) and the run
//!   so far (`trainer_state.json`, `log.csv`). The checkpoint is written beside the folder and
//!   swapped in whole, so a folder is always a complete checkpoint.
//! - `--snapshot-at 200,500` also keeps the model after those steps, each in a folder beside
//!   `--out` (`OUT-step-200`, ...), in the same GPT-2 layout.
//! - `--resume DIR` continues the run saved in DIR (the same corpus, the same vocabulary) up
//!   to `--steps`, saving into DIR unless `--out` names another folder; the steps it replays
//!   draw the same batches, so a resumed run ends where an uninterrupted one would.
//! - Ctrl-C (SIGINT, or SIGTERM) stops after the current step, saves a checkpoint, says how
//!   to resume, and exits with 130 (143); a second Ctrl-C stops at once.
//! - On a terminal a progress bar shows the step, the loss, tokens per second and the time
//!   left.
//!
//! Errors (a corpus missing, empty, not UTF-8 text, or too short; a checkpoint from another
//! vocabulary or shape, corrupt or truncated; an `--out` that cannot be written) stop the
//! tool with one line `error: ...` and exit code 1, before anything is written; a bad command
//! line with clap's message and 2.

#[path = "common/allocator.rs"]
mod allocator;
#[allow(dead_code)] // the module's other printers serve the chapter examples
#[path = "common/stdout.rs"]
mod stdout;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use attention::gpt::config::GptConfig;
use attention::gpt::data::{CharVocab, batch, train_and_validation};
use attention::gpt::kernels::Fast;
use attention::gpt::optim::AdamW;
use attention::gpt::positions::Positions;
use attention::gpt::sample::sample;
use attention::gpt::train::{StepReport, TrainConfig, evaluate, train_step};
use attention::gpt::weights::Gpt;
use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ndarray::ArrayD;
use rand::{SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};

/// Trains chapter 15's character-level GPT (nanoGPT's small configuration) on a text.
#[derive(Parser, Debug)]
#[command(version, after_help = AFTER_HELP)]
pub struct Cli {
    /// The text to learn (UTF-8); its last 10 % is the validation text.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CORPUS)]
    corpus: PathBuf,
    /// Optimizer steps in all (the schedule's length) [default: 2000, or on --resume the
    /// saved run's]; a resumed run goes on up to here.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    steps: Option<u32>,
    /// Where checkpoints go (created if needed); default: DIR of --resume, else target/ch15/run.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Continue the run saved in DIR.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Seeds the initial weights, the batches and the sample [default: 0, or on --resume the
    /// saved run's].
    #[arg(long)]
    seed: Option<u64>,
    /// Measure the validation loss and save a checkpoint every N steps.
    #[arg(long, value_name = "N", default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    eval_every: u32,
    /// Also keep the model after these steps (e.g. 200,500), each in a folder of its own
    /// beside --out, named OUT-step-N.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    snapshot_at: Vec<u32>,
    /// How the model knows where each token is: learned (GPT-2's), none, sinusoidal, rope or
    /// alibi (chapter 16's experiment) [default: learned, or on --resume the saved run's].
    #[arg(long, value_name = "KIND",
          value_parser = ["learned", "none", "sinusoidal", "rope", "alibi"])]
    positions: Option<String>,
    /// Characters written at the end (0: none).
    #[arg(long, value_name = "N", default_value_t = 300)]
    sample: usize,
    /// For the tests: behave as if Ctrl-C came during step N.
    #[arg(long, value_name = "N", hide = true)]
    stop_after: Option<usize>,
}

pub const DEFAULT_CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/shakespeare/input.txt");
const DEFAULT_OUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/ch15/run");
const AFTER_HELP: &str = "Examples:\n  cargo run --release --example train\n  \
    cargo run --release --example train -- --corpus my_text.txt --steps 500 --out my_run\n  \
    cargo run --release --example train -- --resume my_run --steps 1000\n\n\
    Exit codes: 0 done; 1 bad data (corpus or checkpoint) or a folder that cannot be written; \
    2 bad usage; 130 (143) stopped by Ctrl-C (SIGTERM) after saving a checkpoint.";

/// How the run so far is saved beside the weights: `trainer_state.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct TrainerState {
    /// Steps taken.
    step: usize,
    /// The schedule's length.
    steps: usize,
    seed: u64,
    /// The corpus's length in characters, to recognise it on resume.
    corpus_chars: usize,
    batch_size: usize,
    /// Seconds spent in training steps (no evaluation, no saving).
    train_seconds: f64,
    /// One entry per step.
    log: Vec<LogLine>,
}

/// One step of the log (`log.csv` has the same columns).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct LogLine {
    step: usize,
    loss: f64,
    lr: f64,
    grad_norm: f64,
    /// The validation loss after this step, where it was measured.
    val_loss: Option<f64>,
}

fn main() -> ExitCode {
    allocator::keep_freed_memory();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let stop = Arc::new(AtomicUsize::new(0));
    #[cfg(unix)]
    {
        // The first Ctrl-C (or SIGTERM) asks for a checkpoint and a clean stop; a second one,
        // while that is under way, ends the process at once (exit 130 or 143).
        let pressed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let code = 128 + signal;
            let _ = signal_hook::flag::register_conditional_shutdown(
                signal,
                code,
                Arc::clone(&pressed),
            );
            let _ = signal_hook::flag::register(signal, Arc::clone(&pressed));
            let _ = signal_hook::flag::register_usize(signal, Arc::clone(&stop), signal as usize);
        }
    }
    match run(&cli, &stop) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// The whole run; the exit code, or the one-line error.
pub fn run(cli: &Cli, stop: &AtomicUsize) -> Result<u8, String> {
    let text = read_corpus(&cli.corpus)?;
    let vocab =
        CharVocab::from_text(&text).map_err(|e| format!("{}: {e}", cli.corpus.display()))?;
    let ids = vocab.encode(&text).map_err(|e| e.to_string())?;
    let positions = match &cli.positions {
        Some(name) => Positions::from_name(name).map_err(|e| e.to_string())?,
        None => Positions::Learned,
    };
    let mut config = GptConfig { positions, ..GptConfig::shakespeare(vocab.len()) };
    let (train, val) = train_and_validation(&ids);
    let t = config.block_size;
    if train.len() < t + 1 || val.len() < 2 {
        return Err(format!(
            "{}: {} characters; at least {} are needed (90 % for training must hold a context of {t} \
             and the character after it, 10 % for validation at least 2)",
            cli.corpus.display(),
            text.chars().count(),
            ((t + 1) * 10).div_ceil(9)
        ));
    }
    let out = cli.out.clone().or_else(|| cli.resume.clone()).unwrap_or_else(|| DEFAULT_OUT.into());
    check_out_folder(&out)?;
    let continuing = cli.resume.as_ref().is_some_and(|dir| same_folder(dir, &out));
    if !continuing && out.join("trainer_state.json").exists() {
        return Err(format!(
            "{}: holds a checkpoint already; pass --resume {} to continue it, or name a new --out",
            out.display(),
            quoted(&out)
        ));
    }
    for &step in &cli.snapshot_at {
        check_out_folder(&snapshot_folder(&out, step as usize))?;
    }
    check_writable(&out)?;

    // The model, the optimizer and the run so far: fresh, or from the checkpoint.
    let (mut gpt, mut adamw, mut state) = match &cli.resume {
        Some(dir) => {
            let (gpt, saved_vocab, adamw, state) = load_checkpoint(dir)?;
            if saved_vocab != vocab {
                let new = vocab.chars().iter().find(|c| !saved_vocab.chars().contains(c));
                let lost = saved_vocab.chars().iter().find(|c| !vocab.chars().contains(c));
                let which = match (new, lost) {
                    (Some(c), _) => format!("{c:?} is not in the checkpoint's"),
                    (None, Some(c)) => format!("{c:?} is not in the corpus's"),
                    (None, None) => "the same characters in another order".into(),
                };
                return Err(format!(
                    "{}: its vocabulary ({} characters) is not the corpus's ({} characters in \
                     {}): {which}",
                    dir.join("vocab.json").display(),
                    saved_vocab.len(),
                    vocab.len(),
                    cli.corpus.display()
                ));
            }
            if cli.positions.is_none() {
                config.positions = gpt.config.positions; // the saved run's
            }
            if gpt.config.positions != config.positions {
                return Err(format!(
                    "{}: this run was trained with {} positions, not {}: leave --positions out \
                     to resume it",
                    dir.join("config.json").display(),
                    gpt.config.positions.name(),
                    config.positions.name()
                ));
            }
            if gpt.config != config || state.corpus_chars != text.chars().count() {
                return Err(format!(
                    "{}: this checkpoint was trained on another corpus ({} characters) or shape",
                    dir.display(),
                    state.corpus_chars
                ));
            }
            if let Some(seed) = cli.seed.filter(|&s| s != state.seed) {
                return Err(format!(
                    "{}: this run was seeded with {}, not {seed}: leave --seed out to resume it",
                    dir.join("trainer_state.json").display(),
                    state.seed
                ));
            }
            let steps = cli.steps.map_or(state.steps, |s| s as usize);
            if steps <= state.step {
                return Err(format!(
                    "{}: the run is at step {} already; pass a --steps above it to go on",
                    dir.join("trainer_state.json").display(),
                    state.step
                ));
            }
            if steps != state.steps {
                eprintln!(
                    "note: the schedule was {} steps long and is now {steps}: the learning rate \
                     from step {} on follows the new length",
                    state.steps, state.step
                );
            }
            (gpt, adamw, TrainerState { steps, ..state })
        }
        None => {
            let seed = cli.seed.unwrap_or(0);
            let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(seed))
                .map_err(|e| e.to_string())?;
            let adamw = AdamW::nanogpt(&gpt);
            let state = TrainerState {
                step: 0,
                steps: cli.steps.map_or(2000, |s| s as usize),
                seed,
                corpus_chars: text.chars().count(),
                batch_size: TrainConfig::nanogpt().batch_size,
                train_seconds: 0.0,
                log: Vec::new(),
            };
            (gpt, adamw, state)
        }
    };
    let settings = TrainConfig { steps: state.steps, ..TrainConfig::nanogpt() };
    if cfg!(debug_assertions) {
        eprintln!("note: a debug build trains about 30 times slower: add --release");
    }
    stdout::line(format_args!(
        "{} characters ({} for training, {} for validation), vocabulary {};\n\
         {} parameters; steps {}..{} into {}",
        ids.len(),
        train.len(),
        val.len(),
        vocab.len(),
        config.parameter_count(),
        state.step,
        settings.steps,
        out.display()
    ));

    let bar = progress_bar(state.step, settings.steps);
    let tokens_per_step = (settings.batch_size * t) as f64;
    while state.step < settings.steps {
        if stop.load(Ordering::SeqCst) != 0 {
            break;
        }
        let mut rng = batch_rng(state.seed, state.step);
        let (x, y) = batch(train, settings.batch_size, t, &mut rng).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let report: StepReport =
            train_step(&mut gpt, &mut adamw, &Fast, &settings, &x.view(), &y.view())
                .map_err(|e| e.to_string())?;
        let seconds = start.elapsed().as_secs_f64();
        if !(report.loss.is_finite() && report.grad_norm.is_finite()) {
            return Err(format!(
                "the training diverged at step {} (loss {}, gradient norm {}); the last \
                 checkpoint in {} is kept",
                state.step + 1,
                report.loss,
                report.grad_norm,
                out.display()
            ));
        }
        state.train_seconds += seconds;
        state.step += 1;
        if cli.stop_after == Some(state.step) {
            stop.store(2, Ordering::SeqCst); // as SIGINT would
        }
        let mut line = LogLine {
            step: state.step,
            loss: report.loss,
            lr: report.lr,
            grad_norm: report.grad_norm,
            val_loss: None,
        };
        if cli.snapshot_at.contains(&(state.step as u32)) {
            let folder = snapshot_folder(&out, state.step);
            check_out_folder(&folder)?;
            save_model(&folder, &gpt, &vocab)?;
        }
        let last = state.step == settings.steps;
        if state.step % cli.eval_every as usize == 0 || last {
            let loss = evaluate(&gpt, &Fast, val, 64).map_err(|e| e.to_string())?;
            line.val_loss = Some(loss);
            bar.suspend(|| {
                stdout::line(format_args!(
                    "step {:>5}: train loss {:.4}, val loss {loss:.4} ({:.1} s training, {:.1} ms a step)",
                    state.step,
                    report.loss,
                    state.train_seconds,
                    1000.0 * state.train_seconds / state.step as f64
                ))
            });
            state.log.push(line);
            save_checkpoint(&out, &gpt, &vocab, &adamw, &state)?;
        } else {
            state.log.push(line);
        }
        bar.set_position(state.step as u64);
        bar.set_message(format!(
            "loss {:.3}  {:.0} tokens/s",
            report.loss,
            tokens_per_step / seconds.max(1e-9)
        ));
    }
    bar.finish_and_clear();

    let signal = stop.load(Ordering::SeqCst);
    if signal != 0 && state.step < settings.steps {
        let saved = state.log.last().is_some_and(|l| l.val_loss.is_some()); // at an evaluation
        if !saved {
            save_checkpoint(&out, &gpt, &vocab, &adamw, &state)?;
        }
        let name = if signal == 15 { "SIGTERM" } else { "Ctrl-C" };
        eprintln!(
            "stopped by {name} after step {} of {}; checkpoint saved in {}\nresume with: cargo run \
             --release --example train -- --resume {} --steps {}{}",
            state.step,
            settings.steps,
            out.display(),
            quoted(&out),
            settings.steps,
            if cli.corpus.as_os_str() == DEFAULT_CORPUS {
                String::new()
            } else {
                format!(" --corpus {}", quoted(&cli.corpus))
            }
        );
        return Ok(128 + signal as u8);
    }
    let done = state.step.max(1);
    stdout::line(format_args!(
        "trained {} steps in {:.1} s ({:.1} ms a step, {:.0} tokens/s); checkpoint in {}",
        done,
        state.train_seconds,
        1000.0 * state.train_seconds / done as f64,
        tokens_per_step * done as f64 / state.train_seconds.max(1e-9),
        out.display()
    ));
    if cli.sample > 0 {
        let newline = vocab.encode("\n").ok().filter(|v| !v.is_empty()).unwrap_or(vec![0]);
        let mut rng = StdRng::seed_from_u64(state.seed);
        let written =
            sample(&gpt, &Fast, &newline, cli.sample, 1.0, &mut rng).map_err(|e| e.to_string())?;
        stdout::line(format_args!("a sample (seed {}):\n{}", state.seed, vocab.decode(&written)));
    }
    Ok(0)
}

/// Whether two paths name the same folder (both canonical), or the same spelling.
fn same_folder(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A path as a shell reads it back: in single quotes when it holds anything but plain
/// characters.
fn quoted(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c));
    if plain { text } else { format!("'{}'", text.replace('\'', "'\\''")) }
}

/// The generator of step `step`'s batch: its own stream, so that a resumed run draws the
/// batches an uninterrupted one would.
fn batch_rng(seed: u64, step: usize) -> StdRng {
    StdRng::seed_from_u64(seed ^ (step as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The files a checkpoint folder holds.
const CHECKPOINT_FILES: [&str; 6] = [
    "config.json",
    "model.safetensors",
    "vocab.json",
    "optimizer.safetensors",
    "trainer_state.json",
    "log.csv",
];

/// `--out` is replaced whole at every checkpoint, so it must be new, empty, or a checkpoint
/// folder: a folder holding anything else (the corpus, say) is refused.
fn check_out_folder(out: &Path) -> Result<(), String> {
    if !out.exists() {
        return match stranded(out) {
            // a run killed between the two renames of a swap left its checkpoint aside
            Some(old) => Err(format!(
                "{}: missing, but {} holds the checkpoint a killed run left aside: rename it \
                 to {} to resume it, or remove it",
                out.display(),
                old.display(),
                out.display()
            )),
            None => Ok(()),
        };
    }
    if !out.is_dir() {
        return Err(format!("{}: not a folder", out.display()));
    }
    let entries = fs::read_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for entry in entries {
        let name = entry.map_err(|e| format!("{}: {e}", out.display()))?.file_name();
        if !CHECKPOINT_FILES.iter().any(|f| name == *f) {
            return Err(format!(
                "{}: holds {} and is not a checkpoint folder; each checkpoint replaces the whole \
                 folder, so name a new one",
                out.display(),
                name.to_string_lossy()
            ));
        }
    }
    Ok(())
}

/// Whether a checkpoint can be swapped in at `out`, found before training rather than at the
/// first save: a probe folder is made, and removed, where the swap would make its own (beside
/// `out`, or in the nearest folder that exists above it).
fn check_writable(out: &Path) -> Result<(), String> {
    let mut above = out.parent();
    while let Some(dir) = above.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        above = dir.parent();
    }
    let dir = above.filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let probe = dir.join(format!(".train-probe.{}", std::process::id()));
    fs::create_dir(&probe).and_then(|()| fs::remove_dir(&probe)).map_err(|e| {
        format!("{}: cannot write a checkpoint in {}: {e}", out.display(), dir.display())
    })
}

/// A checkpoint set aside by a swap that never finished (`.NAME.PID.old` beside `out`).
fn stranded(out: &Path) -> Option<PathBuf> {
    let name = out.file_name()?.to_string_lossy().into_owned();
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::read_dir(parent).ok()?.flatten().map(|e| e.path()).find(|p| {
        let file = p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        file.starts_with(&format!(".{name}.")) && file.ends_with(".old")
    })
}

/// The corpus as text: an error names the file unless it is non-empty UTF-8 text.
fn read_corpus(path: &Path) -> Result<String, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.is_empty() {
        return Err(format!("{}: the file is empty", path.display()));
    }
    if let Some(i) = bytes.iter().position(|&b| b == 0) {
        return Err(format!("{}: a binary file (a zero byte at {i}), not text", path.display()));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{}: not UTF-8 text (byte {} is invalid)",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// A progress bar on standard error when it is a terminal, hidden otherwise.
fn progress_bar(position: usize, steps: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(steps as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("step {pos}/{len} {wide_bar} {msg}  {elapsed} (left {eta})")
            .expect("a valid template"),
    );
    bar.set_position(position as u64);
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// Where `--snapshot-at` keeps the model after step `step`: `OUT-step-N`, beside `out`.
fn snapshot_folder(out: &Path, step: usize) -> PathBuf {
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("run".into());
    out.with_file_name(format!("{name}-step-{step}"))
}

/// The model alone (the three GPT-2 files) in `folder`, swapped in whole as a checkpoint is.
fn save_model(folder: &Path, gpt: &Gpt<f32>, vocab: &CharVocab) -> Result<(), String> {
    swap_in(folder, |fresh| pretrained::gpt2::save(fresh, gpt, vocab).map_err(|e| e.to_string()))
}

/// Writes a checkpoint (the model, the optimizer's moments, the run so far) into `out`,
/// swapped in whole: `out` is always either the previous checkpoint or this one.
fn save_checkpoint(
    out: &Path,
    gpt: &Gpt<f32>,
    vocab: &CharVocab,
    adamw: &AdamW<f32>,
    state: &TrainerState,
) -> Result<(), String> {
    swap_in(out, |fresh| {
        let cannot = |e: std::io::Error| format!("{}: cannot write: {e}", fresh.display());
        pretrained::gpt2::save(fresh, gpt, vocab).map_err(|e| e.to_string())?;
        let moments = optimizer_bytes(gpt, adamw)?;
        fs::write(fresh.join("optimizer.safetensors"), moments).map_err(cannot)?;
        let json = serde_json::to_string_pretty(state).map_err(|e| e.to_string())?;
        fs::write(fresh.join("trainer_state.json"), json + "\n").map_err(cannot)?;
        fs::write(fresh.join("log.csv"), log_csv(&state.log)).map_err(cannot)
    })
}

/// Fills a new hidden folder beside `out` with `write`, then swaps it in for `out` (two
/// renames: `out` aside, the new folder in its place; then the old one is removed). If
/// anything fails, the new folder is removed and `out` is left, or put back, as it was.
fn swap_in(out: &Path, write: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
    let cannot = |e: std::io::Error| format!("{}: cannot write the checkpoint: {e}", out.display());
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(cannot)?;
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("run".into());
    let fresh = parent.join(format!(".{name}.{}.new", std::process::id()));
    let old = parent.join(format!(".{name}.{}.old", std::process::id()));
    let _ = fs::remove_dir_all(&fresh);
    fs::create_dir_all(&fresh).map_err(cannot)?;
    if let Err(e) = write(&fresh).and_then(|()| sync_folder(&fresh)) {
        let _ = fs::remove_dir_all(&fresh);
        return Err(e);
    }
    let _ = fs::remove_dir_all(&old); // a stale one, left by a killed run of the same PID
    if out.exists()
        && let Err(e) = fs::rename(out, &old)
    {
        let _ = fs::remove_dir_all(&fresh);
        return Err(cannot(e));
    }
    if let Err(e) = fs::rename(&fresh, out) {
        let _ = fs::rename(&old, out); // put the previous checkpoint back
        let _ = fs::remove_dir_all(&fresh);
        return Err(cannot(e));
    }
    let _ = fs::remove_dir_all(&old);
    let _ = fs::File::open(&parent).and_then(|dir| dir.sync_all()); // the renames, on disk
    Ok(())
}

/// Every file of `folder`, and the folder itself, flushed to the disk.
fn sync_folder(folder: &Path) -> Result<(), String> {
    let cannot = |e: std::io::Error| format!("{}: cannot write: {e}", folder.display());
    for entry in fs::read_dir(folder).map_err(cannot)? {
        fs::File::open(entry.map_err(cannot)?.path()).and_then(|f| f.sync_all()).map_err(cannot)?;
    }
    fs::File::open(folder).and_then(|dir| dir.sync_all()).map_err(cannot)
}

/// `log.csv`: one line per step.
fn log_csv(log: &[LogLine]) -> String {
    let mut csv = String::from("step,loss,lr,grad_norm,val_loss\n");
    for l in log {
        let val = l.val_loss.map(|v| format!("{v:.6}")).unwrap_or_default();
        csv += &format!("{},{:.6},{:.6e},{:.6},{val}\n", l.step, l.loss, l.lr, l.grad_norm);
    }
    csv
}

/// AdamW's moments as safetensors, under PyTorch's state names (`NAME.exp_avg`,
/// `NAME.exp_avg_sq`) and a scalar-free layout, plus the step count in the metadata.
fn optimizer_bytes(gpt: &Gpt<f32>, adamw: &AdamW<f32>) -> Result<Vec<u8>, String> {
    use safetensors::tensor::{Dtype, TensorView};
    let (m, v) = adamw.moments();
    let names: Vec<String> = gpt.tensors().into_iter().map(|(n, _)| n).collect();
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (kind, moments) in [("exp_avg", m), ("exp_avg_sq", v)] {
        for (name, t) in names.iter().zip(moments) {
            let bytes: Vec<u8> = t.iter().flat_map(|x| x.to_le_bytes()).collect();
            owned.push((format!("{name}.{kind}"), t.shape().to_vec(), bytes));
        }
    }
    let views: Vec<(String, TensorView)> = owned
        .iter()
        .map(|(n, s, b)| {
            Ok((n.clone(), TensorView::new(Dtype::F32, s.clone(), b).map_err(|e| e.to_string())?))
        })
        .collect::<Result<_, String>>()?;
    let meta = std::collections::HashMap::from([("step".to_string(), adamw.steps().to_string())]);
    safetensors::serialize(views, Some(meta)).map_err(|e| e.to_string())
}

/// The checkpoint in `dir`: model, vocabulary, optimizer and run so far.
fn load_checkpoint(dir: &Path) -> Result<(Gpt<f32>, CharVocab, AdamW<f32>, TrainerState), String> {
    let (gpt, vocab) = pretrained::gpt2::load(dir).map_err(|e| e.to_string())?;
    let path = dir.join("optimizer.safetensors");
    let shown = path.display().to_string();
    let bytes = fs::read(&path).map_err(|e| format!("{shown}: {e}"))?;
    let file = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{shown}: not a valid safetensors file: {e}"))?;
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| format!("{shown}: not a valid safetensors file: {e}"))?;
    let steps: usize = metadata
        .metadata()
        .as_ref()
        .and_then(|m| m.get("step"))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{shown}: no step count in its metadata"))?;
    let mut moments = [Vec::new(), Vec::new()];
    for (i, kind) in ["exp_avg", "exp_avg_sq"].iter().enumerate() {
        for (name, t) in gpt.tensors() {
            let key = format!("{name}.{kind}");
            let view =
                file.tensor(&key).map_err(|_| format!("{shown}: tensor {key} is missing"))?;
            if view.dtype() != safetensors::Dtype::F32 || view.shape() != t.shape() {
                return Err(format!(
                    "{shown}: tensor {key} is {:?} {:?}, but f32 {:?} was expected",
                    view.dtype(),
                    view.shape(),
                    t.shape()
                ));
            }
            let values: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            moments[i].push(ArrayD::from_shape_vec(t.shape(), values).expect("checked shape"));
        }
    }
    let [m, v] = moments;
    let adamw = AdamW::resume(&gpt, steps, m, v).map_err(|e| format!("{shown}: {e}"))?;
    let state_path = dir.join("trainer_state.json");
    let json =
        fs::read_to_string(&state_path).map_err(|e| format!("{}: {e}", state_path.display()))?;
    let state: TrainerState =
        serde_json::from_str(&json).map_err(|e| format!("{}: {e}", state_path.display()))?;
    if state.step != steps || state.log.len() != steps {
        return Err(format!(
            "{}: it records {} steps ({} logged) but the optimizer took {steps}",
            state_path.display(),
            state.step,
            state.log.len()
        ));
    }
    Ok((gpt, vocab, adamw, state))
}
