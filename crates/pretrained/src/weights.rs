//! Reading `model.safetensors` with checks: every tensor by name, shape and dtype.
//!
//! A safetensors file is a JSON header (each tensor's name, dtype, shape and byte range)
//! followed by the raw little-endian numbers. [`Tensors`] reads them through the
//! `safetensors` crate and turns each into an `f32` ndarray, checking it against the shape the
//! config asks for, so that a wrong file fails with one error naming the tensor instead of a
//! panic (or a silently wrong model) later. It also keeps a list of what it has read:
//! [`Tensors::finish`] refuses a file that holds tensors no part of the model used.
//!
//! Anchors (below the doc comments): `tensor`, `load_linear` (chapter *Inside a real model*).

use std::collections::BTreeSet;
use std::path::Path;

use attention::layer_norm::LayerNorm;
use attention::projection::Linear;
use half::{bf16, f16};
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use safetensors::{Dtype, SafeTensors};

use crate::error::{PretrainedError, Result};

/// Tensors that a BERT checkpoint may hold and an encoder does not use: the position ids
/// (`0, 1, …, max_position_embeddings − 1`, an `I64` buffer that PyTorch saves with the
/// model) and the pooler, a layer trained for BERT's next-sentence task that sentence
/// embeddings do not use.
const UNUSED: [&str; 3] =
    ["embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"];

/// The tensors of one safetensors file, read one by one with checks.
///
/// ```
/// use pretrained::Tensors;
///
/// let path = pretrained::minilm_dir().join("model.safetensors");
/// let bytes = std::fs::read(&path).unwrap();
/// let mut tensors = Tensors::new(&path, &bytes).unwrap();
/// let gamma = tensors.vector("embeddings.LayerNorm.weight", 384).unwrap();
/// assert_eq!(gamma.len(), 384);
/// let err = tensors.vector("embeddings.LayerNorm.weight", 512).unwrap_err().to_string();
/// assert!(err.ends_with("tensor embeddings.LayerNorm.weight has shape [384] but the config asks for [512]"));
/// ```
pub struct Tensors<'a> {
    path: &'a Path,
    file: SafeTensors<'a>,
    prefix: &'static str,
    read: BTreeSet<String>,
}

impl<'a> Tensors<'a> {
    /// Parses the header of the file's `bytes` (read from `path`, which the errors name).
    ///
    /// Checkpoints saved from a model with a task head (`BertForMaskedLM`, say) put `bert.`
    /// before every encoder tensor's name; that prefix is recognised and dropped, so the names
    /// used here are always the encoder's own (`embeddings.word_embeddings.weight`).
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let err = Tensors::new("broken.safetensors".as_ref(), b"not a model").err().unwrap();
    /// assert!(err.to_string().starts_with("broken.safetensors: not a valid safetensors file"));
    /// ```
    pub fn new(path: &'a Path, bytes: &'a [u8]) -> Result<Self> {
        let file = SafeTensors::deserialize(bytes).map_err(|e| PretrainedError::Format {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let prefix = if file.names().iter().any(|n| n.starts_with("bert.embeddings.")) {
            "bert."
        } else {
            ""
        };
        Ok(Tensors { path, file, prefix, read: BTreeSet::new() })
    }

    /// The tensor `name` as `f32`, checked to have `shape`; `F32`, `F16` and `BF16` are
    /// widened exactly to `f32` (every `f16` and `bf16` value is an `f32` value).
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let path = pretrained::minilm_dir().join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let mut tensors = Tensors::new(&path, &bytes).unwrap();
    /// let w = tensors.tensor("encoder.layer.0.attention.self.query.weight", &[384, 384]);
    /// assert_eq!(w.unwrap().shape(), &[384, 384]);
    /// assert!(tensors.tensor("encoder.layer.6.output.dense.bias", &[384]).is_err());
    /// ```
    // ANCHOR: tensor
    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<ArrayD<f32>> {
        let path = self.path.to_path_buf();
        let full = format!("{}{name}", self.prefix);
        let view = self.file.tensor(&full).map_err(|_| PretrainedError::MissingTensor {
            path: path.clone(),
            name: name.into(),
            expected: shape.to_vec(),
        })?;
        if view.shape() != shape {
            return Err(PretrainedError::TensorShape {
                path,
                name: name.into(),
                found: view.shape().to_vec(),
                expected: shape.to_vec(),
            });
        }
        let bytes = view.data();
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(PretrainedError::Dtype {
                    path,
                    name: name.into(),
                    found: format!("{other:?}"),
                    expected: "F32, F16 or BF16",
                });
            }
        };
        self.read.insert(full);
        Ok(ArrayD::from_shape_vec(IxDyn(shape), values)
            .expect("the header's shape fits its bytes"))
    }
    // ANCHOR_END: tensor

    /// The tensor `name`, checked to be a `(rows, cols)` matrix.
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let path = pretrained::minilm_dir().join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let mut tensors = Tensors::new(&path, &bytes).unwrap();
    /// let table = tensors.matrix("embeddings.position_embeddings.weight", 512, 384).unwrap();
    /// assert_eq!(table.dim(), (512, 384));
    /// ```
    pub fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Array2<f32>> {
        let t = self.tensor(name, &[rows, cols])?;
        Ok(t.into_dimensionality().expect("checked to have two axes"))
    }

    /// The tensor `name`, checked to be a vector of `len` numbers.
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let path = pretrained::minilm_dir().join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let mut tensors = Tensors::new(&path, &bytes).unwrap();
    /// assert_eq!(tensors.vector("encoder.layer.5.output.dense.bias", 384).unwrap().len(), 384);
    /// ```
    pub fn vector(&mut self, name: &str, len: usize) -> Result<Array1<f32>> {
        let t = self.tensor(name, &[len])?;
        Ok(t.into_dimensionality().expect("checked to have one axis"))
    }

    /// A PyTorch `nn.Linear(d_in, d_out)` stored under `prefix`: `prefix.weight` of shape
    /// `(d_out, d_in)` (PyTorch computes `x · weightᵀ`), transposed once here into the book's
    /// `W: (d_in, d_out)`, and `prefix.bias` of `d_out`.
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let path = pretrained::minilm_dir().join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let mut tensors = Tensors::new(&path, &bytes).unwrap();
    /// let up = tensors.linear("encoder.layer.0.intermediate.dense", 384, 1536).unwrap();
    /// assert_eq!((up.d_in(), up.d_out()), (384, 1536));
    /// ```
    // ANCHOR: load_linear
    pub fn linear(&mut self, prefix: &str, d_in: usize, d_out: usize) -> Result<Linear<f32>> {
        let weight = self.matrix(&format!("{prefix}.weight"), d_out, d_in)?; // (out, in)
        let bias = self.vector(&format!("{prefix}.bias"), d_out)?;
        let w = weight.t().as_standard_layout().into_owned(); // (d_in, d_out): X · W
        Ok(Linear::with_bias(w, bias)?)
    }
    // ANCHOR_END: load_linear

    /// A layer norm over `d` numbers stored under `prefix` (`prefix.weight` is γ,
    /// `prefix.bias` is β).
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let path = pretrained::minilm_dir().join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let mut tensors = Tensors::new(&path, &bytes).unwrap();
    /// let norm = tensors.layer_norm("embeddings.LayerNorm", 384, 1e-12).unwrap();
    /// assert_eq!(norm.d_model(), 384);
    /// ```
    pub fn layer_norm(&mut self, prefix: &str, d: usize, eps: f64) -> Result<LayerNorm<f32>> {
        let gamma = self.vector(&format!("{prefix}.weight"), d)?;
        let beta = self.vector(&format!("{prefix}.bias"), d)?;
        Ok(LayerNorm::new(gamma, beta, eps)?)
    }

    /// The names of the tensors in the file that no call has read yet, sorted, without the
    /// `bert.` prefix: what a loader that is not BERT's checks instead of
    /// [`Tensors::finish`].
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let path = pretrained::minilm_dir().join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let mut tensors = Tensors::new(&path, &bytes).unwrap();
    /// assert_eq!(tensors.unread().len(), 102);
    /// tensors.vector("embeddings.LayerNorm.weight", 384).unwrap();
    /// assert_eq!(tensors.unread().len(), 101);
    /// assert_eq!(tensors.unread()[0], "embeddings.LayerNorm.bias");
    /// ```
    pub fn unread(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .file
            .names()
            .into_iter()
            .filter(|full| !self.read.contains(*full))
            .map(|full| full.strip_prefix(self.prefix).unwrap_or(full).to_string())
            .collect();
        names.sort();
        names
    }

    /// Checks that every tensor in the file was read, except the few a BERT checkpoint holds
    /// for other uses ([`UNUSED`]: the `I64` position ids, checked to be integers, and the
    /// pooler); any other tensor means the file and the config do not describe the same model.
    ///
    /// ```
    /// use pretrained::Tensors;
    ///
    /// let path = pretrained::minilm_dir().join("model.safetensors");
    /// let bytes = std::fs::read(&path).unwrap();
    /// let tensors = Tensors::new(&path, &bytes).unwrap();
    /// let err = tensors.finish().unwrap_err().to_string();
    /// assert!(err.contains("is not part of a BERT encoder with this config"), "{err}");
    /// ```
    pub fn finish(self) -> Result<()> {
        for full in self.file.names() {
            let full: &str = full;
            if self.read.contains(full) {
                continue;
            }
            let name = full.strip_prefix(self.prefix).unwrap_or(full);
            if !UNUSED.contains(&name) {
                return Err(PretrainedError::UnexpectedTensor {
                    path: self.path.to_path_buf(),
                    name: name.into(),
                    model: "BERT encoder",
                });
            }
            let dtype = self.file.tensor(full).expect("a name from the header").dtype();
            let expected = if name == UNUSED[0] { Dtype::I64 } else { Dtype::F32 };
            let float = matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16);
            if (expected == Dtype::I64 && dtype != Dtype::I64)
                || (expected == Dtype::F32 && !float)
            {
                return Err(PretrainedError::Dtype {
                    path: self.path.to_path_buf(),
                    name: name.into(),
                    found: format!("{dtype:?}"),
                    expected: if expected == Dtype::I64 { "I64" } else { "F32, F16 or BF16" },
                });
            }
        }
        Ok(())
    }
}
