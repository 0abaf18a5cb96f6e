//! Chapter *Watching attention learn*: a tiny model, trained by hand, on tasks whose right
//! attention pattern is known in advance.
//!
//! The model, [`TinyTransformer`], is the book's layer with just enough around it to learn:
//! a token embedding, learned positions (which can be switched off), `N` multi-head
//! attention layers without a mask, each added back onto its input (the residual), and a
//! linear read-out with a bias that turns every row into one score per token of the
//! vocabulary. The loss is the cross-entropy of those scores ([`cross_entropy`]); every
//! gradient is written out by hand ([`TinyTransformer::backward`]) and a hand-written
//! [`Adam`] moves the parameters. [`train`] runs the whole loop on a [`Task`] and records
//! the loss, the accuracy on held-out sequences, and the attention weights of one fixed
//! input at chosen steps.
//!
//! Two tasks: [`Task::Reversal`] (the answer at position `i` is the token at `L − 1 − i`:
//! one layer must learn to look along the anti-diagonal) and [`Task::Induction`] (the answer
//! at a repeated token is the token that followed its previous occurrence: two layers, a
//! previous-token head and an induction head). Without positions the reversal cannot be
//! learned: the layer is permutation-equivariant (chapter *Where is each word?*), so equal
//! tokens get equal answers; [`position_blind_ceiling`] bounds what such a model can score
//! on a given set, and [`most_common_token_baseline`] is what it can expect. [`weight_on`]
//! measures how much of a head's attention lands where the answers are
//! ([`Task::sources`]), and [`heads_weight_on`] the same over a whole batch, for patterns
//! such as [`prefix_matching_sources`] and [`offset_sources`] (measured away from the answers
//! with [`away_from_answers`]);
//! [`TinyTransformer::copying_score`] and [`TinyTransformer::without_head`] test what a head
//! does with what it finds.
//!
//! # Reproducibility
//!
//! Training is a long chain of steps, each depending on the last, so a last-bit difference
//! grows into a different curve. Everything here is `f64`, every matrix product goes through
//! [`exact::matmul`] (a fixed order of summation, on every CPU), every
//! `exp` and `ln` through [`exact`] (the `libm` crate, not the system's), sums
//! are plain loops in a written order, no threads, and all randomness comes from seeded
//! `StdRng`s through `rand`'s integer and `Uniform` samplers (no normal sampler:
//! `rand_distr`'s ziggurat calls the system's `exp` in its wedge test and `ln` in its tail).
//! Two runs give the same bits, on any x86-64 machine.
//!
//! # Where each piece is
//!
//! | file | what it holds |
//! |---|---|
//! | `parts.rs` | the loss, the embedding, the positions' gradient and the read-out, each with its backward pass |
//! | `adam.rs` | the optimiser |
//! | `model.rs` | [`ModelConfig`], [`TinyTransformer`]: initialisation, forward, backward, update; [`Score`] |
//! | `tasks.rs` | [`Batch`], [`Task`], the position-blind ceiling and the majority baseline |
//! | `train.rs` | [`TrainConfig`], [`train`], what a run records |
//! | `probes.rs` | the measurements of what the heads learned |
//!
//! A training run's [`TrainConfig`] is read in one place, [`train`] (`train.rs`); everything it
//! calls takes the pieces it needs. Every item is reachable here, as `attention::learn::…`.
//! Each file lists its anchors in its first lines; this one holds `invalid_setting`.

use crate::error::AttentionError;

// ANCHOR: invalid_setting
fn invalid_setting(what: &str, problem: String) -> AttentionError {
    AttentionError::Invalid { what: what.into(), problem }
}
// ANCHOR_END: invalid_setting

mod adam;
mod model;
mod parts;
mod probes;
mod tasks;
#[cfg(test)]
mod tests;
mod train;

pub use adam::*;
pub use model::*;
pub use parts::*;
pub use probes::*;
pub use tasks::*;
pub use train::*;
