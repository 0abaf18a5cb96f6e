//! Chapter *Gradients*: the backward pass of attention, written out by hand.
//!
//! Training needs, for every number that went into attention, how much a loss `ℓ` would
//! change if that number moved: its gradient. The backward pass receives the gradient of the
//! output, `dO = ∂ℓ/∂O` (the same shape as `O`), and walks the forward steps in reverse:
//!
//! | forward | backward |
//! |---|---|
//! | `S = Q·Kᵀ/√d_k` (and `−∞` where masked) | `dQ = dS·K/√d_k`, `dK = dSᵀ·Q/√d_k` |
//! | `P = softmax(S)`, row by row | `dS = P ∘ (dP − rowsum(dP ∘ P))` |
//! | `O = P·V` | `dV = Pᵀ·dO`, `dP = dO·Vᵀ` |
//!
//! The softmax line is the Jacobian of chapter *Scores, scaling and variance*
//! ([`softmax_jacobian`](crate::stats::softmax_jacobian), `∂pᵢ/∂sⱼ = pᵢ(δᵢⱼ − pⱼ)`) applied to
//! `dP`: `dSⱼ = Σᵢ dPᵢ·pᵢ(δᵢⱼ − pⱼ) = pⱼ·(dPⱼ − Σᵢ dPᵢ·pᵢ)`, one row at a time, without
//! forming the `L_k × L_k` matrix ([`softmax_backward`]). A masked score is the constant
//! `−∞`: its weight is 0 whatever the others do, so its `dS` is 0; a query with no visible
//! key has an all-zero row of weights, so its whole row of `dS`, its row of `dQ` and its
//! share of `dK` and `dV` are 0. [`sdpa_backward`] puts the three lines together.
//!
//! [`MultiHeadAttention::forward_train`] is the multi-head layer's forward pass that keeps
//! what the backward pass needs (a [`LayerTape`]), with optional attention dropout, and
//! [`MultiHeadAttention::backward`] returns the gradients of the input and the four weight
//! matrices ([`LayerGrads`]). Every product goes through [`exact::matmul`] and every `exp`
//! through [`exact::exp`], so the gradients are the same bits on every machine.
//!
//! Anchors (below the doc comments): `softmax_backward`, `grad_checks`, `sdpa_grads`,
//! `sdpa_backward`, `check_backward`, `layer_tape`, `forward_train`, `layer_grads`,
//! `layer_backward`, `layer_checks`, `project_exact`, `tape_weights`.

use ndarray::Dimension;
use ndarray::{
    Array, Array2, Array3, Array4, ArrayRef, ArrayRef2, ArrayRef3, ArrayRef4, Axis,
};

use crate::error::{AttentionError, Result};
use crate::exact::{self, matmul, transposed};
use crate::float::Float;
use crate::mask::Mask;
use crate::multihead::{MultiHeadAttention, merge_heads, split_heads};
use crate::projection::Linear;
use crate::shapes::{Operand, check_qkv};

/// The backward pass of softmax along the last axis: from the weights `P = softmax(S)` and
/// the gradient `dP` of the weights, the gradient of the scores,
/// `dS = P ∘ (dP − rowsum(dP ∘ P))`.
///
/// Where a weight is 0 (a masked key, or a row with no visible key at all) the gradient is 0.
/// Both arrays have the shape `(..., L_q, L_k)` (at least one axis).
///
/// ```
/// use attention::{grad::softmax_backward, softmax::softmax};
/// use ndarray::array;
///
/// let p = softmax(&array![[0.0, 0.0], [f64::NEG_INFINITY, 1.0]]);
/// let grad_p = array![[1.0, 0.0], [5.0, 2.0]];
/// // Row 0: the weighted mean of dP is 0.5, so dS = 0.5·(1 − 0.5), 0.5·(0 − 0.5).
/// // Row 1: one visible key with weight 1: a softmax of one score is constant, dS = 0.
/// assert_eq!(softmax_backward(&p, &grad_p).unwrap(), array![[0.25, -0.25], [0.0, 0.0]]);
/// assert!(softmax_backward(&p, &array![[1.0, 0.0]]).is_err());
/// ```
// ANCHOR: softmax_backward
pub fn softmax_backward<A: Float, D: Dimension>(
    weights: &ArrayRef<A, D>,
    grad_weights: &ArrayRef<A, D>,
) -> Result<Array<A, D>> {
    check_weights(weights.shape(), "grad_weights", grad_weights.shape())?;
    let last = Axis(weights.ndim() - 1);
    let mut grad_scores = grad_weights.to_owned(); // dP, turned into dS one row at a time
    for (p, mut grad_s) in weights.lanes(last).into_iter().zip(grad_scores.lanes_mut(last)) {
        // rowsum(dP ∘ P) = Σⱼ dPⱼ·Pⱼ, added left to right
        let rowsum = p.iter().zip(grad_s.iter()).fold(A::zero(), |acc, (&p, &g)| acc + g * p);
        grad_s.zip_mut_with(&p, |g, &p| *g = p * (*g - rowsum)); // Pⱼ·(dPⱼ − rowsum)
    }
    Ok(grad_scores)
}
// ANCHOR_END: softmax_backward

/// Checks that the weights have at least one axis and that `name` has their shape.
// ANCHOR: grad_checks
fn check_weights(weights: &[usize], name: &str, found: &[usize]) -> Result<()> {
    if weights.is_empty() {
        return Err(AttentionError::shape(
            "weights",
            weights,
            "a shape (..., L_k) was expected",
        ));
    }
    same_shape(name, found, "the weights'", weights)
}

/// Checks that `name` has the shape `expected` of `like` (e.g. `"the weights'"`).
fn same_shape(name: &str, found: &[usize], like: &str, expected: &[usize]) -> Result<()> {
    if found != expected {
        let what = format!("{like} shape {expected:?} was expected");
        return Err(AttentionError::shape(name, found, &what));
    }
    Ok(())
}
// ANCHOR_END: grad_checks

/// The gradients of a loss with respect to the query, key and value of scaled dot-product
/// attention, each the shape of its input.
///
/// ```
/// use attention::grad::{sdpa_backward, SdpaGrads};
/// use ndarray::{array, Array2};
///
/// let x = array![[1.0, 0.0], [0.0, 1.0]];
/// let weights = attention::exact::sdpa(&x, &x, &x, None).unwrap().weights;
/// let SdpaGrads { grad_q, grad_k, grad_v } =
///     sdpa_backward(&x, &x, &x, &weights, &Array2::ones((2, 2))).unwrap();
/// assert_eq!((grad_q.dim(), grad_k.dim(), grad_v.dim()), ((2, 2), (2, 2), (2, 2)));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: sdpa_grads
pub struct SdpaGrads<A, D: Dimension> {
    /// `∂ℓ/∂Q`: `(..., L_q, d_k)`.
    pub grad_q: Array<A, D>,
    /// `∂ℓ/∂K`: `(..., L_k, d_k)`.
    pub grad_k: Array<A, D>,
    /// `∂ℓ/∂V`: `(..., L_k, d_v)`.
    pub grad_v: Array<A, D>,
}
// ANCHOR_END: sdpa_grads

/// The backward pass of scaled dot-product attention `O = softmax(Q·Kᵀ/√d_k + M)·V`: from
/// the forward pass's inputs, its weights `P` and the output's gradient `dO`, the gradients
/// of `Q`, `K` and `V`.
///
/// Shapes: `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)`, `v: (..., L_k, d_v)`,
/// `weights: (..., L_q, L_k)` (the forward pass's `P`, which holds the mask as zeros, so no
/// mask is passed here) and `grad_o: (..., L_q, d_v)`, all with the same leading axes. Every
/// product is an [`exact::matmul`].
///
/// ```
/// use attention::{exact, grad::sdpa_backward, mask::Mask};
/// use ndarray::{Array2, array};
///
/// let q = array![[1.0, 2.0], [0.5, -1.0], [0.0, 1.0]];
/// let k = array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]];
/// let v = array![[1.0], [2.0], [4.0]];
/// let causal = Mask::causal(3);
/// let att = exact::sdpa(&q, &k, &v, Some(&causal)).unwrap();
/// let grad_o = Array2::ones((3, 1)); // the loss is the sum of the outputs
/// let g = sdpa_backward(&q, &k, &v, &att.weights, &grad_o).unwrap();
/// // Query 0 sees only key 0: its output is v₀ whatever q₀ is, so dq₀ = 0.
/// assert_eq!(g.grad_q.row(0).to_vec(), [0.0, 0.0]);
/// // dV = Pᵀ·dO: each value row's gradient is the total weight its key received.
/// assert_eq!(g.grad_v, att.weights.t().dot(&grad_o));
/// // The weights must have the shape (L_q, L_k) of q and k.
/// let err = sdpa_backward(&q, &k, &v, &att.weights.t().slice(ndarray::s![..2, ..]), &grad_o);
/// assert_eq!(
///     err.unwrap_err().to_string(),
///     "weights has shape [2, 3] but a shape (..., L_q, L_k) = [3, 3] was expected"
/// );
/// ```
// ANCHOR: sdpa_backward
pub fn sdpa_backward<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    weights: &ArrayRef<A, D>,
    grad_o: &ArrayRef<A, D>,
) -> Result<SdpaGrads<A, D>> {
    let sqrt_d_k = A::from_len(check_backward(q, k, v, weights, grad_o)?).sqrt();
    // O = P·V
    let grad_v = matmul(&transposed(weights), grad_o)?; // dV = Pᵀ·dO: (..., L_k, d_v)
    let grad_weights = matmul(grad_o, &transposed(v))?; // dP = dO·Vᵀ: (..., L_q, L_k)
    // P = softmax(S)
    // dS = P ∘ (dP − rowsum(dP ∘ P))
    let grad_scores = softmax_backward(weights, &grad_weights)?;
    // S = Q·Kᵀ/√d_k
    let grad_q = matmul(&grad_scores, k)? / sqrt_d_k; // dQ = dS·K/√d_k: (..., L_q, d_k)
    let grad_k = matmul(&transposed(&grad_scores), q)? / sqrt_d_k; // dK = dSᵀ·Q/√d_k
    Ok(SdpaGrads { grad_q, grad_k, grad_v })
}
// ANCHOR_END: sdpa_backward

/// Checks the five operands of [`sdpa_backward`]; returns `d_k`.
// ANCHOR: check_backward
fn check_backward<A, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    weights: &ArrayRef<A, D>,
    grad_o: &ArrayRef<A, D>,
) -> Result<usize> {
    let (l_q, l_k, d_k, d_v) = check_qkv(q.shape(), k.shape(), v.shape())?;
    let lead = &q.shape()[..q.ndim() - 2];
    for (name, found, last, axes) in [
        ("weights", weights.shape(), [l_q, l_k], "(..., L_q, L_k)"),
        ("grad_o", grad_o.shape(), [l_q, d_v], "(..., L_q, d_v)"),
    ] {
        let expected = [lead, &last].concat();
        if found != expected {
            let what = format!("a shape {axes} = {expected:?} was expected");
            return Err(AttentionError::shape(name, found, &what));
        }
    }
    Ok(d_k)
}
// ANCHOR_END: check_backward

/// What [`MultiHeadAttention::forward_train`] keeps for the backward pass: the input, every
/// head's queries, keys and values, the weights, the dropout scales and the merged heads.
///
/// ```
/// use attention::multihead::MultiHeadAttention;
/// use ndarray::Array3;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let mha = MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
/// let (_, tape) = mha.forward_train(&Array3::ones((3, 5, 4)), None, None).unwrap();
/// assert_eq!(tape.weights().dim(), (3, 2, 5, 5)); // (batch, heads, L, L)
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: layer_tape
pub struct LayerTape<A> {
    x: Array3<A>,            // (batch, L, d_model): the input
    q: Array4<A>,            // (batch, heads, L, d_head): every head's queries
    k: Array4<A>,            // (batch, heads, L, d_head)
    v: Array4<A>,            // (batch, heads, L, d_head)
    weights: Array4<A>,      // (batch, heads, L, L): P, before dropout
    drop: Option<Array4<A>>, // (batch, heads, L, L): the dropout scales, 0 or 1/(1 − p)
    merged: Array3<A>,       // (batch, L, d_model): the heads' outputs side by side
}
// ANCHOR_END: layer_tape

impl<A: Float> LayerTape<A> {
    /// Every head's attention weights `(batch, heads, L, L)`, after the softmax and before
    /// dropout.
    ///
    /// ```
    /// use attention::{mask::Mask, multihead::MultiHeadAttention};
    /// use ndarray::Array3;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let x = Array3::from_shape_fn((1, 3, 4), |(_, i, j)| (i * j) as f64);
    /// let (_, tape) = mha.forward_train(&x, Some(&Mask::causal(3)), None).unwrap();
    /// assert_eq!(tape.weights()[[0, 1, 0, 0]], 1.0); // token 0 sees only itself
    /// ```
    // ANCHOR: tape_weights
    pub fn weights(&self) -> &Array4<A> {
        &self.weights
    }
    // ANCHOR_END: tape_weights

    /// The heads' outputs side by side before `W_O`, `(batch, L, d_model)`: head `h` in the
    /// columns `h·d_head .. (h+1)·d_head`.
    // ANCHOR: tape_merged
    pub(crate) fn merged(&self) -> &Array3<A> {
        &self.merged
    }
    // ANCHOR_END: tape_merged
}

/// The gradients of a loss with respect to the input and the four weight matrices of a
/// multi-head attention layer ([`MultiHeadAttention::backward`]).
///
/// ```
/// use attention::{grad::LayerGrads, multihead::MultiHeadAttention};
/// use ndarray::Array3;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let mha = MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
/// let x = Array3::from_shape_fn((2, 3, 4), |(b, i, j)| (b + i * j) as f64 / 5.0);
/// let (y, tape) = mha.forward_train(&x, None, None).unwrap();
/// let LayerGrads { grad_x, grad_w_o, .. } =
///     mha.backward(&tape, &Array3::ones(y.dim())).unwrap();
/// assert_eq!((grad_x.dim(), grad_w_o.dim()), ((2, 3, 4), (4, 4)));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: layer_grads
pub struct LayerGrads<A> {
    /// `∂ℓ/∂X`: `(batch, L, d_model)`.
    pub grad_x: Array3<A>,
    /// `∂ℓ/∂W_Q`: `(d_model, d_model)`.
    pub grad_w_q: Array2<A>,
    /// `∂ℓ/∂W_K`: `(d_model, d_model)`.
    pub grad_w_k: Array2<A>,
    /// `∂ℓ/∂W_V`: `(d_model, d_model)`.
    pub grad_w_v: Array2<A>,
    /// `∂ℓ/∂W_O`: `(d_model, d_model)`.
    pub grad_w_o: Array2<A>,
}
// ANCHOR_END: layer_grads

// ANCHOR: forward_train
impl<A: Float> MultiHeadAttention<A> {
    // ANCHOR_END: forward_train
    /// The layer's forward pass over a batch `x: (batch, L, d_model)` for training: the
    /// output `(batch, L, d_model)` of
    /// [`forward_batched`](MultiHeadAttention::forward_batched) (equal to rounding), computed
    /// with [`exact`] arithmetic, and the [`LayerTape`] that
    /// [`backward`](MultiHeadAttention::backward) needs.
    ///
    /// The mask is as for `forward_batched`. `drop`, if given, is attention dropout's array
    /// of scales `(batch, heads, L, L)`, entries 0 (dropped) or `1/(1 − p)` (kept): the heads
    /// average their values with `P ∘ drop` instead of `P`.
    ///
    /// ```
    /// use attention::{mask::Mask, multihead::MultiHeadAttention};
    /// use ndarray::{Array3, Array4};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(6, 3, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let x = Array3::from_shape_fn((2, 4, 6), |(b, i, j)| ((b + 3 * i + j) % 5) as f64);
    /// let padding = Mask::padding(&[4, 2], 4, 4).unwrap();
    /// let (y, _) = mha.forward_train(&x, Some(&padding), None).unwrap();
    /// let fast = mha.forward_batched(&x, Some(&padding)).unwrap().output;
    /// assert!((y - fast).iter().all(|d| d.abs() < 1e-12));
    ///
    /// // Dropping nothing with scales of 1 changes nothing.
    /// let keep_all = Array4::ones((2, 3, 4, 4));
    /// let (kept, _) = mha.forward_train(&x, Some(&padding), Some(&keep_all)).unwrap();
    /// assert_eq!(kept, mha.forward_train(&x, Some(&padding), None).unwrap().0);
    /// let wrong = Array4::ones((2, 3, 4, 5));
    /// assert_eq!(
    ///     mha.forward_train(&x, None, Some(&wrong)).unwrap_err().to_string(),
    ///     "drop has shape [2, 3, 4, 5] but the weights' shape [2, 3, 4, 4] was expected"
    /// );
    /// ```
    // ANCHOR: forward_train
    pub fn forward_train(
        &self,
        x: &ArrayRef3<A>,
        mask: Option<&Mask>,
        drop: Option<&ArrayRef4<A>>,
    ) -> Result<(Array3<A>, LayerTape<A>)> {
        self.check_input("x", x)?;
        let [w_q, w_k, w_v, w_o] = self.projections().map(Linear::weight);
        // Project every token, then cut the columns into heads: (batch, heads, L, d_head).
        let q = split_heads(&project_exact(x, w_q)?, self.heads())?;
        let k = split_heads(&project_exact(x, w_k)?, self.heads())?;
        let v = split_heads(&project_exact(x, w_v)?, self.heads())?;
        // Every head at once: P = softmax(Q·Kᵀ/√d_head + M), (batch, heads, L, L).
        let sqrt_d_head = A::from_len(self.d_head()).sqrt();
        let mut scores = matmul(&q, &transposed(&k))? / sqrt_d_head;
        if let Some(mask) = mask {
            mask.for_heads().apply(&mut scores)?; // a (batch, L, L) mask reaches every head
        }
        let weights = exact::softmax(&scores);
        // The heads' outputs P·V, or (P ∘ drop)·V with dropout, put back side by side.
        let heads_out = match drop {
            None => matmul(&weights, &v)?,
            Some(drop) => {
                same_shape("drop", drop.shape(), "the weights'", weights.shape())?;
                matmul(&(&weights * &drop.view()), &v)?
            }
        };
        let merged = merge_heads(&heads_out)?; // (batch, L, d_model)
        let output = project_exact(&merged, w_o)?;
        let (x, drop) = (x.to_owned(), drop.map(|d| d.to_owned()));
        Ok((output, LayerTape { x, q, k, v, weights, drop, merged }))
    }

    // ANCHOR_END: forward_train
    /// The layer's backward pass: from the tape of
    /// [`forward_train`](MultiHeadAttention::forward_train) and the gradient of its output
    /// `grad_y: (batch, L, d_model)`, the gradients of the input and of `W_Q`, `W_K`, `W_V`,
    /// `W_O` (summed over the batch and the positions).
    ///
    /// There is no residual connection inside the layer: a model that adds one adds `grad_y`
    /// to [`LayerGrads::grad_x`] itself.
    ///
    /// ```
    /// use attention::multihead::MultiHeadAttention;
    /// use ndarray::Array3;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mha =
    ///     MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(2)).unwrap();
    /// let x = Array3::from_shape_fn((1, 3, 4), |(_, i, j)| (i as f64 - j as f64) / 3.0);
    /// let (y, tape) = mha.forward_train(&x, None, None).unwrap();
    /// // The loss ℓ = Σ y² / 2 has dℓ/dy = y. The output is linear in W_O, so
    /// // Σ W_O ∘ ∂ℓ/∂W_O = Σ y ∘ y = 2ℓ.
    /// let grads = mha.backward(&tape, &y).unwrap();
    /// let [_, _, _, w_o] = mha.projections();
    /// let lhs = (w_o.weight() * &grads.grad_w_o).sum();
    /// assert!((lhs - (&y * &y).sum()).abs() < 1e-12);
    /// assert!(mha.backward(&tape, &Array3::ones((1, 3, 5))).is_err());
    /// ```
    // ANCHOR: layer_backward
    pub fn backward(
        &self,
        tape: &LayerTape<A>,
        grad_y: &ArrayRef3<A>,
    ) -> Result<LayerGrads<A>> {
        self.check_tape(tape, grad_y)?;
        let [w_q, w_k, w_v, w_o] = self.projections().map(Linear::weight);
        // y = merged · W_O
        let grad_w_o = weight_grad(&tape.merged, grad_y)?; // mergedᵀ · dY
        let grad_merged = project_exact(grad_y, &transposed(w_o))?; // dY · W_Oᵀ
        let grad_heads = split_heads(&grad_merged, self.heads())?; // each head's dO
        // Each head: O = P_drop·V, with P_drop = P ∘ drop (P_drop = P without dropout)
        let dropped = match &tape.drop {
            None => tape.weights.clone(),
            Some(drop) => &tape.weights * drop,
        };
        let grad_v = matmul(&transposed(&dropped), &grad_heads)?; // dV = P_dropᵀ·dO
        // dP_drop = dO·Vᵀ
        let mut grad_weights = matmul(&grad_heads, &transposed(&tape.v))?;
        if let Some(drop) = &tape.drop {
            grad_weights = grad_weights * drop; // dP = dP_drop ∘ drop
        }
        // P = softmax(S), S = Q·Kᵀ/√d_head: as in sdpa_backward
        let grad_scores = softmax_backward(&tape.weights, &grad_weights)?;
        let sqrt_d_head = A::from_len(self.d_head()).sqrt();
        let grad_q = matmul(&grad_scores, &tape.k)? / sqrt_d_head;
        let grad_k = matmul(&transposed(&grad_scores), &tape.q)? / sqrt_d_head;
        // q = x · W_Q (cut into heads), and likewise k and v
        let (grad_q, grad_k, grad_v) =
            (merge_heads(&grad_q)?, merge_heads(&grad_k)?, merge_heads(&grad_v)?);
        let grad_w_q = weight_grad(&tape.x, &grad_q)?; // xᵀ · dQ
        let grad_w_k = weight_grad(&tape.x, &grad_k)?;
        let grad_w_v = weight_grad(&tape.x, &grad_v)?;
        // x went into all three projections: its gradient is the sum of the three paths.
        let grad_x = project_exact(&grad_q, &transposed(w_q))?
            + project_exact(&grad_k, &transposed(w_k))?
            + project_exact(&grad_v, &transposed(w_v))?;
        Ok(LayerGrads { grad_x, grad_w_q, grad_w_k, grad_w_v, grad_w_o })
    }
    // ANCHOR_END: layer_backward

    /// Checks that the tape comes from a layer of this shape (`d_model` and heads) and that
    /// `grad_y` has the output's shape.
    // ANCHOR: layer_checks
    fn check_tape(&self, tape: &LayerTape<A>, grad_y: &ArrayRef3<A>) -> Result<()> {
        self.check_input("the tape's x", &tape.x)?;
        if tape.q.dim().1 != self.heads() {
            return Err(AttentionError::Invalid {
                what: "tape".into(),
                problem: format!(
                    "it was recorded with {} heads, but the layer has {}",
                    tape.q.dim().1,
                    self.heads()
                ),
            });
        }
        same_shape("grad_y", grad_y.shape(), "the output's", tape.x.shape())
    }

    /// Checks that `x` is `(batch, L, d_model)` with this layer's `d_model`, nothing empty.
    fn check_input(&self, name: &str, x: &ArrayRef3<A>) -> Result<()> {
        // ANCHOR_END: layer_checks
        self.refuse_biases()?; // a layer of chapter 13 with biases: no gradient written here
        // ANCHOR: layer_checks
        let (_, _, d_model) =
            Operand { name, shape: x.shape(), rows: "L", cols: "d_model" }.split()?;
        if d_model != self.d_model() {
            return Err(AttentionError::mismatch(
                name,
                d_model,
                "W_Q",
                self.d_model(),
                "d_model",
            ));
        }
        Ok(())
    }
    // ANCHOR_END: layer_checks

    /// Refuses a layer whose projections have a bias ([`Linear::with_bias`], chapter *Inside
    /// a real model*): the gradients above have no term for one, so they would be wrong.
    fn refuse_biases(&self) -> Result<()> {
        let names = ["W_Q", "W_K", "W_V", "W_O"];
        for (what, w) in names.into_iter().zip(self.projections()) {
            if w.bias().is_some() {
                let operation = "MultiHeadAttention's training pass (forward_train, backward)";
                return Err(AttentionError::Bias {
                    operation: operation.into(),
                    what: what.into(),
                });
            }
        }
        Ok(())
    }
    // ANCHOR: forward_train
}
// ANCHOR_END: forward_train

/// `x · W` for every token of a batch with [`exact::matmul`]: `(batch, L, d_in) · (d_in,
/// d_out) = (batch, L, d_out)`. The batch and positions are read as one long list of rows.
// ANCHOR: project_exact
fn project_exact<A: Float>(x: &ArrayRef3<A>, w: &ArrayRef2<A>) -> Result<Array3<A>> {
    let (batch, l, d_in) = x.dim();
    let rows = x.to_shape((batch * l, d_in)).expect("batch and L collapse into rows");
    let out = matmul(&rows, w)?; // (batch·L, d_out)
    Ok(out.into_shape_with_order((batch, l, w.ncols())).expect("rows split back"))
}

/// The gradient of `W` in `y = x · W`, over a batch: `xᵀ · dY`, `(d_in, d_out)`, summed
/// over the batch and the positions (in that order: item 0's tokens first).
fn weight_grad<A: Float>(x: &ArrayRef3<A>, grad_y: &ArrayRef3<A>) -> Result<Array2<A>> {
    let (batch, l, d_in) = x.dim();
    let rows = x.to_shape((batch * l, d_in)).expect("batch and L collapse into rows");
    let grad_rows = grad_y.to_shape((batch * l, grad_y.dim().2)).expect("the same rows");
    matmul(&transposed(&rows), &grad_rows)
}
// ANCHOR_END: project_exact

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdpa::sdpa_batched;
    use ndarray::{Array3, ArrayD, IxDyn, s};
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random<Sh: ndarray::ShapeBuilder>(shape: Sh, rng: &mut StdRng) -> Array<f64, Sh::Dim> {
        Array::from_shape_simple_fn(shape, || rng.random_range(-1.5..1.5))
    }

    #[test]
    fn softmax_backward_is_the_jacobian_times_d_weights() {
        let mut rng = StdRng::seed_from_u64(4);
        let p = exact::softmax(&random(7, &mut rng));
        let grad_p = random(7, &mut rng);
        // dSⱼ = Σᵢ dPᵢ ∂pᵢ/∂sⱼ: the Jacobian (symmetric) times dP.
        let by_jacobian = crate::stats::softmax_jacobian(&p).t().dot(&grad_p);
        let grad_s = softmax_backward(&p, &grad_p).unwrap();
        assert!((&grad_s - &by_jacobian).iter().all(|d| d.abs() < 1e-15));
        // Its entries sum to 0: adding a constant to every score changes no weight.
        assert!(grad_s.sum().abs() < 1e-15);
    }

    #[test]
    fn softmax_backward_checks_shapes() {
        let p = Array3::<f64>::zeros((2, 3, 4));
        assert_eq!(
            softmax_backward(&p, &Array3::zeros((2, 4, 3))).unwrap_err().to_string(),
            "grad_weights has shape [2, 4, 3] but the weights' shape [2, 3, 4] was expected"
        );
        let scalar = ArrayD::<f64>::zeros(IxDyn(&[]));
        assert_eq!(
            softmax_backward(&scalar, &scalar).unwrap_err().to_string(),
            "weights has shape [] but a shape (..., L_k) was expected"
        );
    }

    #[test]
    fn sdpa_backward_checks_every_operand() {
        let q = Array3::<f64>::zeros((2, 3, 4));
        let k = Array3::<f64>::zeros((2, 5, 4));
        let v = Array3::<f64>::zeros((2, 5, 6));
        let p = Array3::<f64>::zeros((2, 3, 5));
        let grad_o = Array3::<f64>::zeros((2, 3, 6));
        assert!(sdpa_backward(&q, &k, &v, &p, &grad_o).is_ok());
        fn err(
            q: &Array3<f64>,
            k: &Array3<f64>,
            v: &Array3<f64>,
            p: &Array3<f64>,
            grad_o: &Array3<f64>,
        ) -> String {
            sdpa_backward(q, k, v, p, grad_o).unwrap_err().to_string()
        }
        assert_eq!(err(&q, &q, &v, &p, &grad_o), "k has L_k = 3 but v has L_k = 5");
        assert_eq!(
            err(&q, &k, &v, &Array3::zeros((2, 5, 3)), &grad_o),
            "weights has shape [2, 5, 3] but a shape (..., L_q, L_k) = [2, 3, 5] was expected"
        );
        assert_eq!(
            err(&q, &k, &v, &p, &Array3::zeros((2, 3, 4))),
            "grad_o has shape [2, 3, 4] but a shape (..., L_q, d_v) = [2, 3, 6] was expected"
        );
        assert_eq!(
            err(&q, &k, &v, &p, &Array3::zeros((1, 3, 6))),
            "grad_o has shape [1, 3, 6] but a shape (..., L_q, d_v) = [2, 3, 6] was expected"
        );
    }

    #[test]
    fn a_query_with_no_visible_key_gets_exactly_zero_gradients() {
        let mut rng = StdRng::seed_from_u64(9);
        let (q, k, v) = (
            random((2, 4, 3), &mut rng),
            random((2, 5, 3), &mut rng),
            random((2, 5, 2), &mut rng),
        );
        let mut allowed =
            ndarray::Array3::from_shape_simple_fn((2, 4, 5), || rng.random_bool(0.7));
        allowed.slice_mut(s![1, 2, ..]).fill(false);
        // Key 4 of item 0 is visible to no query: it gets no gradient either.
        allowed.slice_mut(s![0, .., 4]).fill(false);
        let mask = Mask::from_array(allowed).unwrap();
        let att = exact::sdpa(&q, &k, &v, Some(&mask)).unwrap();
        let grad_o = random((2, 4, 2), &mut rng);
        let g = sdpa_backward(&q, &k, &v, &att.weights, &grad_o).unwrap();
        assert!(att.output.slice(s![1, 2, ..]).iter().all(|&o| o == 0.0));
        assert!(g.grad_q.slice(s![1, 2, ..]).iter().all(|&d| d == 0.0));
        assert!(g.grad_k.slice(s![0, 4, ..]).iter().all(|&d| d == 0.0));
        assert!(g.grad_v.slice(s![0, 4, ..]).iter().all(|&d| d == 0.0));
        assert!(g.grad_q.iter().filter(|&&d| d != 0.0).count() > 10);
    }

    #[test]
    fn the_layer_without_dropout_uses_sdpa_backward_bit_for_bit() {
        let mut rng = StdRng::seed_from_u64(12);
        let mha = MultiHeadAttention::<f64>::random(6, 2, &mut rng).unwrap();
        let x = random((2, 4, 6), &mut rng);
        let mask = Mask::causal(4);
        let (y, tape) = mha.forward_train(&x, Some(&mask), None).unwrap();
        let fast = mha.forward_batched(&x, Some(&mask)).unwrap();
        assert!((&y - &fast.output).iter().all(|d| d.abs() < 1e-12));
        assert!((tape.weights() - &fast.weights).iter().all(|d| d.abs() < 1e-12));
        let att = sdpa_batched(&tape.q, &tape.k, &tape.v, Some(&mask)).unwrap();
        assert!((&tape.weights - &att.weights).iter().all(|d| d.abs() < 1e-12));

        // The layer's backward is sdpa_backward between the projections' backward passes.
        let grad_y = random((2, 4, 6), &mut rng);
        let [w_q, w_k, w_v, w_o] = mha.projections().map(Linear::weight);
        let grad_heads =
            split_heads(&project_exact(&grad_y, &transposed(w_o)).unwrap(), 2).unwrap();
        let g = sdpa_backward(&tape.q, &tape.k, &tape.v, &tape.weights, &grad_heads).unwrap();
        let [grad_q, grad_k, grad_v] =
            [g.grad_q, g.grad_k, g.grad_v].map(|d| merge_heads(&d).unwrap());
        let back =
            |d: &Array3<f64>, w: &Array2<f64>| project_exact(d, &transposed(w)).unwrap();
        let expected = LayerGrads {
            grad_x: back(&grad_q, w_q) + back(&grad_k, w_k) + back(&grad_v, w_v),
            grad_w_q: weight_grad(&x, &grad_q).unwrap(),
            grad_w_k: weight_grad(&x, &grad_k).unwrap(),
            grad_w_v: weight_grad(&x, &grad_v).unwrap(),
            grad_w_o: weight_grad(&tape.merged, &grad_y).unwrap(),
        };
        let grads = mha.backward(&tape, &grad_y).unwrap();
        assert_eq!(grads, expected);
        // A dropout array of ones is no dropout.
        let ones = Array4::ones(tape.weights.dim());
        let (y1, tape1) = mha.forward_train(&x, Some(&mask), Some(&ones)).unwrap();
        assert_eq!(y1, y);
        assert_eq!(mha.backward(&tape1, &grad_y).unwrap(), grads);
    }

    #[test]
    fn the_layer_checks_its_inputs() {
        let mha =
            MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
        let err = mha.forward_train(&Array3::zeros((2, 3, 5)), None, None).unwrap_err();
        assert_eq!(err.to_string(), "x has d_model = 5 but W_Q has d_model = 4");
        let err = mha.forward_train(&Array3::zeros((2, 0, 4)), None, None).unwrap_err();
        assert_eq!(err.to_string(), "x has L = 0: it must be at least 1");
        let err = mha.forward_train(&Array3::zeros((2, 3, 4)), Some(&Mask::causal(4)), None);
        assert!(matches!(err, Err(AttentionError::MaskShape { .. })));
        let (_, tape) = mha.forward_train(&Array3::zeros((2, 3, 4)), None, None).unwrap();
        assert_eq!(
            mha.backward(&tape, &Array3::zeros((2, 4, 4))).unwrap_err().to_string(),
            "grad_y has shape [2, 4, 4] but the output's shape [2, 3, 4] was expected"
        );
        let one_head = MultiHeadAttention::new(
            Array2::eye(4),
            Array2::eye(4),
            Array2::eye(4),
            Array2::eye(4),
            1,
        )
        .unwrap();
        assert_eq!(
            one_head.backward(&tape, &Array3::zeros((2, 3, 4))).unwrap_err().to_string(),
            "tape: it was recorded with 2 heads, but the layer has 1"
        );
        let wider = MultiHeadAttention::<f64>::random(6, 2, &mut StdRng::seed_from_u64(0));
        assert_eq!(
            wider.unwrap().backward(&tape, &Array3::zeros((2, 3, 4))).unwrap_err().to_string(),
            "the tape's x has d_model = 4 but W_Q has d_model = 6"
        );
    }

    /// The gradients above have no term for a bias: a layer with one is refused by both
    /// passes (naming the first projection that has one), never given a wrong gradient.
    #[test]
    fn the_training_passes_refuse_a_layer_with_a_bias() {
        let mha =
            MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
        let x = Array3::from_shape_fn((1, 3, 4), |(_, i, j)| (i + 2 * j) as f64 / 5.0);
        let (_, tape) = mha.forward_train(&x, None, None).unwrap();
        let [w_q, w_k, w_v, w_o] = mha.projections().map(|w| w.clone());
        let bias = ndarray::Array1::from_elem(4, 0.5);
        let w_v = Linear::with_bias(w_v.weight().clone(), bias).unwrap();
        let biased = MultiHeadAttention::from_projections(w_q, w_k, w_v, w_o, 2).unwrap();
        let expected = "MultiHeadAttention's training pass (forward_train, backward) supports \
                        projections without a bias only, but W_V has one";
        let err = biased.forward_train(&x, None, None).unwrap_err();
        assert!(matches!(err, AttentionError::Bias { .. }));
        assert_eq!(err.to_string(), expected);
        let err = biased.backward(&tape, &Array3::zeros((1, 3, 4))).unwrap_err();
        assert_eq!(err.to_string(), expected);
    }
}
