//! Writing the crate's files: the check of a file name's extension, the writes themselves, and
//! text escaped for the SVG and HTML they hold. The PNG figures, the diagrams and the head
//! views all write through these.

use std::path::{Path, PathBuf};

use crate::error::{FigureError, Result};

/// A kind of file the crate writes: the extensions its name may end in (in any case; errors
/// name the first) and what it is, for the error when the name does not fit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FileKind {
    pub extensions: &'static [&'static str],
    pub what: &'static str,
}

/// The PNG figures (heatmaps, line and bar charts).
pub(crate) const PNG: FileKind = FileKind {
    extensions: &["png"],
    what: "figures are written as PNG",
};

/// Fails unless `path` ends in one of `kind`'s extensions. A PNG's error is
/// [`FigureError::NotPng`] (its own variant, with the same message), the others'
/// [`FigureError::Extension`].
fn check_extension(path: &Path, kind: FileKind) -> Result<()> {
    let ok = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| kind.extensions.iter().any(|a| e.eq_ignore_ascii_case(a)));
    if ok {
        return Ok(());
    }
    let path = path.to_path_buf();
    Err(match kind.extensions[0] {
        "png" => FigureError::NotPng { path },
        ext => FigureError::Extension {
            path,
            what: kind.what,
            ext,
        },
    })
}

/// Checks that `path` ends in one of `kind`'s extensions (before rendering anything), renders
/// with `render` and writes the bytes to `path` ([`write_atomic`]); the directory must exist.
/// Returns the path written.
pub(crate) fn save(
    path: &Path,
    kind: FileKind,
    render: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<PathBuf> {
    check_extension(path, kind)?;
    write_atomic(path, &render()?)
}

/// Writes `bytes` to a new temporary file beside `path`, then renames it over `path`: at every
/// moment `path` is its old content or the new one. The temporary file is removed on failure.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let write_err = |source| FigureError::Write {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.is_empty() {
        return Err(write_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        )));
    }
    let mut n = 0;
    let (temp, mut file) = loop {
        let temp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
        {
            Ok(file) => break (temp, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(write_err(e)),
        }
    };
    let written = std::io::Write::write_all(&mut file, bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            drop(file);
            std::fs::rename(&temp, path)
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(write_err(e));
    }
    Ok(path.to_path_buf())
}

/// The markup that escaped text goes into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Markup {
    /// SVG, which is XML: control characters, which XML does not allow, are dropped.
    Svg,
    /// HTML: `'` is escaped too, and control characters are kept.
    Html,
}

/// Text escaped for element content and attribute values: `&`, `<`, `>` and `"` as entities,
/// and as `markup` says for `'` and control characters.
pub(crate) fn escape(text: &str, markup: Markup) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' if markup == Markup::Html => out.push_str("&#39;"),
            c if c.is_control() && markup == Markup::Svg => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_drops_control_characters_and_html_escapes_apostrophes() {
        let text = "<a href=\"x\">'&'</a>\t\u{7}";
        assert_eq!(
            escape(text, Markup::Svg),
            "&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;"
        );
        assert_eq!(
            escape(text, Markup::Html),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;\t\u{7}"
        );
    }

    #[test]
    fn a_png_keeps_its_own_error() {
        let err = check_extension(Path::new("f.jpg"), PNG).unwrap_err();
        assert!(matches!(err, FigureError::NotPng { .. }), "{err}");
        let svg = FileKind {
            extensions: &["svg"],
            what: "a diagram is SVG",
        };
        assert!(check_extension(Path::new("f.SVG"), svg).is_ok());
        let err = check_extension(Path::new("f.png"), svg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot write f.png: a diagram is SVG, so the file name must end in .svg"
        );
    }
}
