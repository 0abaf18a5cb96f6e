//! Chapter *A model that writes*: the pieces a decoder needs beyond chapter 13's forward
//! passes, each with its backward pass written out.
//!
//! The forward passes of layer norm and GELU are chapter 13's
//! ([`LayerNorm::apply`](crate::layer_norm::LayerNorm::apply), [`gelu`]); attention is
//! chapter 11's ([`exact::sdpa`] with a causal mask, [`sdpa_backward`]). What is new here is
//! the backward of layer norm and of GELU, the causal
//! attention of a whole batch laid out as GPT-2 lays it out (`Q`, `K`, `V` side by side in
//! one `(B·T, 3d)` matrix), and cross-entropy over the vocabulary.
//!
//! Everything here is the exact path of chapter 11: products in a fixed order
//! ([`exact::matmul`]), `exp`, `ln` and `erf` from `libm`, sums left to right in `f64`; the
//! same bits on every machine.
//!
//! Anchors (below the doc comments): `layer_norm_backward`, `gelu_backward`,
//! `causal_attention`, `cached_attention`, `cross_entropy`.

use ndarray::{Array1, Array2, Array4, ArrayView2, ArrayView3, Axis, Ix4, s};

use super::weights::Norm;
use crate::error::{AttentionError, Result};
use crate::exact;
use crate::feed_forward::gelu;
use crate::float::{Float, to_f64};
use crate::grad::sdpa_backward;
use crate::layer_norm::LayerNorm;
use crate::mask::Mask;
use crate::sdpa::Attention;

/// Layer norm over each row of `x: (N, d)`, chapter 13's [`LayerNorm::apply`] with this
/// norm's `γ`, `β` and `ε`.
///
/// ```
/// use attention::gpt::{ops::layer_norm, weights::Norm};
/// use ndarray::{array, Array1};
///
/// let norm = Norm { gamma: Array1::ones(2), beta: Array1::zeros(2) };
/// let y = layer_norm(&array![[1.0, 3.0]].view(), &norm, 1e-12).unwrap();
/// assert!((y[[0, 0]] + 1.0_f64).abs() < 1e-9 && (y[[0, 1]] - 1.0).abs() < 1e-9);
/// ```
// ANCHOR: layer_norm
pub fn layer_norm<A: Float>(x: &ArrayView2<A>, norm: &Norm<A>, eps: f64) -> Result<Array2<A>> {
    LayerNorm::new(norm.gamma.clone(), norm.beta.clone(), eps)?.apply(x)
}
// ANCHOR_END: layer_norm

/// The gradients of layer norm `y = x̂·γ + β`, `x̂ = (x − μ)/σ`, `σ = √(var + ε)`, from
/// `grad_y: (N, d)`: `(grad_x, grad_gamma, grad_beta)`.
///
/// The statistics `μ` and `σ` of each row are computed again from `x`, as the forward pass
/// computed them. With `g = grad_y·γ` (the gradient of `x̂`),
///
/// `grad_x = (g − mean(g) − x̂·mean(g·x̂)) / σ`,
///
/// where the two means (over the row) carry what the row's mean and variance pass back: every
/// component of `x` moves `μ` and `σ`, and so every component of `x̂`. Leaving them out is
/// the classic mistake; chapter 15's test shows it fail.
///
/// ```
/// use attention::gpt::{ops::layer_norm_backward, weights::Norm};
/// use ndarray::{array, Array1, Array2};
///
/// let norm = Norm { gamma: Array1::ones(3), beta: Array1::zeros(3) };
/// let x = array![[1.0, 2.0, 4.0]];
/// // A loss that is the sum of the outputs does not depend on x: a layer norm's outputs
/// // always sum to Σβ (here 0).
/// let (gx, gg, gb) = layer_norm_backward(&x.view(), &norm, 1e-5, &Array2::ones((1, 3)).view());
/// assert!(gx.iter().all(|g: &f64| g.abs() < 1e-12));
/// assert_eq!(gb, array![1.0, 1.0, 1.0]);
/// assert!(gg.sum().abs() < 1e-12); // Σx̂ = 0
/// ```
// ANCHOR: layer_norm_backward
pub fn layer_norm_backward<A: Float>(
    x: &ArrayView2<A>,
    norm: &Norm<A>,
    eps: f64,
    grad_y: &ArrayView2<A>,
) -> (Array2<A>, Array1<A>, Array1<A>) {
    let d = x.ncols() as f64;
    let mut grad_x = Array2::zeros(x.raw_dim());
    let mut grad_gamma = vec![0.0; x.ncols()];
    let mut grad_beta = vec![0.0; x.ncols()];
    for ((x, gy), mut gx) in x.rows().into_iter().zip(grad_y.rows()).zip(grad_x.rows_mut()) {
        let mean = x.iter().map(|&v| to_f64(v)).sum::<f64>() / d;
        let var = x.iter().map(|&v| (to_f64(v) - mean).powi(2)).sum::<f64>() / d;
        let inv_std = 1.0 / (var + eps).sqrt();
        let x_hat: Vec<f64> = x.iter().map(|&v| (to_f64(v) - mean) * inv_std).collect();
        let g: Vec<f64> =
            gy.iter().zip(&norm.gamma).map(|(&a, &b)| to_f64(a) * to_f64(b)).collect();
        let mean_g = g.iter().sum::<f64>() / d;
        let mean_g_xhat = g.iter().zip(&x_hat).map(|(a, b)| a * b).sum::<f64>() / d;
        for (j, out) in gx.iter_mut().enumerate() {
            *out = A::from_f64_lossy((g[j] - mean_g - x_hat[j] * mean_g_xhat) * inv_std);
            grad_gamma[j] += to_f64(gy[j]) * x_hat[j];
            grad_beta[j] += to_f64(gy[j]);
        }
    }
    let round = |v: Vec<f64>| v.into_iter().map(A::from_f64_lossy).collect::<Array1<A>>();
    (grad_x, round(grad_gamma), round(grad_beta))
}
// ANCHOR_END: layer_norm_backward

/// The derivative of the exact GELU, `GELU'(u) = Φ(u) + u·φ(u)`, where `Φ` is the standard
/// normal distribution function and `φ = Φ'` its density, `e^(−u²/2)/√(2π)`.
///
/// ```
/// use attention::gpt::ops::gelu_derivative;
///
/// assert_eq!(gelu_derivative(0.0_f64), 0.5);
/// // far on the right GELU is x, far on the left 0
/// assert!((gelu_derivative(8.0_f64) - 1.0).abs() < 1e-12);
/// assert!(gelu_derivative(-8.0_f64).abs() < 1e-12);
/// ```
// ANCHOR: gelu_derivative
pub fn gelu_derivative<A: Float>(u: A) -> A {
    let u = to_f64(u);
    let cdf = 0.5 * (1.0 + libm::erf(u * std::f64::consts::FRAC_1_SQRT_2));
    let pdf = libm::exp(-0.5 * u * u) / (2.0 * std::f64::consts::PI).sqrt();
    A::from_f64_lossy(cdf + u * pdf)
}
// ANCHOR_END: gelu_derivative

/// GELU of every entry: chapter 13's [`gelu`].
///
/// ```
/// use attention::gpt::ops::gelu_all;
/// use ndarray::array;
///
/// assert_eq!(gelu_all(&array![[0.0_f64, 0.0]].view()), array![[0.0, 0.0]]);
/// ```
pub fn gelu_all<A: Float>(u: &ArrayView2<A>) -> Array2<A> {
    u.mapv(gelu)
}

/// `grad_u = grad_g · GELU'(u)`, entry by entry.
///
/// ```
/// use attention::gpt::ops::gelu_backward;
/// use ndarray::array;
///
/// let g = gelu_backward(&array![[0.0_f64]].view(), &array![[2.0]].view());
/// assert_eq!(g, array![[1.0]]);
/// ```
// ANCHOR: gelu_backward
pub fn gelu_backward<A: Float>(u: &ArrayView2<A>, grad_g: &ArrayView2<A>) -> Array2<A> {
    let mut grad_u = grad_g.to_owned();
    grad_u.zip_mut_with(u, |g, &u| *g = *g * gelu_derivative(u));
    grad_u
}
// ANCHOR_END: gelu_backward

/// The sum of each column of `a`, the rows added top to bottom.
///
/// ```
/// use attention::gpt::ops::column_sums;
/// use ndarray::array;
///
/// assert_eq!(column_sums(&array![[1.0, 2.0], [3.0, 4.0]].view()), array![4.0, 6.0]);
/// ```
// ANCHOR: column_sums
pub fn column_sums<A: Float>(a: &ArrayView2<A>) -> Array1<A> {
    let mut sums = Array1::zeros(a.ncols());
    for row in a.rows() {
        sums.zip_mut_with(&row, |s, &r| *s = *s + r);
    }
    sums
}
// ANCHOR_END: column_sums

/// Causal multi-head attention over a batch laid out as GPT-2 lays it out: `qkv: (B·T, 3d)`
/// holds each token's query, key and value side by side, each split into `heads` heads of
/// `d/heads` columns. Returns the merged output `(B·T, d)` (the heads side by side again,
/// before the output projection) and the weights `(B, heads, T, T)`, which the backward pass
/// needs. With `alibi`, one slope per head, ALiBi's bias is added to the scores.
///
/// ```
/// use attention::gpt::ops::causal_attention;
/// use ndarray::Array2;
///
/// let qkv = Array2::<f64>::from_shape_fn((2 * 3, 3 * 4), |(i, j)| ((i + j) % 5) as f64);
/// let (y, weights) = causal_attention(&qkv.view(), 2, 2, None).unwrap();
/// assert_eq!((y.dim(), weights.dim()), ((6, 4), (2, 2, 3, 3)));
/// assert_eq!(weights[[0, 0, 0, 1]], 0.0); // the first token sees only itself
/// ```
// ANCHOR: causal_attention
pub fn causal_attention<A: Float>(
    qkv: &ArrayView2<A>,
    batch: usize,
    heads: usize,
    alibi: Option<&[f64]>,
) -> Result<(Array2<A>, Array4<A>)> {
    let (q, k, v, t) = split_qkv(qkv, batch, heads)?;
    let att = match alibi {
        None => exact::sdpa(&q, &k, &v, Some(&Mask::causal(t)))?, // chapter 11's exact path
        Some(slopes) => alibi_sdpa(&q, &k, &v, slopes, 0)?,
    };
    Ok((merge(&att.output), att.weights))
}
// ANCHOR_END: causal_attention

/// Chapter 11's exact attention with ALiBi's bias: query `i`, at position `past + i`, sees
/// keys `j ≤ past + i`, each score shifted by `−m_h·(past + i − j)` on head `h`. `q: (B,
/// heads, L_q, d_head)`, `k`, `v`: `(B, heads, L_k, d_head)`; the weights are returned too.
// ANCHOR: alibi_sdpa
fn alibi_sdpa<A: Float>(
    q: &Array4<A>,
    k: &Array4<A>,
    v: &Array4<A>,
    slopes: &[f64],
    past: usize,
) -> Result<Attention<A, Ix4>> {
    check_slopes(slopes, q.shape()[1])?;
    let sqrt_d_k = A::from_len(q.shape()[3]).sqrt();
    let mut scores = exact::matmul(q, &exact::transposed(k))? / sqrt_d_k;
    for ((_, h, i, j), s) in scores.indexed_iter_mut() {
        let query = past + i;
        *s = if j > query {
            A::neg_infinity() // a later token: masked
        } else {
            *s + A::from_f64_lossy(slopes[h] * (j as f64 - query as f64))
        };
    }
    let weights = exact::softmax(&scores);
    let output = exact::matmul(&weights, v)?;
    Ok(Attention { output, weights })
}
// ANCHOR_END: alibi_sdpa

/// An error unless there is one ALiBi slope per head.
// ANCHOR: check_slopes
pub(super) fn check_slopes(slopes: &[f64], heads: usize) -> Result<()> {
    if slopes.len() != heads {
        let expected = format!("one slope per head, {heads}, was expected");
        return Err(AttentionError::shape("ALiBi slopes", &[slopes.len()], &expected));
    }
    Ok(())
}
// ANCHOR_END: check_slopes

/// Causal attention of the `n` newest tokens over a KV cache that already holds them: `q:
/// (n, d)` their queries, heads side by side; `keys`, `values`: `(heads, m, d_head)`, `m ≥ n`,
/// the cache's tokens in position order, the new ones last. Query `i` sees keys
/// `0 ..= m − n + i`; with `alibi`, ALiBi's bias for those positions. Returns the merged
/// output `(n, d)`.
///
/// Row `i` has the same bits as row `m − n + i` of [`causal_attention`] over all `m`
/// tokens: every score is the same sum in the same order, and the keys the full pass masks
/// out add exact zeros to its sums.
///
/// ```
/// use attention::gpt::ops::{cached_attention, causal_attention};
/// use ndarray::{Array2, Array3, s};
///
/// let qkv = Array2::<f64>::from_shape_fn((4, 3 * 4), |(i, j)| ((i * 7 + j) % 5) as f64 / 4.0);
/// let (full, _) = causal_attention(&qkv.view(), 1, 2, None).unwrap(); // 4 tokens, 2 heads
/// // the cache: keys and values (heads, m, d_head) of all 4 tokens
/// let heads = |c: usize| Array3::from_shape_fn((2, 4, 2), |(h, t, j)| qkv[[t, c + 2 * h + j]]);
/// let (keys, values) = (heads(4), heads(8));
/// let last = cached_attention(&qkv.slice(s![3.., ..4]), &keys.view(), &values.view(), None).unwrap();
/// assert_eq!(last.row(0), full.row(3)); // bit for bit
/// ```
// ANCHOR: cached_attention
pub fn cached_attention<A: Float>(
    q: &ArrayView2<A>,
    keys: &ArrayView3<A>,
    values: &ArrayView3<A>,
    alibi: Option<&[f64]>,
) -> Result<Array2<A>> {
    let (n, m) = cached_sizes(q, keys, values)?;
    let heads = keys.shape()[0];
    let q = split(q, 1, n, heads); // (1, heads, n, d_head)
    let (k, v) =
        (keys.insert_axis(Axis(0)).to_owned(), values.insert_axis(Axis(0)).to_owned());
    let att = match alibi {
        None => {
            let seen =
                Mask::from_array(Array2::from_shape_fn((n, m), |(i, j)| j <= m - n + i))?;
            exact::sdpa(&q, &k, &v, Some(&seen))?
        }
        Some(slopes) => alibi_sdpa(&q, &k, &v, slopes, m - n)?,
    };
    Ok(merge(&att.output))
}
// ANCHOR_END: cached_attention

/// `(n, m)` for [`cached_attention`], or an error naming the shape at fault.
// ANCHOR: cached_sizes
pub(super) fn cached_sizes<A>(
    q: &ArrayView2<A>,
    keys: &ArrayView3<A>,
    values: &ArrayView3<A>,
) -> Result<(usize, usize)> {
    let (heads, m, d_head) = keys.dim();
    let (n, d) = q.dim();
    if values.dim() != keys.dim() {
        let expected = format!("the keys' shape {:?} was expected", keys.shape());
        return Err(AttentionError::shape("values", values.shape(), &expected));
    }
    if n == 0 || n > m || d != heads * d_head {
        let expected = format!(
            "(n, heads·d_head) with 1 ≤ n ≤ {m} cached tokens and heads·d_head = {}",
            heads * d_head
        );
        return Err(AttentionError::shape(
            "q",
            q.shape(),
            &format!("{expected} was expected"),
        ));
    }
    Ok((n, m))
}
// ANCHOR_END: cached_sizes

/// The backward pass of [`causal_attention`]: from the same `qkv`, the forward pass's
/// weights and the gradient of the merged output `(B·T, d)`, the gradient of `qkv`, in its
/// layout. Chapter 11's [`sdpa_backward`] does the work, head by head.
///
/// ```
/// use attention::gpt::ops::{causal_attention, causal_attention_backward};
/// use ndarray::Array2;
///
/// let qkv = Array2::<f64>::from_shape_fn((3, 6), |(i, j)| (i * j) as f64 / 10.0);
/// let (_, weights) = causal_attention(&qkv.view(), 1, 1, None).unwrap();
/// let grad = causal_attention_backward(&qkv.view(), &weights, &Array2::ones((3, 2)).view())
///     .unwrap();
/// assert_eq!(grad.dim(), (3, 6));
/// ```
pub fn causal_attention_backward<A: Float>(
    qkv: &ArrayView2<A>,
    weights: &Array4<A>,
    grad_y: &ArrayView2<A>,
) -> Result<Array2<A>> {
    let (batch, heads) = (weights.shape()[0], weights.shape()[1]);
    let (q, k, v, t) = split_qkv(qkv, batch, heads)?;
    let grad_o = split(grad_y, batch, t, heads);
    let g = sdpa_backward(&q, &k, &v, weights, &grad_o)?;
    let d = qkv.ncols() / 3;
    let mut grad_qkv = Array2::zeros(qkv.raw_dim());
    grad_qkv.slice_mut(s![.., ..d]).assign(&merge(&g.grad_q));
    grad_qkv.slice_mut(s![.., d..2 * d]).assign(&merge(&g.grad_k));
    grad_qkv.slice_mut(s![.., 2 * d..]).assign(&merge(&g.grad_v));
    Ok(grad_qkv)
}

/// `Q`, `K`, `V`, each `(B, heads, T, d/heads)`, and `T`.
type QkvHeads<A> = (Array4<A>, Array4<A>, Array4<A>, usize);

/// `qkv: (B·T, 3d)` → `Q`, `K`, `V`, each `(B, heads, T, d/heads)`, and `T`.
// ANCHOR: heads
fn split_qkv<A: Float>(
    qkv: &ArrayView2<A>,
    batch: usize,
    heads: usize,
) -> Result<QkvHeads<A>> {
    let (rows, cols) = qkv.dim();
    if batch == 0 || heads == 0 || rows % batch != 0 || cols % (3 * heads) != 0 {
        let what =
            format!("a shape (B·T, 3·d) with B = {batch} and d a multiple of {heads} heads");
        return Err(AttentionError::shape(
            "qkv",
            qkv.shape(),
            &format!("{what} was expected"),
        ));
    }
    let (t, d) = (rows / batch, cols / 3);
    let part = |i: usize| split(&qkv.slice(s![.., i * d..(i + 1) * d]), batch, t, heads);
    Ok((part(0), part(1), part(2), t))
}

/// `(B·T, d)` → `(B, heads, T, d/heads)`: head `h` is columns `h·d_head .. (h+1)·d_head`.
fn split<A: Float>(x: &ArrayView2<A>, batch: usize, t: usize, heads: usize) -> Array4<A> {
    let d_head = x.ncols() / heads;
    let x = x.to_owned().into_shape_with_order((batch, t, heads, d_head)).expect("B·T rows");
    x.permuted_axes([0, 2, 1, 3]).as_standard_layout().into_owned()
}

/// `(B, heads, T, d_head)` → `(B·T, heads·d_head)`, the heads side by side.
fn merge<A: Float>(x: &Array4<A>) -> Array2<A> {
    let (b, h, t, d_head) = x.dim();
    let x = x.view().permuted_axes([0, 2, 1, 3]).as_standard_layout().into_owned();
    x.into_shape_with_order((b * t, h * d_head)).expect("the same number of entries")
}
// ANCHOR_END: heads

/// The mean cross-entropy of next-token predictions, and its gradient: for `logits: (N, V)`
/// and the `N` target ids, `ℓ = mean over rows of (log Σ_j e^(z_j) − z_target)`, and
/// `grad_logits = (softmax(z) − onehot(target)) / N`. Returns `(ℓ, grad_logits)`; an error
/// names the first target outside the vocabulary.
///
/// ```
/// use attention::gpt::ops::cross_entropy;
/// use ndarray::array;
///
/// // two equal logits: the loss is ln 2 whichever is the target
/// let (loss, grad) = cross_entropy(&array![[0.0, 0.0]].view(), &[1]).unwrap();
/// assert!((loss - 2f64.ln()).abs() < 1e-15);
/// assert_eq!(grad, array![[0.5, -0.5]]);
/// assert_eq!(
///     cross_entropy(&array![[0.0, 0.0]].view(), &[2]).unwrap_err().to_string(),
///     "target: token 2 at row 0 is outside the vocabulary of 2"
/// );
/// ```
// ANCHOR: cross_entropy
pub fn cross_entropy<A: Float>(
    logits: &ArrayView2<A>,
    targets: &[usize],
) -> Result<(f64, Array2<A>)> {
    let (n, vocab) = logits.dim();
    if targets.len() != n {
        return Err(AttentionError::mismatch("logits", n, "targets", targets.len(), "N"));
    }
    let mut total = 0.0;
    let mut grad = Array2::zeros((n, vocab));
    for (i, (z, &target)) in logits.rows().into_iter().zip(targets).enumerate() {
        if target >= vocab {
            return Err(AttentionError::Invalid {
                what: "target".into(),
                problem: format!(
                    "token {target} at row {i} is outside the vocabulary of {vocab}"
                ),
            });
        }
        let max = z.iter().map(|&v| to_f64(v)).fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|&v| libm::exp(to_f64(v) - max)).collect();
        let sum: f64 = e.iter().sum();
        total += max + libm::log(sum) - to_f64(z[target]); // log Σ e^z − z_target
        for (j, g) in grad.row_mut(i).iter_mut().enumerate() {
            let onehot = if j == target { 1.0 } else { 0.0 };
            *g = A::from_f64_lossy((e[j] / sum - onehot) / n as f64);
        }
    }
    Ok((total / n as f64, grad))
}
// ANCHOR_END: cross_entropy

/// Sum of the rows of `x: (B·T, d)` that share a position: `(T, d)`, the gradient of the
/// position table from the gradient of the embeddings.
///
/// ```
/// use attention::gpt::ops::sum_over_batch;
/// use ndarray::array;
///
/// let g = array![[1.0], [2.0], [10.0], [20.0]]; // B = 2, T = 2
/// assert_eq!(sum_over_batch(&g.view(), 2), array![[11.0], [22.0]]);
/// ```
// ANCHOR: sum_over_batch
pub fn sum_over_batch<A: Float>(x: &ArrayView2<A>, t: usize) -> Array2<A> {
    let mut out = Array2::zeros((t, x.ncols()));
    for chunk in x.axis_chunks_iter(Axis(0), t) {
        out.zip_mut_with(&chunk, |o, &c| *o = *o + c);
    }
    out
}
// ANCHOR_END: sum_over_batch
