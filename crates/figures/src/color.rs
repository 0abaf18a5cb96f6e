//! Colour schemes (from colorous, d3's schemes) and the mapping from values to colours.

use plotters::style::RGBColor;

use crate::error::{FigureError, Result};

/// How values map to colours in a heatmap.
///
/// ```
/// use figures::{ColorScheme, Heatmap};
/// use ndarray::array;
///
/// let dir = tempfile::tempdir()?;
/// // Signed values (scores, embeddings): blue below 0, white at 0, red above.
/// Heatmap::new(&array![[-1.5, 0.0], [0.4, 2.0]])
///     .scheme(ColorScheme::Diverging)
///     .save(dir.path().join("scores.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColorScheme {
    /// Light yellow for small values to dark red for large ones (d3's YlOrRd, the scheme of the
    /// notebooks' seaborn heatmaps). Meant for weights and other non-negative values.
    #[default]
    Sequential,
    /// Blue for negative, white for 0, red for positive (d3's RdBu, reversed). The automatic
    /// range is symmetric, ±max|x|, so 0 is always white.
    Diverging,
}

/// The values that the two ends of the colour scale stand for.
///
/// ```
/// use figures::{Heatmap, ValueRange};
/// use ndarray::array;
///
/// let dir = tempfile::tempdir()?;
/// // Attention weights are probabilities: fixing the scale to [0, 1] makes figures comparable.
/// Heatmap::new(&array![[0.2, 0.8], [0.6, 0.4]])
///     .range(ValueRange::Fixed(0.0, 1.0))
///     .save(dir.path().join("w.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum ValueRange {
    /// From the data: [min, max] for [`ColorScheme::Sequential`], [−m, m] with m = max|x| for
    /// [`ColorScheme::Diverging`]. Masked cells do not count.
    #[default]
    Auto,
    /// Exactly [low, high]; values outside are drawn with the colour of the nearer end.
    Fixed(f64, f64),
}

impl ValueRange {
    /// Resolves the range for finite `values`, checking fixed bounds.
    pub(crate) fn resolve(
        self,
        scheme: ColorScheme,
        values: impl Iterator<Item = f64>,
    ) -> Result<(f64, f64)> {
        let (low, high) = match self {
            ValueRange::Fixed(low, high) => {
                if !(low.is_finite() && high.is_finite() && low < high) {
                    return Err(FigureError::BadRange { low, high });
                }
                (low, high)
            }
            ValueRange::Auto => {
                let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                    (lo.min(v), hi.max(v))
                });
                if lo > hi {
                    (0.0, 1.0) // every cell masked
                } else if scheme == ColorScheme::Diverging {
                    let m = lo.abs().max(hi.abs());
                    (-m, m)
                } else {
                    (lo, hi)
                }
            }
        };
        if !(high - low).is_finite() {
            Err(FigureError::TooWide {
                what: "matrix values",
                low,
                high,
            })
        } else if low < high {
            Ok((low, high))
        } else if low == 0.0 {
            // An all-zero matrix.
            Ok(match scheme {
                ColorScheme::Diverging => (-1.0, 1.0),
                ColorScheme::Sequential => (0.0, 1.0),
            })
        } else {
            // A constant matrix: widen around the value so that it maps to the middle.
            let d = low.abs() * 0.5;
            Ok((low - d, high + d))
        }
    }
}

/// A resolved colour scale: a scheme and the values of its two ends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scale {
    pub scheme: ColorScheme,
    pub low: f64,
    pub high: f64,
}

impl Scale {
    /// The colour at position `t` in [0, 1] along the scale.
    pub fn at(&self, t: f64) -> RGBColor {
        let t = t.clamp(0.0, 1.0);
        let c = match self.scheme {
            ColorScheme::Sequential => colorous::YELLOW_ORANGE_RED.eval_continuous(t),
            ColorScheme::Diverging => colorous::RED_BLUE.eval_continuous(1.0 - t),
        };
        RGBColor(c.r, c.g, c.b)
    }
    /// The colour of value `v` (clamped to the scale).
    pub fn color(&self, v: f64) -> RGBColor {
        self.at((v - self.low) / (self.high - self.low))
    }
}

/// Black or white, whichever reads better on `bg` (by WCAG relative luminance).
pub(crate) fn text_on(bg: RGBColor) -> RGBColor {
    let lin = |c: u8| {
        let c = c as f64 / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    let l = 0.2126 * lin(bg.0) + 0.7152 * lin(bg.1) + 0.0722 * lin(bg.2);
    // Contrast with black is (l + 0.05) / 0.05, with white 1.05 / (l + 0.05): equal at l ≈ 0.179.
    if l > 0.179 {
        INK
    } else {
        RGBColor(255, 255, 255)
    }
}

/// The colour of text and axes: near-black.
pub(crate) const INK: RGBColor = RGBColor(25, 25, 25);
/// Secondary text and tick marks.
pub(crate) const MUTED: RGBColor = RGBColor(80, 80, 80);
/// Fill of masked cells and their hatching.
pub(crate) const MASK_FILL: RGBColor = RGBColor(214, 214, 214);
pub(crate) const MASK_HATCH: RGBColor = RGBColor(160, 160, 160);
/// Grid lines of charts.
pub(crate) const GRID: RGBColor = RGBColor(225, 225, 225);

/// The colour of the `i`-th series of a chart (d3's Tableau10, colour-blind friendlier than
/// Category10).
pub(crate) fn series_color(i: usize) -> RGBColor {
    let c = colorous::TABLEAU10[i % colorous::TABLEAU10.len()];
    RGBColor(c.r, c.g, c.b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_ranges() {
        let v = [0.1, 0.7, 0.3];
        assert_eq!(
            ValueRange::Auto
                .resolve(ColorScheme::Sequential, v.into_iter())
                .unwrap(),
            (0.1, 0.7)
        );
        let s = [-0.5, 2.0];
        assert_eq!(
            ValueRange::Auto
                .resolve(ColorScheme::Diverging, s.into_iter())
                .unwrap(),
            (-2.0, 2.0)
        );
        assert_eq!(
            ValueRange::Auto
                .resolve(ColorScheme::Sequential, [0.0; 3].into_iter())
                .unwrap(),
            (0.0, 1.0)
        );
        assert_eq!(
            ValueRange::Auto
                .resolve(ColorScheme::Diverging, [0.0; 3].into_iter())
                .unwrap(),
            (-1.0, 1.0)
        );
        assert_eq!(
            ValueRange::Auto
                .resolve(ColorScheme::Sequential, [2.0; 3].into_iter())
                .unwrap(),
            (1.0, 3.0)
        );
        assert!(
            ValueRange::Fixed(1.0, 1.0)
                .resolve(ColorScheme::Sequential, [].into_iter())
                .is_err()
        );
        assert!(
            ValueRange::Fixed(f64::NAN, 1.0)
                .resolve(ColorScheme::Sequential, [].into_iter())
                .is_err()
        );
    }

    #[test]
    fn diverging_is_white_at_zero_red_above() {
        let s = Scale {
            scheme: ColorScheme::Diverging,
            low: -1.0,
            high: 1.0,
        };
        let mid = s.color(0.0);
        assert!(mid.0 > 230 && mid.1 > 230 && mid.2 > 230, "{mid:?}");
        let hot = s.color(1.0);
        assert!(hot.0 > hot.2, "positive should be red: {hot:?}");
    }

    #[test]
    fn text_colour_follows_luminance() {
        let s = Scale {
            scheme: ColorScheme::Sequential,
            low: 0.0,
            high: 1.0,
        };
        assert_eq!(text_on(s.color(0.0)), INK); // pale yellow
        assert_eq!(text_on(s.color(1.0)), RGBColor(255, 255, 255)); // dark red
    }
}
