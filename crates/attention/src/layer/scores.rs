//! Chapter *Scores, scaling and variance*: `Q·Kᵀ / √d_k`.
//!
//! Entry `(i, j)` of `Q·Kᵀ: (L_q, L_k)` is the dot product of query `i` with key `j`: how well
//! token `i`'s question matches token `j`'s label. With entries of mean 0 and variance 1, a
//! dot product of `d_k` terms has variance `d_k`; dividing by `√d_k` brings it back to about
//! 1, which keeps softmax out of its flat, saturated regions. [`mean`] and [`variance`]
//! measure that (population statistics, like NumPy's `mean()` and `var()`).
//!
//! Anchors (below the doc comments): `scores`, `scale`, `scaled_scores`, `variance`,
//! `check_qk`.

use ndarray::{Array, Array2, ArrayRef, ArrayRef2, Dimension};

use crate::batched;
use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::shapes::{Operand, same_lead};

/// The raw scores `Q·Kᵀ`: `(L_q, d_k) · (d_k, L_k) = (L_q, L_k)`.
///
/// Row `i` holds query `i`'s dot product with every key.
///
/// ```
/// use attention::scores::scores;
/// use ndarray::array;
///
/// let q = array![[1.0, 0.0], [1.0, 1.0]];             // (L_q, d_k) = (2, 2)
/// let k = array![[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]; // (L_k, d_k) = (3, 2)
/// assert_eq!(scores(&q, &k).unwrap(), array![[1.0, 0.0, 2.0], [1.0, 1.0, 4.0]]);
/// ```
// ANCHOR: scores
pub fn scores<A: Float>(q: &ArrayRef2<A>, k: &ArrayRef2<A>) -> Result<Array2<A>> {
    check_qk(q.shape(), k.shape())?;
    Ok(q.dot(&k.t()))
}
// ANCHOR_END: scores

/// Divides scores by `√d_k`, the width of the queries and keys they came from.
///
/// ```
/// use attention::scores::scale;
/// use ndarray::array;
///
/// assert_eq!(scale(array![[4.0, -8.0]], 16), array![[1.0, -2.0]]);
/// ```
// ANCHOR: scale
pub fn scale<A: Float, D: Dimension>(scores: Array<A, D>, d_k: usize) -> Array<A, D> {
    let sqrt_d_k = A::from_len(d_k).sqrt();
    scores / sqrt_d_k
}
// ANCHOR_END: scale

/// `Q·Kᵀ / √d_k`, the scores that go into softmax: `(L_q, L_k)`.
///
/// ```
/// use attention::scores::scaled_scores;
/// use ndarray::array;
///
/// let q = array![[2.0, 2.0, 2.0, 2.0]];
/// let k = array![[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]];
/// assert_eq!(scaled_scores(&q, &k).unwrap(), array![[4.0, 0.0]]); // 8 / √4
/// ```
// ANCHOR: scaled_scores
pub fn scaled_scores<A: Float>(q: &ArrayRef2<A>, k: &ArrayRef2<A>) -> Result<Array2<A>> {
    let d_k = q.ncols();
    Ok(scale(scores(q, k)?, d_k))
}
// ANCHOR_END: scaled_scores

/// `Q·Kᵀ / √d_k` for stacks: `q: (..., L_q, d_k)` and `k: (..., L_k, d_k)` with the same
/// leading (batch, head) axes give `(..., L_q, L_k)`.
///
/// ```
/// use attention::scores::{scaled_scores, scaled_scores_batched};
/// use ndarray::{s, Array3};
///
/// let q = Array3::from_shape_fn((2, 3, 4), |(b, i, j)| (b * 7 + i * 3 + j) as f64 / 10.0);
/// let k = Array3::from_shape_fn((2, 5, 4), |(b, i, j)| (b + i + 2 * j) as f64 / 10.0);
/// let batched = scaled_scores_batched(&q, &k).unwrap();
/// assert_eq!(batched.dim(), (2, 3, 5));
/// let second = scaled_scores(&q.slice(s![1, .., ..]), &k.slice(s![1, .., ..])).unwrap();
/// assert_eq!(batched.slice(s![1, .., ..]), second);
/// ```
pub fn scaled_scores_batched<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
) -> Result<Array<A, D>> {
    let d_k = check_qk(q.shape(), k.shape())?;
    Ok(scale(batched::matmul(q, k, true), d_k))
}

/// The mean of all entries of a matrix (or any array); fails on an empty one.
///
/// ```
/// use attention::scores::mean;
/// use ndarray::array;
///
/// assert_eq!(mean(&array![[1.0, 2.0], [3.0, 6.0]]).unwrap(), 3.0);
/// ```
pub fn mean<A: Float, D: Dimension>(x: &ArrayRef<A, D>) -> Result<A> {
    x.mean().ok_or(AttentionError::Empty { what: "array".into(), dim: "len" })
}

/// The population variance of all entries, `mean((x - mean(x))²)`, like NumPy's `x.var()`
/// (`ddof = 0`); fails on an empty array.
///
/// ```
/// use attention::scores::variance;
/// use ndarray::array;
///
/// assert_eq!(variance(&array![[1.0, 3.0], [1.0, 3.0]]).unwrap(), 1.0);
/// ```
// ANCHOR: variance
pub fn variance<A: Float, D: Dimension>(x: &ArrayRef<A, D>) -> Result<A> {
    if x.is_empty() {
        return Err(AttentionError::Empty { what: "array".into(), dim: "len" });
    }
    Ok(x.var(A::zero()))
}
// ANCHOR_END: variance

/// Checks `q: (..., L_q, d_k)` against `k: (..., L_k, d_k)` and returns `d_k`.
// ANCHOR: check_qk
fn check_qk(q: &[usize], k: &[usize]) -> Result<usize> {
    let (q_lead, _, d_k) =
        Operand { name: "q", shape: q, rows: "L_q", cols: "d_k" }.split()?;
    let (k_lead, _, k_d_k) =
        Operand { name: "k", shape: k, rows: "L_k", cols: "d_k" }.split()?;
    same_lead("q", q_lead, "k", k_lead)?;
    if d_k != k_d_k {
        return Err(AttentionError::mismatch("q", d_k, "k", k_d_k, "d_k"));
    }
    Ok(d_k)
}
// ANCHOR_END: check_qk
