//! Chapter *A model that writes*: characters as tokens, and batches of text to learn from.
//!
//! The vocabulary of a character-level model is the set of characters its corpus uses,
//! sorted: every character is a token, its id its rank. A batch is `B` windows of `T + 1`
//! characters drawn at random offsets; each window gives `T` inputs and, shifted by one, the
//! `T` characters that follow them.
//!
//! Anchors (below the doc comments): `char_vocab`, `batch`.

use ndarray::Array2;
use rand::Rng;

use crate::error::{AttentionError, Result};

/// The characters of a corpus, sorted; a character's id is its rank.
///
/// ```
/// use attention::gpt::data::CharVocab;
///
/// let vocab = CharVocab::from_text("to be, or not").unwrap();
/// assert_eq!(vocab.chars().iter().collect::<String>(), " ,benort");
/// let ids = vocab.encode("be not").unwrap();
/// assert_eq!(ids, vec![2, 3, 0, 4, 5, 7]);
/// assert_eq!(vocab.decode(&ids), "be not");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
// ANCHOR: char_vocab
pub struct CharVocab {
    chars: Vec<char>, // sorted, each once
}

impl CharVocab {
    /// The vocabulary of `text`: each character it uses, once, in order. An error if the
    /// text is empty.
    ///
    /// ```
    /// use attention::gpt::data::CharVocab;
    ///
    /// assert_eq!(CharVocab::from_text("abba").unwrap().chars(), &['a', 'b']);
    /// assert!(CharVocab::from_text("").is_err());
    /// ```
    pub fn from_text(text: &str) -> Result<Self> {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        if chars.is_empty() {
            return Err(AttentionError::Empty { what: "text".into(), dim: "characters" });
        }
        Ok(CharVocab { chars })
    }

    /// The id of every character of `text`; an error names the first character the
    /// vocabulary does not have.
    ///
    /// ```
    /// use attention::gpt::data::CharVocab;
    ///
    /// let vocab = CharVocab::from_text("ab").unwrap();
    /// assert_eq!(vocab.encode("ba").unwrap(), vec![1, 0]);
    /// assert_eq!(
    ///     vocab.encode("abc").unwrap_err().to_string(),
    ///     "text: character 'c' at 2 is not in the vocabulary"
    /// );
    /// ```
    pub fn encode(&self, text: &str) -> Result<Vec<usize>> {
        text.chars()
            .enumerate()
            .map(|(i, c)| {
                self.chars.binary_search(&c).map_err(|_| AttentionError::Invalid {
                    what: "text".into(),
                    problem: format!("character {c:?} at {i} is not in the vocabulary"),
                })
            })
            .collect()
    }

    /// The characters of `ids` (an id outside the vocabulary becomes `�`).
    ///
    /// ```
    /// use attention::gpt::data::CharVocab;
    ///
    /// assert_eq!(CharVocab::from_text("ab").unwrap().decode(&[1, 0, 7]), "ba\u{fffd}");
    /// ```
    pub fn decode(&self, ids: &[usize]) -> String {
        ids.iter().map(|&i| self.chars.get(i).copied().unwrap_or('\u{fffd}')).collect()
    }
    // ANCHOR_END: char_vocab

    /// A vocabulary of the given characters, which must be sorted and distinct.
    ///
    /// ```
    /// use attention::gpt::data::CharVocab;
    ///
    /// assert!(CharVocab::from_chars(vec!['a', 'b']).is_ok());
    /// assert_eq!(
    ///     CharVocab::from_chars(vec!['b', 'a']).unwrap_err().to_string(),
    ///     "vocabulary: characters must be sorted and distinct, but 'a' follows 'b'"
    /// );
    /// ```
    pub fn from_chars(chars: Vec<char>) -> Result<Self> {
        if chars.is_empty() {
            return Err(AttentionError::Empty {
                what: "vocabulary".into(),
                dim: "characters",
            });
        }
        if let Some(w) = chars.windows(2).find(|w| w[0] >= w[1]) {
            return Err(AttentionError::Invalid {
                what: "vocabulary".into(),
                problem: format!(
                    "characters must be sorted and distinct, but {:?} follows {:?}",
                    w[1], w[0]
                ),
            });
        }
        Ok(CharVocab { chars })
    }

    /// The characters, in id order.
    ///
    /// ```
    /// use attention::gpt::data::CharVocab;
    ///
    /// assert_eq!(CharVocab::from_text("ba").unwrap().chars(), &['a', 'b']);
    /// ```
    // ANCHOR: vocab_chars
    pub fn chars(&self) -> &[char] {
        &self.chars
    }
    // ANCHOR_END: vocab_chars

    /// The number of characters, `V`.
    ///
    /// ```
    /// use attention::gpt::data::CharVocab;
    ///
    /// assert_eq!(CharVocab::from_text("hello").unwrap().len(), 4);
    /// ```
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.chars.len()
    }
}

/// `batch` windows of `t` ids and the `t` ids that follow each, from offsets drawn uniformly
/// in `0 .. len − t` (every window and its shifted twin fit in `ids`), as nanoGPT draws
/// them. Returns `(inputs, targets)`, both `(batch, t)`; an error if `ids` is shorter than
/// `t + 1`.
///
/// ```
/// use attention::gpt::data::batch;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let ids: Vec<usize> = (0..10).collect();
/// let (x, y) = batch(&ids, 3, 4, &mut StdRng::seed_from_u64(0)).unwrap();
/// assert_eq!(x.dim(), (3, 4));
/// assert_eq!(&y - &x, ndarray::Array2::ones((3, 4))); // each target is the next id
/// assert!(batch(&ids, 1, 10, &mut StdRng::seed_from_u64(0)).is_err());
/// ```
// ANCHOR: batch
pub fn batch<R: Rng + ?Sized>(
    ids: &[usize],
    batch: usize,
    t: usize,
    rng: &mut R,
) -> Result<(Array2<usize>, Array2<usize>)> {
    if ids.len() < t + 1 {
        return Err(AttentionError::Invalid {
            what: "corpus".into(),
            problem: format!(
                "{} tokens, fewer than one window of {} and its target",
                ids.len(),
                t + 1
            ),
        });
    }
    let mut inputs = Array2::zeros((batch, t));
    let mut targets = Array2::zeros((batch, t));
    for b in 0..batch {
        let start = rng.random_range(0..ids.len() - t);
        for i in 0..t {
            inputs[[b, i]] = ids[start + i];
            targets[[b, i]] = ids[start + i + 1];
        }
    }
    Ok((inputs, targets))
}
// ANCHOR_END: batch

/// nanoGPT's split of a corpus: the first 90 % of its ids to train on, the last 10 % (from
/// index `len · 9 / 10`, rounded down) to measure the validation loss on. The `train` tool,
/// the chapter's example and the reference script all cut here.
///
/// ```
/// use attention::gpt::data::train_and_validation;
///
/// let ids: Vec<usize> = (0..25).collect();
/// let (train, validation) = train_and_validation(&ids);
/// assert_eq!((train.len(), validation[0]), (22, 22)); // 25 · 9 / 10 = 22.5, rounded down
/// ```
pub fn train_and_validation<T>(ids: &[T]) -> (&[T], &[T]) {
    ids.split_at(ids.len() * 9 / 10)
}
