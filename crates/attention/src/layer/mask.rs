//! Chapter *Masking*: which keys each query may look at.
//!
//! A [`Mask`] is a boolean array of shape `(L_q, L_k)`, or with leading batch (and head) axes,
//! where `true` means **may attend**, the convention of PyTorch's
//! `scaled_dot_product_attention`. Before softmax, every blocked score becomes −∞, so its
//! weight becomes exactly 0. The seed notebooks also use three other spellings of the same
//! idea (a `tril` of ones, a `triu(k=1)` of blocked positions, an additive 0/−∞ matrix);
//! [`Mask::to_additive`] gives the last one.
//!
//! A mask broadcasts against the scores like a NumPy array: an `(L_q, L_k)` mask applies to
//! every matrix of a `(batch, L_q, L_k)` stack, a `(batch, 1, L_q, L_k)` mask to every head.
//!
//! Anchors (below the doc comments): `mask`, `causal_rect`, `padding`, `apply_mask`,
//! `to_additive` (chapter *Masking*), `sliding_window`, `as_array` (chapter *Generating one
//! token at a time*) and `for_heads` (chapter *Gradients*).

use ndarray::{Array, Array2, Array3, ArrayD, ArrayViewD, Axis, Dimension, IxDyn, Zip};

use crate::error::{AttentionError, Result};
use crate::float::Float;

/// A boolean mask, `true` = may attend, of shape `(..., L_q, L_k)`.
///
/// ```
/// use attention::mask::Mask;
///
/// let causal = Mask::causal(3);
/// assert!(causal.allows(&[2, 0]));   // token 2 sees token 0
/// assert!(!causal.allows(&[0, 2]));  // token 0 does not see token 2
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
// ANCHOR: mask
pub struct Mask {
    allowed: ArrayD<bool>,
}

impl Mask {
    // ANCHOR_END: mask
    /// A mask from any boolean array with at least two axes, `(..., L_q, L_k)`.
    ///
    /// ```
    /// use attention::mask::Mask;
    /// use ndarray::{array, Array1};
    ///
    /// let m = Mask::from_array(array![[true, false], [false, true]]).unwrap();
    /// assert!(m.allows(&[1, 1]));
    /// assert!(Mask::from_array(Array1::from_elem(3, true)).is_err());
    /// ```
    // ANCHOR: mask
    pub fn from_array<D: Dimension>(allowed: Array<bool, D>) -> Result<Mask> {
        if allowed.ndim() < 2 {
            return Err(AttentionError::shape(
                "mask",
                allowed.shape(),
                "a shape (..., L_q, L_k) was expected",
            ));
        }
        Ok(Mask { allowed: allowed.into_dyn() })
    }

    // ANCHOR_END: mask
    /// The causal mask for a sequence of `len` tokens: query `i` may attend to key `j` iff
    /// `j ≤ i` (a lower triangle, PyTorch's `is_causal=True`).
    ///
    /// ```
    /// use attention::mask::Mask;
    /// use ndarray::array;
    ///
    /// assert_eq!(
    ///     Mask::causal(3).as_array(),
    ///     array![[true, false, false], [true, true, false], [true, true, true]].into_dyn()
    /// );
    /// ```
    // ANCHOR: mask
    pub fn causal(len: usize) -> Mask {
        Mask::causal_rect(len, len)
    }

    // ANCHOR_END: mask
    /// The causal mask for `L_q` queries and `L_k` keys: key `j` visible to query `i` iff
    /// `j ≤ i`, aligned at the top left like PyTorch's `is_causal=True`.
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// let m = Mask::causal_rect(2, 3);
    /// assert_eq!(m.shape(), &[2, 3]);
    /// assert!(m.allows(&[1, 1]) && !m.allows(&[1, 2]));
    /// ```
    // ANCHOR: mask
    // ANCHOR: causal_rect
    pub fn causal_rect(l_q: usize, l_k: usize) -> Mask {
        let allowed = Array2::from_shape_fn((l_q, l_k), |(i, j)| j <= i);
        Mask { allowed: allowed.into_dyn() }
    }
    // ANCHOR_END: causal_rect
}
// ANCHOR_END: mask

impl Mask {
    /// The causal sliding-window mask for a sequence of `len` tokens: query `i` may attend to
    /// key `j` iff `0 ≤ i − j < window`, the `window` most recent keys counting its own.
    ///
    /// This is the convention of Hugging Face's sliding-window masks and of FlashAttention's
    /// `window_size = (window − 1, 0)`. A window of `len` or more is the causal mask; a window
    /// of 0 would leave every query without a key, so it is an error.
    ///
    /// ```
    /// use attention::{mask::Mask, AttentionError};
    /// use ndarray::array;
    ///
    /// let m = Mask::sliding_window(4, 2).unwrap();
    /// assert_eq!(
    ///     m.as_array(),
    ///     array![
    ///         [true, false, false, false],
    ///         [true, true, false, false],
    ///         [false, true, true, false],
    ///         [false, false, true, true],
    ///     ]
    ///     .into_dyn()
    /// );
    /// assert_eq!(Mask::sliding_window(4, 4).unwrap(), Mask::causal(4));
    /// assert_eq!(Mask::sliding_window(4, 0), Err(AttentionError::ZeroWindow));
    /// ```
    // ANCHOR: sliding_window
    pub fn sliding_window(len: usize, window: usize) -> Result<Mask> {
        if window == 0 {
            return Err(AttentionError::ZeroWindow);
        }
        // j ≤ i (causal) and i − j < window (recent enough)
        let allowed = Array2::from_shape_fn((len, len), |(i, j)| j <= i && i - j < window);
        Ok(Mask { allowed: allowed.into_dyn() })
    }
    // ANCHOR_END: sliding_window
}

impl Mask {
    /// Padding masks for a batch of sequences padded to `L_k` keys: item `b` has
    /// `valid_lengths[b]` real tokens, and no query may attend to the padding after them.
    /// Shape `(batch, L_q, L_k)`.
    ///
    /// A valid length of 0 blocks every key: those rows get all-zero weights.
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// let m = Mask::padding(&[3, 1], 3, 3).unwrap();
    /// assert_eq!(m.shape(), &[2, 3, 3]);
    /// assert!(m.allows(&[0, 0, 2]));   // item 0 has 3 real tokens
    /// assert!(!m.allows(&[1, 0, 1]));  // item 1 has only 1
    /// assert!(Mask::padding(&[4], 3, 3).is_err());
    /// ```
    // ANCHOR: padding
    pub fn padding(valid_lengths: &[usize], l_q: usize, l_k: usize) -> Result<Mask> {
        for (item, &valid) in valid_lengths.iter().enumerate() {
            if valid > l_k {
                return Err(AttentionError::ValidLength { item, valid, l_k });
            }
        }
        let allowed = Array3::from_shape_fn((valid_lengths.len(), l_q, l_k), |(b, _i, j)| {
            j < valid_lengths[b]
        });
        Ok(Mask { allowed: allowed.into_dyn() })
    }
    // ANCHOR_END: padding

    /// The mask to apply to multi-head weights `(batch, heads, L_q, L_k)`: a per-item mask
    /// `(batch, L_q, L_k)` (a padding mask, say) gets a heads axis, `(batch, 1, L_q, L_k)`,
    /// so that it reaches every head of its item; any other shape is returned as it is.
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// let padding = Mask::padding(&[3, 2], 3, 3).unwrap(); // (batch, L, L) = (2, 3, 3)
    /// assert_eq!(padding.for_heads().shape(), &[2, 1, 3, 3]);
    /// assert_eq!(Mask::causal(3).for_heads().shape(), &[3, 3]); // broadcasts already
    /// ```
    // ANCHOR: for_heads
    pub fn for_heads(&self) -> Mask {
        match self.allowed.ndim() {
            3 => Mask { allowed: self.allowed.view().insert_axis(Axis(1)).to_owned() },
            _ => self.clone(),
        }
    }
    // ANCHOR_END: for_heads

    /// Both masks at once: a key is visible only if both allow it (e.g. causal and padding).
    /// The shapes broadcast against each other.
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// let both = Mask::causal(3).and(&Mask::padding(&[2], 3, 3).unwrap()).unwrap();
    /// assert_eq!(both.shape(), &[1, 3, 3]);
    /// assert!(both.allows(&[0, 2, 1]) && !both.allows(&[0, 2, 2]));
    /// assert_eq!(
    ///     Mask::causal(3).and(&Mask::causal(4)).unwrap_err().to_string(),
    ///     "mask has shape [4, 4] but a shape that broadcasts with the other mask's [3, 3] \
    ///      was expected"
    /// );
    /// ```
    pub fn and(&self, other: &Mask) -> Result<Mask> {
        let shape = broadcast_shape(self.shape(), other.shape()).ok_or_else(|| {
            let expected = format!(
                "a shape that broadcasts with the other mask's {:?} was expected",
                self.shape()
            );
            AttentionError::shape("mask", other.shape(), &expected)
        })?;
        let a = self.allowed.broadcast(IxDyn(&shape)).expect("broadcastable by construction");
        let b = other.allowed.broadcast(IxDyn(&shape)).expect("broadcastable by construction");
        let allowed = Zip::from(&a).and(&b).map_collect(|&x, &y| x && y);
        Ok(Mask { allowed })
    }

    /// The shape `(..., L_q, L_k)`.
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// assert_eq!(Mask::causal(4).shape(), &[4, 4]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        self.allowed.shape()
    }

    /// Whether the entry at `index` (one index per axis) may attend; `false` outside the mask.
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// assert!(Mask::causal(2).allows(&[1, 0]));
    /// assert!(!Mask::causal(2).allows(&[5, 0]));
    /// ```
    pub fn allows(&self, index: &[usize]) -> bool {
        self.allowed.get(IxDyn(index)).copied().unwrap_or(false)
    }

    /// The boolean array itself.
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// assert_eq!(Mask::causal(3).as_array().iter().filter(|&&ok| ok).count(), 6);
    /// ```
    // ANCHOR: as_array
    pub fn as_array(&self) -> ArrayViewD<'_, bool> {
        self.allowed.view()
    }
    // ANCHOR_END: as_array

    /// The additive form: 0 where attending is allowed, −∞ where it is blocked. Adding it to
    /// the scores has the same effect as [`Mask::apply`].
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// let m = Mask::causal(2).to_additive::<f64>();
    /// assert_eq!(m.iter().copied().collect::<Vec<_>>(), [0.0, f64::NEG_INFINITY, 0.0, 0.0]);
    /// ```
    // ANCHOR: to_additive
    pub fn to_additive<A: Float>(&self) -> ArrayD<A> {
        self.allowed.mapv(|ok| if ok { A::zero() } else { A::neg_infinity() })
    }
    // ANCHOR_END: to_additive

    /// The mask broadcast to the scores' shape `(..., L_q, L_k)`, as PyTorch broadcasts
    /// `attn_mask`; an error naming both shapes if it does not broadcast. For code that reads
    /// the mask its own way (the tiled path, chapter 14's GPU kernels).
    ///
    /// ```
    /// use attention::mask::Mask;
    ///
    /// let causal = Mask::causal(3);
    /// assert_eq!(causal.broadcast_to(&[2, 8, 3, 3]).unwrap().shape(), &[2, 8, 3, 3]);
    /// let err = causal.broadcast_to(&[3, 4]).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "mask has shape [3, 3], which does not broadcast to the scores' shape [3, 4]"
    /// );
    /// ```
    pub fn broadcast_to(&self, scores: &[usize]) -> Result<ArrayViewD<'_, bool>> {
        self.allowed.broadcast(IxDyn(scores)).ok_or_else(|| AttentionError::MaskShape {
            mask: self.allowed.shape().to_vec(),
            scores: scores.to_vec(),
        })
    }

    /// Sets every blocked score to −∞, in place. The mask must broadcast to the scores' shape
    /// `(..., L_q, L_k)`.
    ///
    /// ```
    /// use attention::mask::Mask;
    /// use ndarray::array;
    ///
    /// let mut scores = array![[1.0, 2.0], [3.0, 4.0]];
    /// Mask::causal(2).apply(&mut scores).unwrap();
    /// assert_eq!(scores, array![[1.0, f64::NEG_INFINITY], [3.0, 4.0]]);
    /// assert!(Mask::causal(3).apply(&mut scores).is_err());
    /// ```
    // ANCHOR: apply_mask
    pub fn apply<A: Float, D: Dimension>(&self, scores: &mut Array<A, D>) -> Result<()> {
        let allowed =
            self.allowed.broadcast(scores.raw_dim().into_dyn()).ok_or_else(|| {
                AttentionError::MaskShape {
                    mask: self.allowed.shape().to_vec(),
                    scores: scores.shape().to_vec(),
                }
            })?;
        Zip::from(scores.view_mut().into_dyn()).and(&allowed).for_each(|score, &ok| {
            if !ok {
                *score = A::neg_infinity();
            }
        });
        Ok(())
    }
    // ANCHOR_END: apply_mask
}

/// The NumPy broadcast of two shapes, if they are compatible.
fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let at = |s: &[usize], i: usize| if i + s.len() >= n { s[i + s.len() - n] } else { 1 };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window_mask_lets_each_query_see_its_last_w_keys() {
        for len in 0..9 {
            for window in 1..12 {
                let m = Mask::sliding_window(len, window).unwrap();
                assert_eq!(m.shape(), &[len, len]);
                for i in 0..len {
                    let seen: Vec<usize> = (0..len).filter(|&j| m.allows(&[i, j])).collect();
                    let first = (i + 1).saturating_sub(window); // W keys counting its own
                    assert_eq!(
                        seen,
                        (first..=i).collect::<Vec<_>>(),
                        "L = {len}, W = {window}"
                    );
                }
                if window >= len {
                    assert_eq!(m, Mask::causal(len));
                }
            }
            assert_eq!(Mask::sliding_window(len, 0), Err(AttentionError::ZeroWindow));
        }
        let off_by_one = Mask::sliding_window(5, 2).unwrap(); // i − j = W is blocked
        assert!(off_by_one.allows(&[4, 3]) && !off_by_one.allows(&[4, 2]));
    }
}
