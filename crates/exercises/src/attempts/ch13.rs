//! Your attempts at the exercises of chapter 13, *Inside a real model*. Check them with
//! `cargo test -p exercises attempts::ch13 -- --ignored`.

// ANCHOR: exact_gelu
pub fn exact_gelu(x: f64) -> f64 {
    todo!("x·Φ(x) = x/2·(1 + erf(x/√2)), with libm::erf")
}
// ANCHOR_END: exact_gelu

// ANCHOR: linear_from_torch
use attention::{Result, projection::Linear};
use ndarray::{ArrayRef1, ArrayRef2};

pub fn linear_from_torch(
    weight: &ArrayRef2<f32>,
    bias: &ArrayRef1<f32>,
) -> Result<Linear<f32>> {
    todo!("weight is (out, in) and PyTorch computes x · weightᵀ + bias; W is (d_in, d_out)")
}
// ANCHOR_END: linear_from_torch

// ANCHOR: masked_mean_pool
use ndarray::{Array2, ArrayRef3};

pub fn masked_mean_pool(hidden: &ArrayRef3<f64>, lengths: &[usize]) -> Array2<f64> {
    todo!("row b: the mean of item b's first lengths[b] rows (each length is 1 to L)")
}
// ANCHOR_END: masked_mean_pool

// ANCHOR: previous_token_score
pub fn previous_token_score(weights: &ArrayRef2<f64>) -> f64 {
    todo!("the mean of weights[i, i − 1] over the queries i = 1 … L − 1 (L ≥ 2)")
}
// ANCHOR_END: previous_token_score

#[cfg(test)]
mod tests {
    use crate::{ch13, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch13 -- --ignored"]
    fn exact_gelu() {
        verdict(ch13::check_exact_gelu(super::exact_gelu));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch13 -- --ignored"]
    fn linear_from_torch() {
        verdict(ch13::check_linear_from_torch(super::linear_from_torch));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch13 -- --ignored"]
    fn masked_mean_pool() {
        verdict(ch13::check_masked_mean_pool(super::masked_mean_pool));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch13 -- --ignored"]
    fn previous_token_score() {
        verdict(ch13::check_previous_token_score(super::previous_token_score));
    }
}
