//! The data: a [`Batch`] of sequences with what each position should predict, the two
//! [`Task`]s that draw them, and what a model without positions can reach on them
//! ([`position_blind_ceiling`], [`most_common_token_baseline`]).
//!
//! Anchors (below the doc comments): `batch_new`, `batch_check`, `tasks`, `task_len`,
//! `task_vocab`, `task_check`, `reversal`, `task_sources`, `induction`, `task_targets`,
//! `task_sequence`, `task_batch`, `task_probe`, `ceiling`.

use std::collections::BTreeSet;

use ndarray::Array2;
use rand::Rng;
use rand::seq::SliceRandom;

use super::{Score, invalid_setting};
use crate::error::{AttentionError, Result};

/// A batch of sequences and what each position should predict.
///
/// ```
/// use attention::learn::{Batch, Task};
/// use ndarray::array;
///
/// let task = Task::Reversal { len: 3, vocab: 4 };
/// let batch = Batch::new(&task, &[vec![1, 2, 3], vec![0, 0, 2]]).unwrap();
/// assert_eq!(batch.tokens, array![[1, 2, 3], [0, 0, 2]]);
/// assert_eq!(batch.targets, [3, 2, 1, 2, 0, 0].map(Some));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// `(batch, L)`: the token ids.
    pub tokens: Array2<usize>,
    /// `batch · L` entries, row-major (item by item): the target of each position, `None`
    /// where the position is not scored.
    pub targets: Vec<Option<usize>>,
}

impl Batch {
    /// A batch of the given sequences (each of the task's length), with the task's targets.
    ///
    /// ```
    /// use attention::learn::{Batch, Task};
    ///
    /// let task = Task::Reversal { len: 3, vocab: 4 };
    /// assert!(Batch::new(&task, &[vec![1, 2]]).is_err()); // length 2, not 3
    /// assert!(Batch::new(&task, &[vec![1, 2, 4]]).is_err()); // token 4 is not below 4
    /// ```
    // ANCHOR: batch_new
    pub fn new(task: &Task, sequences: &[Vec<usize>]) -> Result<Batch> {
        task.check()?;
        let len = task.len();
        let mut tokens = Array2::zeros((sequences.len(), len));
        let mut targets = Vec::with_capacity(sequences.len() * len);
        for (b, seq) in sequences.iter().enumerate() {
            targets.extend(task.targets(seq)?);
            tokens.row_mut(b).assign(&ndarray::aview1(seq));
        }
        Ok(Batch { tokens, targets })
    }
    // ANCHOR_END: batch_new

    /// The number of sequences.
    ///
    /// ```
    /// use attention::learn::{Batch, Task};
    ///
    /// let task = Task::Reversal { len: 2, vocab: 2 };
    /// assert_eq!(Batch::new(&task, &[vec![0, 1], vec![1, 1]]).unwrap().len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.tokens.nrows()
    }

    /// Whether the batch holds no sequence.
    ///
    /// ```
    /// use attention::learn::{Batch, Task};
    ///
    /// assert!(Batch::new(&Task::Reversal { len: 2, vocab: 2 }, &[]).unwrap().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that there is one target per token: `targets.len() = batch · L` (the fields
    /// are public, so a batch built by hand can break it).
    ///
    /// ```
    /// use attention::learn::Batch;
    /// use ndarray::array;
    ///
    /// let batch = Batch { tokens: array![[0, 1, 2], [2, 1, 0]], targets: vec![None; 5] };
    /// assert_eq!(
    ///     batch.check().unwrap_err().to_string(),
    ///     "targets has shape [5] but batch · L = 2 · 3 = 6 entries were expected"
    /// );
    /// ```
    // ANCHOR: batch_check
    pub fn check(&self) -> Result<()> {
        let (b, len) = self.tokens.dim();
        if self.targets.len() != b * len {
            let expected =
                format!("batch · L = {b} · {len} = {} entries were expected", b * len);
            return Err(AttentionError::shape("targets", &[self.targets.len()], &expected));
        }
        Ok(())
    }
    // ANCHOR_END: batch_check
}

/// A synthetic task: how sequences are drawn and what each position should predict.
///
/// ```
/// use attention::learn::Task;
///
/// let reversal = Task::Reversal { len: 5, vocab: 4 };
/// assert_eq!(reversal.targets(&[0, 1, 2, 3, 3]).unwrap(), [3, 3, 2, 1, 0].map(Some));
/// let induction = Task::Induction { len: 6, vocab: 8, prefix: 4 };
/// assert_eq!(
///     induction.targets(&[5, 1, 7, 2, 7, 5]).unwrap(),
///     [None, None, None, None, Some(2), Some(1)]
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
// ANCHOR: tasks
pub enum Task {
    /// Reverse the sequence: the target at position `i` is the token at `len − 1 − i`.
    /// Tokens are drawn independently and uniformly from `0..vocab`.
    Reversal {
        /// The sequence length `L`.
        len: usize,
        /// The number of tokens.
        vocab: usize,
    },
    /// Induction: at a token that occurred before, predict the token that followed its
    /// previous occurrence; other positions are not scored. A sequence is `prefix`
    /// distinct tokens, then `len − prefix` distinct queries, each a token of the prefix
    /// other than its last (so its successor is in the prefix), in random order.
    Induction {
        /// The sequence length `L`.
        len: usize,
        /// The number of tokens.
        vocab: usize,
        /// How many distinct tokens open the sequence.
        prefix: usize,
    },
}
// ANCHOR_END: tasks

impl Task {
    /// The sequence length `L`.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Reversal { len: 9, vocab: 4 }.len(), 9);
    /// ```
    // ANCHOR: task_len
    pub fn len(&self) -> usize {
        match *self {
            Task::Reversal { len, .. } | Task::Induction { len, .. } => len,
        }
    }
    // ANCHOR_END: task_len

    /// Whether sequences are empty (`L = 0`; [`Task::check`] rejects that).
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert!(!Task::Reversal { len: 9, vocab: 4 }.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of tokens.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Induction { len: 12, vocab: 16, prefix: 8 }.vocab(), 16);
    /// ```
    // ANCHOR: task_vocab
    pub fn vocab(&self) -> usize {
        match *self {
            Task::Reversal { vocab, .. } | Task::Induction { vocab, .. } => vocab,
        }
    }
    // ANCHOR_END: task_vocab

    /// Checks the settings: `len ≥ 1`, `vocab ≥ 2`; for induction also
    /// `2 ≤ prefix ≤ vocab`, `prefix < len` (at least one query, so that something is
    /// scored) and `len − prefix ≤ prefix − 1` (enough distinct queries).
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert!(Task::Induction { len: 12, vocab: 16, prefix: 8 }.check().is_ok());
    /// let err = Task::Induction { len: 12, vocab: 16, prefix: 6 }.check().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "induction task: len − prefix = 6 queries need prefix ≥ 7, but prefix = 6"
    /// );
    /// let err = Task::Induction { len: 8, vocab: 16, prefix: 8 }.check().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "induction task: prefix = 8 must be at least 2, at most vocab = 16 and below \
    ///      len = 8"
    /// );
    /// ```
    // ANCHOR: task_check
    pub fn check(&self) -> Result<()> {
        let (len, vocab) = (self.len(), self.vocab());
        if len == 0 {
            return Err(AttentionError::Empty { what: "task".into(), dim: "L" });
        }
        if vocab < 2 {
            return Err(invalid_setting(
                "task",
                format!("vocab must be at least 2, but it is {vocab}"),
            ));
        }
        if let Task::Induction { prefix, .. } = *self {
            let what = "induction task";
            if !(2..=vocab).contains(&prefix) || prefix >= len {
                let problem = format!(
                    "prefix = {prefix} must be at least 2, at most vocab = {vocab} and \
                     below len = {len}"
                );
                return Err(invalid_setting(what, problem));
            }
            if len - prefix > prefix - 1 {
                let (q, p) = (len - prefix, prefix);
                let problem = format!(
                    "len − prefix = {q} queries need prefix ≥ {}, but prefix = {p}",
                    q + 1
                );
                return Err(invalid_setting(what, problem));
            }
        }
        Ok(())
    }
    // ANCHOR_END: task_check

    /// Where the answer of every position of `tokens` is: the position whose token is the
    /// target (`None` = the position is not scored). This is the task's rule, and the
    /// attention pattern that solves it: a model that puts all its weight there and copies
    /// what it finds is right. An error when the length is not `L` or a token is not below
    /// `vocab`.
    ///
    /// Reversal: position `L − 1 − i`. Induction: position `i` is scored when `tokens[i]`
    /// occurred before, at `j < i` (the latest such `j`), and its answer is at `j + 1`.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Reversal { len: 4, vocab: 2 }.sources(&[0, 0, 1, 1]).unwrap(),
    ///            [3, 2, 1, 0].map(Some));
    /// let task = Task::Induction { len: 5, vocab: 4, prefix: 3 };
    /// let sources = task.sources(&[3, 0, 2, 3, 0]).unwrap();
    /// assert_eq!(sources, [None, None, None, Some(1), Some(2)]);
    /// assert!(task.sources(&[3, 0, 2]).is_err());
    /// ```
    // ANCHOR: reversal
    // ANCHOR: task_sources
    pub fn sources(&self, tokens: &[usize]) -> Result<Vec<Option<usize>>> {
        let (len, vocab) = (self.len(), self.vocab());
        if tokens.len() != len {
            return Err(AttentionError::mismatch("tokens", tokens.len(), "task", len, "L"));
        }
        if let Some(&id) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(AttentionError::TokenId { id, size: vocab });
        }
        Ok(match self {
            Task::Reversal { .. } => (0..len).map(|i| Some(len - 1 - i)).collect(),
            // ANCHOR_END: reversal
            // ANCHOR: induction
            Task::Induction { .. } => (0..len)
                .map(|i| {
                    let previous = (0..i).rev().find(|&j| tokens[j] == tokens[i])?;
                    Some(previous + 1) // the token after the previous occurrence
                })
                .collect(),
            // ANCHOR_END: induction
            // ANCHOR: reversal
        })
    }
    // ANCHOR_END: task_sources

    // ANCHOR_END: reversal
    /// The target of every position of `tokens`: the token at its
    /// [source](Task::sources), `None` where the position is not scored.
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// let task = Task::Induction { len: 5, vocab: 4, prefix: 3 };
    /// let targets = task.targets(&[3, 0, 2, 3, 0]).unwrap();
    /// assert_eq!(targets, [None, None, None, Some(0), Some(2)]);
    /// ```
    // ANCHOR: reversal
    // ANCHOR: task_targets
    pub fn targets(&self, tokens: &[usize]) -> Result<Vec<Option<usize>>> {
        let sources = self.sources(tokens)?;
        Ok(sources.into_iter().map(|source| source.map(|j| tokens[j])).collect())
    }
    // ANCHOR_END: task_targets
    // ANCHOR_END: reversal

    /// One random sequence of the task, drawn from `rng`.
    ///
    /// Reversal: `L` tokens, each `rng.random_range(0..vocab)`. Induction: the prefix is
    /// the first `prefix` entries of a shuffle of `0..vocab`; the queries are the first
    /// `len − prefix` entries of a shuffle of the prefix's positions `0..prefix − 1`. An
    /// error when the settings fail [`Task::check`].
    ///
    /// ```
    /// use attention::learn::Task;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let task = Task::Induction { len: 10, vocab: 12, prefix: 6 };
    /// let seq = task.sequence(&mut StdRng::seed_from_u64(3)).unwrap();
    /// let scored = task.targets(&seq).unwrap().iter().flatten().count();
    /// assert_eq!((seq.len(), scored), (10, 4)); // every query is scored
    /// let no_prefix = Task::Induction { len: 10, vocab: 12, prefix: 0 };
    /// assert!(no_prefix.sequence(&mut StdRng::seed_from_u64(3)).is_err());
    /// ```
    // ANCHOR: task_sequence
    pub fn sequence<R: Rng + ?Sized>(&self, rng: &mut R) -> Result<Vec<usize>> {
        self.check()?;
        Ok(match *self {
            Task::Reversal { len, vocab } => {
                (0..len).map(|_| rng.random_range(0..vocab)).collect()
            }
            Task::Induction { len, vocab, prefix } => {
                let mut tokens: Vec<usize> = (0..vocab).collect();
                tokens.shuffle(rng);
                tokens.truncate(prefix);
                let mut picks: Vec<usize> = (0..prefix - 1).collect();
                picks.shuffle(rng);
                let queries: Vec<usize> =
                    picks[..len - prefix].iter().map(|&j| tokens[j]).collect();
                tokens.extend(queries);
                tokens
            }
        })
    }
    // ANCHOR_END: task_sequence

    /// `n` random sequences and their targets; sequences in `exclude` (the held-out set)
    /// are drawn again, so that training never sees them.
    ///
    /// ```
    /// use attention::learn::Task;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let task = Task::Reversal { len: 7, vocab: 4 };
    /// let batch = task.batch(32, &mut StdRng::seed_from_u64(0), None).unwrap();
    /// assert_eq!((batch.tokens.dim(), batch.targets.len()), ((32, 7), 32 * 7));
    /// ```
    // ANCHOR: task_batch
    pub fn batch<R: Rng + ?Sized>(
        &self,
        n: usize,
        rng: &mut R,
        exclude: Option<&BTreeSet<Vec<usize>>>,
    ) -> Result<Batch> {
        self.check()?;
        let mut sequences = Vec::with_capacity(n);
        let mut draws = 0usize;
        while sequences.len() < n {
            draws += 1;
            if draws > 1000 * (n + 1) {
                let problem = "almost every sequence drawn is excluded (held out)".into();
                return Err(invalid_setting("training batch", problem));
            }
            let seq = self.sequence(rng)?;
            if !exclude.is_some_and(|set| set.contains(&seq)) {
                sequences.push(seq);
            }
        }
        Batch::new(self, &sequences)
    }
    // ANCHOR_END: task_batch

    /// A fixed input whose attention the chapter draws: reversal, the tokens `i mod vocab`;
    /// induction, the prefix `0, 1, …, prefix − 1` followed by the queries
    /// `0, 1, …, len − prefix − 1` in order (so the right pattern is easy to read: a
    /// diagonal stripe). An error when the settings fail [`Task::check`].
    ///
    /// ```
    /// use attention::learn::Task;
    ///
    /// assert_eq!(Task::Reversal { len: 5, vocab: 4 }.probe().unwrap(), [0, 1, 2, 3, 0]);
    /// let induction = Task::Induction { len: 7, vocab: 8, prefix: 4 };
    /// assert_eq!(induction.probe().unwrap(), [0, 1, 2, 3, 0, 1, 2]);
    /// assert!(Task::Induction { len: 7, vocab: 8, prefix: 9 }.probe().is_err());
    /// ```
    // ANCHOR: task_probe
    pub fn probe(&self) -> Result<Vec<usize>> {
        self.check()?;
        Ok(match *self {
            Task::Reversal { len, vocab } => (0..len).map(|i| i % vocab).collect(),
            Task::Induction { len, prefix, .. } => {
                (0..prefix).chain(0..len - prefix).collect()
            }
        })
    }
    // ANCHOR_END: task_probe
}

/// The most a position-blind model can score on `batch`, for any task: an upper bound.
///
/// Without positions every layer is permutation-equivariant, so two positions of one
/// sequence holding the same token are the same row all the way through and get the same
/// answer. For each sequence and each token `t` in it, the best that one answer can do is
/// the most common target among the scored positions holding `t`:
/// `Σ_t max_o #{i : x_i = t, target_i = o}`, summed over the sequences. An error when the
/// batch fails [`Batch::check`].
///
/// ```
/// use attention::learn::{position_blind_ceiling, Batch, Task};
///
/// let task = Task::Reversal { len: 5, vocab: 4 };
/// // 0 1 2 1 0 is its own reverse: every position can be right.
/// // 0 1 2 3 1: the two 1s want 3 and 0; the 0 wants 1, 2 is the middle, 3 wants 1.
/// let batch = Batch::new(&task, &[vec![0, 1, 2, 1, 0], vec![0, 1, 2, 3, 1]]).unwrap();
/// let ceiling = position_blind_ceiling(&batch).unwrap();
/// assert_eq!((ceiling.correct, ceiling.scored), (5 + 4, 10));
/// ```
// ANCHOR: ceiling
pub fn position_blind_ceiling(batch: &Batch) -> Result<Score> {
    batch.check()?; // one target per token
    let len = batch.tokens.ncols();
    let mut score = Score { correct: 0, scored: 0 };
    for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
        let targets = &batch.targets[b * len..(b + 1) * len];
        // (token, target) pairs of the scored positions, sorted: equal pairs are adjacent.
        let mut pairs: Vec<(usize, usize)> =
            seq.iter().zip(targets).filter_map(|(&t, o)| Some((t, (*o)?))).collect();
        pairs.sort_unstable();
        score.scored += pairs.len();
        let mut i = 0;
        while i < pairs.len() {
            let token = pairs[i].0;
            let mut best = 0; // the largest count of one target among this token's positions
            while i < pairs.len() && pairs[i].0 == token {
                let run = pairs[i..].iter().take_while(|&&p| p == pairs[i]).count();
                best = best.max(run);
                i += run;
            }
            score.correct += best;
        }
    }
    Ok(score)
}
// ANCHOR_END: ceiling

/// The score of a simple position-blind strategy: answer every position of a sequence with
/// the sequence's most common token (the lowest id on a tie). It is computed the same way
/// for any batch, task and `L`; an error only when the batch fails [`Batch::check`].
///
/// For reversal with an **odd** `L` and independent, uniform tokens it is the best any
/// position-blind model can expect. Such a model answers a function `o(t)` of the token `t`
/// and of the sequence's bag of tokens, which all orders of the bag share, and every order
/// is equally likely. With `c_t` = how many times `t` occurs, a position other than the
/// middle holds `t` while its mirror holds `o` with probability
/// `c_t·(c_o − [o = t])/(L·(L − 1))`; the middle of an odd `L` is its own mirror and holds
/// `t` with probability `c_t/L`. Summed over the `L − 1` others and the middle, the
/// expected number of positions holding `t` whose mirror holds `o` is `c_t·c_o/L`, so the
/// expected score is `Σ_t c_t·c_{o(t)}/L²`, largest when every `o(t)` is the most common
/// token: `c_max/L`.
///
/// For an **even** `L` there is no middle and that count is `c_t·(c_o − [o = t])/(L − 1)`:
/// a token's own copies count one less, and answering another token can do better. On the
/// bag `{0, 0, 1, 1}` this strategy expects 1/2 (`c_max/L`), while answering `1 − t`
/// expects 2/3. The function then still returns this strategy's score, which is no longer
/// the best expectation. (On a finite set a model can also beat an expectation by luck;
/// [`position_blind_ceiling`] is the bound that always holds.)
///
/// ```
/// use attention::learn::{most_common_token_baseline, Batch, Task};
///
/// let task = Task::Reversal { len: 5, vocab: 4 };
/// let batch = Batch::new(&task, &[vec![0, 1, 2, 1, 0], vec![3, 1, 2, 3, 3]]).unwrap();
/// // Answer 0 everywhere in the first (2 right: the two 0s mirror each other), 3 in the
/// // second (its mirror targets are 3, 3, 2, 1, 3).
/// let score = most_common_token_baseline(&batch).unwrap();
/// assert_eq!((score.correct, score.scored), (2 + 3, 10));
/// ```
pub fn most_common_token_baseline(batch: &Batch) -> Result<Score> {
    batch.check()?;
    let len = batch.tokens.ncols();
    let mut score = Score { correct: 0, scored: 0 };
    for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
        let answer = most_common(seq.iter().copied());
        for target in batch.targets[b * len..(b + 1) * len].iter().flatten() {
            score.scored += 1;
            score.correct += usize::from(*target == answer);
        }
    }
    Ok(score)
}

/// The most common token of `tokens` (the lowest id on a tie; 0 when empty).
fn most_common(tokens: impl IntoIterator<Item = usize>) -> usize {
    let mut sorted: Vec<usize> = tokens.into_iter().collect();
    sorted.sort_unstable(); // equal tokens are adjacent, lower ids first
    let (mut answer, mut most, mut i) = (0, 0, 0);
    while i < sorted.len() {
        let run = sorted[i..].iter().take_while(|&&t| t == sorted[i]).count();
        if run > most {
            (answer, most) = (sorted[i], run);
        }
        i += run;
    }
    answer
}
