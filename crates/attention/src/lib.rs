//! Self-attention from first principles: the math of the book *Attention, Step by Step*.
//!
//! Every concept the book teaches is one module here, and the modules sit in one folder per
//! part of the book: [`layer`] (Part I, chapters 1–7), [`fast`] (chapter 8), [`position`]
//! (chapter 9), [`generation`] (chapter 10), [`training`] (Part III, chapters 11–12) and
//! [`model`] (Part IV, chapter 13); each folder's `mod.rs` says which chapters it serves. Every
//! module the chapters name is also re-exported here, one step from the root (`attention::mask::Mask`,
//! `attention::learn::train`), and the table below, in the order of the chapters, is the map.
//! The chapters include this code by anchor (`// ANCHOR: name` comments; each file lists its
//! anchors in its first lines), so what a reader sees is what the tests run.
//!
//! | book chapter | module (folder) | what it holds |
//! |---|---|---|
//! | Input embeddings | [`embeddings`] (`layer/`) | [`Vocabulary`](embeddings::Vocabulary), [`EmbeddingTable`](embeddings::EmbeddingTable): sentence → `X: (L, d_model)` |
//! | Queries, keys and values | [`projection`] (`layer/`) | [`Linear`](projection::Linear): `X · W` (and `+ b` in chapter 13) |
//! | Scores, scaling and variance | [`scores`] (`layer/`) | `Q·Kᵀ`, `/ √d_k`, [`mean`](scores::mean), [`variance`](scores::variance) |
//! | Scores, scaling and variance | [`stats`] (`layer/`) | [`entropy`](stats::entropy), [`softmax_jacobian`](stats::softmax_jacobian), [`measure_scaling`](stats::measure_scaling): what the size of the scores does to softmax |
//! | Masking | [`mask`] (`layer/`) | [`Mask`](mask::Mask): causal, padding, arbitrary; `true` = may attend |
//! | Softmax | [`softmax`] (`layer/`) | stable row softmax (and a naive one, to see it fail) |
//! | Input embeddings, Softmax, Multi-head attention | [`sdpa`] (`layer/`) | [`single_query`](sdpa::single_query), [`sdpa`](sdpa::sdpa), [`sdpa_batched`](sdpa::sdpa_batched) |
//! | Queries, keys and values, The complete layer | [`self_attention`] (`layer/`) | [`SelfAttention`](self_attention::SelfAttention): `W_Q`, `W_K`, `W_V`; cross-attention |
//! | Multi-head attention | [`multihead`] (`layer/`) | [`MultiHeadAttention`](multihead::MultiHeadAttention), [`split_heads`](multihead::split_heads), [`merge_heads`](multihead::merge_heads) |
//! | Attention at scale | [`tiled`] (`fast/`) | [`online_softmax`](tiled::online_softmax), [`attend_block_reference`](tiled::attend_block_reference) (one block, line by line as the math), [`tiled_sdpa`](tiled::tiled_sdpa), [`tiled_sdpa_batched`](tiled::tiled_sdpa_batched): no `L_q × L_k` matrix |
//! | Attention at scale | [`kernel`] (`fast/`) | [`PackedHead`](kernel::PackedHead), [`scores_panel`](kernel::scores_panel), [`pv_panel`](kernel::pv_panel), [`exp2_f32`](kernel::exp2_f32), [`exp_f32`](kernel::exp_f32), [`Simd`](kernel::Simd): the tiled path's inner loops, for AVX-512, AVX2 or any processor |
//! | Where is each word? Position | [`position`] (`position/absolute.rs`) | [`permute_rows`](position::permute_rows), [`sinusoidal`](position::sinusoidal), [`shift_matrix`](position::shift_matrix), [`LearnedPositions`](position::LearnedPositions), [`add_positions`](position::add_positions): order for a layer that has none |
//! | Where is each word? Position | [`rope`] (`position/`) | [`Rope`](rope::Rope), [`RopeLayout`](rope::RopeLayout), [`layout_permutation`](rope::layout_permutation): rotary position embeddings, both layouts |
//! | Where is each word? Position | [`alibi`] (`position/`) | [`alibi_slopes`](alibi::alibi_slopes), [`alibi_bias`](alibi::alibi_bias): linear biases on the scores |
//! | Generating one token at a time | [`gqa`] (`generation/`) | [`sdpa_gqa`](gqa::sdpa_gqa), [`GroupedQueryAttention`](gqa::GroupedQueryAttention): `H` query heads sharing `G` key/value heads (MHA, GQA, MQA) |
//! | Generating one token at a time | [`decode`] (`generation/`) | [`KvCache`](decode::KvCache) (full or sliding-window), the prompt's prefill and one decoding step ([`GroupedQueryAttention::prefill`](gqa::GroupedQueryAttention::prefill), [`step`](gqa::GroupedQueryAttention::step)), [`kv_cache_bytes_per_token`](decode::kv_cache_bytes_per_token) |
//! | Gradients | [`grad`] (`training/`) | [`softmax_backward`](grad::softmax_backward), [`sdpa_backward`](grad::sdpa_backward), [`MultiHeadAttention::backward`](multihead::MultiHeadAttention::backward): the backward pass, by hand |
//! | Gradients, Watching attention learn | [`exact`] (`training/`) | [`matmul`](exact::matmul) in a fixed order, [`exp`](exact::exp) and [`ln`](exact::ln) from `libm`, [`sdpa`](exact::sdpa): the same bits on every machine |
//! | Gradients | [`tiled_grad`] (`training/`) | [`tiled_sdpa_with_lse`](tiled_grad::tiled_sdpa_with_lse), [`tiled_sdpa_backward`](tiled_grad::tiled_sdpa_backward): the FlashAttention-2 backward, weights recomputed tile by tile, no `L_q × L_k` matrix |
//! | Watching attention learn | [`dropout`] (`training/`) | [`Dropout`](dropout::Dropout), [`apply_scale`](dropout::apply_scale): attention dropout with inverted scaling `1/(1 − p)` |
//! | Watching attention learn | [`learn`] (`training/`) | [`TinyTransformer`](learn::TinyTransformer), [`cross_entropy`](learn::cross_entropy), [`Adam`](learn::Adam), [`Task`](learn::Task), [`train`](learn::train), [`position_blind_ceiling`](learn::position_blind_ceiling): a tiny model trained by hand |
//! | Inside a real model | [`layer_norm`] (`model/`) | [`LayerNorm`](layer_norm::LayerNorm): `(x − mean)/√(var + ε)·γ + β` over each token |
//! | Inside a real model | [`feed_forward`] (`model/`) | [`gelu`](feed_forward::gelu) (exact, with `erf`), [`FeedForward`](feed_forward::FeedForward): `GELU(x·W₁ + b₁)·W₂ + b₂` |
//! | Inside a real model | [`encoder`] (`model/`) | [`EncoderLayer`](encoder::EncoderLayer): BERT's post-LN layer, attention and feed-forward with residuals and layer norms |
//! | Inside a real model | [`pooling`] (`model/`) | [`mean_pool`](pooling::mean_pool), [`l2_normalize`](pooling::l2_normalize), [`cosine_similarity`](pooling::cosine_similarity): from token vectors to a sentence embedding |
//! | Inside a real model | [`inspect`] (`model/`) | [`pattern_score`](inspect::pattern_score), [`Pattern`](inspect::Pattern), [`mean_entropy`](inspect::mean_entropy): what a head does, measured |
//!
//! Alongside: [`notebooks`] holds the numbers the seed notebooks printed (the tests and the
//! chapters reproduce them), [`AttentionError`] is the one error type, and [`Float`] is the
//! element type (`f32` or `f64`).
//!
//! # Conventions
//!
//! - A sequence is rows: `X: (L, d_model)`; scores and weights are `(L_q, L_k)`, row = query
//!   ("attending from"), column = key ("attending to"). Batches and heads are leading axes.
//! - Projections multiply on the right, `X · W` with `W: (d_in, d_out)`.
//! - Masks are boolean, `true` = may attend; blocked scores become −∞; a query with no
//!   visible key gets all-zero weights and a zero output.
//! - Functions that can be handed mismatched shapes return [`Result`], never panic.
//!
//! ```
//! use attention::{mask::Mask, sdpa::sdpa, notebooks::nb004};
//! use ndarray::arr2;
//!
//! let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
//! let att = sdpa(&q, &k, &v, Some(&Mask::causal(4))).unwrap();
//! let expected = arr2(&nb004::NEW_V);
//! assert!((att.output - expected).iter().all(|d| d.abs() < nb004::TOLERANCE));
//! ```

#![doc(test(attr(deny(warnings))))]
#![warn(missing_docs)]

pub mod error;
pub mod fast;
pub mod float;
pub mod generation;
pub mod gpt;
pub mod layer;
pub mod model;
#[rustfmt::skip] // the printed matrices stay one row per line, as the notebooks printed them
pub mod notebooks;
pub mod position;
mod shapes;
pub mod training;

// Every concept keeps the short path the chapters and the tools use (`attention::mask::Mask`,
// `attention::learn::train`): the folders above group the modules by part of the book, and these
// re-exports keep each module one step from the crate's root.
pub(crate) use layer::batched;
pub use layer::{embeddings, mask, multihead, projection, scores, sdpa, self_attention, softmax, stats};
pub use fast::{kernel, tiled};
pub use position::{alibi, rope};
pub use generation::{decode, gqa};
pub use training::{dropout, exact, grad, learn, tiled_grad};
pub use model::{encoder, feed_forward, inspect, layer_norm, pooling};

pub use error::{AttentionError, Result};
pub use float::Float;
