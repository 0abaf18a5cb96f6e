//! Chapter *Multi-head attention*: several smaller attentions side by side.
//!
//! With `heads` heads and `d_head = d_model / heads`, the projections `W_Q`, `W_K`, `W_V`
//! (each `(d_model, d_model)`) are computed once; their columns are then cut into `heads`
//! groups of `d_head`, and head `h` attends with its own group, scaled by `√d_head` (not
//! `√d_model`). The head outputs are put back side by side and mixed by
//! `W_O: (d_model, d_model)`.
//!
//! The cut is a reshape and a swap of axes ([`split_heads`]):
//! `(L, d_model) → (L, heads, d_head) → (heads, L, d_head)`, and [`merge_heads`] undoes it.
//! [`MultiHeadAttention::forward_per_head`] does the same with an explicit loop over the
//! heads, which is easier to read and must agree.
//!
//! # From PyTorch's `nn.MultiheadAttention(bias=False)`
//!
//! PyTorch keeps the three input projections stacked in
//! `in_proj_weight: (3·d_model, d_model)`, rows `[W_q; W_k; W_v]`, each block in `nn.Linear`'s
//! `(out, in)` layout (it computes `x · Wᵀ`). In this crate's `X · W` convention:
//! `W_Q = in_proj_weight[0:d].T`, `W_K = in_proj_weight[d:2d].T`,
//! `W_V = in_proj_weight[2d:3d].T` and `W_O = out_proj.weight.T`. PyTorch cuts heads the same
//! way (consecutive groups of `d_head` columns). Its returned weights are averaged over the
//! heads unless `average_attn_weights=False`.
//!
//! # From a pretrained BERT layer
//!
//! BERT's projections have biases (`attention.self.query.weight` and `.bias`, …,
//! `attention.output.dense`): build each with [`Linear::with_bias`] from the transposed
//! weight and pass the four to [`MultiHeadAttention::from_projections`].
//!
//! Anchors (below the doc comments): `head_width`, `split_heads`, `merge_heads`,
//! `multihead_struct`, `multihead_new`, `multihead_forward`, `per_head_loop` (chapter
//! *Multi-head attention*), `multihead_cross` (chapter *The complete layer*),
//! `projections` (chapter *Gradients*), `multihead_batched`, `from_projections` and
//! `without_head` (chapter *Inside a real model*).

use ndarray::{
    Array, Array2, Array3, ArrayRef, ArrayRef2, ArrayRef3, Axis, Dimension, Ix2, Ix3, IxDyn, s,
};
use rand::Rng;

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::mask::Mask;
use crate::projection::Linear;
use crate::sdpa::{Attention, sdpa, sdpa_batched};
use crate::shapes::Operand;

/// The output of multi-head attention and every head's weights.
///
/// For `x: (L, d_model)`: `output: (L, d_model)`, `weights: (heads, L_q, L_k)`.
/// For a batch `(batch, L, d_model)`: `output: (batch, L, d_model)`,
/// `weights: (batch, heads, L_q, L_k)`.
///
/// ```
/// use attention::multihead::{MultiHeadAttention, MultiHeadOutput};
/// use ndarray::Array2;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let mha = MultiHeadAttention::<f64>::random(8, 2, &mut StdRng::seed_from_u64(0)).unwrap();
/// let MultiHeadOutput { output, weights } =
///     mha.forward(&Array2::ones((5, 8)), None).unwrap();
/// assert_eq!((output.dim(), weights.dim()), ((5, 8), (2, 5, 5)));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: multihead_struct
pub struct MultiHeadOutput<A, D: Dimension> {
    /// `(…, L_q, d_model)`: the attended tokens after `W_O`.
    pub output: Array<A, D>,
    /// `(…, heads, L_q, L_k)`: each head's attention weights.
    pub weights: Array<A, D::Larger>,
}

// ANCHOR_END: multihead_struct

/// `d_model / heads`, or an error when `heads` is 0 or does not divide `d_model`.
///
/// ```
/// use attention::multihead::head_width;
///
/// assert_eq!(head_width(512, 8).unwrap(), 64);
/// assert_eq!(
///     head_width(10, 4).unwrap_err().to_string(),
///     "heads = 4 does not divide d_model = 10"
/// );
/// ```
// ANCHOR: head_width
pub fn head_width(d_model: usize, heads: usize) -> Result<usize> {
    if heads == 0 || !d_model.is_multiple_of(heads) {
        return Err(AttentionError::Heads { heads, d_model });
    }
    Ok(d_model / heads)
}
// ANCHOR_END: head_width

/// Cuts the last axis into heads: `(..., L, d_model) → (..., heads, L, d_head)`.
///
/// A reshape `(..., L, heads, d_head)` (head `h` owns columns `h·d_head .. (h+1)·d_head`)
/// followed by a swap of the `L` and `heads` axes, so that each head is a matrix
/// `(L, d_head)`.
///
/// ```
/// use attention::multihead::split_heads;
/// use ndarray::array;
///
/// let x = array![[1, 2, 3, 4], [5, 6, 7, 8]];       // (L, d_model) = (2, 4)
/// let heads = split_heads(&x, 2).unwrap();          // (heads, L, d_head) = (2, 2, 2)
/// assert_eq!(heads, array![[[1, 2], [5, 6]], [[3, 4], [7, 8]]]);
/// ```
// ANCHOR: split_heads
pub fn split_heads<A: Clone, D: Dimension>(
    x: &ArrayRef<A, D>,
    heads: usize,
) -> Result<Array<A, D::Larger>> {
    let (_, _, d_model) =
        Operand { name: "x", shape: x.shape(), rows: "L", cols: "d_model" }.split()?;
    let d_head = head_width(d_model, heads)?;
    let n = x.ndim();
    let mut shape = x.shape().to_vec(); // (..., L, d_model)
    shape[n - 1] = heads;
    shape.push(d_head); // (..., L, heads, d_head)
    let mut split = x.to_shape(IxDyn(&shape)).expect("heads · d_head = d_model").into_owned();
    split.swap_axes(n - 2, n - 1); // (..., heads, L, d_head)
    Ok(split.into_dimensionality().expect("one axis more than x"))
}
// ANCHOR_END: split_heads

/// Puts the heads back side by side: `(..., heads, L, d_head) → (..., L, heads·d_head)`,
/// the inverse of [`split_heads`].
///
/// ```
/// use attention::multihead::{merge_heads, split_heads};
/// use ndarray::Array2;
///
/// let x = Array2::from_shape_fn((3, 6), |(i, j)| 10 * i + j);
/// assert_eq!(merge_heads(&split_heads(&x, 3).unwrap()).unwrap(), x);
/// ```
// ANCHOR: merge_heads
pub fn merge_heads<A: Clone, D: Dimension>(
    x: &ArrayRef<A, D>,
) -> Result<Array<A, D::Smaller>> {
    let n = x.ndim();
    if n < 3 {
        return Err(AttentionError::shape(
            "x",
            x.shape(),
            "a shape (..., heads, L, d_head) was expected",
        ));
    }
    let mut swapped = x.view().into_dyn();
    swapped.swap_axes(n - 3, n - 2); // (..., L, heads, d_head)
    let mut shape = swapped.shape()[..n - 1].to_vec();
    shape[n - 2] *= x.shape()[n - 1]; // (..., L, heads · d_head)
    let merged =
        swapped.to_shape(IxDyn(&shape)).expect("same number of elements").into_owned();
    Ok(merged.into_dimensionality().expect("one axis fewer than x"))
}
// ANCHOR_END: merge_heads

/// Multi-head attention: `W_Q`, `W_K`, `W_V`, `W_O`, all `(d_model, d_model)`, and `heads`.
///
/// ```
/// use attention::multihead::MultiHeadAttention;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let mha =
///     MultiHeadAttention::<f32>::random(512, 8, &mut StdRng::seed_from_u64(0)).unwrap();
/// assert_eq!(mha.d_head(), 64);
/// assert_eq!(mha.parameter_count(), 4 * 512 * 512);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: multihead_struct
pub struct MultiHeadAttention<A> {
    w_q: Linear<A>, // (d_model, d_model): the queries of every head, side by side
    w_k: Linear<A>, // (d_model, d_model)
    w_v: Linear<A>, // (d_model, d_model)
    w_o: Linear<A>, // (d_model, d_model): mixes the merged heads
    heads: usize,
}
// ANCHOR_END: multihead_struct

// ANCHOR: multihead_new
// ANCHOR: multihead_cross
impl<A: Float> MultiHeadAttention<A> {
    // ANCHOR_END: multihead_cross
    // ANCHOR_END: multihead_new
    /// A layer from given `(d_model, d_model)` matrices, applied as `X · W`; `heads` must
    /// divide `d_model`.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use ndarray::Array2;
    ///
    /// let eye = Array2::<f64>::eye(6);
    /// assert!(
    ///     MultiHeadAttention::new(eye.clone(), eye.clone(), eye.clone(), eye.clone(), 3)
    ///         .is_ok()
    /// );
    /// let err =
    ///     MultiHeadAttention::new(eye.clone(), eye.clone(), eye.clone(), eye.clone(), 4);
    /// assert_eq!(err.unwrap_err().to_string(), "heads = 4 does not divide d_model = 6");
    /// ```
    // ANCHOR: multihead_new
    pub fn new(
        w_q: Array2<A>,
        w_k: Array2<A>,
        w_v: Array2<A>,
        w_o: Array2<A>,
        heads: usize,
    ) -> Result<Self> {
        let d_model = w_q.nrows();
        for (name, w) in [("W_Q", &w_q), ("W_K", &w_k), ("W_V", &w_v), ("W_O", &w_o)] {
            if w.dim() != (d_model, d_model) {
                return Err(AttentionError::shape(
                    name,
                    w.shape(),
                    &format!(
                        "a shape (d_model, d_model) = ({d_model}, {d_model}) was expected"
                    ),
                ));
            }
        }
        head_width(d_model, heads)?;
        Ok(MultiHeadAttention {
            w_q: Linear::new(w_q)?,
            w_k: Linear::new(w_k)?,
            w_v: Linear::new(w_v)?,
            w_o: Linear::new(w_o)?,
            heads,
        })
    }

    // ANCHOR_END: multihead_new

    /// A layer with seeded random weights (see [`Linear::random`]), drawn in the order
    /// `W_Q`, `W_K`, `W_V`, `W_O`.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// assert!(
    ///     MultiHeadAttention::<f64>::random(8, 3, &mut StdRng::seed_from_u64(0)).is_err()
    /// );
    /// ```
    // ANCHOR: multihead_new
    pub fn random<R: Rng + ?Sized>(d_model: usize, heads: usize, rng: &mut R) -> Result<Self> {
        head_width(d_model, heads)?;
        let w_q = Linear::random(d_model, d_model, rng)?;
        let w_k = Linear::random(d_model, d_model, rng)?;
        let w_v = Linear::random(d_model, d_model, rng)?;
        let w_o = Linear::random(d_model, d_model, rng)?;
        Ok(MultiHeadAttention { w_q, w_k, w_v, w_o, heads })
    }
    // ANCHOR_END: multihead_new

    /// Multi-head self-attention over `x: (L, d_model)`; the mask broadcasts to `(L, L)`
    /// (or to `(heads, L, L)`).
    ///
    /// ```
    /// use attention::{mask::Mask, multihead::MultiHeadAttention};
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let x = Array2::from_shape_fn((3, 4), |(i, j)| (i + j) as f64);
    /// let out = mha.forward(&x, Some(&Mask::causal(3))).unwrap();
    /// assert_eq!(out.weights[[1, 0, 0]], 1.0); // head 1, token 0 sees only itself
    /// ```
    // ANCHOR: multihead_forward
    pub fn forward(
        &self,
        x: &ArrayRef2<A>,
        mask: Option<&Mask>,
    ) -> Result<MultiHeadOutput<A, Ix2>> {
        let q = self.w_q.apply(x)?; // (L, d_model): every head's queries, side by side
        let k = self.w_k.apply(x)?;
        let v = self.w_v.apply(x)?;
        let (merged, weights) = self.attend_heads(&q, &k, &v, mask)?; // (L, d_model)
        let output = self.w_o.apply(&merged)?;
        Ok(MultiHeadOutput { output, weights })
    }

    // ANCHOR_END: multihead_forward
    /// The heads' part of every form of the layer. The projected `q: (..., L_q, d_model)`,
    /// `k` and `v: (..., L_k, d_model)` are split into heads, attended head by head (scaled
    /// by `√d_head`) and merged back: `(..., L_q, d_model)`, with the weights
    /// `(..., heads, L_q, L_k)`.
    #[allow(clippy::type_complexity)] // a pair of arrays: the merged heads and the weights
    // ANCHOR: multihead_forward
    fn attend_heads<D>(
        &self,
        q: &ArrayRef<A, D>,
        k: &ArrayRef<A, D>,
        v: &ArrayRef<A, D>,
        mask: Option<&Mask>,
    ) -> Result<(Array<A, D>, Array<A, D::Larger>)>
    where
        D: Dimension,
        D::Larger: Dimension<Smaller = D>,
    {
        let q = split_heads(q, self.heads)?; // (..., heads, L_q, d_head)
        let k = split_heads(k, self.heads)?; // (..., heads, L_k, d_head)
        let v = split_heads(v, self.heads)?;
        let Attention { output, weights } = sdpa_batched(&q, &k, &v, mask)?;
        Ok((merge_heads(&output)?, weights))
    }
    // ANCHOR_END: multihead_forward

    /// Multi-head cross-attention: queries from `x_q: (L_q, d_model)`, keys and values from
    /// `x_kv: (L_k, d_model)`; weights `(heads, L_q, L_k)`.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let out = mha.cross(&Array2::ones((2, 4)), &Array2::ones((7, 4)), None).unwrap();
    /// assert_eq!((out.output.dim(), out.weights.dim()), ((2, 4), (2, 2, 7)));
    /// ```
    // ANCHOR: multihead_cross
    pub fn cross(
        &self,
        x_q: &ArrayRef2<A>,
        x_kv: &ArrayRef2<A>,
        mask: Option<&Mask>,
    ) -> Result<MultiHeadOutput<A, Ix2>> {
        let q = self.w_q.apply(x_q)?; // (L_q, d_model)
        let k = self.w_k.apply(x_kv)?; // (L_k, d_model)
        let v = self.w_v.apply(x_kv)?;
        let (merged, weights) = self.attend_heads(&q, &k, &v, mask)?; // (L_q, d_model)
        let output = self.w_o.apply(&merged)?;
        Ok(MultiHeadOutput { output, weights })
    }
    // ANCHOR_END: multihead_cross

    /// Multi-head self-attention over a batch `x: (batch, L, d_model)`.
    ///
    /// The mask may be `(L, L)` (every item), `(batch, L, L)` (one per item, e.g. a padding
    /// mask: it is applied to every head) or `(batch, heads, L, L)`.
    ///
    /// ```
    /// use attention::{mask::Mask, multihead::MultiHeadAttention};
    /// use ndarray::Array3;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let x = Array3::from_shape_fn((2, 3, 4), |(b, i, j)| (b + i + j) as f64 / 4.0);
    /// let out =
    ///     mha.forward_batched(&x, Some(&Mask::padding(&[3, 2], 3, 3).unwrap())).unwrap();
    /// assert_eq!(out.weights.dim(), (2, 2, 3, 3));
    /// assert_eq!(out.weights[[1, 0, 2, 2]], 0.0); // item 1's third token is padding
    /// ```
    // ANCHOR: multihead_batched
    pub fn forward_batched(
        &self,
        x: &ArrayRef3<A>,
        mask: Option<&Mask>,
    ) -> Result<MultiHeadOutput<A, Ix3>> {
        self.cross_batched(x, x, mask)
    }

    // ANCHOR_END: multihead_batched

    /// Batched cross-attention: `x_q: (batch, L_q, d_model)`, `x_kv: (batch, L_k, d_model)`;
    /// masks as for [`MultiHeadAttention::forward_batched`].
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use ndarray::Array3;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(6, 3, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let out = mha
    ///     .cross_batched(&Array3::ones((2, 1, 6)), &Array3::ones((2, 4, 6)), None)
    ///     .unwrap();
    /// assert_eq!(out.weights.dim(), (2, 3, 1, 4));
    /// ```
    // ANCHOR: multihead_batched
    pub fn cross_batched(
        &self,
        x_q: &ArrayRef3<A>,
        x_kv: &ArrayRef3<A>,
        mask: Option<&Mask>,
    ) -> Result<MultiHeadOutput<A, Ix3>> {
        // A (batch, L_q, L_k) mask gets a head axis so it reaches every head of its item.
        let per_head = mask.filter(|m| m.shape().len() == 3).map(Mask::for_heads);
        let q = self.w_q.apply_batched(x_q)?; // (batch, L_q, d_model)
        let k = self.w_k.apply_batched(x_kv)?; // (batch, L_k, d_model)
        let v = self.w_v.apply_batched(x_kv)?;
        let (merged, weights) = self.attend_heads(&q, &k, &v, per_head.as_ref().or(mask))?;
        let output = self.w_o.apply_batched(&merged)?;
        Ok(MultiHeadOutput { output, weights })
    }
    // ANCHOR_END: multihead_batched

    /// The same as [`MultiHeadAttention::forward`], written as an explicit loop over heads:
    /// head `h` uses columns `h·d_head .. (h+1)·d_head` of `W_Q`, `W_K` and `W_V`. Slower and
    /// plainer; a test checks that it agrees with the reshape version.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(6, 3, &mut StdRng::seed_from_u64(5)).unwrap();
    /// let x = Array2::from_shape_fn((4, 6), |(i, j)| ((i * 7 + j) % 5) as f64);
    /// let looped = mha.forward_per_head(&x, None).unwrap();
    /// let reshaped = mha.forward(&x, None).unwrap();
    /// assert!((looped.output - reshaped.output).iter().all(|d| d.abs() < 1e-12));
    /// ```
    // ANCHOR: per_head_loop
    pub fn forward_per_head(
        &self,
        x: &ArrayRef2<A>,
        mask: Option<&Mask>,
    ) -> Result<MultiHeadOutput<A, Ix2>> {
        let q_all = self.w_q.apply(x)?; // (L, d_model): every head's queries, side by side
        let k_all = self.w_k.apply(x)?;
        let v_all = self.w_v.apply(x)?;
        let (l, d_model) = q_all.dim();
        let d_head = d_model / self.heads;
        let mut merged = Array2::zeros((l, d_model));
        let mut weights = Array3::zeros((self.heads, l, l));
        for h in 0..self.heads {
            let cols = s![.., h * d_head..(h + 1) * d_head];
            let head = sdpa(&q_all.slice(cols), &k_all.slice(cols), &v_all.slice(cols), mask)?;
            merged.slice_mut(cols).assign(&head.output); // (L, d_head) into its columns
            weights.index_axis_mut(Axis(0), h).assign(&head.weights);
        }
        let output = self.w_o.apply(&merged)?;
        Ok(MultiHeadOutput { output, weights })
    }
    // ANCHOR_END: per_head_loop

    /// The number of heads.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(8, 4, &mut StdRng::seed_from_u64(0)).unwrap();
    /// assert_eq!(mha.heads(), 4);
    /// ```
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// The model width `d_model`.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(8, 4, &mut StdRng::seed_from_u64(0)).unwrap();
    /// assert_eq!(mha.d_model(), 8);
    /// ```
    pub fn d_model(&self) -> usize {
        self.w_q.d_in()
    }

    /// The width of one head, `d_head = d_model / heads`.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(8, 4, &mut StdRng::seed_from_u64(0)).unwrap();
    /// assert_eq!(mha.d_head(), 2);
    /// ```
    pub fn d_head(&self) -> usize {
        self.d_model() / self.heads
    }

    /// The number of learnable numbers, `4·d_model²` (independent of the number of heads),
    /// plus `d_model` for each projection with a bias.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let one =
    ///     MultiHeadAttention::<f64>::random(8, 1, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let four =
    ///     MultiHeadAttention::<f64>::random(8, 4, &mut StdRng::seed_from_u64(0)).unwrap();
    /// assert_eq!(one.parameter_count(), four.parameter_count());
    /// ```
    pub fn parameter_count(&self) -> usize {
        [&self.w_q, &self.w_k, &self.w_v, &self.w_o].iter().map(|w| w.parameter_count()).sum()
    }

    /// The four projections `[W_Q, W_K, W_V, W_O]`, each `(d_model, d_model)`.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(8, 4, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let [w_q, _, _, w_o] = mha.projections();
    /// assert_eq!((w_q.d_in(), w_o.d_out()), (8, 8));
    /// ```
    // ANCHOR: projections
    pub fn projections(&self) -> [&Linear<A>; 4] {
        [&self.w_q, &self.w_k, &self.w_v, &self.w_o]
    }
    // ANCHOR_END: projections
// ANCHOR: multihead_cross
}
// ANCHOR_END: multihead_cross

impl<A: Float> MultiHeadAttention<A> {
    /// A layer from four given projections, biases allowed (a pretrained model's): all four
    /// `(d_model, d_model)`, and `heads` must divide `d_model`.
    ///
    /// ```
    /// use attention::{multihead::MultiHeadAttention, projection::Linear};
    /// use ndarray::{Array1, Array2};
    ///
    /// let eye = Linear::new(Array2::<f64>::eye(4)).unwrap();
    /// let w_o = Linear::with_bias(Array2::eye(4), Array1::ones(4)).unwrap();
    /// let (w_q, w_k, w_v) = (eye.clone(), eye.clone(), eye.clone());
    /// let mha = MultiHeadAttention::from_projections(w_q, w_k, w_v, w_o, 2).unwrap();
    /// assert_eq!(mha.parameter_count(), 4 * 16 + 4);
    /// let wide = Linear::new(Array2::<f64>::zeros((4, 6))).unwrap();
    /// let err = MultiHeadAttention::from_projections(eye.clone(), eye.clone(), wide, eye, 2);
    /// assert_eq!(
    ///     err.unwrap_err().to_string(),
    ///     "W_V has shape [4, 6] but a shape (d_model, d_model) = (4, 4) was expected"
    /// );
    /// ```
    // ANCHOR: from_projections
    pub fn from_projections(
        w_q: Linear<A>,
        w_k: Linear<A>,
        w_v: Linear<A>,
        w_o: Linear<A>,
        heads: usize,
    ) -> Result<Self> {
        let d_model = w_q.d_in();
        for (name, w) in [("W_Q", &w_q), ("W_K", &w_k), ("W_V", &w_v), ("W_O", &w_o)] {
            if w.weight().dim() != (d_model, d_model) {
                return Err(AttentionError::shape(
                    name,
                    w.weight().shape(),
                    &format!(
                        "a shape (d_model, d_model) = ({d_model}, {d_model}) was expected"
                    ),
                ));
            }
        }
        head_width(d_model, heads)?;
        Ok(MultiHeadAttention { w_q, w_k, w_v, w_o, heads })
    }
    // ANCHOR_END: from_projections

    /// The same layer with head `head` removed (ablated): its `d_head` rows of `W_O`, the
    /// ones its output is multiplied by after the merge, are set to zero, so it contributes
    /// nothing to the output. The other heads, `W_O`'s bias and every head's weights (the
    /// removed head's too: it still attends, it is only not heard) are unchanged.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let x = Array2::from_shape_fn((3, 4), |(i, j)| (i + j) as f64 / 4.0);
    /// let both_gone = mha.without_head(0).unwrap().without_head(1).unwrap();
    /// assert!(both_gone.forward(&x, None).unwrap().output.iter().all(|&y| y == 0.0));
    /// assert_eq!(
    ///     mha.without_head(2).unwrap_err().to_string(),
    ///     "head 2: the layer has 2 heads, numbered 0 to 1"
    /// );
    /// ```
    // ANCHOR: without_head
    pub fn without_head(&self, head: usize) -> Result<Self> {
        if head >= self.heads {
            return Err(AttentionError::Invalid {
                what: format!("head {head}"),
                problem: format!(
                    "the layer has {} heads, numbered 0 to {}",
                    self.heads,
                    self.heads - 1
                ),
            });
        }
        let d_head = self.w_o.d_in() / self.heads; // W_O: (d_model, d_model)
        let mut w_o = self.w_o.weight().clone();
        // merged · W_O: head h's columns of merged meet rows h·d_head .. (h+1)·d_head of W_O
        w_o.slice_mut(s![head * d_head..(head + 1) * d_head, ..]).fill(A::zero());
        let w_o = match self.w_o.bias() {
            Some(b) => Linear::with_bias(w_o, b.clone())?,
            None => Linear::new(w_o)?,
        };
        Ok(MultiHeadAttention { w_o, ..self.clone() })
    }
    // ANCHOR_END: without_head
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, Array4};
    use rand::{SeedableRng, rngs::StdRng};
    use rand_distr::{Distribution, StandardNormal};

    fn random<D: Dimension, Sh: ndarray::ShapeBuilder<Dim = D>>(
        shape: Sh,
        rng: &mut StdRng,
    ) -> Array<f64, D> {
        Array::from_shape_simple_fn(shape, || StandardNormal.sample(rng))
    }

    /// A layer whose four projections all have (random) biases.
    fn biased_layer(
        d_model: usize,
        heads: usize,
        rng: &mut StdRng,
    ) -> MultiHeadAttention<f64> {
        let mut linear = || {
            let w = random((d_model, d_model), rng) / (d_model as f64).sqrt();
            Linear::with_bias(w, random(d_model, rng)).unwrap()
        };
        let (w_q, w_k, w_v, w_o) = (linear(), linear(), linear(), linear());
        MultiHeadAttention::from_projections(w_q, w_k, w_v, w_o, heads).unwrap()
    }

    /// With biases, the layer is still the per-head loop, and each projection adds its bias
    /// to every row: `from_projections` keeps them where they belong.
    #[test]
    fn biases_are_added_by_every_projection() {
        let mut rng = StdRng::seed_from_u64(3);
        let mha = biased_layer(6, 3, &mut rng);
        let x: Array2<f64> = random((4, 6), &mut rng);
        let out = mha.forward(&x, None).unwrap();
        let looped = mha.forward_per_head(&x, None).unwrap();
        assert!((&out.output - &looped.output).iter().all(|d| d.abs() < 1e-12));
        // By hand: q = x·W_Q + b_Q, ..., output = merged · W_O + b_O.
        let [w_q, w_k, w_v, w_o] = mha.projections();
        let by_hand = |w: &Linear<f64>, x: &Array2<f64>| x.dot(w.weight()) + w.bias().unwrap();
        let (q, k, v) = (by_hand(w_q, &x), by_hand(w_k, &x), by_hand(w_v, &x));
        let (q, k, v) = (
            split_heads(&q, 3).unwrap(),
            split_heads(&k, 3).unwrap(),
            split_heads(&v, 3).unwrap(),
        );
        let heads = sdpa_batched(&q, &k, &v, None).unwrap();
        let expected = by_hand(w_o, &merge_heads(&heads.output).unwrap());
        assert!((&out.output - &expected).iter().all(|d| d.abs() < 1e-12));
        assert!((&out.weights - &heads.weights).iter().all(|d| d.abs() < 1e-12));
        // Without the biases, the output differs (the test can fail).
        let plain = MultiHeadAttention::from_projections(
            Linear::new(w_q.weight().clone()).unwrap(),
            Linear::new(w_k.weight().clone()).unwrap(),
            Linear::new(w_v.weight().clone()).unwrap(),
            Linear::new(w_o.weight().clone()).unwrap(),
            3,
        )
        .unwrap();
        let plain = plain.forward(&x, None).unwrap().output;
        assert!((&out.output - &plain).iter().any(|d| d.abs() > 1e-3));
    }

    /// Removing head `h` subtracts exactly its term `O_h · W_O[h rows]` from the output and
    /// leaves every head's weights alone; the sum of every head's term plus `b_O` is the
    /// output.
    #[test]
    fn without_head_removes_exactly_that_heads_contribution() {
        let mut rng = StdRng::seed_from_u64(4);
        let (d_model, heads, l) = (8, 4, 5);
        let mha = biased_layer(d_model, heads, &mut rng);
        let x: Array2<f64> = random((l, d_model), &mut rng);
        let full = mha.forward(&x, Some(&Mask::causal(l))).unwrap();
        let d_head = mha.d_head();
        let [w_q, w_k, w_v, w_o] = mha.projections();
        let (q, k, v) =
            (w_q.apply(&x).unwrap(), w_k.apply(&x).unwrap(), w_v.apply(&x).unwrap());
        let mut sum = Array2::from_shape_fn((l, d_model), |(_, j)| w_o.bias().unwrap()[j]);
        for h in 0..heads {
            let cols = s![.., h * d_head..(h + 1) * d_head];
            let o_h =
                sdpa(&q.slice(cols), &k.slice(cols), &v.slice(cols), Some(&Mask::causal(l)))
                    .unwrap()
                    .output;
            let term = o_h.dot(&w_o.weight().slice(s![h * d_head..(h + 1) * d_head, ..]));
            sum += &term;
            let ablated =
                mha.without_head(h).unwrap().forward(&x, Some(&Mask::causal(l))).unwrap();
            assert_eq!(ablated.weights, full.weights);
            let removed = &full.output - &ablated.output;
            assert!((&removed - &term).iter().all(|d| d.abs() < 1e-12), "head {h}");
            assert!(term.iter().any(|t| t.abs() > 1e-3), "head {h} contributes something");
            assert_eq!(mha.without_head(h).unwrap().projections()[3].bias(), w_o.bias());
        }
        assert!((&sum - &full.output).iter().all(|d| d.abs() < 1e-12));
        assert!(matches!(mha.without_head(heads), Err(AttentionError::Invalid { .. })));
    }

    /// A batch of sentences of different lengths, padded to `L` with junk and masked with
    /// `Mask::padding`: each item's real tokens get the same output and weights as the item
    /// alone, and no query attends to padding.
    #[test]
    fn a_padded_batch_gives_each_item_its_own_result() {
        let mut rng = StdRng::seed_from_u64(5);
        let (d_model, heads, l) = (8, 2, 6);
        let lengths = [6, 3, 1];
        let mha = biased_layer(d_model, heads, &mut rng);
        let x: Array3<f64> = random((lengths.len(), l, d_model), &mut rng) * 3.0;
        let mask = Mask::padding(&lengths, l, l).unwrap();
        let batched = mha.forward_batched(&x, Some(&mask)).unwrap();
        let weights: &Array4<f64> = &batched.weights;
        for (b, &n) in lengths.iter().enumerate() {
            let alone = mha.forward(&x.slice(s![b, ..n, ..]), None).unwrap();
            let out = batched.output.slice(s![b, ..n, ..]);
            assert!((&out - &alone.output).iter().all(|d| d.abs() < 1e-12), "item {b}");
            let w = weights.slice(s![b, .., ..n, ..n]);
            assert!((&w - &alone.weights).iter().all(|d| d.abs() < 1e-12), "item {b}");
            // Every query, padding queries too, gives the padding keys exactly nothing.
            assert!(weights.slice(s![b, .., .., n..]).iter().all(|&w| w == 0.0));
            let rows: Array1<f64> = weights.slice(s![b, 0, .., ..]).sum_axis(Axis(1));
            assert!(rows.iter().all(|s| (s - 1.0).abs() < 1e-12));
        }
    }
}
