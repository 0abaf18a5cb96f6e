//! Shared by the chapter examples (`examples/chNN_*.rs`): their command line and where their
//! figures go.
//!
//! A chapter example declares `mod common;` and calls [`run_chapter`] in its `main`:
//!
//! ```text
//! cargo run --example ch03_scores                      # writes into book/img/
//! cargo run --example ch03_scores -- --out-dir /tmp/x  # writes into /tmp/x/
//! BOOK_IMG_DIR=/tmp/x cargo run --example ch03_scores  # the same
//! cargo run --example ch03_scores -- --help            # what it does and its options
//! ```
//!
//! `--out-dir` wins over `BOOK_IMG_DIR`, which wins over the default `<repository>/book/img`.
//! Every chapter example accepts `--figures-only` (`cargo xtask figures` passes it to all of
//! them): only chapter 8 does more than draw its figures and write its report (a timing
//! sweep), which the flag skips. An unknown option is an error (exit code 2), never ignored.

pub mod stdout;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable that redirects the figures.
pub const ENV_VAR: &str = "BOOK_IMG_DIR";

/// The options every chapter example has.
#[derive(clap::Args, Debug, Clone)]
pub struct Output {
    /// Write the figures and the report into DIR instead of the book's book/img/ (or set
    /// BOOK_IMG_DIR)
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Only draw the figures and write the report (chapter 8 then skips its timing sweep)
    #[arg(long)]
    pub figures_only: bool,
}

impl Output {
    /// The directory this run's figures go to (created if missing): `--out-dir`, else
    /// `BOOK_IMG_DIR`, else the default `book/img` of this repository.
    pub fn dir(&self) -> Result<PathBuf, String> {
        let dir = resolve(self.out_dir.clone(), std::env::var_os(ENV_VAR))?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create the figure directory {}: {e}", dir.display()))?;
        Ok(dir)
    }
}

/// The command line of a chapter example that has only the [`Output`] options.
#[derive(clap::Parser, Debug)]
pub struct ChapterCli {
    /// The options every chapter example has.
    #[command(flatten)]
    pub output: Output,
}

/// The clap command of the example `name` (its `CARGO_CRATE_NAME`) described by `about`.
pub fn command<C: clap::CommandFactory>(name: &'static str, about: &'static str) -> clap::Command {
    C::command().name(name).about(about).version(env!("CARGO_PKG_VERSION")).after_help(format!(
        "Run from the repository root: cargo run --release --example {name} -- [OPTIONS]"
    ))
}

/// Parses the process's command line as clap does: `--help` and `--version` print and exit 0
/// before anything is drawn; a wrong option prints clap's error and exits 2.
pub fn parse<C: clap::Parser>(name: &'static str, about: &'static str) -> C {
    let mut command = command::<C>(name, about);
    let matches = command.get_matches_mut();
    C::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut command).exit())
}

/// The default: `book/img` next to the root `Cargo.toml`.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("book").join("img")
}

/// Picks the directory: the `--out-dir` flag, else the environment variable's value (when not
/// empty), else [`default_dir`].
pub fn resolve(flag: Option<PathBuf>, env: Option<OsString>) -> Result<PathBuf, String> {
    if flag.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
        return Err("--out-dir needs a non-empty directory".into());
    }
    Ok(flag
        .or_else(|| env.filter(|e| !e.is_empty()).map(PathBuf::from))
        .unwrap_or_else(default_dir))
}

/// What every chapter example exposes: draws its figures (and writes its report,
/// `chNN_output.txt`) into a directory and returns the files it wrote.
pub type Render = fn(&Path) -> Result<Vec<PathBuf>, Box<dyn std::error::Error>>;

/// The `main` of a chapter example whose only options are [`Output`]'s: parses the command
/// line (see [`parse`]), then [`render_into`] the chosen directory.
pub fn run_chapter(
    name: &'static str,
    about: &'static str,
    render: Render,
) -> Result<(), Box<dyn std::error::Error>> {
    let cli: ChapterCli = parse(name, about);
    render_into(&cli.output.dir()?, render)
}

/// Renders into `dir`, prints the report it wrote (the `.txt` file the chapter includes), then
/// lists every file. The report is computed once, by `render`, so what the terminal shows is
/// byte for byte what the book shows.
pub fn render_into(dir: &Path, render: Render) -> Result<(), Box<dyn std::error::Error>> {
    let written = render(dir)?;
    for path in written.iter().filter(|p| p.extension().is_some_and(|e| e == "txt")) {
        stdout::print(format_args!("{}", std::fs::read_to_string(path)?));
    }
    for path in &written {
        stdout::line(format_args!("wrote {}", path.display()));
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

/// The colours the chapters' diagrams give queries, keys and values (Okabe–Ito blue,
/// vermillion and bluish green), the same in every chapter, and the tints of their fills.
#[allow(dead_code)] // each example uses some of them
pub mod colors {
    use figures::diagram::Color;

    /// Queries, `Q = X·W_Q`.
    pub const Q: Color = Color::BLUE;
    /// Keys, `K = X·W_K`.
    pub const K: Color = Color::VERMILLION;
    /// Values, `V = X·W_V`.
    pub const V: Color = Color::BLUISH_GREEN;
    /// The input `X` and everything not tied to one projection.
    pub const X: Color = Color::GREY;
    /// How much white a block's fill mixes in: dark text reads well on it.
    pub const FILL: f64 = 0.6;
    /// The lighter fill of the weight matrices.
    pub const LIGHT: f64 = 0.82;
}
