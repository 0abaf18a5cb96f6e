//! Chapter *Inside a real model*: measuring what a head does.
//!
//! One head's weights for one sentence are a matrix `(L, L)`, row = query, column = key
//! (the sentence's own tokens only, without padding). A head "does" something when most of
//! each row's weight goes to the same relative place. [`pattern_score`] measures a
//! [`Pattern`] as the average weight a query puts where the pattern says; [`mean_entropy`]
//! measures how spread out the rows are (chapter 3's entropy: `ln L` for a uniform row, 0 for
//! a row on one key).
//!
//! For BERT's inputs, position 0 is `[CLS]` and position `L − 1` is `[SEP]`.
//!
//! Anchors (below the doc comments): `pattern_score`, `pattern_checks`, `mean_entropy`.

use ndarray::ArrayRef2;

use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};
use crate::stats::entropy;

/// Where a head may put its weight, relative to the query at position `i` of a sentence of
/// `L` tokens.
///
/// ```
/// use attention::inspect::Pattern;
///
/// assert_eq!(Pattern::ALL.len(), 5);
/// assert_eq!(Pattern::PreviousToken.name(), "previous token");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// ANCHOR: pattern_score
pub enum Pattern {
    /// The key just before the query, `i − 1` (queries `i ≥ 1`).
    PreviousToken,
    /// The key just after the query, `i + 1` (queries `i ≤ L − 2`).
    NextToken,
    /// The first key, position 0 (`[CLS]`), for every query.
    FirstToken,
    /// The last key, position `L − 1` (`[SEP]`), for every query.
    LastToken,
    /// The other positions holding the same token id as the query (queries whose token occurs
    /// more than once).
    SameToken,
}

// ANCHOR_END: pattern_score
impl Pattern {
    /// Every pattern, in the order of the enum.
    pub const ALL: [Pattern; 5] = [
        Pattern::PreviousToken,
        Pattern::NextToken,
        Pattern::FirstToken,
        Pattern::LastToken,
        Pattern::SameToken,
    ];

    /// A short name for tables and figures, e.g. `"previous token"`.
    ///
    /// ```
    /// use attention::inspect::Pattern;
    ///
    /// let names: Vec<_> = Pattern::ALL.iter().map(|p| p.name()).collect();
    /// assert_eq!(names[2..4], ["first token ([CLS])", "last token ([SEP])"]);
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Pattern::PreviousToken => "previous token",
            Pattern::NextToken => "next token",
            Pattern::FirstToken => "first token ([CLS])",
            Pattern::LastToken => "last token ([SEP])",
            Pattern::SameToken => "same token",
        }
    }
}

/// How strongly one head's weights `(L, L)` follow `pattern` on a sentence with token ids
/// `ids` (`L` of them): the mean, over the query rows where the pattern is defined, of the
/// weight the row puts on the pattern's keys. `None` when no row qualifies.
///
/// - `PreviousToken`: rows `i = 1 .. L − 1`, the weight on key `i − 1`;
/// - `NextToken`: rows `i = 0 .. L − 2`, the weight on key `i + 1`;
/// - `FirstToken`, `LastToken`: every row, the weight on key 0, or on key `L − 1`;
/// - `SameToken`: the rows `i` whose id occurs at some other position `j ≠ i`, the sum of
///   the weights on all those `j` (the query's own position is not counted).
///
/// The score is between 0 and 1 (for rows that sum to 1); a head that spreads its weight
/// evenly scores about `1/L` on the first four.
///
/// ```
/// use attention::inspect::{pattern_score, Pattern};
/// use ndarray::array;
///
/// let shifted = array![[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]];
/// let ids = [101, 7, 102];
/// assert_eq!(pattern_score(&shifted, Pattern::PreviousToken, &ids).unwrap(), Some(1.0));
/// assert_eq!(pattern_score(&shifted, Pattern::NextToken, &ids).unwrap(), Some(0.0));
/// assert_eq!(pattern_score(&shifted, Pattern::SameToken, &ids).unwrap(), None);
/// ```
// ANCHOR: pattern_score
pub fn pattern_score<A: Float>(
    weights: &ArrayRef2<A>,
    pattern: Pattern,
    ids: &[u32],
) -> Result<Option<f64>> {
    let l = check_weights(weights, ids)?;
    let w = |i: usize, j: usize| to_f64(weights[[i, j]]);
    // The weight row i puts on the pattern's keys, or None if the pattern skips row i.
    let on_pattern = |i: usize| -> Option<f64> {
        match pattern {
            Pattern::PreviousToken => (i >= 1).then(|| w(i, i - 1)),
            Pattern::NextToken => (i + 1 < l).then(|| w(i, i + 1)),
            Pattern::FirstToken => Some(w(i, 0)),
            Pattern::LastToken => Some(w(i, l - 1)),
            Pattern::SameToken => {
                let same: Vec<usize> =
                    (0..l).filter(|&j| j != i && ids[j] == ids[i]).collect();
                (!same.is_empty()).then(|| same.iter().map(|&j| w(i, j)).sum())
            }
        }
    };
    let scores: Vec<f64> = (0..l).filter_map(on_pattern).collect();
    Ok((!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64))
}
// ANCHOR_END: pattern_score

/// The mean over the rows of `weights: (L_q, L_k)` of each row's entropy `−Σ p·ln p`, in
/// nats ([`entropy`], each row taken in `f64`). It is `ln L_k` for uniform rows and 0 for
/// one-hot rows; a matrix with no rows gives NaN.
///
/// ```
/// use attention::inspect::mean_entropy;
/// use ndarray::array;
///
/// let w = array![[0.5, 0.5], [1.0, 0.0]];
/// assert!((mean_entropy(&w) - 2f64.ln() / 2.0).abs() < 1e-15);
/// ```
// ANCHOR: mean_entropy
pub fn mean_entropy<A: Float>(weights: &ArrayRef2<A>) -> f64 {
    let total: f64 = weights.rows().into_iter().map(|row| entropy(&row.mapv(to_f64))).sum();
    total / weights.nrows() as f64
}
// ANCHOR_END: mean_entropy

/// Checks that the weights are square `(L, L)` with `L ≥ 1` and that there are `L` ids;
/// returns `L`.
// ANCHOR: pattern_checks
fn check_weights<A: Float>(weights: &ArrayRef2<A>, ids: &[u32]) -> Result<usize> {
    let (l_q, l_k) = weights.dim();
    if l_q != l_k {
        return Err(AttentionError::shape(
            "weights",
            weights.shape(),
            "one sentence's self-attention weights (L, L) were expected",
        ));
    }
    if l_q == 0 {
        return Err(AttentionError::Empty { what: "weights".into(), dim: "L" });
    }
    if ids.len() != l_q {
        return Err(AttentionError::mismatch("ids", ids.len(), "weights", l_q, "L"));
    }
    Ok(l_q)
}
// ANCHOR_END: pattern_checks

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, array};

    /// A 4-token sentence `[CLS] a b [SEP]`-like, weights written by hand, every pattern
    /// computed by hand.
    #[test]
    fn every_pattern_by_hand() {
        let w = array![
            [0.1, 0.2, 0.3, 0.4],
            [0.5, 0.1, 0.2, 0.2],
            [0.0, 0.6, 0.1, 0.3],
            [0.25, 0.25, 0.25, 0.25],
        ];
        let ids = [101, 7, 7, 102];
        let score = |p| pattern_score(&w, p, &ids).unwrap().unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
        assert!(close(score(Pattern::PreviousToken), (0.5 + 0.6 + 0.25) / 3.0));
        assert!(close(score(Pattern::NextToken), (0.2 + 0.2 + 0.3) / 3.0));
        assert!(close(score(Pattern::FirstToken), (0.1 + 0.5 + 0.0 + 0.25) / 4.0));
        assert!(close(score(Pattern::LastToken), (0.4 + 0.2 + 0.3 + 0.25) / 4.0));
        // rows 1 and 2 hold id 7, each on the other's position: 0.2 and 0.6
        assert!(close(score(Pattern::SameToken), (0.2 + 0.6) / 2.0));
        // f32 gives the same to f32 rounding
        let w32 = w.mapv(|v| v as f32);
        let s32 = pattern_score(&w32, Pattern::SameToken, &ids).unwrap().unwrap();
        assert!((s32 - 0.4).abs() < 1e-7);
    }

    /// SameToken sums over every other occurrence and ignores the query's own position.
    #[test]
    fn same_token_sums_the_other_occurrences() {
        let ids = [5, 9, 5, 5];
        let w = Array2::from_elem((4, 4), 0.25);
        // rows 0, 2, 3 hold id 5 (two other occurrences each); row 1 does not qualify
        let s = pattern_score(&w, Pattern::SameToken, &ids).unwrap().unwrap();
        assert!((s - 0.5).abs() < 1e-15);
        let diagonal = Array2::<f64>::eye(4);
        assert_eq!(pattern_score(&diagonal, Pattern::SameToken, &ids).unwrap(), Some(0.0));
    }

    /// One token: no previous, no next, but first = last = itself.
    #[test]
    fn a_single_token() {
        let w = array![[1.0]];
        assert_eq!(pattern_score(&w, Pattern::PreviousToken, &[3]).unwrap(), None);
        assert_eq!(pattern_score(&w, Pattern::NextToken, &[3]).unwrap(), None);
        assert_eq!(pattern_score(&w, Pattern::FirstToken, &[3]).unwrap(), Some(1.0));
        assert_eq!(pattern_score(&w, Pattern::LastToken, &[3]).unwrap(), Some(1.0));
        assert_eq!(mean_entropy(&w), 0.0);
    }

    #[test]
    fn mean_entropy_of_uniform_and_mixed_rows() {
        let uniform = Array2::from_elem((3, 8), 0.125_f32);
        assert!((mean_entropy(&uniform) - 8f64.ln()).abs() < 1e-6);
        let mixed = array![[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]];
        assert!((mean_entropy(&mixed) - 4f64.ln() / 2.0).abs() < 1e-15);
        assert!(mean_entropy(&Array2::<f64>::zeros((0, 3))).is_nan());
    }

    #[test]
    fn bad_inputs_are_errors() {
        let message = |w: &Array2<f64>, ids: &[u32]| {
            pattern_score(w, Pattern::FirstToken, ids).unwrap_err().to_string()
        };
        assert_eq!(
            message(&Array2::zeros((2, 3)), &[1, 2]),
            "weights has shape [2, 3] but one sentence's self-attention weights (L, L) were \
             expected"
        );
        assert_eq!(
            message(&Array2::zeros((3, 3)), &[1, 2]),
            "ids has L = 2 but weights has L = 3"
        );
        assert_eq!(
            message(&Array2::zeros((0, 0)), &[]),
            "weights has L = 0: it must be at least 1"
        );
    }
}
