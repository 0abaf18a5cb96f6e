//! Chapter *Watching attention learn*: attention dropout, as training uses it.
//!
//! During training, each attention weight is dropped (set to 0) with probability `p`, after
//! the softmax and before the weights multiply `V`; the weights that stay are multiplied by
//! `1/(1 − p)` ("inverted" dropout), so that every weight keeps its expected value:
//! `E[w·m] = w·(1 − p)·1/(1 − p) = w`. A dropped row no longer sums to 1, only its
//! expectation does. In evaluation nothing is dropped and nothing is scaled: the layer is
//! the plain one.
//!
//! The drop is a multiplication by a *scale mask* `m` of entries `0` or `1/(1 − p)`, drawn
//! from a seeded generator ([`Dropout::scale_mask`]). Multiplying by a fixed mask is linear,
//! so its backward is the same multiplication: `∂L/∂w = m ∘ ∂L/∂(w∘m)`
//! ([`apply_scale`] is both). Training does not call `apply_scale`: the layer's
//! `forward_train` and `backward` (module `grad`) write the same two products themselves
//! (`&weights * &drop.view()` in the forward pass, `grad_weights * drop` in the backward).
//!
//! Anchors (below the doc comments): `dropout`, `scale_mask`, `apply_scale`.

use ndarray::{Array, ArrayRef, Dimension, IntoDimension};
use rand::Rng;

use crate::error::{AttentionError, Result};
use crate::float::Float;

/// Attention dropout with drop probability `p`, `0 ≤ p < 1`.
///
/// ```
/// use attention::dropout::Dropout;
///
/// let dropout = Dropout::new(0.25).unwrap();
/// assert_eq!((dropout.p(), dropout.keep_scale()), (0.25, 1.0 / 0.75));
/// assert!(Dropout::new(1.0).is_err()); // everything dropped: nothing to rescale
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
// ANCHOR: dropout
pub struct Dropout {
    p: f64, // the probability that a weight is dropped
}

impl Dropout {
    // ANCHOR_END: dropout
    /// Dropout with probability `p`; an error unless `0 ≤ p < 1` (`p = 0` drops nothing).
    ///
    /// ```
    /// use attention::dropout::Dropout;
    ///
    /// assert!(Dropout::new(0.0).is_ok());
    /// assert_eq!(
    ///     Dropout::new(-0.1).unwrap_err().to_string(),
    ///     "dropout probability p: must be at least 0 and below 1, but it is -0.1"
    /// );
    /// ```
    // ANCHOR: dropout
    pub fn new(p: f64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(AttentionError::Invalid {
                what: "dropout probability p".into(),
                problem: format!("must be at least 0 and below 1, but it is {p}"),
            });
        }
        Ok(Dropout { p })
    }

    // ANCHOR_END: dropout
    /// The drop probability `p`.
    ///
    /// ```
    /// use attention::dropout::Dropout;
    ///
    /// assert_eq!(Dropout::new(0.1).unwrap().p(), 0.1);
    /// ```
    // ANCHOR: dropout
    pub fn p(&self) -> f64 {
        self.p
    }

    // ANCHOR_END: dropout
    /// The factor `1/(1 − p)` by which a kept weight is multiplied.
    ///
    /// ```
    /// use attention::dropout::Dropout;
    ///
    /// assert_eq!(Dropout::new(0.5).unwrap().keep_scale(), 2.0);
    /// ```
    // ANCHOR: dropout
    pub fn keep_scale(&self) -> f64 {
        1.0 / (1.0 - self.p)
    }

    // ANCHOR_END: dropout
    /// A scale mask of the given shape: each entry is `0` with probability `p`, otherwise
    /// `1/(1 − p)`.
    ///
    /// The entries are drawn in row-major order (the last axis fastest), one
    /// `rng.random::<f64>()` each (uniform in `[0, 1)`; the entry is dropped when it is
    /// below `p`), so a seeded generator gives the same mask on every machine and every
    /// entry consumes one draw even when `p = 0`.
    ///
    /// ```
    /// use attention::dropout::Dropout;
    /// use ndarray::Array4;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let dropout = Dropout::new(0.5).unwrap();
    /// let shape = (2, 1, 3, 3); // (batch, heads, L, L)
    /// let mask: Array4<f64> = dropout.scale_mask(shape, &mut StdRng::seed_from_u64(0));
    /// assert_eq!(mask.dim(), (2, 1, 3, 3));
    /// assert!(mask.iter().all(|&m| m == 0.0 || m == 2.0));
    /// let again: Array4<f64> = dropout.scale_mask(shape, &mut StdRng::seed_from_u64(0));
    /// assert_eq!(mask, again);
    /// ```
    // ANCHOR: scale_mask
    pub fn scale_mask<A, Sh, R>(&self, shape: Sh, rng: &mut R) -> Array<A, Sh::Dim>
    where
        A: Float,
        Sh: IntoDimension,
        R: Rng + ?Sized,
    {
        let keep = A::from_f64_lossy(self.keep_scale());
        // `from_shape_simple_fn` fills a standard-layout array in row-major order.
        Array::from_shape_simple_fn(shape.into_dimension(), || {
            if rng.random::<f64>() < self.p { A::zero() } else { keep }
        })
    }
}
// ANCHOR_END: scale_mask

/// The weights after dropout, `weights ∘ scale`, or the weights unchanged when `scale` is
/// `None` (evaluation mode).
///
/// Multiplying by a fixed mask is linear and acts on each entry alone, so the same call is
/// also the backward pass: the gradient with respect to the weights is
/// `apply_scale(grad_dropped, scale)`. An error names both shapes when they differ.
///
/// ```
/// use attention::dropout::apply_scale;
/// use ndarray::array;
///
/// let weights = array![[0.25, 0.75], [0.5, 0.5]];
/// let scale = array![[2.0, 0.0], [2.0, 2.0]]; // p = 0.5: one weight dropped
/// assert_eq!(apply_scale(&weights, Some(&scale)).unwrap(), array![[0.5, 0.0], [1.0, 1.0]]);
/// assert_eq!(apply_scale(&weights, None).unwrap(), weights); // evaluation: unchanged
/// assert!(apply_scale(&weights, Some(&array![[1.0, 1.0]])).is_err());
/// ```
// ANCHOR: apply_scale
pub fn apply_scale<A: Float, D: Dimension>(
    weights: &ArrayRef<A, D>,
    scale: Option<&ArrayRef<A, D>>,
) -> Result<Array<A, D>> {
    let Some(scale) = scale else {
        return Ok(weights.to_owned()); // evaluation mode: the identity
    };
    if scale.shape() != weights.shape() {
        return Err(AttentionError::shape(
            "dropout scale",
            scale.shape(),
            &format!("the weights' shape {:?} was expected", weights.shape()),
        ));
    }
    Ok(weights * scale)
}
// ANCHOR_END: apply_scale

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, Array2, Array3, Axis, array};
    use rand::{SeedableRng, rngs::StdRng};

    /// Every kept entry is exactly `1/(1 − p)`, the fraction dropped is close to `p`, and
    /// the mean of the mask (its expectation is 1) is within five standard errors of 1:
    /// the variance of one entry is `p/(1 − p)`.
    #[test]
    fn the_expectation_of_the_mask_is_one() {
        let n = 200_000;
        for (p, seed) in [(0.1, 1), (0.5, 2), (0.9, 3)] {
            let dropout = Dropout::new(p).unwrap();
            let mask: Array1<f64> = dropout.scale_mask(n, &mut StdRng::seed_from_u64(seed));
            let kept = mask.iter().filter(|&&m| m != 0.0).count();
            assert!(mask.iter().all(|&m| m == 0.0 || m == 1.0 / (1.0 - p)));
            let dropped_fraction = 1.0 - kept as f64 / n as f64;
            let binomial_se = (p * (1.0 - p) / n as f64).sqrt();
            assert!((dropped_fraction - p).abs() < 5.0 * binomial_se, "p = {p}");
            let mean = mask.sum() / n as f64;
            let se = (p / (1.0 - p) / n as f64).sqrt();
            assert!((mean - 1.0).abs() < 5.0 * se, "p = {p}: mean {mean}");
        }
    }

    /// The same for dropped attention weights: averaged over many seeded masks, `w ∘ m`
    /// comes back to `w`, entry by entry, and each row's sum comes back to 1; while one
    /// draw does change the weights (an `apply_scale` that ignored the mask would pass the
    /// averages alone).
    #[test]
    fn dropped_weights_keep_their_expectation() {
        let weights =
            array![[0.7, 0.2, 0.1], [0.05, 0.9, 0.05], [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0]];
        let p = 0.3;
        let dropout = Dropout::new(p).unwrap();
        let draws = 20_000;
        let masks: Array3<f64> =
            dropout.scale_mask((draws, 3, 3), &mut StdRng::seed_from_u64(7));
        let mut mean = Array2::<f64>::zeros((3, 3));
        let mut changed = 0;
        for mask in masks.axis_iter(Axis(0)) {
            let dropped = apply_scale(&weights, Some(&mask.to_owned())).unwrap();
            changed += usize::from(dropped != weights);
            mean = mean + dropped;
        }
        mean /= draws as f64;
        // A mask leaves all 9 weights alone with probability 0.7⁹ ≈ 0.04.
        assert!(changed > draws / 2, "{changed} of {draws} draws changed the weights");
        for ((i, j), &w) in weights.indexed_iter() {
            // One draw of w·m has variance w²·p/(1 − p).
            let se = w * (p / (1.0 - p) / draws as f64).sqrt();
            assert!((mean[[i, j]] - w).abs() < 5.0 * se, "({i}, {j}): {}", mean[[i, j]]);
        }
        for row in mean.rows() {
            assert!((row.sum() - 1.0).abs() < 0.02, "{row}");
        }
    }

    /// Evaluation mode (`None`) returns the weights bit for bit; so does a training-mode
    /// mask drawn with `p = 0`, whose entries are all exactly 1.
    #[test]
    fn evaluation_mode_is_the_identity() {
        let weights = array![[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]];
        assert_eq!(apply_scale(&weights, None).unwrap(), weights);
        let none = Dropout::new(0.0).unwrap();
        let ones: Array2<f64> = none.scale_mask((2, 3), &mut StdRng::seed_from_u64(0));
        assert_eq!(apply_scale(&weights, Some(&ones)).unwrap(), weights);
    }

    /// The backward of dropout with the mask held fixed, against central finite differences
    /// of `L(w) = Σ c ∘ (w ∘ m)` for a random `c`: `∂L/∂w = m ∘ c`. (The layer's backward
    /// with dropout is checked against finite differences in `learn`'s tests.)
    #[test]
    fn the_backward_matches_finite_differences() {
        let mut rng = StdRng::seed_from_u64(11);
        let dropout = Dropout::new(0.4).unwrap();
        let mask: Array2<f64> = dropout.scale_mask((4, 5), &mut rng);
        let w = Array2::from_shape_fn((4, 5), |_| rng.random::<f64>());
        let c = Array2::from_shape_fn((4, 5), |_| rng.random::<f64>() - 0.5);
        let loss = |w: &Array2<f64>| (&apply_scale(w, Some(&mask)).unwrap() * &c).sum();
        let analytic = &mask * &c; // written out, not through apply_scale
        for ((i, j), &g) in analytic.indexed_iter() {
            let h = 1e-6;
            let (mut plus, mut minus) = (w.clone(), w.clone());
            plus[[i, j]] += h;
            minus[[i, j]] -= h;
            let fd = (loss(&plus) - loss(&minus)) / (2.0 * h);
            assert!((fd - g).abs() <= 1e-9 + 1e-6 * g.abs(), "({i}, {j}): {fd} vs {g}");
        }
        assert!(mask.iter().any(|&m| m == 0.0) && mask.iter().any(|&m| m != 0.0));
    }

    #[test]
    fn bad_probabilities_and_shapes_are_errors() {
        for p in [-0.5, 1.0, 1.5, f64::NAN] {
            assert!(Dropout::new(p).is_err(), "p = {p}");
        }
        let err = apply_scale(&Array2::<f64>::zeros((2, 3)), Some(&Array2::zeros((3, 2))));
        assert_eq!(
            err.unwrap_err().to_string(),
            "dropout scale has shape [3, 2] but the weights' shape [2, 3] was expected"
        );
    }
}
