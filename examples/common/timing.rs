//! Timing for the examples that measure (`ch08_scale`, the `attend` tool's `--bench`): run a
//! computation once to warm up, then `runs` times, and report the median wall-clock time.
//!
//! Not declared in `common/mod.rs` (most chapter examples time nothing); include it with
//! `#[path = "common/timing.rs"] mod timing;`.

use std::time::Instant;

/// Runs `f` once (warm-up: page faults, thread pool start, caches), then `runs` times
/// (at least once), and returns the median time of those runs in milliseconds.
pub fn median_ms<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    std::hint::black_box(f());
    let times: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(times)
}

/// The median of `values` (at least one), the mean of the middle two for an even count.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 }
}

/// A committed measurement (`examples/data/*.csv`): its `#` header lines, without the `#`, and
/// the fields of each data row; the column names' line (the first line that is not a comment)
/// and blank lines are skipped.
#[allow(dead_code)] // not every timing example reads a committed measurement
pub fn committed_csv(text: &str) -> (Vec<String>, Vec<Vec<&str>>) {
    let mut header = Vec::new();
    let mut rows = Vec::new();
    let mut columns_seen = false;
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            header.push(comment.trim().to_string());
        } else if !columns_seen {
            columns_seen = true;
        } else if !line.trim().is_empty() {
            rows.push(line.split(',').collect());
        }
    }
    (header, rows)
}

/// This machine: the CPU's model name (from `/proc/cpuinfo`) and the SIMD features the GEMM
/// (matrixmultiply) can pick at run time.
#[allow(dead_code)] // not every timing example names the machine
pub fn machine() -> (String, String) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let mut features = Vec::new();
    #[cfg(target_arch = "x86_64")]
    for (name, on) in [
        ("avx2", std::arch::is_x86_feature_detected!("avx2")),
        ("fma", std::arch::is_x86_feature_detected!("fma")),
        ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
    ] {
        features.push(format!("{name} {}", if on { "yes" } else { "no" }));
    }
    (format!("{model} ({cpus} logical CPUs)"), features.join(", "))
}
