//! `config.json`: the sizes of a BERT model, read with serde.
//!
//! Anchor (below the doc comments): `config`, chapter *Inside a real model*.

use std::path::Path;

use serde::Deserialize;

use crate::error::{PretrainedError, Result};

/// The fields of a Hugging Face `config.json` that a BERT encoder needs.
///
/// Other fields are ignored. [`BertConfig::from_dir`] refuses a config this crate cannot run
/// faithfully: an activation other than the exact (erf) GELU, or a position embedding other
/// than learned absolute positions.
///
/// ```
/// use pretrained::BertConfig;
///
/// let config = BertConfig::from_dir(&pretrained::minilm_dir()).unwrap();
/// assert_eq!((config.num_hidden_layers, config.num_attention_heads), (6, 12));
/// assert_eq!((config.hidden_size, config.intermediate_size), (384, 1536));
/// assert_eq!(config.d_head(), 32);
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
// ANCHOR: config
pub struct BertConfig {
    /// Rows of the word embedding table.
    pub vocab_size: usize,
    /// `d_model`.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Heads per layer; `d_head = hidden_size / num_attention_heads`.
    pub num_attention_heads: usize,
    /// `d_ff`, the width inside the feed-forward block.
    pub intermediate_size: usize,
    /// Rows of the learned position table: the longest input.
    pub max_position_embeddings: usize,
    /// Rows of the token-type ("segment") table.
    pub type_vocab_size: usize,
    /// The ε of every layer norm.
    pub layer_norm_eps: f64,
    /// The feed-forward activation: must be `"gelu"` (exact, with erf).
    pub hidden_act: String,
    /// Must be `"absolute"` (learned positions added to the embeddings).
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
}
// ANCHOR_END: config

fn absolute() -> String {
    "absolute".into()
}

impl BertConfig {
    /// Reads and checks `dir/config.json`.
    ///
    /// ```
    /// use pretrained::BertConfig;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// std::fs::write(dir.path().join("config.json"), r#"{"hidden_size": 8}"#).unwrap();
    /// let err = BertConfig::from_dir(dir.path()).unwrap_err().to_string();
    /// assert!(err.contains("config.json: missing field `vocab_size`"), "{err}");
    /// ```
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|source| PretrainedError::Io { path: path.clone(), source })?;
        let config: BertConfig = serde_json::from_str(&text).map_err(|e| {
            PretrainedError::Config { path: path.clone(), message: e.to_string() }
        })?;
        config.check().map_err(|message| PretrainedError::Config { path, message })?;
        Ok(config)
    }

    /// The width of one head, `hidden_size / num_attention_heads`.
    ///
    /// ```
    /// let config = pretrained::BertConfig::from_dir(&pretrained::minilm_dir()).unwrap();
    /// assert_eq!(config.d_head() * config.num_attention_heads, config.hidden_size);
    /// ```
    pub fn d_head(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// What this crate cannot run, in words.
    fn check(&self) -> std::result::Result<(), String> {
        if self.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act is {:?}, but only \"gelu\" (the exact erf form) is implemented",
                self.hidden_act
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type is {:?}, but only \"absolute\" is implemented",
                self.position_embedding_type
            ));
        }
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, size)| *size == 0) {
            return Err(format!("{name} is 0: it must be at least 1"));
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "num_attention_heads = {} does not divide hidden_size = {}",
                self.num_attention_heads, self.hidden_size
            ));
        }
        if !(self.layer_norm_eps > 0.0 && self.layer_norm_eps.is_finite()) {
            return Err(format!(
                "layer_norm_eps is {}: it must be positive",
                self.layer_norm_eps
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(field: &str, value: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(crate::minilm_dir().join("config.json")).unwrap();
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        json[field] = serde_json::from_str(value).unwrap();
        std::fs::write(dir.path().join("config.json"), json.to_string()).unwrap();
        BertConfig::from_dir(dir.path()).unwrap_err().to_string()
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        assert!(config_with("hidden_act", "\"gelu_new\"").contains("only \"gelu\""));
        assert!(
            config_with("position_embedding_type", "\"relative_key\"").contains("absolute")
        );
        assert!(config_with("num_attention_heads", "5").contains("does not divide"));
        assert!(config_with("num_hidden_layers", "0").contains("num_hidden_layers is 0"));
        assert!(config_with("layer_norm_eps", "0.0").contains("must be positive"));
        assert!(config_with("hidden_size", "\"wide\"").contains("invalid type"));
    }
}
