//! Your attempts at the exercises of chapter 8, *Attention at scale*. Check them with
//! `cargo test -p exercises attempts::ch08 -- --ignored`.

// ANCHOR: push_score
pub fn push_score(max: f64, sum: f64, x: f64) -> (f64, f64) {
    todo!("rescale the sum when x is a new maximum; a masked x changes nothing")
}
// ANCHOR_END: push_score

// ANCHOR: merge_running
use attention::tiled::Running;

pub fn merge_running(a: Running<f64>, b: Running<f64>) -> Running<f64> {
    todo!("bring both sums to the larger maximum, then add them")
}
// ANCHOR_END: merge_running

// ANCHOR: causal_tiles_visited
pub fn causal_tiles_visited(l: usize, block_q: usize, tile_k: usize) -> usize {
    todo!("per query block, the tiles that start at or before its last query")
}
// ANCHOR_END: causal_tiles_visited

#[cfg(test)]
mod tests {
    use crate::{ch08, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch08 -- --ignored"]
    fn push_score() {
        verdict(ch08::check_push_score(super::push_score));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch08 -- --ignored"]
    fn merge_running() {
        verdict(ch08::check_merge_running(super::merge_running));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch08 -- --ignored"]
    fn causal_tiles_visited() {
        verdict(ch08::check_causal_tiles_visited(super::causal_tiles_visited));
    }
}
