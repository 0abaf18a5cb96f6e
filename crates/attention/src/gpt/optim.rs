//! Chapter *A model that writes*: AdamW, its learning-rate schedule, and clipping.
//!
//! Three things nanoGPT's training adds to chapter 12's Adam, each a line or two:
//!
//! - **Decoupled weight decay** (Loshchilov and Hutter's AdamW): every step shrinks the
//!   weights a little, `θ ← θ·(1 − lr·λ)`, beside Adam's update instead of inside the
//!   gradient, and only the matrices and tables (two axes): layer-norm gains and shifts are
//!   left alone, since pulling a gain towards 0 would switch its feature off.
//! - **A schedule**: the learning rate climbs linearly for the first steps (warm-up), then
//!   falls along half a cosine to a floor.
//! - **Clipping by the global norm**: if the gradient of all the weights together is longer
//!   than a limit, every tensor is scaled by the same factor, so the direction is kept.
//!
//! Anchors (below the doc comments): `adamw`, `adamw_step`, `learning_rate`, `clip`.

use ndarray::ArrayD;

use super::weights::Gpt;
use crate::error::{AttentionError, Result};
use crate::float::{Float, to_f64};

/// AdamW as PyTorch's `torch.optim.AdamW` computes it, with nanoGPT's split: weight decay on
/// the tensors with two axes, none on the others, and tensors that are not trained
/// ([`Gpt::is_trained`]) left untouched.
///
/// ```
/// use attention::gpt::{config::GptConfig, optim::AdamW, weights::Gpt};
///
/// let config = GptConfig { n_layer: 1, n_embd: 4, n_head: 1, block_size: 2, ..GptConfig::shakespeare(3) };
/// let mut gpt = Gpt::<f64>::zeros(config);
/// gpt.wte.fill(1.0);
/// let mut grads = Gpt::<f64>::zeros(config);
/// grads.wte.fill(0.5);
/// let mut adamw = AdamW::nanogpt(&gpt);
/// adamw.step(&mut gpt, &grads, 1e-3).unwrap();
/// // decay 1 → 1 − 1e-3·0.1, then Adam's first step moves by lr against the gradient
/// assert!((gpt.wte[[0, 0]] - (1.0 - 1e-4 - 1e-3)).abs() < 1e-9);
/// assert_eq!(adamw.steps(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: adamw
pub struct AdamW<A> {
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    steps: usize,
    m: Vec<ArrayD<A>>, // the first moment of every tensor, in the order of Gpt::tensors
    v: Vec<ArrayD<A>>, // the second moment
}
// ANCHOR_END: adamw

impl<A: Float> AdamW<A> {
    /// nanoGPT's settings: `β₁ = 0.9`, `β₂ = 0.99`, `ε = 1e-8`, weight decay `λ = 0.1`; the
    /// moments start at zero, one per tensor of `gpt`.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, optim::AdamW, weights::Gpt};
    ///
    /// let adamw = AdamW::nanogpt(&Gpt::<f32>::zeros(GptConfig::shakespeare(65)));
    /// assert_eq!(adamw.steps(), 0);
    /// ```
    pub fn nanogpt(gpt: &Gpt<A>) -> Self {
        Self::new(gpt, 0.9, 0.99, 1e-8, 0.1)
    }

    /// AdamW with the given `β₁`, `β₂`, `ε` and weight decay `λ`, its moments zero.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, optim::AdamW, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
    /// assert_eq!(AdamW::new(&gpt, 0.9, 0.999, 1e-8, 0.0), AdamW::new(&gpt, 0.9, 0.999, 1e-8, 0.0));
    /// ```
    pub fn new(gpt: &Gpt<A>, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> Self {
        let zeros: Vec<ArrayD<A>> =
            gpt.tensors().iter().map(|(_, t)| ArrayD::zeros(t.raw_dim())).collect();
        AdamW { beta1, beta2, eps, weight_decay, steps: 0, m: zeros.clone(), v: zeros }
    }

    /// The number of steps taken.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, optim::AdamW, weights::Gpt};
    ///
    /// assert_eq!(AdamW::nanogpt(&Gpt::<f32>::zeros(GptConfig::shakespeare(65))).steps(), 0);
    /// ```
    // ANCHOR: adamw_steps
    pub fn steps(&self) -> usize {
        self.steps
    }
    // ANCHOR_END: adamw_steps

    /// The first and second moments, one tensor each per tensor of the model, in the order
    /// of [`Gpt::tensors`] (PyTorch's `exp_avg` and `exp_avg_sq`): what a checkpoint saves
    /// to resume training.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, optim::AdamW, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
    /// let adamw = AdamW::nanogpt(&gpt);
    /// let (m, v) = adamw.moments();
    /// assert_eq!((m.len(), v.len()), (gpt.tensors().len(), gpt.tensors().len()));
    /// ```
    pub fn moments(&self) -> (&[ArrayD<A>], &[ArrayD<A>]) {
        (&self.m, &self.v)
    }

    /// nanoGPT's AdamW resumed after `steps` steps with the given moments; an error unless
    /// they have the shapes of `gpt`'s tensors.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, optim::AdamW, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
    /// let fresh = AdamW::nanogpt(&gpt);
    /// let (m, v) = fresh.moments();
    /// let resumed = AdamW::resume(&gpt, 7, m.to_vec(), v.to_vec()).unwrap();
    /// assert_eq!(resumed.steps(), 7);
    /// assert!(AdamW::resume(&gpt, 7, vec![], vec![]).is_err());
    /// ```
    pub fn resume(
        gpt: &Gpt<A>,
        steps: usize,
        m: Vec<ArrayD<A>>,
        v: Vec<ArrayD<A>>,
    ) -> Result<Self> {
        let mut adamw = Self::nanogpt(gpt);
        let fits = |moments: &[ArrayD<A>]| {
            moments.len() == adamw.m.len()
                && moments.iter().zip(&adamw.m).all(|(a, b)| a.shape() == b.shape())
        };
        if !fits(&m) || !fits(&v) {
            return Err(AttentionError::Invalid {
                what: "AdamW state".into(),
                problem: "its moments do not have the shapes of the model's tensors".into(),
            });
        }
        (adamw.steps, adamw.m, adamw.v) = (steps, m, v);
        Ok(adamw)
    }

    /// One step with learning rate `lr`: for every trained tensor `θ` with gradient `g`,
    ///
    /// ```text
    /// θ ← θ·(1 − lr·λ)            (tensors with two axes only)
    /// m ← β₁·m + (1 − β₁)·g       v ← β₂·v + (1 − β₂)·g²
    /// θ ← θ − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
    /// ```
    ///
    /// as `torch.optim.AdamW` orders it. An error if `grads` is not shaped like `gpt` or
    /// like the model this optimiser was made for.
    // ANCHOR: adamw_step
    pub fn step(&mut self, gpt: &mut Gpt<A>, grads: &Gpt<A>, lr: f64) -> Result<()> {
        let fits = self.m.len() == gpt.tensors().len()
            && self.m.iter().zip(gpt.tensors()).all(|(m, (_, t))| m.shape() == t.shape());
        if gpt.config != grads.config || !fits {
            return Err(AttentionError::Invalid {
                what: "AdamW step".into(),
                problem: "the model, its gradient and the optimiser have different shapes"
                    .into(),
            });
        }
        self.steps += 1;
        let t = self.steps as i32;
        let step_size = lr / (1.0 - self.beta1.powi(t));
        let sqrt_correction2 = (1.0 - self.beta2.powi(t)).sqrt();
        let (b1, b2, eps) = (self.beta1, self.beta2, self.eps);
        let trained: Vec<bool> =
            gpt.tensors().iter().map(|(n, _)| gpt.is_trained(n)).collect();
        let grads = grads.tensors();
        for (i, (_, mut theta)) in gpt.tensors_mut().into_iter().enumerate() {
            if !trained[i] {
                continue;
            }
            let decay = if theta.ndim() == 2 { 1.0 - lr * self.weight_decay } else { 1.0 };
            let (m, v, g) = (&mut self.m[i], &mut self.v[i], &grads[i].1);
            for (((p, m), v), &g) in
                theta.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g)
            {
                let g = to_f64(g);
                let new_m = to_f64(*m) + (1.0 - b1) * (g - to_f64(*m));
                let new_v = b2 * to_f64(*v) + (1.0 - b2) * g * g;
                (*m, *v) = (A::from_f64_lossy(new_m), A::from_f64_lossy(new_v));
                let denom = new_v.sqrt() / sqrt_correction2 + eps;
                *p = A::from_f64_lossy(to_f64(*p) * decay - step_size * new_m / denom);
            }
        }
        Ok(())
    }
    // ANCHOR_END: adamw_step
}

/// nanoGPT's learning rate at step `step` (counting from 0): `max · (step + 1)/(warmup + 1)`
/// during the `warmup` first steps, then half a cosine from `max` down to `min` at step
/// `total`, and `min` after.
///
/// ```
/// use attention::gpt::optim::learning_rate;
///
/// let lr = |s| learning_rate(s, 100, 2000, 1e-3, 1e-4);
/// assert_eq!(lr(0), 1e-3 / 101.0);
/// assert_eq!(lr(100), 1e-3);
/// assert!((lr(1050) - 5.5e-4).abs() < 1e-12); // half-way down the cosine
/// assert_eq!(lr(2000), 1e-4);
/// assert_eq!(lr(5000), 1e-4);
/// ```
// ANCHOR: learning_rate
pub fn learning_rate(step: usize, warmup: usize, total: usize, max: f64, min: f64) -> f64 {
    if step < warmup {
        return max * (step + 1) as f64 / (warmup + 1) as f64;
    }
    if step >= total {
        return min;
    }
    let progress = (step - warmup) as f64 / (total - warmup) as f64; // 0 → 1
    // libm's cosine, not the system's: the same bits on every machine
    min + 0.5 * (1.0 + libm::cos(std::f64::consts::PI * progress)) * (max - min)
}
// ANCHOR_END: learning_rate

/// Scales every trained gradient by the same factor so that their global norm (the length of
/// all of them as one vector) is at most `max_norm`, as `torch.nn.utils.clip_grad_norm_`:
/// the factor is `max_norm / (norm + 1e-6)` when that is below 1. Returns the norm before
/// clipping.
///
/// ```
/// use attention::gpt::{config::GptConfig, optim::clip_global_norm, weights::Gpt};
///
/// let config = GptConfig { n_layer: 1, n_embd: 4, n_head: 1, block_size: 2, ..GptConfig::shakespeare(3) };
/// let mut grads = Gpt::<f64>::zeros(config);
/// grads.wte[[0, 0]] = 3.0;
/// grads.wpe[[1, 2]] = 4.0;
/// assert_eq!(clip_global_norm(&mut grads, 1.0), 5.0);
/// assert!((grads.wte[[0, 0]] - 0.6).abs() < 1e-6 && (grads.wpe[[1, 2]] - 0.8).abs() < 1e-6);
/// ```
// ANCHOR: clip
pub fn clip_global_norm<A: Float>(grads: &mut Gpt<A>, max_norm: f64) -> f64 {
    let trained: Vec<bool> =
        grads.tensors().iter().map(|(n, _)| grads.is_trained(n)).collect();
    let mut sum_sq = 0.0;
    for ((_, g), &on) in grads.tensors().iter().zip(&trained) {
        if on {
            sum_sq += g.iter().map(|&x| to_f64(x) * to_f64(x)).sum::<f64>();
        }
    }
    let norm = sum_sq.sqrt();
    let factor = max_norm / (norm + 1e-6);
    if factor < 1.0 {
        for ((_, mut g), &on) in grads.tensors_mut().into_iter().zip(&trained) {
            if on {
                g.mapv_inplace(|x| A::from_f64_lossy(to_f64(x) * factor));
            }
        }
    }
    norm
}
// ANCHOR_END: clip
