//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong when drawing a figure.
///
/// Every message names what is wrong with the input, so that it can be shown to a reader as is:
///
/// ```
/// use figures::{FigureError, Heatmap};
/// use ndarray::array;
///
/// let dir = tempfile::tempdir()?;
/// let err = Heatmap::new(&array![[0.5, 0.5], [0.1, 0.9]])
///     .row_labels(&["only one"])
///     .save(dir.path().join("w.png"))
///     .unwrap_err();
/// assert!(matches!(err, FigureError::LabelCount { .. }));
/// assert_eq!(err.to_string(), "1 row label for a matrix with 2 rows");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FigureError {
    /// A matrix with no rows or no columns.
    #[error("{what} is empty ({rows}×{cols}): there is nothing to draw")]
    EmptyMatrix {
        /// Which matrix ("the matrix", "panel 2").
        what: String,
        /// Its number of rows.
        rows: usize,
        /// Its number of columns.
        cols: usize,
    },
    /// The number of labels does not match the matrix.
    #[error("{labels} {axis} label{s} for a matrix with {len} {axis}s", s = if *labels == 1 { "" } else { "s" })]
    LabelCount {
        /// `"row"` or `"column"`.
        axis: &'static str,
        /// How many labels were given.
        labels: usize,
        /// How many rows or columns the matrix has.
        len: usize,
    },
    /// A mask whose shape differs from the matrix it masks.
    #[error("the mask is {mask_rows}×{mask_cols} but the matrix is {rows}×{cols}")]
    MaskShape {
        /// Rows of the mask.
        mask_rows: usize,
        /// Columns of the mask.
        mask_cols: usize,
        /// Rows of the matrix.
        rows: usize,
        /// Columns of the matrix.
        cols: usize,
    },
    /// A NaN or infinite value in a cell that is not masked (−∞ counts as masked).
    #[error(
        "{what} has the value {value} at row {row}, column {col}: only finite values can be coloured (mask the cell to draw it as masked)"
    )]
    NonFinite {
        /// Which matrix ("the matrix", "panel 2").
        what: String,
        /// Row of the cell (from 0).
        row: usize,
        /// Column of the cell (from 0).
        col: usize,
        /// The offending value.
        value: f64,
    },
    /// A colour range whose bounds are not finite or not increasing.
    #[error("the colour range [{low}, {high}] is invalid: it needs finite bounds with low < high")]
    BadRange {
        /// The lower bound given.
        low: f64,
        /// The upper bound given.
        high: f64,
    },
    /// Values spread so far apart (near ±1.8e308) that their difference overflows.
    #[error("the {what} span [{low}, {high}], too wide to draw: their difference overflows f64")]
    TooWide {
        /// Which values ("x values", "y values", "matrix values").
        what: &'static str,
        /// The smallest value.
        low: f64,
        /// The largest value.
        high: f64,
    },
    /// A grid with no panels, a line chart with no series, or a series with no points.
    #[error("{0}")]
    Nothing(String),
    /// A grid asked to lay out its panels in 0 columns.
    #[error("a grid needs at least one column of panels")]
    ZeroColumns,
    /// A point that cannot be drawn (not finite, or not positive on a log axis).
    #[error("series \"{series}\" has the point ({x}, {y}), which cannot be drawn: {why}")]
    BadPoint {
        /// The series' name.
        series: String,
        /// x of the point.
        x: f64,
        /// y of the point.
        y: f64,
        /// Why not ("x must be positive on a log axis").
        why: &'static str,
    },
    /// The figure would be too large to be useful (and to hold in memory).
    #[error(
        "the figure would be {width}×{height} pixels, more than the limit of {limit} on a side"
    )]
    TooLarge {
        /// Computed width in pixels.
        width: u32,
        /// Computed height in pixels.
        height: u32,
        /// The limit on either side.
        limit: u32,
    },
    /// The output path does not end in `.png`.
    #[error("cannot write {}: figures are written as PNG, so the file name must end in .png", path.display())]
    NotPng {
        /// The path given.
        path: PathBuf,
    },
    /// The file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The path given.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A [`HeadView`](crate::HeadView) layer whose weights do not have the shape the view
    /// needs (the token labels' counts, the first layer's number of heads).
    #[error("layer \"{layer}\" has weights of shape {shape} but {expected} was expected: {why}")]
    LayerShape {
        /// The layer's label.
        layer: String,
        /// The shape given, e.g. `(12, 5, 6)`.
        shape: String,
        /// The shape expected, e.g. `(12, 5, 5)` or `(heads, 5, 5)`.
        expected: String,
        /// Why that shape.
        why: String,
    },
    /// A [`HeadView`](crate::HeadView) weight that is NaN, infinite or outside [0, 1].
    #[error(
        "layer \"{layer}\", head {head} has the value {value} at row {row}, column {col}: a head view shows weights between 0 and 1"
    )]
    BadWeight {
        /// The layer's label.
        layer: String,
        /// The head (from 0).
        head: usize,
        /// Row, the query (from 0).
        row: usize,
        /// Column, the key (from 0).
        col: usize,
        /// The offending value.
        value: f64,
    },
    /// A [`HeadView`](crate::HeadView) id that a page cannot name safely.
    #[error(
        "the head view id {id:?} must be one or more ASCII letters, digits, '-' or '_' (it names the view in data-head-view=\"...\")"
    )]
    BadId {
        /// The id given.
        id: String,
    },
    /// A head view set to open on a layer or a head it does not have
    /// ([`HeadView::start`](crate::HeadView::start)).
    #[error(
        "the head view {id:?} starts on {which}, which it does not have ({layers} layer(s) of {heads} heads)"
    )]
    BadStart {
        /// The view's id.
        id: String,
        /// The layer, and the head if one was given: `"layer 0, head 3"`.
        which: String,
        /// How many layers the view has.
        layers: usize,
        /// How many heads each layer has.
        heads: usize,
    },
    /// An output path whose extension does not match what is written.
    #[error("cannot write {}: {what}, so the file name must end in .{ext}", path.display())]
    Extension {
        /// The path given.
        path: PathBuf,
        /// What is written ("a head view page is HTML").
        what: &'static str,
        /// The extension expected, without the dot.
        ext: &'static str,
    },
    /// A [`BarChart`](crate::BarChart) panel whose number of values differs from the number
    /// of bars (the labels, or the first panel's values).
    #[error("panel \"{panel}\" has {values} value{s} for {bars} bar{t}", s = if *values == 1 { "" } else { "s" }, t = if *bars == 1 { "" } else { "s" })]
    BarCount {
        /// The panel's name.
        panel: String,
        /// How many values it has.
        values: usize,
        /// How many bars the chart has.
        bars: usize,
    },
    /// Plotters failed while drawing or the PNG encoder failed (a bug rather than bad input).
    #[error("drawing failed: {0}")]
    Draw(String),
}

/// Shorthand for `Result<T, FigureError>`, what every drawing method returns.
///
/// ```
/// fn draw(dir: &std::path::Path) -> figures::Result<std::path::PathBuf> {
///     figures::Heatmap::new(&ndarray::array![[0.5, 0.5]]).save(dir.join("w.png"))
/// }
/// let dir = tempfile::tempdir()?;
/// draw(dir.path())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type Result<T> = std::result::Result<T, FigureError>;
