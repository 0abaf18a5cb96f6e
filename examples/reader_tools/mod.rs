//! What the reader tools `attend` and `multihead` share: how they fail, loading `.npy` files
//! with checks, the `--png` heatmaps and `--view` pages, and writing results so that no run
//! loses a file.
//!
//! Each tool's logic is a `run(args) -> Result<summary, Failure>` function, so the tests call
//! it directly (`tests/tools.rs`) or run it as a process (`tests/tool_processes.rs`);
//! [`main_with`] turns it into a process:
//!
//! | outcome | printed | exit code |
//! |---|---|---|
//! | success | the summary, on stdout | 0 |
//! | `--help`, `--version` | clap's text, on stdout | 0 |
//! | bad usage (an unknown, missing or malformed option, options that conflict, an output that is an input) | clap's standard error: `error: …`, the usage line and a hint | 2 |
//! | bad data (a file missing, malformed, of the wrong dtype or shape, a NaN) or a file that cannot be written | one line, `error: <file>: <problem>` | 1 |
//! | SIGINT, SIGTERM or SIGHUP while writing the outputs | one line, `error: interrupted by …` | 128 + the signal's number |
//!
//! A failed run changes no file (see [`outputs`]).

pub mod attend;
pub mod multihead;
pub mod npy;
pub mod outputs;
pub mod progress;
#[path = "../common/stdout.rs"]
pub mod stdout;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use attention::mask::Mask;
use attention::{AttentionError, Float};
use clap::CommandFactory;
use clap::error::ErrorKind;
use figures::{HeadView, Heatmap, HeatmapGrid, Panel, PanelSize, ValueRange};
use ndarray::{ArrayD, ArrayViewD, Axis, Dimension, Ix2};

/// How a run of a tool fails.
#[derive(Debug)]
pub enum Failure {
    /// The command line is wrong (or asks for `--help`/`--version`): clap's own message.
    Usage(clap::Error),
    /// A file is missing, malformed or does not fit, or an output cannot be written.
    Data(String),
    /// A signal arrived while the outputs were written; they were rolled back.
    Interrupted {
        /// The signal's number.
        signal: i32,
        /// What happened, in one line.
        message: String,
    },
}

impl Failure {
    /// 2 for bad usage (0 for `--help` and `--version`), 1 for bad data, 128 + the signal's
    /// number for an interruption.
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Usage(e) => e.exit_code(),
            Failure::Data(_) => 1,
            Failure::Interrupted { signal, .. } => 128 + signal,
        }
    }

    /// The message as the process prints it (clap's text for usage, else `error: ...`).
    pub fn message(&self) -> String {
        match self {
            Failure::Usage(e) => e.render().to_string(),
            Failure::Data(m) | Failure::Interrupted { message: m, .. } => {
                format!("error: {}", m.replace('\n', " "))
            }
        }
    }
}

impl From<clap::Error> for Failure {
    fn from(e: clap::Error) -> Self {
        Failure::Usage(e)
    }
}

/// A tool's logic: the arguments (program name first) to a summary or a failure.
pub type Run = fn(Vec<OsString>) -> Result<String, Failure>;

/// Runs a tool on the process's arguments, prints what it has to say and returns its exit
/// code (see the table in the module documentation).
pub fn main_with(run: Run) -> ExitCode {
    let code = process(run, std::env::args_os().collect());
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// What [`main_with`] does with the arguments, as a process's only thread: runs the tool,
/// prints its report and returns the exit code (with `--impl gpu`, Mesa's runtime directory
/// taken care of first: see [`runtime_dir`]).
pub fn process(run: Run, args: Vec<OsString>) -> i32 {
    // Still one thread here, so changing the environment is sound.
    let runtime_dir = args.iter().any(|a| a == "gpu" || a == "--impl=gpu").then(runtime_dir);
    let result = run(args);
    // Removed before the report: printing it may end the process (a closed stdout).
    if let Some(Some(dir)) = runtime_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    report(result)
}

/// Before `--impl gpu` opens the Vulkan driver: when `XDG_RUNTIME_DIR` is not set or not a
/// directory, points it at a private empty directory of a name no other directory has
/// (returned, to be removed at the end).
/// Mesa's window-system code looks for it and otherwise prints `error: XDG_RUNTIME_DIR is
/// invalid or not set in the environment.` on a run that succeeds; nothing here uses it.
fn runtime_dir() -> Option<PathBuf> {
    let set = std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| Path::new(&d).is_dir());
    if set {
        return None;
    }
    // A fresh name (a stale directory left by an earlier run is no obstacle), readable by
    // its owner only.
    let dir = tempfile::Builder::new().prefix(RUNTIME_DIR_PREFIX).tempdir().ok()?.keep();
    // SAFETY: called from `process` before the tool starts any thread.
    unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    Some(dir)
}

/// How the private `XDG_RUNTIME_DIR` of a `--impl gpu` run is named in the temporary folder.
pub const RUNTIME_DIR_PREFIX: &str = ".attention-runtime-";

/// Prints a run's summary or failure where it belongs and returns the exit code.
pub fn report(result: Result<String, Failure>) -> i32 {
    match result {
        Ok(summary) => {
            stdout::line(format_args!("{summary}"));
            0
        }
        Err(Failure::Usage(e)) => {
            let _ = e.print(); // help and version to stdout, errors to stderr
            e.exit_code()
        }
        Err(failure) => {
            eprintln!("{}", failure.message());
            failure.exit_code()
        }
    }
}

/// The end of both tools' `--help`: their `examples`, then the exit codes they share.
pub fn after_help(examples: &str) -> String {
    format!(
        "{examples}\n\nExit codes: 0 done; 1 bad data (a file missing, malformed, of the wrong \
         dtype or shape, or not writable); 2 bad usage (options); 128 + N interrupted by signal N \
         while writing.\nA failed run changes no file. Reference: Appendix C of the book."
    )
}

/// A usage error found after parsing (options that conflict, an output that is an input),
/// in clap's standard form for the tool `C`.
pub fn usage<C: CommandFactory>(kind: ErrorKind, message: impl std::fmt::Display) -> Failure {
    Failure::Usage(C::command().error(kind, message))
}

/// `--png`'s value: a path ending in `.png` (the tools write PNG data and nothing else).
pub fn png_path(text: &str) -> Result<PathBuf, String> {
    path_ending_in(text, &["png"], "the heatmap is written as a PNG image: give a file name \
        ending in .png")
}

/// `--view`'s value: a path ending in `.html` or `.htm` (the tools write one HTML page).
pub fn html_path(text: &str) -> Result<PathBuf, String> {
    path_ending_in(text, &["html", "htm"], "the head view is written as one HTML page: give a \
        file name ending in .html")
}

/// `text` as a path if its extension is one of `extensions` (in any case), or `problem`
/// followed by the name given.
pub fn path_ending_in(text: &str, extensions: &[&str], problem: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if extensions.iter().any(|e| ext.eq_ignore_ascii_case(e)) => Ok(path),
        _ => Err(format!("{problem}, not {text:?}")),
    }
}

/// The group of the options that draw the weights (`--png`, `--view`), which `--labels`
/// needs one of; each tool's `Cli` declares it with `#[command(group(drawing()))]`.
pub fn drawing() -> clap::ArgGroup {
    clap::ArgGroup::new("drawing").args(["png", "view"]).multiple(true)
}

/// What a run writes: the five options both tools share.
#[derive(clap::Args, Debug)]
pub struct Written {
    /// Where to write the output (its shape: see above)
    #[arg(long, value_name = "OUT.npy")]
    pub out: PathBuf,
    /// Where to write the attention weights, one (L_q, L_k) matrix per batch item and head
    #[arg(long, value_name = "W.npy")]
    pub weights: Option<PathBuf>,
    /// Draw the weights as a PNG: one heatmap, or a grid with one per batch item and head (at
    /// most 64)
    #[arg(long, value_name = "HEATMAP.png", value_parser = png_path)]
    pub png: Option<PathBuf>,
    /// The colour scale of --png: fixed (0 to 1, every figure comparable) or row (each query's
    /// row scaled to its own largest weight, so that the small weights of a long row show)
    #[arg(long, value_name = "SCALE", value_enum, default_value_t, requires = "png")]
    pub png_scale: PngScale,
    /// Write the weights as one self-contained HTML page, an interactive head view that
    /// works offline: pick a batch item and head (or all heads, one colour each), point at a
    /// token to see its weights, as lines or as a matrix
    #[arg(long, value_name = "VIEW.html", value_parser = html_path)]
    pub view: Option<PathBuf>,
    /// Name the tokens of the heatmap and the head view, comma-separated, one per token (at
    /// most 64 for --png; any number for --view) [default: numbered from 0]
    #[arg(long, value_name = "a,b,c", requires = "drawing", allow_hyphen_values = true)]
    pub labels: Option<String>,
}

impl Written {
    /// The output paths with the options that named them, for [`outputs::check_distinct`].
    pub fn named(&self) -> Vec<outputs::Named<'_>> {
        let mut named = vec![outputs::Named { flag: "--out", path: &self.out }];
        named.extend(
            self.weights.as_deref().map(|path| outputs::Named { flag: "--weights", path }),
        );
        named.extend(self.png.as_deref().map(|path| outputs::Named { flag: "--png", path }));
        named.extend(self.view.as_deref().map(|path| outputs::Named { flag: "--view", path }));
        named
    }

    /// Whether the run must form the weights (to write them, to draw them, to show them).
    pub fn wants_weights(&self) -> bool {
        self.weights.is_some() || self.png.is_some() || self.view.is_some()
    }
}

/// `--mask`: the causal mask, a causal sliding window, or a file.
#[derive(Clone, Debug, PartialEq)]
pub enum MaskArg {
    /// `--mask causal`.
    Causal,
    /// `--mask window:W`: query `i` sees keys `j` with `0 ≤ i − j < W` (itself and the
    /// `W − 1` before it); `W ≥ 1`.
    Window(usize),
    /// `--mask M.npy` (a file named `causal` is `--mask ./causal`, one named `window:4` is
    /// `--mask ./window:4`).
    File(PathBuf),
}

impl MaskArg {
    /// Parses `--mask`'s value: `causal`, `window:W` with a whole `W ≥ 1`, or a file.
    pub fn parse(text: &str) -> Result<MaskArg, String> {
        if text == "causal" {
            return Ok(MaskArg::Causal);
        }
        if let Some(width) = text.strip_prefix("window:") {
            let digits = !width.is_empty() && width.bytes().all(|b| b.is_ascii_digit());
            return match width.parse::<usize>() {
                Ok(0) if digits => Err("a sliding window must hold at least 1 key (the \
                                        query's own), so W = 0 is not allowed"
                    .into()),
                Ok(w) if digits => Ok(MaskArg::Window(w)),
                _ => Err(format!(
                    "expected window:W with W a whole number of keys, at least 1, not {width:?} \
                     (a file of this name: ./{text})"
                )),
            };
        }
        if near("causal", text) && !Path::new(text).exists() {
            return Err(format!(
                "there is no file {text:?}: did you mean causal? (a mask file is a bool .npy)"
            ));
        }
        if text == "window" {
            return Err("a sliding window needs its width: window:W, e.g. window:4 (a file \
                        named window: ./window)"
                .into());
        }
        Ok(MaskArg::File(text.into()))
    }

    /// The mask file, if it is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            MaskArg::Causal | MaskArg::Window(_) => None,
            MaskArg::File(path) => Some(path),
        }
    }

    /// `causal`, `window:W` or the file's path, for titles.
    pub fn describe(&self) -> String {
        match self {
            MaskArg::Causal => "causal".into(),
            MaskArg::Window(w) => format!("window:{w}"),
            MaskArg::File(path) => path.display().to_string(),
        }
    }
}

/// Whether `text` is a slip of `word` (one or two letters added, dropped, changed or swapped,
/// as in `casual` for `causal`) without being `word` itself.
fn near(word: &str, text: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (word.chars().collect(), text.chars().collect());
    if a == b || a.len().abs_diff(b.len()) > 2 {
        return false;
    }
    // Damerau–Levenshtein distance (adjacent swaps count as one edit).
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for j in 0..=b.len() {
        d[0][j] = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()] <= 2
}

/// A count given on the command line (`--heads`, `--bench`): a whole number, at least 1.
pub fn at_least_one(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number, at least 1".into()),
    }
}

/// A float array read from a `.npy` file, in the file's own precision.
pub enum Tensor {
    /// `float32` (`<f4`).
    F32(ArrayD<f32>),
    /// `float64` (`<f8`).
    F64(ArrayD<f64>),
}

impl Tensor {
    /// Reads a `float32` or `float64` array and rejects NaN and infinite entries.
    pub fn load(path: &Path) -> Result<Tensor, Failure> {
        let shown = path.display();
        let fail = |problem: String| Failure::Data(format!("{shown}: {problem}"));
        let header = npy::read_header(path).map_err(fail)?;
        let tensor = if npy::holds::<f32>(&header) {
            Tensor::F32(npy::read_data(path, &header).map_err(fail)?)
        } else if npy::holds::<f64>(&header) {
            Tensor::F64(npy::read_data(path, &header).map_err(fail)?)
        } else {
            return Err(fail(format!(
                "dtype {} is not float32 or float64; save it with .astype(np.float32) or \
                 .astype(np.float64)",
                npy::describe(&header)
            )));
        };
        match &tensor {
            Tensor::F32(a) => check_finite(path, a)?,
            Tensor::F64(a) => check_finite(path, a)?,
        }
        Ok(tensor)
    }

    /// `"float32"` or `"float64"`.
    pub fn dtype(&self) -> &'static str {
        match self {
            Tensor::F32(_) => "float32",
            Tensor::F64(_) => "float64",
        }
    }

    /// The array's shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32(a) => a.shape(),
            Tensor::F64(a) => a.shape(),
        }
    }
}

/// Reads a boolean mask file (`True` = may attend).
pub fn load_bool(path: &Path) -> Result<ArrayD<bool>, Failure> {
    let fail = |problem: String| Failure::Data(format!("{}: {problem}", path.display()));
    let header = npy::read_header(path).map_err(fail)?;
    if !npy::holds::<bool>(&header) {
        let hint = match header.dtype.map(|d| d.kind) {
            Some('f') => {
                "; a float mask in PyTorch's additive form (0 = attend, -inf = blocked) is \
                 np.save(\"m.npy\", m == 0)"
            }
            _ => "",
        };
        return Err(fail(format!(
            "a mask must have dtype bool (True = may attend), not {}{hint}",
            npy::describe(&header)
        )));
    }
    npy::read_data(path, &header).map_err(fail)
}

/// Loads a bool mask file and checks it by the one rule both tools follow, PyTorch's for
/// `attn_mask`: it broadcasts to the weights' shape `(…, L_q, L_k)` (aligned from the right,
/// each of its axes is 1 or the weights' size there, and it has no more axes than they have).
/// The mask returned has at least 2 axes (`(L_k,)` becomes `(1, L_k)`). When some queries see
/// no key, a [`note`] says how many: their weights are all zero, which a mask of the opposite
/// polarity (`True` = blocked) gives silently.
pub fn load_mask(path: &Path, weights_shape: &[usize]) -> Result<Mask, Failure> {
    let mut allowed = load_bool(path)?;
    if allowed.ndim() > weights_shape.len()
        || allowed
            .shape()
            .iter()
            .rev()
            .zip(weights_shape.iter().rev())
            .any(|(&m, &w)| m != 1 && m != w)
    {
        return Err(Failure::Data(format!(
            "{}: the mask's shape {} does not broadcast to the weights' shape {}: aligned from \
             the right, each axis of the mask must be 1 or equal to the weights' axis (PyTorch's \
             rule for attn_mask), and it may not have more axes",
            path.display(),
            shape_text(allowed.shape()),
            shape_text(weights_shape)
        )));
    }
    while allowed.ndim() < 2 {
        allowed.insert_axis_inplace(Axis(0)); // (L_k,) is (1, L_k); () is (1, 1)
    }
    let blind = rows_without_keys(&allowed, weights_shape);
    if blind > 0 {
        let rows: usize = weights_shape[..weights_shape.len() - 1].iter().product();
        note(format!(
            "{}: {blind} of the {rows} query rows see no key (every key masked), so their \
             weights are all zero and their output is zero; if your mask means True = blocked \
             (PyTorch's key_padding_mask, nn.MultiheadAttention's attn_mask), save ~mask",
            path.display()
        ));
    }
    Mask::from_array(allowed).map_err(|e| Failure::Data(format!("{}: {e}", path.display())))
}

/// How many rows of the weights `(…, L_q, L_k)` a mask that broadcasts to them leaves with no
/// key: its own all-false rows, each repeated as often as broadcasting repeats it.
pub fn rows_without_keys(allowed: &ArrayD<bool>, weights_shape: &[usize]) -> usize {
    let n = allowed.ndim();
    let empty = allowed.lanes(Axis(n - 1)).into_iter().filter(|row| !row.iter().any(|&a| a));
    let own_rows: usize = allowed.shape()[..n - 1].iter().product();
    let rows: usize = weights_shape[..weights_shape.len() - 1].iter().product();
    empty.count() * (rows / own_rows.max(1))
}

thread_local! {
    static NOTES: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Says something on standard error that does not stop the run (`note: …`): a result that
/// may not be what was meant, or a way to make the run faster. The tests read the notes of
/// their own thread back with [`take_notes`].
pub fn note(text: impl std::fmt::Display) {
    let text = text.to_string();
    eprintln!("note: {text}");
    NOTES.with(|notes| notes.borrow_mut().push(text));
}

/// The notes this thread's runs said so far (each without `note: `), which it forgets.
pub fn take_notes() -> Vec<String> {
    NOTES.with(|notes| std::mem::take(&mut *notes.borrow_mut()))
}

/// Multiply-adds above which a debug build says, once, that it is unoptimised (about a few
/// seconds of work in a debug build, well under one in a release build).
pub const DEBUG_NOTE_FROM: f64 = 2e8;

/// In a debug build, says once that it is much slower than `--release` when a run is about to
/// do more than [`DEBUG_NOTE_FROM`] multiply-adds; in a release build, nothing.
pub fn note_if_debug(tool: &str, multiply_adds: f64) {
    if cfg!(debug_assertions) && multiply_adds > DEBUG_NOTE_FROM {
        note(format!(
            "this is an unoptimised (debug) build, which computes many times slower; for a \
             run this size use cargo run --release --example {tool} -- …"
        ));
    }
}

/// The most bytes the weights `(…, L_q, L_k)` may take where a tool forms them (the plain
/// path of `attend`, and `multihead`): 2 GiB, e.g. one 16384 × 16384 matrix of `float64` or
/// 23170 × 23170 of `float32`. The computation holds a few arrays of that size at once.
pub const MAX_WEIGHT_BYTES: u64 = 1 << 31;

/// The bytes of weights of shape `weights_shape` with elements of `element` bytes, or `None`
/// when the number does not fit in 64 bits.
pub fn weight_bytes(weights_shape: &[usize], element: usize) -> Option<u64> {
    weights_shape.iter().try_fold(element as u64, |acc, &n| acc.checked_mul(n as u64))
}

/// Refuses, before anything is computed, weights larger than [`MAX_WEIGHT_BYTES`]: `files`
/// names the inputs whose sizes make them, `way_out` says what to do instead.
pub fn check_weight_bytes(
    files: &str,
    weights_shape: &[usize],
    dtype: &str,
    element: usize,
    way_out: &str,
) -> Result<(), Failure> {
    let bytes = weight_bytes(weights_shape, element);
    if bytes.is_some_and(|b| b <= MAX_WEIGHT_BYTES) {
        return Ok(());
    }
    let size = bytes.map_or("more than 2^64".to_string(), |b| b.to_string());
    Err(Failure::Data(format!(
        "{files}: the weights {} would take {size} bytes of {dtype}, more than the limit of \
         {MAX_WEIGHT_BYTES} bytes (2 GiB) for forming them; {way_out}",
        shape_text(weights_shape)
    )))
}

/// NumPy's name for a float of `element` bytes: `float32` (4) or `float64` (8).
pub fn dtype_name(element: usize) -> &'static str {
    if element == 4 { "float32" } else { "float64" }
}

/// The smallest side of a cell `--png` draws, in pixels (the heatmaps never draw smaller).
pub const PNG_MIN_CELL: usize = 2;

fn check_finite<A: Float>(path: &Path, a: &ArrayD<A>) -> Result<(), Failure> {
    if let Some((index, x)) = a.indexed_iter().find(|(_, x)| !x.is_finite()) {
        let what = if x.is_nan() { "NaN" } else { "an infinite value" };
        return Err(Failure::Data(format!(
            "{}: contains {what} at index {:?}",
            path.display(),
            index.slice()
        )));
    }
    Ok(())
}

/// Checks that every file has the dtype of the first one.
pub fn same_dtype(files: &[(&Path, &Tensor)]) -> Result<(), Failure> {
    let (first, first_tensor) = files[0];
    for &(path, tensor) in &files[1..] {
        if tensor.dtype() != first_tensor.dtype() {
            return Err(Failure::Data(format!(
                "{}: dtype {} differs from {}'s {} (all inputs must be float32 or all float64)",
                path.display(),
                tensor.dtype(),
                first.display(),
                first_tensor.dtype()
            )));
        }
    }
    Ok(())
}

/// Names the files behind the operands an [`AttentionError`] talks about.
pub fn explain(error: &AttentionError, files: &[(&str, &Path)]) -> Failure {
    let file = |operand: &str| {
        files
            .iter()
            .find(|(name, _)| *name == operand)
            .map(|(_, path)| path.display().to_string())
    };
    let all =
        || files.iter().map(|(_, p)| p.display().to_string()).collect::<Vec<_>>().join(", ");
    let named = match error {
        AttentionError::Mismatch { left, right, .. }
        | AttentionError::Batch { left, right, .. } => match (file(left), file(right)) {
            (Some(l), Some(r)) if l != r => Some(format!("{l}, {r}")),
            (Some(l), _) => Some(l),
            (None, r) => r,
        },
        AttentionError::Empty { what, .. } | AttentionError::Shape { what, .. } => file(what),
        AttentionError::MaskShape { .. } => file("mask"),
        _ => None,
    };
    Failure::Data(format!("{}: {error}", named.unwrap_or_else(all)))
}

/// `(2, 3, 4)`, for summaries and messages (a single axis as NumPy writes it, `(5,)`).
pub fn shape_text(shape: &[usize]) -> String {
    npy::shape_text(shape)
}

/// Most panels `--png` draws in one image (one per batch item and head).
pub const MAX_PANELS: usize = 64;

/// Most tokens `--labels` can name: every label is drawn, and the heatmap grows to fit them.
pub const MAX_LABELS: usize = 64;

/// `--png-scale`: how the colours of `--png` map to the weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PngScale {
    /// 0 to 1, the same for every figure: a weight's colour says how much it is, and two
    /// figures compare. A row of L keys averages 1/L, so a long row is all pale.
    #[default]
    Fixed,
    /// Each query's row divided by its own largest weight and drawn from 0 to 1: the darkest
    /// cell of a row is its largest weight, whatever the row's length, so the small weights of
    /// a long row show. Colours no longer compare between rows; the numbers are ratios, so the
    /// cells are not annotated.
    Row,
}

impl PngScale {
    /// The label of the colour bar, which names the scale in the picture.
    pub fn colorbar_label(self) -> &'static str {
        match self {
            PngScale::Fixed => "attention weight",
            PngScale::Row => "weight / row max",
        }
    }

    /// What the summary line calls the picture.
    pub fn describe(self) -> &'static str {
        match self {
            PngScale::Fixed => "heatmap of the weights",
            PngScale::Row => "heatmap of the weights, each row scaled to its maximum",
        }
    }

    /// The values to draw: the weights themselves (fixed), or each row `(…, L_k)` divided by
    /// its largest entry (row; a row of zeros, every key masked, stays zero).
    pub fn apply(self, weights: &mut ArrayD<f64>) {
        if self == PngScale::Fixed {
            return;
        }
        let last = Axis(weights.ndim() - 1);
        for mut row in weights.lanes_mut(last) {
            let largest = row.iter().copied().fold(0.0, f64::max);
            if largest > 0.0 {
                row.mapv_inplace(|w| w / largest);
            }
        }
    }
}

/// What `--png` draws: the weights, which cells the mask allowed, and the token labels.
pub struct Picture<'a> {
    /// The PNG's path (from `--png`).
    pub path: &'a Path,
    /// `--labels`, comma-separated, one per token.
    pub labels: Option<&'a str>,
    /// The figure's title.
    pub title: String,
    /// Names the leading axes of a panel, e.g. `["batch", "head"]`.
    pub axes: &'a [&'a str],
    /// The colour scale (`--png-scale`).
    pub scale: PngScale,
}

impl Picture<'_> {
    /// Checks, from the weights' shape alone and so before anything is computed, that the
    /// picture can be drawn: at most [`MAX_PANELS`] panels, labels that fit, and a picture,
    /// as the figures' layout measures it, within [`figures::MAX_SIDE`] pixels a side.
    pub fn check(&self, weights_shape: &[usize]) -> Result<(), Failure> {
        let shown = self.path.display();
        let n = weights_shape.len();
        let (l_q, l_k) = (weights_shape[n - 2], weights_shape[n - 1]);
        self.token_labels(l_q, l_k)?;
        let panels: usize = weights_shape[..n - 2].iter().product();
        if panels > MAX_PANELS {
            return Err(Failure::Data(format!(
                "{shown}: the weights {} hold {panels} matrices, more than the {MAX_PANELS} one \
                 image can show; pass a smaller batch",
                shape_text(weights_shape)
            )));
        }
        let (width, height) = self.size(weights_shape)?;
        let side = figures::MAX_SIDE;
        if width > side || height > side {
            return Err(Failure::Data(format!(
                "{shown}: the weights {} would make a picture of {width} × {height} pixels \
                 ({panels} panel(s) of {l_q} queries by {l_k} keys, at least {PNG_MIN_CELL} \
                 pixels a cell, with titles and labels), more than the figures' limit of \
                 {side} pixels a side; leave out --png (--view or --weights show larger \
                 weights), or pass fewer tokens or a smaller batch",
                shape_text(weights_shape),
            )));
        }
        Ok(())
    }

    /// The size in pixels of the picture of weights of this shape, measured by the figures'
    /// own layout ([`figures::HeatmapGrid::size`]) as [`Picture::render`] would draw it, with
    /// a masked cell counted in (its legend only widens the colour bar).
    fn size(&self, weights_shape: &[usize]) -> Result<(u32, u32), Failure> {
        let n = weights_shape.len();
        let (l_q, l_k) = (weights_shape[n - 2], weights_shape[n - 1]);
        let labels = self.token_labels(l_q, l_k)?;
        let panels: usize = weights_shape[..n - 2].iter().product();
        let grid = HeatmapGrid::new()
            .title(self.title.clone())
            .range(ValueRange::Fixed(0.0, 1.0))
            .colorbar_label(self.scale.colorbar_label())
            .mask_mark("0");
        let grid = if self.scale == PngScale::Fixed { grid } else { grid.annotate(false) };
        // One matrix is drawn as a heatmap: a grid of one untitled panel, the same layout.
        let sizes: Vec<PanelSize> = (0..panels.max(1))
            .map(|i| {
                let mut size = PanelSize::new(l_q, l_k).masked(true);
                if n > 2 {
                    size = size.title(self.panel_title(weights_shape, i));
                }
                if let Some(labels) = &labels {
                    size = size.labels(labels);
                }
                size
            })
            .collect();
        match grid.size(&sizes) {
            Ok(size) => Ok(size),
            Err(figures::FigureError::TooLarge { width, height, .. }) => Ok((width, height)),
            Err(e) => Err(Failure::Data(format!("{}: cannot draw: {e}", self.path.display()))),
        }
    }

    /// Draws weights `(…, L_q, L_k)` as one heatmap (no leading axes) or a grid with one panel
    /// per leading index; `allowed` (broadcast to the weights' shape) marks masked cells, whose
    /// weight is exactly 0, with a hatch and a "0".
    pub fn render<A: Float>(
        &self,
        weights: &ArrayD<A>,
        allowed: Option<ArrayViewD<'_, bool>>,
    ) -> Result<Vec<u8>, Failure> {
        let shown = self.path.display();
        let n = weights.ndim();
        let (l_q, l_k) = (weights.shape()[n - 2], weights.shape()[n - 1]);
        self.check(weights.shape())?;
        let labels = self.token_labels(l_q, l_k)?;
        let panels: usize = weights.shape()[..n - 2].iter().product();
        let mut weights =
            weights.mapv(|w| w.to_f64().expect("a finite float converts to f64"));
        self.scale.apply(&mut weights);
        let label = self.scale.colorbar_label();
        let annotate = self.scale == PngScale::Fixed;
        let allowed = match allowed {
            None => None,
            Some(a) => Some(
                a.broadcast(weights.shape())
                    .ok_or_else(|| {
                        Failure::Data(format!(
                            "{shown}: the mask {} does not broadcast to the weights {}",
                            shape_text(a.shape()),
                            shape_text(weights.shape())
                        ))
                    })?
                    .to_owned(),
            ),
        };
        let drawn = if n == 2 {
            let mut map =
                Heatmap::new(&weights.view().into_dimensionality::<Ix2>().expect("2 axes"))
                    .title(self.title.clone())
                    .range(ValueRange::Fixed(0.0, 1.0))
                    .colorbar_label(label)
                    .mask_mark("0");
            if !annotate {
                map = map.annotate(false);
            }
            if let Some(labels) = &labels {
                map = map.labels(labels);
            }
            if let Some(allowed) = &allowed {
                map =
                    map.allowed(&allowed.view().into_dimensionality::<Ix2>().expect("2 axes"));
            }
            map.to_png()
        } else {
            let flat = weights.to_shape((panels, l_q, l_k)).expect("same number of elements");
            let flat_allowed = allowed
                .as_ref()
                .map(|a| a.to_shape((panels, l_q, l_k)).expect("same number of elements"));
            let mut grid = HeatmapGrid::new()
                .title(self.title.clone())
                .range(ValueRange::Fixed(0.0, 1.0))
                .colorbar_label(label)
                .mask_mark("0");
            if !annotate {
                grid = grid.annotate(false);
            }
            for (i, matrix) in flat.axis_iter(Axis(0)).enumerate() {
                let mut panel =
                    Panel::new(&matrix).title(self.panel_title(weights.shape(), i));
                if let Some(labels) = &labels {
                    panel = panel.labels(labels);
                }
                if let Some(allowed) = &flat_allowed {
                    panel = panel.allowed(&allowed.index_axis(Axis(0), i));
                }
                grid = grid.panel(panel);
            }
            grid.to_png()
        };
        drawn.map_err(|e| Failure::Data(format!("{shown}: cannot draw: {e}")))
    }

    fn token_labels(&self, l_q: usize, l_k: usize) -> Result<Option<Vec<String>>, Failure> {
        let Some(labels) = parse_labels(self.labels, l_q, l_k)? else {
            return Ok(None);
        };
        if labels.len() > MAX_LABELS {
            return Err(Failure::Data(format!(
                "--labels: {} labels are more than the {MAX_LABELS} a heatmap can show legibly; \
                 leave --labels out and the tokens are numbered",
                labels.len()
            )));
        }
        Ok(Some(labels))
    }

    /// "batch 1, head 0" for the `i`-th matrix of weights with leading shape `shape[..n-2]`.
    fn panel_title(&self, shape: &[usize], mut i: usize) -> String {
        let lead = &shape[..shape.len() - 2];
        let mut index = vec![0; lead.len()];
        for (slot, &size) in index.iter_mut().zip(lead).rev() {
            *slot = i % size;
            i /= size;
        }
        let parts: Vec<String> =
            self.axes.iter().zip(&index).map(|(name, k)| format!("{name} {k}")).collect();
        parts.join(", ")
    }
}

/// `--labels`, split at the commas and trimmed, checked against the weights' `L_q` and `L_k`
/// (one label per token, so `L_q = L_k`).
fn parse_labels(
    text: Option<&str>,
    l_q: usize,
    l_k: usize,
) -> Result<Option<Vec<String>>, Failure> {
    let Some(text) = text else {
        return Ok(None);
    };
    let labels: Vec<String> = text.split(',').map(|l| l.trim().to_string()).collect();
    if labels.len() != l_q || labels.len() != l_k {
        let shape = if l_q == l_k {
            format!("L = {l_q} tokens")
        } else {
            format!("L_q = {l_q} queries and L_k = {l_k} keys")
        };
        return Err(Failure::Data(format!(
            "--labels: {} labels given but the weights have {shape}",
            labels.len()
        )));
    }
    Ok(Some(labels))
}

/// Most weights one `--view` page holds (about 6 bytes each in the page): 2²², a page of
/// about 25 MB, which a browser still opens (e.g. 16 heads of 512 × 512 tokens).
pub const MAX_VIEW_WEIGHTS: usize = 1 << 22;

/// What `--view` writes: one self-contained HTML page with an interactive head view of the
/// weights (`figures::HeadView`).
pub struct View<'a> {
    /// The page's path (from `--view`).
    pub path: &'a Path,
    /// `--labels`, comma-separated, one per token.
    pub labels: Option<&'a str>,
    /// The view's title.
    pub title: String,
    /// Names the leading axes of the weights, e.g. `["batch", "head"]`.
    pub axes: &'a [&'a str],
}

impl View<'_> {
    /// Checks, from the weights' shape alone and so before anything is computed, that the
    /// page can show them: at most [`MAX_VIEW_WEIGHTS`] weights, and labels that fit.
    pub fn check(&self, weights_shape: &[usize]) -> Result<(), Failure> {
        let n = weights_shape.len();
        let count = weights_shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if count.is_none_or(|c| c > MAX_VIEW_WEIGHTS) {
            return Err(Failure::Data(format!(
                "{}: the weights {} hold {} values, more than the {MAX_VIEW_WEIGHTS} one page \
                 can show; pass fewer tokens or a smaller batch",
                self.path.display(),
                shape_text(weights_shape),
                count.map_or("more than 2^64".to_string(), |c| c.to_string())
            )));
        }
        parse_labels(self.labels, weights_shape[n - 2], weights_shape[n - 1])?;
        Ok(())
    }

    /// The page for weights `(…, L_q, L_k)`: with no leading axis one matrix; with one, its
    /// matrices are the view's heads (named by the axis); with two, the first picks the
    /// "layer" (e.g. the batch item) and the second the head.
    pub fn render<A: Float>(&self, weights: &ArrayD<A>) -> Result<Vec<u8>, Failure> {
        let shown = self.path.display();
        let n = weights.ndim();
        let (l_q, l_k) = (weights.shape()[n - 2], weights.shape()[n - 1]);
        self.check(weights.shape())?;
        let (queries, keys) = match parse_labels(self.labels, l_q, l_k)? {
            Some(labels) => (labels.clone(), labels),
            None => (
                (0..l_q).map(|i| i.to_string()).collect(),
                (0..l_k).map(|j| j.to_string()).collect(),
            ),
        };
        let layers: usize = if n == 4 { weights.shape()[0] } else { 1 };
        let heads: usize = weights.shape()[..n - 2].iter().product::<usize>() / layers;
        let weights = weights
            .mapv(|w| w.to_f64().expect("a finite float converts to f64"))
            .into_shape_with_order((layers, heads, l_q, l_k))
            .expect("same number of elements");
        let (layer_name, head_name) = match self.axes {
            [layer, head] => (*layer, *head),
            [head] => ("layer", *head),
            _ => ("layer", "head"),
        };
        let mut view = HeadView::new("view", &queries, &keys)
            .title(&self.title)
            .axis_names(layer_name, head_name);
        let cannot =
            |e: figures::FigureError| Failure::Data(format!("{shown}: cannot draw: {e}"));
        for (b, layer) in weights.outer_iter().enumerate() {
            let label =
                if n == 4 { format!("{layer_name} {b}") } else { "weights".to_string() };
            view = view.layer(&label, layer).map_err(cannot)?;
        }
        Ok(view.to_html().map_err(cannot)?.into_bytes())
    }
}

/// What the summary line says about the files a run wrote, e.g.
/// `wrote out.npy (output (6, 8)) and w.npy (weights (6, 6))`.
pub fn wrote(written: &[(String, String)]) -> String {
    let parts: Vec<String> =
        written.iter().map(|(path, what)| format!("{path} ({what})")).collect();
    format!("wrote {}", parts.join(" and "))
}
