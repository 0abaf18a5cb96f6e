//! Your attempts at the exercises of chapter 10, *Generating one token at a time*. Check them
//! with `cargo test -p exercises attempts::ch10 -- --ignored`.

// ANCHOR: pool_kv_heads
use attention::Result;
use ndarray::{Array2, ArrayRef2};

pub fn pool_kv_heads(
    w: &ArrayRef2<f64>,
    heads: usize,
    kv_heads: usize,
) -> Result<Array2<f64>> {
    todo!("(d_model, G·d_head), d_head columns per key/value head; a bad H or G: an error")
}
// ANCHOR_END: pool_kv_heads

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
    todo!("one position per filled slot, in slot order; W = 0 is an error")
}
// ANCHOR_END: slot_positions

#[cfg(test)]
mod tests {
    use crate::{ch10, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch10 -- --ignored"]
    fn pool_kv_heads() {
        verdict(ch10::check_pool_kv_heads(super::pool_kv_heads));
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
