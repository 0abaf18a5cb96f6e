//! Chapter *Gradients*: the backward pass of tiled attention (FlashAttention-2), without the
//! `L_q × L_k` matrices.
//!
//! The plain backward ([`grad::sdpa_backward`](crate::grad::sdpa_backward)) takes the
//! forward's weights `P` and builds `dP = dO·Vᵀ` and `dS = P ∘ (dP − rowsum(dP ∘ P))`: three
//! `L_q × L_k` matrices per head. The tiled forward ([`tiled`]) never had `P`.
//! FlashAttention-2 (Dao 2023, arXiv:2307.08691, Algorithm 2) rebuilds it tile by tile from
//! two things the forward can keep cheaply:
//!
//! 1. **The row log-sum-exp** `lse_i = ln Σⱼ exp(s_ij) = m_i + ln l_i`, one number per query,
//!    read off the forward's running `(m, l)` when a row is done
//!    ([`Running::log_sum_exp`](crate::tiled::Running::log_sum_exp),
//!    [`tiled_sdpa_with_lse`]). Then `P_ij = exp(s_ij − lse_i)`: one `exp` per weight, no
//!    maximum and no sum to find again. A query that sees no key has `lse = −∞` and `P = 0`.
//! 2. **`D = rowsum(dO ∘ O)`**, one number per query. The softmax backward needs
//!    `rowsum(dP ∘ P)`, which seems to need a whole row of `dP`; but
//!    `Σⱼ P_ij dP_ij = Σⱼ P_ij Σ_c dO_ic V_jc = Σ_c dO_ic O_ic`, because `O = P·V`.
//!
//! With both, every tile's gradient is local ([`tiled_sdpa_backward`]): for a block of keys
//! `K_j, V_j` and a block of queries `Q_i` (with its `dO_i`, `lse_i`, `D_i`),
//!
//! ```text
//! S = Q_i·K_jᵀ/√d_k (masked)      P = exp(S − lse_i)        dV_j += Pᵀ·dO_i
//! dP = dO_i·V_jᵀ                   dS = P ∘ (dP − D_i)
//! dQ_i += dS·K_j/√d_k              dK_j += dSᵀ·Q_i/√d_k
//! ```
//!
//! The outer loop walks the key blocks and the inner loop the query blocks, as in the paper:
//! `dK_j` and `dV_j` are finished when the inner loop ends, while `dQ_i` collects one term
//! from every key block. On a GPU the paper's thread blocks add into `dQ` atomically. Here
//! one task of rayon's thread pool takes a whole (batch, head) matrix, so no two tasks ever
//! write the same gradient, and every `dQ_i` sums its terms in the order of the key blocks:
//! the result does not depend on the number of threads, to the last bit. The price is that a
//! single head runs on one thread; with as many (batch, head) matrices as threads or more,
//! all are busy.
//!
//! Memory: per matrix, `lse` and `D` (`2·L_q` numbers) next to the gradients; per thread, two
//! `block_q × tile_k` tiles, `P` and `dP` (overwritten by `dS`)
//! ([`Tiles::backward_scratch_len`]). Never `L_q × L_k`.
//!
//! The products go through ndarray's `general_mat_mul` (matrixmultiply; the tiled forward
//! has micro-kernels of its own, [`kernel`](crate::kernel)); it is the fast path, not the
//! reproducible one of chapter *Watching attention learn*.
//!
//! Anchors (below the doc comments): `with_lse`, `delta`, `backward_loops`, `backward_step`.

use ndarray::{
    Array, Array2, Array3, ArrayRef, ArrayRef2, ArrayView1, ArrayView2, ArrayViewMut1,
    ArrayViewMut2, Axis, Dimension, linalg::general_mat_mul, s,
};
use rayon::prelude::*;

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::grad::SdpaGrads;
use crate::kernel::{Simd, exp_in_place_on};
use crate::shapes::check_qkv;
use crate::tiled::{
    self, Masking, Tiles, Visible, mask_matrices, mask_tile, unflatten, visible,
};

/// [`tiled_sdpa_batched`](crate::tiled::tiled_sdpa_batched) that also returns the row
/// log-sum-exp of the scaled, masked scores: `(output, lse)` with `output: (..., L_q, d_v)`
/// and `lse: (..., L_q)`, `lse_i = ln Σⱼ exp(s_ij)`, −∞ for a query that sees no key.
///
/// It is the same forward (the same tasks, the same arithmetic, the same output to the last
/// bit): each row's `lse = m + ln l` is read off its running maximum and sum when the row is
/// done, one `ln` per query. The weights are `exp(s_ij − lse_i)`, which is how
/// [`tiled_sdpa_backward`] recomputes them.
///
/// ```
/// use attention::{mask::Mask, sdpa::sdpa};
/// use attention::tiled::{tiled_sdpa, Masking, Tiles};
/// use attention::tiled_grad::tiled_sdpa_with_lse;
/// use ndarray::Array2;
///
/// let q = Array2::from_shape_fn((5, 3), |(i, j)| ((2 * i + j) % 5) as f64 - 2.0);
/// let k = Array2::from_shape_fn((7, 3), |(i, j)| ((i + 3 * j) % 4) as f64 - 1.5);
/// let v = Array2::from_shape_fn((7, 2), |(i, j)| (i * j) as f64);
/// let allowed = Array2::from_shape_fn((5, 7), |(i, j)| i != 2 && j <= i + 1);
/// let mask = Mask::from_array(allowed).unwrap(); // query 2 sees no key
/// let tiles = Tiles { block_q: 2, tile_k: 3 };
/// let (output, lse) = tiled_sdpa_with_lse(&q, &k, &v, Masking::Mask(&mask), tiles).unwrap();
/// assert_eq!(output, tiled_sdpa(&q, &k, &v, Masking::Mask(&mask), tiles).unwrap());
/// assert_eq!(lse[2], f64::NEG_INFINITY);
///
/// // The weights are exp(s − lse): row 0 sees keys 0 and 1.
/// let weights = sdpa(&q, &k, &v, Some(&mask)).unwrap().weights;
/// let s = |i: usize, j: usize| q.row(i).dot(&k.row(j)) / 3f64.sqrt();
/// assert!(((s(0, 1) - lse[0]).exp() - weights[[0, 1]]).abs() < 1e-15);
/// ```
#[allow(clippy::type_complexity)] // a pair of arrays: the output and the log-sum-exp
// ANCHOR: with_lse
pub fn tiled_sdpa_with_lse<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    masking: Masking,
    tiles: Tiles,
) -> Result<(Array<A, D>, Array<A, D::Smaller>)> {
    let (output, lse) = tiled::forward(q, k, v, masking, tiles, true, Simd::chosen()?)?;
    Ok((output, lse.expect("asked for")))
}
// ANCHOR_END: with_lse

impl Tiles {
    /// The number of elements each thread of [`tiled_sdpa_backward`] keeps besides the
    /// gradients: two `block_q × tile_k` tiles, one for `S`, then `P`, one for `dP`, then
    /// `dS`. (Each is cut to `L_q × L_k` when the sequences are shorter than a tile.)
    ///
    /// The plain backward holds `P`, `dP` and `dS` whole instead: `3·L_q·L_k` per head.
    ///
    /// ```
    /// use attention::tiled::Tiles;
    ///
    /// let tiles = Tiles::default(); // 128 × 256
    /// assert_eq!(tiles.backward_scratch_len(), 2 * 128 * 256);
    /// // 256 KiB of f32 per thread, against 3 · 4096² · 4 bytes = 192 MiB per head.
    /// assert_eq!(tiles.backward_scratch_len() * 4, 256 * 1024);
    /// assert_eq!(3 * 4096 * 4096 * 4, 192 * 1024 * 1024);
    /// ```
    pub fn backward_scratch_len(&self) -> usize {
        2 * self.scratch_len()
    }
}

/// The backward of tiled attention (FlashAttention-2, Dao 2023, Algorithm 2): the gradients of
/// a loss with respect to `q`, `k` and `v`, given `grad_o = ∂loss/∂output`, without ever
/// forming an `L_q × L_k` matrix.
///
/// `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)`, `v: (..., L_k, d_v)` and `masking` are what
/// the forward was given; `output: (..., L_q, d_v)` and `lse: (..., L_q)` are what
/// [`tiled_sdpa_with_lse`] returned; `grad_o: (..., L_q, d_v)`. The weights are recomputed
/// tile by tile as `P = exp(S − lse)`, and the softmax backward uses
/// `D = rowsum(grad_o ∘ output)` (see the [module](self) documentation). A query that sees no
/// key (`lse = −∞`) has `P = 0` and contributes nothing: its row of `grad_q` is zero, and so
/// are the rows of `grad_k` and `grad_v` of a key no query sees.
///
/// The results equal [`grad::sdpa_backward`](crate::grad::sdpa_backward)'s up to rounding.
/// One task per (batch, head) matrix runs on rayon's pool (inside `ThreadPool::install` to
/// choose it), so the result does not depend on the number of threads; the tiles need not be
/// the forward's. Errors name the operand and its shape: the forward's errors, plus `output`,
/// `lse` or `grad_o` not of the shapes above.
///
/// ```
/// use attention::{mask::Mask, sdpa::sdpa_batched};
/// use attention::tiled::{Masking, Tiles};
/// use attention::tiled_grad::{tiled_sdpa_backward, tiled_sdpa_with_lse};
/// use ndarray::{Array3, Axis, s};
///
/// // Two heads of 6 queries and 6 keys, causal; the loss is Σ output ∘ grad_o.
/// let x = Array3::from_shape_fn((2, 6, 4), |(h, i, j)| ((h + 2 * i + 3 * j) % 5) as f64);
/// let grad_o = Array3::from_shape_fn((2, 6, 4), |(h, i, j)| (h + i) as f64 - j as f64);
/// let tiles = Tiles { block_q: 4, tile_k: 4 };
/// let (out, lse) = tiled_sdpa_with_lse(&x, &x, &x, Masking::Causal, tiles).unwrap();
/// let grads = tiled_sdpa_backward(&x, &x, &x, Masking::Causal, &out, &lse, &grad_o, tiles)
///     .unwrap();
///
/// // dV = Pᵀ·dO, with the weights of the plain path.
/// let p = sdpa_batched(&x, &x, &x, Some(&Mask::causal(6))).unwrap().weights;
/// for h in 0..2 {
///     let expected = p.index_axis(Axis(0), h).t().dot(&grad_o.index_axis(Axis(0), h));
///     let got = grads.grad_v.index_axis(Axis(0), h);
///     assert!((&got - &expected).iter().all(|d| d.abs() < 1e-12));
/// }
///
/// let short = lse.slice(s![.., ..5]);
/// let err = tiled_sdpa_backward(&x, &x, &x, Masking::Causal, &out, &short, &grad_o, tiles);
/// let expected = "lse has shape [2, 5] but a shape (..., L_q) = [2, 6] was expected";
/// assert_eq!(err.unwrap_err().to_string(), expected);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn tiled_sdpa_backward<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    masking: Masking,
    output: &ArrayRef<A, D>,
    lse: &ArrayRef<A, D::Smaller>,
    grad_o: &ArrayRef<A, D>,
    tiles: Tiles,
) -> Result<SdpaGrads<A, D>> {
    let (l_q, l_k, d_k, d_v) = check_qkv(q.shape(), k.shape(), v.shape())?;
    tiles.check()?;
    let lead = &q.shape()[..q.ndim() - 2];
    for (name, found, last, axes) in [
        ("output", output.shape(), &[l_q, d_v][..], "(..., L_q, d_v)"),
        ("lse", lse.shape(), &[l_q], "(..., L_q)"),
        ("grad_o", grad_o.shape(), &[l_q, d_v], "(..., L_q, d_v)"),
    ] {
        let expected = [lead, last].concat();
        if found != expected {
            let what = format!("a shape {axes} = {expected:?} was expected");
            return Err(AttentionError::shape(name, found, &what));
        }
    }
    let mut scores_shape = lead.to_vec();
    scores_shape.extend([l_q, l_k]);
    let masks = mask_matrices(masking, &scores_shape)?;

    let count: usize = lead.iter().product();
    let q3 = q.to_shape((count, l_q, d_k)).expect("leading axes collapse into one");
    let k3 = k.to_shape((count, l_k, d_k)).expect("leading axes collapse into one");
    let v3 = v.to_shape((count, l_k, d_v)).expect("leading axes collapse into one");
    let o3 = output.to_shape((count, l_q, d_v)).expect("leading axes collapse into one");
    let grad_o3 = grad_o.to_shape((count, l_q, d_v)).expect("leading axes collapse into one");
    let lse2 = lse.to_shape((count, l_q)).expect("leading axes collapse into one");
    let scale = A::one() / A::from_len(d_k).sqrt();
    let simd = Simd::chosen()?;
    let mut grad_q = Array3::<A>::zeros((count, l_q, d_k));
    let mut grad_k = Array3::<A>::zeros((count, l_k, d_k));
    let mut grad_v = Array3::<A>::zeros((count, l_k, d_v));
    let mut delta = Array2::<A>::zeros((count, l_q)); // D, one row per matrix

    // One task per matrix of the stack: it owns that matrix's dQ, dK, dV and D.
    let tasks: Vec<_> = grad_q
        .outer_iter_mut()
        .zip(grad_k.outer_iter_mut())
        .zip(grad_v.outer_iter_mut())
        .zip(delta.outer_iter_mut())
        .enumerate()
        .map(|(b, (((grad_q, grad_k), grad_v), delta))| {
            (b, Grads { grad_q, grad_k, grad_v }, delta)
        })
        .collect();
    let scratch = Tiles { block_q: tiles.block_q.min(l_q), tile_k: tiles.tile_k.min(l_k) };
    tasks.into_par_iter().for_each_init(
        || BackwardScratch::new(scratch, simd),
        |scratch, (b, grads, mut delta)| {
            let (o, grad_o) = (o3.index_axis(Axis(0), b), grad_o3.index_axis(Axis(0), b));
            row_dots(&mut delta, &o, &grad_o);
            let inputs = Inputs {
                q: q3.index_axis(Axis(0), b),
                k: k3.index_axis(Axis(0), b),
                v: v3.index_axis(Axis(0), b),
                grad_o,
                lse: lse2.index_axis(Axis(0), b),
                delta: delta.view(),
            };
            let masks = masks.as_ref().map(|m| &m[b..=b]);
            backward_matrix(&inputs, masks, masking, tiles, scale, grads, scratch);
        },
    );

    Ok(SdpaGrads {
        grad_q: unflatten(grad_q, lead),
        grad_k: unflatten(grad_k, lead),
        grad_v: unflatten(grad_v, lead),
    })
}

/// `D = rowsum(dO ∘ O)`: for each query, the dot product of its rows of `O` and `dO`. It
/// equals `rowsum(dP ∘ P)`, the term the softmax backward subtracts, since `O = P·V` and
/// `dP = dO·Vᵀ`.
// ANCHOR: delta
fn row_dots<A: Float>(delta: &mut ArrayViewMut1<A>, o: &ArrayRef2<A>, grad_o: &ArrayRef2<A>) {
    for ((d, o_row), grad_o_row) in delta.iter_mut().zip(o.rows()).zip(grad_o.rows()) {
        *d = o_row.dot(&grad_o_row);
    }
}
// ANCHOR_END: delta

/// One matrix's inputs to the backward: `q: (L_q, d_k)`, `k: (L_k, d_k)`, `v: (L_k, d_v)`,
/// `grad_o: (L_q, d_v)`, `lse: (L_q)` and `delta` (`D`): `(L_q)`.
struct Inputs<'a, A> {
    q: ArrayView2<'a, A>,
    k: ArrayView2<'a, A>,
    v: ArrayView2<'a, A>,
    grad_o: ArrayView2<'a, A>,
    lse: ArrayView1<'a, A>,
    delta: ArrayView1<'a, A>,
}

/// One matrix's gradients, written in place.
struct Grads<'a, A> {
    grad_q: ArrayViewMut2<'a, A>,
    grad_k: ArrayViewMut2<'a, A>,
    grad_v: ArrayViewMut2<'a, A>,
}

/// What one thread reuses from task to task: the tile of `S`, then `P`, and the tile of `dP`,
/// then `dS`; and the build of the exponential loop to use.
struct BackwardScratch<A> {
    p: Array2<A>,
    grad_s: Array2<A>,
    simd: Simd,
}

impl<A: Float> BackwardScratch<A> {
    fn new(tiles: Tiles, simd: Simd) -> Self {
        let shape = (tiles.block_q, tiles.tile_k);
        BackwardScratch { p: Array2::zeros(shape), grad_s: Array2::zeros(shape), simd }
    }
}

/// Algorithm 2's two loops for one matrix of the stack: key blocks outside, query blocks
/// inside. `masks` is this matrix's mask, if any (a one-element slice).
// ANCHOR: backward_loops
fn backward_matrix<A: Float>(
    x: &Inputs<A>,
    masks: Option<&[ArrayView2<bool>]>,
    masking: Masking,
    tiles: Tiles,
    scale: A,
    mut grads: Grads<A>,
    scratch: &mut BackwardScratch<A>,
) {
    let (l_q, l_k) = (x.q.nrows(), x.k.nrows());
    let causal = masks.is_none() && matches!(masking, Masking::Causal);
    for j0 in (0..l_k).step_by(tiles.tile_k) {
        let keys = j0..(j0 + tiles.tile_k).min(l_k);
        let mut grad_k_j = grads.grad_k.slice_mut(s![keys.clone(), ..]); // dK_j and dV_j stay
        let mut grad_v_j = grads.grad_v.slice_mut(s![keys.clone(), ..]); // until j is done
        // Causal: queries before j0 see none of these keys; start at the block holding j0.
        let first = if causal { j0 / tiles.block_q * tiles.block_q } else { 0 };
        for i0 in (first..l_q).step_by(tiles.block_q) {
            let rows = i0..(i0 + tiles.block_q).min(l_q);
            let visible = visible(masks, masking, 0, rows.clone());
            if let Visible::Mask(allowed) = visible
                && !allowed.slice(s![.., keys.clone()]).iter().any(|&ok| ok)
            {
                continue; // no query of the block sees any of these keys
            }
            let mut grad_q_i = grads.grad_q.slice_mut(s![rows.clone(), ..]);
            let block = Block {
                q: x.q.slice(s![rows.clone(), ..]),
                grad_o: x.grad_o.slice(s![rows.clone(), ..]),
                lse: x.lse.slice(s![rows.clone()]),
                delta: x.delta.slice(s![rows]),
                k: x.k.slice(s![keys.clone(), ..]),
                v: x.v.slice(s![keys.clone(), ..]),
                visible,
                at: (i0, j0),
            };
            backward_step(&block, scale, &mut grad_q_i, &mut grad_k_j, &mut grad_v_j, scratch);
        }
    }
}
// ANCHOR_END: backward_loops

/// One (query block, key block) pair: rows `at.0..` of `q`, `grad_o`, `lse` and `D`, rows
/// `at.1..` of `k` and `v`, and which of the pair's scores are visible.
// ANCHOR: backward_step
struct Block<'a, A> {
    q: ArrayView2<'a, A>,
    grad_o: ArrayView2<'a, A>,
    lse: ArrayView1<'a, A>,
    delta: ArrayView1<'a, A>,
    k: ArrayView2<'a, A>,
    v: ArrayView2<'a, A>,
    visible: Visible<'a>,
    at: (usize, usize),
}

// ANCHOR_END: backward_step
/// The inner step of Algorithm 2: recompute the pair's weights from `lse`, then add its terms
/// to `dV_j`, `dQ_i` and `dK_j`. Five tile products, all written into existing buffers.
// ANCHOR: backward_step
fn backward_step<A: Float>(
    x: &Block<A>,
    scale: A,
    grad_q_i: &mut ArrayRef2<A>,
    grad_k_j: &mut ArrayRef2<A>,
    grad_v_j: &mut ArrayRef2<A>,
    scratch: &mut BackwardScratch<A>,
) {
    let (n_q, n_k) = (x.q.nrows(), x.k.nrows());
    let mut p = scratch.p.slice_mut(s![..n_q, ..n_k]);
    let mut grad_s = scratch.grad_s.slice_mut(s![..n_q, ..n_k]);
    // S = Q_i · K_jᵀ / √d_k, masked as in the forward.
    general_mat_mul(scale, &x.q, &x.k.t(), A::zero(), &mut p);
    mask_tile(&mut p, x.visible, x.at.0, x.at.1);
    // P = exp(S − lse), in place: the forward's weights. A query that sees no key: P = 0.
    for (mut row, &lse) in p.rows_mut().into_iter().zip(x.lse) {
        if lse == A::neg_infinity() {
            row.fill(A::zero());
        } else {
            let row = row.as_slice_mut().expect("a row of the tile buffer");
            exp_in_place_on(scratch.simd, row, lse);
        }
    }
    // dV_j += Pᵀ · dO_i
    general_mat_mul(A::one(), &p.t(), &x.grad_o, A::one(), grad_v_j);
    // dP = dO_i · V_jᵀ, then dS = P ∘ (dP − D_i), in place.
    general_mat_mul(A::one(), &x.grad_o, &x.v.t(), A::zero(), &mut grad_s);
    for ((mut row, p_row), &d) in grad_s.rows_mut().into_iter().zip(p.rows()).zip(x.delta) {
        row.zip_mut_with(&p_row, |g, &p| *g = p * (*g - d));
    }
    // dQ_i += dS · K_j / √d_k and dK_j += dSᵀ · Q_i / √d_k
    general_mat_mul(scale, &grad_s, &x.k, A::one(), grad_q_i);
    general_mat_mul(scale, &grad_s.t(), &x.q, A::one(), grad_k_j);
}
// ANCHOR_END: backward_step

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact;
    use crate::grad::sdpa_backward;
    use crate::mask::Mask;
    use crate::tiled::tiled_sdpa_batched;
    use ndarray::{Array4, ArrayD, IxDyn};
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    #[test]
    fn the_scratch_is_what_backward_scratch_len_says() {
        for (block_q, tile_k) in [(1, 1), (3, 5), (128, 256)] {
            let tiles = Tiles { block_q, tile_k };
            let scratch = BackwardScratch::<f32>::new(tiles, Simd::Portable);
            assert_eq!(scratch.p.len() + scratch.grad_s.len(), tiles.backward_scratch_len());
        }
    }

    /// The plain path: `exact::sdpa`'s weights, then `grad::sdpa_backward`.
    fn plain<A: Float>(c: &Case<A>) -> SdpaGrads<A, ndarray::Ix4> {
        let p = exact::sdpa(&c.q, &c.k, &c.v, c.mask.as_ref()).unwrap().weights;
        sdpa_backward(&c.q, &c.k, &c.v, &p, &c.grad_o).unwrap()
    }

    /// The tiled path: `tiled_sdpa_with_lse`, then `tiled_sdpa_backward`.
    fn tiled<A: Float>(c: &Case<A>, tiles: Tiles) -> SdpaGrads<A, ndarray::Ix4> {
        let masking = c.masking();
        let (out, lse) = tiled_sdpa_with_lse(&c.q, &c.k, &c.v, masking, tiles).unwrap();
        tiled_sdpa_backward(&c.q, &c.k, &c.v, masking, &out, &lse, &c.grad_o, tiles).unwrap()
    }

    /// The largest `|a − b| / (atol + rtol·|b|)` over the three gradients: at most 1 means
    /// within tolerance.
    fn worst<A: Float>(a: &SdpaGrads<A, ndarray::Ix4>, b: &SdpaGrads<A, ndarray::Ix4>) -> f64 {
        let tol = if size_of::<A>() == 4 { 1e-5 } else { 1e-12 }; // atol = rtol
        let pairs = [(&a.grad_q, &b.grad_q), (&a.grad_k, &b.grad_k), (&a.grad_v, &b.grad_v)];
        pairs
            .iter()
            .flat_map(|(a, b)| {
                assert_eq!(a.shape(), b.shape());
                a.iter().zip(b.iter())
            })
            .map(|(&a, &b)| {
                let (a, b) = (a.to_f64().unwrap(), b.to_f64().unwrap());
                (a - b).abs() / (tol + tol * b.abs())
            })
            .fold(0.0, f64::max)
    }

    /// The kinds of masking: none, causal, a random boolean mask in which about one query in
    /// five sees no key, and padding (a batch item may have no valid key at all).
    #[derive(Debug, Clone, Copy)]
    enum Kind {
        All,
        Causal,
        Random,
        Padding,
    }

    struct Case<A> {
        q: Array4<A>,
        k: Array4<A>,
        v: Array4<A>,
        grad_o: Array4<A>,
        kind: Kind,
        /// The mask for the plain path (causal too).
        mask: Option<Mask>,
    }

    impl<A: Float> Case<A> {
        fn masking(&self) -> Masking<'_> {
            match (self.kind, &self.mask) {
                (Kind::All, _) => Masking::All,
                (Kind::Causal, _) => Masking::Causal,
                (_, Some(mask)) => Masking::Mask(mask),
                (_, None) => unreachable!("a mask kind has a mask"),
            }
        }
    }

    /// Entries in [−2, 2) from `seed`: `dims = [batch, heads, L_q, L_k, d_k, d_v]`.
    fn case<A: Float>(dims: [usize; 6], kind: Kind, seed: u64) -> Case<A> {
        let [batch, heads, l_q, l_k, d_k, d_v] = dims;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut random = |shape: (usize, usize, usize, usize)| {
            Array4::from_shape_simple_fn(shape, || {
                A::from_f64_lossy(rng.random_range(-2.0..2.0))
            })
        };
        let (q, k) = (random((batch, heads, l_q, d_k)), random((batch, heads, l_k, d_k)));
        let (v, grad_o) = (random((batch, heads, l_k, d_v)), random((batch, heads, l_q, d_v)));
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let mask = match kind {
            Kind::All => None,
            Kind::Causal => Some(Mask::causal_rect(l_q, l_k)),
            Kind::Random => {
                let blind: Vec<bool> =
                    (0..batch * heads * l_q).map(|_| rng.random_bool(0.2)).collect();
                let allowed =
                    Array4::from_shape_fn((batch, heads, l_q, l_k), |(b, h, i, _)| {
                        !blind[(b * heads + h) * l_q + i]
                    });
                let allowed = allowed.mapv(|ok| ok && rng.random_bool(0.6));
                Some(Mask::from_array(allowed).unwrap())
            }
            Kind::Padding => {
                let valid: Vec<usize> =
                    (0..batch).map(|_| rng.random_range(0..=l_k)).collect();
                Some(Mask::padding(&valid, l_q, l_k).unwrap().for_heads())
            }
        };
        Case { q, k, v, grad_o, kind, mask }
    }

    fn kinds() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::All),
            Just(Kind::Causal),
            Just(Kind::Random),
            Just(Kind::Padding)
        ]
    }

    /// `[batch, heads, L_q, L_k, d_k, d_v]`, tiles that rarely divide the lengths, a seed.
    fn shapes() -> impl Strategy<Value = ([usize; 6], Tiles, u64)> {
        let dims = (1..=2usize, 1..=3usize, 1..=23usize, 1..=23usize, 1..=6usize, 1..=6usize);
        (dims, 1..=7usize, 1..=7usize, any::<u64>()).prop_map(
            |((b, h, l_q, l_k, d_k, d_v), block_q, tile_k, seed)| {
                ([b, h, l_q, l_k, d_k, d_v], Tiles { block_q, tile_k }, seed)
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// f64: tiled = plain within 1e-12 + 1e-12·|plain|.
        #[test]
        fn tiled_backward_equals_plain_f64((dims, tiles, seed) in shapes(), kind in kinds()) {
            let c = case::<f64>(dims, kind, seed);
            let w = worst(&tiled(&c, tiles), &plain(&c));
            prop_assert!(w <= 1.0, "{} times the tolerance", w);
        }

        /// f32: tiled = plain within 1e-5 + 1e-5·|plain|.
        #[test]
        fn tiled_backward_equals_plain_f32((dims, tiles, seed) in shapes(), kind in kinds()) {
            let c = case::<f32>(dims, kind, seed);
            let w = worst(&tiled(&c, tiles), &plain(&c));
            prop_assert!(w <= 1.0, "{} times the tolerance", w);
        }
    }

    #[test]
    fn the_forward_with_lse_is_the_forward() {
        let c = case::<f64>([2, 2, 13, 9, 4, 3], Kind::Random, 5);
        let tiles = Tiles { block_q: 4, tile_k: 3 };
        let (out, lse) = tiled_sdpa_with_lse(&c.q, &c.k, &c.v, c.masking(), tiles).unwrap();
        assert_eq!(out, tiled_sdpa_batched(&c.q, &c.k, &c.v, c.masking(), tiles).unwrap());
        // lse = ln Σ exp(s) over the visible keys, directly.
        let mask = c.mask.as_ref().unwrap();
        let mut blind = 0;
        for ((b, h, i), &lse) in lse.indexed_iter() {
            let scores: Vec<f64> = (0..9)
                .filter(|&j| mask.allows(&[b, h, i, j]))
                .map(|j| c.q.slice(s![b, h, i, ..]).dot(&c.k.slice(s![b, h, j, ..])) / 2.0)
                .collect();
            if scores.is_empty() {
                assert_eq!(lse, f64::NEG_INFINITY);
                blind += 1;
            } else {
                let direct = scores.iter().map(|s| s.exp()).sum::<f64>().ln();
                assert!((lse - direct).abs() < 1e-12, "{lse} {direct}");
            }
        }
        assert!(blind > 0, "the case has a query that sees no key");
    }

    /// A query that sees no key: lse = −∞, P = 0, a zero row of dQ, and no NaN anywhere;
    /// a key that no query sees: zero rows of dK and dV.
    fn check_blind<A: Float>(tiles: Tiles) {
        let mut c = case::<A>([1, 1, 6, 5, 3, 2], Kind::Random, 11);
        let allowed = Array4::from_shape_fn((1, 1, 6, 5), |(_, _, i, j)| {
            i != 2 && j != 3 && (i + j) % 4 != 0
        });
        c.mask = Some(Mask::from_array(allowed).unwrap());
        let (_, lse) = tiled_sdpa_with_lse(&c.q, &c.k, &c.v, c.masking(), tiles).unwrap();
        assert_eq!(lse[[0, 0, 2]], A::neg_infinity());
        assert!(lse.iter().filter(|&&x| x == A::neg_infinity()).count() == 1);
        let g = tiled(&c, tiles);
        assert!(g.grad_q.iter().chain(&g.grad_k).chain(&g.grad_v).all(|x| x.is_finite()));
        assert!(g.grad_q.slice(s![0, 0, 2, ..]).iter().all(|&x| x == A::zero()));
        assert!(g.grad_k.slice(s![0, 0, 3, ..]).iter().all(|&x| x == A::zero()));
        assert!(g.grad_v.slice(s![0, 0, 3, ..]).iter().all(|&x| x == A::zero()));
        assert!(worst(&g, &plain(&c)) <= 1.0);
    }

    #[test]
    fn a_query_that_sees_no_key_gets_zero_gradients_and_no_nan() {
        for tiles in [Tiles { block_q: 1, tile_k: 1 }, Tiles { block_q: 4, tile_k: 2 }] {
            check_blind::<f64>(tiles);
            check_blind::<f32>(tiles);
        }
    }

    #[test]
    fn the_result_does_not_depend_on_the_number_of_threads() {
        let c = case::<f64>([2, 3, 40, 37, 8, 5], Kind::Causal, 3);
        let tiles = Tiles { block_q: 8, tile_k: 16 };
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| tiled(&c, tiles))
        };
        assert_eq!(run(1), run(3));
    }

    #[test]
    fn bad_shapes_are_errors_that_name_them() {
        let c = case::<f64>([1, 2, 4, 5, 3, 2], Kind::All, 1);
        let tiles = Tiles::default();
        let (out, lse) = tiled_sdpa_with_lse(&c.q, &c.k, &c.v, Masking::All, tiles).unwrap();
        let back = |out: &Array4<f64>, lse: &ndarray::Array3<f64>, grad_o: &Array4<f64>| {
            tiled_sdpa_backward(&c.q, &c.k, &c.v, Masking::All, out, lse, grad_o, tiles)
                .unwrap_err()
                .to_string()
        };
        let expected = |what: &str, shape: &str, axes: &str, want: &str| {
            format!("{what} has shape {shape} but a shape {axes} = {want} was expected")
        };
        let wide = Array4::zeros((1, 2, 4, 3));
        let want = expected("output", "[1, 2, 4, 3]", "(..., L_q, d_v)", "[1, 2, 4, 2]");
        assert_eq!(back(&wide, &lse, &c.grad_o), want);
        let short = Array4::zeros((1, 2, 3, 2));
        let want = expected("grad_o", "[1, 2, 3, 2]", "(..., L_q, d_v)", "[1, 2, 4, 2]");
        assert_eq!(back(&out, &lse, &short), want);
        let other_batch = Array4::zeros((2, 2, 4, 2));
        let want = expected("grad_o", "[2, 2, 4, 2]", "(..., L_q, d_v)", "[1, 2, 4, 2]");
        assert_eq!(back(&out, &lse, &other_batch), want);
        let lse3 = ndarray::Array3::zeros((1, 3, 4));
        let want = expected("lse", "[1, 3, 4]", "(..., L_q)", "[1, 2, 4]");
        assert_eq!(back(&out, &lse3, &c.grad_o), want);
        // With dynamic axes, lse can have the wrong number of them.
        let dy = |a: &Array4<f64>| a.clone().into_dyn();
        let (q, k, v, o, grad_o) = (dy(&c.q), dy(&c.k), dy(&c.v), dy(&out), dy(&c.grad_o));
        let flat: ArrayD<f64> = ArrayD::zeros(IxDyn(&[8]));
        let err = tiled_sdpa_backward(&q, &k, &v, Masking::All, &o, &flat, &grad_o, tiles);
        let want = expected("lse", "[8]", "(..., L_q)", "[1, 2, 4]");
        assert_eq!(err.unwrap_err().to_string(), want);
        let mask = Mask::causal(5);
        let m = Masking::Mask(&mask);
        let err = tiled_sdpa_backward(&c.q, &c.k, &c.v, m, &out, &lse, &c.grad_o, tiles);
        assert_eq!(
            err.unwrap_err().to_string(),
            "mask has shape [5, 5], which does not broadcast to the scores' shape [1, 2, 4, 5]"
        );
        let zero = Tiles { block_q: 0, tile_k: 1 };
        let err =
            tiled_sdpa_backward(&c.q, &c.k, &c.v, Masking::All, &out, &lse, &c.grad_o, zero);
        assert_eq!(
            err.unwrap_err().to_string(),
            "tiles has block_q = 0: it must be at least 1"
        );
    }
}
