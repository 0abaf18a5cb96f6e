//! Loading checks on broken copies of the tiny BERT fixture: every way a model directory can
//! be wrong is one error naming the file and the tensor, never a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use pretrained::{Bert, PretrainedError};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

fn tiny_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-bert/model")
}

/// The tiny model's tensors: name → (dtype, shape, bytes).
type Raw = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

fn tiny_tensors() -> Raw {
    let bytes = std::fs::read(tiny_dir().join("model.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(name, t)| (name, (t.dtype(), t.shape().to_vec(), t.data().to_vec())))
        .collect()
}

/// A model directory holding the tiny model's config and tokenizer and the given tensors.
fn write_model(tensors: &Raw) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(tiny_dir().join(file), dir.path().join(file)).unwrap();
    }
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(name, (dtype, shape, data))| {
            (name.clone(), TensorView::new(*dtype, shape.clone(), data).unwrap())
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors"))
        .unwrap();
    dir
}

/// Loads a model directory holding `tensors`, which must fail with a message that names
/// model.safetensors and ends with `ending`; returns the error.
fn load_error(tensors: &Raw, ending: &str) -> PretrainedError {
    let dir = write_model(tensors);
    let err = Bert::load(dir.path()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("model.safetensors: "), "{text}");
    assert!(text.ends_with(ending), "{text}");
    err
}

fn f32_values(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

#[test]
fn the_unchanged_copy_loads() {
    let dir = write_model(&tiny_tensors());
    let bert = Bert::load(dir.path()).unwrap();
    assert_eq!((bert.config().num_hidden_layers, bert.config().hidden_size), (2, 16));
}

#[test]
fn a_missing_tensor_is_named() {
    let mut t = tiny_tensors();
    t.remove("encoder.layer.1.output.dense.bias").unwrap();
    let err = load_error(
        &t,
        "tensor encoder.layer.1.output.dense.bias is missing (expected shape [16])",
    );
    assert!(matches!(err, PretrainedError::MissingTensor { .. }));
}

#[test]
fn a_misshaped_tensor_is_named_with_both_shapes() {
    let mut t = tiny_tensors();
    let q = t.get_mut("encoder.layer.0.attention.self.query.weight").unwrap();
    q.1 = vec![32, 8]; // the same 256 numbers, the wrong shape
    let err = load_error(
        &t,
        "tensor encoder.layer.0.attention.self.query.weight has shape [32, 8] but the config asks for [16, 16]",
    );
    assert!(matches!(err, PretrainedError::TensorShape { .. }));
}

#[test]
fn a_weight_of_integers_is_refused() {
    let mut t = tiny_tensors();
    t.get_mut("embeddings.LayerNorm.weight").unwrap().0 = Dtype::I32;
    let err = load_error(
        &t,
        "tensor embeddings.LayerNorm.weight has dtype I32 but F32, F16 or BF16 was expected",
    );
    assert!(matches!(err, PretrainedError::Dtype { .. }));
}

#[test]
fn position_ids_must_be_integers() {
    let mut t = tiny_tensors();
    let max = 64;
    let ids: Vec<u8> = (0..max as i64).flat_map(|i| i.to_le_bytes()).collect();
    t.insert("embeddings.position_ids".into(), (Dtype::I64, vec![1, max], ids));
    assert!(Bert::load(write_model(&t).path()).is_ok(), "I64 position ids are accepted");
    let floats: Vec<u8> = (0..max).flat_map(|i| (i as f32).to_le_bytes()).collect();
    t.insert("embeddings.position_ids".into(), (Dtype::F32, vec![1, max], floats));
    load_error(&t, "tensor embeddings.position_ids has dtype F32 but I64 was expected");
}

#[test]
fn a_tensor_no_layer_reads_is_refused() {
    let mut t = tiny_tensors();
    t.insert(
        "cls.predictions.bias".into(),
        (Dtype::F32, vec![1], 0f32.to_le_bytes().to_vec()),
    );
    let err = load_error(
        &t,
        "tensor cls.predictions.bias is not part of a BERT encoder with this config",
    );
    assert!(matches!(err, PretrainedError::UnexpectedTensor { .. }));
}

#[test]
fn a_config_with_more_layers_than_the_file_names_the_first_missing_tensor() {
    let dir = write_model(&tiny_tensors());
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["num_hidden_layers"] = 3.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let text = Bert::load(dir.path()).unwrap_err().to_string();
    assert!(text.ends_with("tensor encoder.layer.2.attention.self.query.weight is missing (expected shape [16, 16])"), "{text}");
}

#[test]
fn a_truncated_file_is_not_a_model() {
    let dir = write_model(&tiny_tensors());
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = Bert::load(dir.path()).unwrap_err();
    assert!(matches!(err, PretrainedError::Format { .. }), "{err}");
    assert!(err.to_string().contains("model.safetensors: not a valid safetensors file"));
}

#[test]
fn a_missing_weights_file_is_named() {
    let dir = write_model(&tiny_tensors());
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let err = Bert::load(dir.path()).unwrap_err();
    assert!(matches!(err, PretrainedError::Io { .. }));
    assert!(
        err.to_string()
            .starts_with(&dir.path().join("model.safetensors").display().to_string())
    );
}

/// A checkpoint of a model with a task head stores the encoder under `bert.`; the pooler,
/// stored or not, is not read.
#[test]
fn the_bert_prefix_and_the_pooler_are_understood() {
    let prefixed: Raw =
        tiny_tensors().into_iter().map(|(n, t)| (format!("bert.{n}"), t)).collect();
    let dir = write_model(&prefixed);
    let ids: &[u32] = &[2, 5, 3];
    let a = Bert::load(dir.path()).unwrap().forward(&[ids]).unwrap();
    let b = Bert::load(tiny_dir()).unwrap().forward(&[ids]).unwrap();
    assert_eq!(a.hidden_states, b.hidden_states);
}

/// The same weights rounded to f16 and to bf16 load, widened to f32, and give nearly the same
/// hidden states (bf16 keeps 8 bits of mantissa, f16 11).
#[test]
fn half_precision_weights_load() {
    let ids: &[u32] = &[2, 5, 7, 3];
    let reference = Bert::load(tiny_dir()).unwrap().forward(&[ids]).unwrap();
    for (dtype, tolerance) in [(Dtype::F16, 2e-2f32), (Dtype::BF16, 1e-1)] {
        let rounded: Raw = tiny_tensors()
            .into_iter()
            .map(|(name, (d, shape, data))| {
                if d != Dtype::F32 {
                    return (name, (d, shape, data));
                }
                let half: Vec<u8> = f32_values(&data)
                    .into_iter()
                    .flat_map(|x| match dtype {
                        Dtype::F16 => f16::from_f32(x).to_le_bytes(),
                        _ => bf16::from_f32(x).to_le_bytes(),
                    })
                    .collect();
                (name, (dtype, shape, half))
            })
            .collect();
        let out = Bert::load(write_model(&rounded).path()).unwrap().forward(&[ids]).unwrap();
        let last = out.hidden_states.last().unwrap();
        let d = (last - reference.hidden_states.last().unwrap())
            .iter()
            .fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(d > 0.0 && d < tolerance, "{dtype:?}: {d}");
    }
}

/// Appendix C: the committed copy holds `embeddings.position_ids` (as `int64`) and leaves the
/// pooler out: 102 tensors, the 5 of the embeddings, 16 per layer and `position_ids`.
#[test]
fn the_committed_copy_holds_position_ids_and_no_pooler() {
    let bytes = std::fs::read(pretrained::minilm_dir().join("model.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let names = file.names();
    assert_eq!(names.len(), 102);
    let position_ids = file.tensor("embeddings.position_ids").unwrap();
    assert_eq!((position_ids.dtype(), position_ids.shape()), (Dtype::I64, &[1, 512][..]));
    assert!(names.iter().all(|n| !n.starts_with("pooler")), "{names:?}");
    let per_layer = |l: usize| {
        let prefix = format!("encoder.layer.{l}.");
        names.iter().filter(|n| n.starts_with(&prefix)).count()
    };
    assert_eq!((0..6).map(per_layer).collect::<Vec<_>>(), [16; 6]);
    assert_eq!(names.iter().filter(|n| n.starts_with("embeddings.")).count(), 6);
}
