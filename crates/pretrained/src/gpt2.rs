//! Chapter *A model that writes*: a GPT checkpoint in Hugging Face's GPT-2 layout, written
//! and read back.
//!
//! A checkpoint is a directory of three files, which `transformers` loads unchanged with
//! `GPT2LMHeadModel.from_pretrained(dir)`:
//!
//! - `config.json`: the sizes under `GPT2Config`'s names (`n_embd`, `n_layer`, `n_head`,
//!   and `n_positions` for the block size), the exact GELU (`"gelu"`), no dropout, the head
//!   tied to the token table, and keys of ours, which transformers keeps as they are:
//!   `"bias"`, and chapter 16's `"positions"` for any kind but GPT-2's learned ones (with
//!   `"rope_theta"` for RoPE). A model with
//!   RoPE or ALiBi positions, which GPT-2 does not have, is written under a `model_type` of
//!   ours (`attention-step-by-step-gpt`), so that transformers refuses it instead of running
//!   it without them; learned, sinusoidal (fixed, in `wpe`) and no positions are GPT-2's
//!   computation, and transformers runs them;
//! - `model.safetensors`: every tensor of [`Gpt::tensors`] as `F32`, under its GPT-2 name;
//! - `vocab.json`: each character, as a one-character string, and its id.
//!
//! GPT-2's `Conv1D` stores a linear map as `(d_in, d_out)` and computes `x · W + b`, as the
//! book does, so no tensor is transposed on the way in or out. The LM head is not stored:
//! it is `transformer.wte.weight` (transformers ties it back when it loads the file).
//!
//! `bos_token_id` and `eos_token_id` are `null`: a character vocabulary has no special
//! tokens, and GPT-2's default (50256) is outside it. Generation in transformers runs without
//! them (it stops at `max_new_tokens`).
//!
//! ```
//! use attention::gpt::{config::GptConfig, data::CharVocab, weights::Gpt};
//! use pretrained::gpt2;
//!
//! let vocab = CharVocab::from_text("to be or not to be").unwrap();
//! let config = GptConfig {
//!     n_layer: 1,
//!     n_embd: 8,
//!     n_head: 2,
//!     block_size: 4,
//!     ..GptConfig::shakespeare(vocab.len())
//! };
//! let gpt = Gpt::<f32>::zeros(config);
//! let dir = tempfile::tempdir().unwrap();
//! gpt2::save(dir.path(), &gpt, &vocab).unwrap();
//! let (back, back_vocab) = gpt2::load(dir.path()).unwrap();
//! assert_eq!((back, back_vocab), (gpt, vocab));
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use attention::AttentionError;
use attention::gpt::config::GptConfig;
use attention::gpt::data::{CharVocab, train_and_validation};
use attention::gpt::positions::{Positions, RopeScaling};
use attention::gpt::weights::Gpt;
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde::Deserialize;
use serde_json::json;

use attention::gpt::kernels::{Exact, Fast};
use attention::gpt::sample::sample;
use attention::gpt::train::evaluate;
use rand::{SeedableRng, rngs::StdRng};

use crate::error::{PretrainedError, Result};
use crate::weights::Tensors;

/// What `gpt` writes after `prompt`: `n` characters drawn at temperature 1 with a generator
/// seeded by `seed`, on the exact path ([`Exact`]), so the same text on every machine (with
/// this `Cargo.lock`). An error names a prompt character the vocabulary lacks.
///
/// The crate's [`sample`] for `f32`, compiled here, in a crate the book optimises even in
/// debug builds, so that tests and chapter examples do not run it unoptimised.
///
/// ```
/// use pretrained::{gpt2, shakespeare_dir};
///
/// let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
/// let text = gpt2::write(&gpt, &vocab, "ROMEO:\n", 12, 0).unwrap();
/// assert_eq!(text, "That themoy ");
/// assert!(gpt2::write(&gpt, &vocab, "ROMEO{", 12, 0).is_err()); // no '{' in Shakespeare
/// ```
pub fn write(
    gpt: &Gpt<f32>,
    vocab: &CharVocab,
    prompt: &str,
    n: usize,
    seed: u64,
) -> Result<String> {
    let prompt = vocab.encode(prompt)?;
    let ids = sample(gpt, &Exact, &prompt, n, 1.0, &mut StdRng::seed_from_u64(seed))?;
    Ok(vocab.decode(&ids))
}

/// The mean next-character loss of `gpt` over every position of the validation text of
/// `corpus` (its last 10 %, as the `train` tool splits it), on the fast path ([`Fast`]): what
/// the training log records as `val_loss`. The crate's [`evaluate`], compiled here (see
/// [`write`]).
///
/// ```
/// use attention::gpt::{config::GptConfig, data::CharVocab, weights::Gpt};
/// use pretrained::gpt2;
///
/// let corpus = "to be or not to be, that is the question";
/// let vocab = CharVocab::from_text(corpus).unwrap();
/// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(vocab.len()) };
/// let gpt = Gpt::<f32>::zeros(config); // equal logits: exactly ln V
/// let loss = gpt2::validation_loss(&gpt, &vocab, corpus).unwrap();
/// assert!((loss - (vocab.len() as f64).ln()).abs() < 1e-6);
/// ```
pub fn validation_loss(gpt: &Gpt<f32>, vocab: &CharVocab, corpus: &str) -> Result<f64> {
    let ids = vocab.encode(corpus)?;
    Ok(evaluate(gpt, &Fast, train_and_validation(&ids).1, 64)?)
}

/// The sizes and settings, as transformers' `GPT2Config` writes them.
///
/// ```
/// assert_eq!(pretrained::gpt2::CONFIG_FILE, "config.json");
/// ```
pub const CONFIG_FILE: &str = "config.json";
/// The weights.
///
/// ```
/// assert_eq!(pretrained::gpt2::WEIGHTS_FILE, "model.safetensors");
/// ```
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The characters and their ids.
///
/// ```
/// assert_eq!(pretrained::gpt2::VOCAB_FILE, "vocab.json");
/// ```
pub const VOCAB_FILE: &str = "vocab.json";

/// The name under which a checkpoint that stores its LM head keeps it.
const LM_HEAD: &str = "lm_head.weight";

/// Writes `gpt` and `vocab` as a checkpoint in `dir` (created if needed): [`CONFIG_FILE`],
/// [`WEIGHTS_FILE`] and [`VOCAB_FILE`], replacing those already there.
///
/// Nothing is written unless the model can be saved as it is: a vocabulary of
/// `vocab_size` characters, every tensor of the shape its config gives, and, without
/// `bias`, every shift zero. Each file is first written in full to a temporary file in
/// `dir`, all three before any is moved into place by a rename, so a reader sees each file
/// whole, old or new, never a part of one; a failure removes the temporary files. (Should
/// a rename fail after another succeeded, which takes a fault once every byte is already on
/// disk, new files can stand beside old ones: [`load`] checks them against each other.)
///
/// ```
/// use attention::gpt::{config::GptConfig, data::CharVocab, weights::Gpt};
/// use pretrained::gpt2;
///
/// let config = GptConfig {
///     n_layer: 1,
///     n_embd: 8,
///     n_head: 2,
///     block_size: 4,
///     ..GptConfig::shakespeare(3)
/// };
/// let gpt = Gpt::<f32>::zeros(config);
/// let dir = tempfile::tempdir().unwrap();
/// let two = CharVocab::from_text("ab").unwrap();
/// let err = gpt2::save(dir.path(), &gpt, &two).unwrap_err().to_string();
/// let expected = "the vocabulary has 2 characters but the model's vocab_size is 3";
/// assert!(err.ends_with(&format!("vocab.json: {expected}")), "{err}");
/// assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0); // nothing written
///
/// gpt2::save(dir.path(), &gpt, &CharVocab::from_text("abc").unwrap()).unwrap();
/// let mut names: Vec<String> = std::fs::read_dir(dir.path())
///     .unwrap()
///     .map(|e| e.unwrap().file_name().into_string().unwrap())
///     .collect();
/// names.sort();
/// assert_eq!(names, ["config.json", "model.safetensors", "vocab.json"]);
/// ```
pub fn save(dir: &Path, gpt: &Gpt<f32>, vocab: &CharVocab) -> Result<()> {
    let config = gpt.config;
    config.validate()?;
    if vocab.len() != config.vocab_size {
        return Err(PretrainedError::Config {
            path: dir.join(VOCAB_FILE),
            message: format!(
                "the vocabulary has {} characters but the model's vocab_size is {}",
                vocab.len(),
                config.vocab_size
            ),
        });
    }
    let weights = weights_bytes(&dir.join(WEIGHTS_FILE), gpt)?;
    let config_text = serde_json::to_string_pretty(&config_json(&config))
        .expect("a JSON value always serialises");
    let ids: BTreeMap<String, usize> =
        vocab.chars().iter().enumerate().map(|(id, c)| (c.to_string(), id)).collect();
    let vocab_text = serde_json::to_string_pretty(&ids).expect("a map of strings to ids");
    fs::create_dir_all(dir)
        .map_err(|source| PretrainedError::Io { path: dir.to_path_buf(), source })?;
    write_all_or_nothing(
        dir,
        &[
            (WEIGHTS_FILE, weights),
            (VOCAB_FILE, (vocab_text + "\n").into_bytes()),
            (CONFIG_FILE, (config_text + "\n").into_bytes()),
        ],
    )
}

/// Reads the checkpoint in `dir` that [`save`] (or transformers' `save_pretrained` with a
/// `vocab.json` beside it) wrote: the model in `f32` and its vocabulary.
///
/// Every file is checked against the others, and each error names the file (and the key or
/// the tensor) at fault:
///
/// - `config.json` must describe a model this crate runs: `model_type` `"gpt2"`, the exact
///   GELU (`"gelu"`; GPT-2's own `"gelu_new"` is the tanh approximation), `n_inner` `null` or
///   `4·n_embd`, scores scaled by `1/√d_head` and nothing else, the head tied, no cross
///   attention, and sizes that make a model. The keys `model_type`, `vocab_size`,
///   `n_positions`, `n_embd`, `n_layer`, `n_head`, `layer_norm_epsilon` and
///   `activation_function` must be there; other keys take transformers' defaults, `"bias"`
///   (ours) `true` as in GPT-2. Dropout rates are ignored: they do not change the model.
/// - `vocab.json` must give `vocab_size` characters the ids `0 … vocab_size − 1`, each once,
///   in the characters' order (a character's id is its rank, as [`CharVocab`] numbers them).
/// - `model.safetensors` must hold every tensor of the config, of its shape, as `F32`,
///   `F16` or `BF16` (widened exactly to `f32`), and nothing else, except `lm_head.weight`
///   if it equals the token table (a checkpoint that spells the tied head out); with
///   `"bias": false` every shift must be zero. Sizes that make more numbers than the file
///   can hold are refused before any room is made for them.
///
/// ```
/// use pretrained::gpt2;
///
/// let err = gpt2::load("/no/such/checkpoint".as_ref()).unwrap_err().to_string();
/// assert!(err.starts_with("/no/such/checkpoint/config.json: "), "{err}");
/// ```
pub fn load(dir: &Path) -> Result<(Gpt<f32>, CharVocab)> {
    let config_path = dir.join(CONFIG_FILE);
    let config = parse_config(&config_path, &read_text(&config_path)?)?;
    let vocab_path = dir.join(VOCAB_FILE);
    let vocab = parse_vocab(&vocab_path, &read_text(&vocab_path)?, &config_path, &config)?;
    let weights_path = dir.join(WEIGHTS_FILE);
    let bytes = fs::read(&weights_path)
        .map_err(|source| PretrainedError::Io { path: weights_path.clone(), source })?;
    let gpt = parse_weights(&weights_path, &bytes, config)?;
    Ok((gpt, vocab))
}

/// The `model_type` of a model transformers' GPT-2 would run as it is (learned, fixed or no
/// positions, all in `wpe`), and of one it would not (RoPE or ALiBi: GPT-2 has neither).
const GPT2: &str = "gpt2";
/// See [`GPT2`].
const OURS: &str = "attention-step-by-step-gpt";

/// `config.json` as transformers' `GPT2Config` would write it for this model; with RoPE or
/// ALiBi, under a `model_type` transformers does not know, so that it refuses the folder
/// rather than run it as GPT-2 without its positions.
fn config_json(c: &GptConfig) -> serde_json::Value {
    let gpt2 = !matches!(c.positions, Positions::Rope { .. } | Positions::Alibi);
    let mut config = json!({
        "model_type": if gpt2 { GPT2 } else { OURS },
        "architectures": if gpt2 { json!(["GPT2LMHeadModel"]) } else { json!([]) },
        "vocab_size": c.vocab_size,
        "n_positions": c.block_size,
        "n_ctx": c.block_size,
        "n_embd": c.n_embd,
        "n_layer": c.n_layer,
        "n_head": c.n_head,
        "n_inner": null,
        "activation_function": "gelu",
        "layer_norm_epsilon": c.layer_norm_epsilon,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "tie_word_embeddings": true,
        "scale_attn_weights": true,
        "scale_attn_by_inverse_layer_idx": false,
        "add_cross_attention": false,
        "bos_token_id": null,
        "eos_token_id": null,
        "dtype": "float32",
        "bias": c.bias,
    });
    // GPT-2's own learned positions need no key: its config.json stays transformers' own.
    if c.positions != Positions::Learned {
        config["positions"] = json!(c.positions.name());
    }
    if let Positions::Rope { base, .. } = c.positions {
        config["rope_theta"] = json!(base);
    }
    config
}

/// The keys of `config.json` this crate reads; serde names a missing one.
#[derive(Debug, Deserialize)]
struct Gpt2Json {
    vocab_size: usize,
    n_positions: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    layer_norm_epsilon: f64,
    activation_function: String,
    #[serde(default)]
    n_inner: Option<usize>,
    #[serde(default = "yes")]
    scale_attn_weights: bool,
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: bool,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
    #[serde(default)]
    add_cross_attention: bool,
    #[serde(default = "yes")]
    bias: bool,
    /// Ours, for chapter 16: `learned` (GPT-2's, the default), `none`, `sinusoidal`, `rope`
    /// or `alibi`.
    #[serde(default)]
    positions: Option<String>,
    /// RoPE's base, under the name Llama's config gives it.
    #[serde(default)]
    rope_theta: Option<f64>,
}

fn yes() -> bool {
    true
}

/// The model's config from the text of `config.json`, or an error naming the key at fault.
fn parse_config(path: &Path, text: &str) -> Result<GptConfig> {
    let refuse = |message: String| PretrainedError::Config { path: path.into(), message };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| refuse(e.to_string()))?;
    match value.get("model_type") {
        Some(serde_json::Value::String(t)) if t == GPT2 || t == OURS => {}
        Some(other) => return Err(refuse(format!("model_type is {other}, not \"gpt2\""))),
        None => return Err(refuse("missing field `model_type`".into())),
    }
    let json: Gpt2Json = serde_json::from_value(value).map_err(|e| refuse(e.to_string()))?;
    if json.activation_function != "gelu" {
        return Err(refuse(format!(
            "activation_function is {:?}, but only \"gelu\" (the exact erf form) is \
             implemented",
            json.activation_function
        )));
    }
    if let Some(n_inner) = json.n_inner.filter(|&n| n != 4 * json.n_embd) {
        return Err(refuse(format!(
            "n_inner is {n_inner}, but the MLP here is 4·n_embd = {} wide",
            4 * json.n_embd
        )));
    }
    let unsupported = [
        ("scale_attn_weights", !json.scale_attn_weights),
        ("scale_attn_by_inverse_layer_idx", json.scale_attn_by_inverse_layer_idx),
        ("tie_word_embeddings", !json.tie_word_embeddings),
        ("add_cross_attention", json.add_cross_attention),
    ];
    if let Some((key, _)) = unsupported.iter().find(|(_, set)| *set) {
        let value = if *key == "scale_attn_weights" || *key == "tie_word_embeddings" {
            "false"
        } else {
            "true"
        };
        return Err(refuse(format!("{key} is {value}, which this GPT does not implement")));
    }
    let config = GptConfig {
        vocab_size: json.vocab_size,
        block_size: json.n_positions,
        n_layer: json.n_layer,
        n_head: json.n_head,
        n_embd: json.n_embd,
        layer_norm_epsilon: json.layer_norm_epsilon,
        bias: json.bias,
        positions: match json.positions.as_deref() {
            None => Positions::Learned, // GPT-2's
            Some("rope") => Positions::Rope {
                base: json.rope_theta.unwrap_or(10_000.0),
                scaling: RopeScaling::None,
            },
            Some(name) => Positions::from_name(name).map_err(|e| refuse(e.to_string()))?,
        },
    };
    config.validate().map_err(|e| refuse(e.to_string()))?;
    Ok(config)
}

/// The vocabulary from the text of `vocab.json`, checked against the config read from
/// `config_path`.
fn parse_vocab(
    path: &Path,
    text: &str,
    config_path: &Path,
    config: &GptConfig,
) -> Result<CharVocab> {
    let refuse = |message: String| PretrainedError::Config { path: path.into(), message };
    let ids: BTreeMap<String, usize> =
        serde_json::from_str(text).map_err(|e| refuse(e.to_string()))?;
    if ids.len() != config.vocab_size {
        return Err(refuse(format!(
            "{} characters, but {} has vocab_size = {}",
            ids.len(),
            config_path.display(),
            config.vocab_size
        )));
    }
    let mut chars: Vec<Option<char>> = vec![None; ids.len()];
    for (key, &id) in &ids {
        let mut key_chars = key.chars();
        let c = match (key_chars.next(), key_chars.next()) {
            (Some(c), None) => c,
            _ => return Err(refuse(format!("the key {key:?} is not one character"))),
        };
        match chars.get_mut(id) {
            None => {
                let n = ids.len();
                return Err(refuse(format!("{c:?} has id {id}, outside 0..{n}")));
            }
            Some(Some(other)) => {
                return Err(refuse(format!("id {id} is given to both {other:?} and {c:?}")));
            }
            Some(slot) => *slot = Some(c),
        }
    }
    // n keys, n distinct ids below n: every slot is filled
    let chars: Vec<char> = chars.into_iter().map(|c| c.expect("every id once")).collect();
    CharVocab::from_chars(chars).map_err(|e| {
        refuse(format!("the ids must number the characters in sorted order ({e})"))
    })
}

/// The bytes of `model.safetensors` for `gpt` (`path` names the file in errors): every tensor
/// as little-endian `F32` under its GPT-2 name, with the `{"format": "pt"}` metadata that
/// PyTorch's writers add.
fn weights_bytes(path: &Path, gpt: &Gpt<f32>) -> Result<Vec<u8>> {
    let config = gpt.config;
    if gpt.blocks.len() != config.n_layer {
        return Err(AttentionError::Invalid {
            what: "GPT".into(),
            problem: format!(
                "{} blocks, but its config says n_layer = {}",
                gpt.blocks.len(),
                config.n_layer
            ),
        }
        .into());
    }
    if let Positions::Rope { scaling, .. } = config.positions
        && scaling != RopeScaling::None
    {
        return Err(PretrainedError::Config {
            path: path.into(),
            message: format!(
                "RoPE's scaling ({scaling:?}) stretches a trained model to read longer texts; \
                 it is not part of a checkpoint: save the model without it"
            ),
        });
    }
    let mut data = Vec::new();
    for ((name, tensor), expected) in gpt.tensors().into_iter().zip(config.tensor_shapes()) {
        if tensor.shape() != expected.as_slice() {
            return Err(PretrainedError::TensorShape {
                path: path.into(),
                name,
                found: tensor.shape().to_vec(),
                expected,
            });
        }
        let bytes: Vec<u8> = tensor.iter().flat_map(|x| x.to_le_bytes()).collect();
        data.push((name, expected, bytes));
    }
    check_untrained(path, gpt)?;
    let views = data.iter().map(|(name, shape, bytes)| {
        let view = TensorView::new(Dtype::F32, shape.clone(), bytes)
            .expect("4 bytes for every number of the shape");
        (name.as_str(), view)
    });
    let metadata = [("format".to_string(), "pt".to_string())].into();
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| PretrainedError::Format { path: path.into(), message: e.to_string() })
}

/// The model of `config` from the bytes of `model.safetensors`, read from `path`.
fn parse_weights(path: &Path, bytes: &[u8], config: GptConfig) -> Result<Gpt<f32>> {
    let mut tensors = Tensors::new(path, bytes)?;
    // A config can ask for more numbers than memory holds; the file must hold them all (2
    // bytes each at the least), so check that before making room for them.
    if stored_numbers(&config).is_none_or(|n| n > bytes.len() / 2) {
        return Err(PretrainedError::Config {
            path: path.with_file_name(CONFIG_FILE),
            message: format!(
                "n_layer = {}, n_embd = {}, vocab_size = {} and n_positions = {} make more \
                 numbers than the {} bytes of {} can hold",
                config.n_layer,
                config.n_embd,
                config.vocab_size,
                config.block_size,
                bytes.len(),
                path.display()
            ),
        });
    }
    let mut gpt = Gpt::<f32>::zeros(config);
    for (name, mut tensor) in gpt.tensors_mut() {
        let read = tensors.tensor(&name, tensor.shape())?;
        tensor.assign(&read);
    }
    let (v, d) = (config.vocab_size, config.n_embd);
    for name in tensors.unread() {
        if name != LM_HEAD {
            return Err(PretrainedError::UnexpectedTensor {
                path: path.into(),
                name,
                model: "GPT-2 decoder",
            });
        }
        if tensors.matrix(LM_HEAD, v, d)? != gpt.wte {
            return Err(PretrainedError::TensorValues {
                path: path.into(),
                name,
                problem: "differs from transformer.wte.weight, but this model's head is \
                          tied to its token table"
                    .into(),
            });
        }
    }
    check_untrained(path, &gpt)?;
    Ok(gpt)
}

/// How many numbers the tensors of `config` hold, `None` past `usize::MAX`: the tables, and
/// per block `12·d² + 13·d` (four matrices, their shifts, two layer norms), and the final
/// layer norm.
fn stored_numbers(config: &GptConfig) -> Option<usize> {
    let d = config.n_embd;
    let tables = config.vocab_size.checked_add(config.block_size)?.checked_mul(d)?;
    let block = d.checked_mul(d)?.checked_mul(12)?.checked_add(d.checked_mul(13)?)?;
    config.n_layer.checked_mul(block)?.checked_add(tables)?.checked_add(d.checked_mul(2)?)
}

/// An error unless every tensor the model does not train holds what it must: the shifts
/// of a model without `bias` zero, the position table of fixed positions its sinusoids (or
/// zeros), to within `1e-6`.
fn check_untrained(path: &Path, gpt: &Gpt<f32>) -> Result<()> {
    let c = &gpt.config;
    let fixed = c.positions.fixed_table::<f32>(c.block_size, c.n_embd).ok().flatten();
    for (name, tensor) in gpt.tensors() {
        if gpt.is_trained(&name) {
            continue;
        }
        let problem = match &fixed {
            Some(table) if name == "transformer.wpe.weight" => {
                // within 1e-6: another machine's sine may round the last bit otherwise
                let off = tensor.shape() != table.shape()
                    || tensor.iter().zip(table).any(|(a, b)| (a - b).abs() > 1e-6);
                off.then(|| {
                    let kind = c.positions.name();
                    format!("is not the table of {kind} positions, which is fixed")
                })
            }
            _ => tensor.iter().any(|&x| x != 0.0).then(|| {
                "is not zero, but the config has bias = false (shifts that are not trained \
                 stay zero)"
                    .to_string()
            }),
        };
        if let Some(problem) = problem {
            return Err(PretrainedError::TensorValues { path: path.into(), name, problem });
        }
    }
    Ok(())
}

fn read_text(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map_err(|source| PretrainedError::Io { path: path.into(), source })
}

/// Writes every `(name, bytes)` into `dir` so that each file appears whole or not at all:
/// first every file goes to a new temporary file beside it (`.name.<pid>.<n>.tmp`), synced to
/// disk; only when all are written is each renamed over its name. On a failure the temporary
/// files are removed and the error names the file being written.
fn write_all_or_nothing(dir: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    let mut temps: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(files.len());
    let remove = |temps: &[(PathBuf, PathBuf)]| {
        for (temp, _) in temps {
            let _ = fs::remove_file(temp);
        }
    };
    for (name, bytes) in files {
        let target = dir.join(name);
        match write_temp(dir, name, bytes) {
            Ok(temp) => temps.push((temp, target)),
            Err(source) => {
                remove(&temps);
                return Err(PretrainedError::Io { path: target, source });
            }
        }
    }
    for i in 0..temps.len() {
        let (temp, target) = &temps[i];
        if let Err(source) = fs::rename(temp, target) {
            remove(&temps[i..]);
            return Err(PretrainedError::Io { path: target.clone(), source });
        }
    }
    Ok(())
}

/// `bytes` in a new file `dir/.name.<pid>.<n>.tmp`, the first `n` whose name is free,
/// synced to disk; returns its path.
fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let mut n = 0;
    let (temp, mut file) = loop {
        let temp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match fs::OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => break (temp, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(e),
        }
    };
    if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_all()) {
        drop(file);
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    Ok(temp)
}
