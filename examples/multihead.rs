//! Multi-head self-attention on your own tensors: reads X and W_Q, W_K, W_V, W_O from NumPy
//! `.npy` files and writes the output (and every head's weights).
//!
//! ```text
//! cargo run --release --example multihead -- --x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy \
//!     --wo WO.npy --heads H [--kv-heads G] [--rope [--rope-base B]] \
//!     [--mask causal | --mask window:W | --mask M.npy] [--decode] --out OUT.npy \
//!     [--weights W.npy] [--png HEATMAP.png] [--view VIEW.html] [--labels "my,name,is,Aj"]
//! ```
//!
//! - X is `(L, d_model)` or `(batch, L, d_model)`; W_Q and W_O are `(d_model, d_model)`, W_K
//!   and W_V `(d_model, G·d_head)` with `d_head = d_model / H` (G = H without `--kv-heads`),
//!   all applied as `X · W` (a PyTorch `nn.Linear` weight must be transposed first; see
//!   `attention::multihead` for `nn.MultiheadAttention`'s `in_proj_weight`).
//! - H must divide `d_model` and G must divide H: key/value head j serves query heads
//!   `j·H/G … (j+1)·H/G − 1` (`attention::gqa`).
//! - `--rope` rotates every head's q and k (rotate-half layout, positions 0 … L−1, base B,
//!   10000 by default; `attention::rope`); `d_head` must be even.
//! - M is bool `(L, L)` or `(batch, L, L)`, `true` = may attend; `window:W` lets query i see
//!   keys j with `0 ≤ i − j < W`.
//! - `--decode` computes the same result token by token through a KV cache
//!   (`attention::decode`); it is causal (or windowed) and takes no mask file.
//! - OUT has X's shape; W is `(heads, L, L)` or `(batch, heads, L, L)`.
//! - `--png HEATMAP.png` draws every head's weights (one panel per batch item and head, one shared
//!   colour scale), masked cells marked; `--labels` names the tokens, one per token.
//! - `--view VIEW.html` writes one self-contained HTML page that shows every head's weights
//!   interactively (the book's head view, offline): pick a batch item and a head, or all
//!   heads in one colour each, and point at a token to see its weights as lines or as a
//!   matrix.
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
