//! Chapter *Generating one token at a time*: grouped-query attention, where `H` query heads
//! share `G` key/value heads.
//!
//! Multi-head attention gives every head its own keys and values. Grouped-query attention
//! (GQA, Ainslie et al. 2023) keeps `H` query heads but only `G` key/value heads, `G` dividing
//! `H`: key/value head `j` serves the `H/G` query heads `j·H/G … (j+1)·H/G − 1`, the order of
//! PyTorch's `scaled_dot_product_attention(..., enable_gqa=True)`, which repeats each
//! key/value head `H/G` times with `repeat_interleave` ([`repeat_kv`] does the same).
//! `G = H` is multi-head attention, `G = 1` is multi-query attention (MQA, Shazeer 2019).
//!
//! The layer [`GroupedQueryAttention`] has `W_Q, W_O: (d_model, d_model)` as before, but
//! `W_K, W_V: (d_model, G·d_head)`: fewer parameters, and, what matters when generating, a
//! key/value cache `H/G` times smaller (see [`decode`](crate::decode)). With
//! [`with_rope`](GroupedQueryAttention::with_rope), every head's queries and keys are rotated
//! by RoPE ([`Rope`]) after the projection, each row at its token's absolute position.
//!
//! Anchors (below the doc comments): `group_size`, `repeat_kv`, `sdpa_gqa`,
//! `sdpa_gqa_helpers`, `gqa_struct`, `gqa_new`, `gqa_project`, `gqa_combine`, `gqa_forward`,
//! `gqa_sizes`.

use ndarray::{Array2, Array3, Array4, ArrayRef2, ArrayRef3, Axis, Ix2, Ix3, s};
use rand::Rng;

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::mask::Mask;
use crate::multihead::{MultiHeadOutput, head_width, merge_heads, split_heads};
use crate::projection::Linear;
use crate::rope::Rope;
use crate::sdpa::{Attention, sdpa_batched};
use crate::shapes::same_lead;

/// How many query heads share one key/value head, `H / G`; an error when `G` is 0 or does
/// not divide `H`.
///
/// ```
/// use attention::gqa::group_size;
///
/// assert_eq!(group_size(8, 2).unwrap(), 4);  // GQA
/// assert_eq!(group_size(8, 8).unwrap(), 1);  // MHA
/// assert_eq!(group_size(8, 1).unwrap(), 8);  // MQA
/// assert_eq!(
///     group_size(8, 3).unwrap_err().to_string(),
///     "kv_heads = 3 does not divide heads = 8"
/// );
/// ```
// ANCHOR: group_size
pub fn group_size(heads: usize, kv_heads: usize) -> Result<usize> {
    if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(AttentionError::KvHeads { heads, kv_heads });
    }
    Ok(heads / kv_heads)
}
// ANCHOR_END: group_size

/// Repeats every key/value head `group` times in place: `(G, L, d) → (G·group, L, d)`, head
/// `j` becoming heads `j·group … (j+1)·group − 1`. This is PyTorch's
/// `x.repeat_interleave(group, dim=-3)`, what `enable_gqa=True` means; [`sdpa_gqa`] gets the
/// same result without the copies.
///
/// ```
/// use attention::gqa::repeat_kv;
/// use ndarray::array;
///
/// let k = array![[[1]], [[2]]];            // (G, L, d) = (2, 1, 1)
/// assert_eq!(repeat_kv(&k, 2), array![[[1]], [[1]], [[2]], [[2]]]);
/// ```
// ANCHOR: repeat_kv
pub fn repeat_kv<A: Clone>(x: &ArrayRef3<A>, group: usize) -> Array3<A> {
    let (kv_heads, l, d) = x.dim();
    let copies = x.view().insert_axis(Axis(1)); // (G, 1, L, d)
    let copies = copies.broadcast((kv_heads, group, l, d)).expect("an axis of 1 broadcasts");
    copies.to_shape((kv_heads * group, l, d)).expect("same element count").into_owned()
}
// ANCHOR_END: repeat_kv

/// Scaled dot-product attention with grouped key/value heads: `q: (H, L_q, d_k)`,
/// `k: (G, L_k, d_k)`, `v: (G, L_k, d_v)`, `G` dividing `H`; key/value head `j` serves query
/// heads `j·H/G … (j+1)·H/G − 1`. The mask broadcasts to `(H, L_q, L_k)`. Output
/// `(H, L_q, d_v)`, weights `(H, L_q, L_k)`.
///
/// The result equals [`sdpa_batched`] on `q` and the repeated [`repeat_kv`]`(k)`,
/// [`repeat_kv`]`(v)`; instead of copying keys and values, the queries of one group are
/// stacked as extra rows against their shared key/value head.
///
/// ```
/// use attention::gqa::{repeat_kv, sdpa_gqa};
/// use attention::sdpa::sdpa_batched;
/// use ndarray::Array3;
///
/// let q = Array3::from_shape_fn((4, 3, 2), |(h, i, j)| (h + 2 * i + j) as f64 / 5.0);
/// let k = Array3::from_shape_fn((2, 3, 2), |(h, i, j)| (h * i + j) as f64 / 3.0);
/// let v = Array3::from_shape_fn((2, 3, 5), |(h, i, j)| (h + i * j) as f64);
/// let grouped = sdpa_gqa(&q, &k, &v, None).unwrap();
/// let repeated = sdpa_batched(&q, &repeat_kv(&k, 2), &repeat_kv(&v, 2), None).unwrap();
/// assert_eq!(grouped.weights.dim(), (4, 3, 3));
/// assert!((grouped.output - repeated.output).iter().all(|d| d.abs() < 1e-12));
/// assert_eq!(
///     sdpa_gqa(&q, &Array3::zeros((3, 3, 2)), &Array3::zeros((3, 3, 5)), None)
///         .unwrap_err()
///         .to_string(),
///     "kv_heads = 3 does not divide heads = 4"
/// );
/// ```
// ANCHOR: sdpa_gqa
pub fn sdpa_gqa<A: Float>(
    q: &ArrayRef3<A>,
    k: &ArrayRef3<A>,
    v: &ArrayRef3<A>,
    mask: Option<&Mask>,
) -> Result<Attention<A, Ix3>> {
    let group = check_heads(q.shape(), k.shape(), v.shape())?; // H / G
    let ((heads, l_q, d_k), (kv_heads, l_k, _)) = (q.dim(), k.dim());
    // Query heads j·group … (j+1)·group − 1 share kv head j: stack their queries as the
    // rows of one matrix per kv head, (G, group·L_q, d_k), and their masks alike.
    let q = q.to_shape((kv_heads, group * l_q, d_k)).expect("H = G·group");
    let mask = mask.map(|m| stack_mask(m, (heads, l_q, l_k), kv_heads)).transpose()?;
    let Attention { output, weights } = sdpa_batched(&q, k, v, mask.as_ref())?;
    let d_v = output.shape()[2];
    Ok(Attention {
        output: output.into_shape_clone((heads, l_q, d_v)).expect("unstacked"),
        weights: weights.into_shape_clone((heads, l_q, l_k)).expect("unstacked"),
    })
}
// ANCHOR_END: sdpa_gqa

/// Checks that `q: (H, ...)`, `k` and `v: (G, ...)` have heads and that `G` divides `H`;
/// returns `H / G`. (The other axes are checked by [`sdpa_batched`].)
// ANCHOR: sdpa_gqa_helpers
fn check_heads(q: &[usize], k: &[usize], v: &[usize]) -> Result<usize> {
    if q[0] == 0 {
        return Err(AttentionError::Empty { what: "q".into(), dim: "H" });
    }
    same_lead("k", &k[..1], "v", &v[..1])?;
    group_size(q[0], k[0])
}
// ANCHOR_END: sdpa_gqa_helpers

/// A mask that broadcasts to the scores `(H, L_q, L_k)`, stacked like the queries in
/// [`sdpa_gqa`]: `(G, group·L_q, L_k)`, or `(group·L_q, L_k)` when every head has the same
/// mask (it then broadcasts over the `G` stacks).
// ANCHOR: sdpa_gqa_helpers
fn stack_mask(mask: &Mask, scores: (usize, usize, usize), kv_heads: usize) -> Result<Mask> {
    let (heads, l_q, l_k) = scores;
    let group = heads / kv_heads;
    let allowed = mask.as_array();
    let wrong = || AttentionError::MaskShape {
        mask: mask.shape().to_vec(),
        scores: vec![heads, l_q, l_k],
    };
    if allowed.ndim() == 2 {
        let same = allowed.broadcast((l_q, l_k)).ok_or_else(wrong)?;
        let stacked = Array2::from_shape_fn((group * l_q, l_k), |(r, j)| same[[r % l_q, j]]);
        return Mask::from_array(stacked);
    }
    let full = allowed.broadcast((heads, l_q, l_k)).ok_or_else(wrong)?;
    let stacked = full.to_shape((kv_heads, group * l_q, l_k)).expect("H = G·group");
    Mask::from_array(stacked.into_owned())
}
// ANCHOR_END: sdpa_gqa_helpers

/// Grouped-query attention: `H` query heads, `G` key/value heads (`G` divides `H`),
/// `W_Q, W_O: (d_model, d_model)` and `W_K, W_V: (d_model, G·d_head)` with
/// `d_head = d_model / H`.
///
/// `G = H` is [`MultiHeadAttention`](crate::multihead::MultiHeadAttention) (same weights,
/// same numbers), `G = 1` is multi-query attention.
///
/// ```
/// use attention::gqa::GroupedQueryAttention;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let rng = &mut StdRng::seed_from_u64(0);
/// let gqa = GroupedQueryAttention::<f32>::random(512, 8, 2, rng).unwrap();
/// assert_eq!((gqa.heads(), gqa.kv_heads(), gqa.d_head()), (8, 2, 64));
/// // W_Q and W_O are 512 × 512, W_K and W_V 512 × (2 · 64)
/// assert_eq!(gqa.parameter_count(), 2 * 512 * 512 + 2 * 512 * 128);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: gqa_struct
pub struct GroupedQueryAttention<A> {
    w_q: Linear<A>,     // (d_model, d_model): H query heads of d_head columns
    w_k: Linear<A>,     // (d_model, G·d_head): G key heads
    w_v: Linear<A>,     // (d_model, G·d_head): G value heads
    w_o: Linear<A>,     // (d_model, d_model)
    heads: usize,       // H
    kv_heads: usize,    // G
    rope: Option<Rope>, // rotates q and k by position, if set
}
// ANCHOR_END: gqa_struct

// ANCHOR: gqa_new
impl<A: Float> GroupedQueryAttention<A> {
    // ANCHOR_END: gqa_new
    /// A layer from given matrices, applied as `X · W`: `W_Q, W_O: (d_model, d_model)`,
    /// `W_K, W_V: (d_model, kv_heads·d_head)` with `d_head = d_model / heads`; `heads` must
    /// divide `d_model` and `kv_heads` must divide `heads`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use ndarray::Array2;
    ///
    /// let (square, narrow) = (Array2::<f64>::eye(8), Array2::<f64>::zeros((8, 4)));
    /// let gqa = GroupedQueryAttention::new(
    ///     square.clone(), narrow.clone(), narrow.clone(), square.clone(), 4, 2,
    /// );
    /// assert_eq!(gqa.unwrap().d_head(), 2);
    /// let err = GroupedQueryAttention::new(
    ///     square.clone(), narrow.clone(), narrow.clone(), square.clone(), 4, 1,
    /// );
    /// assert_eq!(
    ///     err.unwrap_err().to_string(),
    ///     "W_K has shape [8, 4] but a shape (d_model, kv_heads·d_head) = (8, 2) was expected"
    /// );
    /// ```
    // ANCHOR: gqa_new
    pub fn new(
        w_q: Array2<A>,
        w_k: Array2<A>,
        w_v: Array2<A>,
        w_o: Array2<A>,
        heads: usize,
        kv_heads: usize,
    ) -> Result<Self> {
        let d_model = w_q.nrows();
        let d_head = head_width(d_model, heads)?;
        group_size(heads, kv_heads)?;
        let d_kv = kv_heads * d_head;
        for (name, w, cols, what) in [
            ("W_Q", &w_q, d_model, "(d_model, d_model)"),
            ("W_K", &w_k, d_kv, "(d_model, kv_heads·d_head)"),
            ("W_V", &w_v, d_kv, "(d_model, kv_heads·d_head)"),
            ("W_O", &w_o, d_model, "(d_model, d_model)"),
        ] {
            if w.dim() != (d_model, cols) {
                let expected = format!("a shape {what} = ({d_model}, {cols}) was expected");
                return Err(AttentionError::shape(name, w.shape(), &expected));
            }
        }
        let (w_q, w_k, w_v, w_o) =
            (Linear::new(w_q)?, Linear::new(w_k)?, Linear::new(w_v)?, Linear::new(w_o)?);
        Ok(GroupedQueryAttention { w_q, w_k, w_v, w_o, heads, kv_heads, rope: None })
    }

    // ANCHOR_END: gqa_new
    /// A layer with seeded random weights (see [`Linear::random`]), drawn in the order `W_Q`,
    /// `W_K`, `W_V`, `W_O`: with `kv_heads = heads` and the same seed, the weights of
    /// [`MultiHeadAttention::random`](crate::multihead::MultiHeadAttention::random).
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// assert!(GroupedQueryAttention::<f64>::random(8, 4, 1, rng).is_ok()); // MQA
    /// assert!(GroupedQueryAttention::<f64>::random(8, 4, 3, rng).is_err());
    /// ```
    pub fn random<R: Rng + ?Sized>(
        d_model: usize,
        heads: usize,
        kv_heads: usize,
        rng: &mut R,
    ) -> Result<Self> {
        let d_head = head_width(d_model, heads)?;
        group_size(heads, kv_heads)?;
        let w_q = Linear::random(d_model, d_model, rng)?;
        let w_k = Linear::random(d_model, kv_heads * d_head, rng)?;
        let w_v = Linear::random(d_model, kv_heads * d_head, rng)?;
        let w_o = Linear::random(d_model, d_model, rng)?;
        Ok(GroupedQueryAttention { w_q, w_k, w_v, w_o, heads, kv_heads, rope: None })
    }

    /// The same layer with RoPE: after the projection, every head's queries and keys are
    /// rotated, the row of the token at position `p` by `p·θ_i` (values are not rotated).
    /// `rope.d_head()` must be the layer's `d_head`.
    ///
    /// ```
    /// use attention::{gqa::GroupedQueryAttention, rope::{Rope, RopeLayout}};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(16, 4, 2, rng).unwrap(); // d_head = 4
    /// let rope = Rope::new(4, 10_000.0, RopeLayout::RotateHalf).unwrap();
    /// assert!(gqa.clone().with_rope(rope).is_ok());
    /// let wrong = Rope::new(8, 10_000.0, RopeLayout::RotateHalf).unwrap();
    /// assert_eq!(
    ///     gqa.with_rope(wrong).unwrap_err().to_string(),
    ///     "RoPE has d_head = 8 but the layer has d_head = 4"
    /// );
    /// ```
    // ANCHOR: gqa_new
    pub fn with_rope(self, rope: Rope) -> Result<Self> {
        if rope.d_head() != self.d_head() {
            let (r, d) = (rope.d_head(), self.d_head());
            return Err(AttentionError::mismatch("RoPE", r, "the layer", d, "d_head"));
        }
        Ok(GroupedQueryAttention { rope: Some(rope), ..self })
    }
    // ANCHOR_END: gqa_new

    /// The RoPE the layer applies, if any.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// assert!(GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap().rope().is_none());
    /// ```
    pub fn rope(&self) -> Option<&Rope> {
        self.rope.as_ref()
    }

    /// The queries `(H, L, d_head)`, keys and values `(G, L, d_head)` of the tokens
    /// `x: (L, d_model)`, cut into heads; row `r` of `x` is the token at absolute position
    /// `start + r`, which is where RoPE (if the layer has it) rotates its query and key.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// let (q, k, v) = gqa.project(&Array2::ones((3, 8)), 0).unwrap();
    /// assert_eq!((q.dim(), k.dim(), v.dim()), ((4, 3, 2), (2, 3, 2), (2, 3, 2)));
    /// ```
    // ANCHOR: gqa_project
    pub fn project(
        &self,
        x: &ArrayRef2<A>,
        start: usize,
    ) -> Result<(Array3<A>, Array3<A>, Array3<A>)> {
        let q = split_heads(&self.w_q.apply(x)?, self.heads)?; // (H, L, d_head)
        let k = split_heads(&self.w_k.apply(x)?, self.kv_heads)?; // (G, L, d_head)
        let v = split_heads(&self.w_v.apply(x)?, self.kv_heads)?; // (G, L, d_head)
        match &self.rope {
            // every head's row r turns by its absolute position, start + r
            Some(rope) => Ok((rope.apply(&q, start)?, rope.apply(&k, start)?, v)),
            None => Ok((q, k, v)),
        }
    }
    // ANCHOR_END: gqa_project

    /// Puts the heads' outputs `(H, L, d_head)` back side by side and applies `W_O`:
    /// `(L, d_model)`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use ndarray::Array3;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// assert_eq!(gqa.combine(&Array3::zeros((4, 3, 2))).unwrap().dim(), (3, 8));
    /// ```
    // ANCHOR: gqa_combine
    pub fn combine(&self, heads_output: &ArrayRef3<A>) -> Result<Array2<A>> {
        self.w_o.apply(&merge_heads(heads_output)?)
    }
    // ANCHOR_END: gqa_combine

    /// Grouped-query self-attention over `x: (L, d_model)`; the mask broadcasts to `(L, L)`
    /// or `(H, L, L)`. Weights `(H, L, L)`.
    ///
    /// ```
    /// use attention::{gqa::GroupedQueryAttention, mask::Mask};
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let mqa = GroupedQueryAttention::<f64>::random(8, 4, 1, rng).unwrap();
    /// let x = Array2::from_shape_fn((3, 8), |(i, j)| (i * j) as f64 / 8.0);
    /// let out = mqa.forward(&x, Some(&Mask::causal(3))).unwrap();
    /// assert_eq!((out.output.dim(), out.weights.dim()), ((3, 8), (4, 3, 3)));
    /// assert_eq!(out.weights[[3, 0, 0]], 1.0); // token 0 sees only itself
    /// ```
    // ANCHOR: gqa_forward
    pub fn forward(
        &self,
        x: &ArrayRef2<A>,
        mask: Option<&Mask>,
    ) -> Result<MultiHeadOutput<A, Ix2>> {
        let (q, k, v) = self.project(x, 0)?; // q: (H, L, d_head), k, v: (G, L, d_head)
        let Attention { output, weights } = sdpa_gqa(&q, &k, &v, mask)?;
        let output = self.combine(&output)?; // (L, d_model)
        Ok(MultiHeadOutput { output, weights })
    }
    // ANCHOR_END: gqa_forward

    /// Grouped-query self-attention over a batch `x: (batch, L, d_model)`, one item at a
    /// time. The mask may be `(L, L)` (every item), `(batch, L, L)` (one per item, e.g. a
    /// padding mask) or `(batch, H, L, L)`. Weights `(batch, H, L, L)`.
    ///
    /// ```
    /// use attention::{gqa::GroupedQueryAttention, mask::Mask};
    /// use ndarray::Array3;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// let x = Array3::from_shape_fn((2, 3, 8), |(b, i, j)| (b + i + j) as f64 / 8.0);
    /// let padding = Mask::padding(&[3, 2], 3, 3).unwrap();
    /// let out = gqa.forward_batched(&x, Some(&padding)).unwrap();
    /// assert_eq!(out.weights.dim(), (2, 4, 3, 3));
    /// assert_eq!(out.weights[[1, 2, 0, 2]], 0.0); // item 1's third token is padding
    /// ```
    pub fn forward_batched(
        &self,
        x: &ArrayRef3<A>,
        mask: Option<&Mask>,
    ) -> Result<MultiHeadOutput<A, Ix3>> {
        let (batch, l, _) = x.dim();
        let mut output = Array3::zeros((batch, l, self.d_model()));
        let mut weights = Array4::zeros((batch, self.heads, l, l));
        for (b, item) in x.outer_iter().enumerate() {
            let item_mask = mask.map(|m| item_mask(m, b, batch)).transpose()?.flatten();
            let out = self.forward(&item, item_mask.as_ref().or(mask))?;
            output.index_axis_mut(Axis(0), b).assign(&out.output);
            weights.slice_mut(s![b, .., .., ..]).assign(&out.weights);
        }
        Ok(MultiHeadOutput { output, weights })
    }

    /// The number of query heads, `H`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// assert_eq!(GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap().heads(), 4);
    /// ```
    // ANCHOR: gqa_sizes
    pub fn heads(&self) -> usize {
        self.heads
    }
    // ANCHOR_END: gqa_sizes

    /// The number of key/value heads, `G`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// assert_eq!(GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap().kv_heads(), 2);
    /// ```
    // ANCHOR: gqa_sizes
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }
    // ANCHOR_END: gqa_sizes

    /// The width of one head, `d_head = d_model / H` (queries, keys and values alike).
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// assert_eq!(GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap().d_head(), 2);
    /// ```
    // ANCHOR: gqa_sizes
    pub fn d_head(&self) -> usize {
        self.d_model() / self.heads
    }
    // ANCHOR_END: gqa_sizes

    /// The model width `d_model`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// assert_eq!(GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap().d_model(), 8);
    /// ```
    // ANCHOR: gqa_sizes
    pub fn d_model(&self) -> usize {
        self.w_q.d_in()
    }
    // ANCHOR_END: gqa_sizes

    /// The number of learnable numbers, `2·d_model² + 2·d_model·G·d_head`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let mha = GroupedQueryAttention::<f64>::random(8, 4, 4, rng).unwrap();
    /// let mqa = GroupedQueryAttention::<f64>::random(8, 4, 1, rng).unwrap();
    /// assert_eq!((mha.parameter_count(), mqa.parameter_count()), (256, 160));
    /// ```
    pub fn parameter_count(&self) -> usize {
        self.projections().iter().map(|w| w.parameter_count()).sum()
    }

    /// The four projections `[W_Q, W_K, W_V, W_O]`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// let [_, w_k, _, _] = gqa.projections();
    /// assert_eq!((w_k.d_in(), w_k.d_out()), (8, 4));
    /// ```
    pub fn projections(&self) -> [&Linear<A>; 4] {
        [&self.w_q, &self.w_k, &self.w_v, &self.w_o]
    }
    // ANCHOR: gqa_new
}
// ANCHOR_END: gqa_new

/// Batch item `b`'s part of a mask for `(batch, ...)`: `None` for an `(L, L)` mask (it
/// applies to every item as it is), else the item's slice of the leading batch axis (of size
/// `batch` or 1).
fn item_mask(mask: &Mask, b: usize, batch: usize) -> Result<Option<Mask>> {
    let allowed = mask.as_array();
    match allowed.shape()[0] {
        _ if allowed.ndim() == 2 => Ok(None),
        1 => Mask::from_array(allowed.index_axis(Axis(0), 0).to_owned()).map(Some),
        n if n == batch => {
            Mask::from_array(allowed.index_axis(Axis(0), b).to_owned()).map(Some)
        }
        _ => {
            let expected = format!("a leading batch axis of 1 or {batch} was expected");
            Err(AttentionError::shape("mask", allowed.shape(), &expected))
        }
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{Array, Dimension, Ix4};
    use rand::{SeedableRng, rngs::StdRng};

    use super::*;
    use crate::embeddings::random_matrix;
    use crate::multihead::MultiHeadAttention;
    use crate::sdpa::sdpa;

    fn random3<A: Float>(shape: (usize, usize, usize), seed: u64) -> Array3<A> {
        let (a, b, c) = shape;
        let flat: Array2<A> = random_matrix(a * b, c, 1.0, &mut StdRng::seed_from_u64(seed));
        flat.into_shape_with_order(shape).unwrap()
    }

    fn max_diff<A: Float, D: Dimension>(a: &Array<A, D>, b: &Array<A, D>) -> f64 {
        assert_eq!(a.shape(), b.shape());
        let diff = a.iter().zip(b).map(|(&x, &y)| (x - y).abs()).fold(A::zero(), A::max);
        diff.to_f64().unwrap()
    }

    /// Head by head with the plain `sdpa`: query head h uses kv head h / (H / G).
    fn per_head<A: Float>(
        q: &Array3<A>,
        k: &Array3<A>,
        v: &Array3<A>,
        mask: Option<&Mask>,
    ) -> Attention<A, Ix3> {
        let (heads, l_q, _) = q.dim();
        let (kv_heads, l_k, d_v) = v.dim();
        let mut output = Array3::zeros((heads, l_q, d_v));
        let mut weights = Array3::zeros((heads, l_q, l_k));
        for h in 0..heads {
            let j = h / (heads / kv_heads);
            let (k_j, v_j) = (k.index_axis(Axis(0), j), v.index_axis(Axis(0), j));
            let att = sdpa(&q.index_axis(Axis(0), h), &k_j, &v_j, mask).unwrap();
            output.index_axis_mut(Axis(0), h).assign(&att.output);
            weights.index_axis_mut(Axis(0), h).assign(&att.weights);
        }
        Attention { output, weights }
    }

    fn check_sdpa_gqa<A: Float>(tolerance: f64) {
        let (l_q, l_k, d_k, d_v) = (5, 7, 4, 3);
        let causal = Mask::causal_rect(l_q, l_k);
        for (heads, kv_heads) in [(6, 6), (6, 3), (6, 2), (6, 1)] {
            let seed = 10 * kv_heads as u64;
            let q = random3::<A>((heads, l_q, d_k), seed);
            let k = random3::<A>((kv_heads, l_k, d_k), seed + 1);
            let v = random3::<A>((kv_heads, l_k, d_v), seed + 2);
            for mask in [None, Some(&causal)] {
                let got = sdpa_gqa(&q, &k, &v, mask).unwrap();
                let looped = per_head(&q, &k, &v, mask);
                assert!(
                    max_diff(&got.output, &looped.output) < tolerance,
                    "H={heads} G={kv_heads}"
                );
                assert!(max_diff(&got.weights, &looped.weights) < tolerance);
                let group = heads / kv_heads;
                let (k_rep, v_rep) = (repeat_kv(&k, group), repeat_kv(&v, group));
                let repeated = sdpa_batched(&q, &k_rep, &v_rep, mask).unwrap();
                assert!(max_diff(&got.output, &repeated.output) < tolerance);
                assert!(max_diff(&got.weights, &repeated.weights) < tolerance);
            }
        }
    }

    #[test]
    fn sdpa_gqa_equals_a_loop_over_heads_and_the_repeated_heads_f64() {
        check_sdpa_gqa::<f64>(1e-12);
    }

    #[test]
    fn sdpa_gqa_equals_a_loop_over_heads_and_the_repeated_heads_f32() {
        check_sdpa_gqa::<f32>(1e-5);
    }

    #[test]
    fn sdpa_gqa_takes_a_mask_per_query_head() {
        let (heads, kv_heads, l) = (4, 2, 5);
        let q = random3::<f64>((heads, l, 3), 1);
        let k = random3::<f64>((kv_heads, l, 3), 2);
        let v = random3::<f64>((kv_heads, l, 3), 3);
        // query head h sees the last h + 1 keys of its window
        let allowed = Array3::from_shape_fn((heads, l, l), |(h, i, j)| j <= i && i - j <= h);
        let mask = Mask::from_array(allowed).unwrap();
        let got = sdpa_gqa(&q, &k, &v, Some(&mask)).unwrap();
        for h in 0..heads {
            let head_mask = Mask::sliding_window(l, h + 1).unwrap();
            let one = per_head(&q, &k, &v, Some(&head_mask));
            let diff = max_diff(
                &got.output.index_axis(Axis(0), h).to_owned(),
                &one.output.index_axis(Axis(0), h).to_owned(),
            );
            assert!(diff < 1e-12, "head {h}");
        }
    }

    #[test]
    fn repeat_kv_is_repeat_interleave() {
        let k = Array3::from_shape_fn((3, 2, 2), |(h, i, j)| 100 * h + 10 * i + j);
        let r = repeat_kv(&k, 2);
        assert_eq!(r.dim(), (6, 2, 2));
        for h in 0..6 {
            assert_eq!(r.index_axis(Axis(0), h), k.index_axis(Axis(0), h / 2), "head {h}");
        }
        assert_eq!(repeat_kv(&k, 1), k);
    }

    #[test]
    fn gqa_with_as_many_kv_heads_as_heads_is_multihead_attention() {
        let (d_model, heads, l) = (12, 3, 6);
        let mha =
            MultiHeadAttention::<f64>::random(d_model, heads, &mut StdRng::seed_from_u64(7))
                .unwrap();
        let gqa = GroupedQueryAttention::<f64>::random(
            d_model,
            heads,
            heads,
            &mut StdRng::seed_from_u64(7),
        )
        .unwrap();
        let [w_q, w_k, w_v, w_o] = mha.projections().map(|w| w.weight().clone());
        let from_mha = GroupedQueryAttention::new(w_q, w_k, w_v, w_o, heads, heads).unwrap();
        assert_eq!(gqa, from_mha);
        assert_eq!(gqa.parameter_count(), mha.parameter_count());
        let x = random_matrix::<f64, _>(l, d_model, 1.0, &mut StdRng::seed_from_u64(8));
        for mask in [None, Some(Mask::causal(l)), Some(Mask::sliding_window(l, 2).unwrap())] {
            assert_eq!(
                gqa.forward(&x, mask.as_ref()).unwrap(),
                mha.forward(&x, mask.as_ref()).unwrap()
            );
        }
        let xb = random3::<f64>((2, l, d_model), 9);
        let padding = Mask::padding(&[6, 4], l, l).unwrap();
        for mask in [None, Some(&padding)] {
            let (g, m) = (
                gqa.forward_batched(&xb, mask).unwrap(),
                mha.forward_batched(&xb, mask).unwrap(),
            );
            assert_eq!(g.output, m.output);
            assert_eq!(g.weights, m.weights);
        }
    }

    /// W_K, W_V: (d_model, G·d_head) → (d_model, H·d_head), kv head j's columns copied into
    /// the columns of each of its query heads.
    fn repeat_columns(w: &Array2<f64>, group: usize, d_head: usize) -> Array2<f64> {
        let kv_heads = w.ncols() / d_head;
        let mut out = Array2::zeros((w.nrows(), kv_heads * group * d_head));
        for h in 0..kv_heads * group {
            let j = h / group;
            out.slice_mut(s![.., h * d_head..(h + 1) * d_head])
                .assign(&w.slice(s![.., j * d_head..(j + 1) * d_head]));
        }
        out
    }

    #[test]
    fn gqa_is_multihead_attention_with_shared_key_and_value_columns() {
        let (d_model, heads, l) = (16, 4, 7);
        let x = random_matrix::<f64, _>(l, d_model, 1.0, &mut StdRng::seed_from_u64(1));
        for kv_heads in [4, 2, 1] {
            let rng = &mut StdRng::seed_from_u64(kv_heads as u64);
            let gqa =
                GroupedQueryAttention::<f64>::random(d_model, heads, kv_heads, rng).unwrap();
            let [w_q, w_k, w_v, w_o] = gqa.projections().map(|w| w.weight().clone());
            let group = heads / kv_heads;
            let (w_k, w_v) = (repeat_columns(&w_k, group, 4), repeat_columns(&w_v, group, 4));
            let mha = MultiHeadAttention::new(w_q, w_k, w_v, w_o, heads).unwrap();
            for mask in [None, Some(Mask::causal(l))] {
                let (g, m) = (
                    gqa.forward(&x, mask.as_ref()).unwrap(),
                    mha.forward(&x, mask.as_ref()).unwrap(),
                );
                assert!(max_diff(&g.output, &m.output) < 1e-12, "G = {kv_heads}");
                assert!(max_diff(&g.weights, &m.weights) < 1e-12, "G = {kv_heads}");
            }
            let expected = 2 * d_model * d_model + 2 * d_model * kv_heads * 4;
            assert_eq!(gqa.parameter_count(), expected);
        }
    }

    #[test]
    fn gqa_forward_batched_is_forward_per_item() {
        let (d_model, heads, kv_heads, l) = (8, 4, 2, 5);
        let rng = &mut StdRng::seed_from_u64(3);
        let gqa = GroupedQueryAttention::<f64>::random(d_model, heads, kv_heads, rng).unwrap();
        let x = random3::<f64>((3, l, d_model), 4);
        let padding = Mask::padding(&[5, 3, 1], l, l).unwrap();
        let per_head_mask = Mask::from_array(ndarray::Array4::from_shape_fn(
            (3, heads, l, l),
            |(b, h, i, j)| (b + h + i + j) % 3 != 0 || j == i,
        ))
        .unwrap();
        let causal = Mask::causal(l);
        for mask in [None, Some(&causal), Some(&padding), Some(&per_head_mask)] {
            let out = gqa.forward_batched(&x, mask).unwrap();
            assert_eq!(out.weights.raw_dim(), Ix4(3, heads, l, l));
            for b in 0..3 {
                let item_mask = match mask {
                    Some(m) if m.shape().len() > 2 => Some(
                        Mask::from_array(m.as_array().index_axis(Axis(0), b).to_owned())
                            .unwrap(),
                    ),
                    other => other.cloned(),
                };
                let one = gqa.forward(&x.index_axis(Axis(0), b), item_mask.as_ref()).unwrap();
                assert_eq!(out.output.index_axis(Axis(0), b), one.output);
                assert_eq!(out.weights.index_axis(Axis(0), b), one.weights);
            }
        }
    }

    fn message<T: std::fmt::Debug>(result: Result<T>) -> String {
        result.expect_err("this input must be refused").to_string()
    }

    #[test]
    fn gqa_refuses_bad_heads_and_shapes() {
        let rng = &mut StdRng::seed_from_u64(0);
        assert_eq!(
            message(GroupedQueryAttention::<f64>::random(12, 4, 3, rng)),
            "kv_heads = 3 does not divide heads = 4"
        );
        assert_eq!(
            message(GroupedQueryAttention::<f64>::random(12, 4, 0, rng)),
            "kv_heads = 0 does not divide heads = 4"
        );
        assert_eq!(
            message(GroupedQueryAttention::<f64>::random(12, 5, 5, rng)),
            "heads = 5 does not divide d_model = 12"
        );
        let (sq, narrow) = (Array2::<f64>::eye(12), Array2::<f64>::zeros((12, 6)));
        let new = |q: &Array2<f64>, k: &Array2<f64>, o: &Array2<f64>, g| {
            GroupedQueryAttention::new(q.clone(), k.clone(), k.clone(), o.clone(), 4, g)
        };
        assert!(new(&sq, &narrow, &sq, 2).is_ok());
        assert_eq!(
            message(new(&sq, &narrow, &sq, 3)),
            "kv_heads = 3 does not divide heads = 4"
        );
        assert_eq!(
            message(new(&sq, &narrow, &sq, 4)),
            "W_K has shape [12, 6] but a shape (d_model, kv_heads·d_head) = (12, 12) \
             was expected"
        );
        assert_eq!(
            message(new(&sq, &narrow, &Array2::zeros((12, 6)), 2)),
            "W_O has shape [12, 6] but a shape (d_model, d_model) = (12, 12) was expected"
        );
        assert_eq!(
            message(new(&Array2::zeros((12, 8)), &narrow, &sq, 2)),
            "W_Q has shape [12, 8] but a shape (d_model, d_model) = (12, 12) was expected"
        );
        let gqa = new(&sq, &narrow, &sq, 2).unwrap();
        let rope = crate::rope::Rope::new(6, 10_000.0, crate::rope::RopeLayout::RotateHalf);
        assert_eq!(
            message(gqa.clone().with_rope(rope.unwrap())),
            "RoPE has d_head = 6 but the layer has d_head = 3"
        );
        assert_eq!(
            message(gqa.forward(&Array2::zeros((3, 10)), None)),
            "x has d_in = 10 but W has d_in = 12"
        );
        assert_eq!(
            message(gqa.forward(&Array2::zeros((0, 12)), None)),
            "x has L = 0: it must be at least 1"
        );
        assert_eq!(
            message(gqa.forward(&Array2::zeros((3, 12)), Some(&Mask::causal(4)))),
            "mask has shape [4, 4], which does not broadcast to the scores' shape [4, 3, 3]"
        );
        let padding = Mask::padding(&[3, 3], 3, 3).unwrap();
        assert_eq!(
            message(gqa.forward_batched(&Array3::zeros((3, 3, 12)), Some(&padding))),
            "mask has shape [2, 3, 3] but a leading batch axis of 1 or 3 was expected"
        );
    }

    #[test]
    fn sdpa_gqa_names_the_mismatched_operands() {
        let z = |h, l, d| Array3::<f64>::zeros((h, l, d));
        assert_eq!(
            message(sdpa_gqa(&z(4, 2, 3), &z(3, 2, 3), &z(3, 2, 3), None)),
            "kv_heads = 3 does not divide heads = 4"
        );
        assert_eq!(
            message(sdpa_gqa(&z(4, 2, 3), &z(0, 2, 3), &z(0, 2, 3), None)),
            "kv_heads = 0 does not divide heads = 4"
        );
        assert_eq!(
            message(sdpa_gqa(&z(0, 2, 3), &z(1, 2, 3), &z(1, 2, 3), None)),
            "q has H = 0: it must be at least 1"
        );
        assert_eq!(
            message(sdpa_gqa(&z(4, 2, 3), &z(2, 2, 3), &z(1, 2, 3), None)),
            "k has leading axes [2] but v has [1]"
        );
        assert_eq!(
            message(sdpa_gqa(&z(4, 2, 3), &z(2, 2, 5), &z(2, 2, 3), None)),
            "q has d_k = 3 but k has d_k = 5"
        );
        assert_eq!(
            message(sdpa_gqa(&z(4, 2, 3), &z(2, 2, 3), &z(2, 5, 3), None)),
            "k has L_k = 2 but v has L_k = 5"
        );
        assert_eq!(
            message(sdpa_gqa(&z(4, 0, 3), &z(2, 2, 3), &z(2, 2, 3), None)),
            "q has L_q = 0: it must be at least 1"
        );
        assert_eq!(
            message(sdpa_gqa(&z(4, 2, 3), &z(2, 2, 3), &z(2, 2, 3), Some(&Mask::causal(3)))),
            "mask has shape [3, 3], which does not broadcast to the scores' shape [4, 2, 2]"
        );
    }
}
