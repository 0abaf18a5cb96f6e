//! Interactive head views: layers of (head, query, key) weight matrices, with token labels,
//! written as data for the book's `head-view.js` or as one self-contained HTML page.
//!
//! The drawing happens in the reader's browser, in plain JavaScript shipped with the book
//! (`book/theme/head-view.js` and `head-view.css`, nothing loaded from the network). This
//! module only checks the matrices and writes them out: as JSON ([`HeadView::to_json`]), as a
//! small script that registers that JSON under the view's id
//! ([`HeadView::write_data_script`], for a page that loads the viewer itself, as the book
//! does), or as one offline page with the viewer, its style and the data inlined
//! ([`HeadView::write_html`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ndarray::{Array3, ArrayView3};

use crate::error::{FigureError, Result};
use crate::files::{FileKind, Markup, escape, save};

/// The file of [`HeadView::write_data_script`].
const JS: FileKind = FileKind {
    extensions: &["js"],
    what: "a head view's data is a JavaScript file",
};
/// The file of [`HeadView::write_html`].
const HTML: FileKind = FileKind {
    extensions: &["html", "htm"],
    what: "a head view page is HTML",
};

/// The viewer, inlined into the pages [`HeadView::to_html`] writes (the book loads the same
/// file through `additional-js`).
const SCRIPT: &str = include_str!("../../../book/theme/head-view.js");
/// The viewer's style sheet, inlined likewise (the book's `additional-css`).
const STYLE: &str = include_str!("../../../book/theme/head-view.css");

/// Where a view's weights are rounded: to multiples of 0.001, so the files stay small and come
/// out byte for byte the same on every machine.
const DECIMALS_SCALE: f64 = 1000.0;

/// One layer of a [`HeadView`]: its label and its heads' weights.
#[derive(Clone, Debug)]
struct Layer {
    label: String,
    /// (heads, L_q, L_k), every weight in [0, 1].
    weights: Array3<f64>,
}

/// An interactive view of attention weights in the spirit of bertviz's head view: pick a layer
/// and a head (or all heads of the layer, one colour each), point at a token, and see how much
/// it attends to every other token, as lines between two columns of tokens or as a shaded
/// matrix; its SVG and PNG buttons download what is drawn.
///
/// It takes matrices and labels: each layer is a stack of (L_q, L_k) matrices, one per head,
/// whose rows are the query tokens and columns the key tokens; every layer has the same number
/// of heads. Values must lie in [0, 1]; they are written rounded to 3 decimals.
///
/// ```
/// use figures::HeadView;
/// use ndarray::array;
///
/// let tokens: Vec<String> = ["The", "cat", "sat"].map(String::from).to_vec();
/// // 2 heads of (3, 3): rows are queries, columns keys.
/// let heads = array![
///     [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]],
///     [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.8, 0.1, 0.1]],
/// ];
/// let view = HeadView::new("demo", &tokens, &tokens)
///     .title("Two causal heads")
///     .layer("layer 0", heads.view())?;
/// let dir = tempfile::tempdir()?;
/// view.write_html(dir.path().join("view.html"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct HeadView {
    id: String,
    title: Option<String>,
    queries: Vec<String>,
    keys: Vec<String>,
    layer_name: String,
    head_name: String,
    layers: Vec<Layer>,
    /// The layer and head the view opens on (`None` for the head: all of them), if not the
    /// first layer with all its heads.
    start: Option<(usize, Option<usize>)>,
}

impl HeadView {
    /// A view with no layers yet, registered under `id` (letters, digits, `-` and `_`: it is
    /// what `<div class="head-view" data-head-view="ID">` names on the page), with one label
    /// per query (the matrices' rows) and per key (their columns).
    ///
    /// ```
    /// let tokens = vec!["my".to_string(), "name".to_string()];
    /// let view = figures::HeadView::new("ch13", &tokens, &tokens);
    /// assert_eq!(view.heads(), None); // no layer yet
    /// ```
    pub fn new(id: &str, query_tokens: &[String], key_tokens: &[String]) -> Self {
        HeadView {
            id: id.to_string(),
            title: None,
            queries: query_tokens.to_vec(),
            keys: key_tokens.to_vec(),
            layer_name: "layer".into(),
            head_name: "head".into(),
            layers: Vec::new(),
            start: None,
        }
    }

    /// The layer and the head the view opens on (counted from 0; `None` for all the layer's
    /// heads at once), instead of the first layer with all its heads. Twelve heads at once draw
    /// a dozen faint lines per token; one sharp head reads at a glance. Checked when the files
    /// are written: the layer and the head must exist.
    ///
    /// ```
    /// use figures::HeadView;
    ///
    /// let t = vec!["a".to_string(), "b".to_string()];
    /// let heads = ndarray::Array3::from_elem((3, 2, 2), 0.5);
    /// let view = HeadView::new("v", &t, &t).start(0, Some(2)).layer("L0", heads.view())?;
    /// assert!(view.to_json().ends_with(r#""start":{"layer":0,"head":2}}"#));
    /// assert!(view.to_data_script().is_ok());
    /// let all = HeadView::new("v", &t, &t).start(0, None).layer("L0", heads.view())?;
    /// assert!(all.to_json().ends_with(r#""start":{"layer":0,"head":null}}"#));
    /// // A head the view does not have.
    /// let wrong = HeadView::new("v", &t, &t).start(0, Some(3)).layer("L0", heads.view())?;
    /// let err = wrong.to_data_script().unwrap_err().to_string();
    /// assert_eq!(err, "the head view \"v\" starts on layer 0, head 3, which it does not have (1 layer(s) of 3 heads)");
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn start(mut self, layer: usize, head: Option<usize>) -> Self {
        self.start = Some((layer, head));
        self
    }

    /// The title shown above the view (and the page's `<title>` in [`HeadView::to_html`]).
    ///
    /// ```
    /// let t = vec!["a".to_string()];
    /// let view = figures::HeadView::new("v", &t, &t).title("Layer 0 of my model");
    /// assert!(view.to_json().contains(r#""title":"Layer 0 of my model""#));
    /// ```
    pub fn title(mut self, title: &str) -> Self {
        self.title = Some(title.to_string());
        self
    }

    /// What the pickers call a layer and a head: `"layer"` and `"head"` unless set, e.g.
    /// `("batch", "head")` when the "layers" are the items of a batch.
    ///
    /// ```
    /// let t = vec!["a".to_string()];
    /// let view = figures::HeadView::new("v", &t, &t).axis_names("batch", "head");
    /// assert!(view.to_json().contains(r#""axes":["batch","head"]"#));
    /// ```
    pub fn axis_names(mut self, layer: &str, head: &str) -> Self {
        self.layer_name = layer.to_string();
        self.head_name = head.to_string();
        self
    }

    /// Adds a layer: `heads` is (heads, L_q, L_k), one matrix of weights per head, rows the
    /// queries and columns the keys. Every layer must have the same number of heads (at least
    /// one), every matrix the shape the token labels give, and every value lie in [0, 1]
    /// (a masked weight is 0).
    ///
    /// ```
    /// use figures::HeadView;
    /// use ndarray::Array3;
    ///
    /// let tokens: Vec<String> = (0..4).map(|i| format!("t{i}")).collect();
    /// let uniform = Array3::from_elem((2, 4, 4), 0.25);
    /// let view = HeadView::new("v", &tokens, &tokens).layer("layer 0", uniform.view())?;
    /// assert_eq!(view.heads(), Some(2));
    ///
    /// // A matrix that does not fit the labels: the error names the layer and both shapes.
    /// let wrong = Array3::from_elem((2, 4, 5), 0.2);
    /// let err = view.clone().layer("layer 1", wrong.view()).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "layer \"layer 1\" has weights of shape (2, 4, 5) but (2, 4, 4) was expected: \
    ///      the view has 4 query and 4 key tokens"
    /// );
    /// // A value that is not a weight.
    /// let mut bad = Array3::from_elem((2, 4, 4), 0.25);
    /// bad[[1, 2, 3]] = f64::NAN;
    /// let err = view.layer("layer 1", bad.view()).unwrap_err();
    /// assert!(err.to_string().contains("head 1 has the value NaN at row 2, column 3"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn layer(mut self, label: &str, heads: ArrayView3<'_, f64>) -> Result<Self> {
        let (n_heads, l_q, l_k) = heads.dim();
        let shape = format!("({n_heads}, {l_q}, {l_k})");
        if (l_q, l_k) != (self.queries.len(), self.keys.len()) || n_heads == 0 {
            let expected = match self.heads() {
                Some(h) => format!("({h}, {}, {})", self.queries.len(), self.keys.len()),
                None => format!("(heads, {}, {})", self.queries.len(), self.keys.len()),
            };
            let why = if n_heads == 0 {
                "a layer needs at least one head".to_string()
            } else {
                format!(
                    "the view has {} query and {} key tokens",
                    self.queries.len(),
                    self.keys.len()
                )
            };
            return Err(FigureError::LayerShape {
                layer: label.to_string(),
                shape,
                expected,
                why,
            });
        }
        if let Some(first) = self.layers.first() {
            let h = first.weights.dim().0;
            if h != n_heads {
                return Err(FigureError::LayerShape {
                    layer: label.to_string(),
                    shape,
                    expected: format!("({h}, {l_q}, {l_k})"),
                    why: format!(
                        "layer \"{}\" has {h} heads, and every layer needs the same number",
                        first.label
                    ),
                });
            }
        }
        if l_q == 0 || l_k == 0 {
            return Err(FigureError::EmptyMatrix {
                what: format!("layer \"{label}\""),
                rows: l_q,
                cols: l_k,
            });
        }
        if let Some(((head, row, col), &value)) = heads
            .indexed_iter()
            .find(|(_, w)| !(0.0..=1.0).contains(*w))
        {
            return Err(FigureError::BadWeight {
                layer: label.to_string(),
                head,
                row,
                col,
                value,
            });
        }
        self.layers.push(Layer {
            label: label.to_string(),
            weights: heads.to_owned(),
        });
        Ok(self)
    }

    /// The number of heads per layer, once a layer is added.
    ///
    /// ```
    /// let t = vec!["a".to_string()];
    /// let view = figures::HeadView::new("v", &t, &t);
    /// assert_eq!(view.heads(), None);
    /// let view = view.layer("only", ndarray::Array3::ones((3, 1, 1)).view())?;
    /// assert_eq!(view.heads(), Some(3));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn heads(&self) -> Option<usize> {
        self.layers.first().map(|l| l.weights.dim().0)
    }

    /// The view's data as compact JSON: `title`, `axes` (what a layer and a head are called),
    /// `queries` and `keys` (the labels), `heads`, and `layers`, each a `label` and its
    /// `weights` as nested lists `[head][query][key]`, rounded to 3 decimals (`0.25`, `1`,
    /// `0`), and, only when [`HeadView::start`] set it, `start` (`layer`, and `head` or
    /// `null`). The same view gives the same bytes on every machine. `<`, `>` and `&` in labels
    /// are written as `\u003c`, `\u003e`, `\u0026`, so the JSON can sit inside an HTML
    /// `<script>` whatever the tokens are.
    ///
    /// ```
    /// use ndarray::array;
    /// let tokens = vec!["</script>".to_string(), "b".to_string()];
    /// let view = figures::HeadView::new("v", &tokens, &tokens)
    ///     .layer("L0", array![[[0.12345, 0.87655], [1.0, 0.0]]].view())?;
    /// assert_eq!(
    ///     view.to_json(),
    ///     r#"{"title":null,"axes":["layer","head"],"queries":["\u003c/script\u003e","b"],"#
    ///         .to_owned()
    ///         + r#""keys":["\u003c/script\u003e","b"],"heads":1,"#
    ///         + r#""layers":[{"label":"L0","weights":[[[0.123,0.877],[1,0]]]}]}"#
    /// );
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"title\":");
        match &self.title {
            Some(t) => json_string(&mut out, t),
            None => out.push_str("null"),
        }
        out.push_str(",\"axes\":[");
        json_string(&mut out, &self.layer_name);
        out.push(',');
        json_string(&mut out, &self.head_name);
        out.push_str("],\"queries\":");
        json_strings(&mut out, &self.queries);
        out.push_str(",\"keys\":");
        json_strings(&mut out, &self.keys);
        let _ = write!(out, ",\"heads\":{},\"layers\":[", self.heads().unwrap_or(0));
        for (i, layer) in self.layers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"label\":");
            json_string(&mut out, &layer.label);
            out.push_str(",\"weights\":[");
            for (h, head) in layer.weights.outer_iter().enumerate() {
                if h > 0 {
                    out.push(',');
                }
                out.push('[');
                for (r, row) in head.outer_iter().enumerate() {
                    if r > 0 {
                        out.push(',');
                    }
                    out.push('[');
                    for (c, &w) in row.iter().enumerate() {
                        if c > 0 {
                            out.push(',');
                        }
                        push_weight(&mut out, w);
                    }
                    out.push(']');
                }
                out.push(']');
            }
            out.push_str("]}");
        }
        out.push(']');
        if let Some((layer, head)) = self.start {
            let _ = write!(out, ",\"start\":{{\"layer\":{layer},\"head\":");
            match head {
                Some(h) => {
                    let _ = write!(out, "{h}");
                }
                None => out.push_str("null"),
            }
            out.push('}');
        }
        out.push('}');
        out
    }

    /// A small JavaScript file that registers the data under the view's id, for a page that
    /// loads `head-view.js` itself (the book) with a plain `<script src>`, which works from
    /// `file://` too:
    ///
    /// ```text
    /// // (a comment saying what the file is)
    /// (window.attentionHeadViews = window.attentionHeadViews || {})["ID"] = {...};
    /// ```
    ///
    /// followed by a line that draws the page's views at once if the viewer is already loaded.
    /// Fails if the id is not letters, digits, `-` and `_`, or the view has no layer.
    ///
    /// ```
    /// let t = vec!["a".to_string()];
    /// let view = figures::HeadView::new("ch13", &t, &t)
    ///     .layer("L0", ndarray::Array3::ones((1, 1, 1)).view())?;
    /// let script = view.to_data_script()?;
    /// let registers = script.lines().find(|l| l.starts_with("(window")).unwrap();
    /// assert!(registers.starts_with(
    ///     r#"(window.attentionHeadViews = window.attentionHeadViews || {})["ch13"] = {"#
    /// ));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_data_script(&self) -> Result<String> {
        self.check_complete()?;
        Ok(format!(
            "// Attention weights for the head view \"{id}\" (book/theme/head-view.js draws \
             them into <div class=\"head-view\" data-head-view=\"{id}\">). Generated: do not \
             edit.\n(window.attentionHeadViews = window.attentionHeadViews || {{}})[\"{id}\"] = \
             {json};\nif (typeof window.renderHeadViews === \"function\") \
             window.renderHeadViews();\n",
            id = self.id,
            json = self.to_json()
        ))
    }

    /// Writes [`HeadView::to_data_script`] to `path` (a name ending in `.js`; its directory
    /// must exist), through a temporary file beside it and a rename, so that `path` is never
    /// left half written. Returns the path, as the figures' `save` does.
    ///
    /// In a page, next to the view's static picture (shown without JavaScript, in print, and
    /// until the view is drawn):
    ///
    /// ```html
    /// <div class="head-view" data-head-view="ch13"><img src="img/ch13_heads.png" alt="…"></div>
    /// <script src="img/ch13_head_view.js"></script>
    /// ```
    ///
    /// ```
    /// let t = vec!["a".to_string()];
    /// let view = figures::HeadView::new("ch13", &t, &t)
    ///     .layer("L0", ndarray::Array3::ones((1, 1, 1)).view())?;
    /// let dir = tempfile::tempdir()?;
    /// let path = view.write_data_script(dir.path().join("ch13_head_view.js"))?;
    /// assert!(std::fs::read_to_string(path)?.contains("\"ch13\""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_data_script(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        save(path.as_ref(), JS, || Ok(self.to_data_script()?.into_bytes()))
    }

    /// One self-contained HTML page: the viewer's script and style, and the data, inlined;
    /// it loads nothing, from the network or from disk, and works offline from `file://`.
    /// The title is HTML-escaped and the data is [`HeadView::to_json`], so no label can end a
    /// `<script>` early or add markup. Fails as [`HeadView::to_data_script`] does.
    ///
    /// ```
    /// let t = vec!["<b>bold?</b>".to_string()];
    /// let view = figures::HeadView::new("mine", &t, &t)
    ///     .title("x < y")
    ///     .layer("L0", ndarray::Array3::ones((1, 1, 1)).view())?;
    /// let html = view.to_html()?;
    /// assert!(html.contains("<title>x &lt; y</title>"));
    /// assert!(html.contains(r#"<div class="head-view" data-head-view="mine">"#));
    /// assert!(!html.contains("<b>bold?</b>"));
    /// # Ok::<(), figures::FigureError>(())
    /// ```
    pub fn to_html(&self) -> Result<String> {
        self.check_complete()?;
        let title = escape(
            self.title.as_deref().unwrap_or("Attention head view"),
            Markup::Html,
        );
        Ok(format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta name=\"generator\" content=\"figures::HeadView (Attention, Step by Step)\">\n\
             <title>{title}</title>\n<style>\n{PAGE_STYLE}</style>\n<style>\n{STYLE}</style>\n\
             </head>\n<body class=\"head-view-page\">\n<main>\n\
             <div class=\"head-view\" data-head-view=\"{id}\"><noscript><p>This page draws \
             the attention weights with JavaScript, which is turned off.</p></noscript></div>\n\
             <p class=\"head-view-help\">Point at a token (mouse, or Tab then the arrow keys) to \
             see where it attends; click or press Enter to keep it. <em>lines</em>: queries on \
             the left, keys on the right, the wider and darker a line the larger the weight. \
             <em>matrix</em>: one row per query, one column per key. <em>SVG</em> and \
             <em>PNG</em> download what is drawn.</p>\n</main>\n\
             <script>\n{data}</script>\n<script>\n{SCRIPT}</script>\n</body>\n</html>\n",
            id = self.id,
            data = self.to_data_script()?,
        ))
    }

    /// Writes [`HeadView::to_html`] to `path` (a name ending in `.html` or `.htm`; its
    /// directory must exist), through a temporary file and a rename. Returns the path.
    ///
    /// ```
    /// let t = vec!["a".to_string(), "b".to_string()];
    /// let view = figures::HeadView::new("v", &t, &t)
    ///     .layer("L0", ndarray::Array3::from_elem((1, 2, 2), 0.5).view())?;
    /// let dir = tempfile::tempdir()?;
    /// view.write_html(dir.path().join("v.html"))?;
    /// let err = view.write_html(dir.path().join("v.png")).unwrap_err();
    /// assert!(err.to_string().contains("must end in .html"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_html(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        save(path.as_ref(), HTML, || Ok(self.to_html()?.into_bytes()))
    }

    /// What the files need beyond what [`HeadView::layer`] checked: a usable id and a layer.
    fn check_complete(&self) -> Result<()> {
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if self.id.is_empty() || !self.id.chars().all(valid) {
            return Err(FigureError::BadId {
                id: self.id.clone(),
            });
        }
        if self.layers.is_empty() {
            return Err(FigureError::Nothing(format!(
                "the head view \"{}\" has no layer: add one with .layer(label, weights)",
                self.id
            )));
        }
        if let Some((layer, head)) = self.start {
            let heads = self.heads().unwrap_or(0);
            if layer >= self.layers.len() || head.is_some_and(|h| h >= heads) {
                return Err(FigureError::BadStart {
                    id: self.id.clone(),
                    which: match head {
                        Some(h) => format!("layer {layer}, head {h}"),
                        None => format!("layer {layer}"),
                    },
                    layers: self.layers.len(),
                    heads,
                });
            }
        }
        Ok(())
    }
}

/// Style for the stand-alone page of [`HeadView::to_html`] (the book has its own).
const PAGE_STYLE: &str = "\
:root { color-scheme: light dark; }
body.head-view-page { margin: 0; font-family: system-ui, -apple-system, \"Segoe UI\", Roboto, \
sans-serif; background: Canvas; color: CanvasText; }
body.head-view-page main { max-width: 1100px; margin: 0 auto; padding: 1rem 1.5rem 2rem; }
body.head-view-page h1 { font-size: 1.4rem; font-weight: 600; }
.head-view-help { font-size: 0.9rem; opacity: 0.8; }
";

/// A weight rounded to 3 decimals, in the shortest form: `0.125`, `0.1`, `1`, `0`.
fn push_weight(out: &mut String, w: f64) {
    // w is in [0, 1] (checked), so this is an exact small integer: the same on every machine.
    let m = (w * DECIMALS_SCALE).round() as u32;
    match m {
        0 => out.push('0'),
        1000 => out.push('1'),
        _ => {
            let digits = format!("{m:03}");
            let _ = write!(out, "0.{}", digits.trim_end_matches('0'));
        }
    }
}

fn json_strings(out: &mut String, items: &[String]) {
    out.push('[');
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(out, s);
    }
    out.push(']');
}

/// A JSON string literal that is also safe inside an HTML `<script>` element and a JavaScript
/// source: `<`, `>`, `&`, U+2028 and U+2029 are escaped along with what JSON requires.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array3, array};

    fn tokens(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    #[test]
    fn weights_round_to_three_decimals_in_their_shortest_form() {
        let mut s = String::new();
        for w in [
            0.0, 1.0, 0.5, 0.1, 0.12, 0.0004, 0.0005, 0.9996, 0.123456, 1e-300,
        ] {
            push_weight(&mut s, w);
            s.push(' ');
        }
        assert_eq!(s, "0 1 0.5 0.1 0.12 0 0.001 1 0.123 0 ");
    }

    #[test]
    fn labels_cannot_break_out_of_a_script_or_a_string() {
        let mut s = String::new();
        json_string(&mut s, "</script><b>\"x\"\\ & \u{2028}\n\u{1}é");
        assert_eq!(
            s,
            r#""\u003c/script\u003e\u003cb\u003e\"x\"\\ \u0026 \u2028\n\u0001é""#
        );
        assert_eq!(
            escape("<a href=\"x\">'&'</a>", Markup::Html),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn the_inlined_viewer_cannot_end_its_own_element() {
        // The page inlines head-view.js in <script> and head-view.css in <style>.
        assert!(!SCRIPT.to_ascii_lowercase().contains("</script"));
        assert!(!STYLE.to_ascii_lowercase().contains("</style"));
        // The one URL it may hold is the SVG namespace of its exports, which is a name.
        let script = SCRIPT.replacen(r#"const SVG_NS = "http://www.w3.org/2000/svg";"#, "", 1);
        assert!(
            !script.contains("http://") && !script.contains("https://"),
            "loads nothing"
        );
        assert!(!STYLE.contains("url("), "the style sheet loads nothing");
    }

    #[test]
    fn every_layer_needs_the_same_heads_and_the_labels_shape() {
        let t = tokens(3);
        let view = HeadView::new("v", &t, &t)
            .layer("a", Array3::from_elem((2, 3, 3), 0.3).view())
            .unwrap();
        let err = view
            .clone()
            .layer("b", Array3::from_elem((4, 3, 3), 0.3).view())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "layer \"b\" has weights of shape (4, 3, 3) but (2, 3, 3) was expected: layer \"a\" \
             has 2 heads, and every layer needs the same number"
        );
        let err = view
            .clone()
            .layer("c", Array3::from_elem((2, 2, 3), 0.3).view())
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("(2, 2, 3) but (2, 3, 3) was expected"),
            "{err}"
        );
        let err = HeadView::new("v", &t, &t)
            .layer("d", Array3::<f64>::zeros((0, 3, 3)).view())
            .unwrap_err();
        assert!(
            err.to_string().contains("a layer needs at least one head"),
            "{err}"
        );
        let none: Vec<String> = Vec::new();
        let err = HeadView::new("v", &none, &none)
            .layer("e", Array3::<f64>::zeros((1, 0, 0)).view())
            .unwrap_err();
        assert!(matches!(err, FigureError::EmptyMatrix { .. }), "{err}");
        for bad in [-0.001, 1.001, f64::INFINITY, f64::NEG_INFINITY] {
            let mut w = Array3::from_elem((2, 3, 3), 0.3);
            w[[0, 1, 2]] = bad;
            let err = view.clone().layer("f", w.view()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "layer \"f\", head 0 has the value {bad} at row 1, column 2: a head view \
                     shows weights between 0 and 1"
                )
            );
        }
    }

    #[test]
    fn queries_and_keys_may_differ_in_number() {
        let view = HeadView::new("cross", &tokens(2), &tokens(3))
            .layer("L", array![[[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]].view())
            .unwrap();
        let json = view.to_json();
        assert!(
            json.contains(r#""queries":["t0","t1"],"keys":["t0","t1","t2"]"#),
            "{json}"
        );
        assert!(
            json.contains(r#""weights":[[[0.2,0.3,0.5],[1,0,0]]]"#),
            "{json}"
        );
    }

    #[test]
    fn files_need_an_id_a_layer_and_the_right_extension() {
        let t = tokens(1);
        let one = Array3::from_elem((1, 1, 1), 1.0);
        for id in ["", "a b", "x\"y", "é"] {
            let view = HeadView::new(id, &t, &t).layer("L", one.view()).unwrap();
            let err = view.to_html().unwrap_err();
            assert!(matches!(err, FigureError::BadId { .. }), "{id}: {err}");
        }
        let err = HeadView::new("v", &t, &t).to_data_script().unwrap_err();
        assert!(err.to_string().contains("has no layer"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let view = HeadView::new("v", &t, &t).layer("L", one.view()).unwrap();
        let err = view
            .write_data_script(dir.path().join("v.json"))
            .unwrap_err();
        assert!(
            err.to_string().ends_with("the file name must end in .js"),
            "{err}"
        );
        view.write_html(dir.path().join("V.HTM")).unwrap();
        // A failed write leaves nothing behind, and a good one only the file.
        let err = view
            .write_html(dir.path().join("missing/v.html"))
            .unwrap_err();
        assert!(err.to_string().starts_with("cannot write "), "{err}");
        view.write_data_script(dir.path().join("v.js")).unwrap();
        view.write_data_script(dir.path().join("v.js")).unwrap(); // replaces it
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["V.HTM", "v.js"]);
    }

    #[test]
    fn the_page_inlines_the_viewer_and_the_data_once() {
        let t = vec![
            "</script><script>alert(1)</script>".to_string(),
            "&amp;".to_string(),
        ];
        let view = HeadView::new("p", &t, &t)
            .title("<i>title</i>")
            .layer("<L>", Array3::from_elem((1, 2, 2), 0.5).view())
            .unwrap();
        let html = view.to_html().unwrap();
        // The only script elements are the two the page opens itself.
        assert_eq!(html.matches("<script>").count(), 2);
        assert_eq!(html.to_ascii_lowercase().matches("</script>").count(), 2);
        assert!(html.contains("<title>&lt;i&gt;title&lt;/i&gt;</title>"));
        assert!(html.contains(SCRIPT) && html.contains(STYLE));
        assert!(!html.contains("alert(1)</"));
        assert_eq!(view.to_html().unwrap(), html, "deterministic");
    }
}
