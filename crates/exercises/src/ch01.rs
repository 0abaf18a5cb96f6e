//! Chapter 1, *Input embeddings*.

use attention::embeddings::Vocabulary;
use ndarray::{Array1, Array2};

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

#[cfg(test)]
mod tests {
    use super::*;
    use attention::embeddings::EmbeddingTable;
    use attention::sdpa::{plain_self_attention, single_query};
    use ndarray::{arr2, array};

    #[test]
    fn unknown_words_get_the_reserved_id() {
        let vocab = Vocabulary::from_sentence("<unk> the cat sat on mat");
        assert_eq!(encode_or_unk(&vocab, "the cat sat on the mat", 0), vec![1, 2, 3, 4, 1, 5]);
        assert_eq!(encode_or_unk(&vocab, "a dog ran", 0), vec![0, 0, 0]);
        assert_eq!(encode_or_unk(&vocab, "The cat", 7), vec![7, 2]); // case matters
        assert!(encode_or_unk(&vocab, "  ", 0).is_empty());
        let (v, _) = EmbeddingTable::the_cat_sat();
        assert_eq!(encode_or_unk(&v, "The cat sat", 99), v.encode("The cat sat").unwrap());
    }

    #[test]
    fn weighted_average_is_what_attention_outputs() {
        let x = arr2(&attention::notebooks::nb003::X);
        let att = single_query(&x.row(0), &x, &x).unwrap();
        let ours = weighted_average(&x, att.weights.as_slice().unwrap()).unwrap();
        assert!((ours - att.output).iter().all(|d| d.abs() < 1e-12));
    }

    #[test]
    fn weighted_average_rejects_what_is_not_a_distribution() {
        let m = array![[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]];
        assert_eq!(weighted_average(&m, &[1.0, 0.0, 0.0]), Some(array![1.0, 2.0]));
        assert_eq!(weighted_average(&m, &[0.0, 0.0, 1.0]), Some(array![5.0, 6.0]));
        assert_eq!(weighted_average(&m, &[0.5, 0.5]), None); // too few
        assert_eq!(weighted_average(&m, &[1.5, -0.5, 0.0]), None); // negative
        assert_eq!(weighted_average(&m, &[0.3, 0.3, 0.3]), None); // sums to 0.9
        let third = 1.0 / 3.0;
        assert_eq!(
            weighted_average(&m, &[third; 3]).map(|a| a.mapv(|v| (v * 1e9).round() / 1e9)),
            Some(array![3.0, 4.0])
        );
    }

    #[test]
    fn outshone_token_prefers_its_neighbour() {
        let x = outshone();
        assert_eq!(x.dim(), (2, 2));
        let w = plain_self_attention(&x).unwrap().weights;
        assert!(w[[0, 1]] > w[[0, 0]], "{w}");
    }
}
