//! What the heads learned, measured: where their attention lands ([`weight_on`],
//! [`heads_weight_on`] with the patterns [`prefix_matching_sources`] and [`offset_sources`],
//! away from the answers with [`away_from_answers`]), what a head writes and copies
//! ([`TinyTransformer::head_output`], [`TinyTransformer::copying_score`]) and what the model
//! loses without it ([`TinyTransformer::without_head`]).
//!
//! Anchors (below the doc comments): `weight_on`, `heads_weight_on`,
//! `prefix_matching_sources`, `offset_sources`, `away_from_answers`, `head_output`,
//! `copying_score`.

use std::ops::Range;

use ndarray::{Array3, ArrayRef2, ArrayRef4, Axis, s};

use super::{Score, TinyTransformer, argmax, invalid_setting};
use crate::error::{AttentionError, Result};
use crate::exact;

/// How much of its attention a head puts where the answers are: the mean of
/// `weights[i, sources[i]]` over the rows `i` that have a source (see [`Task::sources`]).
/// 1 means every such row looks only at its answer; a uniform row over `L` keys gives
/// `1/L`. An error when `weights` is not `(L, L)` with `L = sources.len()`, a source is not
/// below `L`, or no row has a source.
///
/// ```
/// use attention::learn::weight_on;
/// use ndarray::array;
///
/// let weights = array![[0.1, 0.9], [0.6, 0.4]];
/// assert_eq!(weight_on(&weights, &[Some(1), Some(0)]).unwrap(), 0.75); // (0.9 + 0.6) / 2
/// assert_eq!(weight_on(&weights, &[None, Some(1)]).unwrap(), 0.4);
/// assert!(weight_on(&weights, &[None, None]).is_err());
/// ```
// ANCHOR: weight_on
pub fn weight_on(weights: &ArrayRef2<f64>, sources: &[Option<usize>]) -> Result<f64> {
    let len = sources.len();
    if weights.dim() != (len, len) {
        let expected = format!("(L, L) = ({len}, {len}) was expected, one row per source");
        return Err(AttentionError::shape("weights", weights.shape(), &expected));
    }
    let mut total = 0.0;
    let mut rows = 0;
    for (i, source) in sources.iter().enumerate() {
        let Some(j) = *source else { continue };
        if j >= len {
            return Err(invalid_setting(
                "sources",
                format!("source {j} of row {i} is not below L = {len}"),
            ));
        }
        total += weights[[i, j]];
        rows += 1;
    }
    if rows == 0 {
        return Err(invalid_setting("sources", "no row has a source".into()));
    }
    Ok(total / rows as f64)
}
// ANCHOR_END: weight_on

/// [`weight_on`] for a whole batch and every head at once: for each head of
/// `weights: (batch, heads, L, L)`, the mean of `weights[b, h, i, j]` over the rows `(b, i)`
/// whose source `sources[b·L + i]` is `Some(j)` (row-major, as a [`Batch`]'s targets). The
/// rows are pooled, summed sequence after sequence. An error when `sources` does not have
/// `batch · L` entries, a source is not below `L`, or no row has a source.
///
/// ```
/// use attention::learn::heads_weight_on;
/// use ndarray::array;
///
/// // One sequence of 2 tokens, two heads: head 0 looks back, head 1 at itself.
/// let weights = array![[[[1.0, 0.0], [0.75, 0.25]], [[1.0, 0.0], [0.0, 1.0]]]];
/// let on = heads_weight_on(&weights, &[None, Some(0)]).unwrap(); // row 1 looks at 0
/// assert_eq!(on, [0.75, 0.0]);
/// assert!(heads_weight_on(&weights, &[None, None]).is_err());
/// ```
// ANCHOR: heads_weight_on
pub fn heads_weight_on(
    weights: &ArrayRef4<f64>,
    sources: &[Option<usize>],
) -> Result<Vec<f64>> {
    let (batch, heads, len, keys) = weights.dim();
    if sources.len() != batch * len || keys != len {
        let n = sources.len();
        let expected = format!(
            "(batch, heads, L, L) with batch · L = {n}, one source per row, was expected"
        );
        return Err(AttentionError::shape("weights", weights.shape(), &expected));
    }
    let mut rows = 0;
    for (k, source) in sources.iter().enumerate() {
        let Some(j) = *source else { continue };
        if j >= len {
            let problem = format!("source {j} of row {k} is not below L = {len}");
            return Err(invalid_setting("sources", problem));
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(invalid_setting("sources", "no row has a source".into()));
    }
    let mut means = Vec::with_capacity(heads);
    for h in 0..heads {
        let mut total = 0.0;
        for (k, source) in sources.iter().enumerate() {
            if let Some(j) = *source {
                total += weights[[k / len, h, k % len, j]];
            }
        }
        means.push(total / rows as f64);
    }
    Ok(means)
}
// ANCHOR_END: heads_weight_on

/// Where a *prefix-matching* head looks, in every sequence of `tokens: (batch, L)`: at a
/// position whose token occurred before, the position right after its latest earlier
/// occurrence; `None` at a token's first occurrence. Row-major, one entry per position.
///
/// This is the rule of [`Task::Induction`] read off the tokens alone, so it applies to any
/// sequence; on the induction task it gives the same positions as [`Task::sources`].
///
/// ```
/// use attention::learn::prefix_matching_sources;
/// use ndarray::array;
///
/// // "a b c b a": the second b looks after the first b (at c), the second a at b.
/// let sources = prefix_matching_sources(&array![[0, 1, 2, 1, 0]]);
/// assert_eq!(sources, [None, None, None, Some(2), Some(1)]);
/// ```
// ANCHOR: prefix_matching_sources
pub fn prefix_matching_sources(tokens: &ArrayRef2<usize>) -> Vec<Option<usize>> {
    let mut sources = Vec::with_capacity(tokens.len());
    for seq in tokens.rows() {
        for i in 0..seq.len() {
            let earlier = (0..i).rev().find(|&j| seq[j] == seq[i]);
            sources.push(earlier.map(|j| j + 1)); // the token after the earlier occurrence
        }
    }
    sources
}
// ANCHOR_END: prefix_matching_sources

/// A fixed-offset pattern over `batch` sequences of length `len`: row `i` looks `back`
/// positions back, for the rows `i` in `rows` with `i ≥ back`; `None` for every other row.
/// Row-major, like a [`Batch`]'s targets. `back = 1` is a previous-token head's pattern.
///
/// ```
/// use attention::learn::offset_sources;
///
/// assert_eq!(offset_sources(1, 4, 1..3, 1), [None, Some(0), Some(1), None]);
/// assert_eq!(offset_sources(2, 3, 0..3, 2), [None, None, Some(0), None, None, Some(0)]);
/// ```
// ANCHOR: offset_sources
pub fn offset_sources(
    batch: usize,
    len: usize,
    rows: Range<usize>,
    back: usize,
) -> Vec<Option<usize>> {
    let row = |i: usize| (rows.contains(&i) && i >= back).then(|| i - back);
    (0..batch).flat_map(|_| (0..len).map(row)).collect()
}
// ANCHOR_END: offset_sources

/// `sources` without the rows whose source is also their answer: `None` wherever
/// `sources[k] == answers[k]`, `sources[k]` everywhere else (both row-major, one entry per
/// position, like a [`Batch`]'s targets). [`heads_weight_on`] with the result measures a fixed
/// pattern, such as [`offset_sources`], only on the rows where following it is *not* the
/// same as finding the answer. On the induction task some answers lie 7 back, and a perfect
/// induction head puts its weight 7 back on exactly those rows; on the others it puts none
/// there, where a head that looks 7 back whatever the tokens puts all of it. An error when
/// the two lists differ in length.
///
/// ```
/// use attention::learn::{away_from_answers, offset_sources};
///
/// let back = offset_sources(1, 4, 0..4, 2); // rows 2 and 3 look 2 back: at 0 and at 1
/// let answers = [None, None, Some(0), Some(2)]; // row 2's answer is 2 back, row 3's is not
/// assert_eq!(away_from_answers(&back, &answers).unwrap(), [None, None, None, Some(1)]);
/// assert!(away_from_answers(&back, &answers[..3]).is_err());
/// ```
// ANCHOR: away_from_answers
pub fn away_from_answers(
    sources: &[Option<usize>],
    answers: &[Option<usize>],
) -> Result<Vec<Option<usize>>> {
    if sources.len() != answers.len() {
        let (n, m) = (sources.len(), answers.len());
        return Err(AttentionError::mismatch("sources", n, "answers", m, "length"));
    }
    let kept = |(s, a): (&Option<usize>, &Option<usize>)| if s == a { None } else { *s };
    Ok(sources.iter().zip(answers).map(kept).collect())
}
// ANCHOR_END: away_from_answers

/// Looking inside a trained model: one head's share of a layer's output, the model without a
/// head, and whether a head copies what it attends to.
impl TinyTransformer {
    /// The same model with head `head` of layer `layer` (both from 0) removed: that layer's
    /// [`MultiHeadAttention::without_head`], its rows of `W_O` set to zero, so the head
    /// still attends but adds nothing to the rows (an *ablation*). An error names a layer or
    /// head that does not exist.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let ablated = model.without_head(0, 1).unwrap();
    /// let tokens = array![[0, 3, 1]];
    /// assert_ne!(ablated.forward(&tokens).unwrap().logits, model.forward(&tokens).unwrap().logits);
    /// // The head is not heard, but it still attends as before.
    /// assert_eq!(ablated.forward(&tokens).unwrap().weights, model.forward(&tokens).unwrap().weights);
    /// assert!(model.without_head(1, 0).is_err() && model.without_head(0, 2).is_err());
    /// ```
    pub fn without_head(&self, layer: usize, head: usize) -> Result<TinyTransformer> {
        let Some(attention) = self.layers.get(layer) else {
            let problem = format!("the model has {} layers", self.layers.len());
            return Err(invalid_setting(&format!("layer {layer}"), problem));
        };
        let mut model = self.clone();
        model.layers[layer] = attention.without_head(head)?;
        Ok(model)
    }

    /// What head `head` of layer `layer` adds to the rows of `tokens: (batch, L)`: its share
    /// of the layer's output, `(batch, L, d_model)` (the layer's output is the sum of its
    /// heads' shares), and its weights `(batch, L, L)`; evaluation mode, read off the tape of
    /// [`TinyTransformer::forward_train`]. An error as for [`TinyTransformer::forward`], or
    /// for a layer or head that does not exist.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 2,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let tokens = array![[0, 3, 1], [2, 2, 1]];
    /// let (share, weights) = model.head_output(&tokens, 1, 0).unwrap();
    /// assert_eq!((share.dim(), weights.dim()), ((2, 3, 4), (2, 3, 3)));
    /// // Head 0's weights are the ones the forward pass computes.
    /// let all = &model.forward(&tokens).unwrap().weights[1];
    /// assert_eq!(weights, all.index_axis(ndarray::Axis(1), 0));
    /// assert!(model.head_output(&tokens, 2, 0).is_err());
    /// ```
    // ANCHOR: head_output
    pub fn head_output(
        &self,
        tokens: &ArrayRef2<usize>,
        layer: usize,
        head: usize,
    ) -> Result<(Array3<f64>, Array3<f64>)> {
        let Some(attention) = self.layers.get(layer) else {
            let problem = format!("the model has {} layers", self.layers.len());
            return Err(invalid_setting(&format!("layer {layer}"), problem));
        };
        let heads = attention.heads();
        if head >= heads {
            let problem = format!("the layer has {heads} heads, numbered 0 to {}", heads - 1);
            return Err(invalid_setting(&format!("head {head}"), problem));
        }
        let (_, tape) = self.forward_train(tokens, None)?;
        let tape = &tape.layers[layer];
        // merged · W_O: head h's columns of merged meet rows h·d_head .. (h+1)·d_head of W_O.
        let (batch, len) = tokens.dim();
        let d_head = self.config.d_model / heads;
        let cols = head * d_head..(head + 1) * d_head;
        let merged = tape.merged().slice(s![.., .., cols.clone()]);
        let rows = merged.to_shape((batch * len, d_head)).expect("rows");
        let [_, _, _, w_o] = attention.projections();
        let share = exact::matmul(&rows, &w_o.weight().slice(s![cols, ..]))?;
        let share =
            share.into_shape_with_order((batch, len, self.config.d_model)).expect("rows");
        let weights = tape.weights().index_axis(Axis(1), head).to_owned();
        Ok((share, weights))
    }
    // ANCHOR_END: head_output

    /// Whether head `head` of layer `layer` *copies*: at every row `k` (row-major over
    /// `tokens: (batch, L)`) where `rows[k]` is `Some`, read the head's share of the output
    /// ([`TinyTransformer::head_output`]) through the read-out's weight `W_out` (no bias),
    /// and count it right when its largest score (the lowest id on a tie) is the token the
    /// head attends to most (the earliest key on a tie). A related signature of what Olsson
    /// et al. (2022) call copying ("the head's output increases the logit corresponding to
    /// the attended-to token"), measured on the given data, here the task's own sequences.
    ///
    /// ```
    /// use attention::learn::{ModelConfig, TinyTransformer};
    /// use ndarray::array;
    /// use rand::{SeedableRng, rngs::StdRng};
    ///
    /// let config = ModelConfig { vocab: 4, max_len: 3, d_model: 4, heads: 2, layers: 1,
    ///                            positions: true };
    /// let model = TinyTransformer::new(&config, &mut StdRng::seed_from_u64(1)).unwrap();
    /// let score = model.copying_score(&array![[0, 3, 1]], &[None, Some(0), Some(2)], 0, 1);
    /// assert_eq!(score.unwrap().scored, 2);
    /// assert!(model.copying_score(&array![[0, 3, 1]], &[None; 3], 0, 1).is_err()); // no row
    /// assert!(model.copying_score(&array![[0, 3, 1]], &[Some(0); 2], 0, 1).is_err());
    /// ```
    // ANCHOR: copying_score
    pub fn copying_score(
        &self,
        tokens: &ArrayRef2<usize>,
        rows: &[Option<usize>],
        layer: usize,
        head: usize,
    ) -> Result<Score> {
        let (batch, len) = tokens.dim();
        if rows.len() != batch * len {
            let n = batch * len;
            return Err(AttentionError::mismatch(
                "rows",
                rows.len(),
                "tokens",
                n,
                "batch · L",
            ));
        }
        if rows.iter().all(Option::is_none) {
            return Err(invalid_setting("rows", "no row is counted".into()));
        }
        let (share, weights) = self.head_output(tokens, layer, head)?;
        let d_model = self.config.d_model;
        let flat = share.into_shape_with_order((batch * len, d_model)).expect("rows");
        let scores = exact::matmul(&flat, &self.w_out)?; // (batch · L, vocab)
        let mut score = Score { correct: 0, scored: 0 };
        for (k, row) in rows.iter().enumerate() {
            if row.is_none() {
                continue;
            }
            let (b, i) = (k / len, k % len);
            let attended = tokens[[b, argmax(&weights.slice(s![b, i, ..]))]];
            score.scored += 1;
            score.correct += usize::from(argmax(&scores.row(k)) == attended);
        }
        Ok(score)
    }
    // ANCHOR_END: copying_score
}
