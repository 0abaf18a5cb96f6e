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
fn assert_close<D: Dimension>(
    what: &str,
    got: &ArrayRef<f64, D>,
    expected: &ArrayRef<f64, D>,
    tolerance: f64,
) {
    assert_eq!(got.shape(), expected.shape(), "{what}: shapes");
    let (index, diff) = got
        .iter()
        .zip(expected.iter())
        .map(|(g, e)| if g == e { 0.0 } else { (g - e).abs() })
        .enumerate()
        .fold((0, 0.0), |best, (i, d)| if d > best.1 || d.is_nan() { (i, d) } else { best });
    assert!(
        diff <= tolerance,
        "{what}: entry {index} differs by {diff:e} > {tolerance:e}\n\
         got {got}\nexpected {expected}"
    );
}

fn assert_scalar(what: &str, got: f64, expected: f64, tolerance: f64) {
    assert!(
        (got - expected).abs() <= tolerance,
        "{what}: got {got}, expected {expected}, tolerance {tolerance:e}"
    );
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

/// What notebooks 002 and 004 both printed for their `(4, 8)` Q and K.
struct Printed {
    name: &'static str,
    q: [[f64; 8]; 4],
    k: [[f64; 8]; 4],
    qk_t: [[f64; 4]; 4],
    scaled: [[f64; 4]; 4],
    variances: [f64; 4],
    tolerance: f64,
    qk_tolerance: f64,
}

/// Checks QKᵀ, QKᵀ/√8 and the variances of Q, K, QKᵀ and the scaled scores.
fn check_scores_and_variances(p: &Printed) {
    let (q, k) = (arr2(&p.q), arr2(&p.k));
    let raw = scores(&q, &k).unwrap();
    assert_close(&format!("{} QKᵀ", p.name), &raw, &arr2(&p.qk_t), p.qk_tolerance);
    let scaled = scaled_scores(&q, &k).unwrap();
    assert_close(&format!("{} scaled", p.name), &scaled, &arr2(&p.scaled), p.tolerance);
    assert_eq!(scaled, scale(raw.clone(), q.ncols()));

    let got = [&q, &k, &raw, &scaled].map(|m| variance(m).unwrap());
    let tolerances = [p.tolerance, p.tolerance, p.qk_tolerance, p.tolerance];
    for (i, what) in ["var(Q)", "var(K)", "var(QKᵀ)", "var(scaled)"].iter().enumerate() {
        assert_scalar(&format!("{} {what}", p.name), got[i], p.variances[i], tolerances[i]);
    }
    // Dividing by √d_k divides the variance by d_k exactly.
    assert_scalar("var ratio", got[2] / got[3], q.ncols() as f64, 1e-12);
}

#[test]
fn nb002_scores_scaling_and_variances() {
    check_scores_and_variances(&Printed {
        name: "nb002",
        q: nb002::Q,
        k: nb002::K,
        qk_t: nb002::QK_T,
        scaled: nb002::SCALED,
        variances: nb002::VARIANCES,
        tolerance: nb002::TOLERANCE,
        qk_tolerance: nb002::QK_TOLERANCE,
    });
}

#[test]
fn nb002_printed_weights_come_from_a_whole_matrix_softmax() {
    // The notebook's bug, reproduced on purpose: exp(scores + M) / sum over the whole matrix.
    let mut masked = arr2(&nb002::SCALED);
    Mask::causal(4).apply(&mut masked).unwrap();
    let exp = masked.mapv(f64::exp);
    let buggy: Array<f64, _> = &exp / exp.sum();
    assert_close(
        "nb002 whole-matrix softmax",
        &buggy,
        &arr2(&nb002::WHOLE_MATRIX_SOFTMAX),
        nb002::TOLERANCE,
    );
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
    assert_eq!(nb004::D_K, nb004::Q[0].len());
    check_scores_and_variances(&Printed {
        name: "nb004",
        q: nb004::Q,
        k: nb004::K,
        qk_t: nb004::QK_T,
        scaled: nb004::SCALED,
        variances: nb004::VARIANCES,
        tolerance: nb004::TOLERANCE,
        qk_tolerance: nb004::QK_TOLERANCE,
    });
}

#[test]
fn nb004_causal_weights_and_new_v() {
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    let att = sdpa(&q, &k, &v, Some(&Mask::causal(4))).unwrap();
    assert_close(
        "nb004 weights",
        &att.weights,
        &arr2(&nb004::CAUSAL_WEIGHTS),
        nb004::TOLERANCE,
    );
    assert_close("nb004 new V", &att.output, &arr2(&nb004::NEW_V), nb004::TOLERANCE);
}

#[test]
fn nb004_additive_mask_gives_the_same_weights() {
    // The notebook's route: scaled + (0 / −∞ matrix), then softmax.
    let additive = Mask::causal(4).to_additive::<f64>();
    let masked = arr2(&nb004::SCALED).into_dyn() + additive;
    let weights = softmax(&masked);
    assert_close(
        "nb004 additive",
        &weights,
        &arr2(&nb004::CAUSAL_WEIGHTS).into_dyn(),
        nb004::TOLERANCE,
    );
}

#[test]
fn nb004_without_a_mask_differs() {
    // Without the causal mask the first row is no longer [1, 0, 0, 0]: the check can fail.
    let (q, k, v) = (arr2(&nb004::Q), arr2(&nb004::K), arr2(&nb004::V));
    let att = sdpa(&q, &k, &v, None).unwrap();
    assert!((att.weights[[0, 0]] - 1.0).abs() > 0.5);
}
