//! The training loop: [`TrainConfig`], [`train`] and what it records ([`TrainingRun`],
//! [`Evaluation`], [`Snapshot`]).
//!
//! Anchors (below the doc comments): `train_config_model`, `train_loop`, `held_out`,
//! `recorder`, `recorder_record`.

use std::collections::BTreeSet;

use ndarray::{Array3, Axis};
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::{
    Adam, Batch, ModelConfig, Score, Task, TinyTransformer, cross_entropy, invalid_setting,
    score_logits,
};
use crate::dropout::Dropout;
use crate::error::Result;

/// The settings of a training run.
///
/// ```
/// use attention::learn::TrainConfig;
///
/// let config = TrainConfig::reversal();
/// assert_eq!((config.layers, config.task.len()), (1, 9));
/// assert_eq!(TrainConfig::induction().layers, 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// What to learn.
    pub task: Task,
    /// The model width.
    pub d_model: usize,
    /// Heads per layer.
    pub heads: usize,
    /// Attention layers.
    pub layers: usize,
    /// Whether the model has learned positions.
    pub positions: bool,
    /// Optimiser steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Attention dropout probability during training (0: none).
    pub dropout: f64,
    /// The seed every random draw derives from.
    pub seed: u64,
    /// How many held-out sequences measure the accuracy.
    pub held_out: usize,
    /// Measure the held-out loss and accuracy every this many steps (and at 0 and at the
    /// end).
    pub eval_every: usize,
    /// The steps after which the attention weights of the task's probe are kept (0 =
    /// before training).
    pub snapshot_steps: Vec<usize>,
}

impl TrainConfig {
    /// The chapter's reversal run: `L = 9`, 4 tokens, one layer of 2 heads, `d_model = 32`,
    /// 200 steps of 32 sequences, Adam with `lr = 5e-3`, no dropout, 1000 held-out
    /// sequences (measured every 5 steps), snapshots after 0, 10, 20, 30 and 200 steps.
    ///
    /// ```
    /// use attention::learn::{Task, TrainConfig};
    ///
    /// assert_eq!(TrainConfig::reversal().task, Task::Reversal { len: 9, vocab: 4 });
    /// ```
    pub fn reversal() -> Self {
        TrainConfig {
            task: Task::Reversal { len: 9, vocab: 4 },
            d_model: 32,
            heads: 2,
            layers: 1,
            positions: true,
            steps: 200,
            batch_size: 32,
            lr: 5e-3,
            dropout: 0.0,
            seed: 12,
            held_out: 1000,
            eval_every: 5,
            snapshot_steps: vec![0, 10, 20, 30, 200],
        }
    }

    /// The chapter's induction run: `L = 14` (8 distinct tokens, then 6 queries), 16 tokens,
    /// two layers of 2 heads, `d_model = 32`, 1000 steps of 32 sequences, Adam with
    /// `lr = 5e-3`, no dropout, 500 held-out sequences (measured every 25 steps), snapshots
    /// after 0, 200, 300, 400 and 1000 steps.
    ///
    /// ```
    /// use attention::learn::TrainConfig;
    ///
    /// assert!(TrainConfig::induction().positions);
    /// ```
    pub fn induction() -> Self {
        TrainConfig {
            task: Task::Induction { len: 14, vocab: 16, prefix: 8 },
            d_model: 32,
            heads: 2,
            layers: 2,
            positions: true,
            steps: 1000,
            batch_size: 32,
            lr: 5e-3,
            dropout: 0.0,
            seed: 12,
            held_out: 500,
            eval_every: 25,
            snapshot_steps: vec![0, 200, 300, 400, 1000],
        }
    }

    /// Checks the task, the model's shape, and that `batch_size` and `held_out` are at
    /// least 1 (the learning rate and the dropout probability are checked by [`Adam`] and
    /// [`Dropout`]).
    ///
    /// ```
    /// use attention::learn::TrainConfig;
    ///
    /// assert!(TrainConfig::reversal().check().is_ok());
    /// let config = TrainConfig { held_out: 0, ..TrainConfig::reversal() };
    /// assert_eq!(config.check().unwrap_err().to_string(), "held_out: must be at least 1");
    /// ```
    pub fn check(&self) -> Result<()> {
        self.task.check()?;
        self.model().check()?;
        for (what, size) in [("batch_size", self.batch_size), ("held_out", self.held_out)] {
            if size == 0 {
                return Err(invalid_setting(what, "must be at least 1".into()));
            }
        }
        Ok(())
    }

    /// The model this configuration trains.
    ///
    /// ```
    /// use attention::learn::TrainConfig;
    ///
    /// let model = TrainConfig::reversal().model();
    /// assert_eq!((model.vocab, model.max_len), (4, 9));
    /// ```
    // ANCHOR: train_config_model
    pub fn model(&self) -> ModelConfig {
        ModelConfig {
            vocab: self.task.vocab(),
            max_len: self.task.len(),
            d_model: self.d_model,
            heads: self.heads,
            layers: self.layers,
            positions: self.positions,
        }
    }
    // ANCHOR_END: train_config_model
}

/// The held-out loss and accuracy after `step` updates.
///
/// ```
/// use attention::learn::{Evaluation, Score};
///
/// let e = Evaluation { step: 0, loss: 1.4, score: Score { correct: 1, scored: 4 } };
/// assert_eq!(e.score.accuracy(), 0.25);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Updates done.
    pub step: usize,
    /// Mean cross-entropy on the held-out set.
    pub loss: f64,
    /// Right answers on the held-out set.
    pub score: Score,
}

/// The model after `step` updates.
///
/// ```
/// use attention::learn::{Snapshot, TrainConfig, TinyTransformer};
/// use rand::{SeedableRng, rngs::StdRng};
///
/// let config = TrainConfig::reversal();
/// let model = TinyTransformer::new(&config.model(), &mut StdRng::seed_from_u64(0)).unwrap();
/// let s = Snapshot { step: 0, model };
/// let probe = config.task.probe().unwrap();
/// assert_eq!(s.weights(&probe).unwrap()[0].dim(), (2, 9, 9)); // one layer, two heads
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Updates done.
    pub step: usize,
    /// The model at that step.
    pub model: TinyTransformer,
}

impl Snapshot {
    /// The attention weights of the model at that step on one sequence, `probe` (as
    /// [`TrainingRun::probe`]): one `(heads, L, L)` array per layer. An error as for
    /// [`TinyTransformer::forward`].
    ///
    /// ```
    /// use attention::learn::{train, TrainConfig};
    ///
    /// let mut config = TrainConfig::reversal();
    /// (config.steps, config.held_out, config.snapshot_steps) = (3, 20, vec![0, 3]);
    /// let run = train(&config).unwrap();
    /// let weights = run.snapshots[1].weights(&run.probe).unwrap();
    /// assert_eq!((weights.len(), weights[0].dim()), (1, (2, 9, 9)));
    /// assert_eq!(weights, run.snapshots[1].weights(&run.probe).unwrap()); // the same bits
    /// ```
    pub fn weights(&self, probe: &[usize]) -> Result<Vec<Array3<f64>>> {
        let tokens = ndarray::aview1(probe).insert_axis(Axis(0)); // (1, L)
        let weights = self.model.forward(&tokens)?.weights;
        Ok(weights.into_iter().map(|w| w.index_axis_move(Axis(0), 0)).collect())
    }
}

/// Everything a training run records.
///
/// ```
/// use attention::learn::{train, TrainConfig};
///
/// let mut config = TrainConfig::reversal();
/// (config.steps, config.held_out, config.snapshot_steps) = (3, 20, vec![0, 3]);
/// let run = train(&config).unwrap();
/// assert_eq!((run.losses.len(), run.snapshots.len()), (3, 2));
/// assert_eq!(run.evals.first().unwrap().step, 0);
/// ```
#[derive(Debug, Clone)]
pub struct TrainingRun {
    /// The training loss of every step's batch (before that step's update).
    pub losses: Vec<f64>,
    /// The held-out loss and accuracy at step 0, every `eval_every` steps and at the end.
    pub evals: Vec<Evaluation>,
    /// The model at the requested steps (the probe's attention: [`Snapshot::weights`]).
    pub snapshots: Vec<Snapshot>,
    /// The fixed input of the snapshots ([`Task::probe`]).
    pub probe: Vec<usize>,
    /// The held-out sequences.
    pub held_out: Batch,
    /// The trained model.
    pub model: TinyTransformer,
}

/// Trains a [`TinyTransformer`] on `config.task` and records the run.
///
/// Randomness: a generator seeded with `config.seed` draws four seeds, in this order, for
/// the held-out set, the model's initialisation, the training batches and the dropout
/// masks, each then a `StdRng` of its own; so the held-out set and the batches do not
/// depend on the model's shape. The held-out set is `held_out` distinct sequences; training
/// batches never contain one of them.
///
/// Each step: a fresh batch, the dropout masks (if `dropout > 0`), the loss and gradients,
/// one Adam step.
///
/// ```
/// use attention::learn::{train, TrainConfig};
///
/// let mut config = TrainConfig::reversal();
/// (config.steps, config.held_out, config.eval_every) = (20, 50, 10);
/// let run = train(&config).unwrap();
/// assert_eq!(run.evals.iter().map(|e| e.step).collect::<Vec<_>>(), [0, 10, 20]);
/// assert!(run.losses[19] < run.losses[0]);
/// ```
// ANCHOR: train_loop
pub fn train(config: &TrainConfig) -> Result<TrainingRun> {
    config.check()?;
    let dropout = Dropout::new(config.dropout)?;
    let mut seeds = StdRng::seed_from_u64(config.seed);
    let [held_seed, init_seed, data_seed, drop_seed] = [(); 4].map(|_| seeds.random::<u64>());
    let held_out = held_out_set(config, &mut StdRng::seed_from_u64(held_seed))?;
    let exclude: BTreeSet<Vec<usize>> =
        held_out.tokens.rows().into_iter().map(|r| r.to_vec()).collect();
    let mut model =
        TinyTransformer::new(&config.model(), &mut StdRng::seed_from_u64(init_seed))?;
    let mut adam = Adam::new(config.lr)?;
    let (mut data, mut drops) =
        (StdRng::seed_from_u64(data_seed), StdRng::seed_from_u64(drop_seed));
    let mut run = Recorder { config, held_out: &held_out, evals: vec![], snapshots: vec![] };
    run.record(&model, 0)?;
    let mut losses = Vec::with_capacity(config.steps);
    for step in 1..=config.steps {
        let batch = config.task.batch(config.batch_size, &mut data, Some(&exclude))?;
        let masks = (dropout.p() > 0.0).then(|| {
            model.dropout_masks(&dropout, config.batch_size, config.task.len(), &mut drops)
        });
        let (loss, grads) = model.loss_and_grads(&batch, masks.as_deref())?;
        model.step(&mut adam, &grads)?;
        losses.push(loss);
        run.record(&model, step)?;
    }
    let (evals, snapshots) = (run.evals, run.snapshots);
    Ok(TrainingRun { losses, evals, snapshots, probe: config.task.probe()?, held_out, model })
}
// ANCHOR_END: train_loop

/// `held_out` distinct sequences of the task.
// ANCHOR: held_out
fn held_out_set(config: &TrainConfig, rng: &mut StdRng) -> Result<Batch> {
    let mut seen = BTreeSet::new();
    let mut sequences = Vec::with_capacity(config.held_out);
    let mut attempts = 0usize;
    while sequences.len() < config.held_out {
        attempts += 1;
        if attempts > 100 * config.held_out + 1000 {
            let problem = format!("could not draw {} distinct sequences", config.held_out);
            return Err(invalid_setting("held-out set", problem));
        }
        let seq = config.task.sequence(rng)?;
        if seen.insert(seq.clone()) {
            sequences.push(seq);
        }
    }
    Batch::new(&config.task, &sequences)
}
// ANCHOR_END: held_out

/// Records evaluations and snapshots during [`train`].
// ANCHOR: recorder
struct Recorder<'a> {
    config: &'a TrainConfig,
    held_out: &'a Batch,
    evals: Vec<Evaluation>,
    snapshots: Vec<Snapshot>,
}
// ANCHOR_END: recorder

// ANCHOR: recorder_record
impl Recorder<'_> {
    fn record(&mut self, model: &TinyTransformer, step: usize) -> Result<()> {
        let every = self.config.eval_every.max(1);
        if step.is_multiple_of(every) || step == self.config.steps {
            let (logits, _) = model.forward_train(&self.held_out.tokens, None)?;
            let score = score_logits(&logits, &self.held_out.targets)?;
            let (b, len, vocab) = logits.dim();
            let flat = logits.into_shape_with_order((b * len, vocab)).expect("rows");
            let (loss, _) = cross_entropy(&flat, &self.held_out.targets)?;
            self.evals.push(Evaluation { step, loss, score });
        }
        if self.config.snapshot_steps.contains(&step) {
            self.snapshots.push(Snapshot { step, model: model.clone() });
        }
        Ok(())
    }
}
// ANCHOR_END: recorder_record
