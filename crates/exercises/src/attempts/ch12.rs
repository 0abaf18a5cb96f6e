//! Your attempts at the exercises of chapter 12, *Watching attention learn*. Check them with
//! `cargo test -p exercises attempts::ch12 -- --ignored`.

// ANCHOR: readout_weight_grad
use ndarray::ArrayRef2;

pub fn readout_weight_grad(
    h: &ArrayRef2<f64>,
    logits: &ArrayRef2<f64>,
    targets: &[Option<usize>],
    k: usize,
    j: usize,
) -> f64 {
    todo!("the mean over the scored rows of h[i, k]·(softmax(logits_i)_j − [j = t_i])")
}
// ANCHOR_END: readout_weight_grad

// ANCHOR: adam_step
pub fn adam_step(theta: f64, g: f64, m: f64, v: f64, t: u32, lr: f64) -> (f64, f64, f64) {
    todo!(
        "update m and v, correct their bias with 1 − β₁ᵗ and 1 − β₂ᵗ, step; return (θ, m, v)"
    )
}
// ANCHOR_END: adam_step

// ANCHOR: position_blind_bound
use attention::Result;
use attention::learn::{Batch, Score};

pub fn position_blind_bound(batch: &Batch) -> Result<Score> {
    todo!("per sequence and token: the count of its most common target; and the scored count")
}
// ANCHOR_END: position_blind_bound

// ANCHOR: first_step_at
use attention::learn::TrainConfig;

pub fn first_step_at(config: &TrainConfig, level: f64) -> Result<Option<usize>> {
    todo!("train, then the step of the first evaluation whose accuracy is at least the level")
}
// ANCHOR_END: first_step_at

#[cfg(test)]
mod tests {
    use crate::{ch12, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch12 -- --ignored"]
    fn readout_weight_grad() {
        verdict(ch12::check_readout_weight_grad(super::readout_weight_grad));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch12 -- --ignored"]
    fn adam_step() {
        verdict(ch12::check_adam_step(super::adam_step));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch12 -- --ignored"]
    fn position_blind_bound() {
        verdict(ch12::check_position_blind_bound(super::position_blind_bound));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch12 -- --ignored"]
    fn first_step_at() {
        verdict(ch12::check_first_step_at(super::first_step_at));
    }
}
