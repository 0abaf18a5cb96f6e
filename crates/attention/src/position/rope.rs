//! Chapter *Where is each word? Position*: rotary position embeddings (RoPE, Su et al. 2021).
//!
//! RoPE gives attention a sense of order without adding anything to the tokens: each head's
//! query and key rows are rotated, pair of columns by pair of columns, by an angle that grows
//! with the row's position. Pair `i` turns by `position · θ_i`, with
//! `θ_i = base^(−2i/d_head)` for `i < d_head/2` (`base` = 10000 in the paper and in Llama).
//! Rotating `q` at position `m` and `k` at position `n` leaves their dot product depending
//! on `m − n` only, since two rotations by `mθ` and `nθ` differ by a rotation by `(m − n)θ`.
//!
//! Which columns make a pair is a convention, and the two in use are not interchangeable:
//!
//! - [`RopeLayout::RotateHalf`] pairs column `i` with column `i + d_head/2` (Llama and
//!   GPT-NeoX as written in Hugging Face Transformers, whose `rotate_half` gives the name);
//! - [`RopeLayout::Interleaved`] pairs columns `2i` and `2i + 1` (RoFormer's formula, GPT-J,
//!   Meta's original Llama code with complex numbers).
//!
//! A model trained with one layout and run with the other still gets position 0 right (it is
//! not rotated) and every score of a query with its own key, and nothing else: a one-token
//! test passes, and every score between two different positions is wrong.
//! [`layout_permutation`] reorders the columns of `W_Q` and `W_K` to move weights from the
//! interleaved layout to rotate-half, and its inverse
//! ([`inverse_permutation`](crate::position::inverse_permutation)) from rotate-half to
//! interleaved.
//!
//! The angles are computed in `f64` and only their cosine and sine are rounded to the
//! element type, so that an `f32` rotation at position 100 000 is as accurate as one at 1.
//!
//! Anchors (below the doc comments): `rope_struct`, `rope_new`, `rope_thetas`, `rope_apply`,
//! `rotate_half`, `rotate_interleaved`, `layout_permutation`, `check_even`.

use ndarray::{Array, ArrayRef, ArrayViewMut1, Axis, Dimension};

use crate::error::{AttentionError, Result};
use crate::float::Float;

/// Which columns RoPE rotates together.
///
/// ```
/// use attention::rope::{Rope, RopeLayout};
///
/// let rope = Rope::new(8, 10_000.0, RopeLayout::RotateHalf).unwrap();
/// assert_eq!(rope.layout(), RopeLayout::RotateHalf);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// ANCHOR: rope_struct
pub enum RopeLayout {
    /// Pairs `(i, i + d_head/2)`: Llama and GPT-NeoX in Hugging Face Transformers.
    RotateHalf,
    /// Pairs `(2i, 2i + 1)`: RoFormer, GPT-J.
    Interleaved,
}

// ANCHOR_END: rope_struct
/// Rotary position embeddings for heads of width `d_head`.
///
/// ```
/// use attention::rope::{Rope, RopeLayout};
/// use ndarray::array;
///
/// // One pair, θ_0 = 1: the row at position 1 turns by 1 radian.
/// let rope = Rope::new(2, 10_000.0, RopeLayout::RotateHalf).unwrap();
/// let turned = rope.apply(&array![[1.0_f64, 0.0]], 1).unwrap();
/// assert_eq!(turned, array![[1f64.cos(), 1f64.sin()]]);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: rope_struct
pub struct Rope {
    d_head: usize,
    base: f64,
    layout: RopeLayout,
}
// ANCHOR_END: rope_struct

impl Rope {
    /// RoPE for heads of width `d_head` (even, at least 2) with the given `base` (finite,
    /// greater than 1; 10000 in the paper).
    ///
    /// ```
    /// use attention::rope::{Rope, RopeLayout};
    ///
    /// assert!(Rope::new(64, 10_000.0, RopeLayout::Interleaved).is_ok());
    /// assert_eq!(
    ///     Rope::new(5, 10_000.0, RopeLayout::RotateHalf).unwrap_err().to_string(),
    ///     "RoPE has d_head = 5, but it must be even and at least 2"
    /// );
    /// assert_eq!(
    ///     Rope::new(8, 1.0, RopeLayout::RotateHalf).unwrap_err().to_string(),
    ///     "RoPE base: must be a finite number greater than 1, but it is 1"
    /// );
    /// ```
    // ANCHOR: rope_new
    pub fn new(d_head: usize, base: f64, layout: RopeLayout) -> Result<Rope> {
        check_even(d_head)?;
        if !(base.is_finite() && base > 1.0) {
            return Err(AttentionError::Invalid {
                what: "RoPE base".into(),
                problem: format!("must be a finite number greater than 1, but it is {base}"),
            });
        }
        Ok(Rope { d_head, base, layout })
    }

    // ANCHOR_END: rope_new
    /// The head width `d_head`.
    ///
    /// ```
    /// use attention::rope::{Rope, RopeLayout};
    ///
    /// assert_eq!(Rope::new(64, 10_000.0, RopeLayout::RotateHalf).unwrap().d_head(), 64);
    /// ```
    pub fn d_head(&self) -> usize {
        self.d_head
    }

    /// The base of the frequencies, `θ_i = base^(−2i/d_head)`.
    ///
    /// ```
    /// use attention::rope::{Rope, RopeLayout};
    ///
    /// let rope = Rope::new(64, 500_000.0, RopeLayout::RotateHalf).unwrap();
    /// assert_eq!(rope.base(), 500_000.0);
    /// ```
    pub fn base(&self) -> f64 {
        self.base
    }

    /// Which columns are rotated together.
    ///
    /// ```
    /// use attention::rope::{Rope, RopeLayout};
    ///
    /// let rope = Rope::new(4, 100.0, RopeLayout::Interleaved).unwrap();
    /// assert_eq!(rope.layout(), RopeLayout::Interleaved);
    /// ```
    pub fn layout(&self) -> RopeLayout {
        self.layout
    }

    /// The angle per position of each pair, `θ_i = base^(−2i/d_head)` for `i < d_head/2`:
    /// from 1 (pair 0 turns one radian per token) down to `base^(−(d_head−2)/d_head)`.
    ///
    /// ```
    /// use attention::rope::{Rope, RopeLayout};
    ///
    /// let thetas = Rope::new(4, 100.0, RopeLayout::RotateHalf).unwrap().thetas();
    /// assert_eq!(thetas, vec![1.0, 0.1]);
    /// ```
    // ANCHOR: rope_thetas
    pub fn thetas(&self) -> Vec<f64> {
        let d = self.d_head as f64;
        (0..self.d_head / 2).map(|i| self.base.powf(-2.0 * i as f64 / d)).collect()
    }

    // ANCHOR_END: rope_thetas
    /// Rotates every row of `x: (..., L, d_head)`, row `r` as the token at position
    /// `start + r`: pair `i` turns by the angle `(start + r) · θ_i`.
    ///
    /// `start` is where the rows begin in the sequence: 0 for a whole sentence, the number of
    /// tokens already cached when decoding one new token.
    ///
    /// ```
    /// use attention::rope::{Rope, RopeLayout};
    /// use ndarray::{array, s, Array2};
    ///
    /// let rope = Rope::new(4, 10_000.0, RopeLayout::RotateHalf).unwrap();
    /// let x = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f64);
    /// let all = rope.apply(&x, 0).unwrap();
    /// assert_eq!(all.row(0), x.row(0)); // position 0 is not rotated
    /// // The last row alone, at its position 2, turns the same way.
    /// assert_eq!(rope.apply(&x.slice(s![2.., ..]), 2).unwrap().row(0), all.row(2));
    /// assert_eq!(
    ///     rope.apply(&array![[1.0, 2.0]], 0).unwrap_err().to_string(),
    ///     "x has shape [1, 2] but a shape (..., L, d_head = 4) was expected"
    /// );
    /// ```
    // ANCHOR: rope_apply
    pub fn apply<A: Float, D: Dimension>(
        &self,
        x: &ArrayRef<A, D>,
        start: usize,
    ) -> Result<Array<A, D>> {
        let n = x.ndim();
        if n < 2 || x.shape()[n - 1] != self.d_head {
            let expected = format!("a shape (..., L, d_head = {}) was expected", self.d_head);
            return Err(AttentionError::shape("x", x.shape(), &expected));
        }
        let thetas = self.thetas();
        let mut out = x.to_owned();
        let mut rows_by_position = out.view_mut().into_dyn(); // any number of axes
        for (r, mut rows) in rows_by_position.axis_iter_mut(Axis(n - 2)).enumerate() {
            let position = (start + r) as f64;
            let cos: Vec<A> =
                thetas.iter().map(|t| A::from_f64_lossy((position * t).cos())).collect();
            let sin: Vec<A> =
                thetas.iter().map(|t| A::from_f64_lossy((position * t).sin())).collect();
            for row in rows.lanes_mut(Axis(n - 2)) {
                match self.layout {
                    RopeLayout::RotateHalf => rotate_half(row, &cos, &sin),
                    RopeLayout::Interleaved => rotate_interleaved(row, &cos, &sin),
                }
            }
        }
        Ok(out)
    }
    // ANCHOR_END: rope_apply
}

/// Rotates the pairs `(i, i + d/2)` of one row by the angles with these cosines and sines.
// ANCHOR: rotate_half
fn rotate_half<A: Float>(mut row: ArrayViewMut1<A>, cos: &[A], sin: &[A]) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = (row[i], row[i + half]);
        row[i] = a * cos[i] - b * sin[i];
        row[i + half] = a * sin[i] + b * cos[i];
    }
}
// ANCHOR_END: rotate_half

/// Rotates the pairs `(2i, 2i + 1)` of one row by the angles with these cosines and sines.
// ANCHOR: rotate_interleaved
fn rotate_interleaved<A: Float>(mut row: ArrayViewMut1<A>, cos: &[A], sin: &[A]) {
    for i in 0..cos.len() {
        let (a, b) = (row[2 * i], row[2 * i + 1]);
        row[2 * i] = a * cos[i] - b * sin[i];
        row[2 * i + 1] = a * sin[i] + b * cos[i];
    }
}
// ANCHOR_END: rotate_interleaved

/// The column order that turns a head's `W_Q` or `W_K` written for the interleaved layout
/// into one for the rotate-half layout: `perm = [0, 2, 4, …, d−2, 1, 3, …, d−1]`.
///
/// Column `c` of the rotate-half weights is column `perm[c]` of the interleaved ones
/// (`w.select(Axis(1), &perm)`), so interleaved pair `(2i, 2i+1)` lands on rotate-half pair
/// `(i, i + d/2)`. Then [`RopeLayout::RotateHalf`] on `x · W[:, perm]` gives the columns of
/// [`RopeLayout::Interleaved`] on `x · W`, reordered by `perm`, and every score `q · k` is
/// the same. The other direction, rotate-half weights to interleaved, uses the inverse
/// permutation, [`inverse_permutation`](crate::position::inverse_permutation)`(&perm)`
/// (`[0, 4, 1, 5, 2, 6, 3, 7]` for `d = 8`). For a multi-head
/// `W_Q: (d_model, heads·d_head)`, reorder each head's block of `d_head` columns. This is
/// the reordering Hugging Face's Llama conversion script (`permute` in
/// `convert_llama_weights_to_hf.py`) applies to the rows of Meta's `(out, in)` weights; `W_V`
/// is never reordered (values are not rotated).
///
/// ```
/// use attention::position::inverse_permutation;
/// use attention::rope::{layout_permutation, Rope, RopeLayout};
/// use ndarray::{array, Axis};
///
/// assert_eq!(layout_permutation(6).unwrap(), vec![0, 2, 4, 1, 3, 5]);
///
/// let q = array![[0.1_f64, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]]; // x · W, interleaved
/// let perm = layout_permutation(4).unwrap();
/// let interleaved = Rope::new(4, 10_000.0, RopeLayout::Interleaved).unwrap();
/// let rotate_half = Rope::new(4, 10_000.0, RopeLayout::RotateHalf).unwrap();
/// assert_eq!(
///     rotate_half.apply(&q.select(Axis(1), &perm), 0).unwrap(),
///     interleaved.apply(&q, 0).unwrap().select(Axis(1), &perm)
/// );
///
/// // And back: rotate-half weights, columns reordered by the inverse, run interleaved.
/// let inverse = inverse_permutation(&perm).unwrap();
/// assert_eq!(inverse, [0, 2, 1, 3]); // for d = 4 the permutation is its own inverse
/// assert_eq!(
///     interleaved.apply(&q.select(Axis(1), &inverse), 0).unwrap(),
///     rotate_half.apply(&q, 0).unwrap().select(Axis(1), &inverse)
/// );
/// let eight = layout_permutation(8).unwrap();
/// assert_eq!(inverse_permutation(&eight).unwrap(), [0, 4, 1, 5, 2, 6, 3, 7]);
/// assert!(layout_permutation(3).is_err());
/// ```
// ANCHOR: layout_permutation
pub fn layout_permutation(d_head: usize) -> Result<Vec<usize>> {
    check_even(d_head)?;
    Ok((0..d_head).step_by(2).chain((1..d_head).step_by(2)).collect())
}
// ANCHOR_END: layout_permutation

/// An error unless `d_head` is even and at least 2: RoPE rotates pairs of columns.
// ANCHOR: check_even
fn check_even(d_head: usize) -> Result<()> {
    if d_head == 0 || !d_head.is_multiple_of(2) {
        return Err(AttentionError::OddWidth {
            what: "RoPE".into(),
            dim: "d_head",
            size: d_head,
        });
    }
    Ok(())
}
// ANCHOR_END: check_even

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, Array2, Array3, array, s};
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    const LAYOUTS: [RopeLayout; 2] = [RopeLayout::RotateHalf, RopeLayout::Interleaved];

    fn random(rows: usize, cols: usize, seed: u64) -> Array2<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        Array2::from_shape_fn((rows, cols), |_| rng.random_range(-1.0..1.0))
    }

    /// `q` rotated to position `m`, dotted with `k` rotated to position `n`.
    fn score(rope: &Rope, q: &Array1<f64>, m: usize, k: &Array1<f64>, n: usize) -> f64 {
        let q = rope.apply(&q.view().insert_axis(Axis(0)), m).unwrap();
        let k = rope.apply(&k.view().insert_axis(Axis(0)), n).unwrap();
        q.row(0).dot(&k.row(0))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// q_m · k_n depends only on m − n: shifting both positions by the same offset
        /// changes nothing (beyond rounding), in both layouts and for any base.
        #[test]
        fn scores_depend_only_on_the_distance(
            half in 1..=8usize,
            m in 0..2000usize,
            n in 0..2000usize,
            shift in 0..100_000usize,
            base in 2.0..1e6f64,
            seed in any::<u64>(),
            interleaved in any::<bool>(),
        ) {
            let layout = LAYOUTS[interleaved as usize];
            let rope = Rope::new(2 * half, base, layout).unwrap();
            let x = random(2, 2 * half, seed);
            let (q, k) = (x.row(0).to_owned(), x.row(1).to_owned());
            let near = score(&rope, &q, m, &k, n);
            let far = score(&rope, &q, m + shift, &k, n + shift);
            prop_assert!((near - far).abs() < 1e-9, "{near} vs {far}");
        }

        /// Rotations keep lengths: every row's norm is unchanged.
        #[test]
        fn norms_are_preserved(
            half in 1..=8usize,
            start in 0..100_000usize,
            seed in any::<u64>(),
            interleaved in any::<bool>(),
        ) {
            let rope = Rope::new(2 * half, 10_000.0, LAYOUTS[interleaved as usize]).unwrap();
            let x = random(5, 2 * half, seed);
            let y = rope.apply(&x, start).unwrap();
            for (a, b) in x.rows().into_iter().zip(y.rows()) {
                prop_assert!((a.dot(&a).sqrt() - b.dot(&b).sqrt()).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn position_zero_is_the_identity() {
        for layout in LAYOUTS {
            let rope = Rope::new(6, 10_000.0, layout).unwrap();
            let x = random(1, 6, 3);
            assert_eq!(rope.apply(&x, 0).unwrap(), x);
            let x32 = x.mapv(|v| v as f32);
            assert_eq!(rope.apply(&x32, 0).unwrap(), x32);
        }
    }

    #[test]
    fn the_layouts_pair_different_columns() {
        // d_head = 4, base 100: θ = [1, 0.1]. A unit vector in column 1 belongs to pair 1
        // (with column 3) in rotate-half, to pair 0 (with column 0) when interleaved.
        let x = array![[0.0_f64, 1.0, 0.0, 0.0]];
        let half = Rope::new(4, 100.0, RopeLayout::RotateHalf).unwrap().apply(&x, 1).unwrap();
        let inter =
            Rope::new(4, 100.0, RopeLayout::Interleaved).unwrap().apply(&x, 1).unwrap();
        assert_eq!(half, array![[0.0, 0.1f64.cos(), 0.0, 0.1f64.sin()]]);
        assert_eq!(inter, array![[-1f64.sin(), 1f64.cos(), 0.0, 0.0]]);
    }

    #[test]
    fn a_start_offset_continues_the_sequence() {
        for layout in LAYOUTS {
            let rope = Rope::new(8, 10_000.0, layout).unwrap();
            let x = random(7, 8, 5);
            let whole = rope.apply(&x, 10).unwrap();
            let tail = rope.apply(&x.slice(s![4.., ..]), 14).unwrap();
            assert_eq!(tail, whole.slice(s![4.., ..]));
        }
    }

    #[test]
    fn leading_axes_are_rotated_row_by_row() {
        // (heads, L, d_head): every head's rows at positions start.., the same as one head.
        let rope = Rope::new(4, 10_000.0, RopeLayout::RotateHalf).unwrap();
        let x =
            Array3::from_shape_fn((3, 5, 4), |(h, i, j)| (h * 20 + i * 4 + j) as f64 / 7.0);
        let y = rope.apply(&x, 3).unwrap();
        for h in 0..3 {
            assert_eq!(
                y.index_axis(Axis(0), h),
                rope.apply(&x.index_axis(Axis(0), h), 3).unwrap()
            );
        }
        let batched = x.clone().insert_axis(Axis(0));
        assert_eq!(rope.apply(&batched, 3).unwrap().index_axis(Axis(0), 0), y);
    }

    #[test]
    fn f32_follows_f64() {
        for layout in LAYOUTS {
            let rope = Rope::new(16, 10_000.0, layout).unwrap();
            let x = random(4, 16, 9);
            let y64 = rope.apply(&x, 100_000).unwrap();
            let y32 = rope.apply(&x.mapv(|v| v as f32), 100_000).unwrap();
            let err = (y32.mapv(f64::from) - &y64).iter().fold(0.0_f64, |m, d| m.max(d.abs()));
            assert!(err < 1e-6, "f32 differs from f64 by {err}");
        }
    }

    /// Weights trained for one layout, moved to the other with `layout_permutation`, give the
    /// same rotated columns (reordered) and the same scores.
    #[test]
    fn permuted_weights_make_the_layouts_agree() {
        let (d_model, d_head, len) = (6, 8, 12);
        let x = random(len, d_model, 1);
        let (w_q, w_k) = (random(d_model, d_head, 2), random(d_model, d_head, 3));
        let perm = layout_permutation(d_head).unwrap();
        let interleaved = Rope::new(d_head, 10_000.0, RopeLayout::Interleaved).unwrap();
        let rotate_half = Rope::new(d_head, 10_000.0, RopeLayout::RotateHalf).unwrap();

        let q_i = interleaved.apply(&x.dot(&w_q), 0).unwrap();
        let k_i = interleaved.apply(&x.dot(&w_k), 0).unwrap();
        let q_h = rotate_half.apply(&x.dot(&w_q.select(Axis(1), &perm)), 0).unwrap();
        let k_h = rotate_half.apply(&x.dot(&w_k.select(Axis(1), &perm)), 0).unwrap();
        // Column c of the rotate-half result is column perm[c] of the interleaved one.
        let max = |a: &Array2<f64>, b: &Array2<f64>| {
            (a - b).iter().fold(0.0_f64, |m, d| m.max(d.abs()))
        };
        assert!(max(&q_h, &q_i.select(Axis(1), &perm)) < 1e-12);
        assert!(max(&k_h, &k_i.select(Axis(1), &perm)) < 1e-12);
        assert!(max(&q_h.dot(&k_h.t()), &q_i.dot(&k_i.t())) < 1e-12);
    }

    /// The classic bug: weights trained for rotate-half, run with the interleaved layout.
    /// Position 0 and every q_m · k_m agree; scores between different positions do not.
    #[test]
    fn the_wrong_layout_is_right_only_at_position_zero_and_on_the_diagonal() {
        let (d_model, d_head, len) = (8, 8, 16);
        let x = random(len, d_model, 11);
        let (q, k) =
            (x.dot(&random(d_model, d_head, 12)), x.dot(&random(d_model, d_head, 13)));
        let scores = |layout| {
            let rope = Rope::new(d_head, 10_000.0, layout).unwrap();
            rope.apply(&q, 0).unwrap().dot(&rope.apply(&k, 0).unwrap().t())
        };
        let (right, wrong) = (scores(RopeLayout::RotateHalf), scores(RopeLayout::Interleaved));
        assert_eq!(right[[0, 0]], wrong[[0, 0]]);
        for i in 0..len {
            assert!((right[[i, i]] - wrong[[i, i]]).abs() < 1e-12);
        }
        let off_diagonal = (0..len)
            .flat_map(|i| (0..len).map(move |j| (i, j)))
            .filter(|(i, j)| i != j)
            .map(|(i, j)| (right[[i, j]] - wrong[[i, j]]).abs())
            .fold(0.0_f64, f64::max);
        let typical = right.iter().map(|s| s.abs()).sum::<f64>() / (len * len) as f64;
        assert!(off_diagonal > 0.5 * typical, "{off_diagonal} vs typical {typical}");
    }

    #[test]
    fn bad_settings_and_shapes_are_errors() {
        for d in [0, 1, 7] {
            assert!(matches!(
                Rope::new(d, 10_000.0, RopeLayout::RotateHalf),
                Err(AttentionError::OddWidth { size, .. }) if size == d
            ));
            assert!(matches!(layout_permutation(d), Err(AttentionError::OddWidth { .. })));
        }
        for base in [1.0, 0.5, -2.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Rope::new(8, base, RopeLayout::RotateHalf),
                Err(AttentionError::Invalid { .. })
            ));
        }
        let rope = Rope::new(4, 10_000.0, RopeLayout::Interleaved).unwrap();
        assert_eq!(
            rope.apply(&Array1::<f64>::zeros(4), 0).unwrap_err().to_string(),
            "x has shape [4] but a shape (..., L, d_head = 4) was expected"
        );
        assert_eq!(
            rope.apply(&Array3::<f32>::zeros((2, 3, 6)), 0).unwrap_err().to_string(),
            "x has shape [2, 3, 6] but a shape (..., L, d_head = 4) was expected"
        );
        assert_eq!(rope.apply(&Array2::<f64>::zeros((0, 4)), 5).unwrap().dim(), (0, 4));
    }
}
