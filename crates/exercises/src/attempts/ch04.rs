//! Your attempts at the exercises of chapter 4, *Masking*. Check them with
//! `cargo test -p exercises attempts::ch04 -- --ignored`.

// ANCHOR: from_conventions
use attention::{Result, mask::Mask};
use ndarray::ArrayRef2;

pub fn from_blocked(blocked: &ArrayRef2<bool>) -> Result<Mask> {
    todo!("true = blocked in, true = may attend out")
}

pub fn from_additive(additive: &ArrayRef2<f64>) -> Result<Mask> {
    todo!("0 = keep, -inf = block")
}
// ANCHOR_END: from_conventions

// ANCHOR: sliding_window
pub fn sliding_window(len: usize, window: usize) -> Mask {
    todo!("causal, and no further back than window - 1 tokens")
}
// ANCHOR_END: sliding_window

// ANCHOR: valid_lengths
pub fn valid_lengths(batch: &[Vec<usize>], pad: usize) -> Vec<usize> {
    todo!("the number of ids before the first pad")
}
// ANCHOR_END: valid_lengths

#[cfg(test)]
mod tests {
    use crate::{ch04, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch04 -- --ignored"]
    fn from_blocked() {
        verdict(ch04::check_from_blocked(super::from_blocked));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch04 -- --ignored"]
    fn from_additive() {
        verdict(ch04::check_from_additive(super::from_additive));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch04 -- --ignored"]
    fn sliding_window() {
        verdict(ch04::check_sliding_window(super::sliding_window));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch04 -- --ignored"]
    fn valid_lengths() {
        verdict(ch04::check_valid_lengths(super::valid_lengths));
    }
}
