//! Part VI, chapter 15 (*A model that writes*): a character-level GPT, GPT-2's decoder at a
//! small size, trained from scratch with every backward pass written out by hand.
//!
//! - [`config`]: the model's sizes ([`GptConfig`](config::GptConfig)), its parameter and
//!   FLOP counts.
//! - [`weights`]: the weights ([`Gpt`](weights::Gpt)), nanoGPT's initialisation, and every
//!   tensor under its Hugging Face GPT-2 name.
//! - [`ops`]: the pieces a decoder adds to chapter 13's: layer norm's and GELU's backward
//!   passes, the causal attention of one batch, cross-entropy over the vocabulary.
//! - [`data`]: characters as tokens ([`CharVocab`](data::CharVocab)), random batches, and
//!   the train/validation split.
//! - [`kernels`]: the operations the model is made of, in two arithmetics: [`Exact`](kernels::Exact)
//!   (the same bits everywhere) and [`Fast`](kernels::Fast) (`f32`, GEMM).
//! - [`forward`]: the whole model, forward and backward, written once for both.
//! - [`optim`]: AdamW with decoupled weight decay, warm-up then cosine decay, and clipping
//!   by the global norm.
//! - [`packed`]: the fast path serving chapter 13: weights packed once for products with few
//!   rows, and BERT's encoder layer on them ([`FastEncoderLayer`](packed::FastEncoderLayer)).
//!
//! - [`positions`]: learned, none, sinusoidal, RoPE (and its scalings) or ALiBi: chapter
//!   16's experiment.
//! - [`train`]: one training step, the batch split over the cores; the validation loss.
//! - [`sample`]: writing, one character at a time: temperature, top-k, top-p, min-p.
//! - [`generate`]: chapter 16's writing through the KV cache: prefill, then one token per
//!   step ([`Writer`](generate::Writer)).
//! - [`heads`]: what the trained model's heads do: patterns measured, heads removed.
//!
//! A gradient is named `grad_` and what it is the gradient of, as in Part III.

pub mod config;
pub mod data;
pub mod forward;
pub mod generate;
pub mod heads;
pub mod kernels;
pub mod ops;
pub mod optim;
pub mod packed;
pub mod positions;
pub mod sample;
pub mod train;
pub mod weights;

#[cfg(test)]
mod tests;
