//! The model: [`ModelConfig`], [`TinyTransformer`] (its initialisation, forward pass, backward
//! pass and update), the tape and gradients it passes between them, and [`Score`], how its
//! answers are counted.
//!
//! Anchors (below the doc comments): `model`, `grads_views`, `init_helpers`, `model_init`,
//! `model_forward`, `model_check`, `model_eval`, `dropout_masks`, `model_backward`,
//! `loss_and_grads`, `model_step`, `model_update`, `accuracy`, `model_score`, `score_logits`,
//! `score`, `score_accuracy`.

use ndarray::{
    Array1, Array2, Array3, Array4, ArrayRef1, ArrayRef2, ArrayRef3, ArrayViewD,
    ArrayViewMutD, s,
};
use rand::distr::{Distribution, Uniform};
use rand::{Rng, rngs::StdRng};

use super::{
    Adam, Batch, ReadoutGrads, cross_entropy, embed, embed_backward, invalid_setting,
    positions_backward, readout, readout_backward,
};
use crate::dropout::Dropout;
use crate::error::{AttentionError, Result};
use crate::grad::LayerTape;
use crate::multihead::MultiHeadAttention;
use crate::position::add_positions;

/// The shape of a [`TinyTransformer`].
///
/// ```
/// use attention::learn::ModelConfig;
///
/// let config = ModelConfig { vocab: 4, max_len: 9, d_model: 32, heads: 2, layers: 1,
///                            positions: true };
/// assert_eq!(config.parameter_count(), 4 * 32 + 9 * 32 + 4 * 32 * 32 + 32 * 4 + 4);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelConfig {
    /// The number of tokens (the read-out scores one class per token).
    pub vocab: usize,
    /// The longest sequence (the rows of the position table).
    pub max_len: usize,
    /// The width of every row.
    pub d_model: usize,
    /// The heads of every attention layer (must divide `d_model`).
    pub heads: usize,
    /// The number of attention layers.
    pub layers: usize,
    /// Whether learned positions are added to the token embeddings.
    pub positions: bool,
}

impl ModelConfig {
    /// The number of learnable numbers of the model: the token table, the position table
    /// (if any), `4·d_model²` per layer, and the read-out with its bias.
    ///
    /// ```
    /// use attention::learn::ModelConfig;
    ///
    /// let mut config = ModelConfig { vocab: 2, max_len: 3, d_model: 4, heads: 1, layers: 2,
    ///                                positions: false };
    /// assert_eq!(config.parameter_count(), 8 + 2 * 64 + 8 + 2);
    /// config.positions = true;
    /// assert_eq!(config.parameter_count(), 8 + 12 + 2 * 64 + 8 + 2);
    /// ```
    pub fn parameter_count(&self) -> usize {
        let positions = if self.positions { self.max_len * self.d_model } else { 0 };
        let d = self.d_model;
        self.vocab * d + positions + self.layers * 4 * d * d + d * self.vocab + self.vocab
    }

    pub(super) fn check(&self) -> Result<()> {
        for (size, dim) in [
            (self.vocab, "vocab"),
            (self.max_len, "max_len"),
            (self.d_model, "d_model"),
            (self.layers, "layers"),
        ] {
            if size == 0 {
                return Err(AttentionError::Empty { what: "model".into(), dim });
            }
        }
        crate::multihead::head_width(self.d_model, self.heads)?;
        Ok(())
    }
}

/// A tiny transformer: token embedding + learned positions (optional) + `N` × (multi-head
/// attention + residual) + a linear read-out with a bias. No mask, no layer norm, no MLP.
///
/// ```
/// use attention::learn::{ModelConfig, TinyTransformer};
/// use ndarray::array;
/// use rand::{SeedableRng, rngs::StdRng};
///
/// let config = ModelConfig { vocab: 5, max_len: 4, d_model: 8, heads: 2, layers: 2,
///                            positions: true };
/// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let out = model.forward(&array![[0, 4, 2, 2]]).unwrap();
/// assert_eq!(out.logits.dim(), (1, 4, 5)); // (batch, L, vocab)
/// assert_eq!(out.weights[1].dim(), (1, 2, 4, 4)); // layer 2: (batch, heads, L, L)
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: model
pub struct TinyTransformer {
    pub(super) config: ModelConfig,
    pub(super) tokens: Array2<f64>, // (vocab, d_model): one row per token
    pub(super) positions: Option<Array2<f64>>, // (max_len, d_model): one per position
    pub(super) layers: Vec<MultiHeadAttention<f64>>,
    pub(super) w_out: Array2<f64>, // (d_model, vocab): the read-out
    pub(super) b_out: Array1<f64>, // (vocab)
}
// ANCHOR_END: model

/// What [`TinyTransformer::forward`] returns.
///
/// ```
/// use attention::learn::{ModelConfig, ModelOutput, TinyTransformer};
/// use ndarray::array;
/// use rand::{SeedableRng, rngs::StdRng};
///
/// let config = ModelConfig { vocab: 3, max_len: 3, d_model: 4, heads: 1, layers: 1,
///                            positions: true };
/// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let ModelOutput { logits, weights } = model.forward(&array![[0, 1, 2]]).unwrap();
/// let row_sum: f64 = weights[0].slice(ndarray::s![0, 0, 1, ..]).sum();
/// assert!((row_sum - 1.0).abs() < 1e-12);
/// assert_eq!(logits.dim(), (1, 3, 3));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOutput {
    /// `(batch, L, vocab)`: the scores of every token at every position.
    pub logits: Array3<f64>,
    /// One `(batch, heads, L, L)` array per layer: the attention weights.
    pub weights: Vec<Array4<f64>>,
}

/// What the training forward keeps for the backward: the tokens, every layer's tape, and
/// the input of the read-out.
///
/// ```
/// use attention::learn::{ModelConfig, TinyTransformer};
/// use ndarray::array;
/// use rand::{SeedableRng, rngs::StdRng};
///
/// let config = ModelConfig { vocab: 3, max_len: 3, d_model: 4, heads: 2, layers: 2,
///                            positions: false };
/// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let (_, tape) = model.forward_train(&array![[0, 1, 2]], None).unwrap();
/// assert_eq!(tape.weights(1).unwrap().dim(), (1, 2, 3, 3));
/// ```
#[derive(Debug, Clone)]
pub struct ModelTape {
    tokens: Array2<usize>,
    pub(super) layers: Vec<LayerTape<f64>>,
    hidden: Array2<f64>, // (batch · L, d_model): the input of the read-out
}

impl ModelTape {
    /// The attention weights of layer `layer` (from 0), `(batch, heads, L, L)`, before
    /// dropout; `None` if there is no such layer.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 3, max_len: 2, d_model: 4, heads: 1, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let (_, tape) = model.forward_train(&array![[2, 1]], None).unwrap();
    /// assert_eq!(tape.weights(0).unwrap().dim(), (1, 1, 2, 2));
    /// assert!(tape.weights(1).is_none()); // one layer only
    /// ```
    pub fn weights(&self, layer: usize) -> Option<&Array4<f64>> {
        self.layers.get(layer).map(LayerTape::weights)
    }
}

/// The gradient of the loss with respect to every parameter of a [`TinyTransformer`].
///
/// ```
/// use attention::learn::{Batch, ModelConfig, TinyTransformer};
/// use ndarray::array;
/// use rand::{SeedableRng, rngs::StdRng};
///
/// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 1, layers: 1,
///                            positions: true };
/// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let batch = Batch { tokens: array![[0, 1, 2]], targets: vec![Some(2), None, Some(0)] };
/// let (_, grads) = model.loss_and_grads(&batch, None).unwrap();
/// assert_eq!(grads.layers[0][3].dim(), (4, 4)); // ∂L/∂W_O of layer 1
/// assert_eq!(grads.tokens.row(3).to_vec(), [0.0; 4]); // token 3 is not in the batch
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ModelGrads {
    /// `(vocab, d_model)`: the token table's gradient.
    pub tokens: Array2<f64>,
    /// `(max_len, d_model)`: the position table's gradient, if the model has one.
    pub positions: Option<Array2<f64>>,
    /// Per layer, the gradients of `[W_Q, W_K, W_V, W_O]`.
    pub layers: Vec<[Array2<f64>; 4]>,
    /// `(d_model, vocab)`: the read-out's weight.
    pub w_out: Array2<f64>,
    /// `(vocab)`: the read-out's bias.
    pub b_out: Array1<f64>,
}

impl ModelGrads {
    /// Every gradient as a view, in the order of [`TinyTransformer::parameters`].
    ///
    /// ```
    /// use attention::learn::{Batch, ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 3, max_len: 3, d_model: 4, heads: 1, layers: 2,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let batch = Batch { tokens: array![[0, 1, 2]], targets: vec![Some(1); 3] };
    /// let (_, grads) = model.loss_and_grads(&batch, None).unwrap();
    /// assert_eq!(grads.views().len(), model.parameters().len()); // 2 + 2·4 + 2
    /// ```
    // ANCHOR: grads_views
    pub fn views(&self) -> Vec<ArrayViewD<'_, f64>> {
        let mut views = vec![self.tokens.view().into_dyn()];
        views.extend(self.positions.iter().map(|p| p.view().into_dyn()));
        for layer in &self.layers {
            views.extend(layer.iter().map(|w| w.view().into_dyn()));
        }
        views.push(self.w_out.view().into_dyn());
        views.push(self.b_out.view().into_dyn());
        views
    }
    // ANCHOR_END: grads_views
}

// ANCHOR: init_helpers
fn uniform_matrix(rows: usize, cols: usize, a: f64, rng: &mut StdRng) -> Array2<f64> {
    let dist = Uniform::new(-a, a).expect("a > 0 and finite");
    Array2::from_shape_simple_fn((rows, cols), || dist.sample(rng)) // row-major
}

/// Xavier's (Glorot's) uniform bound for a `(fan_in, fan_out)` matrix: `√(6/(in + out))`.
fn xavier(fan_in: usize, fan_out: usize) -> f64 {
    (6.0 / (fan_in + fan_out) as f64).sqrt()
}
// ANCHOR_END: init_helpers

impl TinyTransformer {
    /// A model with seeded random parameters, drawn in this order, row-major, each from
    /// `rand`'s `Uniform` (portable: no `ln`, no `exp`):
    ///
    /// - the token table and the position table, entries uniform in `[−1, 1)` (the
    ///   position table is drawn even when `positions` is off, and then dropped, so that a
    ///   model with positions and one without start with the same tokens and layers);
    /// - per layer, `W_Q`, `W_K`, `W_V`, `W_O`: Xavier-uniform, `[−a, a)` with
    ///   `a = √(6/(d_model + d_model))`;
    /// - the read-out `W: (d_model, vocab)`, Xavier-uniform; the bias starts at 0.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let mut config = ModelConfig { vocab: 4, max_len: 9, d_model: 8, heads: 2,
    ///                                layers: 1, positions: true };
    /// let with = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// config.positions = false;
    /// let without = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// assert_eq!(with.parameters().len(), without.parameters().len() + 1);
    /// assert_eq!(with.parameters()[2], without.parameters()[1]); // the same W_Q
    /// config.heads = 3;
    /// assert!(TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).is_err());
    /// ```
    // ANCHOR: model_init
    pub fn new(config: &ModelConfig, rng: &mut StdRng) -> Result<Self> {
        config.check()?;
        let (vocab, d) = (config.vocab, config.d_model);
        let tokens = uniform_matrix(vocab, d, 1.0, rng);
        let positions = uniform_matrix(config.max_len, d, 1.0, rng);
        let mut layers = Vec::with_capacity(config.layers);
        for _ in 0..config.layers {
            let [w_q, w_k, w_v, w_o] =
                [(); 4].map(|_| uniform_matrix(d, d, xavier(d, d), rng));
            layers.push(MultiHeadAttention::new(w_q, w_k, w_v, w_o, config.heads)?);
        }
        let w_out = uniform_matrix(d, vocab, xavier(d, vocab), rng);
        Ok(TinyTransformer {
            config: config.clone(),
            tokens,
            positions: config.positions.then_some(positions),
            layers,
            w_out,
            b_out: Array1::zeros(vocab),
        })
    }
    // ANCHOR_END: model_init

    /// The model's shape.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 9, d_model: 8, heads: 2, layers: 1,
    ///                            positions: false };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// assert_eq!(model.config(), &config);
    /// ```
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The attention layers.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 9, d_model: 8, heads: 2, layers: 2,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// assert_eq!(model.layers()[1].heads(), 2);
    /// ```
    pub fn layers(&self) -> &[MultiHeadAttention<f64>] {
        &self.layers
    }

    /// The forward pass that keeps what the backward needs: `tokens: (batch, L)` with
    /// `L ≤ max_len` gives the logits `(batch, L, vocab)` and the tape.
    ///
    /// `drops`, when given, holds one dropout scale mask `(batch, heads, L, L)` per layer
    /// (see [`TinyTransformer::dropout_masks`]), multiplied into that layer's weights after
    /// the softmax; `None` is evaluation mode.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 1, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let (logits, _) = model.forward_train(&array![[0, 3]], None).unwrap();
    /// assert_eq!(logits.dim(), (1, 2, 4));
    /// assert!(model.forward_train(&array![[0, 1, 2, 3]], None).is_err()); // L > max_len
    /// ```
    // ANCHOR: model_forward
    pub fn forward_train(
        &self,
        tokens: &ArrayRef2<usize>,
        drops: Option<&[Array4<f64>]>,
    ) -> Result<(Array3<f64>, ModelTape)> {
        let (batch, len) = tokens.dim();
        self.check_input(batch, len, drops)?;
        let mut x = embed(&self.tokens, tokens)?; // (batch, L, d_model)
        if let Some(positions) = &self.positions {
            x = add_positions(&x, &positions.slice(s![..len, ..]))?;
        }
        let mut tapes = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let drop = drops.map(|masks| &masks[l]);
            let (y, tape) = layer.forward_train(&x, None, drop.map(|m| &**m))?;
            x += &y; // the residual: x ← x + attention(x)
            tapes.push(tape);
        }
        let d_model = self.config.d_model;
        let hidden = x.into_shape_with_order((batch * len, d_model)).expect("rows");
        let logits = readout(&hidden, &self.w_out, &self.b_out)?; // (batch · L, vocab)
        let logits =
            logits.into_shape_with_order((batch, len, self.config.vocab)).expect("rows");
        Ok((logits, ModelTape { tokens: tokens.to_owned(), layers: tapes, hidden }))
    }
    // ANCHOR_END: model_forward

    // ANCHOR: model_check
    fn check_input(
        &self,
        batch: usize,
        len: usize,
        drops: Option<&[Array4<f64>]>,
    ) -> Result<()> {
        if batch == 0 {
            return Err(AttentionError::Empty { what: "tokens".into(), dim: "batch" });
        }
        if len == 0 {
            return Err(AttentionError::Empty { what: "tokens".into(), dim: "L" });
        }
        if len > self.config.max_len {
            let problem =
                format!("L = {len} is longer than max_len = {}", self.config.max_len);
            return Err(invalid_setting("tokens", problem));
        }
        if let Some(masks) = drops {
            if masks.len() != self.layers.len() {
                let (m, l) = (masks.len(), self.layers.len());
                return Err(AttentionError::mismatch("drops", m, "model", l, "layers"));
            }
            let expected = (batch, self.config.heads, len, len);
            for (l, mask) in masks.iter().enumerate() {
                if mask.dim() != expected {
                    let what = format!("dropout mask of layer {l}");
                    let want = format!("(batch, heads, L, L) = {expected:?} was expected");
                    return Err(AttentionError::shape(&what, mask.shape(), &want));
                }
            }
        }
        Ok(())
    }
    // ANCHOR_END: model_check

    /// The forward pass in evaluation mode (no dropout): the logits and every layer's
    /// attention weights.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 1,
    ///                            positions: false };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let out = model.forward(&array![[1, 1, 2]]).unwrap();
    /// // No positions: the two 1s are the same row, so they get the same scores.
    /// let same = |i: usize| out.logits.slice(ndarray::s![0, i, ..]).to_vec();
    /// assert_eq!(same(0), same(1));
    /// ```
    // ANCHOR: model_eval
    pub fn forward(&self, tokens: &ArrayRef2<usize>) -> Result<ModelOutput> {
        let (logits, tape) = self.forward_train(tokens, None)?;
        let weights = tape.layers.iter().map(|t| t.weights().clone()).collect();
        Ok(ModelOutput { logits, weights })
    }
    // ANCHOR_END: model_eval

    /// One dropout scale mask `(batch, heads, len, len)` per layer, drawn layer after layer
    /// from `rng` (see [`Dropout::scale_mask`]).
    ///
    /// ```
    /// use attention::{dropout::Dropout, learn::{ModelConfig, TinyTransformer}};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 2,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let dropout = Dropout::new(0.1).unwrap();
    /// let masks = model.dropout_masks(&dropout, 5, 3, &mut StdRng::seed_from_u64(2));
    /// assert_eq!((masks.len(), masks[1].dim()), (2, (5, 2, 3, 3)));
    /// ```
    // ANCHOR: dropout_masks
    pub fn dropout_masks<R: Rng + ?Sized>(
        &self,
        dropout: &Dropout,
        batch: usize,
        len: usize,
        rng: &mut R,
    ) -> Vec<Array4<f64>> {
        let shape = (batch, self.config.heads, len, len);
        self.layers.iter().map(|_| dropout.scale_mask(shape, rng)).collect()
    }
    // ANCHOR_END: dropout_masks

    /// The backward pass: from `grad_logits: (batch, L, vocab)` (the gradient of the loss with
    /// respect to the logits) and the tape of [`TinyTransformer::forward_train`], the
    /// gradient of every parameter.
    ///
    /// Backwards through the read-out, then through the layers from the last to the first
    /// (a layer computes `x + f(x)`, so `∂L/∂x` is the gradient that came in plus what
    /// flows back through `f`), then into the position table (summed over the batch) and
    /// the token table (added up per token).
    ///
    /// ```
    /// use attention::learn::{cross_entropy, ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 3, max_len: 2, d_model: 4, heads: 1, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let (logits, tape) = model.forward_train(&array![[0, 2]], None).unwrap();
    /// let flat = logits.into_shape_with_order((2, 3)).unwrap();
    /// let (_, grad_logits) = cross_entropy(&flat, &[Some(2), Some(0)]).unwrap();
    /// let grad_logits = grad_logits.into_shape_with_order((1, 2, 3)).unwrap();
    /// let grads = model.backward(&tape, &grad_logits).unwrap();
    /// assert_eq!(grads.tokens.row(1).to_vec(), [0.0; 4]); // token 1 was not in the input
    /// ```
    // ANCHOR: model_backward
    pub fn backward(
        &self,
        tape: &ModelTape,
        grad_logits: &ArrayRef3<f64>,
    ) -> Result<ModelGrads> {
        if tape.layers.len() != self.layers.len() {
            let (taped, here) = (tape.layers.len(), self.layers.len());
            return Err(AttentionError::mismatch("tape", taped, "model", here, "layers"));
        }
        let (batch, len) = tape.tokens.dim();
        let (vocab, d_model) = (self.config.vocab, self.config.d_model);
        if grad_logits.dim() != (batch, len, vocab) {
            let expected =
                format!("(batch, L, vocab) = {:?} was expected", (batch, len, vocab));
            return Err(AttentionError::shape("grad_logits", grad_logits.shape(), &expected));
        }
        let grad_logits = grad_logits.to_shape((batch * len, vocab)).expect("rows");
        let ReadoutGrads { grad_h, grad_w: w_out, grad_b: b_out } =
            readout_backward(&tape.hidden, &self.w_out, &grad_logits)?;
        let mut grad_x = grad_h.into_shape_with_order((batch, len, d_model)).expect("rows");
        let mut layers = Vec::with_capacity(self.layers.len());
        for (layer, layer_tape) in self.layers.iter().zip(&tape.layers).rev() {
            let g = layer.backward(layer_tape, &grad_x)?;
            // x_out = x + f(x): the gradient of x is grad_x_out + f's backward
            grad_x += &g.grad_x;
            layers.push([g.grad_w_q, g.grad_w_k, g.grad_w_v, g.grad_w_o]);
        }
        layers.reverse(); // first layer first
        let positions = self.positions.as_ref().map(|p| {
            let mut grad_positions = Array2::zeros(p.dim()); // rows beyond L get no gradient
            grad_positions.slice_mut(s![..len, ..]).assign(&positions_backward(&grad_x));
            grad_positions
        });
        let tokens = embed_backward(&tape.tokens, &grad_x, vocab)?;
        Ok(ModelGrads { tokens, positions, layers, w_out, b_out })
    }
    // ANCHOR_END: model_backward

    /// The mean cross-entropy of a batch and the gradient of every parameter: the forward
    /// (with the given dropout masks, or none), [`cross_entropy`], the backward.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, Task, TinyTransformer};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let task = Task::Reversal { len: 5, vocab: 4 };
    /// let config = ModelConfig { vocab: 4, max_len: 5, d_model: 8, heads: 2, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let batch = task.batch(16, &mut StdRng::seed_from_u64(2), None).unwrap();
    /// let (loss, _) = model.loss_and_grads(&batch, None).unwrap();
    /// assert!((loss - 4f64.ln()).abs() < 1.0); // near ln 4: an untrained model guesses
    /// ```
    // ANCHOR: loss_and_grads
    pub fn loss_and_grads(
        &self,
        batch: &Batch,
        drops: Option<&[Array4<f64>]>,
    ) -> Result<(f64, ModelGrads)> {
        let (logits, tape) = self.forward_train(&batch.tokens, drops)?;
        let (b, len, vocab) = logits.dim();
        let flat = logits.into_shape_with_order((b * len, vocab)).expect("rows");
        let (loss, grad_logits) = cross_entropy(&flat, &batch.targets)?;
        let grad_logits = grad_logits.into_shape_with_order((b, len, vocab)).expect("rows");
        Ok((loss, self.backward(&tape, &grad_logits)?))
    }
    // ANCHOR_END: loss_and_grads

    /// Every parameter tensor as a view, in a fixed order: the token table, the position
    /// table (if any), `W_Q`, `W_K`, `W_V`, `W_O` of each layer, the read-out's weight and
    /// bias.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let count: usize = model.parameters().iter().map(|p| p.len()).sum();
    /// assert_eq!(count, config.parameter_count());
    /// ```
    pub fn parameters(&self) -> Vec<ArrayViewD<'_, f64>> {
        let mut views = vec![self.tokens.view().into_dyn()];
        views.extend(self.positions.iter().map(|p| p.view().into_dyn()));
        for layer in &self.layers {
            views.extend(layer.projections().map(|w| w.weight().view().into_dyn()));
        }
        views.push(self.w_out.view().into_dyn());
        views.push(self.b_out.view().into_dyn());
        views
    }

    /// One optimiser step: `adam` moves every parameter against its gradient.
    ///
    /// ```
    /// use attention::learn::{Adam, ModelConfig, Task, TinyTransformer};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let task = Task::Reversal { len: 3, vocab: 3 };
    /// let config = ModelConfig { vocab: 3, max_len: 3, d_model: 4, heads: 1, layers: 1,
    ///                            positions: true };
    /// let mut model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let batch = task.batch(8, &mut StdRng::seed_from_u64(2), None).unwrap();
    /// let mut adam = Adam::new(0.01).unwrap();
    /// let (before, grads) = model.loss_and_grads(&batch, None).unwrap();
    /// model.step(&mut adam, &grads).unwrap();
    /// let (after, _) = model.loss_and_grads(&batch, None).unwrap();
    /// assert!(after < before);
    /// ```
    // ANCHOR: model_step
    pub fn step(&mut self, adam: &mut Adam, grads: &ModelGrads) -> Result<()> {
        self.update(|params| adam.step(params, &grads.views()))
    }
    // ANCHOR_END: model_step

    /// Hands `change` a mutable view of every parameter tensor, in the order of
    /// [`TinyTransformer::parameters`]. A [`MultiHeadAttention`] does not lend out its
    /// weights mutably, so each layer's four matrices are copied out, changed, and put
    /// back through [`MultiHeadAttention::new`] (which checks their shapes again).
    // ANCHOR: model_update
    pub(super) fn update<F>(&mut self, change: F) -> Result<()>
    where
        F: FnOnce(&mut [ArrayViewMutD<'_, f64>]) -> Result<()>,
    {
        let mut weights: Vec<[Array2<f64>; 4]> =
            self.layers.iter().map(|l| l.projections().map(|w| w.weight().clone())).collect();
        let mut params = vec![self.tokens.view_mut().into_dyn()];
        params.extend(self.positions.iter_mut().map(|p| p.view_mut().into_dyn()));
        for layer in &mut weights {
            params.extend(layer.iter_mut().map(|w| w.view_mut().into_dyn()));
        }
        params.push(self.w_out.view_mut().into_dyn());
        params.push(self.b_out.view_mut().into_dyn());
        change(&mut params)?;
        for (layer, [w_q, w_k, w_v, w_o]) in self.layers.iter_mut().zip(weights) {
            *layer = MultiHeadAttention::new(w_q, w_k, w_v, w_o, self.config.heads)?;
        }
        Ok(())
    }
    // ANCHOR_END: model_update

    /// The predicted token at every position (the largest logit; the lowest id on a tie),
    /// in evaluation mode, and how many scored positions it gets right.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, Task, TinyTransformer};
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let task = Task::Reversal { len: 5, vocab: 4 };
    /// let config = ModelConfig { vocab: 4, max_len: 5, d_model: 8, heads: 2, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let batch = task.batch(10, &mut StdRng::seed_from_u64(2), None).unwrap();
    /// let score = model.score(&batch).unwrap();
    /// assert_eq!(score.scored, 50);
    /// ```
    // ANCHOR: accuracy
    // ANCHOR: model_score
    pub fn score(&self, batch: &Batch) -> Result<Score> {
        let logits = self.forward(&batch.tokens)?.logits;
        score_logits(&logits, &batch.targets)
    }
    // ANCHOR_END: model_score
    // ANCHOR_END: accuracy
}

/// The score of `logits: (batch, L, vocab)` against row-major `targets`.
// ANCHOR: accuracy
// ANCHOR: score_logits
pub(super) fn score_logits(
    logits: &ArrayRef3<f64>,
    targets: &[Option<usize>],
) -> Result<Score> {
    let (b, len, vocab) = logits.dim();
    if targets.len() != b * len {
        return Err(AttentionError::mismatch(
            "logits",
            b * len,
            "targets",
            targets.len(),
            "n",
        ));
    }
    let flat = logits.to_shape((b * len, vocab)).expect("rows");
    let mut score = Score { correct: 0, scored: 0 };
    for (row, target) in flat.rows().into_iter().zip(targets) {
        let Some(t) = *target else { continue };
        score.scored += 1;
        if argmax(&row) == t {
            score.correct += 1;
        }
    }
    Ok(score)
}
// ANCHOR_END: accuracy

/// The index of the largest entry (the first one on a tie).
pub(super) fn argmax(row: &ArrayRef1<f64>) -> usize {
    let mut best = 0;
    for (j, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = j;
        }
    }
    best
}
// ANCHOR_END: score_logits

/// How many scored positions were answered right.
///
/// ```
/// use attention::learn::Score;
///
/// let score = Score { correct: 3, scored: 4 };
/// assert_eq!(score.accuracy(), 0.75);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// ANCHOR: score
pub struct Score {
    /// Right answers.
    pub correct: usize,
    /// Scored positions.
    pub scored: usize,
}
// ANCHOR_END: score

impl Score {
    /// `correct / scored` (0 when nothing is scored).
    ///
    /// ```
    /// use attention::learn::Score;
    ///
    /// assert_eq!(Score { correct: 0, scored: 0 }.accuracy(), 0.0);
    /// ```
    // ANCHOR: score_accuracy
    pub fn accuracy(&self) -> f64 {
        if self.scored == 0 { 0.0 } else { self.correct as f64 / self.scored as f64 }
    }
    // ANCHOR_END: score_accuracy
}
