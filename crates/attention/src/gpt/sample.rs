//! Chapter *A model that writes*: writing, one character at a time.
//!
//! The model gives, after any context, a score (logit) for every token of the vocabulary.
//! To write, turn the last position's scores into probabilities, `softmax(z / τ)` with a
//! temperature `τ` (below 1 sharper, above 1 flatter), draw a token from them, append it,
//! and go again with the context cropped to the model's `block_size`. Chapter 10's KV
//! cache would make this fast; here every step runs the model on the whole context again.
//!
//! Chapter 16 (*Writing, token by token*) adds the other ways of choosing a token that
//! language models use, in a [`Sampler`]: greedy, top-k, top-p (nucleus) and min-p.
//!
//! Anchors (below the doc comments): `sample`, `draw`, `sampler`, `sampler_pick`,
//! `sampler_weights`.

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
    check_logits(logits)?;
    let z: Vec<f64> = logits.iter().map(|&v| to_f64(v) / temperature).collect();
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = z.iter().map(|&v| libm::exp(v - max)).collect();
    let total: f64 = weights.iter().sum();
    Ok(walk(&weights, total, rng))
}

/// An error unless `logits` has at least one entry and every entry is finite.
fn check_logits<A: Float>(logits: &[A]) -> Result<()> {
    if logits.is_empty() {
        return Err(AttentionError::Empty { what: "logits".into(), dim: "V" });
    }
    if let Some(i) = logits.iter().position(|v| !v.is_finite()) {
        return Err(AttentionError::Invalid {
            what: "logits".into(),
            problem: format!("logit {i} is {} (a diverged model?)", to_f64(logits[i])),
        });
    }
    Ok(())
}

/// The first index whose cumulative weight exceeds `u · total`, `u` uniform in `[0, 1)`.
fn walk<R: Rng + ?Sized>(weights: &[f64], total: f64, rng: &mut R) -> usize {
    let u = rng.random::<f64>() * total; // a point along the total weight
    let mut cumulative = 0.0;
    for (i, w) in weights.iter().enumerate() {
        cumulative += w;
        if u < cumulative {
            return i;
        }
    }
    // u rounded up to the total: the last token with any weight
    weights.iter().rposition(|&w| w > 0.0).unwrap_or(weights.len() - 1)
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

/// How the next token is chosen from the model's logits `z`, in the order Hugging Face's
/// `generate` applies the same settings:
///
/// 1. **temperature** `τ`: the scores become `z / τ`. `τ = 0` is *greedy*: the highest
///    logit, the lowest index among equals, and no random number is drawn.
/// 2. **top-k**: only the `k` most probable tokens stay (the lower index first among
///    equals, so exactly `k`).
/// 3. **top-p** (nucleus, Holtzman et al. 2020): of those, the most probable tokens whose
///    probabilities, renormalised, first add up to `p` or more; the token that crosses `p`
///    stays.
/// 4. **min-p**: of those, only the tokens at least `min_p` times as probable as the most
///    probable one stay.
///
/// The token is then drawn from what stays, renormalised, as [`draw`] draws: with
/// `Sampler::default()` (temperature 1, no filter) the same token as `draw` at
/// temperature 1 from the same generator.
///
/// Where Hugging Face differs: its top-k keeps every token tied with the `k`-th (here
/// exactly `k`, the lower indices first), and treats `top_k = 0` as no filter (here an
/// error); its top-p breaks ties at the crossing in whatever order its sort leaves them
/// (here by index); and it has no temperature 0 (greedy is `do_sample=False`). Logits
/// without ties, as a trained model's almost always are, give the same filters.
///
/// ```
/// use attention::gpt::sample::Sampler;
///
/// let logits = [2.0_f32, 1.0, 0.0, -1.0];
/// let top2 = Sampler { top_k: Some(2), ..Sampler::default() }.distribution(&logits).unwrap();
/// assert!(top2[2] == 0.0 && top2[3] == 0.0 && (top2[0] + top2[1] - 1.0).abs() < 1e-15);
/// assert_eq!(Sampler::greedy().distribution(&logits).unwrap(), [1.0, 0.0, 0.0, 0.0]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
// ANCHOR: sampler
pub struct Sampler {
    /// `τ ≥ 0`: below 1 sharper, above 1 flatter, 0 greedy.
    pub temperature: f64,
    /// Keep the `k ≥ 1` most probable tokens.
    pub top_k: Option<usize>,
    /// Keep the most probable tokens whose probabilities first reach `p` in `(0, 1]`.
    pub top_p: Option<f64>,
    /// Keep the tokens at least `min_p` (in `[0, 1]`) times as probable as the first.
    pub min_p: Option<f64>,
}
// ANCHOR_END: sampler

impl Default for Sampler {
    /// Temperature 1 and no filter: a draw from `softmax(z)`.
    fn default() -> Self {
        Sampler { temperature: 1.0, top_k: None, top_p: None, min_p: None }
    }
}

impl Sampler {
    /// Greedy decoding: always the most probable token (temperature 0).
    ///
    /// ```
    /// use attention::gpt::sample::Sampler;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let pick = Sampler::greedy().pick(&[0.5_f32, 3.0, 3.0], &mut StdRng::seed_from_u64(0));
    /// assert_eq!(pick.unwrap(), 1); // equals: the lower index
    /// ```
    pub fn greedy() -> Self {
        Sampler { temperature: 0.0, ..Sampler::default() }
    }

    /// An error naming the first setting out of its range.
    ///
    /// ```
    /// use attention::gpt::sample::Sampler;
    ///
    /// let bad = Sampler { top_p: Some(1.5), ..Sampler::default() };
    /// assert_eq!(bad.validate().unwrap_err().to_string(), "sampler: top_p = 1.5 must be in (0, 1]");
    /// ```
    pub fn validate(&self) -> Result<()> {
        let refuse =
            |problem: String| Err(AttentionError::Invalid { what: "sampler".into(), problem });
        let t = self.temperature;
        if !(t >= 0.0 && t.is_finite()) {
            return refuse(format!(
                "temperature = {t} must be 0 (greedy) or positive and finite"
            ));
        }
        if self.top_k == Some(0) {
            return refuse("top_k = 0 must be at least 1".into());
        }
        if let Some(p) = self.top_p.filter(|&p| !(p > 0.0 && p <= 1.0)) {
            return refuse(format!("top_p = {p} must be in (0, 1]"));
        }
        if let Some(m) = self.min_p.filter(|&m| !(0.0..=1.0).contains(&m)) {
            return refuse(format!("min_p = {m} must be in [0, 1]"));
        }
        Ok(())
    }

    /// The probabilities the next token is drawn with: one per token of the vocabulary, 0
    /// for every token the filters removed, adding up to 1 (up to rounding).
    ///
    /// ```
    /// use attention::gpt::sample::Sampler;
    ///
    /// // probabilities 0.5, 0.3, 0.2: the nucleus of 0.6 needs the second token to get there
    /// let logits = [0.5_f64.ln(), 0.3_f64.ln(), 0.2_f64.ln()];
    /// let nucleus = Sampler { top_p: Some(0.6), ..Sampler::default() }.distribution(&logits).unwrap();
    /// assert!((nucleus[0] - 0.625).abs() < 1e-12 && (nucleus[1] - 0.375).abs() < 1e-12);
    /// assert_eq!(nucleus[2], 0.0);
    /// ```
    pub fn distribution<A: Float>(&self, logits: &[A]) -> Result<Vec<f64>> {
        self.validate()?;
        check_logits(logits)?;
        if self.temperature == 0.0 {
            let mut onehot = vec![0.0; logits.len()];
            onehot[argmax(logits)] = 1.0;
            return Ok(onehot);
        }
        let weights = self.weights(logits);
        let total: f64 = weights.iter().sum();
        Ok(weights.iter().map(|w| w / total).collect())
    }

    /// The next token, drawn from `logits` as the settings say.
    ///
    /// ```
    /// use attention::gpt::sample::Sampler;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let top1 = Sampler { top_k: Some(1), ..Sampler::default() };
    /// let mut rng = StdRng::seed_from_u64(0);
    /// assert!((0..50).all(|_| top1.pick(&[0.0_f32, 0.1, 0.0], &mut rng).unwrap() == 1));
    /// ```
    // ANCHOR: sampler_pick
    pub fn pick<A: Float, R: Rng + ?Sized>(&self, logits: &[A], rng: &mut R) -> Result<usize> {
        self.validate()?;
        check_logits(logits)?;
        if self.temperature == 0.0 {
            return Ok(argmax(logits)); // greedy: no draw
        }
        let weights = self.weights(logits);
        let total: f64 = weights.iter().sum();
        Ok(walk(&weights, total, rng))
    }
    // ANCHOR_END: sampler_pick

    /// `exp((z − max z)/τ)` for every token the filters keep, 0 for the others.
    // ANCHOR: sampler_weights
    fn weights<A: Float>(&self, logits: &[A]) -> Vec<f64> {
        let z: Vec<f64> = logits.iter().map(|&v| to_f64(v)).collect();
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // (z − max)/τ ≤ 0 for every token, however small τ: no overflow, the best one 1
        let w: Vec<f64> = z.iter().map(|&v| libm::exp((v - max) / self.temperature)).collect();
        // Most probable first; equals in index order, so that every machine keeps the same.
        let mut order: Vec<usize> = (0..z.len()).collect();
        order.sort_by(|&a, &b| z[b].partial_cmp(&z[a]).expect("finite").then(a.cmp(&b)));
        let mut keep = order.len();
        if let Some(k) = self.top_k {
            keep = keep.min(k);
        }
        if let Some(p) = self.top_p {
            let total: f64 = order[..keep].iter().map(|&i| w[i]).sum();
            let mut cumulative = 0.0;
            let crossing = order[..keep].iter().position(|&i| {
                cumulative += w[i];
                cumulative >= p * total // this token reaches p: it stays, the rest go
            });
            keep = crossing.map_or(keep, |c| c + 1);
        }
        if let Some(m) = self.min_p {
            let floor = m * w[order[0]]; // min_p times the most probable
            keep = order[..keep].iter().take_while(|&&i| w[i] >= floor).count();
        }
        let mut kept = vec![0.0; w.len()];
        for &i in &order[..keep] {
            kept[i] = w[i];
        }
        kept
    }
    // ANCHOR_END: sampler_weights
}

/// The index of the largest entry, the first among equals.
// ANCHOR: sample_plumbing
fn argmax<A: Float>(logits: &[A]) -> usize {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best
}
// ANCHOR_END: sample_plumbing

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};

    /// Pearson's χ² of `counts` against `probabilities` over `n` draws, over the tokens with
    /// a probability above 0, and its degrees of freedom. A draw of a token with probability 0
    /// gives infinity.
    fn chi_square(counts: &[usize], probabilities: &[f64], n: usize) -> (f64, usize) {
        let mut chi = 0.0;
        let mut cells = 0;
        for (&c, &p) in counts.iter().zip(probabilities) {
            if p == 0.0 {
                if c > 0 {
                    return (f64::INFINITY, 0);
                }
                continue;
            }
            let expected = p * n as f64;
            chi += (c as f64 - expected).powi(2) / expected;
            cells += 1;
        }
        (chi, cells - 1)
    }

    /// The χ² value that a correct sampler exceeds with probability 0.001 (Wilson and
    /// Hilferty's approximation of the quantile, z = 3.090 for 0.999; a little above the
    /// table's value for few degrees of freedom).
    fn critical(df: usize) -> f64 {
        if df == 0 {
            return 0.0; // one possible token: any other draw is wrong
        }
        let k = df as f64;
        let a = 2.0 / (9.0 * k);
        k * (1.0 - a + 3.090 * a.sqrt()).powi(3)
    }

    fn counts(
        n: usize,
        seed: u64,
        vocab: usize,
        mut pick: impl FnMut(&mut StdRng) -> usize,
    ) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut counts = vec![0; vocab];
        for _ in 0..n {
            counts[pick(&mut rng)] += 1;
        }
        counts
    }

    const LOGITS: [f64; 8] = [1.2, 2.0, -0.5, 2.0, 0.3, -1.7, 0.9, 1.5];

    fn samplers() -> Vec<Sampler> {
        let s = Sampler::default();
        vec![
            s,
            Sampler { temperature: 0.6, ..s },
            Sampler { temperature: 1.7, top_k: Some(5), ..s },
            Sampler { top_p: Some(0.7), ..s },
            Sampler { temperature: 1.3, top_p: Some(0.9), min_p: Some(0.1), ..s },
            Sampler { min_p: Some(0.3), ..s },
            Sampler { top_k: Some(4), top_p: Some(0.95), ..s },
        ]
    }

    #[test]
    fn the_chi_square_critical_values_are_right() {
        // tables: 10.828 (1 df), 13.816 (2), 18.467 (4), 24.322 (7); the approximation is
        // at most 3.1 % above them (1 df), so the tests' level is a little below 0.001
        for (df, table) in [(1, 10.828), (2, 13.816), (4, 18.467), (7, 24.322)] {
            let c = critical(df);
            assert!(c >= table && (c - table) / table < 0.035, "{df}: {c}");
        }
    }

    /// The distribution a sampler should draw from, written independently of
    /// [`Sampler::distribution`]: softmax at temperature τ; top-k keeps a token if fewer
    /// than `k` are more probable; top-p keeps a token if the kept tokens more probable
    /// than it hold less than `p` of the kept mass; min-p keeps a token at least `min_p`
    /// times as probable as the most probable kept one. (No ties at the boundaries here.)
    fn reference(logits: &[f64], s: &Sampler) -> Vec<f64> {
        let e: Vec<f64> = logits.iter().map(|z| (z / s.temperature).exp()).collect();
        let mut p: Vec<f64> = e.iter().map(|x| x / e.iter().sum::<f64>()).collect();
        let renormalise = |p: &mut Vec<f64>| {
            let total: f64 = p.iter().sum();
            p.iter_mut().for_each(|x| *x /= total);
        };
        if let Some(k) = s.top_k {
            let q = p.clone();
            for (i, x) in p.iter_mut().enumerate() {
                if q.iter().filter(|&&y| y > q[i]).count() >= k {
                    *x = 0.0;
                }
            }
            renormalise(&mut p);
        }
        if let Some(top) = s.top_p {
            let q = p.clone();
            for (i, x) in p.iter_mut().enumerate() {
                if q.iter().filter(|&&y| y > q[i]).sum::<f64>() >= top {
                    *x = 0.0;
                }
            }
            renormalise(&mut p);
        }
        if let Some(m) = s.min_p {
            let best = p.iter().copied().fold(0.0, f64::max);
            p.iter_mut().filter(|x| **x < m * best).for_each(|x| *x = 0.0);
            renormalise(&mut p);
        }
        p
    }

    #[test]
    fn draws_follow_the_distribution_and_a_wrong_sampler_is_caught() {
        let n = 40_000;
        for (s, sampler) in samplers().into_iter().enumerate() {
            let p = reference(&LOGITS, &sampler);
            let ours = sampler.distribution(&LOGITS).unwrap();
            assert!(p.iter().zip(&ours).all(|(a, b)| (a - b).abs() < 1e-12), "{sampler:?}");
            let c = counts(n, s as u64, 8, |rng| sampler.pick(&LOGITS, rng).unwrap());
            let (chi, df) = chi_square(&c, &p, n);
            assert!(chi <= critical(df), "{sampler:?}: χ² = {chi} with {df} df");
        }
        // The bound catches real mistakes: temperature applied after top-p instead of
        // before, the filters forgotten, the nucleus without its crossing token, and
        // probabilities taken proportional to the logits.
        let rejected = |c: &[usize], p: &[f64]| {
            let (chi, df) = chi_square(c, p, n);
            chi > critical(df)
        };
        let hot = Sampler { temperature: 1.7, top_p: Some(0.5), ..Sampler::default() };
        let after = reference(&LOGITS, &Sampler { top_p: Some(0.5), ..Sampler::default() });
        let c = counts(n, 2, 8, |rng| hot.pick(&LOGITS, rng).unwrap());
        assert!(!rejected(&c, &reference(&LOGITS, &hot)) && rejected(&c, &after));
        let nucleus = reference(&LOGITS, &Sampler { top_p: Some(0.7), ..Sampler::default() });
        let forgot = counts(n, 1, 8, |rng| Sampler::default().pick(&LOGITS, rng).unwrap());
        assert!(rejected(&forgot, &nucleus));
        let mut no_crossing = nucleus.clone();
        let last = (0..8)
            .filter(|&i| nucleus[i] > 0.0)
            .min_by(|&a, &b| nucleus[a].total_cmp(&nucleus[b]))
            .unwrap();
        no_crossing[last] = 0.0;
        let c = counts(n, 3, 8, |rng| walk(&no_crossing, no_crossing.iter().sum(), rng));
        assert!(rejected(&c, &nucleus));
        let softmax = reference(&LOGITS, &Sampler::default());
        let shifted: Vec<f64> = LOGITS.iter().map(|z| z + 2.0).collect(); // all positive
        let c = counts(n, 4, 8, |rng| walk(&shifted, shifted.iter().sum(), rng));
        assert!(rejected(&c, &softmax));
    }

    #[test]
    fn the_filters_apply_in_order_after_the_temperature() {
        let kept = |p: [f64; 3], s: Sampler| -> usize {
            let logits: Vec<f64> = p.iter().map(|x| x.ln()).collect();
            s.distribution(&logits).unwrap().iter().filter(|&&x| x > 0.0).count()
        };
        let s = Sampler::default();
        // top-k, then top-p over what top-k kept, renormalised: 0.4/0.75 ≥ 0.5 alone
        // (top-p first would keep 0.4 and 0.35)
        assert_eq!(
            kept([0.4, 0.35, 0.25], Sampler { top_k: Some(2), top_p: Some(0.5), ..s }),
            1
        );
        // top-p, then min-p: 0.5 and 0.3 reach 0.6, and 0.3 ≥ 0.5 · 0.5
        // (min-p first would leave 0.625 and 0.375, and top-p then only the first)
        assert_eq!(
            kept([0.5, 0.3, 0.2], Sampler { top_p: Some(0.6), min_p: Some(0.5), ..s }),
            2
        );
        // temperature, then min-p: at τ = 2 the second is 0.77 of the first, above 0.7
        // (min-p at τ = 1 would keep only the first: 0.3 < 0.7 · 0.5)
        let warm = Sampler { temperature: 2.0, min_p: Some(0.7), ..s };
        assert_eq!(kept([0.5, 0.3, 0.2], warm), 2);
    }

    #[test]
    fn top_k_never_leaves_the_k_best_and_equals_keep_the_lower_index() {
        let top3 = Sampler { temperature: 2.0, top_k: Some(3), ..Sampler::default() };
        let mut rng = StdRng::seed_from_u64(5);
        // 2.0 at 1 and 3, then 1.5 at 7: the three best
        for _ in 0..5000 {
            assert!([1, 3, 7].contains(&top3.pick(&LOGITS, &mut rng).unwrap()));
        }
        let ties = [1.0_f32, 1.0, 1.0, 0.0];
        let two =
            Sampler { top_k: Some(2), ..Sampler::default() }.distribution(&ties).unwrap();
        assert_eq!(two, [0.5, 0.5, 0.0, 0.0]);
        let one = Sampler { top_k: Some(1), ..Sampler::default() };
        assert_eq!(one.pick(&LOGITS, &mut rng).unwrap(), 1);
        assert_eq!(Sampler::greedy().pick(&LOGITS, &mut rng).unwrap(), 1);
    }

    #[test]
    fn top_p_keeps_the_crossing_token_and_min_p_keeps_a_share_of_the_best() {
        let logits = [0.2_f64.ln(), 0.5_f64.ln(), 0.3_f64.ln()];
        let kept = |s: Sampler| -> Vec<bool> {
            s.distribution(&logits).unwrap().iter().map(|&p| p > 0.0).collect()
        };
        let s = Sampler::default();
        assert_eq!(kept(Sampler { top_p: Some(0.4), ..s }), [false, true, false]);
        assert_eq!(kept(Sampler { top_p: Some(0.5), ..s }), [false, true, false]);
        assert_eq!(kept(Sampler { top_p: Some(0.6), ..s }), [false, true, true]);
        assert_eq!(kept(Sampler { top_p: Some(1.0), ..s }), [true, true, true]);
        // min-p 0.5: at least 0.25 (half of 0.5)
        assert_eq!(kept(Sampler { min_p: Some(0.5), ..s }), [false, true, true]);
        assert_eq!(kept(Sampler { min_p: Some(0.7), ..s }), [false, true, false]);
        assert_eq!(kept(Sampler { min_p: Some(0.0), ..s }), [true, true, true]);
    }

    #[test]
    fn temperature_to_zero_is_greedy_and_one_is_draw() {
        let mut rng = StdRng::seed_from_u64(6);
        let cold = Sampler { temperature: 1e-3, ..Sampler::default() };
        assert!((0..1000).all(|_| cold.pick(&LOGITS[4..], &mut rng).unwrap() == 3));
        let (mut a, mut b) = (StdRng::seed_from_u64(7), StdRng::seed_from_u64(7));
        for _ in 0..1000 {
            let x = Sampler::default().pick(&LOGITS, &mut a).unwrap();
            assert_eq!(x, draw(&LOGITS, 1.0, &mut b).unwrap());
        }
        // however small τ, the best token (no overflow into NaN weights)
        let icy = Sampler { temperature: 1e-310, ..Sampler::default() };
        assert!((0..100).all(|_| icy.pick(&LOGITS[4..], &mut rng).unwrap() == 3));
        // −0 and +0 are equal logits: greedy and top-1 both take the lower index
        let zeros = [-0.0_f64, 0.0];
        let top1 = Sampler { top_k: Some(1), ..Sampler::default() };
        assert_eq!(top1.pick(&zeros, &mut rng).unwrap(), 0);
        assert_eq!(Sampler::greedy().pick(&zeros, &mut rng).unwrap(), 0);
        // greedy draws no random number: the generator is where it was
        let mut c = StdRng::seed_from_u64(8);
        Sampler::greedy().pick(&LOGITS, &mut c).unwrap();
        assert_eq!(c.random::<u64>(), StdRng::seed_from_u64(8).random::<u64>());
    }

    #[test]
    fn bad_settings_and_logits_are_refused() {
        let s = Sampler::default();
        for (bad, message) in [
            (Sampler { temperature: -1.0, ..s }, "temperature = -1"),
            (Sampler { temperature: f64::NAN, ..s }, "temperature = NaN"),
            (Sampler { top_k: Some(0), ..s }, "top_k = 0"),
            (Sampler { top_p: Some(0.0), ..s }, "top_p = 0"),
            (Sampler { min_p: Some(1.5), ..s }, "min_p = 1.5"),
        ] {
            let err =
                bad.pick(&LOGITS, &mut StdRng::seed_from_u64(0)).unwrap_err().to_string();
            assert!(err.starts_with(&format!("sampler: {message}")), "{err}");
        }
        assert!(s.pick(&[0.0_f32, f32::INFINITY], &mut StdRng::seed_from_u64(0)).is_err());
        assert!(s.pick::<f32, _>(&[], &mut StdRng::seed_from_u64(0)).is_err());
    }
}
