//! Chapter 12, *Watching attention learn*: a tiny transformer trained by hand on reversal (with
//! and without positions) and on an induction task (two layers, one layer), with attention
//! dropout, a learning rate ten times larger, and a learning rate one bit larger. The induction
//! model's heads are measured on the held-out set, whose queries come in random order (where
//! they look, whether they copy, what removing each one costs), not only on the probe.
//!
//! ```text
//! cargo run --release --example ch12_learning [-- --out-dir DIR] [--help]
//! ```
//!
//! Prints the numbers the chapter quotes (the same text goes to `ch12_output.txt`) and draws
//! `ch12_reversal_accuracy.png`, `ch12_reversal_loss.png`, `ch12_reversal_weights.png`,
//! `ch12_induction_curves.png`, `ch12_induction_loss.png`, `ch12_induction_heads.png` and
//! `ch12_induction_jump.png`. Then it prints how long each training run took: that goes to
//! the terminal only, since it differs from machine to machine and the report must not.
//!
//! Everything the report and the figures show is computed exactly: the training runs through
//! `attention::learn`, whose arithmetic is the same on every x86-64 CPU, and what this file
//! computes itself is counting, division and comparison (no `exp`, `ln`, `powf`, no `dot`).

mod common;
use common::stdout;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use attention::dropout::Dropout;
use attention::learn::{
    Batch, Score, TinyTransformer, TrainConfig, TrainingRun, away_from_answers, cross_entropy,
    heads_weight_on, most_common_token_baseline, offset_sources, position_blind_ceiling,
    prefix_matching_sources, train, weight_on,
};
use figures::{HeatmapGrid, LineChart, Panel, ValueRange};
use ndarray::{Array2, ArrayRef3, Axis, s};
use rand::{SeedableRng, rngs::StdRng};

/// The dropout probability of the run with attention dropout.
const DROPOUT: f64 = 0.1;
/// The steps of the reversal run with a learning rate ten times larger.
const FAST_REVERSAL_STEPS: usize = 50;
/// The steps of the induction run with a learning rate ten times larger.
const FAST_INDUCTION_STEPS: usize = 300;
/// The seed of the dropout masks drawn at evaluation time (the pitfall).
const EVAL_DROP_SEED: u64 = 12;
/// The steps whose induction heads `ch12_induction_jump.png` shows: before, during and after
/// the jump.
const JUMP_STEPS: [usize; 4] = [200, 300, 400, 1000];

/// How long each training run took, in seconds: printed by `main` after the report, never
/// written into it.
static TIMES: Mutex<Vec<(&'static str, f64)>> = Mutex::new(Vec::new());

/// Trains `config`, noting how long it took under `name`.
fn timed(name: &'static str, config: &TrainConfig) -> Result<TrainingRun, Box<dyn Error>> {
    let start = Instant::now();
    let run = train(config)?;
    let seconds = start.elapsed().as_secs_f64();
    TIMES.lock().map_err(|_| "the timing list is poisoned")?.push((name, seconds));
    Ok(run)
}

/// The chapter's runs.
struct Runs {
    /// Reversal with learned positions (`TrainConfig::reversal()`).
    reversal: TrainingRun,
    /// The same without positions.
    blind: TrainingRun,
    /// Reversal with attention dropout `p = DROPOUT`.
    dropout: TrainingRun,
    /// Reversal with a learning rate ten times larger, `FAST_REVERSAL_STEPS` steps.
    reversal_fast: TrainingRun,
    /// Induction, two layers, snapshots every 25 steps.
    induction: TrainingRun,
    /// Induction with one layer.
    one_layer: TrainingRun,
    /// Induction with a learning rate ten times larger, `FAST_INDUCTION_STEPS` steps.
    induction_fast: TrainingRun,
    /// Induction with a learning rate one unit in the last place larger.
    induction_ulp: TrainingRun,
}

/// The configurations (the chapter's Check block builds the same ones).
fn reversal() -> TrainConfig {
    TrainConfig::reversal()
}
fn blind() -> TrainConfig {
    TrainConfig { positions: false, ..TrainConfig::reversal() }
}
fn with_dropout() -> TrainConfig {
    TrainConfig { dropout: DROPOUT, ..TrainConfig::reversal() }
}
fn reversal_fast() -> TrainConfig {
    let base = TrainConfig::reversal();
    TrainConfig { lr: 10.0 * base.lr, steps: FAST_REVERSAL_STEPS, snapshot_steps: vec![], ..base }
}
fn induction() -> TrainConfig {
    let base = TrainConfig::induction();
    let every = base.eval_every;
    TrainConfig { snapshot_steps: (0..=base.steps).step_by(every).collect(), ..base }
}
fn one_layer() -> TrainConfig {
    TrainConfig { layers: 1, snapshot_steps: vec![], ..TrainConfig::induction() }
}
fn induction_fast() -> TrainConfig {
    let base = TrainConfig::induction();
    TrainConfig { lr: 10.0 * base.lr, steps: FAST_INDUCTION_STEPS, snapshot_steps: vec![], ..base }
}
fn induction_ulp() -> TrainConfig {
    let base = TrainConfig::induction();
    TrainConfig { lr: base.lr.next_up(), snapshot_steps: vec![], ..base }
}

impl Runs {
    fn train() -> Result<Runs, Box<dyn Error>> {
        Ok(Runs {
            reversal: timed("reversal, with positions", &reversal())?,
            blind: timed("reversal, without positions", &blind())?,
            dropout: timed("reversal, attention dropout 0.1", &with_dropout())?,
            reversal_fast: timed("reversal, lr 0.05 (50 steps)", &reversal_fast())?,
            induction: timed("induction, 2 layers", &induction())?,
            one_layer: timed("induction, 1 layer", &one_layer())?,
            induction_fast: timed("induction, lr 0.05 (300 steps)", &induction_fast())?,
            induction_ulp: timed("induction, lr one bit larger", &induction_ulp())?,
        })
    }
}

/// A token id as a letter: 0 → a, 1 → b, …
fn letter(t: usize) -> String {
    char::from(b'a' + t as u8).to_string()
}

fn letters(tokens: &[usize]) -> Vec<String> {
    tokens.iter().map(|&t| letter(t)).collect()
}

/// A fraction as a percentage with one decimal.
fn percent(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

/// A score as the report writes it: `97.5 % (39 of 40)`.
fn tally(score: &Score) -> String {
    format!("{} ({} of {})", percent(score.accuracy()), score.correct, score.scored)
}

fn final_score(run: &TrainingRun) -> Score {
    run.evals.last().expect("an evaluation at the end").score
}

/// The held-out accuracy at `step`.
fn accuracy_at(run: &TrainingRun, step: usize) -> f64 {
    run.evals.iter().find(|e| e.step == step).expect("an evaluation at that step").score.accuracy()
}

/// The first step from which every evaluation scores at least `level`.
fn steady_from(run: &TrainingRun, level: f64) -> Option<usize> {
    let last_below = run.evals.iter().rposition(|e| e.score.accuracy() < level);
    match last_below {
        None => run.evals.first().map(|e| e.step),
        Some(k) => run.evals.get(k + 1).map(|e| e.step),
    }
}

/// The weight each head of layer `layer` puts where `sources` says (see `weight_on`), in the
/// snapshot `k`.
fn head_scores(run: &TrainingRun, k: usize, layer: usize, sources: &[Option<usize>]) -> Vec<f64> {
    let w = &run.snapshots[k].weights(&run.probe).expect("the probe fits the model")[layer];
    (0..w.dim().0)
        .map(|h| weight_on(&w.index_axis(Axis(0), h), sources).expect("one source per row"))
        .collect()
}

fn largest(values: &[f64]) -> f64 {
    values.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x))
}

/// The index of the largest entry (the first on a tie), as the crate's accuracy takes it.
fn argmax(row: &[f64]) -> usize {
    let mut best = 0;
    for (j, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = j;
        }
    }
    best
}

/// The predicted token of every position of `logits: (batch, L, vocab)`, row-major.
fn predictions(logits: &ArrayRef3<f64>) -> Vec<usize> {
    let (b, len, vocab) = logits.dim();
    let flat = logits.to_shape((b * len, vocab)).expect("contiguous rows");
    flat.rows().into_iter().map(|r| argmax(&r.to_vec())).collect()
}

/// How many times each token occurs in `seq`.
fn counts(seq: &[usize], vocab: usize) -> Vec<usize> {
    let mut c = vec![0; vocab];
    for &t in seq {
        c[t] += 1;
    }
    c
}

/// What position-blind models score on the reversal's held-out set.
struct BlindReferences {
    chance: f64,
    own_token: Score,
    most_common: Score,
    /// The mean of `c_max/L` over the held-out sequences: the expectation of the most common
    /// token's score given each sequence's bag of tokens.
    expected_most_common: f64,
    ceiling: Score,
    /// Positions where the trained position-blind model answers a most common token of its
    /// sequence.
    model_answers_most_common: Score,
    /// Whether every pair of equal tokens in a held-out sequence got bit-identical logits.
    equal_tokens_equal_logits: bool,
}

fn blind_references(runs: &Runs) -> Result<BlindReferences, Box<dyn Error>> {
    let held_out = &runs.blind.held_out;
    let vocab = reversal().task.vocab();
    let (n, len) = held_out.tokens.dim();
    let mut own_token = Score { correct: 0, scored: 0 };
    let mut expected = 0.0;
    let logits = runs.blind.model.forward(&held_out.tokens)?.logits;
    let predicted = predictions(&logits);
    let mut model_answers_most_common = Score { correct: 0, scored: 0 };
    let mut equal = true;
    for (b, seq) in held_out.tokens.rows().into_iter().enumerate() {
        let seq = seq.to_vec();
        let c = counts(&seq, vocab);
        let c_max = *c.iter().max().expect("vocab > 0");
        expected += c_max as f64 / len as f64;
        for i in 0..len {
            own_token.scored += 1;
            own_token.correct += usize::from(held_out.targets[b * len + i] == Some(seq[i]));
            model_answers_most_common.scored += 1;
            model_answers_most_common.correct += usize::from(c[predicted[b * len + i]] == c_max);
            for j in 0..i {
                if seq[i] == seq[j] {
                    equal &= logits.slice(s![b, i, ..]) == logits.slice(s![b, j, ..]);
                }
            }
        }
    }
    Ok(BlindReferences {
        chance: 1.0 / vocab as f64,
        own_token,
        most_common: most_common_token_baseline(held_out)?,
        expected_most_common: expected / n as f64,
        ceiling: position_blind_ceiling(held_out)?,
        model_answers_most_common,
        equal_tokens_equal_logits: equal,
    })
}

/// The held-out score and loss of `run`'s trained model with attention dropout `p` left on
/// (one mask per sequence and layer, drawn from a seeded generator).
fn evaluated_with_dropout(run: &TrainingRun, p: f64) -> Result<(Score, f64), Box<dyn Error>> {
    let held_out = &run.held_out;
    let (n, len) = held_out.tokens.dim();
    let masks = run.model.dropout_masks(
        &Dropout::new(p)?,
        n,
        len,
        &mut StdRng::seed_from_u64(EVAL_DROP_SEED),
    );
    let (logits, _) = run.model.forward_train(&held_out.tokens, Some(&masks))?;
    let predicted = predictions(&logits);
    let mut score = Score { correct: 0, scored: 0 };
    for (target, guess) in held_out.targets.iter().zip(&predicted) {
        if let Some(t) = target {
            score.scored += 1;
            score.correct += usize::from(t == guess);
        }
    }
    let vocab = logits.dim().2;
    let flat = logits.into_shape_with_order((n * len, vocab))?;
    let (loss, _) = cross_entropy(&flat, &held_out.targets)?;
    Ok((score, loss))
}

/// For each scored position of the induction task, how many different positions its answer
/// occupies across the held-out set: the data leave no position-only shortcut.
fn answer_places(batch: &Batch) -> Result<Vec<(usize, usize)>, Box<dyn Error>> {
    let task = induction().task;
    let len = task.len();
    let mut seen = vec![vec![false; len]; len];
    for seq in batch.tokens.rows() {
        for (i, source) in task.sources(&seq.to_vec())?.into_iter().enumerate() {
            if let Some(j) = source {
                seen[i][j] = true;
            }
        }
    }
    Ok(seen
        .iter()
        .enumerate()
        .filter(|(_, row)| row.iter().any(|&x| x))
        .map(|(i, row)| (i, row.iter().filter(|&&x| x).count()))
        .collect())
}

/// The expected score, on the held-out set, of guessing uniformly among the tokens that can be
/// a query's answer: the prefix's tokens but its first (which follows nothing) and the query
/// itself (which never answers itself).
fn guess_among_answers(batch: &Batch) -> f64 {
    let task = induction().task;
    let (len, prefix) = (task.len(), 8);
    let mut total = 0.0;
    let mut scored = 0;
    for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
        for i in 0..len {
            if batch.targets[b * len + i].is_none() {
                continue;
            }
            let candidates = (1..prefix).filter(|&j| seq[j] != seq[i]).count();
            total += 1.0 / candidates as f64;
            scored += 1;
        }
    }
    total / scored as f64
}

/// The previous-token pattern of the induction probe, over the prefix (where it is needed):
/// position `i` of `1..prefix` looks at `i − 1`.
fn previous_token_sources(len: usize, prefix: usize) -> Vec<Option<usize>> {
    (0..len).map(|i| (1..prefix).contains(&i).then(|| i - 1)).collect()
}

const PREFIX: usize = 8;

/// What one layer's heads do on the induction task's held-out set, whose queries come in
/// random order: per head, the mean weight on the previous token (rows 1 to `PREFIX − 1`,
/// the prefix, where a previous-token head is needed), on the answer (the token after the
/// query's earlier occurrence: prefix matching) and `PREFIX − 1` places back (where the
/// probe's answers all are), on the query rows whose answer lies elsewhere: there a head that
/// only looks back a fixed distance scores, and an induction head does not.
struct HeldOutHeads {
    previous: Vec<f64>,
    answer: Vec<f64>,
    back: Vec<f64>,
}

/// `PREFIX − 1` places back from every query row of the held-out set (rows `PREFIX` on).
fn back_sources(held: &Batch) -> Vec<Option<usize>> {
    let (n, len) = held.tokens.dim();
    offset_sources(n, len, PREFIX..len, PREFIX - 1)
}

/// What the heads of every layer of `model` do on the held-out set: one `HeldOutHeads` per
/// layer, from one forward pass.
fn held_out_heads(
    model: &TinyTransformer,
    held: &Batch,
) -> Result<Vec<HeldOutHeads>, Box<dyn Error>> {
    let (n, len) = held.tokens.dim();
    let answers = prefix_matching_sources(&held.tokens);
    let previous = offset_sources(n, len, 1..PREFIX, 1);
    let back = away_from_answers(&back_sources(held), &answers)?;
    let mut layers = vec![];
    for weights in &model.forward(&held.tokens)?.weights {
        layers.push(HeldOutHeads {
            previous: heads_weight_on(weights, &previous)?,
            answer: heads_weight_on(weights, &answers)?,
            back: heads_weight_on(weights, &back)?,
        });
    }
    Ok(layers)
}

/// `held_out_heads` of the induction run at every snapshot (the report's table and the curves
/// of `ch12_induction_curves.png`).
fn snapshot_heads(runs: &Runs) -> Result<Vec<Vec<HeldOutHeads>>, Box<dyn Error>> {
    let held = &runs.induction.held_out;
    runs.induction.snapshots.iter().map(|s| held_out_heads(&s.model, held)).collect()
}

/// Everything the example prints, as one text (also written to `ch12_output.txt`);
/// `held_heads` is `snapshot_heads(runs)`.
fn report(runs: &Runs, held_heads: &[Vec<HeldOutHeads>]) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    reversal_report(&mut out, runs)?;
    dropout_report(&mut out, runs)?;
    induction_report(&mut out, runs, held_heads)?;
    learning_rate_report(&mut out, runs)?;
    one_bit_report(&mut out, runs)?;
    Ok(out)
}

fn reversal_report(out: &mut String, runs: &Runs) -> Result<(), Box<dyn Error>> {
    let config = reversal();
    let (len, vocab) = (config.task.len(), config.task.vocab());
    let model = config.model();
    let alphabet = letters(&(0..vocab).collect::<Vec<_>>()).join(" ");
    writeln!(out, "== Reversal ==")?;
    writeln!(out, "task: L = {len} tokens from a vocabulary of {vocab} ({alphabet})")?;
    writeln!(out, "  the answer at position i is the token at position {} − i", len - 1)?;
    writeln!(
        out,
        "model: d_model = {}, {} layer of {} heads (d_head = {}), learned positions,",
        model.d_model,
        model.layers,
        model.heads,
        model.d_model / model.heads
    )?;
    writeln!(
        out,
        "  a read-out with a bias: {} parameters ({} without positions)",
        model.parameter_count(),
        blind().model().parameter_count()
    )?;
    writeln!(
        out,
        "training: {} steps of {} random sequences, Adam (lr {}, β₁ 0.9, β₂ 0.999, ε 1e-8),",
        config.steps, config.batch_size, config.lr
    )?;
    writeln!(out, "  no dropout, seed {}", config.seed)?;
    let held = &runs.reversal.held_out;
    if held != &runs.blind.held_out {
        return Err("the runs with and without positions must share the held-out set".into());
    }
    writeln!(
        out,
        "held out: {} distinct sequences no training batch contains, {} positions",
        held.len(),
        held.targets.len()
    )?;
    writeln!(out, "  (the same for the runs with and without positions)")?;
    writeln!(out)?;
    writeln!(out, "        held-out loss          held-out accuracy")?;
    writeln!(out, " step   positions  without     positions  without")?;
    for (with, without) in runs.reversal.evals.iter().zip(&runs.blind.evals) {
        if with.step <= 50 && with.step % 10 == 0 || with.step % 50 == 0 {
            writeln!(
                out,
                "{:>5}   {:<9.4}  {:<9.4}   {:<9}  {}",
                with.step,
                with.loss,
                without.loss,
                percent(with.score.accuracy()),
                percent(without.score.accuracy())
            )?;
        }
    }
    let (with, without) = (final_score(&runs.reversal), final_score(&runs.blind));
    writeln!(
        out,
        "with positions: {} after {} steps ({} of {}), 99 % or more from step {} on",
        percent(with.accuracy()),
        config.steps,
        with.correct,
        with.scored,
        steady_from(&runs.reversal, 0.99).ok_or("never 99 %")?
    )?;
    let all_right = runs
        .reversal
        .evals
        .iter()
        .find(|e| e.score.correct == e.score.scored)
        .ok_or("never every position right")?;
    writeln!(
        out,
        "  every held-out position right first at step {}, and at every evaluation from step {} on",
        all_right.step,
        steady_from(&runs.reversal, 1.0).ok_or("not every position right at the end")?
    )?;
    writeln!(out, "without positions: {}", tally(&without))?;
    writeln!(out)?;

    let r = blind_references(runs)?;
    writeln!(out, "What a position-blind model can score on the held-out set:")?;
    let rows = [
        (format!("chance, one token of {vocab}"), r.chance, String::new()),
        (
            "answer its own token".into(),
            r.own_token.accuracy(),
            "(the middle; equal mirror pairs)".into(),
        ),
        (
            "answer the sequence's most common token".into(),
            r.most_common.accuracy(),
            format!("(expected from the bags: {})", percent(r.expected_most_common)),
        ),
        (
            "bound: each token's best answer, per sequence".into(),
            r.ceiling.accuracy(),
            format!("({} of {})", r.ceiling.correct, r.ceiling.scored),
        ),
    ];
    for (what, score, note) in rows {
        let line = format!("  {what:<48}{:>7}  {note}", percent(score));
        writeln!(out, "{}", line.trim_end())?;
    }
    writeln!(out, "the trained position-blind model: {}", percent(without.accuracy()))?;
    writeln!(
        out,
        "  its answer is a most common token of the sequence at {} of the positions",
        percent(r.model_answers_most_common.accuracy())
    )?;
    writeln!(
        out,
        "  equal tokens of a sequence get bit-identical logits: {}",
        r.equal_tokens_equal_logits
    )?;
    writeln!(out)?;

    let probe = &runs.reversal.probe;
    let sources = config.task.sources(probe)?;
    writeln!(
        out,
        "The probe {}: mean weight on the anti-diagonal, w[i, {} − i]",
        letters(probe).join(" "),
        len - 1
    )?;
    writeln!(out, "(uniform rows would give 1/{len} = {:.3}):", 1.0 / len as f64)?;
    for (k, snapshot) in runs.reversal.snapshots.iter().enumerate() {
        let heads = head_scores(&runs.reversal, k, 0, &sources);
        writeln!(
            out,
            "  step {:>3}: head 0 {:.3}, head 1 {:.3}",
            snapshot.step, heads[0], heads[1]
        )?;
    }
    let last = runs.blind.snapshots.len() - 1;
    let heads = head_scores(&runs.blind, last, 0, &sources);
    writeln!(
        out,
        "  without positions, step {}: head 0 {:.3}, head 1 {:.3}",
        runs.blind.snapshots[last].step, heads[0], heads[1]
    )?;
    writeln!(out)?;
    Ok(())
}

fn dropout_report(out: &mut String, runs: &Runs) -> Result<(), Box<dyn Error>> {
    let dropout = Dropout::new(DROPOUT)?;
    writeln!(out, "== Attention dropout ==")?;
    writeln!(
        out,
        "p = {DROPOUT}: each weight dropped with probability p, a kept one multiplied by \
         1/(1 − p) = {:.4}",
        dropout.keep_scale()
    )?;
    let run = &runs.dropout;
    let score = final_score(run);
    writeln!(
        out,
        "reversal trained with p = {DROPOUT}: {} of the held-out positions right (evaluated \
         without)",
        percent(score.accuracy())
    )?;
    writeln!(out, "  99 % or more from step {} on", steady_from(run, 0.99).ok_or("never 99 %")?)?;
    let sources = reversal().task.sources(&run.probe)?;
    let last = run.snapshots.len() - 1;
    let heads = head_scores(run, last, 0, &sources);
    writeln!(
        out,
        "  its probe's anti-diagonal at step {}: head 0 {:.3}, head 1 {:.3}",
        run.snapshots[last].step, heads[0], heads[1]
    )?;
    let eval_loss = run.evals.last().ok_or("no evaluation")?.loss;
    writeln!(out, "the same trained model, evaluated with dropout left on (seeded masks):")?;
    writeln!(out, "  p      accuracy   held-out loss")?;
    writeln!(out, "  0      {:<9}  {:.4}", percent(score.accuracy()), eval_loss)?;
    for p in [DROPOUT, 0.5] {
        let (score, loss) = evaluated_with_dropout(run, p)?;
        writeln!(out, "  {p:<5}  {:<9}  {loss:.4}", percent(score.accuracy()))?;
    }
    writeln!(out)?;
    Ok(())
}

fn induction_report(
    out: &mut String,
    runs: &Runs,
    held_heads: &[Vec<HeldOutHeads>],
) -> Result<(), Box<dyn Error>> {
    let config = induction();
    let (len, vocab) = (config.task.len(), config.task.vocab());
    let model = config.model();
    writeln!(out, "== Induction ==")?;
    writeln!(
        out,
        "task: L = {len}: {PREFIX} distinct tokens of {vocab} (a … {}), then {} distinct queries,",
        letter(vocab - 1),
        len - PREFIX
    )?;
    writeln!(
        out,
        "  each one of the first {} tokens; the answer at a query is the token that followed it",
        PREFIX - 1
    )?;
    writeln!(
        out,
        "model: d_model = {}, {} layers of {} heads, learned positions: {} parameters",
        model.d_model,
        model.layers,
        model.heads,
        model.parameter_count()
    )?;
    writeln!(out, "  (one layer: {})", one_layer().model().parameter_count())?;
    writeln!(
        out,
        "training: {} steps of {} sequences, Adam (lr {}), seed {}",
        config.steps, config.batch_size, config.lr, config.seed
    )?;
    let held = &runs.induction.held_out;
    let scored = held.targets.iter().flatten().count();
    writeln!(
        out,
        "held out: {} sequences, {scored} scored positions; chance 1/{vocab} = {:.2} %",
        held.len(),
        100.0 / vocab as f64
    )?;
    let places = answer_places(held)?;
    let text: Vec<String> = places.iter().map(|(i, n)| format!("{i}: {n}")).collect();
    writeln!(out, "the different places of the answer of each query position, in the held-out")?;
    writeln!(out, "  set: {}", text.join(", "))?;
    writeln!(
        out,
        "a uniform guess among the tokens that can be an answer: {}",
        percent(guess_among_answers(held))
    )?;
    writeln!(out)?;

    let answers = prefix_matching_sources(&held.tokens);
    if answers
        != held
            .tokens
            .rows()
            .into_iter()
            .flat_map(|s| config.task.sources(&s.to_vec()).expect("a held-out sequence"))
            .collect::<Vec<_>>()
    {
        return Err("prefix matching must find the task's answers".into());
    }
    let back = back_sources(held);
    let elsewhere = away_from_answers(&back, &answers)?.iter().flatten().count();
    let queries = back.iter().flatten().count();
    let at_back = queries - elsewhere;
    writeln!(out, "The heads on the held-out set (queries in random order): the best head's")?;
    writeln!(
        out,
        "  mean weight on the previous token (layer 1, rows 1–{}), on the answer (layer 2,",
        PREFIX - 1
    )?;
    writeln!(
        out,
        "  rows {}–{}) and {} places back (layer 2, the {elsewhere} of the {queries} query rows whose",
        PREFIX,
        len - 1,
        PREFIX - 1
    )?;
    writeln!(
        out,
        "  answer lies elsewhere; at the other {at_back}, {}, the answer itself is {} back)",
        percent(at_back as f64 / queries as f64),
        PREFIX - 1
    )?;
    writeln!(out, "        held-out loss       held-out accuracy   best head, held out")?;
    writeln!(
        out,
        " step   2 layers  1 layer   2 layers  1 layer   previous  answer  {} back",
        PREFIX - 1
    )?;
    for (k, (two, one)) in runs.induction.evals.iter().zip(&runs.one_layer.evals).enumerate() {
        let snapshot = &runs.induction.snapshots[k];
        if snapshot.step != two.step || one.step != two.step {
            return Err("evaluations and snapshots must be taken at the same steps".into());
        }
        if two.step <= 500 || two.step % 100 == 0 {
            let [first, second] = &held_heads[k][..] else { return Err("two layers".into()) };
            writeln!(
                out,
                "{:>5}   {:<8.4}  {:<8.4}  {:<8}  {:<8}  {:<8.3}  {:<6.3}  {:.3}",
                two.step,
                two.loss,
                one.loss,
                percent(two.score.accuracy()),
                percent(one.score.accuracy()),
                largest(&first.previous),
                largest(&second.answer),
                largest(&second.back)
            )?;
        }
    }
    let crossing = runs
        .induction
        .evals
        .windows(2)
        .find(|w| w[1].score.accuracy() >= 0.5)
        .ok_or("never 50 %")?;
    writeln!(
        out,
        "the jump: {} at step 200, {} at step 400;",
        percent(accuracy_at(&runs.induction, 200)),
        percent(accuracy_at(&runs.induction, 400))
    )?;
    writeln!(
        out,
        "  50 % or more first at step {} ({} at step {})",
        crossing[1].step,
        percent(crossing[0].score.accuracy()),
        crossing[0].step
    )?;
    let (two, one) = (final_score(&runs.induction), final_score(&runs.one_layer));
    writeln!(
        out,
        "after {} steps: 2 layers {}, 1 layer {}",
        config.steps,
        tally(&two),
        tally(&one)
    )?;
    writeln!(out)?;

    // Every head of the trained model: where it looks, whether it copies, what removing it costs.
    let model = &runs.induction.model;
    writeln!(out, "Every head after {} steps, on the held-out set:", config.steps)?;
    writeln!(
        out,
        "  mean weight on the previous token, on the answer, {} back (where the answer is not);",
        PREFIX - 1
    )?;
    writeln!(out, "  copying: the head's own output, read through W_out, ranks the token it")?;
    writeln!(out, "  attends to most first (at the scored positions);")?;
    writeln!(out, "  held-out accuracy of the model with that one head removed (W_O rows zeroed)")?;
    writeln!(
        out,
        "                   previous  answer  {} back  copying           without it",
        PREFIX - 1
    )?;
    for (layer, heads) in held_out_heads(model, held)?.iter().enumerate() {
        for head in 0..model.config().heads {
            let copying = model.copying_score(&held.tokens, &held.targets, layer, head)?;
            let ablated = model.without_head(layer, head)?.score(held)?;
            writeln!(
                out,
                "  layer {}, head {head}  {:<8.3}  {:<6.3}  {:<6.3}  {:<6} ({:>4})  {}",
                layer + 1,
                heads.previous[head],
                heads.answer[head],
                heads.back[head],
                percent(copying.accuracy()),
                copying.correct,
                percent(ablated.accuracy())
            )?;
        }
    }
    let second = &model.forward(&held.tokens)?.weights[1];
    let on_back = |sources: &[Option<usize>]| -> Result<String, Box<dyn Error>> {
        let means = heads_weight_on(second, sources)?;
        Ok(means.iter().map(|w| format!("{w:.3}")).collect::<Vec<_>>().join(" and "))
    };
    let answer_back: Vec<Option<usize>> =
        back.iter().zip(&answers).map(|(b, a)| if b == a { *b } else { None }).collect();
    writeln!(
        out,
        "  {} back on all {queries} query rows, layer 2: {}, what a perfect induction",
        PREFIX - 1,
        on_back(&back)?
    )?;
    writeln!(
        out,
        "    head would score ({at_back}/{queries} = {:.3}): at {at_back} rows the answer is {} back,",
        at_back as f64 / queries as f64,
        PREFIX - 1
    )?;
    writeln!(out, "    and there these heads put {}", on_back(&answer_back)?)?;
    let no_second = (0..model.config().heads)
        .try_fold(model.clone(), |m, head| m.without_head(1, head))?
        .score(held)?;
    writeln!(out, "  with both heads of layer 2 removed: {}", tally(&no_second))?;
    writeln!(out)?;

    let probe = &runs.induction.probe;
    let probe_answers = config.task.sources(probe)?;
    let previous = previous_token_sources(len, PREFIX);
    writeln!(
        out,
        "The probe {} (every answer {} back): its best head's weight",
        letters(probe).join(" "),
        PREFIX - 1
    )?;
    writeln!(
        out,
        "  on the previous token (layer 1, rows 1–{}) and on the answer (layer 2, rows {}–{}):",
        PREFIX - 1,
        PREFIX,
        len - 1
    )?;
    for (k, snapshot) in runs.induction.snapshots.iter().enumerate() {
        if snapshot.step % 100 == 0 && (snapshot.step <= 500 || snapshot.step == config.steps) {
            writeln!(
                out,
                "  step {:>4}: previous {:.3}, answer {:.3}",
                snapshot.step,
                largest(&head_scores(&runs.induction, k, 0, &previous)),
                largest(&head_scores(&runs.induction, k, 1, &probe_answers))
            )?;
        }
    }
    let last = runs.induction.snapshots.len() - 1;
    let prev = head_scores(&runs.induction, last, 0, &previous);
    let answer = head_scores(&runs.induction, last, 1, &probe_answers);
    writeln!(out, "the probe at step {}:", runs.induction.snapshots[last].step)?;
    writeln!(
        out,
        "  layer 1, weight on the previous token: head 0 {:.3}, head 1 {:.3}",
        prev[0], prev[1]
    )?;
    writeln!(
        out,
        "  layer 2, weight on the answer:         head 0 {:.3}, head 1 {:.3}",
        answer[0], answer[1]
    )?;
    writeln!(out)?;
    Ok(())
}

fn learning_rate_report(out: &mut String, runs: &Runs) -> Result<(), Box<dyn Error>> {
    let (slow, fast) = (reversal().lr, reversal_fast().lr);
    writeln!(out, "== A learning rate ten times larger: {fast} instead of {slow} ==")?;
    writeln!(
        out,
        "reversal, held-out accuracy after 10 steps: {} (lr {slow}: {})",
        percent(accuracy_at(&runs.reversal_fast, 10)),
        percent(accuracy_at(&runs.reversal, 10))
    )?;
    writeln!(
        out,
        "  99 % or more from step {} on (lr {slow}: from step {})",
        steady_from(&runs.reversal_fast, 0.99).ok_or("never 99 %")?,
        steady_from(&runs.reversal, 0.99).ok_or("never 99 %")?
    )?;
    writeln!(out, "induction, held-out loss and accuracy:")?;
    writeln!(out, " step   lr {slow:<16} lr {fast}")?;
    for (a, b) in runs.induction.evals.iter().zip(&runs.induction_fast.evals) {
        writeln!(
            out,
            "{:>5}   {:<8.4} {:<8}  {:<8.4} {}",
            a.step,
            a.loss,
            percent(a.score.accuracy()),
            b.loss,
            percent(b.score.accuracy())
        )?;
    }
    let (worst_step, worst) = runs
        .induction_fast
        .losses
        .iter()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |m, (k, &x)| if x > m.1 { (k + 1, x) } else { m });
    writeln!(
        out,
        "the largest training-batch loss at lr {fast}: {worst:.1}, at step {worst_step}"
    )?;
    writeln!(out)?;
    Ok(())
}

fn one_bit_report(out: &mut String, runs: &Runs) -> Result<(), Box<dyn Error>> {
    let (a, b) = (&runs.induction, &runs.induction_ulp);
    writeln!(out, "== One bit ==")?;
    writeln!(
        out,
        "induction again with lr {:e} instead of {:e} (the next f64 up)",
        induction_ulp().lr,
        induction().lr
    )?;
    let first = a.losses.iter().zip(&b.losses).position(|(x, y)| x != y).ok_or("never differ")?;
    writeln!(out, "the training losses differ first at step {}", first + 1)?;
    let scored = a.held_out.targets.iter().flatten().count();
    writeln!(out, " step   held-out loss, |difference|   right answers (of {scored})")?;
    for (x, y) in a.evals.iter().zip(&b.evals) {
        if x.step % 100 == 0 || x.step == 25 || x.step == 825 {
            writeln!(
                out,
                "{:>5}   {:<28.1e}   {} and {}",
                x.step,
                (x.loss - y.loss).abs(),
                x.score.correct,
                y.score.correct
            )?;
        }
    }
    let mut biggest = 0.0_f64;
    for (p, q) in a.model.parameters().iter().zip(&b.model.parameters()) {
        for (x, y) in p.iter().zip(q.iter()) {
            biggest = biggest.max((x - y).abs());
        }
    }
    writeln!(
        out,
        "the largest difference between the two trained models' parameters: {biggest:.3}"
    )?;
    Ok(())
}

/// The probe's weights of one head at one snapshot, `(L, L)`.
fn weights(run: &TrainingRun, k: usize, layer: usize, head: usize) -> Array2<f64> {
    let w = run.snapshots[k].weights(&run.probe).expect("the probe fits the model");
    w[layer].index_axis(Axis(0), head).to_owned()
}

/// A horizontal line across `steps` at height `y`, as a chart series.
fn level(steps: usize, y: f64) -> [(f64, f64); 2] {
    [(0.0, y), (steps as f64, y)]
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let runs = Runs::train()?;
    let mut written = Vec::new();
    let steps = reversal().steps;
    let accuracy = |run: &TrainingRun| {
        run.evals.iter().map(|e| (e.step as f64, e.score.accuracy())).collect::<Vec<_>>()
    };
    let held_loss =
        |run: &TrainingRun| run.evals.iter().map(|e| (e.step as f64, e.loss)).collect::<Vec<_>>();
    let train_loss = |run: &TrainingRun| {
        run.losses.iter().enumerate().map(|(k, &x)| ((k + 1) as f64, x)).collect::<Vec<_>>()
    };

    // (a) Reversal: held-out accuracy with and without positions, against the references.
    let r = blind_references(&runs)?;
    let png = out_dir.join("ch12_reversal_accuracy.png");
    LineChart::new()
        .title("Reversal (L = 9, 4 tokens): held-out accuracy")
        .x_label("training step")
        .y_label("held-out accuracy")
        .y_range(0.0, 1.0)
        .markers(false)
        .series("with learned positions", accuracy(&runs.reversal))
        .series("without positions", accuracy(&runs.blind))
        .series(
            format!(
                "bound, each token's best answer per sequence ({})",
                percent(r.ceiling.accuracy())
            ),
            level(steps, r.ceiling.accuracy()),
        )
        .series(
            format!("the sequence's most common token ({})", percent(r.most_common.accuracy())),
            level(steps, r.most_common.accuracy()),
        )
        .series(format!("chance ({})", percent(r.chance)), level(steps, r.chance))
        .save(&png)?;
    written.push(png);

    // (b) Reversal: the losses.
    let png = out_dir.join("ch12_reversal_loss.png");
    LineChart::new()
        .title("Reversal: cross-entropy loss")
        .x_label("training step")
        .y_label("mean cross-entropy (nats)")
        .y_range(0.0, 2.0)
        .markers(false)
        .series("with positions, held out", held_loss(&runs.reversal))
        .series("without positions, held out", held_loss(&runs.blind))
        .series("with positions, training batch", train_loss(&runs.reversal))
        .series("without positions, training batch", train_loss(&runs.blind))
        .save(&png)?;
    written.push(png);

    // (c) Reversal: the probe's attention at every snapshot, both heads.
    let probe = letters(&runs.reversal.probe);
    let mut grid = HeatmapGrid::new()
        .title("Reversal: the probe's attention while it learns (one layer, two heads)");
    for head in 0..2 {
        for (k, snapshot) in runs.reversal.snapshots.iter().enumerate() {
            grid = grid.panel(
                Panel::new(&weights(&runs.reversal, k, 0, head))
                    .title(format!("head {head}, step {}", snapshot.step))
                    .labels(&probe),
            );
        }
    }
    let png = out_dir.join("ch12_reversal_weights.png");
    grid.columns(runs.reversal.snapshots.len())
        .annotate(false)
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .save(&png)?;
    written.push(png);

    // (d) Induction: accuracy (two layers, one layer) and the two heads forming, measured on
    // the held-out set.
    let config = induction();
    let heads = snapshot_heads(&runs)?;
    let (mut previous_curve, mut answer_curve, mut back_curve) = (vec![], vec![], vec![]);
    for (snapshot, layers) in runs.induction.snapshots.iter().zip(&heads) {
        let step = snapshot.step as f64;
        let [first, second] = &layers[..] else { return Err("two layers".into()) };
        previous_curve.push((step, largest(&first.previous)));
        answer_curve.push((step, largest(&second.answer)));
        back_curve.push((step, largest(&second.back)));
    }
    let png = out_dir.join("ch12_induction_curves.png");
    LineChart::new()
        .title("Induction: accuracy and the two heads, on the held-out set")
        .x_label("training step")
        .y_label("fraction")
        .y_range(0.0, 1.0)
        .series("held-out accuracy, 2 layers", accuracy(&runs.induction))
        .series("held-out accuracy, 1 layer", accuracy(&runs.one_layer))
        .series("layer 1: best head's weight on the previous token", previous_curve)
        .series("layer 2: best head's weight on the answer", answer_curve)
        .series(
            format!("layer 2: best head's weight {} back, answer elsewhere", PREFIX - 1),
            back_curve,
        )
        .save(&png)?;
    written.push(png);

    // (e) Induction: the losses, with the learning rate ten times larger.
    let png = out_dir.join("ch12_induction_loss.png");
    LineChart::new()
        .title("Induction: held-out cross-entropy loss")
        .x_label("training step")
        .y_label("mean cross-entropy (nats)")
        .y_range(0.0, 4.0)
        .series("2 layers, lr 0.005", held_loss(&runs.induction))
        .series("1 layer, lr 0.005", held_loss(&runs.one_layer))
        .series("2 layers, lr 0.05 (leaves the chart)", held_loss(&runs.induction_fast))
        .save(&png)?;
    written.push(png);

    // (f) Induction: the four heads at the end.
    let probe = letters(&runs.induction.probe);
    let last = runs.induction.snapshots.len() - 1;
    let end = runs.induction.snapshots[last].step;
    let mut grid =
        HeatmapGrid::new().title(format!("Induction: the probe's attention after {end} steps"));
    for layer in 0..2 {
        for head in 0..2 {
            grid = grid.panel(
                Panel::new(&weights(&runs.induction, last, layer, head))
                    .title(format!("layer {}, head {head}", layer + 1))
                    .labels(&probe),
            );
        }
    }
    let png = out_dir.join("ch12_induction_heads.png");
    grid.columns(2)
        .annotate(false)
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .save(&png)?;
    written.push(png);

    // (g) Induction: the previous-token head and the best induction head across the jump.
    let at = |step: usize| {
        runs.induction.snapshots.iter().position(|s| s.step == step).expect("a snapshot")
    };
    let answers = config.task.sources(&runs.induction.probe)?;
    let previous = previous_token_sources(config.task.len(), PREFIX);
    let prev_head = argmax(&head_scores(&runs.induction, last, 0, &previous));
    let induction_head = argmax(&head_scores(&runs.induction, last, 1, &answers));
    let mut grid = HeatmapGrid::new().title(format!(
        "Induction: layer 1, head {prev_head} (top) and layer 2, head {induction_head} (bottom) \
         across the jump"
    ));
    for (layer, head) in [(0, prev_head), (1, induction_head)] {
        for step in JUMP_STEPS {
            grid = grid.panel(
                Panel::new(&weights(&runs.induction, at(step), layer, head))
                    .title(format!("step {step}"))
                    .labels(&probe),
            );
        }
    }
    let png = out_dir.join("ch12_induction_jump.png");
    grid.columns(JUMP_STEPS.len())
        .annotate(false)
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .save(&png)?;
    written.push(png);

    let text = out_dir.join("ch12_output.txt");
    std::fs::write(&text, report(&runs, &heads)?)?;
    written.push(text);
    Ok(written)
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 12, Watching attention learn: a tiny transformer trained by hand on reversal (with \
    and without positions) and on an induction task (two layers and one), with attention \
    dropout, a learning rate ten times larger and one a bit larger.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch12_output.txt) and draws \
    ch12_reversal_accuracy.png, ch12_reversal_loss.png, ch12_reversal_weights.png, \
    ch12_induction_curves.png, ch12_induction_loss.png, ch12_induction_heads.png and \
    ch12_induction_jump.png into book/img/ (or --out-dir); then prints how long each training \
    run took (on the terminal only).";

fn main() -> Result<(), Box<dyn Error>> {
    let start = Instant::now();
    common::run_chapter(env!("CARGO_CRATE_NAME"), ABOUT, render_figures)?;
    stdout::line(format_args!("\ntraining time per run on this machine (not in the report):"));
    let times = TIMES.lock().map_err(|_| "the timing list is poisoned")?;
    for (name, seconds) in times.iter() {
        stdout::line(format_args!("  {name:<34} {seconds:>6.2} s"));
    }
    let training: f64 = times.iter().map(|t| t.1).sum();
    stdout::line(format_args!("  {:<34} {training:>6.2} s", "all training"));
    stdout::line(format_args!("  {:<34} {:>6.2} s", "the whole example", start.elapsed().as_secs_f64()));
    Ok(())
}
