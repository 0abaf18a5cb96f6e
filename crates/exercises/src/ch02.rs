//! Chapter 2, *Queries, keys and values*.

use attention::embeddings::EmbeddingTable;
use attention::scores::scores;
use attention::self_attention::SelfAttention;
use ndarray::Array2;
use rand::{SeedableRng, rngs::StdRng};

use crate::{call, close, within};

/// A `(rows, cols)` matrix of seeded standard-normal numbers.
fn random(rows: usize, cols: usize, seed: u64) -> Array2<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    EmbeddingTable::<f64>::random(rows, cols, &mut rng).expect("rows > 0").table().clone()
}

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

/// Checks an answer to exercise 2.1 ([`self_attention_parameters`]) against
/// `SelfAttention::parameter_count` for several widths, `d_k ≠ d_v` among them.
///
/// ```
/// use exercises::ch02::{check_self_attention_parameters, self_attention_parameters};
///
/// assert_eq!(check_self_attention_parameters(self_attention_parameters), Ok(()));
/// // Three matrices of d_model × d_k: right only when d_v = d_k.
/// assert!(check_self_attention_parameters(|d_model, d_k, _d_v| 3 * d_model * d_k).is_err());
/// ```
pub fn check_self_attention_parameters(
    self_attention_parameters: impl Fn(usize, usize, usize) -> usize,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(0);
    for (d_model, d_k, d_v) in [(4, 3, 2), (8, 8, 8), (5, 1, 7), (64, 16, 32), (3, 2, 5)] {
        let layer = SelfAttention::<f64>::random(d_model, d_k, d_v, &mut rng)
            .map_err(|e| e.to_string())?;
        let what = format!("self_attention_parameters({d_model}, {d_k}, {d_v})");
        let got = call(&what, || self_attention_parameters(d_model, d_k, d_v))?;
        let expected = layer.parameter_count();
        if got != expected {
            return Err(format!(
                "{what} returned {got}, but a layer with d_model = {d_model}, d_k = {d_k} and \
                 d_v = {d_v} has {expected} learnable numbers: W_Q and W_K are \
                 ({d_model}, {d_k}), W_V is ({d_model}, {d_v})"
            ));
        }
    }
    let got = call("self_attention_parameters(512, 64, 64)", || {
        self_attention_parameters(512, 64, 64)
    })?;
    if got != 98_304 {
        return Err(format!(
            "self_attention_parameters(512, 64, 64) returned {got}, not 98304"
        ));
    }
    Ok(())
}

/// Checks an answer to exercise 2.2 ([`score_entry`]): every entry `(i, j)` of `Q·Kᵀ` for a
/// `Q: (4, 6)` and a `K: (5, 6)`, within `1e-12`; `i` picks the query, `j` the key.
///
/// ```
/// use exercises::ch02::{check_score_entry, score_entry};
/// use ndarray::Array2;
///
/// assert_eq!(check_score_entry(score_entry), Ok(()));
/// // Key i against query j: the transposed score.
/// let swapped =
///     |q: &Array2<f64>, k: &Array2<f64>, i: usize, j: usize| q.row(j).dot(&k.row(i));
/// assert!(check_score_entry(swapped).is_err());
/// ```
pub fn check_score_entry(
    score_entry: impl Fn(&Array2<f64>, &Array2<f64>, usize, usize) -> f64,
) -> Result<(), String> {
    let (q, k) = (random(4, 6, 1), random(5, 6, 2));
    let s = scores(&q, &k).map_err(|e| e.to_string())?;
    for i in 0..4 {
        for j in 0..5 {
            let what = format!("score_entry(q, k, {i}, {j}) with q: (4, 6) and k: (5, 6)");
            let got = call(&what, || score_entry(&q, &k, i, j))?;
            if !within(got, s[[i, j]], 1e-12) {
                return Err(format!(
                    "{what} returned {got}, but query {i} · key {j} is {}",
                    s[[i, j]]
                ));
            }
        }
    }
    Ok(())
}

/// Checks an answer to exercise 2.3 ([`tied_scores`]): it must equal `(X·w)·(X·w)ᵀ` within
/// `1e-12` (and so be symmetric), for a `w` with fewer columns than rows and for a square one.
///
/// ```
/// use exercises::ch02::{check_tied_scores, tied_scores};
/// use ndarray::Array2;
///
/// assert_eq!(check_tied_scores(tied_scores), Ok(()));
/// // Forgetting w: X·Xᵀ is symmetric too, but it is not the layer's scores.
/// assert!(check_tied_scores(|x: &Array2<f64>, _w: &Array2<f64>| x.dot(&x.t())).is_err());
/// ```
pub fn check_tied_scores(
    tied_scores: impl Fn(&Array2<f64>, &Array2<f64>) -> Array2<f64>,
) -> Result<(), String> {
    let x = random(5, 4, 3);
    for (w, name) in [(random(4, 3, 4), "w: (4, 3)"), (random(4, 4, 5), "w: (4, 4)")] {
        let what = format!("tied_scores(x, w) with x: (5, 4) and {name}");
        let got = call(&what, || tied_scores(&x, &w))?;
        let q = x.dot(&w);
        close(&what, &got, &q.dot(&q.t()), 1e-12)?;
        close(&format!("the transpose of {what}"), &got.t(), &got, 1e-12)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn parameter_count_passes_and_classic_mistakes_fail() {
        assert_eq!(check_self_attention_parameters(self_attention_parameters), Ok(()));
        assert_eq!(self_attention_parameters(3, 2, 5), 27); // d_v counts once, d_k twice
        // Three (d_model, d_k) matrices: right only when d_v = d_k.
        rejects(check_self_attention_parameters(|m, k, _| 3 * m * k), "(4, 3, 2) returned 36");
        // Only one matrix of width d_k.
        rejects(
            check_self_attention_parameters(|m, k, v| m * (k + v)),
            "(4, 3, 2) returned 20",
        );
        // The output projection W_O belongs to multi-head attention, not to this layer.
        let with_w_o = |m: usize, k: usize, v: usize| m * (2 * k + v) + v * m;
        rejects(check_self_attention_parameters(with_w_o), "(4, 3, 2) returned 40");
    }

    #[test]
    fn score_entry_passes_and_classic_mistakes_fail() {
        assert_eq!(check_score_entry(score_entry), Ok(()));
        let (q, k) = (random(4, 6, 1), random(5, 6, 2));
        assert!((score_entry(&q, &k, 1, 3) - q.row(1).dot(&k.row(3))).abs() < 1e-12);
        fn swapped(q: &Array2<f64>, k: &Array2<f64>, i: usize, j: usize) -> f64 {
            (0..q.ncols()).map(|d| q[[j, d]] * k[[i, d]]).sum()
        }
        fn k_read_as_k_transposed(
            q: &Array2<f64>,
            k: &Array2<f64>,
            i: usize,
            j: usize,
        ) -> f64 {
            (0..q.ncols()).map(|d| q[[i, d]] * k[[d, j]]).sum()
        }
        fn scaled(q: &Array2<f64>, k: &Array2<f64>, i: usize, j: usize) -> f64 {
            q.row(i).dot(&k.row(j)) / (q.ncols() as f64).sqrt() // that comes later
        }
        rejects(check_score_entry(swapped), "score_entry(q, k, 0, 1)");
        rejects(check_score_entry(k_read_as_k_transposed), "score_entry(q, k, 0, 0)");
        rejects(check_score_entry(scaled), "score_entry(q, k, 0, 0)");
    }

    #[test]
    fn tied_scores_passes_and_classic_mistakes_fail() {
        assert_eq!(check_tied_scores(tied_scores), Ok(()));
        // Separate W_Q and W_K need not give symmetric scores: the point of the exercise.
        let mut rng = StdRng::seed_from_u64(2);
        let x = random(5, 4, 3);
        let layer = SelfAttention::<f64>::random(4, 3, 3, &mut rng).unwrap();
        let q = layer.w_q().apply(&x).unwrap();
        let k = layer.w_k().apply(&x).unwrap();
        let separate = scores(&q, &k).unwrap();
        assert!((&separate - &separate.t()).iter().any(|d| d.abs() > 0.1));

        let ignores_w = |x: &Array2<f64>, _w: &Array2<f64>| x.dot(&x.t());
        // X·w·Xᵀ: the shapes fail for a w of fewer columns, and it is not symmetric.
        let w_once = |x: &Array2<f64>, w: &Array2<f64>| x.dot(w).dot(&x.t());
        // (X·w)ᵀ·(X·w): (d_k, d_k), a product of columns, not of tokens.
        let columns = |x: &Array2<f64>, w: &Array2<f64>| {
            let p = x.dot(w);
            p.t().dot(&p)
        };
        rejects(
            check_tied_scores(ignores_w),
            "tied_scores(x, w) with x: (5, 4) and w: (4, 3) is",
        );
        rejects(check_tied_scores(w_once), "w: (4, 3) panicked");
        rejects(check_tied_scores(columns), "has shape [3, 3], expected [5, 5]");
    }
}
