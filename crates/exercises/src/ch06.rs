//! Chapter 6, *Multi-head attention*: one head's columns, PyTorch's averaged weights, and
//! loading `nn.MultiheadAttention`'s weights.

use attention::multihead::{MultiHeadAttention, head_width, split_heads};
use attention::{AttentionError, Result};
use ndarray::{Array2, Array3, ArrayRef2, ArrayRef3, Axis, array, concatenate, s};
use rand::{SeedableRng, rngs::StdRng};

use crate::{call, close, within};

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

/// Checks an answer to exercise 6.1 ([`head_columns`]): for `W: (6, 6)` and 3 heads, head
/// `h` gets exactly the columns `2h .. 2h + 2`, and `X` times them is head `h` of
/// `split_heads(X·W, 3)`; a head index of 3, a number of heads that does not divide 6, and 0
/// heads must be errors, not panics.
///
/// ```
/// use exercises::ch06::{check_head_columns, head_columns};
/// use ndarray::{s, ArrayRef2};
///
/// assert_eq!(check_head_columns(head_columns), Ok(()));
/// // Rows instead of columns: a (d_head, d_model) matrix.
/// let rows = |w: &ArrayRef2<f64>, heads: usize, i: usize| {
///     let d = w.ncols() / heads;
///     Ok(w.slice(s![i * d..(i + 1) * d, ..]).to_owned())
/// };
/// assert!(check_head_columns(rows).is_err());
/// ```
pub fn check_head_columns(
    head_columns: impl Fn(&ArrayRef2<f64>, usize, usize) -> Result<Array2<f64>>,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(1);
    let mha = MultiHeadAttention::<f64>::random(6, 3, &mut rng).map_err(|e| e.to_string())?;
    let w = mha.projections()[0].weight();
    let x = Array2::from_shape_fn((4, 6), |(i, j)| ((3 * i + j) % 5) as f64 - 2.0);
    let split = split_heads(&x.dot(w), 3).map_err(|e| e.to_string())?; // (heads, L, d_head)
    for h in 0..3 {
        let what = format!("head_columns(w, 3, {h}) for a w: (6, 6)");
        let got = call(&what, || head_columns(w, 3, h))?
            .map_err(|e| format!("{what} returned the error \"{e}\""))?;
        let columns = w.slice(s![.., 2 * h..2 * h + 2]);
        close(
            &format!("{what}, columns {}..{} of w,", 2 * h, 2 * h + 2),
            &got,
            &columns,
            0.0,
        )?;
        let own = x.dot(&got);
        let from_split = split.index_axis(Axis(0), h);
        close(
            &format!("X · {what}, head {h} of split_heads(X·w, 3),"),
            &own,
            &from_split,
            0.0,
        )?;
    }
    for (heads, i, why) in [
        (4, 0, "4 heads do not divide d_model = 6"),
        (3, 3, "there is no head 3 of 3"),
        (0, 0, "there are no heads"),
    ] {
        let what = format!("head_columns(w, {heads}, {i}) for a w: (6, 6)");
        let result = call(&what, || head_columns(w, heads, i))
            .map_err(|panic| format!("{panic}; it should return an error ({why})"))?;
        if let Ok(got) = result {
            return Err(format!("{what} returned\n{got}\ninstead of an error ({why})"));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 6.2 ([`average_heads`]): the mean over the heads of 4 heads'
/// `(5, 5)` weights (within `1e-15`, rows still summing to 1 within `1e-12`), of a
/// cross-attention `(2, 2, 3)` stack, and of a single head.
///
/// ```
/// use exercises::ch06::{average_heads, check_average_heads};
/// use ndarray::{ArrayRef3, Axis};
///
/// assert_eq!(check_average_heads(average_heads), Ok(()));
/// // The mean over the queries instead of the heads.
/// let queries = |w: &ArrayRef3<f64>| w.mean_axis(Axis(1)).unwrap();
/// assert!(check_average_heads(queries).is_err());
/// ```
pub fn check_average_heads(
    average_heads: impl Fn(&ArrayRef3<f64>) -> Array2<f64>,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(2);
    let mha = MultiHeadAttention::<f64>::random(8, 4, &mut rng).map_err(|e| e.to_string())?;
    let x = Array2::from_shape_fn((5, 8), |(i, j)| ((i * j) % 7) as f64 / 3.0);
    let weights = mha.forward(&x, None).map_err(|e| e.to_string())?.weights; // (4, 5, 5)
    let cross =
        array![[[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]], [[0.0, 0.5, 0.5], [0.2, 0.2, 0.6]]];
    // The mean of one head is that head, exactly.
    let cases: [(Array3<f64>, &str, f64); 3] = [
        (weights, "the (4, 5, 5) weights of 4 heads over 5 tokens", 1e-15),
        (cross, "2 heads' (2, 3) cross-attention weights", 1e-15),
        (Array3::from_elem((1, 2, 2), 0.5), "one head", 0.0),
    ];
    for (w, name, tolerance) in cases {
        let what = format!("average_heads(w) for {name}");
        let got = call(&what, || average_heads(&w))?;
        let heads = w.len_of(Axis(0));
        let mut expected = Array2::<f64>::zeros((w.shape()[1], w.shape()[2]));
        for h in 0..heads {
            expected += &w.index_axis(Axis(0), h);
        }
        expected /= heads as f64;
        close(&what, &got, &expected, tolerance)?;
        for (i, row) in got.rows().into_iter().enumerate() {
            if !within(row.sum(), 1.0, 1e-12) {
                return Err(format!("row {i} of {what} sums to {}, not 1", row.sum()));
            }
        }
    }
    Ok(())
}

/// Checks an answer to exercise 6.3 ([`from_pytorch`]): weights laid out as PyTorch stores
/// them must load into the very layer they came from (for `d_model = 4` with 2 heads and
/// `d_model = 6` with 3); a `(4, 4)` `in_proj_weight` must be refused with an error that names
/// `in_proj_weight` and the shape it expected, `(12, 4)`; 3 heads for `d_model = 4` must be an
/// error.
///
/// ```
/// use exercises::ch06::{check_from_pytorch, from_pytorch};
/// use attention::multihead::MultiHeadAttention;
/// use ndarray::{s, ArrayRef2};
///
/// assert_eq!(check_from_pytorch(from_pytorch), Ok(()));
/// // Using PyTorch's (out, in) blocks as they are: square, so nothing complains.
/// let untransposed = |in_proj: &ArrayRef2<f64>, out_proj: &ArrayRef2<f64>, heads: usize| {
///     let d = in_proj.ncols();
///     let block = |b: usize| in_proj.slice(s![b * d..(b + 1) * d, ..]).to_owned();
///     MultiHeadAttention::new(block(0), block(1), block(2), out_proj.to_owned(), heads)
/// };
/// assert!(check_from_pytorch(untransposed).is_err());
/// ```
pub fn check_from_pytorch(
    from_pytorch: impl Fn(
        &ArrayRef2<f64>,
        &ArrayRef2<f64>,
        usize,
    ) -> Result<MultiHeadAttention<f64>>,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(3);
    for (d_model, heads) in [(4, 2), (6, 3)] {
        let reference = MultiHeadAttention::<f64>::random(d_model, heads, &mut rng)
            .map_err(|e| e.to_string())?;
        let [w_q, w_k, w_v, w_o] = reference.projections().map(|w| w.weight().clone());
        // What PyTorch stores: each block as (out, in), i.e. transposed.
        let in_proj = concatenate![Axis(0), w_q.t(), w_k.t(), w_v.t()];
        let out_proj = w_o.t();
        let what = format!(
            "from_pytorch(in_proj_weight, out_proj_weight, {heads}) for d_model = {d_model}"
        );
        let loaded = call(&what, || from_pytorch(&in_proj, &out_proj, heads))?
            .map_err(|e| format!("{what} returned the error \"{e}\""))?;
        let sources = [
            ("W_Q", "block 0 of in_proj_weight's rows, transposed", w_q.view()),
            ("W_K", "block 1 of in_proj_weight's rows, transposed", w_k.view()),
            ("W_V", "block 2 of in_proj_weight's rows, transposed", w_v.view()),
            ("W_O", "out_proj_weight, transposed", w_o.view()),
        ];
        for ((name, source, expected), got) in sources.into_iter().zip(loaded.projections()) {
            close(&format!("{name} of {what} ({source})"), got.weight(), &expected, 0.0)?;
        }
        if loaded.heads() != heads {
            return Err(format!("{what} has {} heads, not {heads}", loaded.heads()));
        }
        if d_model == 4 {
            let square = w_q.t();
            let what = "from_pytorch(w, out_proj_weight, 2) with a w: (4, 4)";
            let expected = "an error naming in_proj_weight and the shape it expected, (12, 4)";
            let result = call(what, || from_pytorch(&square, &out_proj, 2))
                .map_err(|panic| format!("{panic}; it should return {expected}"))?;
            let message = match result {
                Ok(_) => return Err(format!("{what} returned a layer instead of an error")),
                Err(e) => e.to_string(),
            };
            if !(message.contains("in_proj_weight") && message.contains("(12, 4)")) {
                return Err(format!(
                    "{what} returned the error \"{message}\", not {expected}"
                ));
            }
            let what = "from_pytorch(in_proj_weight, out_proj_weight, 3) for d_model = 4";
            let result = call(what, || from_pytorch(&in_proj, &out_proj, 3))
                .map_err(|panic| format!("{panic}; it should return an error"))?;
            if result.is_ok() {
                return Err(format!("{what} returned a layer: 3 heads do not divide 4"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn head_columns_passes_and_classic_mistakes_fail() {
        assert_eq!(check_head_columns(head_columns), Ok(()));
        // Rows instead of columns.
        let rows = |w: &ArrayRef2<f64>, heads: usize, i: usize| {
            let d = head_width(w.ncols(), heads)?;
            Ok(w.slice(s![i * d..(i + 1) * d, ..]).to_owned())
        };
        rejects(check_head_columns(rows), "has shape [2, 6], expected [6, 2]");
        // Every heads-th column, as if the heads were interleaved: a reshape without the swap.
        let strided = |w: &ArrayRef2<f64>, heads: usize, i: usize| {
            head_width(w.ncols(), heads)?;
            Ok(w.slice(s![.., i..;heads]).to_owned())
        };
        rejects(check_head_columns(strided), "head_columns(w, 3, 0) for a w: (6, 6), columns");
        // Integer division without a check: 6 / 4 = 1 column for each of 4 heads.
        let unchecked = |w: &ArrayRef2<f64>, heads: usize, i: usize| {
            let d = w.ncols() / heads;
            Ok(w.slice(s![.., i * d..(i + 1) * d]).to_owned())
        };
        rejects(
            check_head_columns(unchecked),
            "instead of an error (4 heads do not divide d_model = 6)",
        );
        // The divisibility checked, the index not.
        let index_unchecked = |w: &ArrayRef2<f64>, heads: usize, i: usize| {
            let d = head_width(w.ncols(), heads)?;
            Ok(w.slice(s![.., i * d..(i + 1) * d]).to_owned())
        };
        rejects(
            check_head_columns(index_unchecked),
            "head_columns(w, 3, 3) for a w: (6, 6) panicked",
        );
    }

    #[test]
    fn average_heads_passes_and_classic_mistakes_fail() {
        assert_eq!(check_average_heads(average_heads), Ok(()));
        // The mean over the wrong axis, the queries or the keys: (heads, L) instead of
        // (L_q, L_k), a shape that only looks right when there are as many heads as tokens,
        // as in the (2, 2, 3) case.
        let queries = |w: &ArrayRef3<f64>| w.mean_axis(Axis(1)).unwrap();
        rejects(check_average_heads(queries), "has shape [4, 5], expected [5, 5]");
        let two_queries =
            array![[[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]], [[0.0, 0.5, 0.5], [0.2, 0.2, 0.6]]];
        assert_eq!(queries(&two_queries).dim(), average_heads(&two_queries).dim());
        let keys = |w: &ArrayRef3<f64>| w.mean_axis(Axis(2)).unwrap();
        rejects(check_average_heads(keys), "has shape [4, 5], expected [5, 5]");
        // The sum instead of the mean: rows sum to the number of heads.
        let sum = |w: &ArrayRef3<f64>| w.sum_axis(Axis(0));
        rejects(check_average_heads(sum), "for the (4, 5, 5) weights of 4 heads");
        // One head taken for the average.
        let first = |w: &ArrayRef3<f64>| w.index_axis(Axis(0), 0).to_owned();
        rejects(check_average_heads(first), "for the (4, 5, 5) weights of 4 heads");
    }

    #[test]
    fn from_pytorch_passes_and_classic_mistakes_fail() {
        assert_eq!(check_from_pytorch(from_pytorch), Ok(()));
        let err = from_pytorch(&Array2::eye(4), &Array2::eye(4), 2).unwrap_err().to_string();
        assert!(err.contains("in_proj_weight") && err.contains("(12, 4)"), "{err}");

        fn load(
            in_proj: &ArrayRef2<f64>,
            out_proj: &ArrayRef2<f64>,
            heads: usize,
            transpose_in: bool,
            transpose_out: bool,
        ) -> Result<MultiHeadAttention<f64>> {
            let d = in_proj.ncols();
            let block = |b: usize| {
                let rows = in_proj.slice(s![b * d..(b + 1) * d, ..]);
                if transpose_in { rows.t().to_owned() } else { rows.to_owned() }
            };
            let w_o =
                if transpose_out { out_proj.t().to_owned() } else { out_proj.to_owned() };
            MultiHeadAttention::new(block(0), block(1), block(2), w_o, heads)
        }
        // No transposes at all, the classic: square matrices, so nothing complains.
        let none = |i: &ArrayRef2<f64>, o: &ArrayRef2<f64>, h| load(i, o, h, false, false);
        rejects(check_from_pytorch(none), "W_Q of from_pytorch");
        // in_proj_weight's blocks transposed, out_proj.weight forgotten.
        let out_forgotten =
            |i: &ArrayRef2<f64>, o: &ArrayRef2<f64>, h| load(i, o, h, true, false);
        rejects(check_from_pytorch(out_forgotten), "W_O of from_pytorch");
        // No shape check: slicing rows 4..8 of a (4, 4) matrix panics.
        let unchecked = |i: &ArrayRef2<f64>, o: &ArrayRef2<f64>, h| load(i, o, h, true, true);
        rejects(check_from_pytorch(unchecked), "with a w: (4, 4) panicked");
        // A shape check whose message does not say what was expected.
        let vague = |i: &ArrayRef2<f64>, o: &ArrayRef2<f64>, h: usize| {
            if i.nrows() != 3 * i.ncols() {
                return Err(AttentionError::shape("weights", i.shape(), "wrong shape"));
            }
            load(i, o, h, true, true)
        };
        rejects(check_from_pytorch(vague), "not an error naming in_proj_weight");
    }
}
