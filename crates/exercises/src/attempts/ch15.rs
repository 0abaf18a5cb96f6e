//! Your attempts at the exercises of chapter 15, *A model that writes*. Check them with
//! `cargo test -p exercises attempts::ch15 -- --ignored`.

// ANCHOR: layer_norm_backward
pub fn layer_norm_backward(x: &[f64], gamma: &[f64], grad_y: &[f64], eps: f64) -> Vec<f64> {
    todo!("g = grad_y ⊙ γ; grad_x = (g − mean(g) − x̂ ⊙ mean(g ⊙ x̂)) / σ, σ = √(var + eps)")
}
// ANCHOR_END: layer_norm_backward

// ANCHOR: decays
pub fn decays(name: &str, shape: &[usize]) -> bool {
    todo!("nanoGPT decays the matrices and the two tables, never a gain, a shift or a bias")
}
// ANCHOR_END: decays

// ANCHOR: clip_global
use ndarray::ArrayD;

pub fn clip_global(grads: &mut [ArrayD<f64>], max_norm: f64) -> f64 {
    todo!(
        "norm = √(Σ g²) over every tensor; below 1, max_norm / (norm + 1e-6) scales them all"
    )
}
// ANCHOR_END: clip_global

#[cfg(test)]
mod tests {
    use crate::{ch15, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch15 -- --ignored"]
    fn layer_norm_backward() {
        verdict(ch15::check_layer_norm_backward(super::layer_norm_backward));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch15 -- --ignored"]
    fn decays() {
        verdict(ch15::check_decays(super::decays));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch15 -- --ignored"]
    fn clip_global() {
        verdict(ch15::check_clip_global(super::clip_global));
    }
}
