//! Your attempts at the exercises of chapter 11, *Gradients: the backward pass of attention*.
//! Check them with `cargo test -p exercises attempts::ch11 -- --ignored`.

// ANCHOR: grad_value_weights
use attention::Result;
use ndarray::{Array2, ArrayRef2};

pub fn grad_value_weights(
    x: &ArrayRef2<f64>,
    weights: &ArrayRef2<f64>,
    grad_out: &ArrayRef2<f64>,
) -> Result<Array2<f64>> {
    todo!("∂ℓ/∂W_V = Xᵀ·Pᵀ·dO, (d_model, d_v); shapes that do not fit are an error")
}
// ANCHOR_END: grad_value_weights

// ANCHOR: softmax_row_backward
pub fn softmax_row_backward(p: &[f64], grad_p: &[f64]) -> Vec<f64> {
    todo!("dsₖ = pₖ·(dpₖ − Σⱼ dpⱼ·pⱼ)")
}
// ANCHOR_END: softmax_row_backward

// ANCHOR: grad_keys
pub fn grad_keys(q: &ArrayRef2<f64>, grad_scores: &ArrayRef2<f64>) -> Result<Array2<f64>> {
    todo!("dK = dSᵀ·Q/√d_k, (L_k, d_k); grad_scores with another number of rows is an error")
}
// ANCHOR_END: grad_keys

#[cfg(test)]
mod tests {
    use crate::{ch11, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch11 -- --ignored"]
    fn grad_value_weights() {
        verdict(ch11::check_grad_value_weights(super::grad_value_weights));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch11 -- --ignored"]
    fn softmax_row_backward() {
        verdict(ch11::check_softmax_row_backward(super::softmax_row_backward));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch11 -- --ignored"]
    fn grad_keys() {
        verdict(ch11::check_grad_keys(super::grad_keys));
    }
}
