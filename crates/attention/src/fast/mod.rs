//! Part I's cost, chapter 8 (*Attention at scale*): attention without the `L_q × L_k` matrix.
//!
//! [`tiled`] walks the keys in tiles with an online softmax (FlashAttention's forward pass) and
//! [`kernel`] holds its inner loops, written for the vector unit (AVX-512, AVX2 or plain Rust).
//! Together they give what [`crate::sdpa::sdpa`] gives, within a stated tolerance. The backward pass
//! of the same tiles is chapter 11's [`crate::tiled_grad`]; chapter 14 runs the tiled loop as a
//! GPU kernel (the `gpu` crate).

pub mod kernel;
pub mod tiled;
