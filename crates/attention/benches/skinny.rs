//! Products with few rows, as in chapter 13's forward pass of one 16-token sentence: `f32`,
//! `(16, d_in)·(d_in, d_out)` for the model's three shapes. Each case multiplies by 64
//! different weight matrices in turn (38 MB for `(384, 384)`, 151 MB for the others), so that
//! the weights come from memory, as the model's do (its six layers hold 42.5 MB, a little more
//! than the 32 MiB of L3 cache of the machine the book was written on):
//!
//! - `dot`: ndarray's product, `matrixmultiply`'s GEMM, which packs both operands on every
//!   call (one thread);
//! - `apply_parallel`: the plain path's, the same GEMM on a block of columns per thread, on 2
//!   threads;
//! - `packed/1 thread` and `packed/2 threads`: the fast path's [`PackedLinear`], the weights
//!   packed once;
//! - `packed, one matrix`: the same, 2 threads, always the same matrix: its weights stay in
//!   the cache.
//!
//! ```text
//! cargo bench -p attention --bench skinny      # about a minute
//! ```

use std::time::Duration;

use attention::gpt::packed::PackedLinear;
use attention::projection::Linear;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ndarray::Array2;
use rand::{SeedableRng, rngs::StdRng};

const ROWS: usize = 16;
const MATRICES: usize = 64;
const SHAPES: [(usize, usize); 3] = [(384, 384), (384, 1536), (1536, 384)];

fn few_rows(c: &mut Criterion) {
    let pool = |threads| {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool")
    };
    let (one, two) = (pool(1), pool(2));
    let mut group = c.benchmark_group("16 rows");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (d_in, d_out) in SHAPES {
        let mut rng = StdRng::seed_from_u64(13);
        let maps: Vec<Linear<f32>> = (0..MATRICES)
            .map(|_| Linear::random(d_in, d_out, &mut rng).expect("sizes above 0"))
            .collect();
        let packed: Vec<PackedLinear> = maps.iter().map(PackedLinear::new).collect();
        let x = Array2::from_shape_fn((ROWS, d_in), |(i, j)| ((i * 7 + j) % 13) as f32 - 6.0);
        // Throughput in floating-point operations: 2 per multiply-add.
        group.throughput(Throughput::Elements((2 * ROWS * d_in * d_out * MATRICES) as u64));
        let shape = format!("{d_in}x{d_out}");
        group.bench_function(BenchmarkId::new("dot", &shape), |b| {
            b.iter(|| maps.iter().map(|m| x.dot(m.weight())).collect::<Vec<_>>())
        });
        group.bench_function(BenchmarkId::new("apply_parallel", &shape), |b| {
            b.iter(|| {
                two.install(|| maps.iter().map(|m| m.apply_parallel(&x)).collect::<Vec<_>>())
            })
        });
        for (name, pool) in [("packed/1 thread", &one), ("packed/2 threads", &two)] {
            group.bench_function(BenchmarkId::new(name, &shape), |b| {
                b.iter(|| {
                    pool.install(|| packed.iter().map(|m| m.apply(&x)).collect::<Vec<_>>())
                })
            });
        }
        group.bench_function(BenchmarkId::new("packed, one matrix", &shape), |b| {
            b.iter(|| {
                two.install(|| (0..MATRICES).map(|_| packed[0].apply(&x)).collect::<Vec<_>>())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, few_rows);
criterion_main!(benches);
