//! Chapter 14, *Attention on a GPU*: what the two kernels read, which workgroup computes which
//! tile, and how long they take.
//!
//! ```text
//! cargo run --release --example ch14_gpu [-- --out-dir DIR]
//! cargo run --release --example ch14_gpu -- --time [--lengths 256,1024] [--runs N] [--threads N] [--save FILE]
//! cargo run --release --example ch14_gpu -- --help
//! ```
//!
//! The first form needs no GPU: it prints the numbers the chapter quotes (the same text goes to
//! `ch14_output.txt`) and draws `ch14_workgroups.png` and `ch14_time_vs_l.png`. The second
//! figure is drawn from a committed measurement, `examples/data/ch14_timings.csv`, so that the
//! book's figures are the same on every machine.
//!
//! `--time` measures on this machine's Vulkan adapter (Mesa's software one runs on the CPU):
//! for 8 heads of 64 in `f32`, no mask and causal, the naive and the tiled kernel (the kernel
//! alone on the GPU's clock when the adapter has timestamp queries, and end to end with the
//! upload and the read-back) and chapter 8's tiled path on the CPU, on `--threads` threads. It
//! prints a table with the adapter's and the CPU's names; `--save FILE` also writes it in the
//! committed file's format (`--save examples/data/ch14_timings.csv` replaces the book's).

#[allow(dead_code)] // `run_chapter`: this example parses more options, with `common::parse`
mod common;
use common::stdout;
#[path = "common/timing.rs"]
mod timing;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::tiled::{Masking, Tiles, causal_tile_counts, tiled_sdpa_batched};
use figures::{Axis, Heatmap, LineChart};
use gpu::traffic::{standard, traffic};
use gpu::{B_K, B_Q, Gpu, GpuError, Kernel, MAX_D, tile_bytes};
use ndarray::{Array2, Array4};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Heads and head width of the chapter's shapes (a 512-wide model with 8 heads).
const HEADS: usize = 8;
const D: usize = 64;
/// The lengths the chapter quotes.
const QUOTED: [usize; 2] = [1024, 4096];
/// The lengths of the timing sweep.
const LENGTHS: [usize; 5] = [256, 512, 1024, 2048, 4096];
/// The picture of the grid: causal, `L = 512`.
const PICTURE_L: usize = 512;
/// WebGPU's default workgroup memory, in bytes.
const WEBGPU_DEFAULT: usize = 16 * 1024;
/// Seed of the random inputs of the timing sweep.
const SEED: u64 = 14;
const TIMINGS_CSV: &str = include_str!("data/ch14_timings.csv");
const TIMINGS_PATH: &str = "examples/data/ch14_timings.csv";
/// What the committed measurement's CPU column timed. It was measured with the kernels (commit
/// 1c5cf60), before chapter 8's packed kernels and base-2 loop (commits 18565c5, d886bbc,
/// f37e282) made that path faster; chapter 8's own table has its times now. A new `--save`
/// times the path as it is: change this line with it.
const COMMITTED_CPU: &str =
    "chapter 8's tiled path before its packed kernels (as measured with the GPU kernels)";

const ABOUT: &str = "Chapter 14, Attention on a GPU: prints what the naive and the tiled kernel read \
    from global memory and draws which workgroup computes which tile (no GPU needed), and the \
    committed measurement examples/data/ch14_timings.csv. With --time, measures both kernels on \
    this machine's Vulkan adapter and chapter 8's tiled path on its CPU.";

#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    output: common::Output,
    /// Measure on this machine instead of drawing the figures
    #[arg(long)]
    time: bool,
    /// The sequence lengths to time (comma-separated)
    #[arg(long, value_delimiter = ',', default_values_t = LENGTHS)]
    lengths: Vec<usize>,
    /// Runs per measurement, after one warm-up (the median is reported)
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Threads of the CPU's tiled path
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// With --time: also write the measurement to FILE, in the committed file's format
    #[arg(long, value_name = "FILE", requires = "time")]
    save: Option<PathBuf>,
}

/// Millions, for reads counted in floats.
fn millions(n: u64) -> f64 {
    n as f64 / 1e6
}

/// What the chapter quotes (no GPU needed).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    writeln!(out, "== The tiled kernel's constants ==")?;
    writeln!(
        out,
        "B_Q = {B_Q} queries per workgroup (one invocation each), B_K = {B_K} keys per tile, MAX_D = {MAX_D}"
    )?;
    writeln!(
        out,
        "K and V tiles, sized by the head width: {B_K} · (d_k + d_v) · 4 bytes of workgroup memory,"
    )?;
    writeln!(
        out,
        "d_k and d_v rounded up to multiples of 4 (tile_bytes(61, 63) = {})",
        tile_bytes(61, 63)
    )?;
    for d in [D, MAX_D] {
        writeln!(out, "  d = {d:>3}: {} bytes", tile_bytes(d, d))?;
    }
    writeln!(
        out,
        "WebGPU's default: {WEBGPU_DEFAULT} bytes = {} floats = d² at d = {D}",
        WEBGPU_DEFAULT / 4
    )?;
    writeln!(out, "\n== Reads from global memory per head, d = {D} (millions of floats) ==")?;
    writeln!(
        out,
        "{:>6} {:>7} {:>10} {:>10} {:>12} {:>14}",
        "L", "causal", "naive", "tiled", "naive/tiled", "standard (S,P)"
    )?;
    for l in QUOTED {
        for causal in [false, true] {
            let naive = traffic(Kernel::Naive, l, l, D, D, causal).reads;
            let tiled = traffic(Kernel::Tiled, l, l, D, D, causal).reads;
            let std_reads = standard(l, l, D, D);
            let std_cell =
                if causal { "".to_string() } else { format!("{:.1}", millions(std_reads.reads)) };
            writeln!(
                out,
                "{l:>6} {:>7} {:>10.1} {:>10.2} {:>12.1} {std_cell:>14}",
                if causal { "yes" } else { "no" },
                millions(naive),
                millions(tiled),
                naive as f64 / tiled as f64
            )?;
        }
    }
    let s = standard(4096, 4096, D, D);
    writeln!(
        out,
        "standard attention at L = 4096 also writes {:.1} M floats (S, P and the output)",
        millions(s.writes)
    )?;
    writeln!(out, "\n== The grid ==")?;
    for l in QUOTED {
        let blocks = l.div_ceil(B_Q);
        writeln!(
            out,
            "L = {l}: {blocks} query blocks × {HEADS} heads = {} workgroups of {B_Q} invocations",
            blocks * HEADS
        )?;
    }
    let counts = tile_counts(PICTURE_L)?;
    let loaded: Vec<String> = counts
        .rows()
        .into_iter()
        .map(|r| r.iter().filter(|&&n| n > 0).count().to_string())
        .collect();
    writeln!(
        out,
        "causal, L = {PICTURE_L}: tiles each workgroup loads: {} (of {});\n{} of {} tiles skipped",
        loaded.join(", "),
        counts.ncols(),
        counts.iter().filter(|&&n| n == 0).count(),
        counts.len()
    )?;
    writeln!(out, "\n== Measured ({TIMINGS_PATH}) ==")?;
    let (header, rows) = committed_timings()?;
    for line in &header {
        writeln!(out, "{line}")?;
    }
    out += &timing_table(&rows);
    if rows.iter().any(|r| r.naive.total.is_none() || r.tiled.total.is_none()) {
        out += "-: not run, the adapter's loop limit (lavapipe) would have cut the kernel short\n";
    }
    writeln!(out, "CPU tiled: {COMMITTED_CPU}")?;
    Ok(out)
}

/// The causal tile counts of the tiled kernel's grid for `L × L`: (query blocks, key tiles).
fn tile_counts(l: usize) -> Result<Array2<usize>, Box<dyn Error>> {
    Ok(causal_tile_counts(l, l, Tiles { block_q: B_Q, tile_k: B_K })?)
}

/// Draws this chapter's figures into `out_dir` and writes its report.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let counts = tile_counts(PICTURE_L)?;
    let share = counts.mapv(|n| n as f64 / (B_Q * B_K) as f64);
    let skipped = counts.mapv(|n| n == 0);
    let rows: Vec<String> = (0..counts.nrows()).map(|b| format!("workgroup {b}")).collect();
    let cols: Vec<String> = (0..counts.ncols()).map(|t| (t * B_K).to_string()).collect();
    let grid = Heatmap::new(&share)
        .title(format!(
            "Causal, L = {PICTURE_L}: the tiles each workgroup loads (B_Q = {B_Q}, B_K = {B_K})"
        ))
        .row_labels(&rows)
        .col_labels(&cols)
        .masked(&skipped)
        .mask_legend("skipped")
        .colorbar_label("share of the tile's scores visible")
        .save(out_dir.join("ch14_workgroups.png"))?;
    let (header, timings) = committed_timings()?;
    // The first header line ends with how the times were taken, e.g. "median of 3 runs …".
    let runs = header.first().and_then(|h| h.split_once("ms, ")).map_or("ms", |(_, r)| r);
    let line = |prefix: &str| header.iter().find_map(|h| h.strip_prefix(prefix));
    let adapter = adapter_label(line("GPU: ").ok_or("no `# GPU:` line")?);
    // "chapter 8's tiled path on 2 threads": the threads, and what it timed (COMMITTED_CPU).
    let cpu = line("CPU tiled = ").ok_or("no `# CPU tiled =` line")?;
    let threads = cpu.rsplit_once(" on ").map_or(cpu, |(_, threads)| threads);
    let cpu = format!("{COMMITTED_CPU}, {threads}");
    let chart = draw_timings(&timings, runs, &cpu, &adapter, &out_dir.join("ch14_time_vs_l.png"))?;
    let text = out_dir.join("ch14_output.txt");
    std::fs::write(&text, report()?)?;
    Ok(vec![grid, chart, text])
}

/// One measured length: milliseconds, median of the runs. A kernel's times are `None` where
/// the adapter refused the problem (lavapipe's loop limit).
struct Timing {
    l: usize,
    causal: bool,
    cpu_tiled: f64,
    naive: KernelTime,
    tiled: KernelTime,
    /// The larger of the two kernels' max |GPU − CPU| over the output.
    max_diff: Option<f64>,
}

/// One kernel's times: on the GPU's clock (if it has one) and end to end.
#[derive(Clone, Copy, Default)]
struct KernelTime {
    kernel: Option<f64>,
    total: Option<f64>,
}

const CSV_COLUMNS: &str = "L,causal,cpu_tiled_ms,naive_kernel_ms,naive_total_ms,tiled_kernel_ms,\
    tiled_total_ms,max_abs_diff";

/// The largest difference between the GPU's output and the CPU's that the sweep accepts.
const SWEEP_TOLERANCE: f64 = 1e-4;

/// The committed measurement: its `#` header lines and its rows.
fn committed_timings() -> Result<(Vec<String>, Vec<Timing>), Box<dyn Error>> {
    let (header, fields) = timing::committed_csv(TIMINGS_CSV);
    let optional = |s: &str| -> Result<Option<f64>, Box<dyn Error>> {
        Ok(if s.is_empty() { None } else { Some(s.parse()?) })
    };
    let mut rows = Vec::new();
    for row in fields {
        let [l, causal, cpu, nk, nt, tk, tt, diff] = row[..] else {
            return Err(format!("{TIMINGS_PATH}: a row must have 8 fields: {}", row.join(",")).into());
        };
        rows.push(Timing {
            l: l.parse()?,
            causal: causal == "yes",
            cpu_tiled: cpu.parse()?,
            naive: KernelTime { kernel: optional(nk)?, total: optional(nt)? },
            tiled: KernelTime { kernel: optional(tk)?, total: optional(tt)? },
            max_diff: optional(diff)?,
        });
    }
    Ok((header, rows))
}

impl Timing {
    /// The row's eight fields in the CSV's order: the times through `ms`, `missing` for a
    /// kernel that was not run.
    fn fields(&self, ms: impl Fn(Option<f64>) -> String, missing: &str) -> [String; 8] {
        [
            self.l.to_string(),
            (if self.causal { "yes" } else { "no" }).to_string(),
            ms(Some(self.cpu_tiled)),
            ms(self.naive.kernel),
            ms(self.naive.total),
            ms(self.tiled.kernel),
            ms(self.tiled.total),
            self.max_diff.map_or(missing.to_string(), |d| format!("{d:.1e}")),
        ]
    }
}

/// The measurement as a table (ms; `-` where a kernel was not run).
fn timing_table(rows: &[Timing]) -> String {
    const WIDTHS: [usize; 8] = [5, 6, 9, 12, 11, 12, 11, 9];
    let line = |fields: [String; 8]| {
        let cells: Vec<String> = fields.iter().zip(WIDTHS).map(|(f, w)| format!("{f:>w$}")).collect();
        cells.join(" ") + "\n"
    };
    let header = ["L", "causal", "CPU tiled", "naive kernel", "naive total", "tiled kernel", "tiled total", "max |Δ|"];
    let mut out = line(header.map(String::from));
    for r in rows {
        out += &line(r.fields(|t| t.map_or("-".to_string(), |t| format!("{t:.2}")), "-"));
    }
    out
}

/// The adapter as the figure names it: its name without the details in brackets, and for
/// Mesa's software Vulkan what it is and which Mesa, e.g. "llvmpipe (Mesa 22.3.6, software
/// Vulkan on the CPU)" from "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, llvmpipe Mesa 22.3.6 …)".
fn adapter_label(adapter: &str) -> String {
    let name = adapter.split(" (").next().unwrap_or(adapter);
    match (name, gpu::mesa_version(adapter)) {
        ("llvmpipe", Some(mesa)) => format!("llvmpipe (Mesa {mesa}, software Vulkan on the CPU)"),
        _ => name.to_string(),
    }
}

/// `ch14_time_vs_l.png`: ms against L, log-log, no mask: the CPU's tiled path (`cpu` says
/// how it ran) and both kernels on `adapter`, named in the legend.
fn draw_timings(
    rows: &[Timing],
    runs: &str,
    cpu: &str,
    adapter: &str,
    path: &Path,
) -> Result<PathBuf, Box<dyn Error>> {
    let series = |pick: fn(&Timing) -> Option<f64>| {
        rows.iter().filter(|r| !r.causal).filter_map(|r| pick(r).map(|t| (r.l as f64, t))).collect::<Vec<_>>()
    };
    // The kernels' own times when the adapter measured them, else end to end.
    let own_clock = rows.iter().all(|r| r.tiled.total.is_none() || r.tiled.kernel.is_some());
    let what = if own_clock { "kernel alone" } else { "end to end" };
    Ok(LineChart::new()
        .size(840, 500) // wide enough for the CPU line's name on one row
        .title(format!("Time against L, f32, {HEADS} heads of d = {D}, no mask"))
        .x_label("sequence length L")
        .y_label(format!("ms ({runs})"))
        .x_axis(Axis::Log2)
        .y_axis(Axis::Log10)
        .series(format!("CPU: {cpu}"), series(|r| Some(r.cpu_tiled)))
        .series(format!("{adapter}: naive kernel ({what})"), series(|r| r.naive.kernel.or(r.naive.total)))
        .series(format!("{adapter}: tiled kernel ({what})"), series(|r| r.tiled.kernel.or(r.tiled.total)))
        .save(path)?)
}

fn random(l: usize, rng: &mut StdRng) -> Array4<f32> {
    Array4::from_shape_simple_fn((1, HEADS, l, D), || rng.random::<f32>() * 2.0 - 1.0)
}

/// Times both kernels and the CPU's tiled path for every length, causal and not, after
/// checking each kernel's output against the CPU's.
fn sweep(gpu: &Gpu, cli: &Cli) -> Result<Vec<Timing>, Box<dyn Error>> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(cli.threads).build()?;
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut rows = Vec::new();
    for &l in &cli.lengths {
        let (q, k, v) = (random(l, &mut rng), random(l, &mut rng), random(l, &mut rng));
        for causal in [false, true] {
            let masking = if causal { Masking::Causal } else { Masking::All };
            let tiles = Tiles::default();
            let reference = pool.install(|| tiled_sdpa_batched(&q, &k, &v, masking, tiles))?;
            let cpu_tiled = pool.install(|| {
                timing::median_ms(cli.runs, || tiled_sdpa_batched(&q, &k, &v, masking, tiles))
            });
            let mut times = [KernelTime::default(); 2];
            let mut max_diff = None::<f64>;
            for (kernel, time) in Kernel::ALL.into_iter().zip(&mut times) {
                // The first call makes the pipeline; its output is checked, not timed.
                let out = match gpu.attend(&q, &k, &v, masking, kernel) {
                    Err(e @ GpuError::LoopBudget { .. }) => {
                        eprintln!("L = {l}: {} kernel not run: {e}", kernel.name());
                        continue;
                    }
                    other => other?,
                };
                let diff = (&out - &reference).iter().fold(0f32, |m, d| m.max(d.abs())) as f64;
                if diff.is_nan() || diff > SWEEP_TOLERANCE {
                    return Err(format!(
                        "L = {l}: the {} kernel's output differs from the CPU's by {diff:e}",
                        kernel.name()
                    )
                    .into());
                }
                max_diff = Some(max_diff.map_or(diff, |m| m.max(diff)));
                let runs = (0..cli.runs.max(1))
                    .map(|_| Ok(gpu.attend_timed(&q, &k, &v, masking, kernel)?.1))
                    .collect::<Result<Vec<_>, GpuError>>()?;
                let kernel_ms = runs.iter().map(|t| t.kernel_ms).collect::<Option<Vec<f64>>>();
                *time = KernelTime {
                    kernel: kernel_ms.map(timing::median),
                    total: Some(timing::median(runs.iter().map(|t| t.total_ms).collect())),
                };
            }
            let [naive, tiled] = times;
            let row = Timing { l, causal, cpu_tiled, naive, tiled, max_diff };
            eprintln!("{}", timing_table(std::slice::from_ref(&row)).lines().nth(1).unwrap_or_default());
            rows.push(row);
        }
    }
    Ok(rows)
}

/// How the committed file says the times were taken: "one run" or "median of N runs".
fn runs_text(runs: usize) -> String {
    if runs == 1 { "one run after one warm-up".into() } else { format!("median of {runs} runs after one warm-up") }
}

/// The measurement in the committed file's format.
fn csv(gpu: &Gpu, cli: &Cli, rows: &[Timing]) -> String {
    let (cpu, features) = timing::machine();
    let mut out = format!("# f32, 1 × {HEADS} heads × L × {D}; ms, {}\n", runs_text(cli.runs));
    out += &format!("# GPU: {}\n", gpu.adapter_name());
    out += "# kernel = the GPU's own clock (timestamp queries); total = upload + kernel + read-back\n";
    out += "# max_abs_diff = the larger of the kernels' max |GPU − CPU| over the output\n";
    out += &format!("# CPU: {cpu}; {features}\n# CPU tiled = chapter 8's tiled path on {} threads\n", cli.threads);
    out += CSV_COLUMNS;
    out.push('\n');
    for r in rows {
        out += &r.fields(|t| t.map_or(String::new(), |t| format!("{t:.3}")), "").join(",");
        out.push('\n');
    }
    out
}

fn main() -> Result<(), Box<dyn Error>> {
    let cli: Cli = common::parse(env!("CARGO_CRATE_NAME"), ABOUT);
    if !cli.time {
        let dir = cli.output.dir()?;
        return common::render_into(&dir, render_figures);
    }
    let gpu = Gpu::new()?;
    stdout::line(format_args!("GPU: {}", gpu.adapter_name()));
    let (cpu, features) = timing::machine();
    stdout::line(format_args!("CPU: {cpu}; {features}"));
    stdout::line(format_args!(
        "f32, 1 × {HEADS} heads × L × {D}, median ms of {} runs; CPU tiled on {} threads",
        cli.runs, cli.threads
    ));
    let rows = sweep(&gpu, &cli)?;
    stdout::print(format_args!("{}", timing_table(&rows)));
    if let Some(path) = &cli.save {
        std::fs::write(path, csv(&gpu, &cli, &rows))?;
        stdout::line(format_args!("wrote {}", path.display()));
    }
    Ok(())
}
