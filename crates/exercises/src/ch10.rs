//! Chapter 10, *Generating one token at a time*: sharing key/value heads, the size of a KV
//! cache, and which positions a windowed cache holds.

use attention::{AttentionError, Result};
use ndarray::{Array3, ArrayRef3, Axis};

use crate::call;

/// Exercise 10.1: the keys (or values) of `G` key/value heads, `(G, L, d)`, repeated for
/// `heads` query heads, `(H, L, d)`, in the order of PyTorch's `enable_gqa` (its
/// `repeat_interleave`): key/value head `j` serves query heads `j·H/G … (j+1)·H/G − 1`, so
/// query head `h` reads head `h / (H/G)`. `G = 0`, or a `G` that does not divide `H`, is an
/// error.
///
/// ```
/// use exercises::ch10::repeat_kv;
/// use ndarray::array;
///
/// let kv = array![[[0.0, 1.0]], [[2.0, 3.0]]]; // G = 2 heads of one key each
/// let repeated = repeat_kv(&kv, 4).unwrap();
/// assert_eq!(repeated, array![[[0.0, 1.0]], [[0.0, 1.0]], [[2.0, 3.0]], [[2.0, 3.0]]]);
/// assert!(repeat_kv(&kv, 3).is_err()); // 2 does not divide 3
/// ```
// ANCHOR: repeat_kv
pub fn repeat_kv(kv: &ArrayRef3<f64>, heads: usize) -> Result<Array3<f64>> {
    let (kv_heads, len, width) = kv.dim();
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(AttentionError::KvHeads { heads, kv_heads });
    }
    let group = heads / kv_heads; // query heads per key/value head
    Ok(Array3::from_shape_fn((heads, len, width), |(h, i, c)| kv[[h / group, i, c]]))
}
// ANCHOR_END: repeat_kv

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

/// `kv` as text, one head per `[...]`, for the checks' messages.
fn heads_text(kv: &ArrayRef3<f64>) -> String {
    let heads: Vec<String> = kv
        .axis_iter(Axis(0))
        .map(|head| format!("{:?}", head.iter().collect::<Vec<_>>()))
        .collect();
    heads.join(", ")
}

/// Checks an answer to exercise 10.1 ([`repeat_kv`]): for `(H, G)` = (4, 1), (4, 2), (6, 2),
/// (6, 3), (4, 4) and (8, 2), every query head must hold exactly key/value head
/// `h / (H/G)` (the order of `repeat_interleave`, not of `repeat`); `G = 0` and a `G` that
/// does not divide `H` must be errors, not panics.
///
/// ```
/// use exercises::ch10::{check_repeat_kv, repeat_kv};
/// use ndarray::{Array3, ArrayRef3};
///
/// assert_eq!(check_repeat_kv(repeat_kv), Ok(()));
/// // The heads tiled (PyTorch's `repeat`): query head h reads head h mod G.
/// let tiled = |kv: &ArrayRef3<f64>, heads: usize| {
///     let (g, l, d) = kv.dim();
///     Ok(Array3::from_shape_fn((heads, l, d), |(h, i, c)| kv[[h % g, i, c]]))
/// };
/// assert!(check_repeat_kv(tiled).is_err());
/// ```
pub fn check_repeat_kv(
    repeat_kv: impl Fn(&ArrayRef3<f64>, usize) -> Result<Array3<f64>>,
) -> Result<(), String> {
    // Entry (j, i, c) is 100 j + 10 i + c: every head, row and column can be told apart.
    let kv_of =
        |g: usize| Array3::from_shape_fn((g, 3, 2), |(j, i, c)| (100 * j + 10 * i + c) as f64);
    for (heads, kv_heads) in [(4, 1), (4, 2), (6, 2), (6, 3), (4, 4), (8, 2)] {
        let kv = kv_of(kv_heads);
        let what = format!("repeat_kv(kv, {heads}) for G = {kv_heads} heads of (3, 2) keys");
        let got = call(&what, || repeat_kv(&kv, heads))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        if got.dim() != (heads, 3, 2) {
            return Err(format!(
                "{what} has shape {:?}, expected [{heads}, 3, 2]",
                got.shape()
            ));
        }
        let group = heads / kv_heads;
        for h in 0..heads {
            let expected = kv.index_axis(Axis(0), h / group);
            if got.index_axis(Axis(0), h) != expected {
                return Err(format!(
                    "{what}: query head {h} holds {:?}, but it should hold key/value head \
                     {} = {:?} (head j serves query heads j·{group} … j·{group} + {}, the \
                     order of repeat_interleave). The heads were: {}",
                    got.index_axis(Axis(0), h).iter().collect::<Vec<_>>(),
                    h / group,
                    expected.iter().collect::<Vec<_>>(),
                    group - 1,
                    heads_text(&kv),
                ));
            }
        }
    }
    for (heads, kv_heads, why) in [
        (5, 2, "2 key/value heads do not divide 5 query heads"),
        (4, 3, "3 key/value heads do not divide 4 query heads"),
        (4, 0, "there are no key/value heads at all"),
    ] {
        let kv = kv_of(kv_heads);
        let what = format!("repeat_kv(kv, {heads}) for G = {kv_heads}");
        let result = call(&what, || repeat_kv(&kv, heads))
            .map_err(|panic| format!("{panic}; it should return an error ({why})"))?;
        if let Ok(got) = result {
            return Err(format!(
                "{what} returned an array of shape {:?} instead of an error ({why})",
                got.shape()
            ));
        }
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

    #[test]
    fn repeat_kv_passes_and_classic_mistakes_fail() {
        assert_eq!(check_repeat_kv(repeat_kv), Ok(()));
        // PyTorch's `repeat` (tiling) instead of `repeat_interleave`: head h reads h mod G.
        let tiled = |kv: &ArrayRef3<f64>, heads: usize| {
            let (g, l, d) = kv.dim();
            if g == 0 || !heads.is_multiple_of(g) {
                return Err(AttentionError::KvHeads { heads, kv_heads: g });
            }
            Ok(Array3::from_shape_fn((heads, l, d), |(h, i, c)| kv[[h % g, i, c]]))
        };
        rejects(
            check_repeat_kv(tiled),
            "repeat_kv(kv, 4) for G = 2 heads of (3, 2) keys: query head 1 holds",
        );
        // Dividing by G instead of by the group size H/G: right only when H = G².
        let by_g = |kv: &ArrayRef3<f64>, heads: usize| {
            let (g, l, d) = kv.dim();
            if g == 0 || !heads.is_multiple_of(g) {
                return Err(AttentionError::KvHeads { heads, kv_heads: g });
            }
            Ok(Array3::from_shape_fn((heads, l, d), |(h, i, c)| {
                kv[[(h / g).min(g - 1), i, c]]
            }))
        };
        rejects(
            check_repeat_kv(by_g),
            "repeat_kv(kv, 6) for G = 2 heads of (3, 2) keys: query head 2 holds",
        );
        // Integer division without a check: 5 / 2 = 2 copies each, 4 heads instead of 5.
        let unchecked = |kv: &ArrayRef3<f64>, heads: usize| {
            let (g, l, d) = kv.dim();
            let group = heads / g;
            Ok(Array3::from_shape_fn((g * group, l, d), |(h, i, c)| kv[[h / group, i, c]]))
        };
        rejects(
            check_repeat_kv(unchecked),
            "repeat_kv(kv, 5) for G = 2 returned an array of shape [4, 3, 2] instead of an",
        );
        // Divisibility checked, G = 0 not: the division by zero panics.
        let zero_unchecked = |kv: &ArrayRef3<f64>, heads: usize| {
            let (g, l, d) = kv.dim();
            let group = heads / g;
            if group * g != heads {
                return Err(AttentionError::KvHeads { heads, kv_heads: g });
            }
            Ok(Array3::from_shape_fn((heads, l, d), |(h, i, c)| kv[[h / group, i, c]]))
        };
        rejects(check_repeat_kv(zero_unchecked), "repeat_kv(kv, 4) for G = 0 panicked");
    }

    #[test]
    fn repeat_kv_with_as_many_kv_heads_as_heads_is_a_copy() {
        let kv = Array3::from_shape_fn((3, 2, 2), |(j, i, c)| (j * 4 + i * 2 + c) as f64);
        assert_eq!(repeat_kv(&kv, 3).unwrap(), kv);
        let err = repeat_kv(&kv, 4).unwrap_err();
        assert_eq!(err.to_string(), "kv_heads = 3 does not divide heads = 4");
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
