//! The one error type of the crate: every failure names the file (and the tensor) involved.

use std::path::PathBuf;

use attention::AttentionError;
use thiserror::Error;

/// Shorthand for `Result<T, PretrainedError>`.
///
/// ```
/// use pretrained::{BertConfig, Result};
///
/// fn layers(dir: &std::path::Path) -> Result<usize> {
///     Ok(BertConfig::from_dir(dir)?.num_hidden_layers)
/// }
/// assert_eq!(layers(&pretrained::minilm_dir()).unwrap(), 6);
/// assert!(layers(std::path::Path::new("/no/such/model")).is_err());
/// ```
pub type Result<T, E = PretrainedError> = std::result::Result<T, E>;

/// Everything that can go wrong while reading a model directory or running it.
///
/// ```
/// use pretrained::{Bert, PretrainedError};
///
/// let err = Bert::load("/no/such/model").unwrap_err();
/// assert!(matches!(err, PretrainedError::Io { .. }));
/// assert!(err.to_string().starts_with("/no/such/model/config.json: "));
/// ```
#[derive(Debug, Error)]
pub enum PretrainedError {
    /// A file cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// `config.json` (or another JSON file) is malformed, or describes a model this crate
    /// cannot run.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The weights file is not a readable safetensors file.
    #[error("{}: not a valid safetensors file: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What the safetensors reader said.
        message: String,
    },
    /// A tensor the config asks for is not in the weights file.
    #[error("{}: tensor {name} is missing (expected shape {expected:?})", path.display())]
    MissingTensor {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name, e.g. `encoder.layer.3.attention.self.query.weight`.
        name: String,
        /// The shape the config asks for.
        expected: Vec<usize>,
    },
    /// A tensor has another shape than the config asks for.
    #[error("{}: tensor {name} has shape {found:?} but the config asks for {expected:?}", path.display())]
    TensorShape {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Its shape in the file.
        found: Vec<usize>,
        /// The shape the config asks for.
        expected: Vec<usize>,
    },
    /// A tensor has a dtype that cannot stand for it.
    #[error("{}: tensor {name} has dtype {found} but {expected} was expected", path.display())]
    Dtype {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Its dtype in the file, e.g. `I32`.
        found: String,
        /// What this tensor may be, e.g. `F32, F16 or BF16`.
        expected: &'static str,
    },
    /// The file holds a tensor that no part of the model reads (a sign of another
    /// architecture or of a config that does not match the weights).
    #[error("{}: tensor {name} is not part of a {model} with this config", path.display())]
    UnexpectedTensor {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// The model that has no place for it: `BERT encoder`, `GPT-2 decoder`.
        model: &'static str,
    },
    /// A tensor has the right name, shape and dtype, but numbers the config rules out: a
    /// stored LM head that is not the token table it is tied to, or a shift that is not zero
    /// in a model without trained shifts.
    #[error("{}: tensor {name} {problem}", path.display())]
    TensorValues {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// What is wrong with its numbers, e.g. `differs from transformer.wte.weight, …`.
        problem: String,
    },
    /// `tokenizer.json` cannot be loaded or used.
    #[error("{}: {message}", path.display())]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What the tokenizers crate said.
        message: String,
    },
    /// A text gives no tokens at all (besides `[CLS]` and `[SEP]`).
    #[error("the text {text:?} has no tokens: there is nothing to embed")]
    EmptyText {
        /// The text.
        text: String,
    },
    /// A token id or a length that the model cannot take.
    #[error("{0}")]
    Input(String),
    /// The attention crate refused a shape (a config whose sizes do not fit together).
    #[error(transparent)]
    Attention(#[from] AttentionError),
}
