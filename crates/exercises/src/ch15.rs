//! Chapter 15, *A model that writes*: the backward pass of one row of a layer norm, which of
//! GPT-2's tensors AdamW's weight decay shrinks, and clipping the gradients by their global
//! norm.

use attention::gpt::config::GptConfig;
use attention::gpt::ops;
use attention::gpt::weights::{Gpt, Norm};
use ndarray::{Array1, ArrayD, Dimension, array};

use crate::{call, close, within};

/// Exercise 15.1: the gradient with respect to `x` of one row of a layer norm,
/// `y = γ ⊙ x̂ + β` with `x̂ = (x − μ)/σ`, `μ` the mean of the row, `σ = √(var + ε)` and `var`
/// the biased variance (divided by `d`, the length of the row), from the gradient `grad_y`
/// of the output. With `g = grad_y ⊙ γ`, the gradient of `x̂`:
///
/// `grad_x = (g − mean(g) − x̂ ⊙ mean(g ⊙ x̂)) / σ`.
///
/// `x`, `gamma` and `grad_y` have the same length.
///
/// ```
/// use exercises::ch15::layer_norm_backward;
///
/// // A loss that is the sum of the outputs does not depend on x: with γ = 1 the outputs of a
/// // layer norm sum to Σβ, whatever x.
/// let ones = [1.0, 1.0, 1.0];
/// let grad_x = layer_norm_backward(&[1.0, 2.0, 4.0], &ones, &ones, 1e-5);
/// assert!(grad_x.iter().all(|g| g.abs() < 1e-12));
/// // One feature: x̂ = 0 and y = β, so nothing flows back to x.
/// assert_eq!(layer_norm_backward(&[2.0], &[3.0], &[5.0], 1e-5), [0.0]);
/// ```
// ANCHOR: layer_norm_backward
pub fn layer_norm_backward(x: &[f64], gamma: &[f64], grad_y: &[f64], eps: f64) -> Vec<f64> {
    let d = x.len() as f64;
    let mean = x.iter().sum::<f64>() / d;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d; // biased: ÷ d
    let sigma = (var + eps).sqrt();
    let x_hat: Vec<f64> = x.iter().map(|v| (v - mean) / sigma).collect();
    // ∂ℓ/∂x̂, the gradient that reaches x̂ through γ
    let g: Vec<f64> = grad_y.iter().zip(gamma).map(|(dy, gamma)| dy * gamma).collect();
    // What the row's mean and variance pass back: every xⱼ moves μ and σ, so every x̂.
    let mean_g = g.iter().sum::<f64>() / d;
    let mean_g_x_hat = g.iter().zip(&x_hat).map(|(g, x_hat)| g * x_hat).sum::<f64>() / d;
    g.iter()
        .zip(&x_hat)
        .map(|(g, x_hat)| (g - mean_g - x_hat * mean_g_x_hat) / sigma)
        .collect()
}
// ANCHOR_END: layer_norm_backward

/// Exercise 15.2: whether AdamW's weight decay applies to the tensor called `name` (GPT-2's
/// names, as Hugging Face writes them: `transformer.wte.weight`,
/// `transformer.h.0.ln_1.weight`, ...) of this `shape`. nanoGPT's rule: decay exactly the
/// tensors with two axes or more, the matrices of the linear maps and the token and position
/// tables; never a layer norm's gain or shift, nor a bias.
///
/// ```
/// use exercises::ch15::decays;
///
/// assert!(decays("transformer.h.0.attn.c_attn.weight", &[128, 384]));
/// assert!(decays("transformer.wte.weight", &[71, 128])); // the token table too
/// assert!(!decays("transformer.h.0.ln_1.weight", &[128])); // a gain, though a "weight"
/// assert!(!decays("transformer.h.0.mlp.c_fc.bias", &[512]));
/// ```
// ANCHOR: decays
pub fn decays(_name: &str, shape: &[usize]) -> bool {
    shape.len() >= 2 // the name does not tell: a layer norm's gain is a ".weight" too
}
// ANCHOR_END: decays

/// Exercise 15.3: clipping by the global norm, as PyTorch's `clip_grad_norm_`. The norm of
/// all the gradients together, `norm = √(Σ g²)` over every entry of every tensor, decides one
/// factor `max_norm / (norm + 1e-6)`; when it is below 1, every tensor is multiplied by it
/// (so the gradient keeps its direction), otherwise nothing changes. Returns the norm before
/// clipping.
///
/// ```
/// use exercises::ch15::clip_global;
/// use ndarray::array;
///
/// let mut grads = vec![array![3.0].into_dyn(), array![[0.0, 4.0]].into_dyn()];
/// assert_eq!(clip_global(&mut grads, 1.0), 5.0); // √(3² + 4²)
/// assert!((grads[0][[0]] - 0.6).abs() < 1e-6 && (grads[1][[0, 1]] - 0.8).abs() < 1e-6);
/// // Now of norm 1 (a hair less): within 10, so left as it is.
/// assert!((clip_global(&mut grads, 10.0) - 1.0).abs() < 1e-6);
/// assert!((grads[0][[0]] - 0.6).abs() < 1e-6);
/// ```
// ANCHOR: clip_global
pub fn clip_global(grads: &mut [ArrayD<f64>], max_norm: f64) -> f64 {
    let sum_sq: f64 = grads.iter().flat_map(|g| g.iter()).map(|x| x * x).sum();
    let norm = sum_sq.sqrt(); // all the tensors as one long vector
    let factor = max_norm / (norm + 1e-6);
    if factor < 1.0 {
        for g in grads.iter_mut() {
            *g *= factor; // the same factor for every tensor
        }
    }
    norm
}
// ANCHOR_END: clip_global

/// Checks an answer to exercise 15.1 ([`layer_norm_backward`]) within `1e-10` against the
/// crate's [`ops::layer_norm_backward`] (itself checked against finite differences): a row
/// small enough to do by hand where only one output has a gradient, a row whose `γ` is not
/// all ones, a `grad_y` that is the same everywhere (`grad_x` is 0), a `grad_y` along `x̂`
/// (nearly 0), a row with `ε = 0.1`, larger than its variance, and a row of one feature.
///
/// ```
/// use exercises::ch15::{check_layer_norm_backward, layer_norm_backward};
///
/// assert_eq!(check_layer_norm_backward(layer_norm_backward), Ok(()));
/// // μ and σ treated as constants: grad_x = grad_y ⊙ γ / σ.
/// let constant_stats = |x: &[f64], gamma: &[f64], grad_y: &[f64], eps: f64| {
///     let d = x.len() as f64;
///     let mean = x.iter().sum::<f64>() / d;
///     let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d;
///     let sigma = (var + eps).sqrt();
///     grad_y.iter().zip(gamma).map(|(dy, g)| dy * g / sigma).collect::<Vec<f64>>()
/// };
/// assert!(check_layer_norm_backward(constant_stats).is_err());
/// ```
pub fn check_layer_norm_backward(
    layer_norm_backward: impl Fn(&[f64], &[f64], &[f64], f64) -> Vec<f64>,
) -> Result<(), String> {
    let wave = |f: fn(f64) -> f64| (0..8).map(|j| f(j as f64)).collect::<Vec<f64>>();
    let x_4 = [1.0, -2.0, 0.5, 3.0];
    // x̂ of x_4 with ε = 1e-5, the gradient of the fourth case.
    let mean_4 = x_4.iter().sum::<f64>() / 4.0;
    let sigma_4 = (x_4.iter().map(|v| (v - mean_4).powi(2)).sum::<f64>() / 4.0 + 1e-5).sqrt();
    let x_hat_4: Vec<f64> = x_4.iter().map(|v| (v - mean_4) / sigma_4).collect();
    // (the inputs in words, why the case is there, x, γ, grad_y, ε)
    let cases = [
        (
            String::from("x = [1, 2, 4], γ = [1, 1, 1], grad_y = [1, 0, 0], eps = 1e-5"),
            "only y₀ has a gradient, but every xⱼ moves μ and σ, and so y₀",
            vec![1.0, 2.0, 4.0],
            vec![1.0; 3],
            vec![1.0, 0.0, 0.0],
            1e-5,
        ),
        (
            "x = [0.5, -1, 2, 0], γ = [2, 0.5, -1, 1.5], grad_y = [0.3, -0.7, 1.2, 0.4], \
             eps = 1e-5"
                .into(),
            "γ scales what reaches x̂: g = grad_y ⊙ γ",
            vec![0.5, -1.0, 2.0, 0.0],
            vec![2.0, 0.5, -1.0, 1.5],
            vec![0.3, -0.7, 1.2, 0.4],
            1e-5,
        ),
        (
            "x = [3, -1, 0.5, 2, -2], γ = [1.5, 1.5, 1.5, 1.5, 1.5], \
             grad_y = [1, 1, 1, 1, 1], eps = 1e-5"
                .into(),
            "the outputs sum to Σβ + 1.5·Σx̂ = Σβ whatever x: grad_x is 0",
            vec![3.0, -1.0, 0.5, 2.0, -2.0],
            vec![1.5; 5],
            vec![1.0; 5],
            1e-5,
        ),
        (
            "x = [1, -2, 0.5, 3], γ = [1, 1, 1, 1], grad_y = x̂ of that row, eps = 1e-5".into(),
            "stretching x away from its mean barely changes y: grad_x is nearly 0",
            x_4.to_vec(),
            vec![1.0; 4],
            x_hat_4,
            1e-5,
        ),
        (
            "x = sin(j)/4, γ = 1 + cos(j)/2, grad_y = cos(3j) for j = 0..8, eps = 0.1".into(),
            "ε = 0.1 is larger than the variance: σ = √(var + ε), var divided by d",
            wave(|j| j.sin() / 4.0),
            wave(|j| 1.0 + j.cos() / 2.0),
            wave(|j| (3.0 * j).cos()),
            0.1,
        ),
        (
            "x = [2], γ = [3], grad_y = [5], eps = 1e-5".into(),
            "one feature: x̂ = 0 and y = β whatever x, so grad_x = [0]",
            vec![2.0],
            vec![3.0],
            vec![5.0],
            1e-5,
        ),
    ];
    for (inputs, why, x, gamma, grad_y, eps) in cases {
        let row = |v: &[f64]| Array1::from(v.to_vec()).insert_axis(ndarray::Axis(0));
        let norm = Norm { gamma: Array1::from(gamma.clone()), beta: Array1::zeros(x.len()) };
        let (expected, _, _) =
            ops::layer_norm_backward(&row(&x).view(), &norm, eps, &row(&grad_y).view());
        let expected = expected.row(0).to_owned();
        let what = format!("layer_norm_backward({inputs}) ({why})");
        let got = call(&what, || layer_norm_backward(&x, &gamma, &grad_y, eps))?;
        close(&what, &Array1::from(got), &expected, 1e-10)?;
    }
    Ok(())
}

/// Why a tensor of GPT-2 is decayed or not, in words, for [`check_decays`].
fn decay_reason(name: &str, shape: &[usize]) -> String {
    let what = if name.ends_with("wte.weight") {
        "the token table (V, d), which is also the LM head: two axes, so nanoGPT decays it"
    } else if name.ends_with("wpe.weight") {
        "the position table (T, d): two axes, so nanoGPT decays it"
    } else if name.contains("ln_") && name.ends_with(".weight") {
        "a layer norm's gain γ, one axis, though its name ends in \"weight\": pulling a gain \
         towards 0 would switch its feature off, so it is never decayed"
    } else if name.contains("ln_") {
        "a layer norm's shift β, one axis: never decayed"
    } else if name.ends_with(".bias") {
        "a linear map's bias, one axis: never decayed"
    } else {
        "a linear map's matrix, two axes: decayed"
    };
    format!(
        "{what}. nanoGPT (and the crate's AdamW) decays exactly the tensors with two axes or \
         more; this one has {}",
        shape.len()
    )
}

/// Checks an answer to exercise 15.2 ([`decays`]) on every tensor of chapter 15's model,
/// `GptConfig::shakespeare(71)`, in order (the tables, then each block's gains, matrices and
/// biases, then the final layer norm), and on every tensor of GPT-2 small (12 blocks,
/// `d = 768`, with trained biases): `true` exactly for the tensors with two axes or more.
///
/// ```
/// use exercises::ch15::{check_decays, decays};
///
/// assert_eq!(check_decays(decays), Ok(()));
/// // Decaying every "weight": the layer norms' gains too.
/// assert!(check_decays(|name, _| name.ends_with("weight")).is_err());
/// ```
pub fn check_decays(decays: impl Fn(&str, &[usize]) -> bool) -> Result<(), String> {
    let gpt2_small = GptConfig {
        vocab_size: 50257,
        block_size: 1024,
        n_layer: 12,
        n_head: 12,
        n_embd: 768,
        layer_norm_epsilon: 1e-5,
        bias: true,
        positions: Default::default(),
    };
    let models = [
        ("chapter 15's model, GptConfig::shakespeare(71)", GptConfig::shakespeare(71)),
        ("GPT-2 small, whose biases are trained", gpt2_small),
    ];
    for (model, config) in models {
        for (name, shape) in config.tensor_names().iter().zip(config.tensor_shapes()) {
            let expected = shape.len() >= 2;
            let what = format!("decays(\"{name}\", &{shape:?})");
            let got = call(&what, || decays(name, &shape))?;
            if got != expected {
                return Err(format!(
                    "{what} returned {got}, expected {expected} ({model}): {}",
                    decay_reason(name, &shape)
                ));
            }
        }
    }
    Ok(())
}

/// The gradients of a small GPT (1 block, `d = 4`, 3 tokens, contexts of 2, with biases),
/// every entry `sin` of its position in the list: vectors and matrices, 16 tensors.
fn small_gpt_gradients() -> Gpt<f64> {
    let config = GptConfig {
        n_layer: 1,
        n_embd: 4,
        n_head: 1,
        block_size: 2,
        bias: true,
        ..GptConfig::shakespeare(3)
    };
    let mut grads = Gpt::<f64>::zeros(config);
    let mut k = 0.0;
    for (_, mut t) in grads.tensors_mut() {
        for v in t.iter_mut() {
            k += 1.0;
            *v = f64::sin(k);
        }
    }
    grads
}

/// Checks an answer to exercise 15.3 ([`clip_global`]): the norm it returns within `1e-12`
/// (relative above 1), then every tensor after clipping within `1e-12`, on a case to do by
/// hand (`[3]` and `[[0, 4]]`, norm 5), a norm below `max_norm` (unchanged), three tensors
/// each shorter than `max_norm` but longer together, a norm exactly `max_norm` (scaled by
/// `5/(5 + 1e-6)`, as PyTorch does), gradients that are all zero, and the 16 gradients of a
/// small GPT.
///
/// ```
/// use exercises::ch15::{check_clip_global, clip_global};
///
/// assert_eq!(check_clip_global(clip_global), Ok(()));
/// // Each tensor clipped by its own norm: the direction of the whole gradient changes.
/// let each = |grads: &mut [ndarray::ArrayD<f64>], max_norm: f64| {
///     let mut total = 0.0;
///     for g in grads.iter_mut() {
///         total += clip_global(std::slice::from_mut(g), max_norm).powi(2);
///     }
///     total.sqrt()
/// };
/// assert!(check_clip_global(each).is_err());
/// ```
pub fn check_clip_global(
    clip_global: impl Fn(&mut [ArrayD<f64>], f64) -> f64,
) -> Result<(), String> {
    let gpt: Vec<ArrayD<f64>> =
        small_gpt_gradients().tensors().into_iter().map(|(_, t)| t.to_owned()).collect();
    // (the gradients in words, the gradients, max_norm)
    let cases: [(&str, Vec<ArrayD<f64>>, f64); 6] = [
        ("[3] and [[0, 4]]", vec![array![3.0].into_dyn(), array![[0.0, 4.0]].into_dyn()], 1.0),
        (
            "[0.3, -0.4] and [[0, 0], [0, 0]]",
            vec![array![0.3, -0.4].into_dyn(), array![[0.0, 0.0], [0.0, 0.0]].into_dyn()],
            1.0,
        ),
        (
            "[0.8], [0, -0.8] and [[0.48, 0.64]], each of norm 0.8",
            vec![
                array![0.8].into_dyn(),
                array![0.0, -0.8].into_dyn(),
                array![[0.48, 0.64]].into_dyn(),
            ],
            1.0,
        ),
        ("[3] and [[0, 4]]", vec![array![3.0].into_dyn(), array![[0.0, 4.0]].into_dyn()], 5.0),
        ("[0, 0] and [[0]]", vec![array![0.0, 0.0].into_dyn(), array![[0.0]].into_dyn()], 1.0),
        ("the 16 gradients of a small GPT, entries sin(1), sin(2), ...", gpt, 1.0),
    ];
    for (inputs, grads, max_norm) in cases {
        let norm = grads.iter().flat_map(|g| g.iter()).map(|x| x * x).sum::<f64>().sqrt();
        let factor = max_norm / (norm + 1e-6);
        let rule = if factor < 1.0 {
            format!(
                "the norm of all the gradients together is {norm} > max_norm = {max_norm}: \
                 every tensor is multiplied by the same factor max_norm / (norm + 1e-6) = \
                 {factor}"
            )
        } else {
            format!(
                "the norm of all the gradients together is {norm}, within max_norm = \
                 {max_norm}: the gradients are left as they are"
            )
        };
        let what = format!("clip_global({inputs}, max_norm = {max_norm})");
        let mut got = grads.clone();
        let got_norm = call(&what, || clip_global(&mut got, max_norm))?;
        if !within(got_norm, norm, 1e-12 * norm.max(1.0)) {
            return Err(format!(
                "{what} returned {got_norm}, expected {norm}: the norm before clipping, \
                 √(Σ g²) over every entry of every tensor"
            ));
        }
        for (i, (got, g)) in got.iter().zip(&grads).enumerate() {
            let expected = if factor < 1.0 { g * factor } else { g.clone() };
            let what = format!("{what}: tensor {i} after clipping");
            if got.shape() != expected.shape() {
                return Err(format!(
                    "{what} has shape {:?}, expected {:?}: clipping scales, it keeps shapes",
                    got.shape(),
                    expected.shape()
                ));
            }
            let wrong =
                got.indexed_iter().zip(&expected).find(|&((_, &g), &e)| !within(g, e, 1e-12));
            if let Some(((at, g), e)) = wrong {
                return Err(format!(
                    "{what} is\n{got:.6}\nbut should be\n{expected:.6}\n(entry {:?} is {g} \
                     instead of {e}, off by {:.1e}; the check allows 1e-12)\n({rule})",
                    at.slice(),
                    (g - e).abs()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;
    use attention::gpt::optim::{AdamW, clip_global_norm};

    /// The layer norm's backward pass with choices: which of the two mean terms are kept,
    /// whether `γ` is, and whether the variance is divided by `d − 1` instead of `d`.
    #[derive(Clone, Copy)]
    struct Backward {
        mean_term: bool,
        x_hat_term: bool,
        gamma: bool,
        unbiased: bool,
    }

    const RIGHT: Backward =
        Backward { mean_term: true, x_hat_term: true, gamma: true, unbiased: false };

    impl Backward {
        fn run(self, x: &[f64], gamma: &[f64], grad_y: &[f64], eps: f64) -> Vec<f64> {
            let d = x.len() as f64;
            let mean = x.iter().sum::<f64>() / d;
            let squares = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>();
            let var = if self.unbiased { squares / (d - 1.0) } else { squares / d };
            let sigma = (var + eps).sqrt();
            let x_hat: Vec<f64> = x.iter().map(|v| (v - mean) / sigma).collect();
            let g: Vec<f64> = (0..x.len())
                .map(|j| grad_y[j] * if self.gamma { gamma[j] } else { 1.0 })
                .collect();
            let mean_g = g.iter().sum::<f64>() / d;
            let mean_g_x_hat = g.iter().zip(&x_hat).map(|(g, x)| g * x).sum::<f64>() / d;
            (0..x.len())
                .map(|j| {
                    let mut v = g[j];
                    if self.mean_term {
                        v -= mean_g;
                    }
                    if self.x_hat_term {
                        v -= x_hat[j] * mean_g_x_hat;
                    }
                    v / sigma
                })
                .collect()
        }
    }

    #[test]
    fn layer_norm_backward_passes_and_classic_mistakes_fail() {
        assert_eq!(check_layer_norm_backward(layer_norm_backward), Ok(()));
        let check =
            |b: Backward| check_layer_norm_backward(move |x, g, dy, e| b.run(x, g, dy, e));
        assert_eq!(check(RIGHT), Ok(()));
        let first = "layer_norm_backward(x = [1, 2, 4], γ = [1, 1, 1], grad_y = [1, 0, 0]";
        // μ and σ treated as constants: grad_x = g/σ.
        rejects(check(Backward { mean_term: false, x_hat_term: false, ..RIGHT }), first);
        // Only what the mean passes back.
        rejects(check(Backward { x_hat_term: false, ..RIGHT }), first);
        // Only what the variance passes back.
        rejects(check(Backward { mean_term: false, ..RIGHT }), first);
        // γ forgotten: right while γ = 1.
        rejects(
            check(Backward { gamma: false, ..RIGHT }),
            "layer_norm_backward(x = [0.5, -1, 2, 0], γ = [2, 0.5, -1, 1.5]",
        );
        // The unbiased variance (÷ (d − 1)), torch.var's default but not layer norm's.
        rejects(check(Backward { unbiased: true, ..RIGHT }), first);
        // ε forgotten: off by about ε/(2·var) of the answer, more than the check allows.
        let no_eps = |x: &[f64], gamma: &[f64], grad_y: &[f64], _: f64| {
            layer_norm_backward(x, gamma, grad_y, 0.0)
        };
        rejects(check_layer_norm_backward(no_eps), first);
        // ... which is what a row of one feature turns into NaN, after the cases before it.
        let no_eps_on_one = |x: &[f64], gamma: &[f64], grad_y: &[f64], eps: f64| {
            layer_norm_backward(x, gamma, grad_y, if x.len() == 1 { 0.0 } else { eps })
        };
        rejects(
            check_layer_norm_backward(no_eps_on_one),
            "layer_norm_backward(x = [2], γ = [3], grad_y = [5], eps = 1e-5) (one feature: \
             x̂ = 0 and y = β whatever x, so grad_x = [0]) is\n[NaN]",
        );
    }

    #[test]
    fn layer_norm_backward_matches_finite_differences() {
        // The loss Σ grad_y ⊙ y, differentiated numerically with respect to each xⱼ.
        let forward = |x: &[f64], gamma: &[f64], eps: f64| {
            let norm =
                Norm { gamma: Array1::from(gamma.to_vec()), beta: Array1::zeros(x.len()) };
            let x = Array1::from(x.to_vec()).insert_axis(ndarray::Axis(0));
            ops::layer_norm(&x.view(), &norm, eps).unwrap().row(0).to_vec()
        };
        let x = [0.7, -1.3, 2.2, 0.1, -0.4];
        let gamma = [1.5, -0.5, 2.0, 0.8, 1.1];
        let grad_y = [0.2, 1.0, -0.6, 0.9, -1.4];
        for eps in [1e-5, 0.1] {
            let loss = |x: &[f64]| {
                forward(x, &gamma, eps).iter().zip(&grad_y).map(|(y, g)| y * g).sum::<f64>()
            };
            let ours = layer_norm_backward(&x, &gamma, &grad_y, eps);
            let h = 1e-6;
            for j in 0..x.len() {
                let (mut plus, mut minus) = (x, x);
                plus[j] += h;
                minus[j] -= h;
                let numeric = (loss(&plus) - loss(&minus)) / (2.0 * h);
                assert!((ours[j] - numeric).abs() < 1e-6, "x{j}: {} vs {numeric}", ours[j]);
            }
        }
    }

    #[test]
    fn decays_passes_and_classic_mistakes_fail() {
        assert_eq!(check_decays(decays), Ok(()));
        // The crate's own test: exactly two axes (the same tensors in GPT-2).
        assert_eq!(check_decays(|_, shape| shape.len() == 2), Ok(()));
        // Every tensor whose name ends in "weight": the layer norms' gains too.
        rejects(
            check_decays(|name, _| name.ends_with("weight")),
            "decays(\"transformer.h.0.ln_1.weight\", &[128]) returned true, expected false \
             (chapter 15's model, GptConfig::shakespeare(71)): a layer norm's gain γ",
        );
        // Everything.
        rejects(check_decays(|_, _| true), "decays(\"transformer.h.0.ln_1.weight\", &[128])");
        // Nothing.
        rejects(
            check_decays(|_, _| false),
            "decays(\"transformer.wte.weight\", &[71, 128]) returned false, expected true",
        );
        // Only the blocks' matrices: the tables spared.
        let blocks_only = |name: &str, shape: &[usize]| {
            shape.len() >= 2 && (name.contains(".attn.") || name.contains(".mlp."))
        };
        rejects(check_decays(blocks_only), "decays(\"transformer.wte.weight\", &[71, 128])");
        // The tables decayed, the position table not: wpe fails on its own.
        let no_wpe = |name: &str, shape: &[usize]| shape.len() >= 2 && !name.contains("wpe");
        rejects(check_decays(no_wpe), "the position table (T, d)");
        // "weight" but not "ln": right on both models' tensors, another correct answer.
        let by_name =
            |name: &str, _: &[usize]| name.ends_with("weight") && !name.contains("ln_");
        assert_eq!(check_decays(by_name), Ok(()));
    }

    #[test]
    fn decays_is_what_the_crates_adamw_decays() {
        // Weights all 1, gradients 0: Adam's update is 0, so only the decay moves a tensor,
        // 1 → 1 − lr·λ = 0.9. With biases, every tensor is trained.
        let config = GptConfig {
            n_layer: 2,
            n_embd: 8,
            n_head: 2,
            block_size: 4,
            bias: true,
            ..GptConfig::shakespeare(5)
        };
        let mut gpt = Gpt::<f64>::zeros(config);
        for (_, mut t) in gpt.tensors_mut() {
            t.fill(1.0);
        }
        let mut adamw = AdamW::nanogpt(&gpt);
        adamw.step(&mut gpt, &Gpt::zeros(config), 1.0).unwrap();
        for (name, t) in gpt.tensors() {
            let decayed = t.iter().all(|&v| (v - 0.9).abs() < 1e-12);
            let kept = t.iter().all(|&v| v == 1.0);
            assert!(decayed != kept, "{name}");
            assert_eq!(decays(&name, t.shape()), decayed, "{name}");
        }
        // The tables are decayed, like nanoGPT's.
        assert!(gpt.wte.iter().chain(&gpt.wpe).all(|&v| (v - 0.9).abs() < 1e-12));
    }

    #[test]
    fn clip_global_passes_and_classic_mistakes_fail() {
        assert_eq!(check_clip_global(clip_global), Ok(()));
        let global = |grads: &[ArrayD<f64>]| {
            grads.iter().flat_map(|g| g.iter()).map(|x| x * x).sum::<f64>().sqrt()
        };
        // Each tensor clipped by its own norm.
        let each = |grads: &mut [ArrayD<f64>], max_norm: f64| {
            let norm = global(grads);
            for g in grads.iter_mut() {
                clip_global(std::slice::from_mut(g), max_norm);
            }
            norm
        };
        rejects(
            check_clip_global(each),
            "clip_global([3] and [[0, 4]], max_norm = 1): tensor 0 after clipping is",
        );
        // Scaled up as well as down.
        let always = |grads: &mut [ArrayD<f64>], max_norm: f64| {
            let norm = global(grads);
            for g in grads.iter_mut() {
                *g *= max_norm / (norm + 1e-6);
            }
            norm
        };
        rejects(
            check_clip_global(always),
            "clip_global([0.3, -0.4] and [[0, 0], [0, 0]], max_norm = 1): tensor 0 after \
             clipping",
        );
        // The norm after clipping returned.
        let after = |grads: &mut [ArrayD<f64>], max_norm: f64| {
            clip_global(grads, max_norm);
            global(grads)
        };
        rejects(
            check_clip_global(after),
            "clip_global([3] and [[0, 4]], max_norm = 1) returned 0.99999980000004, \
             expected 5",
        );
        // The sum of the tensors' norms instead of the root of the sum of squares.
        let sum_of_norms = |grads: &mut [ArrayD<f64>], max_norm: f64| {
            let norm: f64 =
                grads.iter().map(|g| g.iter().map(|x| x * x).sum::<f64>().sqrt()).sum();
            let factor = max_norm / (norm + 1e-6);
            if factor < 1.0 {
                for g in grads.iter_mut() {
                    *g *= factor;
                }
            }
            norm
        };
        rejects(
            check_clip_global(sum_of_norms),
            "clip_global([3] and [[0, 4]], max_norm = 1) returned 7, expected 5",
        );
        // max_norm / norm, without PyTorch's 1e-6, and only above max_norm.
        let no_epsilon = |grads: &mut [ArrayD<f64>], max_norm: f64| {
            let norm = global(grads);
            if norm > max_norm {
                for g in grads.iter_mut() {
                    *g *= max_norm / norm;
                }
            }
            norm
        };
        rejects(
            check_clip_global(no_epsilon),
            "(entry [0] is 0.6000000000000001 instead of 0.599999880000024",
        );
    }

    #[test]
    fn clip_global_is_the_crates_clip_global_norm() {
        let mut gpt = small_gpt_gradients();
        let mut ours: Vec<ArrayD<f64>> =
            gpt.tensors().into_iter().map(|(_, t)| t.to_owned()).collect();
        for max_norm in [1.0, 100.0] {
            let norm = clip_global(&mut ours, max_norm);
            // The crate adds up tensor by tensor, in another order: the last bits may differ.
            assert!((clip_global_norm(&mut gpt, max_norm) - norm).abs() < 1e-12 * norm);
            for (ours, (name, theirs)) in ours.iter().zip(gpt.tensors()) {
                assert!(
                    ours.iter().zip(&theirs).all(|(a, b)| (a - b).abs() < 1e-14),
                    "{name}"
                );
            }
        }
    }
}
