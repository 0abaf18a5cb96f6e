//! Your attempts at the exercises of chapter 11, *Gradients: the backward pass of attention*.
//! Check them with `cargo test -p exercises attempts::ch11 -- --ignored`.

// ANCHOR: d_value_weights
use attention::Result;
use ndarray::{Array2, ArrayRef2};

pub fn d_value_weights(
    x: &ArrayRef2<f64>,
    weights: &ArrayRef2<f64>,
    d_out: &ArrayRef2<f64>,
) -> Result<Array2<f64>> {
    todo!("∂ℓ/∂W_V = Xᵀ·Pᵀ·dO, (d_model, d_v); shapes that do not fit are an error")
}
// ANCHOR_END: d_value_weights

// ANCHOR: softmax_row_backward
pub fn softmax_row_backward(p: &[f64], d_p: &[f64]) -> Vec<f64> {
    todo!("dsₖ = pₖ·(dpₖ − Σⱼ dpⱼ·pⱼ)")
}
// ANCHOR_END: softmax_row_backward

// ANCHOR: d_keys
pub fn d_keys(q: &ArrayRef2<f64>, d_scores: &ArrayRef2<f64>) -> Result<Array2<f64>> {
    todo!("dK = dSᵀ·Q/√d_k, (L_k, d_k); a d_scores with another number of rows is an error")
}
// ANCHOR_END: d_keys

#[cfg(test)]
mod tests {
    use crate::{ch11, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch11 -- --ignored"]
    fn d_value_weights() {
        verdict(ch11::check_d_value_weights(super::d_value_weights));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch11 -- --ignored"]
    fn softmax_row_backward() {
        verdict(ch11::check_softmax_row_backward(super::softmax_row_backward));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch11 -- --ignored"]
    fn d_keys() {
        verdict(ch11::check_d_keys(super::d_keys));
    }
}
