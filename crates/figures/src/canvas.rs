//! A white RGB canvas with the embedded font, pixel-exact text placement and PNG output.
//!
//! Everything in this crate draws through these helpers: plotters' bitmap backend holds the
//! pixels and draws the shapes; text is laid out and rasterised here with ab_glyph (the
//! rasteriser plotters' `ab_glyph` feature uses), from the DejaVu Sans embedded in the binary.
//! Plotters' own ab_glyph text path drops each glyph's left side bearing and rounds every
//! advance, which gives visibly uneven letter spacing ("Th e"); laying glyphs out here keeps
//! kerning and sub-pixel positions, and places text by its visual box. The buffer is encoded as
//! a PNG with fixed settings, so that the same figure always gives the same bytes.

use std::sync::OnceLock;

use ab_glyph::{Font as _, FontRef, PxScale, ScaleFont, point};
use plotters::prelude::*;

use crate::color::{GRID, INK, MUTED};
use crate::error::{FigureError, Result};

static REGULAR: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
static BOLD: &[u8] = include_bytes!("../fonts/DejaVuSans-Bold.ttf");

/// Text and spacing shared by every kind of figure. A `px` of 17 reads like a 14.6 px web font.
pub(crate) const LABEL: Font = Font::regular(17.0);
pub(crate) const AXIS: Font = Font::regular(18.0);
pub(crate) const TITLE: Font = Font::bold(21.0);
pub(crate) const MARGIN: i32 = 16;
pub(crate) const GAP: i32 = 8;
pub(crate) const TICK: i32 = 5;

/// The largest side, in pixels, of any figure: a larger one is refused with
/// [`FigureError::TooLarge`](crate::FigureError::TooLarge).
pub const MAX_SIDE: u32 = 8000;

/// The embedded fonts, parsed once per process.
fn face(bold: bool) -> Result<&'static FontRef<'static>> {
    static FACES: OnceLock<Option<(FontRef<'static>, FontRef<'static>)>> = OnceLock::new();
    let faces = FACES.get_or_init(|| {
        Some((
            FontRef::try_from_slice(REGULAR).ok()?,
            FontRef::try_from_slice(BOLD).ok()?,
        ))
    });
    let (regular, bold_face) = faces.as_ref().ok_or_else(|| {
        FigureError::Draw("the embedded DejaVu Sans font could not be read".into())
    })?;
    Ok(if bold { bold_face } else { regular })
}

/// A text size and weight. `px` is the ab_glyph scale: ascent + descent in pixels; the em (what
/// CSS calls the font size) is 0.86 of it, so `px = 17` reads like a 14.6 px web font.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Font {
    pub px: f32,
    pub bold: bool,
}

/// Where each glyph of a line goes: (glyph, x of its origin), and the line's total advance.
type Line = (Vec<(ab_glyph::GlyphId, f32)>, f32);

impl Font {
    pub const fn regular(px: f32) -> Self {
        Font { px, bold: false }
    }
    pub const fn bold(px: f32) -> Self {
        Font { px, bold: true }
    }
    /// Lays out one line: glyph positions with kerning, and the advance width.
    fn layout(self, text: &str) -> Result<Line> {
        let font = face(self.bold)?.as_scaled(PxScale::from(self.px));
        let mut caret = 0.0f32;
        let mut prev = None;
        let mut glyphs = Vec::with_capacity(text.len());
        // Control characters (a stray tab or newline in a label) take no room and draw nothing.
        for c in text.chars().filter(|c| !c.is_control()) {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                caret += font.kern(p, id);
            }
            glyphs.push((id, caret));
            caret += font.h_advance(id);
            prev = Some(id);
        }
        Ok((glyphs, caret))
    }
    /// The advance width of one line of `text` in whole pixels.
    pub fn width(self, text: &str) -> i32 {
        self.layout(text).map_or(0, |(_, w)| w.ceil() as i32)
    }
    /// The widest of several one-line texts (0 for none).
    pub fn widest<'a>(self, texts: impl IntoIterator<Item = &'a str>) -> i32 {
        texts.into_iter().map(|t| self.width(t)).max().unwrap_or(0)
    }
    /// The widest line of `text`.
    pub fn block_width(self, text: &str) -> i32 {
        self.widest(text.lines())
    }
    /// Room for an optional one-line label and the gap after it: 0 when `text` is empty.
    pub fn room(self, text: &str, gap: i32) -> i32 {
        if text.is_empty() {
            0
        } else {
            self.line_height() + gap
        }
    }
    /// Height of one line box (ascent + descent).
    pub fn line_height(self) -> i32 {
        self.px.ceil() as i32
    }
    /// Height of `lines` lines with 15% leading.
    pub fn block_height(self, lines: usize) -> i32 {
        if lines == 0 {
            return 0;
        }
        (self.px * (1.0 + 1.15 * (lines - 1) as f32)).ceil() as i32
    }
}

/// The advance width, in pixels, of one line of `text` set in the embedded DejaVu Sans at a
/// font size (em) of `size` pixels, kerning included: the width a browser gives it when it has
/// that font. Control characters take no room.
pub(crate) fn em_width(text: &str, size: f64, bold: bool) -> f64 {
    let Ok(font) = face(bold) else {
        return 0.0;
    };
    let units_per_em = font.units_per_em().unwrap_or(2048.0) as f64;
    let mut units = 0.0f64;
    let mut prev = None;
    for c in text.chars().filter(|c| !c.is_control()) {
        let id = font.glyph_id(c);
        if let Some(p) = prev {
            units += font.kern_unscaled(p, id) as f64;
        }
        units += font.h_advance_unscaled(id) as f64;
        prev = Some(id);
    }
    units * size / units_per_em
}

/// Horizontal placement of text relative to the given x.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Align {
    Start,
    Center,
    End,
}

/// Vertical placement: `Top` puts the top of the line box (ascent) at y, `Middle` centres the
/// capital letters and digits on y.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Baseline {
    Top,
    Middle,
}

/// The drawing area type used everywhere.
pub(crate) type Area<'b> = DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>;

/// Maps a plotters error into ours.
pub(crate) fn draw_err<E: std::error::Error + Send + Sync>(
    e: plotters::drawing::DrawingAreaErrorKind<E>,
) -> FigureError {
    FigureError::Draw(e.to_string())
}

/// How a line of text is set: font, colour, alignment and direction. Start from
/// [`Font::pen`] (ink colour, left-aligned, top of the line at the anchor, horizontal).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pen {
    font: Font,
    color: RGBColor,
    align: Align,
    baseline: Baseline,
    up: bool,
}

impl Font {
    pub const fn pen(self) -> Pen {
        Pen {
            font: self,
            color: INK,
            align: Align::Start,
            baseline: Baseline::Top,
            up: false,
        }
    }
}

impl Pen {
    pub const fn color(mut self, color: RGBColor) -> Self {
        self.color = color;
        self
    }
    pub const fn align(mut self, align: Align) -> Self {
        self.align = align;
        self
    }
    /// Centre capitals and digits on the anchor's y (instead of hanging the line from it).
    pub const fn middle(mut self) -> Self {
        self.baseline = Baseline::Middle;
        self
    }
    /// Read bottom to top: `align` then runs along the vertical and the line's top faces left.
    pub const fn up(mut self) -> Self {
        self.up = true;
        self
    }

    /// Draws several lines (split on `\n`), the first one at the anchor, each below the last.
    pub fn draw_block(self, area: &Area, s: &str, (x, y): (i32, i32)) -> Result<()> {
        for (i, line) in s.lines().enumerate() {
            let top = y + (self.font.px * 1.15 * i as f32).round() as i32;
            self.draw(area, line, (x, top))?;
        }
        Ok(())
    }

    /// Draws one line of text at the anchor `(x, y)`.
    pub fn draw(self, area: &Area, s: &str, (x, y): (i32, i32)) -> Result<()> {
        let Pen {
            font,
            color,
            align,
            baseline,
            up,
        } = self;
        if s.is_empty() {
            return Ok(());
        }
        let face = face(font.bold)?;
        let scaled = face.as_scaled(PxScale::from(font.px));
        let (glyphs, advance) = font.layout(s)?;
        let start = match align {
            Align::Start => 0.0,
            Align::Center => -advance / 2.0,
            Align::End => -advance,
        }
        .round();
        // Baseline position, measured from the anchor across the text.
        let base = match baseline {
            Baseline::Top => scaled.ascent(),
            Baseline::Middle => {
                let cap = face.glyph_id('H').with_scale(font.px);
                face.outline_glyph(cap)
                    .map_or(scaled.ascent() * 0.9, |o| -o.px_bounds().min.y)
                    / 2.0
            }
        }
        .round();
        for (id, gx) in glyphs {
            let glyph = id.with_scale_and_position(font.px, point(gx + start, base));
            let Some(outline) = face.outline_glyph(glyph) else {
                continue;
            };
            let b = outline.px_bounds();
            let mut result = Ok(());
            outline.draw(|px, py, coverage| {
                // (u, v): position in the unrotated line, relative to the anchor.
                let (u, v) = (b.min.x as i32 + px as i32, b.min.y as i32 + py as i32);
                let at = if up { (x + v, y - u) } else { (x + u, y + v) };
                if result.is_ok() && coverage > 0.0 {
                    result = area
                        .draw_pixel(at, &color.mix(coverage.min(1.0) as f64))
                        .map_err(draw_err);
                }
            });
            result?;
        }
        Ok(())
    }
}

/// A filled rectangle covering the pixels `x0..x1`, `y0..y1`.
pub(crate) fn fill(
    area: &Area,
    (x0, y0): (i32, i32),
    (x1, y1): (i32, i32),
    c: RGBColor,
) -> Result<()> {
    // The bitmap backend's filled rectangles exclude their bottom-right corner.
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], c.filled()))
        .map_err(draw_err)
}

/// A chart's y axis, left of the plot `left..right` × `top..bottom`: at each tick a grid line
/// across the plot, a tick mark and the tick's label (right-aligned, centred on the tick), then
/// `label` (if any) turned up, centred on the plot's height at the left margin. `y` gives a
/// value's pixel row. The axis line itself is the chart's to draw.
pub(crate) fn draw_y_axis(
    area: &Area,
    ticks: &[(f64, String)],
    y: impl Fn(f64) -> i32,
    (left, right): (i32, i32),
    (top, bottom): (i32, i32),
    label: &str,
) -> Result<()> {
    for (v, s) in ticks {
        let y = y(*v);
        fill(area, (left, y), (right, y + 1), GRID)?;
        fill(area, (left - TICK, y), (left, y + 1), MUTED)?;
        LABEL
            .pen()
            .align(Align::End)
            .middle()
            .draw(area, s, (left - TICK - 4, y))?;
    }
    if !label.is_empty() {
        AXIS.pen()
            .align(Align::Center)
            .up()
            .draw(area, label, (MARGIN, (top + bottom) / 2))?;
    }
    Ok(())
}

/// A one-pixel outline just inside `x0..x1`, `y0..y1`.
pub(crate) fn outline(
    area: &Area,
    (x0, y0): (i32, i32),
    (x1, y1): (i32, i32),
    c: RGBColor,
) -> Result<()> {
    area.draw(&Rectangle::new(
        [(x0, y0), (x1 - 1, y1 - 1)],
        c.stroke_width(1),
    ))
    .map_err(draw_err)
}

/// Renders a `width`×`height` white canvas with `draw` and returns the PNG bytes.
pub(crate) fn render_png(
    width: u32,
    height: u32,
    draw: impl FnOnce(&Area) -> Result<()>,
) -> Result<Vec<u8>> {
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(FigureError::TooLarge {
            width,
            height,
            limit: MAX_SIDE,
        });
    }
    let mut buf = vec![255u8; width as usize * height as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
        draw(&area)?;
        area.present().map_err(draw_err)?;
    }
    encode_png(&buf, width, height)
}

/// Encodes an RGB buffer as PNG with fixed settings (no time stamp, no metadata).
fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Default);
    enc.set_filter(png::FilterType::Paeth);
    enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    let png_err = |e: png::EncodingError| FigureError::Draw(format!("PNG encoding: {e}"));
    let mut writer = enc.write_header().map_err(png_err)?;
    writer.write_image_data(rgb).map_err(png_err)?;
    writer.finish().map_err(png_err)?;
    Ok(out)
}

/// Anti-aliased filled shapes in one colour: polygons, discs and thick polylines, clipped to a
/// rectangle and rasterised together (where shapes overlap, coverage adds up and saturates, so
/// joints of a polyline show no seams).
pub(crate) struct Shapes {
    polygons: Vec<Vec<(f64, f64)>>,
}

impl Shapes {
    pub fn new() -> Self {
        Shapes {
            polygons: Vec::new(),
        }
    }

    /// Adds a convex polygon (either orientation).
    pub fn polygon(&mut self, mut points: Vec<(f64, f64)>) {
        // One orientation for all, so that overlapping shapes add instead of cancelling.
        let area2: f64 = (0..points.len())
            .map(|i| {
                let (a, b) = (points[i], points[(i + 1) % points.len()]);
                a.0 * b.1 - b.0 * a.1
            })
            .sum();
        if area2 < 0.0 {
            points.reverse();
        }
        self.polygons.push(points);
    }

    /// Adds a disc of radius `r` centred on `c` (a 24-gon).
    pub fn disc(&mut self, c: (f64, f64), r: f64) {
        let points = UNIT_CIRCLE
            .iter()
            .map(|&(x, y)| (c.0 + r * x, c.1 + r * y))
            .collect();
        self.polygon(points);
    }

    /// Adds a polyline of the given width with round joins and ends.
    pub fn polyline(&mut self, points: &[(f64, f64)], width: f64) {
        let h = width / 2.0;
        for pair in points.windows(2) {
            let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
            let len = (x1 - x0).hypot(y1 - y0);
            if len > 0.0 {
                let (nx, ny) = (-(y1 - y0) / len * h, (x1 - x0) / len * h);
                self.polygon(vec![
                    (x0 + nx, y0 + ny),
                    (x1 + nx, y1 + ny),
                    (x1 - nx, y1 - ny),
                    (x0 - nx, y0 - ny),
                ]);
            }
        }
        for &p in points {
            self.disc(p, h);
        }
    }

    /// Draws every shape in `color`, clipped to the pixels `x0..x1`, `y0..y1`.
    pub fn draw(
        &self,
        area: &Area,
        color: RGBColor,
        (x0, y0): (i32, i32),
        (x1, y1): (i32, i32),
    ) -> Result<()> {
        if x1 <= x0 || y1 <= y0 {
            return Ok(());
        }
        let (w, h) = ((x1 - x0) as usize, (y1 - y0) as usize);
        // One spare pixel on each side keeps every clipped edge inside the rasteriser.
        let mut raster = ab_glyph_rasterizer::Rasterizer::new(w + 2, h + 2);
        let clip = (x0 as f64, y0 as f64, x1 as f64, y1 as f64);
        for poly in &self.polygons {
            let clipped = clip_polygon(poly, clip);
            for i in 0..clipped.len() {
                let (a, b) = (clipped[i], clipped[(i + 1) % clipped.len()]);
                let to_local = |(x, y): (f64, f64)| {
                    ab_glyph_rasterizer::point((x - clip.0 + 1.0) as f32, (y - clip.1 + 1.0) as f32)
                };
                raster.draw_line(to_local(a), to_local(b));
            }
        }
        let mut result = Ok(());
        raster.for_each_pixel_2d(|x, y, coverage| {
            if result.is_ok() && coverage > 0.0 {
                let at = (x0 + x as i32 - 1, y0 + y as i32 - 1);
                result = area
                    .draw_pixel(at, &color.mix(coverage.min(1.0) as f64))
                    .map_err(draw_err);
            }
        });
        result
    }
}

/// Points on the unit circle every 15°, as constants: `cos`/`sin` come from the platform's
/// maths library and may differ in the last bit between systems, which would change pixels.
#[allow(clippy::approx_constant)] // table values, kept exactly as computed
const UNIT_CIRCLE: [(f64, f64); 24] = [
    (1.0, 0.0),
    (0.9659258262890683, 0.25881904510252074),
    (0.8660254037844387, 0.49999999999999994),
    (0.7071067811865476, 0.7071067811865475),
    (0.5000000000000001, 0.8660254037844386),
    (0.25881904510252074, 0.9659258262890683),
    (0.0, 1.0),
    (-0.25881904510252085, 0.9659258262890683),
    (-0.4999999999999998, 0.8660254037844387),
    (-0.7071067811865475, 0.7071067811865476),
    (-0.8660254037844387, 0.49999999999999994),
    (-0.9659258262890682, 0.258819045102521),
    (-1.0, 0.0),
    (-0.9659258262890683, -0.2588190451025208),
    (-0.8660254037844386, -0.5000000000000001),
    (-0.7071067811865477, -0.7071067811865475),
    (-0.5000000000000004, -0.8660254037844384),
    (-0.25881904510252063, -0.9659258262890683),
    (0.0, -1.0),
    (0.2588190451025203, -0.9659258262890684),
    (0.5000000000000001, -0.8660254037844386),
    (0.7071067811865474, -0.7071067811865477),
    (0.8660254037844384, -0.5000000000000004),
    (0.9659258262890683, -0.2588190451025207),
];

/// Clips a convex polygon to the rectangle (x0, y0, x1, y1) (Sutherland–Hodgman).
fn clip_polygon(poly: &[(f64, f64)], (x0, y0, x1, y1): (f64, f64, f64, f64)) -> Vec<(f64, f64)> {
    // Each edge of the rectangle: is a point inside, and where does a segment cross it.
    type Inside = fn((f64, f64), f64) -> bool;
    let edges: [(Inside, f64, bool); 4] = [
        (|p, v| p.0 >= v, x0, true),
        (|p, v| p.0 <= v, x1, true),
        (|p, v| p.1 >= v, y0, false),
        (|p, v| p.1 <= v, y1, false),
    ];
    let mut out = poly.to_vec();
    for (inside, v, vertical) in edges {
        let input = std::mem::take(&mut out);
        for i in 0..input.len() {
            let (a, b) = (input[i], input[(i + 1) % input.len()]);
            let cross = |a: (f64, f64), b: (f64, f64)| {
                if vertical {
                    let t = (v - a.0) / (b.0 - a.0);
                    (v, a.1 + t * (b.1 - a.1))
                } else {
                    let t = (v - a.1) / (b.1 - a.1);
                    (a.0 + t * (b.0 - a.0), v)
                }
            };
            match (inside(a, v), inside(b, v)) {
                (true, true) => out.push(b),
                (true, false) => out.push(cross(a, b)),
                (false, true) => {
                    out.push(cross(a, b));
                    out.push(b);
                }
                (false, false) => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_keeps_the_inside() {
        let square = [(-5.0, -5.0), (5.0, -5.0), (5.0, 5.0), (-5.0, 5.0)];
        let clipped = clip_polygon(&square, (0.0, 0.0, 10.0, 10.0));
        let mut xs: Vec<_> = clipped.iter().map(|p| (p.0 as i32, p.1 as i32)).collect();
        xs.sort();
        xs.dedup();
        assert_eq!(xs, [(0, 0), (0, 5), (5, 0), (5, 5)]);
        assert!(clip_polygon(&square, (20.0, 20.0, 30.0, 30.0)).is_empty());
    }
}
