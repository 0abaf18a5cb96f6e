//! Part II, chapter 9 (*Where is each word? Position*): why attention cannot tell the order of
//! its tokens, and the three answers the chapter compares.
//!
//! - [`absolute`]: the proof of order-blindness ([`permute_rows`], [`permute_weights`]) and
//!   the positions added to the input: [`sinusoidal`] (with [`shift_matrix`], the rotation
//!   RoPE builds on) and [`LearnedPositions`], through [`add_positions`]. Its items are also
//!   here, one step up (`attention::position::sinusoidal`).
//! - [`rope`]: rotary position embeddings, which rotate the queries and keys.
//! - [`alibi`]: linear biases on the scores.

pub mod absolute;
pub mod alibi;
pub mod rope;

pub use absolute::*;
