//! Chapter 10, *Generating one token at a time*: key/value heads shared by groups of query
//! heads, the size of a KV cache, and which positions a windowed cache holds.

use attention::gqa::group_size;
use attention::multihead::head_width;
use attention::{AttentionError, Result};
use ndarray::{Array2, ArrayRef2};

use crate::{call, close, refuses};

/// Exercise 10.1: a grouped-query key (or value) projection made from a multi-head one. `w`
/// is a multi-head `W_K`, `(d_model, H·d_head)`, whose head `h` is columns
/// `h·d_head … (h+1)·d_head − 1`; the answer is a `(d_model, G·d_head)` matrix whose
/// key/value head `j` is the average of the `H/G` heads it will serve,
/// `j·H/G … (j+1)·H/G − 1` (the order of PyTorch's `enable_gqa`). A number of heads that does
/// not divide the width, `G = 0`, or a `G` that does not divide `H` is an error.
///
/// ```
/// use exercises::ch10::pool_kv_heads;
/// use ndarray::array;
///
/// // d_model = 1, H = 4 heads of width 1, G = 2: heads 0 and 1 share, and so do 2 and 3.
/// let w = array![[1.0, 3.0, 10.0, 20.0]];
/// assert_eq!(pool_kv_heads(&w, 4, 2).unwrap(), array![[2.0, 15.0]]);
/// assert!(pool_kv_heads(&w, 4, 3).is_err()); // 3 does not divide 4
/// ```
// ANCHOR: pool_kv_heads
pub fn pool_kv_heads(
    w: &ArrayRef2<f64>,
    heads: usize,
    kv_heads: usize,
) -> Result<Array2<f64>> {
    let d_head = head_width(w.ncols(), heads)?;
    let group = group_size(heads, kv_heads)?; // the query heads that share one key/value head
    Ok(Array2::from_shape_fn((w.nrows(), kv_heads * d_head), |(r, c)| {
        let (j, col) = (c / d_head, c % d_head);
        let members = (j * group..(j + 1) * group).map(|h| w[[r, h * d_head + col]]);
        members.sum::<f64>() / group as f64
    }))
}
// ANCHOR_END: pool_kv_heads

/// Exercise 10.2: the bytes a KV cache holds after `tokens` tokens, for `layers` layers of
/// `kv_heads` key/value heads of width `d_head`, `bytes_per_element` bytes per number (2 for
/// `f16`/`bf16`, 4 for `f32`), and, with `window = Some(W)`, a cache that keeps only the last
/// `W` tokens: `2 · layers · kv_heads · d_head · bytes_per_element` bytes per cached token (a
/// key and a value per layer and head).
///
/// ```
/// use exercises::ch10::cache_bytes;
///
/// // Mistral 7B: 32 layers, 8 key/value heads of 128, bf16, a window of 4096 tokens.
/// assert_eq!(cache_bytes(32, 8, 128, 2, 1, None), 131_072); // 128 KiB per token
/// assert_eq!(cache_bytes(32, 8, 128, 2, 100_000, Some(4096)), 512 << 20); // 512 MiB at most
/// ```
// ANCHOR: cache_bytes
pub fn cache_bytes(
    layers: usize,
    kv_heads: usize,
    d_head: usize,
    bytes_per_element: usize,
    tokens: usize,
    window: Option<usize>,
) -> usize {
    let cached = window.map_or(tokens, |w| tokens.min(w));
    2 * layers * kv_heads * d_head * bytes_per_element * cached
}
// ANCHOR_END: cache_bytes

/// Exercise 10.3: the absolute position of the token whose key and value sit in each slot of
/// a ring-buffer cache of `window` slots, after `tokens_seen` tokens have been appended: token
/// `p` goes to slot `p mod W` and overwrites whatever was there. The answer has one entry per
/// filled slot, `min(tokens_seen, W)` in all, in slot order. `W = 0` is an error.
///
/// ```
/// use exercises::ch10::slot_positions;
///
/// assert_eq!(slot_positions(2, 3).unwrap(), [0, 1]); // not full yet
/// assert_eq!(slot_positions(7, 3).unwrap(), [6, 4, 5]); // token 6 overwrote token 3
/// ```
// ANCHOR: slot_positions
pub fn slot_positions(tokens_seen: usize, window: usize) -> Result<Vec<usize>> {
    if window == 0 {
        return Err(AttentionError::ZeroWindow);
    }
    let filled = tokens_seen.min(window);
    // Slot s holds the last position p < tokens_seen with p mod W = s.
    Ok((0..filled).map(|s| s + window * ((tokens_seen - 1 - s) / window)).collect())
}
// ANCHOR_END: slot_positions

/// Checks an answer to exercise 10.1 ([`pool_kv_heads`]): for `(H, G)` = (4, 1), (4, 2),
/// (6, 2), (6, 3), (4, 4) and (8, 2), with heads of width 2, every key/value head must be the
/// mean of the query heads `j·H/G … (j+1)·H/G − 1` (consecutive heads, not every `G`-th);
/// a width that `H` does not divide, `G = 0` and a `G` that does not divide `H` must be
/// errors, not panics.
///
/// ```
/// use exercises::ch10::{check_pool_kv_heads, pool_kv_heads};
///
/// assert_eq!(check_pool_kv_heads(pool_kv_heads), Ok(()));
/// // The first head of each group instead of the mean.
/// let first = |w: &ndarray::ArrayRef2<f64>, heads: usize, kv_heads: usize| {
///     let (d, group) = (w.ncols() / heads, heads / kv_heads);
///     let columns: Vec<usize> =
///         (0..kv_heads).flat_map(|j| (0..d).map(move |c| j * group * d + c)).collect();
///     Ok(w.select(ndarray::Axis(1), &columns))
/// };
/// assert!(check_pool_kv_heads(first).is_err());
/// ```
pub fn check_pool_kv_heads(
    pool_kv_heads: impl Fn(&ArrayRef2<f64>, usize, usize) -> Result<Array2<f64>>,
) -> Result<(), String> {
    let d_head = 2;
    // Entry (r, c) is r + 10 c: every row and column can be told apart.
    let w_of = |heads: usize| {
        Array2::from_shape_fn((3, heads * d_head), |(r, c)| (r + 10 * c) as f64)
    };
    for (heads, kv_heads) in [(4, 1), (4, 2), (6, 2), (6, 3), (4, 4), (8, 2)] {
        let w = w_of(heads);
        let group = heads / kv_heads;
        let expected = Array2::from_shape_fn((3, kv_heads * d_head), |(r, c)| {
            let (j, col) = (c / d_head, c % d_head);
            let sum: f64 = (0..group).map(|m| w[[r, (j * group + m) * d_head + col]]).sum();
            sum / group as f64
        });
        let what = format!(
            "pool_kv_heads(w, {heads}, {kv_heads}) for a w: (3, {}) with entries r + 10·c \
             (each key/value head the mean of query heads j·{group} … j·{group} + {})",
            heads * d_head,
            group - 1
        );
        let got = call(&what, || pool_kv_heads(&w, heads, kv_heads))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        close(&what, &got, &expected, 1e-12)?;
    }
    for (heads, kv_heads, width, why) in [
        (5, 2, 10, "2 key/value heads do not divide 5 query heads"),
        (4, 3, 8, "3 key/value heads do not divide 4 query heads"),
        (4, 0, 8, "there are no key/value heads at all"),
        (4, 2, 6, "4 heads do not divide a width of 6 columns"),
    ] {
        let w = Array2::<f64>::zeros((3, width));
        let what = format!("pool_kv_heads(w, {heads}, {kv_heads}) for a w: (3, {width})");
        refuses(&what, why, || pool_kv_heads(&w, heads, kv_heads))?;
    }
    Ok(())
}

/// Checks an answer to exercise 10.2 ([`cache_bytes`]) on published configurations (the
/// chapter's table) and on small cases: a key *and* a value per layer, head and token, the
/// window bounding the tokens kept to exactly `W`, and no cache before the first token.
///
/// ```
/// use exercises::ch10::{cache_bytes, check_cache_bytes};
///
/// assert_eq!(check_cache_bytes(cache_bytes), Ok(()));
/// // The keys only: half the cache.
/// let keys_only = |l: usize, g: usize, d: usize, b: usize, t: usize, w: Option<usize>| {
///     l * g * d * b * w.map_or(t, |w| t.min(w))
/// };
/// assert!(check_cache_bytes(keys_only).is_err());
/// ```
pub fn check_cache_bytes(
    cache_bytes: impl Fn(usize, usize, usize, usize, usize, Option<usize>) -> usize,
) -> Result<(), String> {
    // (layers, kv_heads, d_head, bytes, tokens, window, expected, why)
    type Case = (usize, usize, usize, usize, usize, Option<usize>, usize, &'static str);
    let cases: [Case; 9] = [
        (32, 8, 128, 2, 1, None, 131_072, "Mistral 7B, one token: 2·32·8·128·2 bytes"),
        (32, 8, 128, 2, 4096, Some(4096), 512 << 20, "Mistral 7B, a full window: 512 MiB"),
        (
            32,
            8,
            128,
            2,
            100_000,
            Some(4096),
            512 << 20,
            "past the window: W = 4096 tokens kept",
        ),
        (32, 8, 128, 2, 100, Some(4096), 100 * 131_072, "a window not yet full: 100 tokens"),
        (80, 8, 128, 2, 8192, None, 2_684_354_560, "Llama 3 70B, 8192 tokens: 2.5 GiB"),
        (32, 1, 64, 2, 2048, None, 16 << 20, "Falcon-7B (one key/value head), 2048 tokens"),
        (12, 12, 64, 4, 1024, None, 72 << 20, "GPT-2 small in f32, 1024 tokens: 72 MiB"),
        (1, 1, 1, 1, 5, Some(2), 4, "a window of 2: a key and a value for each of 2 tokens"),
        (32, 8, 128, 2, 0, None, 0, "no token, no cache"),
    ];
    for (layers, kv_heads, d_head, bytes, tokens, window, expected, why) in cases {
        let what = format!(
            "cache_bytes({layers}, {kv_heads}, {d_head}, {bytes}, {tokens}, {window:?})"
        );
        let got =
            call(&what, || cache_bytes(layers, kv_heads, d_head, bytes, tokens, window))?;
        if got != expected {
            return Err(format!("{what} returned {got}, expected {expected} ({why})"));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 10.3 ([`slot_positions`]): every number of tokens from 0 to
/// 13 with windows of 1 to 5 slots, against a ring buffer filled token by token; `W = 0` must
/// be an error, not a panic.
///
/// ```
/// use exercises::ch10::{check_slot_positions, slot_positions};
///
/// assert_eq!(check_slot_positions(slot_positions), Ok(()));
/// // The last W positions in order: right while the ring has not wrapped, wrong after.
/// let in_order =
///     |t: usize, w: usize| Ok((t.saturating_sub(w)..t).collect::<Vec<usize>>());
/// assert!(check_slot_positions(in_order).is_err());
/// ```
pub fn check_slot_positions(
    slot_positions: impl Fn(usize, usize) -> Result<Vec<usize>>,
) -> Result<(), String> {
    for window in 1..=5 {
        let mut ring: Vec<usize> = Vec::new();
        for tokens_seen in 0..=13 {
            if tokens_seen > 0 {
                let p = tokens_seen - 1; // token p arrives: slot p mod W
                match ring.get_mut(p % window) {
                    Some(slot) => *slot = p,
                    None => ring.push(p),
                }
            }
            let what = format!("slot_positions({tokens_seen}, {window})");
            let got = call(&what, || slot_positions(tokens_seen, window))?;
            let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
            if got != ring {
                return Err(format!(
                    "{what} returned {got:?}, expected {ring:?}: token p goes to slot p \
                     mod {window} and overwrites the token that was there, and the list is in \
                     slot order"
                ));
            }
        }
    }
    let what = "slot_positions(4, 0)";
    let result = call(what, || slot_positions(4, 0))
        .map_err(|panic| format!("{panic}; a window of 0 slots should be an error"))?;
    if let Ok(got) = result {
        return Err(format!(
            "{what} returned {got:?} instead of an error: a window of 0 slots"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    /// A wrong answer that groups the heads with `member(j, m)` (the `m`-th head of key/value
    /// head `j`) and combines the group's columns with `combine`.
    fn pooled_by(
        member: impl Fn(usize, usize, usize, usize) -> usize,
        combine: impl Fn(&[f64]) -> f64,
    ) -> impl Fn(&ArrayRef2<f64>, usize, usize) -> Result<Array2<f64>> {
        move |w, heads, kv_heads| {
            let d = head_width(w.ncols(), heads)?;
            let group = group_size(heads, kv_heads)?;
            Ok(Array2::from_shape_fn((w.nrows(), kv_heads * d), |(r, c)| {
                let (j, col) = (c / d, c % d);
                let values: Vec<f64> = (0..group)
                    .map(|m| w[[r, member(j, m, group, kv_heads) * d + col]])
                    .collect();
                combine(&values)
            }))
        }
    }

    #[test]
    fn pool_kv_heads_passes_and_classic_mistakes_fail() {
        assert_eq!(check_pool_kv_heads(pool_kv_heads), Ok(()));
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        // The tiled order (PyTorch's `repeat` instead of `repeat_interleave`): head j pools
        // the query heads j, j + G, j + 2G, …
        let tiled = pooled_by(|j, m, _, kv_heads| j + m * kv_heads, mean);
        rejects(check_pool_kv_heads(tiled), "pool_kv_heads(w, 4, 2) for a w: (3, 8)");
        // The sum instead of the mean.
        let sum = pooled_by(|j, m, group, _| j * group + m, |v| v.iter().sum());
        rejects(check_pool_kv_heads(sum), "pool_kv_heads(w, 4, 1) for a w: (3, 8)");
        // The first head of each group, the others dropped.
        let first = pooled_by(|j, m, group, _| j * group + m, |v| v[0]);
        rejects(check_pool_kv_heads(first), "(entry (0, 0) is 0 instead of 30");
        // Integer division without a check: 5 / 2 = 2 heads per group, head 4 dropped.
        let unchecked = |w: &ArrayRef2<f64>, heads: usize, kv_heads: usize| {
            let d = head_width(w.ncols(), heads)?;
            let group = heads / kv_heads;
            Ok(Array2::from_shape_fn((w.nrows(), kv_heads * d), |(r, c)| {
                let (j, col) = (c / d, c % d);
                (0..group).map(|m| w[[r, (j * group + m) * d + col]]).sum::<f64>()
                    / group as f64
            }))
        };
        rejects(
            check_pool_kv_heads(unchecked),
            "pool_kv_heads(w, 5, 2) for a w: (3, 10) returned a matrix of shape [3, 4]",
        );
    }

    #[test]
    fn pooling_as_many_kv_heads_as_heads_changes_nothing() {
        let w = Array2::from_shape_fn((3, 6), |(r, c)| (r * 6 + c) as f64);
        assert_eq!(pool_kv_heads(&w, 3, 3).unwrap(), w);
        let err = pool_kv_heads(&w, 3, 2).unwrap_err();
        assert_eq!(err.to_string(), "kv_heads = 2 does not divide heads = 3");
    }

    #[test]
    fn pooling_heads_that_are_equal_within_each_group_keeps_the_layer() {
        use attention::gqa::GroupedQueryAttention;
        use attention::mask::Mask;
        use attention::multihead::MultiHeadAttention;
        use attention::projection::Linear;
        use rand::{SeedableRng, rngs::StdRng};

        let (d_model, heads, kv_heads, d_head) = (8, 4, 2, 2);
        let rng = &mut StdRng::seed_from_u64(3);
        let mut random =
            |cols| Linear::<f64>::random(d_model, cols, rng).unwrap().weight().clone();
        let (w_q, w_o) = (random(d_model), random(d_model));
        // Multi-head W_K, W_V whose heads 0, 1 are equal, and so are heads 2, 3.
        let equal_in_groups = |base: &Array2<f64>| {
            Array2::from_shape_fn((d_model, heads * d_head), |(r, c)| {
                let (h, col) = (c / d_head, c % d_head);
                base[[r, (h / (heads / kv_heads)) * d_head + col]]
            })
        };
        let (w_k, w_v) = (equal_in_groups(&random(4)), equal_in_groups(&random(4)));
        let mha =
            MultiHeadAttention::new(w_q.clone(), w_k.clone(), w_v.clone(), w_o.clone(), heads)
                .unwrap();
        let pooled_k = pool_kv_heads(&w_k, heads, kv_heads).unwrap();
        let pooled_v = pool_kv_heads(&w_v, heads, kv_heads).unwrap();
        let gqa =
            GroupedQueryAttention::new(w_q, pooled_k, pooled_v, w_o, heads, kv_heads).unwrap();
        let x =
            Array2::from_shape_fn((5, d_model), |(i, j)| ((2 * i + 3 * j) % 7) as f64 / 7.0);
        let mask = Mask::causal(5);
        let (a, b) =
            (mha.forward(&x, Some(&mask)).unwrap(), gqa.forward(&x, Some(&mask)).unwrap());
        assert!((&a.output - &b.output).iter().all(|d| d.abs() < 1e-12));
        // Heads that differ within a group: pooling changes the layer.
        let (w_k2, w_v2) = (random(8), random(8));
        let mha2 = MultiHeadAttention::new(
            mha.projections()[0].weight().clone(),
            w_k2.clone(),
            w_v2.clone(),
            mha.projections()[3].weight().clone(),
            heads,
        )
        .unwrap();
        let gqa2 = GroupedQueryAttention::new(
            mha.projections()[0].weight().clone(),
            pool_kv_heads(&w_k2, heads, kv_heads).unwrap(),
            pool_kv_heads(&w_v2, heads, kv_heads).unwrap(),
            mha.projections()[3].weight().clone(),
            heads,
            kv_heads,
        )
        .unwrap();
        let (a, b) = (mha2.forward(&x, None).unwrap(), gqa2.forward(&x, None).unwrap());
        assert!((&a.output - &b.output).iter().any(|d| d.abs() > 1e-3));
    }

    #[test]
    fn slot_positions_are_the_positions_a_windowed_cache_holds() {
        use attention::decode::KvCache;
        for window in 1..=4 {
            let mut cache = KvCache::<f64>::windowed(1, 1, window).unwrap();
            for t in 1..=10 {
                let kv = Array2::from_elem((1, 1), t as f64);
                cache.append(&kv, &kv).unwrap();
                assert_eq!(slot_positions(t, window).unwrap(), cache.positions());
            }
        }
    }

    #[test]
    fn cache_bytes_is_the_crates_bytes_per_token_times_the_tokens_kept() {
        use attention::decode::kv_cache_bytes_per_token;
        for (tokens, window) in [(10, None), (10, Some(4)), (3, Some(4)), (0, Some(1))] {
            let kept = window.map_or(tokens, |w: usize| tokens.min(w));
            let per_token = kv_cache_bytes_per_token(32, 8, 128, 2);
            assert_eq!(cache_bytes(32, 8, 128, 2, tokens, window), kept * per_token);
        }
    }

    #[test]
    fn cache_bytes_passes_and_classic_mistakes_fail() {
        assert_eq!(check_cache_bytes(cache_bytes), Ok(()));
        let with = |factor: usize, extra: usize| {
            move |l: usize, g: usize, d: usize, b: usize, t: usize, w: Option<usize>| {
                factor * l * g * d * b * w.map_or(t, |w| t.min(w + extra))
            }
        };
        // The keys only (or the values only): half the answer.
        rejects(check_cache_bytes(with(1, 0)), "returned 65536, expected 131072");
        // The window forgotten: the cache keeps growing.
        let no_window =
            |l: usize, g: usize, d: usize, b: usize, t: usize, _: Option<usize>| {
                2 * l * g * d * b * t
            };
        rejects(check_cache_bytes(no_window), "returned 13107200000, expected 536870912");
        // W + 1 tokens kept, as a window of i − j ≤ W would need.
        rejects(check_cache_bytes(with(2, 1)), "(past the window: W = 4096 tokens kept)");
    }

    #[test]
    fn slot_positions_passes_and_classic_mistakes_fail() {
        assert_eq!(check_slot_positions(slot_positions), Ok(()));
        // The last W positions, oldest first: the order of the tokens, not of the slots.
        let in_order = |t: usize, w: usize| {
            if w == 0 {
                return Err(AttentionError::ZeroWindow);
            }
            Ok((t.saturating_sub(w)..t).collect::<Vec<usize>>())
        };
        rejects(
            check_slot_positions(in_order),
            "slot_positions(3, 2) returned [1, 2], expected [2, 1]",
        );
        // The ring indexed by the number of tokens seen instead of the position: p + 1 mod W.
        let shifted = |t: usize, w: usize| {
            if w == 0 {
                return Err(AttentionError::ZeroWindow);
            }
            let mut ring = vec![0; t.min(w)];
            for p in 0..t {
                let slot = (p + 1) % w;
                if slot < ring.len() {
                    ring[slot] = p;
                }
            }
            Ok(ring)
        };
        rejects(
            check_slot_positions(shifted),
            "slot_positions(2, 2) returned [1, 0], expected [0, 1]",
        );
        // Whole windows counted from the number of tokens, not from the last position:
        // one window too far as soon as a slot's turn comes round (p < tokens_seen is lost).
        let rounded = |t: usize, w: usize| {
            if w == 0 {
                return Err(AttentionError::ZeroWindow);
            }
            Ok((0..t.min(w)).map(|s| s + w * (t / w)).collect())
        };
        rejects(
            check_slot_positions(rounded),
            "slot_positions(1, 1) returned [1], expected [0]",
        );
        // No special case for W = 0: an empty cache instead of an error.
        let unchecked = |t: usize, w: usize| {
            Ok((0..t.min(w)).map(|s| s + w * ((t - 1 - s) / w)).collect())
        };
        rejects(
            check_slot_positions(unchecked),
            "slot_positions(4, 0) returned [] instead of an error",
        );
    }
}
