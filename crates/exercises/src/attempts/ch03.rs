//! Your attempts at the exercises of chapter 3, *Scores, scaling and variance*. Check them
//! with `cargo test -p exercises attempts::ch03 -- --ignored`.

// ANCHOR: scale_for
pub fn scale_for(d_k: usize, sigma_q: f64, sigma_k: f64) -> f64 {
    todo!("the standard deviation of q·k")
}
// ANCHOR_END: scale_for

// ANCHOR: perplexity
use ndarray::Array1;

pub fn perplexity(p: &Array1<f64>) -> f64 {
    todo!("e to the power of the entropy")
}
// ANCHOR_END: perplexity

// ANCHOR: gap_for_weight
pub fn gap_for_weight(p: f64) -> f64 {
    todo!("solve 1 / (1 + e^(-gap)) = p for gap")
}
// ANCHOR_END: gap_for_weight

#[cfg(test)]
mod tests {
    use crate::{ch03, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch03 -- --ignored"]
    fn scale_for() {
        verdict(ch03::check_scale_for(super::scale_for));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch03 -- --ignored"]
    fn perplexity() {
        verdict(ch03::check_perplexity(super::perplexity));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch03 -- --ignored"]
    fn gap_for_weight() {
        verdict(ch03::check_gap_for_weight(super::gap_for_weight));
    }
}
