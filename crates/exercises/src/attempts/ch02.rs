//! Your attempts at the exercises of chapter 2, *Queries, keys and values*. Check them with
//! `cargo test -p exercises attempts::ch02 -- --ignored`.

// ANCHOR: self_attention_parameters
pub fn self_attention_parameters(d_model: usize, d_k: usize, d_v: usize) -> usize {
    todo!("the entries of W_Q, W_K and W_V")
}
// ANCHOR_END: self_attention_parameters

// ANCHOR: score_entry
use ndarray::Array2;

pub fn score_entry(q: &Array2<f64>, k: &Array2<f64>, i: usize, j: usize) -> f64 {
    todo!("a for loop over the d_k components")
}
// ANCHOR_END: score_entry

// ANCHOR: tied_scores
pub fn tied_scores(x: &Array2<f64>, w: &Array2<f64>) -> Array2<f64> {
    todo!("the scores when W_Q = W_K = w")
}
// ANCHOR_END: tied_scores

#[cfg(test)]
mod tests {
    use crate::{ch02, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch02 -- --ignored"]
    fn self_attention_parameters() {
        verdict(ch02::check_self_attention_parameters(super::self_attention_parameters));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch02 -- --ignored"]
    fn score_entry() {
        verdict(ch02::check_score_entry(super::score_entry));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch02 -- --ignored"]
    fn tied_scores() {
        verdict(ch02::check_tied_scores(super::tied_scores));
    }
}
