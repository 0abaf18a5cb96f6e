//! Your attempts at the exercises of chapter 10, *Generating one token at a time*. Check them
//! with `cargo test -p exercises attempts::ch10 -- --ignored`.

// ANCHOR: repeat_kv
use attention::Result;
use ndarray::{Array3, ArrayRef3};

pub fn repeat_kv(kv: &ArrayRef3<f64>, heads: usize) -> Result<Array3<f64>> {
    todo!("query head h gets key/value head h / (H/G); an error when G does not divide H")
}
// ANCHOR_END: repeat_kv

// ANCHOR: cache_bytes
pub fn cache_bytes(
    layers: usize,
    kv_heads: usize,
    d_head: usize,
    bytes_per_element: usize,
    tokens: usize,
    window: Option<usize>,
) -> usize {
    todo!("a key and a value per layer, head and cached token")
}
// ANCHOR_END: cache_bytes

// ANCHOR: slot_positions
pub fn slot_positions(tokens_seen: usize, window: usize) -> Result<Vec<usize>> {
    todo!("slot s holds the last position p < tokens_seen with p mod W = s")
}
// ANCHOR_END: slot_positions

#[cfg(test)]
mod tests {
    use crate::{ch10, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch10 -- --ignored"]
    fn repeat_kv() {
        verdict(ch10::check_repeat_kv(super::repeat_kv));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch10 -- --ignored"]
    fn cache_bytes() {
        verdict(ch10::check_cache_bytes(super::cache_bytes));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch10 -- --ignored"]
    fn slot_positions() {
        verdict(ch10::check_slot_positions(super::slot_positions));
    }
}
