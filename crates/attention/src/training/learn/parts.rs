//! The model's parts, each with its backward pass written out: the loss ([`cross_entropy`]),
//! the token embedding ([`embed`], [`embed_backward`]), the learned positions' gradient
//! ([`positions_backward`]) and the linear read-out ([`readout`], [`readout_backward`]).
//!
//! Anchors (below the doc comments): `cross_entropy`, `embed`, `embed_backward`,
//! `positions_backward`, `readout`, `readout_backward`.

use ndarray::{Array1, Array2, Array3, ArrayRef1, ArrayRef2, ArrayRef3, s};

use super::invalid_setting;
use crate::error::{AttentionError, Result};
use crate::exact;

/// The mean cross-entropy of `logits: (n, classes)` against `targets` (one per row; `None`
/// = the row is not scored), and its gradient with respect to the logits.
///
/// For a scored row with target `t`: `loss = ln Σⱼ exp(zⱼ) − z_t`, computed with the row's
/// maximum subtracted first (as the stable softmax does), and
/// `∂loss/∂zⱼ = softmax(z)ⱼ − [j = t]`. Both are divided by the number of scored rows;
/// unscored rows get a zero gradient. Rows are summed in order, with [`exact`]'s
/// `exp` and `ln`. An error when the lengths differ, a target is not below `classes`, or no
/// row is scored.
///
/// ```
/// use attention::learn::cross_entropy;
/// use ndarray::array;
///
/// let logits = array![[0.0, 0.0], [5.0, -5.0], [1.0, 2.0]];
/// let (loss, grad_logits) = cross_entropy(&logits, &[Some(0), None, Some(1)]).unwrap();
/// let expected = (2f64.ln() + (1.0 + (-1f64).exp()).ln()) / 2.0;
/// assert!((loss - expected).abs() < 1e-15);
/// assert_eq!(grad_logits.row(1).to_vec(), [0.0, 0.0]); // row 1 is not scored
/// assert_eq!(grad_logits.row(0).to_vec(), [-0.25, 0.25]); // (softmax − one-hot) / 2
/// ```
// ANCHOR: cross_entropy
pub fn cross_entropy(
    logits: &ArrayRef2<f64>,
    targets: &[Option<usize>],
) -> Result<(f64, Array2<f64>)> {
    let (n, classes) = logits.dim();
    if targets.len() != n {
        return Err(AttentionError::mismatch("logits", n, "targets", targets.len(), "n"));
    }
    let scored = targets.iter().flatten().count();
    if scored == 0 {
        return Err(invalid_setting("targets", "no position is scored".into()));
    }
    let mut total = 0.0;
    let mut grad_logits = Array2::zeros((n, classes));
    for (i, target) in targets.iter().enumerate() {
        let Some(t) = *target else { continue }; // not scored: no loss, no gradient
        if t >= classes {
            let problem = format!("target {t} of row {i} is not below classes = {classes}");
            return Err(invalid_setting("targets", problem));
        }
        let z = logits.row(i);
        let max = z.fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        let mut sum = 0.0;
        for &x in z {
            sum += exact::exp(x - max);
        }
        total += max + exact::ln(sum) - z[t]; // ln Σ exp(z) − z_t
        for (j, &x) in z.iter().enumerate() {
            let p = exact::exp(x - max) / sum;
            let one_hot = if j == t { 1.0 } else { 0.0 };
            grad_logits[[i, j]] = (p - one_hot) / scored as f64;
        }
    }
    Ok((total / scored as f64, grad_logits))
}
// ANCHOR_END: cross_entropy

/// The embedding lookup for a batch: `tokens: (batch, L)` → `(batch, L, d_model)`, row
/// `tokens[b, i]` of `table: (vocab, d_model)` at `[b, i, ..]`. An error names a token id
/// that is not below `vocab`.
///
/// ```
/// use attention::learn::embed;
/// use ndarray::array;
///
/// let table = array![[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]]; // (vocab, d_model) = (3, 2)
/// let x = embed(&table, &array![[2, 0], [1, 1]]).unwrap();
/// assert_eq!(x, array![[[2.0, 2.5], [0.0, 0.5]], [[1.0, 1.5], [1.0, 1.5]]]);
/// assert!(embed(&table, &array![[3]]).is_err());
/// ```
// ANCHOR: embed
pub fn embed(table: &ArrayRef2<f64>, tokens: &ArrayRef2<usize>) -> Result<Array3<f64>> {
    let (vocab, d_model) = table.dim();
    let (batch, len) = tokens.dim();
    let mut x = Array3::zeros((batch, len, d_model));
    for ((b, i), &id) in tokens.indexed_iter() {
        if id >= vocab {
            return Err(AttentionError::TokenId { id, size: vocab });
        }
        x.slice_mut(s![b, i, ..]).assign(&table.row(id));
    }
    Ok(x)
}
// ANCHOR_END: embed

/// The backward of [`embed`]: the gradient of the table, `(vocab, d_model)`. Row `t` is the
/// sum of the rows of `grad_x: (batch, L, d_model)` at every position holding token `t`,
/// added in the order `b`, then `i` (a scatter-add); rows of unseen tokens are zero.
///
/// ```
/// use attention::learn::embed_backward;
/// use ndarray::array;
///
/// let tokens = array![[1, 0, 1]];
/// let grad_x = array![[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]];
/// let grad_table = embed_backward(&tokens, &grad_x, 3).unwrap();
/// assert_eq!(grad_table, array![[3.0, 4.0], [6.0, 8.0], [0.0, 0.0]]);
/// ```
// ANCHOR: embed_backward
pub fn embed_backward(
    tokens: &ArrayRef2<usize>,
    grad_x: &ArrayRef3<f64>,
    vocab: usize,
) -> Result<Array2<f64>> {
    let (batch, len, d_model) = grad_x.dim();
    if tokens.dim() != (batch, len) {
        let expected = format!("(batch, L) = ({batch}, {len}), as grad_x, was expected");
        return Err(AttentionError::shape("tokens", tokens.shape(), &expected));
    }
    let mut grad_table = Array2::zeros((vocab, d_model));
    for ((b, i), &id) in tokens.indexed_iter() {
        if id >= vocab {
            return Err(AttentionError::TokenId { id, size: vocab });
        }
        let mut row = grad_table.row_mut(id);
        row += &grad_x.slice(s![b, i, ..]);
    }
    Ok(grad_table)
}
// ANCHOR_END: embed_backward

/// The backward of adding learned positions to every item of a batch: row `i` of the
/// gradient is `Σ_b grad_x[b, i, ..]`, summed in the order of `b`.
/// `grad_x: (batch, L, d_model)` gives `(L, d_model)`.
///
/// ```
/// use attention::learn::positions_backward;
/// use ndarray::array;
///
/// let grad_x = array![[[1.0, 2.0], [3.0, 4.0]], [[10.0, 20.0], [30.0, 40.0]]];
/// assert_eq!(positions_backward(&grad_x), array![[11.0, 22.0], [33.0, 44.0]]);
/// ```
// ANCHOR: positions_backward
pub fn positions_backward(grad_x: &ArrayRef3<f64>) -> Array2<f64> {
    let (_, len, d_model) = grad_x.dim();
    let mut grad_positions = Array2::zeros((len, d_model));
    for item in grad_x.outer_iter() {
        grad_positions += &item; // one batch item after the other
    }
    grad_positions
}
// ANCHOR_END: positions_backward

/// The read-out: `logits = H · W + b` for `h: (n, d_model)`, `w: (d_model, classes)`,
/// `b: (classes)`, the product through [`exact::matmul`].
///
/// ```
/// use attention::learn::readout;
/// use ndarray::array;
///
/// let h = array![[1.0, 2.0]];
/// let w = array![[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]];
/// let logits = readout(&h, &w, &array![0.5, 0.0, -3.0]).unwrap();
/// assert_eq!(logits, array![[1.5, 2.0, 0.0]]);
/// assert!(readout(&h, &w, &array![0.0]).is_err()); // b must have 3 entries
/// ```
// ANCHOR: readout
pub fn readout(
    h: &ArrayRef2<f64>,
    w: &ArrayRef2<f64>,
    b: &ArrayRef1<f64>,
) -> Result<Array2<f64>> {
    if h.ncols() != w.nrows() {
        return Err(AttentionError::mismatch("h", h.ncols(), "W", w.nrows(), "d_model"));
    }
    if b.len() != w.ncols() {
        return Err(AttentionError::mismatch("W", w.ncols(), "b", b.len(), "classes"));
    }
    let mut logits = exact::matmul(h, w)?; // (n, classes)
    logits.zip_mut_with(b, |z, &c| *z += c); // the same bias on every row
    Ok(logits)
}
// ANCHOR_END: readout

/// The gradients of [`readout`].
///
/// ```
/// use attention::learn::{readout_backward, ReadoutGrads};
/// use ndarray::array;
///
/// let ReadoutGrads { grad_h, grad_w, grad_b } =
///     readout_backward(&array![[1.0, 2.0]], &array![[1.0], [3.0]], &array![[0.5]]).unwrap();
/// let expected = (array![[0.5, 1.5]], array![[0.5], [1.0]], array![0.5]);
/// assert_eq!((grad_h, grad_w, grad_b), expected);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ReadoutGrads {
    /// `(n, d_model)`: `∂L/∂H = ∂L/∂logits · Wᵀ`.
    pub grad_h: Array2<f64>,
    /// `(d_model, classes)`: `∂L/∂W = Hᵀ · ∂L/∂logits`.
    pub grad_w: Array2<f64>,
    /// `(classes)`: `∂L/∂b`, the column sums of `∂L/∂logits`.
    pub grad_b: Array1<f64>,
}

/// The backward of [`readout`], given the input `h: (n, d_model)`, the weight
/// `w: (d_model, classes)` and `grad_logits: (n, classes)`. The bias's gradient adds the rows
/// in order; the products go through [`exact::matmul`].
///
/// ```
/// use attention::learn::readout_backward;
/// use ndarray::array;
///
/// let g = readout_backward(&array![[1.0, 2.0], [0.0, 1.0]], &array![[1.0], [3.0]],
///                          &array![[0.5], [-1.0]]).unwrap();
/// assert_eq!(g.grad_b, array![-0.5]);
/// assert_eq!(g.grad_w, array![[0.5], [0.0]]); // [1·0.5 + 0·(−1), 2·0.5 + 1·(−1)]
/// ```
// ANCHOR: readout_backward
pub fn readout_backward(
    h: &ArrayRef2<f64>,
    w: &ArrayRef2<f64>,
    grad_logits: &ArrayRef2<f64>,
) -> Result<ReadoutGrads> {
    if grad_logits.nrows() != h.nrows() {
        return Err(AttentionError::mismatch(
            "h",
            h.nrows(),
            "grad_logits",
            grad_logits.nrows(),
            "n",
        ));
    }
    if h.ncols() != w.nrows() {
        return Err(AttentionError::mismatch("h", h.ncols(), "W", w.nrows(), "d_model"));
    }
    if grad_logits.ncols() != w.ncols() {
        return Err(AttentionError::mismatch(
            "W",
            w.ncols(),
            "grad_logits",
            grad_logits.ncols(),
            "classes",
        ));
    }
    let grad_w = exact::matmul(&h.t(), grad_logits)?; // (d_model, classes)
    let grad_h = exact::matmul(grad_logits, &w.t())?; // (n, d_model)
    let mut grad_b = Array1::zeros(grad_logits.ncols());
    for row in grad_logits.rows() {
        grad_b += &row; // row after row
    }
    Ok(ReadoutGrads { grad_h, grad_w, grad_b })
}
// ANCHOR_END: readout_backward
