//! Chapter 15's GPT against PyTorch, through a checkpoint that transformers wrote: the tiny
//! GPT-2 of `tools/make_gpt_fixtures.py` (2 blocks of 2 heads, `n_embd` 16, 7 characters,
//! every weight and shift random), read by `pretrained::gpt2::load`, widened to `f64` and
//! compared with transformers' `GPT2LMHeadModel` run in `float64` on the same stored weights:
//! the logits, the loss, the gradient of every tensor by autograd, and three steps of
//! `torch.optim.AdamW` after `clip_grad_norm_`.
//!
//! # Tolerances
//!
//! Both sides compute in `f64` from the same `f32` weights, so they differ only by the order
//! of their sums (PyTorch's kernels against the crate's exact path), a few units in the 16th
//! digit. The crate's path gives the same bits on every machine and the references are
//! stored, so the differences below are the same everywhere: each bound sits a small factor
//! above the difference measured (`-- --nocapture` prints them). Each check is also run on a
//! deliberately wrong variant, which must land far outside its bound.

use std::path::{Path, PathBuf};

use attention::gpt::optim::{AdamW, clip_global_norm};
use attention::gpt::weights::Gpt;
use ndarray::{Array2, ArrayD, Axis, IxDyn};
use pretrained::gpt2;
use safetensors::{Dtype, SafeTensors};

/// Logits (entries up to 5.1): largest absolute difference. Measured: 4.0e-15.
const LOGITS_ABS: f64 = 2e-14;
/// The mean cross-entropy (3.7 on the first batch, 2.1 to 3.3 on the three steps'). Measured:
/// 8.9e-16 (first batch), 4.4e-16 (the steps').
const LOSS_ABS: f64 = 4e-15;
/// Every gradient, entry by entry (entries up to 0.77). Measured: 3.9e-16.
const GRAD_ABS: f64 = 2e-15;
/// The global gradient norm before clipping (3.1 to 5.4), relative. Measured: 3.3e-16.
const NORM_REL: f64 = 2e-15;
/// Every parameter after three AdamW steps (entries up to 1.4), the keys' shifts apart.
/// Measured: 7.8e-16.
const PARAM_ABS: f64 = 4e-15;
/// The keys' shifts after three AdamW steps: their gradient is zero, so each side moves them
/// by its own rounding noise ([`params_diff`]). Measured: 2.0e-11.
const KEY_SHIFT_ABS: f64 = 1e-10;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-gpt2")
}

/// The references of `tools/make_gpt_fixtures.py`.
struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    fn load() -> Reference {
        Reference {
            bytes: std::fs::read(fixture_dir().join("reference.safetensors")).unwrap(),
        }
    }

    fn f64s(&self, name: &str) -> ArrayD<f64> {
        let file = SafeTensors::deserialize(&self.bytes).unwrap();
        let t = file.tensor(name).unwrap_or_else(|_| panic!("no reference tensor {name}"));
        assert_eq!(t.dtype(), Dtype::F64, "{name}");
        let values = t
            .data()
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        ArrayD::from_shape_vec(IxDyn(t.shape()), values).unwrap()
    }

    fn ids(&self, name: &str) -> ArrayD<usize> {
        let file = SafeTensors::deserialize(&self.bytes).unwrap();
        let t = file.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::I64, "{name}");
        let values = t
            .data()
            .chunks_exact(8)
            .map(|b| usize::try_from(i64::from_le_bytes(b.try_into().unwrap())).unwrap())
            .collect();
        ArrayD::from_shape_vec(IxDyn(t.shape()), values).unwrap()
    }

    /// `(tokens, targets)`, both `(B, T)`; `step` picks one of the AdamW batches.
    fn batch(&self, step: Option<usize>) -> (Array2<usize>, Array2<usize>) {
        let two = |a: ArrayD<usize>| a.into_dimensionality().unwrap();
        match step {
            None => (two(self.ids("tokens")), two(self.ids("targets"))),
            Some(s) => (
                two(self.ids("adamw.tokens").index_axis_move(Axis(0), s)),
                two(self.ids("adamw.targets").index_axis_move(Axis(0), s)),
            ),
        }
    }
}

/// The fixture checkpoint, read by the crate and widened to `f64`.
fn fixture_model() -> Gpt<f64> {
    let (gpt, vocab) = gpt2::load(&fixture_dir()).unwrap();
    assert_eq!(vocab.chars().iter().collect::<String>(), " benort");
    assert!(gpt.config.bias);
    gpt.map_weights(f64::from)
}

fn max_abs_diff(a: &ArrayD<f64>, b: &ArrayD<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

/// The largest difference between the logits of `gpt` and transformers'.
fn logits_diff(gpt: &Gpt<f64>, r: &Reference) -> f64 {
    let (tokens, _) = r.batch(None);
    max_abs_diff(&gpt.logits(&tokens.view()).unwrap().into_dyn(), &r.f64s("logits"))
}

#[test]
fn logits_and_loss_match_transformers() {
    let r = Reference::load();
    let gpt = fixture_model();
    let (tokens, targets) = r.batch(None);
    let logits = logits_diff(&gpt, &r);
    let loss = (gpt.loss(&tokens.view(), &targets.view()).unwrap() - r.f64s("loss")[0]).abs();
    println!("logits: max |Δ| = {logits:.3e}; loss: |Δ| = {loss:.3e}");
    assert!(logits < LOGITS_ABS, "{logits}");
    assert!(loss < LOSS_ABS, "{loss}");

    // Conv1D's (d_in, d_out) read as nn.Linear's (d_out, d_in): a square matrix loads
    // without a shape error, and only the numbers can tell.
    let mut wrong = gpt.clone();
    wrong.blocks[0].attn_proj.w = gpt.blocks[0].attn_proj.w.t().to_owned();
    let transposed = logits_diff(&wrong, &r);
    // a layer-norm ε of 1e-6 instead of 1e-5: a small change, still far outside the bound
    let mut wrong = gpt.clone();
    wrong.config.layer_norm_epsilon = 1e-6;
    let epsilon = logits_diff(&wrong, &r);
    println!("wrong: transposed c_proj {transposed:.3e}, ε = 1e-6 {epsilon:.3e}");
    assert!(transposed > 1e-2 && epsilon > 1e3 * LOGITS_ABS, "{transposed} {epsilon}");
}

/// The largest difference between the gradients of `gpt` and autograd's, over every tensor.
fn grads_diff(gpt: &Gpt<f64>, r: &Reference) -> f64 {
    let (tokens, targets) = r.batch(None);
    let (_, grads) = gpt.loss_and_grads(&tokens.view(), &targets.view()).unwrap();
    let mut worst: f64 = 0.0;
    for (name, grad) in grads.tensors() {
        worst = worst.max(max_abs_diff(&grad.to_owned(), &r.f64s(&format!("grad.{name}"))));
    }
    worst
}

#[test]
fn every_gradient_matches_autograd() {
    let r = Reference::load();
    let gpt = fixture_model();
    // every reference gradient has its tensor (none is left out of the comparison)
    let file = SafeTensors::deserialize(&r.bytes).unwrap();
    let stored = file.names().iter().filter(|n| n.starts_with("grad.")).count();
    assert_eq!(stored, gpt.tensors().len());
    let worst = grads_diff(&gpt, &r);
    let mut wrong = gpt.clone();
    wrong.config.layer_norm_epsilon = 1e-6;
    let epsilon = grads_diff(&wrong, &r);
    println!("gradients: max |Δ| = {worst:.3e}; wrong (ε = 1e-6): {epsilon:.3e}");
    assert!(worst < GRAD_ABS, "{worst}");
    assert!(epsilon > 1e3 * GRAD_ABS, "{epsilon}");
}

/// How the three steps are taken: right, or with one of two classic mistakes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Steps {
    /// Clipping by the global norm, weight decay on the matrices and tables only.
    NanoGpt,
    /// Weight decay on every tensor, layer-norm gains and shifts included.
    DecayEverything,
    /// Each tensor clipped to norm 1 by itself.
    ClipPerTensor,
}

/// What three steps give: the loss before each, the gradient norms before clipping (empty
/// when clipping per tensor), and the model after the third.
struct Run {
    losses: Vec<f64>,
    norms: Vec<f64>,
    gpt: Gpt<f64>,
}

/// Three steps on torch's batches with torch's learning rates.
fn three_steps(r: &Reference, steps: Steps) -> Run {
    let mut gpt = fixture_model();
    let mut adamw = AdamW::nanogpt(&gpt);
    let lrs = r.f64s("adamw.lr");
    let (mut losses, mut norms) = (Vec::new(), Vec::new());
    for s in 0..3 {
        let (tokens, targets) = r.batch(Some(s));
        let (loss, mut grads) = gpt.loss_and_grads(&tokens.view(), &targets.view()).unwrap();
        losses.push(loss);
        if steps == Steps::ClipPerTensor {
            for (_, mut g) in grads.tensors_mut() {
                let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
                g.mapv_inplace(|x| x * (1.0 / (norm + 1e-6)).min(1.0));
            }
        } else {
            norms.push(clip_global_norm(&mut grads, 1.0));
        }
        if steps == Steps::DecayEverything {
            // decaying before the step is the same as AdamW decaying these too: the moments
            // do not depend on the weights
            for (_, mut t) in gpt.tensors_mut().into_iter().filter(|(_, t)| t.ndim() == 1) {
                t.mapv_inplace(|x| x * (1.0 - lrs[s] * 0.1));
            }
        }
        adamw.step(&mut gpt, &grads, lrs[s]).unwrap();
    }
    Run { losses, norms, gpt }
}

/// The largest differences between the parameters of `gpt` and torch's after three steps:
/// over the keys' shifts (the middle third of each `attn.c_attn.bias`), and over every other
/// number.
///
/// A key's shift adds `q·b_k` to every score of a query's row, which softmax ignores: its
/// gradient is zero, and what either side computes for it is rounding noise, about 1e-17.
/// Adam divides by `√v + ε`, so noise `ν` moves the weight by about `lr·ν/(|ν| + ε)` ≈
/// `lr·1e-9` a step, differently on each side.
fn params_diff(gpt: &Gpt<f64>, r: &Reference) -> (f64, f64) {
    let d = gpt.config.n_embd;
    let (mut keys, mut others): (f64, f64) = (0.0, 0.0);
    for (name, t) in gpt.tensors() {
        let theirs = r.f64s(&format!("adamw.{name}"));
        assert_eq!(t.shape(), theirs.shape());
        for (i, (a, b)) in t.iter().zip(&theirs).enumerate() {
            let key_shift = name.ends_with("attn.c_attn.bias") && (d..2 * d).contains(&i);
            let worst = if key_shift { &mut keys } else { &mut others };
            *worst = worst.max((a - b).abs());
        }
    }
    (keys, others)
}

#[test]
fn three_adamw_steps_with_clipping_match_torch() {
    let r = Reference::load();
    let run = three_steps(&r, Steps::NanoGpt);
    let expected = r.f64s("adamw.grad_norm");
    let norm =
        run.norms.iter().zip(&expected).fold(0.0f64, |m, (a, b)| m.max((a - b).abs() / b));
    let losses =
        max_abs_diff(&ndarray::Array1::from(run.losses).into_dyn(), &r.f64s("adamw.loss"));
    let (keys, params) = params_diff(&run.gpt, &r);
    let decay = params_diff(&three_steps(&r, Steps::DecayEverything).gpt, &r).1;
    let per_tensor = params_diff(&three_steps(&r, Steps::ClipPerTensor).gpt, &r).1;
    println!(
        "AdamW: losses max |Δ| = {losses:.3e}, norms max rel |Δ| = {norm:.3e}, \
         parameters max |Δ| = {params:.3e}, keys' shifts max |Δ| = {keys:.3e}"
    );
    println!("wrong: decay on every tensor {decay:.3e}, clipping per tensor {per_tensor:.3e}");
    assert!(expected.iter().all(|&n| n > 1.0), "every step clips: {expected}");
    assert!(losses < LOSS_ABS, "{losses}");
    assert!(norm < NORM_REL, "{norm}");
    assert!(params < PARAM_ABS, "{params}");
    assert!(keys < KEY_SHIFT_ABS, "{keys}");
    assert!(decay > 1e6 * PARAM_ABS && per_tensor > 1e6 * PARAM_ABS, "{decay} {per_tensor}");
}

/// Saving the model that transformers wrote gives the same tensors, bytes for bytes, the same
/// vocab.json, and a config.json that agrees with transformers' on every key it writes.
#[test]
fn saving_the_fixture_again_writes_what_transformers_wrote() {
    let (gpt, vocab) = gpt2::load(&fixture_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    gpt2::save(dir.path(), &gpt, &vocab).unwrap();
    let read = |dir: &Path, file: &str| std::fs::read(dir.join(file)).unwrap();
    assert_eq!(read(dir.path(), "vocab.json"), read(&fixture_dir(), "vocab.json"));
    let json = |bytes: Vec<u8>| serde_json::from_slice::<serde_json::Value>(&bytes).unwrap();
    let ours = json(read(dir.path(), "config.json"));
    let theirs = json(read(&fixture_dir(), "config.json"));
    for (key, value) in ours.as_object().unwrap() {
        assert_eq!(Some(value), theirs.get(key), "{key}");
    }
    let (ours, theirs) =
        (read(dir.path(), "model.safetensors"), read(&fixture_dir(), "model.safetensors"));
    let (ours, theirs) =
        (SafeTensors::deserialize(&ours).unwrap(), SafeTensors::deserialize(&theirs).unwrap());
    let mut names = ours.names();
    names.sort();
    let mut their_names = theirs.names();
    their_names.sort();
    assert_eq!(names, their_names);
    for name in names {
        let (a, b) = (ours.tensor(name).unwrap(), theirs.tensor(name).unwrap());
        assert_eq!(
            (a.dtype(), a.shape(), a.data()),
            (b.dtype(), b.shape(), b.data()),
            "{name}"
        );
    }
}
