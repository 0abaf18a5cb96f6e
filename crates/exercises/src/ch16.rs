//! Chapter 16, *Writing, token by token*: the tokens top-p keeps, how many prefills the writer
//! runs, and the score of a head that spreads its weight evenly.

use attention::gpt::config::GptConfig;
use attention::gpt::generate::Writer;
use attention::gpt::heads::{Pattern, uniform_baseline};
use attention::gpt::kernels::Exact;
use attention::gpt::sample::Sampler;
use attention::gpt::weights::Gpt;
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::call;

/// Exercise 16.1: the nucleus. The indices of the tokens top-p keeps from the probabilities
/// `probs` (which sum to 1): the most probable first (the lower index first on a tie), until
/// their probabilities reach `p` (in `(0, 1]`), the token that crosses `p` included.
///
/// ```
/// use exercises::ch16::nucleus;
///
/// assert_eq!(nucleus(&[0.5, 0.3, 0.2], 0.6), [0, 1]); // 0.5 is short of 0.6: 1 crosses it
/// assert_eq!(nucleus(&[0.5, 0.3, 0.2], 0.5), [0]); // 0.5 reaches 0.5
/// ```
// ANCHOR: nucleus
pub fn nucleus(probs: &[f64], p: f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..probs.len()).collect();
    // the most probable first; on a tie, the lower index (a stable sort keeps it first)
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    let mut kept = Vec::new();
    let mut mass = 0.0;
    for i in order {
        kept.push(i); // kept before the test: the token that crosses p stays
        mass += probs[i];
        if mass >= p {
            break;
        }
    }
    kept
}
// ANCHOR_END: nucleus

/// Exercise 16.2: how many prefills the chapter's writer runs, the prompt's included, to write
/// `written` characters after a prompt of `prompt` characters (`1 ≤ prompt ≤ block_size`,
/// `block_size ≥ 2`). The prompt's prefill predicts the first character; each later one is
/// drawn from the prediction after the character before it, which joins the window. When the
/// window would hold more than `block_size`, the writer keeps its last `block_size / 2`
/// characters (rounded down) and runs them through the model again: a prefill.
///
/// ```
/// use exercises::ch16::prefills;
///
/// assert_eq!(prefills(16, 5, 12), 1); // the 12th is drawn after a full window of 16
/// assert_eq!(prefills(16, 5, 13), 2); // the 13th after 17, which do not fit: the last 8
/// ```
// ANCHOR: prefills
pub fn prefills(block_size: usize, prompt: usize, written: usize) -> usize {
    let (mut window, mut count) = (prompt, 1); // the prompt's prefill predicts the first
    for _ in 1..written {
        // the character before the next one joins the window
        window += 1;
        if window > block_size {
            window = block_size / 2; // the last half, the new character included
            count += 1;
        }
    }
    count
}
// ANCHOR_END: prefills

/// Exercise 16.3: an even spread's score. `targets[i]` lists the keys (each at most `i`) a
/// pattern names for the query at position `i`. Under the causal mask that query sees the
/// `i + 1` keys `0..=i`; a head that spreads its weight evenly over them puts
/// `targets[i].len() / (i + 1)` on the pattern's keys. Return the mean of that share over the
/// queries with at least one target.
///
/// ```
/// use exercises::ch16::even_spread;
///
/// // the previous character of a text of 3: queries 1 and 2 have one target each
/// assert_eq!(even_spread(&[vec![], vec![0], vec![1]]), (1.0 / 2.0 + 1.0 / 3.0) / 2.0);
/// ```
// ANCHOR: even_spread
pub fn even_spread(targets: &[Vec<usize>]) -> f64 {
    let shares: Vec<f64> = (targets.iter().enumerate())
        .filter(|(_, keys)| !keys.is_empty()) // a query the pattern says nothing about
        .map(|(i, keys)| keys.len() as f64 / (i + 1) as f64)
        .collect();
    shares.iter().sum::<f64>() / shares.len() as f64
}
// ANCHOR_END: even_spread

/// The nucleus, computed another way: a token is kept when the tokens more probable than it
/// (before it in the order) hold less than `p`.
fn reference_nucleus(probs: &[f64], p: f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].partial_cmp(&probs[a]).unwrap().then(a.cmp(&b)));
    let mut before = 0.0;
    let mut kept = Vec::new();
    for i in order {
        if before < p {
            kept.push(i);
        }
        before += probs[i];
    }
    kept
}

/// Checks an answer to exercise 16.1 ([`nucleus`]): the chapter's example (`0.5, 0.3, 0.2`
/// with `p = 0.6` and `p = 0.5`), the most probable token last in index order, a first token
/// that alone passes `p`, ties, `p = 1`, and 200 seeded random distributions against the
/// nucleus computed another way.
///
/// ```
/// use exercises::ch16::{check_nucleus, nucleus};
///
/// assert_eq!(check_nucleus(nucleus), Ok(()));
/// // Without the crossing token: 0.5, 0.3, 0.2 and p = 0.6 would keep the first alone.
/// let short = |probs: &[f64], p: f64| {
///     let mut kept = nucleus(probs, p);
///     if kept.iter().map(|&i| probs[i]).sum::<f64>() > p { kept.pop(); }
///     kept
/// };
/// assert!(check_nucleus(short).is_err());
/// ```
pub fn check_nucleus(nucleus: impl Fn(&[f64], f64) -> Vec<usize>) -> Result<(), String> {
    let mut cases: Vec<(Vec<f64>, f64, &str)> = vec![
        (
            vec![0.5, 0.3, 0.2],
            0.6,
            "0.5 is short of 0.6, so the second token crosses it and stays",
        ),
        (
            vec![0.5, 0.3, 0.2],
            0.5,
            "the first token alone reaches 0.5: the nucleus is complete",
        ),
        (vec![0.2, 0.3, 0.5], 0.6, "the most probable token comes first, whatever its index"),
        (vec![0.9, 0.05, 0.05], 0.5, "the first token alone passes 0.5, and it is kept"),
        (vec![0.25; 4], 0.5, "on a tie the lower index comes first"),
        (vec![0.6, 0.4, 0.0], 1.0, "a token of probability 0 is not needed to reach 1"),
        (vec![0.1, 0.2, 0.3, 0.4], 1.0, "p = 1 keeps every token that has a probability"),
    ];
    let mut rng = StdRng::seed_from_u64(16);
    for _ in 0..200 {
        let raw: Vec<f64> = (0..8).map(|_| rng.random::<f64>().powi(3)).collect();
        let total: f64 = raw.iter().sum();
        let p = [0.1, 0.3, 0.7, 0.9, 0.95][rng.random_range(0..5)];
        cases.push((raw.iter().map(|r| r / total).collect(), p, "a random distribution"));
    }
    for (probs, p, why) in cases {
        let expected = reference_nucleus(&probs, p);
        let what = format!("nucleus(&{probs:?}, {p})");
        let got = call(&what, || nucleus(&probs, p))?;
        if got != expected {
            return Err(format!("{what} returned {got:?}, expected {expected:?}: {why}"));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 16.2 ([`prefills`]) against the crate's `Writer`, run on a
/// small model for every prompt length and up to 60 characters, for context lengths 2, 7
/// (odd: the last 3 are kept), 12 and 16, and against the chapter's count for 64 positions,
/// a prompt of 1 and 200 characters.
///
/// ```
/// use exercises::ch16::{check_prefills, prefills};
///
/// assert_eq!(check_prefills(prefills), Ok(()));
/// // The prompt's own prefill forgotten.
/// assert!(check_prefills(|b, p, n| prefills(b, p, n) - 1).is_err());
/// ```
pub fn check_prefills(prefills: impl Fn(usize, usize, usize) -> usize) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(0);
    for block_size in [2, 7, 12, 16] {
        let config = GptConfig {
            n_layer: 1,
            n_embd: 8,
            n_head: 2,
            block_size,
            ..GptConfig::shakespeare(5)
        };
        let gpt = Gpt::<f64>::zeros(config);
        for prompt in 1..=block_size {
            let tokens: Vec<usize> = (0..prompt).map(|i| i % 5).collect();
            let mut writer =
                Writer::new(&gpt, &Exact, &tokens, true).map_err(|e| e.to_string())?;
            // The writer is lazy: the character drawn by one call goes through the model at
            // the start of the next, so a restart seen after call n runs in call n + 1.
            let (mut expected, mut pending) = (1, 0);
            for written in 0..=60 {
                if written > 0 {
                    expected += pending;
                    let before = writer.window().len();
                    writer.next(&Sampler::greedy(), &mut rng).map_err(|e| e.to_string())?;
                    pending = usize::from(writer.window().len() <= before);
                }
                let what = format!("prefills({block_size}, {prompt}, {written})");
                let got = call(&what, || prefills(block_size, prompt, written))?;
                if got != expected {
                    return Err(format!(
                        "{what} returned {got}, expected {expected} (the crate's Writer): the \
                         window starts again from its last {} when it would hold {}",
                        block_size / 2,
                        block_size + 1
                    ));
                }
            }
        }
    }
    let got = call("prefills(64, 1, 200)", || prefills(64, 1, 200))?;
    if got != 6 {
        return Err(format!(
            "prefills(64, 1, 200) returned {got}, expected 6: the prompt's, then a restart at \
             the 65th character and every 33rd after it"
        ));
    }
    Ok(())
}

/// Checks an answer to exercise 16.3 ([`even_spread`]): small hand-made cases (one key per
/// query, several keys per query, queries without targets) and the crate's own
/// `uniform_baseline` on a passage of a play, for every pattern.
///
/// ```
/// use exercises::ch16::{check_even_spread, even_spread};
///
/// assert_eq!(check_even_spread(even_spread), Ok(()));
/// // The causal mask forgotten: 1/L for every query.
/// assert!(check_even_spread(|t: &[Vec<usize>]| 1.0 / t.len() as f64).is_err());
/// ```
pub fn check_even_spread(even_spread: impl Fn(&[Vec<usize>]) -> f64) -> Result<(), String> {
    let text: Vec<char> =
        "\nJULIET:\nO Romeo, Romeo,\nwherefore art thou Romeo?\n\nROMEO:\nI take \
                           thee at thy word."
            .chars()
            .collect();
    let mut cases: Vec<(Vec<Vec<usize>>, f64, String)> = vec![
        (
            vec![vec![], vec![0], vec![1], vec![2]],
            (1.0 / 2.0 + 1.0 / 3.0 + 1.0 / 4.0) / 3.0,
            "query i sees i + 1 keys; query 0 has no target and is left out".into(),
        ),
        (
            vec![vec![], vec![], vec![0, 1], vec![0, 1, 2]],
            (2.0 / 3.0 + 3.0 / 4.0) / 2.0,
            "a query whose pattern names several keys gets a share for each".into(),
        ),
        (vec![vec![0], vec![], vec![], vec![]], 1.0, "query 0 sees one key".into()),
    ];
    for pattern in [Pattern::Previous, Pattern::WordStart, Pattern::Speaker, Pattern::Sink] {
        let targets: Vec<Vec<usize>> =
            (0..text.len()).map(|i| pattern.targets(&text, i)).collect();
        let expected = uniform_baseline(&[text.clone()], pattern);
        cases.push((
            targets,
            expected,
            format!("the {pattern:?} pattern on a passage of a play"),
        ));
    }
    for (targets, expected, why) in cases {
        let what = format!("even_spread(&{targets:?})");
        let got = call(&what, || even_spread(&targets))?;
        if !((got - expected).abs() <= 1e-12) {
            return Err(format!("{what} returned {got}, expected {expected}: {why}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn nucleus_passes_and_classic_mistakes_fail() {
        assert_eq!(check_nucleus(nucleus), Ok(()));
        // Without the crossing token: stop before the token that would pass p.
        let without_crossing = |probs: &[f64], p: f64| {
            let mut kept = vec![];
            let mut mass = 0.0;
            let mut order: Vec<usize> = (0..probs.len()).collect();
            order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
            for i in order {
                if mass + probs[i] > p {
                    break;
                }
                mass += probs[i];
                kept.push(i);
            }
            kept
        };
        rejects(check_nucleus(without_crossing), "0.6) returned [0], expected [0, 1]");
        // A strict > at the crossing: 0.5 alone does not "pass" 0.5.
        let strict = |probs: &[f64], p: f64| {
            let mut order: Vec<usize> = (0..probs.len()).collect();
            order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
            let mut mass = 0.0;
            let mut kept = vec![];
            for i in order {
                kept.push(i);
                mass += probs[i];
                if mass > p {
                    break;
                }
            }
            kept
        };
        rejects(check_nucleus(strict), "the first token alone reaches 0.5");
        // The tokens in index order.
        let by_index = |probs: &[f64], p: f64| {
            let mut mass = 0.0;
            let mut kept = vec![];
            for (i, &q) in probs.iter().enumerate() {
                kept.push(i);
                mass += q;
                if mass >= p {
                    break;
                }
            }
            kept
        };
        rejects(check_nucleus(by_index), "whatever its index");
        // An empty nucleus when the best token alone passes p.
        let empty = |probs: &[f64], p: f64| {
            let kept = nucleus(probs, p);
            if probs[kept[0]] > p { vec![] } else { kept }
        };
        rejects(check_nucleus(empty), "alone passes 0.5");
    }

    #[test]
    fn prefills_passes_and_classic_mistakes_fail() {
        assert_eq!(check_prefills(prefills), Ok(()));
        // Starting again with the whole context: a restart at every character after.
        let full = |block: usize, prompt: usize, written: usize| {
            let (mut w, mut n) = (prompt, 1);
            for _ in 1..written {
                w += 1;
                if w > block {
                    w = block;
                    n += 1;
                }
            }
            n
        };
        rejects(check_prefills(full), "returned 3, expected 2");
        // One character early: a text of exactly block_size fits.
        let early = |block: usize, prompt: usize, written: usize| {
            let (mut w, mut n) = (prompt, 1);
            for _ in 1..written {
                w += 1;
                if w >= block {
                    w = block / 2;
                    n += 1;
                }
            }
            n
        };
        rejects(check_prefills(early), "prefills(2, 1, 2) returned 2, expected 1");
        // The prompt's prefill forgotten.
        rejects(
            check_prefills(|b, p, n| prefills(b, p, n) - 1),
            "prefills(2, 1, 0) returned 0",
        );
        // Half of block_size + 1: the same for even sizes, not for 7.
        let half_up = |block: usize, prompt: usize, written: usize| {
            let (mut w, mut n) = (prompt, 1);
            for _ in 1..written {
                w += 1;
                if w > block {
                    w = block.div_ceil(2);
                    n += 1;
                }
            }
            n
        };
        rejects(check_prefills(half_up), "prefills(7, ");
    }

    #[test]
    fn even_spread_passes_and_classic_mistakes_fail() {
        assert_eq!(check_even_spread(even_spread), Ok(()));
        // The causal mask forgotten: every query sees all L keys.
        let all_keys = |t: &[Vec<usize>]| {
            let shares: Vec<f64> = (t.iter())
                .filter(|k| !k.is_empty())
                .map(|k| k.len() as f64 / t.len() as f64)
                .collect();
            shares.iter().sum::<f64>() / shares.len() as f64
        };
        rejects(check_even_spread(all_keys), "query i sees i + 1 keys");
        // Queries without a target counted as zeros.
        let zeros = |t: &[Vec<usize>]| {
            (t.iter().enumerate()).map(|(i, k)| k.len() as f64 / (i + 1) as f64).sum::<f64>()
                / t.len() as f64
        };
        rejects(check_even_spread(zeros), "is left out");
        // 1/(i + 1) whatever the number of keys.
        let one_key = |t: &[Vec<usize>]| {
            let shares: Vec<f64> = (t.iter().enumerate())
                .filter(|(_, k)| !k.is_empty())
                .map(|(i, _)| 1.0 / (i + 1) as f64)
                .collect();
            shares.iter().sum::<f64>() / shares.len() as f64
        };
        rejects(check_even_spread(one_key), "a share for each");
    }
}
