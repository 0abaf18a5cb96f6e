//! Chapter 7, *The complete layer*: a decoder's mask for a padded batch, decoding one token
//! at a time, and a decoder step with self- and cross-attention.

use attention::Result;
use attention::mask::Mask;
use attention::notebooks::nb004;
use attention::sdpa::{sdpa, single_query};
use attention::self_attention::SelfAttention;
use ndarray::{Array2, Array3, ArrayRef2, Axis, Ix3, arr2, s};
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::{call, close, mask_difference};

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
/// after the other. It is `sdpa(q, k, v, Some(&Mask::causal(L)))` computed another way, and
/// must be: a masked key adds `exp(−∞) = 0` to the softmax sum and `0·vⱼ` to the output, and
/// adding an exact 0 changes nothing. Only the order of the softmax sum differs: ndarray adds
/// up 8 or more numbers in 8 interleaved partial sums, fewer from left to right. So the two
/// agree bit for bit below 8 tokens, and to a few units in the last place from 8 on.
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

/// Checks an answer to exercise 7.1 ([`decoder_mask`]): every entry of the mask for a batch
/// of valid lengths `[4, 2, 0]` and of `[3, 1]`, against "query `i` of item `b` may attend to
/// key `j` iff `j ≤ i` and `j < valid_lengths[b]`"; and an error for a valid length beyond
/// the sequence.
///
/// ```
/// use exercises::ch07::{check_decoder_mask, decoder_mask};
/// use attention::mask::Mask;
///
/// assert_eq!(check_decoder_mask(decoder_mask), Ok(()));
/// // The causal mask alone lets queries attend to padding.
/// assert!(check_decoder_mask(|_lengths, len| Ok(Mask::causal(len))).is_err());
/// ```
pub fn check_decoder_mask(
    decoder_mask: impl Fn(&[usize], usize) -> Result<Mask>,
) -> Result<(), String> {
    for (lengths, len) in [(vec![4, 2, 0], 4), (vec![3, 1], 3)] {
        let what = format!("decoder_mask(&{lengths:?}, {len})");
        let mask = call(&what, || decoder_mask(&lengths, len))?
            .map_err(|e| format!("{what} returned the error \"{e}\""))?;
        let expected = Array3::from_shape_fn((lengths.len(), len, len), |(b, i, j)| {
            j <= i && j < lengths[b]
        });
        if mask.shape() != expected.shape() {
            return Err(format!(
                "{what} has shape {:?}, expected (batch, len, len) = {:?}",
                mask.shape(),
                expected.shape()
            ));
        }
        let got = mask.as_array().into_dimensionality::<Ix3>().expect("three axes");
        for (b, &valid) in lengths.iter().enumerate() {
            let (got, expected) =
                (got.index_axis(Axis(0), b), expected.index_axis(Axis(0), b));
            if let Some(difference) = mask_difference(&got, &expected) {
                return Err(format!(
                    "{what}: item {b} has {valid} real tokens, so its query i may attend to \
                     key j iff j ≤ i and j < {valid}. For item {b} it {difference}"
                ));
            }
        }
    }
    let what = "decoder_mask(&[5], 4)";
    let result = call(what, || decoder_mask(&[5], 4))
        .map_err(|panic| format!("{panic}; it should return an error"))?;
    if let Ok(mask) = result {
        return Err(format!(
            "{what} returned a mask of shape {:?} instead of an error: 5 real tokens do not \
             fit in 4",
            mask.shape()
        ));
    }
    Ok(())
}

/// Checks an answer to exercise 7.2 ([`one_token_at_a_time`]): on notebook 004, its printed
/// new V (to the notebook's 8 decimals) and the causal `sdpa` (within `1e-15`); on 12 random
/// tokens with `d_k = 3` and `d_v = 5`, the causal `sdpa` within `1e-14`. (The two ways add up
/// the same numbers, but ndarray sums a row of 8 or more weights in another order than a
/// shorter one, so from 8 tokens on they may differ in the last bits.)
///
/// ```
/// use exercises::ch07::{check_one_token_at_a_time, one_token_at_a_time};
/// use attention::sdpa::sdpa;
///
/// assert_eq!(check_one_token_at_a_time(one_token_at_a_time), Ok(()));
/// // Every token sees every other one: no cache, no causality.
/// let all = |q: &_, k: &_, v: &_| sdpa(q, k, v, None).map(|att| att.output);
/// assert!(check_one_token_at_a_time(all).is_err());
/// ```
pub fn check_one_token_at_a_time(
    one_token_at_a_time: impl Fn(
        &ArrayRef2<f64>,
        &ArrayRef2<f64>,
        &ArrayRef2<f64>,
    ) -> Result<Array2<f64>>,
) -> Result<(), String> {
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    let what = "one_token_at_a_time(q, k, v) for notebook 004";
    let out = call(what, || one_token_at_a_time(&q, &k, &v))?
        .map_err(|e| format!("{what} returned the error \"{e}\""))?;
    let printed = arr2(&nb004::NEW_V);
    close(&format!("{what}, the notebook's new V,"), &out, &printed, nb004::TOLERANCE)?;
    let causal = sdpa(&q, &k, &v, Some(&Mask::causal(4))).map_err(|e| e.to_string())?;
    close(&format!("{what}, causal attention,"), &out, &causal.output, 1e-15)?;

    let mut rng = StdRng::seed_from_u64(72);
    let mut random =
        |rows, cols| Array2::from_shape_fn((rows, cols), |_| rng.random_range(-1.0..1.0));
    let (q, k, v) = (random(12, 3), random(12, 3), random(12, 5));
    let what = "one_token_at_a_time(q, k, v) for 12 tokens, d_k = 3 and d_v = 5";
    let out = call(what, || one_token_at_a_time(&q, &k, &v))?
        .map_err(|e| format!("{what} returned the error \"{e}\""))?;
    let causal = sdpa(&q, &k, &v, Some(&Mask::causal(12))).map_err(|e| e.to_string())?;
    close(&format!("{what}, causal attention,"), &out, &causal.output, 1e-14)?;
    Ok(())
}

/// Checks an answer to exercise 7.3 ([`decoder_step`]) on 3 decoder and 5 encoder tokens:
/// changing the last decoder token must leave the other rows as they were (within `1e-15`)
/// and move the last; changing the last encoder token must move row 0; and the result must
/// be cross-attention (no mask) from causal self-attention's output to the encoder's tokens,
/// within `1e-12`.
///
/// ```
/// use exercises::ch07::{check_decoder_step, decoder_step};
/// use attention::self_attention::SelfAttention;
///
/// assert_eq!(check_decoder_step(decoder_step), Ok(()));
/// // Self-attention without its causal mask: every row sees the future.
/// type Layer = SelfAttention<f64>;
/// let unmasked = |own: &Layer, cross: &Layer, x_dec: &_, x_enc: &_| {
///     Ok(cross.cross(&own.forward(x_dec, None)?.output, x_enc, None)?.output)
/// };
/// assert!(check_decoder_step(unmasked).is_err());
/// ```
pub fn check_decoder_step(
    decoder_step: impl Fn(
        &SelfAttention<f64>,
        &SelfAttention<f64>,
        &ArrayRef2<f64>,
        &ArrayRef2<f64>,
    ) -> Result<Array2<f64>>,
) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(9);
    let own = SelfAttention::<f64>::random(4, 4, 4, &mut rng).map_err(|e| e.to_string())?;
    let cross = SelfAttention::<f64>::random(4, 4, 4, &mut rng).map_err(|e| e.to_string())?;
    let x_dec = Array2::from_shape_fn((3, 4), |(i, j)| (i as f64 - j as f64) / 2.0);
    let x_enc = Array2::from_shape_fn((5, 4), |(i, j)| ((i * j) % 3) as f64 - 1.0);
    let run = |what: &str, x_dec: &Array2<f64>, x_enc: &Array2<f64>| {
        call(what, || decoder_step(&own, &cross, x_dec, x_enc))?
            .map_err(|e| format!("{what} returned the error \"{e}\""))
    };
    let what = "decoder_step(own, cross, x_dec, x_enc) with x_dec: (3, 4) and x_enc: (5, 4)";
    let out = run(what, &x_dec, &x_enc)?;
    if out.dim() != (3, 4) {
        return Err(format!(
            "{what} has shape {:?}, expected (3, 4): one row per decoder token (the queries \
             come from the decoder), d_v = 4 columns",
            out.dim()
        ));
    }

    let mut later = x_dec.clone();
    later.row_mut(2).fill(7.0); // change the last decoder token
    let out_later = run("decoder_step with the last decoder token changed", &later, &x_enc)?;
    let first_rows = |a: &Array2<f64>| a.slice(s![..2, ..]).to_owned();
    close(
        "rows 0 and 1 of decoder_step after changing decoder token 2 (they should not see it)",
        &first_rows(&out_later),
        &first_rows(&out),
        1e-15,
    )
    .map_err(|e| {
        e + "\nThe self-attention must be causal: tokens 0 and 1 cannot see token 2."
    })?;
    if out_later.row(2) == out.row(2) {
        return Err(format!(
            "row 2 of decoder_step stayed {} when decoder token 2 itself changed",
            out.row(2)
        ));
    }

    let mut source = x_enc.clone();
    source.row_mut(4).fill(3.0); // change the last source token: every row may move
    let out_source = run("decoder_step with the last encoder token changed", &x_dec, &source)?;
    if out_source.row(0) == out.row(0) {
        return Err(format!(
            "row 0 of decoder_step stayed {} when encoder token 4 changed: every decoder \
             token must see the whole source (no causal mask in cross-attention)",
            out.row(0)
        ));
    }

    let causal = Mask::causal(3);
    let expected = own
        .forward(&x_dec, Some(&causal))
        .and_then(|h| cross.cross(&h.output, &x_enc, None))
        .map_err(|e| e.to_string())?
        .output;
    close(
        &format!(
            "{what}, cross-attention from the causal self-attention's output to x_enc \
             (queries from the decoder's h, keys and values from x_enc),"
        ),
        &out,
        &expected,
        1e-12,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejects;

    #[test]
    fn decoder_mask_passes_and_classic_mistakes_fail() {
        assert_eq!(check_decoder_mask(decoder_mask), Ok(()));
        let rule =
            |lengths: &[usize], len: usize, allow: &dyn Fn(usize, usize, usize) -> bool| {
                let a = Array3::from_shape_fn((lengths.len(), len, len), |(b, i, j)| {
                    allow(lengths[b], i, j)
                });
                Mask::from_array(a)
            };
        // Causal only: queries attend to padding keys.
        let causal_only =
            |lengths: &[usize], len: usize| rule(lengths, len, &|_, i, j| j <= i);
        rejects(check_decoder_mask(causal_only), "For item 1 it lets query 2 attend to key 2");
        // Padding queries blocked as well: fully masked rows for nothing.
        let queries_too = |lengths: &[usize], len: usize| {
            rule(lengths, len, &|valid, i, j| j <= i && j < valid && i < valid)
        };
        rejects(
            check_decoder_mask(queries_too),
            "For item 1 it stops query 2 from attending to key 0",
        );
        // triu without k=1: the diagonal blocked, a token never sees itself.
        let no_diagonal = |lengths: &[usize], len: usize| {
            rule(lengths, len, &|valid, i, j| j < i && j < valid)
        };
        rejects(
            check_decoder_mask(no_diagonal),
            "For item 0 it stops query 0 from attending to key 0",
        );
        // Either mask instead of both.
        let either = |lengths: &[usize], len: usize| {
            rule(lengths, len, &|valid, i, j| j <= i || j < valid)
        };
        rejects(check_decoder_mask(either), "For item 0 it lets query 0 attend to key 1");
        // No check of the lengths: 5 real tokens in 4 places.
        let unchecked = |lengths: &[usize], len: usize| {
            rule(lengths, len, &|valid, i, j| j <= i && j < valid)
        };
        rejects(check_decoder_mask(unchecked), "decoder_mask(&[5], 4) returned a mask");
    }

    /// The largest absolute difference between two matrices.
    fn max_diff(a: &ArrayRef2<f64>, b: &ArrayRef2<f64>) -> f64 {
        a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn one_token_at_a_time_passes_and_classic_mistakes_fail() {
        assert_eq!(check_one_token_at_a_time(one_token_at_a_time), Ok(()));
        // Another correct answer: a one-row sdpa per token instead of single_query.
        let one_row = |q: &ArrayRef2<f64>, k: &ArrayRef2<f64>, v: &ArrayRef2<f64>| {
            let mut out = Array2::zeros((q.nrows(), v.ncols()));
            for t in 0..q.nrows() {
                let (query, seen) = (s![t..=t, ..], s![..=t, ..]);
                let att = sdpa(&q.slice(query), &k.slice(seen), &v.slice(seen), None)?;
                out.row_mut(t).assign(&att.output.row(0));
            }
            Ok(out)
        };
        assert_eq!(check_one_token_at_a_time(one_row), Ok(()));
        let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
        let unmasked = sdpa(&q, &k, &v, None).unwrap().output;
        let out = one_token_at_a_time(&q, &k, &v).unwrap();
        assert!(max_diff(&out, &unmasked) > 0.1, "without the mask the answer differs");

        fn keys_up_to(
            q: &ArrayRef2<f64>,
            k: &ArrayRef2<f64>,
            v: &ArrayRef2<f64>,
            end: impl Fn(usize) -> usize,
        ) -> Result<Array2<f64>> {
            let mut out = Array2::zeros((q.nrows(), v.ncols()));
            for t in 0..q.nrows() {
                let seen = s![..end(t), ..];
                let att = single_query(&q.row(t), &k.slice(seen), &v.slice(seen))?;
                out.row_mut(t).assign(&att.output);
            }
            Ok(out)
        }
        // Off by one: the cache without the token itself (token 0 sees nothing).
        let without_itself = |q: &_, k: &_, v: &_| keys_up_to(q, k, v, |t| t);
        rejects(check_one_token_at_a_time(without_itself), "for notebook 004");
        // Off by one the other way: one token of the future.
        let one_ahead =
            |q: &ArrayRef2<f64>, k: &_, v: &_| keys_up_to(q, k, v, |t| (t + 2).min(q.nrows()));
        rejects(
            check_one_token_at_a_time(one_ahead),
            "for notebook 004, the notebook's new V",
        );
        // Every key for every token: no cache at all.
        let all = |q: &ArrayRef2<f64>, k: &_, v: &_| keys_up_to(q, k, v, |_| q.nrows());
        rejects(check_one_token_at_a_time(all), "for notebook 004, the notebook's new V");
        // An output as wide as the queries (d_k) instead of the values (d_v): notebook 004
        // cannot tell, since d_k = d_v = 8 there.
        let width_of_q = |q: &ArrayRef2<f64>, k: &ArrayRef2<f64>, v: &ArrayRef2<f64>| {
            let mut out = Array2::zeros((q.nrows(), q.ncols()));
            for t in 0..q.nrows() {
                let seen = s![..=t, ..];
                let att = single_query(&q.row(t), &k.slice(seen), &v.slice(seen))?;
                let n = att.output.len().min(q.ncols());
                out.row_mut(t).slice_mut(s![..n]).assign(&att.output.slice(s![..n]));
            }
            Ok(out)
        };
        rejects(check_one_token_at_a_time(width_of_q), "has shape [12, 3], expected [12, 5]");
    }

    /// Exercise 7.2 asks whether the loop gives *exactly* causal attention. It computes the
    /// same numbers: each score is the same dot product, each masked key adds exp(−∞) = 0 to
    /// the softmax sum and 0·vⱼ = 0 to the output, and adding an exact zero changes nothing.
    /// What differs is the order of one sum: ndarray adds up a row of 8 or more weights in 8
    /// interleaved partial sums and a shorter one from left to right, so the causal row of
    /// `L ≥ 8` keys and the cached row of `t + 1` keys are summed in different orders.
    #[test]
    fn one_token_at_a_time_is_bit_identical_below_8_tokens_only() {
        let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
        let full = sdpa(&q, &k, &v, Some(&Mask::causal(4))).unwrap().output;
        assert_eq!(one_token_at_a_time(&q, &k, &v).unwrap(), full); // notebook 004: 4 tokens

        let mut rng = StdRng::seed_from_u64(8);
        let mut random =
            |rows| Array2::from_shape_fn((rows, 8), |_| rng.random_range(-3.0..3.0));
        let mut differ = 0;
        for _ in 0..20 {
            for len in [7, 8] {
                let (q, k, v) = (random(len), random(len), random(len));
                let cached = one_token_at_a_time(&q, &k, &v).unwrap();
                let full = sdpa(&q, &k, &v, Some(&Mask::causal(len))).unwrap().output;
                if len < 8 {
                    assert_eq!(cached, full);
                } else {
                    // A few units in the last place of values up to 3 (2⁻⁵¹ ≈ 4.4e-16 each).
                    assert!(max_diff(&cached, &full) < 1e-14);
                    differ += usize::from(cached != full);
                }
            }
        }
        assert!(differ > 0, "with 8 tokens the two should differ in the last bits");
    }

    #[test]
    fn decoder_step_passes_and_classic_mistakes_fail() {
        assert_eq!(check_decoder_step(decoder_step), Ok(()));
        type Layer = SelfAttention<f64>;
        // Self-attention without its causal mask.
        let unmasked = |own: &Layer, cross: &Layer, x_dec: &_, x_enc: &_| {
            Ok(cross.cross(&own.forward(x_dec, None)?.output, x_enc, None)?.output)
        };
        rejects(check_decoder_step(unmasked), "rows 0 and 1 of decoder_step");
        // A causal mask in cross-attention too: decoder token i sees source tokens 0..=i.
        let causal_cross = |own: &Layer, cross: &Layer, x_dec: &ArrayRef2<f64>, x_enc: &_| {
            let h = own.forward(x_dec, Some(&Mask::causal(x_dec.nrows())))?.output;
            let triangle = Mask::causal_rect(x_dec.nrows(), 5);
            Ok(cross.cross(&h, x_enc, Some(&triangle))?.output)
        };
        rejects(check_decoder_step(causal_cross), "row 0 of decoder_step stayed");
        // Queries from the encoder, keys and values from the decoder.
        let swapped = |own: &Layer, cross: &Layer, x_dec: &ArrayRef2<f64>, x_enc: &_| {
            let h = own.forward(x_dec, Some(&Mask::causal(x_dec.nrows())))?.output;
            Ok(cross.cross(x_enc, &h, None)?.output)
        };
        rejects(check_decoder_step(swapped), "has shape (5, 4), expected (3, 4)");
        // Cross-attention straight from the decoder's tokens: the self-attention is skipped.
        // Causal by accident, so only the comparison with the real computation catches it.
        let skipped = |_own: &Layer, cross: &Layer, x_dec: &_, x_enc: &_| {
            Ok(cross.cross(x_dec, x_enc, None)?.output)
        };
        rejects(check_decoder_step(skipped), "cross-attention from the causal self-attention");
    }
}
