//! Chapter 12, *Watching attention learn*: the gradient of one read-out weight by hand, one
//! step of Adam, the most a position-blind model can score, and what a learning rate ten times
//! larger does to the time it takes to learn.

use attention::Result;
use attention::learn::{Batch, Score, TrainConfig, train};
use attention::softmax::softmax;
use ndarray::ArrayRef2;

use crate::call;

/// Exercise 12.1: the gradient of the mean cross-entropy with respect to one weight `W[k, j]`
/// of the read-out `logits = h·W + b`, for `h: (n, d_model)`, its `logits: (n, classes)` and
/// one target per row (`None` = the row is not scored, as in
/// [`cross_entropy`](attention::learn::cross_entropy)). The inputs are assumed consistent
/// (`n` rows everywhere, targets below `classes`, `k < d_model`, `j < classes`, at least one
/// row scored).
///
/// ```
/// use exercises::ch12::readout_weight_grad;
/// use ndarray::array;
///
/// // Equal logits: softmax gives 1/2 to each class. Row 0 wants class 0, row 1 class 1:
/// // ((0.5 − 1)·1 + (0.5 − 0)·3) / 2 = 0.5.
/// let (h, logits) = (array![[1.0, 2.0], [3.0, 4.0]], array![[0.0, 0.0], [0.0, 0.0]]);
/// assert_eq!(readout_weight_grad(&h, &logits, &[Some(0), Some(1)], 0, 0), 0.5);
/// ```
// ANCHOR: readout_weight_grad
pub fn readout_weight_grad(
    h: &ArrayRef2<f64>,
    logits: &ArrayRef2<f64>,
    targets: &[Option<usize>],
    k: usize,
    j: usize,
) -> f64 {
    let scored = targets.iter().flatten().count() as f64; // the mean is over these rows
    let mut sum = 0.0;
    for (i, target) in targets.iter().enumerate() {
        let Some(t) = *target else { continue }; // an unscored row adds nothing
        let p = softmax(&logits.row(i))[j];
        let one_hot = if j == t { 1.0 } else { 0.0 };
        sum += h[[i, k]] * (p - one_hot); // ∂z_ij/∂W_kj = h_ik
    }
    sum / scored
}
// ANCHOR_END: readout_weight_grad

/// Exercise 12.2: one step of Adam for one parameter `θ` with gradient `g`, at step `t`
/// (counted from 1), with PyTorch's defaults `β₁ = 0.9`, `β₂ = 0.999`, `ε = 1e-8`:
/// `m ← β₁·m + (1 − β₁)·g`, `v ← β₂·v + (1 − β₂)·g²`, then
/// `θ ← θ − lr · m̂ / (√v̂ + ε)` with the bias-corrected `m̂ = m/(1 − β₁ᵗ)` and
/// `v̂ = v/(1 − β₂ᵗ)`. Returns the new `(θ, m, v)`.
///
/// ```
/// use exercises::ch12::adam_step;
///
/// // The first step from m = v = 0 moves θ by lr (up to ε), against the gradient.
/// let (theta, m, v) = adam_step(1.0, 0.5, 0.0, 0.0, 1, 0.1);
/// assert!((theta - 0.9).abs() < 1e-8);
/// assert!((m - 0.05).abs() < 1e-15 && (v - 0.00025).abs() < 1e-15);
/// ```
// ANCHOR: adam_step
pub fn adam_step(theta: f64, g: f64, m: f64, v: f64, t: u32, lr: f64) -> (f64, f64, f64) {
    let (beta1, beta2, eps) = (0.9_f64, 0.999_f64, 1e-8);
    let m = beta1 * m + (1.0 - beta1) * g;
    let v = beta2 * v + (1.0 - beta2) * g * g;
    let t = i32::try_from(t).unwrap_or(i32::MAX);
    let m_hat = m / (1.0 - beta1.powi(t)); // both moments started at 0: undo that bias
    let v_hat = v / (1.0 - beta2.powi(t));
    (theta - lr * m_hat / (v_hat.sqrt() + eps), m, v)
}
// ANCHOR_END: adam_step

/// Exercise 12.3: the most a position-blind model can score on `batch`, the looser bound of
/// the chapter's intuition (the crate's `position_blind_ceiling`), not the `c_max/L` such a
/// model can expect on average over the orders of a bag. Such a model gives every position of
/// a sequence that holds the same token the same answer (its layers cannot tell those
/// positions apart); for each sequence and each token, the best one answer can do is the most
/// common target among the scored positions holding that token. The answer counts those, over
/// every sequence, and the scored positions. A batch whose targets are not one per token is an
/// error (see [`Batch::check`]).
///
/// ```
/// use attention::learn::{Batch, Task};
/// use exercises::ch12::position_blind_bound;
///
/// let task = Task::Reversal { len: 3, vocab: 3 };
/// // a a b: the two a's want b and a, so one of them is wrong.
/// let batch = Batch::new(&task, &[vec![0, 0, 1]]).unwrap();
/// let bound = position_blind_bound(&batch).unwrap();
/// assert_eq!((bound.correct, bound.scored), (2, 3));
/// ```
// ANCHOR: position_blind_bound
pub fn position_blind_bound(batch: &Batch) -> Result<Score> {
    batch.check()?; // one target per token
    let len = batch.tokens.ncols();
    let mut bound = Score { correct: 0, scored: 0 };
    for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
        let targets = &batch.targets[b * len..(b + 1) * len];
        // (token, target) of every scored position of this sequence
        let pairs: Vec<(usize, usize)> =
            seq.iter().zip(targets).filter_map(|(&x, t)| Some((x, (*t)?))).collect();
        bound.scored += pairs.len();
        let mut tokens: Vec<usize> = pairs.iter().map(|p| p.0).collect();
        tokens.sort_unstable();
        tokens.dedup();
        for token in tokens {
            // the one answer this token gets: its most common target
            let count = |o: usize| pairs.iter().filter(|&&p| p == (token, o)).count();
            bound.correct += pairs.iter().map(|p| count(p.1)).max().unwrap_or(0);
        }
    }
    Ok(bound)
}
// ANCHOR_END: position_blind_bound

/// Exercise 12.4: trains `config` (with [`train`]) and returns the first training step whose
/// held-out evaluation scores at least `level` (a fraction, e.g. `0.99`), or `None` if no
/// evaluation of the run does.
///
/// ```
/// use attention::learn::TrainConfig;
/// use exercises::ch12::first_step_at;
///
/// let config = TrainConfig { steps: 10, held_out: 100, ..TrainConfig::reversal() };
/// assert_eq!(first_step_at(&config, 0.0).unwrap(), Some(0)); // before any step
/// assert_eq!(first_step_at(&config, 1.0).unwrap(), None); // 10 steps are too few
/// ```
// ANCHOR: first_step_at
pub fn first_step_at(config: &TrainConfig, level: f64) -> Result<Option<usize>> {
    let run = train(config)?;
    let reached = run.evals.iter().find(|e| e.score.accuracy() >= level);
    Ok(reached.map(|e| e.step)) // the step it was measured at, not its place in the list
}
// ANCHOR_END: first_step_at

/// `|a − b| ≤ tolerance · max(1, |b|)`; never for NaN.
fn near(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * b.abs().max(1.0)
}

/// Checks an answer to exercise 12.1 ([`readout_weight_grad`]): a case small enough to do by
/// hand, then every weight of a read-out with five rows (two of them unscored) and three
/// classes, against the crate's `cross_entropy` and `readout_backward` (to 1e-12).
///
/// ```
/// use exercises::ch12::{check_readout_weight_grad, readout_weight_grad};
/// use ndarray::ArrayRef2;
///
/// assert_eq!(check_readout_weight_grad(readout_weight_grad), Ok(()));
/// // The sum over the rows instead of their mean.
/// let summed = |h: &ArrayRef2<f64>, z: &ArrayRef2<f64>, t: &[Option<usize>], k, j| {
///     let scored = t.iter().flatten().count() as f64;
///     readout_weight_grad(h, z, t, k, j) * scored
/// };
/// assert!(check_readout_weight_grad(summed).is_err());
/// ```
pub fn check_readout_weight_grad(
    readout_weight_grad: impl Fn(
        &ArrayRef2<f64>,
        &ArrayRef2<f64>,
        &[Option<usize>],
        usize,
        usize,
    ) -> f64,
) -> Result<(), String> {
    use attention::learn::{cross_entropy, readout, readout_backward};
    use ndarray::{Array1, Array2, array};

    // By hand: softmax of equal logits is (1/2, 1/2); the mean over the two rows of
    // h_i0 · (p_i0 − [t_i = 0]) is ((0.5 − 1)·1 + (0.5 − 0)·3) / 2 = 0.5.
    let (h, logits) = (array![[1.0, 2.0], [3.0, 4.0]], array![[0.0, 0.0], [0.0, 0.0]]);
    let targets = [Some(0), Some(1)];
    let by_hand = [
        (0, 0, 0.5, "((0.5 − 1)·1 + (0.5 − 0)·3) / 2"),
        (0, 1, -0.5, "((0.5 − 0)·1 + (0.5 − 1)·3) / 2"),
        (1, 0, 0.5, "((0.5 − 1)·2 + (0.5 − 0)·4) / 2"),
    ];
    for (k, j, expected, why) in by_hand {
        let what = format!(
            "readout_weight_grad(h = [[1, 2], [3, 4]], logits = 0, targets = [0, 1], k = {k}, \
             j = {j})"
        );
        let got = call(&what, || readout_weight_grad(&h, &logits, &targets, k, j))?;
        if !near(got, expected, 1e-12) {
            return Err(format!("{what} returned {got}, expected {expected} = {why}"));
        }
    }

    // Every weight of a bigger read-out, with unscored rows, against the crate.
    let h = Array2::from_shape_fn((5, 4), |(i, c)| ((3 * i + 5 * c) % 7) as f64 / 3.0 - 1.0);
    let w = Array2::from_shape_fn((4, 3), |(r, c)| ((2 * r + c) % 5) as f64 / 2.0 - 1.0);
    let b = Array1::from(vec![0.5, -0.25, 0.0]);
    let logits = readout(&h, &w, &b).map_err(|e| e.to_string())?;
    let targets = [Some(2), None, Some(0), Some(2), None];
    let (_, grad_logits) = cross_entropy(&logits, &targets).map_err(|e| e.to_string())?;
    let grad_w = readout_backward(&h, &w, &grad_logits).map_err(|e| e.to_string())?.grad_w;
    for ((k, j), &expected) in grad_w.indexed_iter() {
        let what = format!(
            "readout_weight_grad(h: (5, 4), logits: (5, 3), targets = [2, -, 0, 2, -], \
             k = {k}, j = {j})"
        );
        let got = call(&what, || readout_weight_grad(&h, &logits, &targets, k, j))?;
        if !near(got, expected, 1e-12) {
            return Err(format!(
                "{what} returned {got}, expected {expected} (the mean over the 3 scored rows \
                 of h[i, k]·(softmax(z_i)_j − [j = t_i]); rows 1 and 4 are not scored)"
            ));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 12.2 ([`adam_step`]): the first step from zero moments, then
/// 25 steps of one parameter (gradients of both signs, a zero, a large one) against the
/// crate's [`Adam`](attention::learn::Adam), with the moments `m`, `v` each step returns
/// (to 1e-12, relative to the size of the value where it is above 1).
///
/// ```
/// use exercises::ch12::{adam_step, check_adam_step};
///
/// assert_eq!(check_adam_step(adam_step), Ok(()));
/// // Without the bias correction: the first step is 3.16 times too long.
/// let uncorrected = |theta: f64, g: f64, m: f64, v: f64, _t: u32, lr: f64| {
///     let (m, v) = (0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g);
///     (theta - lr * m / (v.sqrt() + 1e-8), m, v)
/// };
/// assert!(check_adam_step(uncorrected).is_err());
/// ```
pub fn check_adam_step(
    adam_step: impl Fn(f64, f64, f64, f64, u32, f64) -> (f64, f64, f64),
) -> Result<(), String> {
    use attention::learn::Adam;
    use ndarray::arr1;

    let (beta1, beta2) = (0.9_f64, 0.999_f64);
    let (lr, theta0) = (0.1, 1.0);
    let gradients: Vec<f64> = [0.5, -1.0, 0.25, 0.0, 3.0, -0.125, 0.75, -2.0]
        .into_iter()
        .cycle()
        .take(25)
        .enumerate()
        .map(|(t, g)| g * (1.0 + t as f64 / 10.0))
        .collect();
    let mut adam = Adam::new(lr).map_err(|e| e.to_string())?;
    let mut reference = arr1(&[theta0]).into_dyn();
    let (mut theta, mut m, mut v) = (theta0, 0.0, 0.0);
    for (t, &g) in (1..).zip(&gradients) {
        let grad = arr1(&[g]).into_dyn();
        adam.step(&mut [reference.view_mut()], &[grad.view()]).map_err(|e| e.to_string())?;
        let expected_m = beta1 * m + (1.0 - beta1) * g;
        let expected_v = beta2 * v + (1.0 - beta2) * g * g;
        let what =
            format!("adam_step(θ = {theta}, g = {g}, m = {m}, v = {v}, t = {t}, lr = {lr})");
        let (new_theta, new_m, new_v) = call(&what, || adam_step(theta, g, m, v, t, lr))?;
        let expected_theta = reference[[0]];
        if !(near(new_m, expected_m, 1e-12) && near(new_v, expected_v, 1e-12)) {
            return Err(format!(
                "{what} returned m = {new_m}, v = {new_v}, expected m = {expected_m}, \
                 v = {expected_v} (m ← 0.9·m + 0.1·g, v ← 0.999·v + 0.001·g²)"
            ));
        }
        if !near(new_theta, expected_theta, 1e-12) {
            let why = if t == 1 {
                "at the first step m̂ = g and v̂ = g², so θ moves by lr·g/(|g| + ε), almost \
                 exactly lr"
            } else {
                "θ − lr·m̂/(√v̂ + ε) with m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ)"
            };
            return Err(format!(
                "{what} returned θ = {new_theta}, expected {expected_theta} ({why})"
            ));
        }
        (theta, m, v) = (new_theta, new_m, new_v);
    }
    Ok(())
}

/// Checks an answer to exercise 12.3 ([`position_blind_bound`]): four batches small enough to
/// count by hand (a repeated token, two orders of one bag, a palindrome, an induction sequence
/// with unscored positions), then random reversal and induction batches against the crate's
/// [`position_blind_ceiling`](attention::learn::position_blind_ceiling); a batch with one
/// target too few must be an error, not a panic.
///
/// ```
/// use attention::learn::{Batch, Score};
/// use exercises::ch12::{check_position_blind_bound, position_blind_bound};
///
/// assert_eq!(check_position_blind_bound(position_blind_bound), Ok(()));
/// // Every scored position right: a model that could tell its positions apart.
/// let all = |b: &Batch| {
///     let scored = b.targets.iter().flatten().count();
///     Ok(Score { correct: scored, scored })
/// };
/// assert!(check_position_blind_bound(all).is_err());
/// ```
pub fn check_position_blind_bound(
    position_blind_bound: impl Fn(&Batch) -> Result<Score>,
) -> Result<(), String> {
    use attention::learn::{Task, position_blind_ceiling};
    use rand::{SeedableRng, rngs::StdRng};

    let reversal = Task::Reversal { len: 3, vocab: 3 };
    let induction = Task::Induction { len: 6, vocab: 8, prefix: 4 };
    // (task, sequences, what they are, right answers, scored positions, why)
    type Case<'a> = (&'a Task, Vec<Vec<usize>>, &'a str, usize, usize, &'a str);
    let cases: [Case; 4] = [
        (
            &reversal,
            vec![vec![0, 0, 1]],
            "reversal of a a b",
            2,
            3,
            "the two a's want b and a: one answer serves one of them",
        ),
        (
            &reversal,
            vec![vec![0, 1, 2], vec![1, 0, 2]],
            "reversal of a b c and of b a c",
            6,
            6,
            "the bound is per sequence: in each, every token occurs once and can get its own \
             answer (a → c in the first, a → a in the second)",
        ),
        (&reversal, vec![vec![0, 1, 0]], "reversal of a b a", 3, 3, "a palindrome"),
        (
            &induction,
            vec![vec![5, 1, 7, 2, 7, 5]],
            "induction on f b h c h f",
            2,
            2,
            "only the two queries are scored, and each holds its own token",
        ),
    ];
    for (task, sequences, name, correct, scored, why) in cases {
        let batch = Batch::new(task, &sequences).map_err(|e| e.to_string())?;
        let what = format!("position_blind_bound({name})");
        let got = call(&what, || position_blind_bound(&batch))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        if (got.correct, got.scored) != (correct, scored) {
            return Err(format!(
                "{what} returned {} of {}, expected {correct} of {scored} ({why})",
                got.correct, got.scored
            ));
        }
    }
    let random = [
        (Task::Reversal { len: 7, vocab: 3 }, 300, "300 random reversal sequences, L = 7"),
        (Task::Induction { len: 14, vocab: 16, prefix: 8 }, 100, "100 induction sequences"),
    ];
    for (seed, (task, n, name)) in (1..).zip(random) {
        let batch = task.batch(n, &mut StdRng::seed_from_u64(seed), None);
        let batch = batch.map_err(|e| e.to_string())?;
        let expected = position_blind_ceiling(&batch).map_err(|e| e.to_string())?;
        let what = format!("position_blind_bound({name})");
        let got = call(&what, || position_blind_bound(&batch))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        if got != expected {
            return Err(format!(
                "{what} returned {} of {}, expected {} of {}",
                got.correct, got.scored, expected.correct, expected.scored
            ));
        }
    }
    let mut short = Batch::new(&reversal, &[vec![0, 1, 2]]).map_err(|e| e.to_string())?;
    short.targets.pop(); // 3 tokens, 2 targets
    let what = "position_blind_bound(a b c with one target too few)";
    let result = call(what, || position_blind_bound(&short)).map_err(|panic| {
        format!("{panic}; a batch whose targets do not match its tokens should be an error")
    })?;
    if let Ok(got) = result {
        return Err(format!(
            "{what} returned {} of {} instead of an error: the batch has 3 tokens but 2 \
             targets",
            got.correct, got.scored
        ));
    }
    Ok(())
}

/// Checks an answer to exercise 12.4 ([`first_step_at`]) on the chapter's runs: reversal at
/// the learning rates 0.05 and 0.005 (50 steps), and induction at 0.05 (300 steps), which
/// reaches 80 % and never 90 %. Training is reproducible to the bit, so the steps are exact.
///
/// ```
/// use exercises::ch12::{check_first_step_at, first_step_at};
///
/// assert_eq!(check_first_step_at(first_step_at), Ok(()));
/// ```
pub fn check_first_step_at(
    first_step_at: impl Fn(&TrainConfig, f64) -> Result<Option<usize>>,
) -> Result<(), String> {
    let reversal = |lr: f64| TrainConfig { lr, steps: 50, ..TrainConfig::reversal() };
    let induction = TrainConfig { lr: 0.05, steps: 300, ..TrainConfig::induction() };
    let cases = [
        (reversal(0.05), "reversal at lr 0.05, 50 steps", 1.0, Some(15)),
        (reversal(0.005), "reversal at lr 0.005, 50 steps", 0.99, Some(35)),
        (induction.clone(), "induction at lr 0.05, 300 steps", 0.8, Some(125)),
        (induction, "induction at lr 0.05, 300 steps", 0.9, None),
    ];
    for (config, name, level, expected) in cases {
        let what = format!("first_step_at({name}, level {level})");
        let got = call(&what, || first_step_at(&config, level))?;
        let got = got.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        if got != expected {
            return Err(format!(
                "{what} returned {got:?}, expected {expected:?} (the training step of the \
                 first held-out evaluation at or above the level, None if none is; this run \
                 evaluates every {} steps)",
                config.eval_every
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;
    use attention::learn::Task;

    #[test]
    fn readout_weight_grad_passes_and_classic_mistakes_fail() {
        assert_eq!(check_readout_weight_grad(readout_weight_grad), Ok(()));
        // The sum over the scored rows instead of their mean.
        let summed = |h: &ArrayRef2<f64>, z: &ArrayRef2<f64>, t: &[Option<usize>], k, j| {
            readout_weight_grad(h, z, t, k, j) * t.iter().flatten().count() as f64
        };
        rejects(check_readout_weight_grad(summed), "k = 0, j = 0) returned 1, expected 0.5");
        // softmax(z) alone: the −1 of the one-hot forgotten.
        let no_one_hot =
            |h: &ArrayRef2<f64>, z: &ArrayRef2<f64>, t: &[Option<usize>], k, j| {
                let rows: Vec<usize> = (0..t.len()).filter(|&i| t[i].is_some()).collect();
                let sum: f64 = rows.iter().map(|&i| h[[i, k]] * softmax(&z.row(i))[j]).sum();
                sum / rows.len() as f64
            };
        rejects(
            check_readout_weight_grad(no_one_hot),
            "k = 0, j = 0) returned 1, expected 0.5",
        );
        // The mean over every row, the unscored ones included in the count.
        let all_rows = |h: &ArrayRef2<f64>, z: &ArrayRef2<f64>, t: &[Option<usize>], k, j| {
            let scored = t.iter().flatten().count() as f64;
            readout_weight_grad(h, z, t, k, j) * scored / t.len() as f64
        };
        rejects(check_readout_weight_grad(all_rows), "rows 1 and 4 are not scored");
        // The unscored rows treated as if their target were class 0.
        let unscored_as_zero =
            |h: &ArrayRef2<f64>, z: &ArrayRef2<f64>, t: &[Option<usize>], k, j| {
                let filled: Vec<Option<usize>> = t.iter().map(|x| x.or(Some(0))).collect();
                readout_weight_grad(h, z, &filled, k, j)
            };
        rejects(check_readout_weight_grad(unscored_as_zero), "targets = [2, -, 0, 2, -]");
    }

    #[test]
    fn adam_step_passes_and_classic_mistakes_fail() {
        assert_eq!(check_adam_step(adam_step), Ok(()));
        // Written as (β, bias correction of m, bias correction of v, t offset).
        let variant = |correct_m: bool, correct_v: bool, t_offset: i32| {
            move |theta: f64, g: f64, m: f64, v: f64, t: u32, lr: f64| {
                let (m, v) = (0.9 * m + (1.0 - 0.9) * g, 0.999 * v + (1.0 - 0.999) * g * g);
                let t = t as i32 + t_offset;
                let m_hat = if correct_m { m / (1.0 - 0.9_f64.powi(t)) } else { m };
                let v_hat = if correct_v { v / (1.0 - 0.999_f64.powi(t)) } else { v };
                (theta - lr * m_hat / (v_hat.sqrt() + 1e-8), m, v)
            }
        };
        assert_eq!(check_adam_step(variant(true, true, 0)), Ok(()));
        // No bias correction: the first step moves θ by 0.316 = lr·0.1/√0.001, not lr.
        rejects(check_adam_step(variant(false, false, 0)), "returned θ = 0.6837");
        // Only the first moment corrected: 31.6 times too long.
        rejects(check_adam_step(variant(true, false, 0)), "returned θ = -2.16");
        // t counted from 0: 1 − β⁰ = 0, a division by zero.
        rejects(check_adam_step(variant(true, true, -1)), "returned θ = NaN");
        // The moments without the (1 − β) weights.
        let unweighted = |theta: f64, g: f64, m: f64, v: f64, t: u32, lr: f64| {
            let (m, v) = (0.9 * m + g, 0.999 * v + g * g);
            let t = t as i32;
            let (m_hat, v_hat) = (m / (1.0 - 0.9_f64.powi(t)), v / (1.0 - 0.999_f64.powi(t)));
            (theta - lr * m_hat / (v_hat.sqrt() + 1e-8), m, v)
        };
        rejects(check_adam_step(unweighted), "(m ← 0.9·m + 0.1·g, v ← 0.999·v + 0.001·g²)");
    }

    #[test]
    fn position_blind_bound_passes_and_classic_mistakes_fail() {
        assert_eq!(check_position_blind_bound(position_blind_bound), Ok(()));
        // One answer per token for the whole batch, not per sequence.
        let pooled = |batch: &Batch| {
            let all = batch.tokens.to_shape((1, batch.tokens.len())).unwrap().to_owned();
            position_blind_bound(&Batch { tokens: all, targets: batch.targets.clone() })
        };
        rejects(check_position_blind_bound(pooled), "returned 3 of 6, expected 6 of 6");
        // The unscored positions counted as well.
        let all_positions = |batch: &Batch| {
            let filled: Vec<Option<usize>> =
                batch.targets.iter().map(|t| t.or(Some(0))).collect();
            position_blind_bound(&Batch { tokens: batch.tokens.clone(), targets: filled })
        };
        rejects(check_position_blind_bound(all_positions), "induction on f b h c h f");
        // One answer for the whole sequence: its most common target.
        let one_answer = |batch: &Batch| {
            let len = batch.tokens.ncols();
            batch.check()?;
            let mut score = Score { correct: 0, scored: 0 };
            for b in 0..batch.len() {
                let targets: Vec<usize> =
                    batch.targets[b * len..(b + 1) * len].iter().flatten().copied().collect();
                let best = targets
                    .iter()
                    .map(|&o| targets.iter().filter(|&&x| x == o).count())
                    .max()
                    .unwrap_or(0);
                score.correct += best;
                score.scored += targets.len();
            }
            Ok(score)
        };
        rejects(check_position_blind_bound(one_answer), "returned 2 of 6, expected 6 of 6");
        // The solution without its check of the batch: slicing one target too few panics.
        let unchecked = |batch: &Batch| {
            let len = batch.tokens.ncols();
            let mut bound = Score { correct: 0, scored: 0 };
            for (b, seq) in batch.tokens.rows().into_iter().enumerate() {
                let targets = &batch.targets[b * len..(b + 1) * len];
                let pairs: Vec<(usize, usize)> =
                    seq.iter().zip(targets).filter_map(|(&x, t)| Some((x, (*t)?))).collect();
                bound.scored += pairs.len();
                let mut tokens: Vec<usize> = pairs.iter().map(|p| p.0).collect();
                tokens.sort_unstable();
                tokens.dedup();
                for token in tokens {
                    let count = |o: usize| pairs.iter().filter(|&&p| p == (token, o)).count();
                    bound.correct += pairs.iter().map(|p| count(p.1)).max().unwrap_or(0);
                }
            }
            Ok(bound)
        };
        rejects(check_position_blind_bound(unchecked), "with one target too few) panicked");
    }

    #[test]
    fn the_bound_of_each_order_of_a_bag_is_loose_but_holds_on_average() {
        // Every order of a b c: the bound says 3 of 3 for each, yet one answer per token
        // (whatever it is) is right on average at 1 position of 3, c_max/L = 1/3.
        let task = Task::Reversal { len: 3, vocab: 3 };
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
        let batch = Batch::new(&task, &orders.map(|o| o.to_vec())).unwrap();
        assert_eq!(position_blind_bound(&batch).unwrap(), Score { correct: 18, scored: 18 });
        for answer in 0..27 {
            let o = |t: usize| (answer / 3_usize.pow(t as u32)) % 3; // o(t) for t = 0, 1, 2
            let right = (0..6)
                .flat_map(|b| (0..3).map(move |i| (b, i)))
                .filter(|&(b, i)| batch.targets[3 * b + i] == Some(o(orders[b][i])))
                .count();
            assert_eq!(right, 6, "answer function {answer}"); // 6 of 18 = 1/3, always
        }
    }

    #[test]
    fn first_step_at_passes_and_classic_mistakes_fail() {
        // Each wrong answer fails on the first case, a 50-step run.
        // The place in the list of evaluations instead of the step.
        let index = |config: &TrainConfig, level: f64| {
            let run = train(config)?;
            Ok(run.evals.iter().position(|e| e.score.accuracy() >= level))
        };
        rejects(check_first_step_at(index), "returned Some(3), expected Some(15)");
        // Strictly above the level: a run that reaches 100 % never counts.
        let above = |config: &TrainConfig, level: f64| {
            let run = train(config)?;
            Ok(run.evals.iter().find(|e| e.score.accuracy() > level).map(|e| e.step))
        };
        rejects(check_first_step_at(above), "returned None, expected Some(15)");
        assert_eq!(check_first_step_at(first_step_at), Ok(()));
    }

    #[test]
    fn adam_step_agrees_with_the_worked_example_of_the_crate() {
        // attention::learn's tests work two steps out by hand (lr 0.1, θ = 1).
        let (theta, m, v) = adam_step(1.0, 0.5, 0.0, 0.0, 1, 0.1);
        assert!((theta - 0.900000002).abs() < 1e-15);
        let (theta, _, _) = adam_step(theta, -1.0, m, v, 2, 0.1);
        assert!((theta - 0.9366103542405656).abs() < 1e-15);
    }
}
