//! Chapter 3, *Scores, scaling and variance*.

use attention::stats::entropy;
use ndarray::Array1;

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

#[cfg(test)]
mod tests {
    use super::*;
    use attention::scores::variance;
    use attention::softmax::softmax;
    use attention::stats::sample_scores;
    use ndarray::array;
    use rand::{SeedableRng, rngs::StdRng};

    #[test]
    fn dividing_by_scale_for_gives_unit_variance() {
        for (d_k, sigma_q, sigma_k) in [(16, 1.0, 1.0), (64, 3.0, 0.5), (8, 2.0, 2.0)] {
            // Standard-normal scores times σ_q·σ_k: the scores of vectors with those spreads.
            let raw = sample_scores(d_k, 16, 32, &mut StdRng::seed_from_u64(d_k as u64))
                * (sigma_q * sigma_k);
            let v = variance(&(raw / scale_for(d_k, sigma_q, sigma_k))).unwrap();
            assert!(
                (v - 1.0).abs() < 0.1,
                "d_k = {d_k}, σ = ({sigma_q}, {sigma_k}): variance {v}"
            );
        }
        assert!((scale_for(2, 1.0, 1.0) - 2f64.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn perplexity_counts_the_keys_in_play() {
        assert!((perplexity(&array![0.25, 0.25, 0.25, 0.25]) - 4.0).abs() < 1e-12);
        assert!((perplexity(&array![0.0, 1.0, 0.0]) - 1.0).abs() < 1e-12);
        let lopsided = perplexity(&array![0.9, 0.05, 0.05]);
        assert!(lopsided > 1.0 && lopsided < 2.0, "{lopsided}");
        // The numbers in the doc comment.
        assert!((2.36f64.exp() - 10.6).abs() < 0.05 && (0.096f64.exp() - 1.1).abs() < 0.05);
    }

    #[test]
    fn gap_gives_the_weight_back() {
        for p in [0.5, 0.6, 0.9, 0.99, 0.999_999] {
            let w = softmax(&array![0.0, gap_for_weight(p)]);
            assert!((w[1] - p).abs() < 1e-9, "p = {p}: {w}");
        }
        assert!(gap_for_weight(0.99) > 4.59 && gap_for_weight(0.99) < 4.6);
        let sd = (2.0 * 512.0f64).sqrt();
        assert_eq!(sd, 32.0);
        assert!((sd / gap_for_weight(0.99) - 7.0).abs() < 0.1); // "seven times that"
    }
}
