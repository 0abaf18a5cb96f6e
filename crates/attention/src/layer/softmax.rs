//! Chapter *Softmax*: from scores to weights that are ≥ 0 and sum to 1, row by row.
//!
//! `softmax(x)ᵢ = exp(xᵢ) / Σⱼ exp(xⱼ)`, taken along the last axis: each query's row of
//! scores becomes a probability distribution over the keys.
//!
//! Computed literally ([`naive_softmax`]), `exp` overflows to ∞ for scores above about 709
//! (`f64`) or 88 (`f32`), and that score's weight becomes ∞/∞ = NaN. Subtracting the row's
//! maximum first changes nothing mathematically (the factor `exp(-max)` cancels) but keeps
//! every exponent ≤ 0, so nothing overflows ([`softmax`]). Masked entries are −∞ and get
//! weight 0; a row whose every entry is −∞ (a query with no visible key) gets all-zero weights
//! instead of NaN, as PyTorch's `scaled_dot_product_attention` does.
//!
//! Anchors (below the doc comments): `stable_softmax`, `softmax_rows`, `naive_softmax`.

use ndarray::{Array, ArrayRef, ArrayRef1, Axis, Dimension};

use crate::float::Float;

/// Softmax of one row, in place, stable: subtract the row maximum before `exp`.
///
/// Entries may be −∞ (they become 0). If every entry is −∞ the row becomes all zeros.
/// Entries must not be NaN or +∞.
///
/// ```
/// use attention::softmax::softmax_row;
/// use ndarray::array;
///
/// let mut row = array![1000.0, 1000.0, f64::NEG_INFINITY];
/// softmax_row(&mut row);
/// assert_eq!(row, array![0.5, 0.5, 0.0]);
///
/// let mut blocked = array![f64::NEG_INFINITY, f64::NEG_INFINITY];
/// softmax_row(&mut blocked);
/// assert_eq!(blocked, array![0.0, 0.0]);
/// ```
// ANCHOR: stable_softmax
pub fn softmax_row<A: Float>(row: &mut ArrayRef1<A>) {
    let max = row.fold(A::neg_infinity(), |m, &x| m.max(x));
    if max == A::neg_infinity() {
        row.fill(A::zero()); // no visible key: no weight anywhere
        return;
    }
    row.mapv_inplace(|x| (x - max).exp()); // every exponent ≤ 0: no overflow
    let sum = row.sum(); // ≥ 1, from the maximum's own exp(0)
    row.mapv_inplace(|e| e / sum);
}
// ANCHOR_END: stable_softmax

/// Softmax along the last axis of any array: every row of `(..., L_q, L_k)` scores becomes a
/// row of weights.
///
/// ```
/// use attention::softmax::softmax;
/// use ndarray::array;
///
/// let weights = softmax(&array![[0.0, 0.0], [0.0, f64::ln(3.0)]]);
/// assert_eq!(weights.row(0).to_vec(), [0.5, 0.5]);
/// assert!((weights[[1, 1]] - 0.75).abs() < 1e-15);
///
/// // Any number of axes: here (batch, L_q, L_k) = (2, 1, 2); a single number gives 1.
/// assert_eq!(
///     softmax(&ndarray::Array3::<f32>::zeros((2, 1, 2))),
///     ndarray::Array3::from_elem((2, 1, 2), 0.5)
/// );
/// assert_eq!(softmax(&ndarray::arr0(7.0)), ndarray::arr0(1.0));
/// ```
// ANCHOR: softmax_rows
pub fn softmax<A: Float, D: Dimension>(scores: &ArrayRef<A, D>) -> Array<A, D> {
    let mut weights = scores.to_owned();
    for_each_row(&mut weights, softmax_row);
    weights
}

// ANCHOR_END: softmax_rows
/// Calls `f` on every row (lane along the last axis) of `a`; a 0-dimensional array (a single
/// number) counts as one row of length 1.
// ANCHOR: softmax_rows
fn for_each_row<A: Float, D: Dimension>(a: &mut Array<A, D>, f: impl Fn(&mut ArrayRef1<A>)) {
    match a.ndim().checked_sub(1) {
        Some(last) => a.lanes_mut(Axis(last)).into_iter().for_each(|mut row| f(&mut row)),
        None => f(&mut a
            .view_mut()
            .into_shape_with_order(1)
            .expect("a 0-d array holds one number")),
    }
}
// ANCHOR_END: softmax_rows

/// **For teaching only: do not use.** Softmax as the formula reads, `exp(x) / Σ exp(x)`, with
/// no maximum subtracted.
///
/// It overflows: a score above about 709 (`f64`) or 88 (`f32`) makes `exp` infinite and its
/// weight ∞/∞ = NaN, and a row that is entirely −∞ gives `0 / 0 = NaN`. [`softmax`] has
/// neither problem.
///
/// ```
/// use attention::softmax::{naive_softmax, softmax};
/// use ndarray::array;
///
/// let small = array![[1.0_f64, 2.0, 3.0]];
/// let same = naive_softmax(&small) - softmax(&small);
/// assert!(same.iter().all(|d| d.abs() < 1e-15));
///
/// let large = array![[1000.0_f64, 1000.0]];
/// assert!(naive_softmax(&large).iter().all(|w| w.is_nan()));
/// assert_eq!(softmax(&large), array![[0.5, 0.5]]);
/// ```
// ANCHOR: naive_softmax
pub fn naive_softmax<A: Float, D: Dimension>(scores: &ArrayRef<A, D>) -> Array<A, D> {
    let mut weights = scores.mapv(|x| x.exp());
    for_each_row(&mut weights, |row| {
        let sum = row.sum();
        row.mapv_inplace(|e| e / sum);
    });
    weights
}
// ANCHOR_END: naive_softmax
