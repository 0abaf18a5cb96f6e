//! Chapter 8, *Attention at scale*.

use attention::tiled::{Running, Tiles, causal_tile_counts, online_softmax};
use ndarray::Array1;

use crate::{call, close, within};

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

/// Checks an answer to exercise 8.1 ([`push_score`]) on a row whose maximum arrives late and
/// which holds a masked score, and on a row of scores far below 0: step by step against
/// [`Running::push`] (maxima equal, sums within `1e-14`); at the end, the maximum and the sum
/// of a two-pass softmax, and weights `exp(x − m) / l` equal to [`online_softmax`]'s within
/// `1e-15`; and a masked score before any visible one must leave `(−∞, 0)`.
///
/// ```
/// use exercises::ch08::{check_push_score, push_score};
///
/// assert_eq!(check_push_score(push_score), Ok(()));
/// // A new maximum without rescaling the sum so far.
/// let no_rescale = |max: f64, sum: f64, x: f64| {
///     if x > max { (x, sum + 1.0) } else { (max, sum + (x - max).exp()) }
/// };
/// assert!(check_push_score(no_rescale).is_err());
/// ```
pub fn check_push_score(
    push_score: impl Fn(f64, f64, f64) -> (f64, f64),
) -> Result<(), String> {
    let late_maximum = [0.5, -2.0, 4.0, f64::NEG_INFINITY, 4.0, 7.5, 1.0];
    let far_below_0 = [-800.0, -801.0, -799.5]; // exp(−800) underflows to 0
    for scores in [&late_maximum[..], &far_below_0[..]] {
        let row = format!("{scores:?}");
        let mut run = Running::new();
        let (mut m, mut l) = (f64::NEG_INFINITY, 0.0);
        for (step, &x) in scores.iter().enumerate() {
            let what = format!("push_score({m}, {l}, {x})");
            let (new_m, new_l) = call(&what, || push_score(m, l, x))?;
            run.push(x);
            if !(new_m == run.max && within(new_l, run.sum, 1e-14)) {
                let hint = if x > m && m.is_finite() {
                    format!(
                        ": {x} is a new maximum, so the sum so far must be rescaled by \
                         exp({m} − {x})"
                    )
                } else {
                    String::new()
                };
                return Err(format!(
                    "{what}, step {step} of the row {row}, returned ({new_m}, {new_l}), \
                     expected ({}, {}){hint}",
                    run.max, run.sum
                ));
            }
            (m, l) = (new_m, new_l);
        }
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let direct: f64 = scores.iter().map(|&x| (x - max).exp()).sum();
        if !(m == max && within(l, direct, 1e-14)) {
            return Err(format!(
                "after the row {row}, push_score gave (m, l) = ({m}, {l}); two passes give \
                 ({max}, {direct})"
            ));
        }
        let weights = Array1::from_iter(scores.iter().map(|&x| (x - m).exp() / l));
        let expected = online_softmax(&Array1::from(scores.to_vec()));
        let what = format!("the weights exp(x − m) / l of push_score's (m, l) for {row}");
        close(&what, &weights, &expected, 1e-15)?;
    }
    let what = "push_score(-inf, 0, -inf)";
    let nothing = call(what, || push_score(f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY))?;
    if nothing != (f64::NEG_INFINITY, 0.0) {
        return Err(format!(
            "{what} returned {nothing:?}: a masked score before any visible one must leave \
             the state (−∞, 0) as it is"
        ));
    }
    Ok(())
}

/// Checks an answer to exercise 8.2 ([`merge_running`]): for every split of a row (with a
/// masked score and its maximum in the middle) into two parts, merging the parts' states, in
/// either order, must give the whole row's state (maxima equal, sums within `1e-14`); two
/// empty states must merge into an empty one.
///
/// ```
/// use attention::tiled::Running;
/// use exercises::ch08::{check_merge_running, merge_running};
///
/// assert_eq!(check_merge_running(merge_running), Ok(()));
/// // Adding the sums as they are: each was computed against its own maximum.
/// let plain = |a: Running<f64>, b: Running<f64>| {
///     Running { max: a.max.max(b.max), sum: a.sum + b.sum }
/// };
/// assert!(check_merge_running(plain).is_err());
/// ```
pub fn check_merge_running(
    merge_running: impl Fn(Running<f64>, Running<f64>) -> Running<f64>,
) -> Result<(), String> {
    let scores = [3.0, -1.0, 0.25, 9.0, f64::NEG_INFINITY, 2.0, 8.5];
    let state = |xs: &[f64]| {
        let mut run = Running::new();
        xs.iter().for_each(|&x| run.push(x));
        run
    };
    let whole = state(&scores);
    for split in 0..=scores.len() {
        let (a, b) = scores.split_at(split);
        for (first, second) in [(a, b), (b, a)] {
            let (x, y) = (state(first), state(second));
            let what = format!(
                "merge_running({x:?}, {y:?}), the states of {first:?} and {second:?},"
            );
            let merged = call(&what, || merge_running(x, y))?;
            if !(merged.max == whole.max && within(merged.sum, whole.sum, 1e-14)) {
                return Err(format!(
                    "{what} returned {merged:?}, but the whole row's state is {whole:?}: \
                     bring both sums to the larger maximum before adding them"
                ));
            }
        }
    }
    let what = "merge_running(Running::new(), Running::new())";
    let nothing = call(what, || merge_running(Running::new(), Running::new()))?;
    if nothing != Running::new() {
        return Err(format!(
            "{what} returned {nothing:?}: two parts that saw nothing merge into one that saw \
             nothing, {:?}",
            Running::<f64>::new()
        ));
    }
    Ok(())
}

/// Checks an answer to exercise 8.3 ([`causal_tiles_visited`]) against the pairs with a
/// visible score in [`causal_tile_counts`], for square and oblong tiles, a length that is not
/// a multiple of either, and a block longer than the sequence; and `32·33/2` pairs for
/// `L = 4096` and `128 × 128` tiles.
///
/// ```
/// use exercises::ch08::{causal_tiles_visited, check_causal_tiles_visited};
///
/// assert_eq!(check_causal_tiles_visited(causal_tiles_visited), Ok(()));
/// // The lower triangle of an n × n grid: right only for square tiles.
/// let triangle = |l: usize, block_q: usize, _tile_k: usize| {
///     let n = l.div_ceil(block_q);
///     n * (n + 1) / 2
/// };
/// assert!(check_causal_tiles_visited(triangle).is_err());
/// ```
pub fn check_causal_tiles_visited(
    causal_tiles_visited: impl Fn(usize, usize, usize) -> usize,
) -> Result<(), String> {
    for (l, block_q, tile_k) in [
        (1024, 128, 128),
        (1024, 128, 256),
        (1000, 64, 96),
        (7, 3, 2),
        (1, 1, 1),
        (300, 512, 16),
        (4096, 128, 128),
    ] {
        let counts =
            causal_tile_counts(l, l, Tiles { block_q, tile_k }).map_err(|e| e.to_string())?;
        let expected = counts.iter().filter(|&&n| n > 0).count();
        let what = format!("causal_tiles_visited({l}, {block_q}, {tile_k})");
        let got = call(&what, || causal_tiles_visited(l, block_q, tile_k))?;
        if got != expected {
            return Err(format!(
                "{what} returned {got}, but the causal loop computes {expected} (query block, \
                 key tile) pairs: a block stops before the first tile that starts after its \
                 last query"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn push_score_passes_and_classic_mistakes_fail() {
        assert_eq!(check_push_score(push_score), Ok(()));
        // Another correct answer: the crate's own update.
        let crate_push = |max: f64, sum: f64, x: f64| {
            let mut run = Running { max, sum };
            run.push(x);
            (run.max, run.sum)
        };
        assert_eq!(check_push_score(crate_push), Ok(()));
        // A new maximum, and the old terms left as they were: the classic.
        let no_rescale = |max: f64, sum: f64, x: f64| {
            if x > max { (x, sum + 1.0) } else { (max, sum + (x - max).exp()) }
        };
        rejects(check_push_score(no_rescale), "returned (4, 2.08");
        // The rescale upside down: exp(x − max) instead of exp(max − x).
        let inverted = |max: f64, sum: f64, x: f64| {
            if x > max {
                (x, sum * (x - max).exp() + 1.0)
            } else {
                (max, sum + (x - max).exp())
            }
        };
        rejects(check_push_score(inverted), "push_score(-inf, 0, 0.5), step 0 of the row");
        // No case for a masked score: before any visible one, exp(−∞ − (−∞)) is NaN.
        let no_mask_case = |max: f64, sum: f64, x: f64| {
            if x > max {
                (x, sum * (max - x).exp() + 1.0)
            } else {
                (max, sum + (x - max).exp())
            }
        };
        rejects(
            check_push_score(no_mask_case),
            "push_score(-inf, 0, -inf) returned (-inf, NaN)",
        );
        // Starting the maximum at 0: a row far below 0 underflows to l = 0 (then 0/0 = NaN).
        let max_from_0 = |max: f64, sum: f64, x: f64| push_score(max.max(0.0), sum, x);
        let underflow = "step 0 of the row [-800.0, -801.0, -799.5], returned (0, 0)";
        rejects(check_push_score(max_from_0), underflow);
    }

    #[test]
    fn merge_running_passes_and_classic_mistakes_fail() {
        assert_eq!(check_merge_running(merge_running), Ok(()));
        let a = Running { max: 2.0, sum: 1.0 };
        assert_eq!(merge_running(a, Running::new()), a);
        // Sums added as they are.
        let plain = |a: Running<f64>, b: Running<f64>| Running {
            max: a.max.max(b.max),
            sum: a.sum + b.sum,
        };
        rejects(check_merge_running(plain), "bring both sums to the larger maximum");
        // Only b rescaled, as if a always had the larger maximum.
        let only_b = |a: Running<f64>, b: Running<f64>| {
            let max = a.max.max(b.max);
            if b.max == f64::NEG_INFINITY {
                return a;
            }
            Running { max, sum: a.sum + b.sum * (b.max - max).exp() }
        };
        rejects(check_merge_running(only_b), "bring both sums to the larger maximum");
        // No case for two empty parts: 0·exp(−∞ − (−∞)) = 0·NaN = NaN.
        let no_empty_case = |a: Running<f64>, b: Running<f64>| {
            let max = a.max.max(b.max);
            Running { max, sum: a.sum * (a.max - max).exp() + b.sum * (b.max - max).exp() }
        };
        rejects(
            check_merge_running(no_empty_case),
            "returned Running { max: -inf, sum: NaN }",
        );
    }

    #[test]
    fn causal_tiles_visited_passes_and_classic_mistakes_fail() {
        assert_eq!(check_causal_tiles_visited(causal_tiles_visited), Ok(()));
        // Another correct answer: walk the tiles of each block until one starts after its
        // last query.
        let walk = |l: usize, block_q: usize, tile_k: usize| {
            let mut n = 0;
            for i0 in (0..l).step_by(block_q) {
                let last = (i0 + block_q).min(l) - 1;
                n += (0..l).step_by(tile_k).take_while(|&j0| j0 <= last).count();
            }
            n
        };
        assert_eq!(check_causal_tiles_visited(walk), Ok(()));
        // n blocks of square tiles: n(n + 1)/2, about half of n².
        assert_eq!(causal_tiles_visited(4096, 128, 128), 32 * 33 / 2);

        let per_block = |l: usize, block_q: usize, tiles: &dyn Fn(usize) -> usize| {
            (0..l).step_by(block_q).map(tiles).sum::<usize>()
        };
        // The triangle of square tiles, whatever their shape.
        let triangle = |l: usize, block_q: usize, _: usize| {
            let n = l.div_ceil(block_q);
            n * (n + 1) / 2
        };
        rejects(check_causal_tiles_visited(triangle), "(1024, 128, 256) returned 36");
        // Rounding down: the partial tile under the block's last queries is dropped.
        let floor = |l: usize, block_q: usize, tile_k: usize| {
            per_block(l, block_q, &|i0| (i0 + block_q).min(l) / tile_k)
        };
        rejects(check_causal_tiles_visited(floor), "(1024, 128, 256) returned 16");
        // The block's first query instead of its last: tiles its later queries see are lost.
        let first_query = |l: usize, block_q: usize, tile_k: usize| {
            per_block(l, block_q, &|i0| (i0 + 1).div_ceil(tile_k))
        };
        rejects(check_causal_tiles_visited(first_query), "(1000, 64, 96) returned 91");
        // Not causal at all.
        let all =
            |l: usize, block_q: usize, tile_k: usize| l.div_ceil(block_q) * l.div_ceil(tile_k);
        rejects(check_causal_tiles_visited(all), "(1024, 128, 128) returned 64");
    }
}
