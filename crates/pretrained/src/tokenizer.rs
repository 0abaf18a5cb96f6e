//! From text to token ids: the model's own `tokenizer.json`, run by the `tokenizers` crate.
//!
//! BERT's tokenizer lowercases and strips accents ("Café" → "cafe"), splits on whitespace and
//! punctuation, then cuts each word into the longest pieces its WordPiece vocabulary holds
//! ("tokenization" → "token", "##ization"); a word with no such pieces becomes `[UNK]`. The
//! sequence is framed as `[CLS] … [SEP]`.
//!
//! Anchor (below the doc comments): `encode` (chapter *Inside a real model*).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokenizers::{TruncationDirection, TruncationParams, TruncationStrategy};

use crate::config::BertConfig;
use crate::error::{PretrainedError, Result};

/// One text as the model sees it.
///
/// ```
/// use pretrained::Tokenizer;
///
/// let tokenizer = Tokenizer::from_dir(&pretrained::minilm_dir()).unwrap();
/// let t = tokenizer.encode("Tokenization is fun!").unwrap();
/// assert_eq!(t.tokens, ["[CLS]", "token", "##ization", "is", "fun", "!", "[SEP]"]);
/// assert_eq!(t.ids[0], 101);
/// assert_eq!(t.truncated_from, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// The token ids, `[CLS]` first and `[SEP]` last.
    pub ids: Vec<u32>,
    /// The token strings, one per id.
    pub tokens: Vec<String>,
    /// `Some(n)` when the text had `n` tokens (with `[CLS]` and `[SEP]`) and was cut to the
    /// tokenizer's [`max_len`](Tokenizer::max_len).
    pub truncated_from: Option<usize>,
}

/// The tokenizer of a model directory (`tokenizer.json`), set up as sentence-transformers
/// runs it: no padding, truncation at `max_seq_length`.
///
/// ```
/// use pretrained::Tokenizer;
///
/// let tokenizer = Tokenizer::from_dir(&pretrained::minilm_dir()).unwrap();
/// assert_eq!(tokenizer.max_len(), 256);
/// ```
#[derive(Debug, Clone)]
pub struct Tokenizer {
    whole: tokenizers::Tokenizer,
    truncating: tokenizers::Tokenizer,
    max_len: usize,
    path: PathBuf,
}

/// sentence-transformers' `sentence_bert_config.json`.
#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: usize,
}

impl Tokenizer {
    /// Loads `dir/tokenizer.json`. The file of all-MiniLM-L6-v2 turns on padding every input
    /// to 128 tokens and truncating at 128; both are switched off here, and inputs are cut
    /// where sentence-transformers cuts them instead: at `max_seq_length` from
    /// `dir/sentence_bert_config.json` (256 for this model), or at the config's
    /// `max_position_embeddings` when that file is absent.
    ///
    /// ```
    /// use pretrained::Tokenizer;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let err = Tokenizer::from_dir(dir.path()).unwrap_err().to_string();
    /// assert!(err.contains("config.json"), "{err}");
    /// ```
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let config = BertConfig::from_dir(dir)?;
        let max_len =
            match read_json::<SentenceBertConfig>(&dir.join("sentence_bert_config.json"))? {
                Some(st) => st.max_seq_length.min(config.max_position_embeddings),
                None => config.max_position_embeddings,
            };
        let path = dir.join("tokenizer.json");
        let error =
            |message: String| PretrainedError::Tokenizer { path: path.clone(), message };
        if !path.is_file() {
            return Err(error("no such file".into()));
        }
        let mut whole =
            tokenizers::Tokenizer::from_file(&path).map_err(|e| error(e.to_string()))?;
        whole.with_padding(None);
        whole.with_truncation(None).map_err(|e| error(e.to_string()))?;
        let mut truncating = whole.clone();
        let params = TruncationParams {
            max_length: max_len,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        };
        truncating.with_truncation(Some(params)).map_err(|e| error(e.to_string()))?;
        Ok(Tokenizer { whole, truncating, max_len, path })
    }

    /// The longest input in tokens, `[CLS]` and `[SEP]` included.
    ///
    /// ```
    /// let tokenizer = pretrained::Tokenizer::from_dir(&pretrained::minilm_dir()).unwrap();
    /// assert!(tokenizer.max_len() <= 512);
    /// ```
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Tokenizes `text`; a text longer than [`max_len`](Tokenizer::max_len) tokens keeps its
    /// first `max_len − 1` tokens and its `[SEP]`, and says how long it was. A text with no
    /// token at all (empty, or only spaces) is an error.
    ///
    /// ```
    /// use pretrained::Tokenizer;
    ///
    /// let tokenizer = Tokenizer::from_dir(&pretrained::minilm_dir()).unwrap();
    /// let long = tokenizer.encode(&"word ".repeat(300)).unwrap();
    /// assert_eq!((long.ids.len(), long.truncated_from), (256, Some(302)));
    /// assert_eq!(long.tokens.last().unwrap(), "[SEP]");
    /// assert!(tokenizer.encode("   ").is_err());
    /// ```
    // ANCHOR: encode
    pub fn encode(&self, text: &str) -> Result<Tokens> {
        let error = |e: tokenizers::Error| PretrainedError::Tokenizer {
            path: self.path.clone(),
            message: e.to_string(),
        };
        let mut encoding = self.whole.encode(text, true).map_err(error)?;
        let mut truncated_from = None;
        if encoding.len() > self.max_len {
            truncated_from = Some(encoding.len());
            encoding = self.truncating.encode(text, true).map_err(error)?;
        }
        let specials = encoding.get_special_tokens_mask().iter().filter(|&&s| s == 1).count();
        if encoding.len() == specials {
            return Err(PretrainedError::EmptyText { text: text.into() });
        }
        Ok(Tokens {
            ids: encoding.get_ids().to_vec(),
            tokens: encoding.get_tokens().to_vec(),
            truncated_from,
        })
    }
    // ANCHOR_END: encode

    /// The [`Tokens`] of ids chosen by hand rather than made from a text (a sentence without
    /// its `[CLS]`, random ids): each id with its token string from the vocabulary, as given,
    /// nothing added. Fails on an empty list or an id outside the vocabulary.
    ///
    /// ```
    /// use pretrained::Tokenizer;
    ///
    /// let tokenizer = Tokenizer::from_dir(&pretrained::minilm_dir()).unwrap();
    /// let t = tokenizer.tokens_of(&[7592, 2088, 102]).unwrap();
    /// assert_eq!(t.tokens, ["hello", "world", "[SEP]"]);
    /// assert!(tokenizer.tokens_of(&[]).is_err());
    /// assert!(tokenizer.tokens_of(&[30522]).is_err());
    /// ```
    pub fn tokens_of(&self, ids: &[u32]) -> Result<Tokens> {
        if ids.is_empty() {
            return Err(PretrainedError::Input("no token ids".into()));
        }
        let tokens = ids
            .iter()
            .map(|&id| {
                self.whole.id_to_token(id).ok_or_else(|| {
                    PretrainedError::Input(format!("token id {id} is not in the vocabulary"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tokens { ids: ids.to_vec(), tokens, truncated_from: None })
    }
}

/// Reads a JSON file that may be absent: `Ok(None)` when it does not exist.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(PretrainedError::Io { path: path.into(), source }),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| PretrainedError::Config { path: path.into(), message: e.to_string() })
}
