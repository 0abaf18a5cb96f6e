//! Chapter *Where is each word? Position*: ALiBi, attention with linear biases (Press et al.
//! 2022).
//!
//! ALiBi adds no position to the tokens either. It adds a penalty to the scores, growing
//! linearly with the distance between query and key: head `h` adds `−m_h · (i − j)` to the
//! score of query `i` for key `j`, before softmax. Each head has its own slope `m_h`, so some
//! heads look far back and others mostly at the last few tokens.
//!
//! The slopes are a geometric sequence: for `n` heads, `n` a power of two, they start at
//! `2^(−8/n)` and each is the previous one times `2^(−8/n)`, so head `h` (from 0) has
//! `m_h = 2^(−8(h+1)/n)`, ending at `2^(−8)`. The paper only gives this rule; for other head
//! counts [`alibi_slopes`] follows the authors' reference code (`get_slopes` in
//! `github.com/ofirpress/attention_with_linear_biases`, `fairseq/models/transformer.py`).
//!
//! ALiBi was made for causal language models, and the bias is meant to be used with a causal
//! mask: see [`alibi_bias`] for why.
//!
//! Anchors (below the doc comments): `alibi_slopes`, `alibi_bias`.

use ndarray::Array3;

use crate::error::{AttentionError, Result};
use crate::float::Float;

/// The ALiBi slope of each of `heads` heads.
///
/// For a power of two `n`, the paper's geometric sequence `2^(−8/n), 2^(−16/n), …, 2^(−8)`.
/// For any other `n`, the rule of the reference code's `get_slopes`: the slopes for the
/// largest power of two `p < n`, followed by every other slope of `2p` heads (the 1st, 3rd,
/// 5th, …) until there are `n`. Those fall halfway between the first ones in the log scale
/// (`2^(−4/p)`, `2^(−12/p)`, …), so no two heads share a slope.
///
/// ```
/// use attention::alibi::alibi_slopes;
///
/// assert_eq!(alibi_slopes(8).unwrap(), [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625,
///                                       0.0078125, 0.00390625]);
/// // 6 heads: the 4 slopes of 4 heads, then the 1st and 3rd of 8 heads.
/// assert_eq!(alibi_slopes(6).unwrap(), [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]);
/// assert_eq!(
///     alibi_slopes(0).unwrap_err().to_string(),
///     "ALiBi heads: there must be at least 1 head, but heads = 0"
/// );
/// ```
// ANCHOR: alibi_slopes
pub fn alibi_slopes(heads: usize) -> Result<Vec<f64>> {
    if heads == 0 {
        return Err(AttentionError::Invalid {
            what: "ALiBi heads".into(),
            problem: "there must be at least 1 head, but heads = 0".into(),
        });
    }
    let p = 1 << heads.ilog2(); // the largest power of two ≤ heads
    let mut slopes = geometric(p);
    slopes.extend(geometric(2 * p).into_iter().step_by(2).take(heads - p));
    Ok(slopes)
}

/// The paper's slopes for a power of two `n`: `2^(−8/n)`, `2^(−16/n)`, …, `2^(−8)`.
fn geometric(n: usize) -> Vec<f64> {
    (1..=n).map(|h| (-8.0 * h as f64 / n as f64).exp2()).collect()
}
// ANCHOR_END: alibi_slopes

/// The additive bias `(heads, L_q, L_k)`: entry `[h, i, j]` is `−m_h · (i − j)`, where
/// `m_h = slopes[h]`; add it to the scores `(…, heads, L_q, L_k)` before softmax.
///
/// On and below the diagonal (`j ≤ i`) the bias is 0 for the query's own key and more
/// negative the further back the key is. Above the diagonal (`j > i`) it is *positive* and
/// grows with the distance into the future: the formula only makes sense with a causal mask,
/// which blocks those keys anyway. ALiBi was designed for causal language models;
/// bidirectional variants use `−m · |i − j|` instead, a different bias.
///
/// The authors' reference code does not build this matrix: it adds `m_h · j` to column `j`
/// of every row. On row `i` the two differ by `m_h · i`, the same number for every key of
/// the row, and softmax does not change when a whole row is shifted by a constant: the
/// weights are equal (up to rounding). The scores themselves differ.
///
/// Queries and keys are aligned at the top left: query `i` is at position `i`, key `j` at
/// position `j`.
///
/// ```
/// use attention::alibi::alibi_bias;
/// use ndarray::array;
///
/// let bias = alibi_bias::<f64>(&[0.5, 0.25], 3, 3);
/// assert_eq!(bias.dim(), (2, 3, 3));
/// assert_eq!(bias.index_axis(ndarray::Axis(0), 0), array![
///     [0.0, 0.5, 1.0],  // above the diagonal: positive, to be masked
///     [-0.5, 0.0, 0.5],
///     [-1.0, -0.5, 0.0],
/// ]);
/// assert_eq!(bias[[1, 2, 0]], -0.5);
/// ```
// ANCHOR: alibi_bias
pub fn alibi_bias<A: Float>(slopes: &[f64], l_q: usize, l_k: usize) -> Array3<A> {
    Array3::from_shape_fn((slopes.len(), l_q, l_k), |(h, i, j)| {
        A::from_f64_lossy(slopes[h] * (j as f64 - i as f64)) // −m·(i − j), without a −0
    })
}
// ANCHOR_END: alibi_bias

#[cfg(test)]
mod tests {
    use super::*;
    use crate::softmax::softmax;
    use ndarray::{Array2, Axis};
    use rand::{Rng, SeedableRng, rngs::StdRng};

    #[test]
    fn powers_of_two_follow_the_paper() {
        for n in [1, 2, 4, 8, 16, 32] {
            let slopes = alibi_slopes(n).unwrap();
            let ratio = 2f64.powf(-8.0 / n as f64);
            assert_eq!(slopes.len(), n);
            assert!((slopes[0] - ratio).abs() < 1e-15);
            for pair in slopes.windows(2) {
                assert!((pair[1] / pair[0] - ratio).abs() < 1e-14);
            }
            assert!((slopes[n - 1] - 1.0 / 256.0).abs() < 1e-17);
        }
    }

    #[test]
    fn other_counts_follow_the_reference_code() {
        // get_slopes(12) = get_slopes(8) + get_slopes(16)[0::2][:4]
        let s16 = alibi_slopes(16).unwrap();
        let mut expected = alibi_slopes(8).unwrap();
        expected.extend([s16[0], s16[2], s16[4], s16[6]]);
        assert_eq!(alibi_slopes(12).unwrap(), expected);
        assert_eq!(alibi_slopes(12).unwrap()[8], 2f64.powf(-0.5));
        for n in 1..=64 {
            let slopes = alibi_slopes(n).unwrap();
            assert_eq!(slopes.len(), n);
            let mut sorted = slopes.clone();
            sorted.sort_by(f64::total_cmp);
            sorted.dedup();
            assert_eq!(sorted.len(), n, "{n} heads share a slope");
            assert!(slopes.iter().all(|&m| m > 0.0 && m < 1.0));
        }
    }

    #[test]
    fn zero_heads_is_an_error() {
        assert!(matches!(alibi_slopes(0), Err(AttentionError::Invalid { .. })));
    }

    /// The claim in `alibi_bias`'s docs: adding `m·j` per column, as the reference code does,
    /// gives the same weights as `−m·(i − j)` under a causal mask.
    #[test]
    fn per_column_bias_gives_the_same_weights() {
        let (l, slopes) = (9, alibi_slopes(4).unwrap());
        let bias = alibi_bias::<f64>(&slopes, l, l);
        let mut rng = StdRng::seed_from_u64(7);
        let scores = Array2::from_shape_fn((l, l), |_| rng.random_range(-3.0..3.0));
        let causal = |i: usize, j: usize, s: f64| if j <= i { s } else { f64::NEG_INFINITY };
        for (h, &m) in slopes.iter().enumerate() {
            let ours = Array2::from_shape_fn((l, l), |(i, j)| {
                causal(i, j, scores[[i, j]] + bias[[h, i, j]])
            });
            let reference = Array2::from_shape_fn((l, l), |(i, j)| {
                causal(i, j, scores[[i, j]] + m * j as f64)
            });
            let (a, b) = (softmax(&ours), softmax(&reference));
            let err = (&a - &b).iter().fold(0.0_f64, |acc, d| acc.max(d.abs()));
            assert!(err < 1e-15, "head {h}: weights differ by {err}");
            // The scores themselves differ, by m·i on row i.
            for ((i, j), d) in (&reference - &ours).indexed_iter() {
                assert!(j > i || (d - m * i as f64).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn bias_shapes_and_types() {
        let bias = alibi_bias::<f32>(&[0.5], 2, 4);
        assert_eq!(bias.dim(), (1, 2, 4));
        assert_eq!(bias.index_axis(Axis(0), 0).row(1).to_vec(), vec![-0.5, 0.0, 0.5, 1.0]);
        assert_eq!(alibi_bias::<f64>(&[], 3, 3).dim(), (0, 3, 3));
    }
}
