//! Chapter 4, *Masking*: masks from other conventions, local attention, padding lengths.

use attention::Result;
use attention::mask::Mask;
use ndarray::{Array2, ArrayRef2};

/// Converts a mask where `true` means **blocked** (Burn's convention, or notebook 002's
/// `triu(k=1)` of ones read as booleans) into a [`Mask`], where `true` means may attend.
///
/// ```
/// use exercises::ch04::from_blocked;
/// use attention::mask::Mask;
/// use ndarray::array;
///
/// let triu = array![[false, true], [false, false]]; // the future is blocked
/// assert_eq!(from_blocked(&triu).unwrap(), Mask::causal(2));
/// ```
// ANCHOR: from_blocked
pub fn from_blocked(blocked: &ArrayRef2<bool>) -> Result<Mask> {
    Mask::from_array(blocked.mapv(|is_blocked| !is_blocked))
}
// ANCHOR_END: from_blocked

/// Converts an additive mask (0 = keep, −∞ = block, as in notebook 004) into a [`Mask`].
///
/// An entry blocks its key when `e^m` is 0: then the key drops out of softmax's numerator
/// whatever its score. That covers −∞ and also the large finite stand-ins code writes for it
/// (notebook 000's −1e9, BERT's −10000, `torch.finfo(dtype).min`): in every row with a visible
/// key they give weight 0, so they mean "blocked" and must become `false`. A small entry such
/// as −0.5 is a bias, not a mask; it keeps its key (and the bias itself is lost).
///
/// ```
/// use exercises::ch04::from_additive;
/// use attention::mask::Mask;
/// use ndarray::array;
///
/// let additive = Mask::causal(3).to_additive::<f64>().into_dimensionality().unwrap();
/// assert_eq!(from_additive(&additive).unwrap(), Mask::causal(3));
/// let filled = array![[0.0, -1e9], [0.0, 0.0]]; // notebook 000's spelling of the same mask
/// assert_eq!(from_additive(&filled).unwrap(), Mask::causal(2));
/// ```
// ANCHOR: from_additive
pub fn from_additive(additive: &ArrayRef2<f64>) -> Result<Mask> {
    Mask::from_array(additive.mapv(|m| m.exp() > 0.0))
}
// ANCHOR_END: from_additive

/// A causal mask that also forgets the distant past: query `i` may attend to key `j` iff
/// `i − window < j ≤ i`, i.e. to itself and the `window − 1` tokens before it.
///
/// ```
/// use exercises::ch04::sliding_window;
///
/// let m = sliding_window(5, 2);
/// assert!(m.allows(&[3, 2]) && m.allows(&[3, 3]));
/// assert!(!m.allows(&[3, 1]) && !m.allows(&[3, 4]));
/// ```
// ANCHOR: sliding_window
pub fn sliding_window(len: usize, window: usize) -> Mask {
    let allowed = Array2::from_shape_fn((len, len), |(i, j)| j <= i && i - j < window);
    Mask::from_array(allowed).expect("a 2-D array is a valid mask")
}
// ANCHOR_END: sliding_window

/// The valid length of each padded sentence of a batch: the number of token ids before the
/// first `pad` id (or the whole length if there is none).
///
/// ```
/// use exercises::ch04::valid_lengths;
///
/// let pad = 0;
/// let batch = [vec![5, 3, 9, 2], vec![7, 4, 0, 0], vec![8, 0, 0, 0]];
/// assert_eq!(valid_lengths(&batch, pad), [4, 2, 1]);
/// ```
// ANCHOR: valid_lengths
pub fn valid_lengths(batch: &[Vec<usize>], pad: usize) -> Vec<usize> {
    batch.iter().map(|ids| ids.iter().position(|&id| id == pad).unwrap_or(ids.len())).collect()
}
// ANCHOR_END: valid_lengths

#[cfg(test)]
mod tests {
    use super::*;
    use attention::sdpa::sdpa;
    use attention::softmax::softmax;
    use ndarray::array;

    #[test]
    fn blocked_upper_triangle_is_the_causal_mask() {
        for len in 1..6 {
            let triu = Array2::from_shape_fn((len, len), |(i, j)| j > i);
            assert_eq!(from_blocked(&triu).unwrap(), Mask::causal(len));
        }
        // Nothing blocked: everything visible.
        let none = from_blocked(&Array2::from_elem((2, 3), false)).unwrap();
        assert!(none.as_array().iter().all(|&ok| ok));
    }

    #[test]
    fn additive_masks_round_trip() {
        let m = array![[0.0, f64::NEG_INFINITY, -0.5], [-1e9, 0.0, -1e4]];
        let mask = from_additive(&m).unwrap();
        assert!(mask.allows(&[0, 0]) && !mask.allows(&[0, 1]));
        assert!(mask.allows(&[0, 2]), "-0.5 is a bias: the key stays visible");
        assert!(
            !mask.allows(&[1, 0]) && !mask.allows(&[1, 2]),
            "-1e9 and -1e4 stand in for -inf"
        );
        assert!(mask.allows(&[1, 1]));
        // Converted, -1e9 gives the additive mask's weights wherever a key is visible.
        let scores = array![[0.3, 1.2], [2.0, -0.7]];
        let filled = array![[0.0, -1e9], [0.0, 0.0]];
        let x = array![[1.0, 0.0], [0.0, 1.0]];
        let additive_weights = softmax(&(&scores + &filled));
        let mut blocked = scores.clone();
        from_additive(&filled).unwrap().apply(&mut blocked).unwrap();
        assert_eq!(softmax(&blocked), additive_weights);
        assert!(
            sdpa(&x, &x, &x, Some(&from_additive(&filled).unwrap())).unwrap().weights[[0, 1]]
                == 0.0
        );
        let causal = Mask::causal(4).to_additive::<f64>().into_dimensionality().unwrap();
        assert_eq!(from_additive(&causal).unwrap(), Mask::causal(4));
    }

    #[test]
    fn sliding_window_limits() {
        assert_eq!(sliding_window(4, 4), Mask::causal(4));
        assert_eq!(sliding_window(4, 9), Mask::causal(4));
        let diagonal = sliding_window(3, 1);
        assert_eq!(diagonal.as_array().iter().filter(|&&ok| ok).count(), 3);
        assert!(diagonal.allows(&[2, 2]) && !diagonal.allows(&[2, 1]));
        // Row i sees min(i + 1, window) keys.
        let m = sliding_window(6, 3);
        for i in 0..6 {
            let seen = (0..6).filter(|&j| m.allows(&[i, j])).count();
            assert_eq!(seen, (i + 1).min(3));
        }
        // With a window of 0 nothing is visible, and attention gives zeros, not NaN.
        let x = array![[1.0, 2.0], [3.0, 4.0]];
        let att = sdpa(&x, &x, &x, Some(&sliding_window(2, 0))).unwrap();
        assert!(att.output.iter().all(|&o| o == 0.0));
    }

    #[test]
    fn valid_lengths_stop_at_the_first_pad() {
        assert_eq!(valid_lengths(&[vec![1, 2, 3]], 0), [3]);
        assert_eq!(valid_lengths(&[vec![0, 0]], 0), [0]);
        assert_eq!(valid_lengths(&[vec![4, 1, 4]], 4), [0]);
        assert_eq!(valid_lengths(&[], 0), Vec::<usize>::new());
        let lengths = valid_lengths(&[vec![2, 9, 1, 1], vec![3, 1, 1, 1]], 1);
        assert_eq!(lengths, [2, 1]);
        assert!(Mask::padding(&lengths, 4, 4).is_ok());
    }
}
