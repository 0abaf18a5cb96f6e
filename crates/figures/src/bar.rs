//! Bar charts: one labelled bar per value, in panels stacked top to bottom.

use std::path::{Path, PathBuf};

use crate::canvas::{self, AXIS, Align, Font, GAP, LABEL, MARGIN, TICK, TITLE};
use crate::color::{MUTED, series_color};
use crate::error::{FigureError, Result};
use crate::files;
use crate::ticks::{axis_range, format_value, labelled_linear_ticks};

/// The panels' names, above each panel.
const PANEL_TITLE: Font = Font::bold(18.0);
/// The values written over the bars: a little smaller than the labels, so that four
/// characters fit over each of 16 bars in the book's column.
const VALUE: Font = Font::regular(15.0);
/// The share of its slot a bar fills.
const BAR_SHARE: f64 = 0.7;

/// One panel: its name and one value per bar.
#[derive(Clone, Debug)]
struct BarPanel {
    name: String,
    values: Vec<f64>,
}

/// Bars with labels: one bar per label, drawn from 0 to its value, in one or more panels
/// stacked top to bottom. The panels share the labels and the y axis, so that two sets of
/// values over the same things (before and after a change) can be compared bar by bar; each
/// panel is named above it and drawn in its own colour.
///
/// The chart is 720 pixels wide by default, to sit in the book's column at 100% zoom.
///
/// ```
/// use figures::BarChart;
///
/// let dir = tempfile::tempdir()?;
/// BarChart::new()
///     .title("One row of weights")
///     .labels(&["The", "cat", "sat"])
///     .x_label("key")
///     .y_label("weight")
///     .y_range(0.0, 1.0)
///     .panel("sharp", [0.9, 0.05, 0.05])
///     .panel("flat", [0.4, 0.3, 0.3])
///     .annotate(2)
///     .save(dir.path().join("bars.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct BarChart {
    title: Option<String>,
    labels: Option<Vec<String>>,
    x_label: String,
    y_label: String,
    y_range: Option<(f64, f64)>,
    panels: Vec<BarPanel>,
    annotate: Option<usize>,
    width: u32,
    panel_height: u32,
}

impl Default for BarChart {
    fn default() -> Self {
        BarChart {
            title: None,
            labels: None,
            x_label: String::new(),
            y_label: String::new(),
            y_range: None,
            panels: Vec::new(),
            annotate: None,
            width: 720,
            panel_height: 190,
        }
    }
}

impl BarChart {
    /// An empty chart; add bars with [`BarChart::panel`].
    ///
    /// ```
    /// let chart = figures::BarChart::new();
    /// assert!(chart.to_png().is_err()); // nothing to draw yet
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The title above the chart; `\n` starts a new line.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .title("Weights")
    ///     .panel("w", [0.5, 0.5])
    ///     .save(dir.path().join("t.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// One label per bar, left to right, written under the bars of every panel. Without
    /// labels, bars are numbered from 0.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .labels(&["a", "b"])
    ///     .panel("w", [0.5, 0.5])
    ///     .save(dir.path().join("l.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn labels<L: AsRef<str>>(mut self, labels: &[L]) -> Self {
        self.labels = Some(labels.iter().map(|l| l.as_ref().to_string()).collect());
        self
    }

    /// The label under the bottom panel's bar labels.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .x_label("key j")
    ///     .panel("w", [0.5, 0.5])
    ///     .save(dir.path().join("x.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn x_label(mut self, label: impl Into<String>) -> Self {
        self.x_label = label.into();
        self
    }

    /// The label along each panel's y axis (reading bottom to top).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .y_label("weight")
    ///     .panel("w", [0.5, 0.5])
    ///     .save(dir.path().join("y.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn y_label(mut self, label: impl Into<String>) -> Self {
        self.y_label = label.into();
        self
    }

    /// Fixes the y axis of every panel to [low, high] (e.g. [0, 1] for probabilities) instead
    /// of fitting the data; bars leaving the range are cut at its edge.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .y_range(0.0, 1.0)
    ///     .panel("w", [0.2, 0.8])
    ///     .save(dir.path().join("r.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn y_range(mut self, low: f64, high: f64) -> Self {
        self.y_range = Some((low, high));
        self
    }

    /// Adds a panel below the others: its name (written above it) and one value per bar.
    /// Values may be negative: a bar always runs from 0 to its value.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .panel("scores", [1.5f32, -0.5, 0.25])
    ///     .save(dir.path().join("p.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn panel<V: Into<f64>>(
        mut self,
        name: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.panels.push(BarPanel {
            name: name.into(),
            values: values.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Writes each bar's value over it (under it, for a negative one) with `precision`
    /// decimals.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .annotate(3)
    ///     .panel("w", [0.125, 0.875])
    ///     .save(dir.path().join("a.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn annotate(mut self, precision: usize) -> Self {
        self.annotate = Some(precision);
        self
    }

    /// The image width in pixels (default 720, at least 240) and the height of each panel's
    /// plot area (default 190, at least 80); the image's height follows from them.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .size(600, 120)
    ///     .panel("w", [0.5, 0.5])
    ///     .save(dir.path().join("s.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn size(mut self, width: u32, panel_height: u32) -> Self {
        self.width = width.max(240);
        self.panel_height = panel_height.max(80);
        self
    }

    /// Checks the panels and returns the bar labels and the y range shown.
    fn check(&self) -> Result<(Vec<String>, (f64, f64))> {
        let first = self.panels.first().ok_or_else(|| {
            FigureError::Nothing("the bar chart has no panels: add some with .panel(..)".into())
        })?;
        let n = self.labels.as_ref().map_or(first.values.len(), Vec::len);
        let mut lo = 0.0f64;
        let mut hi = 0.0f64;
        for p in &self.panels {
            if p.values.is_empty() {
                return Err(FigureError::Nothing(format!(
                    "panel \"{}\" has no bars",
                    p.name
                )));
            }
            if p.values.len() != n {
                return Err(FigureError::BarCount {
                    panel: p.name.clone(),
                    values: p.values.len(),
                    bars: n,
                });
            }
            for (i, &v) in p.values.iter().enumerate() {
                if !v.is_finite() {
                    return Err(FigureError::BadPoint {
                        series: p.name.clone(),
                        x: i as f64,
                        y: v,
                        why: "a bar's value must be finite",
                    });
                }
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        let range = axis_range(self.y_range, (lo, hi), false, "bar values")?;
        let range = match self.y_range {
            Some(_) => range,
            None if hi == lo => (0.0, 1.0), // every bar 0
            None => {
                let pad = (hi - lo) * 0.05;
                (
                    if lo < 0.0 { lo - pad } else { 0.0 },
                    if hi > 0.0 { hi + pad } else { 0.0 },
                )
            }
        };
        let labels = match &self.labels {
            Some(l) => l.clone(),
            None => (0..n).map(|i| i.to_string()).collect(),
        };
        Ok((labels, range))
    }

    /// Draws the chart and returns the PNG file's bytes.
    ///
    /// ```
    /// let png = figures::BarChart::new().panel("w", [0.25, 0.75]).to_png()?;
    /// assert!(png.starts_with(b"\x89PNG"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_png(&self) -> Result<Vec<u8>> {
        let (labels, (y_lo, y_hi)) = self.check()?;
        let n = labels.len();
        let ticks = labelled_linear_ticks(y_lo, y_hi, 5);
        let width = self.width as i32;
        let plot_h = self.panel_height as i32;
        let title_h = self
            .title
            .as_deref()
            .map_or(0, |t| TITLE.block_height(t.lines().count().max(1)) + 12);
        let y_label_w = AXIS.room(&self.y_label, GAP);
        let y_ticks_w = LABEL.widest(ticks.iter().map(|(_, s)| s.as_str()));
        let left = MARGIN + y_label_w + y_ticks_w + TICK + 4;
        let right = width - MARGIN;
        let slot = (right - left) as f64 / n as f64;
        if slot < 4.0 {
            return Err(FigureError::Nothing(format!(
                "{n} bars do not fit in a {width}-pixel-wide chart: make it wider with .size(..)"
            )));
        }
        // Room for the values over the bars, and under them if some are negative.
        let value_room = if self.annotate.is_some() {
            VALUE.line_height() + 4
        } else {
            0
        };
        let negative = self
            .panels
            .iter()
            .any(|p| p.values.iter().any(|&v| v < 0.0));
        let below_room = if negative { value_room } else { 0 };
        let name_h = PANEL_TITLE.line_height() + GAP;
        let labels_h = TICK + 4 + LABEL.line_height();
        let panel_block = name_h + value_room + plot_h + below_room + labels_h + 2 * GAP;
        let x_label_h = AXIS.room(&self.x_label, 0);
        let height = MARGIN + title_h + self.panels.len() as i32 * panel_block + x_label_h + MARGIN;
        if height as u32 > canvas::MAX_SIDE || self.width > canvas::MAX_SIDE {
            return Err(FigureError::TooLarge {
                width: self.width,
                height: height as u32,
                limit: canvas::MAX_SIDE,
            });
        }

        canvas::render_png(self.width, height as u32, |area| {
            if let Some(t) = &self.title {
                TITLE.pen().align(Align::Center).draw_block(
                    area,
                    t,
                    ((left + right) / 2, MARGIN),
                )?;
            }
            let mut y0 = MARGIN + title_h;
            for (p, panel) in self.panels.iter().enumerate() {
                PANEL_TITLE.pen().draw(area, &panel.name, (left, y0))?;
                let top = y0 + name_h + value_room;
                let bottom = top + plot_h;
                let fy = |v: f64| {
                    let v = v.clamp(y_lo, y_hi);
                    (bottom as f64 - (v - y_lo) / (y_hi - y_lo) * plot_h as f64).round() as i32
                };
                canvas::draw_y_axis(
                    area,
                    &ticks,
                    fy,
                    (left, right),
                    (top, bottom),
                    &self.y_label,
                )?;
                let zero = fy(0.0);
                let color = series_color(p);
                for (i, &v) in panel.values.iter().enumerate() {
                    let mid = left as f64 + (i as f64 + 0.5) * slot;
                    let x0 = (mid - slot * BAR_SHARE / 2.0).round() as i32;
                    let x1 = (mid + slot * BAR_SHARE / 2.0).round() as i32;
                    let y = fy(v);
                    let (a, b) = if y < zero {
                        (y, zero)
                    } else {
                        (zero + 1, y + 1)
                    };
                    if b > a {
                        canvas::fill(area, (x0, a), (x1.max(x0 + 1), b), color)?;
                    }
                    let cx = mid.round() as i32;
                    if let Some(precision) = self.annotate {
                        let text = format_value(v, precision);
                        let at = if v < 0.0 {
                            (cx, b + 3)
                        } else {
                            (cx, a - 3 - VALUE.line_height())
                        };
                        VALUE
                            .pen()
                            .color(MUTED)
                            .align(Align::Center)
                            .draw(area, &text, at)?;
                    }
                    let label_y = bottom + below_room + TICK + 4;
                    LABEL
                        .pen()
                        .align(Align::Center)
                        .draw(area, &labels[i], (cx, label_y))?;
                }
                // Axes: the y axis and the zero line (the bottom, for non-negative data).
                canvas::fill(area, (left, top), (left + 1, bottom + 1), MUTED)?;
                canvas::fill(area, (left, zero), (right + 1, zero + 1), MUTED)?;
                y0 += panel_block;
            }
            if !self.x_label.is_empty() {
                AXIS.pen().align(Align::Center).draw(
                    area,
                    &self.x_label,
                    ((left + right) / 2, y0),
                )?;
            }
            Ok(())
        })
    }

    /// Draws the chart into the PNG file at `path` (its directory must exist) and returns the
    /// path.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::BarChart::new()
    ///     .panel("w", [0.25, 0.75])
    ///     .save(dir.path().join("bars.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        files::save(path.as_ref(), files::PNG, || self.to_png())
    }
}
