//! The tiled backward's memory, counted: this test binary's global allocator keeps the bytes
//! allocated and their peak, so the test sees everything `tiled_sdpa_backward` allocates
//! (its gradients, its `D`, its tiles, and the packing buffers of the matrix products), and
//! sets it beside the plain backward (`grad::sdpa_backward`), which holds `L × L` matrices.
//!
//! One test only: tests of one binary run on parallel threads, and another test's
//! allocations would be counted too.

#[path = "../../../examples/common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::peak_extra;

use attention::grad::sdpa_backward;
use attention::sdpa::sdpa_batched;
use attention::tiled::{Masking, Tiles};
use attention::tiled_grad::{tiled_sdpa_backward, tiled_sdpa_with_lse};
use ndarray::Array4;

#[test]
fn the_tiled_backward_holds_its_gradients_d_and_one_pair_of_tiles_per_thread() {
    let (batch, heads, l, d) = (1, 2, 600, 16);
    let shape = (batch, heads, l, d);
    let x = |seed: usize| {
        Array4::from_shape_fn(shape, |(b, h, i, j)| {
            (((b + 3 * h + 7 * i + 11 * j + seed) % 17) as f64 - 8.0) / 8.0
        })
    };
    let (q, k, v, grad_o) = (x(0), x(1), x(2), x(3));
    let tiles = Tiles { block_q: 64, tile_k: 32 };
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let (out, lse) =
            pool.install(|| tiled_sdpa_with_lse(&q, &k, &v, Masking::Causal, tiles)).unwrap();
        let run = || {
            tiled_sdpa_backward(&q, &k, &v, Masking::Causal, &out, &lse, &grad_o, tiles)
                .unwrap()
        };
        pool.install(run); // the pool's threads start and allocate what they keep
        let (grads, peak) = pool.install(|| peak_extra(run));

        let f64_bytes = std::mem::size_of::<f64>();
        let gradients =
            (grads.grad_q.len() + grads.grad_k.len() + grads.grad_v.len()) * f64_bytes;
        let delta = batch * heads * l * f64_bytes;
        let tiles_bytes = tiles.backward_scratch_len() * f64_bytes; // one thread's P and dS
        // Per busy thread, matrixmultiply's packing buffers (a copy of a product's operands;
        // the largest, dSᵀ·Q_i, packs 32·64 + 64·16 numbers, 24 KiB) and a little
        // bookkeeping: 32 KiB. A thread may get no task (two heads, two threads), so the
        // floor is one thread's tiles.
        let slack = 32 * 1024;
        let (floor, ceiling) = (
            gradients + delta + tiles_bytes,
            gradients + delta + threads * (tiles_bytes + slack),
        );
        assert!(
            floor <= peak && peak <= ceiling,
            "{threads} threads: peak {peak} B, not in [{floor}, {ceiling}]"
        );
        // One score matrix, 600² numbers, 2.75 MiB: nothing near it.
        assert!(peak - gradients < l * l * f64_bytes / 20);

        // The plain backward, from the same forward's weights: dP and dS, L² each per head.
        let p =
            sdpa_batched(&q, &k, &v, Some(&attention::mask::Mask::causal(l))).unwrap().weights;
        let (plain, plain_peak) =
            peak_extra(|| sdpa_backward(&q, &k, &v, &p, &grad_o).unwrap());
        assert!(plain_peak - gradients >= 2 * heads * l * l * f64_bytes);
        let worst = [
            (&grads.grad_q, &plain.grad_q),
            (&grads.grad_k, &plain.grad_k),
            (&grads.grad_v, &plain.grad_v),
        ]
        .iter()
        .flat_map(|(a, b)| a.iter().zip(b.iter()))
        .map(|(a, b)| (a - b).abs() / (1e-12 + 1e-12 * b.abs()))
        .fold(0.0, f64::max);
        assert!(worst <= 1.0, "the two backwards differ: {worst} times the tolerance");
    }
}
