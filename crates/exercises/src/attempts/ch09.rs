//! Your attempts at the exercises of chapter 9, *Where is each word? Position*. Check them
//! with `cargo test -p exercises attempts::ch09 -- --ignored`.

// ANCHOR: sinusoidal_table
use ndarray::Array2;

pub fn sinusoidal_table(len: usize, d_model: usize) -> Array2<f64> {
    todo!("row p, column j: PE(p, j) from the paper's formula; which exponent has column j?")
}
// ANCHOR_END: sinusoidal_table

// ANCHOR: shift
use attention::{AttentionError, Result};
use ndarray::{Array1, ArrayRef1};

pub fn shift(pe: &ArrayRef1<f64>, k: i64) -> Result<Array1<f64>> {
    todo!("PE(p + k) from PE(p) and k alone, with p unknown; and for an odd width?")
}
// ANCHOR_END: shift

// ANCHOR: alibi_slopes
pub fn alibi_slopes(heads: usize) -> Vec<f64> {
    todo!("2^(-8/n) times itself for a power of two n; the reference rule otherwise")
}
// ANCHOR_END: alibi_slopes

#[cfg(test)]
mod tests {
    use crate::{ch09, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch09 -- --ignored"]
    fn sinusoidal_table() {
        verdict(ch09::check_sinusoidal_table(super::sinusoidal_table));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch09 -- --ignored"]
    fn shift() {
        verdict(ch09::check_shift(super::shift));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch09 -- --ignored"]
    fn alibi_slopes() {
        verdict(ch09::check_alibi_slopes(super::alibi_slopes));
    }
}
