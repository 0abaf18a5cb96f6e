//! Writes with a character-level GPT checkpoint (chapter 15's by default), or scores a text
//! with it.
//!
//! ```text
//! cargo run --release --example generate -- [--checkpoint DIR] [--prompt TEXT] [--tokens N]
//!     [--temperature T] [--top-k K] [--top-p P] [--min-p M] [--seed S] [--no-cache] [--exact]
//! cargo run --release --example generate -- --score FILE [--checkpoint DIR] [--exact]
//! ```
//!
//! - The continuation streams to standard output as it is written, character by character;
//!   the prompt is not repeated. Everything else (what was loaded, the speed) goes to
//!   standard error.
//! - The prompt goes through the model in one pass that fills the KV cache (the prefill);
//!   then each character is one step through the cache. `--no-cache` runs the whole window
//!   through the model at every step instead, more slowly: with `--exact` the same text; on
//!   the fast path the same up to `f32` rounding, which can, rarely, change a draw.
//! - The model sees at most its context (64 characters for chapter 15's): when the text
//!   outgrows it, the window starts again from its last half (one prefill), so writing stays
//!   fast however long the text.
//! - `--temperature 0` is greedy decoding; `--top-k`, `--top-p` and `--min-p` filter the
//!   candidates (in that order, after the temperature), as chapter 16 explains.
//! - `--score FILE` prints the model's mean cross-entropy per character of FILE, in nats,
//!   instead of writing: every character after the first predicted from the ones before it
//!   in its window (the text cut into windows of the model's context, side by side, as
//!   chapter 15's validation loss is measured). Lower is better; it is how to compare two
//!   checkpoints on the same text.
//! - The fast `f32` path is the default; `--exact` runs the exact path, whose text and
//!   scores have the same bits on every machine (what the book quotes).
//!
//! Errors (a checkpoint missing, corrupt or of another shape; a prompt or a file with
//! characters the model's vocabulary lacks, each named with where it is; a file that is not
//! UTF-8 text or too short) stop the tool with one line `error: ...` and exit code 1; a bad
//! command line (a setting out of its range included) with clap's message and 2. A reader that closes the pipe (`| head -c 100`)
//! ends the run quietly.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use attention::gpt::data::CharVocab;
use attention::gpt::generate::Writer;
use attention::gpt::kernels::{Exact, Fast, Kernels};
use attention::gpt::sample::Sampler;
use attention::gpt::train::evaluate;
use attention::gpt::weights::Gpt;
use clap::Parser;
use rand::{SeedableRng, rngs::StdRng};

/// Writes with a character-level GPT checkpoint (chapter 15's by default), or scores a text.
#[derive(Parser, Debug)]
#[command(version, after_help = AFTER_HELP)]
pub struct Cli {
    /// A checkpoint in GPT-2's layout (config.json, model.safetensors, vocab.json), as
    /// the train tool saves it [default: chapter 15's committed model].
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// The text to go on from, at least one character [default: a newline, where a speech
    /// starts].
    #[arg(long, default_value = "\n", hide_default_value = true)]
    prompt: String,
    /// Characters to write.
    #[arg(long, value_name = "N", default_value_t = 500)]
    tokens: usize,
    /// Scores divided by T before the softmax (T ≥ 0); 0 is greedy (the most probable
    /// character).
    #[arg(long, value_name = "T", default_value_t = 1.0, allow_negative_numbers = true,
          value_parser = in_range("T", 0.0, f64::INFINITY, false))]
    temperature: f64,
    /// Draw only from the K most probable characters.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    top_k: Option<u64>,
    /// Draw only from the most probable characters whose probabilities first reach P
    /// (0 < P ≤ 1).
    #[arg(long, value_name = "P", allow_negative_numbers = true,
          value_parser = in_range("P", 0.0, 1.0, true))]
    top_p: Option<f64>,
    /// Draw only from the characters at least M times as probable as the most probable one
    /// (0 ≤ M ≤ 1).
    #[arg(long, value_name = "M", allow_negative_numbers = true,
          value_parser = in_range("M", 0.0, 1.0, false))]
    min_p: Option<f64>,
    /// Seeds the draws: the same seed, the same text.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Run the whole context through the model at every step (for comparison).
    #[arg(long)]
    no_cache: bool,
    /// The exact path: the same bits on every machine, more slowly.
    #[arg(long)]
    exact: bool,
    /// Print the mean cross-entropy per character of FILE (nats) instead of writing.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tokens", "temperature", "top_k", "top_p", "min_p", "seed", "no_cache", "prompt"])]
    score: Option<PathBuf>,
}

const AFTER_HELP: &str = "Examples:\n  \
    cargo run --release --example generate -- --prompt $'ROMEO:\\n' --tokens 200\n  \
    cargo run --release --example generate -- --temperature 0.8 --top-p 0.9 --seed 3\n  \
    cargo run --release --example generate -- --checkpoint my_run --score my_text.txt\n\n\
    Exit codes: 0 done (or standard output closed); 1 bad data (checkpoint, prompt or file); \
    2 bad usage.";

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let result = run(&cli, &mut std::io::stdout(), &mut std::io::stderr());
    match result {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// The whole run: the continuation (or the score) to `out`, the rest to `log`; the exit
/// code, or the one-line error.
pub fn run(cli: &Cli, out: &mut dyn Write, log: &mut dyn Write) -> Result<u8, String> {
    let sampler = Sampler {
        temperature: cli.temperature,
        top_k: cli.top_k.map(|k| k as usize),
        top_p: cli.top_p,
        min_p: cli.min_p,
    };
    sampler.validate().map_err(|e| e.to_string())?; // clap checked the ranges already
    let dir = cli.checkpoint.clone().unwrap_or_else(pretrained::shakespeare_dir);
    let (gpt, vocab) = pretrained::gpt2::load(&dir).map_err(|e| e.to_string())?;
    let result = match (&cli.score, cli.exact) {
        (Some(file), true) => score(&gpt, &Exact, &vocab, file, out),
        (Some(file), false) => score(&gpt, &Fast, &vocab, file, out),
        (None, true) => write(cli, &dir, &gpt, &Exact, &vocab, &sampler, out, log),
        (None, false) => write(cli, &dir, &gpt, &Fast, &vocab, &sampler, out, log),
    };
    match result {
        Err(Failure::Closed) => Ok(0), // the reader stopped reading: a quiet end
        Err(Failure::Message(message)) => Err(message),
        Ok(()) => Ok(0),
    }
}

/// A parser for a number from `low` to `high` (`low` itself excluded if `open`), finite.
fn in_range(
    name: &'static str,
    low: f64,
    high: f64,
    open: bool,
) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |text| {
        let x: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
        let above = if open { x > low } else { x >= low };
        if above && x <= high && x.is_finite() {
            return Ok(x);
        }
        let (bracket, top) =
            if high.is_finite() { ("]", high.to_string()) } else { (")", "∞".into()) };
        Err(format!(
            "{name} = {x} is out of its range {}{low}, {top}{bracket}",
            if open { "(" } else { "[" }
        ))
    }
}

/// Why a run stopped early.
enum Failure {
    /// Standard output was closed.
    Closed,
    /// An error, as one line.
    Message(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Message(message)
    }
}

/// Writes `text` to `out` and flushes it; a closed pipe is [`Failure::Closed`].
fn emit(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(Failure::Closed),
        Err(e) => Err(Failure::Message(format!("cannot write to standard output: {e}"))),
    }
}

/// Streams `--tokens` characters after the prompt.
#[allow(clippy::too_many_arguments)]
fn write<K: Kernels<f32>>(
    cli: &Cli,
    dir: &Path,
    gpt: &Gpt<f32>,
    kernels: &K,
    vocab: &CharVocab,
    sampler: &Sampler,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> Result<(), Failure> {
    if cli.prompt.is_empty() {
        return Err("--prompt is empty: the model needs at least one character to go on from"
            .to_string()
            .into());
    }
    let prompt = encode(vocab, &cli.prompt, "--prompt")?;
    let c = &gpt.config;
    let _ = writeln!(
        log,
        "{}: {} blocks of {} heads, d_model = {}, {} characters of context, {} known",
        dir.display(),
        c.n_layer,
        c.n_head,
        c.n_embd,
        c.block_size,
        vocab.len()
    );
    let started = Instant::now();
    let mut writer =
        Writer::new(gpt, kernels, &prompt, !cli.no_cache).map_err(|e| e.to_string())?;
    let mut rng = StdRng::seed_from_u64(cli.seed);
    for _ in 0..cli.tokens {
        let token = writer.next(sampler, &mut rng).map_err(|e| e.to_string())?;
        emit(out, &vocab.decode(&[token]))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let _ = writeln!(
        log,
        "\n{} characters in {seconds:.2} s ({:.0} a second; {}, {} path)",
        cli.tokens,
        cli.tokens as f64 / seconds,
        if cli.no_cache { "no cache" } else { "through the KV cache" },
        if cli.exact { "exact" } else { "fast" }
    );
    Ok(())
}

/// Prints the mean cross-entropy per character of `file`, in nats.
fn score<K: Kernels<f32>>(
    gpt: &Gpt<f32>,
    kernels: &K,
    vocab: &CharVocab,
    file: &Path,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let shown = file.display();
    let bytes = std::fs::read(file).map_err(|e| format!("{shown}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        format!("{shown}: not UTF-8 text (byte {} is not valid)", e.utf8_error().valid_up_to())
    })?;
    let ids = encode(vocab, &text, &shown.to_string())?;
    if ids.len() < 2 {
        let n = ids.len();
        return Err(format!(
            "{shown}: {n} characters; at least 2 are needed (one to predict)"
        )
        .into());
    }
    let loss = evaluate(gpt, kernels, &ids, 16).map_err(|e| e.to_string())?;
    emit(out, &format!("{loss:.4}\n"))
}

/// The ids of `text`, or an error naming every character the vocabulary lacks and where it
/// is (line and column, counting characters from 1; the first five places of each).
fn encode(vocab: &CharVocab, text: &str, what: &str) -> Result<Vec<usize>, String> {
    let known: std::collections::HashMap<char, usize> =
        vocab.chars().iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let mut ids = Vec::with_capacity(text.len());
    let mut missing: Vec<(char, Vec<(usize, usize)>)> = Vec::new();
    let (mut line, mut column) = (1, 0);
    for c in text.chars() {
        column += 1;
        match known.get(&c) {
            Some(&id) => ids.push(id),
            None => match missing.iter_mut().find(|(m, _)| *m == c) {
                Some((_, places)) => places.push((line, column)),
                None => missing.push((c, vec![(line, column)])),
            },
        }
        if c == '\n' {
            (line, column) = (line + 1, 0);
        }
    }
    if missing.is_empty() {
        return Ok(ids);
    }
    let others = missing.len().saturating_sub(5);
    let named: Vec<String> = missing
        .iter()
        .take(5)
        .map(|(c, places)| {
            let shown: Vec<String> =
                places.iter().take(5).map(|(l, col)| format!("{l}:{col}")).collect();
            let more = if places.len() > 5 {
                format!(" and {} more", places.len() - 5)
            } else {
                String::new()
            };
            format!("{c:?} at {}{more}", shown.join(", "))
        })
        .collect();
    let others = match others {
        0 => String::new(),
        1 => "; and 1 other character".into(),
        n => format!("; and {n} other characters"),
    };
    Err(format!(
        "{what}: the model's vocabulary ({} characters) has no {}{others} (line:column)",
        vocab.len(),
        named.join("; ")
    ))
}
