//! Your attempts at the exercises of chapter 7, *The complete layer*. Check them with
//! `cargo test -p exercises attempts::ch07 -- --ignored`.

// ANCHOR: decoder_mask
use attention::{Result, mask::Mask};

pub fn decoder_mask(valid_lengths: &[usize], len: usize) -> Result<Mask> {
    todo!("causal and padding")
}
// ANCHOR_END: decoder_mask

// ANCHOR: one_token_at_a_time
use ndarray::{Array2, ArrayRef2};

pub fn one_token_at_a_time(
    q: &ArrayRef2<f64>,
    k: &ArrayRef2<f64>,
    v: &ArrayRef2<f64>,
) -> Result<Array2<f64>> {
    todo!("for t in 0..L: attend with query t over keys and values 0..=t")
}
// ANCHOR_END: one_token_at_a_time

// ANCHOR: decoder_step
use attention::self_attention::SelfAttention;

pub fn decoder_step(
    self_layer: &SelfAttention<f64>,
    cross_layer: &SelfAttention<f64>,
    x_dec: &ArrayRef2<f64>,
    x_enc: &ArrayRef2<f64>,
) -> Result<Array2<f64>> {
    todo!("causal self-attention, then cross-attention to x_enc")
}
// ANCHOR_END: decoder_step

#[cfg(test)]
mod tests {
    use crate::{ch07, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch07 -- --ignored"]
    fn decoder_mask() {
        verdict(ch07::check_decoder_mask(super::decoder_mask));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch07 -- --ignored"]
    fn one_token_at_a_time() {
        verdict(ch07::check_one_token_at_a_time(super::one_token_at_a_time));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch07 -- --ignored"]
    fn decoder_step() {
        verdict(ch07::check_decoder_step(super::decoder_step));
    }
}
