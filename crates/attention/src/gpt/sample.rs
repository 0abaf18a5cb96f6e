//! Chapter *A model that writes*: writing, one character at a time.
//!
//! The model gives, after any context, a score (logit) for every token of the vocabulary.
//! To write, turn the last position's scores into probabilities, `softmax(z / τ)` with a
//! temperature `τ` (below 1 sharper, above 1 flatter), draw a token from them, append it,
//! and go again with the context cropped to the model's `block_size`. Chapter 10's KV
//! cache would make this fast; here every step runs the model on the whole context again.
//!
//! Anchors (below the doc comments): `sample`, `draw`.

use rand::Rng;

use super::kernels::Kernels;
use super::weights::Gpt;
use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};

/// The index drawn from the distribution `softmax(logits / temperature)`: one uniform number
/// `u` in `[0, 1)` from `rng`, and the first index whose cumulative probability exceeds it.
/// Exponentials from `libm`, sums left to right in `f64`: with the same `rng`, the same
/// index on every machine. An error unless the temperature is positive and finite.
///
/// ```
/// use attention::gpt::sample::draw;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let mut rng = StdRng::seed_from_u64(0);
/// // a near-certain token is drawn every time
/// let picks: Vec<usize> = (0..20).map(|_| draw(&[0.0_f32, 30.0, 0.0], 1.0, &mut rng).unwrap()).collect();
/// assert!(picks.iter().all(|&i| i == 1));
/// assert!(draw(&[0.0_f32], 0.0, &mut rng).is_err());
/// assert!(draw(&[0.0_f32, f32::NAN], 1.0, &mut rng).is_err()); // never a silent last id
/// ```
// ANCHOR: draw
pub fn draw<A: Float, R: Rng + ?Sized>(
    logits: &[A],
    temperature: f64,
    rng: &mut R,
) -> Result<usize> {
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(AttentionError::Invalid {
            what: "temperature".into(),
            problem: format!("must be positive and finite, but it is {temperature}"),
        });
    }
    if logits.is_empty() {
        return Err(AttentionError::Empty { what: "logits".into(), dim: "V" });
    }
    if let Some(i) = logits.iter().position(|v| !v.is_finite()) {
        return Err(AttentionError::Invalid {
            what: "logits".into(),
            problem: format!("logit {i} is {} (a diverged model?)", to_f64(logits[i])),
        });
    }
    let z: Vec<f64> = logits.iter().map(|&v| to_f64(v) / temperature).collect();
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = z.iter().map(|&v| libm::exp(v - max)).collect();
    let total: f64 = weights.iter().sum();
    let u = rng.random::<f64>() * total; // a point along the total weight
    let mut cumulative = 0.0;
    for (i, w) in weights.iter().enumerate() {
        cumulative += w;
        if u < cumulative {
            return Ok(i);
        }
    }
    Ok(weights.len() - 1) // u rounded up to the total
}
// ANCHOR_END: draw

/// `n` tokens written after `prompt` (at least one token), each drawn by [`draw`] from the
/// model's prediction after the context so far (its last `block_size` tokens).
///
/// ```
/// use attention::gpt::{config::GptConfig, kernels::Exact, sample::sample, weights::Gpt};
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
/// let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let a = sample(&gpt, &Exact, &[0], 10, 1.0, &mut StdRng::seed_from_u64(1)).unwrap();
/// let b = sample(&gpt, &Exact, &[0], 10, 1.0, &mut StdRng::seed_from_u64(1)).unwrap();
/// assert_eq!(a, b); // seeded: the same text
/// assert_eq!(a.len(), 10);
/// assert!(sample(&gpt, &Exact, &[], 10, 1.0, &mut StdRng::seed_from_u64(1)).is_err());
/// ```
// ANCHOR: sample
pub fn sample<A: Float, K: Kernels<A>, R: Rng + ?Sized>(
    gpt: &Gpt<A>,
    k: &K,
    prompt: &[usize],
    n: usize,
    temperature: f64,
    rng: &mut R,
) -> Result<Vec<usize>> {
    if prompt.is_empty() {
        return Err(AttentionError::Empty { what: "prompt".into(), dim: "tokens" });
    }
    let mut context = prompt.to_vec();
    for _ in 0..n {
        let start = context.len().saturating_sub(gpt.config.block_size);
        let window = ndarray::Array2::from_shape_vec(
            (1, context.len() - start),
            context[start..].to_vec(),
        )
        .expect("one row");
        let logits = gpt.logits_with(k, &window.view())?; // (1, t, V)
        let last = logits.slice(ndarray::s![0, -1, ..]).to_vec();
        context.push(draw(&last, temperature, rng)?);
    }
    Ok(context.split_off(prompt.len()))
}
// ANCHOR_END: sample
