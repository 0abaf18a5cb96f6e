//! Part VI, chapter 15 (*A model that writes*): a character-level GPT, GPT-2's decoder at a
//! small size, trained from scratch with every backward pass written out by hand.
//!
//! - [`config`]: the model's sizes ([`GptConfig`](config::GptConfig)), its parameter and
//!   FLOP counts.
//! - [`weights`]: the weights ([`Gpt`](weights::Gpt)), nanoGPT's initialisation, and every
//!   tensor under its Hugging Face GPT-2 name.
//! - [`ops`]: the pieces a decoder adds to chapter 13's: layer norm's and GELU's backward
//!   passes, the causal attention of one batch, cross-entropy over the vocabulary.
//! - [`data`]: characters as tokens ([`CharVocab`](data::CharVocab)) and random batches.
//! - [`forward`]: the whole model, forward and backward.
//! - [`optim`]: AdamW with decoupled weight decay, warm-up then cosine decay, and clipping
//!   by the global norm.
//!
//! A gradient is named `grad_` and what it is the gradient of, as in Part III.

pub mod config;
pub mod data;
pub mod forward;
pub mod ops;
pub mod optim;
pub mod weights;

#[cfg(test)]
mod tests;
