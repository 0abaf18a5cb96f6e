//! What each kernel reads from global memory, counted (chapter *Attention on a GPU*). Anchor:
//! `traffic`.
//!
//! A kernel's speed on a GPU is set less by its arithmetic than by how many numbers it moves
//! between global memory (the paper's "HBM") and the chip. These counts follow the shaders
//! line by line, for one `(L_q, d_k)`, `(L_k, d_k)`, `(L_k, d_v)` problem with no mask or the
//! causal one, `d_k` and `d_v` multiples of 4 (the kernels pad rows to whole `vec4`s), as loads
//! counted per invocation; caches are left out (a real GPU's L1 and L2 catch some of the naive kernel's
//! repeated reads, which is why it is measured, not only counted).

use crate::{B_Q, Kernel};

/// Numbers (`f32`s) a kernel reads from and writes to global memory.
///
/// ```
/// use gpu::traffic::{traffic, Traffic};
///
/// let t = traffic(gpu::Kernel::Tiled, 128, 128, 64, 64, false);
/// assert_eq!(t, Traffic { reads: 128 * 64 + 2 * (2 * 128 * 64), writes: 128 * 64 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// Numbers read: Q, and K and V as often as the kernel reads them.
    pub reads: u64,
    /// Numbers written: the output.
    pub writes: u64,
}

/// What `kernel` reads and writes for one matrix of the stack: every query row reads its `q`
/// once; the naive kernel reads the key and value rows each query may see, the tiled one each
/// tile once per block of [`B_Q`] queries (with `causal`, only the tiles up to the block's last
/// query).
///
/// ```
/// use gpu::{Kernel, traffic::traffic};
///
/// let (l, d) = (4096, 64);
/// let naive = traffic(Kernel::Naive, l, l, d, d, false).reads;
/// let tiled = traffic(Kernel::Tiled, l, l, d, d, false).reads;
/// assert_eq!(naive / tiled, 63); // about B_Q = 64 times fewer
/// ```
// ANCHOR: traffic
pub fn traffic(
    kernel: Kernel,
    l_q: usize,
    l_k: usize,
    d_k: usize,
    d_v: usize,
    causal: bool,
) -> Traffic {
    // How many keys query i reads (naive) or the block starting at i0 loads (tiled: up to its
    // last query, chapter 8's causal_end).
    let seen = |last: usize| if causal { l_k.min(last + 1) } else { l_k };
    let key_rows: usize = match kernel {
        Kernel::Naive => (0..l_q).map(seen).sum(),
        Kernel::Tiled => (0..l_q).step_by(B_Q).map(|i0| seen((i0 + B_Q).min(l_q) - 1)).sum(),
    };
    let reads = l_q * d_k + key_rows * (d_k + d_v);
    Traffic { reads: reads as u64, writes: (l_q * d_v) as u64 }
}
// ANCHOR_END: traffic

/// The paper's "standard attention" (FlashAttention, Algorithm 0) for the same problem: it
/// reads Q and K, writes the scores S, reads S back and writes the weights P, reads P and V,
/// and writes the output: `Θ(L·d + L²)` against the tiled kernel's `Θ(L²·d / B_Q)` reads.
///
/// ```
/// use gpu::traffic::{standard, Traffic};
///
/// let t = standard(1024, 1024, 64, 64);
/// assert_eq!(t, Traffic { reads: 3 * 1024 * 64 + 2 * 1024 * 1024, writes: 2 * 1024 * 1024 + 1024 * 64 });
/// ```
pub fn standard(l_q: usize, l_k: usize, d_k: usize, d_v: usize) -> Traffic {
    let scores = (l_q * l_k) as u64;
    let reads = (l_q * d_k + l_k * d_k + l_k * d_v) as u64 + 2 * scores;
    Traffic { reads, writes: 2 * scores + (l_q * d_v) as u64 }
}
