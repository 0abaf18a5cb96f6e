//! Chapter *Attention at scale*: attention without the `L_q × L_k` matrix.
//!
//! [`sdpa`](crate::sdpa::sdpa) builds every score, then every weight, then the output: for
//! `L = 16384` that is a 1 GiB matrix of `f32` per head. Two ideas remove it:
//!
//! 1. **Online softmax** (Milakov & Gimelshein, 2018). Chapter *Softmax* subtracted the row
//!    maximum before `exp`. The maximum need not be known in advance: keep a running maximum
//!    `m` and a running sum `l = Σ exp(xⱼ − m)`; when a larger maximum `m'` arrives, every
//!    term already summed is too large by the factor `exp(m' − m)`, so multiply `l` by
//!    `exp(m − m')` and go on ([`Running`], [`online_softmax`]).
//! 2. **Tiling** (FlashAttention-2, Dao 2023). Take the queries a block at a time and walk the
//!    keys a tile at a time. Per tile, compute the block's scores `Q_blk · K_tileᵀ / √d_k`
//!    (in base 2: the queries are multiplied by `log₂e/√d_k` once) into a small buffer,
//!    update `m` and `l` row by row, rescale the output accumulated so far by the same
//!    factor, and add `P · V_tile`. Divide by `l` once at the end ([`tiled_sdpa`],
//!    [`tiled_sdpa_batched`]; [`attend_block_reference`] is the same loop for one block, as
//!    the math writes it).
//!
//! The extra memory is one scratch per thread (a `block_q × tile_k` scores tile, the block's
//! queries and its unnormalised output) and each head's keys packed once (`L_k × d_k`), next
//! to the `L_q × d_v` output, never `L_q × L_k`. The results equal the plain path's up to
//! rounding (the tests compare them on the PyTorch fixtures within `1e-5` for `f32` and
//! `1e-12` for `f64`); the weights are never formed, so only the output is returned (and, for
//! the backward pass of chapter *Gradients*, each row's log-sum-exp:
//! [`tiled_sdpa_with_lse`](crate::tiled_grad::tiled_sdpa_with_lse)).
//!
//! The work is spread over threads with [rayon]: every (batch, head, query block) is one task.
//! The two tile products and the exponentials are the micro-kernels of
//! [`kernel`](crate::kernel),
//! compiled for AVX-512, AVX2 with FMA, or the portable baseline ([`Simd`]).
//!
//! Anchors (below the doc comments): `online_update`, `online_softmax`,
//! `attend_block_reference`, `attend_block`, `causal_end`, `mask_tile`; `log_sum_exp`,
//! `write_lse` and `visible` for chapter *Gradients*.

use ndarray::{
    Array, Array1, Array2, Array3, ArrayRef, ArrayRef1, ArrayRef2, ArrayView1, ArrayView2,
    ArrayViewD, ArrayViewMut1, ArrayViewMut2, Axis, Dimension, IxDyn, ShapeBuilder, Zip, s,
};
use rayon::prelude::*;
use std::any::Any;
use std::cell::RefCell;

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::kernel::{
    NR, PackedHead, Simd, exp2_in_place, exp2_one, is_f32, pv_tile, row_max, rows_computed,
    scores_tile,
};
use crate::mask::Mask;
use crate::shapes::check_qkv;

/// The state of an online softmax: the largest score seen so far and the sum of
/// `exp(score − max)` over the scores seen so far.
///
/// [`push`](Running::push) adds one score; when it raises the maximum, the sum so far is
/// rescaled by `exp(old max − new max)`, the factor by which each of its terms was too large.
/// The tiled forward pass keeps `max` in base 2 (`m·log₂e`) while it walks the tiles and
/// converts it back before [`log_sum_exp`](Running::log_sum_exp) is read.
///
/// ```
/// use attention::tiled::Running;
///
/// let mut run = Running::new();
/// for x in [1.0_f64, 3.0, 2.0] {
///     run.push(x);
/// }
/// assert_eq!(run.max, 3.0);
/// let direct = (1.0_f64 - 3.0).exp() + 1.0 + (2.0_f64 - 3.0).exp();
/// assert!((run.sum - direct).abs() < 1e-15);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
// ANCHOR: online_update
pub struct Running<A> {
    /// The running maximum `m` (−∞ before the first visible score).
    pub max: A,
    /// The running sum `l = Σⱼ exp(xⱼ − m)` (0 before the first visible score).
    pub sum: A,
}

impl<A: Float> Running<A> {
    // ANCHOR_END: online_update
    /// The state before any score: `m = −∞`, `l = 0`.
    ///
    /// ```
    /// use attention::tiled::Running;
    ///
    /// let start = Running::<f32>::new();
    /// assert_eq!((start.max, start.sum), (f32::NEG_INFINITY, 0.0));
    /// ```
    // ANCHOR: online_update
    pub fn new() -> Self {
        Running { max: A::neg_infinity(), sum: A::zero() }
    }

    // ANCHOR_END: online_update
    /// Adds one score `x`. A masked score (−∞) changes nothing.
    ///
    /// ```
    /// use attention::tiled::Running;
    ///
    /// let mut run = Running { max: 0.0_f64, sum: 2.0 }; // two scores of 0 so far
    /// run.push(f64::ln(2.0));                           // a new maximum, ln 2
    /// assert_eq!(run.max, f64::ln(2.0));
    /// assert!((run.sum - 2.0).abs() < 1e-15);           // 2·e^(0 − ln 2) + e^0 = 1 + 1
    /// ```
    // ANCHOR: online_update
    pub fn push(&mut self, x: A) {
        if x == A::neg_infinity() {
            return; // a masked key: no weight, nothing to add
        }
        let max = self.max.max(x);
        // Terms summed so far were relative to the old maximum: rescale them (exp(−∞) = 0 at
        // the start).
        self.sum = self.sum * (self.max - max).exp() + (x - max).exp();
        self.max = max;
    }
}
// ANCHOR_END: online_update

impl<A: Float> Running<A> {
    /// The log-sum-exp of the scores seen, `ln Σⱼ exp(xⱼ) = m + ln l`, or −∞ when none was
    /// visible (`l = 0`). It is all a row's softmax needs to be recomputed later:
    /// `softmax(x)ⱼ = exp(xⱼ − lse)`, the identity the tiled backward
    /// ([`tiled_grad`](crate::tiled_grad)) rests on.
    ///
    /// ```
    /// use attention::tiled::Running;
    ///
    /// let mut run = Running::new();
    /// assert_eq!(run.log_sum_exp(), f64::NEG_INFINITY); // nothing seen: a fully masked row
    /// for x in [1.0_f64, 3.0, 2.0] {
    ///     run.push(x);
    /// }
    /// let direct = (1.0_f64.exp() + 3.0_f64.exp() + 2.0_f64.exp()).ln();
    /// assert!((run.log_sum_exp() - direct).abs() < 1e-15);
    /// ```
    // ANCHOR: log_sum_exp
    pub fn log_sum_exp(&self) -> A {
        if self.sum > A::zero() { self.max + self.sum.ln() } else { A::neg_infinity() }
    }
    // ANCHOR_END: log_sum_exp
}

impl<A: Float> Default for Running<A> {
    /// The same as [`Running::new`].
    ///
    /// ```
    /// use attention::tiled::Running;
    ///
    /// assert_eq!(Running::<f64>::default(), Running::new());
    /// ```
    fn default() -> Self {
        Running::new()
    }
}

/// Softmax of one row in two passes instead of three: one pass finds the maximum and the sum
/// together ([`Running`]), one writes `exp(xⱼ − m) / l`.
///
/// Equal to [`softmax_row`](crate::softmax::softmax_row) up to rounding; a row that is all −∞
/// gives all zeros, as there.
///
/// ```
/// use attention::{softmax::softmax_row, tiled::online_softmax};
/// use ndarray::array;
///
/// let x = array![2.0_f64, 1.0, f64::NEG_INFINITY, 4.0];
/// let mut stable = x.clone();
/// softmax_row(&mut stable);
/// let online = online_softmax(&x);
/// assert!((online - stable).iter().all(|d| d.abs() < 1e-15));
/// assert_eq!(online_softmax(&array![f32::NEG_INFINITY]), array![0.0]);
/// ```
// ANCHOR: online_softmax
pub fn online_softmax<A: Float>(row: &ArrayRef1<A>) -> Array1<A> {
    let mut run = Running::new();
    row.iter().for_each(|&x| run.push(x)); // pass 1: maximum and sum at once
    if run.sum == A::zero() {
        return Array1::zeros(row.len()); // no visible key
    }
    row.mapv(|x| (x - run.max).exp() / run.sum) // pass 2: the weights
}
// ANCHOR_END: online_softmax

/// Tiled attention for one block of queries, written as chapter *Attention at scale* writes
/// the math: `q: (B_q, d_k)` against `k: (L_k, d_k)` and `v: (L_k, d_v)`, walked `tile_k`
/// keys at a time, with a running maximum `m` and sum `l` per query and the unnormalised
/// output `U`, divided by `l` once at the end. No mask.
///
/// A reference, not the fast path: each line is one line of the math, with whole-array
/// operations that allocate. [`tiled_sdpa`] computes the same output, with masks, in place and
/// in base 2; the tests hold the two to each other and to [`sdpa`](crate::sdpa::sdpa).
///
/// # Panics
///
/// If `tile_k` is 0, or the shapes do not fit (`k` and `v` with different lengths, `q` and `k`
/// with different widths). With no keys (`L_k = 0`) every output is `0 / 0`, NaN.
///
/// ```
/// use attention::{sdpa::sdpa, tiled::attend_block_reference};
/// use ndarray::arr2;
///
/// // The chapter's intuition: one query, scores 1, 3, 2, 5, values 10 to 40, tiles of 2.
/// let q = arr2(&[[1.0_f64]]);
/// let k = arr2(&[[1.0], [3.0], [2.0], [5.0]]);
/// let v = arr2(&[[10.0], [20.0], [30.0], [40.0]]);
/// let tiled = attend_block_reference(&q, &k, &v, 2);
/// assert!((tiled[[0, 0]] - 36.8806).abs() < 5e-5);
/// let plain = sdpa(&q, &k, &v, None).unwrap().output;
/// assert!((tiled - plain).iter().all(|d| d.abs() < 1e-12));
/// ```
// ANCHOR: attend_block_reference
pub fn attend_block_reference<A: Float>(
    q: &ArrayRef2<A>, // Q_b: (B_q, d_k)
    k: &ArrayRef2<A>, // K: (L_k, d_k)
    v: &ArrayRef2<A>, // V: (L_k, d_v)
    tile_k: usize,    // B_k
) -> Array2<A> {
    let (b_q, d_k) = q.dim();
    let mut m = Array1::from_elem(b_q, A::neg_infinity()); // (B_q)
    let mut l = Array1::zeros(b_q); // (B_q)
    let mut u = Array2::zeros((b_q, v.ncols())); // (B_q, d_v)
    for j0 in (0..k.nrows()).step_by(tile_k) {
        let j1 = (j0 + tile_k).min(k.nrows());
        let (k_t, v_t) = (k.slice(s![j0..j1, ..]), v.slice(s![j0..j1, ..]));
        // S = Q_b K_tᵀ / √d_k: (B_q, B_k)
        let scores = q.dot(&k_t.t()) / A::from_len(d_k).sqrt();
        // m' = max(m, rowmax(S)): (B_q)
        let m_new = Array1::from_shape_fn(b_q, |i| scores.row(i).fold(m[i], |a, &x| a.max(x)));
        let m_col = m_new.view().insert_axis(Axis(1)); // m' as a column, (B_q, 1)
        let p = (&scores - &m_col).mapv(A::exp); // P = exp(S − m'): (B_q, B_k)
        let r = (&m - &m_new).mapv(A::exp); // r = exp(m − m'): (B_q)
        l = &r * &l + p.sum_axis(Axis(1)); // l ← r ∘ l + rowsum(P)
        u = &u * &r.view().insert_axis(Axis(1)) + p.dot(&v_t); // U ← diag(r) U + P V_t
        m = m_new; // m ← m'
    }
    u / l.insert_axis(Axis(1)) // diag(l)⁻¹ U
}
// ANCHOR_END: attend_block_reference

/// Which keys each query may see in [`tiled_sdpa`]: all, the causal triangle, or a [`Mask`].
///
/// `Causal` is the same as `Mask(&Mask::causal_rect(L_q, L_k))` (key `j` visible to query `i`
/// iff `j ≤ i`) but needs no boolean array, and lets the tiled loop skip the tiles that lie
/// entirely in a query block's future.
///
/// ```
/// use attention::{mask::Mask, tiled::Masking};
///
/// let padding = Mask::padding(&[3], 4, 4).unwrap();
/// let choices = [Masking::All, Masking::Causal, Masking::Mask(&padding)];
/// assert_eq!(choices.len(), 3);
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Masking<'a> {
    /// Every query sees every key.
    All,
    /// Query `i` sees keys `0..=i`.
    Causal,
    /// A boolean mask broadcastable to `(..., L_q, L_k)`, `true` = may attend.
    Mask(&'a Mask),
}

/// The tile sizes of [`tiled_sdpa`]: `block_q` queries per task, `tile_k` keys per step.
///
/// Neither needs to divide the sequence length: the last block and tile are shorter. Both
/// must be at least 1. The default, 128 × 256, keeps a tile's scores (128 KiB of `f32`), the
/// block's queries and its output in a core's L2 cache; for `d = 64` the other sizes we tried
/// (blocks of 64 to 256 queries, tiles of 128 to 1024 keys) were no faster
/// (chapter *Attention at scale*).
///
/// ```
/// use attention::tiled::Tiles;
///
/// let t = Tiles::default();
/// assert_eq!((t.block_q, t.tile_k), (128, 256));
/// let small = Tiles { block_q: 3, tile_k: 5 };
/// assert_eq!(small.scratch_len(), 15);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiles {
    /// Queries per block (one parallel task each).
    pub block_q: usize,
    /// Keys per tile (one step of the loop).
    pub tile_k: usize,
}

impl Default for Tiles {
    /// `block_q = 128`, `tile_k = 256`.
    ///
    /// ```
    /// use attention::tiled::Tiles;
    ///
    /// assert_eq!(Tiles::default(), Tiles { block_q: 128, tile_k: 256 });
    /// ```
    fn default() -> Self {
        Tiles { block_q: 128, tile_k: 256 }
    }
}

impl Tiles {
    /// The number of elements in one scores tile, `block_q · tile_k`: the scores each thread
    /// keeps instead of the `L_q · L_k` scores (next to the block's queries and output).
    ///
    /// ```
    /// use attention::tiled::Tiles;
    ///
    /// assert_eq!(Tiles { block_q: 64, tile_k: 128 }.scratch_len(), 8192);
    /// ```
    pub fn scratch_len(&self) -> usize {
        self.block_q * self.tile_k
    }

    pub(crate) fn check(&self) -> Result<()> {
        for (size, dim) in [(self.block_q, "block_q"), (self.tile_k, "tile_k")] {
            if size == 0 {
                return Err(AttentionError::Empty { what: "tiles".into(), dim });
            }
        }
        Ok(())
    }
}

/// Tiled scaled dot-product attention, `softmax(Q·Kᵀ/√d_k + M)·V`, for `q: (L_q, d_k)`,
/// `k: (L_k, d_k)`, `v: (L_k, d_v)`: the output `(L_q, d_v)` of
/// [`sdpa`](crate::sdpa::sdpa) without ever forming the `(L_q, L_k)` weights.
///
/// A query that sees no key gets a zero output row, as in the plain path. Errors are the
/// plain path's (shapes that do not fit, a mask that does not broadcast), plus a tile size
/// of 0.
///
/// ```
/// use attention::{mask::Mask, sdpa::sdpa, tiled::{tiled_sdpa, Masking, Tiles}};
/// use ndarray::Array2;
///
/// let q = Array2::from_shape_fn((10, 4), |(i, j)| ((i * 3 + j) % 7) as f64 / 7.0);
/// let k = Array2::from_shape_fn((10, 4), |(i, j)| ((i + 2 * j) % 5) as f64 / 5.0);
/// let v = Array2::from_shape_fn((10, 3), |(i, j)| (i + j) as f64);
/// let tiles = Tiles { block_q: 4, tile_k: 3 }; // neither divides 10
/// let tiled = tiled_sdpa(&q, &k, &v, Masking::Causal, tiles).unwrap();
/// let plain = sdpa(&q, &k, &v, Some(&Mask::causal(10))).unwrap();
/// assert!((tiled - plain.output).iter().all(|d| d.abs() < 1e-12));
///
/// let err =
///     tiled_sdpa(&q, &k.slice(ndarray::s![..9, ..]), &v, Masking::All, tiles).unwrap_err();
/// assert_eq!(err.to_string(), "k has L_k = 9 but v has L_k = 10");
/// ```
pub fn tiled_sdpa<A: Float>(
    q: &ArrayRef2<A>,
    k: &ArrayRef2<A>,
    v: &ArrayRef2<A>,
    masking: Masking,
    tiles: Tiles,
) -> Result<Array2<A>> {
    tiled_sdpa_batched(q, k, v, masking, tiles)
}

/// [`tiled_sdpa`] over leading (batch, head) axes: `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)`,
/// `v: (..., L_k, d_v)` with the same leading axes give `(..., L_q, d_v)`, the output of
/// [`sdpa_batched`](crate::sdpa::sdpa_batched).
///
/// Every (batch, head, query block) is one task on rayon's thread pool; run it inside
/// `ThreadPool::install` to choose the number of threads.
///
/// ```
/// use attention::{mask::Mask, sdpa::sdpa_batched};
/// use attention::tiled::{tiled_sdpa_batched, Masking, Tiles};
/// use ndarray::Array4;
///
/// let x = Array4::from_shape_fn((2, 3, 9, 4), |(b, h, i, j)| {
///     ((b + 2 * h + 3 * i + j) % 5) as f32 - 2.0
/// });
/// let padding = Mask::padding(&[9, 4], 9, 9).unwrap();
/// let padding = padding.as_array().insert_axis(ndarray::Axis(1)).to_owned();
/// let padding = Mask::from_array(padding).unwrap(); // (batch, 1, L_q, L_k): every head alike
/// let tiles = Tiles { block_q: 2, tile_k: 4 };
/// let tiled = tiled_sdpa_batched(&x, &x, &x, Masking::Mask(&padding), tiles).unwrap();
/// let plain = sdpa_batched(&x, &x, &x, Some(&padding)).unwrap();
/// assert_eq!(tiled.dim(), (2, 3, 9, 4));
/// assert!((tiled - plain.output).iter().all(|d| d.abs() < 1e-5));
/// ```
pub fn tiled_sdpa_batched<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    masking: Masking,
    tiles: Tiles,
) -> Result<Array<A, D>> {
    tiled_sdpa_batched_on(q, k, v, masking, tiles, Simd::chosen()?)
}

/// [`tiled_sdpa_batched`] with its inner loops in the build `simd` (an error if this processor
/// cannot run it), instead of the one [`Simd::chosen`] picks: what the tests use to hold every
/// build to the plain path's results.
///
/// ```
/// use attention::{kernel::Simd, tiled::{tiled_sdpa_batched, tiled_sdpa_batched_on, Masking, Tiles}};
/// use ndarray::Array3;
///
/// let x = Array3::from_shape_fn((2, 30, 8), |(h, i, j)| ((h + 3 * i + j) % 7) as f32 - 3.0);
/// let best = tiled_sdpa_batched(&x, &x, &x, Masking::Causal, Tiles::default()).unwrap();
/// for simd in Simd::supported() {
///     let out = tiled_sdpa_batched_on(&x, &x, &x, Masking::Causal, Tiles::default(), simd);
///     assert!((out.unwrap() - &best).iter().all(|d| d.abs() < 1e-5));
/// }
/// ```
pub fn tiled_sdpa_batched_on<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    masking: Masking,
    tiles: Tiles,
    simd: Simd,
) -> Result<Array<A, D>> {
    let simd = simd.require("tiled_sdpa_batched_on")?;
    Ok(forward(q, k, v, masking, tiles, false, simd)?.0)
}

/// The work of [`tiled_sdpa_batched`]; with `with_lse`, also the log-sum-exp of every row of
/// scores, `(..., L_q)` ([`Running::log_sum_exp`]: −∞ for a query that sees no key), read
/// off each row's final `(m, l)`, for the backward of [`tiled_grad`](crate::tiled_grad).
#[allow(clippy::type_complexity)] // the output and, if asked for, the log-sum-exp
pub(crate) fn forward<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    masking: Masking,
    tiles: Tiles,
    with_lse: bool,
    simd: Simd,
) -> Result<(Array<A, D>, Option<Array<A, D::Smaller>>)> {
    let block = |x: &Block<A>, out: ArrayViewMut2<A>, scratch: &mut Scratch<A>| {
        attend_block_on(simd, x, out, scratch)
    };
    forward_with(q, k, v, masking, tiles, with_lse, &block)
}

/// What [`attend_block`] is compiled into: one build of it.
type BlockFn<'f, A> = dyn Fn(&Block<A>, ArrayViewMut2<A>, &mut Scratch<A>) + Sync + 'f;

/// [`forward`] with `block` for each query block.
#[allow(clippy::type_complexity)] // the output and, if asked for, the log-sum-exp
fn forward_with<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    masking: Masking,
    tiles: Tiles,
    with_lse: bool,
    block: &BlockFn<A>,
) -> Result<(Array<A, D>, Option<Array<A, D::Smaller>>)> {
    let (l_q, l_k, d_k, d_v) = check_qkv(q.shape(), k.shape(), v.shape())?;
    tiles.check()?;
    let lead = &q.shape()[..q.ndim() - 2];
    let count: usize = lead.iter().product();
    let mut scores_shape = lead.to_vec();
    scores_shape.extend([l_q, l_k]);
    let masks = mask_matrices(masking, &scores_shape)?;
    let q3 = q.to_shape((count, l_q, d_k)).expect("leading axes collapse into one");
    let k3 = k.to_shape((count, l_k, d_k)).expect("leading axes collapse into one");
    let v3 = v.to_shape((count, l_k, d_v)).expect("leading axes collapse into one");
    let mut out = Array3::<A>::zeros((count, l_q, d_v));
    let mut lse = with_lse.then(|| Array2::<A>::zeros((count, l_q)));
    let lse_rows: Vec<Option<ArrayViewMut1<A>>> = match &mut lse {
        Some(lse) => lse.outer_iter_mut().map(Some).collect(),
        None => (0..count).map(|_| None).collect(),
    };

    // One task per (matrix of the stack, block of queries), each owning its output rows.
    let mut tasks = Vec::with_capacity(count * l_q.div_ceil(tiles.block_q));
    for (b, (mut rest, mut lse_rest)) in out.outer_iter_mut().zip(lse_rows).enumerate() {
        let mut i0 = 0;
        while rest.nrows() > 0 {
            let rows = tiles.block_q.min(rest.nrows());
            let (block, tail) = rest.split_at(Axis(0), rows);
            let lse_block = lse_rest.take().map(|lse_all| {
                let (lse_block, lse_tail) = lse_all.split_at(Axis(0), rows);
                lse_rest = Some(lse_tail);
                lse_block
            });
            tasks.push((b, i0, block, lse_block));
            i0 += tiles.block_q;
            rest = tail;
        }
    }
    let scale = A::one() / A::from_len(d_k).sqrt();
    // Each head's keys and values, packed once for all its query blocks.
    let packed: Vec<PackedHead<A>> = (0..count)
        .into_par_iter()
        .map(|b| {
            PackedHead::new(k3.index_axis(Axis(0), b), v3.index_axis(Axis(0), b), tiles.tile_k)
        })
        .collect();
    // A short sequence needs less than a whole tile.
    let scratch = Tiles { block_q: tiles.block_q.min(l_q), tile_k: tiles.tile_k.min(l_k) };
    tasks.into_par_iter().for_each(|(b, i0, out_block, lse_block)| {
        with_scratch(scratch, d_k, d_v, |scratch| {
            let rows = i0..i0 + out_block.nrows();
            let x = Block {
                visible: visible(masks.as_deref(), masking, b, rows.clone()),
                q: q3.slice(s![b, rows, ..]),
                head: &packed[b],
                i0,
                scale,
                tile_k: tiles.tile_k,
            };
            block(&x, out_block, scratch);
            // ANCHOR: write_lse
            if let Some(mut lse_block) = lse_block {
                // Each row's final (m, l) is still in the scratch.
                for (lse, run) in lse_block.iter_mut().zip(&scratch.running) {
                    *lse = run.log_sum_exp();
                }
            }
            // ANCHOR_END: write_lse
        })
    });

    Ok((unflatten(out, lead), lse.map(|lse| unflatten(lse, lead))))
}

/// `(count, ...)` back to `(lead..., ...)`, in the dimension type `E` of the result.
pub(crate) fn unflatten<A, E: Dimension, F: Dimension>(
    a: Array<A, F>,
    lead: &[usize],
) -> Array<A, E> {
    let mut shape = lead.to_vec();
    shape.extend(&a.shape()[1..]);
    a.into_shape_with_order(IxDyn(&shape))
        .expect("the same number of elements")
        .into_dimensionality::<E>()
        .expect("the number of axes of the result")
}

/// The mask of `masking`, if it is one, broadcast to the scores' shape `(lead..., L_q, L_k)`
/// as one `(L_q, L_k)` matrix per matrix of the stack; an error naming both shapes if it does
/// not broadcast.
pub(crate) fn mask_matrices<'m>(
    masking: Masking<'m>,
    scores_shape: &[usize],
) -> Result<Option<Vec<ArrayView2<'m, bool>>>> {
    match masking {
        Masking::Mask(mask) => Ok(Some(matrices(mask.broadcast_to(scores_shape)?))),
        _ => Ok(None),
    }
}

/// The keys the queries `rows` of matrix `b` may see.
// ANCHOR: visible
pub(crate) fn visible<'a>(
    masks: Option<&[ArrayView2<'a, bool>]>,
    masking: Masking,
    b: usize,
    rows: std::ops::Range<usize>,
) -> Visible<'a> {
    match (masks, masking) {
        (Some(m), _) => Visible::Mask(m[b].slice_move(s![rows, ..])),
        (None, Masking::Causal) => Visible::Causal,
        (None, _) => Visible::All,
    }
}
// ANCHOR_END: visible

/// Causal attention: the keys a block of `n_q` queries starting at `i0` may see end after its
/// last query, `i0 + n_q − 1`; every tile from there on lies in all its rows' future: skipped.
// ANCHOR: causal_end
fn causal_end(i0: usize, n_q: usize, l_k: usize) -> usize {
    l_k.min(i0 + n_q)
}
// ANCHOR_END: causal_end

/// For causal attention, how many scores of each (query block, key tile) pair are visible:
/// an array `(blocks, tiles)`. The tiled loop computes exactly the pairs with a count above
/// 0 and skips the others, so for `L_q = L_k` it visits about half of them.
///
/// ```
/// use attention::tiled::{causal_tile_counts, Tiles};
///
/// let counts = causal_tile_counts(8, 8, Tiles { block_q: 4, tile_k: 4 }).unwrap();
/// assert_eq!(counts, ndarray::array![[10, 0], [16, 10]]); // 4·5/2 = 10 on the diagonal
/// let big = causal_tile_counts(1024, 1024, Tiles { block_q: 128, tile_k: 128 }).unwrap();
/// assert_eq!(big.iter().filter(|&&n| n > 0).count(), 36); // of 8 × 8 = 64
/// ```
pub fn causal_tile_counts(l_q: usize, l_k: usize, tiles: Tiles) -> Result<Array2<usize>> {
    tiles.check()?;
    let (blocks, n_tiles) = (l_q.div_ceil(tiles.block_q), l_k.div_ceil(tiles.tile_k));
    Ok(Array2::from_shape_fn((blocks, n_tiles), |(b, t)| {
        let (i0, j0) = (b * tiles.block_q, t * tiles.tile_k);
        let n_q = tiles.block_q.min(l_q - i0); // the last block may be shorter
        let keys = j0..(j0 + tiles.tile_k).min(causal_end(i0, n_q, l_k));
        (i0..i0 + n_q).map(|i| keys.clone().filter(|&j| j <= i).count()).sum()
    }))
}

/// The matrices of a `(..., L_q, L_k)` view, leading axes flattened in order.
fn matrices<T>(a: ArrayViewD<'_, T>) -> Vec<ArrayView2<'_, T>> {
    if a.ndim() == 2 {
        vec![a.into_dimensionality().expect("two axes")]
    } else {
        (0..a.len_of(Axis(0)))
            .flat_map(|i| matrices(a.clone().index_axis_move(Axis(0), i)))
            .collect()
    }
}

/// The keys one query block may see: all, the causal triangle, or its rows of a mask
/// (`(block rows, L_k)`).
#[derive(Clone, Copy)]
// ANCHOR: mask_tile
pub(crate) enum Visible<'a> {
    All,
    Causal,
    Mask(ArrayView2<'a, bool>),
}

// ANCHOR_END: mask_tile

/// What one thread reuses from task to task: the block's queries, one tile of scores, the
/// unnormalised output, and the per-row `m` and `l`, with rows to spare for the padding of
/// the last group of queries.
struct Scratch<A> {
    q: Vec<A>,
    scores: Vec<A>,
    acc: Vec<A>,
    running: Vec<Running<A>>,
    scores_stride: usize,
}

thread_local! {
    /// This thread's [`Scratch`], kept from one task, and one call, to the next.
    static SCRATCH: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's scratch, allocated on the thread's first task (or when a call
/// needs a larger one) and then reused: one per thread and kept between calls, about
/// `(block_q + 8) · (tile_k + d_k + d_v)` numbers (0.2 MiB for the default tiles and `d = 64`
/// in `f32`), until the thread ends or a call that needs more replaces it.
fn with_scratch<A: Float, R>(
    tiles: Tiles,
    d_k: usize,
    d_v: usize,
    f: impl FnOnce(&mut Scratch<A>) -> R,
) -> R {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        let fits = slot
            .as_mut()
            .and_then(|s| s.downcast_mut::<Scratch<A>>())
            .is_some_and(|s| s.fits(tiles, d_k, d_v));
        if !fits {
            *slot = Some(Box::new(Scratch::<A>::new(tiles, d_k, d_v)));
        }
        f(slot.as_mut().and_then(|s| s.downcast_mut()).expect("a scratch of this type"))
    })
}

/// The most queries a micro-kernel takes at once (see [`attend_block_on`]).
const MR_MAX: usize = 8;

impl<A: Float> Scratch<A> {
    /// What these sizes need: queries, scores row stride, scores, output accumulator and
    /// running pairs, in numbers (`MR_MAX` spare rows for the padding of the last group).
    fn needs(tiles: Tiles, d_k: usize, d_v: usize) -> [usize; 5] {
        let (rows, stride) = (tiles.block_q + MR_MAX, tiles.tile_k.next_multiple_of(NR));
        [rows * d_k, stride, rows * stride, rows * d_v.next_multiple_of(NR), tiles.block_q]
    }

    fn new(tiles: Tiles, d_k: usize, d_v: usize) -> Self {
        let [q, scores_stride, scores, acc, running] = Scratch::<A>::needs(tiles, d_k, d_v);
        Scratch {
            q: vec![A::zero(); q],
            scores: vec![A::zero(); scores],
            acc: vec![A::zero(); acc],
            running: vec![Running::new(); running],
            scores_stride,
        }
    }

    /// Whether this scratch is large enough for these sizes (a larger one serves as well: the
    /// loops take their row strides from it).
    fn fits(&self, tiles: Tiles, d_k: usize, d_v: usize) -> bool {
        let have = [
            self.q.len(),
            self.scores_stride,
            self.scores.len(),
            self.acc.len(),
            self.running.len(),
        ];
        have.iter().zip(Scratch::<A>::needs(tiles, d_k, d_v)).all(|(&have, need)| have >= need)
    }
}

/// One query block's task: its queries, its head's packed keys and values, which keys it may
/// see, and where it starts.
struct Block<'a, A: Clone> {
    q: ArrayView2<'a, A>,
    head: &'a PackedHead<'a, A>,
    visible: Visible<'a>,
    i0: usize,
    scale: A,
    tile_k: usize,
}

/// [`attend_block`] in the build `simd` names, `MR` queries per micro-kernel call chosen so
/// that the `MR × 16` sums fill most of the vector registers without spilling (AVX2, `f32`: 12
/// of 16; AVX-512: 8 of 32, which measured no worse).
fn attend_block_on<A: Float>(
    simd: Simd,
    x: &Block<A>,
    out: ArrayViewMut2<A>,
    scratch: &mut Scratch<A>,
) {
    match simd {
        // SAFETY: `Simd::chosen` only picks a build the processor supports.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => unsafe { attend_block_avx512(x, out, scratch) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { attend_block_avx2(x, out, scratch) },
        _ if is_f32::<A>() => attend_block::<A, 2, false>(x, out, scratch),
        _ => attend_block::<A, 1, false>(x, out, scratch),
    }
}

/// One build of [`attend_block`], compiled with the target features `$features`: `$f32`
/// queries per micro-kernel call for `f32`, `$f64` for `f64`, with fused multiply-adds.
macro_rules! block_build {
    ($name:ident, $features:literal, $f32:literal, $f64:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        fn $name<A: Float>(x: &Block<A>, out: ArrayViewMut2<A>, s: &mut Scratch<A>) {
            if is_f32::<A>() {
                attend_block::<A, $f32, true>(x, out, s)
            } else {
                attend_block::<A, $f64, true>(x, out, s)
            }
        }
    };
}

// AVX-512: 8 rows × one register of 16 lanes (f32), 4 rows × two registers of 8 (f64).
block_build!(attend_block_avx512, "avx512f", 8, 4);
// AVX2: 6 rows × two registers of 8 lanes (f32), 2 rows × four registers of 4 (f64).
block_build!(attend_block_avx2, "avx2,fma", 6, 2);

/// One query block against all the keys it may see: `out` receives the block's output rows.
///
/// The queries go `MR` at a time through the micro-kernels, the last few two at a time (with
/// at most one zero query of padding, whose row is computed and never read); the keys a tile
/// at a time, 16 per panel.
// ANCHOR: attend_block
#[inline(always)]
fn attend_block<A: Float, const MR: usize, const FMA: bool>(
    x: &Block<A>,
    mut out: ArrayViewMut2<A>,
    scratch: &mut Scratch<A>,
) {
    let ((n_q, d_k), head) = (x.q.dim(), x.head);
    let (s_stride, o_stride) = (scratch.scores_stride, head.v_stride);
    let end = match x.visible {
        Visible::Causal => causal_end(x.i0, n_q, head.l_k),
        _ => head.l_k,
    };
    let rows = rows_computed(n_q, MR); // n_q, or one or a few more: zero queries
    // The queries times log₂e/√d_k, once: the scores come out scaled and in base 2, and each
    // weight is 2^(s − m), with no multiplication per score for either.
    let to_base2 = x.scale * A::from_f64_lossy(std::f64::consts::LOG2_E);
    let q = &mut scratch.q[..rows * d_k];
    let (queries, padding) = q.split_at_mut(n_q * d_k);
    let queries = ArrayViewMut2::from_shape((n_q, d_k), queries).expect("n_q rows of d_k");
    Zip::from(queries).and(&x.q).for_each(|to, &x| *to = x * to_base2);
    padding.fill(A::zero());
    // The unnormalised output Σ 2^(s − m)·v, built up tile by tile.
    let acc = &mut scratch.acc[..rows * o_stride];
    acc.fill(A::zero());
    let running = &mut scratch.running[..n_q];
    running.fill(Running::new());
    for j0 in (0..end).step_by(x.tile_k) {
        let j1 = (j0 + x.tile_k).min(end);
        if let Visible::Mask(allowed) = x.visible
            && !allowed.slice(s![.., j0..j1]).iter().any(|&ok| ok)
        {
            continue; // a tile no query of the block may see adds nothing
        }
        let n_k = j1 - j0;
        let keys = &head.kt[j0 / x.tile_k * head.tile_stride..];
        let s = &mut scratch.scores[..rows * s_stride];
        // S = Q_blk · K_tileᵀ · log₂e/√d_k, MR queries × 16 keys at a time.
        scores_tile::<A, MR, FMA>((q, n_q, d_k), (keys, n_k), (s, s_stride));
        let shape = (n_q, n_k).strides((s_stride, 1));
        let mut p = ArrayViewMut2::from_shape(shape, &mut s[..]).expect("the tile buffer");
        mask_tile(&mut p, x.visible, x.i0, j0);
        for ((mut p_row, run), acc_row) in p
            .rows_mut()
            .into_iter()
            .zip(running.iter_mut())
            .zip(acc.chunks_exact_mut(o_stride))
        {
            let p_row = p_row.as_slice_mut().expect("a row of the tile buffer");
            let tile_max = row_max(p_row); // NaN ignored, as softmax_row does
            let max = if tile_max > run.max { tile_max } else { run.max };
            if max == A::neg_infinity() {
                if p_row.iter().any(|s| s.is_nan()) {
                    run.sum = A::nan(); // NaN poisons the row, if it sees any key
                }
                p_row.fill(A::zero()); // nothing visible yet in this row
                continue;
            }
            // 0 on the first visible tile, 1 if the max held.
            let rescale = exp2_one::<A, FMA>(run.max - max);
            // P = 2^(S − m'), in place (`max` is the new maximum m').
            let tile_sum = exp2_in_place::<A, FMA>(p_row, max);
            run.sum = run.sum * rescale + tile_sum;
            run.max = max;
            if rescale != A::one() {
                // Earlier tiles were summed against the old max.
                acc_row.iter_mut().for_each(|o| *o = *o * rescale);
            }
        }
        // U += P · V_tile, MR rows × 16 columns at a time.
        let values = &head.v[j0 * o_stride..];
        pv_tile::<A, MR, FMA>((s, s_stride, n_q), (values, n_k), (acc, o_stride));
    }
    for ((mut out_row, run), acc_row) in
        out.rows_mut().into_iter().zip(running.iter_mut()).zip(acc.chunks_exact(o_stride))
    {
        // m back from base 2 (l is the same in both: 2^(s − m) = e^((s − m)·ln 2)).
        run.max = run.max * A::from_f64_lossy(std::f64::consts::LN_2);
        if run.max == A::neg_infinity() {
            out_row.fill(A::zero()); // a query that sees no key: zero output, as sdpa gives
        } else {
            // Normalise once, at the end.
            let acc_row = ArrayView1::from(&acc_row[..out_row.len()]);
            Zip::from(out_row).and(acc_row).for_each(|o, &a| *o = a / run.sum);
        }
    }
}
// ANCHOR_END: attend_block

/// Sets the blocked scores of one tile (rows = queries from `i0`, columns = keys from `j0`)
/// to −∞.
// ANCHOR: mask_tile
pub(crate) fn mask_tile<A: Float>(
    p: &mut ArrayRef2<A>,
    visible: Visible,
    i0: usize,
    j0: usize,
) {
    match visible {
        Visible::All => {}
        Visible::Causal => {
            for (r, mut row) in p.rows_mut().into_iter().enumerate() {
                // Key j > query i is blocked.
                let first_future = (i0 + r + 1).saturating_sub(j0);
                if first_future < row.len() {
                    row.slice_mut(s![first_future..]).fill(A::neg_infinity());
                }
            }
        }
        Visible::Mask(allowed) => {
            let allowed = allowed.slice(s![.., j0..j0 + p.ncols()]);
            Zip::from(p).and(&allowed).for_each(|s, &ok| {
                if !ok {
                    *s = A::neg_infinity();
                }
            });
        }
    }
}
// ANCHOR_END: mask_tile

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdpa::sdpa_batched;
    use ndarray::Array4;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random<A: Float>(shape: (usize, usize, usize, usize), rng: &mut StdRng) -> Array4<A> {
        Array4::from_shape_simple_fn(shape, || A::from_f64_lossy(rng.random_range(-3.0..3.0)))
    }

    /// Every instantiation any build uses (f32: 8, 6, 2 rows; f64: 4, 2, 1; the AVX-512 ones
    /// included), run here without the target features, against the plain path: the logic of
    /// each `MR`, on every machine, with no mask, causal and a mask, `d_k ≠ d_v`.
    #[test]
    fn every_rows_per_kernel_agrees_with_the_plain_path() {
        fn check<A: Float>(block: &BlockFn<A>, tolerance: f64) {
            let mut rng = StdRng::seed_from_u64(5);
            let sizes = [(37, 53, 7, 5), (1, 1, 1, 1), (130, 300, 64, 64), (9, 40, 17, 33)];
            for (l_q, l_k, d_k, d_v) in sizes {
                let q: Array4<A> = random((2, 3, l_q, d_k), &mut rng);
                let (k, v) =
                    (random((2, 3, l_k, d_k), &mut rng), random((2, 3, l_k, d_v), &mut rng));
                let causal = Mask::causal_rect(l_q, l_k);
                // Every third key hidden from every query; query 0 sees nothing.
                let some = Mask::from_array(Array2::from_shape_fn((l_q, l_k), |(i, j)| {
                    i > 0 && j % 3 != 1
                }))
                .unwrap();
                let maskings = [
                    (Masking::All, None),
                    (Masking::Causal, Some(&causal)),
                    (Masking::Mask(&some), Some(&some)),
                ];
                for (masking, mask) in maskings {
                    for tiles in [Tiles::default(), Tiles { block_q: 5, tile_k: 19 }] {
                        let plain = sdpa_batched(&q, &k, &v, mask).unwrap().output;
                        let (out, _) =
                            forward_with(&q, &k, &v, masking, tiles, false, block).unwrap();
                        let diff = (out - &plain)
                            .iter()
                            .fold(0.0, |m, d| d.abs().to_f64().unwrap().max(m));
                        assert!(
                            diff < tolerance,
                            "{l_q}×{l_k}×{d_k}×{d_v} {masking:?} {tiles:?}: {diff}"
                        );
                    }
                }
            }
        }
        check::<f32>(&attend_block::<f32, 8, true>, 1e-5);
        check::<f32>(&attend_block::<f32, 6, true>, 1e-5);
        check::<f32>(&attend_block::<f32, 2, false>, 1e-5);
        check::<f64>(&attend_block::<f64, 4, true>, 1e-12);
        check::<f64>(&attend_block::<f64, 2, true>, 1e-12);
        check::<f64>(&attend_block::<f64, 1, false>, 1e-12);
    }

    /// The reference loop, line for line the chapter's math, gives the plain path's output
    /// (and the fast path's) with tiles that do not divide `L_k`, one tile, one key per tile,
    /// `d_k ≠ d_v`, and the maximum in the last tile.
    #[test]
    fn the_reference_loop_agrees_with_the_plain_and_the_fast_path() {
        let mut rng = StdRng::seed_from_u64(7);
        let sizes = [(7, 19, 5, 3), (1, 1, 1, 1), (12, 40, 8, 8)];
        for ((l_q, l_k, d_k, d_v), late) in
            sizes.into_iter().flat_map(|s| [(s, false), (s, true)])
        {
            let mut q: Array4<f64> = random((1, 1, l_q, d_k), &mut rng);
            let mut k: Array4<f64> = random((1, 1, l_k, d_k), &mut rng);
            let v: Array4<f64> = random((1, 1, l_k, d_v), &mut rng);
            if late {
                // Every query's largest score on the last key (q·k ≤ 9·d_k ≤ 72 for the
                // others, 100·q₀ ≥ 100 for it): every row's maximum changes in the last tile.
                q.slice_mut(s![0, 0, .., 0]).mapv_inplace(|x| x.abs() + 1.0);
                k.slice_mut(s![0, 0, l_k - 1, ..]).fill(0.0);
                k[[0, 0, l_k - 1, 0]] = 100.0;
            }
            let plain = sdpa_batched(&q, &k, &v, None).unwrap().output;
            let plain = plain.slice(s![0, 0, .., ..]);
            let fast = tiled_sdpa_batched(&q, &k, &v, Masking::All, Tiles::default()).unwrap();
            let (q, k, v) = (
                q.slice(s![0, 0, .., ..]),
                k.slice(s![0, 0, .., ..]),
                v.slice(s![0, 0, .., ..]),
            );
            for tile_k in [1, 3, 4, l_k, l_k + 5] {
                let reference = attend_block_reference(&q, &k, &v, tile_k);
                let diff = (&reference - &plain).iter().fold(0.0_f64, |m, d| m.max(d.abs()));
                assert!(diff < 1e-12, "{l_q}×{l_k}×{d_k}×{d_v}, tiles of {tile_k}: {diff}");
                let diff = (&reference - &fast.slice(s![0, 0, .., ..]))
                    .iter()
                    .fold(0.0_f64, |m, d| m.max(d.abs()));
                assert!(diff < 1e-12, "against tiled_sdpa: {diff}");
            }
        }
        let (q, k) = (Array2::<f32>::ones((3, 2)), Array2::<f32>::ones((5, 2)));
        let v = Array2::from_shape_fn((5, 1), |(j, _)| j as f32);
        let out = attend_block_reference(&q, &k, &v, 2); // equal scores: the mean of 0..5
        assert!(out.iter().all(|&o| (o - 2.0).abs() < 1e-6));
    }

    /// A build this processor cannot run is refused by the function that was asked for it,
    /// not blamed on the environment variable.
    #[test]
    fn a_build_the_processor_lacks_is_an_error_naming_the_function() {
        let x = Array4::<f32>::zeros((1, 1, 3, 2));
        for simd in Simd::ALL.into_iter().filter(|s| !s.is_supported()) {
            let err = tiled_sdpa_batched_on(&x, &x, &x, Masking::All, Tiles::default(), simd)
                .unwrap_err()
                .to_string();
            let start =
                format!("tiled_sdpa_batched_on: this processor cannot run {}", simd.name());
            assert!(err.starts_with(&start), "{err}");
        }
        for simd in Simd::supported() {
            assert!(
                tiled_sdpa_batched_on(&x, &x, &x, Masking::All, Tiles::default(), simd)
                    .is_ok()
            );
        }
    }

    /// A NaN score among visible ones poisons its query's row in both paths (the plain path's
    /// softmax spreads it over the row); a row whose scores are all NaN or masked is zero in
    /// both (the maximum ignores NaN, so it sees no key).
    #[test]
    fn nan_scores_give_nan_rows_as_in_the_plain_path() {
        let mut rng = StdRng::seed_from_u64(6);
        let (mut q, k, v) = (
            random::<f32>((1, 1, 40, 8), &mut rng),
            random::<f32>((1, 1, 300, 8), &mut rng),
            random::<f32>((1, 1, 300, 8), &mut rng),
        );
        q[[0, 0, 3, 2]] = f32::NAN; // every score of query 3
        let mut k_nan = k.clone();
        k_nan[[0, 0, 290, 0]] = f32::NAN; // key 290's score for every query, in the last tile
        let mut allowed = Array2::from_elem((40, 300), true);
        allowed.row_mut(7).fill(false); // query 7 sees nothing
        let mask = Mask::from_array(allowed).unwrap();
        for (q, k, nan_key) in [(&q, &k, false), (&q, &k_nan, true)] {
            let plain = sdpa_batched(q, k, &v, Some(&mask)).unwrap().output;
            for simd in Simd::supported() {
                let tiled = tiled_sdpa_batched_on(
                    q,
                    k,
                    &v,
                    Masking::Mask(&mask),
                    Tiles::default(),
                    simd,
                )
                .unwrap();
                for (i, (t, p)) in tiled
                    .outer_iter()
                    .next()
                    .unwrap()
                    .outer_iter()
                    .zip(plain.outer_iter().next().unwrap().outer_iter())
                    .enumerate()
                {
                    for (a, b) in t.iter().zip(p.iter()) {
                        assert_eq!(a.is_nan(), b.is_nan(), "query {i}, {simd:?}");
                        assert!(a.is_nan() || (a - b).abs() < 1e-5);
                    }
                }
                assert_eq!(tiled[[0, 0, 0, 0]].is_nan(), nan_key);
                assert_eq!((tiled[[0, 0, 3, 0]], tiled[[0, 0, 7, 0]]), (0.0, 0.0));
            }
        }
    }
}
