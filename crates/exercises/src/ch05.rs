//! Chapter 5, *Softmax*: temperature, a stable log-softmax and the Jacobian.

use attention::softmax::softmax;
use ndarray::{Array1, Array2, ArrayRef1, array};

use crate::{call, close, within};

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

/// Checks an answer to exercise 5.1 ([`softmax_temperature`]): at `T = 1` the plain softmax
/// and at `T = 2` the softmax of half the scores (both within `1e-15`); at `T = 0.001` all the
/// weight on the largest score (within `1e-12`), at `T = 10⁶` a uniform row (within `1e-5`);
/// and a panic for `T = 0` or `T = −1`.
///
/// ```
/// use attention::softmax::softmax;
/// use exercises::ch05::{check_softmax_temperature, softmax_temperature};
///
/// assert_eq!(check_softmax_temperature(softmax_temperature), Ok(()));
/// // Multiplying by T instead of dividing: a cold softmax comes out flat.
/// let times_t = |x: &ndarray::ArrayRef1<f64>, t: f64| {
///     assert!(t > 0.0, "the temperature must be positive");
///     softmax(&(x * t))
/// };
/// assert!(check_softmax_temperature(times_t).is_err());
/// ```
pub fn check_softmax_temperature(
    softmax_temperature: impl Fn(&ArrayRef1<f64>, f64) -> Array1<f64>,
) -> Result<(), String> {
    let x = array![0.3, -1.2, 2.0, 0.7];
    let at = |t: f64| {
        let what = format!("softmax_temperature(&{x}, {t})");
        call(&what, || softmax_temperature(&x, t)).map(|w| (what, w))
    };
    let (what, w) = at(1.0)?;
    close(&format!("{what}, which should be the plain softmax,"), &w, &softmax(&x), 1e-15)?;
    let (what, w) = at(2.0)?;
    close(
        &format!("{what}, the softmax of half the scores,"),
        &w,
        &softmax(&(&x / 2.0)),
        1e-15,
    )?;
    let (what, cold) = at(1e-3)?;
    let one_hot = array![0.0, 0.0, 1.0, 0.0];
    close(&format!("{what}, all the weight on the largest score,"), &cold, &one_hot, 1e-12)?;
    let (what, hot) = at(1e6)?;
    close(&format!("{what}, a uniform row,"), &hot, &Array1::from_elem(4, 0.25), 1e-5)?;
    for t in [0.0, -1.0] {
        let what = format!("softmax_temperature(&{x}, {t})");
        if let Ok(w) = call(&what, || softmax_temperature(&x, t)) {
            return Err(format!(
                "{what} returned {w} instead of refusing: a temperature must be positive, so \
                 panic (assert!) when it is not"
            ));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 5.2 ([`log_softmax`]): `ln softmax(x)` within `1e-14` for
/// small scores, `(0, −1000)` for `(1000, 0)` and finite values for `(800, 0, −800)` (both
/// within `1e-9`), and `exp` of the result summing to 1 within `1e-15`.
///
/// ```
/// use attention::softmax::softmax;
/// use exercises::ch05::{check_log_softmax, log_softmax};
///
/// assert_eq!(check_log_softmax(log_softmax), Ok(()));
/// // The logarithm of the softmax: a weight that rounds to 0 gives −∞.
/// assert!(check_log_softmax(|x| softmax(x).ln()).is_err());
/// ```
pub fn check_log_softmax(
    log_softmax: impl Fn(&ArrayRef1<f64>) -> Array1<f64>,
) -> Result<(), String> {
    let x = array![1.0, 2.0, 3.0];
    let what = format!("log_softmax(&{x})");
    let got = call(&what, || log_softmax(&x))?;
    close(&what, &got, &softmax(&x).mapv(f64::ln), 1e-14)?;
    for (x, expected) in [
        (array![1000.0, 0.0], array![0.0, -1000.0]),
        (array![800.0, 0.0, -800.0], array![0.0, -800.0, -1600.0]),
    ] {
        let what = format!("log_softmax(&{x})");
        let got = call(&what, || log_softmax(&x))?;
        close(&what, &got, &expected, 1e-9)?;
    }
    let x = array![5.0, 5.0, 1.0];
    let what = format!("log_softmax(&{x})");
    let sum = call(&what, || log_softmax(&x))?.mapv(f64::exp).sum();
    if !within(sum, 1.0, 1e-15) {
        return Err(format!("the exponentials of {what} sum to {sum}, not 1"));
    }
    Ok(())
}

/// Checks an answer to exercise 5.3 ([`softmax_jacobian`]): against central finite
/// differences of softmax (within `1e-8`), exactly symmetric, rows summing to 0 (within
/// `1e-15`), and vanishing (below `1e-12`) for a saturated row.
///
/// ```
/// use exercises::ch05::{check_softmax_jacobian, softmax_jacobian};
/// use ndarray::Array2;
///
/// assert_eq!(check_softmax_jacobian(softmax_jacobian), Ok(()));
/// // Only the diagonal pᵢ(1 − pᵢ): the weights move together, so that is not enough.
/// let diagonal = |p: &ndarray::ArrayRef1<f64>| Array2::from_diag(&p.mapv(|w| w * (1.0 - w)));
/// assert!(check_softmax_jacobian(diagonal).is_err());
/// ```
pub fn check_softmax_jacobian(
    softmax_jacobian: impl Fn(&ArrayRef1<f64>) -> Array2<f64>,
) -> Result<(), String> {
    let x = array![0.5, -1.0, 2.0, 0.0];
    let p = softmax(&x);
    let what = format!("softmax_jacobian(&{p:.4}) at p = softmax({x})");
    let j = call(&what, || softmax_jacobian(&p))?;
    let h = 1e-6;
    let numeric = Array2::from_shape_fn((4, 4), |(row, col)| {
        let (mut up, mut down) = (x.clone(), x.clone());
        up[col] += h;
        down[col] -= h;
        (softmax(&up)[row] - softmax(&down)[row]) / (2.0 * h)
    });
    close(&format!("{what} (vs finite differences)"), &j, &numeric, 1e-8)?;
    if j != j.t() {
        return Err(format!("{what} is not symmetric:\n{j}"));
    }
    for (i, row) in j.rows().into_iter().enumerate() {
        if !within(row.sum(), 0.0, 1e-15) {
            return Err(format!(
                "row {i} of {what} sums to {:e}, not 0: adding the same number to every score \
                 changes no weight",
                row.sum()
            ));
        }
    }
    let saturated = softmax(&array![30.0, 0.0, 0.0]);
    let what = format!("softmax_jacobian(&{saturated:e}) at p = softmax([30, 0, 0])");
    let j = call(&what, || softmax_jacobian(&saturated))?;
    close(&format!("{what}, saturated,"), &j, &Array2::zeros((3, 3)), 1e-12)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    #[should_panic(expected = "positive")]
    fn temperature_must_be_positive() {
        softmax_temperature(&array![1.0], 0.0);
    }

    #[test]
    fn softmax_temperature_passes_and_classic_mistakes_fail() {
        assert_eq!(check_softmax_temperature(softmax_temperature), Ok(()));
        fn refuse(t: f64) {
            assert!(t > 0.0, "the temperature must be positive, got {t}");
        }
        // Another correct answer: stable, with the maximum subtracted by hand.
        let by_hand = |x: &ArrayRef1<f64>, t: f64| {
            refuse(t);
            let m = x.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let e = x.mapv(|v| ((v - m) / t).exp());
            &e / e.sum()
        };
        assert_eq!(check_softmax_temperature(by_hand), Ok(()));
        // x·T: the temperature upside down.
        let times_t = |x: &ArrayRef1<f64>, t: f64| {
            refuse(t);
            softmax(&(x * t))
        };
        rejects(check_softmax_temperature(times_t), "0.3, -1.2, 2, 0.7], 2)");
        // exp(x/T)/Σ with no maximum subtracted: exp(2000) overflows when T is small.
        let unstable = |x: &ArrayRef1<f64>, t: f64| {
            refuse(t);
            let e = x.mapv(|v| (v / t).exp());
            &e / e.sum()
        };
        rejects(check_softmax_temperature(unstable), "is NaN instead of 1");
        // Tempering the weights after softmax (pᵢ^(1/T)) without normalising them again.
        let after = |x: &ArrayRef1<f64>, t: f64| {
            refuse(t);
            softmax(x).mapv(|p| p.powf(1.0 / t))
        };
        rejects(check_softmax_temperature(after), "0.3, -1.2, 2, 0.7], 2)");
        // No refusal: a temperature of 0 gives NaN weights, silently.
        let accepts_0 = |x: &ArrayRef1<f64>, t: f64| softmax(&x.mapv(|v| v / t));
        rejects(check_softmax_temperature(accepts_0), "0.7], 0) returned [NaN");
    }

    #[test]
    fn log_softmax_passes_and_classic_mistakes_fail() {
        assert_eq!(check_log_softmax(log_softmax), Ok(()));
        let l = log_softmax(&array![1000.0, 0.0]);
        assert_eq!((l[0], l[1]), (0.0, -1000.0)); // exactly, as the doc comment says
        // ln of the softmax: e^−1000 rounds to 0 and its log to −∞.
        rejects(check_log_softmax(|x| softmax(x).ln()), "log_softmax(&[1000, 0]) is");
        // No maximum subtracted: e^1000 overflows.
        let no_max = |x: &ArrayRef1<f64>| x - x.mapv(f64::exp).sum().ln();
        rejects(check_log_softmax(no_max), "log_softmax(&[1000, 0]) is");
        // The maximum subtracted inside the sum but not outside it.
        let m_forgotten = |x: &ArrayRef1<f64>| {
            let m = x.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            x - x.mapv(|v| (v - m).exp()).sum().ln()
        };
        rejects(check_log_softmax(m_forgotten), "log_softmax(&[1, 2, 3]) is");
    }

    #[test]
    fn softmax_jacobian_passes_and_classic_mistakes_fail() {
        assert_eq!(check_softmax_jacobian(softmax_jacobian), Ok(()));
        let outer = |p: &ArrayRef1<f64>| {
            let column = p.view().insert_axis(ndarray::Axis(1));
            column.dot(&column.t())
        };
        // Another correct answer: diag(p) − p·pᵀ as matrices.
        let matrices = |p: &ArrayRef1<f64>| Array2::from_diag(&p.to_owned()) - outer(p);
        assert_eq!(check_softmax_jacobian(matrices), Ok(()));
        // Each weight on its own, pᵢ(1 − pᵢ): the off-diagonal −pᵢpⱼ forgotten.
        let diagonal = |p: &ArrayRef1<f64>| Array2::from_diag(&p.mapv(|w| w * (1.0 - w)));
        rejects(check_softmax_jacobian(diagonal), "(vs finite differences)");
        // diag(p) + p·pᵀ: the sign of the outer product.
        let plus = |p: &ArrayRef1<f64>| Array2::from_diag(&p.to_owned()) + outer(p);
        rejects(check_softmax_jacobian(plus), "(vs finite differences)");
        // The exponential's derivative, diag(p), as if the normalisation did not move.
        rejects(
            check_softmax_jacobian(|p| Array2::from_diag(&p.to_owned())),
            "(vs finite differences)",
        );
    }
}
