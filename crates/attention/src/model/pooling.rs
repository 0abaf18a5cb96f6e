//! Chapter *Inside a real model*: from token vectors to one sentence vector.
//!
//! An encoder gives one vector per token, `(batch, L, d_model)`. A sentence embedding model
//! such as all-MiniLM-L6-v2 turns them into one vector per sentence by averaging the
//! sentence's real tokens ([`mean_pool`]: the padding after them must not count), then
//! scaling it to length 1 ([`l2_normalize`]). Two sentences are then compared by the cosine
//! of the angle between their vectors ([`cosine_similarity`]), which for unit vectors is
//! their dot product.
//!
//! Sums are accumulated in `f64` whatever the element type, in a fixed order.
//!
//! Anchors (below the doc comments): `mean_pool`, `l2_normalize`, `cosine_similarity`.

use ndarray::{Array2, ArrayRef1, ArrayRef2, ArrayRef3, Axis, s};

use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};
use crate::shapes::Operand;

/// The mean of each item's first `lengths[b]` token vectors: `hidden: (batch, L, d_model)`
/// gives `(batch, d_model)`. Tokens after `lengths[b]` (padding) are ignored.
///
/// Each length must be between 1 and `L`, and there must be one per batch item.
///
/// ```
/// use attention::pooling::mean_pool;
/// use ndarray::array;
///
/// let hidden = array![[[1.0, 2.0], [3.0, 4.0], [99.0, 99.0]]]; // the last token is padding
/// assert_eq!(mean_pool(&hidden, &[2]).unwrap(), array![[2.0, 3.0]]);
/// assert_eq!(
///     mean_pool(&hidden, &[4]).unwrap_err().to_string(),
///     "lengths[0]: it is 4, but hidden has only L = 3 tokens"
/// );
/// ```
// ANCHOR: mean_pool
pub fn mean_pool<A: Float>(hidden: &ArrayRef3<A>, lengths: &[usize]) -> Result<Array2<A>> {
    let (batch, l, d_model) = hidden.dim();
    Operand { name: "hidden", shape: hidden.shape(), rows: "L", cols: "d_model" }.split()?;
    if lengths.len() != batch {
        return Err(AttentionError::mismatch(
            "lengths",
            lengths.len(),
            "hidden",
            batch,
            "batch",
        ));
    }
    let mut pooled = Array2::zeros((batch, d_model));
    for (b, (&n, mut out)) in lengths.iter().zip(pooled.outer_iter_mut()).enumerate() {
        if n == 0 || n > l {
            return Err(AttentionError::Invalid {
                what: format!("lengths[{b}]"),
                problem: if n == 0 {
                    "it is 0, but a sentence has at least one token".into()
                } else {
                    format!("it is {n}, but hidden has only L = {l} tokens")
                },
            });
        }
        let tokens = hidden.slice(s![b, ..n, ..]); // (n, d_model): the real tokens only
        for (j, column) in tokens.axis_iter(Axis(1)).enumerate() {
            let sum: f64 = column.iter().map(|&v| to_f64(v)).sum();
            out[j] = A::from_f64_lossy(sum / n as f64);
        }
    }
    Ok(pooled)
}
// ANCHOR_END: mean_pool

/// Each row divided by its Euclidean length, or by `1e-12` if it is shorter than that (a
/// zero row stays zero), like `torch.nn.functional.normalize(x, p=2, dim=1)`.
///
/// ```
/// use attention::pooling::l2_normalize;
/// use ndarray::array;
///
/// let x = array![[3.0, 4.0], [0.0, 0.0]];
/// assert_eq!(l2_normalize(&x), array![[0.6, 0.8], [0.0, 0.0]]);
/// ```
// ANCHOR: l2_normalize
pub fn l2_normalize<A: Float>(x: &ArrayRef2<A>) -> Array2<A> {
    let mut out = x.to_owned();
    for mut row in out.rows_mut() {
        let norm = row.iter().map(|&v| to_f64(v).powi(2)).sum::<f64>().sqrt();
        let divisor = norm.max(1e-12);
        row.mapv_inplace(|v| A::from_f64_lossy(to_f64(v) / divisor));
    }
    out
}
// ANCHOR_END: l2_normalize

/// The cosine of the angle between `a` and `b`: `a·b / (‖a‖·‖b‖)`, from −1 to 1 (1: the
/// same direction). A zero vector has cosine 0 with everything: each length is clamped to at
/// least `1e-8`, as `torch.nn.functional.cosine_similarity` does.
///
/// ```
/// use attention::pooling::cosine_similarity;
/// use ndarray::array;
///
/// assert_eq!(cosine_similarity(&array![1.0, 0.0], &array![0.0, 2.0]).unwrap(), 0.0);
/// let same_direction = cosine_similarity(&array![1.0_f64, 1.0], &array![3.0, 3.0]).unwrap();
/// assert!((same_direction - 1.0).abs() < 1e-15);
/// assert_eq!(
///     cosine_similarity(&array![1.0, 0.0], &array![1.0]).unwrap_err().to_string(),
///     "a has d = 2 but b has d = 1"
/// );
/// ```
// ANCHOR: cosine_similarity
pub fn cosine_similarity<A: Float>(a: &ArrayRef1<A>, b: &ArrayRef1<A>) -> Result<A> {
    if a.len() != b.len() {
        return Err(AttentionError::mismatch("a", a.len(), "b", b.len(), "d"));
    }
    if a.is_empty() {
        return Err(AttentionError::Empty { what: "a".into(), dim: "d" });
    }
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| to_f64(x) * to_f64(y)).sum();
    let norm = |v: &ArrayRef1<A>| v.iter().map(|&x| to_f64(x).powi(2)).sum::<f64>().sqrt();
    Ok(A::from_f64_lossy(dot / (norm(a).max(1e-8) * norm(b).max(1e-8))))
}
// ANCHOR_END: cosine_similarity

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use ndarray::{Array1, Array3, array};

    /// Padding is ignored whatever it holds, and the mean is over the real tokens only
    /// (dividing by L instead of the length would give a different answer).
    #[test]
    fn mean_pool_ignores_padding() {
        let mut hidden =
            Array3::from_shape_fn((3, 4, 2), |(b, i, j)| (b * 10 + i * 2 + j) as f64);
        let lengths = [4, 2, 1];
        let pooled = mean_pool(&hidden, &lengths).unwrap();
        // item 0: rows (0,1) (2,3) (4,5) (6,7) → (3, 4); item 1: (10,11) (12,13) → (11, 12)
        assert_eq!(pooled, array![[3.0, 4.0], [11.0, 12.0], [20.0, 21.0]]);
        hidden.slice_mut(s![1, 2.., ..]).fill(1e6);
        hidden.slice_mut(s![2, 1.., ..]).fill(f64::NAN);
        assert_eq!(mean_pool(&hidden, &lengths).unwrap(), pooled);
        // A padded item pools like the item alone.
        let alone = hidden.slice(s![1..2, ..2, ..]).to_owned();
        assert_eq!(mean_pool(&alone, &[2]).unwrap().row(0), pooled.row(1));
    }

    /// In f32, the mean is accumulated in f64: 1e8 + 1 + ... does not lose the ones.
    #[test]
    fn mean_pool_accumulates_in_f64() {
        let mut hidden = Array3::<f32>::ones((1, 5, 1));
        hidden[[0, 0, 0]] = 1e8;
        hidden[[0, 4, 0]] = -1e8;
        // f32 running sum: 1e8 + 1 = 1e8 (the ones vanish), and the mean would be 0.
        assert_eq!(mean_pool(&hidden, &[5]).unwrap()[[0, 0]], 3.0 / 5.0);
    }

    #[test]
    fn mean_pool_checks_its_inputs() {
        let hidden = Array3::<f64>::zeros((2, 3, 4));
        let message = |lengths: &[usize]| mean_pool(&hidden, lengths).unwrap_err().to_string();
        assert_eq!(message(&[3]), "lengths has batch = 1 but hidden has batch = 2");
        assert_eq!(
            message(&[3, 0]),
            "lengths[1]: it is 0, but a sentence has at least one token"
        );
        assert_eq!(message(&[5, 1]), "lengths[0]: it is 5, but hidden has only L = 3 tokens");
        assert_eq!(
            mean_pool(&Array3::<f64>::zeros((1, 0, 4)), &[1]).unwrap_err().to_string(),
            "hidden has L = 0: it must be at least 1"
        );
    }

    /// Unit rows, directions kept; tiny rows are divided by 1e-12, not by their length.
    #[test]
    fn l2_normalize_makes_unit_rows() {
        let x: Array2<f64> = array![[1.0, 2.0, 2.0], [-0.5, 0.0, 0.0], [1e-13, 0.0, 0.0]];
        let y = l2_normalize(&x);
        assert_eq!(y.row(0), array![1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0]);
        assert_eq!(y.row(1), array![-1.0, 0.0, 0.0]);
        assert!((y[[2, 0]] - 0.1).abs() < 1e-15); // 1e-13 / 1e-12, not 1
        let norms: Array1<f64> = y.rows().into_iter().map(|r| r.dot(&r).sqrt()).collect();
        assert!((norms[0] - 1.0).abs() < 1e-15 && (norms[1] - 1.0).abs() < 1e-15);
    }

    #[test]
    fn cosine_similarity_by_hand() {
        // (1, 2, 2)·(2, 0, 1) = 4; lengths 3 and √5
        let c = cosine_similarity(&array![1.0, 2.0, 2.0], &array![2.0, 0.0, 1.0]).unwrap();
        assert!((c - 4.0 / (3.0 * 5f64.sqrt())).abs() < 1e-15);
        let opposite = cosine_similarity(&array![1.0_f32, -2.0], &array![-2.0, 4.0]).unwrap();
        assert!((opposite + 1.0).abs() < 1e-7);
        assert_eq!(cosine_similarity(&array![0.0, 0.0], &array![1.0, 2.0]).unwrap(), 0.0);
        // Of unit rows it is their dot product.
        let u = l2_normalize(&array![[1.0, 2.0, 2.0], [2.0, 0.0, 1.0]]);
        assert!((u.row(0).dot(&u.row(1)) - c).abs() < 1e-15);
        let empty = Array1::<f64>::zeros(0);
        assert_eq!(
            cosine_similarity(&empty, &empty).unwrap_err().to_string(),
            "a has d = 0: it must be at least 1"
        );
    }
}
