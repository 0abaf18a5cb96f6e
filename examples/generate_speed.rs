//! Times writing with chapter 15's model shape through the KV cache and without it, for
//! prompts of 16 to 1024 characters: the numbers behind chapter 16's speed table, and the Rust
//! half of `tools/bench_generate.py` (which runs the same in PyTorch).
//!
//! ```text
//! cargo run --release --example generate_speed -- [--lengths 16,32,...] [--tokens 64] [--runs 3]
//! ```
//!
//! The model is chapter 15's (4 blocks of 4 heads, `d_model = 128`, 71 characters) with room
//! for 2048 positions instead of 64, so that prompts of up to 1024 characters fit without the
//! window starting again; its weights are random (seed 0), since the time does not depend on
//! them. For every prompt length `L` (a random text, seed `L`) and both ways, it writes
//! `--tokens` characters greedily on the fast `f32` path, from the prompt to the last
//! character (prefill included), `--runs` times taking turns after one run to warm up, and
//! prints one CSV line per length and way: `prompt,way,seconds,chars_per_second` (the median
//! run). Writing runs on one core: the products of a few rows are plain loops, and the
//! prefill's GEMMs (the `matrixmultiply` crate, without its threading) run on one thread.

use std::time::Instant;

use attention::gpt::config::GptConfig;
use attention::gpt::generate::Writer;
use attention::gpt::kernels::Fast;
use attention::gpt::sample::Sampler;
use attention::gpt::weights::Gpt;
use clap::Parser;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Times writing through the KV cache and without it, for prompts of several lengths.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// Prompt lengths in characters.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128,256,512,1024",
          value_parser = clap::value_parser!(u32).range(1..=1984))]
    lengths: Vec<u32>,
    /// Characters written after each prompt.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=64))]
    tokens: u32,
    /// Runs per length and way (the median is printed).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
}

fn main() {
    let cli = Cli::parse();
    let config = GptConfig { block_size: 2048, ..GptConfig::shakespeare(71) };
    let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0)).expect("a valid config");
    println!("prompt,way,seconds,chars_per_second");
    for &length in &cli.lengths {
        let mut rng = StdRng::seed_from_u64(length.into());
        let prompt: Vec<usize> = (0..length).map(|_| rng.random_range(0..71)).collect();
        let mut times = [vec![], vec![]];
        for run in 0..=cli.runs {
            for (way, cache) in [true, false].into_iter().enumerate() {
                let started = Instant::now();
                let mut writer = Writer::new(&gpt, &Fast, &prompt, cache).expect("a prompt");
                for _ in 0..cli.tokens {
                    writer.next(&Sampler::greedy(), &mut rng).expect("finite logits");
                }
                if run > 0 {
                    times[way].push(started.elapsed().as_secs_f64()); // run 0 warms up
                }
            }
        }
        for (way, name) in ["cache", "no cache"].iter().enumerate() {
            times[way].sort_by(f64::total_cmp);
            let median = times[way][times[way].len() / 2];
            println!("{length},{name},{median:.5},{:.1}", f64::from(cli.tokens) / median);
        }
    }
}
