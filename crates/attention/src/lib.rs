//! Self-attention from first principles: the math of the book *Attention, Step by Step*.
//!
//! Every concept the book teaches is one module here, in the order of the chapters. The
//! chapters include this code by anchor (`// ANCHOR: name` comments; each module lists its
//! anchors in its first lines), so what a reader sees is what the tests run.
//!
//! | book chapter | module | what it holds |
//! |---|---|---|
//! | Input embeddings | [`embeddings`] | [`Vocabulary`](embeddings::Vocabulary), [`EmbeddingTable`](embeddings::EmbeddingTable): sentence → `X: (L, d_model)` |
//! | Queries, keys and values | [`projection`] | [`Linear`](projection::Linear): `X · W` (and `+ b` in chapter 13) |
//! | Scores, scaling and variance | [`scores`] | `Q·Kᵀ`, `/ √d_k`, [`mean`](scores::mean), [`variance`](scores::variance) |
//! | Scores, scaling and variance | [`stats`] | [`entropy`](stats::entropy), [`softmax_jacobian`](stats::softmax_jacobian), [`measure_scaling`](stats::measure_scaling): what the size of the scores does to softmax |
//! | Masking | [`mask`] | [`Mask`](mask::Mask): causal, padding, arbitrary; `true` = may attend |
//! | Softmax | [`softmax`] | stable row softmax (and a naive one, to see it fail) |
//! | Input embeddings, Softmax, Multi-head attention | [`sdpa`] | [`single_query`](sdpa::single_query), [`sdpa`](sdpa::sdpa), [`sdpa_batched`](sdpa::sdpa_batched) |
//! | Queries, keys and values, The complete layer | [`self_attention`] | [`SelfAttention`](self_attention::SelfAttention): `W_Q`, `W_K`, `W_V`; cross-attention |
//! | Multi-head attention | [`multihead`] | [`MultiHeadAttention`](multihead::MultiHeadAttention), [`split_heads`](multihead::split_heads), [`merge_heads`](multihead::merge_heads) |
//! | Attention at scale | [`tiled`] | [`online_softmax`](tiled::online_softmax), [`attend_block_reference`](tiled::attend_block_reference) (one block, line by line as the math), [`tiled_sdpa`](tiled::tiled_sdpa), [`tiled_sdpa_batched`](tiled::tiled_sdpa_batched): no `L_q × L_k` matrix |
//! | Attention at scale | [`kernel`] | [`PackedHead`](kernel::PackedHead), [`scores_panel`](kernel::scores_panel), [`pv_panel`](kernel::pv_panel), [`exp2_f32`](kernel::exp2_f32), [`exp_f32`](kernel::exp_f32), [`Simd`](kernel::Simd): the tiled path's inner loops, for AVX-512, AVX2 or any processor |
//! | Where is each word? Position | [`position`] | [`permute_rows`](position::permute_rows), [`sinusoidal`](position::sinusoidal), [`shift_matrix`](position::shift_matrix), [`LearnedPositions`](position::LearnedPositions), [`add_positions`](position::add_positions): order for a layer that has none |
//! | Where is each word? Position | [`rope`] | [`Rope`](rope::Rope), [`RopeLayout`](rope::RopeLayout), [`layout_permutation`](rope::layout_permutation): rotary position embeddings, both layouts |
//! | Where is each word? Position | [`alibi`] | [`alibi_slopes`](alibi::alibi_slopes), [`alibi_bias`](alibi::alibi_bias): linear biases on the scores |
//! | Generating one token at a time | [`gqa`] | [`sdpa_gqa`](gqa::sdpa_gqa), [`GroupedQueryAttention`](gqa::GroupedQueryAttention): `H` query heads sharing `G` key/value heads (MHA, GQA, MQA) |
//! | Generating one token at a time | [`decode`] | [`KvCache`](decode::KvCache) (full or sliding-window), the prompt's prefill and one decoding step ([`GroupedQueryAttention::prefill`](gqa::GroupedQueryAttention::prefill), [`step`](gqa::GroupedQueryAttention::step)), [`kv_cache_bytes_per_token`](decode::kv_cache_bytes_per_token) |
//! | Gradients | [`grad`] | [`softmax_backward`](grad::softmax_backward), [`sdpa_backward`](grad::sdpa_backward), [`MultiHeadAttention::backward`](multihead::MultiHeadAttention::backward): the backward pass, by hand |
//! | Gradients, Watching attention learn | [`exact`] | [`matmul`](exact::matmul) in a fixed order, [`exp`](exact::exp) and [`ln`](exact::ln) from `libm`, [`sdpa`](exact::sdpa): the same bits on every machine |
//! | Gradients | [`tiled_grad`] | [`tiled_sdpa_with_lse`](tiled_grad::tiled_sdpa_with_lse), [`tiled_sdpa_backward`](tiled_grad::tiled_sdpa_backward): the FlashAttention-2 backward, weights recomputed tile by tile, no `L_q × L_k` matrix |
//! | Watching attention learn | [`dropout`] | [`Dropout`](dropout::Dropout), [`apply_scale`](dropout::apply_scale): attention dropout with inverted scaling `1/(1 − p)` |
//! | Watching attention learn | [`learn`] | [`TinyTransformer`](learn::TinyTransformer), [`cross_entropy`](learn::cross_entropy), [`Adam`](learn::Adam), [`Task`](learn::Task), [`train`](learn::train), [`position_blind_ceiling`](learn::position_blind_ceiling): a tiny model trained by hand |
//! | Inside a real model | [`layer_norm`] | [`LayerNorm`](layer_norm::LayerNorm): `(x − mean)/√(var + ε)·γ + β` over each token |
//! | Inside a real model | [`feed_forward`] | [`gelu`](feed_forward::gelu) (exact, with `erf`), [`FeedForward`](feed_forward::FeedForward): `GELU(x·W₁ + b₁)·W₂ + b₂` |
//! | Inside a real model | [`encoder`] | [`EncoderLayer`](encoder::EncoderLayer): BERT's post-LN layer, attention and feed-forward with residuals and layer norms |
//! | Inside a real model | [`pooling`] | [`mean_pool`](pooling::mean_pool), [`l2_normalize`](pooling::l2_normalize), [`cosine_similarity`](pooling::cosine_similarity): from token vectors to a sentence embedding |
//! | Inside a real model | [`inspect`] | [`pattern_score`](inspect::pattern_score), [`Pattern`](inspect::Pattern), [`mean_entropy`](inspect::mean_entropy): what a head does, measured |
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

pub mod alibi;
mod batched;
pub mod decode;
pub mod dropout;
pub mod embeddings;
pub mod encoder;
pub mod error;
pub mod exact;
pub mod feed_forward;
pub mod float;
pub mod gqa;
pub mod grad;
pub mod inspect;
pub mod kernel;
pub mod layer_norm;
pub mod learn;
pub mod mask;
pub mod multihead;
#[rustfmt::skip] // the printed matrices stay one row per line, as the notebooks printed them
pub mod notebooks;
pub mod pooling;
pub mod position;
pub mod projection;
pub mod rope;
pub mod scores;
pub mod sdpa;
pub mod self_attention;
mod shapes;
pub mod softmax;
pub mod stats;
pub mod tiled;
pub mod tiled_grad;

pub use error::{AttentionError, Result};
pub use float::Float;
