//! Diagrams of structure, written as SVG: boxes, grids of cells, text, arrows, lines and arcs.
//!
//! Where the other figures show data as PNG, a [`Diagram`] shows how things fit together (which
//! block becomes which, what shape each one has) and is written as SVG text, so that it stays
//! sharp at any zoom. It is built by code, like the other figures, and checked the same way:
//! the output is deterministic (every number written with at most two decimals, no time
//! stamps, no randomness, the elements in the order they were added), so the same calls give
//! the same bytes on every machine.
//!
//! Every diagram is drawn on its own opaque, light background (a white rounded rectangle under
//! everything), with dark text and strokes, so that it reads the same in a light or a dark page
//! theme; it has `role="img"`, a `<title>` and optionally a `<desc>`, and it loads nothing: no
//! fonts, no images, no style sheets. Text asks for `DejaVu Sans, Verdana, sans-serif`, the
//! font the PNG figures embed, and [`text_width`] measures text in it.
//!
//! Coordinates are pixels, x to the right and y *down*, from the top-left corner, as in SVG;
//! angles ([`polar`], [`Diagram::arc`]) are in degrees, counter-clockwise *as seen on the
//! screen*, from the positive x axis, as in a maths textbook.
//!
//! ```
//! use figures::diagram::{Color, Diagram, Grid, Style, TextStyle};
//!
//! let mut d = Diagram::new(320, 140, "X times W_Q gives Q");
//! let x = Grid::new((20.0, 40.0), (3, 4), (20.0, 20.0)).fill(Color::GREY.tint(0.8));
//! d.grid(&x);
//! d.text(60.0, 30.0, "X", &TextStyle::new(16.0).middle());
//! d.arrow((110.0, 70.0), (170.0, 70.0), &Style::stroke(Color::INK, 1.5));
//! d.rect(180.0, 40.0, 60.0, 60.0, &Style::fill(Color::BLUE.tint(0.7)).and_stroke(Color::BLUE, 1.5));
//! d.text(210.0, 70.0, "Q", &TextStyle::new(16.0).middle().centered());
//! let svg = d.to_svg()?;
//! assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"320\" height=\"140\""));
//! assert!(svg.contains("<title id=\"title\">X times W_Q gives Q</title>"));
//! # Ok::<(), figures::FigureError>(())
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::canvas::{MAX_SIDE, em_width};
use crate::error::{FigureError, Result};
use crate::files::{self, FileKind, Markup, escape};

/// The file of [`Diagram::save`].
const SVG: FileKind = FileKind {
    extensions: &["svg"],
    what: "a diagram is SVG",
};

/// The fonts a diagram's text asks for, in order: the font [`text_width`] measures with first.
///
/// ```
/// let svg = figures::Diagram::new(10, 10, "fonts").to_svg()?;
/// assert!(svg.contains(&format!("font-family=\"{}\"", figures::diagram::FONT_FAMILY)));
/// # Ok::<(), figures::FigureError>(())
/// ```
pub const FONT_FAMILY: &str = "DejaVu Sans, Verdana, sans-serif";

/// The size of sub- and superscripts relative to their text, never below 13 pixels.
const SCRIPT_SCALE: f64 = 0.8;
/// The smallest size a sub- or superscript is set in, in pixels.
const SCRIPT_MIN: f64 = 13.0;

/// An RGB colour: the [Okabe–Ito](https://jfly.uni-koeln.de/color/) palette, which readers
/// with any common colour-vision deficiency can tell apart, a near-black for text and strokes,
/// and [`Color::tint`] for light fills that dark text reads well on.
///
/// ```
/// use figures::diagram::Color;
///
/// assert_eq!(Color::BLUE.hex(), "#0072b2");
/// assert_eq!(Color::rgb(255, 0, 0).tint(0.5), Color::rgb(255, 128, 128));
/// assert_eq!(Color::okabe_ito(0), Color::ORANGE);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Color(pub u8, pub u8, pub u8);

impl Color {
    /// Okabe–Ito orange, `#e69f00`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::ORANGE.hex(), "#e69f00");
    /// ```
    pub const ORANGE: Color = Color(0xe6, 0x9f, 0x00);
    /// Okabe–Ito sky blue, `#56b4e9`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::SKY_BLUE.hex(), "#56b4e9");
    /// ```
    pub const SKY_BLUE: Color = Color(0x56, 0xb4, 0xe9);
    /// Okabe–Ito bluish green, `#009e73`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::BLUISH_GREEN.hex(), "#009e73");
    /// ```
    pub const BLUISH_GREEN: Color = Color(0x00, 0x9e, 0x73);
    /// Okabe–Ito yellow, `#f0e442`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::YELLOW.hex(), "#f0e442");
    /// ```
    pub const YELLOW: Color = Color(0xf0, 0xe4, 0x42);
    /// Okabe–Ito blue, `#0072b2`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::BLUE.hex(), "#0072b2");
    /// ```
    pub const BLUE: Color = Color(0x00, 0x72, 0xb2);
    /// Okabe–Ito vermillion, `#d55e00`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::VERMILLION.hex(), "#d55e00");
    /// ```
    pub const VERMILLION: Color = Color(0xd5, 0x5e, 0x00);
    /// Okabe–Ito reddish purple, `#cc79a7`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::REDDISH_PURPLE.hex(), "#cc79a7");
    /// ```
    pub const REDDISH_PURPLE: Color = Color(0xcc, 0x79, 0xa7);
    /// The colour of text and strokes: the near-black of the PNG figures, `#191919`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::INK.hex(), "#191919");
    /// ```
    pub const INK: Color = Color(25, 25, 25);
    /// Secondary text and lines, `#505050`.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::MUTED.hex(), "#505050");
    /// ```
    pub const MUTED: Color = Color(80, 80, 80);
    /// A neutral grey, `#999999`, for blocks that stand for "no colour in particular".
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::GREY.hex(), "#999999");
    /// ```
    pub const GREY: Color = Color(153, 153, 153);
    /// White, the background.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::WHITE.hex(), "#ffffff");
    /// ```
    pub const WHITE: Color = Color(255, 255, 255);

    /// The colour with these red, green and blue components.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::rgb(1, 2, 3).hex(), "#010203");
    /// ```
    pub const fn rgb(r: u8, g: u8, b: u8) -> Color {
        Color(r, g, b)
    }

    /// The `i`-th colour of the Okabe–Ito palette without its black: orange, sky blue, bluish
    /// green, yellow, blue, vermillion, reddish purple, then again from orange.
    ///
    /// ```
    /// use figures::diagram::Color;
    ///
    /// assert_eq!(Color::okabe_ito(1), Color::SKY_BLUE);
    /// assert_eq!(Color::okabe_ito(7), Color::ORANGE);
    /// ```
    pub const fn okabe_ito(i: usize) -> Color {
        const PALETTE: [Color; 7] = [
            Color::ORANGE,
            Color::SKY_BLUE,
            Color::BLUISH_GREEN,
            Color::YELLOW,
            Color::BLUE,
            Color::VERMILLION,
            Color::REDDISH_PURPLE,
        ];
        PALETTE[i % PALETTE.len()]
    }

    /// The colour mixed with white: `amount` 0 keeps it, 1 gives white (clamped to [0, 1]).
    /// A tint of 0.6 to 0.8 makes a fill on which [`Color::INK`] text reads well.
    ///
    /// ```
    /// use figures::diagram::Color;
    ///
    /// assert_eq!(Color::BLUE.tint(0.0), Color::BLUE);
    /// assert_eq!(Color::BLUE.tint(1.0), Color::WHITE);
    /// assert_eq!(Color::rgb(0, 100, 200).tint(0.5), Color::rgb(128, 178, 228));
    /// ```
    pub fn tint(self, amount: f64) -> Color {
        let t = if amount.is_nan() {
            0.0
        } else {
            amount.clamp(0.0, 1.0)
        };
        let mix = |c: u8| (c as f64 + (255.0 - c as f64) * t).round() as u8;
        Color(mix(self.0), mix(self.1), mix(self.2))
    }

    /// The colour as SVG and CSS write it, `#rrggbb` in lower case.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Color::VERMILLION.hex(), "#d55e00");
    /// ```
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// How a shape is filled and stroked: start from [`Style::fill`], [`Style::stroke`] or
/// [`Style::none`], then add to it.
///
/// ```
/// use figures::diagram::{Color, Style};
///
/// // A light blue box with a blue border, rounded corners and a dashed outline.
/// let style = Style::fill(Color::BLUE.tint(0.75)).and_stroke(Color::BLUE, 1.5).rounded(4.0).dashed();
/// # let _ = style;
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Style {
    fill: Option<Color>,
    stroke: Option<Color>,
    width: f64,
    radius: f64,
    dashed: bool,
}

impl Style {
    /// Neither filled nor stroked (invisible until something is added).
    ///
    /// ```
    /// use figures::diagram::{Color, Style};
    ///
    /// assert_eq!(Style::none().and_fill(Color::WHITE), Style::fill(Color::WHITE));
    /// ```
    pub const fn none() -> Style {
        Style {
            fill: None,
            stroke: None,
            width: 1.0,
            radius: 0.0,
            dashed: false,
        }
    }

    /// Filled with `color`, no outline.
    ///
    /// ```
    /// let style = figures::diagram::Style::fill(figures::diagram::Color::YELLOW);
    /// # let _ = style;
    /// ```
    pub const fn fill(color: Color) -> Style {
        Style {
            fill: Some(color),
            ..Style::none()
        }
    }

    /// An outline (or a line) of `color`, `width` pixels wide, not filled.
    ///
    /// ```
    /// let style = figures::diagram::Style::stroke(figures::diagram::Color::INK, 2.0);
    /// # let _ = style;
    /// ```
    pub const fn stroke(color: Color, width: f64) -> Style {
        Style {
            stroke: Some(color),
            width,
            ..Style::none()
        }
    }

    /// The same style, filled with `color`.
    ///
    /// ```
    /// use figures::diagram::{Color, Style};
    ///
    /// let style = Style::stroke(Color::INK, 1.0).and_fill(Color::WHITE);
    /// # let _ = style;
    /// ```
    pub const fn and_fill(mut self, color: Color) -> Style {
        self.fill = Some(color);
        self
    }

    /// The same style, with an outline of `color`, `width` pixels wide.
    ///
    /// ```
    /// use figures::diagram::{Color, Style};
    ///
    /// let style = Style::fill(Color::WHITE).and_stroke(Color::INK, 1.0);
    /// # let _ = style;
    /// ```
    pub const fn and_stroke(mut self, color: Color, width: f64) -> Style {
        self.stroke = Some(color);
        self.width = width;
        self
    }

    /// Rectangles get corners rounded with this radius, in pixels.
    ///
    /// ```
    /// let style = figures::diagram::Style::fill(figures::diagram::Color::WHITE).rounded(6.0);
    /// # let _ = style;
    /// ```
    pub const fn rounded(mut self, radius: f64) -> Style {
        self.radius = radius;
        self
    }

    /// The outline is dashed (for what is implied, wrong, or left out).
    ///
    /// ```
    /// let style = figures::diagram::Style::stroke(figures::diagram::Color::MUTED, 1.0).dashed();
    /// # let _ = style;
    /// ```
    pub const fn dashed(mut self) -> Style {
        self.dashed = true;
        self
    }

    /// The SVG attributes of this style (with a leading space), with `fill="none"` when unfilled.
    fn attributes(&self) -> String {
        let mut s = String::new();
        match self.fill {
            Some(c) => {
                let _ = write!(s, " fill=\"{}\"", c.hex());
            }
            None => s.push_str(" fill=\"none\""),
        }
        if let Some(c) = self.stroke {
            let _ = write!(
                s,
                " stroke=\"{}\" stroke-width=\"{}\"",
                c.hex(),
                num(self.width)
            );
            if self.dashed {
                let dash = num((self.width * 3.0).max(4.0));
                let _ = write!(s, " stroke-dasharray=\"{dash} {dash}\"");
            }
        }
        s
    }
}

/// Where text sits horizontally relative to its x.
///
/// ```
/// use figures::diagram::{Anchor, TextStyle};
///
/// let right_aligned = TextStyle::new(15.0).anchor(Anchor::End);
/// # let _ = right_aligned;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Anchor {
    /// The text starts at x.
    #[default]
    Start,
    /// The text is centred on x.
    Middle,
    /// The text ends at x.
    End,
}

/// How text is set: size (the font size in pixels, at least 13 for the book), weight, style,
/// colour, horizontal [`Anchor`] and whether y is the baseline or the middle of the capitals.
///
/// ```
/// use figures::diagram::{Color, TextStyle};
///
/// let heading = TextStyle::new(17.0).bold();
/// let note = TextStyle::new(14.0).italic().color(Color::MUTED).centered();
/// # let _ = (heading, note);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextStyle {
    size: f64,
    bold: bool,
    italic: bool,
    color: Color,
    anchor: Anchor,
    middle: bool,
}

impl TextStyle {
    /// Regular text of `size` pixels in [`Color::INK`], starting at x, y on the baseline.
    ///
    /// ```
    /// let body = figures::diagram::TextStyle::new(15.0);
    /// # let _ = body;
    /// ```
    pub const fn new(size: f64) -> TextStyle {
        TextStyle {
            size,
            bold: false,
            italic: false,
            color: Color::INK,
            anchor: Anchor::Start,
            middle: false,
        }
    }

    /// Bold.
    ///
    /// ```
    /// let strong = figures::diagram::TextStyle::new(15.0).bold();
    /// # let _ = strong;
    /// ```
    pub const fn bold(mut self) -> TextStyle {
        self.bold = true;
        self
    }

    /// Italic.
    ///
    /// ```
    /// let aside = figures::diagram::TextStyle::new(15.0).italic();
    /// # let _ = aside;
    /// ```
    pub const fn italic(mut self) -> TextStyle {
        self.italic = true;
        self
    }

    /// In `color`.
    ///
    /// ```
    /// use figures::diagram::{Color, TextStyle};
    ///
    /// let quiet = TextStyle::new(14.0).color(Color::MUTED);
    /// # let _ = quiet;
    /// ```
    pub const fn color(mut self, color: Color) -> TextStyle {
        self.color = color;
        self
    }

    /// Placed by `anchor` relative to x.
    ///
    /// ```
    /// use figures::diagram::{Anchor, TextStyle};
    ///
    /// let label = TextStyle::new(14.0).anchor(Anchor::End);
    /// # let _ = label;
    /// ```
    pub const fn anchor(mut self, anchor: Anchor) -> TextStyle {
        self.anchor = anchor;
        self
    }

    /// Centred on x (shorthand for `.anchor(Anchor::Middle)`).
    ///
    /// ```
    /// let centred = figures::diagram::TextStyle::new(14.0).centered();
    /// # let _ = centred;
    /// ```
    pub const fn centered(mut self) -> TextStyle {
        self.anchor = Anchor::Middle;
        self
    }

    /// y is the middle of the capitals and digits rather than the baseline, which centres a
    /// label in a box: the baseline goes 0.36 of the size below y.
    ///
    /// ```
    /// use figures::diagram::{Diagram, TextStyle};
    ///
    /// let mut d = Diagram::new(100, 40, "a centred label");
    /// d.text(50.0, 20.0, "Q", &TextStyle::new(15.0).centered().middle());
    /// assert!(d.to_svg()?.contains("y=\"25.4\""));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub const fn middle(mut self) -> TextStyle {
        self.middle = true;
        self
    }

    /// The font size in pixels.
    ///
    /// ```
    /// assert_eq!(figures::diagram::TextStyle::new(15.0).size(), 15.0);
    /// ```
    pub const fn size(&self) -> f64 {
        self.size
    }
}

/// A grid of equal cells, `rows` by `cols`, each optionally filled and labelled: a matrix seen
/// as a block, with one row per token. Build it, place other things by its [`Grid::cell`] and
/// [`Grid::right`]/[`Grid::bottom`], then draw it with [`Diagram::grid`].
///
/// ```
/// use figures::diagram::{Color, Diagram, Grid};
///
/// // A (2, 4) matrix with its values written in, the first two columns orange.
/// let values = [[1, 2, 3, 4], [5, 6, 7, 8]];
/// let q = Grid::new((10.0, 10.0), (2, 4), (30.0, 24.0))
///     .fill_with(|_, c| Some(if c < 2 { Color::ORANGE } else { Color::SKY_BLUE }.tint(0.6)))
///     .text_with(|r, c| Some(values[r][c].to_string()));
/// assert_eq!((q.right(), q.bottom()), (130.0, 58.0));
/// let mut d = Diagram::new(140, 70, "Q, four columns in two colours");
/// d.grid(&q);
/// assert!(d.to_svg()?.contains(">7</text>"));
/// # Ok::<(), figures::FigureError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    at: (f64, f64),
    rows: usize,
    cols: usize,
    cell: (f64, f64),
    fills: Vec<Option<Color>>,
    texts: Vec<Option<String>>,
    line: Color,
    border: Color,
    border_width: f64,
    text_style: TextStyle,
}

impl Grid {
    /// A grid with its top-left corner at `at`, `shape = (rows, cols)` cells of
    /// `cell = (width, height)` pixels, unfilled, with thin grey lines between the cells and a
    /// dark border.
    ///
    /// ```
    /// let g = figures::diagram::Grid::new((0.0, 0.0), (3, 4), (20.0, 20.0));
    /// assert_eq!((g.width(), g.height()), (80.0, 60.0));
    /// ```
    pub fn new(at: (f64, f64), (rows, cols): (usize, usize), cell: (f64, f64)) -> Grid {
        Grid {
            at,
            rows,
            cols,
            cell,
            fills: vec![None; rows * cols],
            texts: vec![None; rows * cols],
            line: Color::GREY,
            border: Color::INK,
            border_width: 1.5,
            text_style: TextStyle::new(14.0).centered().middle(),
        }
    }

    /// Every cell filled with `color`.
    ///
    /// ```
    /// use figures::diagram::{Color, Grid};
    ///
    /// let g = Grid::new((0.0, 0.0), (2, 2), (20.0, 20.0)).fill(Color::GREY.tint(0.8));
    /// # let _ = g;
    /// ```
    pub fn fill(self, color: Color) -> Grid {
        self.fill_with(|_, _| Some(color))
    }

    /// Cell `(row, col)` filled with what `color` returns for it (`None`: unfilled).
    ///
    /// ```
    /// use figures::diagram::{Color, Grid};
    ///
    /// // The upper triangle grey: a causal mask.
    /// let g = Grid::new((0.0, 0.0), (3, 3), (20.0, 20.0))
    ///     .fill_with(|r, c| (c > r).then_some(Color::GREY));
    /// # let _ = g;
    /// ```
    pub fn fill_with(mut self, color: impl Fn(usize, usize) -> Option<Color>) -> Grid {
        for r in 0..self.rows {
            for c in 0..self.cols {
                self.fills[r * self.cols + c] = color(r, c);
            }
        }
        self
    }

    /// Cell `(row, col)` labelled with what `text` returns for it (`None`: no label), in the
    /// grid's [`Grid::text_style`], centred in the cell. The text may use the markup of
    /// [`Diagram::text`].
    ///
    /// ```
    /// use figures::diagram::Grid;
    ///
    /// let g = Grid::new((0.0, 0.0), (1, 3), (30.0, 20.0)).text_with(|_, c| Some(format!("k_{{{c}}}")));
    /// # let _ = g;
    /// ```
    pub fn text_with(mut self, text: impl Fn(usize, usize) -> Option<String>) -> Grid {
        for r in 0..self.rows {
            for c in 0..self.cols {
                self.texts[r * self.cols + c] = text(r, c);
            }
        }
        self
    }

    /// The colour of the lines between cells (default [`Color::GREY`]).
    ///
    /// ```
    /// use figures::diagram::{Color, Grid};
    ///
    /// let g = Grid::new((0.0, 0.0), (2, 2), (20.0, 20.0)).lines(Color::WHITE);
    /// # let _ = g;
    /// ```
    pub fn lines(mut self, color: Color) -> Grid {
        self.line = color;
        self
    }

    /// The border around the whole grid: its colour and width (default [`Color::INK`], 1.5).
    ///
    /// ```
    /// use figures::diagram::{Color, Grid};
    ///
    /// let g = Grid::new((0.0, 0.0), (2, 2), (20.0, 20.0)).border(Color::BLUE, 2.5);
    /// # let _ = g;
    /// ```
    pub fn border(mut self, color: Color, width: f64) -> Grid {
        self.border = color;
        self.border_width = width;
        self
    }

    /// How the cells' labels are set (default 14 pixels, centred; [`TextStyle::middle`] and
    /// centring are always applied).
    ///
    /// ```
    /// use figures::diagram::{Grid, TextStyle};
    ///
    /// let g = Grid::new((0.0, 0.0), (2, 2), (30.0, 30.0)).text_style(TextStyle::new(16.0).bold());
    /// # let _ = g;
    /// ```
    pub fn text_style(mut self, style: TextStyle) -> Grid {
        self.text_style = style.centered().middle();
        self
    }

    /// The centre of cell `(row, col)` (also for cells outside the grid, by extension).
    ///
    /// ```
    /// let g = figures::diagram::Grid::new((10.0, 20.0), (3, 4), (20.0, 10.0));
    /// assert_eq!(g.cell(0, 0), (20.0, 25.0));
    /// assert_eq!(g.cell(2, 3), (80.0, 45.0));
    /// ```
    pub fn cell(&self, row: usize, col: usize) -> (f64, f64) {
        (
            self.at.0 + (col as f64 + 0.5) * self.cell.0,
            self.at.1 + (row as f64 + 0.5) * self.cell.1,
        )
    }

    /// The left edge.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Grid::new((10.0, 20.0), (3, 4), (20.0, 10.0)).left(), 10.0);
    /// ```
    pub fn left(&self) -> f64 {
        self.at.0
    }

    /// The top edge.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Grid::new((10.0, 20.0), (3, 4), (20.0, 10.0)).top(), 20.0);
    /// ```
    pub fn top(&self) -> f64 {
        self.at.1
    }

    /// The right edge.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Grid::new((10.0, 20.0), (3, 4), (20.0, 10.0)).right(), 90.0);
    /// ```
    pub fn right(&self) -> f64 {
        self.at.0 + self.width()
    }

    /// The bottom edge.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Grid::new((10.0, 20.0), (3, 4), (20.0, 10.0)).bottom(), 50.0);
    /// ```
    pub fn bottom(&self) -> f64 {
        self.at.1 + self.height()
    }

    /// The width, `cols` cells.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Grid::new((0.0, 0.0), (3, 4), (20.0, 10.0)).width(), 80.0);
    /// ```
    pub fn width(&self) -> f64 {
        self.cols as f64 * self.cell.0
    }

    /// The height, `rows` cells.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Grid::new((0.0, 0.0), (3, 4), (20.0, 10.0)).height(), 30.0);
    /// ```
    pub fn height(&self) -> f64 {
        self.rows as f64 * self.cell.1
    }

    /// The middle of the grid.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Grid::new((0.0, 0.0), (3, 4), (20.0, 10.0)).center(), (40.0, 15.0));
    /// ```
    pub fn center(&self) -> (f64, f64) {
        (
            self.at.0 + self.width() / 2.0,
            self.at.1 + self.height() / 2.0,
        )
    }
}

/// The point at `degrees` (counter-clockwise on the screen from the positive x axis) on the
/// circle of `radius` around `center`, in SVG's coordinates (y down). The sine and cosine come
/// from [`libm`], so the result is the same on every machine.
///
/// ```
/// use figures::diagram::polar;
///
/// assert_eq!(polar((100.0, 100.0), 50.0, 0.0), (150.0, 100.0));
/// let (x, y) = polar((100.0, 100.0), 50.0, 90.0); // straight up on the screen
/// assert!((x - 100.0).abs() < 1e-12 && (y - 50.0).abs() < 1e-12);
/// ```
pub fn polar(center: (f64, f64), radius: f64, degrees: f64) -> (f64, f64) {
    let a = degrees.to_radians();
    (
        center.0 + radius * libm::cos(a),
        center.1 - radius * libm::sin(a),
    )
}

/// The width, in pixels, of one line of `text` (in the markup of [`Diagram::text`]) in
/// `style`, measured in DejaVu Sans, the first font a diagram asks for. Italic is measured as
/// regular. A browser without DejaVu Sans falls back to Verdana, whose letters are about as
/// wide, or to its default sans-serif: leave some room.
///
/// ```
/// use figures::diagram::{TextStyle, text_width};
///
/// let style = TextStyle::new(15.0);
/// let w = text_width("Q·Kᵀ", &style);
/// assert!(w > 30.0 && w < 50.0, "{w}");
/// assert!(text_width("d_{k}", &style) < text_width("dk", &style)); // the k is smaller
/// assert_eq!(text_width("", &style), 0.0);
/// ```
pub fn text_width(text: &str, style: &TextStyle) -> f64 {
    parse_markup(text)
        .iter()
        .map(|(script, s)| {
            let size = if *script == Script::Normal {
                style.size
            } else {
                script_size(style.size)
            };
            em_width(s, size, style.bold)
        })
        .sum()
}

/// A diagram: a canvas of `width × height` pixels, with a title for screen readers, to which
/// shapes and text are added in drawing order; [`Diagram::to_svg`] writes it, [`Diagram::save`]
/// saves it.
///
/// The drawing methods take `&mut self` and return it, so calls can be chained or made in a
/// loop. A bad number (NaN, infinite, a negative size) does not panic: it is remembered, and
/// [`Diagram::to_svg`] returns the error.
///
/// ```
/// use figures::diagram::{Color, Diagram, Style, TextStyle};
///
/// let mut d = Diagram::new(200, 80, "Two boxes and an arrow");
/// d.describe("A box labelled X, an arrow to the right, a box labelled Q.")
///     .rect(10.0, 20.0, 50.0, 40.0, &Style::fill(Color::GREY.tint(0.8)))
///     .text(35.0, 40.0, "X", &TextStyle::new(16.0).centered().middle())
///     .arrow((65.0, 40.0), (130.0, 40.0), &Style::stroke(Color::INK, 1.5))
///     .rect(140.0, 20.0, 50.0, 40.0, &Style::fill(Color::BLUE.tint(0.7)))
///     .text(165.0, 40.0, "Q", &TextStyle::new(16.0).centered().middle());
/// let dir = tempfile::tempdir()?;
/// let path = d.save(dir.path().join("boxes.svg"))?;
/// assert_eq!(std::fs::read_to_string(path)?, d.to_svg()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Diagram {
    width: u32,
    height: u32,
    title: String,
    description: Option<String>,
    body: String,
    depth: usize,
    /// The first problem met while drawing, reported by `to_svg`.
    error: Option<String>,
}

impl Diagram {
    /// An empty diagram of `width × height` pixels on a white rounded card; `title` is what a
    /// screen reader announces (the SVG's `<title>`). The book's column is 840 pixels wide:
    /// keep `width` at 800 or less so the diagram shows at its natural size.
    ///
    /// ```
    /// let d = figures::diagram::Diagram::new(400, 300, "An empty diagram");
    /// let svg = d.to_svg()?;
    /// assert!(svg.contains("viewBox=\"0 0 400 300\""));
    /// assert!(svg.contains("role=\"img\""));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn new(width: u32, height: u32, title: impl Into<String>) -> Diagram {
        let mut d = Diagram {
            width,
            height,
            title: title.into(),
            description: None,
            body: String::new(),
            depth: 1,
            error: None,
        };
        if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
            d.fail(&format!(
                "it is {width}×{height} pixels: each side must be between 1 and {MAX_SIDE}"
            ));
        }
        if d.title.trim().is_empty() {
            d.fail("the diagram has an empty title: give it one, for readers who cannot see it");
        }
        d
    }

    /// A longer description for screen readers (the SVG's `<desc>`), after the title.
    ///
    /// ```
    /// let mut d = figures::diagram::Diagram::new(100, 50, "Q");
    /// d.describe("One blue box.");
    /// assert!(d.to_svg()?.contains("<desc id=\"desc\">One blue box.</desc>"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn describe(&mut self, text: impl Into<String>) -> &mut Diagram {
        self.description = Some(text.into());
        self
    }

    /// The width in pixels.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Diagram::new(400, 300, "d").width(), 400);
    /// ```
    pub fn width(&self) -> u32 {
        self.width
    }

    /// The height in pixels.
    ///
    /// ```
    /// assert_eq!(figures::diagram::Diagram::new(400, 300, "d").height(), 300);
    /// ```
    pub fn height(&self) -> u32 {
        self.height
    }

    /// A rectangle with its top-left corner at `(x, y)`.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 60, "a box");
    /// d.rect(10.0, 10.0, 80.0, 40.0, &Style::fill(Color::YELLOW).and_stroke(Color::INK, 1.0).rounded(4.0));
    /// assert!(d.to_svg()?.contains("<rect x=\"10\" y=\"10\" width=\"80\" height=\"40\" rx=\"4\" fill=\"#f0e442\""));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn rect(&mut self, x: f64, y: f64, width: f64, height: f64, style: &Style) -> &mut Diagram {
        if !self.check(
            &[x, y, width, height, style.width, style.radius],
            "a rectangle",
        ) {
            return self;
        }
        if width < 0.0 || height < 0.0 {
            return self.fail(&format!(
                "a rectangle of {width}×{height}: sizes cannot be negative"
            ));
        }
        let rx = if style.radius > 0.0 {
            format!(" rx=\"{}\"", num(style.radius))
        } else {
            String::new()
        };
        let line = format!(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"{rx}{}/>",
            num(x),
            num(y),
            num(width),
            num(height),
            style.attributes()
        );
        self.push(&line)
    }

    /// A grid of cells (see [`Grid`]): the fills, the lines between cells, the border, then
    /// the labels.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Grid};
    ///
    /// let mut d = Diagram::new(120, 80, "a 3 by 4 grid");
    /// d.grid(&Grid::new((10.0, 10.0), (3, 4), (20.0, 20.0)).fill(Color::SKY_BLUE.tint(0.6)));
    /// assert_eq!(d.to_svg()?.matches("<rect").count(), 1 + 12 + 1); // card, cells, border
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn grid(&mut self, grid: &Grid) -> &mut Diagram {
        let (cw, ch) = grid.cell;
        if !self.check(&[grid.at.0, grid.at.1, cw, ch, grid.border_width], "a grid") {
            return self;
        }
        if cw <= 0.0 || ch <= 0.0 {
            return self.fail(&format!(
                "a grid with cells of {cw}×{ch}: sizes must be positive"
            ));
        }
        let line = Style::fill(Color::WHITE).and_stroke(grid.line, 1.0);
        for r in 0..grid.rows {
            for c in 0..grid.cols {
                let (x, y) = (grid.at.0 + c as f64 * cw, grid.at.1 + r as f64 * ch);
                let style = match grid.fills[r * grid.cols + c] {
                    Some(fill) => line.and_fill(fill),
                    None => line,
                };
                self.rect(x, y, cw, ch, &style);
            }
        }
        self.rect(
            grid.at.0,
            grid.at.1,
            grid.width(),
            grid.height(),
            &Style::stroke(grid.border, grid.border_width),
        );
        for r in 0..grid.rows {
            for c in 0..grid.cols {
                if let Some(text) = &grid.texts[r * grid.cols + c] {
                    let (x, y) = grid.cell(r, c);
                    self.text(x, y, text, &grid.text_style);
                }
            }
        }
        self
    }

    /// One line of text at `(x, y)`. Two bits of markup set sub- and superscripts: `d_{k}`
    /// gives d with a subscript k, `K^{T}` K with a superscript T (each at 0.8 of the size,
    /// and never below 13 pixels); every other character is written as it is, escaped (`<`,
    /// `&`). For a superscript T, `Kᵀ` with the Unicode modifier letter reads just as well.
    /// Text with scripts is marked `xml:space="preserve"`, so that no renderer drops a space
    /// at the edge of a script.
    ///
    /// ```
    /// use figures::diagram::{Diagram, TextStyle};
    ///
    /// let mut d = Diagram::new(200, 60, "a formula");
    /// d.text(10.0, 25.0, "Q·K^{T}/√d_{k}", &TextStyle::new(16.0));
    /// d.text(10.0, 50.0, "x < 1 & y > 2", &TextStyle::new(16.0));
    /// let svg = d.to_svg()?;
    /// assert!(svg.contains(">Q·K<tspan dy=\"-6.4\" font-size=\"13\">T</tspan>"));
    /// assert!(svg.contains(">x &lt; 1 &amp; y &gt; 2</text>"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn text(&mut self, x: f64, y: f64, text: &str, style: &TextStyle) -> &mut Diagram {
        if !self.check(&[x, y, style.size], "a text") {
            return self;
        }
        if style.size <= 0.0 {
            return self.fail(&format!(
                "text of size {}: the size must be positive",
                style.size
            ));
        }
        let baseline = if style.middle {
            y + 0.36 * style.size
        } else {
            y
        };
        let mut attrs = format!(
            "x=\"{}\" y=\"{}\" font-size=\"{}\"",
            num(x),
            num(baseline),
            num(style.size)
        );
        match style.anchor {
            Anchor::Start => {}
            Anchor::Middle => attrs.push_str(" text-anchor=\"middle\""),
            Anchor::End => attrs.push_str(" text-anchor=\"end\""),
        }
        if style.bold {
            attrs.push_str(" font-weight=\"bold\"");
        }
        if style.italic {
            attrs.push_str(" font-style=\"italic\"");
        }
        if style.color != Color::INK {
            let _ = write!(attrs, " fill=\"{}\"", style.color.hex());
        }
        let mut content = String::new();
        let mut shift = 0.0; // how far the current piece sits below the baseline
        let pieces = parse_markup(text);
        if pieces.iter().any(|(script, _)| *script != Script::Normal) {
            attrs.push_str(" xml:space=\"preserve\"");
        }
        for (script, piece) in pieces {
            let target = match script {
                Script::Normal => 0.0,
                Script::Sub => 0.25 * style.size,
                Script::Super => -0.4 * style.size,
            };
            let piece = escape(&piece, Markup::Svg);
            if target == shift && script == Script::Normal {
                content.push_str(&piece);
            } else {
                let size = if script == Script::Normal {
                    String::new()
                } else {
                    format!(" font-size=\"{}\"", num(script_size(style.size)))
                };
                let _ = write!(
                    content,
                    "<tspan dy=\"{}\"{size}>{piece}</tspan>",
                    num(target - shift)
                );
            }
            shift = target;
        }
        self.push(&format!("<text {attrs}>{content}</text>"))
    }

    /// A straight line from `from` to `to`, stroked in `style` (its fill is ignored).
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 100, "a dashed diagonal");
    /// d.line((0.0, 0.0), (100.0, 100.0), &Style::stroke(Color::MUTED, 1.0).dashed());
    /// assert!(d.to_svg()?.contains("stroke-dasharray=\"4 4\""));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), style: &Style) -> &mut Diagram {
        self.polyline(&[from, to], style)
    }

    /// Connected straight segments through `points`, stroked in `style`, not filled.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 100, "an L-shaped line");
    /// d.polyline(&[(10.0, 10.0), (10.0, 90.0), (90.0, 90.0)], &Style::stroke(Color::INK, 1.5));
    /// assert!(d.to_svg()?.contains("points=\"10,10 10,90 90,90\""));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn polyline(&mut self, points: &[(f64, f64)], style: &Style) -> &mut Diagram {
        let flat: Vec<f64> = points.iter().flat_map(|&(x, y)| [x, y]).collect();
        if !self.check(&flat, "a line") || !self.check(&[style.width], "a line") {
            return self;
        }
        let stroke = Style {
            fill: None,
            ..*style
        };
        let line = format!(
            "<polyline points=\"{}\"{} stroke-linecap=\"round\" stroke-linejoin=\"round\"/>",
            point_list(points),
            stroke.attributes()
        );
        self.push(&line)
    }

    /// A closed shape through `points`, filled and stroked as `style` says.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 100, "a triangle");
    /// d.polygon(&[(50.0, 10.0), (90.0, 90.0), (10.0, 90.0)], &Style::fill(Color::ORANGE));
    /// assert!(d.to_svg()?.contains("<polygon points=\"50,10 90,90 10,90\" fill=\"#e69f00\"/>"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn polygon(&mut self, points: &[(f64, f64)], style: &Style) -> &mut Diagram {
        let flat: Vec<f64> = points.iter().flat_map(|&(x, y)| [x, y]).collect();
        if !self.check(&flat, "a polygon") || !self.check(&[style.width], "a polygon") {
            return self;
        }
        let line = format!(
            "<polygon points=\"{}\"{}/>",
            point_list(points),
            style.attributes()
        );
        self.push(&line)
    }

    /// A circle of `radius` around `center`.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 100, "a dot");
    /// d.circle((50.0, 50.0), 3.0, &Style::fill(Color::INK));
    /// assert!(d.to_svg()?.contains("<circle cx=\"50\" cy=\"50\" r=\"3\""));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn circle(&mut self, center: (f64, f64), radius: f64, style: &Style) -> &mut Diagram {
        if !self.check(&[center.0, center.1, radius, style.width], "a circle") {
            return self;
        }
        if radius < 0.0 {
            return self.fail(&format!(
                "a circle of radius {radius}: it cannot be negative"
            ));
        }
        let line = format!(
            "<circle cx=\"{}\" cy=\"{}\" r=\"{}\"{}/>",
            num(center.0),
            num(center.1),
            num(radius),
            style.attributes()
        );
        self.push(&line)
    }

    /// A line from `from` to `to` with a filled arrowhead at `to`, in the style's stroke colour
    /// and width (the head grows with the width).
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 40, "an arrow");
    /// d.arrow((10.0, 20.0), (90.0, 20.0), &Style::stroke(Color::INK, 1.5));
    /// let svg = d.to_svg()?;
    /// assert!(svg.contains("<polygon points=\"90,20 79.5,25.25 79.5,14.75\" fill=\"#191919\"/>"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn arrow(&mut self, from: (f64, f64), to: (f64, f64), style: &Style) -> &mut Diagram {
        if !self.check(&[from.0, from.1, to.0, to.1, style.width], "an arrow") {
            return self;
        }
        let (dx, dy) = (to.0 - from.0, to.1 - from.1);
        let len = (dx * dx + dy * dy).sqrt();
        let (head, half) = head_size(style.width);
        if len == 0.0 {
            return self;
        }
        let (ux, uy) = (dx / len, dy / len);
        let back = head.min(len);
        let base = (to.0 - ux * back, to.1 - uy * back);
        if len > head {
            // The shaft stops inside the head, so no square end shows around its tip.
            let end = (base.0 + ux * head * 0.3, base.1 + uy * head * 0.3);
            self.line(from, end, style);
        }
        self.head(to, base, (ux, uy), half, style)
    }

    /// An arc of the circle of `radius` around `center`, from `from_deg` to `to_deg` (degrees,
    /// counter-clockwise on the screen from the positive x axis; `to_deg < from_deg` runs
    /// clockwise), stroked in `style`.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 100, "a quarter circle");
    /// d.arc((50.0, 50.0), 40.0, 0.0, 90.0, &Style::stroke(Color::INK, 1.0));
    /// assert!(d.to_svg()?.contains("<path d=\"M 90 50 A 40 40 0 0 0 50 10\""));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn arc(
        &mut self,
        center: (f64, f64),
        radius: f64,
        from_deg: f64,
        to_deg: f64,
        style: &Style,
    ) -> &mut Diagram {
        if !self.check_arc(center, radius, from_deg, to_deg, style) {
            return self;
        }
        self.push_arc(center, radius, from_deg, to_deg, style)
    }

    /// [`Diagram::arc`] with an arrowhead at `to_deg`, pointing the way the arc turns.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(100, 100, "a rotation by 60 degrees");
    /// d.arc_arrow((50.0, 50.0), 40.0, 0.0, 60.0, &Style::stroke(Color::INK, 1.5));
    /// assert_eq!(d.to_svg()?.matches("<polygon").count(), 1);
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn arc_arrow(
        &mut self,
        center: (f64, f64),
        radius: f64,
        from_deg: f64,
        to_deg: f64,
        style: &Style,
    ) -> &mut Diagram {
        if !self.check_arc(center, radius, from_deg, to_deg, style) {
            return self;
        }
        let (head, half) = head_size(style.width);
        // The head spans the chord of `head` pixels that ends at the tip.
        let span = (head / radius).to_degrees().min((to_deg - from_deg).abs());
        let turn = if to_deg >= from_deg { 1.0 } else { -1.0 };
        let base_deg = to_deg - turn * span;
        let tip = polar(center, radius, to_deg);
        let base = polar(center, radius, base_deg);
        let shaft_end = to_deg - turn * span * 0.7;
        if (shaft_end - from_deg) * turn > 0.0 {
            self.push_arc(center, radius, from_deg, shaft_end, style);
        }
        let (dx, dy) = (tip.0 - base.0, tip.1 - base.1);
        let len = (dx * dx + dy * dy).sqrt();
        if len == 0.0 {
            return self;
        }
        self.head(tip, base, (dx / len, dy / len), half, style)
    }

    /// Whether an arc's numbers are all finite and its radius positive; remembers the first
    /// problem if not. [`Diagram::arc`] and [`Diagram::arc_arrow`] check with it.
    fn check_arc(
        &mut self,
        center: (f64, f64),
        radius: f64,
        from_deg: f64,
        to_deg: f64,
        style: &Style,
    ) -> bool {
        if !self.check(
            &[center.0, center.1, radius, from_deg, to_deg, style.width],
            "an arc",
        ) {
            return false;
        }
        if radius <= 0.0 {
            self.fail(&format!("an arc of radius {radius}: it must be positive"));
            return false;
        }
        true
    }

    /// The SVG of an arc whose numbers [`Diagram::check_arc`] accepted.
    fn push_arc(
        &mut self,
        center: (f64, f64),
        radius: f64,
        from_deg: f64,
        to_deg: f64,
        style: &Style,
    ) -> &mut Diagram {
        let (p0, p1) = (
            polar(center, radius, from_deg),
            polar(center, radius, to_deg),
        );
        let large = u8::from((to_deg - from_deg).abs() > 180.0);
        // SVG's sweep flag 1 turns clockwise on the screen, toward larger SVG angles.
        let sweep = u8::from(to_deg < from_deg);
        let stroke = Style {
            fill: None,
            ..*style
        };
        let line = format!(
            "<path d=\"M {} {} A {r} {r} 0 {large} {sweep} {} {}\"{} stroke-linecap=\"round\"/>",
            num(p0.0),
            num(p0.1),
            num(p1.0),
            num(p1.1),
            stroke.attributes(),
            r = num(radius),
        );
        self.push(&line)
    }

    /// Draws what `draw` adds shifted by `offset`, as one SVG group (`<g transform=...>`): for
    /// a panel drawn several times at different places.
    ///
    /// ```
    /// use figures::diagram::{Color, Diagram, Style};
    ///
    /// let mut d = Diagram::new(200, 60, "two panels");
    /// for i in 0..2 {
    ///     d.group((100.0 * i as f64, 0.0), |panel| {
    ///         panel.rect(10.0, 10.0, 80.0, 40.0, &Style::fill(Color::okabe_ito(i)));
    ///     });
    /// }
    /// assert!(d.to_svg()?.contains("<g transform=\"translate(100 0)\">"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn group(&mut self, offset: (f64, f64), draw: impl FnOnce(&mut Diagram)) -> &mut Diagram {
        if !self.check(&[offset.0, offset.1], "a group") {
            return self;
        }
        self.push(&format!(
            "<g transform=\"translate({} {})\">",
            num(offset.0),
            num(offset.1)
        ));
        self.depth += 1;
        draw(self);
        self.depth -= 1;
        self.push("</g>")
    }

    /// The SVG document: an `<svg>` element with `width`, `height` and a matching `viewBox`,
    /// `role="img"`, the title and description, the background card, then every element in
    /// the order it was added. Fails with the first problem met while drawing, if any.
    ///
    /// ```
    /// use figures::diagram::Diagram;
    ///
    /// let svg = Diagram::new(300, 200, "Nothing yet").to_svg()?;
    /// assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"300\" height=\"200\" viewBox=\"0 0 300 200\""));
    /// assert!(svg.ends_with("</svg>\n"));
    /// let mut bad = Diagram::new(300, 200, "A NaN");
    /// bad.rect(f64::NAN, 0.0, 1.0, 1.0, &figures::diagram::Style::fill(figures::diagram::Color::INK));
    /// assert!(bad.to_svg().is_err());
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_svg(&self) -> Result<String> {
        if let Some(why) = &self.error {
            return Err(FigureError::Nothing(why.clone()));
        }
        let (w, h) = (self.width, self.height);
        let mut s = String::new();
        let labelled = if self.description.is_some() {
            "title desc"
        } else {
            "title"
        };
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
             role=\"img\" aria-labelledby=\"{labelled}\" font-family=\"{FONT_FAMILY}\" fill=\"{}\">",
            Color::INK.hex()
        );
        let _ = writeln!(
            s,
            "  <title id=\"title\">{}</title>",
            escape(&self.title, Markup::Svg)
        );
        if let Some(desc) = &self.description {
            let _ = writeln!(
                s,
                "  <desc id=\"desc\">{}</desc>",
                escape(desc, Markup::Svg)
            );
        }
        let _ = writeln!(
            s,
            "  <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" rx=\"6\" fill=\"{}\"/>",
            Color::WHITE.hex()
        );
        s.push_str(&self.body);
        s.push_str("</svg>\n");
        Ok(s)
    }

    /// Writes [`Diagram::to_svg`] to `path`, which must end in `.svg` (checked before
    /// anything is written); its directory must exist. Returns the path written.
    ///
    /// ```
    /// use figures::diagram::Diagram;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let d = Diagram::new(100, 100, "empty");
    /// assert!(d.save(dir.path().join("d.svg")).is_ok());
    /// let err = d.save(dir.path().join("d.png")).unwrap_err();
    /// assert!(err.to_string().contains("must end in .svg"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        files::save(path.as_ref(), SVG, || Ok(self.to_svg()?.into_bytes()))
    }

    /// A filled arrowhead with its tip at `tip`, its base centred on `base`, pointing along
    /// the unit vector `u`.
    fn head(
        &mut self,
        tip: (f64, f64),
        base: (f64, f64),
        u: (f64, f64),
        half: f64,
        style: &Style,
    ) -> &mut Diagram {
        let color = style.stroke.or(style.fill).unwrap_or(Color::INK);
        let (nx, ny) = (-u.1 * half, u.0 * half);
        let points = [tip, (base.0 + nx, base.1 + ny), (base.0 - nx, base.1 - ny)];
        self.polygon(&points, &Style::fill(color))
    }

    /// Appends one line of SVG at the current depth.
    fn push(&mut self, line: &str) -> &mut Diagram {
        for _ in 0..self.depth {
            self.body.push_str("  ");
        }
        self.body.push_str(line);
        self.body.push('\n');
        self
    }

    /// Whether every number is finite; remembers the first one that is not.
    fn check(&mut self, values: &[f64], what: &str) -> bool {
        if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
            self.fail(&format!(
                "{what} has the coordinate or size {bad}: every number must be finite"
            ));
            false
        } else {
            true
        }
    }

    /// Remembers the first problem; [`Diagram::to_svg`] reports it.
    fn fail(&mut self, why: &str) -> &mut Diagram {
        if self.error.is_none() {
            self.error = Some(format!("diagram \"{}\": {why}", self.title));
        }
        self
    }
}

/// Length and half width of an arrowhead for a stroke of `width`.
fn head_size(width: f64) -> (f64, f64) {
    (6.0 + 3.0 * width, 3.0 + 1.5 * width)
}

/// The size of sub- and superscripts of text of `size`.
fn script_size(size: f64) -> f64 {
    (size * SCRIPT_SCALE).max(SCRIPT_MIN)
}

/// `x1,y1 x2,y2 ...` for SVG's `points`.
fn point_list(points: &[(f64, f64)]) -> String {
    points
        .iter()
        .map(|&(x, y)| format!("{},{}", num(x), num(y)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A number as the SVG writes it: rounded to two decimals, without trailing zeros, and never
/// `-0`. Formatting rounds the exact decimal value of the `f64`, so this is the same on every
/// machine.
fn num(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Where a piece of text sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Script {
    Normal,
    Sub,
    Super,
}

/// Splits text into pieces on the baseline, in subscripts (`_{...}`) and in superscripts
/// (`^{...}`). An unclosed `_{` or `^{` is kept as written.
fn parse_markup(text: &str) -> Vec<(Script, String)> {
    let mut pieces: Vec<(Script, String)> = Vec::new();
    let mut normal = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let next = [("_{", Script::Sub), ("^{", Script::Super)]
            .into_iter()
            .filter_map(|(open, script)| rest.find(open).map(|at| (at, script)))
            .min_by_key(|&(at, _)| at);
        let Some((at, script)) = next else {
            normal.push_str(rest);
            break;
        };
        let Some(close) = rest[at + 2..].find('}') else {
            normal.push_str(rest);
            break;
        };
        normal.push_str(&rest[..at]);
        if !normal.is_empty() {
            pieces.push((Script::Normal, std::mem::take(&mut normal)));
        }
        pieces.push((script, rest[at + 2..at + 2 + close].to_string()));
        rest = &rest[at + 2 + close + 1..];
    }
    if !normal.is_empty() {
        pieces.push((Script::Normal, normal));
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_at_most_two_decimals_and_no_negative_zero() {
        assert_eq!(num(1.0), "1");
        assert_eq!(num(1.5), "1.5");
        assert_eq!(num(2.0 / 3.0), "0.67");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(-12.345), "-12.35"); // -12.345 is stored as -12.3450000000000006...
        assert_eq!(num(100.0), "100");
        assert_eq!(num(0.1 + 0.2), "0.3");
    }

    #[test]
    fn markup_splits_scripts() {
        assert_eq!(
            parse_markup("d_{k} + K^{T}x"),
            vec![
                (Script::Normal, "d".to_string()),
                (Script::Sub, "k".to_string()),
                (Script::Normal, " + K".to_string()),
                (Script::Super, "T".to_string()),
                (Script::Normal, "x".to_string()),
            ]
        );
        assert_eq!(
            parse_markup("a_b {c} d_{"),
            vec![(Script::Normal, "a_b {c} d_{".to_string())]
        );
        assert_eq!(parse_markup(""), vec![]);
    }

    #[test]
    fn a_subscript_then_text_returns_to_the_baseline() {
        let mut d = Diagram::new(100, 40, "t");
        d.text(0.0, 20.0, "W_{Q} X", &TextStyle::new(16.0));
        let svg = d.to_svg().unwrap();
        assert!(
            svg.contains("W<tspan dy=\"4\" font-size=\"13\">Q</tspan><tspan dy=\"-4\"> X</tspan>"),
            "{svg}"
        );
    }
}
