//! Chapter 14, *Attention on a GPU*: a mask row packed into `u32` words, the number of
//! workgroups to dispatch, the naive kernel's online softmax without infinities, and what the
//! tiled kernel reads from global memory.

use crate::call;

/// Exercise 14.1: one row of a boolean mask (`true` = may attend) as the kernels read it: key
/// `j` is bit `j % 32` (counting from the least significant bit) of word `j / 32`, and the row
/// takes `⌈L / 32⌉` words, the bits past its last key 0.
///
/// ```
/// use exercises::ch14::pack_mask_row;
///
/// assert_eq!(pack_mask_row(&[true, false, true]), [0b101]);
/// let mut row = vec![false; 33];
/// row[32] = true; // key 32 starts a second word
/// assert_eq!(pack_mask_row(&row), [0, 1]);
/// ```
// ANCHOR: pack_mask_row
pub fn pack_mask_row(allowed: &[bool]) -> Vec<u32> {
    let mut words = vec![0u32; allowed.len().div_ceil(32)]; // ⌈L / 32⌉, the last one partial
    for (j, &ok) in allowed.iter().enumerate() {
        words[j / 32] |= u32::from(ok) << (j % 32);
    }
    words
}
// ANCHOR_END: pack_mask_row

/// Exercise 14.2: how many workgroups to dispatch along the query axis, for `l_q` queries and
/// `block_q` queries per workgroup (both at least 1): one per block, the last block short when
/// `block_q` does not divide `l_q`.
///
/// ```
/// use exercises::ch14::workgroups;
///
/// assert_eq!(workgroups(4096, 64), 64);
/// assert_eq!(workgroups(1000, 64), 16); // 15 full blocks and one of 40 queries
/// ```
// ANCHOR: workgroups
pub fn workgroups(l_q: usize, block_q: usize) -> usize {
    l_q.div_ceil(block_q) // (l_q + block_q − 1) / block_q
}
// ANCHOR_END: workgroups

/// Exercise 14.3: one query's output, `d_v = 1`, computed as the naive kernel does: one key at
/// a time with the online softmax, skipping the keys it may not see, and with no infinity
/// anywhere. The running maximum `m` is started by the first visible key (`l = 0` says none
/// has been seen yet). Returns `Σ softmax(scores)ⱼ · values[j]` over the visible keys, and 0
/// when no key is visible.
///
/// ```
/// use exercises::ch14::online_row;
///
/// assert_eq!(online_row(&[1.0, 1.0], &[true, true], &[2.0, 4.0]), 3.0);
/// assert_eq!(online_row(&[0.0, 5.0, 0.0], &[true, false, true], &[1.0, 100.0, 3.0]), 2.0);
/// assert_eq!(online_row(&[0.5], &[false], &[1.0]), 0.0); // no visible key
/// ```
// ANCHOR: online_row
pub fn online_row(scores: &[f32], visible: &[bool], values: &[f32]) -> f32 {
    let (mut m, mut l, mut acc) = (0.0f32, 0.0f32, 0.0f32);
    for ((&s, &ok), &v) in scores.iter().zip(visible).zip(values) {
        if !ok {
            continue;
        }
        if l == 0.0 {
            m = s; // the first visible key starts the running maximum
        }
        let m_new = m.max(s);
        let rescale = (m - m_new).exp(); // 1 if the maximum held
        let p = (s - m_new).exp();
        l = l * rescale + p;
        acc = acc * rescale + p * v;
        m = m_new;
    }
    if l > 0.0 { acc / l } else { 0.0 } // no visible key: a zero output
}
// ANCHOR_END: online_row

/// Exercise 14.4: the numbers (`f32`s) of K and V that the tiled kernel reads from global
/// memory for one head of `l` queries and `l` keys, `d_k = d_v = d`, no mask, with `block_q`
/// queries per workgroup: each workgroup reads all `l` rows of K and all `l` rows of V.
///
/// ```
/// use exercises::ch14::tiled_reads;
///
/// assert_eq!(tiled_reads(128, 64, 64), 2 * (2 * 128 * 64)); // 2 workgroups
/// ```
// ANCHOR: tiled_reads
pub fn tiled_reads(l: usize, d: usize, block_q: usize) -> u64 {
    let groups = l.div_ceil(block_q) as u64; // one workgroup per query block
    groups * 2 * (l * d) as u64 // each reads K and V, (l, d) each
}
// ANCHOR_END: tiled_reads

/// Words as the check prints them: `[0x00000005, 0x80000000]`.
fn hex(words: &[u32]) -> String {
    let words: Vec<String> = words.iter().map(|w| format!("{w:#010x}")).collect();
    format!("[{}]", words.join(", "))
}

/// Checks an answer to exercise 14.1 ([`pack_mask_row`]): a row of three keys small enough to
/// do by hand (`[true, false, true]` is `0b101`), a full word, keys 31 and 32 on either side
/// of a word's edge, the causal row of query 35 of 40 keys, a row of 33 keys whose last key
/// needs a word of its own, and a row of 70 keys; each against the words built bit by bit.
///
/// ```
/// use exercises::ch14::{check_pack_mask_row, pack_mask_row};
///
/// assert_eq!(check_pack_mask_row(pack_mask_row), Ok(()));
/// // ⌊L / 32⌋ words: the keys after the last full word are lost.
/// let floor = |allowed: &[bool]| pack_mask_row(&allowed[..allowed.len() / 32 * 32]);
/// assert!(check_pack_mask_row(floor).is_err());
/// ```
pub fn check_pack_mask_row(pack_mask_row: impl Fn(&[bool]) -> Vec<u32>) -> Result<(), String> {
    let row = |l: usize, ok: &dyn Fn(usize) -> bool| (0..l).map(ok).collect::<Vec<bool>>();
    let cases = [
        ("[true, false, true]".to_string(), vec![true, false, true]),
        ("32 keys, all visible".to_string(), vec![true; 32]),
        ("64 keys, only keys 31 and 32 visible".to_string(), row(64, &|j| j == 31 || j == 32)),
        (
            "40 keys, keys 0 to 35 visible (causal, query 35)".to_string(),
            row(40, &|j| j <= 35),
        ),
        ("33 keys, only key 32 visible".to_string(), row(33, &|j| j == 32)),
        ("70 keys, key j visible when j % 3 == 0".to_string(), row(70, &|j| j % 3 == 0)),
    ];
    for (name, allowed) in cases {
        let l = allowed.len();
        let words = l.div_ceil(32);
        // Word w read as a binary number, from its bit 31 (key 32·w + 31) down to bit 0.
        let key = |j: usize| u32::from(allowed.get(j) == Some(&true)); // 0 past the last key
        let expected: Vec<u32> = (0..words)
            .map(|w| (0..32).rev().fold(0, |n, b| 2 * n + key(32 * w + b)))
            .collect();
        let what = format!("pack_mask_row({name})");
        let got = call(&what, || pack_mask_row(&allowed))?;
        if got == expected {
            continue;
        }
        let (got_hex, expected_hex) = (hex(&got), hex(&expected));
        let why = if got.len() != words {
            format!("a row of {l} keys takes ⌈{l}/32⌉ = {words} words, not {}", got.len())
        } else {
            let bit = |w: &[u32], j: usize| (w[j / 32] >> (j % 32)) & 1 == 1;
            match (0..l).find(|&j| bit(&got, j) != allowed[j]) {
                Some(j) => format!(
                    "key {j} is bit {} of word {} (counting from the least significant bit), \
                     which should be {}",
                    j % 32,
                    j / 32,
                    u8::from(allowed[j])
                ),
                None => format!("the bits past key {} must be 0", l - 1),
            }
        };
        return Err(format!("{what} returned {got_hex}, expected {expected_hex}: {why}"));
    }
    Ok(())
}

/// Checks an answer to exercise 14.2 ([`workgroups`]) against the number of blocks of
/// `block_q` queries that `l_q` queries make, counted one by one: multiples of the block, a
/// short last block, fewer queries than a block, one query per block, and the chapter's
/// shapes (`L = 1024, 4096` and blocks of 64).
///
/// ```
/// use exercises::ch14::{check_workgroups, workgroups};
///
/// assert_eq!(check_workgroups(workgroups), Ok(()));
/// // Rounding down: the last, short block gets no workgroup.
/// assert!(check_workgroups(|l_q, block_q| l_q / block_q).is_err());
/// ```
pub fn check_workgroups(workgroups: impl Fn(usize, usize) -> usize) -> Result<(), String> {
    for (l_q, block_q) in [
        (64, 64),
        (128, 64),
        (1000, 64),
        (65, 64),
        (10, 64),
        (7, 3),
        (5, 1),
        (1024, 64),
        (4096, 64),
    ] {
        let expected = (0..l_q).step_by(block_q).count();
        let what = format!("workgroups({l_q}, {block_q})");
        let got = call(&what, || workgroups(l_q, block_q))?;
        if got != expected {
            let last = (expected - 1) * block_q; // the last block's first query
            let blocks = match expected {
                1 => format!("a single block holds queries 0 to {}", l_q - 1),
                _ => format!(
                    "the blocks start at queries 0, {block_q}, …, {last}, and the last one \
                     holds queries {last} to {} ({} of them)",
                    l_q - 1,
                    l_q - last
                ),
            };
            return Err(format!("{what} returned {got}, expected {expected}: {blocks}"));
        }
    }
    Ok(())
}

/// `|a − b| ≤ tolerance · max(1, |b|)`; never for NaN.
fn near(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * b.abs().max(1.0)
}

/// `Σ softmax(scores)ⱼ · values[j]` over the visible keys, in two passes and `f64`; 0 when no
/// key is visible.
fn softmax_average(scores: &[f32], visible: &[bool], values: &[f32]) -> f64 {
    let seen: Vec<(f64, f64)> = (0..scores.len())
        .filter(|&j| visible[j])
        .map(|j| (f64::from(scores[j]), f64::from(values[j])))
        .collect();
    let max = seen.iter().map(|&(s, _)| s).fold(f64::MIN, f64::max);
    let total: f64 = seen.iter().map(|&(s, _)| (s - max).exp()).sum();
    let weighted: f64 = seen.iter().map(|&(s, v)| (s - max).exp() * v).sum();
    if seen.is_empty() { 0.0 } else { weighted / total }
}

/// Checks an answer to exercise 14.3 ([`online_row`]) against a two-pass softmax in `f64`
/// (to 1e-5, relative above 1): two rows small enough to do by hand (one with a masked key
/// whose value would dominate), a row whose maximum arrives late, a row whose scores are all
/// near −200 (where `exp(−200)` is 0 in `f32`), a row whose first key is masked and has the
/// largest score, a row with no visible key (0), and a row of 100 keys.
///
/// ```
/// use exercises::ch14::{check_online_row, online_row};
///
/// assert_eq!(check_online_row(online_row), Ok(()));
/// // The running maximum started at 0 instead of at the first visible key: far below 0,
/// // every exp(s − 0) underflows and the row comes out 0.
/// let from_0 = |scores: &[f32], visible: &[bool], values: &[f32]| {
///     let (mut m, mut l, mut acc) = (0.0f32, 0.0f32, 0.0f32);
///     for j in (0..scores.len()).filter(|&j| visible[j]) {
///         let m_new = m.max(scores[j]);
///         let (rescale, p) = ((m - m_new).exp(), (scores[j] - m_new).exp());
///         (l, acc, m) = (l * rescale + p, acc * rescale + p * values[j], m_new);
///     }
///     if l > 0.0 { acc / l } else { 0.0 }
/// };
/// assert!(check_online_row(from_0).is_err());
/// ```
pub fn check_online_row(
    online_row: impl Fn(&[f32], &[bool], &[f32]) -> f32,
) -> Result<(), String> {
    let long = 100;
    let cases = [
        (
            "scores [1, 1], visible [true, true], values [2, 4]".to_string(),
            vec![1.0, 1.0],
            vec![true, true],
            vec![2.0, 4.0],
            "by hand: equal scores, equal weights, (2 + 4) / 2",
        ),
        (
            "scores [0, 5, 0], visible [true, false, true], values [1, 100, 3]".to_string(),
            vec![0.0, 5.0, 0.0],
            vec![true, false, true],
            vec![1.0, 100.0, 3.0],
            "by hand: the masked key counts for nothing, (1 + 3) / 2",
        ),
        (
            "scores [0.5, -2, 4, 7.5, 1], all visible, values [1, 2, 3, 4, 5]".to_string(),
            vec![0.5, -2.0, 4.0, 7.5, 1.0],
            vec![true; 5],
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
            "the maximum changes twice: l and the accumulator must both be rescaled",
        ),
        (
            "scores [-200, -201, -199.5], all visible, values [1, 2, 3]".to_string(),
            vec![-200.0, -201.0, -199.5],
            vec![true; 3],
            vec![1.0, 2.0, 3.0],
            "softmax only sees differences of scores; exp(−200) is 0 in f32, so m must \
             start at the first visible score, not at 0",
        ),
        (
            "scores [500, 0, 1], visible [false, true, true], values [100, 1, 2]".to_string(),
            vec![500.0, 0.0, 1.0],
            vec![false, true, true],
            vec![100.0, 1.0, 2.0],
            "key 0 is masked: its score must not start the running maximum",
        ),
        (
            "scores [0.5, 2], visible [false, false], values [1, 2]".to_string(),
            vec![0.5, 2.0],
            vec![false, false],
            vec![1.0, 2.0],
            "no visible key: a zero output, as sdpa gives a fully masked row",
        ),
        (
            format!(
                "{long} keys, scores ((37·j) mod 23)/4 − 3, key j visible unless j mod 7 = 3, \
                 values (j mod 5) − 2"
            ),
            (0..long).map(|j| ((37 * j) % 23) as f32 / 4.0 - 3.0).collect(),
            (0..long).map(|j| j % 7 != 3).collect(),
            (0..long).map(|j| (j % 5) as f32 - 2.0).collect(),
            "a longer row",
        ),
    ];
    for (name, scores, visible, values, why) in cases {
        let expected = softmax_average(&scores, &visible, &values);
        let what = format!("online_row({name})");
        let got = call(&what, || online_row(&scores, &visible, &values))?;
        if !near(f64::from(got), expected, 1e-5) {
            return Err(format!(
                "{what} returned {got}, expected {expected:.7} = Σ softmax · v over the \
                 visible keys ({why}; the check allows 1e-5)"
            ));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 14.4 ([`tiled_reads`]): `⌈l / block_q⌉ · 2 · l · d`, worked
/// out in the check, for the chapter's shapes (`L = 1024, 4096`, `d = 64`, blocks of 64), a
/// length that blocks do not divide, a single block, and a small case to do by hand.
///
/// ```
/// use exercises::ch14::{check_tiled_reads, tiled_reads};
///
/// assert_eq!(check_tiled_reads(tiled_reads), Ok(()));
/// // K and V read once, as if every workgroup shared a single copy.
/// assert!(check_tiled_reads(|l, d, _| 2 * (l * d) as u64).is_err());
/// ```
pub fn check_tiled_reads(
    tiled_reads: impl Fn(usize, usize, usize) -> u64,
) -> Result<(), String> {
    for (l, d, block_q) in [
        (5, 3, 2),
        (1024, 64, 64),
        (4096, 64, 64),
        (1000, 64, 64),
        (100, 8, 128),
        (300, 16, 32),
    ] {
        let groups = (0..l).step_by(block_q).count() as u64;
        let expected = groups * 2 * (l * d) as u64;
        let what = format!("tiled_reads({l}, {d}, {block_q})");
        let got = call(&what, || tiled_reads(l, d, block_q))?;
        if got != expected {
            return Err(format!(
                "{what} returned {got}, expected {expected}: each of the ⌈{l}/{block_q}⌉ = \
                 {groups} workgroups reads all {l} rows of K and all {l} rows of V, {d} \
                 numbers each"
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
    fn pack_mask_row_passes_and_classic_mistakes_fail() {
        assert_eq!(check_pack_mask_row(pack_mask_row), Ok(()));
        // The bits from the most significant one down, as a row is written on paper.
        let msb_first = |allowed: &[bool]| {
            let mut words = vec![0u32; allowed.len().div_ceil(32)];
            for (j, &ok) in allowed.iter().enumerate() {
                words[j / 32] |= u32::from(ok) << (31 - j % 32);
            }
            words
        };
        rejects(
            check_pack_mask_row(msb_first),
            "pack_mask_row([true, false, true]) returned [0xa0000000], expected [0x00000005]: \
             key 0 is bit 0",
        );
        // ⌊L / 32⌋ words: the keys after the last full word are dropped.
        let floor = |allowed: &[bool]| pack_mask_row(&allowed[..allowed.len() / 32 * 32]);
        rejects(
            check_pack_mask_row(floor),
            "pack_mask_row([true, false, true]) returned [], expected [0x00000005]: a row of \
             3 keys takes ⌈3/32⌉ = 1 words, not 0",
        );
        // ... which is right where L is a multiple of 32: the rows of 40 keys and 33 fail too.
        let floor_past_a_word = |allowed: &[bool]| {
            if allowed.len() > 32 { floor(allowed) } else { pack_mask_row(allowed) }
        };
        rejects(
            check_pack_mask_row(floor_past_a_word),
            "pack_mask_row(40 keys, keys 0 to 35 visible (causal, query 35)) returned \
             [0xffffffff], expected [0xffffffff, 0x0000000f]",
        );
        let floor_words = |allowed: &[bool]| {
            let mut words = vec![0u32; allowed.len() / 32];
            for (j, &ok) in allowed.iter().enumerate() {
                words[j / 32] |= u32::from(ok) << (j % 32); // out of bounds past the last word
            }
            words
        };
        rejects(
            check_pack_mask_row(floor_words),
            "pack_mask_row([true, false, true]) panicked",
        );
        // One word per key.
        let per_key = |allowed: &[bool]| allowed.iter().map(|&ok| u32::from(ok)).collect();
        rejects(check_pack_mask_row(per_key), "3 keys takes ⌈3/32⌉ = 1 words, not 3");
        // The polarity flipped: a bit for each blocked key.
        let blocked = |allowed: &[bool]| {
            pack_mask_row(&allowed.iter().map(|&ok| !ok).collect::<Vec<_>>())
        };
        rejects(check_pack_mask_row(blocked), "key 0 is bit 0 of word 0");
        // The unused bits of the last word set: ! of the blocked keys' words.
        let padded_with_ones =
            |allowed: &[bool]| blocked(allowed).iter().map(|w| !w).collect();
        rejects(check_pack_mask_row(padded_with_ones), "the bits past key 2 must be 0");
    }

    #[test]
    fn workgroups_passes_and_classic_mistakes_fail() {
        assert_eq!(check_workgroups(workgroups), Ok(()));
        // Another correct answer.
        assert_eq!(check_workgroups(|l_q, block_q| (l_q + block_q - 1) / block_q), Ok(()));
        // Rounding down: the short last block is lost.
        rejects(
            check_workgroups(|l_q, block_q| l_q / block_q),
            "workgroups(1000, 64) returned 15, expected 16: the blocks start at queries 0, \
             64, …, 960, and the last one holds queries 960 to 999 (40 of them)",
        );
        // One too many when the block divides l_q.
        rejects(
            check_workgroups(|l_q, block_q| l_q / block_q + 1),
            "workgroups(64, 64) returned 2",
        );
        // Rounded to the nearest: right for 1000/64 = 15.6, wrong for 65/64.
        let nearest =
            |l_q: usize, block_q: usize| (l_q as f64 / block_q as f64).round() as usize;
        rejects(check_workgroups(nearest), "workgroups(65, 64) returned 1");
        // One workgroup per query.
        rejects(check_workgroups(|l_q, _| l_q), "workgroups(64, 64) returned 64");
    }

    /// The online softmax with choices: where `m` starts, how masked keys are handled,
    /// whether the accumulator is rescaled and how the end divides.
    #[derive(Clone, Copy)]
    struct Online {
        /// `None`: the first visible key starts `m` (the `l = 0` flag); `Some(x)`: `m = x`.
        start: Option<f32>,
        /// `m` starts at the first key's score, visible or not.
        start_at_key_0: bool,
        /// `Some(x)`: a masked key's score becomes `x` instead of the key being skipped.
        sentinel: Option<f32>,
        rescale_acc: bool,
        guard_l: bool,
    }

    const RIGHT: Online = Online {
        start: None,
        start_at_key_0: false,
        sentinel: None,
        rescale_acc: true,
        guard_l: true,
    };

    impl Online {
        fn run(self, scores: &[f32], visible: &[bool], values: &[f32]) -> f32 {
            let mut m = self.start.unwrap_or(0.0);
            if self.start_at_key_0 {
                m = scores[0];
            }
            let (mut l, mut acc) = (0.0f32, 0.0f32);
            for ((&score, &ok), &v) in scores.iter().zip(visible).zip(values) {
                let s = match (ok, self.sentinel) {
                    (true, _) => score,
                    (false, Some(x)) => x,
                    (false, None) => continue,
                };
                if l == 0.0 && self.start.is_none() && !self.start_at_key_0 {
                    m = s;
                }
                let m_new = m.max(s);
                let rescale = (m - m_new).exp();
                let p = (s - m_new).exp();
                l = l * rescale + p;
                acc = if self.rescale_acc { acc * rescale } else { acc } + p * v;
                m = m_new;
            }
            if self.guard_l && l == 0.0 { 0.0 } else { acc / l }
        }
    }

    #[test]
    fn online_row_passes_and_classic_mistakes_fail() {
        assert_eq!(check_online_row(online_row), Ok(()));
        let check = |o: Online| check_online_row(move |s, ok, v| o.run(s, ok, v));
        assert_eq!(check(RIGHT), Ok(()));
        // Another correct answer on the CPU: m started at f32::MIN, the most negative finite
        // f32. f32::MIN − s rounds to f32::MIN (or to −∞ for s above about 1e31), whose exp is
        // 0, so the first visible key replaces it. A WGSL compiler may assume that no
        // arithmetic overflows to an infinity, which is why the kernels use the flag instead.
        assert_eq!(check(Online { start: Some(f32::MIN), ..RIGHT }), Ok(()));
        // m started at 0: far below 0 every p = exp(s − 0) underflows to 0, l stays 0.
        rejects(
            check(Online { start: Some(0.0), ..RIGHT }),
            "online_row(scores [-200, -201, -199.5], all visible, values [1, 2, 3]) \
             returned 0",
        );
        rejects(
            check(Online { start: Some(0.0), guard_l: false, ..RIGHT }),
            "values [1, 2, 3]) returned NaN",
        );
        // m started at key 0's score, masked or not: exp(0 − 500) underflows.
        rejects(
            check(Online { start_at_key_0: true, ..RIGHT }),
            "online_row(scores [500, 0, 1], visible [false, true, true], values [100, 1, 2]) \
             returned 0",
        );
        // Masked scores replaced by a finite sentinel instead of skipped: a row with no
        // visible key averages its values (each sentinel gets weight 1 / L).
        rejects(
            check(Online { sentinel: Some(f32::MIN), ..RIGHT }),
            "online_row(scores [0.5, 2], visible [false, false], values [1, 2]) returned 1.5",
        );
        rejects(
            check(Online { sentinel: Some(-1e9), ..RIGHT }),
            "visible [false, false], values [1, 2]) returned 1.5",
        );
        // l rescaled, the accumulator not.
        rejects(
            check(Online { rescale_acc: false, ..RIGHT }),
            "online_row(scores [0.5, -2, 4, 7.5, 1], all visible",
        );
        // acc / l with no guard: 0 / 0 for a row with no visible key.
        rejects(
            check(Online { guard_l: false, ..RIGHT }),
            "visible [false, false], values [1, 2]) returned NaN",
        );
    }

    #[test]
    fn tiled_reads_passes_and_classic_mistakes_fail() {
        assert_eq!(check_tiled_reads(tiled_reads), Ok(()));
        // The chapter's example: L = 4096, d = 64, 64 workgroups.
        assert_eq!(tiled_reads(4096, 64, 64), 64 * 2 * 4096 * 64);
        // K and V counted once, as if the workgroups shared them.
        rejects(
            check_tiled_reads(|l, d, _| 2 * (l * d) as u64),
            "tiled_reads(5, 3, 2) returned 30, expected 90: each of the ⌈5/2⌉ = 3 workgroups",
        );
        // ⌊l / block_q⌋ workgroups: the short last block reads nothing.
        let floor = |l: usize, d: usize, block_q: usize| (l / block_q * 2 * l * d) as u64;
        rejects(check_tiled_reads(floor), "tiled_reads(5, 3, 2) returned 60");
        // K only.
        let k_only = |l: usize, d: usize, block_q: usize| tiled_reads(l, d, block_q) / 2;
        rejects(check_tiled_reads(k_only), "tiled_reads(5, 3, 2) returned 45");
        // Once per query, as the naive kernel reads them.
        let per_query = |l: usize, d: usize, _: usize| (l * 2 * l * d) as u64;
        rejects(check_tiled_reads(per_query), "tiled_reads(5, 3, 2) returned 150");
    }
}
