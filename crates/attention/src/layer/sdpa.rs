//! Scaled dot-product attention, the formula the chapters build up to: [`single_query`] in
//! chapter *Input embeddings*, [`sdpa`] at the end of chapter *Softmax*, [`sdpa_batched`] in
//! chapter *Multi-head attention*.
//!
//! `Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + M) · V`
//!
//! with `Q: (L_q, d_k)`, `K: (L_k, d_k)`, `V: (L_k, d_v)`, an optional mask `M`, weights
//! `(L_q, L_k)` and output `(L_q, d_v)`. Row `i` of the output is a weighted average of the
//! rows of `V`, weighted by how well query `i` matched each key. [`sdpa`] returns the weights
//! as well as the output, because the book draws them.
//!
//! [`single_query`] is the same computation for one query vector over a memory of keys and
//! values (the first picture of attention); [`sdpa_batched`] runs it over leading batch and
//! head axes.
//!
//! Anchors (below the doc comments): `sdpa` (with [`Attention`]), `single_query`,
//! `sdpa_batched`, `plain_self_attention`.

use ndarray::{Array, Array1, ArrayRef, ArrayRef1, ArrayRef2, Axis, Dimension, Ix1, Ix2};

use crate::batched;
use crate::error::Result;
use crate::float::Float;
use crate::mask::Mask;
use crate::scores::{scale, scaled_scores};
use crate::shapes::check_qkv;
use crate::softmax::softmax;

/// What attention computes: the output and the weights that produced it.
///
/// For [`sdpa`], `output: (L_q, d_v)` and `weights: (L_q, L_k)`; with leading axes, both
/// have them too; for [`single_query`], `output: (d_v,)` and `weights: (L_k,)`.
///
/// ```
/// use attention::sdpa::{sdpa, Attention};
/// use ndarray::array;
///
/// let x = array![[1.0, 0.0], [0.0, 1.0]];
/// let Attention { output, weights } = sdpa(&x, &x, &x, None).unwrap();
/// assert_eq!(output.dim(), (2, 2));
/// assert_eq!(weights.dim(), (2, 2));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: sdpa
pub struct Attention<A, D: Dimension> {
    /// The new representations, one row per query.
    pub output: Array<A, D>,
    /// The attention weights, one row per query, one column per key.
    pub weights: Array<A, D>,
}

// ANCHOR_END: sdpa
/// Scaled dot-product attention, `softmax(Q·Kᵀ/√d_k + M)·V`, for `q: (L_q, d_k)`,
/// `k: (L_k, d_k)`, `v: (L_k, d_v)` and an optional mask broadcastable to `(L_q, L_k)`.
///
/// Every row of the weights sums to 1, except the row of a query that the mask leaves
/// no key: its weights and its output are all zeros.
///
/// ```
/// use attention::{mask::Mask, sdpa::sdpa};
/// use ndarray::array;
///
/// let q = array![[1.0, 0.0], [0.0, 1.0]];
/// let k = array![[1.0, 0.0], [0.0, 1.0]];
/// let v = array![[10.0, 0.0], [0.0, 10.0]];
/// let causal = sdpa(&q, &k, &v, Some(&Mask::causal(2))).unwrap();
/// assert_eq!(causal.weights.row(0).to_vec(), [1.0, 0.0]); // token 0 sees only itself
/// assert_eq!(causal.output.row(0).to_vec(), [10.0, 0.0]);
/// ```
// ANCHOR: sdpa
pub fn sdpa<A: Float>(
    q: &ArrayRef2<A>,
    k: &ArrayRef2<A>,
    v: &ArrayRef2<A>,
    mask: Option<&Mask>,
) -> Result<Attention<A, Ix2>> {
    check_qkv(q.shape(), k.shape(), v.shape())?;
    let mut scores = scaled_scores(q, k)?; // (L_q, L_k)
    if let Some(mask) = mask {
        mask.apply(&mut scores)?; // blocked scores become −∞
    }
    let weights = softmax(&scores); // each row sums to 1 (or is all 0)
    let output = weights.dot(v); // (L_q, L_k)·(L_k, d_v) = (L_q, d_v)
    Ok(Attention { output, weights })
}
// ANCHOR_END: sdpa

/// Attention for a single query vector `q: (d_k,)` over a memory of keys `k: (L_k, d_k)`
/// and values `v: (L_k, d_v)`: weights `(L_k,)` and output `(d_v,)`, the weighted average
/// `Σᵢ wᵢ·vᵢ`.
///
/// ```
/// use attention::sdpa::single_query;
/// use ndarray::array;
///
/// let memory = array![[1.0, 0.0], [0.0, 1.0]];
/// let att = single_query(&array![0.0, 0.0], &memory, &memory).unwrap();
/// assert_eq!(att.weights, array![0.5, 0.5]); // a blank query likes every key equally
/// assert_eq!(att.output, array![0.5, 0.5]);
/// ```
// ANCHOR: single_query
pub fn single_query<A: Float>(
    q: &ArrayRef1<A>,
    k: &ArrayRef2<A>,
    v: &ArrayRef2<A>,
) -> Result<Attention<A, Ix1>> {
    let q = q.view().insert_axis(Axis(0)); // (1, d_k): a one-row matrix of queries
    let att = sdpa(&q, k, v, None)?;
    let weights: Array1<A> = att.weights.index_axis_move(Axis(0), 0);
    let output: Array1<A> = att.output.index_axis_move(Axis(0), 0);
    Ok(Attention { output, weights })
}
// ANCHOR_END: single_query

/// The sizes `(L_q, L_k, d_k, d_v)` of an attention problem given the shapes of
/// `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)` and `v: (..., L_k, d_v)`, after the checks every
/// attention function makes: the same leading axes, matching `d_k` and `L_k`, nothing empty.
/// For code outside this crate that runs attention its own way (chapter 14's GPU kernels).
///
/// ```
/// use attention::sdpa::check_shapes;
///
/// assert_eq!(check_shapes(&[2, 8, 5, 64], &[2, 8, 7, 64], &[2, 8, 7, 32]), Ok((5, 7, 64, 32)));
/// let err = check_shapes(&[5, 64], &[7, 64], &[6, 32]).unwrap_err();
/// assert_eq!(err.to_string(), "k has L_k = 7 but v has L_k = 6");
/// ```
pub fn check_shapes(
    q: &[usize],
    k: &[usize],
    v: &[usize],
) -> Result<(usize, usize, usize, usize)> {
    check_qkv(q, k, v)
}

/// [`sdpa`] over leading axes: `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)` and
/// `v: (..., L_k, d_v)` share their leading (batch, head) axes, and the mask broadcasts to
/// `(..., L_q, L_k)`. Each matrix of the stack is attended on its own.
///
/// ```
/// use attention::{mask::Mask, sdpa::{sdpa, sdpa_batched}};
/// use ndarray::{s, Array2, Array3};
///
/// let x = Array3::from_shape_fn((2, 3, 4), |(b, i, j)| ((b + 2 * i + j) % 5) as f64);
/// let padding = Mask::padding(&[3, 2], 3, 3).unwrap(); // (batch, L_q, L_k)
/// let att = sdpa_batched(&x, &x, &x, Some(&padding)).unwrap();
/// assert_eq!(att.weights.dim(), (2, 3, 3));
///
/// let item = x.slice(s![1, .., ..]);
/// let two_real_keys =
///     Mask::from_array(Array2::from_shape_fn((3, 3), |(_, j)| j < 2)).unwrap();
/// let one = sdpa(&item, &item, &item, Some(&two_real_keys)).unwrap();
/// assert_eq!(att.output.slice(s![1, .., ..]), one.output);
/// ```
// ANCHOR: sdpa_batched
pub fn sdpa_batched<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    mask: Option<&Mask>,
) -> Result<Attention<A, D>> {
    let (_, _, d_k, _) = check_qkv(q.shape(), k.shape(), v.shape())?;
    let mut scores = scale(batched::matmul(q, k, true), d_k); // (..., L_q, L_k)
    if let Some(mask) = mask {
        mask.apply(&mut scores)?;
    }
    let weights = softmax(&scores);
    let output = batched::matmul(&weights, v, false); // (..., L_q, d_v)
    Ok(Attention { output, weights })
}
// ANCHOR_END: sdpa_batched

/// `sdpa` with the query, key and value given as one matrix each and no mask: the
/// parameter-free self-attention `softmax(X·Xᵀ/√d)·X` of the first chapters.
///
/// ```
/// use attention::sdpa::plain_self_attention;
/// use ndarray::array;
///
/// let x = array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]];
/// let att = plain_self_attention(&x).unwrap();
/// assert_eq!(att.weights.dim(), (3, 3));
/// ```
// ANCHOR: plain_self_attention
pub fn plain_self_attention<A: Float>(x: &ArrayRef2<A>) -> Result<Attention<A, Ix2>> {
    sdpa(x, x, x, None)
}
// ANCHOR_END: plain_self_attention
