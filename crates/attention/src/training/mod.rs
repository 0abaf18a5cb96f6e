//! Part III, chapters 11 (*Gradients*) and 12 (*Watching attention learn*): the backward pass
//! written out by hand, and a tiny model trained with it.
//!
//! | chapter | module |
//! |---|---|
//! | 11. Gradients | [`grad`] (softmax, attention and multi-head backward), [`tiled_grad`] (the FlashAttention-2 backward), [`exact`] (arithmetic with the same bits on every machine) |
//! | 12. Watching attention learn | [`dropout`], [`learn`] (the model, its pieces, Adam, the tasks, the training loop and the measurements of its heads) |
//!
//! A gradient is named `grad_` and what it is the gradient of: `grad_q`, `grad_k` and `grad_v`
//! are `∂ℓ/∂Q`, `∂ℓ/∂K` and `∂ℓ/∂V` (the chapters' `dQ`, `dK`, `dV`), `grad_o` is `∂ℓ/∂O`.
//! `d_k`, `d_v`, `d_model` and `d_head` are always widths, as in the rest of the book.

pub mod dropout;
pub mod exact;
pub mod grad;
pub mod learn;
pub mod tiled_grad;
