//! Chapter 16's experiment on positions: chapter 15's model trained with each way of giving
//! positions (none, learned, sinusoidal, RoPE, ALiBi) and the same budget, then measured on
//! the validation text at its training length (64) and beyond it (128, 256), RoPE also with
//! the three ways of stretching its angles without training again.
//!
//! ```text
//! cargo run --release --example positions -- train [--out DIR] [--seeds 1,2,3] [--steps 2000]
//! cargo run --release --example positions -- evaluate [--out DIR] > examples/data/ch16_positions.csv
//! ```
//!
//! - `train` runs the `train` tool once per kind of positions and seed, each into
//!   `DIR/KIND-seed-S` (default `target/ch16/positions`), with everything else as chapter
//!   15's run (nanoGPT's configuration, the Shakespeare corpus). A run already finished is
//!   skipped, so an interrupted experiment goes on where it stopped (a run cut short starts
//!   again from its last checkpoint).
//! - `evaluate` prints one CSV line per run, context and scaling:
//!   `positions,scaling,seed,context,val_loss,loss_0_63,loss_64_127,loss_128_255`: the
//!   validation loss (nats per character) over the whole validation text cut into windows of
//!   `context` characters side by side, as chapter 15 measures it, on the fast path; then
//!   the mean loss at positions 0–63, 64–127 and 128–255 of the whole windows (where the
//!   context has them): past 63 is where a model reads beyond its training length, and a
//!   longer window's lower mean can come from its early positions alone. Learned positions have no vector past 64:
//!   their longer contexts are left out. RoPE's scalings (`linear`, `ntk`, `llama3` with
//!   Llama 3.1's factors 1 and 4) stretch by `context / 64`.

#[allow(dead_code)]
#[path = "train.rs"]
mod train;

#[allow(dead_code)] // the module's other printers serve the chapter examples
#[path = "common/stdout.rs"]
mod stdout;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicUsize;

use attention::gpt::data::train_and_validation;
use attention::gpt::kernels::Fast;
use attention::gpt::positions::{Positions, RopeScaling};
use attention::gpt::train::evaluate;
use attention::gpt::weights::Gpt;
use clap::{Parser, Subcommand};
use ndarray::{Array2, s};

/// Chapter 16's experiment: the same model trained with each kind of positions.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    what: What,
    /// Where the runs are.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_OUT, global = true)]
    out: PathBuf,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Train every kind of positions with every seed (runs already done are skipped).
    Train {
        /// Seeds, one run of each kind per seed.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
        seeds: Vec<u64>,
        /// Optimizer steps per run.
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
        steps: u32,
    },
    /// Print the validation losses of every run found, as CSV.
    Evaluate,
}

const DEFAULT_OUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/ch16/positions");
const CONTEXTS: [usize; 3] = [64, 128, 256];

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.what {
        What::Train { seeds, steps } => train_all(&cli.out, seeds, *steps),
        What::Evaluate => evaluate_all(&cli.out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

fn run_dir(out: &Path, positions: Positions, seed: u64) -> PathBuf {
    out.join(format!("{}-seed-{seed}", positions.name()))
}

/// Trains every run not finished yet.
fn train_all(out: &Path, seeds: &[u64], steps: u32) -> Result<(), String> {
    for &seed in seeds {
        for positions in Positions::all() {
            let dir = run_dir(out, positions, seed);
            let state = std::fs::read_to_string(dir.join("trainer_state.json")).ok();
            let done = state.as_deref().and_then(|s| {
                let v: serde_json::Value = serde_json::from_str(s).ok()?;
                Some(v["step"].as_u64()? >= u64::from(steps))
            });
            let dir_arg = dir.to_string_lossy().into_owned();
            let (steps_arg, seed_arg) = (steps.to_string(), seed.to_string());
            let mut args = vec!["train", "--steps", &steps_arg, "--sample", "0"];
            args.extend(["--eval-every", &steps_arg]);
            match done {
                Some(true) => {
                    eprintln!("{}: done already", dir.display());
                    continue;
                }
                Some(false) => args.extend(["--resume", &dir_arg]),
                None => args.extend([
                    "--out",
                    &dir_arg,
                    "--seed",
                    &seed_arg,
                    "--positions",
                    positions.name(),
                ]),
            }
            eprintln!("{}: training", dir.display());
            let cli = <train::Cli as Parser>::try_parse_from(&args).map_err(|e| e.to_string())?;
            match train::run(&cli, &AtomicUsize::new(0))? {
                0 => {}
                code => {
                    return Err(format!("{}: the train tool stopped with {code}", dir.display()));
                }
            }
        }
    }
    Ok(())
}

/// One CSV line per run, context and scaling.
fn evaluate_all(out: &Path) -> Result<(), String> {
    let corpus = std::fs::read_to_string(train::DEFAULT_CORPUS)
        .map_err(|e| format!("{}: {e}", train::DEFAULT_CORPUS))?;
    stdout::line("positions,scaling,seed,context,val_loss,loss_0_63,loss_64_127,loss_128_255");
    let mut found = 0;
    for positions in Positions::all() {
        for seed in 0..100 {
            let dir = run_dir(out, positions, seed);
            if !dir.join("config.json").exists() {
                continue;
            }
            found += 1;
            let (gpt, vocab) = pretrained::gpt2::load(&dir).map_err(|e| e.to_string())?;
            let ids = vocab.encode(&corpus).map_err(|e| e.to_string())?;
            let validation = train_and_validation(&ids).1;
            for context in CONTEXTS {
                let factor = context as f64 / gpt.config.block_size as f64;
                let mut scalings = vec![("none", RopeScaling::None)];
                if matches!(positions, Positions::Rope { .. }) && factor > 1.0 {
                    scalings.extend([
                        ("linear", RopeScaling::Linear { factor }),
                        ("ntk", RopeScaling::NtkAware { factor }),
                        (
                            "llama3",
                            RopeScaling::Llama3 {
                                factor,
                                low_freq_factor: 1.0,
                                high_freq_factor: 4.0,
                                original: gpt.config.block_size,
                            },
                        ),
                    ]);
                }
                for (name, scaling) in scalings {
                    let Ok(mut longer) = gpt.with_context(context) else {
                        continue; // learned positions stop at the training length
                    };
                    if let Positions::Rope { base, .. } = positions {
                        longer.config.positions = Positions::Rope { base, scaling };
                    }
                    let loss =
                        evaluate(&longer, &Fast, validation, 16).map_err(|e| e.to_string())?;
                    let by_position = losses_by_position(&longer, validation)?;
                    let buckets: Vec<String> = [0..64, 64..128, 128..256]
                        .into_iter()
                        .map(|r| match by_position.get(r.clone()) {
                            Some(part) => {
                                format!("{:.4}", part.iter().sum::<f64>() / part.len() as f64)
                            }
                            None => String::new(),
                        })
                        .collect();
                    let (kind, buckets) = (positions.name(), buckets.join(","));
                    stdout::line(format!("{kind},{name},{seed},{context},{loss:.4},{buckets}"));
                }
            }
        }
    }
    if found == 0 {
        return Err(format!("{}: no runs; train them first", out.display()));
    }
    Ok(())
}

/// The mean loss at each position `0..T` of the windows of `T = block_size` characters that
/// `ids` holds whole, side by side (the rest left out), on the fast path, windows computed
/// 16 at a time on every core.
fn losses_by_position(gpt: &Gpt<f32>, ids: &[usize]) -> Result<Vec<f64>, String> {
    use rayon::prelude::*;
    let t = gpt.config.block_size;
    let windows: Vec<usize> = (0..(ids.len() - 1) / t).collect();
    let sums: Vec<Result<Vec<f64>, String>> = windows
        .par_chunks(16)
        .map(|group| {
            let x = Array2::from_shape_fn((group.len(), t), |(b, i)| ids[group[b] * t + i]);
            let logits = gpt.logits_with(&Fast, &x.view()).map_err(|e| e.to_string())?;
            let mut sums = vec![0.0; t];
            for (b, &w) in group.iter().enumerate() {
                for (i, sum) in sums.iter_mut().enumerate() {
                    let row = logits.slice(s![b, i, ..]);
                    let max = row.iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
                    let total: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
                    *sum += max + total.ln() - f64::from(row[ids[w * t + i + 1]]);
                }
            }
            Ok(sums)
        })
        .collect();
    let mut total = vec![0.0; t];
    for part in sums {
        total.iter_mut().zip(part?).for_each(|(a, b)| *a += b);
    }
    Ok(total.into_iter().map(|s| s / windows.len() as f64).collect())
}
