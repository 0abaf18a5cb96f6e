//! The optimiser: [`Adam`] (Kingma and Ba), written out, with its state per parameter.
//!
//! Anchors (below the doc comments): `adam`, `adam_new`, `adam_with_betas`, `adam_step`.

use ndarray::{ArrayD, ArrayViewD, ArrayViewMutD};

use super::invalid_setting;
use crate::error::{AttentionError, Result};

/// Adam (Kingma and Ba), written out: for every parameter `θ` with gradient `g`, at step
/// `t = 1, 2, …`
///
/// ```text
/// m ← β₁·m + (1 − β₁)·g          v ← β₂·v + (1 − β₂)·g²
/// m̂ = m / (1 − β₁ᵗ)               v̂ = v / (1 − β₂ᵗ)
/// θ ← θ − lr · m̂ / (√v̂ + ε)
/// ```
///
/// with `m` and `v` starting at 0 (PyTorch's `torch.optim.Adam` without weight decay). The
/// powers `β₁ᵗ`, `β₂ᵗ` are kept by multiplying by `β` once per step.
///
/// ```
/// use attention::learn::Adam;
/// use ndarray::arr1;
///
/// let mut adam = Adam::new(0.1).unwrap();
/// let mut theta = arr1(&[1.0, -2.0]).into_dyn();
/// let grad = arr1(&[0.5, -0.5]).into_dyn();
/// adam.step(&mut [theta.view_mut()], &[grad.view()]).unwrap();
/// // The first step moves every parameter by almost exactly lr, against its gradient.
/// assert!((&theta - &arr1(&[0.9, -1.9]).into_dyn()).iter().all(|d| d.abs() < 1e-8));
/// assert_eq!(adam.steps(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: adam
pub struct Adam {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    beta1_t: f64,        // β₁ᵗ after t steps
    beta2_t: f64,        // β₂ᵗ
    steps: usize,        // t
    m: Vec<ArrayD<f64>>, // the first moment of every parameter tensor
    v: Vec<ArrayD<f64>>, // the second moment
}
// ANCHOR_END: adam

impl Adam {
    /// Adam with learning rate `lr` and PyTorch's defaults `β₁ = 0.9`, `β₂ = 0.999`,
    /// `ε = 1e-8`; an error unless `lr` is positive and finite.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert_eq!(Adam::new(3e-3).unwrap().lr(), 3e-3);
    /// assert!(Adam::new(0.0).is_err());
    /// ```
    // ANCHOR: adam_new
    pub fn new(lr: f64) -> Result<Self> {
        Adam::with_betas(lr, 0.9, 0.999, 1e-8)
    }
    // ANCHOR_END: adam_new

    /// Adam with every setting given: `lr > 0`, `0 ≤ β₁, β₂ < 1`, `ε > 0`.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert!(Adam::with_betas(1e-3, 0.9, 0.98, 1e-9).is_ok());
    /// assert!(Adam::with_betas(1e-3, 1.0, 0.98, 1e-9).is_err());
    /// ```
    // ANCHOR: adam_with_betas
    pub fn with_betas(lr: f64, beta1: f64, beta2: f64, eps: f64) -> Result<Self> {
        if !(lr > 0.0 && lr.is_finite()) {
            return Err(invalid_setting(
                "Adam learning rate",
                format!("must be > 0, but it is {lr}"),
            ));
        }
        for (name, beta) in [("Adam β₁", beta1), ("Adam β₂", beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(invalid_setting(
                    name,
                    format!("must be in [0, 1), but it is {beta}"),
                ));
            }
        }
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(invalid_setting("Adam ε", format!("must be > 0, but it is {eps}")));
        }
        let (m, v) = (Vec::new(), Vec::new());
        Ok(Adam { lr, beta1, beta2, eps, beta1_t: 1.0, beta2_t: 1.0, steps: 0, m, v })
    }
    // ANCHOR_END: adam_with_betas

    /// The learning rate.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert_eq!(Adam::new(0.01).unwrap().lr(), 0.01);
    /// ```
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// How many steps have been taken.
    ///
    /// ```
    /// use attention::learn::Adam;
    ///
    /// assert_eq!(Adam::new(0.01).unwrap().steps(), 0);
    /// ```
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// One step: moves every tensor of `params` against the matching tensor of `grads`.
    ///
    /// The first step fixes the list: every later step must pass the same number of tensors
    /// with the same shapes, in the same order (an error says which one differs). Entries
    /// are updated one by one, each with the formula above.
    ///
    /// ```
    /// use attention::learn::Adam;
    /// use ndarray::{arr1, arr2};
    ///
    /// let mut adam = Adam::new(0.1).unwrap();
    /// let mut w = arr2(&[[1.0, 2.0]]).into_dyn();
    /// let g = arr2(&[[1.0, 0.0]]).into_dyn();
    /// adam.step(&mut [w.view_mut()], &[g.view()]).unwrap();
    /// assert_eq!(w[[0, 1]], 2.0); // a zero gradient does not move its parameter
    /// let other = arr1(&[1.0]).into_dyn();
    /// assert!(adam.step(&mut [w.view_mut()], &[other.view()]).is_err());
    /// ```
    // ANCHOR: adam_step
    pub fn step(
        &mut self,
        params: &mut [ArrayViewMutD<'_, f64>],
        grads: &[ArrayViewD<'_, f64>],
    ) -> Result<()> {
        self.check(params, grads)?;
        self.steps += 1;
        self.beta1_t *= self.beta1; // β₁ᵗ
        self.beta2_t *= self.beta2; // β₂ᵗ
        let (b1, b2) = (self.beta1, self.beta2);
        for (((theta, g), m), v) in
            params.iter_mut().zip(grads).zip(&mut self.m).zip(&mut self.v)
        {
            for (((theta, &g), m), v) in
                theta.iter_mut().zip(g.iter()).zip(m.iter_mut()).zip(v.iter_mut())
            {
                *m = b1 * *m + (1.0 - b1) * g;
                *v = b2 * *v + (1.0 - b2) * (g * g);
                let m_hat = *m / (1.0 - self.beta1_t);
                let v_hat = *v / (1.0 - self.beta2_t);
                *theta -= self.lr * m_hat / (v_hat.sqrt() + self.eps);
            }
        }
        Ok(())
    }
    // ANCHOR_END: adam_step

    /// Checks `params` against `grads` and against the tensors of earlier steps; creates
    /// the zero moments on the first step.
    fn check(
        &mut self,
        params: &[ArrayViewMutD<'_, f64>],
        grads: &[ArrayViewD<'_, f64>],
    ) -> Result<()> {
        if params.len() != grads.len() {
            let (p, g) = (params.len(), grads.len());
            return Err(AttentionError::mismatch("params", p, "grads", g, "tensors"));
        }
        if self.m.is_empty() {
            self.m = params.iter().map(|p| ArrayD::zeros(p.raw_dim())).collect();
            self.v = self.m.clone();
        }
        if self.m.len() != params.len() {
            let (p, m) = (params.len(), self.m.len());
            return Err(AttentionError::mismatch("params", p, "Adam's moments", m, "tensors"));
        }
        for (k, ((p, g), m)) in params.iter().zip(grads).zip(&self.m).enumerate() {
            for (name, shape) in [("param", p.shape()), ("grad", g.shape())] {
                if shape != m.shape() {
                    let expected =
                        format!("the shape {:?} of earlier steps was expected", m.shape());
                    return Err(AttentionError::shape(
                        &format!("{name} {k}"),
                        shape,
                        &expected,
                    ));
                }
            }
        }
        Ok(())
    }
}
