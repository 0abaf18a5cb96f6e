//! A BERT encoder assembled from the attention crate's layers and a checkpoint's tensors.
//!
//! Each block has a `load` whose `prefix` mirrors the tensor names in the file
//! (`encoder.layer.3.attention.self.query.weight`), and each mirrors a class of Hugging Face
//! transformers' `modeling_bert.py`: [`Embeddings`] is `BertEmbeddings`, [`load_layer`] reads
//! what `BertLayer` holds (`BertAttention` = `BertSelfAttention` + `BertSelfOutput`,
//! `BertIntermediate` + `BertOutput`), and [`Bert`] is `BertModel` without its pooler.
//!
//! Anchors (below the doc comments): `embeddings`, `load_layer`, `bert_forward` (chapter
//! *Inside a real model*).

use std::path::Path;
use std::sync::Arc;

use attention::embeddings::EmbeddingTable;
use attention::encoder::{EncoderLayer, EncoderOutput};
use attention::feed_forward::FeedForward;
use attention::gpt::packed::FastEncoderLayer;
use attention::layer_norm::LayerNorm;
use attention::mask::Mask;
use attention::multihead::MultiHeadAttention;
use attention::pooling::{l2_normalize, mean_pool};
use attention::position::LearnedPositions;
use ndarray::{Array2, Array3, Array4, Axis, s};

use crate::config::BertConfig;
use crate::error::{PretrainedError, Result};
use crate::weights::Tensors;

/// What goes into the first layer: a token's word vector, plus its position's learned
/// vector, plus the vector of token type 0 (BERT's "sentence A"), then a layer norm.
///
/// ```
/// use pretrained::Bert;
///
/// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
/// let x = bert.embeddings().forward(&[101, 7592, 102]).unwrap(); // [CLS] hello [SEP]
/// assert_eq!(x.dim(), (3, 384));
/// ```
#[derive(Debug, Clone)]
// ANCHOR: embeddings
pub struct Embeddings {
    words: EmbeddingTable<f32>, // (vocab_size, d_model), chapter 1's table
    positions: LearnedPositions<f32>, // (max_position_embeddings, d_model), chapter 9's
    token_type: Array2<f32>,    // (type_vocab_size, d_model); BERT uses row 0 here
    norm: LayerNorm<f32>,
}

impl Embeddings {
    // ANCHOR_END: embeddings
    /// Reads the `embeddings.*` tensors.
    ///
    /// ```
    /// use pretrained::{BertConfig, Embeddings, Tensors};
    ///
    /// let dir = pretrained::minilm_dir();
    /// let config = BertConfig::from_dir(&dir).unwrap();
    /// let path = dir.join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let embeddings = Embeddings::load(&mut Tensors::new(&path, &bytes).unwrap(), &config);
    /// assert!(embeddings.is_ok());
    /// ```
    // ANCHOR: embeddings
    pub fn load(t: &mut Tensors, c: &BertConfig) -> Result<Self> {
        let d = c.hidden_size;
        Ok(Embeddings {
            words: EmbeddingTable::new(t.matrix(
                "embeddings.word_embeddings.weight",
                c.vocab_size,
                d,
            )?)?,
            positions: LearnedPositions::new(t.matrix(
                "embeddings.position_embeddings.weight",
                c.max_position_embeddings,
                d,
            )?)?,
            token_type: t.matrix(
                "embeddings.token_type_embeddings.weight",
                c.type_vocab_size,
                d,
            )?,
            norm: t.layer_norm("embeddings.LayerNorm", d, c.layer_norm_eps)?,
        })
    }

    // ANCHOR_END: embeddings
    /// The input of the first layer for one sequence of token ids: `(L, d_model)`, with the
    /// positions' rows `0 .. L` ([`Embeddings::forward_from`] with `first` = 0).
    ///
    /// ```
    /// use pretrained::Bert;
    ///
    /// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
    /// let err = bert.embeddings().forward(&[101, 40_000, 102]).unwrap_err();
    /// assert_eq!(err.to_string(), "token id 40000 is out of range for a vocabulary of 30522 tokens");
    /// ```
    // ANCHOR: embeddings
    pub fn forward(&self, ids: &[u32]) -> Result<Array2<f32>> {
        self.forward_from(ids, 0)
    }

    // ANCHOR_END: embeddings
    /// As [`Embeddings::forward`], with the positions' rows `first .. first + L` instead of
    /// `0 .. L`: what transformers computes when given `position_ids` that start at `first`.
    /// Chapter *Inside a real model* uses it to ask whether a head follows the first token or
    /// position 0. The last row must stay inside the table.
    ///
    /// ```
    /// use pretrained::Bert;
    ///
    /// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
    /// let e = bert.embeddings();
    /// let ids = [101, 7592, 102];
    /// assert_eq!(e.forward_from(&ids, 0).unwrap(), e.forward(&ids).unwrap());
    /// assert_ne!(e.forward_from(&ids, 50).unwrap(), e.forward(&ids).unwrap());
    /// assert!(e.forward_from(&ids, 510).is_err()); // position 512 is not in the table
    /// ```
    // ANCHOR: embeddings
    pub fn forward_from(&self, ids: &[u32], first: usize) -> Result<Array2<f32>> {
        let ids: Vec<usize> = ids.iter().map(|&id| id as usize).collect();
        let words = self.words.lookup(&ids)?; // (L, d_model)
        let positions = self.positions.lookup(first, ids.len())?; // rows first..first + L
        let x = words + positions + self.token_type.row(0);
        Ok(self.norm.apply(&x)?)
    }
}
// ANCHOR_END: embeddings

/// Reads encoder layer `i`: its attention (`W_Q`, `W_K`, `W_V`, `W_O` with biases), the
/// layer norm after it, the feed-forward block, and the layer norm after that.
///
/// ```
/// use pretrained::{BertConfig, Tensors, load_layer};
///
/// let dir = pretrained::minilm_dir();
/// let config = BertConfig::from_dir(&dir).unwrap();
/// let path = dir.join("model.safetensors");
/// let bytes = std::fs::read(&path).unwrap();
/// let layer = load_layer(&mut Tensors::new(&path, &bytes).unwrap(), &config, 5).unwrap();
/// assert_eq!(layer.attention().heads(), 12);
/// ```
// ANCHOR: load_layer
pub fn load_layer(t: &mut Tensors, c: &BertConfig, i: usize) -> Result<EncoderLayer<f32>> {
    let (d, d_ff, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
    let p = format!("encoder.layer.{i}");
    let attention = MultiHeadAttention::from_projections(
        t.linear(&format!("{p}.attention.self.query"), d, d)?,
        t.linear(&format!("{p}.attention.self.key"), d, d)?,
        t.linear(&format!("{p}.attention.self.value"), d, d)?,
        t.linear(&format!("{p}.attention.output.dense"), d, d)?, // W_O
        c.num_attention_heads,
    )?;
    let attention_norm = t.layer_norm(&format!("{p}.attention.output.LayerNorm"), d, eps)?;
    let feed_forward = FeedForward::new(
        t.linear(&format!("{p}.intermediate.dense"), d, d_ff)?, // up: (d_model, d_ff)
        t.linear(&format!("{p}.output.dense"), d_ff, d)?,       // down: (d_ff, d_model)
    )?;
    let output_norm = t.layer_norm(&format!("{p}.output.LayerNorm"), d, eps)?;
    Ok(EncoderLayer::new(attention, attention_norm, feed_forward, output_norm)?)
}
// ANCHOR_END: load_layer

/// Everything a forward pass computes, for a batch of sequences padded to the longest.
///
/// ```
/// use pretrained::Bert;
///
/// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
/// let out = bert.forward(&[&[101, 7592, 2088, 102], &[101, 7592, 102]]).unwrap();
/// assert_eq!(out.hidden_states.len(), 7); // the embeddings, then one per layer
/// assert_eq!(out.hidden_states[6].dim(), (2, 4, 384));
/// assert_eq!(out.attentions[0].dim(), (2, 12, 4, 4));
/// assert_eq!(out.attentions[0][[1, 0, 0, 3]], 0.0); // item 1's padding gets no weight
/// assert_eq!(out.lengths, [4, 3]);
/// ```
#[derive(Debug, Clone)]
pub struct BertOutput {
    /// `num_hidden_layers + 1` arrays `(batch, L, d_model)`: the embeddings' output, then each
    /// layer's (transformers' `hidden_states`). Rows past an item's length are padding.
    pub hidden_states: Vec<Array3<f32>>,
    /// `num_hidden_layers` arrays `(batch, heads, L, L)`: every head's weights (transformers'
    /// `attentions`). Padding keys get weight 0.
    pub attentions: Vec<Array4<f32>>,
    /// The number of real tokens of each batch item.
    pub lengths: Vec<usize>,
}

/// A BERT encoder: embeddings and a stack of post-LN encoder layers.
///
/// ```
/// use pretrained::Bert;
///
/// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
/// assert_eq!(bert.config().num_hidden_layers, 6);
/// assert_eq!(bert.layers().len(), 6);
/// ```
#[derive(Debug, Clone)]
pub struct Bert {
    config: BertConfig,
    embeddings: Arc<Embeddings>,
    layers: Vec<Arc<EncoderLayer<f32>>>,
}

impl Bert {
    /// Loads `dir/config.json` and `dir/model.safetensors`, checking every tensor.
    ///
    /// ```
    /// use pretrained::Bert;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let config = pretrained::minilm_dir().join("config.json");
    /// std::fs::copy(config, dir.path().join("config.json")).unwrap();
    /// std::fs::write(dir.path().join("model.safetensors"), b"\x02\0\0\0\0\0\0\0{}").unwrap();
    /// let err = Bert::load(dir.path()).unwrap_err().to_string();
    /// assert!(err.ends_with("tensor embeddings.word_embeddings.weight is missing (expected shape [30522, 384])"), "{err}");
    /// ```
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let config = BertConfig::from_dir(dir)?;
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path)
            .map_err(|source| PretrainedError::Io { path: path.clone(), source })?;
        let mut tensors = Tensors::new(&path, &bytes)?;
        let embeddings = Arc::new(Embeddings::load(&mut tensors, &config)?);
        let layers = (0..config.num_hidden_layers)
            .map(|i| load_layer(&mut tensors, &config, i).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        tensors.finish()?;
        Ok(Bert { config, embeddings, layers })
    }

    /// The model's sizes.
    ///
    /// ```
    /// let bert = pretrained::Bert::load(pretrained::minilm_dir()).unwrap();
    /// assert_eq!(bert.config().hidden_size, 384);
    /// ```
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The embedding block.
    ///
    /// ```
    /// let bert = pretrained::Bert::load(pretrained::minilm_dir()).unwrap();
    /// assert_eq!(bert.embeddings().forward(&[101, 102]).unwrap().dim(), (2, 384));
    /// ```
    pub fn embeddings(&self) -> &Embeddings {
        &self.embeddings
    }

    /// The encoder layers, first to last.
    ///
    /// ```
    /// let bert = pretrained::Bert::load(pretrained::minilm_dir()).unwrap();
    /// assert_eq!(bert.layers()[0].attention().d_head(), 32);
    /// ```
    pub fn layers(&self) -> &[Arc<EncoderLayer<f32>>] {
        &self.layers
    }

    /// Runs a batch of token-id sequences (each at least one id, at most
    /// `max_position_embeddings`). Shorter sequences are padded with id 0 to the longest,
    /// and a padding mask (chapter 4) keeps every query from attending to padding, so each
    /// sequence's real rows come out as if it ran alone.
    ///
    /// ```
    /// use pretrained::Bert;
    ///
    /// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
    /// let alone = bert.forward(&[&[101, 7592, 102]]).unwrap();
    /// let batch = bert.forward(&[&[101, 7592, 2088, 999, 102], &[101, 7592, 102]]).unwrap();
    /// let (a, b) = (&alone.hidden_states[6], &batch.hidden_states[6]);
    /// let diff = (a.slice(ndarray::s![0, .., ..]).to_owned() - b.slice(ndarray::s![1, ..3, ..]))
    ///     .iter()
    ///     .fold(0f32, |m, d| m.max(d.abs()));
    /// assert!(diff < 1e-5, "{diff}");
    /// assert!(bert.forward(&[&[]]).is_err());
    /// ```
    // ANCHOR: bert_forward
    pub fn forward(&self, batch: &[&[u32]]) -> Result<BertOutput> {
        self.forward_from(batch, 0)
    }

    // ANCHOR_END: bert_forward
    /// As [`Bert::forward`], with every sequence's positions' rows starting at `first`
    /// ([`Embeddings::forward_from`]): what transformers computes when given `position_ids`
    /// that start at `first`. Each sequence's last row must stay inside the table.
    ///
    /// ```
    /// use ndarray::Axis;
    /// use pretrained::Bert;
    ///
    /// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
    /// let ids: &[u32] = &[101, 7592, 102];
    /// assert_eq!(bert.forward_from(&[ids], 0).unwrap().hidden_states, bert.forward(&[ids]).unwrap().hidden_states);
    /// let later = bert.forward_from(&[ids], 50).unwrap();
    /// let embedded = bert.embeddings().forward_from(ids, 50).unwrap().insert_axis(Axis(0));
    /// assert_eq!(later.hidden_states[0], embedded); // the layers read positions 50, 51, 52
    /// let by_hand = bert.layers()[0].forward(&embedded, None).unwrap();
    /// assert_eq!(later.attentions[0], by_hand.weights);
    /// assert_eq!(later.hidden_states[1], by_hand.hidden);
    /// assert!(bert.forward_from(&[ids], 510).is_err()); // position 512 is not in the table
    /// ```
    // ANCHOR: bert_forward
    pub fn forward_from(&self, batch: &[&[u32]], first: usize) -> Result<BertOutput> {
        let lengths = self.check_batch(batch)?;
        let l = *lengths.iter().max().expect("checked: at least one sequence");
        let mut x = Array3::zeros((batch.len(), l, self.config.hidden_size));
        for (item, ids) in batch.iter().enumerate() {
            let mut padded = ids.to_vec();
            padded.resize(l, 0); // id 0 is [PAD]; the mask hides it
            x.index_axis_mut(Axis(0), item)
                .assign(&self.embeddings.forward_from(&padded, first)?);
        }
        let mask = match lengths.iter().all(|&n| n == l) {
            true => None,
            false => Some(Mask::padding(&lengths, l, l)?), // (batch, L, L), chapter 4
        };
        let mut hidden_states = vec![x];
        let mut attentions = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let x = hidden_states.last().expect("starts with the embeddings");
            let EncoderOutput { hidden, weights } = layer.forward(x, mask.as_ref())?;
            hidden_states.push(hidden);
            attentions.push(weights);
        }
        Ok(BertOutput { hidden_states, attentions, lengths })
    }
    // ANCHOR_END: bert_forward

    /// Sentence embeddings, as sentence-transformers computes them for this model: the mean
    /// of the last hidden states over each sequence's real tokens, scaled to length 1.
    /// `(batch, d_model)`.
    ///
    /// ```
    /// use pretrained::Bert;
    ///
    /// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
    /// let out = bert.forward(&[&[101, 7592, 102]]).unwrap();
    /// let e = bert.sentence_embeddings(&out).unwrap();
    /// assert!((e.row(0).dot(&e.row(0)) - 1.0).abs() < 1e-6);
    /// ```
    // ANCHOR: bert_forward
    pub fn sentence_embeddings(&self, out: &BertOutput) -> Result<Array2<f32>> {
        let last = out.hidden_states.last().expect("the embeddings' output at least");
        Ok(l2_normalize(&mean_pool(last, &out.lengths)?))
    }
    // ANCHOR_END: bert_forward

    /// The same model with head `head` of layer `layer` removed: its contribution through
    /// `W_O` is zeroed, as transformers' `head_mask` did (see
    /// [`MultiHeadAttention::without_head`]). The other layers and the embeddings are shared,
    /// not copied.
    ///
    /// ```
    /// use pretrained::Bert;
    ///
    /// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
    /// let ablated = bert.without_head(2, 5).unwrap();
    /// assert!(bert.without_head(6, 0).is_err());
    /// assert!(bert.without_head(0, 12).is_err());
    /// let ids: &[u32] = &[101, 7592, 2088, 102];
    /// let (a, b) = (bert.forward(&[ids]).unwrap(), ablated.forward(&[ids]).unwrap());
    /// assert_eq!(a.hidden_states[2], b.hidden_states[2]); // layers before 2 are untouched
    /// assert_ne!(a.hidden_states[3], b.hidden_states[3]);
    /// ```
    pub fn without_head(&self, layer: usize, head: usize) -> Result<Bert> {
        let n = self.layers.len();
        let Some(original) = self.layers.get(layer) else {
            return Err(PretrainedError::Input(format!(
                "layer {layer} does not exist: the model has layers 0..{n}"
            )));
        };
        let mut layers = self.layers.clone();
        layers[layer] = Arc::new(original.without_head(head)?);
        Ok(Bert { config: self.config.clone(), embeddings: self.embeddings.clone(), layers })
    }

    /// Every sequence non-empty and not longer than the position table; every id in the
    /// vocabulary. Returns the lengths.
    fn check_batch(&self, batch: &[&[u32]]) -> Result<Vec<usize>> {
        if batch.is_empty() {
            return Err(PretrainedError::Input("the batch holds no sequence".into()));
        }
        let max = self.config.max_position_embeddings;
        let mut lengths = Vec::with_capacity(batch.len());
        for (item, ids) in batch.iter().enumerate() {
            if ids.is_empty() || ids.len() > max {
                return Err(PretrainedError::Input(format!(
                    "sequence {item} has {} tokens: the model takes 1 to {max}",
                    ids.len()
                )));
            }
            lengths.push(ids.len());
        }
        Ok(lengths)
    }
}

/// A [`Bert`] for one sentence at a time on the fast `f32` path
/// ([`FastEncoderLayer`]): the last hidden states only, agreeing with [`Bert::forward`]'s to
/// `f32`'s rounding. What `ch13_real_model --time` times against transformers.
///
/// ```
/// use pretrained::Bert;
///
/// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
/// let fast = bert.fast().unwrap();
/// let ids: &[u32] = &[101, 7592, 2088, 102];
/// let exact = bert.forward(&[ids]).unwrap().hidden_states.pop().unwrap(); // (1, 4, 384)
/// let diff = (&fast.forward(ids).unwrap() - &exact.index_axis(ndarray::Axis(0), 0)).mapv(f32::abs);
/// assert!(diff.iter().all(|&d| d < 1e-4));
/// assert!(fast.forward(&[]).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct FastBert {
    bert: Bert, // the embeddings and the checks are the plain model's
    layers: Vec<FastEncoderLayer>,
}

impl Bert {
    /// The same model on the fast path: every layer's weights packed once ([`FastBert`]).
    ///
    /// ```
    /// let bert = pretrained::Bert::load(pretrained::minilm_dir()).unwrap();
    /// assert_eq!(bert.fast().unwrap().forward(&[101, 102]).unwrap().dim(), (2, 384));
    /// ```
    pub fn fast(&self) -> Result<FastBert> {
        let layers = self
            .layers
            .iter()
            .map(|layer| FastEncoderLayer::new(layer))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(FastBert { bert: self.clone(), layers })
    }
}

impl FastBert {
    /// The last hidden states of one sentence, `(L, d_model)`: what transformers'
    /// `BertModel` returns as `last_hidden_state` (for a batch of one).
    ///
    /// ```
    /// let bert = pretrained::Bert::load(pretrained::minilm_dir()).unwrap();
    /// let fast = bert.fast().unwrap();
    /// let err = fast.forward(&[101, 40_000, 102]).unwrap_err();
    /// assert_eq!(err.to_string(), "token id 40000 is out of range for a vocabulary of 30522 tokens");
    /// assert_eq!(fast.forward(&[]).unwrap_err().to_string(), "sequence 0 has 0 tokens: the model takes 1 to 512");
    /// ```
    pub fn forward(&self, ids: &[u32]) -> Result<Array2<f32>> {
        self.bert.check_batch(&[ids])?;
        let mut x = self.bert.embeddings.forward(ids)?;
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        Ok(x)
    }
}

/// The real rows of one batch item's hidden states, `(length, d_model)`.
///
/// ```
/// use pretrained::{Bert, real_rows};
///
/// let bert = Bert::load(pretrained::minilm_dir()).unwrap();
/// let out = bert.forward(&[&[101, 7592, 2088, 102], &[101, 102]]).unwrap();
/// assert_eq!(real_rows(&out, 6, 1).dim(), (2, 384));
/// ```
pub fn real_rows(out: &BertOutput, layer: usize, item: usize) -> Array2<f32> {
    let n = out.lengths[item];
    out.hidden_states[layer].slice(s![item, ..n, ..]).to_owned()
}
