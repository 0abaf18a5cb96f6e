//! Chapter *Inside a real model*: the feed-forward block and GELU.
//!
//! After attention has mixed the tokens, every token goes on its own through the same small
//! two-layer network: widen to `d_ff` (BERT: `4·d_model`), apply a non-linearity, narrow
//! back:
//!
//! `FFN(x) = GELU(x · W₁ + b₁) · W₂ + b₂`, with `W₁: (d_model, d_ff)`, `W₂: (d_ff, d_model)`.
//!
//! BERT's non-linearity is the exact GELU, `GELU(x) = x·Φ(x) = x/2 · (1 + erf(x/√2))`, where
//! `Φ` is the standard normal distribution function: a smooth ReLU that lets a little of the
//! negative side through. Some models use a `tanh` approximation instead; it differs by up
//! to about `5e-4` (near `x = −2.7`), far more than `f32` rounding, so the form must be the
//! one the model was trained with. `erf` comes from `libm`, computed in `f64`: the same bits
//! on every machine.
//!
//! Anchors (below the doc comments): `gelu`, `feed_forward`.

use ndarray::{Array, ArrayRef, Dimension};

use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};
use crate::projection::Linear;

/// The exact GELU, `x·Φ(x) = x/2 · (1 + erf(x/√2))`, computed in `f64` and rounded once.
///
/// ```
/// use attention::feed_forward::gelu;
///
/// assert_eq!(gelu(0.0_f64), 0.0);
/// assert!((gelu(1.0_f64) - 0.841_344_746_068_542_9).abs() < 1e-15);
/// assert!((gelu(-3.0_f32) - -0.004_049_694).abs() < 1e-9);
/// ```
// ANCHOR: gelu
pub fn gelu<A: Float>(x: A) -> A {
    let x = to_f64(x);
    A::from_f64_lossy(0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2)))
}
// ANCHOR_END: gelu

/// The position-wise feed-forward block: `up: (d_model, d_ff)`, GELU, `down: (d_ff,
/// d_model)`, each [`Linear`] with or without a bias.
///
/// ```
/// use attention::{feed_forward::FeedForward, projection::Linear};
/// use ndarray::{array, Array2};
///
/// let up = Linear::with_bias(Array2::<f64>::eye(2), array![0.0, -1.0]).unwrap();
/// let down = Linear::new(array![[1.0, 0.0], [0.0, 1.0]]).unwrap();
/// let ffn = FeedForward::new(up, down).unwrap();
/// let y = ffn.apply(&array![[1.0, 1.0]]).unwrap(); // GELU(1), GELU(0)
/// assert!((y[[0, 0]] - 0.841_344_746_068_542_9).abs() < 1e-15 && y[[0, 1]] == 0.0);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: feed_forward
pub struct FeedForward<A> {
    up: Linear<A>,   // (d_model, d_ff), b₁: (d_ff)
    down: Linear<A>, // (d_ff, d_model), b₂: (d_model)
}

impl<A: Float> FeedForward<A> {
    // ANCHOR_END: feed_forward
    /// The block from its two maps: `up: (d_model, d_ff)` and `down: (d_ff, d_model)`.
    ///
    /// ```
    /// use attention::{feed_forward::FeedForward, projection::Linear};
    /// use ndarray::Array2;
    ///
    /// let up = Linear::new(Array2::<f32>::zeros((4, 16))).unwrap();
    /// let down = Linear::new(Array2::<f32>::zeros((16, 5))).unwrap();
    /// assert_eq!(
    ///     FeedForward::new(up, down).unwrap_err().to_string(),
    ///     "down has shape [16, 5] but a shape (d_ff, d_model) = (16, 4) was expected"
    /// );
    /// ```
    // ANCHOR: feed_forward
    pub fn new(up: Linear<A>, down: Linear<A>) -> Result<Self> {
        let (d_model, d_ff) = (up.d_in(), up.d_out());
        if (down.d_in(), down.d_out()) != (d_ff, d_model) {
            return Err(AttentionError::shape(
                "down",
                down.weight().shape(),
                &format!("a shape (d_ff, d_model) = ({d_ff}, {d_model}) was expected"),
            ));
        }
        Ok(FeedForward { up, down })
    }

    // ANCHOR_END: feed_forward
    /// `GELU(x · W₁ + b₁) · W₂ + b₂` for every token of `x: (..., L, d_model)`.
    ///
    /// ```
    /// use attention::{feed_forward::FeedForward, projection::Linear};
    /// use ndarray::{Array2, Array3};
    ///
    /// let up = Linear::new(Array2::<f64>::eye(3)).unwrap();
    /// let ffn = FeedForward::new(up.clone(), up).unwrap();
    /// let x = Array3::from_elem((2, 4, 3), 1.0);
    /// let y = ffn.apply(&x).unwrap(); // GELU(1) everywhere
    /// assert!((y - 0.841_344_746_068_542_9).iter().all(|d| d.abs() < 1e-15));
    /// assert!(ffn.apply(&Array3::<f64>::zeros((2, 4, 5))).is_err());
    /// ```
    // ANCHOR: feed_forward
    pub fn apply<D: Dimension>(&self, x: &ArrayRef<A, D>) -> Result<Array<A, D>> {
        let hidden = self.up.apply_nd(x)?.mapv_into(gelu); // (..., L, d_ff)
        self.down.apply_nd(&hidden) // (..., L, d_model)
    }
}
// ANCHOR_END: feed_forward

impl<A: Float> FeedForward<A> {
    /// The width of the tokens, `d_model`.
    ///
    /// ```
    /// use attention::{feed_forward::FeedForward, projection::Linear};
    /// use ndarray::Array2;
    ///
    /// let up = Linear::new(Array2::<f32>::zeros((4, 16))).unwrap();
    /// let down = Linear::new(Array2::<f32>::zeros((16, 4))).unwrap();
    /// let ffn = FeedForward::new(up, down).unwrap();
    /// assert_eq!((ffn.d_model(), ffn.d_ff()), (4, 16));
    /// ```
    pub fn d_model(&self) -> usize {
        self.up.d_in()
    }

    /// The hidden width `d_ff`.
    ///
    /// ```
    /// use attention::{feed_forward::FeedForward, projection::Linear};
    /// use ndarray::Array2;
    ///
    /// let up = Linear::new(Array2::<f32>::zeros((4, 16))).unwrap();
    /// let down = Linear::new(Array2::<f32>::zeros((16, 4))).unwrap();
    /// assert_eq!(FeedForward::new(up, down).unwrap().d_ff(), 16);
    /// ```
    pub fn d_ff(&self) -> usize {
        self.up.d_out()
    }

    /// The two maps `[up, down]`.
    ///
    /// ```
    /// use attention::{feed_forward::FeedForward, projection::Linear};
    /// use ndarray::Array2;
    ///
    /// let up = Linear::new(Array2::<f32>::zeros((4, 16))).unwrap();
    /// let down = Linear::new(Array2::<f32>::zeros((16, 4))).unwrap();
    /// let ffn = FeedForward::new(up, down).unwrap();
    /// let [up, _] = ffn.maps();
    /// assert_eq!(up.d_out(), 16);
    /// ```
    pub fn maps(&self) -> [&Linear<A>; 2] {
        [&self.up, &self.down]
    }

    /// The number of learnable numbers: both weights and any biases.
    ///
    /// ```
    /// use attention::{feed_forward::FeedForward, projection::Linear};
    /// use ndarray::{Array1, Array2};
    ///
    /// let up = Linear::with_bias(Array2::<f32>::zeros((4, 16)), Array1::zeros(16)).unwrap();
    /// let down = Linear::with_bias(Array2::<f32>::zeros((16, 4)), Array1::zeros(4)).unwrap();
    /// assert_eq!(FeedForward::new(up, down).unwrap().parameter_count(), 2 * 64 + 16 + 4);
    /// ```
    pub fn parameter_count(&self) -> usize {
        self.up.parameter_count() + self.down.parameter_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, Array2, Array3, array, s};

    /// The tanh approximation some models use instead, for comparison.
    fn gelu_tanh(x: f64) -> f64 {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
    }

    /// Values computed with Python's `math.erf`: `x/2·(1 + erf(x/√2))`.
    #[test]
    fn known_values() {
        assert_eq!(gelu(0.0_f64), 0.0);
        assert_eq!(gelu(0.0_f32), 0.0);
        let (at_1, at_minus_3) = (gelu(1.0_f64), gelu(-3.0_f64));
        assert!((at_1 - 0.8413447460685429).abs() < 1e-15, "{at_1:e}");
        assert!((at_minus_3 - -0.00404969409489031).abs() < 1e-17, "{at_minus_3:e}");
        assert!((gelu(1.0_f32) - 0.841_344_7).abs() <= f32::EPSILON);
        // Far out it is x on the right and 0 on the left.
        assert_eq!(gelu(10.0_f64), 10.0);
        assert!(gelu(-10.0_f64).abs() < 1e-20);
    }

    /// A test with the tanh approximation in place of erf would fail: at 1 and at −3 the two
    /// differ by more than 1e-5, the tolerance of the real-model comparison.
    #[test]
    fn the_tanh_approximation_differs() {
        assert!((gelu_tanh(1.0) - 0.8411919906082768).abs() < 1e-15);
        for x in [1.0, -3.0, 2.0] {
            let d = (gelu(x) - gelu_tanh(x)).abs();
            assert!(d > 1e-5, "at {x} they differ by only {d}");
        }
        // ... and the largest gap over [−6, 6] is about 4.7e-4, near x = −2.7.
        let gap = (-600..=600)
            .map(|i| i as f64 / 100.0)
            .map(|x| (gelu(x) - gelu_tanh(x)).abs())
            .fold(0.0, f64::max);
        assert!(gap > 4.6e-4 && gap < 4.8e-4, "{gap}");
    }

    /// The block by hand on a tiny case: d_model = 2, d_ff = 3, with biases.
    #[test]
    fn a_block_worked_by_hand() {
        let up = Linear::with_bias(
            array![[1.0, 0.0, 2.0], [0.0, -1.0, 1.0]],
            array![0.0, 1.0, -3.0],
        )
        .unwrap();
        let down =
            Linear::with_bias(array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], array![0.5, 0.0])
                .unwrap();
        let ffn = FeedForward::new(up, down).unwrap();
        // x = (1, 1): x·W₁ + b₁ = (1, 0, 0) → GELU = (Φ(1), 0, 0) → ·W₂ + b₂ = (Φ(1) + 0.5, 0)
        let y = ffn.apply(&array![[1.0, 1.0], [0.0, 2.0]]).unwrap();
        assert!(
            (y[[0, 0]] - (0.8413447460685429_f64 + 0.5)).abs() < 1e-15 && y[[0, 1]] == 0.0
        );
        // x = (0, 2): (0, −1, −1) → (0, g, g) with g = GELU(−1) → (g + 0.5, 2g)
        let g = gelu(-1.0);
        assert!((y[[1, 0]] - (g + 0.5)).abs() < 1e-15 && (y[[1, 1]] - 2.0 * g).abs() < 1e-15);
    }

    /// Every token goes through alone: a batch gives what its tokens give one by one.
    #[test]
    fn tokens_are_independent() {
        let up = Linear::with_bias(
            Array2::from_shape_fn((3, 5), |(i, j)| ((i * 5 + j) % 7) as f64 / 3.0 - 1.0),
            Array1::linspace(-1.0, 1.0, 5),
        )
        .unwrap();
        let down =
            Linear::new(Array2::from_shape_fn((5, 3), |(i, j)| (i as f64 - j as f64) / 4.0))
                .unwrap();
        let ffn = FeedForward::new(up, down).unwrap();
        let x = Array3::from_shape_fn((2, 4, 3), |(b, i, j)| (b + 2 * i) as f64 - j as f64);
        let y = ffn.apply(&x).unwrap();
        assert_eq!(y.dim(), (2, 4, 3));
        for (b, i) in [(0, 0), (1, 3)] {
            let alone = ffn.apply(&x.slice(s![b, i..i + 1, ..])).unwrap();
            assert!((&y.slice(s![b, i..i + 1, ..]) - &alone).iter().all(|d| d.abs() < 1e-12));
        }
    }

    #[test]
    fn shapes_are_checked() {
        let up = Linear::new(Array2::<f64>::zeros((4, 8))).unwrap();
        let down = Linear::new(Array2::<f64>::zeros((6, 4))).unwrap();
        assert_eq!(
            FeedForward::new(up.clone(), down).unwrap_err().to_string(),
            "down has shape [6, 4] but a shape (d_ff, d_model) = (8, 4) was expected"
        );
        let ffn = FeedForward::new(up, Linear::new(Array2::zeros((8, 4))).unwrap()).unwrap();
        assert_eq!(
            ffn.apply(&Array2::zeros((3, 5))).unwrap_err().to_string(),
            "x has d_in = 5 but W has d_in = 4"
        );
    }
}
