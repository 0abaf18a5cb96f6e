//! Chapter 6, *Multi-head attention*: one head's columns, PyTorch's averaged weights, and
//! loading `nn.MultiheadAttention`'s weights.

use attention::multihead::{MultiHeadAttention, head_width};
use attention::{AttentionError, Result};
use ndarray::{Array2, ArrayRef2, ArrayRef3, Axis, s};

/// The part of a projection `W: (d_model, d_model)` that head `i` (of `heads`) uses: its
/// columns `i·d_head .. (i+1)·d_head`, a `(d_model, d_head)` matrix.
///
/// ```
/// use exercises::ch06::head_columns;
/// use ndarray::Array2;
///
/// let w = Array2::from_shape_fn((4, 4), |(i, j)| (10 * i + j) as f64);
/// let head_1 = head_columns(&w, 2, 1).unwrap();
/// assert_eq!(head_1.dim(), (4, 2));
/// assert_eq!(head_1[[0, 0]], 2.0); // column 2 of W
/// ```
// ANCHOR: head_columns
pub fn head_columns(w: &ArrayRef2<f64>, heads: usize, i: usize) -> Result<Array2<f64>> {
    let d_head = head_width(w.ncols(), heads)?;
    if i >= heads {
        return Err(AttentionError::shape(
            "head",
            &[i],
            &format!("a head index below {heads} was expected"),
        ));
    }
    Ok(w.slice(s![.., i * d_head..(i + 1) * d_head]).to_owned())
}
// ANCHOR_END: head_columns

/// The heads' weights `(heads, L_q, L_k)` averaged into one `(L_q, L_k)` matrix, which is
/// what `nn.MultiheadAttention` returns unless `average_attn_weights=False`.
///
/// ```
/// use exercises::ch06::average_heads;
/// use ndarray::array;
///
/// let heads = array![[[1.0, 0.0]], [[0.5, 0.5]]]; // 2 heads, 1 query, 2 keys
/// assert_eq!(average_heads(&heads), array![[0.75, 0.25]]);
/// ```
// ANCHOR: average_heads
pub fn average_heads(weights: &ArrayRef3<f64>) -> Array2<f64> {
    weights.mean_axis(Axis(0)).expect("at least one head")
}
// ANCHOR_END: average_heads

/// A layer from the weights of PyTorch's `nn.MultiheadAttention(d_model, heads, bias=False)`:
/// `in_proj_weight: (3·d_model, d_model)` holds `[W_q; W_k; W_v]` stacked by rows, each in
/// `nn.Linear`'s `(out, in)` layout, and `out_proj_weight: (d_model, d_model)` likewise. This
/// crate multiplies on the right (`X · W`), so every block is transposed.
///
/// ```
/// use exercises::ch06::from_pytorch;
/// use ndarray::{concatenate, Array2, Axis};
///
/// let eye = Array2::<f64>::eye(4);
/// let in_proj = concatenate![Axis(0), eye, 2.0 * &eye, 3.0 * &eye]; // (12, 4)
/// let mha = from_pytorch(&in_proj, &eye, 2).unwrap();
/// assert_eq!(mha.projections()[2].weight(), 3.0 * &eye);
/// ```
// ANCHOR: from_pytorch
pub fn from_pytorch(
    in_proj_weight: &ArrayRef2<f64>,
    out_proj_weight: &ArrayRef2<f64>,
    heads: usize,
) -> Result<MultiHeadAttention<f64>> {
    let d = in_proj_weight.ncols();
    if in_proj_weight.nrows() != 3 * d {
        let expected = format!("a shape (3·d_model, d_model) = ({}, {d}) was expected", 3 * d);
        return Err(AttentionError::shape(
            "in_proj_weight",
            in_proj_weight.shape(),
            &expected,
        ));
    }
    let block = |b: usize| in_proj_weight.slice(s![b * d..(b + 1) * d, ..]).t().to_owned();
    MultiHeadAttention::new(
        block(0),
        block(1),
        block(2),
        out_proj_weight.t().to_owned(),
        heads,
    )
}
// ANCHOR_END: from_pytorch

#[cfg(test)]
mod tests {
    use super::*;
    use attention::multihead::split_heads;
    use ndarray::{Array3, concatenate};
    use rand::{SeedableRng, rngs::StdRng};

    #[test]
    fn head_columns_give_that_heads_queries() {
        let mut rng = StdRng::seed_from_u64(1);
        let mha = MultiHeadAttention::<f64>::random(6, 3, &mut rng).unwrap();
        let w_q = mha.projections()[0].weight();
        let x = Array2::from_shape_fn((4, 6), |(i, j)| ((3 * i + j) % 5) as f64 - 2.0);
        let split = split_heads(&x.dot(w_q), 3).unwrap(); // (heads, L, d_head)
        for h in 0..3 {
            let own = x.dot(&head_columns(w_q, 3, h).unwrap());
            assert_eq!(own, split.index_axis(Axis(0), h));
        }
        assert!(head_columns(w_q, 3, 3).is_err());
        assert!(head_columns(w_q, 4, 0).is_err());
    }

    #[test]
    fn averaged_weights_are_still_distributions() {
        let mut rng = StdRng::seed_from_u64(2);
        let mha = MultiHeadAttention::<f64>::random(8, 4, &mut rng).unwrap();
        let x = Array2::from_shape_fn((5, 8), |(i, j)| ((i * j) % 7) as f64 / 3.0);
        let out = mha.forward(&x, None).unwrap();
        let avg = average_heads(&out.weights);
        assert_eq!(avg.dim(), (5, 5));
        for row in avg.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-12);
        }
        let manual = (0..4)
            .map(|h| out.weights.index_axis(Axis(0), h).to_owned())
            .fold(Array2::<f64>::zeros((5, 5)), |a, w| a + w)
            / 4.0;
        assert!((avg - manual).iter().all(|d| d.abs() < 1e-15));
        let one = Array3::from_elem((1, 2, 2), 0.5);
        assert_eq!(average_heads(&one), Array2::from_elem((2, 2), 0.5));
    }

    #[test]
    fn pytorch_layout_is_transposed_per_block() {
        let mut rng = StdRng::seed_from_u64(3);
        let reference = MultiHeadAttention::<f64>::random(4, 2, &mut rng).unwrap();
        let [w_q, w_k, w_v, w_o] = reference.projections().map(|w| w.weight().clone());
        // What PyTorch would store: each block as (out, in), i.e. transposed.
        let in_proj = concatenate![Axis(0), w_q.t(), w_k.t(), w_v.t()];
        let loaded = from_pytorch(&in_proj, &w_o.t(), 2).unwrap();
        assert_eq!(loaded, reference);
        // Forgetting the transpose gives a different layer.
        let wrong = MultiHeadAttention::new(
            w_q.t().to_owned(),
            w_k.t().to_owned(),
            w_v.t().to_owned(),
            w_o.t().to_owned(),
            2,
        )
        .unwrap();
        assert_ne!(wrong, reference);
        // A (d_model, d_model) matrix is not an in_proj_weight.
        let err = from_pytorch(&w_q, &w_o, 2).unwrap_err().to_string();
        assert!(err.contains("in_proj_weight") && err.contains("(12, 4)"), "{err}");
        assert!(from_pytorch(&in_proj, &w_o, 3).is_err());
    }
}
