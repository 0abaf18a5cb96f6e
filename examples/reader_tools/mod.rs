//! What the reader tools `attend` and `multihead` share: argument parsing, loading `.npy`
//! files with checks, and writing results so that a failure leaves no partial file.
//!
//! Each tool's logic is a `run(args) -> Result<summary, message>` function, so the tests
//! (`tests/tools.rs`) call it directly; `main_with` turns it into a process: the summary on
//! stdout and exit code 0, or one line `error: <file>: <problem>` on stderr and exit code 1.

pub mod attend;
pub mod multihead;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use attention::{AttentionError, Float};
use figures::{Heatmap, HeatmapGrid, Panel, ValueRange};
use ndarray::{ArrayD, ArrayViewD, Axis, Dimension, Ix2};
use ndarray_npy::{ReadNpyError, ReadableElement, WritableElement, read_npy, write_npy};

/// Runs a tool on the process arguments: prints its summary, or `error: ...` and exits 1.
pub fn main_with(run: fn(&[String]) -> Result<String, String>) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `--name value` pairs, each option at most once, only the known ones.
pub struct Args {
    values: HashMap<String, String>,
}

impl Args {
    /// Parses `args` against the allowed option names (without `--`).
    pub fn parse(args: &[String], allowed: &[&str], usage: &str) -> Result<Args, String> {
        let mut values = HashMap::new();
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let name = arg
                .strip_prefix("--")
                .filter(|name| allowed.contains(name))
                .ok_or_else(|| format!("unknown argument {arg:?} (usage: {usage})"))?;
            let value = iter.next().ok_or_else(|| format!("--{name} needs a value (usage: {usage})"))?;
            if values.insert(name.to_string(), value.clone()).is_some() {
                return Err(format!("--{name} is given twice"));
            }
        }
        Ok(Args { values })
    }

    /// A required option.
    pub fn required(&self, name: &str, usage: &str) -> Result<&str, String> {
        self.optional(name).ok_or_else(|| format!("--{name} is required (usage: {usage})"))
    }

    /// An optional option.
    pub fn optional(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
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
    pub fn load(path: &str) -> Result<Tensor, String> {
        let tensor = match read::<f64>(path) {
            Ok(a) => Tensor::F64(a),
            Err(ReadNpyError::WrongDescriptor(_)) => match read::<f32>(path) {
                Ok(a) => Tensor::F32(a),
                Err(ReadNpyError::WrongDescriptor(desc)) => {
                    return Err(format!("{path}: dtype {desc} is not float32 or float64"));
                }
                Err(e) => return Err(read_error(path, e)),
            },
            Err(e) => return Err(read_error(path, e)),
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

/// Reads a boolean mask file.
pub fn load_bool(path: &str) -> Result<ArrayD<bool>, String> {
    read::<bool>(path).map_err(|e| match e {
        ReadNpyError::WrongDescriptor(desc) => format!("{path}: a mask must have dtype bool, not {desc}"),
        e => read_error(path, e),
    })
}

fn read<A: ReadableElement>(path: &str) -> Result<ArrayD<A>, ReadNpyError> {
    read_npy(path)
}

fn read_error(path: &str, error: ReadNpyError) -> String {
    match error {
        ReadNpyError::Io(e) => format!("{path}: cannot read: {e}"),
        e => format!("{path}: not a valid .npy file: {e}"),
    }
}

fn check_finite<A: Float>(path: &str, a: &ArrayD<A>) -> Result<(), String> {
    if let Some((index, x)) = a.indexed_iter().find(|(_, x)| !x.is_finite()) {
        let what = if x.is_nan() { "NaN" } else { "an infinite value" };
        return Err(format!("{path}: contains {what} at index {:?}", index.slice()));
    }
    Ok(())
}

/// Checks that every file has the dtype of the first one.
pub fn same_dtype(files: &[(&str, &Tensor)]) -> Result<(), String> {
    let (first, first_tensor) = files[0];
    for &(path, tensor) in &files[1..] {
        if tensor.dtype() != first_tensor.dtype() {
            return Err(format!(
                "{path}: dtype {} differs from {first}'s {} (all inputs must be float32 or all float64)",
                tensor.dtype(),
                first_tensor.dtype()
            ));
        }
    }
    Ok(())
}

/// Names the files behind the operands an [`AttentionError`] talks about.
pub fn explain(error: &AttentionError, files: &[(&str, &str)]) -> String {
    let file = |operand: &str| files.iter().find(|(name, _)| *name == operand).map(|(_, path)| path.to_string());
    let all = || files.iter().map(|(_, path)| *path).collect::<Vec<_>>().join(", ");
    let named = match error {
        AttentionError::Mismatch { left, right, .. } | AttentionError::Batch { left, right, .. } => {
            match (file(left), file(right)) {
                (Some(l), Some(r)) if l != r => Some(format!("{l}, {r}")),
                (Some(l), _) => Some(l),
                (None, r) => r,
            }
        }
        AttentionError::Empty { what, .. } | AttentionError::Shape { what, .. } => file(what),
        AttentionError::MaskShape { .. } => file("mask"),
        _ => None,
    };
    format!("{}: {error}", named.unwrap_or_else(all))
}

/// The output files of a run: every array is written to a temporary file beside its target,
/// and only once all were written are they renamed into place.
#[derive(Default)]
pub struct Outputs {
    written: Vec<(PathBuf, PathBuf)>,
}

impl Outputs {
    /// Writes `array` as `.npy` to a temporary file next to `path`.
    pub fn write<A: WritableElement, D: Dimension>(
        &mut self,
        path: &str,
        array: &ndarray::Array<A, D>,
    ) -> Result<(), String> {
        self.write_with(path, |temp| write_npy(temp, array).map_err(|e| e.to_string()))
    }

    /// Writes `bytes` (a PNG, say) to a temporary file next to `path`.
    pub fn write_bytes(&mut self, path: &str, bytes: &[u8]) -> Result<(), String> {
        self.write_with(path, |temp| std::fs::write(temp, bytes).map_err(|e| e.to_string()))
    }

    fn write_with(&mut self, path: &str, write: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
        let target = PathBuf::from(path);
        let name = target.file_name().ok_or_else(|| format!("{path}: not a file name"))?;
        let temp = target.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
        if let Err(e) = write(&temp) {
            let _ = std::fs::remove_file(&temp);
            self.discard();
            return Err(format!("{path}: cannot write: {e}"));
        }
        self.written.push((temp, target));
        Ok(())
    }

    /// Renames every temporary file into place.
    pub fn commit(mut self) -> Result<Vec<PathBuf>, String> {
        let written = std::mem::take(&mut self.written);
        let mut done = Vec::new();
        for (i, (temp, target)) in written.iter().enumerate() {
            if let Err(e) = std::fs::rename(temp, target) {
                for (temp, _) in &written[i..] {
                    let _ = std::fs::remove_file(temp);
                }
                for target in &done {
                    let _ = std::fs::remove_file(target);
                }
                return Err(format!("{}: cannot write: {e}", target.display()));
            }
            done.push(target.clone());
        }
        Ok(done)
    }

    fn discard(&mut self) {
        for (temp, _) in self.written.drain(..) {
            let _ = std::fs::remove_file(temp);
        }
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        self.discard();
    }
}

/// `(2, 3, 4)`, for summaries.
pub fn shape_text(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("({})", parts.join(", "))
}

/// Refuses an output path that is also an input (it would be replaced by the result).
pub fn distinct_outputs(inputs: &[&str], outputs: &[&str]) -> Result<(), String> {
    for out in outputs {
        if inputs.iter().any(|input| Path::new(input) == Path::new(out)) {
            return Err(format!("{out}: is also an input file; choose another output path"));
        }
    }
    Ok(())
}

/// Most panels `--png` draws in one image (one per batch item and head).
pub const MAX_PANELS: usize = 64;

/// What `--png` draws: the weights, which cells the mask allowed, and the token labels.
pub struct Picture<'a> {
    /// The PNG's path (from `--png`).
    pub path: &'a str,
    /// `--labels`, comma-separated, one per token.
    pub labels: Option<&'a str>,
    /// The figure's title.
    pub title: String,
    /// Names the leading axes of a panel, e.g. `["batch", "head"]`.
    pub axes: &'a [&'a str],
}

impl Picture<'_> {
    /// Draws weights `(…, L_q, L_k)` as one heatmap (no leading axes) or a grid with one panel
    /// per leading index; `allowed` (broadcast to the weights' shape) marks masked cells.
    pub fn render<A: Float>(&self, weights: &ArrayD<A>, allowed: Option<ArrayViewD<'_, bool>>) -> Result<Vec<u8>, String> {
        let n = weights.ndim();
        let (l_q, l_k) = (weights.shape()[n - 2], weights.shape()[n - 1]);
        let labels = self.token_labels(l_q, l_k)?;
        let panels: usize = weights.shape()[..n - 2].iter().product();
        if panels > MAX_PANELS {
            return Err(format!(
                "{}: the weights {} hold {panels} matrices, more than the {MAX_PANELS} one image can show; \
                 pass a smaller batch",
                self.path,
                shape_text(weights.shape())
            ));
        }
        let weights = weights.mapv(|w| w.to_f64().expect("a finite float converts to f64"));
        let allowed = match allowed {
            None => None,
            Some(a) => Some(
                a.broadcast(weights.shape())
                    .ok_or_else(|| {
                        format!(
                            "{}: the mask {} does not match the weights {}",
                            self.path,
                            shape_text(a.shape()),
                            shape_text(weights.shape())
                        )
                    })?
                    .to_owned(),
            ),
        };
        let drawn = if n == 2 {
            let mut map = Heatmap::new(&weights.view().into_dimensionality::<Ix2>().expect("2 axes"))
                .title(self.title.clone())
                .range(ValueRange::Fixed(0.0, 1.0))
                .colorbar_label("attention weight");
            if let Some(labels) = &labels {
                map = map.labels(labels);
            }
            if let Some(allowed) = &allowed {
                map = map.allowed(&allowed.view().into_dimensionality::<Ix2>().expect("2 axes"));
            }
            map.to_png()
        } else {
            let flat = weights.to_shape((panels, l_q, l_k)).expect("same number of elements");
            let flat_allowed =
                allowed.as_ref().map(|a| a.to_shape((panels, l_q, l_k)).expect("same number of elements"));
            let mut grid = HeatmapGrid::new()
                .title(self.title.clone())
                .range(ValueRange::Fixed(0.0, 1.0))
                .colorbar_label("attention weight");
            for (i, matrix) in flat.axis_iter(Axis(0)).enumerate() {
                let mut panel = Panel::new(&matrix).title(self.panel_title(weights.shape(), i));
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
        drawn.map_err(|e| format!("{}: cannot draw: {e}", self.path))
    }

    fn token_labels(&self, l_q: usize, l_k: usize) -> Result<Option<Vec<String>>, String> {
        let Some(text) = self.labels else { return Ok(None) };
        let labels: Vec<String> = text.split(',').map(|l| l.trim().to_string()).collect();
        if labels.len() != l_q || labels.len() != l_k {
            let shape = if l_q == l_k { format!("L = {l_q} tokens") } else { format!("L_q = {l_q} queries and L_k = {l_k} keys") };
            return Err(format!("--labels: {} labels given but the weights have {shape}", labels.len()));
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
        let parts: Vec<String> = self.axes.iter().zip(&index).map(|(name, k)| format!("{name} {k}")).collect();
        parts.join(", ")
    }
}

/// Refuses `--labels` without `--png` (it would be silently ignored).
pub fn labels_need_png(args: &Args) -> Result<(), String> {
    if args.optional("labels").is_some() && args.optional("png").is_none() {
        return Err("--labels only names the tokens of the --png heatmap; add --png FILE.png".to_string());
    }
    Ok(())
}
