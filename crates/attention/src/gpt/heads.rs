//! Chapter *Writing, token by token*: what the trained model's heads do, found by
//! measurement as chapter 13 found BERT's.
//!
//! A head's *score* for a pattern is the weight it puts, on average over the queries the
//! pattern applies to, on the keys the pattern names ([`pattern_scores`]): 1 for a head that
//! does nothing else, and for a head that spreads its weight evenly over the `i + 1` keys
//! it sees, the share of the keys the pattern names ([`uniform_baseline`]). The patterns
//! ([`Pattern`]) are read from the characters of held-out text:
//!
//! - the previous character;
//! - the first character of the current word;
//! - the speaker's name, on the line `NAME:` that opens the current speech;
//! - the first position of the window (a *sink*, as chapter 13 found in BERT);
//! - on a random string written twice, the character after the current one's earlier
//!   occurrence: *prefix matching*, the mark of Olsson et al.'s induction heads (2022).
//!
//! What a head costs is measured by removing it ([`Gpt::without_head`]) and measuring the
//! loss again ([`ablation`]).
//!
//! Anchors (below the doc comments): `pattern`, `pattern_targets`, `pattern_scores`,
//! `without_head`, `repeated_random`.

use ndarray::{Array2, ArrayView2};
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::kernels::Kernels;
use super::train::evaluate;
use super::weights::Gpt;
use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};

/// Where a head might look, for query `i` of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// ANCHOR: pattern
pub enum Pattern {
    /// The character just before: key `i − 1`.
    Previous,
    /// The first character of the word `i` is in (after the last space or newline), if the
    /// word started before `i` and inside the window.
    WordStart,
    /// The characters of the speaker's name, on the line `NAME:` that opens the speech `i`
    /// is in (no blank line between), if that line is inside the window with the newline
    /// before it (so that the name is whole).
    Speaker,
    /// The first position of the window, key 0, for every `i ≥ 1`.
    Sink,
    /// On a text that repeats its first half, the character after the earlier occurrence of
    /// character `i`: key `i − half + 1`, for `i` in the second half.
    PrefixMatch,
}
// ANCHOR_END: pattern

impl Pattern {
    /// The patterns measured on held-out text (all but [`Pattern::PrefixMatch`], which
    /// needs a repeated text).
    ///
    /// ```
    /// use attention::gpt::heads::Pattern;
    ///
    /// assert_eq!(Pattern::ON_TEXT.len(), 4);
    /// ```
    pub const ON_TEXT: [Pattern; 4] =
        [Pattern::Previous, Pattern::WordStart, Pattern::Speaker, Pattern::Sink];

    /// The keys this pattern names for query `i` of `text` (empty where it does not apply).
    ///
    /// ```
    /// use attention::gpt::heads::Pattern;
    ///
    /// let text: Vec<char> = "\nROMEO:\nBut soft".chars().collect();
    /// assert_eq!(Pattern::Previous.targets(&text, 3), [2]);
    /// assert_eq!(Pattern::WordStart.targets(&text, 15), [12]); // "soft" starts at 12
    /// assert_eq!(Pattern::WordStart.targets(&text, 12), [] as [usize; 0]); // its first letter
    /// assert_eq!(Pattern::Speaker.targets(&text, 13), [1, 2, 3, 4, 5]); // "ROMEO"
    /// ```
    // ANCHOR: pattern_targets
    pub fn targets(&self, text: &[char], i: usize) -> Vec<usize> {
        let is_break = |c: char| c == ' ' || c == '\n';
        match self {
            Pattern::Previous | Pattern::Sink if i == 0 => vec![],
            Pattern::Previous => vec![i - 1],
            Pattern::Sink => vec![0],
            Pattern::WordStart => match text[..i].iter().rposition(|&c| is_break(c)) {
                Some(b) if !is_break(text[i]) && b + 1 < i => vec![b + 1],
                _ => vec![],
            },
            Pattern::Speaker => speaker(text, i),
            Pattern::PrefixMatch => {
                let half = text.len() / 2;
                if i >= half && i + 1 < text.len() { vec![i - half + 1] } else { vec![] }
            }
        }
    }
    // ANCHOR_END: pattern_targets
}

/// The positions of the speaker's name for query `i`: the line `NAME:` that opens the
/// speech `i` is in, found by going back line by line to a line that ends in `:` and is
/// preceded by a blank line or the window's start (no blank line on the way).
// ANCHOR: heads_plumbing
fn speaker(text: &[char], i: usize) -> Vec<usize> {
    // the line i is on starts after the last newline before it
    let mut end = match text[..i].iter().rposition(|&c| c == '\n') {
        Some(n) => n, // the newline ending the previous line
        None => return vec![],
    };
    if end + 1 == i && text[i] == '\n' {
        return vec![]; // i is a blank line: between speeches
    }
    loop {
        let start = text[..end].iter().rposition(|&c| c == '\n').map_or(0, |n| n + 1);
        if start == end {
            return vec![]; // a blank line: a new speech began after it, with no name
        }
        if text[end - 1] == ':' {
            // a whole name (a newline before it: the window may start inside one) that
            // opens a speech (a blank line before it, or the window's first line)
            let opens = start == 1 || (start >= 2 && text[start - 2] == '\n');
            return if opens { (start..end - 1).collect() } else { vec![] };
        }
        if start == 0 {
            return vec![];
        }
        end = start - 1;
    }
}
// ANCHOR_END: heads_plumbing

/// Every head's score for `pattern` over `texts` (each at most `block_size` characters,
/// as ids with their characters): `(n_layer, n_head)`, the weight on the pattern's keys
/// summed per query and averaged over every query the pattern applies to in every text.
/// Computed by the given [`Kernels`]. An error if no query has a target.
///
/// ```
/// use attention::gpt::{config::GptConfig, heads::{pattern_scores, Pattern}, kernels::Exact, weights::Gpt};
///
/// let gpt = Gpt::<f64>::zeros(GptConfig { n_layer: 1, n_embd: 8, n_head: 2, ..GptConfig::shakespeare(5) });
/// let text = vec![(vec![0, 1, 2, 3], vec!['a', 'b', 'c', 'd'])];
/// let scores = pattern_scores(&gpt, &Exact, &text, Pattern::Previous).unwrap();
/// // uniform weights: 1/2, 1/3, 1/4 on the previous key, averaged
/// assert!((scores[[0, 1]] - (1.0 / 2.0 + 1.0 / 3.0 + 1.0 / 4.0) / 3.0).abs() < 1e-12);
/// ```
// ANCHOR: pattern_scores
pub fn pattern_scores<A: Float, K: Kernels<A>>(
    gpt: &Gpt<A>,
    k: &K,
    texts: &[(Vec<usize>, Vec<char>)],
    pattern: Pattern,
) -> Result<Array2<f64>> {
    let c = &gpt.config;
    let mut sums = Array2::<f64>::zeros((c.n_layer, c.n_head));
    let mut queries = 0usize;
    for (ids, chars) in texts {
        let tokens = ArrayView2::from_shape((1, ids.len()), ids).expect("one row");
        let weights = gpt.attention_weights_with(k, &tokens)?; // per block (1, heads, T, T)
        for i in 0..ids.len() {
            let keys = pattern.targets(chars, i);
            if keys.is_empty() {
                continue;
            }
            queries += 1;
            for (l, w) in weights.iter().enumerate() {
                for h in 0..c.n_head {
                    sums[[l, h]] += keys.iter().map(|&j| to_f64(w[[0, h, i, j]])).sum::<f64>();
                }
            }
        }
    }
    if queries == 0 {
        return Err(AttentionError::Invalid {
            what: "texts".into(),
            problem: format!("no query of these texts has a {pattern:?} target"),
        });
    }
    Ok(sums / queries as f64)
}
// ANCHOR_END: pattern_scores

/// What a head that spreads its weight evenly over the keys it sees would score for
/// `pattern` on `texts`: the mean, over the queries the pattern applies to, of the share of
/// the `i + 1` keys it names. A score well above it is a head that looks there on purpose.
///
/// ```
/// use attention::gpt::heads::{uniform_baseline, Pattern};
///
/// let text: Vec<char> = "abc".chars().collect();
/// let sink = uniform_baseline(&[text], Pattern::Sink);
/// assert!((sink - (1.0 / 2.0 + 1.0 / 3.0) / 2.0).abs() < 1e-15); // queries 1 and 2
/// ```
pub fn uniform_baseline(texts: &[Vec<char>], pattern: Pattern) -> f64 {
    let shares: Vec<f64> = texts
        .iter()
        .flat_map(|t| {
            (0..t.len()).filter_map(move |i| {
                let keys = pattern.targets(t, i).len();
                (keys > 0).then(|| keys as f64 / (i + 1) as f64)
            })
        })
        .collect();
    shares.iter().sum::<f64>() / shares.len().max(1) as f64
}

/// `count` texts of a random string of `half` characters written twice, the characters
/// drawn evenly from `alphabet` with a generator seeded by `seed`: where only copying from
/// the first half can predict the second.
///
/// ```
/// use attention::gpt::heads::repeated_random;
///
/// let texts = repeated_random(&['a', 'b', 'c'], 2, 5, 0);
/// assert_eq!(texts[0].len(), 10);
/// assert_eq!(texts[0][..5], texts[0][5..]);
/// ```
// ANCHOR: repeated_random
pub fn repeated_random(
    alphabet: &[char],
    count: usize,
    half: usize,
    seed: u64,
) -> Vec<Vec<char>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let first: Vec<char> =
                (0..half).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect();
            first.iter().chain(&first).copied().collect()
        })
        .collect()
}
// ANCHOR_END: repeated_random

impl<A: Float> Gpt<A> {
    /// The model without head `head` of block `block`: its rows of the output projection
    /// `attn_proj` set to zero, so that nothing it computes reaches the residual stream
    /// (zero ablation, as chapter 13 removes BERT's heads).
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let gpt = Gpt::<f32>::init(GptConfig::shakespeare(71), &mut StdRng::seed_from_u64(0)).unwrap();
    /// let cut = gpt.without_head(1, 2).unwrap();
    /// assert!(cut.blocks[1].attn_proj.w.slice(ndarray::s![64..96, ..]).iter().all(|&w| w == 0.0));
    /// assert_eq!(cut.blocks[1].attn_proj.w.row(63), gpt.blocks[1].attn_proj.w.row(63));
    /// assert!(gpt.without_head(4, 0).is_err());
    /// ```
    // ANCHOR: without_head
    pub fn without_head(&self, block: usize, head: usize) -> Result<Gpt<A>> {
        let c = &self.config;
        if block >= c.n_layer || head >= c.n_head {
            return Err(AttentionError::Invalid {
                what: "head".into(),
                problem: format!(
                    "block {block}, head {head}: the model has {} blocks of {} heads",
                    c.n_layer, c.n_head
                ),
            });
        }
        let mut cut = self.clone();
        let rows = head * c.d_head()..(head + 1) * c.d_head();
        cut.blocks[block].attn_proj.w.slice_mut(ndarray::s![rows, ..]).fill(A::zero());
        Ok(cut)
    }
    // ANCHOR_END: without_head
}

/// How much the loss over `ids` (in nats per token, as [`evaluate`] measures it) rises when
/// each head is removed: `(n_layer, n_head)`, and the loss with every head.
///
/// ```
/// use attention::gpt::{config::GptConfig, heads::ablation, kernels::Exact, weights::Gpt};
///
/// // a model of zeros predicts evenly whatever its heads do: nothing to lose
/// let gpt = Gpt::<f64>::zeros(GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) });
/// let (rise, loss) = ablation(&gpt, &Exact, &[0, 1, 2, 3, 4, 0]).unwrap();
/// assert!((loss - 5f64.ln()).abs() < 1e-12 && rise.iter().all(|&r| r.abs() < 1e-12));
/// ```
pub fn ablation<A: Float, K: Kernels<A>>(
    gpt: &Gpt<A>,
    k: &K,
    ids: &[usize],
) -> Result<(Array2<f64>, f64)> {
    let c = &gpt.config;
    let full = evaluate(gpt, k, ids, 16)?;
    let mut rise = Array2::zeros((c.n_layer, c.n_head));
    for ((l, h), r) in rise.indexed_iter_mut() {
        *r = evaluate(&gpt.without_head(l, h)?, k, ids, 16)? - full;
    }
    Ok((rise, full))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn the_speaker_is_found_only_within_the_speech_and_whole() {
        let t = chars("\nJULIET:\nO Romeo,\nwherefore\n\nROMEO:\nI take thee");
        let romeo = 29; // "ROMEO"
        // a query in Juliet's second line: her name, the line before the previous one
        assert_eq!(Pattern::Speaker.targets(&t, 21), (1..7).collect::<Vec<_>>());
        // the blank line: no speech, no speaker
        assert!(Pattern::Speaker.targets(&t, 28).is_empty());
        // Romeo's speech: his name only
        assert_eq!(
            Pattern::Speaker.targets(&t, t.len() - 1),
            (romeo..romeo + 5).collect::<Vec<_>>()
        );
        // the name line itself has no speaker yet
        assert!(Pattern::Speaker.targets(&t, romeo + 2).is_empty());
        // a window that starts inside a name: not a whole name, not counted
        let cut = chars("MEO:\nI take thee");
        assert!(Pattern::Speaker.targets(&cut, 8).is_empty());
    }

    #[test]
    fn word_starts_and_prefix_matches() {
        let t = chars("to be or");
        assert_eq!(Pattern::WordStart.targets(&t, 4), [3]);
        assert!(Pattern::WordStart.targets(&t, 1).is_empty()); // "to" began before any break
        assert!(Pattern::WordStart.targets(&t, 5).is_empty()); // a space is in no word
        let twice = chars("abcabc");
        assert_eq!(Pattern::PrefixMatch.targets(&twice, 3), [1]); // after the first 'a': 'b'
        assert!(Pattern::PrefixMatch.targets(&twice, 5).is_empty()); // nothing after the last
        assert!(Pattern::PrefixMatch.targets(&twice, 2).is_empty()); // the first half
    }
}
