//! Your attempts at the exercises of chapter 1, *Input embeddings*. Check them with
//! `cargo test -p exercises attempts::ch01 -- --ignored`.

// ANCHOR: encode_or_unk
use attention::embeddings::Vocabulary;

pub fn encode_or_unk(vocab: &Vocabulary, sentence: &str, unk: usize) -> Vec<usize> {
    todo!("the id of each word, or unk for a word the vocabulary lacks")
}
// ANCHOR_END: encode_or_unk

// ANCHOR: weighted_average
use ndarray::{Array1, Array2};

pub fn weighted_average(memory: &Array2<f64>, weights: &[f64]) -> Option<Array1<f64>> {
    todo!("None unless the weights are a distribution over the rows; else the sum of w·row")
}
// ANCHOR_END: weighted_average

// ANCHOR: outshone
pub fn outshone() -> Array2<f64> {
    todo!("two rows of width 2")
}
// ANCHOR_END: outshone

#[cfg(test)]
mod tests {
    use crate::{ch01, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch01 -- --ignored"]
    fn encode_or_unk() {
        verdict(ch01::check_encode_or_unk(super::encode_or_unk));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch01 -- --ignored"]
    fn weighted_average() {
        verdict(ch01::check_weighted_average(super::weighted_average));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch01 -- --ignored"]
    fn outshone() {
        verdict(ch01::check_outshone(super::outshone));
    }
}
