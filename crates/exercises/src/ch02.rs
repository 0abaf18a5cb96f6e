//! Chapter 2, *Queries, keys and values*.

use ndarray::Array2;

/// Exercise 2.1: the number of learnable numbers in a single-head self-attention layer with
/// `W_Q, W_K: (d_model, d_k)` and `W_V: (d_model, d_v)`.
///
/// ```
/// use exercises::ch02::self_attention_parameters;
///
/// assert_eq!(self_attention_parameters(4, 3, 2), 32);
/// ```
// ANCHOR: self_attention_parameters
pub fn self_attention_parameters(d_model: usize, d_k: usize, d_v: usize) -> usize {
    d_model * d_k + d_model * d_k + d_model * d_v
}
// ANCHOR_END: self_attention_parameters

/// Exercise 2.2: entry `(i, j)` of the raw scores `Q·Kᵀ`, computed with a loop over the `d_k`
/// components of query `i` and key `j` (no matrix product).
///
/// ```
/// use exercises::ch02::score_entry;
/// use ndarray::array;
///
/// let q = array![[1.0, 2.0], [0.0, 1.0]];
/// let k = array![[3.0, 4.0], [5.0, 6.0], [7.0, 8.0]];
/// assert_eq!(score_entry(&q, &k, 0, 2), 1.0 * 7.0 + 2.0 * 8.0);
/// ```
// ANCHOR: score_entry
pub fn score_entry(q: &Array2<f64>, k: &Array2<f64>, i: usize, j: usize) -> f64 {
    let mut sum = 0.0;
    for d in 0..q.ncols() {
        sum += q[[i, d]] * k[[j, d]];
    }
    sum
}
// ANCHOR_END: score_entry

/// Exercise 2.3: the scores of a layer whose queries and keys share one matrix,
/// `W_Q = W_K = w`: `(X·w)·(X·w)ᵀ`, `(L, L)`. They are always symmetric, which is why a layer
/// needs two.
///
/// ```
/// use exercises::ch02::tied_scores;
/// use ndarray::array;
///
/// let x = array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]];
/// let w = array![[1.0, 2.0], [3.0, -1.0]];
/// let s = tied_scores(&x, &w);
/// assert_eq!(s, s.t());
/// ```
// ANCHOR: tied_scores
pub fn tied_scores(x: &Array2<f64>, w: &Array2<f64>) -> Array2<f64> {
    let projected = x.dot(w); // both the queries and the keys
    projected.dot(&projected.t())
}
// ANCHOR_END: tied_scores

#[cfg(test)]
mod tests {
    use super::*;
    use attention::embeddings::EmbeddingTable;
    use attention::scores::scores;
    use attention::self_attention::SelfAttention;
    use rand::{SeedableRng, rngs::StdRng};

    #[test]
    fn parameter_count_matches_the_layer() {
        let mut rng = StdRng::seed_from_u64(0);
        for (d_model, d_k, d_v) in [(4, 3, 2), (8, 8, 8), (5, 1, 7), (64, 16, 32)] {
            let layer = SelfAttention::<f64>::random(d_model, d_k, d_v, &mut rng).unwrap();
            assert_eq!(self_attention_parameters(d_model, d_k, d_v), layer.parameter_count());
        }
        assert_eq!(self_attention_parameters(512, 64, 64), 98_304);
        assert_eq!(self_attention_parameters(3, 2, 5), 27); // d_v counts once, d_k twice
    }

    #[test]
    fn every_entry_matches_the_matrix_product() {
        let mut rng = StdRng::seed_from_u64(1);
        let q = EmbeddingTable::<f64>::random(4, 6, &mut rng).unwrap().table().clone();
        let k = EmbeddingTable::<f64>::random(5, 6, &mut rng).unwrap().table().clone();
        let s = scores(&q, &k).unwrap();
        for i in 0..4 {
            for j in 0..5 {
                assert!((score_entry(&q, &k, i, j) - s[[i, j]]).abs() < 1e-12, "({i}, {j})");
            }
        }
        // (i, j) is query i against key j, not the other way round.
        assert!((score_entry(&q, &k, 1, 3) - q.row(1).dot(&k.row(3))).abs() < 1e-12);
    }

    #[test]
    fn tied_weights_give_symmetric_scores_and_separate_ones_need_not() {
        let mut rng = StdRng::seed_from_u64(2);
        let x = EmbeddingTable::<f64>::random(5, 4, &mut rng).unwrap().table().clone();
        let layer = SelfAttention::<f64>::random(4, 3, 3, &mut rng).unwrap();
        let tied = tied_scores(&x, layer.w_q().weight());
        assert_eq!(tied.dim(), (5, 5));
        assert!((&tied - &tied.t()).iter().all(|d| d.abs() < 1e-12));
        let q = layer.w_q().apply(&x).unwrap();
        assert!((&tied - &q.dot(&q.t())).iter().all(|d| d.abs() < 1e-12));
        let k = layer.w_k().apply(&x).unwrap();
        let separate = scores(&q, &k).unwrap();
        assert!((&separate - &separate.t()).iter().any(|d| d.abs() > 0.1));
    }
}
