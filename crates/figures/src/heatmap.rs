//! Heatmaps of labelled matrices, alone ([`Heatmap`]) or several sharing one colour scale
//! ([`HeatmapGrid`]).

use std::path::{Path, PathBuf};

use ndarray::{Array2, ArrayBase, Data, Ix2};

use crate::canvas::{self, AXIS, Align, Area, Font, GAP, LABEL, MARGIN, TICK, TITLE};
use crate::color::{self, ColorScheme, MASK_FILL, MASK_HATCH, MUTED, Scale, ValueRange};
use crate::error::{FigureError, Result};
use crate::files;
use crate::ticks::{format_value, labelled_linear_ticks};

/// Matrices with more rows or columns than this are not annotated unless asked to be.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let n = figures::ANNOTATE_MAX + 1;
/// let big = ndarray::Array2::<f64>::from_elem((n, n), 1.0 / n as f64);
/// // Colour only, no numbers: they would not fit in the cells.
/// figures::Heatmap::new(&big).save(dir.path().join("big.png"))?;
/// // Force them anyway (the image grows to make room).
/// figures::Heatmap::new(&big).annotate(true).save(dir.path().join("big_numbers.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const ANNOTATE_MAX: usize = 16;
/// Automatic layouts (annotations, number of grid columns) aim to stay this wide or narrower:
/// an mdBook page shows about 750 px of content at 100% zoom.
///
/// ```
/// // Four small heads fit side by side in one row.
/// let p = || figures::Panel::new(&ndarray::Array2::<f64>::eye(2));
/// let png = figures::HeatmapGrid::new().panel(p()).panel(p()).panel(p()).panel(p()).to_png()?;
/// let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
/// assert!(width <= figures::TARGET_WIDTH as u32);
/// # Ok::<(), figures::FigureError>(())
/// ```
pub const TARGET_WIDTH: i32 = 800;
/// Values are written in the cells automatically only if the figure, with its panels at least
/// two to a row, stays this wide or narrower.
const MAX_AUTO_WIDTH: i32 = 900;

const VALUE: Font = Font::regular(17.0);
const PANEL_TITLE: Font = Font::bold(18.0);
const PANEL_GAP: i32 = 28;
const BAR_W: i32 = 22;

/// One matrix of a [`HeatmapGrid`], with its own title, labels and mask.
///
/// ```
/// use figures::{HeatmapGrid, Panel};
/// use ndarray::array;
///
/// let dir = tempfile::tempdir()?;
/// let causal = Panel::new(&array![[1.0, 0.0], [0.3, 0.7]])
///     .title("causal")
///     .labels(&["The", "cat"])
///     .allowed(&array![[true, false], [true, true]]);
/// HeatmapGrid::new().panel(causal).save(dir.path().join("causal.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Panel {
    data: Array2<f64>,
    title: Option<String>,
    row_labels: Option<Vec<String>>,
    col_labels: Option<Vec<String>>,
    masked: Option<Array2<bool>>,
}

impl Panel {
    /// A panel showing `data` (any 2-D ndarray of `f64`, `f32` or other numbers that convert
    /// to `f64` losslessly). A value of −∞ is drawn as masked; NaN and +∞ are errors unless the
    /// cell is masked.
    ///
    /// ```
    /// use figures::Panel;
    /// let weights = ndarray::Array2::<f32>::eye(3);
    /// let panel = Panel::new(&weights);
    /// # let _ = panel;
    /// ```
    pub fn new<S, A>(data: &ArrayBase<S, Ix2>) -> Self
    where
        S: Data<Elem = A>,
        A: Copy + Into<f64>,
    {
        Panel {
            data: data.mapv(Into::into),
            title: None,
            row_labels: None,
            col_labels: None,
            masked: None,
        }
    }

    /// The title above the panel (in a [`Heatmap`], the title of the figure).
    ///
    /// ```
    /// let panel = figures::Panel::new(&ndarray::array![[1.0]]).title("head 0");
    /// # let _ = panel;
    /// ```
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Labels for the rows (queries), top to bottom. Without labels, rows are numbered from 0.
    ///
    /// ```
    /// let panel = figures::Panel::new(&ndarray::array![[1.0], [2.0]]).row_labels(&["a", "b"]);
    /// # let _ = panel;
    /// ```
    pub fn row_labels<L: AsRef<str>>(mut self, labels: &[L]) -> Self {
        self.row_labels = Some(labels.iter().map(|l| l.as_ref().to_string()).collect());
        self
    }

    /// Labels for the columns (keys), left to right. Without labels, columns are numbered from 0.
    ///
    /// ```
    /// let panel = figures::Panel::new(&ndarray::array![[1.0, 2.0]]).col_labels(&["x", "y"]);
    /// # let _ = panel;
    /// ```
    pub fn col_labels<L: AsRef<str>>(mut self, labels: &[L]) -> Self {
        self.col_labels = Some(labels.iter().map(|l| l.as_ref().to_string()).collect());
        self
    }

    /// The same labels for rows and columns: the tokens of a self-attention matrix.
    ///
    /// ```
    /// let panel = figures::Panel::new(&ndarray::Array2::<f64>::eye(2)).labels(&["hi", "there"]);
    /// # let _ = panel;
    /// ```
    pub fn labels<L: AsRef<str>>(self, labels: &[L]) -> Self {
        self.row_labels(labels).col_labels(labels)
    }

    /// Cells to draw as masked: `true` = masked (grey, hatched, marked "−∞"). Replaces any earlier
    /// mask. See [`Panel::allowed`] for the opposite convention.
    ///
    /// ```
    /// use ndarray::array;
    /// let panel = figures::Panel::new(&array![[0.5, 0.5]]).masked(&array![[false, true]]);
    /// # let _ = panel;
    /// ```
    pub fn masked<S: Data<Elem = bool>>(mut self, masked: &ArrayBase<S, Ix2>) -> Self {
        self.masked = Some(masked.to_owned());
        self
    }

    /// Cells that may be attended to: `true` = shown, `false` = drawn as masked. This is the
    /// convention of PyTorch's boolean `attn_mask` and of this book's `attention` crate, so a
    /// causal mask can be passed as is. Replaces any earlier mask.
    ///
    /// ```
    /// use ndarray::array;
    /// let causal = array![[true, false], [true, true]];
    /// let panel = figures::Panel::new(&array![[1.0, 0.0], [0.4, 0.6]]).allowed(&causal);
    /// # let _ = panel;
    /// ```
    pub fn allowed<S: Data<Elem = bool>>(mut self, allowed: &ArrayBase<S, Ix2>) -> Self {
        self.masked = Some(allowed.mapv(|a| !a));
        self
    }

    fn is_masked(&self, r: usize, c: usize) -> bool {
        self.data[[r, c]] == f64::NEG_INFINITY || self.masked.as_ref().is_some_and(|m| m[[r, c]])
    }

    /// Checks the panel against its labels and mask; `what` names it in messages.
    fn validate(&self, what: &str) -> Result<()> {
        let (rows, cols) = self.data.dim();
        if rows == 0 || cols == 0 {
            return Err(FigureError::EmptyMatrix {
                what: what.to_string(),
                rows,
                cols,
            });
        }
        for (axis, labels, len) in [
            ("row", &self.row_labels, rows),
            ("column", &self.col_labels, cols),
        ] {
            if let Some(labels) = labels
                && labels.len() != len
            {
                return Err(FigureError::LabelCount {
                    axis,
                    labels: labels.len(),
                    len,
                });
            }
        }
        if let Some(m) = &self.masked
            && m.dim() != (rows, cols)
        {
            let (mask_rows, mask_cols) = m.dim();
            return Err(FigureError::MaskShape {
                mask_rows,
                mask_cols,
                rows,
                cols,
            });
        }
        for ((row, col), &value) in self.data.indexed_iter() {
            if !value.is_finite() && !self.is_masked(row, col) {
                return Err(FigureError::NonFinite {
                    what: what.to_string(),
                    row,
                    col,
                    value,
                });
            }
        }
        Ok(())
    }

    /// What the layout needs to know of the panel.
    fn shape(&self, style: &Style) -> Shape<'_> {
        let (rows, cols) = self.data.dim();
        let value_w = self
            .data
            .iter()
            .filter(|v| v.is_finite())
            .map(|&v| VALUE.width(&format_value(v, style.precision)))
            .max()
            .unwrap_or(0);
        Shape {
            rows,
            cols,
            title: self.title.as_deref(),
            row_labels: self.row_labels.as_deref(),
            col_labels: self.col_labels.as_deref(),
            value_w,
            any_masked: self.data.indexed_iter().any(|((r, c), _)| self.is_masked(r, c)),
        }
    }

    fn unmasked_values(&self) -> impl Iterator<Item = f64> + '_ {
        self.data
            .indexed_iter()
            .filter(|&((r, c), _)| !self.is_masked(r, c))
            .map(|(_, &v)| v)
    }

    fn row_label(&self, r: usize) -> String {
        self.row_labels
            .as_ref()
            .map_or_else(|| r.to_string(), |l| l[r].clone())
    }

    fn col_label(&self, c: usize) -> String {
        self.col_labels
            .as_ref()
            .map_or_else(|| c.to_string(), |l| l[c].clone())
    }
}

/// The size of a [`HeatmapGrid`]'s panel without its values, for [`HeatmapGrid::size`]: a
/// matrix's rows and columns, its title, its labels and whether any cell is masked.
///
/// ```
/// let panel = figures::PanelSize::new(3, 3).title("head 0").labels(&["a", "b", "c"]);
/// # let _ = panel;
/// ```
#[derive(Clone, Debug)]
pub struct PanelSize {
    rows: usize,
    cols: usize,
    title: Option<String>,
    row_labels: Option<Vec<String>>,
    col_labels: Option<Vec<String>>,
    masked: bool,
}

impl PanelSize {
    /// A panel of `rows × cols` cells, untitled, numbered, with no masked cell.
    pub fn new(rows: usize, cols: usize) -> Self {
        PanelSize {
            rows,
            cols,
            title: None,
            row_labels: None,
            col_labels: None,
            masked: false,
        }
    }

    /// The panel's title (see [`Panel::title`]).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The same labels for rows and columns (see [`Panel::labels`]).
    pub fn labels<L: AsRef<str>>(mut self, labels: &[L]) -> Self {
        let labels: Vec<String> = labels.iter().map(|l| l.as_ref().to_string()).collect();
        self.row_labels = Some(labels.clone());
        self.col_labels = Some(labels);
        self
    }

    /// Whether some cell is masked: the colour bar then has a legend for masked cells.
    pub fn masked(mut self, masked: bool) -> Self {
        self.masked = masked;
        self
    }
}

/// What the layout needs to know of a panel: its size, title, labels, the widest value it
/// writes in a cell and whether any cell is masked.
struct Shape<'a> {
    rows: usize,
    cols: usize,
    title: Option<&'a str>,
    row_labels: Option<&'a [String]>,
    col_labels: Option<&'a [String]>,
    value_w: i32,
    any_masked: bool,
}

impl Shape<'_> {
    fn row_label(&self, r: usize) -> String {
        self.row_labels.map_or_else(|| r.to_string(), |l| l[r].clone())
    }

    fn col_label(&self, c: usize) -> String {
        self.col_labels.map_or_else(|| c.to_string(), |l| l[c].clone())
    }
}

/// Settings shared by every panel of a figure.
#[derive(Clone, Debug)]
struct Style {
    scheme: ColorScheme,
    range: ValueRange,
    precision: usize,
    annotate: Option<bool>,
    row_title: String,
    col_title: String,
    colorbar_label: String,
    mask_mark: String,
    mask_legend: String,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            scheme: ColorScheme::Sequential,
            range: ValueRange::Auto,
            precision: 2,
            annotate: None,
            row_title: "query (attending from)".into(),
            col_title: "key (attending to)".into(),
            colorbar_label: "value".into(),
            mask_mark: "\u{2212}\u{221e}".into(),
            mask_legend: "masked".into(),
        }
    }
}

/// Generates the style setters shared by [`Heatmap`] and [`HeatmapGrid`], each documented with
/// an example that starts from `$make` (an expression building the figure).
macro_rules! style_setters {
    ($make:literal) => {
        /// The colour scheme (default [`ColorScheme::Sequential`], for weights).
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.scheme(figures::ColorScheme::Diverging).save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn scheme(mut self, scheme: ColorScheme) -> Self {
            self.style.scheme = scheme;
            self
        }

        /// The values at the ends of the colour scale (default [`ValueRange::Auto`]).
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.range(figures::ValueRange::Fixed(0.0, 1.0)).save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn range(mut self, range: ValueRange) -> Self {
            self.style.range = range;
            self
        }

        /// Decimals shown in each cell and on the colour bar's ticks' precision floor
        /// (default 2).
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.precision(3).save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn precision(mut self, decimals: usize) -> Self {
            self.style.precision = decimals.min(10);
            self
        }

        /// Whether to write each cell's value in it. By default values are written when the
        /// matrices have at most [`ANNOTATE_MAX`] rows and columns and the figure (with grid
        /// panels at least two to a row) stays at most 900 pixels wide; larger matrices are
        /// drawn as colour only; row and column numbers are then thinned (every n-th) so that
        /// they never overlap, while labels given with `labels`, `row_labels` or `col_labels`
        /// are all drawn, the cells growing to a label's height where needed.
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.annotate(false).save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn annotate(mut self, on: bool) -> Self {
            self.style.annotate = Some(on);
            self
        }

        /// The title of the row axis (default "query (attending from)"; "" for none).
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.row_title("token").save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn row_title(mut self, title: impl Into<String>) -> Self {
            self.style.row_title = title.into();
            self
        }

        /// The title of the column axis (default "key (attending to)"; "" for none).
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.col_title("dimension").save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn col_title(mut self, title: impl Into<String>) -> Self {
            self.style.col_title = title.into();
            self
        }

        /// The label along the colour bar (default "value"), e.g. "attention weight".
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.colorbar_label("attention weight").save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn colorbar_label(mut self, label: impl Into<String>) -> Self {
            self.style.colorbar_label = label.into();
            self
        }

        /// The mark written in masked cells when values are written (default "−∞"; "masked"
        /// or "" also work).
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.mask_mark("masked").save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn mask_mark(mut self, mark: impl Into<String>) -> Self {
            self.style.mask_mark = mark.into();
            self
        }

        /// The word next to the hatched square under the colour bar, drawn when any cell is
        /// masked (default "masked"), e.g. "skipped" for cells that stand for work not done.
        ///
        /// ```
        /// # use ndarray::array;
        /// # let dir = tempfile::tempdir()?;
        #[doc = concat!("let fig = ", $make, ";")]
        /// fig.mask_legend("skipped").save(dir.path().join("f.png"))?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn mask_legend(mut self, legend: impl Into<String>) -> Self {
            self.style.mask_legend = legend.into();
            self
        }
    };
}

/// An annotated heatmap of one matrix: labels, axis titles, a value in every cell, a colour
/// bar, masked cells in hatched grey.
///
/// The defaults suit attention weights (rows are queries, columns keys, YlOrRd colours, two
/// decimals). Rows and columns are numbered from 0 unless labelled. Values are written in the
/// cells of matrices up to [`ANNOTATE_MAX`]×[`ANNOTATE_MAX`]; larger matrices (say 64×64) are
/// drawn as colour only, with every n-th row and column number so that they do not overlap
/// (labels you give are all drawn: the cells grow to fit them).
///
/// Masked cells: a cell is masked when [`Heatmap::masked`] says so, when [`Heatmap::allowed`]
/// says it is not allowed, or when its value is −∞ (as masked attention scores are). NaN and +∞
/// in an unmasked cell are errors.
///
/// ```
/// use figures::{Heatmap, ValueRange};
/// use ndarray::array;
///
/// let dir = tempfile::tempdir()?;
/// let weights = array![[0.42, 0.31, 0.27], [0.30, 0.38, 0.32], [0.25, 0.29, 0.46]];
/// let path = dir.path().join("weights.png");
/// Heatmap::new(&weights)
///     .labels(&["The", "cat", "sat"])
///     .title("Attention weights")
///     .colorbar_label("attention weight")
///     .range(ValueRange::Fixed(0.0, 1.0))
///     .precision(3)
///     .save(&path)?;
/// assert!(std::fs::read(&path)?.starts_with(b"\x89PNG"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Heatmap {
    panel: Panel,
    style: Style,
}

impl Heatmap {
    /// A heatmap of `data` (any 2-D ndarray of numbers convertible to `f64`).
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let w = ndarray::Array2::<f32>::from_elem((4, 4), 0.25);
    /// figures::Heatmap::new(&w).save(dir.path().join("uniform.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<S, A>(data: &ArrayBase<S, Ix2>) -> Self
    where
        S: Data<Elem = A>,
        A: Copy + Into<f64>,
    {
        Heatmap {
            panel: Panel::new(data),
            style: Style::default(),
        }
    }

    /// The title above the figure; `\n` starts a new line.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::Heatmap::new(&ndarray::array![[1.0, 0.0]])
    ///     .title("Attention weights\n(row i: how token i attends)")
    ///     .save(dir.path().join("t.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.panel = self.panel.title(title);
        self
    }

    /// Labels for the rows, top to bottom (see [`Panel::row_labels`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::Heatmap::new(&ndarray::array![[1.0], [0.0]])
    ///     .row_labels(&["first", "second"])
    ///     .save(dir.path().join("r.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn row_labels<L: AsRef<str>>(mut self, labels: &[L]) -> Self {
        self.panel = self.panel.row_labels(labels);
        self
    }

    /// Labels for the columns, left to right (see [`Panel::col_labels`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::Heatmap::new(&ndarray::array![[1.0, 0.0]])
    ///     .col_labels(&["d0", "d1"])
    ///     .save(dir.path().join("c.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn col_labels<L: AsRef<str>>(mut self, labels: &[L]) -> Self {
        self.panel = self.panel.col_labels(labels);
        self
    }

    /// The same labels for rows and columns (see [`Panel::labels`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::Heatmap::new(&ndarray::Array2::<f64>::eye(2))
    ///     .labels(&["my", "name"])
    ///     .save(dir.path().join("l.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn labels<L: AsRef<str>>(mut self, labels: &[L]) -> Self {
        self.panel = self.panel.labels(labels);
        self
    }

    /// Cells to draw as masked, `true` = masked (see [`Panel::masked`]).
    ///
    /// ```
    /// # use ndarray::array;
    /// # let dir = tempfile::tempdir()?;
    /// figures::Heatmap::new(&array![[1.0, 0.0], [0.5, 0.5]])
    ///     .masked(&array![[false, true], [false, false]])
    ///     .save(dir.path().join("m.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn masked<S: Data<Elem = bool>>(mut self, masked: &ArrayBase<S, Ix2>) -> Self {
        self.panel = self.panel.masked(masked);
        self
    }

    /// Cells that may be attended to, `true` = shown (see [`Panel::allowed`]).
    ///
    /// ```
    /// # use ndarray::array;
    /// # let dir = tempfile::tempdir()?;
    /// figures::Heatmap::new(&array![[1.0, 0.0], [0.5, 0.5]])
    ///     .allowed(&array![[true, false], [true, true]])
    ///     .save(dir.path().join("a.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allowed<S: Data<Elem = bool>>(mut self, allowed: &ArrayBase<S, Ix2>) -> Self {
        self.panel = self.panel.allowed(allowed);
        self
    }

    style_setters!("figures::Heatmap::new(&array![[0.2, 0.8], [0.6, 0.4]])");

    /// Draws the figure and returns the PNG file's bytes (the same bytes for the same input,
    /// on every run and machine).
    ///
    /// ```
    /// let png = figures::Heatmap::new(&ndarray::array![[0.1, 0.9]]).to_png()?;
    /// assert!(png.starts_with(b"\x89PNG"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_png(&self) -> Result<Vec<u8>> {
        let mut panel = self.panel.clone();
        let title = panel.title.take();
        render(
            std::slice::from_ref(&panel),
            &self.style,
            title.as_deref(),
            None,
            false,
            "the matrix",
        )
    }

    /// Draws the figure into the PNG file at `path` (its directory must exist) and returns the
    /// path, so that a chapter example can collect the files it wrote.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let written = figures::Heatmap::new(&ndarray::array![[0.1, 0.9]]).save(dir.path().join("h.png"))?;
    /// assert_eq!(written, dir.path().join("h.png"));
    /// let err = figures::Heatmap::new(&ndarray::array![[0.1]]).save(dir.path().join("no/h.png"));
    /// assert!(err.unwrap_err().to_string().contains("no/h.png"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        files::save(path.as_ref(), files::PNG, || self.to_png())
    }
}

/// Several heatmaps in one image, sharing one colour scale and one colour bar: one panel per
/// head, or "standard vs causal" side by side.
///
/// Panels are laid out left to right, top to bottom, in [`HeatmapGrid::columns`] columns
/// (by default as many as fit in [`TARGET_WIDTH`] pixels, at least 2 and at most 4). Row titles are drawn
/// once per grid row, column titles under the bottom row; each panel keeps its own labels.
///
/// ```
/// use figures::{HeatmapGrid, Panel, ValueRange};
/// use ndarray::array;
///
/// let dir = tempfile::tempdir()?;
/// let tokens = ["The", "cat", "sat"];
/// let standard = array![[0.4, 0.3, 0.3], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4]];
/// let causal = array![[1.0, 0.0, 0.0], [0.3, 0.7, 0.0], [0.3, 0.3, 0.4]];
/// let allowed = array![[true, false, false], [true, true, false], [true, true, true]];
/// HeatmapGrid::new()
///     .title("Standard vs causal self-attention")
///     .panel(Panel::new(&standard).title("standard").labels(&tokens))
///     .panel(Panel::new(&causal).title("causal").labels(&tokens).allowed(&allowed))
///     .range(ValueRange::Fixed(0.0, 1.0))
///     .colorbar_label("attention weight")
///     .save(dir.path().join("standard_vs_causal.png"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct HeatmapGrid {
    panels: Vec<Panel>,
    style: Style,
    title: Option<String>,
    columns: Option<usize>,
    every_panel_titled: bool,
}

impl HeatmapGrid {
    /// An empty grid; add panels with [`HeatmapGrid::panel`].
    ///
    /// ```
    /// let grid = figures::HeatmapGrid::new();
    /// assert!(grid.to_png().is_err()); // no panels yet
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a panel (after the ones already added).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use figures::{HeatmapGrid, Panel};
    /// let heads = [ndarray::Array2::<f64>::eye(3), ndarray::Array2::<f64>::ones((3, 3)) / 3.0];
    /// let mut grid = HeatmapGrid::new();
    /// for (h, w) in heads.iter().enumerate() {
    ///     grid = grid.panel(Panel::new(w).title(format!("head {h}")));
    /// }
    /// grid.save(dir.path().join("heads.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn panel(mut self, panel: Panel) -> Self {
        self.panels.push(panel);
        self
    }

    /// The title above the whole grid; `\n` starts a new line.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::HeatmapGrid::new()
    ///     .title("Two heads")
    ///     .panel(figures::Panel::new(&ndarray::array![[1.0]]).title("head 0"))
    ///     .panel(figures::Panel::new(&ndarray::array![[0.5]]).title("head 1"))
    ///     .save(dir.path().join("g.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The number of panels per grid row (0 is an error when drawing).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let p = |v: f64| figures::Panel::new(&ndarray::array![[v]]);
    /// figures::HeatmapGrid::new()
    ///     .panel(p(0.1)).panel(p(0.2)).panel(p(0.3)).panel(p(0.4))
    ///     .columns(2)
    ///     .save(dir.path().join("g.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn columns(mut self, columns: usize) -> Self {
        self.columns = Some(columns);
        self
    }

    /// Draws the axis titles ([`HeatmapGrid::row_title`], [`HeatmapGrid::col_title`]) beside
    /// and under every panel, not only left of the first grid column and under the bottom
    /// row; the grid columns move apart to make room. For panels that a reader looks at one by
    /// one, such as the steps of a process.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let p = |v: f64| figures::Panel::new(&ndarray::array![[v, 0.5], [0.5, v]]);
    /// let grid = || figures::HeatmapGrid::new().panel(p(0.1)).panel(p(0.2)).columns(2);
    /// let width = |png: Vec<u8>| u32::from_be_bytes(png[16..20].try_into().unwrap());
    /// let (shared, every) = (grid().to_png()?, grid().axis_titles_on_every_panel().to_png()?);
    /// assert!(width(every) > width(shared)); // room for the second panel's row title
    /// # grid().axis_titles_on_every_panel().save(dir.path().join("g.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn axis_titles_on_every_panel(mut self) -> Self {
        self.every_panel_titled = true;
        self
    }

    style_setters!("figures::HeatmapGrid::new().panel(figures::Panel::new(&array![[0.2, 0.8]]))");

    /// Draws the grid and returns the PNG file's bytes.
    ///
    /// ```
    /// let png = figures::HeatmapGrid::new()
    ///     .panel(figures::Panel::new(&ndarray::array![[0.3]]))
    ///     .to_png()?;
    /// assert!(png.starts_with(b"\x89PNG"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_png(&self) -> Result<Vec<u8>> {
        if self.panels.is_empty() {
            return Err(FigureError::Nothing(
                "the grid has no panels: add some with .panel(..)".into(),
            ));
        }
        render(
            &self.panels,
            &self.style,
            self.title.as_deref(),
            self.columns,
            self.every_panel_titled,
            "panel",
        )
    }

    /// The size in pixels, `(width, height)`, that [`HeatmapGrid::to_png`] would draw this
    /// grid's settings (title, columns, colours, axis titles) with panels of the given sizes,
    /// measured by the same layout code that draws, without the values: so a caller can refuse
    /// a figure larger than [`crate::MAX_SIDE`] before computing what it would show. The
    /// panels added with [`HeatmapGrid::panel`] are ignored. Values are taken to lie in the
    /// grid's range (0 to 1 when it is [`ValueRange::Auto`]): they decide the width of a cell
    /// that shows its number and the labels of the colour bar.
    ///
    /// An error when `panels` is empty, a panel has no rows or columns, labels do not match,
    /// or a side has more than [`crate::MAX_SIDE`] cells (at least 2 pixels each, the figure
    /// could not be drawn).
    ///
    /// ```
    /// use figures::{HeatmapGrid, PanelSize, ValueRange};
    /// let grid = HeatmapGrid::new().title("Eight heads").range(ValueRange::Fixed(0.0, 1.0));
    /// let heads: Vec<PanelSize> =
    ///     (0..8).map(|h| PanelSize::new(1500, 1500).title(format!("head {h}"))).collect();
    /// let (width, height) = grid.size(&heads)?;
    /// // Two panels of 1500 cells of 2 pixels across, four down: too large to draw.
    /// assert!(width > 6000 && height > 12000);
    /// assert!(height > figures::MAX_SIDE);
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn size(&self, panels: &[PanelSize]) -> Result<(u32, u32)> {
        if panels.is_empty() {
            return Err(FigureError::Nothing("no panels to measure".into()));
        }
        let style = &self.style;
        let (low, high) = style.range.resolve(style.scheme, std::iter::empty())?;
        let scale = Scale {
            scheme: style.scheme,
            low,
            high,
        };
        let value_w = [low, high]
            .iter()
            .map(|&v| VALUE.width(&format_value(v, style.precision)))
            .max()
            .unwrap_or(0);
        let mut shapes = Vec::with_capacity(panels.len());
        for (i, p) in panels.iter().enumerate() {
            if p.rows == 0 || p.cols == 0 {
                return Err(FigureError::EmptyMatrix {
                    what: format!("panel {i}"),
                    rows: p.rows,
                    cols: p.cols,
                });
            }
            for (axis, labels, len) in
                [("row", &p.row_labels, p.rows), ("column", &p.col_labels, p.cols)]
            {
                if let Some(labels) = labels
                    && labels.len() != len
                {
                    return Err(FigureError::LabelCount {
                        axis,
                        labels: labels.len(),
                        len,
                    });
                }
            }
            // Every cell is at least 2 pixels, so such a side cannot be drawn (and would
            // overflow the measuring).
            let side = canvas::MAX_SIDE as usize;
            if p.rows > side || p.cols > side {
                let px = |n: usize| u32::try_from(n.saturating_mul(2)).unwrap_or(u32::MAX);
                return Err(FigureError::TooLarge {
                    width: px(p.cols),
                    height: px(p.rows),
                    limit: canvas::MAX_SIDE,
                });
            }
            shapes.push(Shape {
                rows: p.rows,
                cols: p.cols,
                title: p.title.as_deref(),
                row_labels: p.row_labels.as_deref(),
                col_labels: p.col_labels.as_deref(),
                value_w,
                any_masked: p.masked,
            });
        }
        let title = self.title.as_deref();
        let (_, g) =
            measure(&shapes, style, title, self.columns, self.every_panel_titled, &scale)?;
        Ok((g.width as u32, g.height as u32))
    }

    /// Draws the grid into the PNG file at `path` (its directory must exist) and returns the path.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// figures::HeatmapGrid::new()
    ///     .panel(figures::Panel::new(&ndarray::array![[0.3]]))
    ///     .save(dir.path().join("grid.png"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        files::save(path.as_ref(), files::PNG, || self.to_png())
    }
}

/// The geometry of a figure: one cell size and one slot size for every panel.
struct Layout {
    cell: i32,
    annotate: bool,
    columns: usize,
    max_rows: usize,
    max_cols: usize,
    /// Every `row_step`-th row label is drawn (1 = all), likewise columns.
    row_step: usize,
    col_step: usize,
    rotate_cols: bool,
    row_label_w: i32,
    col_label_h: i32,
    panel_title_h: i32,
    /// Room above the panel title and below the column labels, so that a row title longer
    /// than a short matrix is not clipped.
    pad_top: i32,
    pad_bottom: i32,
    title_h: i32,
    row_title_w: i32,
    col_title_h: i32,
    bar_w: i32,
    any_masked: bool,
    /// Axis titles beside and under every panel ([`HeatmapGrid::axis_titles_on_every_panel`]).
    every_panel_titled: bool,
}

impl Layout {
    fn new(
        panels: &[Shape<'_>],
        style: &Style,
        title: Option<&str>,
        columns: Option<usize>,
        every_panel_titled: bool,
        scale: &Scale,
    ) -> Result<Self> {
        let max_rows = panels.iter().map(|p| p.rows).max().unwrap_or(1);
        let max_cols = panels.iter().map(|p| p.cols).max().unwrap_or(1);
        let any_masked = panels.iter().any(|p| p.any_masked);
        // Widest text a cell must hold when annotated.
        let value_w = panels
            .iter()
            .map(|p| p.value_w)
            .chain(any_masked.then(|| VALUE.width(&style.mask_mark)))
            .max()
            .unwrap_or(0);
        let annotated_cell = (value_w + 12).max(40);
        let small = max_rows <= ANNOTATE_MAX && max_cols <= ANNOTATE_MAX;
        let mut layout = Layout {
            cell: annotated_cell,
            annotate: true,
            columns: 1,
            max_rows,
            max_cols,
            row_step: 1,
            col_step: 1,
            rotate_cols: false,
            row_label_w: 0,
            col_label_h: 0,
            panel_title_h: if panels.iter().any(|p| p.title.is_some()) {
                PANEL_TITLE.block_height(max_lines(panels.iter().filter_map(|p| p.title)))
                    + GAP
            } else {
                0
            },
            pad_top: 0,
            pad_bottom: 0,
            title_h: title.map_or(0, |t| TITLE.block_height(t.lines().count().max(1)) + 12),
            row_title_w: AXIS.room(&style.row_title, GAP),
            col_title_h: AXIS.room(&style.col_title, GAP),
            bar_w: colorbar_width(style, scale, any_masked),
            any_masked,
            every_panel_titled,
        };
        layout.set_cell(panels, annotated_cell, true);
        // Side by side comes first: never fewer than two columns unless asked.
        let floor = panels.len().min(2);
        let annotate = match style.annotate {
            Some(on) => on,
            None => small && layout.with_columns(floor).width() <= MAX_AUTO_WIDTH,
        };
        if !annotate {
            let target = if panels.len() == 1 { 448 } else { 256 };
            // Labels given by the caller are all drawn: the cells grow to a label's height.
            let named = panels
                .iter()
                .any(|p| p.row_labels.is_some() || p.col_labels.is_some());
            let floor = if named { LABEL.line_height() + 2 } else { 2 };
            let cell = (target / max_rows.max(max_cols) as i32)
                .max(floor)
                .clamp(2, 40);
            layout.set_cell(panels, cell, false);
        }
        layout.columns = match columns {
            Some(0) => return Err(FigureError::ZeroColumns),
            Some(c) => c.min(panels.len()),
            None => (floor..=panels.len().min(4))
                .rev()
                .find(|&c| layout.with_columns(c).width() <= TARGET_WIDTH)
                .unwrap_or(floor),
        };
        if !style.row_title.is_empty() {
            let half = AXIS.width(&style.row_title) / 2 + 4;
            layout.pad_top = (half - layout.matrix_h() / 2 - layout.panel_title_h).max(0);
            layout.pad_bottom =
                (half - layout.matrix_h() / 2 - layout.col_label_h - layout.col_title_h).max(0);
        }
        Ok(layout)
    }

    /// Sets the cell size and everything that depends on it (label thinning and rotation).
    fn set_cell(&mut self, panels: &[Shape<'_>], cell: i32, annotate: bool) {
        self.cell = cell;
        self.annotate = annotate;
        let spacing = LABEL.line_height() + 2;
        self.row_step = (spacing as f64 / cell as f64).ceil().max(1.0) as usize;
        self.col_step = self.row_step;
        let shown = |step: usize, n: usize| (0..n).step_by(step);
        self.row_label_w = panels
            .iter()
            .flat_map(|p| {
                shown(self.row_step, p.rows).map(move |r| LABEL.width(&p.row_label(r)))
            })
            .max()
            .unwrap_or(0);
        let col_w = panels
            .iter()
            .flat_map(|p| {
                shown(self.col_step, p.cols).map(move |c| LABEL.width(&p.col_label(c)))
            })
            .max()
            .unwrap_or(0);
        self.rotate_cols = col_w > cell * self.col_step as i32 - 6;
        self.col_label_h = if self.rotate_cols {
            col_w
        } else {
            LABEL.line_height()
        } + 6;
    }

    fn with_columns(&self, columns: usize) -> LayoutSize<'_> {
        LayoutSize { l: self, columns }
    }

    fn matrix_w(&self) -> i32 {
        self.cell * self.max_cols as i32
    }
    fn matrix_h(&self) -> i32 {
        self.cell * self.max_rows as i32
    }
    /// Width of one panel slot: row labels and matrix.
    fn slot_w(&self) -> i32 {
        self.row_label_w + GAP + self.matrix_w()
    }
    /// Room for a row title left of every grid column but the first, when each panel has one.
    fn extra_title_w(&self) -> i32 {
        if self.every_panel_titled {
            self.row_title_w
        } else {
            0
        }
    }
    /// From the top of a slot to the top of its matrix.
    fn above(&self) -> i32 {
        self.pad_top + self.panel_title_h
    }
}

/// A layout with a given number of grid columns, for measuring.
struct LayoutSize<'a> {
    l: &'a Layout,
    columns: usize,
}

impl LayoutSize<'_> {
    fn width(&self) -> i32 {
        let l = self.l;
        MARGIN + l.row_title_w + self.columns as i32 * (l.slot_w() + PANEL_GAP) - PANEL_GAP
            + (self.columns as i32 - 1) * l.extra_title_w()
            + 24
            + l.bar_w
            + MARGIN
    }
}

fn max_lines<'a>(texts: impl Iterator<Item = &'a str>) -> usize {
    texts.map(|t| t.lines().count()).max().unwrap_or(1).max(1)
}

/// Ticks of the colour bar and their labels.
fn colorbar_ticks(scale: &Scale) -> Vec<(f64, String)> {
    labelled_linear_ticks(scale.low, scale.high, 8)
}

/// Width of the colour bar with its ticks, label and the masked-cell legend.
fn colorbar_width(style: &Style, scale: &Scale, any_masked: bool) -> i32 {
    let tick_w = LABEL.widest(colorbar_ticks(scale).iter().map(|(_, s)| s.as_str()));
    let label_w = AXIS.room(&style.colorbar_label, 10);
    let bar = BAR_W + TICK + 4 + tick_w + label_w;
    let legend = if any_masked {
        BAR_W + GAP + LABEL.width(&style.mask_legend)
    } else {
        0
    };
    bar.max(legend)
}

/// Where a grid's parts go, in pixels: what [`render`] draws, [`HeatmapGrid::size`] reports.
struct Geometry {
    grid_left: i32,
    /// Where each grid column's slot begins (one more entry: where a next one would).
    slot_x: Vec<i32>,
    /// Where each grid row's slot begins (likewise).
    slot_y: Vec<i32>,
    grid_right: i32,
    bar_x: i32,
    bar_top: i32,
    bar_h: i32,
    title_w: i32,
    width: i32,
    height: i32,
}

/// Lays out panels of the given shapes: the one measuring that both drawing and
/// [`HeatmapGrid::size`] use.
fn measure(
    panels: &[Shape<'_>],
    style: &Style,
    title: Option<&str>,
    columns: Option<usize>,
    every_panel_titled: bool,
    scale: &Scale,
) -> Result<(Layout, Geometry)> {
    let l = Layout::new(panels, style, title, columns, every_panel_titled, scale)?;
    let grid_rows = panels.len().div_ceil(l.columns);

    // Each grid column is as wide as its widest matrix, each grid row as tall as its tallest.
    let in_column = |c: usize| panels.iter().skip(c).step_by(l.columns);
    let in_row = |r: usize| panels.iter().skip(r * l.columns).take(l.columns);
    let col_w: Vec<i32> = (0..l.columns)
        .map(|c| in_column(c).map(|p| p.cols as i32).max().unwrap_or(0) * l.cell)
        .collect();
    let row_h: Vec<i32> = (0..grid_rows)
        .map(|r| in_row(r).map(|p| p.rows as i32).max().unwrap_or(0) * l.cell)
        .collect();
    let grid_left = MARGIN + l.row_title_w;
    let grid_top = MARGIN + l.title_h;
    let slot_x: Vec<i32> = offsets(
        grid_left,
        col_w.iter().enumerate().map(|(c, w)| {
            let title = if c + 1 < l.columns {
                l.extra_title_w()
            } else {
                0
            };
            l.row_label_w + GAP + w + PANEL_GAP + title
        }),
    );
    let below = l.col_label_h + l.pad_bottom + l.col_title_h + PANEL_GAP;
    let slot_y: Vec<i32> = offsets(grid_top, row_h.iter().map(|h| l.above() + h + below));
    let grid_right = slot_x[l.columns] - PANEL_GAP;
    let grid_bottom = slot_y[grid_rows] - PANEL_GAP;

    // The colour bar spans the matrices of the first to the last grid row (at least 160 px).
    let bar_x = grid_right + 24;
    let bar_top = grid_top + l.above();
    let bar_h =
        (slot_y[grid_rows - 1] + l.above() + row_h[grid_rows - 1] - bar_top).clamp(160, 480);
    let legend_h = if l.any_masked { 14 + BAR_W } else { 0 };
    let title_w = title.map_or(0, |t| TITLE.block_width(t));
    let width = (bar_x + l.bar_w + MARGIN).max(title_w + 2 * MARGIN);
    let height = grid_bottom.max(bar_top + bar_h + legend_h) + MARGIN;
    let geometry = Geometry {
        grid_left,
        slot_x,
        slot_y,
        grid_right,
        bar_x,
        bar_top,
        bar_h,
        title_w,
        width,
        height,
    };
    Ok((l, geometry))
}

/// Validates, lays out and draws panels in `columns` grid columns (`None`: as many as fit) and
/// with the axis titles on every panel or once; `what` names a single matrix or the panels in
/// errors.
fn render(
    panels: &[Panel],
    style: &Style,
    title: Option<&str>,
    columns: Option<usize>,
    every_panel_titled: bool,
    what: &str,
) -> Result<Vec<u8>> {
    for (i, p) in panels.iter().enumerate() {
        let name = if panels.len() == 1 && what != "panel" {
            what.to_string()
        } else {
            format!("panel {i}")
        };
        p.validate(&name)?;
    }
    let (low, high) = style
        .range
        .resolve(style.scheme, panels.iter().flat_map(Panel::unmasked_values))?;
    let scale = Scale {
        scheme: style.scheme,
        low,
        high,
    };
    let shapes: Vec<Shape<'_>> = panels.iter().map(|p| p.shape(style)).collect();
    let (l, g) = measure(&shapes, style, title, columns, every_panel_titled, &scale)?;
    let Geometry {
        grid_left,
        slot_x,
        slot_y,
        grid_right,
        bar_x,
        bar_top,
        bar_h,
        title_w,
        width,
        height,
    } = g;

    canvas::render_png(width as u32, height as u32, |area| {
        if let Some(t) = title {
            // Centred over the matrices, moved in if it would leave the image.
            let cx = (grid_left + l.row_label_w + GAP + grid_right) / 2;
            let cx = cx.clamp(MARGIN + title_w / 2, width - MARGIN - title_w / 2);
            TITLE
                .pen()
                .align(Align::Center)
                .draw_block(area, t, (cx, MARGIN))?;
        }
        for (i, p) in panels.iter().enumerate() {
            let (gr, gc) = (i / l.columns, i % l.columns);
            let mx = slot_x[gc] + l.row_label_w + GAP;
            let my = slot_y[gr] + l.above();
            draw_panel(area, p, style, &l, &scale, (mx, my))?;
            if (gc == 0 || l.every_panel_titled) && !style.row_title.is_empty() {
                let cy = my + p.data.nrows() as i32 * l.cell / 2;
                AXIS.pen().align(Align::Center).up().draw(
                    area,
                    &style.row_title,
                    (slot_x[gc] - l.row_title_w, cy),
                )?;
            }
            let bottom_of_column = i + l.columns >= panels.len();
            if (bottom_of_column || l.every_panel_titled) && !style.col_title.is_empty() {
                let cx = mx + p.data.ncols() as i32 * l.cell / 2;
                let y = my + p.data.nrows() as i32 * l.cell + l.col_label_h + GAP / 2;
                AXIS.pen()
                    .align(Align::Center)
                    .draw(area, &style.col_title, (cx, y))?;
            }
        }
        draw_colorbar(area, style, &scale, (bar_x, bar_top), bar_h)?;
        if l.any_masked {
            let y = bar_top + bar_h + 14;
            hatch(area, (bar_x, y), (bar_x + BAR_W, y + BAR_W))?;
            canvas::outline(area, (bar_x, y), (bar_x + BAR_W, y + BAR_W), MUTED)?;
            LABEL
                .pen()
                .middle()
                .draw(area, &style.mask_legend, (bar_x + BAR_W + GAP, y + BAR_W / 2))?;
        }
        Ok(())
    })
}

/// `start`, then `start` plus each running total of `sizes`: where consecutive slots begin
/// (the last entry is where a next slot would begin).
fn offsets(start: i32, sizes: impl Iterator<Item = i32>) -> Vec<i32> {
    std::iter::once(start)
        .chain(sizes.scan(start, |at, size| {
            *at += size;
            Some(*at)
        }))
        .collect()
}

/// Draws one panel whose matrix has its top-left corner at `(mx, my)`.
fn draw_panel(
    area: &Area,
    p: &Panel,
    style: &Style,
    l: &Layout,
    scale: &Scale,
    (mx, my): (i32, i32),
) -> Result<()> {
    let (rows, cols) = p.data.dim();
    let cell = l.cell;
    // Thin white lines between cells once cells are large enough to show them.
    let sep = i32::from(cell >= 20);
    if let Some(t) = &p.title {
        let cx = mx + cols as i32 * cell / 2;
        PANEL_TITLE
            .pen()
            .align(Align::Center)
            .draw_block(area, t, (cx, my - l.panel_title_h))?;
    }
    for ((r, c), &v) in p.data.indexed_iter() {
        let x0 = mx + c as i32 * cell;
        let y0 = my + r as i32 * cell;
        let (x1, y1) = (x0 + cell - sep, y0 + cell - sep);
        if p.is_masked(r, c) {
            hatch(area, (x0, y0), (x1, y1))?;
            if l.annotate {
                let center = ((x0 + x1) / 2, (y0 + y1) / 2);
                VALUE
                    .pen()
                    .align(Align::Center)
                    .middle()
                    .draw(area, &style.mask_mark, center)?;
            }
        } else {
            let bg = scale.color(v);
            canvas::fill(area, (x0, y0), (x1, y1), bg)?;
            if l.annotate {
                let center = ((x0 + x1) / 2, (y0 + y1) / 2);
                let s = format_value(v, style.precision);
                VALUE
                    .pen()
                    .color(color::text_on(bg))
                    .align(Align::Center)
                    .middle()
                    .draw(area, &s, center)?;
            }
        }
    }
    for r in (0..rows).step_by(l.row_step) {
        let cy = my + r as i32 * cell + cell / 2;
        LABEL
            .pen()
            .align(Align::End)
            .middle()
            .draw(area, &p.row_label(r), (mx - GAP, cy))?;
    }
    let below = my + rows as i32 * cell + 6;
    for c in (0..cols).step_by(l.col_step) {
        let cx = mx + c as i32 * cell + cell / 2;
        let label = p.col_label(c);
        if l.rotate_cols {
            LABEL
                .pen()
                .align(Align::End)
                .middle()
                .up()
                .draw(area, &label, (cx, below))?;
        } else {
            LABEL
                .pen()
                .align(Align::Center)
                .draw(area, &label, (cx, below))?;
        }
    }
    Ok(())
}

/// Grey with diagonal hatching: the look of a masked cell.
fn hatch(area: &Area, (x0, y0): (i32, i32), (x1, y1): (i32, i32)) -> Result<()> {
    canvas::fill(area, (x0, y0), (x1, y1), MASK_FILL)?;
    for y in y0..y1 {
        for x in x0..x1 {
            if (x - x0 + y - y0) % 8 == 0 {
                area.draw_pixel((x, y), &MASK_HATCH)
                    .map_err(canvas::draw_err)?;
            }
        }
    }
    Ok(())
}

/// A vertical colour bar, high values on top, with ticks and its label.
fn draw_colorbar(
    area: &Area,
    style: &Style,
    scale: &Scale,
    (x, top): (i32, i32),
    h: i32,
) -> Result<()> {
    for i in 0..h {
        let t = 1.0 - (i as f64 + 0.5) / h as f64;
        canvas::fill(area, (x, top + i), (x + BAR_W, top + i + 1), scale.at(t))?;
    }
    canvas::outline(area, (x, top), (x + BAR_W, top + h), MUTED)?;
    let mut label_x = x + BAR_W + TICK + 4;
    for (t, s) in colorbar_ticks(scale) {
        let y = top
            + ((1.0 - (t - scale.low) / (scale.high - scale.low)) * (h - 1) as f64).round() as i32;
        canvas::fill(area, (x + BAR_W, y), (x + BAR_W + TICK, y + 1), MUTED)?;
        LABEL
            .pen()
            .middle()
            .draw(area, &s, (x + BAR_W + TICK + 4, y))?;
        label_x = label_x.max(x + BAR_W + TICK + 4 + LABEL.width(&s));
    }
    if !style.colorbar_label.is_empty() {
        AXIS.pen().align(Align::Center).up().draw(
            area,
            &style.colorbar_label,
            (label_x + 10, top + h / 2),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of a grid of `panels` matrices of `n × n`, labelled or numbered.
    fn layout(panels: usize, n: usize, labelled: bool) -> Layout {
        let data = Array2::from_shape_fn((n, n), |(i, j)| (i * n + j) as f64 / (n * n) as f64);
        let labels: Vec<String> = (0..n).map(|i| format!("tok{i}")).collect();
        let panels: Vec<Panel> = (0..panels)
            .map(|_| {
                let p = Panel::new(&data);
                if labelled { p.labels(&labels) } else { p }
            })
            .collect();
        let style = Style::default();
        let scale = Scale {
            scheme: style.scheme,
            low: 0.0,
            high: 1.0,
        };
        let shapes: Vec<Shape<'_>> = panels.iter().map(|p| p.shape(&style)).collect();
        Layout::new(&shapes, &style, None, None, false, &scale).unwrap()
    }

    #[test]
    fn given_labels_are_all_drawn_numbers_are_thinned() {
        for (panels, n) in [(1, 16), (4, 16), (6, 32), (2, 64)] {
            let named = layout(panels, n, true);
            assert_eq!(
                (named.row_step, named.col_step),
                (1, 1),
                "{panels} panels of {n} labels"
            );
            assert!(named.cell >= LABEL.line_height() + 2);
        }
        // Numbers alone may be thinned in a grid of 16 × 16 panels (that is the old behaviour
        // the labels no longer get).
        assert!(layout(4, 16, false).row_step > 1);
    }

    /// `HeatmapGrid::size` reports the size of the PNG that `to_png` draws, for grids that
    /// annotate or not, are labelled, titled, masked, in several rows, or of one panel.
    #[test]
    fn size_is_the_size_of_the_drawn_png() {
        let png_size = |png: &[u8]| {
            let info = png::Decoder::new(png).read_info().expect("a PNG").info().clone();
            (info.width, info.height)
        };
        let cases: [(usize, usize, usize, bool, bool, Option<&str>); 6] = [
            (1, 3, 3, false, false, None),
            (2, 4, 4, true, true, Some("Two heads")),
            (5, 6, 3, false, true, Some("Five\ntwo lines")),
            (8, 20, 20, true, false, None),
            (3, 40, 40, false, true, Some("t")),
            (4, 2, 7, true, false, None),
        ];
        for (n, rows, cols, labelled, masked, title) in cases {
            let data = Array2::from_shape_fn((rows, cols), |(r, c)| {
                ((r * cols + c) % 7) as f64 / 7.0
            });
            let allowed = Array2::from_shape_fn((rows, cols), |(r, c)| !masked || c <= r);
            let row_names: Vec<String> = (0..rows).map(|i| format!("row{i}")).collect();
            let col_names: Vec<String> = (0..cols).map(|i| format!("k{i}")).collect();
            let mut grid = HeatmapGrid::new().range(ValueRange::Fixed(0.0, 1.0));
            if let Some(t) = title {
                grid = grid.title(t);
            }
            let mut sizes = Vec::new();
            for i in 0..n {
                let mut panel = Panel::new(&data).title(format!("head {i}")).allowed(&allowed);
                let mut size = PanelSize::new(rows, cols).title(format!("head {i}"));
                if labelled {
                    panel = panel.row_labels(&row_names).col_labels(&col_names);
                    size.row_labels = Some(row_names.clone());
                    size.col_labels = Some(col_names.clone());
                }
                grid = grid.panel(panel);
                sizes.push(size.masked(masked));
            }
            let drawn = png_size(&grid.to_png().unwrap());
            assert_eq!(grid.size(&sizes).unwrap(), drawn, "{n} panels of {rows} × {cols}");
        }
    }
}
