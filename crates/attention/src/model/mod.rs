//! Part IV, chapter 13 (*Inside a real model*): the pieces of a transformer layer around
//! attention, as a real encoder (BERT's, run by the `pretrained` crate) arranges them, and the
//! measurements that tell what its heads do.
//!
//! - [`layer_norm`]: normalising each token's vector.
//! - [`feed_forward`]: GELU and the two-layer block that follows attention.
//! - [`encoder`]: BERT's post-LN layer, attention and feed-forward with residuals.
//! - [`pooling`]: from token vectors to one sentence vector.
//! - [`inspect`]: what a head does, measured on its weights.

pub mod encoder;
pub mod feed_forward;
pub mod inspect;
pub mod layer_norm;
pub mod pooling;
