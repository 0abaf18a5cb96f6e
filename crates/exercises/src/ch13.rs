//! Chapter 13, *Inside a real model*: the exact GELU, a PyTorch `nn.Linear` turned into the
//! book's [`Linear`], the mean of a padded batch's real tokens, and how strongly a head looks
//! at the token just before.

use attention::Result;
use attention::projection::Linear;
use ndarray::{Array2, ArrayRef1, ArrayRef2, ArrayRef3, Axis, s};

use crate::{call, close, refuses};

/// Exercise 13.1: the exact GELU, `GELU(x) = x·Φ(x) = x/2 · (1 + erf(x/√2))`, where `Φ` is
/// the standard normal distribution function (`erf` from `libm`).
///
/// ```
/// use exercises::ch13::exact_gelu;
///
/// assert_eq!(exact_gelu(0.0), 0.0);
/// assert!((exact_gelu(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15); // Φ(1)
/// assert!((exact_gelu(1.0) - exact_gelu(-1.0) - 1.0).abs() < 1e-15); // Φ(x) + Φ(−x) = 1
/// ```
// ANCHOR: exact_gelu
pub fn exact_gelu(x: f64) -> f64 {
    let phi = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)); // Φ(x): the normal CDF
    x * phi
}
// ANCHOR_END: exact_gelu

/// Exercise 13.2: the book's [`Linear`] computing what PyTorch's `nn.Linear` with this
/// `weight` and `bias` computes. PyTorch stores `weight` as `(out, in)` and maps a row `x` to
/// `x · weightᵀ + bias`; the book's map is `x · W + b` with `W: (d_in, d_out)`. A bias whose
/// length is not `out` is an error.
///
/// ```
/// use exercises::ch13::linear_from_torch;
/// use ndarray::array;
///
/// let weight = array![[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]]; // (out, in) = (2, 3)
/// let linear = linear_from_torch(&weight, &array![0.5, -1.0]).unwrap();
/// assert_eq!((linear.d_in(), linear.d_out()), (3, 2));
/// assert_eq!(linear.apply(&array![[1.0, 2.0, 3.0]]).unwrap(), array![[7.5, -2.0]]);
/// assert!(linear_from_torch(&weight, &array![0.5, -1.0, 0.0]).is_err());
/// ```
// ANCHOR: linear_from_torch
pub fn linear_from_torch(
    weight: &ArrayRef2<f32>,
    bias: &ArrayRef1<f32>,
) -> Result<Linear<f32>> {
    let w = weight.t().to_owned(); // (out, in) → (d_in, d_out)
    Linear::with_bias(w, bias.to_owned()) // checks that the bias has d_out entries
}
// ANCHOR_END: linear_from_torch

/// Exercise 13.3: one vector per sentence from a padded batch, `hidden: (batch, L, d)` →
/// `(batch, d)`: row `b` is the mean of the first `lengths[b]` token vectors of item `b`, the
/// rows after them being padding. There is one length per item, each between 1 and `L`.
///
/// ```
/// use exercises::ch13::masked_mean_pool;
/// use ndarray::array;
///
/// let hidden = array![[[1.0, 2.0], [3.0, 4.0], [99.0, 99.0]]]; // the last row is padding
/// assert_eq!(masked_mean_pool(&hidden, &[2]), array![[2.0, 3.0]]);
/// ```
// ANCHOR: masked_mean_pool
pub fn masked_mean_pool(hidden: &ArrayRef3<f64>, lengths: &[usize]) -> Array2<f64> {
    let (batch, _, d) = hidden.dim();
    let mut pooled = Array2::zeros((batch, d));
    for (b, &n) in lengths.iter().enumerate() {
        let real = hidden.slice(s![b, ..n, ..]); // (n, d): the rows after n are padding
        pooled.row_mut(b).assign(&(real.sum_axis(Axis(0)) / n as f64)); // n, not L
    }
    pooled
}
// ANCHOR_END: masked_mean_pool

/// Exercise 13.4: how strongly one head's weights `(L, L)`, row = query and column = key,
/// look at the token just before: the mean over the queries `i = 1 … L − 1` of
/// `weights[i, i − 1]`. Query 0 has no token before it and does not count. `L` is at least 2.
///
/// ```
/// use exercises::ch13::previous_token_score;
/// use ndarray::array;
///
/// let w = array![[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.1, 0.8, 0.1]];
/// assert!((previous_token_score(&w) - 0.7).abs() < 1e-15); // (0.6 + 0.8) / 2
/// ```
// ANCHOR: previous_token_score
pub fn previous_token_score(weights: &ArrayRef2<f64>) -> f64 {
    let l = weights.nrows();
    let sum: f64 = (1..l).map(|i| weights[[i, i - 1]]).sum(); // query 0 has no previous key
    sum / (l - 1) as f64
}
// ANCHOR_END: previous_token_score

/// `|a − b| ≤ tolerance · max(1, |b|)`; never for NaN.
fn near(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * b.abs().max(1.0)
}

/// Checks an answer to exercise 13.1 ([`exact_gelu`]): five values worked out with Python's
/// `math.erf` (`x = 0, 1, −1, 2, −3`: the first three need only a table of `Φ`, since
/// `Φ(−1) = 1 − Φ(1)`), then every `x` from −6 to 6 in steps of 0.01 against the crate's
/// [`gelu`](attention::feed_forward::gelu), to 1e-12 (relative above 1).
///
/// ```
/// use exercises::ch13::{check_exact_gelu, exact_gelu};
///
/// assert_eq!(check_exact_gelu(exact_gelu), Ok(()));
/// // The tanh approximation: off by 1.5e-4 at x = 1.
/// let tanh_form = |x: f64| {
///     let c = (2.0 / std::f64::consts::PI).sqrt();
///     0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
/// };
/// assert!(check_exact_gelu(tanh_form).is_err());
/// ```
pub fn check_exact_gelu(exact_gelu: impl Fn(f64) -> f64) -> Result<(), String> {
    use attention::feed_forward::gelu;

    let by_hand = [
        (0.0, 0.0, "0·Φ(0) = 0"),
        (1.0, 0.8413447460685429, "1·Φ(1), and Φ(1) = 0.8413 in a table of the normal CDF"),
        (-1.0, -0.15865525393145707, "−1·Φ(−1) = −(1 − Φ(1))"),
        (2.0, 1.9544997361036416, "2·Φ(2)"),
        (-3.0, -0.00404969409489031, "−3·Φ(−3): a little of the negative side gets through"),
    ];
    let grid = (-600..=600).map(|i| {
        let x = f64::from(i) / 100.0;
        (x, gelu(x), "x/2·(1 + erf(x/√2)), the crate's gelu")
    });
    for (x, expected, why) in by_hand.into_iter().chain(grid) {
        let what = format!("exact_gelu({x})");
        let got = call(&what, || exact_gelu(x))?;
        if !near(got, expected, 1e-12) {
            return Err(format!(
                "{what} returned {got}, expected {expected} = {why} (off by {:.1e}; the check \
                 allows 1e-12)",
                (got - expected).abs()
            ));
        }
    }
    Ok(())
}

/// Checks an answer to exercise 13.2 ([`linear_from_torch`]): the map it returns is applied
/// to a few rows and compared with `x · weightᵀ + bias` computed entry by entry (to 1e-5,
/// `f32`), for a `(2, 3)` weight small enough to do by hand, a square weight that is not
/// symmetric (`weight` and `weightᵀ` differ though their shapes agree), and a `(5, 7)` one;
/// then a bias of the wrong length (3 for a weight `(2, 3)`, `in` instead of `out`) must be
/// an error, not a panic.
///
/// ```
/// use exercises::ch13::{check_linear_from_torch, linear_from_torch};
/// use attention::projection::Linear;
/// use ndarray::{ArrayRef1, ArrayRef2};
///
/// assert_eq!(check_linear_from_torch(linear_from_torch), Ok(()));
/// // PyTorch's weight as the book's W, without the transpose.
/// let untransposed = |weight: &ArrayRef2<f32>, bias: &ArrayRef1<f32>| {
///     Linear::with_bias(weight.to_owned(), bias.to_owned())
/// };
/// assert!(check_linear_from_torch(untransposed).is_err());
/// ```
pub fn check_linear_from_torch(
    linear_from_torch: impl Fn(&ArrayRef2<f32>, &ArrayRef1<f32>) -> Result<Linear<f32>>,
) -> Result<(), String> {
    use ndarray::{Array1, array};

    // x · weightᵀ + bias, entry by entry, in f64.
    let torch = |x: &Array2<f32>, weight: &Array2<f32>, bias: &Array1<f32>| {
        Array2::from_shape_fn((x.nrows(), weight.nrows()), |(r, o)| {
            let dot: f64 = (0..x.ncols()).map(|i| f64::from(x[[r, i]] * weight[[o, i]])).sum();
            dot + f64::from(bias[o])
        })
    };
    let cases = [
        (
            "weight = [[1, 0, 2], [0, 1, -1]] (out = 2, in = 3), bias = [0.5, -1], \
             x = [[1, 2, 3]] (by hand: [1 + 6 + 0.5, 2 − 3 − 1] = [7.5, -2])",
            array![[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]],
            array![0.5, -1.0],
            array![[1.0, 2.0, 3.0]],
        ),
        (
            "weight = [[1, 2], [3, 4]] (square, not symmetric), bias = [1, -1], \
             x = [[1, 0], [0, 1], [2, -1]] (the first two rows give weightᵀ + bias)",
            array![[1.0, 2.0], [3.0, 4.0]],
            array![1.0, -1.0],
            array![[1.0, 0.0], [0.0, 1.0], [2.0, -1.0]],
        ),
        (
            "weight: (5, 7) (out = 5, in = 7), bias: (5), x: (3, 7)",
            Array2::from_shape_fn((5, 7), |(o, i)| ((3 * o + 5 * i) % 11) as f32 / 4.0 - 1.0),
            Array1::from_shape_fn(5, |o| o as f32 / 8.0 - 0.25),
            Array2::from_shape_fn((3, 7), |(r, i)| ((2 * r + i) % 5) as f32 / 2.0 - 1.0),
        ),
    ];
    for (name, weight, bias, x) in cases {
        let what = format!("linear_from_torch({name})");
        let linear = call(&what, || linear_from_torch(&weight, &bias))?;
        let linear = linear.map_err(|e| format!("{what} returned the error \"{e}\""))?;
        let applied = format!("{what}.apply(x)");
        let got = call(&applied, || linear.apply(&x))?;
        let got = got.map_err(|e| format!("{applied} returned the error \"{e}\""))?;
        let what = format!("{applied}, which should be x · weightᵀ + bias,");
        close(&what, &got.mapv(f64::from), &torch(&x, &weight, &bias), 1e-5)?;
    }
    let (weight, bias) = (array![[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]], array![0.5, -1.0, 0.0]);
    refuses(
        "linear_from_torch(weight: (2, 3), bias: (3))",
        "the bias needs one entry per output, out = 2, not one per input",
        || linear_from_torch(&weight, &bias),
    )
}

/// Checks an answer to exercise 13.3 ([`masked_mean_pool`]): a batch of two small enough to
/// do by hand, a batch whose `L` equals its size (so that a mean over the wrong axis still
/// has the right shape), and a batch of four with lengths 6, 3, 1 and 5 of `L = 6` whose
/// padding rows hold 1e6, against the crate's
/// [`mean_pool`](attention::pooling::mean_pool) (to 1e-12). Every length is valid.
///
/// ```
/// use exercises::ch13::{check_masked_mean_pool, masked_mean_pool};
/// use ndarray::{ArrayRef3, Axis};
///
/// assert_eq!(check_masked_mean_pool(masked_mean_pool), Ok(()));
/// // Every row in the mean, padding included.
/// let padded = |hidden: &ArrayRef3<f64>, _: &[usize]| hidden.mean_axis(Axis(1)).unwrap();
/// assert!(check_masked_mean_pool(padded).is_err());
/// ```
pub fn check_masked_mean_pool(
    masked_mean_pool: impl Fn(&ArrayRef3<f64>, &[usize]) -> Array2<f64>,
) -> Result<(), String> {
    use attention::pooling::mean_pool;
    use ndarray::{Array3, array};

    // By hand: item 0 has three real rows, (1+3+5, 2+4+6)/3 = (3, 4); item 1 has two,
    // (2+4, 0+2)/2 = (3, 1), and a padding row (100, 100) that must not count.
    let hidden =
        array![[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [[2.0, 0.0], [4.0, 2.0], [100.0, 100.0]]];
    let what = "masked_mean_pool(hidden = [[[1, 2], [3, 4], [5, 6]], [[2, 0], [4, 2], \
                [100, 100]]], lengths = [3, 2]) (by hand: [(1+3+5)/3, (2+4+6)/3] and \
                [(2+4)/2, (0+2)/2])";
    let got = call(what, || masked_mean_pool(&hidden, &[3, 2]))?;
    close(what, &got, &array![[3.0, 4.0], [3.0, 1.0]], 1e-12)?;

    // Entry (b, i, j) is 10·b + 3·i − j; the padding rows hold 1e6.
    let padded = |dim: (usize, usize, usize), lengths: &[usize]| {
        Array3::from_shape_fn(dim, |(b, i, j)| {
            if i < lengths[b] { (10 * b + 3 * i) as f64 - j as f64 } else { 1e6 }
        })
    };
    for (dim, lengths) in [((3, 3, 2), vec![1, 3, 2]), ((4, 6, 5), vec![6, 3, 1, 5])] {
        let hidden = padded(dim, &lengths);
        let expected = mean_pool(&hidden, &lengths).map_err(|e| e.to_string())?;
        let what = format!(
            "masked_mean_pool(hidden: {dim:?} with entries 10·b + 3·i − j and padding rows \
             of 1e6, lengths = {lengths:?})"
        );
        let got = call(&what, || masked_mean_pool(&hidden, &lengths))?;
        close(&what, &got, &expected, 1e-12)?;
    }
    Ok(())
}

/// The sentence of the check's real head.
const REAL_TEXT: &str = "The cat sat on the mat because it was tired.";

/// One head's weights `(L, L)` on a sentence, and the sentence's token ids.
type Head = (Array2<f64>, Vec<u32>);

/// The weights `(L, L)` of head 2 of layer 0 of the committed all-MiniLM-L6-v2 on
/// [`REAL_TEXT`], in `f64`, and the token ids, computed once per process.
fn real_head() -> Result<Head, String> {
    use std::sync::OnceLock;
    static HEAD: OnceLock<Result<Head, String>> = OnceLock::new();
    let compute = || {
        let encoder = pretrained::SentenceEncoder::load(pretrained::minilm_dir())?;
        let run = pretrained::study::run(&encoder, REAL_TEXT)?;
        let head = run.weights[0].index_axis(Axis(0), 2).mapv(f64::from);
        Ok::<_, pretrained::PretrainedError>((head, run.tokens.ids))
    };
    HEAD.get_or_init(|| compute().map_err(|e| format!("the model could not be run: {e}")))
        .clone()
}

/// Checks an answer to exercise 13.4 ([`previous_token_score`]): a `(3, 3)` matrix small
/// enough to do by hand, a perfect previous-token head (row 0 on itself, row `i` on `i − 1`:
/// 1), a perfect next-token head (row `i` on `i + 1`, the last row on itself: 0), uniform
/// weights (`1/L`) and a two-token matrix (only row 1 counts); then head 2 of layer 0 of the
/// committed all-MiniLM-L6-v2 on "The cat sat on the mat because it was tired." (13 tokens),
/// against the crate's [`pattern_score`](attention::inspect::pattern_score) with
/// `Pattern::PreviousToken`. All to 1e-12.
///
/// ```
/// use exercises::ch13::{check_previous_token_score, previous_token_score};
/// use ndarray::ArrayRef2;
///
/// assert_eq!(check_previous_token_score(previous_token_score), Ok(()));
/// // The weight on the next token instead: weights[i − 1, i].
/// let next = |w: &ArrayRef2<f64>| {
///     let l = w.nrows();
///     (1..l).map(|i| w[[i - 1, i]]).sum::<f64>() / (l - 1) as f64
/// };
/// assert!(check_previous_token_score(next).is_err());
/// ```
pub fn check_previous_token_score(
    previous_token_score: impl Fn(&ArrayRef2<f64>) -> f64,
) -> Result<(), String> {
    use attention::inspect::{Pattern, pattern_score};
    use ndarray::array;

    let previous =
        Array2::from_shape_fn((5, 5), |(i, j)| f64::from(u8::from(j + 1 == i.max(1))));
    let next =
        Array2::from_shape_fn((5, 5), |(i, j)| f64::from(u8::from(j == (i + 1).min(4))));
    let cases = [
        (
            "[[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.1, 0.8, 0.1]]".to_string(),
            array![[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.1, 0.8, 0.1]],
            0.7,
            "by hand: (weights[1, 0] + weights[2, 1]) / 2 = (0.6 + 0.8) / 2; row 0 has no \
             previous token",
        ),
        (
            "a previous-token head (5, 5): row 0 all on key 0, row i all on key i − 1"
                .to_string(),
            previous,
            1.0,
            "every query from 1 on puts all its weight on the token before",
        ),
        (
            "a next-token head (5, 5): row i all on key i + 1, row 4 all on key 4".to_string(),
            next,
            0.0,
            "no query puts any weight on the token before",
        ),
        (
            "uniform weights (5, 5), each 0.2".to_string(),
            Array2::from_elem((5, 5), 0.2),
            0.2,
            "every row gives 1/L = 0.2 to each key, the one before included",
        ),
        (
            "[[0.3, 0.7], [0.9, 0.1]]".to_string(),
            array![[0.3, 0.7], [0.9, 0.1]],
            0.9,
            "only row 1 has a token before it: weights[1, 0]",
        ),
    ];
    for (name, weights, expected, why) in cases {
        let what = format!("previous_token_score({name})");
        let got = call(&what, || previous_token_score(&weights))?;
        if !near(got, expected, 1e-12) {
            return Err(format!("{what} returned {got}, expected {expected} ({why})"));
        }
    }

    let (head, ids) = real_head()?;
    let expected =
        pattern_score(&head, Pattern::PreviousToken, &ids).map_err(|e| e.to_string())?;
    let expected = expected.ok_or("the sentence has a single token")?;
    let what = format!(
        "previous_token_score(head 2 of layer 0 of all-MiniLM-L6-v2 on \"{REAL_TEXT}\", {} \
         tokens)",
        ids.len()
    );
    let got = call(&what, || previous_token_score(&head))?;
    if !near(got, expected, 1e-12) {
        return Err(format!(
            "{what} returned {got}, expected {expected} (pattern_score with \
             Pattern::PreviousToken)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;
    use ndarray::Array1;

    #[test]
    fn exact_gelu_passes_and_classic_mistakes_fail() {
        assert_eq!(check_exact_gelu(exact_gelu), Ok(()));
        // The tanh approximation (GPT-2's): off by 1.5e-4 at x = 1.
        let tanh_form = |x: f64| {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
        };
        rejects(check_exact_gelu(tanh_form), "exact_gelu(1) returned 0.84119");
        // The sigmoid approximation x·σ(1.702·x).
        let sigmoid_form = |x: f64| x / (1.0 + (-1.702 * x).exp());
        rejects(check_exact_gelu(sigmoid_form), "exact_gelu(1) returned 0.8457");
        // erf(x) without the 1/√2: Φ of a normal with standard deviation 1/√2.
        let no_sqrt2 = |x: f64| 0.5 * x * (1.0 + libm::erf(x));
        rejects(check_exact_gelu(no_sqrt2), "exact_gelu(1) returned 0.9213");
        // ReLU, which GELU smooths.
        let relu = |x: f64| x.max(0.0);
        rejects(check_exact_gelu(relu), "exact_gelu(1) returned 1, expected 0.8413");
        // A tanh approximation close enough at the five values by hand would still fail the
        // grid: the gap is largest near x = −2.7.
        let tanh_past_the_hand_cases = |x: f64| {
            if [0.0, 1.0, -1.0, 2.0, -3.0].contains(&x) { exact_gelu(x) } else { tanh_form(x) }
        };
        rejects(check_exact_gelu(tanh_past_the_hand_cases), "exact_gelu(-6) returned");
    }

    #[test]
    fn linear_from_torch_passes_and_classic_mistakes_fail() {
        assert_eq!(check_linear_from_torch(linear_from_torch), Ok(()));
        // No transpose: on the (2, 3) weight the bias of 2 does not fit d_out = 3, an error...
        let untransposed = |weight: &ArrayRef2<f32>, bias: &ArrayRef1<f32>| {
            Linear::with_bias(weight.to_owned(), bias.to_owned())
        };
        rejects(
            check_linear_from_torch(untransposed),
            "returned the error \"b has d_out = 2 but W has d_out = 3\"",
        );
        // ... and with the bias padded to fit, W: (2, 3) cannot take the rows of 3 of x.
        let untransposed_fitted = |weight: &ArrayRef2<f32>, bias: &ArrayRef1<f32>| {
            let b =
                Array1::from_shape_fn(weight.ncols(), |i| bias.get(i).copied().unwrap_or(0.0));
            Linear::with_bias(weight.to_owned(), b)
        };
        rejects(
            check_linear_from_torch(untransposed_fitted),
            "apply(x) returned the error \"x has d_in = 3 but W has d_in = 2\"",
        );
        // The shapes agree on a square weight: x · weight + bias, the wrong numbers.
        let untransposed_square = |weight: &ArrayRef2<f32>, bias: &ArrayRef1<f32>| {
            if weight.is_square() {
                Linear::with_bias(weight.to_owned(), bias.to_owned())
            } else {
                linear_from_torch(weight, bias)
            }
        };
        rejects(
            check_linear_from_torch(untransposed_square),
            "weight = [[1, 2], [3, 4]] (square, not symmetric)",
        );
        // The bias dropped.
        let no_bias =
            |weight: &ArrayRef2<f32>, _: &ArrayRef1<f32>| Linear::new(weight.t().to_owned());
        rejects(check_linear_from_torch(no_bias), "entry (0, 0) is 7 instead of 7.5");
        // A bias of the wrong length cut or padded to fit instead of refused.
        let fitted = |weight: &ArrayRef2<f32>, bias: &ArrayRef1<f32>| {
            let b =
                Array1::from_shape_fn(weight.nrows(), |o| bias.get(o).copied().unwrap_or(0.0));
            Linear::with_bias(weight.t().to_owned(), b)
        };
        rejects(
            check_linear_from_torch(fitted),
            "returned a Linear with W: (3, 2) instead of an error",
        );
        // A panic instead of an error.
        let panicking = |weight: &ArrayRef2<f32>, bias: &ArrayRef1<f32>| {
            assert_eq!(bias.len(), weight.nrows(), "one bias per output");
            linear_from_torch(weight, bias)
        };
        rejects(check_linear_from_torch(panicking), "bias: (3)) panicked");
    }

    #[test]
    fn masked_mean_pool_passes_and_classic_mistakes_fail() {
        assert_eq!(check_masked_mean_pool(masked_mean_pool), Ok(()));
        // The sum over the real rows divided by L instead of the length.
        let over_l = |hidden: &ArrayRef3<f64>, lengths: &[usize]| {
            let l = hidden.dim().1 as f64;
            let mut pooled = masked_mean_pool(hidden, lengths);
            for (mut row, &n) in pooled.rows_mut().into_iter().zip(lengths) {
                row *= n as f64 / l;
            }
            pooled
        };
        rejects(check_masked_mean_pool(over_l), "entry (1, 0) is 2 instead of 3");
        // Every row in the mean, padding included.
        let padding =
            |hidden: &ArrayRef3<f64>, _: &[usize]| hidden.mean_axis(Axis(1)).unwrap();
        rejects(check_masked_mean_pool(padding), "entry (1, 0) is 35.3");
        // The mean over the batch axis: (L, d), one row per position.
        let batch_axis =
            |hidden: &ArrayRef3<f64>, _: &[usize]| hidden.mean_axis(Axis(0)).unwrap();
        rejects(check_masked_mean_pool(batch_axis), "has shape [3, 2], expected [2, 2]");
        // The mean over the batch, of the real rows only, when the shape happens to be right.
        let batch_axis_square = |hidden: &ArrayRef3<f64>, lengths: &[usize]| {
            if hidden.dim().0 == 2 {
                masked_mean_pool(hidden, lengths)
            } else {
                batch_axis(hidden, lengths)
            }
        };
        rejects(check_masked_mean_pool(batch_axis_square), "hidden: (3, 3, 2)");
        // The first row ([CLS]) only.
        let cls =
            |hidden: &ArrayRef3<f64>, _: &[usize]| hidden.index_axis(Axis(1), 0).to_owned();
        rejects(check_masked_mean_pool(cls), "entry (0, 0) is 1 instead of 3");
    }

    #[test]
    fn previous_token_score_passes_and_classic_mistakes_fail() {
        assert_eq!(check_previous_token_score(previous_token_score), Ok(()));
        let by_hand = "([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.1, 0.8, 0.1]]) returned";
        // The next token, weights[i − 1, i]: the transposed matrix's answer.
        let next = |w: &ArrayRef2<f64>| previous_token_score(&w.t());
        rejects(check_previous_token_score(next), &format!("{by_hand} 0.4"));
        // Row 0 counted as if it had a previous token, wrapping around to the last key.
        let wrapped = |w: &ArrayRef2<f64>| {
            let l = w.nrows();
            (0..l).map(|i| w[[i, (i + l - 1) % l]]).sum::<f64>() / l as f64
        };
        rejects(check_previous_token_score(wrapped), &format!("{by_hand} 0.566"));
        // The right weights divided by L instead of L − 1.
        let over_l = |w: &ArrayRef2<f64>| {
            let l = w.nrows() as f64;
            previous_token_score(w) * (l - 1.0) / l
        };
        rejects(check_previous_token_score(over_l), &format!("{by_hand} 0.466"));
        // The diagonal: the query's own token.
        let diagonal = |w: &ArrayRef2<f64>| w.diag().mean().unwrap();
        rejects(check_previous_token_score(diagonal), &format!("{by_hand} 0.133"));
    }

    /// The check's real head is a previous-token head, as the chapter says.
    #[test]
    fn the_real_head_looks_at_the_previous_token() {
        let (head, ids) = real_head().unwrap();
        assert_eq!(ids.len(), 13);
        let score = previous_token_score(&head);
        assert!(score > 0.99, "{score}");
    }
}
