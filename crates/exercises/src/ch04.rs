//! Chapter 4, *Masking*: masks from other conventions, local attention, padding lengths.

use attention::Result;
use attention::mask::Mask;
use ndarray::{Array2, ArrayRef2, Ix2, array};

use crate::{call, mask_difference};

/// `Ok` if `got` is the mask `expected`; otherwise where they differ, why (`rule`), and the
/// two side by side.
fn same_mask(
    what: &str,
    got: &Mask,
    expected: &Array2<bool>,
    rule: &str,
) -> Result<(), String> {
    if got.shape() != expected.shape() {
        let (shape, want) = (got.shape(), expected.shape());
        return Err(format!("{what} has shape {shape:?}, expected {want:?}"));
    }
    let got = got.as_array().into_dimensionality::<Ix2>().expect("two axes, as expected");
    match mask_difference(&got, expected) {
        None => Ok(()),
        Some(difference) => Err(format!("{what}: {rule}. It {difference}")),
    }
}

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

/// Checks an answer to exercise 4.1 ([`from_blocked`]): notebook 002's `triu(k=1)` of
/// blocked positions must become [`Mask::causal`] for 1 to 5 tokens, nothing blocked must
/// leave everything visible, and an irregular `(3, 4)` pattern must be flipped entry by entry.
///
/// ```
/// use exercises::ch04::{check_from_blocked, from_blocked};
/// use attention::mask::Mask;
///
/// assert_eq!(check_from_blocked(from_blocked), Ok(()));
/// // Reading "true = blocked" as "true = may attend": the mask of the wrong polarity.
/// assert!(check_from_blocked(|blocked| Mask::from_array(blocked.to_owned())).is_err());
/// ```
pub fn check_from_blocked(
    from_blocked: impl Fn(&ArrayRef2<bool>) -> Result<Mask>,
) -> Result<(), String> {
    let mut cases: Vec<(Array2<bool>, Array2<bool>, String)> = (1..6)
        .map(|len| {
            let triu = Array2::from_shape_fn((len, len), |(i, j)| j > i);
            let causal = Array2::from_shape_fn((len, len), |(i, j)| j <= i);
            let rule = format!("a triu(k=1) of {len} × {len} blocks the future: causal");
            (triu, causal, rule)
        })
        .collect();
    let nothing = Array2::from_elem((2, 3), false);
    cases.push((nothing, Array2::from_elem((2, 3), true), "nothing is blocked".into()));
    let pattern = Array2::from_shape_fn((3, 4), |(i, j)| (i * j + i) % 3 == 0);
    cases.push((pattern.mapv(|b| !b), pattern, "every entry flips".into()));
    for (blocked, expected, rule) in cases {
        let what = format!("from_blocked({})", grid(&blocked));
        let got = call(&what, || from_blocked(&blocked))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        same_mask(&what, &got, &expected, &rule)?;
    }
    Ok(())
}

/// A boolean matrix on one line, `[[T, F], [F, T]]`.
fn grid(m: &Array2<bool>) -> String {
    let rows: Vec<String> = m
        .rows()
        .into_iter()
        .map(|r| {
            let cells: Vec<&str> = r.iter().map(|&b| if b { "T" } else { "F" }).collect();
            format!("[{}]", cells.join(", "))
        })
        .collect();
    format!("[{}]", rows.join(", "))
}

/// Checks an answer to exercise 4.1 ([`from_additive`]): 0 keeps a key; −∞ blocks it, and so
/// do its finite stand-ins −1e9 (notebook 000), −1e4 (BERT) and `f64::MIN`
/// (`torch.finfo(dtype).min`); a small bias such as −0.5 keeps its key. The additive form of
/// [`Mask::causal`] must come back as the causal mask.
///
/// ```
/// use exercises::ch04::{check_from_additive, from_additive};
/// use attention::mask::Mask;
///
/// assert_eq!(check_from_additive(from_additive), Ok(()));
/// // Only −∞ blocks: notebook 000's −1e9 would be read as "keep".
/// let only_inf = |m: &ndarray::ArrayRef2<f64>| Mask::from_array(m.mapv(|x| x.is_finite()));
/// assert!(check_from_additive(only_inf).is_err());
/// ```
pub fn check_from_additive(
    from_additive: impl Fn(&ArrayRef2<f64>) -> Result<Mask>,
) -> Result<(), String> {
    let inf = f64::NEG_INFINITY;
    let rule =
        "0 and small biases keep a key; −∞ and its stand-ins −1e9, −1e4, f64::MIN block it";
    let causal = |len: usize| Array2::from_shape_fn((len, len), |(i, j)| j <= i);
    let cases: [(Array2<f64>, Array2<bool>, &str); 5] = [
        (array![[0.0, inf], [0.0, 0.0]], causal(2), "notebook 004's 0/−∞ mask is causal"),
        (array![[0.0, -1e9], [0.0, 0.0]], causal(2), "notebook 000's −1e9 means blocked"),
        (
            array![[0.0, inf, -0.5], [-1e9, 0.0, -1e4]],
            array![[true, false, true], [false, true, false]],
            rule,
        ),
        (array![[f64::MIN, 0.0, 0.3]], array![[false, true, true]], rule),
        (
            Mask::causal(4).to_additive::<f64>().into_dimensionality().expect("2-D"),
            causal(4),
            "Mask::causal(4).to_additive() comes back as the causal mask",
        ),
    ];
    for (additive, expected, rule) in cases {
        let what = format!("from_additive({additive:?})")
            .split(", shape=")
            .next()
            .expect("some text")
            .replace('\n', "")
            + ")";
        let got = call(&what, || from_additive(&additive))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        same_mask(&what, &got, &expected, rule)?;
    }
    Ok(())
}

/// Checks an answer to exercise 4.2 ([`sliding_window`]): every entry of the mask for
/// windows of 0 to 9 tokens over sequences of 1 to 6, against the rule `i − window < j ≤ i`.
///
/// ```
/// use exercises::ch04::{check_sliding_window, sliding_window};
/// use attention::mask::Mask;
/// use ndarray::Array2;
///
/// assert_eq!(check_sliding_window(sliding_window), Ok(()));
/// // One token too many: `i − j ≤ window` lets query i see window + 1 keys.
/// let one_too_many = |len: usize, window: usize| {
///     Mask::from_array(Array2::from_shape_fn((len, len), |(i, j)| j <= i && i - j <= window))
///         .unwrap()
/// };
/// assert!(check_sliding_window(one_too_many).is_err());
/// ```
pub fn check_sliding_window(
    sliding_window: impl Fn(usize, usize) -> Mask,
) -> Result<(), String> {
    let cases = [(4, 4), (4, 9), (3, 1), (6, 3), (5, 2), (6, 5), (1, 1), (2, 0), (6, 0)];
    for (len, window) in cases {
        let what = format!("sliding_window({len}, {window})");
        let got = call(&what, || sliding_window(len, window))?;
        let expected = Array2::from_shape_fn((len, len), |(i, j)| j <= i && j + window > i);
        let seen = match window {
            0 => "no key at all".to_string(),
            _ => format!("itself and the {} tokens before it", window - 1),
        };
        let rule = format!("query i may attend to key j iff i − {window} < j ≤ i: {seen}");
        same_mask(&what, &got, &expected, &rule)?;
    }
    Ok(())
}

/// Checks an answer to exercise 4.3 ([`valid_lengths`]): the number of ids before the first
/// pad of each sentence, whatever comes after it, and the whole length without a pad.
///
/// ```
/// use exercises::ch04::{check_valid_lengths, valid_lengths};
///
/// assert_eq!(check_valid_lengths(valid_lengths), Ok(()));
/// // Counting the ids that are not the pad also counts real tokens that come after one.
/// let not_pad = |batch: &[Vec<usize>], pad: usize| {
///     batch.iter().map(|ids| ids.iter().filter(|&&id| id != pad).count()).collect()
/// };
/// assert!(check_valid_lengths(not_pad).is_err());
/// ```
pub fn check_valid_lengths(
    valid_lengths: impl Fn(&[Vec<usize>], usize) -> Vec<usize>,
) -> Result<(), String> {
    let cases = [
        (
            vec![vec![5, 3, 9, 2], vec![7, 4, 0, 0], vec![8, 0, 0, 0]],
            0,
            vec![4, 2, 1],
            "a batch",
        ),
        (vec![vec![1, 2, 3]], 0, vec![3], "no pad: the whole sentence"),
        (vec![vec![0, 0]], 0, vec![0], "nothing but padding"),
        (vec![vec![4, 1, 4]], 4, vec![0], "the first id is the pad (4 here)"),
        (vec![vec![5, 0, 7, 0]], 0, vec![1], "everything from the first pad on is padding"),
        (vec![vec![2, 9, 1, 1], vec![3, 1, 1, 1]], 1, vec![2, 1], "the pad id is 1 here"),
        (vec![], 0, vec![], "an empty batch"),
        (vec![vec![]], 0, vec![0], "an empty sentence"),
    ];
    for (batch, pad, expected, why) in cases {
        let what = format!("valid_lengths(&{batch:?}, {pad})");
        let got = call(&what, || valid_lengths(&batch, pad))?;
        if got != expected {
            return Err(format!("{what} returned {got:?}, expected {expected:?} ({why})"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;
    use attention::sdpa::sdpa;
    use attention::softmax::softmax;

    #[test]
    fn from_blocked_passes_and_classic_mistakes_fail() {
        assert_eq!(check_from_blocked(from_blocked), Ok(()));
        // The wrong polarity: "true = blocked" taken for "true = may attend".
        let unflipped = |blocked: &ArrayRef2<bool>| Mask::from_array(blocked.to_owned());
        rejects(
            check_from_blocked(unflipped),
            "[[F]]): a triu(k=1) of 1 × 1 blocks the future: causal. It stops query 0",
        );
        // Flipped and transposed: the triangle ends up on the wrong side.
        let transposed =
            |blocked: &ArrayRef2<bool>| Mask::from_array(blocked.t().mapv(|b| !b));
        rejects(
            check_from_blocked(transposed),
            "2 × 2 blocks the future: causal. It lets query 0 attend to key 1",
        );
    }

    #[test]
    fn from_additive_passes_and_classic_mistakes_fail() {
        assert_eq!(check_from_additive(from_additive), Ok(()));
        // Only −∞ blocks: −1e9 taken for "keep".
        let only_inf =
            |m: &ArrayRef2<f64>| Mask::from_array(m.mapv(|x| x != f64::NEG_INFINITY));
        rejects(
            check_from_additive(only_inf),
            "notebook 000's −1e9 means blocked. It lets query 0 attend to key 1",
        );
        // Only an exact 0 keeps: a bias taken for a mask.
        let only_zero = |m: &ArrayRef2<f64>| Mask::from_array(m.mapv(|x| x == 0.0));
        rejects(check_from_additive(only_zero), "It stops query 0 from attending to key 2");
        // The wrong polarity: "0 = keep" read as "0 = block".
        let flipped = |m: &ArrayRef2<f64>| Mask::from_array(m.mapv(|x| x.exp() == 0.0));
        rejects(check_from_additive(flipped), "It stops query 0 from attending to key 0");
    }

    #[test]
    fn minus_1e9_converted_gives_the_additive_weights() {
        // Where a key is visible, −1e9 and −∞ give the same weights, to the last bit.
        let scores = array![[0.3, 1.2], [2.0, -0.7]];
        let filled = array![[0.0, -1e9], [0.0, 0.0]];
        let x = array![[1.0, 0.0], [0.0, 1.0]];
        let additive_weights = softmax(&(&scores + &filled));
        let mut blocked = scores.clone();
        from_additive(&filled).unwrap().apply(&mut blocked).unwrap();
        assert_eq!(softmax(&blocked), additive_weights);
        let mask = from_additive(&filled).unwrap();
        assert_eq!(sdpa(&x, &x, &x, Some(&mask)).unwrap().weights[[0, 1]], 0.0);
    }

    #[test]
    fn sliding_window_passes_and_classic_mistakes_fail() {
        assert_eq!(check_sliding_window(sliding_window), Ok(()));
        assert_eq!(sliding_window(4, 4), Mask::causal(4));
        // With a window of 0 nothing is visible, and attention gives zeros, not NaN.
        let x = array![[1.0, 2.0], [3.0, 4.0]];
        let att = sdpa(&x, &x, &x, Some(&sliding_window(2, 0))).unwrap();
        assert!(att.output.iter().all(|&o| o == 0.0));

        let mask = |len: usize, rule: &dyn Fn(usize, usize) -> bool| {
            Mask::from_array(Array2::from_shape_fn((len, len), |(i, j)| rule(i, j))).unwrap()
        };
        // Off by one: window + 1 keys.
        let one_too_many = |len, window| mask(len, &|i, j| j <= i && i - j <= window);
        rejects(
            check_sliding_window(one_too_many),
            "(3, 1): query i may attend to key j iff i − 1 < j ≤ i: itself and the 0",
        );
        // A band around the diagonal, forgetting that the future is blocked.
        let band = |len, window| mask(len, &|i, j| i.abs_diff(j) < window);
        rejects(
            check_sliding_window(band),
            "before it. It lets query 0 attend to key 1, which should be blocked",
        );
        // triu without k=1: the diagonal blocked too, so a token never sees itself.
        let no_diagonal = |len, window| mask(len, &|i, j| j < i && i - j <= window);
        rejects(
            check_sliding_window(no_diagonal),
            "the 3 tokens before it. It stops query 0 from attending to key 0",
        );
        // i − window < j in unsigned arithmetic: i − window underflows for the first tokens
        // (a panic in a debug build, a huge number in a release build).
        let underflows = |len, window| mask(len, &|i, j| j <= i && i - window < j);
        rejects(check_sliding_window(underflows), "sliding_window(4, 4)");
    }

    #[test]
    fn valid_lengths_passes_and_classic_mistakes_fail() {
        assert_eq!(check_valid_lengths(valid_lengths), Ok(()));
        let lengths = valid_lengths(&[vec![2, 9, 1, 1], vec![3, 1, 1, 1]], 1);
        assert!(Mask::padding(&lengths, 4, 4).is_ok());

        fn each(batch: &[Vec<usize>], f: impl Fn(&Vec<usize>) -> usize) -> Vec<usize> {
            batch.iter().map(f).collect()
        }
        let not_pad =
            |b: &[Vec<usize>], pad| each(b, |ids| ids.iter().filter(|&&i| i != pad).count());
        rejects(check_valid_lengths(not_pad), "valid_lengths(&[[4, 1, 4]], 4) returned [1]");
        // Stripping trailing pads: a pad in the middle is taken for a token.
        let strip = |b: &[Vec<usize>], pad| {
            each(b, |ids| ids.iter().rposition(|&i| i != pad).map_or(0, |last| last + 1))
        };
        rejects(check_valid_lengths(strip), "valid_lengths(&[[4, 1, 4]], 4) returned [2]");
        // No pad found taken for "length 0".
        let none_is_0 = |b: &[Vec<usize>], pad| {
            each(b, |ids| ids.iter().position(|&i| i == pad).unwrap_or(0))
        };
        rejects(check_valid_lengths(none_is_0), "returned [0, 2, 1]");
    }
}
