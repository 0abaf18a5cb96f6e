//! A real pretrained model, run through the book's own attention code (chapter *Inside a real
//! model*).
//!
//! This crate reads a model directory in the Hugging Face layout (`config.json`,
//! `model.safetensors`, `tokenizer.json`) and builds a BERT encoder out of the `attention`
//! crate's layers: [`Embeddings`], then [`attention::encoder::EncoderLayer`]s, then mean
//! pooling. Reading files and tokenizing text is not attention, so it lives here and not in
//! `attention`, which keeps its small list of dependencies; data flows one way:
//! weights file → [`Tensors`] → [`Bert`] → the chapter's example. It also writes and reads
//! chapter 15's GPT as a checkpoint in Hugging Face's GPT-2 layout ([`gpt2`]), which
//! `transformers` loads unchanged.
//!
//! | what | item |
//! |---|---|
//! | `config.json` | [`BertConfig`] |
//! | `model.safetensors`, checked tensor by tensor | [`Tensors`] |
//! | the encoder | [`Embeddings`], [`load_layer`], [`Bert`], [`BertOutput`], [`FastBert`] |
//! | `tokenizer.json` | [`Tokenizer`], [`Tokens`] |
//! | text → sentence embeddings | [`SentenceEncoder`] |
//! | what the heads do: patterns, entropy, what a head writes, ablation | [`study`] |
//! | the committed copy of all-MiniLM-L6-v2 | [`minilm_dir`] |
//! | chapter 15's committed GPT | [`shakespeare_dir`] |
//! | chapter 15's GPT as a GPT-2 checkpoint (`config.json`, `model.safetensors`, `vocab.json`) | [`gpt2`] |
//!
//! ```
//! use pretrained::SentenceEncoder;
//!
//! let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
//! let e = encoder.embed(&["A cat sits on the mat.", "A kitten rests on a rug.", "Stocks fell."]).unwrap();
//! let close = e.row(0).dot(&e.row(1));
//! let far = e.row(0).dot(&e.row(2));
//! assert!(close > far);
//! ```

#![doc(test(attr(deny(warnings))))]
#![warn(missing_docs)]

mod bert;
mod config;
mod error;
pub mod gpt2;
pub mod study;
pub mod writing;
mod tokenizer;
mod weights;

use std::path::{Path, PathBuf};

use ndarray::Array2;

pub use bert::{Bert, BertOutput, Embeddings, FastBert, load_layer, real_rows};
pub use config::BertConfig;
pub use error::{PretrainedError, Result};
pub use tokenizer::{Tokenizer, Tokens};
pub use weights::Tensors;

/// The committed copy of `sentence-transformers/all-MiniLM-L6-v2` (f16 weights, Apache-2.0;
/// see the `README.md` and `LICENSE` there), inside this crate's source tree.
///
/// ```
/// assert!(pretrained::minilm_dir().join("model.safetensors").is_file());
/// ```
pub fn minilm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("model/all-MiniLM-L6-v2")
}

/// The committed model of chapter 15, `shakespeare-char`: a character-level GPT trained by
/// the book's own code (see the `README.md` there), in Hugging Face's GPT-2 layout, read by
/// [`gpt2::load`].
///
/// ```
/// let (gpt, vocab) = pretrained::gpt2::load(&pretrained::shakespeare_dir()).unwrap();
/// assert_eq!((vocab.len(), gpt.config.n_layer), (71, 4));
/// ```
pub fn shakespeare_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("model/shakespeare-char")
}

/// A model and its tokenizer: text in, sentence embeddings out.
///
/// ```
/// use pretrained::SentenceEncoder;
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let tokens = encoder.tokenizer().encode("Hello world").unwrap();
/// assert_eq!(tokens.ids, [101, 7592, 2088, 102]);
/// ```
#[derive(Debug, Clone)]
pub struct SentenceEncoder {
    bert: Bert,
    tokenizer: Tokenizer,
}

impl SentenceEncoder {
    /// Loads the model and the tokenizer of `dir`.
    ///
    /// ```
    /// use pretrained::SentenceEncoder;
    ///
    /// assert!(SentenceEncoder::load("/no/such/model").is_err());
    /// ```
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        Ok(SentenceEncoder { bert: Bert::load(dir)?, tokenizer: Tokenizer::from_dir(dir)? })
    }

    /// The model.
    ///
    /// ```
    /// let encoder = pretrained::SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
    /// assert_eq!(encoder.bert().config().num_attention_heads, 12);
    /// ```
    pub fn bert(&self) -> &Bert {
        &self.bert
    }

    /// The tokenizer.
    ///
    /// ```
    /// let encoder = pretrained::SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
    /// assert_eq!(encoder.tokenizer().max_len(), 256);
    /// ```
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Tokenizes every text (cutting long ones at the tokenizer's `max_len`) and returns
    /// their sentence embeddings, `(texts, d_model)`, each of length 1, computed as one
    /// padded batch.
    ///
    /// ```
    /// use pretrained::SentenceEncoder;
    ///
    /// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
    /// let e = encoder.embed(&["The same words.", "The same words."]).unwrap();
    /// assert!((e.row(0).dot(&e.row(1)) - 1.0).abs() < 1e-6);
    /// assert!(encoder.embed(&[""]).is_err());
    /// ```
    pub fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
        let tokens =
            texts.iter().map(|t| self.tokenizer.encode(t)).collect::<Result<Vec<_>>>()?;
        let batch: Vec<&[u32]> = tokens.iter().map(|t| t.ids.as_slice()).collect();
        let out = self.bert.forward(&batch)?;
        self.bert.sentence_embeddings(&out)
    }
}
