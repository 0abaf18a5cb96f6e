//! Properties that hold for every input, checked on random ones with proptest.
//!
//! Case counts are kept small (48 per property) so that `cargo test` stays quick on two
//! cores; every property still sees sequences from 1 to 8 tokens and widths from 1 to 8.

use attention::mask::Mask;
use attention::multihead::{MultiHeadAttention, merge_heads, split_heads};
use attention::sdpa::{sdpa, sdpa_batched};
use attention::self_attention::SelfAttention;
use attention::softmax::softmax;
use ndarray::{Array2, Array3, ArrayRef, Axis, Dimension, s};
use proptest::prelude::*;
use rand::{SeedableRng, rngs::StdRng};

/// A `(rows, cols)` matrix with entries in `-range..range`.
// ANCHOR: helpers
fn matrix(rows: usize, cols: usize, range: f64) -> impl Strategy<Value = Array2<f64>> {
    prop::collection::vec(-range..range, rows * cols)
        .prop_map(move |data| Array2::from_shape_vec((rows, cols), data).unwrap())
}

// ANCHOR_END: helpers
/// A boolean `(rows, cols)` matrix.
fn bool_matrix(rows: usize, cols: usize) -> impl Strategy<Value = Array2<bool>> {
    prop::collection::vec(any::<bool>(), rows * cols)
        .prop_map(move |data| Array2::from_shape_vec((rows, cols), data).unwrap())
}

// ANCHOR: helpers
fn max_diff<D: Dimension>(a: &ArrayRef<f64, D>, b: &ArrayRef<f64, D>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}
// ANCHOR_END: helpers

/// `(L_q, L_k, d_k, d_v)` with every size from 1 to 8.
fn sizes() -> impl Strategy<Value = (usize, usize, usize, usize)> {
    (1..=8usize, 1..=8usize, 1..=8usize, 1..=8usize)
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 48, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    /// Weights are in [0, 1]; a row sums to 1, or to 0 when the mask leaves it no key (and
    /// then its output is 0 too).
    #[test]
    fn weight_rows_sum_to_one_or_zero(
        (q, k, v, allowed) in sizes().prop_flat_map(|(l_q, l_k, d_k, d_v)| {
            let (q, k) = (matrix(l_q, d_k, 4.0), matrix(l_k, d_k, 4.0));
            (q, k, matrix(l_k, d_v, 4.0), bool_matrix(l_q, l_k))
        })
    ) {
        let mask = Mask::from_array(allowed.clone()).unwrap();
        let att = sdpa(&q, &k, &v, Some(&mask)).unwrap();
        for (i, row) in att.weights.rows().into_iter().enumerate() {
            prop_assert!(row.iter().all(|&w| (0.0..=1.0).contains(&w)));
            let visible = allowed.row(i).iter().any(|&ok| ok);
            let expected = if visible { 1.0 } else { 0.0 };
            let sum = row.sum();
            prop_assert!((sum - expected).abs() < 1e-12, "row {} sums to {}", i, sum);
            if !visible {
                prop_assert!(att.output.row(i).iter().all(|&x| x == 0.0));
            }
            for (j, &w) in row.iter().enumerate() {
                if !allowed[[i, j]] {
                    prop_assert_eq!(w, 0.0);
                }
            }
        }
    }

    /// softmax(x + c) = softmax(x) for a constant c added to a whole row.
    #[test]
    fn adding_a_constant_to_a_row_changes_nothing(
        (scores, shifts) in (1..=6usize, 1..=8usize).prop_flat_map(|(rows, cols)| {
            (matrix(rows, cols, 30.0), prop::collection::vec(-500.0..500.0f64, rows))
        })
    ) {
        let mut shifted = scores.clone();
        for (mut row, c) in shifted.rows_mut().into_iter().zip(&shifts) {
            row += *c;
        }
        let diff = max_diff(&softmax(&scores), &softmax(&shifted));
        prop_assert!(diff < 1e-9, "diff {}", diff);
    }

    /// Self-attention has no notion of position: permuting the tokens permutes the outputs.
    #[test]
    fn permuting_tokens_permutes_outputs(
        (x, perm, seed) in (1..=8usize, 1..=6usize).prop_flat_map(|(l, d)| {
            (matrix(l, d, 3.0), Just((0..l).collect::<Vec<_>>()).prop_shuffle(), any::<u64>())
        })
    ) {
        let d = x.ncols();
        let mut rng = StdRng::seed_from_u64(seed);
        let layer = SelfAttention::<f64>::random(d, 3, 2, &mut rng).unwrap();
        let permuted = x.select(Axis(0), &perm);
        let out = layer.forward(&x, None).unwrap().output;
        let out_permuted = layer.forward(&permuted, None).unwrap().output;
        prop_assert!(max_diff(&out.select(Axis(0), &perm), &out_permuted) < 1e-12);
    }

    /// With a causal mask, changing the tokens after position t leaves outputs 0..=t unchanged
    /// (for multi-head attention, so the heads and W_O are covered too).
    // ANCHOR: causal_future
    #[test]
    fn causal_outputs_ignore_the_future(
        (x, future, t, seed) in (1..=8usize, 1..=3usize).prop_flat_map(|(l, heads)| {
            let d = 2 * heads;
            (matrix(l, d, 3.0), matrix(l, d, 3.0), 0..l, any::<u64>())
        })
    ) {
        let (l, d) = x.dim();
        let heads = d / 2;
        let mha = MultiHeadAttention::<f64>::random(d, heads, &mut StdRng::seed_from_u64(seed))
            .unwrap();
        let mut changed = x.clone();
        changed.slice_mut(s![t + 1.., ..]).assign(&future.slice(s![t + 1.., ..]));
        let causal = Mask::causal(l);
        let a = mha.forward(&x, Some(&causal)).unwrap();
        let b = mha.forward(&changed, Some(&causal)).unwrap();
        let past = s![..=t, ..];
        prop_assert!(max_diff(&a.output.slice(past), &b.output.slice(past)) < 1e-12);
        // …while without the mask, a change in the future generally reaches the past.
        if t + 1 < l && max_diff(&x, &changed) > 1e-3 {
            let c = mha.forward(&x, None).unwrap();
            let e = mha.forward(&changed, None).unwrap();
            prop_assert!(max_diff(&c.output.slice(past), &e.output.slice(past)) > 0.0);
        }
    }
    // ANCHOR_END: causal_future

    /// Multi-head attention with one head is single-head self-attention followed by W_O.
    // ANCHOR: one_head
    #[test]
    fn one_head_is_self_attention(
        (x, w_q, w_k, w_v, w_o, causal) in (1..=8usize, 1..=6usize).prop_flat_map(|(l, d)| {
            let w = || matrix(d, d, 1.0);
            (matrix(l, d, 2.0), w(), w(), w(), w(), any::<bool>())
        })
    ) {
        let mask = causal.then(|| Mask::causal(x.nrows()));
        let (q, k, v, o) = (w_q.clone(), w_k.clone(), w_v.clone(), w_o.clone());
        let mha = MultiHeadAttention::new(q, k, v, o, 1).unwrap();
        let single = SelfAttention::new(w_q, w_k, w_v).unwrap();
        let single = single.forward(&x, mask.as_ref()).unwrap();
        let multi = mha.forward(&x, mask.as_ref()).unwrap();
        prop_assert!(max_diff(&multi.output, &single.output.dot(&w_o)) < 1e-12);
        prop_assert!(max_diff(&multi.weights.index_axis(Axis(0), 0), &single.weights) < 1e-12);
    }
    // ANCHOR_END: one_head

    /// The explicit loop over heads and the reshape version agree.
    // ANCHOR: loop_vs_reshape
    #[test]
    fn per_head_loop_agrees_with_reshape(
        (x, heads, seed) in (1..=8usize, 1..=4usize, 1..=3usize)
            .prop_flat_map(|(l, heads, d_head)| {
                (matrix(l, heads * d_head, 3.0), Just(heads), any::<u64>())
            })
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mha = MultiHeadAttention::<f64>::random(x.ncols(), heads, &mut rng).unwrap();
        let mask = Mask::causal(x.nrows());
        let looped = mha.forward_per_head(&x, Some(&mask)).unwrap();
        let reshaped = mha.forward(&x, Some(&mask)).unwrap();
        prop_assert!(max_diff(&looped.output, &reshaped.output) < 1e-12);
        prop_assert!(max_diff(&looped.weights, &reshaped.weights) < 1e-12);
    }
    // ANCHOR_END: loop_vs_reshape

    /// Splitting into heads and merging them back is the identity, and head h holds
    /// columns h·d_head .. (h+1)·d_head.
    #[test]
    fn split_then_merge_is_identity(
        (x, heads) in (1..=3usize, 1..=6usize, 1..=4usize, 1..=4usize)
            .prop_flat_map(|(batch, l, heads, d_head)| {
                let shape = (batch, l, heads * d_head);
                (prop::collection::vec(-9.0..9.0f64, batch * l * heads * d_head)
                    .prop_map(move |data| Array3::from_shape_vec(shape, data).unwrap()),
                 Just(heads))
            })
    ) {
        let split = split_heads(&x, heads).unwrap();
        let d_head = x.dim().2 / heads;
        prop_assert_eq!(split.dim(), (x.dim().0, heads, x.dim().1, d_head));
        for h in 0..heads {
            let columns = s![.., .., h * d_head..(h + 1) * d_head];
            prop_assert_eq!(split.slice(s![.., h, .., ..]), x.slice(columns));
        }
        prop_assert_eq!(merge_heads(&split).unwrap(), x);
    }

    /// Attention over a batch is attention over each item (with each item's padding mask).
    #[test]
    fn batched_is_per_item(
        (x, valid) in (1..=3usize, 1..=6usize, 1..=5usize).prop_flat_map(|(batch, l, d)| {
            (prop::collection::vec(-3.0..3.0f64, batch * l * d)
                .prop_map(move |data| Array3::from_shape_vec((batch, l, d), data).unwrap()),
             prop::collection::vec(0..=l, batch))
        })
    ) {
        let l = x.dim().1;
        let padding = Mask::padding(&valid, l, l).unwrap();
        let att = sdpa_batched(&x, &x, &x, Some(&padding)).unwrap();
        for (b, &valid_b) in valid.iter().enumerate() {
            let item = x.index_axis(Axis(0), b);
            let own = padding.as_array().index_axis(Axis(0), b).to_owned();
            let own = Mask::from_array(own).unwrap();
            let one = sdpa(&item, &item, &item, Some(&own)).unwrap();
            prop_assert!(max_diff(&att.output.index_axis(Axis(0), b), &one.output) < 1e-12);
            // No weight ever lands on padding.
            prop_assert!(att.weights.slice(s![b, .., valid_b..]).iter().all(|&w| w == 0.0));
        }
    }

    /// f32 and f64 compute the same thing, to f32 precision.
    #[test]
    fn f32_agrees_with_f64(
        (q, k, v) in sizes().prop_flat_map(|(l_q, l_k, d_k, d_v)| {
            (matrix(l_q, d_k, 2.0), matrix(l_k, d_k, 2.0), matrix(l_k, d_v, 2.0))
        })
    ) {
        let to32 = |a: &Array2<f64>| a.mapv(|x| x as f32);
        let wide = sdpa(&q, &k, &v, None).unwrap();
        let narrow = sdpa(&to32(&q), &to32(&k), &to32(&v), None).unwrap();
        prop_assert!(max_diff(&narrow.output.mapv(f64::from), &wide.output) < 1e-4);
    }
}

/// The tiled path (`attention::tiled`) against the plain one: sequences long enough for
/// several tiles, tile sizes that rarely divide them, random masks with fully masked rows,
/// leading batch and head axes, `f64` and `f32`.
mod tiled {
    use super::*;
    use attention::kernel::Simd;
    use attention::softmax::softmax_row;
    use attention::tiled::{
        Masking, Tiles, online_softmax, tiled_sdpa, tiled_sdpa_batched, tiled_sdpa_batched_on,
    };
    use ndarray::{Array1, Array4};

    /// `(L_q, L_k, d_k, d_v)` for the tiled tests: up to 40 tokens, so that tiles of 1 to 9
    /// give anything from one tile to forty.
    fn long_sizes() -> impl Strategy<Value = (usize, usize, usize, usize)> {
        (1..=40usize, 1..=40usize, 1..=8usize, 1..=8usize)
    }

    fn tiles() -> impl Strategy<Value = Tiles> {
        (1..=9usize, 1..=9usize).prop_map(|(block_q, tile_k)| Tiles { block_q, tile_k })
    }

    /// A random mask in which every `blank`-th query (if any) sees no key at all.
    fn mask_with_blank_rows(allowed: Array2<bool>, blank: usize) -> Mask {
        let mut allowed = allowed;
        for (i, mut row) in allowed.rows_mut().into_iter().enumerate() {
            if blank > 0 && i % blank == 0 {
                row.fill(false);
            }
        }
        Mask::from_array(allowed).unwrap()
    }

    proptest! {
        #![proptest_config(config())]

        /// Online softmax is the stable softmax (−∞ entries included, an all −∞ row gives 0s).
        #[test]
        fn online_softmax_is_the_stable_softmax(
            row in prop::collection::vec(
                prop_oneof![3 => -50.0..50.0f64, 1 => Just(f64::NEG_INFINITY)],
                1..=20,
            )
        ) {
            let row = Array1::from(row);
            let mut stable = row.clone();
            softmax_row(&mut stable);
            prop_assert!(max_diff(&online_softmax(&row), &stable) < 1e-12);
        }

        /// f64: tiled = plain within 1e-12, with no mask, causal, or a random mask with
        /// fully masked rows, in every build of the inner loops this processor can run;
        /// fully masked rows give exact zeros.
        #[test]
        fn tiled_equals_plain_f64(
            (q, k, v, allowed) in long_sizes().prop_flat_map(|(l_q, l_k, d_k, d_v)| {
                let (q, k) = (matrix(l_q, d_k, 4.0), matrix(l_k, d_k, 4.0));
                (q, k, matrix(l_k, d_v, 4.0), bool_matrix(l_q, l_k))
            }),
            tiles in tiles(),
            blank in 0..5usize,
        ) {
            let (l_q, l_k) = (q.nrows(), k.nrows());
            let mask = mask_with_blank_rows(allowed, blank);
            let causal = Mask::causal_rect(l_q, l_k);
            for (masking, plain_mask) in [
                (Masking::All, None),
                (Masking::Causal, Some(&causal)),
                (Masking::Mask(&mask), Some(&mask)),
            ] {
                let plain = sdpa(&q, &k, &v, plain_mask).unwrap();
                let tiled = tiled_sdpa(&q, &k, &v, masking, tiles).unwrap();
                let diff = max_diff(&tiled, &plain.output);
                prop_assert!(diff < 1e-12, "{:?} {:?}", masking, tiles);
                for simd in Simd::supported() {
                    let on = tiled_sdpa_batched_on(&q, &k, &v, masking, tiles, simd).unwrap();
                    let diff = max_diff(&on, &plain.output);
                    prop_assert!(diff < 1e-12, "{:?} {:?} {:?}", masking, tiles, simd);
                }
                if let Some(m) = plain_mask {
                    for (i, row) in tiled.rows().into_iter().enumerate() {
                        if !m.as_array().index_axis(Axis(0), i).iter().any(|&ok| ok) {
                            let zeros = row.iter().all(|&x| x == 0.0);
                            prop_assert!(zeros, "row {} sees no key", i);
                        }
                    }
                }
            }
        }

        /// f32 with batch and head axes and a per-batch mask broadcast over heads: tiled =
        /// plain within 1e-5, in every build of the inner loops this processor can run (the
        /// fused multiply-adds of AVX2 and AVX-512 round differently from the plain path).
        #[test]
        fn tiled_equals_plain_f32_batched(
            (batch, heads, l, d) in (1..=2usize, 1..=3usize, 1..=33usize, 1..=8usize),
            tiles in tiles(),
            seed in any::<u64>(),
            causal in any::<bool>(),
        ) {
            use rand::Rng;
            let mut rng = StdRng::seed_from_u64(seed);
            let shape = (batch, heads, l, d);
            let mut random =
                || Array4::from_shape_simple_fn(shape, || rng.random_range(-3.0..3.0f32));
            let (q, k, v) = (random(), random(), random());
            let mut rng = StdRng::seed_from_u64(seed ^ 1);
            let allowed =
                Array4::from_shape_simple_fn((batch, 1, l, l), || rng.random_bool(0.7));
            let mask = Mask::from_array(allowed).unwrap();
            let mask = if causal { mask.and(&Mask::causal(l)).unwrap() } else { mask };
            let plain = sdpa_batched(&q, &k, &v, Some(&mask)).unwrap();
            let tiled = tiled_sdpa_batched(&q, &k, &v, Masking::Mask(&mask), tiles).unwrap();
            let mut outputs = vec![(tiled, None)];
            for simd in Simd::supported() {
                let on = tiled_sdpa_batched_on(&q, &k, &v, Masking::Mask(&mask), tiles, simd);
                outputs.push((on.unwrap(), Some(simd)));
            }
            for (tiled, simd) in outputs {
                let diffs = tiled.iter().zip(plain.output.iter()).map(|(a, b)| (a - b).abs());
                let diff = diffs.fold(0.0, f32::max);
                prop_assert!(diff < 1e-5, "differs by {} with {:?} {:?}", diff, tiles, simd);
            }
        }
    }

    #[test]
    fn tile_sizes_of_zero_and_bad_masks_are_errors() {
        let x = Array2::<f64>::zeros((4, 2));
        let err =
            tiled_sdpa(&x, &x, &x, Masking::All, Tiles { block_q: 0, tile_k: 4 }).unwrap_err();
        assert_eq!(err.to_string(), "tiles has block_q = 0: it must be at least 1");
        let err =
            tiled_sdpa(&x, &x, &x, Masking::All, Tiles { block_q: 4, tile_k: 0 }).unwrap_err();
        assert_eq!(err.to_string(), "tiles has tile_k = 0: it must be at least 1");
        let err = tiled_sdpa(&x, &x, &x, Masking::Mask(&Mask::causal(3)), Tiles::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "mask has shape [3, 3], which does not broadcast to the scores' shape [4, 4]"
        );
        let plain = sdpa(&x, &x, &x, Some(&Mask::causal(3))).unwrap_err();
        assert_eq!(err, plain, "the same error as the plain path");
        let y = Array2::<f64>::zeros((4, 3));
        assert_eq!(
            tiled_sdpa(&x, &y, &x, Masking::All, Tiles::default()).unwrap_err(),
            sdpa(&x, &y, &x, None).unwrap_err()
        );
    }
}
