//! Chapter 11, *Gradients: the backward pass of attention*: the gradient of a value
//! projection, the backward pass of one softmax row, and the gradient of the keys.

use attention::{AttentionError, Result};
use ndarray::{Array2, ArrayRef2, array};

use crate::{call, close, refuses};

/// Exercise 11.1: the gradient of the loss with respect to `W_V`, for one head whose output is
/// `O = P·V` with `V = X·W_V`. `x: (L_k, d_model)` is the sequence the values are projected
/// from, `weights: (L_q, L_k)` the attention weights `P` (which do not depend on `W_V`: hold
/// them fixed) and `grad_out: (L_q, d_v)` the gradient of the output. The answer is
/// `∂ℓ/∂W_V = Xᵀ·Pᵀ·dO: (d_model, d_v)`. Operands whose shapes do not fit are an error.
///
/// ```
/// use exercises::ch11::grad_value_weights;
/// use ndarray::array;
///
/// // One query with weights (0.25, 0.75) over two tokens x₀ = (1, 0), x₁ = (0, 2): the
/// // output is 0.25·x₀·W_V + 0.75·x₁·W_V, so with dO = 1 the gradient is
/// // 0.25·x₀ + 0.75·x₁ = (0.25, 1.5), as a column.
/// let x = array![[1.0, 0.0], [0.0, 2.0]];
/// let grad_w_v = grad_value_weights(&x, &array![[0.25, 0.75]], &array![[1.0]]).unwrap();
/// assert_eq!(grad_w_v, array![[0.25], [1.5]]);
/// assert!(grad_value_weights(&x, &array![[0.25, 0.75, 0.0]], &array![[1.0]]).is_err());
/// ```
// ANCHOR: grad_value_weights
pub fn grad_value_weights(
    x: &ArrayRef2<f64>,
    weights: &ArrayRef2<f64>,
    grad_out: &ArrayRef2<f64>,
) -> Result<Array2<f64>> {
    let ((l_k, d_model), (l_q, keys), (rows, d_v)) = (x.dim(), weights.dim(), grad_out.dim());
    if keys != l_k {
        return Err(AttentionError::mismatch("weights", keys, "x", l_k, "L_k"));
    }
    if rows != l_q {
        return Err(AttentionError::mismatch("weights", l_q, "grad_out", rows, "L_q"));
    }
    // ∂ℓ/∂W_V[r, c] = Σᵢ Σⱼ dO[i, c] · P[i, j] · X[j, r]: V[j, c] = Σ_r X[j, r]·W_V[r, c]
    // reaches the output row i with the weight P[i, j].
    Ok(Array2::from_shape_fn((d_model, d_v), |(r, c)| {
        let mut sum = 0.0;
        for i in 0..l_q {
            for j in 0..l_k {
                sum += grad_out[[i, c]] * weights[[i, j]] * x[[j, r]];
            }
        }
        sum
    }))
}
// ANCHOR_END: grad_value_weights

/// Exercise 11.2: the backward pass of softmax for one row: from the weights `p` and the
/// gradient of the weights `grad_p` (the same length), the gradient of the scores,
/// `dsₖ = pₖ · (dpₖ − Σⱼ dpⱼ·pⱼ)`. A masked key has `pₖ = 0`; a row with no visible key is
/// all zeros.
///
/// ```
/// use exercises::ch11::softmax_row_backward;
///
/// // Two keys at 0.5 each: the weighted mean of dP is 0.5.
/// assert_eq!(softmax_row_backward(&[0.5, 0.5], &[1.0, 0.0]), [0.25, -0.25]);
/// // One visible key: its weight is 1 whatever the scores, so nothing moves it.
/// assert_eq!(softmax_row_backward(&[0.0, 1.0], &[5.0, 2.0]), [0.0, 0.0]);
/// ```
// ANCHOR: softmax_row_backward
pub fn softmax_row_backward(p: &[f64], grad_p: &[f64]) -> Vec<f64> {
    let mean: f64 = p.iter().zip(grad_p).map(|(p, dp)| p * dp).sum(); // dP weighted by P
    p.iter().zip(grad_p).map(|(p, dp)| p * (dp - mean)).collect()
}
// ANCHOR_END: softmax_row_backward

/// Exercise 11.3: the gradient of the keys, `dK = dSᵀ·Q/√d_k: (L_k, d_k)`, from the queries
/// `q: (L_q, d_k)` and the gradient `grad_scores: (L_q, L_k)` of the *scaled* scores
/// `S = Q·Kᵀ/√d_k`. A `grad_scores` with another number of rows than `q` is an error.
///
/// ```
/// use exercises::ch11::grad_keys;
/// use ndarray::array;
///
/// // One query (2, 0, 0, 0), d_k = 4, √d_k = 2; two keys with dS = (1, −1).
/// let q = array![[2.0, 0.0, 0.0, 0.0]];
/// let d_k = grad_keys(&q, &array![[1.0, -1.0]]).unwrap();
/// assert_eq!(d_k, array![[1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]]);
/// assert!(grad_keys(&q, &array![[1.0], [2.0]]).is_err());
/// ```
// ANCHOR: grad_keys
pub fn grad_keys(q: &ArrayRef2<f64>, grad_scores: &ArrayRef2<f64>) -> Result<Array2<f64>> {
    let ((l_q, d_k), (rows, l_k)) = (q.dim(), grad_scores.dim());
    if rows != l_q {
        return Err(AttentionError::mismatch("grad_scores", rows, "q", l_q, "L_q"));
    }
    let sqrt_d_k = (d_k as f64).sqrt();
    // S[i, j] = Σ_c Q[i, c]·K[j, c]/√d_k, so ∂ℓ/∂K[j, c] = Σᵢ dS[i, j]·Q[i, c]/√d_k.
    Ok(Array2::from_shape_fn((l_k, d_k), |(j, c)| {
        (0..l_q).map(|i| grad_scores[[i, j]] * q[[i, c]]).sum::<f64>() / sqrt_d_k
    }))
}
// ANCHOR_END: grad_keys

/// A small matrix whose entries `(i, j)` are all different and not symmetric in any way:
/// `sin(1 + 3i + 7j + seed)`, between −1 and 1.
fn distinct(rows: usize, cols: usize, seed: usize) -> Array2<f64> {
    Array2::from_shape_fn((rows, cols), |(i, j)| ((1 + 3 * i + 7 * j + seed) as f64).sin())
}

/// Causal weights `(L, L)`: row `i` spreads its weight over keys `0..=i`, more on the later
/// ones (`j + 1` normalised), so `P` is not symmetric.
fn causal_weights(l: usize) -> Array2<f64> {
    Array2::from_shape_fn((l, l), |(i, j)| {
        if j <= i { (j + 1) as f64 / ((i + 1) * (i + 2) / 2) as f64 } else { 0.0 }
    })
}

/// `a · b` written out, for the checks (independent of the crate's products).
fn product(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
    Array2::from_shape_fn((a.nrows(), b.ncols()), |(i, j)| {
        (0..a.ncols()).map(|k| a[[i, k]] * b[[k, j]]).sum()
    })
}

/// Checks an answer to exercise 11.1 ([`grad_value_weights`]): `Xᵀ·Pᵀ·dO` within `1e-12`
/// for causal (not symmetric) weights over 4 tokens, for cross-attention weights (3 queries
/// over 5 tokens) and for one query; shapes that do not fit must be errors, not panics.
///
/// ```
/// use exercises::ch11::{check_grad_value_weights, grad_value_weights};
///
/// assert_eq!(check_grad_value_weights(grad_value_weights), Ok(()));
/// // P instead of Pᵀ: right for symmetric weights only.
/// let untransposed = |x: &ndarray::ArrayRef2<f64>,
///                     p: &ndarray::ArrayRef2<f64>,
///                     grad_o: &ndarray::ArrayRef2<f64>| {
///     Ok(x.t().dot(&p.dot(grad_o)))
/// };
/// assert!(check_grad_value_weights(untransposed).is_err());
/// ```
pub fn check_grad_value_weights(
    grad_value_weights: impl Fn(
        &ArrayRef2<f64>,
        &ArrayRef2<f64>,
        &ArrayRef2<f64>,
    ) -> Result<Array2<f64>>,
) -> Result<(), String> {
    let cases = [
        ("causal weights over 4 tokens, d_model = 3, d_v = 2", causal_weights(4), 3, 2),
        (
            "cross-attention: 3 queries over 5 tokens, d_model = 2, d_v = 3",
            distinct(3, 5, 0).mapv(f64::abs),
            2,
            3,
        ),
        ("one query over 3 tokens, d_model = 4, d_v = 1", array![[0.2, 0.3, 0.5]], 4, 1),
    ];
    for (why, weights, d_model, d_v) in cases {
        let (l_q, l_k) = weights.dim();
        let x = distinct(l_k, d_model, 1);
        let grad_out = distinct(l_q, d_v, 2);
        let expected =
            product(&x.t().to_owned(), &product(&weights.t().to_owned(), &grad_out));
        let what = format!(
            "grad_value_weights(x: {:?}, weights: {:?}, grad_out: {:?}) ({why})",
            x.dim(),
            weights.dim(),
            grad_out.dim()
        );
        let got = call(&what, || grad_value_weights(&x, &weights, &grad_out))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        close(&what, &got, &expected, 1e-12)?;
    }
    let bad = [
        (
            distinct(4, 3, 0),
            distinct(2, 5, 0),
            distinct(2, 2, 0),
            "weights over 5 keys, x has 4",
        ),
        (
            distinct(4, 3, 0),
            distinct(2, 4, 0),
            distinct(3, 2, 0),
            "2 queries, grad_out has 3 rows",
        ),
    ];
    for (x, weights, grad_out, why) in bad {
        let what = format!(
            "grad_value_weights(x: {:?}, weights: {:?}, grad_out: {:?})",
            x.dim(),
            weights.dim(),
            grad_out.dim()
        );
        refuses(&what, why, || grad_value_weights(&x, &weights, &grad_out))?;
    }
    Ok(())
}

/// Checks an answer to exercise 11.2 ([`softmax_row_backward`]) within `1e-12` against the
/// Jacobian of chapter *Scores, scaling and variance* times `dP`, on the chapter's hand
/// example (a masked key with the largest `dP`), a row with two masked keys, a one-hot row, a
/// row with no visible key, and rows where every `dP` is the same (`dS` must be 0: adding a
/// constant to every weight's gradient changes nothing, since the weights sum to 1).
///
/// ```
/// use exercises::ch11::{check_softmax_row_backward, softmax_row_backward};
///
/// assert_eq!(check_softmax_row_backward(softmax_row_backward), Ok(()));
/// // dS = P ∘ dP: it forgets that the weights sum to 1.
/// let elementwise = |p: &[f64], grad_p: &[f64]| {
///     p.iter().zip(grad_p).map(|(p, d)| p * d).collect::<Vec<_>>()
/// };
/// assert!(check_softmax_row_backward(elementwise).is_err());
/// ```
pub fn check_softmax_row_backward(
    softmax_row_backward: impl Fn(&[f64], &[f64]) -> Vec<f64>,
) -> Result<(), String> {
    let weights = |scores: &[f64]| -> Vec<f64> {
        let max = scores.iter().fold(f64::NEG_INFINITY, |m, &s| m.max(s));
        if max == f64::NEG_INFINITY {
            return vec![0.0; scores.len()];
        }
        let e: Vec<f64> = scores.iter().map(|&s| (s - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter().map(|x| x / sum).collect()
    };
    let inf = f64::NEG_INFINITY;
    let r = 2f64.sqrt();
    // (why, scores, dP)
    let cases: [(&str, Vec<f64>, Vec<f64>); 6] = [
        (
            "the chapter's hand example: key 3 is masked",
            vec![1.0 / r, 1.0 / r, 2.0 / r, inf],
            vec![1.0, 2.0, 4.0, 10.0],
        ),
        ("no mask", vec![0.3, -1.2, 2.0, 0.5, 0.0], vec![0.7, -0.4, 1.1, 2.0, -1.5]),
        (
            "keys 1 and 3 masked",
            vec![1.0, inf, -0.5, inf, 0.25],
            vec![-2.0, 3.0, 0.5, 7.0, 1.0],
        ),
        ("one visible key", vec![inf, 0.8, inf], vec![1.0, 2.0, 3.0]),
        ("no visible key", vec![inf, inf, inf], vec![1.0, -2.0, 3.0]),
        ("the same dP for every key", vec![0.1, 0.9, -0.4, 1.3], vec![2.5, 2.5, 2.5, 2.5]),
    ];
    for (why, scores, grad_p) in cases {
        let p = weights(&scores);
        // dsₖ = Σⱼ dpⱼ ∂pⱼ/∂sₖ = Σⱼ dpⱼ pⱼ (δⱼₖ − pₖ)
        let expected: Vec<f64> = (0..p.len())
            .map(|k| {
                (0..p.len())
                    .map(|j| grad_p[j] * p[j] * (if j == k { 1.0 } else { 0.0 } - p[k]))
                    .sum()
            })
            .collect();
        let shown =
            |v: &[f64]| v.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(", ");
        let what = format!(
            "softmax_row_backward(p = [{}], grad_p = [{}]) ({why})",
            shown(&p),
            shown(&grad_p)
        );
        let got = call(&what, || softmax_row_backward(&p, &grad_p))?;
        let got = ndarray::Array1::from(got);
        close(&what, &got, &ndarray::Array1::from(expected), 1e-12)?;
    }
    Ok(())
}

/// Checks an answer to exercise 11.3 ([`grad_keys`]) within `1e-12`: `dSᵀ·Q/√d_k` for
/// `d_k = 2, 3, 4` (so that `1/√d_k` differs from 1 and from `1/d_k`), with as many keys as
/// queries (where the untransposed `dS·Q` has the right shape and the wrong values) and with
/// more keys than queries; a `grad_scores` with the wrong number of rows must be an error, not
/// a panic.
///
/// ```
/// use exercises::ch11::{check_grad_keys, grad_keys};
///
/// assert_eq!(check_grad_keys(grad_keys), Ok(()));
/// // Without the scale: √d_k times too large.
/// let unscaled = |q: &ndarray::ArrayRef2<f64>, grad_s: &ndarray::ArrayRef2<f64>| {
///     Ok(grad_s.t().dot(q))
/// };
/// assert!(check_grad_keys(unscaled).is_err());
/// ```
pub fn check_grad_keys(
    grad_keys: impl Fn(&ArrayRef2<f64>, &ArrayRef2<f64>) -> Result<Array2<f64>>,
) -> Result<(), String> {
    for (l_q, l_k, d_k) in [(3, 3, 4), (2, 5, 2), (4, 4, 3), (1, 3, 4)] {
        let q = distinct(l_q, d_k, 3);
        let grad_scores = distinct(l_q, l_k, 4);
        let expected = product(&grad_scores.t().to_owned(), &q) / (d_k as f64).sqrt();
        let what =
            format!("grad_keys(q: {:?}, grad_scores: {:?})", q.dim(), grad_scores.dim());
        let got = call(&what, || grad_keys(&q, &grad_scores))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        close(&format!("{what} (dSᵀ·Q/√{d_k})"), &got, &expected, 1e-12)?;
    }
    let (q, grad_scores) = (distinct(3, 4, 0), distinct(4, 3, 0));
    let what = "grad_keys(q: (3, 4), grad_scores: (4, 3))";
    let why = "grad_scores has 4 rows, one per query, but q has 3 queries";
    refuses(what, why, || grad_keys(&q, &grad_scores))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;
    use attention::exact;
    use attention::grad::{sdpa_backward, softmax_backward};
    use ndarray::Array1;

    #[test]
    fn grad_value_weights_passes_and_classic_mistakes_fail() {
        assert_eq!(check_grad_value_weights(grad_value_weights), Ok(()));
        // P instead of Pᵀ: equal for symmetric weights, wrong for causal ones.
        let untransposed =
            |x: &ArrayRef2<f64>, p: &ArrayRef2<f64>, grad_o: &ArrayRef2<f64>| {
                Ok(x.t().dot(&p.dot(grad_o)))
            };
        rejects(check_grad_value_weights(untransposed), "(causal weights over 4 tokens");
        // dV = Pᵀ·dO alone, as if V were the parameter: the wrong shape.
        let grad_v_only = |_: &ArrayRef2<f64>, p: &ArrayRef2<f64>, grad_o: &ArrayRef2<f64>| {
            Ok(p.t().dot(grad_o))
        };
        rejects(check_grad_value_weights(grad_v_only), "has shape [4, 2], expected [3, 2]");
        // P forgotten: Xᵀ·dO has the right shape only when L_q = L_k, and the wrong values.
        let no_weights = |x: &ArrayRef2<f64>, _: &ArrayRef2<f64>, grad_o: &ArrayRef2<f64>| {
            Ok(x.t().dot(grad_o))
        };
        rejects(check_grad_value_weights(no_weights), "(causal weights over 4 tokens");
        // No shape checks: ndarray's dot panics on the first mismatch.
        let unchecked = |x: &ArrayRef2<f64>, p: &ArrayRef2<f64>, grad_o: &ArrayRef2<f64>| {
            Ok(x.t().dot(&p.t().dot(grad_o)))
        };
        rejects(check_grad_value_weights(unchecked), "panicked");
    }

    #[test]
    fn grad_value_weights_is_the_layers_gradient_of_w_v() {
        // A one-head layer whose W_Q, W_K, W_O are fixed: the layer's grad_w_v (with W_O = I)
        // is Xᵀ·Pᵀ·dO for the layer's own weights P.
        use attention::multihead::MultiHeadAttention;
        let x = distinct(5, 3, 5);
        let eye = Array2::<f64>::eye(3);
        let mha = MultiHeadAttention::new(
            distinct(3, 3, 6),
            distinct(3, 3, 7),
            distinct(3, 3, 8),
            eye,
            1,
        )
        .unwrap();
        let x3 = x.clone().insert_axis(ndarray::Axis(0));
        let causal = attention::mask::Mask::causal(5);
        let (_, tape) = mha.forward_train(&x3, Some(&causal), None).unwrap();
        let grad_y = distinct(5, 3, 9);
        let grads =
            mha.backward(&tape, &grad_y.clone().insert_axis(ndarray::Axis(0))).unwrap();
        let p = tape.weights().slice(ndarray::s![0, 0, .., ..]).to_owned();
        let ours = grad_value_weights(&x, &p, &grad_y).unwrap();
        assert!((&ours - &grads.grad_w_v).iter().all(|d| d.abs() < 1e-12));
    }

    #[test]
    fn softmax_row_backward_passes_and_classic_mistakes_fail() {
        assert_eq!(check_softmax_row_backward(softmax_row_backward), Ok(()));
        fn by(
            f: impl Fn(&[f64], &[f64], usize) -> f64,
        ) -> impl Fn(&[f64], &[f64]) -> Vec<f64> {
            move |p, grad_p| (0..p.len()).map(|k| f(p, grad_p, k)).collect()
        }
        let example = "(the chapter's hand example";
        // dS = P ∘ dP: the weights are treated as if each moved on its own.
        rejects(check_softmax_row_backward(by(|p, d, k| p[k] * d[k])), example);
        // The diagonal of the Jacobian only, pₖ(1 − pₖ)·dpₖ (a sigmoid's derivative).
        rejects(check_softmax_row_backward(by(|p, d, k| p[k] * (1.0 - p[k]) * d[k])), example);
        // The plain mean of dP instead of the mean weighted by P.
        let mean = |d: &[f64]| d.iter().sum::<f64>() / d.len() as f64;
        rejects(check_softmax_row_backward(by(|p, d, k| p[k] * (d[k] - mean(d)))), example);
        // The factor pₖ forgotten: masked keys get a gradient.
        let weighted = |p: &[f64], d: &[f64]| p.iter().zip(d).map(|(p, d)| p * d).sum::<f64>();
        rejects(check_softmax_row_backward(by(|p, d, k| d[k] - weighted(p, d))), example);
    }

    #[test]
    fn softmax_row_backward_is_the_crates_softmax_backward() {
        let scores = Array1::from(vec![0.5, -1.0, f64::NEG_INFINITY, 2.0]);
        let p = exact::softmax(&scores);
        let grad_p = Array1::from(vec![1.0, -3.0, 8.0, 0.25]);
        let ours = Array1::from(softmax_row_backward(
            p.as_slice().unwrap(),
            grad_p.as_slice().unwrap(),
        ));
        let crates = softmax_backward(&p, &grad_p).unwrap();
        assert!((&ours - &crates).iter().all(|d| d.abs() < 1e-15));
        assert_eq!(ours[2], 0.0);
    }

    #[test]
    fn grad_keys_passes_and_classic_mistakes_fail() {
        assert_eq!(check_grad_keys(grad_keys), Ok(()));
        fn checked(
            f: impl Fn(&ArrayRef2<f64>, &ArrayRef2<f64>) -> Array2<f64>,
        ) -> impl Fn(&ArrayRef2<f64>, &ArrayRef2<f64>) -> Result<Array2<f64>> {
            move |q, grad_s| {
                if grad_s.nrows() != q.nrows() {
                    return Err(AttentionError::mismatch(
                        "grad_scores",
                        grad_s.nrows(),
                        "q",
                        q.nrows(),
                        "L_q",
                    ));
                }
                Ok(f(q, grad_s))
            }
        }
        let root = |q: &ArrayRef2<f64>| (q.ncols() as f64).sqrt();
        // Without the scale.
        rejects(check_grad_keys(checked(|q, grad_s| grad_s.t().dot(q))), "(dSᵀ·Q/√4)");
        // Multiplied by √d_k instead of divided.
        rejects(
            check_grad_keys(checked(|q, grad_s| grad_s.t().dot(q) * root(q))),
            "(dSᵀ·Q/√4)",
        );
        // Divided by d_k instead of √d_k.
        rejects(
            check_grad_keys(checked(|q, grad_s| grad_s.t().dot(q) / q.ncols() as f64)),
            "(dSᵀ·Q/√4)",
        );
        // dS not transposed: the right shape when L_q = L_k, the wrong values.
        rejects(
            check_grad_keys(checked(|q, grad_s| grad_s.dot(q) / root(q))),
            "grad_keys(q: (3, 4), grad_scores: (3, 3)) (dSᵀ·Q/√4)",
        );
        // No shape check: the mismatch panics inside dot.
        rejects(check_grad_keys(|q, grad_s| Ok(grad_s.t().dot(q) / root(q))), "panicked");
    }

    #[test]
    fn grad_keys_is_the_crates_sdpa_backward() {
        let q = distinct(3, 4, 1);
        let k = distinct(5, 4, 2);
        let v = distinct(5, 2, 3);
        let grad_o = distinct(3, 2, 4);
        let att = exact::sdpa(&q, &k, &v, None).unwrap();
        let grad_p = exact::matmul(&grad_o, &exact::transposed(&v)).unwrap();
        let grad_s = softmax_backward(&att.weights, &grad_p).unwrap();
        let grads = sdpa_backward(&q, &k, &v, &att.weights, &grad_o).unwrap();
        let ours = grad_keys(&q, &grad_s).unwrap();
        assert!((&ours - &grads.grad_k).iter().all(|d| d.abs() < 1e-15));
    }
}
