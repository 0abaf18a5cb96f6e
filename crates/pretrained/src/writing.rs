//! Chapter 16, *Writing, token by token*: what the committed character model writes through
//! its KV cache, and what its heads do on held-out text. The chapter's example, its Check
//! block and the tests call these, so that the numbers the text quotes come from one place;
//! they are compiled here, in a crate the book optimises even in debug builds (see
//! [`gpt2::write`](crate::gpt2::write)).
//!
//! Everything here runs on the exact path ([`Exact`]), so it gives the same bits on every
//! machine.

use ndarray::{Array2, Array3, Axis, s};

use attention::gpt::data::{CharVocab, train_and_validation};
use attention::gpt::generate::Writer;
use attention::gpt::heads::{
    Pattern, ablation, pattern_scores, repeated_random, uniform_baseline,
};
use attention::gpt::kernels::Exact;
use attention::gpt::ops::cross_entropy;
use attention::gpt::sample::Sampler;
use attention::gpt::weights::Gpt;
use rand::{SeedableRng, rngs::StdRng};

use crate::error::Result;

/// What [`write_with`] wrote, and how often the writer ran a prefill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The characters written after the prompt.
    pub text: String,
    /// The prefills the writer ran: the prompt's, and one at every restart of the window
    /// (the last character written is drawn, not yet run through the model).
    pub prefills: usize,
}

/// What `gpt` writes after `prompt`: `n` characters chosen by `sampler` with a generator
/// seeded by `seed`, through the KV cache (`cache`) or by a full pass per character, on the
/// exact path, so the same text on every machine and either way. An error names a prompt
/// character the vocabulary lacks, or a prompt longer than the model's context.
///
/// ```
/// use attention::gpt::sample::Sampler;
/// use pretrained::{gpt2, shakespeare_dir, writing};
///
/// let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
/// let w = writing::write_with(&gpt, &vocab, "ROMEO:\n", 12, &Sampler::default(), 0, true).unwrap();
/// assert_eq!(w.text, gpt2::write(&gpt, &vocab, "ROMEO:\n", 12, 0).unwrap()); // chapter 15's
/// assert_eq!(w.prefills, 1);
/// ```
pub fn write_with(
    gpt: &Gpt<f32>,
    vocab: &CharVocab,
    prompt: &str,
    n: usize,
    sampler: &Sampler,
    seed: u64,
    cache: bool,
) -> Result<Written> {
    let prompt = vocab.encode(prompt)?;
    let mut writer = Writer::new(gpt, &Exact, &prompt, cache)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut prefills = 1;
    for written in 1..=n {
        let before = writer.window().len();
        writer.next(sampler, &mut rng)?;
        // The window starts again from its last half when the character just drawn goes
        // through the model, at the start of the next call: only if there is one.
        if writer.window().len() <= before && written < n {
            prefills += 1;
        }
    }
    Ok(Written { text: vocab.decode(&writer.text()[prompt.len()..]), prefills })
}

/// The held-out text the head study reads: the first `count` windows of 64 characters of the
/// validation text of `corpus` (its last 10 %, as the `train` tool splits it), as ids.
///
/// ```
/// use attention::gpt::data::CharVocab;
///
/// let corpus = "abcdefghij".repeat(100);
/// let vocab = CharVocab::from_text(&corpus).unwrap();
/// let ids = pretrained::writing::held_out(&vocab, &corpus, 1).unwrap();
/// assert_eq!(vocab.decode(&ids[..3]), "abc"); // the validation text: the last 100
/// assert!(pretrained::writing::held_out(&vocab, &corpus, 2).is_err()); // 100 < 128
/// ```
pub fn held_out(vocab: &CharVocab, corpus: &str, count: usize) -> Result<Vec<usize>> {
    let ids = vocab.encode(corpus)?;
    let validation = train_and_validation(&ids).1;
    if validation.len() < 64 * count {
        return Err(attention::AttentionError::Invalid {
            what: "corpus".into(),
            problem: format!(
                "its validation text has {} characters, fewer than {count} windows of 64",
                validation.len()
            ),
        }
        .into());
    }
    Ok(validation[..64 * count].to_vec())
}

/// Every head's score for one pattern, and an even spread's.
#[derive(Debug, Clone)]
pub struct PatternScores {
    /// The pattern.
    pub pattern: Pattern,
    /// `(n_layer, n_head)`: each head's weight on the pattern's keys, averaged over queries.
    pub scores: Array2<f64>,
    /// What a head that spreads its weight evenly over the keys it sees would score.
    pub even: f64,
}

impl PatternScores {
    /// The best head `(block, head)` and its score (the first, in block and head order, on
    /// a tie).
    ///
    /// ```
    /// use attention::gpt::heads::Pattern;
    /// use ndarray::array;
    /// use pretrained::writing::PatternScores;
    ///
    /// let p = PatternScores { pattern: Pattern::Sink, scores: array![[0.1, 0.3], [0.3, 0.2]], even: 0.1 };
    /// assert_eq!(p.best(), ((0, 1), 0.3));
    /// ```
    pub fn best(&self) -> ((usize, usize), f64) {
        self.scores
            .indexed_iter()
            .fold(((0, 0), f64::NEG_INFINITY), |b, (at, &v)| if v > b.1 { (at, v) } else { b })
    }
}

/// What chapter 16 measures of the committed model's heads.
#[derive(Debug, Clone)]
pub struct HeadStudy {
    /// Previous character, word start, speaker and sink on the held-out text, then prefix
    /// matching on random strings of letters written twice.
    pub patterns: Vec<PatternScores>,
    /// The mean loss per letter of the random strings: on their first half, and on the copy.
    pub halves: (f64, f64),
    /// `(n_layer, n_head)`: how much the held-out loss rises without each head.
    pub rise: Array2<f64>,
    /// The held-out loss with every head.
    pub loss: f64,
}

/// Random strings for the copying test: 50 strings of 32 letters, each written twice.
pub const REPEATED: (usize, usize) = (50, 32);

/// Measures the heads of `gpt` as chapter 16 does: the four text patterns on the first 100
/// held-out windows ([`held_out`]), prefix matching on [`REPEATED`] random strings of the
/// letters a to z written twice (seed 0), the loss on those strings' two halves, and the
/// loss each head's removal costs on the held-out windows. Exact path; some seconds.
///
/// ```no_run
/// use pretrained::{gpt2, shakespeare_dir, writing};
///
/// let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
/// let corpus = std::fs::read_to_string("data/shakespeare/input.txt").unwrap();
/// let study = writing::head_study(&gpt, &vocab, &corpus).unwrap();
/// assert_eq!(study.patterns[0].best().0, (1, 0)); // the previous character: block 1, head 0
/// ```
pub fn head_study(gpt: &Gpt<f32>, vocab: &CharVocab, corpus: &str) -> Result<HeadStudy> {
    let ids = held_out(vocab, corpus, 100)?;
    let texts: Vec<(Vec<usize>, Vec<char>)> = ids
        .chunks_exact(64)
        .map(|w| (w.to_vec(), vocab.decode(w).chars().collect()))
        .collect();
    let mut patterns = Vec::new();
    for pattern in Pattern::ON_TEXT {
        patterns.push(measure(gpt, &texts, pattern)?);
    }
    let letters: Vec<char> = ('a'..='z').collect();
    let twice = repeated_random(&letters, REPEATED.0, REPEATED.1, 0)
        .into_iter()
        .map(|c| Ok((vocab.encode(&c.iter().collect::<String>())?, c)))
        .collect::<Result<Vec<_>>>()?;
    patterns.push(measure(gpt, &twice, Pattern::PrefixMatch)?);
    let halves = halves_loss(gpt, &twice)?;
    let (rise, loss) = ablation(gpt, &Exact, &ids)?;
    Ok(HeadStudy { patterns, halves, rise, loss })
}

fn measure(
    gpt: &Gpt<f32>,
    texts: &[(Vec<usize>, Vec<char>)],
    pattern: Pattern,
) -> Result<PatternScores> {
    let chars: Vec<Vec<char>> = texts.iter().map(|(_, c)| c.clone()).collect();
    Ok(PatternScores {
        pattern,
        scores: pattern_scores(gpt, &Exact, texts, pattern)?,
        even: uniform_baseline(&chars, pattern),
    })
}

/// The mean loss predicting the characters of each text's first half (from its second
/// character) and of its second half, the copy.
fn halves_loss(gpt: &Gpt<f32>, texts: &[(Vec<usize>, Vec<char>)]) -> Result<(f64, f64)> {
    let (mut first, mut second) = (0.0, 0.0);
    for (ids, _) in texts {
        let (l, half) = (ids.len(), ids.len() / 2);
        let x = Array2::from_shape_vec((1, l - 1), ids[..l - 1].to_vec()).expect("one row");
        let logits = gpt.logits_with(&Exact, &x.view())?;
        let logits = logits.slice(s![0, .., ..]);
        // row i predicts ids[i + 1]
        first += cross_entropy(&logits.slice(s![..half - 1, ..]), &ids[1..half])?.0;
        second += cross_entropy(&logits.slice(s![half - 1.., ..]), &ids[half..])?.0;
    }
    let n = texts.len() as f64;
    Ok((first / n, second / n))
}

/// Every block's attention weights `(n_head, L, L)` when `gpt` reads `text` (at most
/// `block_size` characters) in one causal pass, on the exact path: what the chapter's head
/// view draws.
///
/// ```
/// use pretrained::{gpt2, shakespeare_dir, writing};
///
/// let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
/// let weights = writing::attention_on(&gpt, &vocab, "ROMEO:\n").unwrap();
/// assert_eq!((weights.len(), weights[0].dim()), (4, (4, 7, 7)));
/// assert_eq!(weights[2][[1, 0, 0]], 1.0); // the first character sees only itself
/// assert!(writing::attention_on(&gpt, &vocab, &"a".repeat(65)).is_err()); // 64 positions
/// ```
pub fn attention_on(
    gpt: &Gpt<f32>,
    vocab: &CharVocab,
    text: &str,
) -> Result<Vec<Array3<f32>>> {
    let ids = vocab.encode(text)?;
    let x = Array2::from_shape_vec((1, ids.len()), ids).expect("one row");
    let weights = gpt.attention_weights_with(&Exact, &x.view())?;
    Ok(weights.into_iter().map(|w| w.index_axis_move(Axis(0), 0)).collect())
}
