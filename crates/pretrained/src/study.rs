//! Measuring what a model's heads do (chapter *Inside a real model*): the chapter's example
//! and its Check block both call these, so the numbers the text quotes come from one place.
//!
//! A head is named `layer.head`, both counted from 0 (`0.2` is head 2 of the first layer).
//!
//! Anchors (below the doc comments): `run`, `run_tokens`, `head_scores`, `head_writes`,
//! `ablation`.

use ndarray::{Array2, Array3, ArrayRef2, Axis, s};

use attention::inspect::{Pattern, mean_entropy, pattern_score};
use attention::pooling::cosine_similarity;

use crate::error::{PretrainedError, Result};
use crate::{SentenceEncoder, Tokens};

/// One text through a model, alone: its tokens, every layer's weights `(heads, L, L)`, and
/// every layer's input `(L, d_model)` (for layer 0, the embeddings' output).
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let r = study::run(&encoder, "Hello world").unwrap();
/// assert_eq!(r.tokens.tokens, ["[CLS]", "hello", "world", "[SEP]"]);
/// assert_eq!((r.weights.len(), r.weights[0].dim()), (6, (12, 4, 4)));
/// assert_eq!(r.inputs[0].dim(), (4, 384));
/// ```
#[derive(Debug, Clone)]
pub struct Run {
    /// The text's tokens.
    pub tokens: Tokens,
    /// One `(heads, L, L)` array per layer.
    pub weights: Vec<Array3<f32>>,
    /// One `(L, d_model)` array per layer: what the layer's attention reads.
    pub inputs: Vec<Array2<f32>>,
}

/// Tokenizes `text` and runs it alone through the model.
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// assert!(study::run(&encoder, "").is_err());
/// ```
// ANCHOR: run
pub fn run(encoder: &SentenceEncoder, text: &str) -> Result<Run> {
    run_tokens(encoder, encoder.tokenizer().encode(text)?, 0)
}
// ANCHOR_END: run

/// As [`run`], for tokens given rather than made from a text (such as
/// [`Tokenizer::tokens_of`](crate::Tokenizer::tokens_of) of a sentence without its `[CLS]`),
/// with the positions' rows starting at `first`
/// ([`Bert::forward_from`](crate::Bert::forward_from)). [`run`] is this with the tokenizer's
/// own tokens and `first` = 0.
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let tokens = encoder.tokenizer().encode("Hello world").unwrap();
/// let same = study::run_tokens(&encoder, tokens.clone(), 0).unwrap();
/// assert_eq!(same.weights, study::run(&encoder, "Hello world").unwrap().weights);
/// let later = study::run_tokens(&encoder, tokens.clone(), 50).unwrap();
/// assert_ne!(later.weights, same.weights); // other position rows, other weights
/// let embedded = encoder.bert().embeddings().forward_from(&tokens.ids, 50).unwrap();
/// assert_eq!(later.inputs[0], embedded); // layer 0 reads positions 50, 51, 52, 53
/// assert!(study::run_tokens(&encoder, tokens, 510).is_err()); // past position 511
/// ```
// ANCHOR: run_tokens
pub fn run_tokens(encoder: &SentenceEncoder, tokens: Tokens, first: usize) -> Result<Run> {
    // Positions first .. first + L.
    let out = encoder.bert().forward_from(&[&tokens.ids], first)?;
    let item = |a: &Array3<f32>| a.index_axis(Axis(0), 0).to_owned();
    let weights = out.attentions.iter().map(|w| w.index_axis(Axis(0), 0).to_owned()).collect();
    let inputs = out.hidden_states[..out.attentions.len()].iter().map(item).collect();
    Ok(Run { tokens, weights, inputs })
}
// ANCHOR_END: run_tokens

/// `n` token ids drawn from `ids` by a seeded generator (SplitMix64, written out here so that
/// every machine draws the same ids; the remainder's bias towards low ids is below `1e-14`).
/// For all-MiniLM-L6-v2, `999..30522` holds the vocabulary's ordinary pieces: below 999 are
/// `[PAD]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]` and the `[unused…]` rows.
///
/// # Panics
///
/// If `ids` is empty.
///
/// ```
/// let ids = pretrained::study::random_ids(20, 999..30522, 13);
/// assert_eq!(ids.len(), 20);
/// assert!(ids.iter().all(|&id| (999..30522).contains(&id)));
/// assert_eq!(ids, pretrained::study::random_ids(20, 999..30522, 13)); // the same seed, the same ids
/// assert_ne!(ids, pretrained::study::random_ids(20, 999..30522, 14));
/// ```
pub fn random_ids(n: usize, ids: std::ops::Range<u32>, seed: u64) -> Vec<u32> {
    assert!(ids.start < ids.end, "no ids to draw from: {ids:?}");
    let (mut state, span) = (seed, u64::from(ids.end - ids.start));
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ids.start + (z % span) as u32
        })
        .collect()
}

/// How strongly every head follows `pattern` (see [`pattern_score`]), averaged over the runs:
/// `(layers, heads)`. A run in which the pattern applies to no query (no repeated word, for
/// [`Pattern::SameToken`]) does not count; a head with no such run scores 0.
///
/// ```
/// use attention::inspect::Pattern;
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let runs = [study::run(&encoder, "The cat sat on the mat.").unwrap()];
/// let previous = study::head_scores(&runs, Pattern::PreviousToken).unwrap();
/// assert!(previous[[0, 2]] > 0.99); // head 0.2 looks at the token before
/// assert!(study::head_scores(&[], Pattern::PreviousToken).is_err());
/// ```
// ANCHOR: head_scores
pub fn head_scores(runs: &[Run], pattern: Pattern) -> Result<Array2<f64>> {
    let (layers, heads) = shape_of(runs)?;
    let mut table = Array2::zeros((layers, heads));
    for ((l, h), cell) in table.indexed_iter_mut() {
        let mut scores = Vec::new();
        for r in runs {
            let w = r.weights[l].index_axis(Axis(0), h); // (L, L), rows = queries
            scores.extend(pattern_score(&w, pattern, &r.tokens.ids)?);
        }
        *cell = scores.iter().sum::<f64>() / scores.len().max(1) as f64;
    }
    Ok(table)
}
// ANCHOR_END: head_scores

/// The weight every head of run `r` puts on key `key`, averaged over the queries:
/// `(layers, heads)`. Over 0.5 for a head that parks most of its weight there. An error if
/// `key` is not a position of the run.
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let r = study::run(&encoder, "The cat sat on the mat.").unwrap();
/// let on_first = study::weight_on(&r, 0).unwrap();
/// assert_eq!(on_first.dim(), (6, 12));
/// assert!(on_first.iter().all(|&w| (0.0..=1.0).contains(&w)));
/// let everywhere: f64 = (0..9).map(|k| study::weight_on(&r, k).unwrap()[[0, 2]]).sum();
/// assert!((everywhere - 1.0).abs() < 1e-5); // each query's weights sum to 1
/// let err = study::weight_on(&r, 9).unwrap_err().to_string();
/// assert_eq!(err, "key 9 is out of range: the run has 9 tokens (keys 0 to 8)");
/// ```
pub fn weight_on(r: &Run, key: usize) -> Result<Array2<f64>> {
    let len = r.weights.first().map_or(r.tokens.ids.len(), |w| w.shape()[2]);
    check_key(key, len, "the run has", "tokens")?;
    let heads = r.weights.first().map_or(0, |w| w.shape()[0]);
    Ok(Array2::from_shape_fn((r.weights.len(), heads), |(l, h)| {
        let column = r.weights[l].index_axis(Axis(0), h).column(key).mapv(f64::from);
        column.sum() / column.len() as f64
    }))
}

/// The share of head `head` of layer `layer`'s queries, over the runs, whose largest weight
/// falls on the key `offset` places away (`-1`: the token before, `1`: the token after),
/// among the queries that have such a key. Voita et al. (2019) call a head *positional* when
/// this share reaches 0.9 for some offset.
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let runs = [study::run(&encoder, "The cat sat on the mat.").unwrap()];
/// assert_eq!(study::argmax_share(&runs, 0, 2, -1).unwrap(), 1.0); // head 0.2: the token before
/// assert!(study::argmax_share(&runs, 0, 2, 1).unwrap() < 0.5);
/// assert!(study::argmax_share(&runs, 6, 0, 1).is_err());
/// ```
pub fn argmax_share(runs: &[Run], layer: usize, head: usize, offset: isize) -> Result<f64> {
    let (layers, heads) = shape_of(runs)?;
    if layer >= layers || head >= heads {
        return Err(PretrainedError::Input(format!("head {layer}.{head} does not exist")));
    }
    let (mut hits, mut queries) = (0usize, 0usize);
    for r in runs {
        let w = r.weights[layer].index_axis(Axis(0), head);
        for (i, row) in w.outer_iter().enumerate() {
            let Some(key) = i.checked_add_signed(offset).filter(|&k| k < row.len()) else {
                continue;
            };
            let largest = (0..row.len()).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            queries += 1;
            hits += usize::from(largest == key);
        }
    }
    Ok(hits as f64 / queries.max(1) as f64)
}

/// The mean entropy (nats) of every head's rows, averaged over the runs: `(layers, heads)`.
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let runs = [study::run(&encoder, "The cat sat on the mat.").unwrap()];
/// let e = study::entropies(&runs).unwrap();
/// assert_eq!(e.dim(), (6, 12));
/// assert!(e.iter().all(|&h| h >= 0.0 && h <= 9f64.ln() + 1e-6)); // 9 tokens: at most ln 9
/// ```
pub fn entropies(runs: &[Run]) -> Result<Array2<f64>> {
    let (layers, heads) = shape_of(runs)?;
    Ok(Array2::from_shape_fn((layers, heads), |(l, h)| {
        let sum: f64 =
            runs.iter().map(|r| mean_entropy(&r.weights[l].index_axis(Axis(0), h))).sum();
        sum / runs.len() as f64
    }))
}

/// What one head adds to the tokens of a run, through its own `d_head` rows of `W_O`.
#[derive(Debug, Clone)]
pub struct HeadWrites {
    /// `(L, d_model)`: row `j` is token `j`'s value through the head's rows of `W_O`,
    /// `v_j,h · W_O[h]`, what the head would add to a query that put all its weight on `j`.
    pub values: Array2<f64>,
    /// `(L, d_model)`: row `i` is what it adds to query `i`, `Σ_j w_ij · v_j,h · W_O[h]`.
    pub written: Array2<f64>,
}

impl HeadWrites {
    /// The length of the first token's (`[CLS]`'s) value over the mean length of the other
    /// tokens' values: near 0 when attending to `[CLS]` adds next to nothing.
    ///
    /// ```
    /// use ndarray::array;
    /// use pretrained::study::HeadWrites;
    ///
    /// let values = array![[0.0, 0.1], [3.0, 4.0], [0.0, 5.0]];
    /// let w = HeadWrites { written: values.clone(), values };
    /// assert!((w.first_value_ratio() - 0.02).abs() < 1e-12);
    /// ```
    pub fn first_value_ratio(&self) -> f64 {
        let n = norms(&self.values);
        n[0] / mean(&n[1..])
    }

    /// As [`first_value_ratio`](Self::first_value_ratio), for the token at `key`: the length
    /// of its value over the mean length of the values of the tokens that are neither `key`
    /// nor in `leave_out` (another sink, say, whose small value would lower the mean). An
    /// error if `key` is not one of the tokens.
    ///
    /// ```
    /// use ndarray::array;
    /// use pretrained::study::HeadWrites;
    ///
    /// let values = array![[0.0, 0.1], [3.0, 4.0], [0.2, 0.0], [0.0, 5.0]];
    /// let w = HeadWrites { written: values.clone(), values };
    /// assert!((w.value_ratio(2, &[0]).unwrap() - 0.04).abs() < 1e-12); // 0.2 against 5
    /// assert_eq!(w.value_ratio(0, &[]).unwrap(), w.first_value_ratio());
    /// let err = w.value_ratio(4, &[]).unwrap_err().to_string();
    /// assert_eq!(err, "key 4 is out of range: the head's values have 4 rows (keys 0 to 3)");
    /// ```
    pub fn value_ratio(&self, key: usize, leave_out: &[usize]) -> Result<f64> {
        let n = norms(&self.values);
        check_key(key, n.len(), "the head's values have", "rows")?;
        let others: Vec<f64> = (0..n.len())
            .filter(|j| *j != key && !leave_out.contains(j))
            .map(|j| n[j])
            .collect();
        Ok(n[key] / mean(&others))
    }

    /// The mean length of what the head adds to a token over the mean length of the other
    /// tokens' values: about 1 for a head that copies one word, less for one that averages
    /// words pointing different ways or that attends to `[CLS]`.
    ///
    /// ```
    /// use ndarray::array;
    /// use pretrained::study::HeadWrites;
    ///
    /// let values = array![[0.0, 0.0], [3.0, 4.0], [0.0, 5.0]];
    /// let written = array![[0.0, 0.0], [0.0, 0.0], [3.0, 4.0]];
    /// assert!((HeadWrites { values, written }.written_ratio() - 1.0 / 3.0).abs() < 1e-12);
    /// ```
    pub fn written_ratio(&self) -> f64 {
        mean(&norms(&self.written)) / mean(&norms(&self.values)[1..])
    }
}

/// What head `head` of layer `layer` adds to each token of run `r` (see [`HeadWrites`]).
/// `W_O`'s bias is added whatever the heads do, so it is left out.
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let r = study::run(&encoder, "The cat sat on the mat.").unwrap();
/// let w = study::head_writes(&encoder, &r, 1, 10).unwrap();
/// assert_eq!(w.written.dim(), (9, 384)); // [CLS] the cat sat on the mat . [SEP]
/// assert!(study::head_writes(&encoder, &r, 6, 0).is_err());
/// ```
// ANCHOR: head_writes
pub fn head_writes(
    encoder: &SentenceEncoder,
    r: &Run,
    layer: usize,
    head: usize,
) -> Result<HeadWrites> {
    let Some(encoder_layer) = encoder.bert().layers().get(layer) else {
        return Err(PretrainedError::Input(format!("layer {layer} does not exist")));
    };
    let mha = encoder_layer.attention();
    if head >= mha.heads() {
        return Err(PretrainedError::Input(format!("head {head} does not exist")));
    }
    let [_, _, w_v, w_o] = mha.projections();
    let v = w_v.apply(&r.inputs[layer])?; // (L, d_model): every head's values, side by side
    let cols = head * mha.d_head()..(head + 1) * mha.d_head();
    let v_h = v.slice(s![.., cols.clone()]); // (L, d_head): this head's values
    let values = v_h.dot(&w_o.weight().slice(s![cols, ..])).mapv(f64::from); // (L, d_model)
    let written = r.weights[layer].index_axis(Axis(0), head).mapv(f64::from).dot(&values);
    Ok(HeadWrites { values, written })
}
// ANCHOR_END: head_writes

/// The cosine similarity of every pair of rows of `e`: `(n, n)`.
///
/// ```
/// use ndarray::array;
///
/// let sim = pretrained::study::similarities(&array![[1.0f32, 0.0], [1.0, 1.0]]).unwrap();
/// assert!((sim[[0, 1]] - 0.5f64.sqrt()).abs() < 1e-6);
/// ```
pub fn similarities(e: &ArrayRef2<f32>) -> Result<Array2<f64>> {
    let n = e.nrows();
    let mut sim = Array2::zeros((n, n));
    for i in 0..n {
        for j in 0..n {
            sim[[i, j]] = f64::from(cosine_similarity(&e.row(i), &e.row(j))?);
        }
    }
    Ok(sim)
}

/// For every head, the largest change of any pair's similarity among `texts` when that head
/// alone is removed ([`Bert::without_head`](crate::Bert::without_head)): `(layers, heads)`.
///
/// ```
/// use pretrained::{SentenceEncoder, study};
///
/// let encoder = SentenceEncoder::load(pretrained::minilm_dir()).unwrap();
/// let change = study::ablation(&encoder, &["A cat sleeps.", "A kitten naps."]).unwrap();
/// assert_eq!(change.dim(), (6, 12));
/// assert!(change.iter().all(|&d| d >= 0.0) && change.iter().any(|&d| d > 0.0));
/// ```
// ANCHOR: ablation
pub fn ablation(encoder: &SentenceEncoder, texts: &[&str]) -> Result<Array2<f64>> {
    let tokens =
        texts.iter().map(|t| encoder.tokenizer().encode(t)).collect::<Result<Vec<_>>>()?;
    let batch: Vec<&[u32]> = tokens.iter().map(|t| t.ids.as_slice()).collect();
    let bert = encoder.bert();
    let full = similarities(&bert.sentence_embeddings(&bert.forward(&batch)?)?)?;
    let (layers, heads) = (bert.config().num_hidden_layers, bert.config().num_attention_heads);
    let mut change = Array2::zeros((layers, heads));
    for ((l, h), cell) in change.indexed_iter_mut() {
        let ablated = bert.without_head(l, h)?;
        let sim = similarities(&ablated.sentence_embeddings(&ablated.forward(&batch)?)?)?;
        *cell = (&sim - &full).iter().fold(0.0f64, |m, d| m.max(d.abs()));
    }
    Ok(change)
}
// ANCHOR_END: ablation

/// The `n` largest entries of a `(layers, heads)` table, largest first, as
/// `((layer, head), value)` (ties: the lower layer, then the lower head, first).
///
/// ```
/// use ndarray::array;
///
/// let best = pretrained::study::top(&array![[0.1, 0.9], [0.5, 0.9]], 2);
/// assert_eq!(best, [((0, 1), 0.9), ((1, 1), 0.9)]);
/// ```
pub fn top(table: &ArrayRef2<f64>, n: usize) -> Vec<((usize, usize), f64)> {
    let mut all: Vec<_> = table.indexed_iter().map(|(i, &v)| (i, v)).collect();
    all.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    all.truncate(n);
    all
}

/// An error unless `key < len`: "key 9 is out of range: {has} 9 {unit} (keys 0 to 8)".
fn check_key(key: usize, len: usize, has: &str, unit: &str) -> Result<()> {
    if key < len {
        return Ok(());
    }
    let keys = match len {
        0 => "no keys".to_string(),
        _ => format!("keys 0 to {}", len - 1),
    };
    Err(PretrainedError::Input(format!(
        "key {key} is out of range: {has} {len} {unit} ({keys})"
    )))
}

/// `(layers, heads)` of the runs, which must be at least one and agree.
fn shape_of(runs: &[Run]) -> Result<(usize, usize)> {
    let Some(first) = runs.first() else {
        return Err(PretrainedError::Input("no runs to measure".into()));
    };
    let shape = (first.weights.len(), first.weights.first().map_or(0, |w| w.shape()[0]));
    if runs.iter().any(|r| {
        r.weights.len() != shape.0 || r.weights.iter().any(|w| w.shape()[0] != shape.1)
    }) {
        return Err(PretrainedError::Input(
            "the runs come from models of different shapes".into(),
        ));
    }
    Ok(shape)
}

/// The length of each row.
fn norms(a: &Array2<f64>) -> Vec<f64> {
    a.outer_iter().map(|row| row.dot(&row).sqrt()).collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}
