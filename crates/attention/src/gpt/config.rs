//! Chapter *A model that writes*: the sizes of a GPT, and what they cost.
//!
//! Anchors (below the doc comments): `gpt_config`, `parameter_count`, `flops_per_token`.

use super::positions::{Positions, RopeScaling};
use crate::error::{AttentionError, Result};

/// The sizes of a GPT-2-style decoder, named as Hugging Face's `GPT2Config` names them.
///
/// `bias` says whether the linear maps and layer norms have trained shifts: GPT-2 has them,
/// nanoGPT's Shakespeare run (and so chapter 15's) does not. Without them they are kept at
/// zero, so that a checkpoint still has GPT-2's tensors and `transformers` reads it unchanged.
///
/// ```
/// use attention::gpt::config::GptConfig;
///
/// let c = GptConfig::shakespeare(71);
/// assert_eq!((c.n_layer, c.n_head, c.n_embd, c.block_size), (4, 4, 128, 64));
/// assert_eq!(c.d_head(), 32);
/// assert!(c.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
// ANCHOR: gpt_config
pub struct GptConfig {
    /// `V`: the tokens (here characters) the model knows.
    pub vocab_size: usize,
    /// `T`: the longest context (GPT-2's `n_positions`).
    pub block_size: usize,
    /// Decoder blocks.
    pub n_layer: usize,
    /// Attention heads per block.
    pub n_head: usize,
    /// `d_model`, the width of every token's vector.
    pub n_embd: usize,
    /// `ε` of every layer norm.
    pub layer_norm_epsilon: f64,
    /// Trained shifts in linear maps and layer norms.
    pub bias: bool,
    /// How the model knows where each token is (GPT-2: learned; chapter 16 tries others).
    pub positions: Positions,
}
// ANCHOR_END: gpt_config

impl GptConfig {
    /// nanoGPT's small CPU run on Shakespeare: 4 blocks of 4 heads, `d_model = 128`,
    /// contexts of 64 characters, `ε = 1e-5`, no biases.
    ///
    /// ```
    /// use attention::gpt::config::GptConfig;
    ///
    /// assert_eq!(GptConfig::shakespeare(65).vocab_size, 65);
    /// assert!(!GptConfig::shakespeare(65).bias);
    /// ```
    pub fn shakespeare(vocab_size: usize) -> Self {
        GptConfig {
            vocab_size,
            block_size: 64,
            n_layer: 4,
            n_head: 4,
            n_embd: 128,
            layer_norm_epsilon: 1e-5,
            bias: false,
            positions: Positions::Learned,
        }
    }

    /// An error naming the first size that cannot make a model: a zero size, heads that do
    /// not divide `n_embd`, or an `ε` that is not positive and finite.
    ///
    /// ```
    /// use attention::gpt::config::GptConfig;
    ///
    /// let c = GptConfig { n_head: 3, ..GptConfig::shakespeare(65) };
    /// assert_eq!(
    ///     c.validate().unwrap_err().to_string(),
    ///     "GPT config: n_embd = 128 is not a multiple of n_head = 3"
    /// );
    /// ```
    // ANCHOR: config_validate
    pub fn validate(&self) -> Result<()> {
        let invalid =
            |problem: String| AttentionError::Invalid { what: "GPT config".into(), problem };
        for (name, size) in [
            ("vocab_size", self.vocab_size),
            ("block_size", self.block_size),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_embd", self.n_embd),
        ] {
            if size == 0 {
                return Err(invalid(format!("{name} is 0; it must be at least 1")));
            }
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            let (d, h) = (self.n_embd, self.n_head);
            return Err(invalid(format!("n_embd = {d} is not a multiple of n_head = {h}")));
        }
        let eps = self.layer_norm_epsilon;
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(invalid(format!(
                "layer_norm_epsilon = {eps} must be positive and finite"
            )));
        }
        self.validate_positions().map_err(invalid)
    }

    /// The positions' settings: RoPE needs an even `d_head`, a base above 1 and factors of at
    /// least 1 (Llama 3's: `high_freq_factor > low_freq_factor > 0`).
    fn validate_positions(&self) -> std::result::Result<(), String> {
        let Positions::Rope { base, scaling } = self.positions else { return Ok(()) };
        if self.d_head() % 2 != 0 {
            return Err(format!("RoPE needs an even d_head, but it is {}", self.d_head()));
        }
        if !(base > 1.0 && base.is_finite()) {
            return Err(format!("RoPE's base = {base} must be above 1 and finite"));
        }
        let factor = match scaling {
            RopeScaling::None => 1.0,
            RopeScaling::Linear { factor } | RopeScaling::NtkAware { factor } => factor,
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original,
            } => {
                if !(low > 0.0 && high > low && high.is_finite() && original > 0) {
                    return Err(format!(
                        "Llama 3's scaling needs high_freq_factor > low_freq_factor > 0 and \
                         original > 0, but they are {high}, {low} and {original}"
                    ));
                }
                factor
            }
        };
        if !(factor >= 1.0 && factor.is_finite()) {
            return Err(format!("RoPE's scaling factor = {factor} must be at least 1"));
        }
        Ok(())
    }
    // ANCHOR_END: config_validate

    /// The width of one head, `n_embd / n_head`.
    ///
    /// ```
    /// use attention::gpt::config::GptConfig;
    ///
    /// assert_eq!(GptConfig::shakespeare(65).d_head(), 32);
    /// ```
    pub fn d_head(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// The number of trained parameters: the token and position tables, in every block four
    /// matrices (`12·d²` numbers) and two layer-norm gains, the final layer norm's gain, and,
    /// with `bias`, every shift. The LM head is the token table again (tied), so it adds none.
    ///
    /// ```
    /// use attention::gpt::config::GptConfig;
    ///
    /// // 71·128 + 64·128 + 4·(12·128² + 2·128) + 128
    /// assert_eq!(GptConfig::shakespeare(71).parameter_count(), 804_864);
    /// ```
    // ANCHOR: parameter_count
    pub fn parameter_count(&self) -> usize {
        let d = self.n_embd;
        let positions = if self.positions.learned() { self.block_size * d } else { 0 };
        let tables = self.vocab_size * d + positions;
        let matrices = d * 3 * d + d * d + d * 4 * d + 4 * d * d; // c_attn, c_proj, c_fc, c_proj
        let gains = 2 * d;
        let shifts = if self.bias { 3 * d + d + 4 * d + d + 2 * d } else { 0 };
        let final_norm = if self.bias { 2 * d } else { d };
        tables + self.n_layer * (matrices + gains + shifts) + final_norm
    }
    // ANCHOR_END: parameter_count

    /// The multiply-adds of one training step, counted as FLOPs (2 per multiply-add) per
    /// token: the forward pass costs 2 FLOPs per weight of every matrix the token meets (the
    /// blocks' and the tied head's), plus attention's `Q·Kᵀ` and `P·V` over a full context of
    /// `T` keys (`2·2·T·d` per block); the backward pass costs twice the forward. That is
    /// PaLM's `6N + 12·n_layer·d·T`, with `N` the weights of the matrices; nanoGPT's
    /// `estimate_mfu` counts every parameter but the position table in `N` (its layer-norm
    /// gains too: 1 152 more here, 0.13 % more FLOPs).
    ///
    /// ```
    /// use attention::gpt::config::GptConfig;
    ///
    /// // 6·(4·12·128² + 71·128) + 12·4·128·64
    /// assert_eq!(GptConfig::shakespeare(71).training_flops_per_token(), 5_166_336);
    /// ```
    // ANCHOR: flops_per_token
    pub fn training_flops_per_token(&self) -> usize {
        let d = self.n_embd;
        let weights = self.n_layer * 12 * d * d + self.vocab_size * d; // blocks + tied head
        let attention = self.n_layer * 2 * 2 * self.block_size * d; // Q·Kᵀ and P·V, forward
        3 * (2 * weights + attention)
    }
    // ANCHOR_END: flops_per_token

    /// The names of the model's tensors in Hugging Face's GPT-2 layout, in the order
    /// [`Gpt::tensors`](super::weights::Gpt::tensors) lists them, with their shapes.
    ///
    /// ```
    /// use attention::gpt::config::GptConfig;
    ///
    /// let names = GptConfig::shakespeare(65).tensor_names();
    /// assert_eq!(names[0], "transformer.wte.weight");
    /// assert_eq!(names[13], "transformer.h.0.mlp.c_proj.bias");
    /// ```
    pub fn tensor_names(&self) -> Vec<String> {
        tensor_names(self.n_layer)
    }

    /// The shape of every tensor of [`GptConfig::tensor_names`], in the same order.
    ///
    /// ```
    /// use attention::gpt::config::GptConfig;
    ///
    /// let shapes = GptConfig::shakespeare(65).tensor_shapes();
    /// assert_eq!(shapes[0], vec![65, 128]);
    /// assert_eq!(shapes[4], vec![128, 384]);
    /// ```
    pub fn tensor_shapes(&self) -> Vec<Vec<usize>> {
        let (v, t, d) = (self.vocab_size, self.block_size, self.n_embd);
        let mut shapes = vec![vec![v, d], vec![t, d]];
        for _ in 0..self.n_layer {
            shapes.extend([
                vec![d],
                vec![d],
                vec![d, 3 * d],
                vec![3 * d],
                vec![d, d],
                vec![d],
                vec![d],
                vec![d],
                vec![d, 4 * d],
                vec![4 * d],
                vec![4 * d, d],
                vec![d],
            ]);
        }
        shapes.extend([vec![d], vec![d]]);
        shapes
    }
}

/// The GPT-2 names of the tensors of a model of `blocks` blocks, in order.
// ANCHOR: tensor_names
pub(super) fn tensor_names(blocks: usize) -> Vec<String> {
    let mut names =
        vec!["transformer.wte.weight".to_string(), "transformer.wpe.weight".into()];
    for i in 0..blocks {
        for part in BLOCK_TENSORS {
            names.push(format!("transformer.h.{i}.{part}"));
        }
    }
    names.extend(["transformer.ln_f.weight".to_string(), "transformer.ln_f.bias".into()]);
    names
}
// ANCHOR_END: tensor_names

/// The tensors of one block, after its prefix `transformer.h.{i}.`, in GPT-2's names.
const BLOCK_TENSORS: [&str; 12] = [
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
];
