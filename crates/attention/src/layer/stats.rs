//! Chapter *Scores, scaling and variance*: measuring what the size of the scores does to
//! softmax.
//!
//! A row of weights `p` (one query's softmax) can be summed up by three numbers:
//!
//! - its largest weight, which tends to 1 as the row *saturates* (one key takes everything);
//! - its [`entropy`] `−Σ pᵢ·ln pᵢ`, from `ln L_k` (uniform) down to 0 (one-hot);
//! - the size of softmax's Jacobian at `p`, [`softmax_jacobian`] `= diag(p) − p·pᵀ`: how much
//!   the weights move when the scores move. Training follows this derivative; when it is
//!   close to zero, the scores stop learning. [`jacobian_norm`] is its Frobenius norm.
//!
//! [`RowStats`] averages the three over the rows of a score matrix, and [`measure_scaling`]
//! runs the chapter's experiment for one `d_k`: random queries and keys with independent
//! standard-normal entries, their scores with and without the division by `√d_k`.
//!
//! Anchors (below the doc comments): `entropy`, `softmax_jacobian`, `jacobian_norm`, `row_stats`, `sample_scores`,
//! `measure_scaling`.

use ndarray::{Array2, ArrayRef1, ArrayRef2, Axis};
use rand::Rng;

use crate::embeddings::random_matrix;
use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::scores::{scale, scores, variance};
use crate::softmax::softmax;

/// The entropy of a row of weights, `−Σ pᵢ·ln pᵢ`, in nats (a weight of 0 adds nothing).
///
/// It is `ln n` for `n` equal weights and 0 when one weight is 1.
///
/// ```
/// use attention::stats::entropy;
/// use ndarray::array;
///
/// assert!((entropy(&array![0.25, 0.25, 0.25, 0.25]) - 4f64.ln()).abs() < 1e-12);
/// assert_eq!(entropy(&array![0.0, 1.0, 0.0]), 0.0);
/// ```
// ANCHOR: entropy
pub fn entropy<A: Float>(p: &ArrayRef1<A>) -> A {
    p.iter().filter(|&&w| w > A::zero()).map(|&w| -w * w.ln()).sum()
}
// ANCHOR_END: entropy

/// The Jacobian of softmax at the weights `p = softmax(s)`: `J = diag(p) − p·pᵀ`, `(n, n)`,
/// where `J[i][j] = ∂pᵢ/∂sⱼ`.
///
/// ```
/// use attention::stats::softmax_jacobian;
/// use ndarray::array;
///
/// // Two equal weights: nudging one score up moves weight from the other key to it.
/// assert_eq!(softmax_jacobian(&array![0.5, 0.5]), array![[0.25, -0.25], [-0.25, 0.25]]);
/// // A saturated row: nothing moves.
/// assert_eq!(softmax_jacobian(&array![1.0, 0.0]), array![[0.0, 0.0], [0.0, 0.0]]);
/// ```
// ANCHOR: softmax_jacobian
pub fn softmax_jacobian<A: Float>(p: &ArrayRef1<A>) -> Array2<A> {
    let n = p.len();
    Array2::from_shape_fn((n, n), |(i, j)| {
        let diagonal = if i == j { p[i] } else { A::zero() };
        diagonal - p[i] * p[j]
    })
}
// ANCHOR_END: softmax_jacobian

/// The Frobenius norm of [`softmax_jacobian`]`(p)` (the square root of the sum of its
/// squared entries), without building the matrix:
/// `‖J‖² = Σᵢ pᵢ² − 2·Σᵢ pᵢ³ + (Σᵢ pᵢ²)²`.
///
/// It is `√(n−1)/n` for `n` equal weights and 0 for a one-hot row.
///
/// ```
/// use attention::stats::{jacobian_norm, softmax_jacobian};
/// use ndarray::array;
///
/// let p = array![0.7, 0.2, 0.1];
/// let full = softmax_jacobian(&p).iter().map(|j| j * j).sum::<f64>().sqrt();
/// assert!((jacobian_norm(&p) - full).abs() < 1e-15);
/// assert!(
///     (jacobian_norm(&array![0.25, 0.25, 0.25, 0.25]) - 3f64.sqrt() / 4.0).abs() < 1e-15
/// );
/// ```
// ANCHOR: jacobian_norm
pub fn jacobian_norm<A: Float>(p: &ArrayRef1<A>) -> A {
    let two = A::from_f64_lossy(2.0);
    let sum_sq: A = p.iter().map(|&w| w * w).sum();
    let sum_cube: A = p.iter().map(|&w| w * w * w).sum();
    // Clamp the rounding error of a nearly one-hot row, whose exact value is 0.
    (sum_sq - two * sum_cube + sum_sq * sum_sq).max(A::zero()).sqrt()
}
// ANCHOR_END: jacobian_norm

/// Softmax statistics averaged over the rows of a score matrix `(L_q, L_k)`.
///
/// ```
/// use attention::stats::RowStats;
/// use ndarray::array;
///
/// let flat = RowStats::of_scores(&array![[0.0, 0.0], [1.0, 1.0]]);
/// assert_eq!(flat.max_weight, 0.5);
/// assert!((flat.entropy - 2f64.ln()).abs() < 1e-15);
/// let sharp = RowStats::of_scores(&array![[0.0, 100.0]]);
/// assert!(sharp.max_weight > 0.999_999 && sharp.jacobian_norm < 1e-20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
// ANCHOR: row_stats
pub struct RowStats {
    // ANCHOR_END: row_stats
    /// The mean over rows of the row's largest weight.
    // ANCHOR: row_stats
    pub max_weight: f64,
    // ANCHOR_END: row_stats
    /// The mean over rows of the row's [`entropy`], in nats.
    // ANCHOR: row_stats
    pub entropy: f64,
    // ANCHOR_END: row_stats
    /// The mean over rows of the row's [`jacobian_norm`].
    // ANCHOR: row_stats
    pub jacobian_norm: f64,
}

impl RowStats {
    // ANCHOR_END: row_stats
    /// Applies softmax to every row of `scores` and averages the three statistics; a matrix
    /// with no rows gives NaN.
    // ANCHOR: row_stats
    pub fn of_scores(scores: &ArrayRef2<f64>) -> RowStats {
        let weights = softmax(scores);
        let rows = weights.nrows() as f64;
        let mut sum = RowStats { max_weight: 0.0, entropy: 0.0, jacobian_norm: 0.0 };
        for p in weights.rows() {
            sum.max_weight += p.fold(0.0, |m: f64, &w| m.max(w));
            sum.entropy += entropy(&p);
            sum.jacobian_norm += jacobian_norm(&p);
        }
        RowStats {
            max_weight: sum.max_weight / rows,
            entropy: sum.entropy / rows,
            jacobian_norm: sum.jacobian_norm / rows,
        }
    }
}
// ANCHOR_END: row_stats

/// What [`measure_scaling`] measured for one `d_k`.
///
/// ```
/// use attention::stats::measure_scaling;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let m = measure_scaling(16, 8, 4, &mut StdRng::seed_from_u64(0)).unwrap();
/// assert_eq!(m.d_k, 16);
/// assert!((m.raw_variance / m.scaled_variance - 16.0).abs() < 1e-9);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalingMeasurement {
    /// The width of the queries and keys.
    pub d_k: usize,
    /// The variance of all raw scores `q·k`.
    pub raw_variance: f64,
    /// The variance of all scaled scores `q·k / √d_k`.
    pub scaled_variance: f64,
    /// Softmax statistics of the raw scores.
    pub raw: RowStats,
    /// Softmax statistics of the scaled scores.
    pub scaled: RowStats,
}

/// Raw scores of random queries and keys: `trials` times, `Q·Kᵀ` for `Q` and `K` of shape
/// `(l, d_k)` with independent standard-normal entries, stacked into `(trials·l, l)`. Each
/// row is one query's scores against the `l` keys of its trial. Fails if `d_k`, `l` or
/// `trials` is 0.
///
/// ```
/// use attention::stats::sample_scores;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let s = sample_scores(64, 8, 3, &mut StdRng::seed_from_u64(0)).unwrap();
/// assert_eq!(s.dim(), (24, 8));
/// let err = sample_scores(64, 8, 0, &mut StdRng::seed_from_u64(0)).unwrap_err();
/// assert_eq!(err.to_string(), "the experiment has trials = 0: it must be at least 1");
/// let err = sample_scores(0, 8, 3, &mut StdRng::seed_from_u64(0)).unwrap_err();
/// assert_eq!(err.to_string(), "the experiment has d_k = 0: it must be at least 1");
/// ```
// ANCHOR: sample_scores
pub fn sample_scores<R: Rng + ?Sized>(
    d_k: usize,
    l: usize,
    trials: usize,
    rng: &mut R,
) -> Result<Array2<f64>> {
    if trials == 0 {
        return Err(AttentionError::Empty { what: "the experiment".into(), dim: "trials" });
    }
    let mut raw = Array2::<f64>::zeros((0, l));
    for _ in 0..trials {
        let (q, k) = sample_queries_keys(d_k, l, rng)?;
        raw.append(Axis(0), scores(&q, &k)?.view()).expect("every block has l columns");
    }
    Ok(raw)
}
// ANCHOR_END: sample_scores

/// One trial's queries and keys: `q`, then `k`, both `(l, d_k)` with independent
/// standard-normal entries. [`sample_scores`] draws every trial with it, so from a generator
/// seeded as for [`sample_scores`], `scores(&q, &k)` is that function's first block of `l`
/// rows, and one row of the experiment can be looked at on its own (chapter 3 draws the
/// weights of the first query of `d_k = 1024`). Fails if `d_k` or `l` is 0.
///
/// ```
/// use attention::scores::scores;
/// use attention::stats::{sample_queries_keys, sample_scores};
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let (q, k) = sample_queries_keys(64, 8, &mut StdRng::seed_from_u64(5)).unwrap();
/// assert_eq!((q.dim(), k.dim()), ((8, 64), (8, 64)));
/// let all = sample_scores(64, 8, 3, &mut StdRng::seed_from_u64(5)).unwrap();
/// assert_eq!(scores(&q, &k).unwrap(), all.slice(ndarray::s![..8, ..]));
/// ```
// ANCHOR: sample_queries_keys
pub fn sample_queries_keys<R: Rng + ?Sized>(
    d_k: usize,
    l: usize,
    rng: &mut R,
) -> Result<(Array2<f64>, Array2<f64>)> {
    for (dim, n) in [("d_k", d_k), ("L", l)] {
        if n == 0 {
            return Err(AttentionError::Empty { what: "the experiment".into(), dim });
        }
    }
    let q = random_matrix(l, d_k, 1.0, rng);
    let k = random_matrix(l, d_k, 1.0, rng);
    Ok((q, k))
}
// ANCHOR_END: sample_queries_keys

/// The chapter's experiment for one `d_k`: the scores of [`sample_scores`], with and without
/// the division by `√d_k`. Variances are over all `trials·l·l` scores;
/// the softmax statistics are means over all `trials·l` rows. Fails if `d_k`, `l` or `trials`
/// is 0.
///
/// ```
/// use attention::stats::measure_scaling;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let m = measure_scaling(256, 16, 8, &mut StdRng::seed_from_u64(1)).unwrap();
/// assert!((m.scaled_variance - 1.0).abs() < 0.2); // about 1, whatever d_k is
/// assert!(m.raw.max_weight > 0.9); // raw scores: nearly one key per query
/// assert!(m.scaled.max_weight < 0.5);
/// assert!(measure_scaling(0, 16, 8, &mut StdRng::seed_from_u64(1)).is_err());
/// ```
// ANCHOR: measure_scaling
pub fn measure_scaling<R: Rng + ?Sized>(
    d_k: usize,
    l: usize,
    trials: usize,
    rng: &mut R,
) -> Result<ScalingMeasurement> {
    let raw = sample_scores(d_k, l, trials, rng)?;
    let scaled = scale(raw.clone(), d_k);
    Ok(ScalingMeasurement {
        d_k,
        raw_variance: variance(&raw)?,
        scaled_variance: variance(&scaled)?,
        raw: RowStats::of_scores(&raw),
        scaled: RowStats::of_scores(&scaled),
    })
}
// ANCHOR_END: measure_scaling

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;
    use rand::{SeedableRng, rngs::StdRng};

    #[test]
    fn entropy_of_uniform_rows_is_ln_n() {
        for n in 1..10 {
            let p = ndarray::Array1::from_elem(n, 1.0 / n as f64);
            assert!((entropy(&p) - (n as f64).ln()).abs() < 1e-12);
        }
    }

    #[test]
    fn jacobian_matches_finite_differences() {
        let s = array![0.3_f64, -1.2, 2.0, 0.5];
        let p = softmax(&s);
        let j = softmax_jacobian(&p);
        let h = 1e-6;
        for col in 0..4 {
            let mut up = s.clone();
            up[col] += h;
            let mut down = s.clone();
            down[col] -= h;
            let derivative = (softmax(&up) - softmax(&down)) / (2.0 * h);
            for row in 0..4 {
                assert!((derivative[row] - j[[row, col]]).abs() < 1e-8, "({row}, {col})");
            }
        }
    }

    #[test]
    fn jacobian_norm_matches_the_matrix() {
        for p in [array![1.0], array![0.9, 0.1], array![0.2, 0.3, 0.5], array![0.0, 0.0, 1.0]]
        {
            let full = softmax_jacobian(&p).iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!((jacobian_norm(&p) - full).abs() < 1e-15, "{p}");
        }
        let p32 = array![0.25f32, 0.75];
        assert!((jacobian_norm(&p32) - 0.375).abs() < 1e-6); // four entries of ±3/16
    }

    #[test]
    fn raw_variance_grows_with_d_k_and_scaling_undoes_it() {
        for d_k in [4, 64] {
            let m =
                measure_scaling(d_k, 16, 16, &mut StdRng::seed_from_u64(d_k as u64)).unwrap();
            let ratio = m.raw_variance / d_k as f64;
            assert!((ratio - 1.0).abs() < 0.15, "d_k = {d_k}: {ratio}");
            assert!((m.scaled_variance - 1.0).abs() < 0.15, "d_k = {d_k}");
        }
    }

    #[test]
    fn unscaled_rows_saturate_as_d_k_grows() {
        let small = measure_scaling(1, 16, 16, &mut StdRng::seed_from_u64(3)).unwrap();
        let large = measure_scaling(512, 16, 16, &mut StdRng::seed_from_u64(3)).unwrap();
        assert!(large.raw.max_weight > small.raw.max_weight);
        assert!(large.raw.entropy < small.raw.entropy);
        assert!(large.raw.jacobian_norm < small.raw.jacobian_norm);
        // With scaling the statistics stay put (d_k = 1 is the same with or without).
        assert!((large.scaled.entropy - small.scaled.entropy).abs() < 0.3);
        assert_eq!(small.raw, small.scaled);
    }
}
