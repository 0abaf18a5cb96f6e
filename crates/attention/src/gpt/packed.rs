//! Chapter *A model that writes*, serving chapter *Inside a real model*: the encoder layer's
//! forward pass for one sentence on a fast `f32` path.
//!
//! Chapter 13's [`EncoderLayer::forward`] is the plain path: the layers as the chapters built
//! them, where the chapter's figures and numbers come from. With one sentence of 16 tokens,
//! almost all of its work is six matrix products per layer, short (16 rows) and wide:
//! `(16, 384)·(384, 1536)`. A general matrix product (`matrixmultiply`, under ndarray's `dot`)
//! copies both operands into its kernel's order on every call, and with 16 rows it spends
//! longer copying the weights than multiplying by them. Here the weights, the same for every
//! call, are copied once, when the layer is built ([`PackedLinear`]): into panels of [`NR`]
//! columns, each panel `d_in` rows of [`NR`] entries, the order in which chapter 8's
//! micro-kernel ([`scores_panel`]) reads its keys. `x·W` has the shape of chapter 8's
//! `Q·Kᵀ`: the rows of `x` play the queries and the columns of `W` the keys. A product reads
//! each panel from memory once (then from the cache for the next rows), the panels shared out
//! among the threads, and every output entry is its bias plus its `d_in` products summed in
//! order, whatever the number of threads. `W_Q`, `W_K` and `W_V` are packed side by side, one
//! product. GELU is chapter 15's ([`Fast`](super::kernels::Fast)'s); layer norm (its sums in
//! [`NR`] lanes) and softmax (chapter 8's `exp`) are written here in the same style. Every
//! loop runs in the build [`Simd::chosen`] picks (`ATTENTION_SIMD` included), or the one an
//! `_on` function is given.
//!
//! [`FastEncoderLayer`] agrees with [`EncoderLayer::forward`] to `f32`'s rounding (the tests
//! bound the difference), and it returns the hidden states only: no attention weights, no
//! padding mask (one sentence at a time). It is what `ch13_real_model --time` times.
//!
//! Anchor (below the doc comments): `packed_linear`.

use ndarray::{Array2, ArrayRef2, concatenate, s};
use rayon::prelude::*;

use super::kernels::{gelu_in_place, vectorised};
use crate::encoder::EncoderLayer;
use crate::error::{AttentionError, Result};
use crate::kernel::{NR, Simd, exp_in_place, madd, row_max, scores_panel};
use crate::layer_norm::LayerNorm;
use crate::projection::Linear;

/// A linear map `x·W + b` with `W: (d_in, d_out)` stored in the micro-kernel's order, for
/// products with few rows.
///
/// ```
/// use attention::gpt::packed::PackedLinear;
/// use attention::projection::Linear;
/// use ndarray::Array2;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let map = Linear::<f32>::random(384, 1536, &mut StdRng::seed_from_u64(0)).unwrap();
/// let packed = PackedLinear::new(&map);
/// let x = Array2::from_shape_fn((16, 384), |(i, j)| ((i * 7 + j) % 13) as f32 - 6.0);
/// let diff = (&packed.apply(&x).unwrap() - &map.apply(&x).unwrap()).mapv(f32::abs);
/// assert!(diff.iter().all(|&d| d < 1e-4)); // the same sums, added in another order
/// let err = packed.apply(&Array2::zeros((16, 5))).unwrap_err();
/// assert_eq!(err.to_string(), "x has d_in = 5 but W has d_in = 384");
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: packed_linear
pub struct PackedLinear {
    d_in: usize,
    d_out: usize,
    panels: Vec<f32>, // panel p: W's columns NR·p..NR·p + NR, row by row (d_in rows of NR)
    bias: Vec<f32>,   // (d_out), zeros for a map without one
}

impl PackedLinear {
    // ANCHOR_END: packed_linear
    /// Packs a chapter-3 map (its bias too, if it has one).
    ///
    /// ```
    /// use attention::gpt::packed::PackedLinear;
    /// use attention::projection::Linear;
    /// use ndarray::{Array1, array};
    ///
    /// let map = Linear::with_bias(array![[1.0_f32, 2.0], [3.0, 4.0]], Array1::ones(2)).unwrap();
    /// let packed = PackedLinear::new(&map);
    /// assert_eq!(packed.apply(&array![[1.0, 1.0]]).unwrap(), array![[5.0, 7.0]]);
    /// ```
    // ANCHOR: packed_linear
    pub fn new(map: &Linear<f32>) -> Self {
        let w = map.weight();
        let (d_in, d_out) = w.dim();
        // Zeros first: the last panel's columns past d_out stay 0.
        let mut panels = vec![0.0; d_out.div_ceil(NR) * d_in * NR];
        for (p, panel) in panels.chunks_exact_mut(d_in * NR).enumerate() {
            let columns = p * NR..(p * NR + NR).min(d_out); // W's columns in this panel
            for (row, w_row) in panel.chunks_exact_mut(NR).zip(w.rows()) {
                // (a Range is not Copy and s! takes it by value: a clone per row)
                for (to, &from) in row.iter_mut().zip(w_row.slice(s![columns.clone()])) {
                    *to = from;
                }
            }
        }
        let bias = match map.bias() {
            Some(b) => b.to_vec(),
            None => vec![0.0; d_out],
        };
        PackedLinear { d_in, d_out, panels, bias }
    }

    // ANCHOR_END: packed_linear
    /// Packs maps that read the same input side by side, as one: `x·[W₁ W₂ …] + [b₁ b₂ …]`,
    /// the outputs one after another (a layer's `W_Q`, `W_K` and `W_V` in one product).
    ///
    /// ```
    /// use attention::gpt::packed::PackedLinear;
    /// use attention::projection::Linear;
    /// use ndarray::{Array2, array};
    ///
    /// let a = Linear::new(array![[1.0_f32], [2.0]]).unwrap();
    /// let b = Linear::new(array![[3.0_f32, 4.0], [5.0, 6.0]]).unwrap();
    /// let both = PackedLinear::side_by_side(&[&a, &b]).unwrap();
    /// assert_eq!(both.apply(&array![[1.0, 1.0]]).unwrap(), array![[3.0, 8.0, 10.0]]);
    /// let c = Linear::new(Array2::<f32>::zeros((3, 1))).unwrap();
    /// let err = PackedLinear::side_by_side(&[&a, &c]).unwrap_err();
    /// assert_eq!(err.to_string(), "map 0 has d_in = 2 but map 1 has d_in = 3");
    /// ```
    pub fn side_by_side(maps: &[&Linear<f32>]) -> Result<Self> {
        let Some(first) = maps.first() else {
            return Err(AttentionError::Empty { what: "the list of maps".into(), dim: "len" });
        };
        if let Some((i, map)) = maps.iter().enumerate().find(|(_, m)| m.d_in() != first.d_in())
        {
            return Err(AttentionError::mismatch(
                "map 0",
                first.d_in(),
                &format!("map {i}"),
                map.d_in(),
                "d_in",
            ));
        }
        let views: Vec<_> = maps.iter().map(|m| m.weight().view()).collect();
        let w = concatenate(ndarray::Axis(1), &views).expect("the same d_in, checked");
        let bias: Vec<f32> = maps
            .iter()
            .flat_map(|m| m.bias().map_or_else(|| vec![0.0; m.d_out()], |b| b.to_vec()))
            .collect();
        Ok(PackedLinear::new(&Linear::with_bias(w, bias.into())?))
    }

    /// The input width `d_in`.
    ///
    /// ```
    /// use attention::gpt::packed::PackedLinear;
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// let packed = PackedLinear::new(&Linear::new(Array2::<f32>::zeros((5, 3))).unwrap());
    /// assert_eq!((packed.d_in(), packed.d_out()), (5, 3));
    /// ```
    pub fn d_in(&self) -> usize {
        self.d_in
    }

    /// The output width `d_out`.
    ///
    /// ```
    /// use attention::gpt::packed::PackedLinear;
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// let packed = PackedLinear::new(&Linear::new(Array2::<f32>::zeros((5, 3))).unwrap());
    /// assert_eq!(packed.d_out(), 3);
    /// ```
    pub fn d_out(&self) -> usize {
        self.d_out
    }

    /// `x·W + b` for `x: (rows, d_in)`: `(rows, d_out)`, in the build [`Simd::chosen`] picks
    /// (an error if `ATTENTION_SIMD` names one the processor cannot run). The panels are
    /// shared out among rayon's threads; each entry is the same sum, in the same order,
    /// whatever the number of threads.
    ///
    /// ```
    /// use attention::gpt::packed::PackedLinear;
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// let map = Linear::new(Array2::from_elem((3, 40), 0.5_f32)).unwrap();
    /// let y = PackedLinear::new(&map).apply(&Array2::ones((7, 3))).unwrap();
    /// assert_eq!(y, Array2::from_elem((7, 40), 1.5));
    /// let err = PackedLinear::new(&map).apply(&Array2::ones((0, 3))).unwrap_err();
    /// assert_eq!(err.to_string(), "x has L = 0: it must be at least 1");
    /// ```
    pub fn apply(&self, x: &ArrayRef2<f32>) -> Result<Array2<f32>> {
        self.apply_on(Simd::chosen()?, x)
    }

    /// As [`PackedLinear::apply`], in the build `simd`; an error if the processor cannot run
    /// it. Every build computes the same sums, rounded differently (the baseline multiplies
    /// and adds separately).
    ///
    /// ```
    /// use attention::gpt::packed::PackedLinear;
    /// use attention::kernel::Simd;
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// let w = Array2::from_shape_fn((9, 20), |(i, j)| ((i * j) % 5) as f32 / 8.0);
    /// let packed = PackedLinear::new(&Linear::new(w).unwrap());
    /// let x = Array2::from_shape_fn((5, 9), |(i, j)| ((i + j) % 4) as f32 / 4.0); // sums below 4
    /// let portable = packed.apply_on(Simd::Portable, &x).unwrap();
    /// for simd in Simd::supported() {
    ///     let diff = (&packed.apply_on(simd, &x).unwrap() - &portable).mapv(f32::abs);
    ///     assert!(diff.iter().all(|&d| d < 1e-5), "{simd:?}");
    /// }
    /// ```
    // ANCHOR: packed_linear
    pub fn apply_on(&self, simd: Simd, x: &ArrayRef2<f32>) -> Result<Array2<f32>> {
        let simd = simd.require("PackedLinear::apply_on")?; // a build it cannot run: an error
        let (rows, d_in) = x.dim();
        if d_in != self.d_in {
            return Err(AttentionError::mismatch("x", d_in, "W", self.d_in, "d_in"));
        }
        if rows == 0 {
            return Err(AttentionError::Empty { what: "x".into(), dim: "L" });
        }
        let x = x.as_standard_layout();
        let x = x.as_slice().expect("row-major");
        // A panel's columns of y are not one slice (each row of y holds every panel), so the
        // result is first written panel by panel: panel p's (rows, NR) block at p·rows·NR.
        // A job takes per_job panels and their blocks; two jobs per thread, so that a thread
        // that finishes early takes another. A thread computes whole entries: the split is
        // over columns, never over the d_in terms of one sum.
        let n_panels = self.d_out.div_ceil(NR);
        let per_job = n_panels.div_ceil(2 * rayon::current_num_threads());
        let mut out = vec![0.0; n_panels * rows * NR];
        out.par_chunks_mut(per_job * rows * NR) // chunks_mut, the jobs run on rayon's threads
            .zip(self.panels.par_chunks(per_job * d_in * NR)) // each job's panels
            .for_each(|(out, panels)| times_panels(simd, x, rows, d_in, panels, out));
        // Back to rows, each entry plus its bias.
        let mut y = Array2::zeros((rows, self.d_out));
        for (i, mut y_row) in y.rows_mut().into_iter().enumerate() {
            let y_row = y_row.as_slice_mut().expect("row-major");
            for (p, (part, b)) in y_row.chunks_mut(NR).zip(self.bias.chunks(NR)).enumerate() {
                let sums = &out[(p * rows + i) * NR..][..part.len()]; // the last may be short
                for ((y_ij, &sum), &b) in part.iter_mut().zip(sums).zip(b) {
                    *y_ij = b + sum;
                }
            }
        }
        Ok(y)
    }
}

vectorised! {
    /// `out = x·W` for some of `W`'s panels, the result panel after panel.
    fn times_panels(
        simd: Simd,
        x: &[f32],
        rows: usize,
        d_in: usize,
        panels: &[f32],
        out: &mut [f32]
    ) {
        // FMA: true in the AVX-512 and AVX2 builds, false in the baseline's (vectorised!).
        // 6 rows per pass: 6 × 16 sums fill 12 of AVX2's 16 registers; SSE2 has room for 2.
        if FMA {
            rows_times_panels::<6, FMA>(x, rows, d_in, panels, out);
        } else {
            rows_times_panels::<2, FMA>(x, rows, d_in, panels, out);
        }
    }
}

/// [`times_panels`]' loop: each panel, `MR` rows of `x` at a time, then four, two or one.
#[inline(always)]
fn rows_times_panels<const MR: usize, const FMA: bool>(
    x: &[f32],
    rows: usize,
    d_in: usize,
    panels: &[f32],
    out: &mut [f32],
) {
    for (panel, out) in panels.chunks_exact(d_in * NR).zip(out.chunks_exact_mut(rows * NR)) {
        let mut r = 0;
        while r < rows {
            // The queries: x's rows from r; the keys: the panel's NR columns.
            let (x, out) = (&x[r * d_in..], &mut out[r * NR..]); // out's rows NR apart
            r += match rows - r {
                left if left >= MR => {
                    scores_panel::<f32, MR, FMA>(x, panel, d_in, out, NR);
                    MR
                }
                left if MR > 4 && left >= 4 => {
                    // (with MR ≤ 4, the first arm has taken these rows already)
                    scores_panel::<f32, 4, FMA>(x, panel, d_in, out, NR);
                    4
                }
                left if left >= 2 => {
                    scores_panel::<f32, 2, FMA>(x, panel, d_in, out, NR);
                    2
                }
                _ => {
                    scores_panel::<f32, 1, FMA>(x, panel, d_in, out, NR);
                    1
                }
            };
        }
    }
}
// ANCHOR_END: packed_linear

/// A layer norm's weights, for the fast path.
#[derive(Debug, Clone, PartialEq)]
struct FastNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

impl FastNorm {
    fn new(norm: &LayerNorm<f32>) -> Self {
        FastNorm {
            gamma: norm.gamma().to_vec(),
            beta: norm.beta().to_vec(),
            eps: norm.eps() as f32,
        }
    }
}

/// Chapter 13's post-LN encoder layer, `h = LN₁(x + MHA(x))`, `out = LN₂(h + FFN(h))`, on
/// the fast `f32` path, for one sentence with no mask: a copy of an [`EncoderLayer`] whose
/// products are [`PackedLinear`]s.
///
/// ```
/// use attention::gpt::packed::FastEncoderLayer;
/// use attention::{
///     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
///     multihead::MultiHeadAttention, projection::Linear,
/// };
/// use ndarray::{Array1, Array2, Axis};
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let mut rng = StdRng::seed_from_u64(0);
/// let attention = MultiHeadAttention::<f32>::random(64, 4, &mut rng).unwrap();
/// let ffn = FeedForward::new(
///     Linear::random(64, 256, &mut rng).unwrap(),
///     Linear::random(256, 64, &mut rng).unwrap(),
/// )
/// .unwrap();
/// let norm = LayerNorm::new(Array1::ones(64), Array1::zeros(64), 1e-12).unwrap();
/// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
/// let x = Array2::from_shape_fn((5, 64), |(i, j)| ((3 * i + j) % 7) as f32 - 3.0);
/// let fast = FastEncoderLayer::new(&layer).unwrap().forward(&x).unwrap();
/// let exact = layer.forward(&x.view().insert_axis(Axis(0)), None).unwrap().hidden;
/// let diff = (&fast - &exact.index_axis(Axis(0), 0)).mapv(f32::abs);
/// assert!(diff.iter().all(|&d| d < 1e-4));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FastEncoderLayer {
    heads: usize,
    qkv: PackedLinear, // W_Q, W_K and W_V side by side: (d_model, 3·d_model)
    w_o: PackedLinear,
    attention_norm: FastNorm,
    up: PackedLinear,
    down: PackedLinear,
    output_norm: FastNorm,
}

impl FastEncoderLayer {
    /// Packs a layer's weights.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f32>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// use attention::gpt::packed::FastEncoderLayer;
    ///
    /// let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// assert_eq!(FastEncoderLayer::new(&layer).unwrap().d_model(), 8);
    /// ```
    pub fn new(layer: &EncoderLayer<f32>) -> Result<Self> {
        let attention = layer.attention();
        let [w_q, w_k, w_v, w_o] = attention.projections();
        let [up, down] = layer.feed_forward().maps();
        Ok(FastEncoderLayer {
            heads: attention.heads(),
            qkv: PackedLinear::side_by_side(&[w_q, w_k, w_v])?,
            w_o: PackedLinear::new(w_o),
            attention_norm: FastNorm::new(layer.attention_norm()),
            up: PackedLinear::new(up),
            down: PackedLinear::new(down),
            output_norm: FastNorm::new(layer.output_norm()),
        })
    }

    /// The width `d_model` it reads and writes.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f32>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// # let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// use attention::gpt::packed::FastEncoderLayer;
    ///
    /// assert_eq!(FastEncoderLayer::new(&layer).unwrap().d_model(), layer.d_model());
    /// ```
    pub fn d_model(&self) -> usize {
        self.w_o.d_out()
    }

    /// The layer on one sentence `x: (L, d_model)`, no mask: `(L, d_model)`.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f32>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// # let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// use attention::gpt::packed::FastEncoderLayer;
    /// use ndarray::Array2;
    ///
    /// let fast = FastEncoderLayer::new(&layer).unwrap();
    /// assert_eq!(fast.forward(&Array2::ones((3, 8))).unwrap().dim(), (3, 8));
    /// let err = fast.forward(&Array2::ones((3, 5))).unwrap_err();
    /// assert_eq!(err.to_string(), "x has d_in = 5 but W has d_in = 8");
    /// let err = fast.forward(&Array2::ones((0, 8))).unwrap_err();
    /// assert_eq!(err.to_string(), "x has L = 0: it must be at least 1");
    /// ```
    pub fn forward(&self, x: &ArrayRef2<f32>) -> Result<Array2<f32>> {
        self.forward_on(Simd::chosen()?, x)
    }

    /// As [`FastEncoderLayer::forward`], in the build `simd`; an error if the processor
    /// cannot run it.
    ///
    /// ```
    /// # use attention::{
    /// #     encoder::EncoderLayer, feed_forward::FeedForward, layer_norm::LayerNorm,
    /// #     multihead::MultiHeadAttention, projection::Linear,
    /// # };
    /// # use ndarray::Array1;
    /// # use rand::{rngs::StdRng, SeedableRng};
    /// # let mut rng = StdRng::seed_from_u64(0);
    /// # let attention = MultiHeadAttention::<f32>::random(8, 2, &mut rng).unwrap();
    /// # let ffn = FeedForward::new(
    /// #     Linear::random(8, 32, &mut rng).unwrap(),
    /// #     Linear::random(32, 8, &mut rng).unwrap(),
    /// # )
    /// # .unwrap();
    /// # let norm = LayerNorm::new(Array1::ones(8), Array1::zeros(8), 1e-12).unwrap();
    /// # let layer = EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap();
    /// use attention::gpt::packed::FastEncoderLayer;
    /// use attention::kernel::Simd;
    /// use ndarray::Array2;
    ///
    /// let fast = FastEncoderLayer::new(&layer).unwrap();
    /// let x = Array2::from_shape_fn((3, 8), |(i, j)| (i * j) as f32 / 5.0);
    /// let portable = fast.forward_on(Simd::Portable, &x).unwrap();
    /// let diff = (&fast.forward(&x).unwrap() - &portable).mapv(f32::abs);
    /// assert!(diff.iter().all(|&d| d < 1e-5));
    /// ```
    pub fn forward_on(&self, simd: Simd, x: &ArrayRef2<f32>) -> Result<Array2<f32>> {
        let simd = simd.require("FastEncoderLayer::forward_on")?;
        let qkv = self.qkv.apply_on(simd, x)?; // (L, 3·d_model): Q, K, V side by side
        let (rows, qkv) = (x.nrows(), qkv.as_slice().expect("row-major"));
        let mut context = Array2::zeros((rows, self.d_model()));
        attend(simd, qkv, rows, self.heads, context.as_slice_mut().expect("row-major"));
        let mut h = self.w_o.apply_on(simd, &context)? + x;
        norm_rows(simd, h.as_slice_mut().expect("row-major"), &self.attention_norm); // LN₁
        let mut u = self.up.apply_on(simd, &h)?;
        gelu_in_place(simd, u.as_slice_mut().expect("row-major"));
        let mut out = self.down.apply_on(simd, &u)? + &h;
        norm_rows(simd, out.as_slice_mut().expect("row-major"), &self.output_norm); // LN₂
        Ok(out)
    }
}

vectorised! {
    /// Every head's `softmax(Q·Kᵀ/√d_head)·V` for one sentence of `rows` tokens: `qkv`
    /// holds `rows` rows of `(Q, K, V)`, `3·d_model` each, and `context` (zeros) receives
    /// `rows` rows of `d_model`, head `h` in columns `h·d_head..`.
    fn attend(simd: Simd, qkv: &[f32], rows: usize, heads: usize, context: &mut [f32]) {
        let d = context.len() / rows;
        let d_head = d / heads;
        let scale = 1.0 / (d_head as f32).sqrt();
        let stride = 3 * d;
        let mut kt = vec![0.0f32; d_head * rows]; // this head's Kᵀ: (d_head, L)
        let mut p = vec![0.0f32; rows];
        for h in 0..heads {
            let (q_at, k_at, v_at) = (h * d_head, d + h * d_head, 2 * d + h * d_head);
            for j in 0..rows {
                for c in 0..d_head {
                    kt[c * rows + j] = qkv[j * stride + k_at + c];
                }
            }
            for i in 0..rows {
                // Query i's scores, Σ over the head's dimensions of q_c · (row c of Kᵀ).
                p.fill(0.0);
                let q = &qkv[i * stride + q_at..][..d_head];
                for (&q, k) in q.iter().zip(kt.chunks_exact(rows)) {
                    for (s, &k) in p.iter_mut().zip(k) {
                        *s = madd::<f32, FMA>(q, k, *s);
                    }
                }
                p.iter_mut().for_each(|s| *s *= scale);
                let max = row_max(&p);
                let inv_sum = 1.0 / exp_in_place::<f32, FMA>(&mut p, max); // chapter 8's
                let out = &mut context[i * d + q_at..][..d_head];
                for (j, &w) in p.iter().enumerate() {
                    for (o, &v) in out.iter_mut().zip(&qkv[j * stride + v_at..][..d_head]) {
                        *o = madd::<f32, FMA>(w, v, *o);
                    }
                }
                out.iter_mut().for_each(|o| *o *= inv_sum);
            }
        }
    }
}

vectorised! {
    /// Layer norm of every row of `x` (rows of `γ`'s width), in place, the sums over a row
    /// in [`NR`] lanes.
    fn norm_rows(simd: Simd, x: &mut [f32], norm: &FastNorm) {
        let d = norm.gamma.len();
        for row in x.chunks_exact_mut(d) {
            let mean = lane_sum(row, |v| v) / d as f32;
            let var = lane_sum(row, |v| (v - mean) * (v - mean)) / d as f32;
            let inv_std = 1.0 / (var + norm.eps).sqrt();
            for ((v, &g), &b) in row.iter_mut().zip(&norm.gamma).zip(&norm.beta) {
                *v = madd::<f32, FMA>((*v - mean) * inv_std, g, b);
            }
        }
    }
}

/// `Σ f(v)` over `row`, in [`NR`] independent lanes (then added up), so that it vectorises.
#[inline(always)]
fn lane_sum(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; NR];
    let (chunks, rest) = row.as_chunks::<NR>();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f(v);
        }
    }
    lanes.iter().sum::<f32>() + rest.iter().map(|&v| f(v)).sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed_forward::FeedForward;
    use crate::multihead::MultiHeadAttention;
    use ndarray::{Array1, Axis};
    use rand::{SeedableRng, rngs::StdRng};

    fn max_abs(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
        assert_eq!(a.dim(), b.dim());
        a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
    }

    /// Every build the processor runs, every row count (whole groups of 6 or 2, then the
    /// last rows), widths that are not whole panels, and a map without a bias, against the
    /// sum in `f64`.
    #[test]
    fn products_match_the_sum_in_f64_for_every_build_row_count_and_width() {
        let mut rng = StdRng::seed_from_u64(1);
        for (d_in, d_out) in [(1, 1), (7, 15), (33, 16), (64, 17), (5, 40)] {
            let w = Linear::<f32>::random(d_in, d_out, &mut rng).unwrap();
            let b = Array1::from_shape_fn(d_out, |j| j as f32 / 8.0 - 1.0);
            for map in [w.clone(), Linear::with_bias(w.weight().clone(), b).unwrap()] {
                let packed = PackedLinear::new(&map);
                for rows in 1..=15 {
                    let x = Array2::from_shape_fn((rows, d_in), |(i, j)| {
                        ((3 * i + 5 * j) % 11) as f32 / 4.0 - 1.25
                    });
                    let mut want = x.mapv(f64::from).dot(&map.weight().mapv(f64::from));
                    if let Some(b) = map.bias() {
                        want += &b.mapv(f64::from);
                    }
                    for simd in Simd::supported() {
                        let got = packed.apply_on(simd, &x).unwrap();
                        let diff = max_abs(&got, &want.mapv(|v| v as f32));
                        assert!(
                            diff < 1e-5,
                            "{simd:?} ({rows}, {d_in})·({d_in}, {d_out}): {diff}"
                        );
                    }
                }
            }
        }
    }

    /// Each row count, fused or not, without the instructions of a build: the 6-row passes
    /// of the AVX builds and the 2-row passes of the baseline's, checked on every machine
    /// (`mul_add` is exact in any build, if slow without FMA).
    #[test]
    fn every_row_count_is_right_without_a_build() {
        let map = Linear::<f32>::random(29, 37, &mut StdRng::seed_from_u64(4)).unwrap();
        let packed = PackedLinear::new(&map);
        let panels = 37usize.div_ceil(NR);
        type Run = fn(&[f32], usize, usize, &[f32], &mut [f32]);
        let runs: [(&str, Run); 4] = [
            ("6 rows, fused", rows_times_panels::<6, true>),
            ("6 rows", rows_times_panels::<6, false>),
            ("2 rows, fused", rows_times_panels::<2, true>),
            ("2 rows", rows_times_panels::<2, false>),
        ];
        for rows in 1..=15 {
            let x = Array2::from_shape_fn((rows, 29), |(i, j)| ((i + 2 * j) % 7) as f32 - 3.0);
            let want = x.mapv(f64::from).dot(&map.weight().mapv(f64::from));
            for (name, run) in runs {
                let mut out = vec![f32::NAN; panels * rows * NR];
                run(x.as_slice().unwrap(), rows, 29, &packed.panels, &mut out);
                for ((i, j), &w) in want.indexed_iter() {
                    let got = out[((j / NR) * rows + i) * NR + j % NR];
                    assert!(
                        (f64::from(got) - w).abs() < 1e-4,
                        "{name}, {rows} rows, ({i}, {j})"
                    );
                }
            }
        }
    }

    /// A build the processor cannot run is an error, not undefined behaviour.
    #[test]
    fn a_build_the_processor_lacks_is_refused() {
        let packed = PackedLinear::new(&Linear::new(Array2::<f32>::ones((4, 4))).unwrap());
        for simd in Simd::ALL.into_iter().filter(|s| !s.is_supported()) {
            let err = packed.apply_on(simd, &Array2::ones((2, 4))).unwrap_err().to_string();
            assert!(
                err.starts_with("PackedLinear::apply_on: this processor cannot run"),
                "{err}"
            );
        }
    }

    fn random_layer(d: usize, heads: usize, d_ff: usize, seed: u64) -> EncoderLayer<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut linear = |d_in: usize, d_out: usize| {
            let w = Linear::<f32>::random(d_in, d_out, &mut rng).unwrap();
            let b = Array1::from_shape_fn(d_out, |j| ((j % 5) as f32 - 2.0) / 10.0);
            Linear::with_bias(w.weight().clone(), b).unwrap()
        };
        let attention = MultiHeadAttention::from_projections(
            linear(d, d),
            linear(d, d),
            linear(d, d),
            linear(d, d),
            heads,
        )
        .unwrap();
        let ffn = FeedForward::new(linear(d, d_ff), linear(d_ff, d)).unwrap();
        let gamma = Array1::from_shape_fn(d, |j| 1.0 + (j % 3) as f32 / 10.0);
        let beta = Array1::from_shape_fn(d, |j| (j % 4) as f32 / 20.0);
        let norm = LayerNorm::new(gamma, beta, 1e-12).unwrap();
        EncoderLayer::new(attention, norm.clone(), ffn, norm).unwrap()
    }

    fn sentence(l: usize, d: usize) -> Array2<f32> {
        Array2::from_shape_fn((l, d), |(i, j)| ((7 * i + 3 * j) % 13) as f32 / 3.0 - 2.0)
    }

    /// The fast layer against chapter 13's, in every build, for sentences of 1 to 20 tokens;
    /// and the bound is tight enough to notice a layer that differs by one head.
    #[test]
    fn the_fast_layer_matches_the_plain_one_in_every_build() {
        let layer = random_layer(64, 4, 200, 3);
        let fast = FastEncoderLayer::new(&layer).unwrap();
        let ablated = layer.without_head(1).unwrap();
        for l in [1, 2, 5, 16, 20] {
            let x = sentence(l, 64);
            let plain = |layer: &EncoderLayer<f32>| {
                let out = layer.forward(&x.view().insert_axis(Axis(0)), None).unwrap();
                out.hidden.index_axis_move(Axis(0), 0)
            };
            for simd in Simd::supported() {
                let got = fast.forward_on(simd, &x).unwrap();
                let diff = max_abs(&got, &plain(&layer));
                assert!(diff < 1e-4, "{simd:?}, L = {l}: {diff}");
                let other = max_abs(&got, &plain(&ablated));
                assert!(other > 1e-2, "{simd:?}, L = {l}: a head less changes only {other}");
            }
        }
    }

    /// Each entry is the same sum in the same order, whatever the number of threads: a whole
    /// layer gives the same bits on 1, 2, 3 and 8 threads, in every build.
    #[test]
    fn threads_do_not_change_a_bit() {
        let fast = FastEncoderLayer::new(&random_layer(96, 3, 200, 2)).unwrap();
        let x = sentence(13, 96);
        for simd in Simd::supported() {
            let on = |threads: usize| {
                let pool =
                    rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| fast.forward_on(simd, &x).unwrap())
            };
            let one = on(1);
            for threads in [2, 3, 8] {
                assert_eq!(on(threads), one, "{simd:?}, {threads} threads");
            }
        }
    }
}
