//! Part I of the book, chapters 1–7 (*Input embeddings* to *The complete layer*): one
//! attention layer, built up one step at a time. Its [`sdpa`] is also the plain reference
//! that chapter 8's fast path is tested against.
//!
//! | chapter | module |
//! |---|---|
//! | 1. Input embeddings | [`embeddings`], [`sdpa::single_query`] |
//! | 2. Queries, keys and values | [`projection`], [`self_attention`] |
//! | 3. Scores, scaling and variance | [`scores`], [`stats`] |
//! | 4. Masking | [`mask`] |
//! | 5. Softmax | [`softmax`], [`sdpa`] |
//! | 6. Multi-head attention | [`multihead`] (and the private `batched` products) |
//! | 7. The complete layer | [`self_attention`] (cross-attention), [`multihead`] |
//!
//! Chapter 8's fast path, which gives the same answers without the `L_q × L_k` matrix, is in
//! [`crate::fast`].

pub(crate) mod batched;
pub mod embeddings;
pub mod mask;
pub mod multihead;
pub mod projection;
pub mod scores;
pub mod sdpa;
pub mod self_attention;
pub mod softmax;
pub mod stats;
