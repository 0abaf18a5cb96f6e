//! Writing and reading a GPT checkpoint (`pretrained::gpt2`): the round trip keeps every bit,
//! and every way a checkpoint directory can be wrong is one error naming the file (and the
//! key or the tensor), never a panic.

use std::collections::BTreeMap;
use std::path::Path;

use attention::gpt::config::GptConfig;
use attention::gpt::data::CharVocab;
use attention::gpt::weights::Gpt;
use half::f16;
use pretrained::{PretrainedError, gpt2};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// A small model whose numbers are all different, with a few that a careless writer would
/// not keep: −0, a subnormal, the largest and the smallest normal `f32`.
fn model(bias: bool) -> Gpt<f32> {
    let config = GptConfig {
        vocab_size: 5,
        block_size: 4,
        n_layer: 2,
        n_head: 2,
        n_embd: 8,
        layer_norm_epsilon: 1e-5,
        bias,
        positions: Default::default(),
    };
    let mut gpt = Gpt::<f32>::zeros(config);
    let mut k = 0u32;
    let trained: Vec<bool> = gpt.tensors().iter().map(|(n, _)| gpt.is_trained(n)).collect();
    for ((_, mut t), on) in gpt.tensors_mut().into_iter().zip(trained) {
        for x in t.iter_mut().filter(|_| on) {
            k += 1;
            *x = (k as f32 * 0.7).sin();
        }
    }
    let special = [-0.0, 1e-40, f32::MAX, f32::MIN_POSITIVE];
    gpt.wte.iter_mut().zip(special).for_each(|(x, s)| *x = s);
    gpt
}

/// Characters that JSON must escape or that are not ASCII.
fn vocab() -> CharVocab {
    CharVocab::from_text("é\n\"ab").unwrap()
}

fn saved(bias: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    gpt2::save(dir.path(), &model(bias), &vocab()).unwrap();
    dir
}

fn bits(gpt: &Gpt<f32>) -> Vec<(String, Vec<u32>)> {
    gpt.tensors()
        .into_iter()
        .map(|(n, t)| (n, t.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// Loads `dir`, which must fail with a message that starts with the path of `file` in it
/// and contains `part`; returns the error.
fn load_error(dir: &Path, file: &str, part: &str) -> PretrainedError {
    let err = gpt2::load(dir).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with(&format!("{}: ", dir.join(file).display())), "{text}");
    assert!(text.contains(part), "{text}");
    err
}

/// The tensors of `model.safetensors`: name → (dtype, shape, bytes).
type Raw = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

/// Rewrites the weights file of `dir` after `change` has edited its tensors.
fn rewrite_weights(dir: &Path, change: impl FnOnce(&mut Raw)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut raw: Raw = file
        .tensors()
        .into_iter()
        .map(|(name, t)| (name, (t.dtype(), t.shape().to_vec(), t.data().to_vec())))
        .collect();
    change(&mut raw);
    let views = raw.iter().map(|(name, (dtype, shape, data))| {
        (name.clone(), TensorView::new(*dtype, shape.clone(), data).unwrap())
    });
    safetensors::serialize_to_file(views, None, &path).unwrap();
}

/// Rewrites `config.json` of `dir` after `change` has edited it.
fn rewrite_config(dir: &Path, change: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    change(&mut json);
    std::fs::write(&path, json.to_string()).unwrap();
}

#[test]
fn the_round_trip_keeps_every_bit() {
    for bias in [true, false] {
        let dir = saved(bias);
        let (gpt, vocab) = gpt2::load(dir.path()).unwrap();
        assert_eq!(gpt.config, model(bias).config);
        assert_eq!(bits(&gpt), bits(&model(bias)));
        assert_eq!(vocab, self::vocab());
    }
}

#[test]
fn the_files_are_what_transformers_reads() {
    let dir = saved(false);
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("config.json")).unwrap(),
    )
    .unwrap();
    for (key, value) in [
        ("model_type", "\"gpt2\""),
        ("architectures", "[\"GPT2LMHeadModel\"]"),
        ("vocab_size", "5"),
        ("n_positions", "4"),
        ("n_embd", "8"),
        ("n_layer", "2"),
        ("n_head", "2"),
        ("n_inner", "null"),
        ("activation_function", "\"gelu\""),
        ("layer_norm_epsilon", "1e-5"),
        ("tie_word_embeddings", "true"),
        ("bos_token_id", "null"),
        ("bias", "false"),
    ] {
        assert_eq!(
            config[key],
            serde_json::from_str::<serde_json::Value>(value).unwrap(),
            "{key}"
        );
    }
    let vocab: BTreeMap<String, usize> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("vocab.json")).unwrap())
            .unwrap();
    assert_eq!(vocab["\n"], 0);
    assert_eq!(vocab["é"], 4);
    let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let (_, metadata) = SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(metadata.metadata().as_ref().unwrap()["format"], "pt");
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<&str> = file.names();
    names.sort();
    let mut expected = model(false).config.tensor_names();
    expected.sort();
    assert_eq!(names, expected);
    assert!(file.tensors().iter().all(|(_, t)| t.dtype() == Dtype::F32));
    let w = file.tensor("transformer.h.1.mlp.c_fc.weight").unwrap();
    assert_eq!(w.shape(), [8, 32]); // Conv1D's (d_in, d_out), as the book multiplies
}

#[test]
fn saving_again_replaces_the_files_and_leaves_no_temporary_file() {
    let dir = saved(true);
    let mut changed = model(true);
    changed.ln_f.gamma[3] = 42.0;
    gpt2::save(dir.path(), &changed, &vocab()).unwrap();
    assert_eq!(gpt2::load(dir.path()).unwrap().0.ln_f.gamma[3], 42.0);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // a subdirectory that does not exist yet is created
    let nested = dir.path().join("run/step-100");
    gpt2::save(&nested, &changed, &vocab()).unwrap();
    assert!(gpt2::load(&nested).is_ok());
}

#[test]
fn a_model_that_cannot_be_saved_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut gpt = model(false);
    gpt.blocks[1].attn_proj.b[0] = 0.5; // a shift that bias = false does not train
    let err = gpt2::save(dir.path(), &gpt, &vocab()).unwrap_err().to_string();
    assert!(err.ends_with("tensor transformer.h.1.attn.c_proj.bias is not zero, but the config has bias = false (shifts that are not trained stay zero)"), "{err}");
    let mut gpt = model(true);
    gpt.blocks[0].c_fc.w = ndarray::Array2::zeros((8, 31));
    let err = gpt2::save(dir.path(), &gpt, &vocab()).unwrap_err().to_string();
    assert!(err.ends_with("tensor transformer.h.0.mlp.c_fc.weight has shape [8, 31] but the config asks for [8, 32]"), "{err}");
    let mut gpt = model(true);
    gpt.blocks.pop();
    let err = gpt2::save(dir.path(), &gpt, &vocab()).unwrap_err().to_string();
    assert_eq!(err, "GPT: 1 blocks, but its config says n_layer = 2");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_truncated_weights_file_is_one_error() {
    let dir = saved(true);
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    for len in [bytes.len() - 1, bytes.len() / 2, 10, 0] {
        std::fs::write(&path, &bytes[..len]).unwrap();
        let err = load_error(dir.path(), "model.safetensors", "not a valid safetensors file");
        assert!(matches!(err, PretrainedError::Format { .. }), "{err}");
    }
}

#[test]
fn a_misshaped_tensor_is_named_with_both_shapes() {
    let dir = saved(true);
    rewrite_weights(dir.path(), |raw| {
        raw.get_mut("transformer.h.0.attn.c_proj.weight").unwrap().1 = vec![4, 16];
    });
    let err = load_error(
        dir.path(),
        "model.safetensors",
        "tensor transformer.h.0.attn.c_proj.weight has shape [4, 16] but the config asks for [8, 8]",
    );
    assert!(matches!(err, PretrainedError::TensorShape { .. }));
}

#[test]
fn missing_and_unexpected_tensors_are_named() {
    let dir = saved(true);
    rewrite_weights(dir.path(), |raw| {
        raw.remove("transformer.ln_f.bias").unwrap();
    });
    load_error(dir.path(), "model.safetensors", "tensor transformer.ln_f.bias is missing");
    let dir = saved(true);
    rewrite_weights(dir.path(), |raw| {
        let extra = raw["transformer.ln_f.bias"].clone();
        raw.insert("transformer.h.2.ln_1.bias".into(), extra);
    });
    let err = load_error(
        dir.path(),
        "model.safetensors",
        "tensor transformer.h.2.ln_1.bias is not part of a GPT-2 decoder with this config",
    );
    assert!(matches!(err, PretrainedError::UnexpectedTensor { .. }));
}

/// A checkpoint may spell out the tied head as `lm_head.weight`: accepted when it is the
/// token table, refused otherwise.
#[test]
fn a_stored_head_must_be_the_token_table() {
    let dir = saved(true);
    rewrite_weights(dir.path(), |raw| {
        let wte = raw["transformer.wte.weight"].clone();
        raw.insert("lm_head.weight".into(), wte);
    });
    assert_eq!(bits(&gpt2::load(dir.path()).unwrap().0), bits(&model(true)));
    rewrite_weights(dir.path(), |raw| {
        raw.get_mut("lm_head.weight").unwrap().2[20] ^= 1;
    });
    let err = load_error(
        dir.path(),
        "model.safetensors",
        "tensor lm_head.weight differs from transformer.wte.weight",
    );
    assert!(matches!(err, PretrainedError::TensorValues { .. }));
}

#[test]
fn without_bias_a_shift_must_be_zero() {
    let dir = saved(false);
    rewrite_weights(dir.path(), |raw| {
        raw.get_mut("transformer.h.0.ln_2.bias").unwrap().2[..4]
            .copy_from_slice(&1f32.to_le_bytes());
    });
    load_error(
        dir.path(),
        "model.safetensors",
        "tensor transformer.h.0.ln_2.bias is not zero, but the config has bias = false",
    );
}

/// Half-precision weights are widened exactly to f32; integers are refused.
#[test]
fn f16_weights_load() {
    let dir = saved(true);
    rewrite_weights(dir.path(), |raw| {
        for (dtype, _, data) in raw.values_mut() {
            *dtype = Dtype::F16;
            *data = data
                .chunks_exact(4)
                .flat_map(|b| {
                    let x = f32::from_le_bytes(b.try_into().unwrap());
                    f16::from_f32(x.clamp(-1.0, 1.0)).to_le_bytes()
                })
                .collect();
        }
    });
    let (gpt, _) = gpt2::load(dir.path()).unwrap();
    let x = model(true).blocks[1].c_attn.w[[2, 3]];
    assert_eq!(gpt.blocks[1].c_attn.w[[2, 3]], f16::from_f32(x).to_f32());
    rewrite_weights(dir.path(), |raw| {
        raw.get_mut("transformer.wpe.weight").unwrap().0 = Dtype::I16;
    });
    let err =
        load_error(dir.path(), "model.safetensors", "transformer.wpe.weight has dtype I16");
    assert!(matches!(err, PretrainedError::Dtype { .. }));
}

#[test]
fn a_missing_file_is_named() {
    for file in ["config.json", "vocab.json", "model.safetensors"] {
        let dir = saved(true);
        std::fs::remove_file(dir.path().join(file)).unwrap();
        let err = load_error(dir.path(), file, "");
        assert!(matches!(err, PretrainedError::Io { .. }), "{err}");
    }
}

#[test]
fn a_config_this_model_cannot_run_is_refused_by_key() {
    let refused = |change: &dyn Fn(&mut serde_json::Value), part: &str| {
        let dir = saved(true);
        rewrite_config(dir.path(), change);
        let err = load_error(dir.path(), "config.json", part);
        assert!(matches!(err, PretrainedError::Config { .. }), "{err}");
    };
    refused(
        &|c| c["activation_function"] = "gelu_new".into(),
        "activation_function is \"gelu_new\", but only \"gelu\" (the exact erf form) is implemented",
    );
    refused(&|c| c["model_type"] = "bert".into(), "model_type is \"bert\", not \"gpt2\"");
    refused(&|c| c["n_head"] = 3.into(), "n_embd = 8 is not a multiple of n_head = 3");
    refused(&|c| c["n_layer"] = 0.into(), "n_layer is 0");
    refused(&|c| c["layer_norm_epsilon"] = (-1.0).into(), "layer_norm_epsilon = -1");
    refused(&|c| c["n_embd"] = "wide".into(), "invalid type: string \"wide\", expected usize");
    refused(&|c| c["n_inner"] = 20.into(), "n_inner is 20, but the MLP here is 4·n_embd = 32");
    refused(&|c| c["scale_attn_weights"] = false.into(), "scale_attn_weights is false");
    refused(&|c| c["tie_word_embeddings"] = false.into(), "tie_word_embeddings is false");
    for key in ["model_type", "n_head", "activation_function", "n_positions"] {
        refused(&|c| _ = c.as_object_mut().unwrap().remove(key), &format!("`{key}`"));
    }
    // sizes no file of this size can hold are refused before any room is made for them
    for (key, size) in
        [("n_embd", 1usize << 40), ("n_layer", usize::MAX), ("n_positions", 1 << 60)]
    {
        let dir = saved(true);
        rewrite_config(dir.path(), |c| c[key] = size.into());
        let err = load_error(dir.path(), "config.json", "model.safetensors can hold");
        assert!(matches!(err, PretrainedError::Config { .. }), "{err}");
    }
    // n_inner = 4·n_embd and keys a transformers config adds are accepted
    let dir = saved(true);
    rewrite_config(dir.path(), |c| {
        c["n_inner"] = 32.into();
        c["summary_type"] = "cls_index".into();
        c["resid_pdrop"] = 0.1.into();
    });
    assert!(gpt2::load(dir.path()).is_ok());
}

#[test]
fn a_vocabulary_must_number_its_characters_in_order() {
    let refused = |vocab: &str, part: &str| {
        let dir = saved(true);
        std::fs::write(dir.path().join("vocab.json"), vocab).unwrap();
        let err = load_error(dir.path(), "vocab.json", part);
        assert!(matches!(err, PretrainedError::Config { .. }), "{err}");
    };
    refused(r#"{"a": 0, "b": 1, "c": 2, "d": 3}"#, "4 characters, but ");
    refused(r#"{"a": 0, "b": 1, "c": 2, "d": 3}"#, "config.json has vocab_size = 5");
    refused(r#"{"a": 0, "b": 1, "c": 2, "d": 3, "e": 5}"#, "'e' has id 5, outside 0..5");
    refused(r#"{"a": 0, "b": 1, "c": 2, "d": 3, "e": 3}"#, "id 3 is given to both");
    refused(r#"{"a": 0, "b": 1, "c": 2, "e": 3, "d": 4}"#, "sorted order");
    refused(
        r#"{"a": 0, "b": 1, "c": 2, "d": 3, "ef": 4}"#,
        "the key \"ef\" is not one character",
    );
    refused(r#"{"a": 0, "b": 1, "c": 2, "d": 3, "e": -4}"#, "invalid value: integer `-4`");
    refused(r#"["a", "b", "c", "d", "e"]"#, "invalid type: sequence, expected a map");
    // the error names config.json too
    let dir = saved(true);
    std::fs::write(dir.path().join("vocab.json"), r#"{"a": 0}"#).unwrap();
    let err = gpt2::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains(&dir.path().join("config.json").display().to_string()), "{err}");
}

/// Chapter 16's positions: every kind saves and loads back bit for bit; RoPE and ALiBi under
/// a `model_type` transformers does not know; a fixed table that was changed is refused;
/// RoPE's scaling (for reading, not part of a model) is refused.
#[test]
fn every_kind_of_positions_round_trips_and_fixed_tables_are_checked() {
    use attention::gpt::positions::{Positions, RopeScaling};
    use rand::{SeedableRng, rngs::StdRng};
    let vocab = CharVocab::from_text("abcde").unwrap();
    for positions in Positions::all() {
        let config = GptConfig { positions, ..model(false).config };
        let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        gpt2::save(dir.path(), &gpt, &vocab).unwrap();
        let (back, _) = gpt2::load(dir.path()).unwrap();
        assert_eq!(back, gpt, "{positions:?}");
        let json = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
        let ours = matches!(positions, Positions::Rope { .. } | Positions::Alibi);
        assert_eq!(json.contains(r#""model_type": "gpt2""#), !ours, "{positions:?}: {json}");
        // GPT-2's own learned positions are written as transformers writes them: no key
        let key = format!(r#""positions": "{}""#, positions.name());
        assert_eq!(json.contains(&key), positions != Positions::Learned, "{json}");
        assert_eq!(json.contains("rope_theta"), matches!(positions, Positions::Rope { .. }));
        if positions == Positions::Sinusoidal {
            let mut changed = gpt.clone();
            changed.wpe[[1, 0]] += 0.01;
            let err = gpt2::save(dir.path(), &changed, &vocab).unwrap_err().to_string();
            assert!(err.contains("is not the table of sinusoidal positions"), "{err}");
        }
    }
    let scaled =
        Positions::Rope { base: 10_000.0, scaling: RopeScaling::Linear { factor: 2.0 } };
    let config = GptConfig { positions: scaled, ..model(false).config };
    let gpt = Gpt::<f32>::zeros(config);
    let dir = tempfile::tempdir().unwrap();
    let err = gpt2::save(dir.path(), &gpt, &vocab).unwrap_err().to_string();
    assert!(err.contains("RoPE's scaling"), "{err}");
}
