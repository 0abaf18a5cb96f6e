//! The crate against the reference implementation: Hugging Face transformers (every layer's
//! hidden states and attention weights), sentence-transformers (sentence embeddings) and the
//! Python tokenizers library (token ids), all run by `tools/make_model.py` on the *committed*
//! weights and saved under `tests/fixtures/`. Two models: the committed all-MiniLM-L6-v2, and
//! a tiny randomly initialised BERT (2 layers, 4 heads, d_model 16) saved in the same layout,
//! so the loader is tested on more than one directory.
//!
//! # Tolerances
//!
//! Both sides compute in `f32` from the same weights, in different orders of summation (our
//! matrix products are matrixmultiply's, PyTorch's are its own kernels'), so they agree to a
//! few units in the last place of the numbers' size, not exactly (this crate also evaluates
//! layer norm and GELU in f64 and rounds once). Layer norm keeps the error from growing with
//! depth. The bounds leave room above the worst differences measured on a 2-core AMD EPYC with
//! AVX2 and FMA (see each constant; `-- --nocapture` prints yours), since other CPUs pick other
//! matrixmultiply kernels (an AVX-512 machine rounds differently again).

use std::path::{Path, PathBuf};

use ndarray::{Array1, ArrayD, Axis, IxDyn, s};
use pretrained::{Bert, SentenceEncoder, Tokenizer};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

/// Hidden states: absolute difference (their entries reach about 10.5). Measured: 2.15e-6
/// (all-MiniLM-L6-v2), 9.5e-7 (tiny-bert).
const HIDDEN_ABS: f32 = 1e-5;
/// Attention weights: absolute difference. Measured: 1.67e-6 (all-MiniLM-L6-v2), 4.2e-7
/// (tiny-bert).
const WEIGHTS_ABS: f32 = 4e-6;
/// The fast path's last hidden states ([`pretrained::FastBert`]): absolute difference, the
/// same bound as the plain path's. Measured: 2.86e-6 (all-MiniLM-L6-v2), 1.19e-6 (tiny-bert).
const FAST_HIDDEN_ABS: f32 = HIDDEN_ABS;
/// Sentence embeddings: cosine with sentence-transformers' (the bound).
const EMBEDDING_COS: f32 = 0.99999;

fn fixtures(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(model)
}

fn model_dir(model: &str) -> PathBuf {
    match model {
        "minilm" => pretrained::minilm_dir(),
        other => fixtures(other).join("model"),
    }
}

#[derive(Deserialize)]
struct LongText {
    text: String,
    tokens_before_truncation: usize,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    tokens: Vec<String>,
}

#[derive(Deserialize)]
struct Cases {
    sentences: Vec<String>,
    long_text: Option<LongText>,
    tokenization: Vec<Case>,
}

fn cases(model: &str) -> Cases {
    let text = std::fs::read_to_string(fixtures(model).join("cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The reference tensors of one model.
struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    fn load(model: &str) -> Reference {
        Reference {
            bytes: std::fs::read(fixtures(model).join("reference.safetensors")).unwrap(),
        }
    }

    fn get(&self, name: &str) -> ArrayD<f32> {
        let file = SafeTensors::deserialize(&self.bytes).unwrap();
        let t = file.tensor(name).unwrap_or_else(|_| panic!("no reference tensor {name}"));
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        let values =
            t.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()));
        ArrayD::from_shape_vec(IxDyn(t.shape()), values.collect()).unwrap()
    }

    fn ids(&self, name: &str) -> Vec<u32> {
        let file = SafeTensors::deserialize(&self.bytes).unwrap();
        let t = file.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::I64, "{name}");
        t.data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
            .collect()
    }
}

fn max_abs_diff(a: &ArrayD<f32>, b: &ArrayD<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn cosine(a: &Array1<f32>, b: &Array1<f32>) -> f32 {
    a.dot(b) / (a.dot(a).sqrt() * b.dot(b).sqrt())
}

fn tokenizer_matches_python(model: &str) {
    let tokenizer = Tokenizer::from_dir(&model_dir(model)).unwrap();
    let cases = cases(model);
    assert!(!cases.tokenization.is_empty());
    for case in &cases.tokenization {
        let t = tokenizer.encode(&case.text).unwrap();
        assert_eq!(t.ids, case.ids, "{:?}", case.text);
        assert_eq!(t.tokens, case.tokens, "{:?}", case.text);
    }
}

/// Every layer's hidden states and weights for each sentence, run alone; returns the worst
/// differences (hidden, weights).
fn layers_match_transformers(model: &str) -> (f32, f32) {
    let bert = Bert::load(model_dir(model)).unwrap();
    let reference = Reference::load(model);
    let (mut worst_hidden, mut worst_weights) = (0.0f32, 0.0f32);
    for i in 0..cases(model).sentences.len() {
        let ids = reference.ids(&format!("s{i}.ids"));
        let out = bert.forward(&[&ids]).unwrap();
        for (layer, hidden) in out.hidden_states.iter().enumerate() {
            let ours = hidden.index_axis(Axis(0), 0).to_owned().into_dyn();
            let d = max_abs_diff(&ours, &reference.get(&format!("s{i}.hidden.{layer}")));
            assert!(d < HIDDEN_ABS, "sentence {i}, hidden state {layer}: {d}");
            worst_hidden = worst_hidden.max(d);
        }
        for (layer, weights) in out.attentions.iter().enumerate() {
            let ours = weights.index_axis(Axis(0), 0).to_owned().into_dyn();
            let d = max_abs_diff(&ours, &reference.get(&format!("s{i}.attn.{layer}")));
            assert!(d < WEIGHTS_ABS, "sentence {i}, weights of layer {layer}: {d}");
            worst_weights = worst_weights.max(d);
        }
    }
    eprintln!("{model}: worst |Δ| hidden {worst_hidden:.2e}, weights {worst_weights:.2e}");
    (worst_hidden, worst_weights)
}

/// The fast path's last hidden states for each sentence against transformers'; returns the
/// worst difference.
fn fast_path_matches_transformers(model: &str) -> f32 {
    let bert = Bert::load(model_dir(model)).unwrap();
    let fast = bert.fast().unwrap();
    let reference = Reference::load(model);
    let last = bert.config().num_hidden_layers;
    let mut worst = 0.0f32;
    for i in 0..cases(model).sentences.len() {
        let ids = reference.ids(&format!("s{i}.ids"));
        let ours = fast.forward(&ids).unwrap().into_dyn();
        let d = max_abs_diff(&ours, &reference.get(&format!("s{i}.hidden.{last}")));
        assert!(d < FAST_HIDDEN_ABS, "sentence {i}: {d}");
        worst = worst.max(d);
    }
    eprintln!("{model}, fast path: worst |Δ| of the last hidden states {worst:.2e}");
    worst
}

#[test]
fn minilm_fast_path_matches_transformers() {
    fast_path_matches_transformers("minilm");
}

#[test]
fn tiny_bert_fast_path_matches_transformers() {
    fast_path_matches_transformers("tiny-bert");
}

#[test]
fn minilm_tokenizer_matches_python() {
    tokenizer_matches_python("minilm");
}

#[test]
fn tiny_bert_tokenizer_matches_python() {
    tokenizer_matches_python("tiny-bert");
}

#[test]
fn minilm_layers_match_transformers() {
    let (hidden, weights) = layers_match_transformers("minilm");
    assert!(hidden > 0.0 && weights > 0.0, "bit-identical to PyTorch would be a surprise");
}

#[test]
fn tiny_bert_layers_match_transformers() {
    layers_match_transformers("tiny-bert");
}

/// The sentences' embeddings, computed as one padded batch, against the reference's (each
/// sentence run alone there); returns the encoder, the reference and the cases for more checks.
fn embeddings_match(model: &str) -> (SentenceEncoder, Reference, Cases) {
    let encoder = SentenceEncoder::load(model_dir(model)).unwrap();
    let reference = Reference::load(model);
    let cases = cases(model);
    let texts: Vec<&str> = cases.sentences.iter().map(String::as_str).collect();
    let ours = encoder.embed(&texts).unwrap();
    for (i, row) in ours.outer_iter().enumerate() {
        let theirs = reference.get(&format!("s{i}.embedding")).into_dimensionality().unwrap();
        let c = cosine(&row.to_owned(), &theirs);
        assert!(c >= EMBEDDING_COS, "{model}, sentence {i}: cosine {c}");
    }
    (encoder, reference, cases)
}

#[test]
fn minilm_embeddings_match_sentence_transformers() {
    let (encoder, reference, cases) = embeddings_match("minilm");
    // The long text: cut at 256 tokens, as sentence-transformers cuts it.
    let long = cases.long_text.expect("minilm's cases have a long text");
    let tokens = encoder.tokenizer().encode(&long.text).unwrap();
    assert_eq!(tokens.truncated_from, Some(long.tokens_before_truncation));
    assert_eq!(tokens.ids.len(), 256);
    let ours = encoder.embed(&[&long.text]).unwrap().row(0).to_owned();
    let theirs = reference.get("long.embedding").into_dimensionality().unwrap();
    let c = cosine(&ours, &theirs);
    assert!(c >= EMBEDDING_COS, "long text: cosine {c}");
}

/// tiny-bert's reference embeddings are mean pooling and L2 normalisation computed in torch.
#[test]
fn tiny_bert_embeddings_match_torch() {
    embeddings_match("tiny-bert");
}

/// A padded batch gives every sentence the hidden states and embedding it has alone.
#[test]
fn padded_batch_equals_one_at_a_time() {
    let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
    let cases = cases("minilm");
    let texts: Vec<&str> = cases.sentences.iter().map(String::as_str).collect();
    let tokens: Vec<_> =
        texts.iter().map(|t| encoder.tokenizer().encode(t).unwrap()).collect();
    let lengths: Vec<usize> = tokens.iter().map(|t| t.ids.len()).collect();
    assert!(
        lengths.iter().min() < lengths.iter().max(),
        "the batch needs padding: {lengths:?}"
    );
    let batch: Vec<&[u32]> = tokens.iter().map(|t| t.ids.as_slice()).collect();
    let together = encoder.bert().forward(&batch).unwrap();
    let embedded = encoder.bert().sentence_embeddings(&together).unwrap();
    for (i, ids) in batch.iter().enumerate() {
        let alone = encoder.bert().forward(&[ids]).unwrap();
        let n = ids.len();
        for layer in 0..together.hidden_states.len() {
            let a = alone.hidden_states[layer].slice(s![0, .., ..]).to_owned().into_dyn();
            let b = together.hidden_states[layer].slice(s![i, ..n, ..]).to_owned().into_dyn();
            assert!(max_abs_diff(&a, &b) < 4e-6, "sentence {i}, layer {layer}");
        }
        let padding = together.attentions[0].slice(s![i, .., .., n..]);
        assert!(padding.iter().all(|&w| w == 0.0), "sentence {i}: padding got weight");
        let e = encoder.bert().sentence_embeddings(&alone).unwrap().row(0).to_owned();
        let d = (&e - &embedded.row(i)).iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(d < 3e-7, "sentence {i}: embedding differs by {d}");
    }
}

/// Every attention row of the reference sums to 1: the fixtures are what they claim to be.
#[test]
fn reference_weights_are_distributions() {
    for model in ["minilm", "tiny-bert"] {
        let reference = Reference::load(model);
        for i in 0..cases(model).sentences.len() {
            let w = reference.get(&format!("s{i}.attn.0"));
            for row in w.lanes(Axis(2)) {
                assert!((row.sum() - 1.0).abs() < 1e-5, "{model} sentence {i}");
            }
        }
    }
}

/// The committed `tokenizer.json` pads every input to 128 tokens and cuts at 128 (what the
/// chapter says); the crate's tokenizer does neither: a short text stays short, and a text of
/// 200 tokens stays whole, as sentence-transformers keeps it.
#[test]
fn the_files_padding_and_truncation_at_128_are_switched_off() {
    let path = pretrained::minilm_dir().join("tokenizer.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(json["padding"]["strategy"]["Fixed"], 128);
    assert_eq!(json["truncation"]["max_length"], 128);
    let tokenizer = Tokenizer::from_dir(&pretrained::minilm_dir()).unwrap();
    assert_eq!(tokenizer.encode("Hello world").unwrap().ids.len(), 4);
    let t = tokenizer.encode(&"word ".repeat(198)).unwrap();
    assert_eq!((t.ids.len(), t.truncated_from), (200, None));
}
