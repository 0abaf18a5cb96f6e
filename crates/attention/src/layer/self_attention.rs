//! Self-attention, chapter *Queries, keys and values*: queries, keys and values projected from
//! the same tokens (and, in chapter *The complete layer*, cross-attention: queries from one
//! sequence, keys and values from another).
//!
//! `Q = X·W_Q`, `K = X·W_K`, `V = X·W_V`, then [`sdpa`]. With `X: (L, d_model)`,
//! `W_Q, W_K: (d_model, d_k)` and `W_V: (d_model, d_v)`, the output is `(L, d_v)`.
//! The layer has `d_model·(2·d_k + d_v)` parameters.
//!
//! Anchors (below the doc comments): `self_attention` (chapter *Queries, keys and values*),
//! `self_attention_forward` (the struct and `forward` only) and `self_attention_new` (the
//! constructor only) for the same chapter, `self_attention_cross`.

use ndarray::{Array2, ArrayRef2, ArrayRef3, Ix2, Ix3};
use rand::Rng;

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::mask::Mask;
use crate::projection::Linear;
use crate::sdpa::{Attention, sdpa, sdpa_batched};

/// A single-head self-attention layer: the three projections `W_Q`, `W_K`, `W_V`.
///
/// ```
/// use attention::self_attention::SelfAttention;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let layer = SelfAttention::<f64>::random(4, 3, 2, &mut StdRng::seed_from_u64(0)).unwrap();
/// assert_eq!((layer.d_model(), layer.d_k(), layer.d_v()), (4, 3, 2));
/// assert_eq!(layer.parameter_count(), 4 * (3 + 3 + 2));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: self_attention
// ANCHOR: self_attention_forward
pub struct SelfAttention<A> {
    w_q: Linear<A>, // (d_model, d_k)
    w_k: Linear<A>, // (d_model, d_k)
    w_v: Linear<A>, // (d_model, d_v)
}

impl<A: Float> SelfAttention<A> {
    // ANCHOR_END: self_attention
    // ANCHOR_END: self_attention_forward
    /// A layer from given matrices `W_Q, W_K: (d_model, d_k)` and `W_V: (d_model, d_v)`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let ok =
    ///     SelfAttention::new(Array2::<f64>::eye(4), Array2::eye(4), Array2::zeros((4, 2)));
    /// assert!(ok.is_ok());
    /// let bad =
    ///     SelfAttention::new(Array2::<f64>::eye(4), Array2::zeros((4, 3)), Array2::eye(4));
    /// assert_eq!(bad.unwrap_err().to_string(), "W_Q has d_k = 4 but W_K has d_k = 3");
    /// ```
    // ANCHOR: self_attention
    // ANCHOR: self_attention_new
    pub fn new(w_q: Array2<A>, w_k: Array2<A>, w_v: Array2<A>) -> Result<Self> {
        let (w_q, w_k, w_v) = (Linear::new(w_q)?, Linear::new(w_k)?, Linear::new(w_v)?);
        let (d_model, d_k) = (w_q.d_in(), w_q.d_out());
        for (name, w) in [("W_K", &w_k), ("W_V", &w_v)] {
            let d_in = w.d_in();
            if d_in != d_model {
                return Err(AttentionError::mismatch("W_Q", d_model, name, d_in, "d_model"));
            }
        }
        if w_k.d_out() != d_k {
            return Err(AttentionError::mismatch("W_Q", d_k, "W_K", w_k.d_out(), "d_k"));
        }
        Ok(SelfAttention { w_q, w_k, w_v })
    }
    // ANCHOR_END: self_attention_new

    // ANCHOR_END: self_attention

    /// Self-attention over `x: (L, d_model)`: output `(L, d_v)` and weights `(L, L)`.
    ///
    /// ```
    /// use attention::{mask::Mask, self_attention::SelfAttention};
    /// use ndarray::Array2;
    ///
    /// let layer =
    ///     SelfAttention::new(Array2::<f64>::eye(3), Array2::eye(3), Array2::eye(3)).unwrap();
    /// let x = Array2::from_shape_fn((4, 3), |(i, j)| (i * j) as f64);
    /// let att = layer.forward(&x, Some(&Mask::causal(4))).unwrap();
    /// assert_eq!(att.output.dim(), (4, 3));
    /// assert_eq!(att.output.row(0), x.row(0)); // the first token sees only itself
    /// ```
    // ANCHOR: self_attention
    // ANCHOR: self_attention_forward
    pub fn forward(&self, x: &ArrayRef2<A>, mask: Option<&Mask>) -> Result<Attention<A, Ix2>> {
        let q = self.w_q.apply(x)?; // (L, d_k)
        let k = self.w_k.apply(x)?; // (L, d_k)
        let v = self.w_v.apply(x)?; // (L, d_v)
        sdpa(&q, &k, &v, mask)
    }
}
// ANCHOR_END: self_attention
// ANCHOR_END: self_attention_forward

// ANCHOR: self_attention_cross
impl<A: Float> SelfAttention<A> {
    // ANCHOR_END: self_attention_cross
    /// Attention from the tokens of `x_q: (L_q, d_model)` to those of
    /// `x_kv: (L_k, d_model)` (cross-attention); `cross(x, x)` is `forward(x)`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let layer =
    ///     SelfAttention::new(Array2::<f64>::eye(2), Array2::eye(2), Array2::eye(2)).unwrap();
    /// let att = layer.cross(&Array2::ones((1, 2)), &Array2::ones((5, 2)), None).unwrap();
    /// assert_eq!(att.weights.dim(), (1, 5));
    /// ```
    // ANCHOR: self_attention_cross
    pub fn cross(
        &self,
        x_q: &ArrayRef2<A>,
        x_kv: &ArrayRef2<A>,
        mask: Option<&Mask>,
    ) -> Result<Attention<A, Ix2>> {
        let q = self.w_q.apply(x_q)?; // (L_q, d_k)
        let k = self.w_k.apply(x_kv)?; // (L_k, d_k)
        let v = self.w_v.apply(x_kv)?; // (L_k, d_v)
        sdpa(&q, &k, &v, mask)
    }
    // ANCHOR_END: self_attention_cross

    /// A layer with seeded random weights (see [`Linear::random`]), drawn in the order
    /// `W_Q`, `W_K`, `W_V`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let a = SelfAttention::<f32>::random(8, 4, 4, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let b = SelfAttention::<f32>::random(8, 4, 4, &mut StdRng::seed_from_u64(1)).unwrap();
    /// assert_eq!(a, b);
    /// ```
    pub fn random<R: Rng + ?Sized>(
        d_model: usize,
        d_k: usize,
        d_v: usize,
        rng: &mut R,
    ) -> Result<Self> {
        let w_q = Linear::random(d_model, d_k, rng)?;
        let w_k = Linear::random(d_model, d_k, rng)?;
        let w_v = Linear::random(d_model, d_v, rng)?;
        Ok(SelfAttention { w_q, w_k, w_v })
    }

    /// Self-attention over a batch `x: (batch, L, d_model)`: output `(batch, L, d_v)`,
    /// weights `(batch, L, L)`. The mask broadcasts to `(batch, L, L)` (e.g. a padding mask).
    ///
    /// ```
    /// use attention::{mask::Mask, self_attention::SelfAttention};
    /// use rand::{rngs::StdRng, SeedableRng};
    /// use ndarray::Array3;
    ///
    /// let layer =
    ///     SelfAttention::<f64>::random(4, 4, 4, &mut StdRng::seed_from_u64(3)).unwrap();
    /// let x = Array3::from_shape_fn((2, 3, 4), |(b, i, j)| (b + i * j) as f64);
    /// let padding = Mask::padding(&[3, 1], 3, 3).unwrap();
    /// let att = layer.forward_batched(&x, Some(&padding)).unwrap();
    /// assert_eq!(att.weights[[1, 2, 0]], 1.0); // item 1 has one real token
    /// ```
    pub fn forward_batched(
        &self,
        x: &ArrayRef3<A>,
        mask: Option<&Mask>,
    ) -> Result<Attention<A, Ix3>> {
        let q = self.w_q.apply_batched(x)?;
        let k = self.w_k.apply_batched(x)?;
        let v = self.w_v.apply_batched(x)?;
        sdpa_batched(&q, &k, &v, mask)
    }

    /// `W_Q: (d_model, d_k)`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let layer =
    ///     SelfAttention::new(Array2::<f64>::eye(2), Array2::eye(2), Array2::eye(2)).unwrap();
    /// assert_eq!(layer.w_q().weight(), Array2::<f64>::eye(2));
    /// ```
    pub fn w_q(&self) -> &Linear<A> {
        &self.w_q
    }

    /// `W_K: (d_model, d_k)`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let layer =
    ///     SelfAttention::new(Array2::<f64>::eye(2), Array2::eye(2), Array2::eye(2)).unwrap();
    /// assert_eq!(layer.w_k().d_out(), 2);
    /// ```
    pub fn w_k(&self) -> &Linear<A> {
        &self.w_k
    }

    /// `W_V: (d_model, d_v)`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let layer =
    ///     SelfAttention::new(Array2::<f64>::eye(2), Array2::eye(2), Array2::zeros((2, 5)))
    ///         .unwrap();
    /// assert_eq!(layer.w_v().d_out(), 5);
    /// ```
    pub fn w_v(&self) -> &Linear<A> {
        &self.w_v
    }

    /// The input width `d_model`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let layer = SelfAttention::new(
    ///     Array2::<f64>::zeros((6, 2)),
    ///     Array2::zeros((6, 2)),
    ///     Array2::zeros((6, 3)),
    /// )
    /// .unwrap();
    /// assert_eq!(layer.d_model(), 6);
    /// ```
    pub fn d_model(&self) -> usize {
        self.w_q.d_in()
    }

    /// The query/key width `d_k`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let layer = SelfAttention::new(
    ///     Array2::<f64>::zeros((6, 2)),
    ///     Array2::zeros((6, 2)),
    ///     Array2::zeros((6, 3)),
    /// )
    /// .unwrap();
    /// assert_eq!(layer.d_k(), 2);
    /// ```
    pub fn d_k(&self) -> usize {
        self.w_q.d_out()
    }

    /// The value width `d_v` (the width of the output).
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use ndarray::Array2;
    ///
    /// let layer = SelfAttention::new(
    ///     Array2::<f64>::zeros((6, 2)),
    ///     Array2::zeros((6, 2)),
    ///     Array2::zeros((6, 3)),
    /// )
    /// .unwrap();
    /// assert_eq!(layer.d_v(), 3);
    /// ```
    pub fn d_v(&self) -> usize {
        self.w_v.d_out()
    }

    /// The number of learnable numbers, `d_model·(2·d_k + d_v)`.
    ///
    /// ```
    /// use attention::self_attention::SelfAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let layer =
    ///     SelfAttention::<f64>::random(512, 64, 64, &mut StdRng::seed_from_u64(0)).unwrap();
    /// assert_eq!(layer.parameter_count(), 98_304);
    /// ```
    pub fn parameter_count(&self) -> usize {
        self.w_q.parameter_count() + self.w_k.parameter_count() + self.w_v.parameter_count()
    }
    // ANCHOR: self_attention_cross
}
// ANCHOR_END: self_attention_cross
