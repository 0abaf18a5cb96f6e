//! Shared by the chapter examples (`examples/chNN_*.rs`): where their figures go.
//!
//! A chapter example declares `mod common;` and calls [`out_dir`] in its `main`:
//!
//! ```text
//! cargo run --example ch03_scores                      # writes into book/img/
//! cargo run --example ch03_scores -- --out-dir /tmp/x  # writes into /tmp/x/
//! BOOK_IMG_DIR=/tmp/x cargo run --example ch03_scores  # the same
//! ```
//!
//! `--out-dir` wins over `BOOK_IMG_DIR`, which wins over the default `<repository>/book/img`.
//! Other arguments are the example's own; `cargo xtask figures` passes `--figures-only` to
//! every chapter example, which those with extra work beyond the book's figures and report
//! (chapter 8's timing sweep) honour and the others have no need to read.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable that redirects the figures.
pub const ENV_VAR: &str = "BOOK_IMG_DIR";

/// The directory this run's figures go to (created if missing), from the command line, the
/// environment, or the default `book/img` of this repository.
pub fn out_dir() -> Result<PathBuf, String> {
    let dir = resolve(std::env::args_os().skip(1), std::env::var_os(ENV_VAR))?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the figure directory {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The default: `book/img` next to the root `Cargo.toml`.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("book").join("img")
}

/// Picks the directory from the arguments (after the program name) and the environment
/// variable's value. Arguments other than `--out-dir DIR` / `--out-dir=DIR` are left to the
/// example.
pub fn resolve(args: impl IntoIterator<Item = OsString>, env: Option<OsString>) -> Result<PathBuf, String> {
    let mut args = args.into_iter();
    let mut from_args = None;
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--out-dir" {
            let dir = args.next().ok_or("--out-dir needs a directory after it")?;
            from_args = Some(PathBuf::from(dir));
        } else if let Some(dir) = text.strip_prefix("--out-dir=") {
            from_args = Some(PathBuf::from(dir));
        }
    }
    if from_args.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
        return Err("--out-dir needs a non-empty directory".into());
    }
    Ok(from_args.or_else(|| env.filter(|e| !e.is_empty()).map(PathBuf::from)).unwrap_or_else(default_dir))
}

/// What every chapter example exposes: draws its figures (and writes its report,
/// `chNN_output.txt`) into a directory and returns the files it wrote.
pub type Render = fn(&Path) -> Result<Vec<PathBuf>, Box<dyn std::error::Error>>;

/// The `main` of a chapter example: renders into [`out_dir`], prints the report it wrote (the
/// `.txt` file the chapter includes), then lists every file. The report is computed once, by
/// `render`, so what the terminal shows is byte for byte what the book shows.
pub fn run_chapter(render: Render) -> Result<(), Box<dyn std::error::Error>> {
    let written = render(&out_dir()?)?;
    for path in written.iter().filter(|p| p.extension().is_some_and(|e| e == "txt")) {
        print!("{}", std::fs::read_to_string(path)?);
    }
    for path in &written {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The widest line the book's code column shows (the crates' `rustfmt.toml` use the same).
pub const MAX_COLUMNS: usize = 95;

/// `text` with every line wider than [`MAX_COLUMNS`] that holds a bracketed list (a printed
/// vector, or a row of a printed matrix) broken into as few lines of equally many items as
/// fit, the continuation lines aligned under the first item, as NumPy wraps wide rows. Other
/// lines are left as they are.
#[allow(dead_code)] // only the examples whose reports hold wide rows call it
pub fn wrap_wide_rows(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        out.push_str(&wrap_row(body));
        out.push_str(newline);
    }
    out
}

#[allow(dead_code)]
fn wrap_row(line: &str) -> String {
    let width = |s: &str| s.chars().count();
    let Some(open) = line.find('[') else { return line.to_string() };
    if width(line) <= MAX_COLUMNS {
        return line.to_string();
    }
    let start = open + line[open..].len() - line[open..].trim_start_matches('[').len();
    let (prefix, items) = (&line[..start], line[start..].split(", ").collect::<Vec<_>>());
    let indent = " ".repeat(width(prefix));
    for lines in 2..=items.len() {
        let per_line = items.len().div_ceil(lines);
        let chunks: Vec<String> = items.chunks(per_line).map(|chunk| chunk.join(", ")).collect();
        let wrapped: Vec<String> = chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                let lead = if i == 0 { prefix } else { indent.as_str() };
                let comma = if i + 1 < chunks.len() { "," } else { "" };
                format!("{lead}{chunk}{comma}")
            })
            .collect();
        if wrapped.iter().all(|l| width(l) <= MAX_COLUMNS) {
            return wrapped.join("\n");
        }
    }
    line.to_string()
}
