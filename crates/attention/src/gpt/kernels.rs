//! Chapter *A model that writes*: one model, two arithmetics.
//!
//! The model's forward and backward passes ([`forward`](super::forward)) are written once,
//! against the [`Kernels`] trait: the handful of operations a GPT is made of. Two
//! implementations run them:
//!
//! - [`Exact`], for any [`Float`]: the functions of [`ops`](super::ops), chapter 11's exact
//!   arithmetic. The same bits on every machine: what the book's figures and quoted numbers
//!   come from, and what the tests check against finite differences in `f64`.
//! - [`Fast`], for `f32`: the matrix products through the `matrixmultiply` crate's GEMM (the
//!   one under ndarray's `dot`, with AVX2, FMA or AVX-512 kernels chosen when the program
//!   starts), and GELU, softmax and layer norm written for `f32` with
//!   [`exp_f32`](crate::kernel::exp_f32), chapter 8's exponential. Fast, and accurate to
//!   `f32`'s rounding, but its last bits depend on the processor.
//!
//! Anchors (below the doc comments): `kernels`, `dense`, `dense_backward`, `fast_gelu`.

use ndarray::{
    Array1, Array2, Array4, ArrayView2, ArrayView3, ArrayViewMut2, linalg::general_mat_mul, s,
};

use super::ops;
use super::weights::{Dense, Norm};
use crate::error::Result;
use crate::float::Float;
use std::sync::OnceLock;

use crate::kernel::{Simd, exp_f32};

/// The operations a GPT's forward and backward passes are made of.
///
/// ```
/// use attention::gpt::kernels::{Exact, Fast, Kernels};
/// use ndarray::array;
///
/// let a = array![[1.0_f32, 2.0], [3.0, 4.0]];
/// assert_eq!(Exact.matmul(&a.view(), &a.t()), Fast.matmul(&a.view(), &a.t()));
/// ```
// ANCHOR: kernels
pub trait Kernels<A: Float>: Sync {
    /// `a · b` for `a: (m, n)`, `b: (n, p)` (either may be a transposed view).
    fn matmul(&self, a: &ArrayView2<A>, b: &ArrayView2<A>) -> Array2<A>;
    /// Layer norm of every row.
    fn norm(&self, x: &ArrayView2<A>, norm: &Norm<A>, eps: f64) -> Result<Array2<A>>;
    /// Its backward pass: `(grad_x, grad_gamma, grad_beta)`.
    fn norm_backward(
        &self,
        x: &ArrayView2<A>,
        norm: &Norm<A>,
        eps: f64,
        grad_y: &ArrayView2<A>,
    ) -> (Array2<A>, Array1<A>, Array1<A>);
    /// GELU of every entry.
    fn gelu(&self, u: &ArrayView2<A>) -> Array2<A>;
    /// Its backward pass: `grad_g · GELU'(u)`.
    fn gelu_backward(&self, u: &ArrayView2<A>, grad_g: &ArrayView2<A>) -> Array2<A>;
    /// Causal attention of a batch laid out as `qkv: (B·T, 3d)`: the merged heads and the
    /// weights `(B, heads, T, T)`. With `alibi`, one slope per head, ALiBi's bias.
    fn causal_attention(
        &self,
        qkv: &ArrayView2<A>,
        batch: usize,
        heads: usize,
        alibi: Option<&[f64]>,
    ) -> Result<(Array2<A>, Array4<A>)>;
    /// Its backward pass: the gradient of `qkv`.
    fn causal_attention_backward(
        &self,
        qkv: &ArrayView2<A>,
        weights: &Array4<A>,
        grad_y: &ArrayView2<A>,
    ) -> Result<Array2<A>>;
    /// Causal attention of the `n` newest tokens over a KV cache that holds them last:
    /// `q: (n, d)` their queries, heads side by side; `keys`, `values`: `(heads, m, d_head)`
    /// in position order. Query `i` sees keys `0 ..= m − n + i`. The merged output `(n, d)`.
    /// With `alibi`, one slope per head, ALiBi's bias.
    fn cached_attention(
        &self,
        q: &ArrayView2<A>,
        keys: &ArrayView3<A>,
        values: &ArrayView3<A>,
        alibi: Option<&[f64]>,
    ) -> Result<Array2<A>>;
    /// Mean cross-entropy of `logits: (N, V)` against `targets`, and its gradient.
    fn cross_entropy(
        &self,
        logits: &ArrayView2<A>,
        targets: &[usize],
    ) -> Result<(f64, Array2<A>)>;

    /// `x · W + b`.
    ///
    /// ```
    /// use attention::gpt::{kernels::{Exact, Kernels}, weights::Dense};
    /// use ndarray::array;
    ///
    /// let dense = Dense { w: array![[1.0, 2.0], [3.0, 4.0]], b: array![0.5, 0.0] };
    /// assert_eq!(Exact.dense(&array![[1.0, 1.0]].view(), &dense), array![[4.5, 6.0]]);
    /// ```
    // ANCHOR: dense
    fn dense(&self, x: &ArrayView2<A>, dense: &Dense<A>) -> Array2<A> {
        let mut y = self.matmul(x, &dense.w.view());
        y.zip_mut_with(&dense.b, |y, &b| *y = *y + b); // the same shift on every row
        y
    }
    // ANCHOR_END: dense

    /// The gradients of `x · W + b`: `grad_x = grad_y · Wᵀ`, `grad_w = xᵀ · grad_y`,
    /// `grad_b` = column sums of `grad_y`.
    ///
    /// ```
    /// use attention::gpt::{kernels::{Exact, Kernels}, weights::Dense};
    /// use ndarray::array;
    ///
    /// let dense = Dense { w: array![[1.0, 2.0], [3.0, 4.0]], b: array![0.0, 0.0] };
    /// let (x, grad_y) = (array![[1.0, -1.0]], array![[1.0, 0.0]]);
    /// let (gx, g) = Exact.dense_backward(&x.view(), &dense, &grad_y.view());
    /// assert_eq!(gx, array![[1.0, 3.0]]); // row 0 of W
    /// assert_eq!(g.w, array![[1.0, 0.0], [-1.0, 0.0]]);
    /// assert_eq!(g.b, array![1.0, 0.0]);
    /// ```
    // ANCHOR: dense_backward
    fn dense_backward(
        &self,
        x: &ArrayView2<A>,
        dense: &Dense<A>,
        grad_y: &ArrayView2<A>,
    ) -> (Array2<A>, Dense<A>) {
        let grad_x = self.matmul(grad_y, &dense.w.t());
        let grad_w = self.matmul(&x.t(), grad_y);
        (grad_x, Dense { w: grad_w, b: ops::column_sums(grad_y) })
    }
    // ANCHOR_END: dense_backward
}
// ANCHOR_END: kernels

/// Chapter 11's exact arithmetic: the functions of [`ops`](super::ops), the same bits on
/// every machine.
///
/// ```
/// use attention::gpt::kernels::{Exact, Kernels};
/// use ndarray::array;
///
/// let y = Exact.gelu(&array![[0.0_f64, 1.0]].view());
/// assert_eq!(y[[0, 0]], 0.0);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Exact;

impl<A: Float> Kernels<A> for Exact {
    fn matmul(&self, a: &ArrayView2<A>, b: &ArrayView2<A>) -> Array2<A> {
        crate::exact::matmul(a, b).expect("the inner sizes agree")
    }
    fn norm(&self, x: &ArrayView2<A>, norm: &Norm<A>, eps: f64) -> Result<Array2<A>> {
        ops::layer_norm(x, norm, eps)
    }
    fn norm_backward(
        &self,
        x: &ArrayView2<A>,
        norm: &Norm<A>,
        eps: f64,
        grad_y: &ArrayView2<A>,
    ) -> (Array2<A>, Array1<A>, Array1<A>) {
        ops::layer_norm_backward(x, norm, eps, grad_y)
    }
    fn gelu(&self, u: &ArrayView2<A>) -> Array2<A> {
        ops::gelu_all(u)
    }
    fn gelu_backward(&self, u: &ArrayView2<A>, grad_g: &ArrayView2<A>) -> Array2<A> {
        ops::gelu_backward(u, grad_g)
    }
    fn causal_attention(
        &self,
        qkv: &ArrayView2<A>,
        batch: usize,
        heads: usize,
        alibi: Option<&[f64]>,
    ) -> Result<(Array2<A>, Array4<A>)> {
        ops::causal_attention(qkv, batch, heads, alibi)
    }
    fn causal_attention_backward(
        &self,
        qkv: &ArrayView2<A>,
        weights: &Array4<A>,
        grad_y: &ArrayView2<A>,
    ) -> Result<Array2<A>> {
        ops::causal_attention_backward(qkv, weights, grad_y)
    }
    fn cached_attention(
        &self,
        q: &ArrayView2<A>,
        keys: &ArrayView3<A>,
        values: &ArrayView3<A>,
        alibi: Option<&[f64]>,
    ) -> Result<Array2<A>> {
        ops::cached_attention(q, keys, values, alibi)
    }
    fn cross_entropy(
        &self,
        logits: &ArrayView2<A>,
        targets: &[usize],
    ) -> Result<(f64, Array2<A>)> {
        ops::cross_entropy(logits, targets)
    }
}

/// `f32` arithmetic for speed: GEMM for the products, and the element-wise pieces written
/// for `f32` so that the compiler can vectorise them. Agrees with [`Exact`] to `f32`'s
/// rounding (the tests bound the difference), but its last bits depend on the processor.
///
/// ```
/// use attention::gpt::kernels::{Exact, Fast, Kernels};
/// use ndarray::Array2;
///
/// let u = Array2::from_shape_fn((4, 64), |(i, j)| (i as f32 - 2.0) * (j as f32 / 16.0 - 2.0));
/// let diff = (&Fast.gelu(&u.view()) - &Exact.gelu(&u.view())).mapv(f32::abs);
/// assert!(diff.iter().all(|&d| d < 1e-6));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Fast;

/// `erf(x)` and `e^(−x²)` in `f32`: Abramowitz and Stegun's 7.1.26, `erf(x) = 1 − (a₁t +
/// … + a₅t⁵)·e^(−x²)` with `t = 1/(1 + p·|x|)`; the sign restored by symmetry. The formula
/// is within `1.5e-7` of `erf`; computed in `f32` with [`exp_f32`], within `7e-7` (near 0,
/// where `1 − poly·e^(−x²)` cancels), which keeps GELU within `5e-7`. Branch-free, so that
/// loops over it vectorise.
// ANCHOR: fast_gelu
#[inline(always)]
fn erf_and_gauss<const FMA: bool>(x: f32) -> (f32, f32) {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [0.254_829_6, -0.284_496_72, 1.421_413_8, -1.453_152_1, 1.061_405_4];
    let z = x.abs();
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let gauss = exp_f32::<FMA>(-z * z);
    let erf = 1.0 - poly * gauss;
    (erf.copysign(x), gauss)
}

/// GELU, `x·Φ(x)`, and its derivative `Φ(x) + x·φ(x)`, in `f32`.
#[inline(always)]
fn gelu_f32<const FMA: bool>(x: f32) -> (f32, f32) {
    let (erf, gauss) = erf_and_gauss::<FMA>(x * std::f32::consts::FRAC_1_SQRT_2); // e^(−x²/2)
    let cdf = 0.5 * (1.0 + erf);
    let pdf = gauss * 0.398_942_3; // 1/√(2π)
    (x * cdf, cdf + x * pdf)
}
// ANCHOR_END: fast_gelu

/// The processor's widest vector build, found once.
pub(super) fn simd() -> Simd {
    static BEST: OnceLock<Simd> = OnceLock::new();
    *BEST.get_or_init(Simd::best)
}

/// Defines `$name(args)`, which runs the loop `$body` compiled for the widest vectors the
/// processor has (AVX-512, AVX2 with FMA, or the baseline), as chapter 8's kernels do. The
/// body is generic over `const FMA: bool`: `true` in the AVX-512 and AVX2 builds, `false` in
/// the baseline. Written `fn $name(simd: Simd, args)`, the function runs the build `simd`
/// names instead (the baseline if the processor cannot run it).
macro_rules! vectorised {
    (
        $(#[$doc:meta])* $vis:vis fn $name:ident(simd: Simd, $($arg:ident: $ty:ty),*)
        $body:block
    ) => {
        $(#[$doc])*
        $vis fn $name(simd: $crate::kernel::Simd, $($arg: $ty),*) {
            vectorised!(@dispatch simd, ($($arg: $ty),*), $body)
        }
    };
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) {
            vectorised!(@dispatch $crate::gpt::kernels::simd(), ($($arg: $ty),*), $body)
        }
    };
    (@dispatch $simd:expr, ($($arg:ident: $ty:ty),*), $body:block) => {{
        #[inline(always)]
        fn body<const FMA: bool>($($arg: $ty),*) $body
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        fn avx512($($arg: $ty),*) { body::<true>($($arg),*) }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        fn avx2($($arg: $ty),*) { body::<true>($($arg),*) }
        use $crate::kernel::Simd;
        match $simd {
            // SAFETY: the processor supports the build (checked just before).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 if Simd::Avx512.is_supported() => unsafe { avx512($($arg),*) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 if Simd::Avx2.is_supported() => unsafe { avx2($($arg),*) },
            _ => body::<false>($($arg),*),
        }
    }};
}
pub(super) use vectorised;

vectorised! {
    /// `x ← GELU(x)`, entry by entry.
    pub(super) fn gelu_in_place(simd: Simd, x: &mut [f32]) {
        for x in x.iter_mut() {
            *x = gelu_f32::<FMA>(*x).0;
        }
    }
}

vectorised! {
    /// `grad ← grad · GELU'(u)`, entry by entry.
    fn gelu_backward_slice(u: &[f32], grad: &mut [f32]) {
        for (g, &x) in grad.iter_mut().zip(u) {
            *g *= gelu_f32::<FMA>(x).1;
        }
    }
}

vectorised! {
    /// Row softmax of the scores `(n, m)` (row-major in `p`, `m` columns) in place, row `i`
    /// seeing keys `0 ..= past + i` and the later ones masked out (weight 0): `past = 0` for
    /// a causal pass over `(t, t)`, `m − n` for `n` new tokens over a cache of `m`.
    fn causal_softmax(p: &mut [f32], m: usize, past: usize) {
        if m == 0 {
            return;
        }
        for (i, row) in p.chunks_exact_mut(m).enumerate() {
            let (seen, future) = row.split_at_mut(past + i + 1);
            let max = seen.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            for v in seen.iter_mut() {
                *v = exp_f32::<FMA>(*v - max);
            }
            let inv = 1.0 / seen.iter().sum::<f32>();
            seen.iter_mut().for_each(|v| *v *= inv);
            future.fill(0.0);
        }
    }
}

vectorised! {
    /// `c = a · b` for a few rows `a: (m, k)`, `b: (k, n)`, all row-major: row `i` of `c`
    /// is the rows of `b` weighted by row `i` of `a`, added in order. One pass over `b`
    /// per row and nothing copied, where GEMM would first repack all of `b`.
    pub(super) fn few_rows_times(simd: Simd, a: &[f32], b: &[f32], k: usize, c: &mut [f32]) {
        let n = b.len() / k;
        for (a_row, c_row) in a.chunks_exact(k).zip(c.chunks_exact_mut(n)) {
            c_row.fill(0.0);
            for (&x, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
                for (c, &w) in c_row.iter_mut().zip(b_row) {
                    *c = if FMA { x.mul_add(w, *c) } else { *c + x * w };
                }
            }
        }
    }
}

vectorised! {
    /// `c = a · bᵀ` for a few rows `a: (m, k)` and `bt: (n, k)`, both row-major: every entry
    /// a dot product, summed in 16 lanes.
    pub(super) fn few_rows_times_transposed(simd: Simd, a: &[f32], bt: &[f32], k: usize, c: &mut [f32]) {
        for (a_row, c_row) in a.chunks_exact(k).zip(c.chunks_exact_mut(bt.len() / k)) {
            for (c, b_row) in c_row.iter_mut().zip(bt.chunks_exact(k)) {
                let mut lanes = [0.0_f32; 16];
                let (a16, a_tail) = a_row.split_at(k - k % 16);
                let (b16, b_tail) = b_row.split_at(k - k % 16);
                for (x, w) in a16.chunks_exact(16).zip(b16.chunks_exact(16)) {
                    for l in 0..16 {
                        lanes[l] = if FMA { x[l].mul_add(w[l], lanes[l]) } else { lanes[l] + x[l] * w[l] };
                    }
                }
                let tail: f32 = a_tail.iter().zip(b_tail).map(|(x, w)| x * w).sum();
                *c = lanes.iter().sum::<f32>() + tail;
            }
        }
    }
}

/// Rows of `a` at or below which [`Fast`]'s product skips GEMM (a decoding step has one).
const FEW_ROWS: usize = 4;

impl Kernels<f32> for Fast {
    fn matmul(&self, a: &ArrayView2<f32>, b: &ArrayView2<f32>) -> Array2<f32> {
        let ((m, k), n) = (a.dim(), b.ncols());
        if let Some(a) = a.as_slice().filter(|_| m <= FEW_ROWS && k > 0 && n > 0) {
            if let Some(b) = b.as_slice() {
                let mut c = vec![0.0; m * n];
                few_rows_times(simd(), a, b, k, &mut c);
                return Array2::from_shape_vec((m, n), c).expect("m·n entries");
            }
            if let Some(bt) = b.t().as_slice() {
                let mut c = vec![0.0; m * n];
                few_rows_times_transposed(simd(), a, bt, k, &mut c);
                return Array2::from_shape_vec((m, n), c).expect("m·n entries");
            }
        }
        let mut c = Array2::uninit((m, n));
        gemm_into(1.0, a, b, c.view_mut());
        // SAFETY: gemm_into wrote every entry.
        unsafe { c.assume_init() }
    }

    fn norm(&self, x: &ArrayView2<f32>, norm: &Norm<f32>, eps: f64) -> Result<Array2<f32>> {
        if norm.gamma.len() != x.ncols() || norm.beta.len() != x.ncols() {
            return ops::layer_norm(x, norm, eps); // the exact path names the mismatch
        }
        let mut y = x.as_standard_layout().into_owned();
        let (gamma, beta) =
            (norm.gamma.as_slice().expect("1-D"), norm.beta.as_slice().expect("1-D"));
        for mut row in y.rows_mut() {
            let row = row.as_slice_mut().expect("row-major");
            let (mean, inv_std) = row_stats(row, eps);
            for ((v, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
                *v = (*v - mean) * inv_std * g + b;
            }
        }
        Ok(y)
    }

    fn norm_backward(
        &self,
        x: &ArrayView2<f32>,
        norm: &Norm<f32>,
        eps: f64,
        grad_y: &ArrayView2<f32>,
    ) -> (Array2<f32>, Array1<f32>, Array1<f32>) {
        let d = x.ncols();
        if norm.gamma.len() != d || grad_y.dim() != x.dim() {
            return ops::layer_norm_backward(x, norm, eps, grad_y); // as the exact path does
        }
        let (x, grad_y) = (x.as_standard_layout(), grad_y.as_standard_layout());
        let gamma = norm.gamma.as_slice().expect("1-D");
        let mut grad_x = Array2::zeros(x.raw_dim());
        let (mut grad_gamma, mut grad_beta) = (vec![0.0f32; d], vec![0.0f32; d]);
        let mut x_hat = vec![0.0f32; d];
        let mut g = vec![0.0f32; d];
        for ((x, gy), mut gx) in x.rows().into_iter().zip(grad_y.rows()).zip(grad_x.rows_mut())
        {
            let (x, gy) =
                (x.to_slice().expect("row-major"), gy.to_slice().expect("row-major"));
            let (mean, inv_std) = row_stats(x, eps);
            let (mut sum_g, mut sum_g_xhat) = (0.0f32, 0.0f32);
            for j in 0..d {
                x_hat[j] = (x[j] - mean) * inv_std;
                g[j] = gy[j] * gamma[j];
                sum_g += g[j];
                sum_g_xhat += g[j] * x_hat[j];
                grad_gamma[j] += gy[j] * x_hat[j];
                grad_beta[j] += gy[j];
            }
            let (mean_g, mean_g_xhat) = (sum_g / d as f32, sum_g_xhat / d as f32);
            for (j, out) in gx.iter_mut().enumerate() {
                *out = (g[j] - mean_g - x_hat[j] * mean_g_xhat) * inv_std;
            }
        }
        (grad_x, Array1::from(grad_gamma), Array1::from(grad_beta))
    }

    fn gelu(&self, u: &ArrayView2<f32>) -> Array2<f32> {
        let u = u.as_standard_layout();
        let mut g = u.to_owned();
        gelu_in_place(simd(), g.as_slice_mut().expect("row-major"));
        g
    }

    fn gelu_backward(&self, u: &ArrayView2<f32>, grad_g: &ArrayView2<f32>) -> Array2<f32> {
        let u = u.as_standard_layout();
        let mut grad_u = grad_g.as_standard_layout().into_owned();
        gelu_backward_slice(
            u.as_slice().expect("row-major"),
            grad_u.as_slice_mut().expect("row-major"),
        );
        grad_u
    }

    fn causal_attention(
        &self,
        qkv: &ArrayView2<f32>,
        batch: usize,
        heads: usize,
        alibi: Option<&[f64]>,
    ) -> Result<(Array2<f32>, Array4<f32>)> {
        let (t, d, d_head) = attention_sizes(qkv, batch, heads)?;
        if let Some(slopes) = alibi {
            ops::check_slopes(slopes, heads)?;
        }
        let scale = 1.0 / (d_head as f32).sqrt();
        let mut y = Array2::uninit((batch * t, d));
        let mut weights = Array4::uninit((batch, heads, t, t));
        for b in 0..batch {
            let rows = b * t..(b + 1) * t;
            for h in 0..heads {
                let cols = h * d_head..(h + 1) * d_head;
                let q = qkv.slice(s![rows.clone(), cols.clone()]);
                let k = qkv.slice(s![rows.clone(), d + cols.start..d + cols.end]);
                let v = qkv.slice(s![rows.clone(), 2 * d + cols.start..2 * d + cols.end]);
                let mut p = weights.slice_mut(s![b, h, .., ..]);
                gemm_into(scale, &q, &k.t(), p.view_mut()); // S = Q·Kᵀ/√d_head
                // SAFETY: gemm_into wrote every entry of this head's scores.
                let mut p = unsafe { p.assume_init() };
                let p_rows = p.as_slice_mut().expect("row-major");
                if let Some(slopes) = alibi {
                    add_alibi(p_rows, t, 0, slopes[h]);
                }
                causal_softmax(p_rows, t, 0);
                gemm_into(1.0, &p.view(), &v, y.slice_mut(s![rows.clone(), cols])); // P·V
            }
        }
        // SAFETY: every head wrote its scores and its columns of every row.
        Ok(unsafe { (y.assume_init(), weights.assume_init()) })
    }

    fn cached_attention(
        &self,
        q: &ArrayView2<f32>,
        keys: &ArrayView3<f32>,
        values: &ArrayView3<f32>,
        alibi: Option<&[f64]>,
    ) -> Result<Array2<f32>> {
        let (n, m) = ops::cached_sizes(q, keys, values)?;
        if let Some(slopes) = alibi {
            ops::check_slopes(slopes, keys.shape()[0])?;
        }
        let d_head = keys.shape()[2];
        let scale = 1.0 / (d_head as f32).sqrt();
        let mut y = Array2::uninit(q.raw_dim());
        let mut scores = Array2::uninit((n, m));
        for (h, (k, v)) in keys.outer_iter().zip(values.outer_iter()).enumerate() {
            let cols = h * d_head..(h + 1) * d_head;
            gemm_into(scale, &q.slice(s![.., cols.clone()]), &k.t(), scores.view_mut());
            // SAFETY: gemm_into wrote every entry of the scores.
            let mut p = unsafe { scores.view_mut().assume_init() };
            let p_rows = p.as_slice_mut().expect("row-major");
            if let Some(slopes) = alibi {
                add_alibi(p_rows, m, m - n, slopes[h]);
            }
            causal_softmax(p_rows, m, m - n);
            gemm_into(1.0, &p.view(), &v, y.slice_mut(s![.., cols])); // P·V
        }
        // SAFETY: every head wrote its columns of every row.
        Ok(unsafe { y.assume_init() })
    }

    fn causal_attention_backward(
        &self,
        qkv: &ArrayView2<f32>,
        weights: &Array4<f32>,
        grad_y: &ArrayView2<f32>,
    ) -> Result<Array2<f32>> {
        let (batch, heads) = (weights.shape()[0], weights.shape()[1]);
        let (t, d, d_head) = attention_sizes(qkv, batch, heads)?;
        let scale = 1.0 / (d_head as f32).sqrt();
        let mut grad_qkv = Array2::uninit(qkv.raw_dim());
        let mut grad_s = Array2::zeros((t, t));
        for b in 0..batch {
            let rows = b * t..(b + 1) * t;
            for h in 0..heads {
                let c = h * d_head;
                let q = qkv.slice(s![rows.clone(), c..c + d_head]);
                let k = qkv.slice(s![rows.clone(), d + c..d + c + d_head]);
                let v = qkv.slice(s![rows.clone(), 2 * d + c..2 * d + c + d_head]);
                let p = weights.slice(s![b, h, .., ..]);
                let grad_o = grad_y.slice(s![rows.clone(), c..c + d_head]);
                // dV = Pᵀ·dO
                let grad_v =
                    grad_qkv.slice_mut(s![rows.clone(), 2 * d + c..2 * d + c + d_head]);
                gemm_into(1.0, &p.t(), &grad_o, grad_v);
                // dP = dO·Vᵀ, then dS = P ∘ (dP − rowsum(dP ∘ P))
                general_mat_mul(1.0, &grad_o, &v.t(), 0.0, &mut grad_s);
                softmax_backward_rows(&p, &mut grad_s.view_mut());
                // dQ = dS·K/√d, dK = dSᵀ·Q/√d
                let grad_q = grad_qkv.slice_mut(s![rows.clone(), c..c + d_head]);
                gemm_into(scale, &grad_s.view(), &k, grad_q);
                let grad_k = grad_qkv.slice_mut(s![rows.clone(), d + c..d + c + d_head]);
                gemm_into(scale, &grad_s.t(), &q, grad_k);
            }
        }
        // SAFETY: every head wrote its columns (of Q, K and V) of every row.
        Ok(unsafe { grad_qkv.assume_init() })
    }

    fn cross_entropy(
        &self,
        logits: &ArrayView2<f32>,
        targets: &[usize],
    ) -> Result<(f64, Array2<f32>)> {
        // The same checks and formula as the exact path, with f32 exponentials.
        let (n, vocab) = logits.dim();
        if targets.len() != n || targets.iter().any(|&t| t >= vocab) {
            return ops::cross_entropy(logits, targets); // the exact path names the problem
        }
        let mut grad = logits.to_owned();
        let mut total = 0.0f64;
        for (mut row, &target) in grad.rows_mut().into_iter().zip(targets) {
            let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let z_target = row[target];
            let mut sum = 0.0f32;
            row.mapv_inplace(|v| {
                let e = exp_f32::<false>(v - max);
                sum += e;
                e
            });
            total += f64::from(max) + f64::from(sum).ln() - f64::from(z_target);
            let inv = 1.0 / (sum * n as f32);
            row.mapv_inplace(|e| e * inv);
            row[target] -= 1.0 / n as f32;
        }
        Ok((total / n as f64, grad))
    }
}

/// ALiBi's bias on the scores `(n, m)` (row-major in `p`) of one head with slope `slope`:
/// row `i`, the query at position `past + i`, gets `−slope·(past + i − j)` on every key
/// `j ≤ past + i` it sees.
fn add_alibi(p: &mut [f32], m: usize, past: usize, slope: f64) {
    if m == 0 {
        return;
    }
    for (i, row) in p.chunks_exact_mut(m).enumerate() {
        let query = past + i;
        for (j, s) in row[..=query.min(m - 1)].iter_mut().enumerate() {
            *s += (slope * (j as f64 - query as f64)) as f32;
        }
    }
}

/// `c = alpha · a · b` through `matrixmultiply`'s GEMM, `c` written without being read (its
/// previous contents, initialised or not, do not matter), whatever the strides of the three.
fn gemm_into(
    alpha: f32,
    a: &ArrayView2<f32>,
    b: &ArrayView2<f32>,
    mut c: ArrayViewMut2<std::mem::MaybeUninit<f32>>,
) {
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    assert!(
        k == k2 && c.dim() == (m, n),
        "gemm_into: ({m}, {k})·({k2}, {n}) into {:?}",
        c.dim()
    );
    let (sa, sb, sc) = (a.strides(), b.strides(), c.strides().to_vec());
    // SAFETY: the three pointers and their strides describe the views' own elements, which the
    // views keep alive; with beta = 0, matrixmultiply writes every entry of c and reads none.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            sa[0],
            sa[1],
            b.as_ptr(),
            sb[0],
            sb[1],
            0.0,
            c.as_mut_ptr().cast::<f32>(),
            sc[0],
            sc[1],
        );
    }
}

/// The mean and `1/√(var + ε)` of a row, in `f32`, two passes.
fn row_stats(row: &[f32], eps: f64) -> (f32, f32) {
    let d = row.len() as f32;
    let mean = row.iter().sum::<f32>() / d;
    let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / d;
    (mean, 1.0 / (var + eps as f32).sqrt())
}

/// `(T, d, d_head)` of `qkv: (B·T, 3d)`, or the exact path's error.
fn attention_sizes(
    qkv: &ArrayView2<f32>,
    batch: usize,
    heads: usize,
) -> Result<(usize, usize, usize)> {
    let (rows, cols) = qkv.dim();
    if batch == 0 || heads == 0 || rows % batch != 0 || cols % (3 * heads) != 0 {
        let bad = ops::causal_attention(qkv, batch, heads, None);
        return bad.map(|_| unreachable!("a bad shape"));
    }
    Ok((rows / batch, cols / 3, cols / 3 / heads))
}

/// `dS = P ∘ (dP − rowsum(dP ∘ P))`, in place of `dP`.
fn softmax_backward_rows(p: &ArrayView2<f32>, grad: &mut ArrayViewMut2<f32>) {
    for (p, mut g) in p.rows().into_iter().zip(grad.rows_mut()) {
        let dot: f32 = p.iter().zip(g.iter()).map(|(&p, &g)| p * g).sum();
        g.zip_mut_with(&p, |g, &p| *g = p * (*g - dot));
    }
}
