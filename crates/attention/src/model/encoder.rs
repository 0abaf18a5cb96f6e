//! Chapter *Inside a real model*: the encoder layer, attention and feed-forward with residuals
//! and layer norms.
//!
//! A BERT layer wraps the multi-head attention of chapter 6 and the feed-forward block in two
//! residual connections, each followed by a layer norm ("post-LN", as in the original
//! Transformer and BERT):
//!
//! `h = LN₁(x + MHA(x))`, then `out = LN₂(h + FFN(h))`,
//!
//! all `(batch, L, d_model)`. A batch of sentences of different lengths is padded to one `L`
//! and masked with chapter 4's padding mask ([`Mask::padding`]): no token attends to padding,
//! so each sentence's real tokens come out as they would alone. (The padding positions get
//! numbers too, which nothing should read.) In BERT's files the parts are named
//! `attention.self.{query,key,value}`, `attention.output.dense` (`W_O`),
//! `attention.output.LayerNorm` (LN₁), `intermediate.dense` (`W₁`), `output.dense` (`W₂`) and
//! `output.LayerNorm` (LN₂); Hugging Face's `BertLayer` is the reference.
//!
//! Anchors (below the doc comments): `encoder_layer`, `encoder_attention`.

use ndarray::{Array3, Array4, ArrayRef3};

use crate::error::{AttentionError, Result};
use crate::feed_forward::FeedForward;
use crate::float::Float;
use crate::layer_norm::LayerNorm;
use crate::mask::Mask;
use crate::multihead::{MultiHeadAttention, MultiHeadOutput};

/// What an encoder layer returns: the new hidden states and every head's weights.
///
/// ```
/// use attention::encoder::EncoderOutput;
/// use ndarray::{Array3, Array4};
///
/// let out = EncoderOutput::<f32> {
///     hidden: Array3::zeros((1, 5, 8)),
///     weights: Array4::zeros((1, 2, 5, 5)),
/// };
/// assert_eq!(out.weights.dim().1, 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: encoder_layer
pub struct EncoderOutput<A> {
    /// `(batch, L, d_model)`: the tokens after the layer.
    pub hidden: Array3<A>,
    /// `(batch, heads, L, L)`: each head's attention weights, row = query.
    pub weights: Array4<A>,
}

// ANCHOR_END: encoder_layer
/// One post-LN encoder layer, as BERT's: `h = LN₁(x + MHA(x))`, `out = LN₂(h + FFN(h))`.
///
/// ```
/// use attention::{
///     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
///     multihead::MultiHeadAttention, projection::Linear,
/// };
/// use ndarray::{Array1, Array3};
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let mut rng = StdRng::seed_from_u64(0);
/// let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
/// let ffn = FeedForward::new(
///     Linear::random(8, 32, &mut rng).unwrap(),
///     Linear::random(32, 8, &mut rng).unwrap(),
/// )
/// .unwrap();
/// let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
/// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
/// let out = layer.forward(&Array3::from_elem((1, 3, 8), 0.5), None).unwrap();
/// assert_eq!((out.hidden.dim(), out.weights.dim()), ((1, 3, 8), (1, 2, 3, 3)));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: encoder_layer
pub struct EncoderLayer<A> {
    attention: MultiHeadAttention<A>, // W_Q, W_K, W_V, W_O with their biases
    attention_norm: LayerNorm<A>,     // LN₁, after attention and its residual
    feed_forward: FeedForward<A>,     // W₁, GELU, W₂
    output_norm: LayerNorm<A>,        // LN₂, after the feed-forward block and its residual
}

impl<A: Float> EncoderLayer<A> {
    // ANCHOR_END: encoder_layer
    /// A layer from its four parts, which must agree on `d_model`.
    ///
    /// ```
    /// use attention::{
    ///     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    ///     multihead::MultiHeadAttention, projection::Linear,
    /// };
    /// use ndarray::Array1;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mut rng = StdRng::seed_from_u64(0);
    /// let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// let ffn = FeedForward::new(
    ///     Linear::random(8, 32, &mut rng).unwrap(),
    ///     Linear::random(32, 8, &mut rng).unwrap(),
    /// )
    /// .unwrap();
    /// let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let narrow = LayerNorm::new(Array1::ones(6), Array1::zeros(6), 1e-12).unwrap();
    /// assert_eq!(
    ///     EncoderLayer::new(attention, norm, ffn, narrow).unwrap_err().to_string(),
    ///     "attention has d_model = 8 but output_norm has d_model = 6"
    /// );
    /// ```
    // ANCHOR: encoder_layer
    pub fn new(
        attention: MultiHeadAttention<A>,
        attention_norm: LayerNorm<A>,
        feed_forward: FeedForward<A>,
        output_norm: LayerNorm<A>,
    ) -> Result<Self> {
        let d_model = attention.d_model();
        for (name, d) in [
            ("attention_norm", attention_norm.d_model()),
            ("feed_forward", feed_forward.d_model()),
            ("output_norm", output_norm.d_model()),
        ] {
            if d != d_model {
                return Err(AttentionError::mismatch(
                    "attention",
                    d_model,
                    name,
                    d,
                    "d_model",
                ));
            }
        }
        Ok(EncoderLayer { attention, attention_norm, feed_forward, output_norm })
    }

    // ANCHOR_END: encoder_layer
    /// The layer over a batch `x: (batch, L, d_model)`. The mask is as
    /// [`MultiHeadAttention::forward_batched`] takes it: for sentences of different lengths,
    /// a padding mask `(batch, L, L)` from [`Mask::padding`].
    ///
    /// ```
    /// use attention::{
    ///     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    ///     mask::Mask, multihead::MultiHeadAttention, projection::Linear,
    /// };
    /// use ndarray::{s, Array1, Array3};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mut rng = StdRng::seed_from_u64(1);
    /// let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// let ffn = FeedForward::new(
    ///     Linear::random(8, 32, &mut rng).unwrap(),
    ///     Linear::random(32, 8, &mut rng).unwrap(),
    /// )
    /// .unwrap();
    /// let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// let x = Array3::from_shape_fn((2, 4, 8), |(b, i, j)| ((b + 3 * i + j) % 5) as f64);
    /// let padded = layer.forward(&x, Some(&Mask::padding(&[4, 2], 4, 4).unwrap())).unwrap();
    /// // Item 1 has 2 real tokens: they come out as they would alone.
    /// let alone = layer.forward(&x.slice(s![1..2, ..2, ..]), None).unwrap();
    /// let same = padded.hidden.slice(s![1..2, ..2, ..]);
    /// assert!((&same - &alone.hidden).iter().all(|d| d.abs() < 1e-12));
    /// ```
    // ANCHOR: encoder_layer
    pub fn forward(&self, x: &ArrayRef3<A>, mask: Option<&Mask>) -> Result<EncoderOutput<A>> {
        let MultiHeadOutput { output, weights } = self.attention.forward_batched(x, mask)?;
        let h = self.attention_norm.apply(&(output + x))?; // h = LN₁(x + MHA(x))
        let ffn = self.feed_forward.apply(&h)?;
        let hidden = self.output_norm.apply(&(&h + &ffn))?; // out = LN₂(h + FFN(h))
        Ok(EncoderOutput { hidden, weights })
    }
}
// ANCHOR_END: encoder_layer

impl<A: Float> EncoderLayer<A> {
    /// The multi-head attention inside the layer.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// assert_eq!((layer.attention().heads(), layer.d_model()), (2, 8));
    /// ```
    // ANCHOR: encoder_attention
    pub fn attention(&self) -> &MultiHeadAttention<A> {
        &self.attention
    }
    // ANCHOR_END: encoder_attention

    /// The layer norm after attention, LN₁.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// let ln1 = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let ln2 = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-5).unwrap();
    /// let layer = EncoderLayer::new(attention, ln1, ffn, ln2).unwrap();
    /// assert_eq!((layer.attention_norm().eps(), layer.output_norm().eps()), (1e-12, 1e-5));
    /// ```
    pub fn attention_norm(&self) -> &LayerNorm<A> {
        &self.attention_norm
    }

    /// The feed-forward block.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// assert_eq!(layer.feed_forward().d_ff(), 32);
    /// ```
    pub fn feed_forward(&self) -> &FeedForward<A> {
        &self.feed_forward
    }

    /// The layer norm after the feed-forward block, LN₂.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// assert_eq!(layer.output_norm().d_model(), 8);
    /// ```
    pub fn output_norm(&self) -> &LayerNorm<A> {
        &self.output_norm
    }

    /// The width of the tokens, `d_model`.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// assert_eq!(layer.d_model(), 8);
    /// ```
    pub fn d_model(&self) -> usize {
        self.attention.d_model()
    }

    /// The number of learnable numbers in the four parts.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// // 4·8² (attention, no biases) + 2·8·32 (feed-forward) + 2·2·8 (two norms)
    /// assert_eq!(layer.parameter_count(), 256 + 512 + 32);
    /// ```
    pub fn parameter_count(&self) -> usize {
        self.attention.parameter_count()
            + self.attention_norm.parameter_count()
            + self.feed_forward.parameter_count()
            + self.output_norm.parameter_count()
    }

    /// The same layer with attention head `head` removed
    /// ([`MultiHeadAttention::without_head`]): the head contributes nothing to the residual,
    /// everything else is unchanged.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::{Array1, Array3};
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f64>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// let x = Array3::from_shape_fn((1, 3, 8), |(_, i, j)| ((i + j) % 3) as f64);
    /// let full = layer.forward(&x, None).unwrap();
    /// let ablated = layer.without_head(1).unwrap().forward(&x, None).unwrap();
    /// assert_eq!(full.weights, ablated.weights); // it still attends, it is not heard
    /// assert_ne!(full.hidden, ablated.hidden);
    /// assert!(layer.without_head(2).is_err());
    /// ```
    pub fn without_head(&self, head: usize) -> Result<Self> {
        Ok(EncoderLayer { attention: self.attention.without_head(head)?, ..self.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::Linear;
    use ndarray::{Array, Dimension, ShapeBuilder, s};
    use rand::{SeedableRng, rngs::StdRng};
    use rand_distr::{Distribution, StandardNormal};

    fn random<D: Dimension, Sh: ShapeBuilder<Dim = D>>(
        shape: Sh,
        scale: f64,
        rng: &mut StdRng,
    ) -> Array<f64, D> {
        Array::from_shape_simple_fn(shape, || {
            let z: f64 = StandardNormal.sample(rng);
            scale * z
        })
    }

    fn linear(d_in: usize, d_out: usize, rng: &mut StdRng) -> Linear<f64> {
        let w = random((d_in, d_out), 1.0 / (d_in as f64).sqrt(), rng);
        Linear::with_bias(w, random(d_out, 0.1, rng)).unwrap()
    }

    fn norm(d: usize, rng: &mut StdRng) -> LayerNorm<f64> {
        let gamma = random(d, 0.1, rng) + 1.0;
        LayerNorm::new(gamma, random(d, 0.1, rng), 1e-12).unwrap()
    }

    /// A BERT-shaped layer with random weights and biases everywhere.
    fn layer(d_model: usize, heads: usize, d_ff: usize, seed: u64) -> EncoderLayer<f64> {
        let rng = &mut StdRng::seed_from_u64(seed);
        let [w_q, w_k, w_v, w_o] = std::array::from_fn(|_| linear(d_model, d_model, rng));
        let attention =
            MultiHeadAttention::from_projections(w_q, w_k, w_v, w_o, heads).unwrap();
        let ffn = FeedForward::new(linear(d_model, d_ff, rng), linear(d_ff, d_model, rng));
        EncoderLayer::new(attention, norm(d_model, rng), ffn.unwrap(), norm(d_model, rng))
            .unwrap()
    }

    /// The layer is the formula, written out on one sentence with the parts' own pieces:
    /// `h = LN₁(x + MHA(x))`, `out = LN₂(h + FFN(h))` (not pre-LN, not without residuals).
    #[test]
    fn forward_is_post_ln_with_two_residuals() {
        let layer = layer(12, 3, 24, 1);
        let x: Array3<f64> = random((1, 5, 12), 1.0, &mut StdRng::seed_from_u64(2));
        let out = layer.forward(&x, None).unwrap();
        let x2 = x.slice(s![0, .., ..]);
        let att = layer.attention().forward(&x2, None).unwrap();
        let h = layer.attention_norm().apply(&(&x2 + &att.output)).unwrap();
        let [up, down] = layer.feed_forward().maps();
        let inner = (h.dot(up.weight()) + up.bias().unwrap()).mapv(crate::feed_forward::gelu);
        let ffn = inner.dot(down.weight()) + down.bias().unwrap();
        let expected = layer.output_norm().apply(&(&h + &ffn)).unwrap();
        let got = out.hidden.slice(s![0, .., ..]);
        assert!((&got - &expected).iter().all(|d| d.abs() < 1e-12));
        assert_eq!(out.weights.slice(s![0, .., .., ..]), att.weights);
        // Pre-LN (x + MHA(LN₁(x)), ...) gives something else: the test can tell them apart.
        let pre = &x2
            + &layer
                .attention()
                .forward(&layer.attention_norm().apply(&x2).unwrap(), None)
                .unwrap()
                .output;
        assert!((&got - &pre).iter().any(|d| d.abs() > 1e-2));
    }

    /// Sentences of different lengths, padded with junk to one L and masked: the real
    /// tokens of each come out as the sentence alone gives them (within 1e-12 in f64), and
    /// its weights on padding are exactly 0.
    #[test]
    fn padding_does_not_change_the_real_tokens() {
        let layer = layer(16, 4, 32, 3);
        let lengths = [7, 4, 1, 7];
        let l = 7;
        let x: Array3<f64> =
            random((lengths.len(), l, 16), 2.0, &mut StdRng::seed_from_u64(4));
        let mask = Mask::padding(&lengths, l, l).unwrap();
        let batch = layer.forward(&x, Some(&mask)).unwrap();
        for (b, &n) in lengths.iter().enumerate() {
            let alone = layer.forward(&x.slice(s![b..b + 1, ..n, ..]), None).unwrap();
            let hidden = batch.hidden.slice(s![b..b + 1, ..n, ..]);
            let gap = (&hidden - &alone.hidden).iter().fold(0.0, |m: f64, d| m.max(d.abs()));
            assert!(gap < 1e-12, "item {b}: {gap}");
            let weights = batch.weights.slice(s![b..b + 1, .., ..n, ..n]);
            assert!((&weights - &alone.weights).iter().all(|d| d.abs() < 1e-12));
            assert!(batch.weights.slice(s![b, .., .., n..]).iter().all(|&w| w == 0.0));
        }
        // Without the mask the short items do change: the mask is what protects them.
        let unmasked = layer.forward(&x, None).unwrap();
        let gap = (&unmasked.hidden.slice(s![1, ..4, ..])
            - &batch.hidden.slice(s![1, ..4, ..]))
            .iter()
            .fold(0.0, |m: f64, d| m.max(d.abs()));
        assert!(gap > 1e-3);
    }

    /// Ablating a head changes only the attention (as `MultiHeadAttention::without_head`
    /// does: its own test checks that exactly the head's term goes); with every head gone,
    /// attention adds only `W_O`'s bias and `h = LN₁(x + b_O)`.
    #[test]
    fn without_head_changes_only_the_attention() {
        let layer = layer(8, 4, 16, 5);
        let x: Array3<f64> = random((2, 6, 8), 1.0, &mut StdRng::seed_from_u64(6));
        let full = layer.forward(&x, None).unwrap();
        let mut all_gone = layer.clone();
        for head in 0..4 {
            let ablated = layer.without_head(head).unwrap();
            assert_eq!(ablated.attention(), &layer.attention().without_head(head).unwrap());
            assert_eq!(ablated.attention_norm(), layer.attention_norm());
            assert_eq!(ablated.feed_forward(), layer.feed_forward());
            assert_eq!(ablated.output_norm(), layer.output_norm());
            let out = ablated.forward(&x, None).unwrap();
            assert_eq!(out.weights, full.weights);
            assert!((&out.hidden - &full.hidden).iter().any(|d| d.abs() > 1e-3), "{head}");
            all_gone = all_gone.without_head(head).unwrap();
        }
        let b_o = layer.attention().projections()[3].bias().unwrap();
        let h = layer.attention_norm().apply(&(&x + b_o)).unwrap();
        let expected =
            layer.output_norm().apply(&(&h + &layer.feed_forward().apply(&h).unwrap()));
        let gap = (&all_gone.forward(&x, None).unwrap().hidden - &expected.unwrap())
            .iter()
            .fold(0.0, |m: f64, d| m.max(d.abs()));
        assert!(gap < 1e-12, "{gap}");
        assert!(layer.without_head(4).is_err());
    }

    /// f32 and f64 agree to f32 rounding on a BERT-sized layer (d_model 384, 12 heads,
    /// d_ff 1536), so nothing in the layer loses precision in f32.
    #[test]
    fn f32_agrees_with_f64() {
        let layer = layer(384, 12, 1536, 7);
        let x: Array3<f64> = random((1, 9, 384), 1.0, &mut StdRng::seed_from_u64(8));
        let out = layer.forward(&x, None).unwrap();
        let to32 = |l: &Linear<f64>| {
            Linear::with_bias(
                l.weight().mapv(|w| w as f32),
                l.bias().unwrap().mapv(|b| b as f32),
            )
            .unwrap()
        };
        let ln32 = |n: &LayerNorm<f64>| {
            LayerNorm::new(n.gamma().mapv(|g| g as f32), n.beta().mapv(|b| b as f32), n.eps())
                .unwrap()
        };
        let [w_q, w_k, w_v, w_o] = layer.attention().projections().map(to32);
        let [up, down] = layer.feed_forward().maps().map(to32);
        let layer32 = EncoderLayer::new(
            MultiHeadAttention::from_projections(w_q, w_k, w_v, w_o, 12).unwrap(),
            ln32(layer.attention_norm()),
            FeedForward::new(up, down).unwrap(),
            ln32(layer.output_norm()),
        )
        .unwrap();
        let out32 = layer32.forward(&x.mapv(|v| v as f32), None).unwrap();
        let gap = (&out32.hidden.mapv(f64::from) - &out.hidden)
            .iter()
            .fold(0.0, |m: f64, d| m.max(d.abs()));
        assert!(gap < 1e-4 && gap > 0.0, "{gap}");
    }

    #[test]
    fn parts_must_agree_on_d_model() {
        let a = layer(8, 2, 16, 9);
        let b = layer(6, 2, 12, 9);
        let err = EncoderLayer::new(
            a.attention().clone(),
            a.attention_norm().clone(),
            b.feed_forward().clone(),
            a.output_norm().clone(),
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "attention has d_model = 8 but feed_forward has d_model = 6"
        );
        let x = Array3::<f64>::zeros((1, 3, 6));
        assert_eq!(
            a.forward(&x, None).unwrap_err().to_string(),
            "x has d_in = 6 but W has d_in = 8"
        );
    }
}
