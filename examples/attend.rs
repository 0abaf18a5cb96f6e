//! Attention on your own tensors: reads Q, K, V (and a mask) from NumPy `.npy` files and
//! writes the output (and the weights, a heatmap, a head view, and with `--grad-out` the
//! gradients).
//!
//! ```text
//! cargo run --release --example attend -- --q Q.npy --k K.npy --v V.npy \
//!     [--mask causal | --mask M.npy] --out OUT.npy [--weights W.npy] \
//!     [--png HEATMAP.png] [--view VIEW.html] [--labels "my,name,is,Aj"] \
//!     [--grad-out DO.npy [--dq DQ.npy] [--dk DK.npy] [--dv DV.npy]] \
//!     [--impl plain|tiled] [--bench N]
//! ```
//!
//! - Q `(…, L_q, d_k)`, K `(…, L_k, d_k)`, V `(…, L_k, d_v)` with the same 0, 1 or 2 leading
//!   axes, all float32 or all float64.
//! - M is bool, `true` = may attend, of any shape that broadcasts to the weights
//!   `(…, L_q, L_k)` as PyTorch's `attn_mask` does (e.g. `(L_q, L_k)`, `(batch, 1, L_q, L_k)`).
//!   `--mask causal` lets query `i` see keys `0..=i`.
//! - OUT is `(…, L_q, d_v)` in the input dtype; W is `(…, L_q, L_k)`.
//! - `--png HEATMAP.png` draws the weights (one heatmap, or one panel per batch item and
//!   head), masked cells marked; `--labels "my,name,is,Aj"` names the tokens (one per token).
//! - `--view VIEW.html` writes one self-contained HTML page that shows the weights
//!   interactively (the book's head view, offline): pick a batch item and a head, or all heads
//!   in one colour each, and point at a token, with the mouse or the keyboard, to see its
//!   weights as lines or as a matrix. The tokens are numbered, or named by `--labels`.
//! - `--grad-out DO.npy` runs the backward pass too: given dO `(…, L_q, d_v)`, the gradient
//!   of a loss with respect to the output, it writes the gradients of `sum(O ∘ dO)` with
//!   respect to Q, K and V (PyTorch's `out.backward(dO)`) to `--dq`, `--dk` and `--dv`
//!   (at least one of them), each in its input's shape and dtype.
//! - `--impl plain` computes `sdpa_batched` (the chapters' code, which forms the weights)
//!   and the gradients with `sdpa_backward`; `--impl tiled` computes `tiled_sdpa_batched`
//!   (chapter 8: the output without the `L_q × L_k` matrix, on every core;
//!   `RAYON_NUM_THREADS=N` limits the threads) and the gradients with FlashAttention-2's
//!   `tiled_sdpa_backward`, without that matrix either. The default is plain when `--weights`,
//!   `--png` or `--view` asks for the weights (only the plain path forms them) or when
//!   `L_q · L_k < 65536` (256 × 256), and tiled otherwise, with or without gradients.
//! - `--bench N` runs the computation once to warm up, then N more times, and ends the
//!   summary with the line `median_ms=<number>`: the median time of those N runs for the
//!   attention computation alone (no file reading or writing), the backward included with
//!   `--grad-out`. The files are written once.
//!
//! `--help` describes every option. Bad data (a file missing, malformed or of the wrong
//! shape) stops the tool with one line `error: <file>: <problem>` and exit code 1; a bad
//! command line with clap's message and exit code 2; a signal while the outputs are written
//! with exit code 128 + its number. A run that fails changes no file (Appendix C of the book).

#[allow(dead_code)] // the module also holds the `multihead` tool
mod reader_tools;

fn main() -> std::process::ExitCode {
    reader_tools::main_with(reader_tools::attend::run)
}
