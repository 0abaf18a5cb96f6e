//! Part III, chapters 11 (*Gradients*) and 12 (*Watching attention learn*): the backward pass
//! written out by hand, and a tiny model trained with it.
//!
//! | chapter | module |
//! |---|---|
//! | 11. Gradients | [`grad`] (softmax, attention and multi-head backward), [`tiled_grad`] (the FlashAttention-2 backward), [`exact`] (arithmetic with the same bits on every machine) |
//! | 12. Watching attention learn | [`dropout`], [`learn`] (the model, its pieces, Adam, the tasks, the training loop and the measurements of its heads) |


pub mod dropout;
pub mod exact;
pub mod grad;
pub mod learn;
pub mod tiled_grad;
