//! Multi-head self-attention on your own tensors: reads X and W_Q, W_K, W_V, W_O from NumPy
//! `.npy` files and writes the output (and every head's weights).
//!
//! ```text
//! cargo run --release --example multihead -- --x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy \
//!     --wo WO.npy --heads H [--mask causal | --mask M.npy] --out OUT.npy [--weights W.npy] \
//!     [--png HEATMAP.png [--labels "my,name,is,Aj"]]
//! ```
//!
//! - X is `(L, d_model)` or `(batch, L, d_model)`; each W is `(d_model, d_model)`, applied as
//!   `X · W` (a PyTorch `nn.Linear` weight must be transposed first; see
//!   `attention::multihead` for `nn.MultiheadAttention`'s `in_proj_weight`).
//! - H must divide `d_model`. M is bool `(L, L)` or `(batch, L, L)`, `true` = may attend.
//! - OUT has X's shape; W is `(heads, L, L)` or `(batch, heads, L, L)`.
//! - `--png HEATMAP.png` draws every head's weights (one panel per batch item and head, one shared
//!   colour scale), masked cells marked; `--labels` names the tokens, one per token.
//!
//! `--help` describes every option. Bad data (a file missing, malformed or of the wrong
//! shape) stops the tool with one line `error: <file>: <problem>` and exit code 1; a bad
//! command line with clap's message and exit code 2; a signal while the outputs are written
//! with exit code 128 + its number. A run that fails changes no file (Appendix C of the book).

#[allow(dead_code)] // the module also holds the `attend` tool
mod reader_tools;

fn main() -> std::process::ExitCode {
    reader_tools::main_with(reader_tools::multihead::run)
}
