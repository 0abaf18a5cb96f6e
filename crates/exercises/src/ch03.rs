//! Chapter 3, *Scores, scaling and variance*.

use attention::scores::variance;
use attention::softmax::softmax;
use attention::stats::{entropy, sample_scores};
use ndarray::{Array1, array};
use rand::{SeedableRng, rngs::StdRng};

use crate::{call, within};

/// Exercise 3.1: the number to divide `q·k` by so that the scores have variance 1, when the
/// `d_k` components of `q` and of `k` are independent, with mean 0 and standard deviations
/// `sigma_q` and `sigma_k`.
///
/// Each product `qᵢ·kᵢ` has variance `σ_q²·σ_k²`; `d_k` of them add up to `d_k·σ_q²·σ_k²`.
///
/// ```
/// use exercises::ch03::scale_for;
///
/// assert_eq!(scale_for(64, 1.0, 1.0), 8.0); // the usual √d_k
/// assert_eq!(scale_for(64, 2.0, 0.5), 8.0);
/// assert_eq!(scale_for(16, 2.0, 1.0), 8.0);
/// ```
// ANCHOR: scale_for
pub fn scale_for(d_k: usize, sigma_q: f64, sigma_k: f64) -> f64 {
    (d_k as f64).sqrt() * sigma_q * sigma_k
}
// ANCHOR_END: scale_for

/// Exercise 3.2: the *perplexity* of a row of weights, `exp(entropy)`: the number of keys a
/// query effectively attends to (`n` for `n` equal weights, 1 for a one-hot row).
///
/// The chapter's scaled rows have an entropy of about 2.36 nats: `e^2.36 ≈ 10.6` of their 16
/// keys are in play. The raw rows at `d_k = 1024` (entropy 0.096) have `e^0.096 ≈ 1.1`.
///
/// ```
/// use exercises::ch03::perplexity;
/// use ndarray::array;
///
/// assert!((perplexity(&array![0.5, 0.5, 0.0]) - 2.0).abs() < 1e-12);
/// ```
// ANCHOR: perplexity
pub fn perplexity(p: &Array1<f64>) -> f64 {
    entropy(p).exp()
}
// ANCHOR_END: perplexity

/// Exercise 3.3: the score gap `s₁ − s₀` at which softmax over two keys gives the larger one
/// the weight `p` (for `0.5 ≤ p < 1`): solve `1 / (1 + e^(−gap)) = p`.
///
/// For `p = 0.99` the gap is `ln 99 ≈ 4.6`. Between two raw scores at `d_k = 512` the gap has
/// a standard deviation of `√(2·512) = 32`, seven times that: without scaling, nearly every
/// pair of keys is far past saturation.
///
/// ```
/// use exercises::ch03::gap_for_weight;
///
/// assert_eq!(gap_for_weight(0.5), 0.0);
/// assert!((gap_for_weight(0.99) - 99f64.ln()).abs() < 1e-12);
/// ```
// ANCHOR: gap_for_weight
pub fn gap_for_weight(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}
// ANCHOR_END: gap_for_weight

/// Checks an answer to exercise 3.1 ([`scale_for`]): dividing sampled scores by it must give
/// them a variance within 0.1 of 1, for three choices of `(d_k, σ_q, σ_k)`; and it must equal
/// `√d_k·σ_q·σ_k` for those and a few more (within `1e-15`, or `1e-11` where `σ_q·σ_k`
/// rounds).
///
/// ```
/// use exercises::ch03::{check_scale_for, scale_for};
///
/// assert_eq!(check_scale_for(scale_for), Ok(()));
/// // d_k instead of √d_k: the scores end up with variance 1/d_k.
/// assert!(check_scale_for(|d_k, sigma_q, sigma_k| d_k as f64 * sigma_q * sigma_k).is_err());
/// ```
pub fn check_scale_for(scale_for: impl Fn(usize, f64, f64) -> f64) -> Result<(), String> {
    for (d_k, sigma_q, sigma_k) in [(16, 1.0, 1.0), (64, 3.0, 0.5), (8, 2.0, 2.0)] {
        // Standard-normal scores times σ_q·σ_k: the scores of vectors with those spreads.
        let raw = sample_scores(d_k, 16, 32, &mut StdRng::seed_from_u64(d_k as u64))
            .map_err(|e| e.to_string())?
            * (sigma_q * sigma_k);
        let what = format!("scale_for({d_k}, {sigma_q}, {sigma_k})");
        let scale = call(&what, || scale_for(d_k, sigma_q, sigma_k))?;
        let v = variance(&(raw / scale)).map_err(|e| e.to_string())?;
        if !within(v, 1.0, 0.1) {
            return Err(format!(
                "{what} returned {scale}: dividing the scores of {d_k}-dimensional vectors \
                 with standard deviations {sigma_q} and {sigma_k} by it leaves a variance of \
                 {v:.4}, not 1 (within 0.1)"
            ));
        }
    }
    // Exact inputs give √d_k·σ_q·σ_k to the last bit or so; 0.3·7 is not exact, and
    // √(d_k·σ_q²·σ_k²) rounds differently from √d_k·σ_q·σ_k there: 12 digits.
    for (d_k, sigma_q, sigma_k, tolerance) in [
        (64, 1.0, 1.0, 1e-15),
        (64, 2.0, 0.5, 1e-15),
        (16, 2.0, 1.0, 1e-15),
        (2, 1.0, 1.0, 1e-15),
        (10, 0.3, 7.0, 1e-11),
    ] {
        let what = format!("scale_for({d_k}, {sigma_q}, {sigma_k})");
        let got = call(&what, || scale_for(d_k, sigma_q, sigma_k))?;
        let expected = (d_k as f64).sqrt() * sigma_q * sigma_k;
        if !within(got, expected, tolerance) {
            return Err(format!(
                "{what} returned {got}, expected √{d_k}·{sigma_q}·{sigma_k} = {expected}"
            ));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 3.2 ([`perplexity`]): `n` for `n` equal weights, 1 for a
/// one-hot row, 2 for two equal weights and a zero, and `e^H` (to `1e-12`) for a lopsided
/// row, where it lies between 1 and 2.
///
/// ```
/// use attention::stats::entropy;
/// use exercises::ch03::{check_perplexity, perplexity};
///
/// assert_eq!(check_perplexity(perplexity), Ok(()));
/// // The entropy itself, in nats, is not a number of keys.
/// assert!(check_perplexity(|p| entropy(p)).is_err());
/// ```
pub fn check_perplexity(perplexity: impl Fn(&Array1<f64>) -> f64) -> Result<(), String> {
    let lopsided: Array1<f64> = array![0.9, 0.05, 0.05];
    let cases = [
        (array![0.25, 0.25, 0.25, 0.25], 4.0, "4 equal weights"),
        (array![0.0, 1.0, 0.0], 1.0, "one-hot: a zero weight adds 0·ln 0 = 0 to the entropy"),
        (array![0.5, 0.5, 0.0], 2.0, "2 equal weights and a zero one"),
        (lopsided.clone(), entropy(&lopsided).exp(), "e^H with H = Σ −pᵢ·ln pᵢ in nats"),
    ];
    for (p, expected, why) in cases {
        let what = format!("perplexity({p})");
        let got = call(&what, || perplexity(&p))?;
        if !within(got, expected, 1e-12) {
            return Err(format!("{what} returned {got}, expected {expected} ({why})"));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 3.3 ([`gap_for_weight`]): softmax over the scores
/// `(0, gap)` must give the second key the weight `p` (to `1e-9`) for `p` from 0.5 to
/// 0.999999, and the gap for 0.99 must lie between 4.59 and 4.6.
///
/// ```
/// use exercises::ch03::{check_gap_for_weight, gap_for_weight};
///
/// assert_eq!(check_gap_for_weight(gap_for_weight), Ok(()));
/// // Solving e^(−gap) = 1 − p forgets the denominator: that is the weight of one key alone.
/// assert!(check_gap_for_weight(|p| -(1.0 - p).ln()).is_err());
/// ```
pub fn check_gap_for_weight(gap_for_weight: impl Fn(f64) -> f64) -> Result<(), String> {
    for p in [0.5, 0.6, 0.9, 0.99, 0.999_999] {
        let what = format!("gap_for_weight({p})");
        let gap = call(&what, || gap_for_weight(p))?;
        let w = softmax(&array![0.0, gap]);
        if !within(w[1], p, 1e-9) {
            return Err(format!(
                "{what} returned {gap}, but softmax([0, {gap}]) gives the second key the \
                 weight {}, not {p}",
                w[1]
            ));
        }
    }
    let gap = call("gap_for_weight(0.99)", || gap_for_weight(0.99))?;
    if !(gap > 4.59 && gap < 4.6) {
        return Err(format!("gap_for_weight(0.99) returned {gap}, expected ln 99 ≈ 4.595"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn scale_for_passes_and_classic_mistakes_fail() {
        assert_eq!(check_scale_for(scale_for), Ok(()));
        // Another correct answer: the root of the variance.
        let root_of_variance =
            |d_k: usize, sq: f64, sk: f64| (d_k as f64 * sq * sq * sk * sk).sqrt();
        assert_eq!(check_scale_for(root_of_variance), Ok(()));
        // Dividing by d_k: variance 1/d_k.
        rejects(check_scale_for(|d_k, sq, sk| d_k as f64 * sq * sk), "scale_for(16, 1, 1)");
        // Keeping the usual √d_k whatever the spreads.
        rejects(check_scale_for(|d_k, _, _| (d_k as f64).sqrt()), "scale_for(64, 3, 0.5)");
        // √(d_k·σ_q·σ_k): the root of the standard deviations taken too.
        let root_of_all = |d_k: usize, sq: f64, sk: f64| (d_k as f64 * sq * sk).sqrt();
        rejects(check_scale_for(root_of_all), "scale_for(64, 3, 0.5)");
        // Variances for standard deviations: √d_k·σ_q²·σ_k².
        let variances = |d_k: usize, sq: f64, sk: f64| (d_k as f64).sqrt() * sq * sq * sk * sk;
        rejects(check_scale_for(variances), "scale_for(64, 3, 0.5)");
    }

    #[test]
    fn perplexity_passes_and_classic_mistakes_fail() {
        assert_eq!(check_perplexity(perplexity), Ok(()));
        // Another correct answer: e^H = Π pᵢ^(−pᵢ), with 0⁰ = 1.
        let product = |p: &Array1<f64>| p.iter().map(|&w| w.powf(-w)).product::<f64>();
        assert_eq!(check_perplexity(product), Ok(()));
        let lopsided = perplexity(&array![0.9, 0.05, 0.05]);
        assert!(lopsided > 1.0 && lopsided < 2.0, "{lopsided}");
        // The numbers in the doc comment.
        assert!((2.36f64.exp() - 10.6).abs() < 0.05 && (0.096f64.exp() - 1.1).abs() < 0.05);

        // The entropy itself.
        rejects(check_perplexity(|p| entropy(p)), "returned 1.386");
        // 2^H: perplexity in bits needs the entropy in bits.
        rejects(check_perplexity(|p| entropy(p).exp2()), "returned 2.614");
        // 0·ln 0 computed literally is 0·(−∞) = NaN.
        let literal = |p: &Array1<f64>| p.mapv(|w| -w * w.ln()).sum().exp();
        rejects(check_perplexity(literal), "perplexity([0, 1, 0]) returned NaN");
        // Another "effective number", 1/Σpᵢ², agrees on the first three rows but not on the
        // lopsided one: the check must tell them apart.
        let inverse_simpson = |p: &Array1<f64>| 1.0 / p.mapv(|w| w * w).sum();
        rejects(
            check_perplexity(inverse_simpson),
            "perplexity([0.9, 0.05, 0.05]) returned 1.22",
        );
        // Counting the keys with a weight above 0.
        let count = |p: &Array1<f64>| p.iter().filter(|&&w| w > 0.0).count() as f64;
        rejects(check_perplexity(count), "perplexity([0.9, 0.05, 0.05]) returned 3");
    }

    #[test]
    fn gap_for_weight_passes_and_classic_mistakes_fail() {
        assert_eq!(check_gap_for_weight(gap_for_weight), Ok(()));
        // Another correct answer: the difference of the logs.
        assert_eq!(check_gap_for_weight(|p| p.ln() - (1.0 - p).ln()), Ok(()));
        let sd = (2.0 * 512.0f64).sqrt();
        assert_eq!(sd, 32.0);
        assert!((sd / gap_for_weight(0.99) - 7.0).abs() < 0.1); // "seven times that"

        // The sign flipped: the gap of the smaller key.
        rejects(check_gap_for_weight(|p| ((1.0 - p) / p).ln()), "gap_for_weight(0.6)");
        // e^(−gap) = 1 − p: the denominator 1 + e^(−gap) forgotten.
        rejects(
            check_gap_for_weight(|p| -(1.0 - p).ln()),
            "gap_for_weight(0.5) returned 0.69",
        );
        // ln p: the log of the weight is not a difference of scores.
        rejects(check_gap_for_weight(f64::ln), "gap_for_weight(0.5) returned -0.69");
    }
}
