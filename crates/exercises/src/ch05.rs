//! Chapter 5, *Softmax*: temperature, a stable log-softmax and the Jacobian.

use attention::softmax::softmax;
use ndarray::{Array1, Array2, ArrayRef1};

/// `softmax(x / T)`: below `T = 1` the weights sharpen towards the largest score, above it
/// they flatten towards uniform. `T` must be positive.
///
/// ```
/// use exercises::ch05::softmax_temperature;
/// use ndarray::array;
///
/// let sharp = softmax_temperature(&array![1.0, 2.0], 0.01);
/// assert!(sharp[1] > 0.999);
/// let flat = softmax_temperature(&array![1.0, 2.0], 1000.0);
/// assert!((flat[0] - 0.5).abs() < 1e-3);
/// ```
// ANCHOR: softmax_temperature
pub fn softmax_temperature(scores: &ArrayRef1<f64>, t: f64) -> Array1<f64> {
    assert!(t > 0.0, "the temperature must be positive, got {t}");
    softmax(&scores.mapv(|x| x / t))
}
// ANCHOR_END: softmax_temperature

/// `ln softmax(x)`, computed without overflow or `ln 0`:
/// `x − m − ln Σ exp(x − m)` with `m` the maximum.
///
/// ```
/// use exercises::ch05::log_softmax;
/// use ndarray::array;
///
/// let l = log_softmax(&array![1000.0, 0.0]);
/// assert_eq!(l[0], 0.0);        // ln(1)
/// assert_eq!(l[1], -1000.0);    // ln(e^-1000), which softmax would round to ln(0) = -inf
/// ```
// ANCHOR: log_softmax
pub fn log_softmax(scores: &ArrayRef1<f64>) -> Array1<f64> {
    let m = scores.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    let log_sum = scores.mapv(|x| (x - m).exp()).sum().ln();
    scores.mapv(|x| x - m - log_sum)
}
// ANCHOR_END: log_softmax

/// The Jacobian of softmax at the weights `p = softmax(x)`: entry `(i, j)` is
/// `∂pᵢ/∂xⱼ = pᵢ(δᵢⱼ − pⱼ)`, i.e. the matrix `diag(p) − p pᵀ`.
///
/// ```
/// use exercises::ch05::softmax_jacobian;
/// use ndarray::array;
///
/// let j = softmax_jacobian(&array![0.5, 0.5]);
/// assert_eq!(j, array![[0.25, -0.25], [-0.25, 0.25]]);
/// ```
// ANCHOR: softmax_jacobian
pub fn softmax_jacobian(p: &ArrayRef1<f64>) -> Array2<f64> {
    let n = p.len();
    Array2::from_shape_fn(
        (n, n),
        |(i, j)| if i == j { p[i] * (1.0 - p[i]) } else { -p[i] * p[j] },
    )
}
// ANCHOR_END: softmax_jacobian

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, array};

    fn max_diff(a: &Array1<f64>, b: &Array1<f64>) -> f64 {
        (a - b).mapv(f64::abs).fold(0.0, |m, &d| m.max(d))
    }

    #[test]
    fn temperature_one_is_plain_softmax_and_limits_hold() {
        let x = array![0.3, -1.2, 2.0, 0.7];
        assert!(max_diff(&softmax_temperature(&x, 1.0), &softmax(&x)) < 1e-15);
        let cold = softmax_temperature(&x, 1e-3);
        assert!((cold[2] - 1.0).abs() < 1e-12, "the largest score takes everything: {cold}");
        let hot = softmax_temperature(&x, 1e6);
        assert!(hot.iter().all(|&w| (w - 0.25).abs() < 1e-5), "{hot}");
        // T = 2 is the same as halving the scores.
        assert!(max_diff(&softmax_temperature(&x, 2.0), &softmax(&(&x / 2.0))) < 1e-15);
    }

    #[test]
    #[should_panic(expected = "positive")]
    fn temperature_must_be_positive() {
        softmax_temperature(&array![1.0], 0.0);
    }

    #[test]
    fn log_softmax_matches_and_survives_large_gaps() {
        let x = array![1.0, 2.0, 3.0];
        let expected = softmax(&x).mapv(f64::ln);
        assert!(max_diff(&log_softmax(&x), &expected) < 1e-14);
        let wide = log_softmax(&array![800.0, 0.0, -800.0]);
        assert!(wide.iter().all(|v| v.is_finite()), "{wide}");
        assert!((wide[2] + 1600.0).abs() < 1e-9);
        // exp of it sums to 1.
        assert!(
            (log_softmax(&array![5.0, 5.0, 1.0]).mapv(f64::exp).sum() - 1.0).abs() < 1e-15
        );
    }

    #[test]
    fn jacobian_matches_finite_differences() {
        let x = array![0.5, -1.0, 2.0, 0.0];
        let j = softmax_jacobian(&softmax(&x));
        let h = 1e-6;
        for col in 0..x.len() {
            let (mut up, mut down) = (x.clone(), x.clone());
            up[col] += h;
            down[col] -= h;
            let numeric = (softmax(&up) - softmax(&down)) / (2.0 * h);
            for row in 0..x.len() {
                assert!((j[[row, col]] - numeric[row]).abs() < 1e-8, "({row}, {col})");
            }
        }
        // Symmetric, and each row sums to 0 (a constant added to every score changes nothing).
        assert_eq!(j, j.t());
        for row in j.rows() {
            assert!(row.sum().abs() < 1e-15);
        }
    }

    #[test]
    fn a_saturated_softmax_has_a_vanishing_jacobian() {
        let p = softmax(&array![30.0, 0.0, 0.0]);
        let j = softmax_jacobian(&p);
        assert!(j.iter().all(|v| v.abs() < 1e-12), "{j}");
    }
}
