//! Your attempts at the exercises of chapter 16, *Writing, token by token*. Check them with
//! `cargo test -p exercises attempts::ch16 -- --ignored`.

// ANCHOR: nucleus
pub fn nucleus(probs: &[f64], p: f64) -> Vec<usize> {
    todo!("the most probable first, until their probabilities reach p; the crossing one stays")
}
// ANCHOR_END: nucleus

// ANCHOR: prefills
pub fn prefills(block_size: usize, prompt: usize, written: usize) -> usize {
    todo!("the prompt's prefill, and one more each time the window starts again")
}
// ANCHOR_END: prefills

// ANCHOR: even_spread
pub fn even_spread(targets: &[Vec<usize>]) -> f64 {
    todo!("query i sees i + 1 keys; average over the queries that have a target")
}
// ANCHOR_END: even_spread

#[cfg(test)]
mod tests {
    use crate::{ch16, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch16 -- --ignored"]
    fn nucleus() {
        verdict(ch16::check_nucleus(super::nucleus));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch16 -- --ignored"]
    fn prefills() {
        verdict(ch16::check_prefills(super::prefills));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch16 -- --ignored"]
    fn even_spread() {
        verdict(ch16::check_even_spread(super::even_spread));
    }
}
