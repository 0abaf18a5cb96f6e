//! Plain vs tiled attention: `f32`, 8 heads of `d = 64`, `L` ∈ {128, 512, 1024, 2048, 4096},
//! causal and not, on a rayon pool of 2 threads (the plain path uses one of them).
//!
//! ```text
//! cargo bench -p attention                      # everything, about two minutes
//! cargo bench -p attention -- 'tiled/causal'    # a subset (criterion's filter)
//! ```
//!
//! Ten samples per case, one iteration each for the slow ones (the plain path at `L = 4096`
//! takes over a second), so the whole run stays short. `examples/ch08_scale.rs` times the same
//! cases with a plain median, and `tools/bench_torch.py --compare` sets them beside PyTorch.

use std::time::Duration;

use attention::mask::Mask;
use attention::sdpa::sdpa_batched;
use attention::tiled::{Masking, Tiles, tiled_sdpa_batched};
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use ndarray::Array4;
use rand::{Rng, SeedableRng, rngs::StdRng};

const HEADS: usize = 8;
const D: usize = 64;
const LENGTHS: [usize; 5] = [128, 512, 1024, 2048, 4096];
const THREADS: usize = 2;

fn inputs(l: usize) -> (Array4<f32>, Array4<f32>, Array4<f32>) {
    let mut rng = StdRng::seed_from_u64(8);
    let mut random =
        || Array4::from_shape_simple_fn((1, HEADS, l, D), || rng.random_range(-1.0..1.0f32));
    (random(), random(), random())
}

fn plain_vs_tiled(c: &mut Criterion) {
    let pool =
        rayon::ThreadPoolBuilder::new().num_threads(THREADS).build().expect("a thread pool");
    for causal in [false, true] {
        let mut group = c.benchmark_group(if causal { "causal" } else { "full" });
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .sampling_mode(SamplingMode::Flat);
        for l in LENGTHS {
            let (q, k, v) = inputs(l);
            let mask = causal.then(|| Mask::causal(l));
            let masking = if causal { Masking::Causal } else { Masking::All };
            // Throughput in scores: L² per head (the visible half, causal).
            let scores = if causal { l * (l + 1) / 2 } else { l * l };
            group.throughput(Throughput::Elements((HEADS * scores) as u64));
            group.bench_function(BenchmarkId::new("plain", l), |b| {
                b.iter(|| {
                    pool.install(|| {
                        sdpa_batched(&q, &k, &v, mask.as_ref()).expect("same shapes").output
                    })
                })
            });
            group.bench_function(BenchmarkId::new("tiled", l), |b| {
                b.iter(|| {
                    pool.install(|| {
                        tiled_sdpa_batched(&q, &k, &v, masking, Tiles::default())
                            .expect("same shapes")
                    })
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, plain_vs_tiled);
criterion_main!(benches);
