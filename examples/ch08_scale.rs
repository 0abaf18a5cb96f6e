//! Chapter 8, *Attention at scale*: online softmax, tiles, and what the `L × L` matrix costs.
//!
//! ```text
//! cargo run --release --example ch08_scale [-- --out-dir DIR] [--timings] [--lengths 128,512] [--runs N] [--threads N]
//! cargo run --release --example ch08_scale -- --figures-only [--out-dir DIR]
//! cargo run --release --example ch08_scale -- --csv [--lengths ...] [--runs N] [--threads N]
//! cargo run --release --example ch08_scale -- --peak plain|tiled|inputs --len L
//! cargo run --release --example ch08_scale -- --help
//! ```
//!
//! The first form prints the numbers the chapter quotes (the same text goes to
//! `ch08_output.txt`), draws `ch08_causal_tiles.png` and `ch08_memory.png`, then times the plain
//! and the tiled path on this machine (`f32`, 8 heads of `d = 64`, `L` from 128 to 4096, causal
//! and not, on a thread pool of 2 by default) and prints a table. Those timings are this
//! machine's: they go to the terminal only, and with `--timings` also to
//! `ch08_time_vs_l.png` in the output directory, a figure the book does not commit.
//!
//! `--figures-only` stops after the figures and the report, before the timing sweep (what
//! `cargo xtask figures` runs: regenerating the book's figures needs no measurement).
//! `--csv` runs only the timing sweep and prints it as CSV (`tools/bench_torch.py --compare`
//! reads it). `--peak` computes one head of length `L` once (or, for `inputs`, only builds the
//! inputs) and exits, for measuring peak memory with `/usr/bin/time -v`
//! (`tools/peak_memory.sh`).

#[allow(dead_code)] // `run_chapter`: this example parses more options, with `common::parse`
mod common;
use common::stdout;
#[path = "common/timing.rs"]
mod timing;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::mask::Mask;
use attention::sdpa::{sdpa, sdpa_batched};
use attention::tiled::{Masking, Running, Tiles, causal_tile_counts, online_softmax, tiled_sdpa, tiled_sdpa_batched};
use clap::ValueEnum;
use figures::{Axis, Heatmap, LineChart, ValueRange};
use ndarray::{Array, Array2, Dimension, ShapeBuilder, arr1, arr2};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// The online-softmax worked example: one query's scores, seen one at a time.
const SCORES: [f64; 4] = [1.0, 3.0, 2.0, 5.0];
/// The values of the four keys (`d_v = 1`), for the tiled worked example.
const VALUES: [f64; 4] = [10.0, 20.0, 30.0, 40.0];
/// Heads and head width of the timing sweep (a 512-wide model with 8 heads).
const HEADS: usize = 8;
const D: usize = 64;
/// The sequence lengths of the timing sweep.
const LENGTHS: [usize; 5] = [128, 512, 1024, 2048, 4096];
/// The lengths of the memory table and figure.
const MEMORY_LENGTHS: [usize; 7] = [256, 512, 1024, 2048, 4096, 8192, 16384];
/// The tile picture: `L` and square tiles of 128.
const PICTURE_L: usize = 1024;
const PICTURE_TILE: usize = 128;
/// Threads the tiled path runs on in the memory model and, by default, in the timings.
const THREADS: usize = 2;
/// Seed of the random inputs.
const SEED: u64 = 8;
const MIB: f64 = 1024.0 * 1024.0;

/// Bytes of `f32` the plain and the tiled path need beyond their inputs, for one head of
/// length `l` and width `d`, as a model (what the allocations hold, not what a process
/// measures): the plain path holds the scores and the weights (two `L × L` matrices: softmax
/// writes a new array) and the output; the tiled path, per thread, one scratch (a scores tile,
/// the block's queries and its output accumulator, with 8 spare rows and rows padded to 16
/// columns, and a running `(m, l)` pair per row), plus the keys packed once (`L × d`, padded
/// per tile to 16 keys; the values are used in place when `d` is a multiple of 16) and the
/// output.
fn extra_bytes(l: usize, d: usize) -> (usize, usize) {
    let f32_bytes = std::mem::size_of::<f32>();
    let t = Tiles::default();
    let output = l * d * f32_bytes;
    let plain = 2 * l * l * f32_bytes + output;
    let rows = t.block_q + 8;
    let scratch = rows * (t.tile_k.next_multiple_of(16) + d + d.next_multiple_of(16)) + t.block_q * 2;
    let packed_keys = l.div_ceil(t.tile_k) * t.tile_k.next_multiple_of(16) * d;
    (plain, (THREADS * scratch + packed_keys) * f32_bytes + output)
}

/// Everything the example prints before timing anything, as one text (also written to
/// `ch08_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    writeln!(out, "Online softmax of {SCORES:?}, one score at a time:")?;
    writeln!(out, "  x      m       l")?;
    let mut run = Running::new();
    for x in SCORES {
        run.push(x);
        writeln!(out, "  {x:<4} {:<4}  {:.4}", run.max, run.sum)?;
    }
    writeln!(out, "weights exp(x − m) / l = {:.4}", online_softmax(&arr1(&SCORES)))?;
    writeln!(out)?;

    // The same row as two tiles of two keys, with values: the running output o as well.
    writeln!(out, "Tiled, tiles of 2 keys, values {VALUES:?}:")?;
    let (mut m, mut l, mut o) = (f64::NEG_INFINITY, 0.0, 0.0);
    for (tile, (x, v)) in SCORES.chunks(2).zip(VALUES.chunks(2)).enumerate() {
        let m_new = x.iter().fold(m, |a, &b| a.max(b));
        let rescale = (m - m_new).exp();
        let p: Vec<f64> = x.iter().map(|&s| (s - m_new).exp()).collect();
        l = l * rescale + p.iter().sum::<f64>();
        o = o * rescale + p.iter().zip(v).map(|(p, v)| p * v).sum::<f64>();
        m = m_new;
        writeln!(out, "  tile {tile}: m = {m}, rescale {rescale:.4}, l = {l:.4}, o = {o:.4}")?;
    }
    let q = arr2(&[[1.0]]);
    let k = arr2(&[[SCORES[0]], [SCORES[1]], [SCORES[2]], [SCORES[3]]]);
    let v = arr2(&[[VALUES[0]], [VALUES[1]], [VALUES[2]], [VALUES[3]]]);
    let plain = sdpa(&q, &k, &v, None)?.output[[0, 0]];
    let tiled = tiled_sdpa(&q, &k, &v, Masking::All, Tiles { block_q: 1, tile_k: 2 })?[[0, 0]];
    writeln!(out, "output o / l = {:.4}; sdpa gives {plain:.4}, tiled_sdpa {tiled:.4}", o / l)?;
    writeln!(out)?;

    let tiles = Tiles { block_q: PICTURE_TILE, tile_k: PICTURE_TILE };
    let counts = causal_tile_counts(PICTURE_L, PICTURE_L, tiles)?;
    let visited = counts.iter().filter(|&&n| n > 0).count();
    let partial = counts.iter().filter(|&&n| n > 0 && n < PICTURE_TILE * PICTURE_TILE).count();
    let visible: usize = counts.sum();
    writeln!(
        out,
        "Causal, L = {PICTURE_L}, tiles {PICTURE_TILE} × {PICTURE_TILE}: {visited} of {} tiles computed, {partial} of them partly masked;",
        counts.len()
    )?;
    writeln!(
        out,
        "  {visible} visible scores of {} ({:.1}%), {} computed ({:.1}%)",
        PICTURE_L * PICTURE_L,
        100.0 * visible as f64 / (PICTURE_L * PICTURE_L) as f64,
        visited * PICTURE_TILE * PICTURE_TILE,
        100.0 * visited as f64 / counts.len() as f64
    )?;
    writeln!(out)?;

    let t = Tiles::default();
    writeln!(
        out,
        "Memory beyond the inputs, a model, f32, one head, d = {D} (tiled: {} × {} tiles, {THREADS} threads):",
        t.block_q, t.tile_k
    )?;
    writeln!(out, "      L   inputs MiB    plain MiB   tiled MiB")?;
    for l in MEMORY_LENGTHS {
        let (plain, tiled) = extra_bytes(l, D);
        let inputs = 3 * l * D * std::mem::size_of::<f32>();
        writeln!(
            out,
            "  {l:>5} {:>12.2} {:>12.2} {:>11.2}",
            inputs as f64 / MIB,
            plain as f64 / MIB,
            tiled as f64 / MIB
        )?;
    }
    Ok(out)
}

/// A chart against the sequence length, both axes logarithmic.
fn against_l(title: String, y_label: &str) -> LineChart {
    LineChart::new().title(title).x_label("sequence length L").y_label(y_label).x_axis(Axis::Log2).y_axis(Axis::Log10)
}

/// Draws this chapter's figures into `out_dir` and writes the report; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let tiles = Tiles { block_q: PICTURE_TILE, tile_k: PICTURE_TILE };
    let counts = causal_tile_counts(PICTURE_L, PICTURE_L, tiles)?;
    let fraction = counts.mapv(|n| n as f64 / (PICTURE_TILE * PICTURE_TILE) as f64);
    let skipped = counts.mapv(|n| n == 0);
    let range = |i: usize| format!("{}–{}", i * PICTURE_TILE, (i + 1) * PICTURE_TILE - 1);
    let rows: Vec<String> = (0..counts.nrows()).map(range).collect();
    let cols: Vec<String> = (0..counts.ncols()).map(range).collect();
    let tiles_png = out_dir.join("ch08_causal_tiles.png");
    Heatmap::new(&fraction)
        .row_labels(&rows)
        .col_labels(&cols)
        .masked(&skipped)
        .mask_mark("skip")
        .mask_legend("skipped")
        .row_title("query block")
        .col_title("key tile")
        .title(format!("Causal attention, L = {PICTURE_L}: the tiles each query block computes"))
        .colorbar_label("fraction of the tile's scores visible")
        .range(ValueRange::Fixed(0.0, 1.0))
        .save(&tiles_png)?;

    let memory_png = out_dir.join("ch08_memory.png");
    let mib = |f: fn(usize) -> f64| MEMORY_LENGTHS.iter().map(move |&l| (l as f64, f(l) / MIB));
    against_l(format!("Memory beyond the inputs, a model: one head, d = {D}, f32"), "MiB")
        .series("plain: scores + weights (L × L each) + output", mib(|l| extra_bytes(l, D).0 as f64))
        .series("tiled: 2 threads' scratch + packed keys + output", mib(|l| extra_bytes(l, D).1 as f64))
        .series("the inputs Q, K, V", mib(|l| (3 * l * D * 4) as f64))
        .save(&memory_png)?;

    let text = out_dir.join("ch08_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![tiles_png, memory_png, text])
}

/// Random `f32` entries in `[-1, 1)` of the given shape.
fn random<Sh: ShapeBuilder>(shape: Sh, rng: &mut StdRng) -> Array<f32, Sh::Dim>
where
    Sh::Dim: Dimension,
{
    Array::from_shape_simple_fn(shape, || rng.random_range(-1.0..1.0))
}

/// One row of the timing table.
struct Timing {
    l: usize,
    causal: bool,
    plain_ms: f64,
    tiled_ms: f64,
}

/// Times the plain and the tiled path for every length, causal and not, on `threads` threads.
fn sweep(lengths: &[usize], runs: usize, threads: usize) -> Result<Vec<Timing>, Box<dyn Error>> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut rows = Vec::new();
    for &l in lengths {
        let shape = (1, HEADS, l, D);
        let (q, k, v) = (random(shape, &mut rng), random(shape, &mut rng), random(shape, &mut rng));
        for causal in [false, true] {
            let mask = causal.then(|| Mask::causal(l));
            let masking = if causal { Masking::Causal } else { Masking::All };
            let (plain_ms, tiled_ms) = pool.install(|| {
                let plain = timing::median_ms(runs, || sdpa_batched(&q, &k, &v, mask.as_ref()).map(|a| a.output));
                let tiled = timing::median_ms(runs, || tiled_sdpa_batched(&q, &k, &v, masking, Tiles::default()));
                (plain, tiled)
            });
            rows.push(Timing { l, causal, plain_ms, tiled_ms });
        }
    }
    Ok(rows)
}

/// Floating-point operations of attention for one head: `2·d` per score for `Q·Kᵀ` and `2·d`
/// per weight for `P·V`, over all `L²` pairs or, causal, the `L(L+1)/2` visible ones.
fn flops(l: usize, causal: bool) -> f64 {
    let pairs = if causal { l * (l + 1) / 2 } else { l * l };
    (4 * D * HEADS * pairs) as f64
}

/// This machine's matrix-multiply rate on one thread, in GFLOP/s: ndarray's `general_mat_mul`
/// (matrixmultiply) on the shape of one tile product, `(128 × 64) · (64 × 256)`, best of 5.
fn gemm_gflops() -> f64 {
    let mut rng = StdRng::seed_from_u64(SEED);
    let (a, b): (Array2<f32>, Array2<f32>) = (random((128, D), &mut rng), random((D, 256), &mut rng));
    let mut c = Array2::<f32>::zeros((128, 256));
    let reps = 2000;
    let best = (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..reps {
                ndarray::linalg::general_mat_mul(1.0, &a, &b, 0.0, &mut c);
            }
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    (2 * 128 * D * 256 * reps) as f64 / best / 1e9
}

/// The sweep as a table, with the tiled path's rate against the GEMM rate of `threads` threads.
fn timing_table(rows: &[Timing], threads: usize, gemm: f64) -> String {
    let (cpu, features) = timing::machine();
    let simd = attention::kernel::Simd::chosen().map_or_else(|e| e.to_string(), |s| s.name().to_string());
    let mut out = format!("{cpu}: {features}; tiled inner loops: {simd}\n");
    out += &format!("f32, {HEADS} heads, d = {D}, median ms on {threads} threads (the plain path uses one)\n");
    out += &format!("GEMM on this machine: {gemm:.0} GFLOP/s per thread ({:.0} on {threads})\n", gemm * threads as f64);
    out += "     L  causal     plain     tiled   plain/tiled   tiled GFLOP/s   % of GEMM\n";
    for r in rows {
        let rate = flops(r.l, r.causal) / r.tiled_ms / 1e6;
        out += &format!(
            "{:>6}  {:<6} {:>9.2} {:>9.2}   {:>8.1}   {:>13.0}   {:>9.0}\n",
            r.l,
            if r.causal { "yes" } else { "no" },
            r.plain_ms,
            r.tiled_ms,
            r.plain_ms / r.tiled_ms,
            rate,
            100.0 * rate / (gemm * threads as f64)
        );
    }
    out
}

/// `ch08_time_vs_l.png` (not committed: the times are this machine's): ms against L, log-log,
/// with a line of slope 2 (time ∝ L²) through the tiled path's longest run.
fn draw_timings(rows: &[Timing], path: &Path) -> Result<(), Box<dyn Error>> {
    let series = |causal: bool, pick: fn(&Timing) -> f64| {
        rows.iter().filter(move |r| r.causal == causal).map(move |r| (r.l as f64, pick(r))).collect::<Vec<_>>()
    };
    let anchor = rows.iter().filter(|r| !r.causal).max_by_key(|r| r.l).ok_or("no timings")?;
    let slope: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| !r.causal)
        .map(|r| (r.l as f64, anchor.tiled_ms * (r.l as f64 / anchor.l as f64).powi(2)))
        .collect();
    against_l(format!("Attention time on this machine, f32, {HEADS} heads, d = {D}"), "median ms")
        .series("plain", series(false, |r| r.plain_ms))
        .series("plain, causal", series(true, |r| r.plain_ms))
        .series("tiled", series(false, |r| r.tiled_ms))
        .series("tiled, causal", series(true, |r| r.tiled_ms))
        .series("slope 2: time ∝ L²", slope)
        .save(path)?;
    Ok(())
}

/// `--peak`: one head of length `l`, `d = 64`, computed once by `what` (the tiled path on a
/// pool of `THREADS` threads) or, for `inputs`, not at all, for `/usr/bin/time -v`.
fn peak(what: Peak, l: usize) -> Result<(), Box<dyn Error>> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let (q, k, v): (Array2<f32>, Array2<f32>, Array2<f32>) = (
        random((l, D), &mut rng),
        random((l, D), &mut rng),
        random((l, D), &mut rng),
    );
    let inputs_mib = (q.len() + k.len() + v.len()) as f64 * 4.0 / MIB;
    let output = match what {
        Peak::Plain => sdpa(&q, &k, &v, None)?.output,
        Peak::Tiled => {
            // On a pool of THREADS, as the memory model counts (one scratch per thread).
            let pool = rayon::ThreadPoolBuilder::new().num_threads(THREADS).build()?;
            pool.install(|| tiled_sdpa(&q, &k, &v, Masking::All, Tiles::default()))?
        }
        Peak::Inputs => Array2::zeros((l, D)),
    };
    let name = what
        .to_possible_value()
        .expect("no variant is skipped")
        .get_name()
        .to_string();
    stdout::line(format_args!(
        "peak {name}: L = {l}, d = {D}, inputs {inputs_mib:.2} MiB, output sum {:.4}",
        output.sum()
    ));
    Ok(())
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 8, Attention at scale: online softmax, tiles, and what the L × L matrix costs.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch08_output.txt), draws \
    ch08_causal_tiles.png and ch08_memory.png into book/img/ (or --out-dir), then times the \
    plain and the tiled path on this machine (f32, 8 heads of d = 64, causal and not) and \
    prints a table; those timings are this machine's and not part of the book.";

/// The command line.
#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    output: common::Output,
    /// Also draw this machine's timings, ch08_time_vs_l.png, into the output directory (a
    /// figure the book does not commit)
    #[arg(long)]
    timings: bool,
    /// Only run the timing sweep and print it as CSV (what tools/bench_torch.py --compare
    /// reads)
    #[arg(long, conflicts_with_all = ["timings", "figures_only"])]
    csv: bool,
    /// The sequence lengths of the timing sweep
    #[arg(long, value_name = "L,L,...", value_delimiter = ',', default_values_t = LENGTHS,
        value_parser = at_least_one)]
    lengths: Vec<usize>,
    /// Timed runs per case, after one warm-up; the median is reported
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = at_least_one)]
    runs: usize,
    /// The number of threads of the tiled path's pool
    #[arg(long, value_name = "N", default_value_t = THREADS, value_parser = at_least_one)]
    threads: usize,
    /// Compute one head of length --len once with this path (inputs: only build Q, K, V)
    /// and exit, for measuring peak memory with /usr/bin/time -v (tools/peak_memory.sh)
    #[arg(long, value_enum, conflicts_with_all = ["csv", "timings", "figures_only"])]
    peak: Option<Peak>,
    /// The sequence length for --peak
    #[arg(long, value_name = "L", default_value_t = 4096, requires = "peak",
        value_parser = at_least_one)]
    len: usize,
}

/// A count or a length on the command line: a whole number, at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number, at least 1".into()),
    }
}

/// What `--peak` computes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Peak {
    /// sdpa: the scores and the weights, L × L each
    Plain,
    /// tiled_sdpa: tiles only
    Tiled,
    /// nothing: the baseline, the program and its inputs
    Inputs,
}

fn main() -> Result<(), Box<dyn Error>> {
    let cli: Cli = common::parse(env!("CARGO_CRATE_NAME"), ABOUT);
    let (runs, threads) = (cli.runs, cli.threads);
    if let Some(what) = cli.peak {
        return peak(what, cli.len);
    }
    if cli.csv {
        stdout::line(format_args!("L,causal,plain_ms,tiled_ms"));
        for r in sweep(&cli.lengths, runs, threads)? {
            stdout::line(format_args!("{},{},{:.3},{:.3}", r.l, r.causal, r.plain_ms, r.tiled_ms));
        }
        return Ok(());
    }
    let dir = cli.output.dir()?;
    common::render_into(&dir, render_figures)?;
    if cli.output.figures_only {
        return Ok(());
    }
    stdout::line(format_args!("\nTiming on this machine ({runs} runs after one warm-up each; about half a minute on 2 cores):"));
    let rows = sweep(&cli.lengths, runs, threads)?;
    stdout::print(format_args!("{}", timing_table(&rows, threads, gemm_gflops())));
    if cli.timings {
        let path = dir.join("ch08_time_vs_l.png");
        draw_timings(&rows, &path)?;
        stdout::line(format_args!(
            "wrote {} (this machine's timings; not part of the book)",
            path.display()
        ));
    }
    Ok(())
}
