//! The GPT's backward pass against finite differences, in `f64`.

use ndarray::{Array2, array};
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::config::GptConfig;
use super::ops::{layer_norm, layer_norm_backward};
use super::weights::{Gpt, Norm};

fn tiny(bias: bool) -> GptConfig {
    GptConfig {
        vocab_size: 7,
        block_size: 5,
        n_layer: 2,
        n_head: 2,
        n_embd: 8,
        layer_norm_epsilon: 1e-5,
        bias,
        positions: super::positions::Positions::Learned,
    }
}

/// A model whose every number, gains and shifts included, is random: a gradient that
/// forgets a term cannot hide behind a zero or a one.
fn scrambled(config: GptConfig, seed: u64) -> Gpt<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut gpt = Gpt::<f64>::init(config, &mut rng).unwrap();
    let trained: Vec<bool> = gpt.tensors().iter().map(|(n, _)| gpt.is_trained(n)).collect();
    for ((name, mut t), trained) in gpt.tensors_mut().into_iter().zip(trained) {
        if name == "transformer.wpe.weight" && !trained {
            continue; // fixed positions stay what they are
        }
        let centre = if name.ends_with("ln_1.weight")
            || name.ends_with("ln_2.weight")
            || name.ends_with("ln_f.weight")
        {
            1.0
        } else {
            0.0
        };
        t.mapv_inplace(|_| centre + rng.random_range(-0.5..0.5));
    }
    gpt
}

#[test]
fn every_gradient_matches_finite_differences() {
    assert_gradients_match(&scrambled(tiny(true), 1));
}

/// Every way of giving positions, chapter 16's experiment: the gradients still match (RoPE's
/// turns carried back by the opposite turns, ALiBi's bias a constant), and a position table
/// that is not learned gets no gradient.
#[test]
fn every_gradient_matches_finite_differences_whatever_the_positions() {
    use super::positions::{Positions, RopeScaling};
    let mut all = Positions::all().to_vec();
    all.push(Positions::Rope { base: 100.0, scaling: RopeScaling::Linear { factor: 2.0 } });
    for positions in all {
        let gpt = scrambled(GptConfig { positions, ..tiny(true) }, 2);
        assert_gradients_match(&gpt);
    }
}

/// The gradient of every trained number against central differences of the loss; the table
/// of fixed positions gets none.
fn assert_gradients_match(gpt: &Gpt<f64>) {
    let tokens = array![[0, 3, 6, 2], [5, 5, 1, 0]];
    let targets = array![[3, 6, 2, 4], [5, 1, 0, 6]];
    let (loss, grads) = gpt.loss_and_grads(&tokens.view(), &targets.view()).unwrap();
    assert!((loss - gpt.loss(&tokens.view(), &targets.view()).unwrap()).abs() < 1e-15);
    let h = 1e-5;
    let mut worst: f64 = 0.0;
    let analytic: Vec<(String, Vec<f64>)> =
        grads.tensors().into_iter().map(|(n, t)| (n, t.iter().copied().collect())).collect();
    for (index, (name, grad)) in analytic.iter().enumerate() {
        if !gpt.is_trained(name) {
            if name == "transformer.wpe.weight" {
                assert!(grad.iter().all(|&g| g == 0.0), "fixed positions get no gradient");
            }
            continue; // the optimizer never reads it
        }
        for (i, &g) in grad.iter().enumerate() {
            let mut plus = gpt.clone();
            let mut minus = gpt.clone();
            if let Some(v) = plus.tensors_mut()[index].1.iter_mut().nth(i) {
                *v += h;
            }
            if let Some(v) = minus.tensors_mut()[index].1.iter_mut().nth(i) {
                *v -= h;
            }
            let numeric = (plus.loss(&tokens.view(), &targets.view()).unwrap()
                - minus.loss(&tokens.view(), &targets.view()).unwrap())
                / (2.0 * h);
            let err = (numeric - g).abs();
            assert!(err < 1e-8, "{name}[{i}]: analytic {g}, numeric {numeric}");
            worst = worst.max(err);
        }
    }
    assert!(worst > 0.0, "some difference must be measured: {worst}");
}

// ANCHOR: mean_terms
/// Layer norm's backward without the two mean terms is the classic mistake: it is what the
/// derivative would be if the mean and the variance did not depend on x.
#[test]
fn layer_norm_backward_needs_its_mean_terms() {
    let mut rng = StdRng::seed_from_u64(7);
    let x = Array2::from_shape_simple_fn((3, 6), || rng.random_range(-2.0..2.0));
    let grad_y = Array2::from_shape_simple_fn((3, 6), || rng.random_range(-1.0..1.0));
    let norm = Norm {
        gamma: (0..6).map(|i| 0.5 + i as f64 / 4.0).collect(),
        beta: (0..6).map(|i| i as f64 / 10.0).collect(),
    };
    let eps = 1e-5;
    let loss = |x: &Array2<f64>| (layer_norm(&x.view(), &norm, eps).unwrap() * &grad_y).sum();
    let (grad_x, _, _) = layer_norm_backward(&x.view(), &norm, eps, &grad_y.view());
    let h = 1e-6;
    let mut numeric = Array2::zeros(x.raw_dim());
    for idx in ndarray::indices(x.raw_dim()) {
        let (mut p, mut m) = (x.clone(), x.clone());
        p[idx] += h;
        m[idx] -= h;
        numeric[idx] = (loss(&p) - loss(&m)) / (2.0 * h);
    }
    let err = (&grad_x - &numeric).mapv(f64::abs).fold(0.0, |a: f64, &b| a.max(b));
    assert!(err < 1e-8, "{err}");
    // the wrong answer: grad_y · γ / σ, as if μ and σ were constants
    let wrong = {
        let mut w = grad_y.clone();
        for (mut row, x) in w.rows_mut().into_iter().zip(x.rows()) {
            let mean = x.mean().unwrap();
            let var = x.mapv(|v| (v - mean).powi(2)).mean().unwrap();
            row.zip_mut_with(&norm.gamma, |g, &gamma| *g *= gamma / (var + eps).sqrt());
        }
        w
    };
    let wrong_err = (&wrong - &numeric).mapv(f64::abs).fold(0.0, |a: f64, &b| a.max(b));
    assert!(wrong_err > 0.1, "the mistake must be caught: {wrong_err}");
}
// ANCHOR_END: mean_terms

#[test]
fn without_bias_the_shifts_are_not_trained_but_still_exist() {
    let gpt = Gpt::<f64>::init(tiny(false), &mut StdRng::seed_from_u64(0)).unwrap();
    let trained: usize =
        gpt.tensors().iter().filter(|(n, _)| gpt.is_trained(n)).map(|(_, t)| t.len()).sum();
    assert_eq!(trained, gpt.config.parameter_count());
    let with_bias = Gpt::<f64>::init(tiny(true), &mut StdRng::seed_from_u64(0)).unwrap();
    let all: usize = with_bias.tensors().iter().map(|(_, t)| t.len()).sum();
    assert_eq!(all, with_bias.config.parameter_count());
    assert_eq!(
        gpt.config.tensor_shapes(),
        with_bias.tensors().iter().map(|(_, t)| t.shape().to_vec()).collect::<Vec<_>>()
    );
}

/// The validation loss counts every position once: the windows of 4 and the last, shorter,
/// one, each weighted by its length; whatever the batch.
#[test]
fn evaluate_weighs_every_window_by_its_length() {
    use super::kernels::Exact;
    use super::train::evaluate;
    let gpt = scrambled(GptConfig { block_size: 4, ..tiny(true) }, 11);
    let ids = [0, 3, 6, 2, 5, 5, 1, 0, 4, 2]; // windows 0..4, 4..8, 8..9 predict 4 + 4 + 1
    let loss = |from: usize, n: usize| {
        let x = Array2::from_shape_vec((1, n), ids[from..from + n].to_vec()).unwrap();
        let y = Array2::from_shape_vec((1, n), ids[from + 1..from + 1 + n].to_vec()).unwrap();
        gpt.loss(&x.view(), &y.view()).unwrap()
    };
    let by_hand = (4.0 * loss(0, 4) + 4.0 * loss(4, 4) + loss(8, 1)) / 9.0;
    for batch in [1, 2, 64] {
        let measured = evaluate(&gpt, &Exact, &ids, batch).unwrap();
        assert!((measured - by_hand).abs() < 1e-14, "batch {batch}: {measured} vs {by_hand}");
    }
    // dropping the short window, or weighing the windows alike, is another number
    let dropped = (loss(0, 4) + loss(4, 4)) / 2.0;
    let alike = (loss(0, 4) + loss(4, 4) + loss(8, 1)) / 3.0;
    for wrong in [dropped, alike] {
        assert!((wrong - by_hand).abs() > 1e-3, "{wrong} vs {by_hand}");
    }
}

#[test]
fn a_later_token_cannot_change_an_earlier_logit() {
    let gpt = scrambled(tiny(true), 3);
    let a = gpt.logits(&array![[1, 2, 3, 4]].view()).unwrap();
    let b = gpt.logits(&array![[1, 2, 6, 0]].view()).unwrap();
    assert_eq!(a.slice(ndarray::s![.., ..2, ..]), b.slice(ndarray::s![.., ..2, ..]));
    assert_ne!(a.slice(ndarray::s![.., 2, ..]), b.slice(ndarray::s![.., 2, ..]));
}

/// How far the fast path's gradients may be from the exact path's, relative to each tensor's
/// largest gradient: a few units of `f32`'s rounding (`6e-8`) through a dozen layers of sums.
/// Measured: 1.2e-6 on an AVX2 machine (the test prints it with `-- --nocapture`).
const FAST_REL: f64 = 1e-5;

/// The fast `f32` path against the exact path in `f64` on a model of chapter 15's shape
/// (narrower): every gradient within a small multiple of `f32`'s rounding.
#[test]
fn the_fast_path_agrees_with_the_exact_path() {
    use super::kernels::{Exact, Fast};
    let config = GptConfig { n_embd: 32, n_head: 4, block_size: 16, ..tiny(true) };
    let exact = scrambled(config, 5);
    let mut fast = Gpt::<f32>::zeros(config);
    for ((_, mut f), (_, e)) in fast.tensors_mut().into_iter().zip(exact.tensors()) {
        f.zip_mut_with(&e, |f, &e| *f = e as f32);
    }
    let mut exact = exact; // the same numbers, rounded to f32 and back
    for ((_, mut e), (_, f)) in exact.tensors_mut().into_iter().zip(fast.tensors()) {
        e.zip_mut_with(&f, |e, &f| *e = f64::from(f));
    }
    let mut rng = StdRng::seed_from_u64(9);
    let tokens = Array2::from_shape_simple_fn((3, 16), || rng.random_range(0..7));
    let targets = Array2::from_shape_simple_fn((3, 16), || rng.random_range(0..7));
    let (loss_e, grads_e) =
        exact.loss_and_grads_with(&Exact, &tokens.view(), &targets.view()).unwrap();
    let (loss_f, grads_f) =
        fast.loss_and_grads_with(&Fast, &tokens.view(), &targets.view()).unwrap();
    assert!((loss_e - loss_f).abs() < 1e-5, "{loss_e} vs {loss_f}");
    let mut largest_ratio: f64 = 0.0;
    for ((name, e), (_, f)) in grads_e.tensors().into_iter().zip(grads_f.tensors()) {
        let scale = e.iter().fold(0.0f64, |m, &v| m.max(v.abs())).max(1e-3);
        let worst =
            e.iter().zip(f.iter()).fold(0.0f64, |m, (&e, &f)| m.max((e - f64::from(f)).abs()));
        largest_ratio = largest_ratio.max(worst / scale);
        assert!(
            worst < FAST_REL * scale,
            "{name}: {worst} against a largest gradient of {scale}"
        );
    }
    println!(
        "fast against exact: largest difference {largest_ratio:.1e} of a tensor's largest gradient"
    );
    // the exact path in f32 gives the same numbers as Fast to rounding, and the bits of the
    // exact path do not depend on the machine: it is what the book quotes
    let (loss_32, _) =
        fast.loss_and_grads_with(&Exact, &tokens.view(), &targets.view()).unwrap();
    assert!((loss_32 - loss_e).abs() < 1e-5);
}

#[test]
fn the_fast_product_of_few_rows_agrees_with_the_f64_sum_in_every_build() {
    use super::kernels::{Fast, Kernels, few_rows_times, few_rows_times_transposed};
    use crate::kernel::Simd;
    let mut rng = StdRng::seed_from_u64(11);
    for (m, k, n) in [(1, 128, 384), (2, 37, 5), (3, 16, 71), (4, 130, 17), (5, 33, 9)] {
        let a = Array2::from_shape_simple_fn((m, k), || rng.random_range(-1.0_f32..1.0));
        let b = Array2::from_shape_simple_fn((k, n), || rng.random_range(-1.0_f32..1.0));
        let bt = b.t().as_standard_layout().into_owned(); // (n, k), row-major: the tied head
        let reference = a.mapv(f64::from).dot(&b.mapv(f64::from));
        let check = |c: &Array2<f32>, what: &str| {
            let worst =
                (&c.mapv(f64::from) - &reference).iter().fold(0.0_f64, |w, d| w.max(d.abs()));
            assert!(worst < 2e-5, "({m}, {k}, {n}) {what}: {worst}");
        };
        check(&Fast.matmul(&a.view(), &b.view()), "matmul");
        check(&Fast.matmul(&a.view(), &bt.t()), "matmul, transposed");
        for simd in Simd::supported() {
            let (a, b, bt) =
                (a.as_slice().unwrap(), b.as_slice().unwrap(), bt.as_slice().unwrap());
            let mut c = vec![0.0; m * n];
            few_rows_times(simd, a, b, k, &mut c);
            check(&Array2::from_shape_vec((m, n), c.clone()).unwrap(), &format!("{simd:?}"));
            few_rows_times_transposed(simd, a, bt, k, &mut c);
            check(
                &Array2::from_shape_vec((m, n), c).unwrap(),
                &format!("{simd:?}, transposed"),
            );
        }
    }
}
