//! Chapter 1, *Input embeddings*.

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::sdpa::{plain_self_attention, single_query};
use ndarray::{Array1, Array2, arr2, array};

use crate::{call, close};

/// Exercise 1.1: token ids for a sentence, with every word the vocabulary lacks mapped to the
/// reserved id `unk` (as real tokenizers do with their `<unk>` token).
///
/// ```
/// use attention::embeddings::Vocabulary;
/// use exercises::ch01::encode_or_unk;
///
/// let vocab = Vocabulary::from_sentence("<unk> the cat sat");
/// assert_eq!(encode_or_unk(&vocab, "the dog sat", 0), vec![1, 0, 3]);
/// ```
// ANCHOR: encode_or_unk
pub fn encode_or_unk(vocab: &Vocabulary, sentence: &str, unk: usize) -> Vec<usize> {
    sentence.split_whitespace().map(|word| vocab.id(word).unwrap_or(unk)).collect()
}
// ANCHOR_END: encode_or_unk

/// Exercise 1.2: the weighted average `Σᵢ wᵢ·memory[i]` of the rows of `memory: (n, d)`, or
/// `None` unless the weights are a probability distribution over the rows: one weight per row,
/// none negative, summing to 1 (within `1e-9`).
///
/// ```
/// use exercises::ch01::weighted_average;
/// use ndarray::array;
///
/// let memory = array![[1.0, 0.0], [0.0, 1.0]];
/// assert_eq!(weighted_average(&memory, &[0.25, 0.75]), Some(array![0.25, 0.75]));
/// assert_eq!(weighted_average(&memory, &[0.5, 0.6]), None);
/// ```
// ANCHOR: weighted_average
pub fn weighted_average(memory: &Array2<f64>, weights: &[f64]) -> Option<Array1<f64>> {
    let is_distribution = weights.len() == memory.nrows()
        && weights.iter().all(|&w| w >= 0.0)
        && (weights.iter().sum::<f64>() - 1.0).abs() <= 1e-9;
    if !is_distribution {
        return None;
    }
    let mut average = Array1::zeros(memory.ncols());
    for (row, &w) in memory.rows().into_iter().zip(weights) {
        average.scaled_add(w, &row);
    }
    Some(average)
}
// ANCHOR_END: weighted_average

/// Exercise 1.3: two tokens `X: (2, 2)` for which token 0, attending with
/// `softmax(X·Xᵀ/√2)`, gives more weight to token 1 than to itself.
///
/// A dot product `x₀·x₁` can exceed `x₀·x₀` when `x₁` points roughly the same way as `x₀`
/// and is longer: `x₀·x₁ = |x₀|·|x₁|·cos θ`, against `x₀·x₀ = |x₀|²`.
///
/// ```
/// use attention::sdpa::plain_self_attention;
/// use exercises::ch01::outshone;
///
/// let w = plain_self_attention(&outshone()).unwrap().weights;
/// assert!(w[[0, 1]] > w[[0, 0]]);
/// ```
// ANCHOR: outshone
pub fn outshone() -> Array2<f64> {
    ndarray::array![
        [1.0, 0.0], // x₀·x₀ = 1
        [2.0, 1.0], // x₀·x₁ = 2: longer, and close enough in direction
    ]
}
// ANCHOR_END: outshone

/// Checks an answer to exercise 1.1 ([`encode_or_unk`]): every known word gets its id, every
/// unknown word the `unk` it was given (none is dropped), and case matters.
///
/// ```
/// use exercises::ch01::{check_encode_or_unk, encode_or_unk};
///
/// assert_eq!(check_encode_or_unk(encode_or_unk), Ok(()));
/// // Skipping the words the vocabulary lacks loses their positions.
/// let drops = |vocab: &attention::embeddings::Vocabulary, sentence: &str, _unk: usize| {
///     sentence.split_whitespace().filter_map(|word| vocab.id(word)).collect::<Vec<_>>()
/// };
/// assert!(check_encode_or_unk(drops).is_err());
/// ```
pub fn check_encode_or_unk(
    encode_or_unk: impl Fn(&Vocabulary, &str, usize) -> Vec<usize>,
) -> Result<(), String> {
    let vocab = Vocabulary::from_sentence("<unk> the cat sat on mat");
    let (nb000, _) = EmbeddingTable::the_cat_sat();
    let nb000_ids = nb000.encode("The cat sat").map_err(|e| e.to_string())?;
    let cases: [(&Vocabulary, &str, usize, Vec<usize>, &str); 6] = [
        (&vocab, "the cat sat on the mat", 0, vec![1, 2, 3, 4, 1, 5], "every word is known"),
        (
            &vocab,
            "a dog ran",
            0,
            vec![0, 0, 0],
            "each unknown word becomes unk; none is dropped",
        ),
        (&vocab, "The cat", 7, vec![7, 2], "case matters, and unk is the id given, here 7"),
        (&vocab, "  ", 0, vec![], "spaces alone hold no word"),
        (&vocab, "the\tcat\n  sat", 0, vec![1, 2, 3], "tabs, newlines and runs of spaces"),
        (&nb000, "The cat sat", 99, nb000_ids, "notebook 000's vocabulary: every word known"),
    ];
    for (vocab, sentence, unk, expected, why) in cases {
        let what = format!("encode_or_unk(vocab, {sentence:?}, {unk})");
        let got = call(&what, || encode_or_unk(vocab, sentence, unk))?;
        if got != expected {
            return Err(format!(
                "{what} returned {got:?}, expected {expected:?} ({why}); the vocabulary is \
                 {:?}",
                vocab.words()
            ));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 1.2 ([`weighted_average`]): it must agree with what
/// `single_query` outputs for notebook 003, and return `None` for weights that are not a
/// distribution over the rows (too few or too many, a negative one, a sum that is not 1 within
/// `1e-9`), but `Some` for a sum within `1e-9` of 1.
///
/// ```
/// use exercises::ch01::{check_weighted_average, weighted_average};
/// use ndarray::{Array1, Array2};
///
/// assert_eq!(check_weighted_average(weighted_average), Ok(()));
/// // Rescaling weights that do not sum to 1, instead of refusing them:
/// let rescales = |memory: &Array2<f64>, weights: &[f64]| {
///     let w = Array1::from(weights.to_vec());
///     Some(w.dot(memory) / w.sum())
/// };
/// assert!(check_weighted_average(rescales).is_err());
/// ```
pub fn check_weighted_average(
    weighted_average: impl Fn(&Array2<f64>, &[f64]) -> Option<Array1<f64>>,
) -> Result<(), String> {
    let x = arr2(&attention::notebooks::nb003::X);
    let att = single_query(&x.row(0), &x, &x).map_err(|e| e.to_string())?;
    let weights = att.weights.to_vec();
    let what = "weighted_average(X, weights) for notebook 003's first query";
    match call(what, || weighted_average(&x, &weights))? {
        None => return Err(format!("{what} returned None for the weights {weights:?}")),
        Some(got) => close(what, &got, &att.output, 1e-12)?,
    }

    let m = array![[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]];
    let third = 1.0 / 3.0;
    let cases: [(Vec<f64>, bool, &str); 9] = [
        (vec![1.0, 0.0, 0.0], true, "all the weight on row 0"),
        (vec![0.0, 0.0, 1.0], true, "all the weight on row 2"),
        (vec![third; 3], true, "equal weights: the mean row"),
        (vec![0.3, 0.3, 0.3], false, "the sum is 0.9"),
        (vec![0.5, 0.5], false, "two weights for three rows"),
        (vec![0.25, 0.25, 0.5, 0.0], false, "four weights for three rows"),
        (vec![1.5, -0.5, 0.0], false, "the sum is 1, but a weight is negative"),
        (vec![0.5, 0.5 + 5e-10, 0.0], true, "the sum is 1 + 5e-10, within 1e-9 of 1"),
        (vec![0.5, 0.5 + 2e-9, 0.0], false, "the sum is 1 + 2e-9, more than 1e-9 from 1"),
    ];
    for (w, is_distribution, why) in cases {
        let what = format!("weighted_average(m, {w:?}) with m = [[1, 2], [3, 4], [5, 6]]");
        let got = call(&what, || weighted_average(&m, &w))?;
        match got {
            None if !is_distribution => {}
            Some(got) if is_distribution => {
                let mut expected = Array1::zeros(2);
                for (row, &w) in m.rows().into_iter().zip(&w) {
                    expected.scaled_add(w, &row);
                }
                // One-hot weights pick a row exactly; other sums round.
                let one_hot = w.iter().all(|&w| w == 0.0 || w == 1.0);
                close(&what, &got, &expected, if one_hot { 0.0 } else { 1e-12 })?;
            }
            got => {
                let got = got.map(|average| average.to_vec());
                let expected = if is_distribution { "Some(...)" } else { "None" };
                return Err(format!("{what} returned {got:?}, expected {expected} ({why})"));
            }
        }
    }
    Ok(())
}

/// Checks an answer to exercise 1.3 ([`outshone`]): two tokens of width 2 (finite numbers)
/// for which token 0, attending with `softmax(X·Xᵀ/√2)`, gives token 1 more weight than
/// itself.
///
/// ```
/// use exercises::ch01::{check_outshone, outshone};
/// use ndarray::array;
///
/// assert_eq!(check_outshone(outshone), Ok(()));
/// // Two different tokens are not enough: orthogonal ones leave the diagonal ahead.
/// assert!(check_outshone(|| array![[1.0, 0.0], [0.0, 1.0]]).is_err());
/// ```
pub fn check_outshone(outshone: impl Fn() -> Array2<f64>) -> Result<(), String> {
    let x = call("outshone()", outshone)?;
    if x.dim() != (2, 2) {
        return Err(format!(
            "outshone() has shape {:?}, expected two tokens of width 2",
            x.dim()
        ));
    }
    if !x.iter().all(|v| v.is_finite()) {
        return Err(format!("outshone() must hold finite numbers:\n{x}"));
    }
    let w = plain_self_attention(&x).map_err(|e| e.to_string())?.weights;
    if w[[0, 1]] > w[[0, 0]] {
        return Ok(());
    }
    let (self_dot, other_dot) = (x.row(0).dot(&x.row(0)), x.row(0).dot(&x.row(1)));
    Err(format!(
        "with X =\n{x}\ntoken 0 gives itself weight {:.4} and token 1 weight {:.4}: token 1 \
         must get more. x₀·x₀ = {self_dot} and x₀·x₁ = {other_dot}; x₀·x₁ has to be the \
         larger.",
        w[[0, 0]],
        w[[0, 1]]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn encode_or_unk_passes_and_classic_mistakes_fail() {
        assert_eq!(check_encode_or_unk(encode_or_unk), Ok(()));
        fn drops_unknown_words(vocab: &Vocabulary, sentence: &str, _unk: usize) -> Vec<usize> {
            sentence.split_whitespace().filter_map(|word| vocab.id(word)).collect()
        }
        fn unk_is_always_0(vocab: &Vocabulary, sentence: &str, _unk: usize) -> Vec<usize> {
            sentence.split_whitespace().map(|word| vocab.id(word).unwrap_or(0)).collect()
        }
        fn lowercases(vocab: &Vocabulary, sentence: &str, unk: usize) -> Vec<usize> {
            let id = |word: &str| vocab.id(&word.to_lowercase()).unwrap_or(unk);
            sentence.split_whitespace().map(id).collect()
        }
        fn splits_on_each_space(vocab: &Vocabulary, sentence: &str, unk: usize) -> Vec<usize> {
            sentence.split(' ').map(|word| vocab.id(word).unwrap_or(unk)).collect()
        }
        rejects(check_encode_or_unk(drops_unknown_words), "\"a dog ran\", 0) returned []");
        rejects(check_encode_or_unk(unk_is_always_0), "\"The cat\", 7) returned [0, 2]");
        rejects(check_encode_or_unk(lowercases), "\"The cat\", 7) returned [1, 2]");
        rejects(check_encode_or_unk(splits_on_each_space), "\"  \", 0) returned [0, 0, 0]");
    }

    #[test]
    fn weighted_average_passes_and_classic_mistakes_fail() {
        assert_eq!(check_weighted_average(weighted_average), Ok(()));
        // Another correct answer: the weights as a row vector times the memory.
        let product = |memory: &Array2<f64>, weights: &[f64]| {
            let ok = weights.len() == memory.nrows()
                && weights.iter().all(|&w| w >= 0.0)
                && (weights.iter().sum::<f64>() - 1.0).abs() <= 1e-9;
            ok.then(|| Array1::from(weights.to_vec()).dot(memory))
        };
        assert_eq!(check_weighted_average(product), Ok(()));
        let average = |memory: &Array2<f64>, weights: &[f64]| {
            let mut sum = Array1::zeros(memory.ncols());
            for (row, &w) in memory.rows().into_iter().zip(weights) {
                sum.scaled_add(w, &row);
            }
            sum
        };
        let sums_to_1 = |weights: &[f64]| (weights.iter().sum::<f64>() - 1.0).abs() <= 1e-9;
        // `zip` stops at the shorter side: without a length check, two weights pass.
        let no_length_check = |memory: &Array2<f64>, weights: &[f64]| {
            (weights.iter().all(|&w| w >= 0.0) && sums_to_1(weights))
                .then(|| average(memory, weights))
        };
        let negative_allowed = |memory: &Array2<f64>, weights: &[f64]| {
            (weights.len() == memory.nrows() && sums_to_1(weights))
                .then(|| average(memory, weights))
        };
        let exact_sum = |memory: &Array2<f64>, weights: &[f64]| {
            let ok = weights.len() == memory.nrows()
                && weights.iter().all(|&w| w >= 0.0)
                && weights.iter().sum::<f64>() == 1.0;
            ok.then(|| average(memory, weights))
        };
        let rescales = |memory: &Array2<f64>, weights: &[f64]| {
            let total: f64 = weights.iter().sum();
            Some(average(memory, weights) / total)
        };
        rejects(
            check_weighted_average(no_length_check),
            "[0.5, 0.5]) with m = [[1, 2], [3, 4], [5, 6]] returned Some",
        );
        rejects(
            check_weighted_average(negative_allowed),
            "[1.5, -0.5, 0.0]) with m = [[1, 2], [3, 4], [5, 6]] returned Some",
        );
        // Softmax weights rarely sum to exactly 1: notebook 003's do not.
        rejects(check_weighted_average(exact_sum), "first query returned None");
        rejects(
            check_weighted_average(rescales),
            "[0.3, 0.3, 0.3]) with m = [[1, 2], [3, 4], [5, 6]] returned Some",
        );
    }

    #[test]
    fn weighted_average_cases_are_what_they_say() {
        // The sums the check relies on: 1/3 three times is 1 to within 1e-9, and so is
        // 0.5 + (0.5 + 5e-10), but not exactly; 0.5 + (0.5 + 2e-9) is not.
        let third: f64 = 1.0 / 3.0;
        assert!((third + third + third - 1.0).abs() <= 1e-9);
        let near: f64 = [0.5, 0.5 + 5e-10, 0.0].iter().sum();
        assert!(near != 1.0 && (near - 1.0).abs() <= 1e-9);
        let far: f64 = [0.5, 0.5 + 2e-9, 0.0].iter().sum();
        assert!((far - 1.0).abs() > 1e-9);
    }

    #[test]
    fn outshone_passes_and_classic_mistakes_fail() {
        assert_eq!(check_outshone(outshone), Ok(()));
        let w = plain_self_attention(&outshone()).unwrap().weights;
        assert!(w[[0, 1]] > w[[0, 0]], "{w}");
        // Different directions: the diagonal still wins.
        rejects(check_outshone(|| array![[1.0, 0.0], [0.0, 1.0]]), "x₀·x₁ = 0");
        // The same direction, but shorter.
        rejects(check_outshone(|| array![[1.0, 0.0], [0.5, 0.0]]), "x₀·x₁ = 0.5");
        // The right pair in the wrong order: token 1 outshines nothing, token 0 wins.
        rejects(check_outshone(|| array![[2.0, 1.0], [1.0, 0.0]]), "x₀·x₀ = 5");
        // Equal tokens tie; a tie is not "more".
        rejects(check_outshone(|| array![[1.0, 1.0], [1.0, 1.0]]), "weight 0.5000");
        rejects(check_outshone(|| array![[1.0, 2.0, 3.0]]), "shape (1, 3)");
    }
}
