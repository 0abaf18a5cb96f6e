//! Chapter *A model that writes*: the whole GPT, forward and backward.
//!
//! A batch of `B` contexts of `T` token ids goes in as `(B, T)`; inside, every token is a row
//! of one `(B·T, d)` matrix, so that every map but attention treats the batch as one long
//! list of tokens:
//!
//! ```text
//! x  = wte[token] + wpe[position]                       (B·T, d)
//! for each block:
//!     x = x + attn_proj(causal_attention(c_attn(ln_1(x))))
//!     x = x + mlp_proj(GELU(c_fc(ln_2(x))))
//! logits = ln_f(x) · wteᵀ                               (B·T, V)
//! ```
//!
//! The backward pass walks the same list backwards. The residual additions pass their
//! gradient through unchanged, which is why the gradient of the stream reaches the first block
//! undiminished, and why the tied table `wte` gets gradient twice: from the head and from
//! the embedding.
//!
//! Anchors (below the doc comments): `gpt_forward`, `block_forward`, `block_backward`,
//! `gpt_backward`.

use ndarray::{Array2, Array3, Array4, ArrayView2};

use super::config::GptConfig;
use super::kernels::{Exact, Kernels};
use super::ops::sum_over_batch;
use super::positions::rotate_qk;
use super::weights::{Block, Gpt, Norm};
use crate::error::{AttentionError, Result};
use crate::float::Float;

/// What one block's forward pass keeps for its backward pass.
#[derive(Debug, Clone)]
struct BlockTape<A> {
    x: Array2<A>,       // the block's input (B·T, d)
    h1: Array2<A>,      // ln_1(x)
    qkv: Array2<A>,     // (B·T, 3d)
    weights: Array4<A>, // (B, heads, T, T)
    y: Array2<A>,       // the heads' merged output (B·T, d)
    x1: Array2<A>,      // x + attention
    h2: Array2<A>,      // ln_2(x1)
    u: Array2<A>,       // c_fc(h2) (B·T, 4d)
    g: Array2<A>,       // GELU(u)
}

/// What the whole forward pass keeps: the token ids, the blocks' tapes and the final norm's
/// input and output.
#[derive(Debug, Clone)]
struct Tape<A> {
    tokens: Vec<usize>,
    t: usize,
    blocks: Vec<BlockTape<A>>,
    x: Array2<A>, // ln_f's input
    h: Array2<A>, // ln_f's output
}

impl<A: Float> Gpt<A> {
    /// The logits `(B, T, V)` of the next token after every prefix of every context in
    /// `tokens: (B, T)`, `T ≤ block_size`. An error names a token outside the vocabulary or
    /// a context longer than the model's.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    /// use ndarray::array;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// assert_eq!(gpt.logits(&array![[0, 1, 2]].view()).unwrap().dim(), (1, 3, 5));
    /// assert_eq!(
    ///     gpt.logits(&array![[0, 5]].view()).unwrap_err().to_string(),
    ///     "tokens: token 5 at (0, 1) is outside the vocabulary of 5"
    /// );
    /// ```
    pub fn logits(&self, tokens: &ArrayView2<usize>) -> Result<Array3<A>> {
        self.logits_with(&Exact, tokens)
    }

    /// [`Gpt::logits`] computed by the given [`Kernels`].
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, kernels::{Exact, Fast}, weights::Gpt};
    /// use ndarray::array;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let tokens = array![[0, 1, 2]];
    /// let exact = gpt.logits_with(&Exact, &tokens.view()).unwrap();
    /// let fast = gpt.logits_with(&Fast, &tokens.view()).unwrap();
    /// assert!((exact - fast).iter().all(|d| d.abs() < 1e-5));
    /// ```
    // ANCHOR: logits_with
    pub fn logits_with<K: Kernels<A>>(
        &self,
        k: &K,
        tokens: &ArrayView2<usize>,
    ) -> Result<Array3<A>> {
        let (logits, _) = self.forward_tape(k, tokens)?;
        let (b, t) = tokens.dim();
        Ok(logits.into_shape_with_order((b, t, self.config.vocab_size)).expect("B·T rows"))
    }
    // ANCHOR_END: logits_with

    /// The mean next-token cross-entropy over every position of `tokens: (B, T)`, the target
    /// of position `i` being `targets[(b, i)]`.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    /// use ndarray::array;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// // a fresh model guesses every character about equally: ln 5
    /// let loss = gpt.loss(&array![[0, 1, 2]].view(), &array![[1, 2, 3]].view()).unwrap();
    /// assert!((loss - 5f64.ln()).abs() < 0.1, "{loss}");
    /// ```
    pub fn loss(
        &self,
        tokens: &ArrayView2<usize>,
        targets: &ArrayView2<usize>,
    ) -> Result<f64> {
        self.loss_with(&Exact, tokens, targets)
    }

    /// [`Gpt::loss`] computed by the given [`Kernels`].
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, kernels::{Exact, Fast}, weights::Gpt};
    /// use ndarray::array;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let (x, y) = (array![[0, 1, 2]], array![[1, 2, 3]]);
    /// let exact = gpt.loss_with(&Exact, &x.view(), &y.view()).unwrap();
    /// assert!((exact - gpt.loss_with(&Fast, &x.view(), &y.view()).unwrap()).abs() < 1e-5);
    /// ```
    // ANCHOR: loss_with
    pub fn loss_with<K: Kernels<A>>(
        &self,
        k: &K,
        tokens: &ArrayView2<usize>,
        targets: &ArrayView2<usize>,
    ) -> Result<f64> {
        let targets = check_targets(tokens, targets)?;
        let (logits, _) = self.forward_tape(k, tokens)?;
        Ok(k.cross_entropy(&logits.view(), &targets)?.0)
    }
    // ANCHOR_END: loss_with

    /// The loss of [`Gpt::loss`] and its gradient with respect to every weight, as a model of
    /// the same shape (`grads.blocks[0].c_attn.w` is `∂ℓ/∂W` of the first block's `c_attn`).
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    /// use ndarray::array;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let (loss, grads) = gpt.loss_and_grads(&array![[0, 1]].view(), &array![[1, 2]].view()).unwrap();
    /// assert!(loss > 0.0);
    /// assert_eq!(grads.wpe.row(3).sum(), 0.0); // positions 2 and 3 were not used
    /// ```
    pub fn loss_and_grads(
        &self,
        tokens: &ArrayView2<usize>,
        targets: &ArrayView2<usize>,
    ) -> Result<(f64, Gpt<A>)> {
        self.loss_and_grads_with(&Exact, tokens, targets)
    }

    /// [`Gpt::loss_and_grads`] computed by the given [`Kernels`].
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, kernels::{Exact, Fast}, weights::Gpt};
    /// use ndarray::array;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let (x, y) = (array![[0, 1, 2]], array![[1, 2, 3]]);
    /// let (_, exact) = gpt.loss_and_grads_with(&Exact, &x.view(), &y.view()).unwrap();
    /// let (_, fast) = gpt.loss_and_grads_with(&Fast, &x.view(), &y.view()).unwrap();
    /// assert!((&exact.wte - &fast.wte).iter().all(|d| d.abs() < 1e-6));
    /// ```
    // ANCHOR: gpt_backward
    pub fn loss_and_grads_with<K: Kernels<A>>(
        &self,
        k: &K,
        tokens: &ArrayView2<usize>,
        targets: &ArrayView2<usize>,
    ) -> Result<(f64, Gpt<A>)> {
        let targets = check_targets(tokens, targets)?;
        let (logits, tape) = self.forward_tape(k, tokens)?;
        let (loss, grad_logits) = k.cross_entropy(&logits.view(), &targets)?;
        let mut grads = Gpt::zeros(self.config);
        // logits = h · wteᵀ: the head's share of wte's gradient, and h's gradient
        grads.wte = k.matmul(&grad_logits.t(), &tape.h.view()); // (V, d)
        let grad_h = k.matmul(&grad_logits.view(), &self.wte.view()); // (B·T, d)
        let eps = self.config.layer_norm_epsilon;
        let (mut grad_x, gamma, beta) =
            k.norm_backward(&tape.x.view(), &self.ln_f, eps, &grad_h.view());
        grads.ln_f = Norm { gamma, beta };
        for ((block, tape), grad) in
            self.blocks.iter().zip(&tape.blocks).zip(&mut grads.blocks).rev()
        {
            grad_x = block_backward(k, block, tape, grad_x, &self.config, grad)?;
        }
        // x = wte[token] + wpe[position]
        for (row, &token) in grad_x.rows().into_iter().zip(&tape.tokens) {
            grads.wte.row_mut(token).zip_mut_with(&row, |g, &r| *g = *g + r);
        }
        if self.config.positions.learned() {
            let grad_wpe = sum_over_batch(&grad_x.view(), tape.t);
            grads.wpe.slice_mut(ndarray::s![..tape.t, ..]).assign(&grad_wpe);
        }
        Ok((loss, grads))
    }
    // ANCHOR_END: gpt_backward

    /// Every block's attention weights `(B, heads, T, T)` for `tokens: (B, T)`, first block
    /// first, computed by the given [`Kernels`]: what each head looked at (chapter 16).
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, kernels::Exact, weights::Gpt};
    /// use ndarray::array;
    ///
    /// let gpt = Gpt::<f64>::zeros(GptConfig { n_layer: 2, n_embd: 8, n_head: 2, ..GptConfig::shakespeare(5) });
    /// let weights = gpt.attention_weights_with(&Exact, &array![[0, 1, 2]].view()).unwrap();
    /// assert_eq!((weights.len(), weights[1].dim()), (2, (1, 2, 3, 3)));
    /// assert_eq!(weights[0][[0, 0, 2, 1]], 1.0 / 3.0); // equal scores: a uniform average
    /// ```
    // ANCHOR: attention_weights_with
    pub fn attention_weights_with<K: Kernels<A>>(
        &self,
        k: &K,
        tokens: &ArrayView2<usize>,
    ) -> Result<Vec<Array4<A>>> {
        let (_, tape) = self.forward_tape(k, tokens)?;
        Ok(tape.blocks.into_iter().map(|b| b.weights).collect())
    }
    // ANCHOR_END: attention_weights_with

    /// The forward pass, keeping what the backward pass needs; logits `(B·T, V)`.
    // ANCHOR: gpt_forward
    fn forward_tape<K: Kernels<A>>(
        &self,
        k: &K,
        tokens: &ArrayView2<usize>,
    ) -> Result<(Array2<A>, Tape<A>)> {
        let (batch, t) = self.check_tokens(tokens)?;
        let d = self.config.n_embd;
        let ids: Vec<usize> = tokens.iter().copied().collect(); // row-major: b, then position
        let mut x = Array2::zeros((batch * t, d));
        for (i, mut row) in x.rows_mut().into_iter().enumerate() {
            row.assign(&self.wte.row(ids[i]));
            row.zip_mut_with(&self.wpe.row(i % t), |x, &p| *x = *x + p);
        }
        let mut tapes = Vec::with_capacity(self.blocks.len());
        for block in &self.blocks {
            let (next, tape) = block_forward(k, block, x, batch, &self.config)?;
            tapes.push(tape);
            x = next;
        }
        let h = k.norm(&x.view(), &self.ln_f, self.config.layer_norm_epsilon)?;
        let logits = k.matmul(&h.view(), &self.wte.t()); // the tied head
        Ok((logits, Tape { tokens: ids, t, blocks: tapes, x, h }))
    }
    // ANCHOR_END: gpt_forward

    /// `(B, T)` from `tokens`, or an error naming the problem.
    // ANCHOR: check_tokens
    pub(super) fn check_tokens(&self, tokens: &ArrayView2<usize>) -> Result<(usize, usize)> {
        let (batch, t) = tokens.dim();
        let c = &self.config;
        if batch == 0 || t == 0 {
            return Err(AttentionError::Empty { what: "tokens".into(), dim: "B·T" });
        }
        if t > c.block_size {
            return Err(AttentionError::Invalid {
                what: "tokens".into(),
                problem: format!(
                    "{t} positions, but the model knows {} (block_size)",
                    c.block_size
                ),
            });
        }
        if let Some(((b, i), &bad)) =
            tokens.indexed_iter().find(|&(_, &id)| id >= c.vocab_size)
        {
            return Err(AttentionError::Invalid {
                what: "tokens".into(),
                problem: format!(
                    "token {bad} at ({b}, {i}) is outside the vocabulary of {}",
                    c.vocab_size
                ),
            });
        }
        Ok((batch, t))
    }
    // ANCHOR_END: check_tokens
}

/// The targets as one list, row-major, after checking that they are as many as the tokens.
// ANCHOR: check_targets
fn check_targets(
    tokens: &ArrayView2<usize>,
    targets: &ArrayView2<usize>,
) -> Result<Vec<usize>> {
    if tokens.dim() != targets.dim() {
        return Err(AttentionError::shape(
            "targets",
            targets.shape(),
            &format!("the shape of tokens, {:?}, was expected", tokens.shape()),
        ));
    }
    Ok(targets.iter().copied().collect())
}
// ANCHOR_END: check_targets

/// One pre-LN block: `x1 = x + attn(ln_1(x))`, `x2 = x1 + mlp(ln_2(x1))`.
// ANCHOR: block_forward
fn block_forward<A: Float, K: Kernels<A>>(
    k: &K,
    block: &Block<A>,
    x: Array2<A>,
    batch: usize,
    config: &GptConfig,
) -> Result<(Array2<A>, BlockTape<A>)> {
    let eps = config.layer_norm_epsilon;
    let h1 = k.norm(&x.view(), &block.ln_1, eps)?;
    let mut qkv = k.dense(&h1.view(), &block.c_attn);
    if let Some(thetas) = config.rope_thetas() {
        rotate_qk(&mut qkv, x.nrows() / batch, 0, config.n_head, &thetas, false);
    }
    let alibi = config.alibi_slopes();
    let (y, weights) =
        k.causal_attention(&qkv.view(), batch, config.n_head, alibi.as_deref())?;
    let x1 = &x + &k.dense(&y.view(), &block.attn_proj);
    let h2 = k.norm(&x1.view(), &block.ln_2, eps)?;
    let u = k.dense(&h2.view(), &block.c_fc);
    let g = k.gelu(&u.view());
    let x2 = &x1 + &k.dense(&g.view(), &block.mlp_proj);
    Ok((x2, BlockTape { x, h1, qkv, weights, y, x1, h2, u, g }))
}
// ANCHOR_END: block_forward

/// The backward pass of one block: from the gradient of its output, the gradient of its
/// input; its weights' gradients go into `grads`.
// ANCHOR: block_backward
fn block_backward<A: Float, K: Kernels<A>>(
    k: &K,
    block: &Block<A>,
    tape: &BlockTape<A>,
    grad_x2: Array2<A>,
    config: &GptConfig,
    grads: &mut Block<A>,
) -> Result<Array2<A>> {
    let eps = config.layer_norm_epsilon;
    // x2 = x1 + mlp_proj(g): the residual passes grad_x2 to x1 unchanged
    let (grad_g, grad_mlp_proj) =
        k.dense_backward(&tape.g.view(), &block.mlp_proj, &grad_x2.view());
    let grad_u = k.gelu_backward(&tape.u.view(), &grad_g.view());
    let (grad_h2, grad_c_fc) = k.dense_backward(&tape.h2.view(), &block.c_fc, &grad_u.view());
    let (grad_ln2, grad_gamma, grad_beta) =
        k.norm_backward(&tape.x1.view(), &block.ln_2, eps, &grad_h2.view());
    grads.ln_2 = Norm { gamma: grad_gamma, beta: grad_beta };
    let grad_x1 = grad_x2 + &grad_ln2;
    // x1 = x + attn_proj(y): the residual passes grad_x1 to x unchanged
    let (grad_y, grad_attn_proj) =
        k.dense_backward(&tape.y.view(), &block.attn_proj, &grad_x1.view());
    let mut grad_qkv =
        k.causal_attention_backward(&tape.qkv.view(), &tape.weights, &grad_y.view())?;
    if let Some(thetas) = config.rope_thetas() {
        // qkv was rotated after c_attn: its gradient turns back by the same angles
        let t = tape.weights.shape()[2];
        rotate_qk(&mut grad_qkv, t, 0, config.n_head, &thetas, true);
    }
    let (grad_h1, grad_c_attn) =
        k.dense_backward(&tape.h1.view(), &block.c_attn, &grad_qkv.view());
    let (grad_ln1, grad_gamma, grad_beta) =
        k.norm_backward(&tape.x.view(), &block.ln_1, eps, &grad_h1.view());
    grads.ln_1 = Norm { gamma: grad_gamma, beta: grad_beta };
    grads.c_attn = grad_c_attn;
    grads.attn_proj = grad_attn_proj;
    grads.c_fc = grad_c_fc;
    grads.mlp_proj = grad_mlp_proj;
    Ok(grad_x1 + &grad_ln1)
}
// ANCHOR_END: block_backward
