//! The FlashAttention-2 backward (`attention::tiled_grad`) against the plain backward
//! (`attention::grad`): memory and time, `f32`, 8 heads of `d = 64`, no mask.
//!
//! ```text
//! cargo run --release --example flash_backward                  # the memory table
//! cargo run --release --example flash_backward -- --timings     # and the times, 2 threads
//! cargo run --release --example flash_backward -- --timings --lengths 1024 --runs 3
//! cargo run --release --example flash_backward -- --tiles 64x128 --timings
//! cargo run --release --example flash_backward -- --help
//! ```
//!
//! Memory is counted, not estimated: this program's global allocator keeps the number of
//! bytes allocated and its peak, and each backward runs once with the peak reset before it.
//! The table gives what each backward holds beyond its inputs and the gradients it returns,
//! counting what it kept from the forward: the plain backward's `P`, the tiled one's `lse`.
//! The model beside it is the formula: the plain backward holds `P`, `dP` and `dS`, `3·L²`
//! numbers per head; the tiled one `lse` and `D`, `2·L` per head, and two tiles per thread
//! (`Tiles::backward_scratch_len`). What the count finds beyond the model: for the plain
//! backward, one more `L²` per head, the row-major copy `exact::matmul` makes of a transposed
//! operand (`dSᵀ`, while `P`, `dP` and `dS` are alive); for the tiled one, matrixmultiply's
//! packing buffers, a fraction of a MiB that does not grow with `L`.
//!
//! The times (`--timings`) are this machine's: the median of `--runs` after one warm-up, on a
//! pool of `--threads` threads (the plain backward, `exact::matmul`, uses one of them), with
//! the tiled forward for scale. They are measurements, not part of any test.

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::peak_extra;
#[path = "common/timing.rs"]
mod timing;
#[allow(dead_code)] // `print`: this example prints whole lines
#[path = "common/stdout.rs"]
mod stdout;

use std::error::Error;

use attention::grad::sdpa_backward;
use attention::sdpa::sdpa_batched;
use attention::tiled::{Masking, Tiles, tiled_sdpa_batched};
use attention::tiled_grad::{tiled_sdpa_backward, tiled_sdpa_with_lse};
use ndarray::Array4;
use rand::{Rng, SeedableRng, rngs::StdRng};


const HEADS: usize = 8;
const D: usize = 64;
const LENGTHS: [usize; 2] = [1024, 4096];
const THREADS: usize = 2;
const SEED: u64 = 11;
const MIB: f64 = 1024.0 * 1024.0;
const F32: usize = std::mem::size_of::<f32>();

/// `(1, HEADS, l, D)` with entries in `[-1, 1)`.
fn random(l: usize, rng: &mut StdRng) -> Array4<f32> {
    Array4::from_shape_simple_fn((1, HEADS, l, D), || rng.random_range(-1.0..1.0))
}

/// What the formula says each backward holds beyond its inputs and its gradients, in bytes:
/// plain `P`, `dP`, `dS`; tiled `lse` and `D` per head and two tiles per thread.
fn model_bytes(l: usize, tiles: Tiles, threads: usize) -> (usize, usize) {
    let plain = 3 * HEADS * l * l * F32;
    let tiled = 2 * HEADS * l * F32 + threads * tiles.backward_scratch_len() * F32;
    (plain, tiled)
}

/// The command line.
#[derive(clap::Parser, Debug)]
#[command(about = "The FlashAttention-2 backward against the plain backward: memory and time \
                   (f32, 8 heads of d = 64)")]
struct Cli {
    /// Also time both backwards (and the tiled forward) on this machine
    #[arg(long)]
    timings: bool,
    /// The sequence lengths
    #[arg(long, value_name = "L,L,...", value_delimiter = ',', default_values_t = LENGTHS,
        value_parser = at_least_one)]
    lengths: Vec<usize>,
    /// Timed runs per case, after one warm-up; the median is reported
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = at_least_one)]
    runs: usize,
    /// Threads of the pool both run on
    #[arg(long, value_name = "N", default_value_t = THREADS, value_parser = at_least_one)]
    threads: usize,
    /// Tiles of the tiled path, BLOCK_Q×TILE_K (default 128×256)
    #[arg(long, value_name = "BQxBK", value_parser = parse_tiles)]
    tiles: Option<Tiles>,
}

/// A count or a length on the command line: a whole number, at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number, at least 1".into()),
    }
}

/// `--tiles`: `BLOCK_QxTILE_K`, both at least 1.
fn parse_tiles(text: &str) -> Result<Tiles, String> {
    let err = || format!("expected BLOCK_QxTILE_K, e.g. 128x256, not {text:?}");
    let (bq, bk) = text.split_once('x').ok_or_else(err)?;
    let (block_q, tile_k) = (bq.parse().map_err(|_| err())?, bk.parse().map_err(|_| err())?);
    if block_q == 0 || tile_k == 0 {
        return Err(err());
    }
    Ok(Tiles { block_q, tile_k })
}

fn main() -> Result<(), Box<dyn Error>> {
    use clap::Parser;
    let cli = Cli::parse();
    let tiles = cli.tiles.unwrap_or_default();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(cli.threads).build()?;
    let mut rng = StdRng::seed_from_u64(SEED);
    stdout::line(format_args!(
        "f32, {HEADS} heads of d = {D}, no mask; tiles {}×{}, {} thread(s)",
        tiles.block_q, tiles.tile_k, cli.threads
    ));
    stdout::line(format_args!("MiB held beyond the inputs and the gradients (model; measured peak):"));
    stdout::line(format_args!("     L  gradients     plain: model  measured     tiled: model  measured"));
    let mut times = Vec::new();
    for &l in &cli.lengths {
        let (q, k, v, grad_o) =
            (random(l, &mut rng), random(l, &mut rng), random(l, &mut rng), random(l, &mut rng));
        let masking = Masking::All;
        let grads_bytes = (q.len() + k.len() + v.len()) * F32;
        let (plain_model, tiled_model) = model_bytes(l, tiles, cli.threads);

        // Plain: P from the forward (kept), then dP, dS and what the products copy.
        let p = pool.install(|| sdpa_batched(&q, &k, &v, None))?.weights;
        let run_plain = || sdpa_backward(&q, &k, &v, &p, &grad_o).expect("shapes fit");
        let (_, plain_peak) = pool.install(|| peak_extra(run_plain));
        let plain_measured = plain_peak - grads_bytes + p.len() * F32;

        // Tiled: lse from the forward (kept), then D and the tiles.
        let (out, lse) = pool.install(|| tiled_sdpa_with_lse(&q, &k, &v, masking, tiles))?;
        let run_tiled = || {
            tiled_sdpa_backward(&q, &k, &v, masking, &out, &lse, &grad_o, tiles)
                .expect("shapes fit")
        };
        pool.install(run_tiled); // the pool's threads start
        let (_, tiled_peak) = pool.install(|| peak_extra(run_tiled));
        let tiled_measured = tiled_peak - grads_bytes + lse.len() * F32;
        let mib = |bytes: usize| bytes as f64 / MIB;
        stdout::line(format_args!(
            "{l:>6} {:>10.2}     {:>12.2} {:>9.2}     {:>12.2} {:>9.2}",
            mib(grads_bytes),
            mib(plain_model),
            mib(plain_measured),
            mib(tiled_model),
            mib(tiled_measured),
        ));
        if cli.timings {
            let plain = pool.install(|| timing::median_ms(cli.runs, run_plain));
            let tiled = pool.install(|| timing::median_ms(cli.runs, run_tiled));
            let forward = pool.install(|| {
                timing::median_ms(cli.runs, || tiled_sdpa_batched(&q, &k, &v, masking, tiles))
            });
            times.push((l, plain, tiled, forward));
        }
    }
    if cli.timings {
        stdout::line(format_args!(
            "\nMedian ms of {} runs after a warm-up, {} thread(s) (the plain backward uses one):",
            cli.runs, cli.threads
        ));
        stdout::line(format_args!("     L  plain backward  tiled backward  plain/tiled  tiled forward"));
        for (l, plain, tiled, forward) in times {
            stdout::line(format_args!("{l:>6} {plain:>15.1} {tiled:>15.1} {:>12.1} {forward:>14.1}", plain / tiled));
        }
    }
    Ok(())
}
