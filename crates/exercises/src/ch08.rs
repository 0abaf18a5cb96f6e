//! Chapter 8, *Attention at scale*.

use attention::tiled::Running;

/// Exercise 8.1: one step of online softmax. Given the running maximum `max` and the running
/// sum `sum = Σ exp(xⱼ − max)` of the scores so far, return both after the score `x`.
/// A masked score (`x = −∞`) changes nothing; before the first score `max = −∞`, `sum = 0`.
///
/// When `x` is a new maximum, every term already in `sum` was computed against the old
/// maximum and is too large by `exp(x − max)`: multiply `sum` by `exp(max − x)`.
///
/// ```
/// use exercises::ch08::push_score;
///
/// let (m, l) = push_score(f64::NEG_INFINITY, 0.0, 1.0);
/// assert_eq!((m, l), (1.0, 1.0));
/// let (m, l) = push_score(m, l, 3.0);
/// assert_eq!(m, 3.0);
/// assert!((l - (1.0 + (-2.0f64).exp())).abs() < 1e-15);
/// ```
// ANCHOR: push_score
pub fn push_score(max: f64, sum: f64, x: f64) -> (f64, f64) {
    if x == f64::NEG_INFINITY {
        return (max, sum);
    }
    if x > max {
        (x, sum * (max - x).exp() + 1.0) // rescale the old terms; the new one is exp(0)
    } else {
        (max, sum + (x - max).exp())
    }
}
// ANCHOR_END: push_score

/// Exercise 8.2: combine the online-softmax states of two separate parts of a row (say, two
/// threads that each took half of the keys) into the state of the whole row.
///
/// Both sums are brought to the larger maximum `m`: `l = l_a·exp(m_a − m) + l_b·exp(m_b − m)`.
/// A part that saw nothing (`max = −∞`, `sum = 0`) contributes nothing.
///
/// ```
/// use attention::tiled::Running;
/// use exercises::ch08::merge_running;
///
/// let a = Running { max: 2.0, sum: 1.0 };
/// let b = Running { max: 2.0, sum: 3.0 };
/// assert_eq!(merge_running(a, b), Running { max: 2.0, sum: 4.0 });
/// assert_eq!(merge_running(a, Running::new()), a);
/// ```
// ANCHOR: merge_running
pub fn merge_running(a: Running<f64>, b: Running<f64>) -> Running<f64> {
    let max = a.max.max(b.max);
    if max == f64::NEG_INFINITY {
        return Running::new(); // neither part saw a visible score
    }
    Running { max, sum: a.sum * (a.max - max).exp() + b.sum * (b.max - max).exp() }
}
// ANCHOR_END: merge_running

/// Exercise 8.3: how many (query block, key tile) pairs the causal tiled loop computes for a
/// sequence of `l` tokens, blocks of `block_q` queries and tiles of `tile_k` keys. A block
/// starting at query `i0` stops before the tile that starts after its last query,
/// `min(i0 + block_q, l) − 1`.
///
/// ```
/// use exercises::ch08::causal_tiles_visited;
///
/// assert_eq!(causal_tiles_visited(1024, 128, 128), 36); // 8 blocks: 1 + 2 + … + 8
/// assert_eq!(causal_tiles_visited(1024, 128, 256), 20); // tiles twice as wide
/// ```
// ANCHOR: causal_tiles_visited
pub fn causal_tiles_visited(l: usize, block_q: usize, tile_k: usize) -> usize {
    (0..l)
        .step_by(block_q)
        .map(|i0| {
            // Keys 0..keys are visible to some query of the block.
            let keys = (i0 + block_q).min(l);
            keys.div_ceil(tile_k)
        })
        .sum()
}
// ANCHOR_END: causal_tiles_visited

#[cfg(test)]
mod tests {
    use super::*;
    use attention::tiled::{Tiles, causal_tile_counts, online_softmax};
    use ndarray::Array1;

    #[test]
    fn push_score_matches_a_two_pass_softmax() {
        let scores = [0.5, -2.0, 4.0, f64::NEG_INFINITY, 4.0, 7.5, 1.0];
        let (mut m, mut l) = (f64::NEG_INFINITY, 0.0);
        for &x in &scores {
            (m, l) = push_score(m, l, x);
        }
        let max = 7.5;
        let direct: f64 = scores.iter().map(|&x| (x - max).exp()).sum();
        assert_eq!(m, max);
        assert!((l - direct).abs() < 1e-14, "{l} vs {direct}");
        // The weights exp(x − m) / l are the softmax.
        let weights = Array1::from_iter(scores.iter().map(|&x| (x - m).exp() / l));
        let expected = online_softmax(&Array1::from(scores.to_vec()));
        assert!((weights - expected).iter().all(|d| d.abs() < 1e-15));
        // And the crate's Running agrees step by step.
        let mut run = Running::new();
        let (mut m, mut l) = (f64::NEG_INFINITY, 0.0);
        for &x in &scores {
            run.push(x);
            (m, l) = push_score(m, l, x);
            assert!(run.max == m && (run.sum - l).abs() < 1e-14);
        }
        assert_eq!(
            push_score(f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY),
            (f64::NEG_INFINITY, 0.0)
        );
    }

    #[test]
    fn merging_halves_gives_the_whole() {
        let scores = [3.0, -1.0, 0.25, 9.0, f64::NEG_INFINITY, 2.0, 8.5];
        let state = |xs: &[f64]| {
            let mut run = Running::new();
            xs.iter().for_each(|&x| run.push(x));
            run
        };
        let whole = state(&scores);
        for split in 0..=scores.len() {
            let (a, b) = scores.split_at(split);
            for merged in
                [merge_running(state(a), state(b)), merge_running(state(b), state(a))]
            {
                assert_eq!(merged.max, whole.max, "split at {split}");
                assert!(
                    (merged.sum - whole.sum).abs() < 1e-14,
                    "split at {split}: {merged:?} vs {whole:?}"
                );
            }
        }
        let nothing = merge_running(Running::new(), Running::new());
        assert_eq!(nothing, Running::new());
    }

    #[test]
    fn tiles_visited_match_the_crate() {
        for (l, block_q, tile_k) in
            [(1024, 128, 128), (1000, 64, 96), (7, 3, 2), (1, 1, 1), (300, 512, 16)]
        {
            let counts = causal_tile_counts(l, l, Tiles { block_q, tile_k }).unwrap();
            let visited = counts.iter().filter(|&&n| n > 0).count();
            assert_eq!(
                causal_tiles_visited(l, block_q, tile_k),
                visited,
                "L = {l}, {block_q} × {tile_k}"
            );
        }
        // n blocks of square tiles: n(n + 1)/2, about half of n².
        assert_eq!(causal_tiles_visited(4096, 128, 128), 32 * 33 / 2);
    }
}
