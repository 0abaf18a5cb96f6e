//! The one error type of the crate.
//!
//! Every function that can be handed inputs of the wrong shape returns
//! `Result<_, AttentionError>` instead of letting ndarray panic. The messages name the
//! operands and their shapes in the book's notation, for example
//! `q has d_k = 8 but k has d_k = 6`.
//!
//! Anchor (below the doc comments): `error_builders`, chapter *Queries, keys and values*.

use thiserror::Error;

/// Shorthand for `Result<T, AttentionError>`.
///
/// ```
/// use attention::{AttentionError, Result};
///
/// fn check(l: usize) -> Result<usize> {
///     if l == 0 {
///         return Err(AttentionError::Empty { what: "x".into(), dim: "L" });
///     }
///     Ok(l)
/// }
/// assert!(check(0).is_err());
/// assert_eq!(check(3).unwrap(), 3);
/// ```
pub type Result<T, E = AttentionError> = std::result::Result<T, E>;

/// Everything that can go wrong when the inputs do not fit together.
///
/// ```
/// use attention::{sdpa::sdpa, AttentionError};
/// use ndarray::Array2;
///
/// let q = Array2::<f64>::zeros((2, 8));
/// let k = Array2::<f64>::zeros((3, 6));
/// let v = Array2::<f64>::zeros((3, 4));
/// let err = sdpa(&q, &k, &v, None).unwrap_err();
/// assert_eq!(err.to_string(), "q has d_k = 8 but k has d_k = 6");
/// assert!(matches!(err, AttentionError::Mismatch { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AttentionError {
    /// Two operands disagree on a named dimension (`q` and `k` on `d_k`, `k` and `v` on
    /// `L_k`, …).
    #[error("{left} has {dim} = {left_size} but {right} has {dim} = {right_size}")]
    Mismatch {
        /// The first operand, e.g. `"q"`.
        left: String,
        /// Its size along `dim`.
        left_size: usize,
        /// The second operand, e.g. `"k"`.
        right: String,
        /// Its size along `dim`.
        right_size: usize,
        /// The dimension's name in the book, e.g. `"d_k"`.
        dim: &'static str,
    },
    /// A dimension that must be at least 1 is 0 (an empty sequence, a zero-width vector).
    #[error("{what} has {dim} = 0: it must be at least 1")]
    Empty {
        /// The operand, e.g. `"q"`.
        what: String,
        /// The dimension's name, e.g. `"L"`.
        dim: &'static str,
    },
    /// An operand has the wrong number of axes or the wrong shape as a whole.
    #[error("{what} has shape {found:?} but {expected}")]
    Shape {
        /// The operand, e.g. `"q"` or `"mask"`.
        what: String,
        /// Its actual shape.
        found: Vec<usize>,
        /// What was expected, in words, e.g. `"a shape (..., L_q, d_k) was expected"`.
        expected: String,
    },
    /// Operands with leading (batch, head) axes disagree on them.
    #[error("{left} has leading axes {left_shape:?} but {right} has {right_shape:?}")]
    Batch {
        /// The first operand.
        left: String,
        /// Its leading axes.
        left_shape: Vec<usize>,
        /// The second operand.
        right: String,
        /// Its leading axes.
        right_shape: Vec<usize>,
    },
    /// A mask that cannot be broadcast to the shape of the scores it should mask.
    #[error(
        "mask has shape {mask:?}, which does not broadcast to the scores' shape {scores:?}"
    )]
    MaskShape {
        /// The mask's shape.
        mask: Vec<usize>,
        /// The scores' shape `(..., L_q, L_k)`.
        scores: Vec<usize>,
    },
    /// The number of heads is 0 or does not divide `d_model`.
    #[error("heads = {heads} does not divide d_model = {d_model}")]
    Heads {
        /// The requested number of heads.
        heads: usize,
        /// The model width.
        d_model: usize,
    },
    /// A padding mask was asked for a valid length longer than the sequence.
    #[error("valid length {valid} of batch item {item} is longer than L_k = {l_k}")]
    ValidLength {
        /// Which batch item.
        item: usize,
        /// Its valid length.
        valid: usize,
        /// The key length.
        l_k: usize,
    },
    /// A token id outside the vocabulary or embedding table.
    #[error("token id {id} is out of range for a vocabulary of {size} tokens")]
    TokenId {
        /// The id.
        id: usize,
        /// The number of rows in the table.
        size: usize,
    },
    /// A word that is not in the vocabulary.
    #[error("the word {word:?} is not in the vocabulary")]
    UnknownWord {
        /// The word.
        word: String,
    },
    /// A width that must be even is odd or 0 (RoPE rotates pairs of columns).
    #[error("{what} has {dim} = {size}, but it must be even and at least 2")]
    OddWidth {
        /// The operand or setting, e.g. `"RoPE"` or `"q"`.
        what: String,
        /// The dimension's name, e.g. `"d_head"`.
        dim: &'static str,
        /// Its size.
        size: usize,
    },
    /// The number of key/value heads is 0 or does not divide the number of query heads.
    #[error("kv_heads = {kv_heads} does not divide heads = {heads}")]
    KvHeads {
        /// The number of query heads, `H`.
        heads: usize,
        /// The number of key/value heads, `G`.
        kv_heads: usize,
    },
    /// A sliding window of 0 keys: every query would see nothing, not even itself.
    #[error("a sliding window must hold at least 1 key (the query's own), but W = 0")]
    ZeroWindow,
    /// A KV cache with room for `capacity` tokens was asked to take one more.
    #[error(
        "the KV cache is full: it holds {capacity} tokens and has no room for token {position}"
    )]
    CacheFull {
        /// How many tokens the cache can hold.
        capacity: usize,
        /// The absolute position of the token that did not fit.
        position: usize,
    },
    /// A layer with a bias was handed to an operation written for layers without one (the
    /// hand-written gradients of chapter 11 have no term for a bias).
    #[error("{operation} supports projections without a bias only, but {what} has one")]
    Bias {
        /// The operation that refuses, e.g. `"MultiHeadAttention's training pass"`.
        operation: String,
        /// The projection with a bias, e.g. `"W_Q"`.
        what: String,
    },
    /// A setting outside its allowed range (a RoPE base ≤ 1, a position beyond a table, a
    /// list that is not a permutation, ...).
    #[error("{what}: {problem}")]
    Invalid {
        /// The setting, e.g. `"RoPE base"`.
        what: String,
        /// What is wrong with it, e.g. `"must be greater than 1, but it is 1"`.
        problem: String,
    },
}

// ANCHOR: error_builders
impl AttentionError {
    // ANCHOR_END: error_builders
    /// Builds a [`AttentionError::Mismatch`] from string slices.
    ///
    /// ```
    /// use attention::AttentionError;
    /// let e = AttentionError::mismatch("k", 5, "v", 4, "L_k");
    /// assert_eq!(e.to_string(), "k has L_k = 5 but v has L_k = 4");
    /// ```
    // ANCHOR: error_builders
    pub fn mismatch(
        left: &str,
        left_size: usize,
        right: &str,
        right_size: usize,
        dim: &'static str,
    ) -> Self {
        AttentionError::Mismatch {
            left: left.into(),
            left_size,
            right: right.into(),
            right_size,
            dim,
        }
    }

    // ANCHOR_END: error_builders
    /// Builds a [`AttentionError::Shape`] from string slices.
    ///
    /// ```
    /// use attention::AttentionError;
    /// let e = AttentionError::shape("x", &[4], "a shape (L, d_model) was expected");
    /// assert_eq!(e.to_string(), "x has shape [4] but a shape (L, d_model) was expected");
    /// ```
    // ANCHOR: error_builders
    pub fn shape(what: &str, found: &[usize], expected: &str) -> Self {
        AttentionError::Shape {
            what: what.into(),
            found: found.to_vec(),
            expected: expected.into(),
        }
    }
}
// ANCHOR_END: error_builders
