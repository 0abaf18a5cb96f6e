//! Chapter *Input embeddings*: from a sentence to the matrix `X: (L, d_model)`.
//!
//! A [`Vocabulary`] turns words into token ids; an [`EmbeddingTable`] turns token ids into
//! rows of `X`. Row `i` of `X` is the embedding of the `i`-th token of the sentence, so a
//! sentence of `L` tokens becomes an `(L, d_model)` matrix.
//!
//! Anchors: `vocabulary`, `embedding_lookup`, `the_cat_sat`, `random_matrix`, `embedding_new`
//! (chapter *Inside a real model*). They sit below
//! the doc comments, so the book shows the code and the doctests stay here.

use std::collections::HashMap;

use ndarray::{Array2, Axis};
use ndarray_rand::RandomExt;
use rand::Rng;
use rand_distr::StandardNormal;

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::notebooks;

/// An ordered list of words; a word's token id is its position in the list.
///
/// ```
/// use attention::embeddings::Vocabulary;
///
/// let vocab = Vocabulary::from_sentence("my name is Aj");
/// assert_eq!(vocab.len(), 4);
/// assert_eq!(vocab.encode("is my name").unwrap(), vec![2, 0, 1]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
// ANCHOR: vocabulary
pub struct Vocabulary {
    words: Vec<String>,
    ids: HashMap<String, usize>,
}

impl Vocabulary {
    // ANCHOR_END: vocabulary
    /// A vocabulary of the given words, in order; a repeated word keeps its first id.
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// let vocab = Vocabulary::new(["the", "cat", "the", "mat"]);
    /// assert_eq!(vocab.words(), ["the", "cat", "mat"]);
    /// ```
    // ANCHOR: vocabulary
    pub fn new<I, S>(words: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut vocab = Vocabulary { words: Vec::new(), ids: HashMap::new() };
        for word in words {
            let word = word.into();
            if !vocab.ids.contains_key(&word) {
                vocab.ids.insert(word.clone(), vocab.words.len());
                vocab.words.push(word);
            }
        }
        vocab
    }

    // ANCHOR_END: vocabulary
    /// The words of a sentence, split on whitespace, in order of first appearance.
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// let vocab = Vocabulary::from_sentence("The cat sat");
    /// assert_eq!(vocab.id("cat"), Some(1));
    /// ```
    // ANCHOR: vocabulary
    pub fn from_sentence(sentence: &str) -> Self {
        Vocabulary::new(sentence.split_whitespace())
    }

    // ANCHOR_END: vocabulary
    /// The token id of a word, if it is in the vocabulary (the match is case-sensitive).
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// let vocab = Vocabulary::from_sentence("The cat sat");
    /// assert_eq!(vocab.id("sat"), Some(2));
    /// assert_eq!(vocab.id("the"), None);
    /// ```
    // ANCHOR: vocabulary
    pub fn id(&self, word: &str) -> Option<usize> {
        self.ids.get(word).copied()
    }

    // ANCHOR_END: vocabulary
    /// The word with a given token id.
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// let vocab = Vocabulary::from_sentence("The cat sat");
    /// assert_eq!(vocab.word(0), Some("The"));
    /// assert_eq!(vocab.word(3), None);
    /// ```
    pub fn word(&self, id: usize) -> Option<&str> {
        self.words.get(id).map(String::as_str)
    }

    /// All words, in token-id order.
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// assert_eq!(Vocabulary::from_sentence("a b a").words(), ["a", "b"]);
    /// ```
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// The number of distinct words.
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// assert_eq!(Vocabulary::from_sentence("a b a").len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the vocabulary has no words.
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// assert!(Vocabulary::from_sentence("   ").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Splits a sentence on whitespace and maps every word to its token id.
    ///
    /// Fails with [`AttentionError::UnknownWord`] on a word the vocabulary does not have.
    ///
    /// ```
    /// use attention::embeddings::Vocabulary;
    ///
    /// let vocab = Vocabulary::from_sentence("The cat sat");
    /// assert_eq!(vocab.encode("sat The").unwrap(), vec![2, 0]);
    /// assert_eq!(
    ///     vocab.encode("The dog").unwrap_err().to_string(),
    ///     "the word \"dog\" is not in the vocabulary"
    /// );
    /// ```
    // ANCHOR: vocabulary
    pub fn encode(&self, sentence: &str) -> Result<Vec<usize>> {
        sentence
            .split_whitespace()
            .map(|word| {
                self.id(word).ok_or_else(|| AttentionError::UnknownWord { word: word.into() })
            })
            .collect()
    }
}
// ANCHOR_END: vocabulary

/// A lookup table with one row of length `d_model` per token id: shape
/// `(vocab_size, d_model)`.
///
/// ```
/// use attention::embeddings::EmbeddingTable;
/// use ndarray::array;
///
/// let table = EmbeddingTable::new(array![[1.0, 0.0], [0.0, 1.0]]).unwrap();
/// let x = table.lookup(&[1, 1, 0]).unwrap();
/// assert_eq!(x, array![[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: embedding_lookup
pub struct EmbeddingTable<A> {
    table: Array2<A>,
}

impl<A: Float> EmbeddingTable<A> {
    // ANCHOR_END: embedding_lookup
    /// A table from a hand-written matrix `(vocab_size, d_model)`; neither may be 0.
    ///
    /// ```
    /// use attention::embeddings::EmbeddingTable;
    /// use ndarray::Array2;
    ///
    /// assert!(EmbeddingTable::new(Array2::<f64>::zeros((3, 4))).is_ok());
    /// assert!(EmbeddingTable::new(Array2::<f64>::zeros((3, 0))).is_err());
    /// ```
    // ANCHOR: embedding_new
    pub fn new(table: Array2<A>) -> Result<Self> {
        let (vocab_size, d_model) = table.dim();
        if vocab_size == 0 {
            return Err(AttentionError::Empty {
                what: "embedding table".into(),
                dim: "vocab_size",
            });
        }
        if d_model == 0 {
            return Err(AttentionError::Empty {
                what: "embedding table".into(),
                dim: "d_model",
            });
        }
        Ok(EmbeddingTable { table })
    }
    // ANCHOR_END: embedding_new

    /// A table of standard-normal entries drawn from `rng` (seed it for reproducible runs).
    ///
    /// The samples are drawn as `f64` and rounded to `A`, so an `f32` table and an `f64`
    /// table from the same seed hold the same numbers up to rounding.
    ///
    /// ```
    /// use attention::embeddings::EmbeddingTable;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let a = EmbeddingTable::<f64>::random(10, 4, &mut StdRng::seed_from_u64(7)).unwrap();
    /// let b = EmbeddingTable::<f64>::random(10, 4, &mut StdRng::seed_from_u64(7)).unwrap();
    /// assert_eq!(a, b);
    /// assert_eq!(a.table().dim(), (10, 4));
    /// ```
    pub fn random<R: Rng + ?Sized>(
        vocab_size: usize,
        d_model: usize,
        rng: &mut R,
    ) -> Result<Self> {
        EmbeddingTable::new(random_matrix(vocab_size, d_model, 1.0, rng))
    }

    /// The `(vocab_size, d_model)` matrix.
    ///
    /// ```
    /// use attention::embeddings::EmbeddingTable;
    ///
    /// assert_eq!(EmbeddingTable::the_cat_sat().1.table().dim(), (3, 4));
    /// ```
    pub fn table(&self) -> &Array2<A> {
        &self.table
    }

    /// The number of rows (token ids `0..vocab_size`).
    ///
    /// ```
    /// use attention::embeddings::EmbeddingTable;
    ///
    /// assert_eq!(EmbeddingTable::the_cat_sat().1.vocab_size(), 3);
    /// ```
    pub fn vocab_size(&self) -> usize {
        self.table.nrows()
    }

    /// The width of an embedding.
    ///
    /// ```
    /// use attention::embeddings::EmbeddingTable;
    ///
    /// assert_eq!(EmbeddingTable::the_cat_sat().1.d_model(), 4);
    /// ```
    pub fn d_model(&self) -> usize {
        self.table.ncols()
    }

    /// Stacks the rows of the given token ids: `X: (L, d_model)` with `L = ids.len()`.
    ///
    /// Fails on an empty sentence and on an id past the end of the table.
    ///
    /// ```
    /// use attention::embeddings::EmbeddingTable;
    ///
    /// let (vocab, table) = EmbeddingTable::the_cat_sat();
    /// let x = table.lookup(&vocab.encode("cat sat").unwrap()).unwrap();
    /// assert_eq!(x.row(0).to_vec(), [0.0, 1.0, 0.0, 1.0]);
    /// assert!(table.lookup(&[3]).is_err());
    /// assert!(table.lookup(&[]).is_err());
    /// ```
    // ANCHOR: embedding_lookup
    pub fn lookup(&self, ids: &[usize]) -> Result<Array2<A>> {
        if ids.is_empty() {
            return Err(AttentionError::Empty { what: "sentence".into(), dim: "L" });
        }
        let size = self.table.nrows(); // the vocabulary size: ids 0..size have a row
        if let Some(&id) = ids.iter().find(|&&id| id >= size) {
            return Err(AttentionError::TokenId { id, size });
        }
        Ok(self.table.select(Axis(0), ids))
    }
}
// ANCHOR_END: embedding_lookup

// ANCHOR: the_cat_sat
impl EmbeddingTable<f64> {
    // ANCHOR_END: the_cat_sat
    /// Notebook 000's hand-made example: the sentence "The cat sat" and its 3×4 table.
    ///
    /// ```
    /// use attention::embeddings::EmbeddingTable;
    ///
    /// let (vocab, table) = EmbeddingTable::the_cat_sat();
    /// let x = table.lookup(&vocab.encode("The cat sat").unwrap()).unwrap();
    /// assert_eq!(x, table.table());
    /// ```
    // ANCHOR: the_cat_sat
    pub fn the_cat_sat() -> (Vocabulary, EmbeddingTable<f64>) {
        let vocab = Vocabulary::from_sentence(notebooks::nb000::SENTENCE);
        let table = EmbeddingTable { table: ndarray::arr2(&notebooks::nb000::X) };
        (vocab, table)
    }
}
// ANCHOR_END: the_cat_sat

/// A `(rows, cols)` matrix of standard-normal samples times `scale`, drawn as `f64` from
/// `rng` and rounded to `A` (shared by the seeded constructors of the crate).
// ANCHOR: random_matrix
pub(crate) fn random_matrix<A: Float, R: Rng + ?Sized>(
    rows: usize,
    cols: usize,
    scale: f64,
    rng: &mut R,
) -> Array2<A> {
    Array2::<f64>::random_using((rows, cols), StandardNormal, rng)
        .mapv(|x| A::from_f64_lossy(x * scale))
}
// ANCHOR_END: random_matrix
