//! Your attempts at the exercises of chapter 5, *Softmax*. Check them with
//! `cargo test -p exercises attempts::ch05 -- --ignored`.

// ANCHOR: softmax_temperature
use ndarray::{Array1, ArrayRef1};

pub fn softmax_temperature(scores: &ArrayRef1<f64>, t: f64) -> Array1<f64> {
    todo!("panic unless t > 0; divide by t, then the stable softmax")
}
// ANCHOR_END: softmax_temperature

// ANCHOR: log_softmax
pub fn log_softmax(scores: &ArrayRef1<f64>) -> Array1<f64> {
    todo!("subtract the maximum, then the log of the sum")
}
// ANCHOR_END: log_softmax

// ANCHOR: softmax_jacobian
use ndarray::Array2;

pub fn softmax_jacobian(p: &ArrayRef1<f64>) -> Array2<f64> {
    todo!("p_i (delta_ij - p_j)")
}
// ANCHOR_END: softmax_jacobian

#[cfg(test)]
mod tests {
    use crate::{ch05, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch05 -- --ignored"]
    fn softmax_temperature() {
        verdict(ch05::check_softmax_temperature(super::softmax_temperature));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch05 -- --ignored"]
    fn log_softmax() {
        verdict(ch05::check_log_softmax(super::log_softmax));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch05 -- --ignored"]
    fn softmax_jacobian() {
        verdict(ch05::check_softmax_jacobian(super::softmax_jacobian));
    }
}
