//! Chapter *Watching attention learn*: a tiny model, trained by hand, on tasks whose right
//! attention pattern is known in advance.
//!
//! The model, [`TinyTransformer`], is the book's layer with just enough around it to learn:
//! a token embedding, learned positions (which can be switched off), `N` multi-head
//! attention layers without a mask, each added back onto its input (the residual), and a
//! linear read-out with a bias that turns every row into one score per token of the
//! vocabulary. The loss is the cross-entropy of those scores ([`cross_entropy`]); every
//! gradient is written out by hand ([`TinyTransformer::backward`]) and a hand-written
//! [`Adam`] moves the parameters. [`train`] runs the whole loop on a [`Task`] and records
//! the loss, the accuracy on held-out sequences, and the attention weights of one fixed
//! input at chosen steps.
//!
//! Two tasks: [`Task::Reversal`] (the answer at position `i` is the token at `L − 1 − i`:
//! one layer must learn to look along the anti-diagonal) and [`Task::Induction`] (the answer
//! at a repeated token is the token that followed its previous occurrence: two layers, a
//! previous-token head and an induction head). Without positions the reversal cannot be
//! learned: the layer is permutation-equivariant (chapter *Where is each word?*), so equal
//! tokens get equal answers; [`position_blind_ceiling`] bounds what such a model can score
//! on a given set, and [`most_common_token_baseline`] is what it can expect. [`weight_on`]
//! measures how much of a head's attention lands where the answers are
//! ([`Task::sources`]), and [`heads_weight_on`] the same over a whole batch, for patterns
//! such as [`prefix_matching_sources`] and [`offset_sources`] (measured away from the answers
//! with [`away_from_answers`]);
//! [`TinyTransformer::copying_score`] and [`TinyTransformer::without_head`] test what a head
//! does with what it finds.
//!
//! # Reproducibility
//!
//! Training is a long chain of steps, each depending on the last, so a last-bit difference
//! grows into a different curve. Everything here is `f64`, every matrix product goes through
//! [`exact::matmul`] (a fixed order of summation, on every CPU), every
//! `exp` and `ln` through [`exact`] (the `libm` crate, not the system's), sums
//! are plain loops in a written order, no threads, and all randomness comes from seeded
//! `StdRng`s through `rand`'s integer and `Uniform` samplers (no normal sampler:
//! `rand_distr`'s ziggurat calls the system's `exp` in its wedge test and `ln` in its tail).
//! Two runs give the same bits, on any x86-64 machine.
//!
//! Anchors (below the doc comments): `cross_entropy`, `embed`, `embed_backward`,
//! `positions_backward`, `readout`, `readout_backward`, `adam`, `adam_step`, `model`,
//! `model_init`, `model_forward`, `model_backward`, `model_step`, `tasks`, `reversal`,
//! `induction`, `ceiling`, `accuracy`, `train_loop`; and, for the helpers those listings
//! call (each one block, which mdBook's plain include shows whole): `invalid_setting`,
//! `init_helpers`, `model_check`, `model_eval`, `loss_and_grads`, `adam_new`,
//! `adam_with_betas`, `model_update`, `grads_views`, `dropout_masks`, `task_len`,
//! `task_vocab`, `task_check`, `task_sources`, `task_targets`, `batch_new`, `task_sequence`,
//! `task_batch`, `task_probe`, `score`, `score_accuracy`, `model_score`, `score_logits`,
//! `held_out`, `train_config_model`, `recorder`, `recorder_record`, `batch_check`; and for
//! the measurements of the heads, `weight_on`, `heads_weight_on`, `prefix_matching_sources`,
//! `offset_sources`, `away_from_answers`, `head_output`, `copying_score`.

use std::collections::BTreeSet;
use std::ops::Range;

use ndarray::{
    Array1, Array2, Array3, Array4, ArrayD, ArrayRef1, ArrayRef2, ArrayRef3, ArrayRef4,
    ArrayViewD, ArrayViewMutD, Axis, s,
};
use rand::distr::{Distribution, Uniform};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::dropout::Dropout;
use crate::error::{AttentionError, Result};
use crate::exact;
use crate::grad::LayerTape;
use crate::multihead::MultiHeadAttention;
use crate::position::add_positions;

// ANCHOR: invalid_setting
fn invalid_setting(what: &str, problem: String) -> AttentionError {
    AttentionError::Invalid { what: what.into(), problem }
}
// ANCHOR_END: invalid_setting

/// The mean cross-entropy of `logits: (n, classes)` against `targets` (one per row; `None`
/// = the row is not scored), and its gradient with respect to the logits.
///
/// For a scored row with target `t`: `loss = ln Σⱼ exp(zⱼ) − z_t`, computed with the row's
/// maximum subtracted first (as the stable softmax does), and
/// `∂loss/∂zⱼ = softmax(z)ⱼ − [j = t]`. Both are divided by the number of scored rows;
/// unscored rows get a zero gradient. Rows are summed in order, with [`exact`]'s
/// `exp` and `ln`. An error when the lengths differ, a target is not below `classes`, or no
/// row is scored.
///
/// ```
/// use attention::learn::cross_entropy;
/// use ndarray::array;
///
/// let logits = array![[0.0, 0.0], [5.0, -5.0], [1.0, 2.0]];
/// let (loss, d_logits) = cross_entropy(&logits, &[Some(0), None, Some(1)]).unwrap();
/// let expected = (2f64.ln() + (1.0 + (-1f64).exp()).ln()) / 2.0;
/// assert!((loss - expected).abs() < 1e-15);
/// assert_eq!(d_logits.row(1).to_vec(), [0.0, 0.0]); // row 1 is not scored
/// assert_eq!(d_logits.row(0).to_vec(), [-0.25, 0.25]); // (softmax − one-hot) / 2
/// ```
// ANCHOR: cross_entropy
pub fn cross_entropy(
    logits: &ArrayRef2<f64>,
    targets: &[Option<usize>],
) -> Result<(f64, Array2<f64>)> {
    let (n, classes) = logits.dim();
    if targets.len() != n {
        return Err(AttentionError::mismatch("logits", n, "targets", targets.len(), "n"));
    }
    let scored = targets.iter().flatten().count();
    if scored == 0 {
        return Err(invalid_setting("targets", "no position is scored".into()));
    }
    let mut total = 0.0;
    let mut d_logits = Array2::zeros((n, classes));
    for (i, target) in targets.iter().enumerate() {
        let Some(t) = *target else { continue }; // not scored: no loss, no gradient
        if t >= classes {
            let problem = format!("target {t} of row {i} is not below classes = {classes}");
            return Err(invalid_setting("targets", problem));
        }
        let z = logits.row(i);
        let max = z.fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        let mut sum = 0.0;
        for &x in z {
            sum += exact::exp(x - max);
        }
        total += max + exact::ln(sum) - z[t]; // ln Σ exp(z) − z_t
        for (j, &x) in z.iter().enumerate() {
            let p = exact::exp(x - max) / sum;
            let one_hot = if j == t { 1.0 } else { 0.0 };
            d_logits[[i, j]] = (p - one_hot) / scored as f64;
        }
    }
    Ok((total / scored as f64, d_logits))
}
// ANCHOR_END: cross_entropy

/// The embedding lookup for a batch: `tokens: (batch, L)` → `(batch, L, d_model)`, row
/// `tokens[b, i]` of `table: (vocab, d_model)` at `[b, i, ..]`. An error names a token id
/// that is not below `vocab`.
///
/// ```
/// use attention::learn::embed;
/// use ndarray::array;
///
/// let table = array![[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]]; // (vocab, d_model) = (3, 2)
/// let x = embed(&table, &array![[2, 0], [1, 1]]).unwrap();
/// assert_eq!(x, array![[[2.0, 2.5], [0.0, 0.5]], [[1.0, 1.5], [1.0, 1.5]]]);
/// assert!(embed(&table, &array![[3]]).is_err());
/// ```
// ANCHOR: embed
pub fn embed(table: &ArrayRef2<f64>, tokens: &ArrayRef2<usize>) -> Result<Array3<f64>> {
    let (vocab, d_model) = table.dim();
    let (batch, len) = tokens.dim();
    let mut x = Array3::zeros((batch, len, d_model));
    for ((b, i), &id) in tokens.indexed_iter() {
        if id >= vocab {
            return Err(AttentionError::TokenId { id, size: vocab });
        }
        x.slice_mut(s![b, i, ..]).assign(&table.row(id));
    }
    Ok(x)
}
// ANCHOR_END: embed

/// The backward of [`embed`]: the gradient of the table, `(vocab, d_model)`. Row `t` is the
/// sum of the rows of `d_x: (batch, L, d_model)` at every position holding token `t`,
/// added in the order `b`, then `i` (a scatter-add); rows of unseen tokens are zero.
///
/// ```
/// use attention::learn::embed_backward;
/// use ndarray::array;
///
/// let tokens = array![[1, 0, 1]];
/// let d_x = array![[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]];
/// let d_table = embed_backward(&tokens, &d_x, 3).unwrap();
/// assert_eq!(d_table, array![[3.0, 4.0], [6.0, 8.0], [0.0, 0.0]]);
/// ```
// ANCHOR: embed_backward
pub fn embed_backward(
    tokens: &ArrayRef2<usize>,
    d_x: &ArrayRef3<f64>,
    vocab: usize,
) -> Result<Array2<f64>> {
    let (batch, len, d_model) = d_x.dim();
    if tokens.dim() != (batch, len) {
        let expected = format!("(batch, L) = ({batch}, {len}), as d_x, was expected");
        return Err(AttentionError::shape("tokens", tokens.shape(), &expected));
    }
    let mut d_table = Array2::zeros((vocab, d_model));
    for ((b, i), &id) in tokens.indexed_iter() {
        if id >= vocab {
            return Err(AttentionError::TokenId { id, size: vocab });
        }
        let mut row = d_table.row_mut(id);
        row += &d_x.slice(s![b, i, ..]);
    }
    Ok(d_table)
}
// ANCHOR_END: embed_backward

/// The backward of adding learned positions to every item of a batch: row `i` of the
/// gradient is `Σ_b d_x[b, i, ..]`, summed in the order of `b`. `d_x: (batch, L, d_model)`
/// gives `(L, d_model)`.
///
/// ```
/// use attention::learn::positions_backward;
/// use ndarray::array;
///
/// let d_x = array![[[1.0, 2.0], [3.0, 4.0]], [[10.0, 20.0], [30.0, 40.0]]];
/// assert_eq!(positions_backward(&d_x), array![[11.0, 22.0], [33.0, 44.0]]);
/// ```
// ANCHOR: positions_backward
pub fn positions_backward(d_x: &ArrayRef3<f64>) -> Array2<f64> {
    let (_, len, d_model) = d_x.dim();
    let mut d_positions = Array2::zeros((len, d_model));
    for item in d_x.outer_iter() {
        d_positions += &item; // one batch item after the other
    }
    d_positions
}
// ANCHOR_END: positions_backward

/// The read-out: `logits = H · W + b` for `h: (n, d_model)`, `w: (d_model, classes)`,
/// `b: (classes)`, the product through [`exact::matmul`].
///
/// ```
/// use attention::learn::readout;
/// use ndarray::array;
///
/// let h = array![[1.0, 2.0]];
/// let w = array![[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]];
/// let logits = readout(&h, &w, &array![0.5, 0.0, -3.0]).unwrap();
/// assert_eq!(logits, array![[1.5, 2.0, 0.0]]);
/// assert!(readout(&h, &w, &array![0.0]).is_err()); // b must have 3 entries
/// ```
// ANCHOR: readout
pub fn readout(
    h: &ArrayRef2<f64>,
    w: &ArrayRef2<f64>,
    b: &ArrayRef1<f64>,
) -> Result<Array2<f64>> {
    if h.ncols() != w.nrows() {
        return Err(AttentionError::mismatch("h", h.ncols(), "W", w.nrows(), "d_model"));
    }
    if b.len() != w.ncols() {
        return Err(AttentionError::mismatch("W", w.ncols(), "b", b.len(), "classes"));
    }
    let mut logits = exact::matmul(h, w)?; // (n, classes)
    logits.zip_mut_with(b, |z, &c| *z += c); // the same bias on every row
    Ok(logits)
}
// ANCHOR_END: readout

/// The gradients of [`readout`].
///
/// ```
/// use attention::learn::{readout_backward, ReadoutGrads};
/// use ndarray::array;
///
/// let ReadoutGrads { d_h, d_w, d_b } =
///     readout_backward(&array![[1.0, 2.0]], &array![[1.0], [3.0]], &array![[0.5]]).unwrap();
/// assert_eq!((d_h, d_w, d_b), (array![[0.5, 1.5]], array![[0.5], [1.0]], array![0.5]));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ReadoutGrads {
    /// `(n, d_model)`: `∂L/∂H = ∂L/∂logits · Wᵀ`.
    pub d_h: Array2<f64>,
    /// `(d_model, classes)`: `∂L/∂W = Hᵀ · ∂L/∂logits`.
    pub d_w: Array2<f64>,
    /// `(classes)`: `∂L/∂b`, the column sums of `∂L/∂logits`.
    pub d_b: Array1<f64>,
}

/// The backward of [`readout`], given the input `h: (n, d_model)`, the weight
/// `w: (d_model, classes)` and `d_logits: (n, classes)`. The bias's gradient adds the rows
/// in order; the products go through [`exact::matmul`].
///
/// ```
/// use attention::learn::readout_backward;
/// use ndarray::array;
///
/// let g = readout_backward(&array![[1.0, 2.0], [0.0, 1.0]], &array![[1.0], [3.0]],
///                          &array![[0.5], [-1.0]]).unwrap();
/// assert_eq!(g.d_b, array![-0.5]);
/// assert_eq!(g.d_w, array![[0.5], [0.0]]); // [1·0.5 + 0·(−1), 2·0.5 + 1·(−1)]
/// ```
// ANCHOR: readout_backward
pub fn readout_backward(
    h: &ArrayRef2<f64>,
    w: &ArrayRef2<f64>,
    d_logits: &ArrayRef2<f64>,
) -> Result<ReadoutGrads> {
    if d_logits.nrows() != h.nrows() {
        return Err(AttentionError::mismatch(
            "h",
            h.nrows(),
            "d_logits",
            d_logits.nrows(),
            "n",
        ));
    }
    if h.ncols() != w.nrows() {
        return Err(AttentionError::mismatch("h", h.ncols(), "W", w.nrows(), "d_model"));
    }
    if d_logits.ncols() != w.ncols() {
        return Err(AttentionError::mismatch(
            "W",
            w.ncols(),
            "d_logits",
            d_logits.ncols(),
            "classes",
        ));
    }
    let d_w = exact::matmul(&h.t(), d_logits)?; // (d_model, classes)
    let d_h = exact::matmul(d_logits, &w.t())?; // (n, d_model)
    let mut d_b = Array1::zeros(d_logits.ncols());
    for row in d_logits.rows() {
        d_b += &row; // row after row
    }
    Ok(ReadoutGrads { d_h, d_w, d_b })
}
// ANCHOR_END: readout_backward

/// Adam (Kingma and Ba), written out: for every parameter `θ` with gradient `g`, at step
/// `t = 1, 2, …`
///
/// ```text
/// m ← β₁·m + (1 − β₁)·g          v ← β₂·v + (1 − β₂)·g²
/// m̂ = m / (1 − β₁ᵗ)               v̂ = v / (1 − β₂ᵗ)
/// θ ← θ − lr · m̂ / (√v̂ + ε)
/// ```
///
/// with `m` and `v` starting at 0 (PyTorch's `torch.optim.Adam` without weight decay). The
/// powers `β₁ᵗ`, `β₂ᵗ` are kept by multiplying by `β` once per step.
///
/// ```
/// use attention::learn::Adam;
/// use ndarray::arr1;
///
/// let mut adam = Adam::new(0.1).unwrap();
/// let mut theta = arr1(&[1.0, -2.0]).into_dyn();
/// let grad = arr1(&[0.5, -0.5]).into_dyn();
/// adam.step(&mut [theta.view_mut()], &[grad.view()]).unwrap();
/// // The first step moves every parameter by almost exactly lr, against its gradient.
/// assert!((&theta - &arr1(&[0.9, -1.9]).into_dyn()).iter().all(|d| d.abs() < 1e-8));
/// assert_eq!(adam.steps(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: adam
pub struct Adam {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    beta1_t: f64,        // β₁ᵗ after t steps
    beta2_t: f64,        // β₂ᵗ
    steps: usize,        // t
    m: Vec<ArrayD<f64>>, // the first moment of every parameter tensor
    v: Vec<ArrayD<f64>>, // the second moment
}
// ANCHOR_END: adam

impl Adam {
    /// Adam with learning rate `lr` and PyTorch's defaults `β₁ = 0.9`, `β₂ = 0.999`,
    /// `ε = 1e-8`; an error unless `lr` is positive and finite.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert_eq!(Adam::new(3e-3).unwrap().lr(), 3e-3);
    /// assert!(Adam::new(0.0).is_err());
    /// ```
    // ANCHOR: adam_new
    pub fn new(lr: f64) -> Result<Self> {
        Adam::with_betas(lr, 0.9, 0.999, 1e-8)
    }
    // ANCHOR_END: adam_new

    /// Adam with every setting given: `lr > 0`, `0 ≤ β₁, β₂ < 1`, `ε > 0`.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert!(Adam::with_betas(1e-3, 0.9, 0.98, 1e-9).is_ok());
    /// assert!(Adam::with_betas(1e-3, 1.0, 0.98, 1e-9).is_err());
    /// ```
    // ANCHOR: adam_with_betas
    pub fn with_betas(lr: f64, beta1: f64, beta2: f64, eps: f64) -> Result<Self> {
        if !(lr > 0.0 && lr.is_finite()) {
            return Err(invalid_setting(
                "Adam learning rate",
                format!("must be > 0, but it is {lr}"),
            ));
        }
        for (name, beta) in [("Adam β₁", beta1), ("Adam β₂", beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(invalid_setting(
                    name,
                    format!("must be in [0, 1), but it is {beta}"),
                ));
            }
        }
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(invalid_setting("Adam ε", format!("must be > 0, but it is {eps}")));
        }
        let (m, v) = (Vec::new(), Vec::new());
        Ok(Adam { lr, beta1, beta2, eps, beta1_t: 1.0, beta2_t: 1.0, steps: 0, m, v })
    }
    // ANCHOR_END: adam_with_betas

    /// The learning rate.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert_eq!(Adam::new(0.01).unwrap().lr(), 0.01);
    /// ```
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// How many steps have been taken.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert_eq!(Adam::new(0.01).unwrap().steps(), 0);
    /// ```
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// One step: moves every tensor of `params` against the matching tensor of `grads`.
    ///
    /// The first step fixes the list: every later step must pass the same number of tensors
    /// with the same shapes, in the same order (an error says which one differs). Entries
    /// are updated one by one, each with the formula above.
    ///
    /// ```
    /// use attention::learn::Adam;
    /// use ndarray::{arr1, arr2};
    ///
    /// let mut adam = Adam::new(0.1).unwrap();
    /// let mut w = arr2(&[[1.0, 2.0]]).into_dyn();
    /// let g = arr2(&[[1.0, 0.0]]).into_dyn();
    /// adam.step(&mut [w.view_mut()], &[g.view()]).unwrap();
    /// assert_eq!(w[[0, 1]], 2.0); // a zero gradient does not move its parameter
    /// let other = arr1(&[1.0]).into_dyn();
    /// assert!(adam.step(&mut [w.view_mut()], &[other.view()]).is_err());
    /// ```
    // ANCHOR: adam_step
    pub fn step(
        &mut self,
        params: &mut [ArrayViewMutD<'_, f64>],
        grads: &[ArrayViewD<'_, f64>],
    ) -> Result<()> {
        self.check(params, grads)?;
        self.steps += 1;
        self.beta1_t *= self.beta1; // β₁ᵗ
        self.beta2_t *= self.beta2; // β₂ᵗ
        let (b1, b2) = (self.beta1, self.beta2);
        for (((theta, g), m), v) in
            params.iter_mut().zip(grads).zip(&mut self.m).zip(&mut self.v)
        {
            for (((theta, &g), m), v) in
                theta.iter_mut().zip(g.iter()).zip(m.iter_mut()).zip(v.iter_mut())
            {
                *m = b1 * *m + (1.0 - b1) * g;
                *v = b2 * *v + (1.0 - b2) * (g * g);
                let m_hat = *m / (1.0 - self.beta1_t);
                let v_hat = *v / (1.0 - self.beta2_t);
                *theta -= self.lr * m_hat / (v_hat.sqrt() + self.eps);
            }
        }
        Ok(())
    }
    // ANCHOR_END: adam_step

    /// Checks `params` against `grads` and against the tensors of earlier steps; creates
    /// the zero moments on the first step.
    fn check(
        &mut self,
        params: &[ArrayViewMutD<'_, f64>],
        grads: &[ArrayViewD<'_, f64>],
    ) -> Result<()> {
        if params.len() != grads.len() {
            let (p, g) = (params.len(), grads.len());
            return Err(AttentionError::mismatch("params", p, "grads", g, "tensors"));
        }
        if self.m.is_empty() {
            self.m = params.iter().map(|p| ArrayD::zeros(p.raw_dim())).collect();
            self.v = self.m.clone();
        }
        if self.m.len() != params.len() {
            let (p, m) = (params.len(), self.m.len());
            return Err(AttentionError::mismatch("params", p, "Adam's moments", m, "tensors"));
        }
        for (k, ((p, g), m)) in params.iter().zip(grads).zip(&self.m).enumerate() {
            for (name, shape) in [("param", p.shape()), ("grad", g.shape())] {
                if shape != m.shape() {
                    let expected =
                        format!("the shape {:?} of earlier steps was expected", m.shape());
                    return Err(AttentionError::shape(
                        &format!("{name} {k}"),
                        shape,
                        &expected,
                    ));
                }
            }
        }
        Ok(())
    }
}

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

    fn check(&self) -> Result<()> {
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
    config: ModelConfig,
    tokens: Array2<f64>,            // (vocab, d_model): one row per token
    positions: Option<Array2<f64>>, // (max_len, d_model): one row per position
    layers: Vec<MultiHeadAttention<f64>>,
    w_out: Array2<f64>, // (d_model, vocab): the read-out
    b_out: Array1<f64>, // (vocab)
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
    layers: Vec<LayerTape<f64>>,
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

/// A batch of sequences and what each position should predict.
///
/// ```
/// use attention::learn::{Batch, Task};
/// use ndarray::array;
///
/// let task = Task::Reversal { len: 3, vocab: 4 };
/// let batch = Batch::new(&task, &[vec![1, 2, 3], vec![0, 0, 2]]).unwrap();
/// assert_eq!(batch.tokens, array![[1, 2, 3], [0, 0, 2]]);
/// assert_eq!(batch.targets, [3, 2, 1, 2, 0, 0].map(Some));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// `(batch, L)`: the token ids.
    pub tokens: Array2<usize>,
    /// `batch · L` entries, row-major (item by item): the target of each position, `None`
    /// where the position is not scored.
    pub targets: Vec<Option<usize>>,
}

impl Batch {
    /// A batch of the given sequences (each of the task's length), with the task's targets.
    ///
    /// ```
    /// use attention::learn::{Batch, Task};
    ///
    /// let task = Task::Reversal { len: 3, vocab: 4 };
    /// assert!(Batch::new(&task, &[vec![1, 2]]).is_err()); // length 2, not 3
    /// assert!(Batch::new(&task, &[vec![1, 2, 4]]).is_err()); // token 4 is not below 4
    /// ```
    // ANCHOR: batch_new
    pub fn new(task: &Task, sequences: &[Vec<usize>]) -> Result<Batch> {
        task.check()?;
        let len = task.len();
        let mut tokens = Array2::zeros((sequences.len(), len));
        let mut targets = Vec::with_capacity(sequences.len() * len);
        for (b, seq) in sequences.iter().enumerate() {
            targets.extend(task.targets(seq)?);
            tokens.row_mut(b).assign(&ndarray::aview1(seq));
        }
        Ok(Batch { tokens, targets })
    }
    // ANCHOR_END: batch_new

    /// The number of sequences.
    ///
    /// ```
    /// use attention::learn::{Batch, Task};
    ///
    /// let task = Task::Reversal { len: 2, vocab: 2 };
    /// assert_eq!(Batch::new(&task, &[vec![0, 1], vec![1, 1]]).unwrap().len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.tokens.nrows()
    }

    /// Whether the batch holds no sequence.
    ///
    /// ```
    /// use attention::learn::{Batch, Task};
    ///
    /// assert!(Batch::new(&Task::Reversal { len: 2, vocab: 2 }, &[]).unwrap().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that there is one target per token: `targets.len() = batch · L` (the fields
    /// are public, so a batch built by hand can break it).
    ///
    /// ```
    /// use attention::learn::Batch;
    /// use ndarray::array;
    ///
    /// let batch = Batch { tokens: array![[0, 1, 2], [2, 1, 0]], targets: vec![None; 5] };
    /// assert_eq!(
    ///     batch.check().unwrap_err().to_string(),
    ///     "targets has shape [5] but batch · L = 2 · 3 = 6 entries were expected"
    /// );
    /// ```
    // ANCHOR: batch_check
    pub fn check(&self) -> Result<()> {
        let (b, len) = self.tokens.dim();
        if self.targets.len() != b * len {
            let expected =
                format!("batch · L = {b} · {len} = {} entries were expected", b * len);
            return Err(AttentionError::shape("targets", &[self.targets.len()], &expected));
        }
        Ok(())
    }
    // ANCHOR_END: batch_check
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

    /// The backward pass: from `d_logits: (batch, L, vocab)` (the gradient of the loss with
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
    /// let (_, d_logits) = cross_entropy(&flat, &[Some(2), Some(0)]).unwrap();
    /// let d_logits = d_logits.into_shape_with_order((1, 2, 3)).unwrap();
    /// let grads = model.backward(&tape, &d_logits).unwrap();
    /// assert_eq!(grads.tokens.row(1).to_vec(), [0.0; 4]); // token 1 was not in the input
    /// ```
    // ANCHOR: model_backward
    pub fn backward(&self, tape: &ModelTape, d_logits: &ArrayRef3<f64>) -> Result<ModelGrads> {
        if tape.layers.len() != self.layers.len() {
            let (taped, here) = (tape.layers.len(), self.layers.len());
            return Err(AttentionError::mismatch("tape", taped, "model", here, "layers"));
        }
        let (batch, len) = tape.tokens.dim();
        let (vocab, d_model) = (self.config.vocab, self.config.d_model);
        if d_logits.dim() != (batch, len, vocab) {
            let expected =
                format!("(batch, L, vocab) = {:?} was expected", (batch, len, vocab));
            return Err(AttentionError::shape("d_logits", d_logits.shape(), &expected));
        }
        let d_logits = d_logits.to_shape((batch * len, vocab)).expect("rows");
        let ReadoutGrads { d_h, d_w: w_out, d_b: b_out } =
            readout_backward(&tape.hidden, &self.w_out, &d_logits)?;
        let mut d_x = d_h.into_shape_with_order((batch, len, d_model)).expect("rows");
        let mut layers = Vec::with_capacity(self.layers.len());
        for (layer, layer_tape) in self.layers.iter().zip(&tape.layers).rev() {
            let g = layer.backward(layer_tape, &d_x)?;
            d_x += &g.d_x; // x_out = x + f(x): the gradient of x is d_x_out + f's backward
            layers.push([g.d_w_q, g.d_w_k, g.d_w_v, g.d_w_o]);
        }
        layers.reverse(); // first layer first
        let positions = self.positions.as_ref().map(|p| {
            let mut d_positions = Array2::zeros(p.dim()); // rows beyond L get no gradient
            d_positions.slice_mut(s![..len, ..]).assign(&positions_backward(&d_x));
            d_positions
        });
        let tokens = embed_backward(&tape.tokens, &d_x, vocab)?;
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
        let (loss, d_logits) = cross_entropy(&flat, &batch.targets)?;
        let d_logits = d_logits.into_shape_with_order((b, len, vocab)).expect("rows");
        Ok((loss, self.backward(&tape, &d_logits)?))
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
    fn update<F>(&mut self, change: F) -> Result<()>
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
fn score_logits(logits: &ArrayRef3<f64>, targets: &[Option<usize>]) -> Result<Score> {
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
fn argmax(row: &ArrayRef1<f64>) -> usize {
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

/// A synthetic task: how sequences are drawn and what each position should predict.
///
/// ```
/// use attention::learn::Task;
///
/// let reversal = Task::Reversal { len: 5, vocab: 4 };
/// assert_eq!(reversal.targets(&[0, 1, 2, 3, 3]).unwrap(), [3, 3, 2, 1, 0].map(Some));
/// let induction = Task::Induction { len: 6, vocab: 8, prefix: 4 };
/// assert_eq!(
///     induction.targets(&[5, 1, 7, 2, 7, 5]).unwrap(),
///     [None, None, None, None, Some(2), Some(1)]
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
// ANCHOR: tasks
pub enum Task {
    /// Reverse the sequence: the target at position `i` is the token at `len − 1 − i`.
    /// Tokens are drawn independently and uniformly from `0..vocab`.
    Reversal {
        /// The sequence length `L`.
        len: usize,
        /// The number of tokens.
        vocab: usize,
    },
    /// Induction: at a token that occurred before, predict the token that followed its
    /// previous occurrence; other positions are not scored. A sequence is `prefix`
    /// distinct tokens, then `len − prefix` distinct queries, each a token of the prefix
    /// other than its last (so its successor is in the prefix), in random order.
    Induction {
        /// The sequence length `L`.
        len: usize,
        /// The number of tokens.
        vocab: usize,
        /// How many distinct tokens open the sequence.
        prefix: usize,
    },
}
// ANCHOR_END: tasks

impl Task {
    /// The sequence length `L`.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Reversal { len: 9, vocab: 4 }.len(), 9);
    /// ```
    // ANCHOR: task_len
    pub fn len(&self) -> usize {
        match *self {
            Task::Reversal { len, .. } | Task::Induction { len, .. } => len,
        }
    }
    // ANCHOR_END: task_len

    /// Whether sequences are empty (`L = 0`; [`Task::check`] rejects that).
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert!(!Task::Reversal { len: 9, vocab: 4 }.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of tokens.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Induction { len: 12, vocab: 16, prefix: 8 }.vocab(), 16);
    /// ```
    // ANCHOR: task_vocab
    pub fn vocab(&self) -> usize {
        match *self {
            Task::Reversal { vocab, .. } | Task::Induction { vocab, .. } => vocab,
        }
    }
    // ANCHOR_END: task_vocab

    /// Checks the settings: `len ≥ 1`, `vocab ≥ 2`; for induction also
    /// `2 ≤ prefix ≤ vocab`, `prefix < len` (at least one query, so that something is
    /// scored) and `len − prefix ≤ prefix − 1` (enough distinct queries).
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert!(Task::Induction { len: 12, vocab: 16, prefix: 8 }.check().is_ok());
    /// let err = Task::Induction { len: 12, vocab: 16, prefix: 6 }.check().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "induction task: len − prefix = 6 queries need prefix ≥ 7, but prefix = 6"
    /// );
    /// let err = Task::Induction { len: 8, vocab: 16, prefix: 8 }.check().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "induction task: prefix = 8 must be at least 2, at most vocab = 16 and below \
    ///      len = 8"
    /// );
    /// ```
    // ANCHOR: task_check
    pub fn check(&self) -> Result<()> {
        let (len, vocab) = (self.len(), self.vocab());
        if len == 0 {
            return Err(AttentionError::Empty { what: "task".into(), dim: "L" });
        }
        if vocab < 2 {
            return Err(invalid_setting(
                "task",
                format!("vocab must be at least 2, but it is {vocab}"),
            ));
        }
        if let Task::Induction { prefix, .. } = *self {
            let what = "induction task";
            if !(2..=vocab).contains(&prefix) || prefix >= len {
                let problem = format!(
                    "prefix = {prefix} must be at least 2, at most vocab = {vocab} and \
                     below len = {len}"
                );
                return Err(invalid_setting(what, problem));
            }
            if len - prefix > prefix - 1 {
                let (q, p) = (len - prefix, prefix);
                let problem = format!(
                    "len − prefix = {q} queries need prefix ≥ {}, but prefix = {p}",
                    q + 1
                );
                return Err(invalid_setting(what, problem));
            }
        }
        Ok(())
    }
    // ANCHOR_END: task_check

    /// Where the answer of every position of `tokens` is: the position whose token is the
    /// target (`None` = the position is not scored). This is the task's rule, and the
    /// attention pattern that solves it: a model that puts all its weight there and copies
    /// what it finds is right. An error when the length is not `L` or a token is not below
    /// `vocab`.
    ///
    /// Reversal: position `L − 1 − i`. Induction: position `i` is scored when `tokens[i]`
    /// occurred before, at `j < i` (the latest such `j`), and its answer is at `j + 1`.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Reversal { len: 4, vocab: 2 }.sources(&[0, 0, 1, 1]).unwrap(),
    ///            [3, 2, 1, 0].map(Some));
    /// let task = Task::Induction { len: 5, vocab: 4, prefix: 3 };
    /// let sources = task.sources(&[3, 0, 2, 3, 0]).unwrap();
    /// assert_eq!(sources, [None, None, None, Some(1), Some(2)]);
    /// assert!(task.sources(&[3, 0, 2]).is_err());
    /// ```
    // ANCHOR: reversal
    // ANCHOR: task_sources
    pub fn sources(&self, tokens: &[usize]) -> Result<Vec<Option<usize>>> {
        let (len, vocab) = (self.len(), self.vocab());
        if tokens.len() != len {
            return Err(AttentionError::mismatch("tokens", tokens.len(), "task", len, "L"));
        }
        if let Some(&id) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(AttentionError::TokenId { id, size: vocab });
        }
        Ok(match self {
            Task::Reversal { .. } => (0..len).map(|i| Some(len - 1 - i)).collect(),
            // ANCHOR_END: reversal
            // ANCHOR: induction
            Task::Induction { .. } => (0..len)
                .map(|i| {
                    let previous = (0..i).rev().find(|&j| tokens[j] == tokens[i])?;
                    Some(previous + 1) // the token after the previous occurrence
                })
                .collect(),
            // ANCHOR_END: induction
            // ANCHOR: reversal
        })
    }
    // ANCHOR_END: task_sources

    // ANCHOR_END: reversal
    /// The target of every position of `tokens`: the token at its
    /// [source](Task::sources), `None` where the position is not scored.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// let task = Task::Induction { len: 5, vocab: 4, prefix: 3 };
    /// let targets = task.targets(&[3, 0, 2, 3, 0]).unwrap();
    /// assert_eq!(targets, [None, None, None, Some(0), Some(2)]);
    /// ```
    // ANCHOR: reversal
    // ANCHOR: task_targets
    pub fn targets(&self, tokens: &[usize]) -> Result<Vec<Option<usize>>> {
        let sources = self.sources(tokens)?;
        Ok(sources.into_iter().map(|source| source.map(|j| tokens[j])).collect())
    }
    // ANCHOR_END: task_targets
    // ANCHOR_END: reversal

    /// One random sequence of the task, drawn from `rng`.
    ///
    /// Reversal: `L` tokens, each `rng.random_range(0..vocab)`. Induction: the prefix is
    /// the first `prefix` entries of a shuffle of `0..vocab`; the queries are the first
    /// `len − prefix` entries of a shuffle of the prefix's positions `0..prefix − 1`. An
    /// error when the settings fail [`Task::check`].
    ///
    /// ```
    /// use attention::learn::Task;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let task = Task::Induction { len: 10, vocab: 12, prefix: 6 };
    /// let seq = task.sequence(&mut StdRng::seed_from_u64(3)).unwrap();
    /// let scored = task.targets(&seq).unwrap().iter().flatten().count();
    /// assert_eq!((seq.len(), scored), (10, 4)); // every query is scored
    /// let no_prefix = Task::Induction { len: 10, vocab: 12, prefix: 0 };
    /// assert!(no_prefix.sequence(&mut StdRng::seed_from_u64(3)).is_err());
    /// ```
    // ANCHOR: task_sequence
    pub fn sequence<R: Rng + ?Sized>(&self, rng: &mut R) -> Result<Vec<usize>> {
        self.check()?;
        Ok(match *self {
            Task::Reversal { len, vocab } => {
                (0..len).map(|_| rng.random_range(0..vocab)).collect()
            }
            Task::Induction { len, vocab, prefix } => {
                let mut tokens: Vec<usize> = (0..vocab).collect();
                tokens.shuffle(rng);
                tokens.truncate(prefix);
                let mut picks: Vec<usize> = (0..prefix - 1).collect();
                picks.shuffle(rng);
                let queries: Vec<usize> =
                    picks[..len - prefix].iter().map(|&j| tokens[j]).collect();
                tokens.extend(queries);
                tokens
            }
        })
    }
    // ANCHOR_END: task_sequence

    /// `n` random sequences and their targets; sequences in `exclude` (the held-out set)
    /// are drawn again, so that training never sees them.
    ///
    /// ```
    /// use attention::learn::Task;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let task = Task::Reversal { len: 7, vocab: 4 };
    /// let batch = task.batch(32, &mut StdRng::seed_from_u64(0), None).unwrap();
    /// assert_eq!((batch.tokens.dim(), batch.targets.len()), ((32, 7), 32 * 7));
    /// ```
    // ANCHOR: task_batch
    pub fn batch<R: Rng + ?Sized>(
        &self,
        n: usize,
        rng: &mut R,
        exclude: Option<&BTreeSet<Vec<usize>>>,
    ) -> Result<Batch> {
        self.check()?;
        let mut sequences = Vec::with_capacity(n);
        let mut draws = 0usize;
        while sequences.len() < n {
            draws += 1;
            if draws > 1000 * (n + 1) {
                let problem = "almost every sequence drawn is excluded (held out)".into();
                return Err(invalid_setting("training batch", problem));
            }
            let seq = self.sequence(rng)?;
            if !exclude.is_some_and(|set| set.contains(&seq)) {
                sequences.push(seq);
            }
        }
        Batch::new(self, &sequences)
    }
    // ANCHOR_END: task_batch

    /// A fixed input whose attention the chapter draws: reversal, the tokens `i mod vocab`;
    /// induction, the prefix `0, 1, …, prefix − 1` followed by the queries
    /// `0, 1, …, len − prefix − 1` in order (so the right pattern is easy to read: a
    /// diagonal stripe). An error when the settings fail [`Task::check`].
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Reversal { len: 5, vocab: 4 }.probe().unwrap(), [0, 1, 2, 3, 0]);
    /// let induction = Task::Induction { len: 7, vocab: 8, prefix: 4 };
    /// assert_eq!(induction.probe().unwrap(), [0, 1, 2, 3, 0, 1, 2]);
    /// assert!(Task::Induction { len: 7, vocab: 8, prefix: 9 }.probe().is_err());
    /// ```
    // ANCHOR: task_probe
    pub fn probe(&self) -> Result<Vec<usize>> {
        self.check()?;
        Ok(match *self {
            Task::Reversal { len, vocab } => (0..len).map(|i| i % vocab).collect(),
            Task::Induction { len, prefix, .. } => {
                (0..prefix).chain(0..len - prefix).collect()
            }
        })
    }
    // ANCHOR_END: task_probe
}

/// The most a position-blind model can score on `batch`, for any task: an upper bound.
///
/// Without positions every layer is permutation-equivariant, so two positions of one
/// sequence holding the same token are the same row all the way through and get the same
/// answer. For each sequence and each token `t` in it, the best that one answer can do is
/// the most common target among the scored positions holding `t`:
/// `Σ_t max_o #{i : x_i = t, target_i = o}`, summed over the sequences. An error when the
/// batch fails [`Batch::check`].
///
/// ```
/// use attention::learn::{position_blind_ceiling, Batch, Task};
///
/// let task = Task::Reversal { len: 5, vocab: 4 };
/// // 0 1 2 1 0 is its own reverse: every position can be right.
/// // 0 1 2 3 1: the two 1s want 3 and 0; the 0 wants 1, 2 is the middle, 3 wants 1.
/// let batch = Batch::new(&task, &[vec![0, 1, 2, 1, 0], vec![0, 1, 2, 3, 1]]).unwrap();
/// let ceiling = position_blind_ceiling(&batch).unwrap();
/// assert_eq!((ceiling.correct, ceiling.scored), (5 + 4, 10));
/// ```
// ANCHOR: ceiling
pub fn position_blind_ceiling(batch: &Batch) -> Result<Score> {
    batch.check()?; // one target per token
    let len = batch.tokens.ncols();
    let mut score = Score { correct: 0, scored: 0 };
    for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
        let targets = &batch.targets[b * len..(b + 1) * len];
        // (token, target) pairs of the scored positions, sorted: equal pairs are adjacent.
        let mut pairs: Vec<(usize, usize)> =
            seq.iter().zip(targets).filter_map(|(&t, o)| Some((t, (*o)?))).collect();
        pairs.sort_unstable();
        score.scored += pairs.len();
        let mut i = 0;
        while i < pairs.len() {
            let token = pairs[i].0;
            let mut best = 0; // the largest count of one target among this token's positions
            while i < pairs.len() && pairs[i].0 == token {
                let run = pairs[i..].iter().take_while(|&&p| p == pairs[i]).count();
                best = best.max(run);
                i += run;
            }
            score.correct += best;
        }
    }
    Ok(score)
}
// ANCHOR_END: ceiling

/// The score of a simple position-blind strategy: answer every position of a sequence with
/// the sequence's most common token (the lowest id on a tie). It is computed the same way
/// for any batch, task and `L`; an error only when the batch fails [`Batch::check`].
///
/// For reversal with an **odd** `L` and independent, uniform tokens it is the best any
/// position-blind model can expect. Such a model answers a function `o(t)` of the token `t`
/// and of the sequence's bag of tokens, which all orders of the bag share, and every order
/// is equally likely. With `c_t` = how many times `t` occurs, a position other than the
/// middle holds `t` while its mirror holds `o` with probability
/// `c_t·(c_o − [o = t])/(L·(L − 1))`; the middle of an odd `L` is its own mirror and holds
/// `t` with probability `c_t/L`. Summed over the `L − 1` others and the middle, the
/// expected number of positions holding `t` whose mirror holds `o` is `c_t·c_o/L`, so the
/// expected score is `Σ_t c_t·c_{o(t)}/L²`, largest when every `o(t)` is the most common
/// token: `c_max/L`.
///
/// For an **even** `L` there is no middle and that count is `c_t·(c_o − [o = t])/(L − 1)`:
/// a token's own copies count one less, and answering another token can do better. On the
/// bag `{0, 0, 1, 1}` this strategy expects 1/2 (`c_max/L`), while answering `1 − t`
/// expects 2/3. The function then still returns this strategy's score, which is no longer
/// the best expectation. (On a finite set a model can also beat an expectation by luck;
/// [`position_blind_ceiling`] is the bound that always holds.)
///
/// ```
/// use attention::learn::{most_common_token_baseline, Batch, Task};
///
/// let task = Task::Reversal { len: 5, vocab: 4 };
/// let batch = Batch::new(&task, &[vec![0, 1, 2, 1, 0], vec![3, 1, 2, 3, 3]]).unwrap();
/// // Answer 0 everywhere in the first (2 right: the two 0s mirror each other), 3 in the
/// // second (its mirror targets are 3, 3, 2, 1, 3).
/// let score = most_common_token_baseline(&batch).unwrap();
/// assert_eq!((score.correct, score.scored), (2 + 3, 10));
/// ```
pub fn most_common_token_baseline(batch: &Batch) -> Result<Score> {
    batch.check()?;
    let len = batch.tokens.ncols();
    let mut score = Score { correct: 0, scored: 0 };
    for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
        let answer = most_common(seq.iter().copied());
        for target in batch.targets[b * len..(b + 1) * len].iter().flatten() {
            score.scored += 1;
            score.correct += usize::from(*target == answer);
        }
    }
    Ok(score)
}

/// The most common token of `tokens` (the lowest id on a tie; 0 when empty).
fn most_common(tokens: impl IntoIterator<Item = usize>) -> usize {
    let mut sorted: Vec<usize> = tokens.into_iter().collect();
    sorted.sort_unstable(); // equal tokens are adjacent, lower ids first
    let (mut answer, mut most, mut i) = (0, 0, 0);
    while i < sorted.len() {
        let run = sorted[i..].iter().take_while(|&&t| t == sorted[i]).count();
        if run > most {
            (answer, most) = (sorted[i], run);
        }
        i += run;
    }
    answer
}

/// How much of its attention a head puts where the answers are: the mean of
/// `weights[i, sources[i]]` over the rows `i` that have a source (see [`Task::sources`]).
/// 1 means every such row looks only at its answer; a uniform row over `L` keys gives
/// `1/L`. An error when `weights` is not `(L, L)` with `L = sources.len()`, a source is not
/// below `L`, or no row has a source.
///
/// ```
/// use attention::learn::weight_on;
/// use ndarray::array;
///
/// let weights = array![[0.1, 0.9], [0.6, 0.4]];
/// assert_eq!(weight_on(&weights, &[Some(1), Some(0)]).unwrap(), 0.75); // (0.9 + 0.6) / 2
/// assert_eq!(weight_on(&weights, &[None, Some(1)]).unwrap(), 0.4);
/// assert!(weight_on(&weights, &[None, None]).is_err());
/// ```
// ANCHOR: weight_on
pub fn weight_on(weights: &ArrayRef2<f64>, sources: &[Option<usize>]) -> Result<f64> {
    let len = sources.len();
    if weights.dim() != (len, len) {
        let expected = format!("(L, L) = ({len}, {len}) was expected, one row per source");
        return Err(AttentionError::shape("weights", weights.shape(), &expected));
    }
    let mut total = 0.0;
    let mut rows = 0;
    for (i, source) in sources.iter().enumerate() {
        let Some(j) = *source else { continue };
        if j >= len {
            return Err(invalid_setting(
                "sources",
                format!("source {j} of row {i} is not below L = {len}"),
            ));
        }
        total += weights[[i, j]];
        rows += 1;
    }
    if rows == 0 {
        return Err(invalid_setting("sources", "no row has a source".into()));
    }
    Ok(total / rows as f64)
}
// ANCHOR_END: weight_on

/// [`weight_on`] for a whole batch and every head at once: for each head of
/// `weights: (batch, heads, L, L)`, the mean of `weights[b, h, i, j]` over the rows `(b, i)`
/// whose source `sources[b·L + i]` is `Some(j)` (row-major, as a [`Batch`]'s targets). The
/// rows are pooled, summed sequence after sequence. An error when `sources` does not have
/// `batch · L` entries, a source is not below `L`, or no row has a source.
///
/// ```
/// use attention::learn::heads_weight_on;
/// use ndarray::array;
///
/// // One sequence of 2 tokens, two heads: head 0 looks back, head 1 at itself.
/// let weights = array![[[[1.0, 0.0], [0.75, 0.25]], [[1.0, 0.0], [0.0, 1.0]]]];
/// let on = heads_weight_on(&weights, &[None, Some(0)]).unwrap(); // row 1 looks at 0
/// assert_eq!(on, [0.75, 0.0]);
/// assert!(heads_weight_on(&weights, &[None, None]).is_err());
/// ```
// ANCHOR: heads_weight_on
pub fn heads_weight_on(
    weights: &ArrayRef4<f64>,
    sources: &[Option<usize>],
) -> Result<Vec<f64>> {
    let (batch, heads, len, keys) = weights.dim();
    if sources.len() != batch * len || keys != len {
        let n = sources.len();
        let expected = format!(
            "(batch, heads, L, L) with batch · L = {n}, one source per row, was expected"
        );
        return Err(AttentionError::shape("weights", weights.shape(), &expected));
    }
    let mut rows = 0;
    for (k, source) in sources.iter().enumerate() {
        let Some(j) = *source else { continue };
        if j >= len {
            let problem = format!("source {j} of row {k} is not below L = {len}");
            return Err(invalid_setting("sources", problem));
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(invalid_setting("sources", "no row has a source".into()));
    }
    let mut means = Vec::with_capacity(heads);
    for h in 0..heads {
        let mut total = 0.0;
        for (k, source) in sources.iter().enumerate() {
            if let Some(j) = *source {
                total += weights[[k / len, h, k % len, j]];
            }
        }
        means.push(total / rows as f64);
    }
    Ok(means)
}
// ANCHOR_END: heads_weight_on

/// Where a *prefix-matching* head looks, in every sequence of `tokens: (batch, L)`: at a
/// position whose token occurred before, the position right after its latest earlier
/// occurrence; `None` at a token's first occurrence. Row-major, one entry per position.
///
/// This is the rule of [`Task::Induction`] read off the tokens alone, so it applies to any
/// sequence; on the induction task it gives the same positions as [`Task::sources`].
///
/// ```
/// use attention::learn::prefix_matching_sources;
/// use ndarray::array;
///
/// // "a b c b a": the second b looks after the first b (at c), the second a at b.
/// let sources = prefix_matching_sources(&array![[0, 1, 2, 1, 0]]);
/// assert_eq!(sources, [None, None, None, Some(2), Some(1)]);
/// ```
// ANCHOR: prefix_matching_sources
pub fn prefix_matching_sources(tokens: &ArrayRef2<usize>) -> Vec<Option<usize>> {
    let mut sources = Vec::with_capacity(tokens.len());
    for seq in tokens.rows() {
        for i in 0..seq.len() {
            let earlier = (0..i).rev().find(|&j| seq[j] == seq[i]);
            sources.push(earlier.map(|j| j + 1)); // the token after the earlier occurrence
        }
    }
    sources
}
// ANCHOR_END: prefix_matching_sources

/// A fixed-offset pattern over `batch` sequences of length `len`: row `i` looks `back`
/// positions back, for the rows `i` in `rows` with `i ≥ back`; `None` for every other row.
/// Row-major, like a [`Batch`]'s targets. `back = 1` is a previous-token head's pattern.
///
/// ```
/// use attention::learn::offset_sources;
///
/// assert_eq!(offset_sources(1, 4, 1..3, 1), [None, Some(0), Some(1), None]);
/// assert_eq!(offset_sources(2, 3, 0..3, 2), [None, None, Some(0), None, None, Some(0)]);
/// ```
// ANCHOR: offset_sources
pub fn offset_sources(
    batch: usize,
    len: usize,
    rows: Range<usize>,
    back: usize,
) -> Vec<Option<usize>> {
    let row = |i: usize| (rows.contains(&i) && i >= back).then(|| i - back);
    (0..batch).flat_map(|_| (0..len).map(row)).collect()
}
// ANCHOR_END: offset_sources

/// `sources` without the rows whose source is also their answer: `None` wherever
/// `sources[k] == answers[k]`, `sources[k]` everywhere else (both row-major, one entry per
/// position, like a [`Batch`]'s targets). [`heads_weight_on`] with the result measures a fixed
/// pattern, such as [`offset_sources`], only on the rows where following it is *not* the
/// same as finding the answer. On the induction task some answers lie 7 back, and a perfect
/// induction head puts its weight 7 back on exactly those rows; on the others it puts none
/// there, where a head that looks 7 back whatever the tokens puts all of it. An error when
/// the two lists differ in length.
///
/// ```
/// use attention::learn::{away_from_answers, offset_sources};
///
/// let back = offset_sources(1, 4, 0..4, 2); // rows 2 and 3 look 2 back: at 0 and at 1
/// let answers = [None, None, Some(0), Some(2)]; // row 2's answer is 2 back, row 3's is not
/// assert_eq!(away_from_answers(&back, &answers).unwrap(), [None, None, None, Some(1)]);
/// assert!(away_from_answers(&back, &answers[..3]).is_err());
/// ```
// ANCHOR: away_from_answers
pub fn away_from_answers(
    sources: &[Option<usize>],
    answers: &[Option<usize>],
) -> Result<Vec<Option<usize>>> {
    if sources.len() != answers.len() {
        let (n, m) = (sources.len(), answers.len());
        return Err(AttentionError::mismatch("sources", n, "answers", m, "length"));
    }
    let kept = |(s, a): (&Option<usize>, &Option<usize>)| if s == a { None } else { *s };
    Ok(sources.iter().zip(answers).map(kept).collect())
}
// ANCHOR_END: away_from_answers

/// Looking inside a trained model: one head's share of a layer's output, the model without a
/// head, and whether a head copies what it attends to.
impl TinyTransformer {
    /// The same model with head `head` of layer `layer` (both from 0) removed: that layer's
    /// [`MultiHeadAttention::without_head`], its rows of `W_O` set to zero, so the head
    /// still attends but adds nothing to the rows (an *ablation*). An error names a layer or
    /// head that does not exist.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let ablated = model.without_head(0, 1).unwrap();
    /// let tokens = array![[0, 3, 1]];
    /// assert_ne!(ablated.forward(&tokens).unwrap().logits, model.forward(&tokens).unwrap().logits);
    /// // The head is not heard, but it still attends as before.
    /// assert_eq!(ablated.forward(&tokens).unwrap().weights, model.forward(&tokens).unwrap().weights);
    /// assert!(model.without_head(1, 0).is_err() && model.without_head(0, 2).is_err());
    /// ```
    pub fn without_head(&self, layer: usize, head: usize) -> Result<TinyTransformer> {
        let Some(attention) = self.layers.get(layer) else {
            let problem = format!("the model has {} layers", self.layers.len());
            return Err(invalid_setting(&format!("layer {layer}"), problem));
        };
        let mut model = self.clone();
        model.layers[layer] = attention.without_head(head)?;
        Ok(model)
    }

    /// What head `head` of layer `layer` adds to the rows of `tokens: (batch, L)`: its share
    /// of the layer's output, `(batch, L, d_model)` (the layer's output is the sum of its
    /// heads' shares), and its weights `(batch, L, L)`; evaluation mode, read off the tape of
    /// [`TinyTransformer::forward_train`]. An error as for [`TinyTransformer::forward`], or
    /// for a layer or head that does not exist.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 2,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let tokens = array![[0, 3, 1], [2, 2, 1]];
    /// let (share, weights) = model.head_output(&tokens, 1, 0).unwrap();
    /// assert_eq!((share.dim(), weights.dim()), ((2, 3, 4), (2, 3, 3)));
    /// // Head 0's weights are the ones the forward pass computes.
    /// let all = &model.forward(&tokens).unwrap().weights[1];
    /// assert_eq!(weights, all.index_axis(ndarray::Axis(1), 0));
    /// assert!(model.head_output(&tokens, 2, 0).is_err());
    /// ```
    // ANCHOR: head_output
    pub fn head_output(
        &self,
        tokens: &ArrayRef2<usize>,
        layer: usize,
        head: usize,
    ) -> Result<(Array3<f64>, Array3<f64>)> {
        let Some(attention) = self.layers.get(layer) else {
            let problem = format!("the model has {} layers", self.layers.len());
            return Err(invalid_setting(&format!("layer {layer}"), problem));
        };
        let heads = attention.heads();
        if head >= heads {
            let problem = format!("the layer has {heads} heads, numbered 0 to {}", heads - 1);
            return Err(invalid_setting(&format!("head {head}"), problem));
        }
        let (_, tape) = self.forward_train(tokens, None)?;
        let tape = &tape.layers[layer];
        // merged · W_O: head h's columns of merged meet rows h·d_head .. (h+1)·d_head of W_O.
        let (batch, len) = tokens.dim();
        let d_head = self.config.d_model / heads;
        let cols = head * d_head..(head + 1) * d_head;
        let merged = tape.merged().slice(s![.., .., cols.clone()]);
        let rows = merged.to_shape((batch * len, d_head)).expect("rows");
        let [_, _, _, w_o] = attention.projections();
        let share = exact::matmul(&rows, &w_o.weight().slice(s![cols, ..]))?;
        let share =
            share.into_shape_with_order((batch, len, self.config.d_model)).expect("rows");
        let weights = tape.weights().index_axis(Axis(1), head).to_owned();
        Ok((share, weights))
    }
    // ANCHOR_END: head_output

    /// Whether head `head` of layer `layer` *copies*: at every row `k` (row-major over
    /// `tokens: (batch, L)`) where `rows[k]` is `Some`, read the head's share of the output
    /// ([`TinyTransformer::head_output`]) through the read-out's weight `W_out` (no bias),
    /// and count it right when its largest score (the lowest id on a tie) is the token the
    /// head attends to most (the earliest key on a tie). A related signature of what Olsson
    /// et al. (2022) call copying ("the head's output increases the logit corresponding to
    /// the attended-to token"), measured on the given data, here the task's own sequences.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let score = model.copying_score(&array![[0, 3, 1]], &[None, Some(0), Some(2)], 0, 1);
    /// assert_eq!(score.unwrap().scored, 2);
    /// assert!(model.copying_score(&array![[0, 3, 1]], &[None; 3], 0, 1).is_err()); // no row
    /// assert!(model.copying_score(&array![[0, 3, 1]], &[Some(0); 2], 0, 1).is_err());
    /// ```
    // ANCHOR: copying_score
    pub fn copying_score(
        &self,
        tokens: &ArrayRef2<usize>,
        rows: &[Option<usize>],
        layer: usize,
        head: usize,
    ) -> Result<Score> {
        let (batch, len) = tokens.dim();
        if rows.len() != batch * len {
            let n = batch * len;
            return Err(AttentionError::mismatch(
                "rows",
                rows.len(),
                "tokens",
                n,
                "batch · L",
            ));
        }
        if rows.iter().all(Option::is_none) {
            return Err(invalid_setting("rows", "no row is counted".into()));
        }
        let (share, weights) = self.head_output(tokens, layer, head)?;
        let d_model = self.config.d_model;
        let flat = share.into_shape_with_order((batch * len, d_model)).expect("rows");
        let scores = exact::matmul(&flat, &self.w_out)?; // (batch · L, vocab)
        let mut score = Score { correct: 0, scored: 0 };
        for (k, row) in rows.iter().enumerate() {
            if row.is_none() {
                continue;
            }
            let (b, i) = (k / len, k % len);
            let attended = tokens[[b, argmax(&weights.slice(s![b, i, ..]))]];
            score.scored += 1;
            score.correct += usize::from(argmax(&scores.row(k)) == attended);
        }
        Ok(score)
    }
    // ANCHOR_END: copying_score
}

/// The settings of a training run.
///
/// ```
/// use attention::learn::TrainConfig;
///
/// let config = TrainConfig::reversal();
/// assert_eq!((config.layers, config.task.len()), (1, 9));
/// assert_eq!(TrainConfig::induction().layers, 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// What to learn.
    pub task: Task,
    /// The model width.
    pub d_model: usize,
    /// Heads per layer.
    pub heads: usize,
    /// Attention layers.
    pub layers: usize,
    /// Whether the model has learned positions.
    pub positions: bool,
    /// Optimiser steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Attention dropout probability during training (0: none).
    pub dropout: f64,
    /// The seed every random draw derives from.
    pub seed: u64,
    /// How many held-out sequences measure the accuracy.
    pub held_out: usize,
    /// Measure the held-out loss and accuracy every this many steps (and at 0 and at the
    /// end).
    pub eval_every: usize,
    /// The steps after which the attention weights of the task's probe are kept (0 =
    /// before training).
    pub snapshot_steps: Vec<usize>,
}

impl TrainConfig {
    /// The chapter's reversal run: `L = 9`, 4 tokens, one layer of 2 heads, `d_model = 32`,
    /// 200 steps of 32 sequences, Adam with `lr = 5e-3`, no dropout, 1000 held-out
    /// sequences (measured every 5 steps), snapshots after 0, 10, 20, 30 and 200 steps.
    ///
    /// ```
    /// use attention::learn::{Task, TrainConfig};
    ///
    /// assert_eq!(TrainConfig::reversal().task, Task::Reversal { len: 9, vocab: 4 });
    /// ```
    pub fn reversal() -> Self {
        TrainConfig {
            task: Task::Reversal { len: 9, vocab: 4 },
            d_model: 32,
            heads: 2,
            layers: 1,
            positions: true,
            steps: 200,
            batch_size: 32,
            lr: 5e-3,
            dropout: 0.0,
            seed: 12,
            held_out: 1000,
            eval_every: 5,
            snapshot_steps: vec![0, 10, 20, 30, 200],
        }
    }

    /// The chapter's induction run: `L = 14` (8 distinct tokens, then 6 queries), 16 tokens,
    /// two layers of 2 heads, `d_model = 32`, 1000 steps of 32 sequences, Adam with
    /// `lr = 5e-3`, no dropout, 500 held-out sequences (measured every 25 steps), snapshots
    /// after 0, 200, 300, 400 and 1000 steps.
    ///
    /// ```
    /// use attention::learn::TrainConfig;
    ///
    /// assert!(TrainConfig::induction().positions);
    /// ```
    pub fn induction() -> Self {
        TrainConfig {
            task: Task::Induction { len: 14, vocab: 16, prefix: 8 },
            d_model: 32,
            heads: 2,
            layers: 2,
            positions: true,
            steps: 1000,
            batch_size: 32,
            lr: 5e-3,
            dropout: 0.0,
            seed: 12,
            held_out: 500,
            eval_every: 25,
            snapshot_steps: vec![0, 200, 300, 400, 1000],
        }
    }

    /// Checks the task, the model's shape, and that `batch_size` and `held_out` are at
    /// least 1 (the learning rate and the dropout probability are checked by [`Adam`] and
    /// [`Dropout`]).
    ///
    /// ```
    /// use attention::learn::TrainConfig;
    ///
    /// assert!(TrainConfig::reversal().check().is_ok());
    /// let config = TrainConfig { held_out: 0, ..TrainConfig::reversal() };
    /// assert_eq!(config.check().unwrap_err().to_string(), "held_out: must be at least 1");
    /// ```
    pub fn check(&self) -> Result<()> {
        self.task.check()?;
        self.model().check()?;
        for (what, size) in [("batch_size", self.batch_size), ("held_out", self.held_out)] {
            if size == 0 {
                return Err(invalid_setting(what, "must be at least 1".into()));
            }
        }
        Ok(())
    }

    /// The model this configuration trains.
    ///
    /// ```
    /// use attention::learn::TrainConfig;
    ///
    /// let model = TrainConfig::reversal().model();
    /// assert_eq!((model.vocab, model.max_len), (4, 9));
    /// ```
    // ANCHOR: train_config_model
    pub fn model(&self) -> ModelConfig {
        ModelConfig {
            vocab: self.task.vocab(),
            max_len: self.task.len(),
            d_model: self.d_model,
            heads: self.heads,
            layers: self.layers,
            positions: self.positions,
        }
    }
    // ANCHOR_END: train_config_model
}

/// The held-out loss and accuracy after `step` updates.
///
/// ```
/// use attention::learn::{Evaluation, Score};
///
/// let e = Evaluation { step: 0, loss: 1.4, score: Score { correct: 1, scored: 4 } };
/// assert_eq!(e.score.accuracy(), 0.25);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Updates done.
    pub step: usize,
    /// Mean cross-entropy on the held-out set.
    pub loss: f64,
    /// Right answers on the held-out set.
    pub score: Score,
}

/// The model after `step` updates.
///
/// ```
/// use attention::learn::{Snapshot, TrainConfig, TinyTransformer};
/// use rand::{SeedableRng, rngs::StdRng};
///
/// let config = TrainConfig::reversal();
/// let model = TinyTransformer::new(&config.model(), &mut StdRng::seed_from_u64(0)).unwrap();
/// let s = Snapshot { step: 0, model };
/// let probe = config.task.probe().unwrap();
/// assert_eq!(s.weights(&probe).unwrap()[0].dim(), (2, 9, 9)); // one layer, two heads
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Updates done.
    pub step: usize,
    /// The model at that step.
    pub model: TinyTransformer,
}

impl Snapshot {
    /// The attention weights of the model at that step on one sequence, `probe` (as
    /// [`TrainingRun::probe`]): one `(heads, L, L)` array per layer. An error as for
    /// [`TinyTransformer::forward`].
    ///
    /// ```
    /// use attention::learn::{train, TrainConfig};
    ///
    /// let mut config = TrainConfig::reversal();
    /// (config.steps, config.held_out, config.snapshot_steps) = (3, 20, vec![0, 3]);
    /// let run = train(&config).unwrap();
    /// let weights = run.snapshots[1].weights(&run.probe).unwrap();
    /// assert_eq!((weights.len(), weights[0].dim()), (1, (2, 9, 9)));
    /// assert_eq!(weights, run.snapshots[1].weights(&run.probe).unwrap()); // the same bits
    /// ```
    pub fn weights(&self, probe: &[usize]) -> Result<Vec<Array3<f64>>> {
        let tokens = ndarray::aview1(probe).insert_axis(Axis(0)); // (1, L)
        let weights = self.model.forward(&tokens)?.weights;
        Ok(weights.into_iter().map(|w| w.index_axis_move(Axis(0), 0)).collect())
    }
}

/// Everything a training run records.
///
/// ```
/// use attention::learn::{train, TrainConfig};
///
/// let mut config = TrainConfig::reversal();
/// (config.steps, config.held_out, config.snapshot_steps) = (3, 20, vec![0, 3]);
/// let run = train(&config).unwrap();
/// assert_eq!((run.losses.len(), run.snapshots.len()), (3, 2));
/// assert_eq!(run.evals.first().unwrap().step, 0);
/// ```
#[derive(Debug, Clone)]
pub struct TrainingRun {
    /// The training loss of every step's batch (before that step's update).
    pub losses: Vec<f64>,
    /// The held-out loss and accuracy at step 0, every `eval_every` steps and at the end.
    pub evals: Vec<Evaluation>,
    /// The model at the requested steps (the probe's attention: [`Snapshot::weights`]).
    pub snapshots: Vec<Snapshot>,
    /// The fixed input of the snapshots ([`Task::probe`]).
    pub probe: Vec<usize>,
    /// The held-out sequences.
    pub held_out: Batch,
    /// The trained model.
    pub model: TinyTransformer,
}

/// Trains a [`TinyTransformer`] on `config.task` and records the run.
///
/// Randomness: a generator seeded with `config.seed` draws four seeds, in this order, for
/// the held-out set, the model's initialisation, the training batches and the dropout
/// masks, each then a `StdRng` of its own; so the held-out set and the batches do not
/// depend on the model's shape. The held-out set is `held_out` distinct sequences; training
/// batches never contain one of them.
///
/// Each step: a fresh batch, the dropout masks (if `dropout > 0`), the loss and gradients,
/// one Adam step.
///
/// ```
/// use attention::learn::{train, TrainConfig};
///
/// let mut config = TrainConfig::reversal();
/// (config.steps, config.held_out, config.eval_every) = (20, 50, 10);
/// let run = train(&config).unwrap();
/// assert_eq!(run.evals.iter().map(|e| e.step).collect::<Vec<_>>(), [0, 10, 20]);
/// assert!(run.losses[19] < run.losses[0]);
/// ```
// ANCHOR: train_loop
pub fn train(config: &TrainConfig) -> Result<TrainingRun> {
    config.check()?;
    let dropout = Dropout::new(config.dropout)?;
    let mut seeds = StdRng::seed_from_u64(config.seed);
    let [held_seed, init_seed, data_seed, drop_seed] = [(); 4].map(|_| seeds.random::<u64>());
    let held_out = held_out_set(config, &mut StdRng::seed_from_u64(held_seed))?;
    let exclude: BTreeSet<Vec<usize>> =
        held_out.tokens.rows().into_iter().map(|r| r.to_vec()).collect();
    let mut model =
        TinyTransformer::new(&config.model(), &mut StdRng::seed_from_u64(init_seed))?;
    let mut adam = Adam::new(config.lr)?;
    let (mut data, mut drops) =
        (StdRng::seed_from_u64(data_seed), StdRng::seed_from_u64(drop_seed));
    let mut run = Recorder { config, held_out: &held_out, evals: vec![], snapshots: vec![] };
    run.record(&model, 0)?;
    let mut losses = Vec::with_capacity(config.steps);
    for step in 1..=config.steps {
        let batch = config.task.batch(config.batch_size, &mut data, Some(&exclude))?;
        let masks = (dropout.p() > 0.0).then(|| {
            model.dropout_masks(&dropout, config.batch_size, config.task.len(), &mut drops)
        });
        let (loss, grads) = model.loss_and_grads(&batch, masks.as_deref())?;
        model.step(&mut adam, &grads)?;
        losses.push(loss);
        run.record(&model, step)?;
    }
    let (evals, snapshots) = (run.evals, run.snapshots);
    Ok(TrainingRun { losses, evals, snapshots, probe: config.task.probe()?, held_out, model })
}
// ANCHOR_END: train_loop

/// `held_out` distinct sequences of the task.
// ANCHOR: held_out
fn held_out_set(config: &TrainConfig, rng: &mut StdRng) -> Result<Batch> {
    let mut seen = BTreeSet::new();
    let mut sequences = Vec::with_capacity(config.held_out);
    let mut attempts = 0usize;
    while sequences.len() < config.held_out {
        attempts += 1;
        if attempts > 100 * config.held_out + 1000 {
            let problem = format!("could not draw {} distinct sequences", config.held_out);
            return Err(invalid_setting("held-out set", problem));
        }
        let seq = config.task.sequence(rng)?;
        if seen.insert(seq.clone()) {
            sequences.push(seq);
        }
    }
    Batch::new(&config.task, &sequences)
}
// ANCHOR_END: held_out

/// Records evaluations and snapshots during [`train`].
// ANCHOR: recorder
struct Recorder<'a> {
    config: &'a TrainConfig,
    held_out: &'a Batch,
    evals: Vec<Evaluation>,
    snapshots: Vec<Snapshot>,
}
// ANCHOR_END: recorder

// ANCHOR: recorder_record
impl Recorder<'_> {
    fn record(&mut self, model: &TinyTransformer, step: usize) -> Result<()> {
        let every = self.config.eval_every.max(1);
        if step.is_multiple_of(every) || step == self.config.steps {
            let (logits, _) = model.forward_train(&self.held_out.tokens, None)?;
            let score = score_logits(&logits, &self.held_out.targets)?;
            let (b, len, vocab) = logits.dim();
            let flat = logits.into_shape_with_order((b * len, vocab)).expect("rows");
            let (loss, _) = cross_entropy(&flat, &self.held_out.targets)?;
            self.evals.push(Evaluation { step, loss, score });
        }
        if self.config.snapshot_steps.contains(&step) {
            self.snapshots.push(Snapshot { step, model: model.clone() });
        }
        Ok(())
    }
}
// ANCHOR_END: recorder_record

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array, Dimension, array};
    use std::collections::BTreeMap;

    /// `|a − b| ≤ atol + rtol·|b|` with rtol = 1e-6. The finite differences below are central
    /// with a step of 1e-6 (times the entry's size when that is above 1), on losses of order
    /// 1: their rounding error is about 1e-16 / 1e-6 = 1e-10, their truncation error about
    /// h² = 1e-12, so atol = 1e-8 leaves a margin of 100 over what the method itself misses
    /// and is still far below the gradients being checked.
    fn close(fd: f64, analytic: f64) -> bool {
        (fd - analytic).abs() <= 1e-8 + 1e-6 * analytic.abs()
    }

    fn step_for(x: f64) -> f64 {
        1e-6 * x.abs().max(1.0)
    }

    /// Central differences of `loss` with respect to every entry of `x`.
    fn finite_differences<D: Dimension>(
        x: &Array<f64, D>,
        loss: impl Fn(&Array<f64, D>) -> f64,
    ) -> Array<f64, D> {
        let mut grad = Array::zeros(x.raw_dim());
        for (k, g) in grad.iter_mut().enumerate() {
            let (mut plus, mut minus) = (x.clone(), x.clone());
            let h = step_for(x.iter().nth(k).copied().unwrap());
            *plus.iter_mut().nth(k).unwrap() += h;
            *minus.iter_mut().nth(k).unwrap() -= h;
            *g = (loss(&plus) - loss(&minus)) / (2.0 * h);
        }
        grad
    }

    fn assert_close<D: Dimension>(fd: &Array<f64, D>, analytic: &Array<f64, D>, what: &str) {
        assert_eq!(fd.shape(), analytic.shape(), "{what}");
        for ((index, &f), &a) in fd.indexed_iter().zip(analytic.iter()) {
            assert!(close(f, a), "{what} {index:?}: finite differences {f}, backward {a}");
        }
    }

    fn uniform<Sh: ndarray::ShapeBuilder>(shape: Sh, rng: &mut StdRng) -> Array<f64, Sh::Dim> {
        Array::from_shape_simple_fn(shape, || rng.random::<f64>() * 2.0 - 1.0)
    }

    #[test]
    fn cross_entropy_matches_finite_differences() {
        let mut rng = StdRng::seed_from_u64(1);
        let logits = uniform((6, 5), &mut rng) * 3.0;
        let targets = [Some(0), None, Some(4), Some(4), None, Some(2)];
        let (_, analytic) = cross_entropy(&logits, &targets).unwrap();
        let fd = finite_differences(&logits, |z| cross_entropy(z, &targets).unwrap().0);
        assert_close(&fd, &analytic, "d_logits");
        assert!(analytic.row(1).iter().all(|&g| g == 0.0));
        // Each scored row of the gradient sums to 0 (softmax minus a one-hot).
        assert!(analytic.rows().into_iter().all(|r| r.sum().abs() < 1e-15));
    }

    #[test]
    fn cross_entropy_is_stable_and_checks_its_input() {
        // Huge logits: the maximum is subtracted, so nothing overflows.
        let (loss, _) = cross_entropy(&array![[1000.0, 0.0]], &[Some(1)]).unwrap();
        assert_eq!(loss, 1000.0);
        let logits = Array2::<f64>::zeros((2, 3));
        let err = cross_entropy(&logits, &[Some(0)]).unwrap_err();
        assert_eq!(err.to_string(), "logits has n = 2 but targets has n = 1");
        let err = cross_entropy(&logits, &[None, None]).unwrap_err();
        assert_eq!(err.to_string(), "targets: no position is scored");
        let err = cross_entropy(&logits, &[None, Some(3)]).unwrap_err();
        assert_eq!(err.to_string(), "targets: target 3 of row 1 is not below classes = 3");
    }

    /// `L = Σ c ∘ (embed(E) + P)` for a random `c`: the backward of the lookup and of the
    /// positions against finite differences. Token 3 appears twice, token 4 never.
    #[test]
    fn embedding_and_positions_match_finite_differences() {
        let mut rng = StdRng::seed_from_u64(2);
        let tokens = array![[3, 0, 3], [1, 2, 3]];
        let table = uniform((5, 4), &mut rng);
        let positions = uniform((3, 4), &mut rng);
        let c = uniform((2, 3, 4), &mut rng);
        let loss = |e: &Array2<f64>, p: &Array2<f64>| {
            (&add_positions(&embed(e, &tokens).unwrap(), p).unwrap() * &c).sum()
        };
        let fd = finite_differences(&table, |e| loss(e, &positions));
        assert_close(&fd, &embed_backward(&tokens, &c, 5).unwrap(), "d_table");
        let fd = finite_differences(&positions, |p| loss(&table, p));
        assert_close(&fd, &positions_backward(&c), "d_positions");
        assert!(embed_backward(&tokens, &c, 5).unwrap().row(4).iter().all(|&g| g == 0.0));
        let err = embed_backward(&array![[0, 1]], &c, 5).unwrap_err();
        assert!(err.to_string().contains("(batch, L) = (2, 3)"), "{err}");
        assert!(embed_backward(&array![[0, 9, 1], [0, 0, 0]], &c, 5).is_err());
    }

    #[test]
    fn readout_matches_finite_differences() {
        let mut rng = StdRng::seed_from_u64(3);
        let (h, w, b) =
            (uniform((5, 4), &mut rng), uniform((4, 3), &mut rng), uniform(3, &mut rng));
        let c = uniform((5, 3), &mut rng);
        let loss = |h: &Array2<f64>, w: &Array2<f64>, b: &Array1<f64>| {
            (&readout(h, w, b).unwrap() * &c).sum()
        };
        let g = readout_backward(&h, &w, &c).unwrap();
        assert_close(&finite_differences(&h, |h| loss(h, &w, &b)), &g.d_h, "d_h");
        assert_close(&finite_differences(&w, |w| loss(&h, w, &b)), &g.d_w, "d_w");
        assert_close(&finite_differences(&b, |b| loss(&h, &w, b)), &g.d_b, "d_b");
        assert!(readout_backward(&h, &w, &c.slice(s![..4, ..])).is_err());
        // W must have d_model = 4 rows, and as many columns as d_logits.
        let err = readout(&h, &w.slice(s![..3, ..]), &b).unwrap_err();
        assert_eq!(err.to_string(), "h has d_model = 4 but W has d_model = 3");
        let err = readout_backward(&h, &w.slice(s![..3, ..]), &c).unwrap_err();
        assert_eq!(err.to_string(), "h has d_model = 4 but W has d_model = 3");
        let err = readout_backward(&h, &w.slice(s![.., ..2]), &c).unwrap_err();
        assert_eq!(err.to_string(), "W has classes = 2 but d_logits has classes = 3");
    }

    fn tiny_model(positions: bool) -> (TinyTransformer, Batch) {
        let config =
            ModelConfig { vocab: 5, max_len: 5, d_model: 4, heads: 2, layers: 2, positions };
        let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(4)).unwrap();
        // L = 4 < max_len: the last row of the position table gets no gradient.
        let batch = Batch {
            tokens: array![[0, 3, 3, 1], [4, 2, 0, 0]],
            targets: vec![Some(1), None, Some(3), Some(0), None, Some(4), Some(2), None],
        };
        (model, batch)
    }

    /// A copy of `model` with entry `index` of parameter tensor `k` moved by `delta`.
    fn nudged(model: &TinyTransformer, k: usize, index: usize, delta: f64) -> TinyTransformer {
        let mut copy = model.clone();
        copy.update(|params| {
            let entry = params[k].iter_mut().nth(index).unwrap();
            *entry += delta;
            Ok(())
        })
        .unwrap();
        copy
    }

    /// Every parameter of a two-layer, two-head model, with learned positions and attention
    /// dropout held fixed (p = 0.3), against central finite differences of the loss; some
    /// positions are not scored. Without positions too.
    #[test]
    fn the_model_matches_finite_differences() {
        for positions in [true, false] {
            let (model, batch) = tiny_model(positions);
            let dropout = Dropout::new(0.3).unwrap();
            let masks = model.dropout_masks(&dropout, 2, 4, &mut StdRng::seed_from_u64(5));
            assert!(masks.iter().any(|m| m.iter().any(|&x| x == 0.0)));
            let (_, grads) = model.loss_and_grads(&batch, Some(&masks)).unwrap();
            let loss = |m: &TinyTransformer| m.loss_and_grads(&batch, Some(&masks)).unwrap().0;
            let params = model.parameters();
            let analytic = grads.views();
            assert_eq!(params.len(), analytic.len());
            for (k, (p, g)) in params.iter().zip(&analytic).enumerate() {
                assert_eq!(p.shape(), g.shape());
                for (index, (&x, &a)) in p.iter().zip(g.iter()).enumerate() {
                    let h = step_for(x);
                    let fd = (loss(&nudged(&model, k, index, h))
                        - loss(&nudged(&model, k, index, -h)))
                        / (2.0 * h);
                    assert!(close(fd, a), "tensor {k}, entry {index}: {fd} vs {a}");
                }
            }
            if let Some(d_positions) = &grads.positions {
                assert!(d_positions.row(4).iter().all(|&g| g == 0.0));
                assert!(d_positions.row(0).iter().any(|&g| g != 0.0));
            }
        }
    }

    /// A tape from a model with another number of layers is refused, not cut short.
    #[test]
    fn the_backward_checks_the_tapes_layers() {
        let (model, batch) = tiny_model(true); // two layers
        let config = ModelConfig { layers: 1, ..model.config().clone() };
        let one = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(4)).unwrap();
        let (logits, tape) = one.forward_train(&batch.tokens, None).unwrap();
        let d_logits = Array3::zeros(logits.dim());
        let err = model.backward(&tape, &d_logits).unwrap_err();
        assert_eq!(err.to_string(), "tape has layers = 1 but model has layers = 2");
        let (_, two_layer_tape) = model.forward_train(&batch.tokens, None).unwrap();
        assert!(one.backward(&two_layer_tape, &d_logits).is_err());
        assert!(one.backward(&tape, &d_logits).is_ok());
    }

    /// Evaluation mode is the identity: the forward without masks equals, bit for bit, the
    /// forward with `p = 0` masks (all ones), while `p = 0.5` masks change the logits.
    #[test]
    fn evaluation_mode_has_no_dropout() {
        let (model, batch) = tiny_model(true);
        let plain = model.forward(&batch.tokens).unwrap();
        let ones = model.dropout_masks(
            &Dropout::new(0.0).unwrap(),
            2,
            4,
            &mut StdRng::seed_from_u64(0),
        );
        let (with_ones, _) = model.forward_train(&batch.tokens, Some(&ones)).unwrap();
        assert_eq!(plain.logits, with_ones);
        let half = model.dropout_masks(
            &Dropout::new(0.5).unwrap(),
            2,
            4,
            &mut StdRng::seed_from_u64(0),
        );
        let (dropped, tape) = model.forward_train(&batch.tokens, Some(&half)).unwrap();
        assert!((&dropped - &plain.logits).iter().any(|d| d.abs() > 1e-3));
        // The tape keeps the weights before dropout: the same as in evaluation mode.
        assert_eq!(tape.weights(0), Some(&plain.weights[0]));
        let wrong = model.dropout_masks(
            &Dropout::new(0.5).unwrap(),
            2,
            3,
            &mut StdRng::seed_from_u64(0),
        );
        assert!(model.forward_train(&batch.tokens, Some(&wrong)).is_err());
        assert!(model.forward_train(&batch.tokens, Some(&half[..1])).is_err());
    }

    /// Two Adam steps on two parameters, against the formula worked by hand (carried to 25
    /// digits, then rounded to the nearest `f64`).
    ///
    /// Step 1 (t = 1), θ = 1, g = 0.5: m = 0.1·0.5 = 0.05, v = 0.001·0.25 = 0.00025,
    /// m̂ = 0.05/0.1 = 0.5, v̂ = 0.00025/0.001 = 0.25, θ = 1 − 0.1·0.5/(0.5 + 1e-8)
    /// = 0.900000002. Step 2, g = −1: m = 0.9·0.05 − 0.1 = −0.055,
    /// v = 0.999·0.00025 + 0.001 = 0.00124975, m̂ = −0.055/0.19, v̂ = 0.00124975/0.001999,
    /// θ = 0.900000002 + 0.1·(0.055/0.19)/(√v̂ + 1e-8) = 0.9366103542405656.
    #[test]
    fn adam_takes_the_steps_worked_by_hand() {
        let mut adam = Adam::new(0.1).unwrap();
        let mut theta = array![1.0, -2.0].into_dyn();
        for (g, expected) in [
            (array![0.5, -0.25], [0.900000002, -1.9000000039999998]),
            (array![-1.0, 0.75], [0.9366103542405656, -1.9494189864458518]),
        ] {
            let g = g.into_dyn();
            adam.step(&mut [theta.view_mut()], &[g.view()]).unwrap();
            for (x, e) in theta.iter().zip(expected) {
                assert!((x - e).abs() < 1e-14, "{x} vs {e}");
            }
        }
        assert_eq!(adam.steps(), 2);
        assert!(Adam::with_betas(0.1, 0.9, 0.999, 0.0).is_err());
        let mut other = array![[1.0]].into_dyn();
        let g = array![[1.0]].into_dyn();
        let err = adam.step(&mut [other.view_mut()], &[g.view()]).unwrap_err();
        assert!(err.to_string().starts_with("param 0 has shape [1, 1]"), "{err}");
    }

    #[test]
    fn tasks_draw_what_they_promise() {
        let mut rng = StdRng::seed_from_u64(6);
        let task = Task::Induction { len: 14, vocab: 16, prefix: 8 };
        let mut answer_positions = BTreeSet::new();
        for _ in 0..200 {
            let seq = task.sequence(&mut rng).unwrap();
            let prefix: BTreeSet<usize> = seq[..8].iter().copied().collect();
            let queries: BTreeSet<usize> = seq[8..].iter().copied().collect();
            assert_eq!((prefix.len(), queries.len()), (8, 6)); // distinct, both parts
            assert!(queries.is_subset(&prefix) && !queries.contains(&seq[7]));
            let targets = task.targets(&seq).unwrap();
            assert!(targets[..8].iter().all(Option::is_none));
            for (i, t) in targets.iter().enumerate().skip(8) {
                let j = seq[..8].iter().position(|&x| x == seq[i]).unwrap();
                assert_eq!(*t, Some(seq[j + 1]));
                answer_positions.insert((i, j + 1));
            }
        }
        // No position-only shortcut: every query position finds its answer at many places.
        for i in 8..14 {
            let places = answer_positions.iter().filter(|&&(q, _)| q == i).count();
            assert!(places >= 5, "query position {i}: answers at only {places} places");
        }
        assert!(Task::Reversal { len: 0, vocab: 4 }.check().is_err());
        assert!(Task::Reversal { len: 3, vocab: 1 }.check().is_err());
        assert!(Task::Induction { len: 10, vocab: 4, prefix: 5 }.check().is_err());
        assert!(Task::Reversal { len: 3, vocab: 2 }.targets(&[0, 2, 1]).is_err());
    }

    /// Settings that would panic (an empty range, an overflow) or train on nothing are
    /// errors, from every function that draws or builds a sequence.
    #[test]
    fn bad_task_settings_are_errors_not_panics() {
        let rng = &mut StdRng::seed_from_u64(6);
        for task in [
            Task::Reversal { len: 3, vocab: 0 },
            Task::Reversal { len: 0, vocab: 3 },
            Task::Induction { len: 6, vocab: 8, prefix: 0 },
            Task::Induction { len: 6, vocab: 8, prefix: 9 },
            Task::Induction { len: 6, vocab: 4, prefix: 5 },
            Task::Induction { len: 6, vocab: 8, prefix: 6 }, // no query: nothing scored
        ] {
            assert!(task.check().is_err(), "{task:?}");
            assert!(task.sequence(rng).is_err(), "{task:?}");
            assert!(task.probe().is_err(), "{task:?}");
            assert!(task.batch(2, rng, None).is_err(), "{task:?}");
            assert!(train(&TrainConfig { task, ..TrainConfig::reversal() }).is_err());
        }
        // One query is the least: len = prefix + 1.
        let task = Task::Induction { len: 7, vocab: 8, prefix: 6 };
        assert_eq!(task.probe().unwrap(), [0, 1, 2, 3, 4, 5, 0]);
        assert_eq!(task.sequence(rng).unwrap().len(), 7);
    }

    /// A batch built by hand with the wrong number of targets is an error for both
    /// position-blind scores, not an out-of-bounds panic.
    #[test]
    fn the_position_blind_scores_check_the_batch() {
        let expected = "targets has shape [4] but batch · L = 2 · 3 = 6 entries were expected";
        let short = Batch { tokens: array![[0, 1, 2], [2, 1, 0]], targets: vec![Some(0); 4] };
        assert_eq!(position_blind_ceiling(&short).unwrap_err().to_string(), expected);
        assert_eq!(most_common_token_baseline(&short).unwrap_err().to_string(), expected);
        // Any token ids are fine: the counts do not index by id.
        let huge = Batch { tokens: array![[usize::MAX, 7, 7]], targets: vec![Some(7); 3] };
        assert_eq!(most_common_token_baseline(&huge).unwrap().correct, 3);
        assert_eq!(position_blind_ceiling(&huge).unwrap().correct, 3);
    }

    /// The ceiling against a plain count: per sequence, group the scored positions by
    /// token, keep the most common target of each group.
    #[test]
    fn the_ceiling_is_the_best_per_token_answer() {
        let task = Task::Reversal { len: 7, vocab: 3 };
        let batch = task.batch(300, &mut StdRng::seed_from_u64(7), None).unwrap();
        let mut expected = 0;
        for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
            let mut counts: BTreeMap<(usize, usize), usize> = BTreeMap::new();
            for (i, &t) in seq.iter().enumerate() {
                *counts.entry((t, batch.targets[b * 7 + i].unwrap())).or_default() += 1;
            }
            let mut best: BTreeMap<usize, usize> = BTreeMap::new();
            for ((t, _), n) in counts {
                let e = best.entry(t).or_default();
                *e = (*e).max(n);
            }
            expected += best.values().sum::<usize>();
        }
        let ceiling = position_blind_ceiling(&batch).unwrap();
        assert_eq!((ceiling.correct, ceiling.scored), (expected, 300 * 7));
        // A palindrome can be answered fully; distinct tokens too (each token once).
        let easy = Batch::new(&task, &[vec![0, 1, 2, 0, 2, 1, 0]]).unwrap();
        assert_eq!(position_blind_ceiling(&easy).unwrap().correct, 7);
    }

    /// Training never sees a held-out sequence.
    #[test]
    fn training_batches_avoid_the_held_out_set() {
        let task = Task::Reversal { len: 3, vocab: 2 }; // only 8 sequences exist
        let exclude: BTreeSet<Vec<usize>> = [vec![0, 0, 0], vec![1, 0, 1]].into();
        let batch = task.batch(500, &mut StdRng::seed_from_u64(8), Some(&exclude)).unwrap();
        for row in batch.tokens.rows() {
            assert!(!exclude.contains(&row.to_vec()));
        }
        // Excluding every sequence there is: an error, not an endless loop.
        let all: BTreeSet<Vec<usize>> =
            (0..8).map(|k| vec![k >> 2 & 1, k >> 1 & 1, k & 1]).collect();
        let err = task.batch(4, &mut StdRng::seed_from_u64(8), Some(&all)).unwrap_err();
        assert!(err.to_string().contains("excluded"), "{err}");
        let config = TrainConfig { task, held_out: 9, ..TrainConfig::reversal() };
        assert!(train(&config).is_err()); // only 8 distinct sequences exist
    }

    fn final_score(run: &TrainingRun) -> Score {
        run.evals.last().unwrap().score
    }

    /// The chapter's reversal runs, with and without positions, on the same held-out set.
    /// With positions the model learns it and its one layer looks along the anti-diagonal;
    /// without, it stays at or below the position-blind ceiling at every evaluation (an
    /// exact fact: equal tokens get bit-for-bit equal logits), far below the other.
    #[test]
    fn reversal_is_learned_with_positions_and_not_without() {
        let with = train(&TrainConfig::reversal()).unwrap();
        let config = TrainConfig { positions: false, ..TrainConfig::reversal() };
        let without = train(&config).unwrap();
        assert_eq!(with.held_out, without.held_out);
        let held_out = &with.held_out;
        let ceiling = position_blind_ceiling(held_out).unwrap();
        for eval in &without.evals {
            assert!(eval.score.correct <= ceiling.correct, "step {}", eval.step);
        }
        let logits = without.model.forward(&held_out.tokens).unwrap().logits;
        for (b, seq) in held_out.tokens.rows().into_iter().enumerate() {
            for i in 0..seq.len() {
                for j in 0..i {
                    if seq[i] == seq[j] {
                        assert_eq!(logits.slice(s![b, i, ..]), logits.slice(s![b, j, ..]));
                    }
                }
            }
        }
        let (acc_with, acc_without) =
            (final_score(&with).accuracy(), final_score(&without).accuracy());
        let sources = TrainConfig::reversal().task.sources(&with.probe).unwrap();
        let on = |run: &TrainingRun, k: usize| -> Vec<f64> {
            let w = &run.snapshots[k].weights(&run.probe).unwrap()[0];
            (0..w.dim().0)
                .map(|h| weight_on(&w.index_axis(Axis(0), h), &sources).unwrap())
                .collect()
        };
        // Chance is 1/4; the ceiling is 0.655; the trained model scores 1 and 0.425.
        let three = |x: f64| format!("{x:.3}");
        assert_eq!(
            [ceiling.accuracy(), acc_with, acc_without].map(three),
            ["0.655", "1.000", "0.425"]
        );
        assert_eq!(acc_with, 1.0); // every held-out position right, not just rounded to 1
        assert!(acc_without <= ceiling.accuracy() && acc_without < 0.5, "{acc_without}");
        // The expected best of a position-blind model: answer the most common token.
        let baseline = most_common_token_baseline(held_out).unwrap().accuracy();
        assert!((acc_without - baseline).abs() < 0.02, "{acc_without} vs {baseline}");
        // The best head's weight on the anti-diagonal: 0.129 at the start (uniform rows
        // would give 1/9), 0.823 at the end; 0.118 without positions.
        let best = |weights: Vec<f64>| weights.into_iter().fold(0.0, f64::max);
        let diagonal = [best(on(&with, 0)), best(on(&with, 4)), best(on(&without, 4))];
        assert_eq!(diagonal.map(three), ["0.129", "0.823", "0.118"]);
        assert!(best(on(&with, 0)) < 0.2 && best(on(&without, 4)) < 0.2);
        assert!(best(on(&with, 4)) > 0.75);
        assert!(acc_with > ceiling.accuracy() + 0.3);
    }

    /// The chapter's induction run: held-out accuracy above 99 %, a previous-token head in
    /// layer 1 (over the prefix, where it is needed) and an induction head in layer 2.
    #[test]
    fn induction_learns_a_previous_token_head_and_an_induction_head() {
        let config = TrainConfig::induction();
        let run = train(&config).unwrap();
        let acc = final_score(&run).accuracy();
        let prefix = 8;
        let previous: Vec<Option<usize>> =
            (0..14).map(|i| (1..prefix).contains(&i).then(|| i - 1)).collect();
        let answers = config.task.sources(&run.probe).unwrap();
        let heads = |k: usize, layer: usize, sources: &[Option<usize>]| -> Vec<f64> {
            let w = &run.snapshots[k].weights(&run.probe).unwrap()[layer];
            (0..w.dim().0)
                .map(|h| weight_on(&w.index_axis(Axis(0), h), sources).unwrap())
                .collect()
        };
        let best = |weights: Vec<f64>| weights.into_iter().fold(0.0, f64::max);
        // At the start: 0.081 and 0.066 (uniform rows would give 1/14 = 0.071); at the end
        // 0.852 on the previous token in layer 1 and 0.986 on the answer in layer 2.
        let last = run.snapshots.len() - 1;
        let found = [
            best(heads(0, 0, &previous)),
            best(heads(0, 1, &answers)),
            best(heads(last, 0, &previous)),
            best(heads(last, 1, &answers)),
        ];
        assert_eq!(found.map(|x| format!("{x:.3}")), ["0.081", "0.066", "0.852", "0.986"]);
        assert!(best(heads(0, 0, &previous)) < 0.1 && best(heads(0, 1, &answers)) < 0.1);
        assert!(best(heads(last, 0, &previous)) > 0.8);
        assert!(best(heads(last, 1, &answers)) > 0.95);
        assert!(acc >= 0.99, "{acc}");
        // The probe's answers all lie 7 back. On the held-out set, whose queries come in
        // random order, the heads keep their roles: layer 1, head 0 on the previous token,
        // both heads of layer 2 on the answer and not 7 back.
        let held = &run.held_out;
        let (n, len) = held.tokens.dim();
        let w = run.model.forward(&held.tokens).unwrap().weights;
        let on_previous =
            heads_weight_on(&w[0], &offset_sources(n, len, 1..prefix, 1)).unwrap();
        let on_answer =
            heads_weight_on(&w[1], &prefix_matching_sources(&held.tokens)).unwrap();
        let seven_back = offset_sources(n, len, prefix..len, prefix - 1);
        let on_back = heads_weight_on(&w[1], &seven_back).unwrap();
        let three = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>();
        assert_eq!(three(&on_previous), ["0.813", "0.189"]);
        assert_eq!(three(&on_answer), ["0.955", "0.976"]);
        assert_eq!(three(&on_back), ["0.136", "0.136"]);
        // Removing the previous-token head breaks the circuit (40.8 %); removing the other
        // head of layer 1 does not (99.0 %); each head of layer 2 copies what it attends to.
        let without = |l: usize, h: usize| {
            run.model.without_head(l, h).unwrap().score(held).unwrap().accuracy()
        };
        assert!(without(0, 0) < 0.5 && without(0, 1) > 0.98);
        for head in 0..2 {
            let copying =
                run.model.copying_score(&held.tokens, &held.targets, 1, head).unwrap();
            assert!(copying.accuracy() > 0.9, "head {head}: {copying:?}");
        }
    }

    /// A short run that touches every part of the arithmetic: two layers, two heads,
    /// positions, dropout, Adam, the evaluation.
    fn short_run() -> TrainConfig {
        TrainConfig {
            steps: 20,
            dropout: 0.1,
            held_out: 50,
            eval_every: 10,
            snapshot_steps: vec![20],
            ..TrainConfig::induction()
        }
    }

    /// FNV-1a over the bits of the training losses and of every parameter.
    fn checksum(run: &TrainingRun) -> u64 {
        let params = run.model.parameters();
        let numbers = run.losses.iter().chain(params.iter().flat_map(|p| p.iter()));
        numbers.fold(0xcbf2_9ce4_8422_2325, |hash, x| {
            (hash ^ x.to_bits()).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// Two runs give the same bits: losses, evaluations, snapshots and every weight.
    #[test]
    fn training_is_reproducible_to_the_bit() {
        let (a, b) = (train(&short_run()).unwrap(), train(&short_run()).unwrap());
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.losses), bits(&b.losses));
        assert_eq!(a.evals, b.evals);
        assert_eq!(a.snapshots, b.snapshots);
        for (p, q) in a.model.parameters().iter().zip(&b.model.parameters()) {
            assert_eq!(
                bits(&p.iter().copied().collect::<Vec<_>>()),
                bits(&q.iter().copied().collect::<Vec<_>>())
            );
        }
        assert_eq!(checksum(&a), checksum(&b));
        // A different seed is a different run.
        let other = train(&TrainConfig { seed: 13, ..short_run() }).unwrap();
        assert_ne!(checksum(&a), checksum(&other));
    }

    /// The bits of a short run, pinned: a change in the order of any sum, in `exp` or `ln`,
    /// in the initialisation or in the order of the random draws changes them. (The
    /// numbers are the same in the dev and the release profile, and on every x86-64 CPU.)
    #[test]
    fn a_short_run_gives_the_pinned_bits() {
        let run = train(&short_run()).unwrap();
        let last = *run.losses.last().unwrap();
        assert_eq!(last.to_bits(), 0x4006_3582_e56f_b3ec, "{last}"); // 2.7761285710062023
        assert_eq!(checksum(&run), 0xfc76_004c_e457_2d09);
    }

    /// The exercise: with a learning rate 10 times larger (0.05 instead of 0.005), the
    /// reversal is learned faster, but the induction task blows up.
    #[test]
    fn a_ten_times_larger_learning_rate() {
        let reversal = |lr| {
            let config =
                TrainConfig { steps: 10, eval_every: 10, lr, ..TrainConfig::reversal() };
            final_score(&train(&config).unwrap()).accuracy()
        };
        let (base, fast) = (reversal(5e-3), reversal(5e-2));
        let config = TrainConfig {
            steps: 300,
            eval_every: 100,
            held_out: 200,
            lr: 5e-2,
            ..TrainConfig::induction()
        };
        let induction = train(&config).unwrap();
        let worst = induction.losses.iter().fold(0.0, |m: f64, &x| m.max(x));
        // Reversal after 10 steps: 0.494 of the held-out positions right at lr = 0.005,
        // 0.966 at 0.05.
        assert_eq!([base, fast].map(|x| format!("{x:.3}")), ["0.494", "0.966"]);
        assert!(base < 0.6 && fast > 0.9, "{base} {fast}");
        // Induction at 0.05: the held-out loss goes from 3.75 to 2.30 after 100 steps,
        // then to 111.8 after 200 (a training batch reaches 1420.6); after 300 it is 56.2
        // and 70 of 1200 answers are right (chance is 1/16). At 0.005 it learns (above).
        let (first, last) = (induction.evals[0], *induction.evals.last().unwrap());
        let losses: Vec<String> =
            induction.evals.iter().map(|e| format!("{:.2}", e.loss)).collect();
        assert_eq!(losses, ["3.75", "2.30", "111.82", "56.17"]);
        assert_eq!(format!("{worst:.1}"), "1420.6");
        assert_eq!((last.score.correct, last.score.scored), (70, 1200));
        assert!(worst > 100.0 && last.loss > 10.0 * first.loss, "{worst} {last:?}");
        assert!(last.score.accuracy() < 0.1, "{last:?}");
    }

    /// Over every order of `bag` (all equally likely, as for independent uniform tokens):
    /// the best expected reversal score of a position-blind answer function `o(t)` (all
    /// `vocab^vocab` of them tried), and what answering the most common token scores.
    fn position_blind_expectations(bag: &[usize], vocab: usize) -> (f64, f64) {
        let mut orders = BTreeSet::new();
        permutations(&mut bag.to_vec(), 0, &mut orders);
        let len = bag.len();
        let task = Task::Reversal { len, vocab };
        let mut best = 0.0_f64;
        for code in 0..vocab.pow(vocab as u32) {
            let answer = |t: usize| code / vocab.pow(t as u32) % vocab; // digit t of code
            let mut correct = 0;
            for seq in &orders {
                let targets = task.targets(seq).unwrap();
                correct += (0..len).filter(|&i| targets[i] == Some(answer(seq[i]))).count();
            }
            best = best.max(correct as f64 / (len * orders.len()) as f64);
        }
        let all: Vec<Vec<usize>> = orders.into_iter().collect();
        let batch = Batch::new(&task, &all).unwrap();
        (best, most_common_token_baseline(&batch).unwrap().accuracy())
    }

    /// The claim behind [`most_common_token_baseline`], by brute force. Odd `L`: over the
    /// 420 orders of `{0, 0, 1, 2, 2, 2, 3}` the best answer function scores `c_max/L =
    /// 3/7`, and so does answering the most common token. Even `L`: on `{0, 0, 1, 1}` the
    /// claim fails, as the doc comment says: the best is `2/3` (answer `1 − t`), the
    /// strategy and `c_max/L` are `1/2`.
    #[test]
    fn the_most_common_token_is_the_best_position_blind_answer_for_odd_l() {
        let mut orders = BTreeSet::new();
        permutations(&mut vec![0, 0, 1, 2, 2, 2, 3], 0, &mut orders);
        assert_eq!(orders.len(), 420); // 7! / (2!·3!)
        let (best, baseline) = position_blind_expectations(&[0, 0, 1, 2, 2, 2, 3], 4);
        assert!((best - 3.0 / 7.0).abs() < 1e-12, "{best}");
        assert!((baseline - 3.0 / 7.0).abs() < 1e-12, "{baseline}");
        let (best, baseline) = position_blind_expectations(&[0, 0, 1, 1], 2);
        assert!((best - 2.0 / 3.0).abs() < 1e-12, "{best}");
        assert!((baseline - 2.0 / 4.0).abs() < 1e-12, "{baseline}");
    }

    /// `heads_weight_on` pools the rows of every sequence: with the same number of sourced
    /// rows in each sequence, it is the mean of `weight_on` over the sequences, head by head.
    #[test]
    fn heads_weight_on_is_weight_on_pooled_over_the_batch() {
        let task = Task::Induction { len: 9, vocab: 10, prefix: 6 };
        let config = ModelConfig {
            vocab: 10,
            max_len: 9,
            d_model: 8,
            heads: 2,
            layers: 2,
            positions: true,
        };
        let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(21)).unwrap();
        let batch = task.batch(12, &mut StdRng::seed_from_u64(22), None).unwrap();
        let weights = &model.forward(&batch.tokens).unwrap().weights[1];
        let sources = prefix_matching_sources(&batch.tokens);
        let pooled = heads_weight_on(weights, &sources).unwrap();
        for (h, &p) in pooled.iter().enumerate() {
            let mut total = 0.0;
            for b in 0..12 {
                let w = weights.slice(s![b, h, .., ..]);
                total += weight_on(&w, &sources[9 * b..9 * (b + 1)]).unwrap();
            }
            assert!((p - total / 12.0).abs() < 1e-15, "head {h}: {p} vs {}", total / 12.0);
        }
        let err = heads_weight_on(weights, &sources[..9]).unwrap_err();
        assert!(err.to_string().contains("batch · L = 9, one source per row"), "{err}");
        let mut far = vec![None; 108];
        far[3] = Some(9);
        assert!(heads_weight_on(weights, &far).is_err()); // a source beyond L
    }

    /// Read off the tokens alone, the prefix-matching pattern is the induction task's rule.
    #[test]
    fn prefix_matching_is_the_induction_rule() {
        let task = TrainConfig::induction().task;
        let batch = task.batch(200, &mut StdRng::seed_from_u64(23), None).unwrap();
        let sources = prefix_matching_sources(&batch.tokens);
        for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
            let rule = task.sources(&seq.to_vec()).unwrap();
            assert_eq!(sources[14 * b..14 * (b + 1)], rule[..], "sequence {b}");
        }
        // A token seen twice before looks after its latest occurrence.
        let latest = prefix_matching_sources(&ndarray::array![[0, 1, 0, 2, 0]]);
        assert_eq!(latest, [None, None, Some(1), None, Some(3)]);
        assert_eq!(offset_sources(1, 5, 0..5, 7), [None; 5]); // nothing 7 back in 5
    }

    /// A head's share of its layer: the shares of all heads add up to what the layer adds,
    /// which for the last layer is the change of the logits when every head is removed; and
    /// a head removed is a share that is gone. The copying score read from the shares agrees
    /// with the one read from the logits the ablation takes away.
    #[test]
    fn head_shares_add_up_and_ablation_removes_them() {
        let config = ModelConfig {
            vocab: 6,
            max_len: 5,
            d_model: 8,
            heads: 2,
            layers: 2,
            positions: true,
        };
        let mut model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(24)).unwrap();
        // A read-out bias that is not 0 (it starts at 0): large enough on token 2 to decide
        // every row's largest score if it were added to the head's share, which the copying
        // score must not do (it would count 0 of 8 here, not 2).
        model.b_out = ndarray::array![0.5, -0.5, 2.0, 0.0, -1.0, 0.5];
        let tokens = ndarray::array![[0, 5, 2, 2, 1], [3, 3, 4, 0, 5]];
        let logits = |m: &TinyTransformer| m.forward(&tokens).unwrap().logits;
        let silent = model.without_head(1, 0).unwrap().without_head(1, 1).unwrap();
        let (s0, w0) = model.head_output(&tokens, 1, 0).unwrap();
        let (s1, _) = model.head_output(&tokens, 1, 1).unwrap();
        let both = (s0.clone() + &s1).into_shape_with_order((10, 8)).unwrap();
        let added = exact::matmul(&both, &model.w_out).unwrap();
        let change =
            (logits(&model) - logits(&silent)).into_shape_with_order((10, 6)).unwrap();
        assert!((added - &change).iter().all(|d| d.abs() < 1e-12));
        assert_eq!(w0, model.forward(&tokens).unwrap().weights[1].index_axis(Axis(1), 0));
        // Removing head 0 takes away exactly its share.
        let without = logits(&model.without_head(1, 0).unwrap());
        let its_share = (logits(&model) - without).into_shape_with_order((10, 6)).unwrap();
        let s0 = s0.into_shape_with_order((10, 8)).unwrap();
        let read = exact::matmul(&s0, &model.w_out).unwrap();
        assert!((&read - &its_share).iter().all(|d| d.abs() < 1e-12));
        // Copying, by hand from the ablation's difference.
        let rows: Vec<Option<usize>> = (0..10).map(|k| (k % 5 > 0).then_some(0)).collect();
        let mut correct = 0;
        for k in (0..10).filter(|k| k % 5 > 0) {
            let attended = tokens[[k / 5, argmax(&w0.slice(s![k / 5, k % 5, ..]))]];
            correct += usize::from(argmax(&its_share.row(k)) == attended);
        }
        let score = model.copying_score(&tokens, &rows, 1, 0).unwrap();
        assert_eq!((score.correct, score.scored), (correct, 8));
        assert_eq!(correct, 2); // with the bias added, 0
        assert!(model.head_output(&tokens, 1, 2).is_err()); // no head 2
        assert!(model.without_head(2, 0).is_err()); // no layer 2
    }

    fn permutations(seq: &mut Vec<usize>, k: usize, out: &mut BTreeSet<Vec<usize>>) {
        if k == seq.len() {
            out.insert(seq.clone());
            return;
        }
        for i in k..seq.len() {
            seq.swap(k, i);
            permutations(seq, k + 1, out);
            seq.swap(k, i);
        }
    }
}
