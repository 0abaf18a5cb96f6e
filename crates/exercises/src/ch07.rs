//! Chapter 7, *The complete layer*: a decoder's mask for a padded batch, decoding one token
//! at a time, and a decoder step with self- and cross-attention.

use attention::Result;
use attention::mask::Mask;
use attention::sdpa::single_query;
use attention::self_attention::SelfAttention;
use ndarray::{Array2, ArrayRef2, s};

/// The mask of a decoder over a padded batch: causal **and** padding, shape
/// `(batch, len, len)`. Query `i` of item `b` may attend to key `j` iff `j ≤ i` and
/// `j < valid_lengths[b]`.
///
/// ```
/// use exercises::ch07::decoder_mask;
///
/// let m = decoder_mask(&[3, 1], 3).unwrap();
/// assert_eq!(m.shape(), &[2, 3, 3]);
/// assert!(m.allows(&[0, 2, 1]) && !m.allows(&[0, 1, 2]));   // causal
/// assert!(m.allows(&[1, 2, 0]) && !m.allows(&[1, 2, 1]));   // padding
/// ```
// ANCHOR: decoder_mask
pub fn decoder_mask(valid_lengths: &[usize], len: usize) -> Result<Mask> {
    Mask::causal(len).and(&Mask::padding(valid_lengths, len, len)?)
}
// ANCHOR_END: decoder_mask

/// Causal attention computed the way a decoder generates text: token `t`'s output from its
/// query and the keys and values of tokens `0..=t` only (what a KV cache holds), one token
/// after the other. The result equals `sdpa(q, k, v, Some(&Mask::causal(L)))`.
///
/// ```
/// use exercises::ch07::one_token_at_a_time;
/// use ndarray::array;
///
/// let x = array![[1.0, 0.0], [0.0, 1.0]];
/// let out = one_token_at_a_time(&x, &x, &x).unwrap();
/// assert_eq!(out.row(0), x.row(0)); // the first token sees only itself
/// ```
// ANCHOR: one_token_at_a_time
pub fn one_token_at_a_time(
    q: &ArrayRef2<f64>,
    k: &ArrayRef2<f64>,
    v: &ArrayRef2<f64>,
) -> Result<Array2<f64>> {
    let mut out = Array2::zeros((q.nrows(), v.ncols()));
    for t in 0..q.nrows() {
        let seen = s![..=t, ..]; // the cache after t steps: keys and values 0..=t
        let att = single_query(&q.row(t), &k.slice(seen), &v.slice(seen))?;
        out.row_mut(t).assign(&att.output);
    }
    Ok(out)
}
// ANCHOR_END: one_token_at_a_time

/// The attention half of a Transformer decoder block: causal self-attention over the
/// decoder's tokens `x_dec: (L_q, d_model)`, then cross-attention from that result to the
/// encoder's output `x_enc: (L_k, d_model)`. Returns `(L_q, d_v)` of the cross layer.
/// (A real block adds residual connections, normalisation and a feed-forward layer.)
///
/// ```
/// use exercises::ch07::decoder_step;
/// use attention::self_attention::SelfAttention;
/// use ndarray::Array2;
///
/// let own =
///     SelfAttention::new(Array2::<f64>::eye(2), Array2::eye(2), Array2::eye(2)).unwrap();
/// let cross = own.clone();
/// let out =
///     decoder_step(&own, &cross, &Array2::ones((3, 2)), &Array2::ones((5, 2))).unwrap();
/// assert_eq!(out.dim(), (3, 2));
/// ```
// ANCHOR: decoder_step
pub fn decoder_step(
    self_layer: &SelfAttention<f64>,
    cross_layer: &SelfAttention<f64>,
    x_dec: &ArrayRef2<f64>,
    x_enc: &ArrayRef2<f64>,
) -> Result<Array2<f64>> {
    let causal = Mask::causal(x_dec.nrows());
    let h = self_layer.forward(x_dec, Some(&causal))?.output; // (L_q, d_v): sees the past only
    Ok(cross_layer.cross(&h, x_enc, None)?.output) // every decoder token sees the whole source
}
// ANCHOR_END: decoder_step

#[cfg(test)]
mod tests {
    use super::*;
    use attention::notebooks::nb004;
    use attention::sdpa::sdpa;
    use ndarray::{Axis, arr2};
    use rand::{SeedableRng, rngs::StdRng};

    /// The largest absolute difference between two matrices.
    fn max_diff(a: &ArrayRef2<f64>, b: &ArrayRef2<f64>) -> f64 {
        a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn decoder_mask_is_both_masks() {
        let m = decoder_mask(&[4, 2, 0], 4).unwrap();
        for b in 0..3 {
            for i in 0..4 {
                for j in 0..4 {
                    let expected = j <= i && j < [4, 2, 0][b];
                    assert_eq!(m.allows(&[b, i, j]), expected, "({b}, {i}, {j})");
                }
            }
        }
        assert!(decoder_mask(&[5], 4).is_err());
    }

    #[test]
    fn one_token_at_a_time_reproduces_notebook_004() {
        let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
        let out = one_token_at_a_time(&q, &k, &v).unwrap();
        assert!(max_diff(&out, &arr2(&nb004::NEW_V)) < nb004::TOLERANCE);
        let full = sdpa(&q, &k, &v, Some(&Mask::causal(4))).unwrap().output;
        assert!(max_diff(&out, &full) < 1e-15);
        let unmasked = sdpa(&q, &k, &v, None).unwrap().output;
        assert!(max_diff(&out, &unmasked) > 0.1, "without the mask the answer differs");
    }

    #[test]
    fn decoder_step_ignores_future_decoder_tokens_but_sees_the_whole_source() {
        let mut rng = StdRng::seed_from_u64(9);
        let own = SelfAttention::<f64>::random(4, 4, 4, &mut rng).unwrap();
        let cross = SelfAttention::<f64>::random(4, 4, 4, &mut rng).unwrap();
        let x_dec = Array2::from_shape_fn((3, 4), |(i, j)| (i as f64 - j as f64) / 2.0);
        let x_enc = Array2::from_shape_fn((5, 4), |(i, j)| ((i * j) % 3) as f64 - 1.0);
        let out = decoder_step(&own, &cross, &x_dec, &x_enc).unwrap();
        assert_eq!(out.dim(), (3, 4));

        let mut later = x_dec.clone();
        later.row_mut(2).fill(7.0); // change the last decoder token
        let out_later = decoder_step(&own, &cross, &later, &x_enc).unwrap();
        assert!(max_diff(&out.slice(s![..2, ..]), &out_later.slice(s![..2, ..])) < 1e-15);
        assert!(
            max_diff(&out.row(2).insert_axis(Axis(0)), &out_later.row(2).insert_axis(Axis(0)))
                > 0.0
        );

        let mut source = x_enc.clone();
        source.row_mut(4).fill(3.0); // change the last source token: every row may move
        let out_source = decoder_step(&own, &cross, &x_dec, &source).unwrap();
        assert!(
            max_diff(
                &out.row(0).insert_axis(Axis(0)),
                &out_source.row(0).insert_axis(Axis(0))
            ) > 0.0
        );
    }
}
