//! The element type: everything in the crate works for `f32` and for `f64`.
//!
//! The chapters use `f64`, so that the seed notebooks' numbers (printed by NumPy in double
//! precision) reproduce to their last printed digit; the performance work uses `f32`.
//!
//! Anchor (below the doc comments): `to_f64` (chapter *Inside a real model*).

use std::fmt::{Debug, Display};
use std::iter::Sum;

use ndarray::{LinalgScalar, ScalarOperand};
use num_traits::FromPrimitive;

/// A floating-point element type: implemented for `f32` and `f64`.
///
/// It gathers the bounds ndarray needs for `dot`, `mean` and `var`, plus two helpers to
/// turn `f64` constants and `usize` sizes into the element type.
///
/// ```
/// use attention::Float;
///
/// fn half<A: Float>(x: A) -> A {
///     x * A::from_f64_lossy(0.5)
/// }
/// assert_eq!(half(3.0_f32), 1.5);
/// assert_eq!(half(3.0_f64), 1.5);
/// assert_eq!(<f64 as Float>::from_len(8).sqrt(), 8f64.sqrt());
/// ```
pub trait Float:
    num_traits::Float
    + FromPrimitive
    + LinalgScalar
    + ScalarOperand
    + Sum
    + Debug
    + Display
    + Default
    + Send
    + Sync
    + 'static
{
    /// Converts an `f64` (a constant, a random sample) to this type, rounding to nearest.
    fn from_f64_lossy(x: f64) -> Self;

    /// Converts a size (`d_k`, a length) to this type.
    fn from_len(n: usize) -> Self;
}

impl Float for f32 {
    fn from_f64_lossy(x: f64) -> Self {
        x as f32
    }
    fn from_len(n: usize) -> Self {
        n as f32
    }
}

impl Float for f64 {
    fn from_f64_lossy(x: f64) -> Self {
        x
    }
    fn from_len(n: usize) -> Self {
        n as f64
    }
}

/// `x` as an `f64`: exact for `f32` and `f64`. The formulas of chapter 13 (layer norm, GELU,
/// pooling) accumulate in `f64` whatever the element type.
// ANCHOR: to_f64
pub(crate) fn to_f64<A: Float>(x: A) -> f64 {
    x.to_f64().expect("f32 and f64 convert to f64")
}
// ANCHOR_END: to_f64
