//! Your attempts at the exercises of chapter 6, *Multi-head attention*. Check them with
//! `cargo test -p exercises attempts::ch06 -- --ignored`.

// ANCHOR: head_columns
use attention::Result;
use ndarray::{Array2, ArrayRef2};

pub fn head_columns(w: &ArrayRef2<f64>, heads: usize, i: usize) -> Result<Array2<f64>> {
    todo!("columns i·d_head .. (i+1)·d_head, with errors for bad heads or i")
}
// ANCHOR_END: head_columns

// ANCHOR: average_heads
use ndarray::ArrayRef3;

pub fn average_heads(weights: &ArrayRef3<f64>) -> Array2<f64> {
    todo!("the mean over the first axis")
}
// ANCHOR_END: average_heads

// ANCHOR: from_pytorch
use attention::multihead::MultiHeadAttention;

pub fn from_pytorch(
    in_proj_weight: &ArrayRef2<f64>,
    out_proj_weight: &ArrayRef2<f64>,
    heads: usize,
) -> Result<MultiHeadAttention<f64>> {
    todo!("three row blocks, each transposed; out_proj transposed; an error for a bad shape")
}
// ANCHOR_END: from_pytorch

#[cfg(test)]
mod tests {
    use crate::{ch06, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch06 -- --ignored"]
    fn head_columns() {
        verdict(ch06::check_head_columns(super::head_columns));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch06 -- --ignored"]
    fn average_heads() {
        verdict(ch06::check_average_heads(super::average_heads));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch06 -- --ignored"]
    fn from_pytorch() {
        verdict(ch06::check_from_pytorch(super::from_pytorch));
    }
}
