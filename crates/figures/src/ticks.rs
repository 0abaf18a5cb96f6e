//! Axis ranges, tick positions and number formatting shared by colour bars and charts.

use crate::error::{FigureError, Result};

/// The range a chart's axis covers: `fixed` when one was set (both ends finite, `low < high`,
/// and `low > 0` on a `log` axis, else [`FigureError::BadRange`]), otherwise `data`, the
/// extent of the values; either way its span must be a finite number, else
/// [`FigureError::TooWide`], naming the values as `what`.
pub(crate) fn axis_range(
    fixed: Option<(f64, f64)>,
    data: (f64, f64),
    log: bool,
    what: &'static str,
) -> Result<(f64, f64)> {
    let (low, high) = match fixed {
        Some((low, high)) => {
            let positive = !log || low > 0.0;
            if !(low.is_finite() && high.is_finite() && low < high && positive) {
                return Err(FigureError::BadRange { low, high });
            }
            (low, high)
        }
        None => data,
    };
    if !(high - low).is_finite() {
        return Err(FigureError::TooWide { what, low, high });
    }
    Ok((low, high))
}

/// Formats `v` with `precision` decimals, with a true minus sign (U+2212) and no "−0.00".
/// Magnitudes of a million and more are written in scientific notation ("1.50e7").
pub(crate) fn format_value(v: f64, precision: usize) -> String {
    if v.abs() >= 1e6 {
        let p = precision.min(3);
        return format!("{v:.p$e}")
            .replace("e-", "e\u{2212}")
            .replacen('-', "\u{2212}", 1);
    }
    let s = format!("{v:.precision$}");
    if s.bytes().all(|b| matches!(b, b'-' | b'0' | b'.')) {
        return s.trim_start_matches('-').to_string();
    }
    s.replacen('-', "\u{2212}", 1)
}

/// "Nice" ticks (1, 2, 2.5 or 5 × 10^k apart) covering [lo, hi], at most about `max_count`.
/// Returns the ticks and the number of decimals they need.
pub(crate) fn linear_ticks(lo: f64, hi: f64, max_count: usize) -> (Vec<f64>, usize) {
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 || span.is_infinite() {
        return (vec![lo], 2);
    }
    let rough = span / (max_count.max(2) - 1) as f64;
    let mag = 10f64.powf(rough.log10().floor());
    let (step_m, extra) = [(1.0, 0), (2.0, 0), (2.5, 1), (5.0, 0), (10.0, 0)]
        .into_iter()
        .find(|&(m, _)| m * mag >= rough * (1.0 - 1e-9))
        .unwrap_or((10.0, 0));
    let step = step_m * mag;
    let decimals = ((-(step.log10().floor())).max(0.0) as usize + extra).min(12);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let ticks = (first..=last)
        .map(|k| k as f64 * step)
        .map(|t| if t.abs() < step * 1e-9 { 0.0 } else { t })
        .collect();
    (ticks, decimals)
}

/// [`linear_ticks`] with their labels, all with the same number of decimals (scientific
/// notation for very large or very small steps).
pub(crate) fn labelled_linear_ticks(lo: f64, hi: f64, max_count: usize) -> Vec<(f64, String)> {
    let (ticks, decimals) = linear_ticks(lo, hi, max_count);
    let label = |t: f64| {
        if decimals > 6 {
            format_tick(t)
        } else {
            format_value(t, decimals)
        }
    };
    ticks.into_iter().map(|t| (t, label(t))).collect()
}

/// Powers of `base` within [lo, hi] (lo > 0), thinned to at most `max_count`.
/// Falls back to linear ticks when the range holds fewer than two powers.
pub(crate) fn log_ticks(lo: f64, hi: f64, base: f64, max_count: usize) -> Vec<f64> {
    let first = (lo.log(base) - 1e-9).ceil() as i32;
    let last = (hi.log(base) + 1e-9).floor() as i32;
    if last - first < 1 {
        return linear_ticks(lo, hi, max_count.min(5)).0;
    }
    let n = (last - first + 1) as usize;
    let every = n.div_ceil(max_count.max(1));
    (first..=last)
        .step_by(every)
        .map(|k| base.powi(k))
        .collect()
}

/// The shortest readable form of a tick value: "1024", "0.25", "1e−6".
pub(crate) fn format_tick(v: f64) -> String {
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_string()
    } else if !(1e-4..1e6).contains(&a) {
        let s = format!("{v:e}");
        s.replace("e-", "e\u{2212}")
    } else {
        // Up to 6 significant decimals, trailing zeros trimmed.
        let s = format!("{v:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    };
    s.replacen('-', "\u{2212}", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_use_a_true_minus_and_never_minus_zero() {
        assert_eq!(format_value(-0.25, 2), "\u{2212}0.25");
        assert_eq!(format_value(-0.0001, 3), "0.000");
        assert_eq!(format_value(0.123456, 3), "0.123");
        assert_eq!(format_value(-1.5e7, 2), "\u{2212}1.50e7");
    }

    #[test]
    fn nice_linear_ticks() {
        assert_eq!(
            linear_ticks(0.0, 1.0, 6),
            (vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0], 1)
        );
        let (t, d) = linear_ticks(-2.0, 2.0, 6);
        assert_eq!(t, vec![-2.0, -1.0, 0.0, 1.0, 2.0]);
        assert_eq!(d, 0);
        let (t, d) = linear_ticks(0.0, 0.5, 3);
        assert_eq!((t.len(), d), (3, 2));
    }

    #[test]
    fn log_ticks_are_powers() {
        assert_eq!(
            log_ticks(1.0, 1024.0, 2.0, 11),
            (0..=10).map(|k| 2f64.powi(k)).collect::<Vec<_>>()
        );
        assert_eq!(
            log_ticks(1.0, 4096.0, 2.0, 7),
            vec![1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0]
        );
        assert_eq!(
            log_ticks(0.01, 100.0, 10.0, 10),
            vec![0.01, 0.1, 1.0, 10.0, 100.0]
        );
    }

    #[test]
    fn tick_labels() {
        assert_eq!(format_tick(1024.0), "1024");
        assert_eq!(format_tick(0.25), "0.25");
        assert_eq!(format_tick(0.1), "0.1");
        assert_eq!(format_tick(-3.0), "\u{2212}3");
        assert_eq!(format_tick(1e-6), "1e\u{2212}6");
    }
}
