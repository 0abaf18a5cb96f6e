//! Products with few rows, as in chapter 13's forward pass of one 16-token sentence: `f32`,
//! `(16, d_in)·(d_in, d_out)` for BERT-small's three shapes, each through 24 different weight
//! matrices in turn (as many as all-MiniLM-L6-v2's six layers hold, so that the weights come
//! from memory, not from the cache, as they do in the model), on a rayon pool of 2 threads:
//!
//! - `dot`: ndarray's product, `matrixmultiply`'s GEMM, which packs both operands on every
//!   call (one thread);
//! - `apply_parallel`: the exact path's, the same GEMM on a block of columns per thread;
//! - `packed`: the fast path's [`PackedLinear`], the weights packed once.
//!
//! ```text
//! cargo bench -p attention --bench skinny      # about half a minute
//! ```

use std::time::Duration;

use attention::gpt::packed::PackedLinear;
use attention::projection::Linear;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ndarray::Array2;
use rand::{SeedableRng, rngs::StdRng};

const ROWS: usize = 16;
const MATRICES: usize = 24;
const SHAPES: [(usize, usize); 3] = [(384, 384), (384, 1536), (1536, 384)];
const THREADS: usize = 2;

fn few_rows(c: &mut Criterion) {
    let pool =
        rayon::ThreadPoolBuilder::new().num_threads(THREADS).build().expect("a thread pool");
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
        group.throughput(Throughput::Elements((2 * ROWS * d_in * d_out * MATRICES) as u64));
        let shape = format!("{d_in}x{d_out}");
        group.bench_function(BenchmarkId::new("dot", &shape), |b| {
            b.iter(|| maps.iter().map(|m| x.dot(m.weight())).collect::<Vec<_>>())
        });
        group.bench_function(BenchmarkId::new("apply_parallel", &shape), |b| {
            b.iter(|| {
                pool.install(|| maps.iter().map(|m| m.apply_parallel(&x)).collect::<Vec<_>>())
            })
        });
        group.bench_function(BenchmarkId::new("packed", &shape), |b| {
            b.iter(|| pool.install(|| packed.iter().map(|m| m.apply(&x)).collect::<Vec<_>>()))
        });
    }
    group.finish();
}

criterion_group!(benches, few_rows);
criterion_main!(benches);
