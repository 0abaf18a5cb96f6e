//! Part II, chapter 10 (*Generating one token at a time*): attention as a decoder runs it.
//!
//! - [`gqa`]: `H` query heads sharing `G` key/value heads (multi-head, grouped-query and
//!   multi-query attention are its three settings), with the prompt's prefill and one decoding
//!   step.
//! - [`decode`]: the key/value cache, full or sliding-window, and what it costs per token.

pub mod decode;
pub mod gqa;
