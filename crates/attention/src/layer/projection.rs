//! Chapter *Queries, keys and values*: the linear map `X · W`.
//!
//! `Q = X·W_Q`, `K = X·W_K`, `V = X·W_V` and the multi-head output map `W_O` are all the same
//! thing: a matrix `W: (d_in, d_out)` multiplied on the *right* of `X: (L, d_in)`, giving
//! `(L, d_out)`. Each row of `X` (one token) is mapped on its own.
//!
//! PyTorch's `nn.Linear` stores its weight the other way round, `(out, in)`, and computes
//! `x · weightᵀ`; to use a PyTorch weight here, pass its transpose to [`Linear::new`].
//!
//! A layer of a pretrained model usually adds a bias vector, `x ↦ x · W + b` with
//! `b: (d_out)` (PyTorch's `nn.Linear` has one unless `bias=False`); [`Linear::with_bias`]
//! builds such a map. The layers of chapters 2 to 12 have none.
//!
//! Anchors (below the doc comments): `project`, `linear`, `linear_weight` (chapter
//! *Gradients*), `linear_bias`, `linear_nd` and `apply_parallel` (chapter *Inside a real model*).

use ndarray::{
    Array, Array1, Array2, Array3, ArrayRef, ArrayRef2, ArrayRef3, Dimension, IxDyn, s,
};
use rand::Rng;
use rayon::prelude::*;

use crate::embeddings::random_matrix;
use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::shapes::Operand;

/// A linear map `x ↦ x · W` with `W: (d_in, d_out)`, plus a bias `b: (d_out)` if it has one.
///
/// ```
/// use attention::projection::Linear;
/// use ndarray::array;
///
/// let w_q = Linear::new(array![[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]).unwrap(); // (3, 2)
/// let x = array![[1.0, 2.0, 3.0]];                                           // (1, 3)
/// assert_eq!(w_q.apply(&x).unwrap(), array![[4.0, 7.0]]);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: linear
pub struct Linear<A> {
    w: Array2<A>,         // (d_in, d_out)
    b: Option<Array1<A>>, // (d_out), added to every row of x · W; none before chapter 13
}

impl<A: Float> Linear<A> {
    // ANCHOR_END: linear
    /// A map with the given weight `W: (d_in, d_out)`; neither may be 0.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// assert!(Linear::new(Array2::<f32>::eye(4)).is_ok());
    /// assert_eq!(
    ///     Linear::new(Array2::<f32>::zeros((0, 4))).unwrap_err().to_string(),
    ///     "W has d_in = 0: it must be at least 1"
    /// );
    /// ```
    // ANCHOR: linear
    pub fn new(w: Array2<A>) -> Result<Self> {
        let (d_in, d_out) = w.dim();
        if d_in == 0 {
            return Err(AttentionError::Empty { what: "W".into(), dim: "d_in" });
        }
        if d_out == 0 {
            return Err(AttentionError::Empty { what: "W".into(), dim: "d_out" });
        }
        Ok(Linear { w, b: None })
    }

    // ANCHOR_END: linear
    /// A map with random weights: standard-normal samples times `1/√d_in`.
    ///
    /// The factor keeps the variance of `x·W` close to the variance of `x` (each output is a
    /// sum of `d_in` products). Draw every matrix of a model from one seeded `rng`.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let mut rng = StdRng::seed_from_u64(42);
    /// let w_q = Linear::<f64>::random(4, 4, &mut rng).unwrap();
    /// let w_k = Linear::<f64>::random(4, 4, &mut rng).unwrap();
    /// assert_ne!(w_q, w_k);
    /// assert_eq!(w_q, Linear::random(4, 4, &mut StdRng::seed_from_u64(42)).unwrap());
    /// ```
    // ANCHOR: linear
    pub fn random<R: Rng + ?Sized>(d_in: usize, d_out: usize, rng: &mut R) -> Result<Self> {
        let scale = 1.0 / (d_in.max(1) as f64).sqrt();
        Linear::new(random_matrix(d_in, d_out, scale, rng))
    }

    // ANCHOR_END: linear
    /// The input width `d_in`.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// assert_eq!(Linear::new(Array2::<f64>::zeros((5, 3))).unwrap().d_in(), 5);
    /// ```
    // ANCHOR: linear
    pub fn d_in(&self) -> usize {
        self.w.nrows()
    }

    // ANCHOR_END: linear
    /// The output width `d_out`.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// assert_eq!(Linear::new(Array2::<f64>::zeros((5, 3))).unwrap().d_out(), 3);
    /// ```
    // ANCHOR: linear
    pub fn d_out(&self) -> usize {
        self.w.ncols()
    }

    // ANCHOR_END: linear
    /// `x · W` (plus the bias `b` in every row, if there is one) for `x: (L, d_in)`, giving
    /// `(L, d_out)`; fails if `x` is empty or has the wrong width.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// let w = Linear::new(Array2::<f64>::zeros((4, 2))).unwrap();
    /// assert_eq!(w.apply(&Array2::zeros((3, 4))).unwrap().dim(), (3, 2));
    /// assert_eq!(
    ///     w.apply(&Array2::zeros((3, 5))).unwrap_err().to_string(),
    ///     "x has d_in = 5 but W has d_in = 4"
    /// );
    /// ```
    // ANCHOR: linear
    pub fn apply(&self, x: &ArrayRef2<A>) -> Result<Array2<A>> {
        let (l, d_in) = x.dim();
        if l == 0 {
            return Err(AttentionError::Empty { what: "x".into(), dim: "L" });
        }
        if d_in == 0 {
            return Err(AttentionError::Empty { what: "x".into(), dim: "d_in" });
        }
        if d_in != self.d_in() {
            return Err(AttentionError::mismatch("x", d_in, "W", self.d_in(), "d_in"));
        }
        let y = project(x, &self.w);
        Ok(match &self.b {
            Some(b) => y + b, // b: (d_out) is added to every row
            None => y,
        })
    }
}
// ANCHOR_END: linear

impl<A: Float> Linear<A> {
    /// A map with a bias, `x ↦ x · W + b`, for `W: (d_in, d_out)` and `b: (d_out)`.
    ///
    /// From PyTorch's `nn.Linear`, pass `weight.T` (it stores `(out, in)`) and `bias`.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::array;
    ///
    /// let w = Linear::with_bias(array![[1.0, 0.0], [0.0, 2.0]], array![0.5, -1.0]).unwrap();
    /// assert_eq!(w.apply(&array![[1.0, 1.0]]).unwrap(), array![[1.5, 1.0]]);
    /// assert_eq!(w.bias(), Some(&array![0.5, -1.0]));
    /// assert_eq!(
    ///     Linear::with_bias(array![[1.0, 0.0]], array![1.0]).unwrap_err().to_string(),
    ///     "b has d_out = 1 but W has d_out = 2"
    /// );
    /// ```
    // ANCHOR: linear_bias
    pub fn with_bias(w: Array2<A>, b: Array1<A>) -> Result<Self> {
        let linear = Linear::new(w)?;
        if b.len() != linear.d_out() {
            return Err(AttentionError::mismatch("b", b.len(), "W", linear.d_out(), "d_out"));
        }
        Ok(Linear { b: Some(b), ..linear })
    }

    // ANCHOR_END: linear_bias
    /// The bias `b: (d_out)`, or `None` for a map without one.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// assert_eq!(Linear::new(Array2::<f64>::eye(2)).unwrap().bias(), None);
    /// ```
    // ANCHOR: linear_bias
    pub fn bias(&self) -> Option<&Array1<A>> {
        self.b.as_ref()
    }
    // ANCHOR_END: linear_bias
}

impl<A: Float> Linear<A> {
    /// The weight matrix `W: (d_in, d_out)`.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    ///
    /// let w = Linear::new(Array2::<f64>::eye(2)).unwrap();
    /// assert_eq!(w.weight(), Array2::<f64>::eye(2));
    /// ```
    // ANCHOR: linear_weight
    pub fn weight(&self) -> &Array2<A> {
        &self.w
    }
    // ANCHOR_END: linear_weight

    /// The number of learnable numbers, `d_in · d_out`, plus `d_out` for a bias.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::{Array1, Array2};
    ///
    /// assert_eq!(Linear::new(Array2::<f64>::zeros((5, 3))).unwrap().parameter_count(), 15);
    /// let biased = Linear::with_bias(Array2::<f64>::zeros((5, 3)), Array1::zeros(3));
    /// assert_eq!(biased.unwrap().parameter_count(), 18);
    /// ```
    pub fn parameter_count(&self) -> usize {
        self.w.len() + self.b.as_ref().map_or(0, |b| b.len())
    }

    /// `x · W` (plus the bias, if any) for a batch `x: (batch, L, d_in)`, giving
    /// `(batch, L, d_out)`.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::{Array2, Array3};
    ///
    /// let w = Linear::new(Array2::<f64>::eye(3)).unwrap();
    /// let x = Array3::from_shape_fn((2, 4, 3), |(b, i, j)| (b + i + j) as f64);
    /// assert_eq!(w.apply_batched(&x).unwrap(), x);
    /// ```
    // ANCHOR: linear_nd
    pub fn apply_batched(&self, x: &ArrayRef3<A>) -> Result<Array3<A>> {
        self.apply_nd(x)
    }
    // ANCHOR_END: linear_nd

    /// `x · W` (plus the bias, if any) for `x: (..., L, d_in)` with any number of leading
    /// axes: every token of every batch item is mapped alike, so the leading axes and `L` are
    /// read as one long sequence for [`Linear::apply`].
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::{Array1, Array2, Array4};
    ///
    /// let w = Linear::with_bias(Array2::<f64>::eye(3), Array1::ones(3)).unwrap();
    /// let x = Array4::<f64>::zeros((2, 2, 4, 3)); // (batch, heads, L, d_in)
    /// assert_eq!(w.apply_nd(&x).unwrap(), Array4::ones((2, 2, 4, 3)));
    /// ```
    // ANCHOR: linear_nd
    pub fn apply_nd<D: Dimension>(&self, x: &ArrayRef<A, D>) -> Result<Array<A, D>> {
        let (lead, l, d_in) =
            Operand { name: "x", shape: x.shape(), rows: "L", cols: "d_in" }.split()?;
        let rows = lead.iter().product::<usize>() * l;
        let flat =
            x.to_shape((rows, d_in)).expect("the leading axes and L collapse into rows");
        let mut shape = x.shape().to_vec();
        shape[x.ndim() - 1] = self.d_out();
        let out = self
            .apply_parallel(&flat)?
            .into_shape_with_order(IxDyn(&shape))
            .expect("rows split back");
        Ok(out.into_dimensionality::<D>().expect("same number of axes as x"))
    }
    // ANCHOR_END: linear_nd

    /// The same as [`Linear::apply`], with the columns of `W` shared out among rayon's threads
    /// when the product is large (at least [`PARALLEL_WORK`] multiply-adds): each thread
    /// multiplies `x` by its own block of columns. Every entry is the same sum, added in the
    /// same order, as in [`project`], so the result is bit for bit that of `apply`; only the
    /// time changes. `RAYON_NUM_THREADS=1` turns it off.
    ///
    /// ```
    /// use attention::projection::Linear;
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let w = Linear::<f32>::random(384, 1536, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let x = Array2::from_shape_fn((16, 384), |(i, j)| ((i * 7 + j) % 13) as f32 - 6.0);
    /// assert_eq!(w.apply_parallel(&x).unwrap(), w.apply(&x).unwrap()); // the same bits
    /// assert!(w.apply_parallel(&Array2::zeros((16, 5))).is_err());
    /// ```
    // ANCHOR: apply_parallel
    pub fn apply_parallel(&self, x: &ArrayRef2<A>) -> Result<Array2<A>> {
        let (rows, d_in, d_out) = (x.nrows(), x.ncols(), self.d_out());
        let threads = rayon::current_num_threads();
        if threads < 2 || rows * d_in * d_out < PARALLEL_WORK || d_in != self.d_in() {
            return self.apply(x); // small (or wrong: `apply` says why)
        }
        let width = d_out.div_ceil(threads).next_multiple_of(16); // whole kernel panels
        let starts: Vec<usize> = (0..d_out).step_by(width).collect();
        let blocks: Vec<Array2<A>> = starts
            .par_iter()
            .map(|&j| project(x, &self.w.slice(s![.., j..(j + width).min(d_out)])))
            .collect();
        let mut y = Array2::zeros((rows, d_out));
        for (&j, block) in starts.iter().zip(&blocks) {
            y.slice_mut(s![.., j..j + block.ncols()]).assign(block);
        }
        Ok(match &self.b {
            Some(b) => y + b,
            None => y,
        })
    }
    // ANCHOR_END: apply_parallel
}

/// The size of a product, `rows · d_in · d_out` multiply-adds, from which
/// [`Linear::apply_parallel`] shares it out among threads: below it, the cost of handing out
/// the work is larger than what it saves (16 tokens through a `(384, 384)` map are 2.4 million).
///
/// ```
/// assert_eq!(attention::projection::PARALLEL_WORK, 1 << 21);
/// ```
pub const PARALLEL_WORK: usize = 1 << 21;

/// The projection itself: `X · W`, `(L, d_in) · (d_in, d_out) = (L, d_out)`.
///
/// Row `i` of the result is token `i`'s row of `X` mapped by `W`. This function does not
/// check shapes (ndarray panics on a mismatch); [`Linear::apply`] does.
///
/// ```
/// use attention::projection::project;
/// use ndarray::array;
///
/// let x = array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]];  // (3, 2)
/// let w = array![[2.0, 0.0, 1.0], [0.0, 3.0, 1.0]];    // (2, 3)
/// assert_eq!(project(&x, &w), array![[2.0, 0.0, 1.0], [0.0, 3.0, 1.0], [2.0, 3.0, 2.0]]);
/// ```
// ANCHOR: project
pub fn project<A: Float>(x: &ArrayRef2<A>, w: &ArrayRef2<A>) -> Array2<A> {
    x.dot(w)
}
// ANCHOR_END: project

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};

    /// Shared out among threads or not, every entry is the same sum in the same order: the
    /// same bits, for widths that are and are not a multiple of the 16-column blocks, with
    /// and without a bias, in f32 and f64.
    #[test]
    fn apply_parallel_gives_the_bits_of_apply() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let mut rng = StdRng::seed_from_u64(13);
        for (rows, d_in, d_out) in
            [(16, 384, 1536), (7, 1000, 1001), (300, 129, 77), (1, 64, 40_000)]
        {
            assert!(rows * d_in * d_out >= PARALLEL_WORK, "the parallel path runs");
            let w = Linear::<f32>::random(d_in, d_out, &mut rng).unwrap();
            let x = random_matrix::<f32, _>(rows, d_in, 1.0, &mut rng);
            pool.install(|| assert_eq!(w.apply_parallel(&x).unwrap(), w.apply(&x).unwrap()));
            let b = Array1::from_shape_fn(d_out, |j| j as f64 / 7.0);
            let w64 = Linear::with_bias(w.weight().mapv(f64::from), b).unwrap();
            let x64 = x.mapv(f64::from);
            pool.install(|| {
                assert_eq!(w64.apply_parallel(&x64).unwrap(), w64.apply(&x64).unwrap())
            });
        }
    }
}
