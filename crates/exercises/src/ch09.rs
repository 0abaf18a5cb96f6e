//! Chapter 9, *Where is each word? Position*: the sinusoidal table from its formula, moving an
//! encoding on by rotations alone, and ALiBi's slopes for any number of heads.

use attention::position::{SinusoidLayout, sinusoidal};
use attention::{AttentionError, Result};
use ndarray::{Array1, Array2, ArrayRef1};

use crate::{call, close};

/// The sinusoidal encodings of positions `0 .. len` for width `d_model`, in the interleaved
/// layout of Vaswani et al. (2017, §3.5): column `2i` is `sin(p / 10000^(2i/d_model))`,
/// column `2i + 1` the cosine of the same angle. An odd `d_model` ends with a sine alone.
///
/// ```
/// use exercises::ch09::sinusoidal_table;
///
/// let pe = sinusoidal_table(2, 4);
/// assert_eq!(pe.row(0).to_vec(), [0.0, 1.0, 0.0, 1.0]);
/// assert_eq!(pe[[1, 2]], 0.01f64.sin()); // position 1, frequency 10000^(-2/4)
/// assert_eq!(sinusoidal_table(3, 5).dim(), (3, 5));
/// ```
// ANCHOR: sinusoidal_table
pub fn sinusoidal_table(len: usize, d_model: usize) -> Array2<f64> {
    Array2::from_shape_fn((len, d_model), |(p, j)| {
        let i = j / 2; // columns 2i and 2i + 1 share frequency i
        let angle = p as f64 / 10000f64.powf((2 * i) as f64 / d_model as f64);
        if j % 2 == 0 { angle.sin() } else { angle.cos() }
    })
}
// ANCHOR_END: sinusoidal_table

/// The interleaved encoding `PE(p + k)`, computed from `PE(p)` alone (`p` is not given) for
/// an even width: each pair `(sin(p·ω_i), cos(p·ω_i))` rotated by the angle `k·ω_i`, with
/// `ω_i = 10000^(−2i/d)`. An odd width is an error: its last sine has no cosine to turn with.
///
/// ```
/// use exercises::ch09::{shift, sinusoidal_table};
///
/// let pe = sinusoidal_table(10, 6);
/// let moved = shift(&pe.row(2), 5).unwrap();
/// assert!((moved - pe.row(7)).iter().all(|d| d.abs() < 1e-12));
/// assert!(shift(&sinusoidal_table(1, 5).row(0), 1).is_err());
/// ```
// ANCHOR: shift
pub fn shift(pe: &ArrayRef1<f64>, k: i64) -> Result<Array1<f64>> {
    let d = pe.len();
    if d % 2 == 1 || d == 0 {
        return Err(AttentionError::OddWidth {
            what: "PE(p)".into(),
            dim: "d_model",
            size: d,
        });
    }
    let mut moved = Array1::zeros(d);
    for i in 0..d / 2 {
        let omega = 10000f64.powf(-((2 * i) as f64) / d as f64);
        let (sin_k, cos_k) = (k as f64 * omega).sin_cos();
        let (s, c) = (pe[2 * i], pe[2 * i + 1]); // sin(p·ω), cos(p·ω)
        moved[2 * i] = s * cos_k + c * sin_k; // sin(p·ω + k·ω)
        moved[2 * i + 1] = c * cos_k - s * sin_k; // cos(p·ω + k·ω)
    }
    Ok(moved)
}
// ANCHOR_END: shift

/// ALiBi's slopes for `heads` heads, by the rule of the authors' reference code
/// (`get_slopes` in ofirpress/attention_with_linear_biases): for a power of two `n`, the
/// geometric sequence that starts at `2^(−8/n)` with that same ratio; otherwise the slopes of
/// the largest power of two `n' < heads`, followed by every other slope (the 1st, 3rd, …) of
/// `2n'` heads, as many as are missing. No heads, no slopes.
///
/// ```
/// use exercises::ch09::alibi_slopes;
///
/// assert_eq!(alibi_slopes(4), [0.25, 0.0625, 0.015625, 0.00390625]);
/// assert_eq!(alibi_slopes(6), [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]);
/// ```
// ANCHOR: alibi_slopes
pub fn alibi_slopes(heads: usize) -> Vec<f64> {
    fn power_of_two(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-8.0 / n as f64);
        (1..=n).map(|h| start.powi(h as i32)).collect()
    }
    if heads == 0 {
        return Vec::new();
    }
    let p = 1 << heads.ilog2(); // the largest power of two ≤ `heads`: all of it, if it is one
    let mut slopes = power_of_two(p);
    slopes.extend(power_of_two(2 * p).into_iter().step_by(2).take(heads - p));
    slopes
}
// ANCHOR_END: alibi_slopes

/// Checks an answer to exercise 9.1 ([`sinusoidal_table`]) against the crate's
/// `sinusoidal` (interleaved, from position 0) within `1e-12`, for even and odd widths
/// (1, 4, 5, 7, 8, 16) and up to 64 positions; an odd width must not panic.
///
/// ```
/// use exercises::ch09::{check_sinusoidal_table, sinusoidal_table};
/// use ndarray::Array2;
///
/// assert_eq!(check_sinusoidal_table(sinusoidal_table), Ok(()));
/// // The column index j used as i: sin(p / 10000^(2j/d)), with the wrong frequencies.
/// let column_as_i = |len: usize, d: usize| {
///     Array2::from_shape_fn((len, d), |(p, j)| {
///         let angle = p as f64 / 10000f64.powf((2 * j) as f64 / d as f64);
///         if j % 2 == 0 { angle.sin() } else { angle.cos() }
///     })
/// };
/// assert!(check_sinusoidal_table(column_as_i).is_err());
/// ```
pub fn check_sinusoidal_table(
    sinusoidal_table: impl Fn(usize, usize) -> Array2<f64>,
) -> Result<(), String> {
    for (len, d_model) in [(3, 4), (64, 16), (6, 5), (4, 1), (10, 8), (2, 7)] {
        let what = format!("sinusoidal_table({len}, {d_model})");
        let got = call(&what, || sinusoidal_table(len, d_model))?;
        let expected = sinusoidal::<f64>(0, len, d_model, SinusoidLayout::Interleaved)
            .map_err(|e| e.to_string())?;
        let note = if d_model % 2 == 1 {
            format!(" (d_model = {d_model} is odd: its last column is a sine alone)")
        } else {
            String::new()
        };
        close(&format!("{what}{note}"), &got, &expected, 1e-12)?;
    }
    Ok(())
}

/// Checks an answer to exercise 9.2 ([`shift`]): `shift(PE(p), k)` must be `PE(p + k)` within
/// `1e-12` for widths 2, 4, 8 and 64, positions 0, 3 and 17 and shifts 1, 5, −3 and 40, and an
/// odd width (5) must be an error, not a panic or a guess.
///
/// ```
/// use exercises::ch09::{check_shift, shift};
/// use ndarray::{Array1, ArrayRef1};
///
/// assert_eq!(check_shift(shift), Ok(()));
/// // Adding the encoding of k: PE(p) + PE(k) is not PE(p + k).
/// let add = |pe: &ArrayRef1<f64>, k: i64| {
///     let d = pe.len();
///     let omega = |j: usize| 10000f64.powf(-((j / 2 * 2) as f64) / d as f64);
///     let pe_k = Array1::from_shape_fn(d, |j| {
///         let a = k as f64 * omega(j);
///         if j % 2 == 0 { a.sin() } else { a.cos() }
///     });
///     Ok(pe.to_owned() + &pe_k)
/// };
/// assert!(check_shift(add).is_err());
/// ```
pub fn check_shift(
    shift: impl Fn(&ArrayRef1<f64>, i64) -> Result<Array1<f64>>,
) -> Result<(), String> {
    for d in [2, 4, 8, 64] {
        let table = sinusoidal::<f64>(0, 60, d, SinusoidLayout::Interleaved)
            .map_err(|e| e.to_string())?;
        for p in [0usize, 3, 17] {
            for k in [1i64, 5, -3, 40] {
                let Some(target) = p.checked_add_signed(k as isize) else { continue };
                let what = format!("shift(PE({p}), {k}) for d_model = {d}");
                let got = call(&what, || shift(&table.row(p), k))?
                    .map_err(|e| format!("{what} returned the error \"{e}\""))?;
                close(
                    &format!("{what}, which should be PE({target}),"),
                    &got,
                    &table.row(target),
                    1e-12,
                )?;
            }
        }
    }
    let odd =
        sinusoidal::<f64>(2, 1, 5, SinusoidLayout::Interleaved).map_err(|e| e.to_string())?;
    let what = "shift(PE(2), 1) for d_model = 5";
    let why = "the last sine of an odd width has no cosine to rotate with";
    let result = call(what, || shift(&odd.row(0), 1))
        .map_err(|panic| format!("{panic}; it should return an error ({why})"))?;
    if let Ok(got) = result {
        return Err(format!("{what} returned {got:.6} instead of an error ({why})"));
    }
    Ok(())
}

/// The slopes the reference code's `get_slopes` gives, written out as powers of two: for
/// each number of heads, the exponents `e` of the slopes `2^e`.
fn reference_slopes() -> Vec<(usize, Vec<f64>)> {
    let geometric = |n: usize| (1..=n).map(|h| -8.0 * h as f64 / n as f64).collect::<Vec<_>>();
    vec![
        (1, vec![-8.0]),
        (2, vec![-4.0, -8.0]),
        (3, vec![-4.0, -8.0, -2.0]),
        (5, vec![-2.0, -4.0, -6.0, -8.0, -1.0]),
        (6, vec![-2.0, -4.0, -6.0, -8.0, -1.0, -3.0]),
        (8, vec![-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0]),
        (12, [geometric(8), vec![-0.5, -1.5, -2.5, -3.5]].concat()),
        (16, geometric(16)),
        (24, [geometric(16), (0..8).map(|h| -0.25 - 0.5 * h as f64).collect()].concat()),
    ]
}

/// Checks an answer to exercise 9.3 ([`alibi_slopes`]) against the slopes of the reference
/// code, written out for 1, 2, 3, 5, 6, 8, 12, 16 and 24 heads (within a relative `1e-12`).
///
/// ```
/// use exercises::ch09::{alibi_slopes, check_alibi_slopes};
///
/// assert_eq!(check_alibi_slopes(alibi_slopes), Ok(()));
/// // The power-of-two formula for every number of heads: wrong for 3, 5, 6, 12, ...
/// let geometric =
///     |n: usize| (1..=n).map(|h| 2f64.powf(-8.0 * h as f64 / n as f64)).collect();
/// assert!(check_alibi_slopes(geometric).is_err());
/// ```
pub fn check_alibi_slopes(alibi_slopes: impl Fn(usize) -> Vec<f64>) -> Result<(), String> {
    for (heads, exponents) in reference_slopes() {
        let what = format!("alibi_slopes({heads})");
        let got = call(&what, || alibi_slopes(heads))?;
        let expected: Vec<f64> = exponents.iter().map(|&e| 2f64.powf(e)).collect();
        let matches = got.len() == expected.len()
            && got.iter().zip(&expected).all(|(g, e)| ((g - e) / e).abs() < 1e-12);
        if !matches {
            let rule = if heads.is_power_of_two() {
                format!(
                    "{heads} is a power of two: 2^(-8/{heads}), times 2^(-8/{heads}) again"
                )
            } else {
                let below = 1 << heads.ilog2();
                format!(
                    "{heads} is not a power of two: the {below} slopes of {below} heads, then \
                     every other slope of {} heads, the first {}",
                    2 * below,
                    heads - below
                )
            };
            return Err(format!(
                "{what} returned\n{:.8}\nbut should be\n{:.8}\n({rule})",
                Array1::from(got),
                Array1::from(expected)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn sinusoidal_table_passes_and_classic_mistakes_fail() {
        assert_eq!(check_sinusoidal_table(sinusoidal_table), Ok(()));
        let table = |len: usize, d: usize, f: &dyn Fn(usize, usize) -> f64| {
            Array2::from_shape_fn((len, d), |(p, j)| f(p, j))
        };
        let angle = |p: usize, exponent: f64| p as f64 / 10000f64.powf(exponent);
        // The column index used as i: every column gets its own, wrong, frequency.
        let column_as_i = |len, d| {
            table(len, d, &|p, j| {
                let a = angle(p, (2 * j) as f64 / d as f64);
                if j % 2 == 0 { a.sin() } else { a.cos() }
            })
        };
        rejects(check_sinusoidal_table(column_as_i), "sinusoidal_table(3, 4) is");
        // The exponent j/d_model: right for the sines, wrong for the cosines.
        let j_over_d = |len, d| {
            table(len, d, &|p, j| {
                let a = angle(p, j as f64 / d as f64);
                if j % 2 == 0 { a.sin() } else { a.cos() }
            })
        };
        rejects(check_sinusoidal_table(j_over_d), "entry (1, 1)");
        // Sines and cosines swapped.
        let swapped = |len, d| {
            table(len, d, &|p, j| {
                let a = angle(p, (j / 2 * 2) as f64 / d as f64);
                if j % 2 == 0 { a.cos() } else { a.sin() }
            })
        };
        rejects(check_sinusoidal_table(swapped), "entry (0, 0) is 1 instead of 0");
        // Positions counted from 1.
        let from_one =
            |len, d| sinusoidal_table(len + 1, d).slice(ndarray::s![1.., ..]).to_owned();
        rejects(check_sinusoidal_table(from_one), "sinusoidal_table(3, 4) is");
        // The concatenated layout (all sines, then all cosines).
        let concatenated =
            |len, d| sinusoidal::<f64>(0, len, d, SinusoidLayout::Concatenated).unwrap();
        rejects(check_sinusoidal_table(concatenated), "entry (0, 1) is 0 instead of 1");
        // The Annotated Transformer's shapes: as many cosines as sines, so an odd width
        // overruns (in PyTorch, a shape error).
        let annotated = |len: usize, d: usize| {
            let mut pe = Array2::<f64>::zeros((len, d));
            for p in 0..len {
                for i in 0..d.div_ceil(2) {
                    let a = angle(p, (2 * i) as f64 / d as f64);
                    pe[[p, 2 * i]] = a.sin();
                    pe[[p, 2 * i + 1]] = a.cos(); // out of bounds for the last i of odd d
                }
            }
            pe
        };
        rejects(check_sinusoidal_table(annotated), "sinusoidal_table(6, 5) panicked");
        // An odd width padded with a zero column (tensor2tensor and fairseq do this, with
        // their own frequencies): here with the paper's frequencies, still not the formula.
        let padded = |len: usize, d: usize| {
            let even = sinusoidal_table(len, d / 2 * 2);
            let mut pe = Array2::zeros((len, d));
            pe.slice_mut(ndarray::s![.., ..d / 2 * 2]).assign(&even);
            pe
        };
        rejects(check_sinusoidal_table(padded), "is odd: its last column is a sine alone");
    }

    #[test]
    fn shift_passes_and_classic_mistakes_fail() {
        assert_eq!(check_shift(shift), Ok(()));
        let rotate = |pe: &ArrayRef1<f64>, angle: &dyn Fn(usize) -> f64, sign: f64| {
            let mut out = pe.to_owned();
            for i in 0..pe.len() / 2 {
                let (s_k, c_k) = angle(i).sin_cos();
                let (s, c) = (pe[2 * i], pe[2 * i + 1]);
                out[2 * i] = s * c_k + sign * c * s_k;
                out[2 * i + 1] = c * c_k - sign * s * s_k;
            }
            out
        };
        let omega = |i: usize, d: usize| 10000f64.powf(-((2 * i) as f64) / d as f64);
        // The rotation the wrong way round: PE(p − k).
        let backwards = |pe: &ArrayRef1<f64>, k: i64| {
            if pe.len() % 2 == 1 {
                return Err(AttentionError::OddWidth { what: "x".into(), dim: "d", size: 5 });
            }
            Ok(rotate(pe, &|i| k as f64 * omega(i, pe.len()), -1.0))
        };
        rejects(
            check_shift(backwards),
            "shift(PE(0), 1) for d_model = 2, which should be PE(1)",
        );
        // Every pair rotated by k radians, as if every frequency were 1.
        let one_frequency = |pe: &ArrayRef1<f64>, k: i64| {
            if pe.len() % 2 == 1 {
                return Err(AttentionError::OddWidth { what: "x".into(), dim: "d", size: 5 });
            }
            Ok(rotate(pe, &|_| k as f64, 1.0))
        };
        rejects(check_shift(one_frequency), "for d_model = 4");
        // Adding PE(k).
        let add = |pe: &ArrayRef1<f64>, k: i64| {
            let d = pe.len();
            let pe_k = Array1::from_shape_fn(d, |j| {
                let a = k as f64 * omega(j / 2, d);
                if j % 2 == 0 { a.sin() } else { a.cos() }
            });
            Ok(pe.to_owned() + &pe_k)
        };
        rejects(check_shift(add), "shift(PE(0), 1) for d_model = 2");
        // Right for even widths, but an odd width rotated anyway, leaving the last sine as is.
        let no_check = |pe: &ArrayRef1<f64>, k: i64| {
            Ok(rotate(pe, &|i| k as f64 * omega(i, pe.len()), 1.0))
        };
        rejects(check_shift(no_check), "instead of an error");
        // Right for even widths, and an out-of-bounds panic for odd ones.
        let panics = |pe: &ArrayRef1<f64>, k: i64| {
            let d = pe.len();
            let mut out = pe.to_owned();
            for i in 0..d.div_ceil(2) {
                let (s_k, c_k) = (k as f64 * omega(i, d)).sin_cos();
                let (s, c) = (pe[2 * i], pe[2 * i + 1]);
                out[2 * i] = s * c_k + c * s_k;
                out[2 * i + 1] = c * c_k - s * s_k;
            }
            Ok(out)
        };
        rejects(check_shift(panics), "for d_model = 5 panicked");
    }

    #[test]
    fn alibi_slopes_passes_and_classic_mistakes_fail() {
        assert_eq!(check_alibi_slopes(alibi_slopes), Ok(()));
        assert!(alibi_slopes(0).is_empty());
        // The power-of-two formula for any number of heads.
        let geometric =
            |n: usize| (1..=n).map(|h| 2f64.powf(-8.0 * h as f64 / n as f64)).collect();
        rejects(check_alibi_slopes(geometric), "alibi_slopes(3) returned");
        // The first n slopes of the next power of two.
        let truncated = |n: usize| {
            let next = n.next_power_of_two();
            (1..=n).map(|h| 2f64.powf(-8.0 * h as f64 / next as f64)).collect()
        };
        rejects(check_alibi_slopes(truncated), "alibi_slopes(3) returned");
        // Every other slope of 2n', but starting from the second (index 1, not 0).
        let odd_ones = |n: usize| {
            let mut slopes = alibi_slopes(1 << n.ilog2());
            let twice = alibi_slopes(2 << n.ilog2());
            slopes.extend(twice.into_iter().skip(1).step_by(2).take(n - (1 << n.ilog2())));
            slopes
        };
        rejects(check_alibi_slopes(odd_ones), "every other slope of 4 heads, the first 1");
        // The extra slopes put first.
        let extra_first = |n: usize| {
            let below = 1 << n.ilog2();
            let mut slopes: Vec<f64> =
                alibi_slopes(2 * below).into_iter().step_by(2).take(n - below).collect();
            slopes.extend(alibi_slopes(below));
            slopes
        };
        rejects(check_alibi_slopes(extra_first), "alibi_slopes(3) returned");
    }
}
