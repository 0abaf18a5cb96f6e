//! Chapter *Where is each word? Position*: self-attention cannot tell the order of its tokens,
//! and the absolute positional encodings that tell it.
//!
//! Without a mask, self-attention is *permutation-equivariant*: shuffle the rows of `X`, and
//! the rows of the output, and the rows and columns of the weights, are shuffled the same way.
//! [`permute_rows`] and [`permute_weights`] state that precisely (the tests check it). The
//! cure of the original Transformer is to add a vector that depends on the position to every
//! row of `X` ([`add_positions`]): either the fixed sines and cosines of [`sinusoidal`] (in
//! the paper's interleaved column order or the concatenated order of tensor2tensor and
//! fairseq, see [`SinusoidLayout`]), or a learned table, [`LearnedPositions`]. The sinusoids
//! have a property the chapter builds on for RoPE: moving `k` positions on is a fixed rotation
//! of each sine/cosine pair, [`shift_matrix`]. The chapter's other two answers, rotating the
//! queries and keys and biasing the scores, are [`crate::rope`] and [`crate::alibi`].
//!
//! Anchors (below the doc comments): `check_permutation`, `permute_rows`, `permute_weights`,
//! `frequencies`, `sinusoid_layout`, `sinusoidal`, `shift_matrix`, `learned_positions`,
//! `add_positions`; in the tests: `equivariance`, `others_shuffled`, `positions_break_it`,
//! `shift_test`.

use ndarray::{Array, Array2, ArrayRef, ArrayRef2, Axis, Dimension, RemoveAxis};
use rand::Rng;

use crate::embeddings::random_matrix;
use crate::error::{AttentionError, Result};
use crate::float::Float;

/// Checks that `perm` is a permutation of `0..len`: `len` entries, each below `len`, none
/// twice. The error ([`AttentionError::Invalid`]) says which rule is broken.
///
/// ```
/// use attention::position::check_permutation;
///
/// assert!(check_permutation(&[2, 0, 1], 3).is_ok());
/// let twice = check_permutation(&[0, 0, 1], 3).unwrap_err();
/// assert_eq!(twice.to_string(), "permutation [0, 0, 1]: it holds 0 twice");
/// assert!(check_permutation(&[0, 3, 1], 3).is_err()); // 3 is not a row of 0..3
/// assert!(check_permutation(&[0, 1], 3).is_err()); // too short
/// ```
// ANCHOR: check_permutation
pub fn check_permutation(perm: &[usize], len: usize) -> Result<()> {
    let invalid = |problem: String| AttentionError::Invalid {
        what: format!("permutation {perm:?}"),
        problem,
    };
    if perm.len() != len {
        return Err(invalid(format!("it has {} entries for {len} rows", perm.len())));
    }
    let mut seen = vec![false; len];
    for &p in perm {
        if p >= len {
            return Err(invalid(format!("{p} is not a row index below {len}")));
        }
        if seen[p] {
            return Err(invalid(format!("it holds {p} twice")));
        }
        seen[p] = true;
    }
    Ok(())
}
// ANCHOR_END: check_permutation

/// The permutation that undoes `perm`: `inverse[perm[i]] = i`, so that permuting by `perm`
/// and then by its inverse gives back the original order.
///
/// ```
/// use attention::position::inverse_permutation;
///
/// assert_eq!(inverse_permutation(&[2, 0, 1]).unwrap(), [1, 2, 0]);
/// assert!(inverse_permutation(&[1, 1]).is_err());
/// ```
pub fn inverse_permutation(perm: &[usize]) -> Result<Vec<usize>> {
    check_permutation(perm, perm.len())?;
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    Ok(inverse)
}

/// The rows of `x: (L, d)` in the order `perm`: row `i` of the result is row `perm[i]` of
/// `x`. For a sentence, the same tokens in another order.
///
/// ```
/// use attention::position::permute_rows;
/// use ndarray::array;
///
/// let x = array![[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]];
/// let shuffled = permute_rows(&x, &[2, 0, 1]).unwrap();
/// assert_eq!(shuffled, array![[2.0, 2.5], [0.0, 0.5], [1.0, 1.5]]);
/// assert!(permute_rows(&x, &[0, 1]).is_err());
/// ```
// ANCHOR: permute_rows
pub fn permute_rows<A: Clone>(x: &ArrayRef2<A>, perm: &[usize]) -> Result<Array2<A>> {
    check_permutation(perm, x.nrows())?;
    Ok(x.select(Axis(0), perm))
}
// ANCHOR_END: permute_rows

/// Attention weights `(..., L, L)` with their queries (rows) *and* keys (columns) in the order
/// `perm`: entry `(i, j)` of the result is entry `(perm[i], perm[j])` of `weights`, in every
/// matrix of a stack (heads, batch). In matrix terms `P · W · Pᵀ`, where `P` permutes rows.
///
/// ```
/// use attention::position::permute_weights;
/// use ndarray::array;
///
/// let w = array![[0.9, 0.1], [0.3, 0.7]];
/// assert_eq!(permute_weights(&w, &[1, 0]).unwrap(), array![[0.7, 0.3], [0.1, 0.9]]);
/// ```
// ANCHOR: permute_weights
pub fn permute_weights<A: Clone, D: RemoveAxis>(
    weights: &ArrayRef<A, D>,
    perm: &[usize],
) -> Result<Array<A, D>> {
    let n = weights.ndim();
    if n < 2 || weights.shape()[n - 1] != weights.shape()[n - 2] {
        let expected = "a shape (..., L, L) was expected";
        return Err(AttentionError::shape("weights", weights.shape(), expected));
    }
    check_permutation(perm, weights.shape()[n - 1])?;
    let rows = weights.select(Axis(n - 2), perm); // the queries in the new order
    Ok(rows.select(Axis(n - 1), perm)) // then the keys
}
// ANCHOR_END: permute_weights

/// The frequencies of the sinusoidal encoding of width `d_model`:
/// `ω_i = 10000^(−2i / d_model)` for `i = 0, 1, …, ⌈d_model / 2⌉ − 1`, the formula of
/// Vaswani et al. (2017, §3.5) with `d_model` as it is, odd or even. Frequency `i` is used by
/// one sine and, except for the last one of an odd `d_model`, one cosine.
///
/// ```
/// use attention::position::frequencies;
///
/// assert_eq!(frequencies(4), [1.0, 0.01]); // 10000^0 and 10000^(-2/4)
/// assert_eq!(frequencies(5).len(), 3); // i = 0, 1, 2: exponents 0, -2/5, -4/5
/// assert!((frequencies(5)[2] - 10000f64.powf(-0.8)).abs() < 1e-18);
/// ```
// ANCHOR: frequencies
pub fn frequencies(d_model: usize) -> Vec<f64> {
    (0..d_model.div_ceil(2))
        .map(|i| 10000f64.powf(-((2 * i) as f64) / d_model as f64))
        .collect()
}
// ANCHOR_END: frequencies

/// Where the sines and cosines of the sinusoidal encoding go.
///
/// Both layouts hold the same `d_model` numbers for a position `p`: `sin(p·ω_i)` for every
/// frequency `i < ⌈d_model/2⌉` and `cos(p·ω_i)` for every `i < ⌊d_model/2⌋`
/// ([`frequencies`]); they differ only in the order of the columns, so one is the other with
/// its columns permuted.
///
/// - `Interleaved`: column `2i` holds `sin(p·ω_i)` and column `2i + 1` holds `cos(p·ω_i)`,
///   the paper's formula and the Annotated Transformer's code (`pe[:, 0::2]`, `pe[:, 1::2]`).
///   For an odd `d_model` the last column, `d_model − 1`, is a sine without a cosine.
/// - `Concatenated`: all the sines first, columns `0 .. ⌈d/2⌉`, then all the cosines, the
///   order of tensor2tensor's `get_timing_signal_1d` and fairseq's
///   `SinusoidalPositionalEmbedding` (which also space their frequencies differently; see the
///   chapter). For an odd `d_model` the unpaired sine is the last sine, column
///   `(d_model − 1) / 2`.
///
/// ```
/// use attention::position::{SinusoidLayout, sinusoidal};
///
/// let interleaved = sinusoidal::<f64>(3, 1, 4, SinusoidLayout::Interleaved).unwrap();
/// let concatenated = sinusoidal::<f64>(3, 1, 4, SinusoidLayout::Concatenated).unwrap();
/// // sin ω0, cos ω0, sin ω1, cos ω1  versus  sin ω0, sin ω1, cos ω0, cos ω1
/// assert_eq!(interleaved[[0, 1]], concatenated[[0, 2]]);
/// assert_eq!(interleaved[[0, 2]], concatenated[[0, 1]]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// ANCHOR: sinusoid_layout
pub enum SinusoidLayout {
    /// sin, cos, sin, cos, …: columns `2i` and `2i + 1` (the paper).
    Interleaved,
    /// sin, sin, …, cos, cos, …: the sines, then the cosines (tensor2tensor, fairseq).
    Concatenated,
}

impl SinusoidLayout {
    // ANCHOR_END: sinusoid_layout
    /// The columns of frequency `i`'s sine and cosine in a table of width `d_model`, for every
    /// `i` in [`frequencies`]`(d_model)`; the cosine is `None` for the unpaired last frequency
    /// of an odd `d_model`.
    ///
    /// ```
    /// use attention::position::SinusoidLayout::{Concatenated, Interleaved};
    ///
    /// assert_eq!(Interleaved.columns(5), [(0, Some(1)), (2, Some(3)), (4, None)]);
    /// assert_eq!(Concatenated.columns(5), [(0, Some(3)), (1, Some(4)), (2, None)]);
    /// ```
    // ANCHOR: sinusoid_layout
    pub fn columns(self, d_model: usize) -> Vec<(usize, Option<usize>)> {
        let (sines, cosines) = (d_model.div_ceil(2), d_model / 2);
        (0..sines)
            .map(|i| match self {
                SinusoidLayout::Interleaved => (2 * i, (i < cosines).then_some(2 * i + 1)),
                SinusoidLayout::Concatenated => (i, (i < cosines).then_some(sines + i)),
            })
            .collect()
    }
}
// ANCHOR_END: sinusoid_layout

/// The sinusoidal positional encodings of positions `start, start + 1, …, start + len − 1`:
/// an `(len, d_model)` matrix whose row `r` is `PE(start + r)`, with `sin(p·ω_i)` and
/// `cos(p·ω_i)` where `layout` puts them ([`frequencies`], [`SinusoidLayout`]).
///
/// The angles and their sines are computed in `f64` and then rounded to `A`. Fails with
/// [`AttentionError::Empty`] for `len = 0` or `d_model = 0`.
///
/// ```
/// use attention::position::{SinusoidLayout, sinusoidal};
///
/// let pe = sinusoidal::<f64>(0, 3, 4, SinusoidLayout::Interleaved).unwrap();
/// assert_eq!(pe.row(0).to_vec(), [0.0, 1.0, 0.0, 1.0]); // sin 0 = 0, cos 0 = 1
/// assert_eq!(pe[[1, 0]], 1f64.sin()); // position 1, frequency 1
/// assert_eq!(pe[[2, 3]], 0.02f64.cos()); // position 2, frequency 0.01
/// // Rows of a longer table, or of one that starts later, are the same rows.
/// let later = sinusoidal::<f64>(2, 1, 4, SinusoidLayout::Interleaved).unwrap();
/// assert_eq!(later.row(0), pe.row(2));
/// ```
// ANCHOR: sinusoidal
pub fn sinusoidal<A: Float>(
    start: usize,
    len: usize,
    d_model: usize,
    layout: SinusoidLayout,
) -> Result<Array2<A>> {
    if len == 0 || d_model == 0 {
        let dim = if len == 0 { "L" } else { "d_model" };
        return Err(AttentionError::Empty { what: "positional encoding".into(), dim });
    }
    let (omegas, columns) = (frequencies(d_model), layout.columns(d_model));
    let mut pe = Array2::<A>::zeros((len, d_model));
    for (r, mut row) in pe.rows_mut().into_iter().enumerate() {
        let p = (start + r) as f64; // the position of row r
        for (&omega, &(sin_col, cos_col)) in omegas.iter().zip(&columns) {
            row[sin_col] = A::from_f64_lossy((p * omega).sin());
            if let Some(cos_col) = cos_col {
                row[cos_col] = A::from_f64_lossy((p * omega).cos());
            }
        }
    }
    Ok(pe)
}
// ANCHOR_END: sinusoidal

/// The fixed linear map that moves a sinusoidal encoding `k` positions on: the
/// `(d_model, d_model)` matrix `M_k` with `PE(p + k) = PE(p) · M_k` (rows times a matrix, as
/// everywhere in this book) for every position `p`. `k` may be negative.
///
/// `M_k` does not depend on `p`. It is block-diagonal: for frequency `i` it rotates the pair
/// `(sin(p·ω_i), cos(p·ω_i))` by the angle `k·ω_i`, because
/// `sin((p+k)ω) = sin(pω)·cos(kω) + cos(pω)·sin(kω)` and
/// `cos((p+k)ω) = cos(pω)·cos(kω) − sin(pω)·sin(kω)`. The unpaired sine of an odd `d_model`
/// has no such map (its shifted value needs the cosine it lacks): its row and column of
/// `M_k` are zero, so the identity holds on every *paired* column and not on that one.
///
/// ```
/// use attention::position::{SinusoidLayout, shift_matrix, sinusoidal};
///
/// let layout = SinusoidLayout::Interleaved;
/// let m = shift_matrix::<f64>(8, 3, layout);
/// for p in [0, 5, 40] {
///     let now = sinusoidal::<f64>(p, 1, 8, layout).unwrap();
///     let later = sinusoidal::<f64>(p + 3, 1, 8, layout).unwrap();
///     assert!((now.dot(&m) - later).iter().all(|d| d.abs() < 1e-12));
/// }
/// ```
// ANCHOR: shift_matrix
pub fn shift_matrix<A: Float>(d_model: usize, k: i64, layout: SinusoidLayout) -> Array2<A> {
    let mut m = Array2::<A>::zeros((d_model, d_model));
    for (&omega, &(s, c)) in frequencies(d_model).iter().zip(&layout.columns(d_model)) {
        let Some(c) = c else { continue }; // the unpaired sine: no fixed map exists
        let (sin, cos) = (k as f64 * omega).sin_cos();
        let (sin, cos) = (A::from_f64_lossy(sin), A::from_f64_lossy(cos));
        // (s', c') = (s·cos + c·sin, −s·sin + c·cos): a rotation by k·ω of the pair.
        m[[s, s]] = cos;
        m[[c, s]] = sin;
        m[[s, c]] = -sin;
        m[[c, c]] = cos;
    }
    m
}
// ANCHOR_END: shift_matrix

/// A learned absolute position table: one row of width `d_model` per position
/// `0 .. max_len`, looked up like the token table of chapter *Input embeddings* and trained
/// with the model. Positions at or beyond `max_len` have no row.
///
/// ```
/// use attention::position::LearnedPositions;
/// use ndarray::array;
///
/// let table = LearnedPositions::new(array![[0.0, 0.1], [1.0, 1.1], [2.0, 2.1]]).unwrap();
/// assert_eq!(table.lookup(1, 2).unwrap(), array![[1.0, 1.1], [2.0, 2.1]]);
/// assert!(table.lookup(2, 2).is_err()); // position 3 is beyond max_len = 3
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: learned_positions
pub struct LearnedPositions<A> {
    table: Array2<A>, // (max_len, d_model)
}

impl<A: Float> LearnedPositions<A> {
    // ANCHOR_END: learned_positions
    /// A table from a given `(max_len, d_model)` matrix; neither may be 0.
    ///
    /// ```
    /// use attention::position::LearnedPositions;
    /// use ndarray::Array2;
    ///
    /// assert!(LearnedPositions::new(Array2::<f64>::zeros((16, 4))).is_ok());
    /// assert!(LearnedPositions::new(Array2::<f64>::zeros((0, 4))).is_err());
    /// ```
    // ANCHOR: learned_positions
    pub fn new(table: Array2<A>) -> Result<Self> {
        for (size, dim) in [(table.nrows(), "max_len"), (table.ncols(), "d_model")] {
            if size == 0 {
                return Err(AttentionError::Empty { what: "position table".into(), dim });
            }
        }
        Ok(LearnedPositions { table })
    }

    // ANCHOR_END: learned_positions

    /// A table of standard-normal entries drawn from `rng`, as
    /// [`EmbeddingTable::random`](crate::embeddings::EmbeddingTable::random) draws the token
    /// table (seed it for reproducible runs): the starting point that training would move.
    ///
    /// ```
    /// use attention::position::LearnedPositions;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let a = LearnedPositions::<f64>::random(8, 4, &mut StdRng::seed_from_u64(9)).unwrap();
    /// let b = LearnedPositions::<f64>::random(8, 4, &mut StdRng::seed_from_u64(9)).unwrap();
    /// assert_eq!(a, b);
    /// assert_eq!((a.max_len(), a.d_model()), (8, 4));
    /// ```
    // ANCHOR: learned_positions
    pub fn random<R: Rng + ?Sized>(
        max_len: usize,
        d_model: usize,
        rng: &mut R,
    ) -> Result<Self> {
        LearnedPositions::new(random_matrix(max_len, d_model, 1.0, rng))
    }

    // ANCHOR_END: learned_positions

    /// The `(max_len, d_model)` matrix.
    ///
    /// ```
    /// use attention::position::LearnedPositions;
    /// use ndarray::Array2;
    ///
    /// let table = LearnedPositions::new(Array2::<f64>::eye(3)).unwrap();
    /// assert_eq!(table.table(), Array2::<f64>::eye(3));
    /// ```
    pub fn table(&self) -> &Array2<A> {
        &self.table
    }

    /// The number of positions the table has a row for.
    ///
    /// ```
    /// use attention::position::LearnedPositions;
    /// use ndarray::Array2;
    ///
    /// assert_eq!(LearnedPositions::new(Array2::<f64>::zeros((5, 2))).unwrap().max_len(), 5);
    /// ```
    // ANCHOR: learned_positions
    pub fn max_len(&self) -> usize {
        self.table.nrows()
    }

    // ANCHOR_END: learned_positions

    /// The width of a row.
    ///
    /// ```
    /// use attention::position::LearnedPositions;
    /// use ndarray::Array2;
    ///
    /// assert_eq!(LearnedPositions::new(Array2::<f64>::zeros((5, 2))).unwrap().d_model(), 2);
    /// ```
    pub fn d_model(&self) -> usize {
        self.table.ncols()
    }

    /// The rows of positions `start .. start + len`, an `(len, d_model)` matrix.
    ///
    /// Fails with [`AttentionError::Empty`] for `len = 0` and with
    /// [`AttentionError::Invalid`], naming the position and `max_len`, when a position is
    /// beyond the table: a learned table cannot encode a position it never had a row for.
    ///
    /// ```
    /// use attention::position::LearnedPositions;
    /// use ndarray::Array2;
    ///
    /// let table = LearnedPositions::new(Array2::<f64>::zeros((4, 2))).unwrap();
    /// assert_eq!(table.lookup(0, 4).unwrap().dim(), (4, 2));
    /// let err = table.lookup(3, 2).unwrap_err();
    /// assert_eq!(err.to_string(), "position 4: the table has rows for positions 0..4 only");
    /// ```
    // ANCHOR: learned_positions
    pub fn lookup(&self, start: usize, len: usize) -> Result<Array2<A>> {
        if len == 0 {
            return Err(AttentionError::Empty { what: "positions".into(), dim: "L" });
        }
        let (last, max_len) = (start + len - 1, self.max_len());
        if last >= max_len {
            return Err(AttentionError::Invalid {
                what: format!("position {last}"),
                problem: format!("the table has rows for positions 0..{max_len} only"),
            });
        }
        Ok(self.table.slice(ndarray::s![start..=last, ..]).to_owned())
    }
}
// ANCHOR_END: learned_positions

/// `x + positions`: the encoding of position `r` added to row `r` of `x: (..., L, d_model)`,
/// in every matrix of a stack (a batch). `positions` is `(L, d_model)`, from [`sinusoidal`] or
/// [`LearnedPositions::lookup`].
///
/// Fails with [`AttentionError::Mismatch`] naming `L` or `d_model` when the two disagree, and
/// with [`AttentionError::Shape`] when `x` has fewer than two axes.
///
/// ```
/// use attention::position::add_positions;
/// use ndarray::{array, Array3};
///
/// let pe = array![[0.0, 1.0], [0.5, 0.5]];
/// let x = array![[1.0, 1.0], [2.0, 2.0]];
/// assert_eq!(add_positions(&x, &pe).unwrap(), array![[1.0, 2.0], [2.5, 2.5]]);
/// let batch = Array3::<f64>::zeros((3, 2, 2)); // the same positions for every item
/// assert_eq!(add_positions(&batch, &pe).unwrap().index_axis(ndarray::Axis(0), 2), pe);
/// let err = add_positions(&x, &array![[0.0, 1.0]]).unwrap_err();
/// assert_eq!(err.to_string(), "x has L = 2 but positions has L = 1");
/// ```
// ANCHOR: add_positions
pub fn add_positions<A: Float, D: Dimension>(
    x: &ArrayRef<A, D>,
    positions: &ArrayRef2<A>,
) -> Result<Array<A, D>> {
    let n = x.ndim();
    if n < 2 {
        let expected = "a shape (..., L, d_model) was expected";
        return Err(AttentionError::shape("x", x.shape(), expected));
    }
    let (l, d_model) = (x.shape()[n - 2], x.shape()[n - 1]);
    if positions.nrows() != l {
        return Err(AttentionError::mismatch("x", l, "positions", positions.nrows(), "L"));
    }
    if positions.ncols() != d_model {
        let found = positions.ncols();
        return Err(AttentionError::mismatch("x", d_model, "positions", found, "d_model"));
    }
    let mut out = x.to_owned();
    // `positions` is broadcast over the leading axes, like NumPy's `x + positions`.
    out.zip_mut_with(positions, |o, &p| *o = *o + p);
    Ok(out)
}
// ANCHOR_END: add_positions

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multihead::MultiHeadAttention;
    use ndarray::{Array1, array, s};
    use proptest::prelude::*;
    use rand::seq::SliceRandom;
    use rand::{SeedableRng, rngs::StdRng};

    fn max_diff<D: Dimension>(a: &ArrayRef<f64, D>, b: &ArrayRef<f64, D>) -> f64 {
        assert_eq!(a.shape(), b.shape());
        a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    /// A seeded `(l, d)` input and a random permutation of its rows.
    // ANCHOR: equivariance
    fn input(l: usize, d: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
        let mut rng = StdRng::seed_from_u64(seed);
        let x = random_matrix(l, d, 1.0, &mut rng);
        let mut perm: Vec<usize> = (0..l).collect();
        perm.shuffle(&mut rng); // a random order of 0..l
        (x, perm)
    }
    // ANCHOR_END: equivariance

    #[test]
    fn permutations_are_checked() {
        for (perm, len, problem) in [
            (&[0, 1][..], 3, "it has 2 entries for 3 rows"),
            (&[0, 3, 1], 3, "3 is not a row index below 3"),
            (&[2, 1, 2], 3, "it holds 2 twice"),
        ] {
            let err = check_permutation(perm, len).unwrap_err();
            assert_eq!(
                err,
                AttentionError::Invalid {
                    what: format!("permutation {perm:?}"),
                    problem: problem.into()
                }
            );
        }
        assert!(check_permutation(&[], 0).is_ok());
        let x = Array2::<f64>::zeros((3, 2));
        assert!(permute_rows(&x, &[0, 0, 1]).is_err());
        assert!(permute_weights(&Array2::<f64>::zeros((3, 3)), &[0, 1]).is_err());
        let err = permute_weights(&Array2::<f64>::zeros((3, 2)), &[0, 1]).unwrap_err();
        assert!(matches!(err, AttentionError::Shape { .. }), "{err}");
        let err = permute_weights(&Array1::<f64>::zeros(3), &[0, 1, 2]).unwrap_err();
        assert!(matches!(err, AttentionError::Shape { .. }), "{err}");
    }

    #[test]
    fn permuting_then_inverting_gives_back_the_input() {
        let (x, perm) = input(7, 3, 1);
        let inverse = inverse_permutation(&perm).unwrap();
        let back = permute_rows(&permute_rows(&x, &perm).unwrap(), &inverse).unwrap();
        assert_eq!(back, x);
        let w = Array2::from_shape_fn((7, 7), |(i, j)| (10 * i + j) as f64);
        let permuted = permute_weights(&w, &perm).unwrap();
        for (i, j) in [(0, 0), (2, 5), (6, 1)] {
            assert_eq!(permuted[[i, j]], w[[perm[i], perm[j]]]);
        }
        assert_eq!(permute_weights(&permuted, &inverse).unwrap(), w);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Without a mask, self-attention is permutation-equivariant: permuting the rows of X
        /// permutes the output's rows, and the weights' rows and columns, the same way. For 1
        /// to 3 heads (1 head is chapter 2's self-attention followed by W_O, which acts on each
        /// row on its own and cannot see the order either).
        // ANCHOR: equivariance
        #[test]
        fn self_attention_is_permutation_equivariant(
            l in 1..=8usize, d_head in 1..=4usize, heads in 1..=3usize, seed in any::<u64>()
        ) {
            let d_model = d_head * heads;
            let (x, perm) = input(l, d_model, seed);
            let mut rng = StdRng::seed_from_u64(seed ^ 1); // another seed for the layer
            let layer = MultiHeadAttention::<f64>::random(d_model, heads, &mut rng).unwrap();
            let shuffled = permute_rows(&x, &perm).unwrap();
            let before = layer.forward(&x, None).unwrap();
            let after = layer.forward(&shuffled, None).unwrap();
            let output = permute_rows(&before.output, &perm).unwrap();
            prop_assert!(max_diff(&output, &after.output) < 1e-12);
            let weights = permute_weights(&before.weights, &perm).unwrap(); // (h, L, L)
            prop_assert!(max_diff(&weights, &after.weights) < 1e-12);
        }
        // ANCHOR_END: equivariance

        /// A query's output does not change when the *other* tokens are shuffled: the query
        /// stays in its place (perm[q] = q), the keys and values move, and its weighted
        /// average over them is the same sum in another order.
        // ANCHOR: others_shuffled
        #[test]
        fn a_query_ignores_the_order_of_the_others(
            l in 2..=8usize, d_head in 1..=3usize, seed in any::<u64>()
        ) {
            let d_model = 2 * d_head; // two heads
            let (x, mut perm) = input(l, d_model, seed);
            let q = (seed % l as u64) as usize; // the query that keeps its place
            let at = perm.iter().position(|&p| p == q).unwrap(); // where the shuffle put it
            perm.swap(at, q); // now perm[q] = q; the others are still shuffled
            let mut rng = StdRng::seed_from_u64(seed ^ 2);
            let layer = MultiHeadAttention::<f64>::random(d_model, 2, &mut rng).unwrap();
            let before = layer.forward(&x, None).unwrap().output;
            let after = layer.forward(&permute_rows(&x, &perm).unwrap(), None).unwrap().output;
            prop_assert!(max_diff(&before.row(q), &after.row(q)) < 1e-12);
        }
        // ANCHOR_END: others_shuffled
    }

    /// Adding positions breaks the symmetry: the tokens move but the positions stay in their
    /// slots, so the shuffled input is no longer a permutation of the original, and neither
    /// is its output. (If `add_positions` ignored the positions, equivariance would hold to
    /// 1e-12 and both assertions would fail.)
    // ANCHOR: positions_break_it
    #[test]
    fn adding_positions_breaks_the_symmetry() {
        let (l, d) = (6, 8);
        let (x, _) = input(l, d, 7);
        let perm = [0, 4, 2, 3, 1, 5]; // swap tokens 1 and 4; query 2 keeps its place
        let mut rng = StdRng::seed_from_u64(8);
        let layer = MultiHeadAttention::<f64>::random(d, 2, &mut rng).unwrap();
        let pe = sinusoidal::<f64>(0, l, d, SinusoidLayout::Interleaved).unwrap();
        let learned = LearnedPositions::<f64>::random(l, d, &mut rng).unwrap();
        for positions in [pe, learned.lookup(0, l).unwrap()] {
            let shuffled = permute_rows(&x, &perm).unwrap();
            let before = layer.forward(&add_positions(&x, &positions).unwrap(), None).unwrap();
            let after =
                layer.forward(&add_positions(&shuffled, &positions).unwrap(), None).unwrap();
            let moved = permute_rows(&before.output, &perm).unwrap();
            assert!(max_diff(&moved, &after.output) > 1e-3);
            // Query 2 kept its place, and its output changes all the same.
            assert!(max_diff(&before.output.row(2), &after.output.row(2)) > 1e-3);
        }
    }
    // ANCHOR_END: positions_break_it

    #[test]
    fn the_frequencies_are_the_papers() {
        assert_eq!(frequencies(4), [1.0, 0.01]);
        assert!(frequencies(0).is_empty());
        assert_eq!(frequencies(1), [1.0]);
        let w = frequencies(512);
        assert_eq!(w.len(), 256);
        // The wavelengths 2π/ω_i grow geometrically from 2π towards 10000·2π.
        assert!((w[255] - 10000f64.powf(-510.0 / 512.0)).abs() < 1e-18);
        for pair in w.windows(2) {
            assert!((pair[1] / pair[0] - 10000f64.powf(-2.0 / 512.0)).abs() < 1e-12);
        }
    }

    #[test]
    fn hand_checked_values() {
        let pe = sinusoidal::<f64>(0, 3, 4, SinusoidLayout::Interleaved).unwrap();
        let expected = array![
            [0.0, 1.0, 0.0, 1.0],
            [1f64.sin(), 1f64.cos(), 0.01f64.sin(), 0.01f64.cos()],
            [2f64.sin(), 2f64.cos(), 0.02f64.sin(), 0.02f64.cos()],
        ];
        assert_eq!(pe, expected);
        assert!((pe[[1, 0]] - 0.8415).abs() < 5e-5 && (pe[[1, 1]] - 0.5403).abs() < 5e-5);
        // f32 is the f64 table rounded.
        let pe32 = sinusoidal::<f32>(0, 3, 4, SinusoidLayout::Interleaved).unwrap();
        assert_eq!(pe32, pe.mapv(|v| v as f32));
    }

    #[test]
    fn the_layouts_are_a_column_permutation_of_each_other() {
        for d in [1, 2, 5, 8, 13] {
            let a = sinusoidal::<f64>(3, 9, d, SinusoidLayout::Interleaved).unwrap();
            let b = sinusoidal::<f64>(3, 9, d, SinusoidLayout::Concatenated).unwrap();
            let (ia, ib) = (
                SinusoidLayout::Interleaved.columns(d),
                SinusoidLayout::Concatenated.columns(d),
            );
            let mut order = vec![usize::MAX; d]; // column j of b is column order[j] of a
            for ((sa, ca), (sb, cb)) in ia.into_iter().zip(ib) {
                order[sb] = sa;
                if let (Some(ca), Some(cb)) = (ca, cb) {
                    order[cb] = ca;
                }
            }
            check_permutation(&order, d).unwrap();
            assert_eq!(a.select(Axis(1), &order), b, "d_model = {d}");
        }
    }

    #[test]
    fn odd_widths_end_with_an_unpaired_sine() {
        let d = 7;
        let pe = sinusoidal::<f64>(0, 50, d, SinusoidLayout::Interleaved).unwrap();
        let omega = 10000f64.powf(-6.0 / 7.0); // i = 3, exponent 2i / d_model = 6/7
        for p in 0..50 {
            assert_eq!(pe[[p, 6]], (p as f64 * omega).sin());
            assert_eq!(pe[[p, 5]], (p as f64 * 10000f64.powf(-4.0 / 7.0)).cos());
        }
        assert!(pe.iter().all(|v| v.is_finite()));
        let concatenated = sinusoidal::<f64>(0, 50, d, SinusoidLayout::Concatenated).unwrap();
        assert_eq!(concatenated.column(3), pe.column(6)); // the unpaired sine: (7 − 1) / 2
    }

    #[test]
    fn empty_tables_are_errors() {
        assert!(sinusoidal::<f64>(0, 0, 4, SinusoidLayout::Interleaved).is_err());
        let err = sinusoidal::<f64>(0, 3, 0, SinusoidLayout::Concatenated).unwrap_err();
        assert_eq!(
            err.to_string(),
            "positional encoding has d_model = 0: it must be at least 1"
        );
    }

    /// PE(p + k) = PE(p) · M_k on every sine/cosine pair, for every p, with one M_k per k:
    /// a rotation of each pair by k·ω_i (orthogonal, and M_{-k} undoes M_k).
    // ANCHOR: shift_test
    #[test]
    fn a_shift_is_a_fixed_rotation_of_each_pair() {
        for layout in [SinusoidLayout::Interleaved, SinusoidLayout::Concatenated] {
            for d in [2, 4, 7, 16, 64] {
                let pe = sinusoidal::<f64>(0, 200, d, layout).unwrap();
                let paired: Vec<usize> = (layout.columns(d).into_iter())
                    .filter_map(|(s, c)| Some([s, c?]))
                    .flatten()
                    .collect();
                for k in [-7i64, 1, 3, 50] {
                    let m = shift_matrix::<f64>(d, k, layout);
                    for p in (10..140).step_by(13) {
                        let moved = pe.slice(s![p..p + 1, ..]).dot(&m);
                        let target = pe.row((p as i64 + k) as usize);
                        for &c in &paired {
                            assert!((moved[[0, c]] - target[c]).abs() < 1e-12, "{d} {k} {p}");
                        }
                    }
                    let back = m.dot(&shift_matrix::<f64>(d, -k, layout));
                    let restricted = back.select(Axis(0), &paired).select(Axis(1), &paired);
                    assert!(max_diff(&restricted, &Array2::eye(paired.len())) < 1e-12);
                    let mtm = m.t().dot(&m).select(Axis(0), &paired).select(Axis(1), &paired);
                    assert!(max_diff(&mtm, &Array2::eye(paired.len())) < 1e-12);
                }
            }
        }
    }
    // ANCHOR_END: shift_test

    #[test]
    fn the_unpaired_sine_has_no_fixed_shift() {
        // For d = 5, find the best fixed column m with PE(p)·m ≈ sin((p + 1)·ω_2), the
        // unpaired sine one position on, by least squares over 400 positions (the normal
        // equations, solved by Gaussian elimination): the fit stays off, because the shifted
        // sine needs sin(ω_2)·cos(p·ω_2), which PE(p) does not hold. ω_2 = 10000^(-4/5) is
        // small, so the miss is about sin(ω_2) = 6.3e-4: small, but far above rounding.
        let d = 5;
        let pe = sinusoidal::<f64>(0, 401, d, SinusoidLayout::Interleaved).unwrap();
        let (a, b) = (pe.slice(s![..400, ..]), pe.slice(s![1.., 4]));
        let (mut ata, mut atb): (Array2<f64>, Array1<f64>) = (a.t().dot(&a), a.t().dot(&b));
        for c in 0..d {
            let pivot =
                (c..d).max_by(|&i, &j| ata[[i, c]].abs().total_cmp(&ata[[j, c]].abs()));
            let pivot = pivot.unwrap();
            for j in 0..d {
                ata.swap([c, j], [pivot, j]);
            }
            atb.swap(c, pivot);
            for i in c + 1..d {
                let f = ata[[i, c]] / ata[[c, c]];
                for j in c..d {
                    ata[[i, j]] -= f * ata[[c, j]];
                }
                atb[i] -= f * atb[c];
            }
        }
        let mut m = Array1::<f64>::zeros(d);
        for c in (0..d).rev() {
            m[c] = (atb[c] - ata.row(c).slice(s![c + 1..]).dot(&m.slice(s![c + 1..])))
                / ata[[c, c]];
        }
        let residual = (a.dot(&m) - b).iter().fold(0.0_f64, |r, e| r.max(e.abs()));
        assert!(residual > 5e-4, "{residual}");
        // And shift_matrix leaves that column out.
        let shift = shift_matrix::<f64>(d, 1, SinusoidLayout::Interleaved);
        assert!(shift.column(4).iter().chain(shift.row(4)).all(|&v| v == 0.0));
    }

    #[test]
    fn the_dot_product_depends_only_on_the_distance() {
        for d in [4, 16, 64] {
            let pe = sinusoidal::<f64>(0, 120, d, SinusoidLayout::Interleaved).unwrap();
            let w = frequencies(d);
            for (p, q) in [(0, 0), (3, 10), (50, 20), (110, 7), (60, 67)] {
                let dot = pe.row(p).dot(&pe.row(q));
                let k = p as f64 - q as f64;
                let expected: f64 = w.iter().map(|w| (k * w).cos()).sum();
                assert!((dot - expected).abs() < 1e-12, "{d} {p} {q}");
            }
            // At distance 0 it is d_model / 2: sin² + cos² = 1 per pair.
            assert!((pe.row(33).dot(&pe.row(33)) - d as f64 / 2.0).abs() < 1e-12);
        }
    }

    #[test]
    fn learned_positions_are_looked_up_and_bounded() {
        let mut rng = StdRng::seed_from_u64(3);
        let table = LearnedPositions::<f64>::random(10, 4, &mut rng).unwrap();
        assert_eq!(table.lookup(2, 3).unwrap(), table.table().slice(s![2..5, ..]));
        assert_eq!(table.lookup(0, 10).unwrap(), table.table());
        let err = table.lookup(8, 3).unwrap_err();
        assert_eq!(
            err.to_string(),
            "position 10: the table has rows for positions 0..10 only"
        );
        assert!(matches!(table.lookup(3, 0), Err(AttentionError::Empty { .. })));
        let err = LearnedPositions::new(Array2::<f64>::zeros((3, 0))).unwrap_err();
        assert_eq!(err.to_string(), "position table has d_model = 0: it must be at least 1");
        // f32 and f64 tables from one seed hold the same numbers up to rounding.
        let t32 =
            LearnedPositions::<f32>::random(10, 4, &mut StdRng::seed_from_u64(3)).unwrap();
        assert_eq!(t32.table(), table.table().mapv(|v| v as f32));
    }

    #[test]
    fn positions_are_added_row_by_row() {
        let pe = sinusoidal::<f64>(0, 3, 2, SinusoidLayout::Interleaved).unwrap();
        let x = Array2::from_elem((3, 2), 1.0);
        assert_eq!(add_positions(&x, &pe).unwrap(), &pe + 1.0);
        let batch = ndarray::Array3::from_elem((2, 3, 2), 1.0);
        let added = add_positions(&batch, &pe).unwrap();
        for item in added.outer_iter() {
            assert_eq!(item, &pe + 1.0);
        }
        let err = add_positions(&x, &Array2::zeros((3, 5))).unwrap_err();
        assert_eq!(err.to_string(), "x has d_model = 2 but positions has d_model = 5");
        let err = add_positions(&Array1::<f64>::zeros(2), &pe).unwrap_err();
        assert!(matches!(err, AttentionError::Shape { .. }), "{err}");
    }
}
