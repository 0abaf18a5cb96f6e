//! Chapter *A model that writes*: the training loop.
//!
//! One step: draw a batch, compute the loss and its gradient, clip the gradient, take an
//! AdamW step at the schedule's learning rate. The batch is split into a fixed number of
//! parts (chapter 15's run: 2) whose gradients are computed side by side, each on a core of
//! its own, and added in order: data parallelism, what several GPUs do with a batch, here on
//! the cores of one machine. The split is fixed, not chosen by the number of cores, so a run
//! gives the same numbers however many threads it gets (and uses at most `parts` of them).
//!
//! Anchors (below the doc comments): `train_config`, `parallel_grads`, `train_step`,
//! `evaluate`.

use ndarray::{ArrayView2, Axis};
use rayon::prelude::*;

use super::kernels::Kernels;
use super::optim::{AdamW, clip_global_norm, learning_rate};
use super::weights::Gpt;
use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};

/// The settings of a training run; [`TrainConfig::nanogpt`] is chapter 15's.
///
/// ```
/// use attention::gpt::train::TrainConfig;
///
/// let c = TrainConfig::nanogpt();
/// assert_eq!((c.steps, c.batch_size, c.warmup), (2000, 12, 100));
/// assert_eq!(c.lr_at(100), 1e-3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
// ANCHOR: train_config
pub struct TrainConfig {
    /// Optimizer steps.
    pub steps: usize,
    /// Contexts per batch, `B`.
    pub batch_size: usize,
    /// The peak learning rate, reached after the warm-up.
    pub lr: f64,
    /// The floor the cosine decays to, reached after the last step.
    pub min_lr: f64,
    /// Warm-up steps.
    pub warmup: usize,
    /// The largest global gradient norm; longer gradients are scaled down.
    pub grad_clip: f64,
    /// How many parts each batch is split into, computed side by side.
    pub parts: usize,
}
// ANCHOR_END: train_config

impl TrainConfig {
    /// nanoGPT's small CPU run: 2000 steps of 12 contexts, learning rate `1e-3` after 100
    /// warm-up steps, down to `1e-4`, gradients clipped at norm 1; batches in 2 parts.
    ///
    /// ```
    /// use attention::gpt::train::TrainConfig;
    ///
    /// let c = TrainConfig::nanogpt();
    /// assert_eq!((c.lr, c.min_lr, c.grad_clip, c.parts), (1e-3, 1e-4, 1.0, 2));
    /// ```
    pub fn nanogpt() -> Self {
        TrainConfig {
            steps: 2000,
            batch_size: 12,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            grad_clip: 1.0,
            parts: 2,
        }
    }

    /// The learning rate of step `step` (from 0): [`learning_rate`] with these settings.
    ///
    /// ```
    /// use attention::gpt::train::TrainConfig;
    ///
    /// assert_eq!(TrainConfig::nanogpt().lr_at(2000), 1e-4);
    /// ```
    // ANCHOR: lr_at
    pub fn lr_at(&self, step: usize) -> f64 {
        learning_rate(step, self.warmup, self.steps, self.lr, self.min_lr)
    }
    // ANCHOR_END: lr_at
}

/// The loss and gradient of a batch, the batch split into groups of `⌈B/parts⌉` contexts
/// (the last one smaller; fewer than `parts` groups when they do not divide evenly, 12 into
/// 5 gives 4 of 3) whose gradients are computed in parallel and added in order, each
/// weighted by its share of the tokens. The same numbers whatever the number of threads.
///
/// ```
/// use attention::gpt::{config::GptConfig, kernels::Exact, train::parallel_grads, weights::Gpt};
/// use ndarray::array;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
/// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let (x, y) = (array![[0, 1], [2, 3], [4, 0]], array![[1, 2], [3, 4], [0, 1]]);
/// let (loss, grads) = parallel_grads(&gpt, &Exact, &x.view(), &y.view(), 2).unwrap();
/// let (whole, all) = gpt.loss_and_grads(&x.view(), &y.view()).unwrap();
/// assert!((loss - whole).abs() < 1e-12);
/// assert!((&grads.wte - &all.wte).iter().all(|d| d.abs() < 1e-12));
/// ```
// ANCHOR: parallel_grads
pub fn parallel_grads<A: Float, K: Kernels<A>>(
    gpt: &Gpt<A>,
    k: &K,
    tokens: &ArrayView2<usize>,
    targets: &ArrayView2<usize>,
    parts: usize,
) -> Result<(f64, Gpt<A>)> {
    let batch = tokens.nrows();
    if parts == 0 || parts > batch || targets.dim() != tokens.dim() {
        return Err(AttentionError::Invalid {
            what: "batch".into(),
            problem: format!(
                "{batch} contexts (targets {:?}) cannot be split into {parts} parts",
                targets.dim()
            ),
        });
    }
    let size = batch.div_ceil(parts);
    let chunks: Vec<_> = tokens
        .axis_chunks_iter(Axis(0), size)
        .zip(targets.axis_chunks_iter(Axis(0), size))
        .collect();
    let results: Vec<Result<(f64, Gpt<A>)>> =
        chunks.par_iter().map(|(x, y)| gpt.loss_and_grads_with(k, x, y)).collect();
    let mut total = Gpt::zeros(gpt.config);
    let mut loss = 0.0;
    for ((x, _), result) in chunks.iter().zip(results) {
        let (part_loss, grads) = result?;
        let share = x.nrows() as f64 / batch as f64; // each part's loss: a mean over its part
        loss += share * part_loss;
        for ((_, mut sum), (_, g)) in total.tensors_mut().into_iter().zip(grads.tensors()) {
            sum.zip_mut_with(&g, |s, &g| {
                *s = A::from_f64_lossy(to_f64(*s) + share * to_f64(g))
            });
        }
    }
    Ok((loss, total))
}
// ANCHOR_END: parallel_grads

/// What a training step reports.
///
/// ```
/// use attention::gpt::train::StepReport;
///
/// let r = StepReport { loss: 2.5, grad_norm: 1.2, lr: 1e-3 };
/// assert!(r.grad_norm > 1.0); // this step's gradient was clipped
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// The batch's mean loss, before the step.
    pub loss: f64,
    /// The gradient's global norm, before clipping.
    pub grad_norm: f64,
    /// The learning rate used.
    pub lr: f64,
}

/// One optimizer step on the batch `(tokens, targets)`: gradient (in `config.parts`
/// parallel parts), clipping at `config.grad_clip`, AdamW at the learning rate of step
/// `adamw.steps()`.
///
/// ```
/// use attention::gpt::{config::GptConfig, kernels::Fast, optim::AdamW, train::{train_step, TrainConfig}, weights::Gpt};
/// use ndarray::array;
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
/// let mut gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let mut adamw = AdamW::nanogpt(&gpt);
/// let settings = TrainConfig { lr: 1e-2, warmup: 0, steps: 50, ..TrainConfig::nanogpt() };
/// let (x, y) = (array![[0, 1, 2, 3], [1, 2, 3, 4]], array![[1, 2, 3, 4], [2, 3, 4, 0]]);
/// let first = train_step(&mut gpt, &mut adamw, &Fast, &settings, &x.view(), &y.view()).unwrap();
/// for _ in 0..30 {
///     train_step(&mut gpt, &mut adamw, &Fast, &settings, &x.view(), &y.view()).unwrap();
/// }
/// let later = train_step(&mut gpt, &mut adamw, &Fast, &settings, &x.view(), &y.view()).unwrap();
/// assert!(later.loss < first.loss / 2.0, "{} {}", first.loss, later.loss); // it learns to count
/// ```
// ANCHOR: train_step
pub fn train_step<A: Float, K: Kernels<A>>(
    gpt: &mut Gpt<A>,
    adamw: &mut AdamW<A>,
    k: &K,
    config: &TrainConfig,
    tokens: &ArrayView2<usize>,
    targets: &ArrayView2<usize>,
) -> Result<StepReport> {
    let lr = config.lr_at(adamw.steps());
    let (loss, mut grads) = parallel_grads(gpt, k, tokens, targets, config.parts)?;
    let grad_norm = clip_global_norm(&mut grads, config.grad_clip);
    adamw.step(gpt, &grads, lr)?;
    Ok(StepReport { loss, grad_norm, lr })
}
// ANCHOR_END: train_step

/// The mean next-token loss over every position of `ids` once: windows of `block_size`
/// tokens side by side (the last one shorter), each token predicted from the tokens before
/// it in its window; `batch` windows per forward pass, on every core. The validation loss of chapter 15
/// (and of its PyTorch reference). An error if `ids` has fewer than 2 tokens.
///
/// ```
/// use attention::gpt::{config::GptConfig, kernels::Exact, train::evaluate, weights::Gpt};
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
/// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let ids = [0, 1, 2, 3, 4, 0, 1, 2, 3, 4];
/// let loss = evaluate(&gpt, &Exact, &ids, 2).unwrap();
/// assert!((loss - 5f64.ln()).abs() < 0.1); // a fresh model: about ln V
/// assert!(evaluate(&gpt, &Exact, &ids[..1], 2).is_err());
/// ```
// ANCHOR: evaluate
pub fn evaluate<A: Float, K: Kernels<A>>(
    gpt: &Gpt<A>,
    k: &K,
    ids: &[usize],
    batch: usize,
) -> Result<f64> {
    if ids.len() < 2 || batch == 0 {
        return Err(AttentionError::Invalid {
            what: "evaluation text".into(),
            problem: format!("{} tokens in batches of {batch}: nothing to predict", ids.len()),
        });
    }
    let t = gpt.config.block_size;
    let starts: Vec<usize> = (0..ids.len() - 1).step_by(t).collect();
    // groups of windows of the same length (only the last window can be shorter), computed
    // side by side on the cores and added in order
    let groups: Vec<&[usize]> = starts
        .chunks(batch)
        .flat_map(|g| {
            g.chunk_by(|&a, &b| (ids.len() - 1 - a).min(t) == (ids.len() - 1 - b).min(t))
        })
        .collect();
    let sums: Vec<Result<f64>> = groups
        .par_iter()
        .map(|same| {
            let n = (ids.len() - 1 - same[0]).min(t);
            let x = ndarray::Array2::from_shape_fn((same.len(), n), |(b, i)| ids[same[b] + i]);
            let y =
                ndarray::Array2::from_shape_fn((same.len(), n), |(b, i)| ids[same[b] + i + 1]);
            Ok(gpt.loss_with(k, &x.view(), &y.view())? * (same.len() * n) as f64)
        })
        .collect();
    let mut total = 0.0;
    for sum in sums {
        total += sum?;
    }
    Ok(total / (ids.len() - 1) as f64)
}
// ANCHOR_END: evaluate
