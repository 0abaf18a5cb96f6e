//! The seed notebooks' printed numbers, reproduced by the crate from their printed inputs.
//!
//! Every constant and tolerance comes from `attention::notebooks`, whose docs explain each
//! tolerance (how many digits were printed, how input rounding propagates).

use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::mask::Mask;
use attention::notebooks::{nb000, nb001, nb002, nb003, nb004};
use attention::scores::{scale, scaled_scores, scores, variance};
use attention::sdpa::{sdpa, single_query};
use attention::softmax::softmax;
use ndarray::{Array, ArrayRef, Dimension, arr1, arr2};

/// Asserts `|got - expected| ≤ tolerance` entry by entry, naming the worst entry.
fn assert_close<D: Dimension>(what: &str, got: &ArrayRef<f64, D>, expected: &ArrayRef<f64, D>, tolerance: f64) {
    assert_eq!(got.shape(), expected.shape(), "{what}: shapes");
    let (index, diff) = got
        .iter()
        .zip(expected.iter())
        .map(|(g, e)| if g == e { 0.0 } else { (g - e).abs() })
        .enumerate()
        .fold((0, 0.0), |best, (i, d)| if d > best.1 || d.is_nan() { (i, d) } else { best });
    assert!(
        diff <= tolerance,
        "{what}: entry {index} differs by {diff:e} > {tolerance:e}\ngot {got}\nexpected {expected}"
    );
}

fn assert_scalar(what: &str, got: f64, expected: f64, tolerance: f64) {
    assert!((got - expected).abs() <= tolerance, "{what}: got {got}, expected {expected}, tolerance {tolerance:e}");
}

#[test]
fn nb000_the_cat_sat_embeddings() {
    let (vocab, table) = EmbeddingTable::the_cat_sat();
    let x = table.lookup(&vocab.encode(nb000::SENTENCE).unwrap()).unwrap();
    assert_eq!(x, arr2(&nb000::X));
    assert_eq!(vocab, Vocabulary::new(["The", "cat", "sat"]));
    // "sat cat" picks rows 2 and 1.
    let x = table.lookup(&vocab.encode("sat cat").unwrap()).unwrap();
    assert_eq!(x, arr2(&[nb000::X[2], nb000::X[1]]));
}

#[test]
fn nb001_softmax_of_scaled_scores() {
    let scaled = scale(arr2(&nb001::SCORES), nb001::D_K);
    let weights = softmax(&scaled);
    assert_close("nb001 weights", &weights, &arr2(&nb001::WEIGHTS), nb001::TOLERANCE);
}

#[test]
fn nb001_dividing_by_the_wrong_width_is_detectable() {
    // Scaling by √6 instead of √3 must not pass the same check: the test can fail.
    let wrong = softmax(&scale(arr2(&nb001::SCORES), 6));
    let diff = (&wrong - &arr2(&nb001::WEIGHTS)).iter().fold(0.0_f64, |m, d| m.max(d.abs()));
    assert!(diff > 10.0 * nb001::TOLERANCE, "diff {diff}");
}

#[test]
fn nb002_scores_scaling_and_variances() {
    let (q, k) = (arr2(&nb002::Q), arr2(&nb002::K));
    let raw = scores(&q, &k).unwrap();
    assert_close("nb002 QKᵀ", &raw, &arr2(&nb002::QK_T), nb002::QK_TOLERANCE);
    let scaled = scaled_scores(&q, &k).unwrap();
    assert_close("nb002 scaled", &scaled, &arr2(&nb002::SCALED), nb002::TOLERANCE);

    let [q_var, k_var, qk_var, scaled_var] = nb002::VARIANCES;
    assert_scalar("nb002 var(Q)", variance(&q).unwrap(), q_var, nb002::TOLERANCE);
    assert_scalar("nb002 var(K)", variance(&k).unwrap(), k_var, nb002::TOLERANCE);
    assert_scalar("nb002 var(QKᵀ)", variance(&raw).unwrap(), qk_var, nb002::QK_TOLERANCE);
    assert_scalar("nb002 var(scaled)", variance(&scaled).unwrap(), scaled_var, nb002::TOLERANCE);
}

#[test]
fn nb002_printed_weights_come_from_a_whole_matrix_softmax() {
    // The notebook's bug, reproduced on purpose: exp(scores + M) / sum over the whole matrix.
    let mut masked = arr2(&nb002::SCALED);
    Mask::causal(4).apply(&mut masked).unwrap();
    let exp = masked.mapv(f64::exp);
    let buggy: Array<f64, _> = &exp / exp.sum();
    assert_close("nb002 whole-matrix softmax", &buggy, &arr2(&nb002::WHOLE_MATRIX_SOFTMAX), nb002::TOLERANCE);
    // The crate's row softmax gives rows that sum to 1, unlike the notebook's.
    let rows = softmax(&masked);
    for row in rows.rows() {
        assert_scalar("row sum", row.sum(), 1.0, 1e-12);
    }
    assert!(nb002::WHOLE_MATRIX_SOFTMAX[0].iter().sum::<f64>() < 0.1);
}

#[test]
fn nb003_single_query_over_a_memory() {
    let x = arr2(&nb003::X);
    let query = x.row(nb003::QUERY_ROW);
    let att = single_query(&query, &x, &x).unwrap();
    assert_close("nb003 weights", &att.weights, &arr1(&nb003::WEIGHTS), nb003::TOLERANCE);
    assert_close("nb003 output", &att.output, &arr1(&nb003::OUTPUT), nb003::TOLERANCE);
    // The same numbers are row 0 of full self-attention with Q = K = V = X.
    let full = sdpa(&x, &x, &x, None).unwrap();
    assert_close("nb003 row 0", &full.output.row(0), &att.output, 1e-15);
}

#[test]
fn nb004_scores_and_variances() {
    let (q, k) = (arr2(&nb004::Q), arr2(&nb004::K));
    let raw = scores(&q, &k).unwrap();
    assert_close("nb004 QKᵀ", &raw, &arr2(&nb004::QK_T), nb004::QK_TOLERANCE);
    let scaled = scale(raw.clone(), nb004::D_K);
    assert_close("nb004 scaled", &scaled, &arr2(&nb004::SCALED), nb004::TOLERANCE);

    let [q_var, k_var, qk_var, scaled_var] = nb004::VARIANCES;
    assert_scalar("nb004 var(Q)", variance(&q).unwrap(), q_var, nb004::TOLERANCE);
    assert_scalar("nb004 var(K)", variance(&k).unwrap(), k_var, nb004::TOLERANCE);
    assert_scalar("nb004 var(QKᵀ)", variance(&raw).unwrap(), qk_var, nb004::QK_TOLERANCE);
    assert_scalar("nb004 var(scaled)", variance(&scaled).unwrap(), scaled_var, nb004::TOLERANCE);
    // Dividing by √d_k divides the variance by d_k exactly.
    assert_scalar("var ratio", variance(&raw).unwrap() / variance(&scaled).unwrap(), 8.0, 1e-12);
}

#[test]
fn nb004_causal_weights_and_new_v() {
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    let att = sdpa(&q, &k, &v, Some(&Mask::causal(4))).unwrap();
    assert_close("nb004 weights", &att.weights, &arr2(&nb004::CAUSAL_WEIGHTS), nb004::TOLERANCE);
    assert_close("nb004 new V", &att.output, &arr2(&nb004::NEW_V), nb004::TOLERANCE);
}

#[test]
fn nb004_additive_mask_gives_the_same_weights() {
    // The notebook's route: scaled + (0 / −∞ matrix), then softmax.
    let additive = Mask::causal(4).to_additive::<f64>();
    let masked = arr2(&nb004::SCALED).into_dyn() + additive;
    let weights = softmax(&masked);
    assert_close("nb004 additive", &weights, &arr2(&nb004::CAUSAL_WEIGHTS).into_dyn(), nb004::TOLERANCE);
}

#[test]
fn nb004_without_a_mask_differs() {
    // Without the causal mask the first row is no longer [1, 0, 0, 0]: the check can fail.
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    let att = sdpa(&q, &k, &v, None).unwrap();
    assert!((att.weights[[0, 0]] - 1.0).abs() > 0.5);
}
