//! Chapter *Inside a real model*: layer normalisation.
//!
//! A transformer layer keeps every token's vector at a steady scale by normalising it on its
//! own: subtract its mean, divide by its standard deviation, then scale and shift each
//! component by learned `γ` and `β`,
//!
//! `LN(x) = (x − mean(x)) / √(var(x) + ε) · γ + β`,
//!
//! with the mean and the *biased* variance (divided by `d_model`, not `d_model − 1`) of the
//! row `x: (d_model)`, and a small `ε` that keeps the division finite for a constant row.
//! This is PyTorch's `nn.LayerNorm(d_model, eps)`; BERT uses `ε = 1e-12`.
//!
//! The mean and variance are accumulated in `f64` whatever the element type, in a fixed
//! order, and the result is rounded once: an `f32` result is the correctly computed value to
//! within rounding, so it agrees with PyTorch's `f32` to a few units in the last place.
//!
//! Anchors (below the doc comments): `layer_norm`, `layer_norm_checks`.

use ndarray::{Array, Array1, ArrayRef, Axis, Dimension};

use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};

/// Layer normalisation over the last axis, with learned `γ` (scale) and `β` (shift), both
/// `(d_model)`.
///
/// ```
/// use attention::layer_norm::LayerNorm;
/// use ndarray::{array, Array1};
///
/// let ln = LayerNorm::new(Array1::ones(4), Array1::zeros(4), 1e-12).unwrap();
/// // mean 2.5, variance 1.25: the row becomes (x − 2.5)/√1.25
/// let y = ln.apply(&array![[1.0, 2.0, 3.0, 4.0]]).unwrap();
/// let s = 1.25f64.sqrt();
/// let expected = array![[-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s]];
/// assert!((y - expected).iter().all(|d| d.abs() < 1e-12));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: layer_norm
pub struct LayerNorm<A> {
    gamma: Array1<A>, // (d_model): the scale of each component
    beta: Array1<A>,  // (d_model): its shift
    eps: f64,         // added to the variance: BERT uses 1e-12
}

impl<A: Float> LayerNorm<A> {
    // ANCHOR_END: layer_norm
    /// A layer norm with the given `γ` and `β` (the same length, at least 1) and `ε` (positive
    /// and finite).
    ///
    /// ```
    /// use attention::layer_norm::LayerNorm;
    /// use ndarray::Array1;
    ///
    /// assert_eq!(
    ///     LayerNorm::<f32>::new(Array1::ones(4), Array1::zeros(3), 1e-5)
    ///         .unwrap_err()
    ///         .to_string(),
    ///     "gamma has d_model = 4 but beta has d_model = 3"
    /// );
    /// assert_eq!(
    ///     LayerNorm::<f32>::new(Array1::ones(4), Array1::zeros(4), 0.0)
    ///         .unwrap_err()
    ///         .to_string(),
    ///     "layer norm eps: must be positive and finite, but it is 0"
    /// );
    /// ```
    // ANCHOR: layer_norm
    pub fn new(gamma: Array1<A>, beta: Array1<A>, eps: f64) -> Result<Self> {
        if gamma.is_empty() {
            return Err(AttentionError::Empty { what: "gamma".into(), dim: "d_model" });
        }
        if gamma.len() != beta.len() {
            let (g, b) = (gamma.len(), beta.len());
            return Err(AttentionError::mismatch("gamma", g, "beta", b, "d_model"));
        }
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(AttentionError::Invalid {
                what: "layer norm eps".into(),
                problem: format!("must be positive and finite, but it is {eps}"),
            });
        }
        Ok(LayerNorm { gamma, beta, eps })
    }

    // ANCHOR_END: layer_norm
    /// Normalises every row (the last axis) of `x: (..., d_model)`:
    /// `(x − mean) / √(var + ε) · γ + β`, with the biased variance, as `torch.nn.LayerNorm`.
    ///
    /// ```
    /// use attention::layer_norm::LayerNorm;
    /// use ndarray::{array, Array3};
    ///
    /// let ln = LayerNorm::new(array![2.0, 2.0], array![0.0, 1.0], 1e-12).unwrap();
    /// // mean 4, variance 1: (−1, 1)·γ + β, up to the tiny ε
    /// let y = ln.apply(&array![3.0, 5.0]).unwrap();
    /// assert!((y - array![-2.0, 3.0]).iter().all(|d: &f64| d.abs() < 1e-11));
    /// let x = Array3::<f64>::zeros((2, 4, 3));
    /// assert_eq!(
    ///     ln.apply(&x).unwrap_err().to_string(),
    ///     "x has d_model = 3 but gamma has d_model = 2"
    /// );
    /// ```
    // ANCHOR: layer_norm
    pub fn apply<D: Dimension>(&self, x: &ArrayRef<A, D>) -> Result<Array<A, D>> {
        self.check_input(x)?;
        let last = Axis(x.ndim() - 1);
        let d = self.d_model() as f64;
        let mut out = x.to_owned();
        for mut row in out.lanes_mut(last) {
            let mean = row.iter().map(|&v| to_f64(v)).sum::<f64>() / d;
            let var = row.iter().map(|&v| (to_f64(v) - mean).powi(2)).sum::<f64>() / d;
            let inv_std = 1.0 / (var + self.eps).sqrt();
            for ((v, &g), &b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                let normalised = (to_f64(*v) - mean) * inv_std;
                *v = A::from_f64_lossy(normalised * to_f64(g) + to_f64(b));
            }
        }
        Ok(out)
    }

    // ANCHOR_END: layer_norm
    /// The width `d_model` it normalises.
    ///
    /// ```
    /// use attention::layer_norm::LayerNorm;
    /// use ndarray::Array1;
    ///
    /// let ln = LayerNorm::<f32>::new(Array1::ones(384), Array1::zeros(384), 1e-12).unwrap();
    /// assert_eq!(ln.d_model(), 384);
    /// ```
    // ANCHOR: layer_norm
    pub fn d_model(&self) -> usize {
        self.gamma.len()
    }
}
// ANCHOR_END: layer_norm

impl<A: Float> LayerNorm<A> {
    /// The scale `γ: (d_model)`.
    ///
    /// ```
    /// use attention::layer_norm::LayerNorm;
    /// use ndarray::array;
    ///
    /// let ln = LayerNorm::new(array![1.0, 2.0], array![0.0, 0.0], 1e-5).unwrap();
    /// assert_eq!(ln.gamma(), array![1.0, 2.0]);
    /// ```
    pub fn gamma(&self) -> &Array1<A> {
        &self.gamma
    }

    /// The shift `β: (d_model)`.
    ///
    /// ```
    /// use attention::layer_norm::LayerNorm;
    /// use ndarray::array;
    ///
    /// let ln = LayerNorm::new(array![1.0, 2.0], array![0.5, 0.0], 1e-5).unwrap();
    /// assert_eq!(ln.beta(), array![0.5, 0.0]);
    /// ```
    pub fn beta(&self) -> &Array1<A> {
        &self.beta
    }

    /// The `ε` added to the variance.
    ///
    /// ```
    /// use attention::layer_norm::LayerNorm;
    /// use ndarray::Array1;
    ///
    /// let ln = LayerNorm::<f64>::new(Array1::ones(2), Array1::zeros(2), 1e-12).unwrap();
    /// assert_eq!(ln.eps(), 1e-12);
    /// ```
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// The number of learnable numbers, `2·d_model` (`γ` and `β`).
    ///
    /// ```
    /// use attention::layer_norm::LayerNorm;
    /// use ndarray::Array1;
    ///
    /// let ln = LayerNorm::<f64>::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// assert_eq!(ln.parameter_count(), 16);
    /// ```
    pub fn parameter_count(&self) -> usize {
        self.gamma.len() + self.beta.len()
    }

    /// Checks that `x` has at least one axis, the last one `d_model` wide, and no empty axis.
    // ANCHOR: layer_norm_checks
    fn check_input<D: Dimension>(&self, x: &ArrayRef<A, D>) -> Result<()> {
        let shape = x.shape();
        let Some((&d_model, lead)) = shape.split_last() else {
            return Err(AttentionError::shape(
                "x",
                shape,
                "a shape (..., d_model) was expected",
            ));
        };
        if d_model != self.d_model() {
            return Err(AttentionError::mismatch(
                "x",
                d_model,
                "gamma",
                self.d_model(),
                "d_model",
            ));
        }
        if let Some(i) = lead.iter().position(|&n| n == 0) {
            let dim = if i + 1 == lead.len() { "L" } else { "batch" };
            return Err(AttentionError::Empty { what: "x".into(), dim });
        }
        Ok(())
    }
    // ANCHOR_END: layer_norm_checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, Array3, Array4, array};
    use rand::{SeedableRng, rngs::StdRng};
    use rand_distr::{Distribution, Normal};

    /// A small case worked by hand: the row (1, 2, 4, 9) has mean 4 and biased variance
    /// (9 + 4 + 0 + 25)/4 = 9.5, so with ε = 0.5 it is divided by √10; then γ and β.
    #[test]
    fn a_row_worked_by_hand() {
        let ln = LayerNorm::new(array![1.0, 2.0, -1.0, 0.5], array![0.0, 1.0, 0.0, -2.0], 0.5)
            .unwrap();
        let y = ln.apply(&array![[1.0, 2.0, 4.0, 9.0]]).unwrap();
        let s = 10f64.sqrt();
        let expected = array![[-3.0 / s, 2.0 * -2.0 / s + 1.0, 0.0, 0.5 * 5.0 / s - 2.0]];
        assert!((&y - &expected).iter().all(|d| d.abs() < 1e-15), "{y}");
        // The unbiased variance (÷ 3) would give a visibly different answer.
        let unbiased = (38.0f64 / 3.0 + 0.5).sqrt();
        assert!((y[[0, 0]] - (-3.0 / unbiased)).abs() > 1e-2);
    }

    /// In f32, the result of a row with a large mean and a small spread (where a naive f32
    /// computation loses digits) is within a few f32 ulps of the f64 result.
    #[test]
    fn f32_agrees_with_f64_to_rounding() {
        let mut rng = StdRng::seed_from_u64(1);
        let normal = Normal::new(0.0, 1.0).unwrap();
        let x64 = Array2::from_shape_simple_fn((16, 384), || 100.0 + normal.sample(&mut rng));
        let gamma = Array1::from_shape_simple_fn(384, || 1.0 + 0.1 * normal.sample(&mut rng));
        let beta = Array1::from_shape_simple_fn(384, || 0.1 * normal.sample(&mut rng));
        let ln64 = LayerNorm::new(gamma.clone(), beta.clone(), 1e-12).unwrap();
        let ln32 =
            LayerNorm::new(gamma.mapv(|g| g as f32), beta.mapv(|b| b as f32), 1e-12).unwrap();
        let x32 = x64.mapv(|v| v as f32);
        // The reference is the f64 formula on the f32 inputs.
        let exact = ln64.apply(&x32.mapv(f64::from)).unwrap();
        let got = ln32.apply(&x32).unwrap();
        for (&g, &e) in got.iter().zip(&exact) {
            assert!((f64::from(g) - e).abs() <= 1e-6 * e.abs().max(1.0), "{g} vs {e}");
        }
    }

    /// Property: each normalised row has mean β̄ and variance γ² when γ and β are constant,
    /// and in general `(y − β)/γ` has mean 0 and variance 1 (up to ε).
    #[test]
    fn rows_have_mean_beta_and_variance_gamma_squared() {
        let mut rng = StdRng::seed_from_u64(2);
        let normal = Normal::new(3.0, 5.0).unwrap();
        let x: Array3<f64> =
            Array3::from_shape_simple_fn((3, 5, 32), || normal.sample(&mut rng));
        let ln =
            LayerNorm::new(Array1::from_elem(32, 1.5), Array1::from_elem(32, -0.25), 1e-12)
                .unwrap();
        let y = ln.apply(&x).unwrap();
        for row in y.lanes(Axis(2)) {
            let mean = row.mean().unwrap();
            let var = row.var(0.0);
            assert!(
                (mean - -0.25).abs() < 1e-12 && (var - 2.25).abs() < 1e-10,
                "{mean} {var}"
            );
        }
        let gamma = Array1::from_shape_fn(32, |i| 0.5 + i as f64 / 10.0);
        let beta = Array1::from_shape_fn(32, |i| i as f64 - 16.0);
        let ln = LayerNorm::new(gamma.clone(), beta.clone(), 1e-12).unwrap();
        let z = (ln.apply(&x).unwrap() - &beta) / &gamma;
        for row in z.lanes(Axis(2)) {
            assert!(row.mean().unwrap().abs() < 1e-12 && (row.var(0.0) - 1.0).abs() < 1e-10);
        }
    }

    /// ε keeps a constant row finite (it becomes β), and it matters when the variance is
    /// small: with ε = variance the row shrinks by √2.
    #[test]
    fn eps_keeps_a_constant_row_finite() {
        let ln = LayerNorm::new(array![1.0, 1.0], array![0.5, -0.5], 1e-12).unwrap();
        assert_eq!(ln.apply(&array![7.0, 7.0]).unwrap(), array![0.5, -0.5]);
        let ln = LayerNorm::new(array![1.0, 1.0], array![0.0, 0.0], 0.01).unwrap();
        let y = ln.apply(&array![-0.1, 0.1]).unwrap(); // variance 0.01 = ε
        let expected = array![-1.0, 1.0] / 2f64.sqrt();
        assert!((y - expected).iter().all(|d| d.abs() < 1e-12));
    }

    /// Every row is normalised on its own: a 4-axis input gives row by row what the rows
    /// give alone.
    #[test]
    fn any_number_of_leading_axes() {
        let x = Array4::from_shape_fn((2, 3, 4, 5), |(a, b, c, d)| {
            ((a * 7 + b * 5 + c * 3 + d * d) % 11) as f64
        });
        let ln =
            LayerNorm::new(Array1::linspace(0.5, 1.5, 5), Array1::linspace(-1., 1., 5), 1e-5)
                .unwrap();
        let y = ln.apply(&x).unwrap();
        for (a, b) in [(0, 0), (1, 2)] {
            let alone = ln.apply(&x.slice(ndarray::s![a, b, .., ..])).unwrap();
            assert_eq!(y.slice(ndarray::s![a, b, .., ..]), alone);
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let ln = LayerNorm::<f64>::new(Array1::ones(3), Array1::zeros(3), 1e-12).unwrap();
        let message = |r: Result<_>| r.map(|_: ArrayD| ()).unwrap_err().to_string();
        type ArrayD = ndarray::ArrayD<f64>;
        assert_eq!(
            message(ln.apply(&ndarray::ArrayD::zeros(ndarray::IxDyn(&[])))),
            "x has shape [] but a shape (..., d_model) was expected"
        );
        assert_eq!(
            message(ln.apply(&ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 0, 3])))),
            "x has L = 0: it must be at least 1"
        );
        assert_eq!(
            message(ln.apply(&ndarray::ArrayD::zeros(ndarray::IxDyn(&[0, 2, 3])))),
            "x has batch = 0: it must be at least 1"
        );
        let empty = LayerNorm::<f64>::new(Array1::zeros(0), Array1::zeros(0), 1e-12);
        assert_eq!(
            empty.unwrap_err().to_string(),
            "gamma has d_model = 0: it must be at least 1"
        );
        for eps in [-1e-12, f64::NAN, f64::INFINITY] {
            assert!(LayerNorm::<f64>::new(Array1::ones(3), Array1::zeros(3), eps).is_err());
        }
    }
}
