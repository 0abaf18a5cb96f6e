//! Labelled heatmaps, heatmap grids, line and bar charts, and diagrams for the book
//! "Attention, Step by Step".
//!
//! This crate knows nothing about attention: it draws matrices with labels and series of
//! points, as PNG files sized to be read at 100% zoom in the book (text of about 15 px, white
//! background). It draws with [plotters] and an embedded DejaVu Sans, so it needs no system
//! fonts, and it is deterministic: the same input gives the same PNG bytes on every run, which
//! is what lets the book's tests check that committed figures are up to date. Diagrams of
//! structure are written as SVG text instead, deterministic in the same way.
//!
//! - [`Heatmap`]: one annotated matrix with a colour bar ([`ColorScheme`], [`ValueRange`]).
//! - [`HeatmapGrid`] of [`Panel`]s: several matrices with one shared colour scale.
//! - [`LineChart`]: named series on linear or log axes ([`Axis`]).
//! - [`BarChart`]: labelled bars, in panels that share the labels and the y axis.
//! - [`diagram`]: diagrams of structure (boxes, grids of cells, text, arrows and arcs), written
//!   as SVG rather than PNG: [`Diagram`], [`Grid`](diagram::Grid).
//! - [`HeadView`]: stacks of labelled matrices (layers of heads) for the browser, where the
//!   reader picks one and points at a row or a column: data for the book's viewer, or one
//!   self-contained HTML page, rather than a PNG.
//!
//! Every drawing method returns a [`Result`] with a [`FigureError`] that names the problem;
//! nothing panics on bad input.
//!
//! Text is set in DejaVu Sans, which covers Latin, Greek, Cyrillic and the usual mathematical
//! symbols (√, ∞, −, ·); characters of other scripts (CJK, emoji) are drawn as empty boxes.
//! Byte-for-byte reproducibility holds for the same crate versions on any machine: drawing uses
//! only IEEE arithmetic, except the logarithms of log-scale chart axes, which come from the
//! platform's maths library (last-bit differences there almost never move a pixel).
//!
//! ```
//! use figures::{Heatmap, ValueRange};
//! use ndarray::array;
//!
//! let dir = tempfile::tempdir()?;
//! let weights = array![[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]];
//! Heatmap::new(&weights)
//!     .labels(&["The", "cat", "sat"])
//!     .title("Attention weights")
//!     .colorbar_label("attention weight")
//!     .range(ValueRange::Fixed(0.0, 1.0))
//!     .save(dir.path().join("weights.png"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![doc(test(attr(deny(warnings))))]
#![warn(missing_docs)]

mod bar;
mod canvas;
mod color;
pub mod diagram;
mod error;
mod files;
mod head_view;
mod heatmap;
mod line;
mod ticks;

pub use bar::BarChart;
pub use canvas::MAX_SIDE;
pub use color::{ColorScheme, ValueRange};
pub use diagram::Diagram;
pub use error::{FigureError, Result};
pub use head_view::HeadView;
pub use heatmap::{ANNOTATE_MAX, Heatmap, HeatmapGrid, Panel, PanelSize, TARGET_WIDTH};
pub use line::{Axis, LineChart};
