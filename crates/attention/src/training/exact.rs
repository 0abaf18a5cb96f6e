//! Chapters *Gradients* and *Watching attention learn*: arithmetic that gives the same bits on
//! every x86-64 machine.
//!
//! Two things in the rest of the crate are fast but not reproducible to the last bit from one
//! machine to another. ndarray's `dot` calls the `matrixmultiply` crate, which picks an
//! AVX2, FMA or AVX-512 kernel when the program starts, and each kernel adds the products of
//! a row and a column in its own order. And `f64::exp` and `f64::ln` call the system's C
//! library, which picks an FMA variant or not at run time. The difference is one unit in the
//! last place, once; a training run that feeds every step into the next grows it into a
//! different curve.
//!
//! This module computes with neither:
//!
//! - [`matmul`] adds the products of entry `(i, j)` one after the other, in the order
//!   `k = 0, 1, …, n − 1`, starting from zero:
//!   `acc = 0; for k in 0..n { acc = acc + a[i, k] · b[k, j] }`. Rust never fuses
//!   `x * y + z` into one FMA instruction and never reorders additions of floats, and the
//!   loop is the same compiled code on every x86-64 machine (the crate is not built with
//!   `target-cpu=native`), so the result is too.
//! - [`exp`] and [`ln`] come from the [`libm`] crate, musl's maths library ported to Rust (its
//!   version pinned by `Cargo.lock`). On x86-64 and aarch64, `libm::exp` and `libm::log` run
//!   the same Rust source: `libm` replaces only `sqrt`, `fma` and (on aarch64) `rint` by
//!   processor instructions there, and these two call none of them. With no fused
//!   multiply-adds and every `f64` operation rounded as IEEE 754 prescribes, the same source
//!   gives the same bits on both.
//! - [`softmax`] and [`sdpa`] are the forward passes of chapters *Softmax* and *Multi-head
//!   attention* computed with those two, adding each row's terms left to right.
//!
//! They agree with [`softmax::softmax`](crate::softmax::softmax) and
//! [`sdpa_batched`](crate::sdpa::sdpa_batched) to rounding (the tests check `1e-12` in `f64`);
//! what they add is that their rounding is the same on every machine.
//!
//! Anchors (below the doc comments): `transposed`, `exact_matmul`, `check_matmul`,
//! `exact_exp_ln`, `exact_softmax`, `exact_sdpa`.

use ndarray::{Array, ArrayRef, ArrayView, ArrayViewMut1, Axis, Dimension, IxDyn};

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::mask::Mask;
use crate::sdpa::Attention;
use crate::shapes::check_qkv;

/// A view of `a` with its last two axes swapped: `(..., m, n) → (..., n, m)`, the transpose
/// of every matrix of the stack. No copy is made; an array with fewer than two axes is
/// returned as it is.
///
/// ```
/// use attention::exact::transposed;
/// use ndarray::{array, Array3};
///
/// assert_eq!(transposed(&array![[1, 2, 3]]), array![[1], [2], [3]]);
/// assert_eq!(transposed(&Array3::<f64>::zeros((4, 2, 3))).dim(), (4, 3, 2));
/// ```
// ANCHOR: transposed
pub fn transposed<A, D: Dimension>(a: &ArrayRef<A, D>) -> ArrayView<'_, A, D> {
    let mut view = a.view();
    let n = view.ndim();
    if n >= 2 {
        view.swap_axes(n - 2, n - 1);
    }
    view
}
// ANCHOR_END: transposed

/// The matrix product `a · b` for every matrix of the stacks `a: (..., m, n)` and
/// `b: (..., n, p)`, which share their leading (batch, head) axes: `(..., m, p)`.
///
/// Entry `(i, j)` of each product is
/// `acc = 0; for k in 0..n { acc = acc + a[i, k] · b[k, j] }`, in that order, on every
/// machine. Any strides are accepted: for `Aᵀ · B` or `A · Bᵀ`, pass a [`transposed`] view.
/// Empty axes give an empty (or, for `n = 0`, an all-zero) product.
///
/// The loops run over `i`, then `k`, then `j`: row `k` of `b` is added, times `a[i, k]`, to
/// row `i` of the output. Every entry still receives its terms in the order `k = 0, 1, …`;
/// the innermost loop only works on several entries side by side, which the compiler turns
/// into vector instructions (SSE2, part of every x86-64 CPU) lane by lane, without
/// reordering anything. Both operands are first copied into row-major order, so that those
/// rows are contiguous.
///
/// ```
/// use attention::exact::{matmul, transposed};
/// use ndarray::{array, Array3};
///
/// let a = array![[1.0, 2.0], [3.0, 4.0]];
/// let b = array![[5.0, 6.0], [7.0, 8.0]];
/// assert_eq!(matmul(&a, &b).unwrap(), array![[19.0, 22.0], [43.0, 50.0]]);
/// assert_eq!(matmul(&a, &transposed(&b)).unwrap(), a.dot(&b.t()));
///
/// // Leading axes: a (2, 3, 4) stack times a (2, 4, 5) stack is a (2, 3, 5) stack.
/// let x = Array3::<f32>::ones((2, 3, 4));
/// let y = Array3::<f32>::ones((2, 4, 5));
/// assert_eq!(matmul(&x, &y).unwrap(), Array3::from_elem((2, 3, 5), 4.0));
/// assert_eq!(
///     matmul(&a, &array![[1.0, 2.0, 3.0]]).unwrap_err().to_string(),
///     "b has shape [1, 3] but a shape (..., n, p) with n = 2, to multiply a of shape \
///      [2, 2], was expected"
/// );
/// ```
// ANCHOR: exact_matmul
pub fn matmul<A: Float, D: Dimension>(
    a: &ArrayRef<A, D>,
    b: &ArrayRef<A, D>,
) -> Result<Array<A, D>> {
    let (lead, m, n, p) = check_matmul(a.shape(), b.shape())?;
    let mut shape = lead.to_vec();
    shape.extend([m, p]);
    let mut out = Array::<A, _>::zeros(IxDyn(&shape)); // row-major (..., m, p), all 0
    if out.is_empty() || n == 0 {
        return Ok(out.into_dimensionality().expect("same number of axes as a"));
    }
    let a = a.as_standard_layout(); // row-major copies (no copy if already so)
    let b = b.as_standard_layout();
    let (a, b) = (a.as_slice().expect("row-major"), b.as_slice().expect("row-major"));
    let products = out.as_slice_mut().expect("row-major").chunks_exact_mut(m * p);
    for ((out, a), b) in products.zip(a.chunks_exact(m * n)).zip(b.chunks_exact(n * p)) {
        // One matrix of the stack: out (m, p) = a (m, n) · b (n, p).
        for (out_row, a_row) in out.chunks_exact_mut(p).zip(a.chunks_exact(n)) {
            for (&a_ik, b_row) in a_row.iter().zip(b.chunks_exact(p)) {
                // Term k of every entry (i, j) of the row, for all j side by side.
                for (acc, &b_kj) in out_row.iter_mut().zip(b_row) {
                    *acc = *acc + a_ik * b_kj;
                }
            }
        }
    }
    Ok(out.into_dimensionality().expect("same number of axes as a"))
}
// ANCHOR_END: exact_matmul

/// Checks `a: (..., m, n)` and `b: (..., n, p)` with the same leading axes; returns them
/// and `(m, n, p)`.
// ANCHOR: check_matmul
fn check_matmul<'s>(
    a: &'s [usize],
    b: &[usize],
) -> Result<(&'s [usize], usize, usize, usize)> {
    for (name, shape) in [("a", a), ("b", b)] {
        if shape.len() < 2 {
            return Err(AttentionError::shape(
                name,
                shape,
                "a shape (..., rows, cols) was expected",
            ));
        }
    }
    let (a_lead, a_last) = a.split_at(a.len() - 2);
    let (b_lead, b_last) = b.split_at(b.len() - 2);
    let (m, n, p) = (a_last[0], a_last[1], b_last[1]);
    if b_last[0] != n {
        return Err(AttentionError::shape(
            "b",
            b,
            &format!(
                "a shape (..., n, p) with n = {n}, to multiply a of shape {a:?}, was expected"
            ),
        ));
    }
    if a_lead != b_lead {
        return Err(AttentionError::Batch {
            left: "a".into(),
            left_shape: a_lead.to_vec(),
            right: "b".into(),
            right_shape: b_lead.to_vec(),
        });
    }
    Ok((a_lead, m, n, p))
}
// ANCHOR_END: check_matmul

/// `eˣ`, computed by [`libm::exp`] in `f64` and rounded to `A`: the same result on every
/// x86-64 and aarch64 machine (unlike `f64::exp`, which calls the system library).
/// `exp(−∞) = 0`.
///
/// ```
/// use attention::exact::exp;
///
/// assert_eq!(exp(0.0_f64), 1.0);
/// assert_eq!(exp(f64::NEG_INFINITY), 0.0);
/// assert_eq!(exp(1.0_f32), std::f32::consts::E);
/// assert!((exp(1.0_f64) - std::f64::consts::E).abs() <= f64::EPSILON * 2.0);
/// ```
// ANCHOR: exact_exp_ln
pub fn exp<A: Float>(x: A) -> A {
    A::from_f64_lossy(libm::exp(x.to_f64().expect("f32 and f64 convert to f64")))
}

// ANCHOR_END: exact_exp_ln
/// The natural logarithm, computed by [`libm::log`] in `f64` and rounded to `A`: the same
/// result on every x86-64 and aarch64 machine. `ln(0) = −∞`; `ln` of a negative number is
/// NaN.
///
/// ```
/// use attention::exact::ln;
///
/// assert_eq!(ln(1.0_f64), 0.0);
/// assert_eq!(ln(0.0_f32), f32::NEG_INFINITY);
/// assert!(ln(-1.0_f64).is_nan());
/// assert!((ln(std::f64::consts::E) - 1.0).abs() <= f64::EPSILON);
/// ```
// ANCHOR: exact_exp_ln
pub fn ln<A: Float>(x: A) -> A {
    A::from_f64_lossy(libm::log(x.to_f64().expect("f32 and f64 convert to f64")))
}
// ANCHOR_END: exact_exp_ln

/// Softmax along the last axis with [`exp`], the same rules as
/// [`softmax::softmax`](crate::softmax::softmax): subtract the row maximum, `−∞ → 0`, a row
/// of only `−∞` becomes all zeros. Each row's sum adds its terms left to right.
///
/// ```
/// use attention::exact::softmax;
/// use ndarray::{array, arr0};
///
/// let w = softmax(&array![[0.0, 0.0], [f64::NEG_INFINITY, f64::NEG_INFINITY]]);
/// assert_eq!(w, array![[0.5, 0.5], [0.0, 0.0]]);
///
/// let scores = array![[1.0, -2.0, 0.5], [3.0, 3.0, f64::NEG_INFINITY]];
/// let fast = attention::softmax::softmax(&scores);
/// assert!((softmax(&scores) - fast).iter().all(|d| d.abs() < 1e-15));
/// assert_eq!(softmax(&arr0(7.0_f32)), arr0(1.0)); // a single number is one row
/// ```
// ANCHOR: exact_softmax
pub fn softmax<A: Float, D: Dimension>(scores: &ArrayRef<A, D>) -> Array<A, D> {
    let mut weights = scores.to_owned();
    match weights.ndim().checked_sub(1) {
        Some(last) => weights.lanes_mut(Axis(last)).into_iter().for_each(softmax_row),
        None => softmax_row(weights.view_mut().into_shape_with_order(1).expect("one number")),
    }
    weights
}

/// One row, in place: `exp(x − max) / Σ exp(x − max)`, the sum taken left to right.
fn softmax_row<A: Float>(mut row: ArrayViewMut1<'_, A>) {
    let max = row.fold(A::neg_infinity(), |m, &x| m.max(x));
    if max == A::neg_infinity() {
        row.fill(A::zero()); // no visible key: no weight anywhere
        return;
    }
    let mut sum = A::zero();
    for x in row.iter_mut() {
        *x = exp(*x - max); // every exponent ≤ 0: no overflow
        sum = sum + *x;
    }
    row.mapv_inplace(|e| e / sum);
}
// ANCHOR_END: exact_softmax

/// [`sdpa_batched`](crate::sdpa::sdpa_batched) computed with [`matmul`] and [`softmax`]:
/// `softmax(Q·Kᵀ/√d_k + M)·V` for `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)`,
/// `v: (..., L_k, d_v)` and a mask that broadcasts to `(..., L_q, L_k)`. The same shape
/// checks and errors; the weights are returned too (the backward pass needs them).
///
/// ```
/// use attention::{exact, mask::Mask, sdpa::sdpa_batched};
/// use ndarray::Array3;
///
/// let q = Array3::from_shape_fn((2, 3, 4), |(b, i, j)| ((b + 2 * i + j) % 5) as f64 / 4.0);
/// let k = Array3::from_shape_fn((2, 5, 4), |(b, i, j)| ((b * i + j) % 3) as f64 / 2.0);
/// let v = Array3::from_shape_fn((2, 5, 2), |(b, i, j)| (b + i + j) as f64);
/// let causal = Mask::causal_rect(3, 5);
/// let exact = exact::sdpa(&q, &k, &v, Some(&causal)).unwrap();
/// let fast = sdpa_batched(&q, &k, &v, Some(&causal)).unwrap();
/// assert!((exact.output - fast.output).iter().all(|d| d.abs() < 1e-12));
/// assert_eq!(exact.weights[[0, 0, 1]], 0.0); // query 0 does not see key 1
/// assert!(exact::sdpa(&q, &k, &q, None).is_err()); // v has L_k = 3, k has 5
/// ```
// ANCHOR: exact_sdpa
pub fn sdpa<A: Float, D: Dimension>(
    q: &ArrayRef<A, D>,
    k: &ArrayRef<A, D>,
    v: &ArrayRef<A, D>,
    mask: Option<&Mask>,
) -> Result<Attention<A, D>> {
    let (_, _, d_k, _) = check_qkv(q.shape(), k.shape(), v.shape())?;
    let sqrt_d_k = A::from_len(d_k).sqrt();
    let mut scores = matmul(q, &transposed(k))? / sqrt_d_k; // (..., L_q, L_k)
    if let Some(mask) = mask {
        mask.apply(&mut scores)?; // blocked scores become −∞
    }
    let weights = softmax(&scores);
    let output = matmul(&weights, v)?; // (..., L_q, d_v)
    Ok(Attention { output, weights })
}
// ANCHOR_END: exact_sdpa

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdpa::sdpa_batched;
    use ndarray::{Array2, Array3, Array4, ArrayD, ArrayView2, ShapeBuilder, array, s};
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random<Sh: ShapeBuilder>(shape: Sh, rng: &mut StdRng) -> Array<f64, Sh::Dim> {
        Array::from_shape_simple_fn(shape, || rng.random_range(-2.0..2.0))
    }

    /// The documented order, written as plainly as possible.
    fn by_hand(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
        let (m, n) = a.dim();
        let p = b.ncols();
        Array2::from_shape_fn((m, p), |(i, j)| {
            let mut acc = 0.0;
            for k in 0..n {
                acc += a[[i, k]] * b[[k, j]];
            }
            acc
        })
    }

    #[test]
    fn matmul_adds_the_terms_in_the_documented_order() {
        // Terms of very different sizes: the order of the additions decides which small ones
        // survive. Row 0 · column 0 = 1e16 + 1 − 1e16 + 1 …: in the order k = 0, 1, … each 1
        // vanishes into 1e16 (or not) differently from any other order.
        let mut rng = StdRng::seed_from_u64(7);
        let n = 37;
        let a = Array2::from_shape_fn((5, n), |(i, k)| {
            let big = if (i + k) % 3 == 0 { 1e16 } else { 1.0 };
            big * rng.random_range(0.5..1.5) * if k % 2 == 0 { 1.0 } else { -1.0 }
        });
        let b = Array2::from_shape_fn((n, 6), |_| rng.random_range(0.1..3.0));
        let exact = matmul(&a, &b).unwrap();
        assert_eq!(exact, by_hand(&a, &b)); // bit for bit
        // The values are such that the order matters: the same terms summed backwards (and
        // ndarray's GEMM, whichever order its kernel uses) give other bits somewhere.
        let backwards = Array2::from_shape_fn((5, 6), |(i, j)| {
            (0..n).rev().fold(0.0, |acc, k| acc + a[[i, k]] * b[[k, j]])
        });
        assert_ne!(exact, backwards);
        // Transposed and strided views give the same bits as contiguous copies.
        let at = a.t().to_owned();
        assert_eq!(matmul(&transposed(&at), &b).unwrap(), exact);
        let bt = b.t().to_owned();
        assert_eq!(matmul(&a, &transposed(&bt)).unwrap(), exact);
        let wide = Array2::from_shape_fn((5, 2 * n), |(i, k)| a[[i, k / 2]]);
        assert_eq!(matmul(&wide.slice(s![.., ..;2]), &b).unwrap(), exact);
    }

    #[test]
    fn matmul_over_leading_axes_is_matmul_of_each_matrix() {
        let mut rng = StdRng::seed_from_u64(1);
        let a = random((2, 3, 4, 5), &mut rng);
        let b = random((2, 3, 5, 6), &mut rng);
        let c = matmul(&a, &b).unwrap();
        assert_eq!(c.dim(), (2, 3, 4, 6));
        for x in 0..2 {
            for y in 0..3 {
                let a_xy = a.slice(s![x, y, .., ..]).to_owned();
                let b_xy = b.slice(s![x, y, .., ..]).to_owned();
                assert_eq!(c.slice(s![x, y, .., ..]), by_hand(&a_xy, &b_xy));
                let fast = a_xy.dot(&b_xy);
                assert!((&c.slice(s![x, y, .., ..]) - &fast).iter().all(|d| d.abs() < 1e-13));
            }
        }
        // Dynamic dimension, and f32.
        let dyn_c = matmul(&a.clone().into_dyn(), &b.clone().into_dyn()).unwrap();
        assert_eq!(dyn_c, c.into_dyn());
        let a32 = a.mapv(|x| x as f32);
        let b32 = b.mapv(|x| x as f32);
        let c32 = matmul(&a32, &b32).unwrap();
        let (a12, b12): (ArrayView2<f32>, ArrayView2<f32>) =
            (a32.slice(s![1, 2, .., ..]), b32.slice(s![1, 2, .., ..]));
        let fast32 = a12.dot(&b12);
        assert!((&c32.slice(s![1, 2, .., ..]) - &fast32).iter().all(|d| d.abs() < 1e-5));
    }

    #[test]
    fn matmul_of_empty_axes_is_empty_or_zero() {
        let z = matmul(&Array2::<f64>::zeros((3, 0)), &Array2::zeros((0, 2))).unwrap();
        assert_eq!(z, Array2::<f64>::zeros((3, 2)));
        assert_eq!(
            matmul(&Array2::<f64>::zeros((0, 4)), &Array2::zeros((4, 2))).unwrap().dim(),
            (0, 2)
        );
        assert_eq!(
            matmul(&Array3::<f64>::zeros((0, 2, 4)), &Array3::zeros((0, 4, 3))).unwrap().dim(),
            (0, 2, 3)
        );
    }

    #[test]
    fn matmul_rejects_shapes_that_do_not_fit() {
        let err =
            matmul(&Array3::<f64>::zeros((2, 3, 4)), &Array3::zeros((3, 4, 5))).unwrap_err();
        assert_eq!(err.to_string(), "a has leading axes [2] but b has [3]");
        let err =
            matmul(&Array3::<f64>::zeros((2, 3, 4)), &Array3::zeros((2, 5, 4))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "b has shape [2, 5, 4] but a shape (..., n, p) with n = 4, to multiply a of shape \
             [2, 3, 4], was expected"
        );
        let one_axis = ArrayD::<f64>::zeros(IxDyn(&[3]));
        let err = matmul(&one_axis, &ArrayD::zeros(IxDyn(&[3, 2]))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a has shape [3] but a shape (..., rows, cols) was expected"
        );
        let err = matmul(&ArrayD::zeros(IxDyn(&[2, 3])), &one_axis).unwrap_err();
        assert_eq!(
            err.to_string(),
            "b has shape [3] but a shape (..., rows, cols) was expected"
        );
    }

    #[test]
    fn exp_and_ln_are_libm_in_f64() {
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..1000 {
            let x: f64 = rng.random_range(-700.0..700.0);
            assert_eq!(exp(x), libm::exp(x));
            assert!((exp(x) - x.exp()).abs() <= 2.0 * f64::EPSILON * x.exp());
            let y = x.abs() + 1e-300;
            assert_eq!(ln(y), libm::log(y));
            assert!((ln(y) - y.ln()).abs() <= 2.0 * f64::EPSILON * y.ln().abs());
            let x32 = x as f32 / 10.0;
            assert_eq!(exp(x32), libm::exp(x32 as f64) as f32);
        }
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(ln(0.0_f64), f64::NEG_INFINITY);
    }

    /// The version `Cargo.lock` resolves `dependency` of the package `name` (at `version`, when
    /// the lock holds several versions of it) to: the dependency's line in that package's
    /// `[[package]]` entry names its version when the lock holds several (`"rand 0.9.5"`), and
    /// only its name when it holds one (`"libm"`), which is then the only entry of that name.
    fn locked_dependency(
        lock: &str,
        (name, version): (&str, Option<&str>),
        dependency: &str,
    ) -> Option<String> {
        // Each `[[package]]` entry: its name, its version and its dependency lines.
        let entries: Vec<(&str, &str, Vec<&str>)> = lock
            .split("[[package]]")
            .skip(1)
            .map(|entry| {
                let field = |key: &str| {
                    entry
                        .lines()
                        .find_map(|line| line.strip_prefix(key)?.strip_prefix(" = \""))
                        .and_then(|rest| rest.strip_suffix('"'))
                        .unwrap_or_default()
                };
                let dependencies = entry
                    .split_once("dependencies = [")
                    .map(|(_, rest)| rest.split(']').next().unwrap_or_default())
                    .unwrap_or_default()
                    .lines()
                    .map(|line| line.trim().trim_end_matches(',').trim_matches('"'))
                    .filter(|line| !line.is_empty())
                    .collect();
                (field("name"), field("version"), dependencies)
            })
            .collect();
        let mut packages = entries
            .iter()
            .filter(|(n, v, _)| *n == name && version.is_none_or(|version| *v == version));
        let (_, _, dependencies) = packages.next()?;
        if packages.next().is_some() {
            return None; // several versions of the package: say which
        }
        let line = dependencies.iter().find(|d| d.split(' ').next() == Some(dependency))?;
        match line.split_once(' ') {
            Some((_, version)) => Some(version.to_string()),
            None => {
                let mut named = entries.iter().filter(|(n, _, _)| *n == dependency);
                let (_, version, _) = named.next()?;
                named.next().is_none().then(|| version.to_string())
            }
        }
    }

    /// What chapter 11 says the lock file pins, as `locked_dependency` reads it: the attention
    /// crate's own `libm` and rand, and the `rand_chacha` of that rand (its `StdRng` is
    /// rand_chacha's ChaCha12). `Err` names the first that moved.
    fn pins_chapter_11s_versions(lock: &str) -> Result<(), String> {
        for (package, dependency, expected) in [
            (("attention", None), "libm", "0.2.16"),
            (("attention", None), "rand", "0.9.5"),
            (("rand", Some("0.9.5")), "rand_chacha", "0.9.0"),
        ] {
            let found = locked_dependency(lock, package, dependency);
            if found.as_deref() != Some(expected) {
                return Err(format!(
                    "Cargo.lock resolves {}'s {dependency} to {found:?}, not {expected}: check \
                     what chapter 11 says of it",
                    package.0
                ));
            }
        }
        Ok(())
    }

    /// Chapter 11 (the fold "Why these chapters compute through `exact`") names the versions
    /// whose source it describes: `libm` 0.2.16, where `exp` and `log` are replaced by no
    /// processor instruction on x86-64 or aarch64, and rand 0.9.5, whose `StdRng` is ChaCha12
    /// (from `rand_chacha` 0.9.0) and not promised to stay so. A `cargo update` that moves any of
    /// them, as this crate resolves them (other crates of the workspace may pull in other
    /// versions), fails here, so that those claims are read again, and the chapter updated,
    /// before the versions change.
    #[test]
    fn the_lock_file_pins_the_versions_chapter_11_names() {
        let lock = include_str!("../../../../Cargo.lock");
        assert_eq!(pins_chapter_11s_versions(lock), Ok(()));
    }

    /// The check above fails when the lock moves one of the versions, even while the old
    /// version stays in the lock for another crate.
    #[test]
    fn the_pin_check_sees_a_moved_version() {
        let lock = include_str!("../../../../Cargo.lock");
        let attention = |lock: &str| {
            let (_, rest) = lock.split_once("name = \"attention\"\n").unwrap();
            rest.split("[[package]]").next().unwrap().to_string()
        };
        let entry = attention(lock);
        assert!(entry.contains("\"rand 0.9.5\","), "{entry}");
        // attention on rand 0.10.3 (also in the lock), while rand 0.9.5 stays for others.
        let moved =
            lock.replacen(&entry, &entry.replace("\"rand 0.9.5\",", "\"rand 0.10.3\","), 1);
        let err = pins_chapter_11s_versions(&moved).unwrap_err();
        assert!(err.contains("attention's rand to Some(\"0.10.3\")"), "{err}");
        assert!(moved.contains("name = \"rand\"\nversion = \"0.9.5\"\n"));
        // rand_chacha moved under rand 0.9.5.
        let chacha = "name = \"rand_chacha\"\nversion = \"0.9.0\"\n";
        assert!(lock.contains(chacha));
        let moved = lock.replacen(chacha, "name = \"rand_chacha\"\nversion = \"0.9.1\"\n", 1);
        let err = pins_chapter_11s_versions(&moved).unwrap_err();
        assert!(err.contains("rand's rand_chacha to Some(\"0.9.1\")"), "{err}");
        // libm moved: a single version, named without one.
        let libm = "name = \"libm\"\nversion = \"0.2.16\"\n";
        let moved = lock.replacen(libm, "name = \"libm\"\nversion = \"0.2.17\"\n", 1);
        let err = pins_chapter_11s_versions(&moved).unwrap_err();
        assert!(err.contains("attention's libm to Some(\"0.2.17\")"), "{err}");
        // A dependency the crate no longer has.
        let dropped = lock.replacen(&entry, &entry.replace(" \"libm\",\n", ""), 1);
        assert!(pins_chapter_11s_versions(&dropped).unwrap_err().contains("libm to None"));
    }

    #[test]
    fn softmax_matches_the_chapter_softmax() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut scores = random((3, 4, 7), &mut rng) * 5.0;
        scores[[0, 1, 2]] = f64::NEG_INFINITY;
        scores.slice_mut(s![2, 3, ..]).fill(f64::NEG_INFINITY); // a row with no visible key
        let exact = softmax(&scores);
        let fast = crate::softmax::softmax(&scores);
        assert!((&exact - &fast).iter().all(|d| d.abs() < 1e-15));
        assert_eq!(exact[[0, 1, 2]], 0.0);
        assert!(exact.slice(s![2, 3, ..]).iter().all(|&w| w == 0.0));
        // Huge scores: no overflow, as in chapter Softmax.
        assert_eq!(softmax(&array![[1000.0_f32, 1000.0]]), array![[0.5, 0.5]]);
        // The sum is taken left to right: the hand-written row gives the same bits.
        let row = scores.slice(s![1, 2, ..]);
        let max = row.fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        let e: Vec<f64> = row.iter().map(|&x| libm::exp(x - max)).collect();
        let mut sum = 0.0;
        for &x in &e {
            sum += x;
        }
        let by_hand: Vec<f64> = e.iter().map(|x| x / sum).collect();
        assert_eq!(exact.slice(s![1, 2, ..]).to_vec(), by_hand);
    }

    #[test]
    fn sdpa_matches_sdpa_batched() {
        let mut rng = StdRng::seed_from_u64(5);
        let q = random((2, 3, 5, 4), &mut rng);
        let k = random((2, 3, 6, 4), &mut rng);
        let v = random((2, 3, 6, 3), &mut rng);
        let mut allowed = Array4::from_shape_simple_fn((2, 3, 5, 6), || rng.random_bool(0.6));
        allowed.slice_mut(s![1, 2, 0, ..]).fill(false); // a query with no visible key
        let masks = [
            None,
            Some(Mask::causal_rect(5, 6)),
            Some(Mask::padding(&[6, 2], 5, 6).unwrap().for_heads()),
            Some(Mask::from_array(allowed).unwrap()),
        ];
        for mask in &masks {
            let exact = sdpa(&q, &k, &v, mask.as_ref()).unwrap();
            let fast = sdpa_batched(&q, &k, &v, mask.as_ref()).unwrap();
            assert!((&exact.output - &fast.output).iter().all(|d| d.abs() < 1e-12));
            assert!((&exact.weights - &fast.weights).iter().all(|d| d.abs() < 1e-12));
        }
        let last = sdpa(&q, &k, &v, masks[3].as_ref()).unwrap();
        assert!(last.output.slice(s![1, 2, 0, ..]).iter().all(|&o| o == 0.0));
        // Two-dimensional inputs and f32.
        let q2 = q.slice(s![0, 0, .., ..]).mapv(|x| x as f32);
        let k2 = k.slice(s![0, 0, .., ..]).mapv(|x| x as f32);
        let v2 = v.slice(s![0, 0, .., ..]).mapv(|x| x as f32);
        let exact = sdpa(&q2, &k2, &v2, None).unwrap();
        let fast = crate::sdpa::sdpa(&q2, &k2, &v2, None).unwrap();
        assert!((&exact.output - &fast.output).iter().all(|d| d.abs() < 1e-5));
    }

    #[test]
    fn sdpa_reports_the_same_errors_as_sdpa_batched() {
        let q = Array3::<f64>::zeros((2, 3, 4));
        let bad = [
            (Array3::zeros((2, 5, 6)), Array3::zeros((2, 5, 2))),
            (Array3::zeros((2, 5, 4)), Array3::zeros((2, 6, 2))),
            (Array3::zeros((3, 5, 4)), Array3::zeros((3, 5, 2))),
        ];
        for (k, v) in &bad {
            let exact = sdpa(&q, k, v, None).unwrap_err();
            assert_eq!(exact, sdpa_batched(&q, k, v, None).unwrap_err());
        }
        let (k, v) = (Array3::zeros((2, 5, 4)), Array3::zeros((2, 5, 2)));
        let mask = Mask::causal(4);
        let exact = sdpa(&q, &k, &v, Some(&mask)).unwrap_err();
        assert_eq!(exact, sdpa_batched(&q, &k, &v, Some(&mask)).unwrap_err());
        assert_eq!(
            exact.to_string(),
            "mask has shape [4, 4], which does not broadcast to the scores' shape [2, 3, 5]"
        );
    }
}
