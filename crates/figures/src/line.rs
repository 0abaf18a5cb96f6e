//! Line charts of named series, on linear or logarithmic axes.

use std::path::{Path, PathBuf};

use crate::canvas::{self, AXIS, Align, GAP, LABEL, MARGIN, Shapes, TICK, TITLE};
use crate::color::{GRID, MUTED, series_color};
use crate::error::{FigureError, Result};
use crate::files;
use crate::ticks::{axis_range, format_tick, labelled_linear_ticks, log_ticks};

/// Width of the lines of a chart, in pixels.
const LINE_W: f64 = 2.5;

/// How an axis maps values to positions.
///
/// ```
/// use figures::{Axis, LineChart};
///
/// let dir = tempfile::tempdir()?;
/// let d_k = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
/// LineChart::new()
///     .x_axis(Axis::Log2) // ticks at 1, 2, 4, …, 1024
///     .series("variance of q·k", d_k.map(|d| (d as f64, d as f64)))
///     .save(dir.path().join("variance.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Axis {
    /// Evenly spaced values, ticks at round numbers.
    #[default]
    Linear,
    /// Logarithmic, ticks at powers of 2 (1, 2, 4, …); values must be positive.
    Log2,
    /// Logarithmic, ticks at powers of 10 (0.1, 1, 10, …); values must be positive.
    Log10,
}

impl Axis {
    fn forward(self, v: f64) -> f64 {
        match self {
            Axis::Linear => v,
            Axis::Log2 | Axis::Log10 => v.ln(),
        }
    }
    fn inverse(self, t: f64) -> f64 {
        match self {
            Axis::Linear => t,
            Axis::Log2 | Axis::Log10 => t.exp(),
        }
    }
    /// Ticks within the transformed range [t0, t1], with their labels.
    fn ticks(self, t0: f64, t1: f64) -> Vec<(f64, String)> {
        let (lo, hi) = (self.inverse(t0), self.inverse(t1));
        let ticks: Vec<(f64, String)> = match self {
            Axis::Linear => labelled_linear_ticks(lo, hi, 7),
            Axis::Log2 | Axis::Log10 => {
                let base = if self == Axis::Log2 { 2.0 } else { 10.0 };
                log_ticks(lo, hi, base, 11)
                    .into_iter()
                    .map(|t| (t, format_tick(t)))
                    .collect()
            }
        };
        let slack = (t1 - t0) * 1e-9;
        ticks
            .into_iter()
            .filter(|&(v, _)| (t0 - slack..=t1 + slack).contains(&self.forward(v)))
            .collect()
    }
    /// The transformed range shown for data spanning [lo, hi], with a little room at the ends.
    fn span(self, lo: f64, hi: f64, pad: f64) -> (f64, f64) {
        let (a, b) = (self.forward(lo), self.forward(hi));
        if b > a {
            let d = (b - a) * pad;
            (a - d, b + d)
        } else {
            let d = if a == 0.0 { 1.0 } else { a.abs() * 0.1 };
            (a - d, b + d)
        }
    }
}

/// A named series: its points in order.
#[derive(Clone, Debug)]
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// A line chart of several named series with a legend, linear or log axes and markers at the
/// data points (a different shape for each series, so it reads in grey too).
///
/// The chart is 720 pixels wide by default, to sit in the book's column at 100% zoom.
///
/// ```
/// use figures::{Axis, LineChart};
///
/// let dir = tempfile::tempdir()?;
/// let d_k: Vec<f64> = (0..=10).map(|k| 2f64.powi(k)).collect();
/// LineChart::new()
///     .title("Why divide by √d_k")
///     .x_label("d_k")
///     .y_label("variance of the scores")
///     .x_axis(Axis::Log2)
///     .y_axis(Axis::Log10)
///     .series("q·k", d_k.iter().map(|&d| (d, d)))
///     .series("q·k / √d_k", d_k.iter().map(|&d| (d, 1.0)))
///     .save(dir.path().join("variance.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct LineChart {
    title: Option<String>,
    x_label: String,
    y_label: String,
    x_axis: Axis,
    y_axis: Axis,
    y_range: Option<(f64, f64)>,
    series: Vec<Series>,
    markers: bool,
    size: (u32, u32),
}

impl Default for LineChart {
    fn default() -> Self {
        LineChart {
            title: None,
            x_label: String::new(),
            y_label: String::new(),
            x_axis: Axis::Linear,
            y_axis: Axis::Linear,
            y_range: None,
            series: Vec::new(),
            markers: true,
            size: (720, 480),
        }
    }
}

impl LineChart {
    /// An empty chart; add lines with [`LineChart::series`].
    ///
    /// ```
    /// let chart = figures::LineChart::new();
    /// assert!(chart.to_png().is_err()); // nothing to draw yet
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The title above the chart; `\n` starts a new line.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .title("Softmax temperature")
    ///     .series("max weight", [(0.5, 0.9), (1.0, 0.7), (2.0, 0.5)])
    ///     .save(dir.path().join("t.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The label under the x axis.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .x_label("temperature")
    ///     .series("entropy", [(0.5, 0.2), (1.0, 0.6), (2.0, 1.0)])
    ///     .save(dir.path().join("x.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn x_label(mut self, label: impl Into<String>) -> Self {
        self.x_label = label.into();
        self
    }

    /// The label along the y axis (reading bottom to top).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .y_label("entropy (nats)")
    ///     .series("entropy", [(0.5, 0.2), (1.0, 0.6), (2.0, 1.0)])
    ///     .save(dir.path().join("y.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn y_label(mut self, label: impl Into<String>) -> Self {
        self.y_label = label.into();
        self
    }

    /// The x axis' scale (default [`Axis::Linear`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .x_axis(figures::Axis::Log2)
    ///     .series("s", [(1.0, 1.0), (1024.0, 2.0)])
    ///     .save(dir.path().join("log.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn x_axis(mut self, axis: Axis) -> Self {
        self.x_axis = axis;
        self
    }

    /// The y axis' scale (default [`Axis::Linear`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .y_axis(figures::Axis::Log10)
    ///     .series("s", [(1.0, 0.01), (2.0, 100.0)])
    ///     .save(dir.path().join("log.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn y_axis(mut self, axis: Axis) -> Self {
        self.y_axis = axis;
        self
    }

    /// Fixes the y axis to [low, high] (e.g. [0, 1] for probabilities) instead of fitting the
    /// data; lines leaving the range are clipped at the plot's edge.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .y_range(0.0, 1.0)
    ///     .series("max weight", [(1.0, 0.4), (2.0, 0.8)])
    ///     .save(dir.path().join("r.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn y_range(mut self, low: f64, high: f64) -> Self {
        self.y_range = Some((low, high));
        self
    }

    /// Adds a series: a name for the legend and its (x, y) points, drawn in the given order.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let temps = [0.25f32, 0.5, 1.0, 2.0, 4.0];
    /// figures::LineChart::new()
    ///     .series("max weight", temps.iter().map(|&t| (t, 1.0 / (1.0 + t))))
    ///     .save(dir.path().join("s.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn series<X, Y>(
        mut self,
        name: impl Into<String>,
        points: impl IntoIterator<Item = (X, Y)>,
    ) -> Self
    where
        X: Into<f64>,
        Y: Into<f64>,
    {
        let points = points
            .into_iter()
            .map(|(x, y)| (x.into(), y.into()))
            .collect();
        self.series.push(Series {
            name: name.into(),
            points,
        });
        self
    }

    /// Whether to mark each data point (default `true`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .markers(false)
    ///     .series("smooth", (0..100).map(|i| (i as f64, (i as f64 / 10.0).sin())))
    ///     .save(dir.path().join("m.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn markers(mut self, on: bool) -> Self {
        self.markers = on;
        self
    }

    /// The image size in pixels (default 720×480; each side at least 240).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .size(600, 400)
    ///     .series("s", [(0.0, 0.0), (1.0, 1.0)])
    ///     .save(dir.path().join("small.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.size = (width.max(240), height.max(240));
        self
    }

    /// Checks every point and returns the data's x and y extents.
    fn extents(&self) -> Result<((f64, f64), (f64, f64))> {
        if self.series.is_empty() {
            return Err(FigureError::Nothing(
                "the chart has no series: add some with .series(..)".into(),
            ));
        }
        let mut xs = (f64::INFINITY, f64::NEG_INFINITY);
        let mut ys = xs;
        for s in &self.series {
            if s.points.is_empty() {
                return Err(FigureError::Nothing(format!(
                    "series \"{}\" has no points",
                    s.name
                )));
            }
            for &(x, y) in &s.points {
                let bad = |why| FigureError::BadPoint {
                    series: s.name.clone(),
                    x,
                    y,
                    why,
                };
                if !x.is_finite() || !y.is_finite() {
                    return Err(bad("its coordinates must be finite"));
                }
                if self.x_axis != Axis::Linear && x <= 0.0 {
                    return Err(bad("x must be positive on a log axis"));
                }
                if self.y_axis != Axis::Linear && y <= 0.0 {
                    return Err(bad("y must be positive on a log axis"));
                }
                xs = (xs.0.min(x), xs.1.max(x));
                ys = (ys.0.min(y), ys.1.max(y));
            }
        }
        let xs = axis_range(None, xs, false, "x values")?;
        let log = self.y_axis != Axis::Linear;
        let ys = axis_range(self.y_range, ys, log, "y values")?;
        Ok((xs, ys))
    }

    /// Draws the chart and returns the PNG file's bytes.
    ///
    /// ```
    /// let png = figures::LineChart::new().series("s", [(1.0, 2.0), (2.0, 3.0)]).to_png()?;
    /// assert!(png.starts_with(b"\x89PNG"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_png(&self) -> Result<Vec<u8>> {
        let ((x_lo, x_hi), (y_lo, y_hi)) = self.extents()?;
        let (w, h) = self.size;
        if w > canvas::MAX_SIDE || h > canvas::MAX_SIDE {
            return Err(FigureError::TooLarge {
                width: w,
                height: h,
                limit: canvas::MAX_SIDE,
            });
        }
        let (tx0, tx1) = self.x_axis.span(x_lo, x_hi, 0.03);
        let y_pad = if self.y_range.is_some() { 0.0 } else { 0.05 };
        let (ty0, ty1) = self.y_axis.span(y_lo, y_hi, y_pad);
        let x_ticks = self.x_axis.ticks(tx0, tx1);
        let y_ticks = self.y_axis.ticks(ty0, ty1);

        let (width, height) = (self.size.0 as i32, self.size.1 as i32);
        let title_h = self
            .title
            .as_deref()
            .map_or(0, |t| TITLE.block_height(t.lines().count().max(1)) + 12);
        let y_label_w = AXIS.room(&self.y_label, GAP);
        let y_ticks_w = LABEL.widest(y_ticks.iter().map(|(_, s)| s.as_str()));
        let x_label_h = AXIS.room(&self.x_label, GAP);
        let legend = self.legend_rows(width - 2 * MARGIN);
        let legend_h = legend.len() as i32 * (LABEL.line_height() + 6) + GAP;
        // The plot rectangle; half a tick label of room on the right for the last x tick.
        let left = MARGIN + y_label_w + y_ticks_w + TICK + 4;
        let right = width - MARGIN - x_ticks.last().map_or(0, |(_, s)| LABEL.width(s) / 2);
        let top = MARGIN + title_h + LABEL.line_height() / 2;
        let bottom = height - MARGIN - legend_h - x_label_h - LABEL.line_height() - TICK - 4;
        if right - left < 80 || bottom - top < 80 {
            return Err(FigureError::Nothing(format!(
                "a {width}×{height} image leaves no room for the plot: make it larger with .size(..)"
            )));
        }
        // Exact positions for lines and markers, whole pixels for ticks and grid lines.
        let fx = |v: f64| {
            left as f64 + (self.x_axis.forward(v) - tx0) / (tx1 - tx0) * (right - left) as f64
        };
        let fy = |v: f64| {
            bottom as f64 - (self.y_axis.forward(v) - ty0) / (ty1 - ty0) * (bottom - top) as f64
        };
        let px = |v: f64| fx(v).round() as i32;
        let py = |v: f64| fy(v).round() as i32;

        canvas::render_png(width as u32, height as u32, |area| {
            if let Some(t) = &self.title {
                TITLE.pen().align(Align::Center).draw_block(
                    area,
                    t,
                    ((left + right) / 2, MARGIN),
                )?;
            }
            for (v, s) in &x_ticks {
                let x = px(*v);
                canvas::fill(area, (x, top), (x + 1, bottom), GRID)?;
                canvas::fill(area, (x, bottom), (x + 1, bottom + TICK), MUTED)?;
                LABEL
                    .pen()
                    .align(Align::Center)
                    .draw(area, s, (x, bottom + TICK + 4))?;
            }
            canvas::draw_y_axis(
                area,
                &y_ticks,
                py,
                (left, right),
                (top, bottom),
                &self.y_label,
            )?;
            canvas::fill(area, (left, top), (left + 1, bottom + 1), MUTED)?;
            canvas::fill(area, (left, bottom), (right + 1, bottom + 1), MUTED)?;
            let x_label_y = bottom + TICK + 4 + LABEL.line_height() + GAP;
            if !self.x_label.is_empty() {
                AXIS.pen().align(Align::Center).draw(
                    area,
                    &self.x_label,
                    ((left + right) / 2, x_label_y),
                )?;
            }
            // Lines and markers, clipped to the plot rectangle with room for half a marker
            // (none above and below when the y range is fixed: lines leaving it stop at its edge).
            let room = if self.y_range.is_some() { 1 } else { 8 };
            let clip = ((left - 7, top - room), (right + 8, bottom + room));
            for (i, s) in self.series.iter().enumerate() {
                let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (fx(x), fy(y))).collect();
                let mut shapes = Shapes::new();
                shapes.polyline(&pts, LINE_W);
                if self.markers {
                    pts.iter().for_each(|&p| marker(&mut shapes, i, p));
                }
                shapes.draw(area, series_color(i), clip.0, clip.1)?;
            }
            // The legend, centred under the x label.
            let mut y = x_label_y + x_label_h;
            for row in &legend {
                let row_w: i32 = row.iter().map(|&i| self.legend_entry_w(i)).sum::<i32>() - 24;
                let mut x = (width - row_w) / 2;
                for &i in row {
                    let cy = y + LABEL.line_height() / 2;
                    let (fx, fy) = (x as f64, cy as f64 + 0.5);
                    let mut shapes = Shapes::new();
                    shapes.polyline(&[(fx, fy), (fx + 28.0, fy)], LINE_W);
                    if self.markers {
                        marker(&mut shapes, i, (fx + 14.0, fy));
                    }
                    shapes.draw(area, series_color(i), (0, 0), (width, height))?;
                    LABEL
                        .pen()
                        .middle()
                        .draw(area, &self.series[i].name, (x + 36, cy))?;
                    x += self.legend_entry_w(i);
                }
                y += LABEL.line_height() + 6;
            }
            Ok(())
        })
    }

    /// Width of one legend entry: line sample, name and the space after it.
    fn legend_entry_w(&self, i: usize) -> i32 {
        36 + LABEL.width(&self.series[i].name) + 24
    }

    /// Splits the legend entries into rows no wider than `max_w`.
    fn legend_rows(&self, max_w: i32) -> Vec<Vec<usize>> {
        let mut rows: Vec<Vec<usize>> = Vec::new();
        let mut used = 0;
        for i in 0..self.series.len() {
            let w = self.legend_entry_w(i);
            match rows.last_mut() {
                Some(row) if used + w - 24 <= max_w => row.push(i),
                _ => {
                    rows.push(vec![i]);
                    used = 0;
                }
            }
            used += w;
        }
        rows
    }

    /// Draws the chart into the PNG file at `path` (its directory must exist) and returns the path.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::LineChart::new()
    ///     .series("s", [(1.0, 2.0), (2.0, 3.0)])
    ///     .save(dir.path().join("chart.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        files::save(path.as_ref(), files::PNG, || self.to_png())
    }
}

/// The marker of series `i`: disc, square, triangle, diamond, then again.
fn marker(shapes: &mut Shapes, i: usize, (x, y): (f64, f64)) {
    let r = 5.0;
    match i % 4 {
        0 => shapes.disc((x, y), r),
        1 => shapes.polygon(vec![
            (x - r, y - r),
            (x + r, y - r),
            (x + r, y + r),
            (x - r, y + r),
        ]),
        2 => shapes.polygon(vec![
            (x, y - r * 1.25),
            (x + r * 1.2, y + r * 0.85),
            (x - r * 1.2, y + r * 0.85),
        ]),
        _ => shapes.polygon(vec![
            (x, y - r * 1.35),
            (x + r * 1.35, y),
            (x, y + r * 1.35),
            (x - r * 1.35, y),
        ]),
    }
}
