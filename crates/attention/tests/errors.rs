//! Bad shapes give an `AttentionError` whose message names the shapes, never a panic.

use attention::AttentionError;
use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::mask::Mask;
use attention::multihead::{MultiHeadAttention, merge_heads, split_heads};
use attention::projection::Linear;
use attention::scores::{mean, scaled_scores_batched, scores, variance};
use attention::sdpa::{sdpa, sdpa_batched, single_query};
use attention::self_attention::SelfAttention;
use ndarray::{Array1, Array2, Array3, ArrayD, IxDyn};
use proptest::prelude::*;
use rand::{SeedableRng, rngs::StdRng};

fn zeros(rows: usize, cols: usize) -> Array2<f64> {
    Array2::zeros((rows, cols))
}

fn message<T: std::fmt::Debug>(result: Result<T, AttentionError>) -> String {
    result.expect_err("this input must be refused").to_string()
}

#[test]
fn sdpa_names_the_mismatched_operands() {
    assert_eq!(
        message(sdpa(&zeros(2, 8), &zeros(3, 6), &zeros(3, 4), None)),
        "q has d_k = 8 but k has d_k = 6"
    );
    assert_eq!(
        message(sdpa(&zeros(2, 8), &zeros(5, 8), &zeros(4, 4), None)),
        "k has L_k = 5 but v has L_k = 4"
    );
    assert_eq!(
        message(sdpa(&zeros(0, 8), &zeros(5, 8), &zeros(5, 4), None)),
        "q has L_q = 0: it must be at least 1"
    );
    assert_eq!(
        message(sdpa(&zeros(2, 8), &zeros(0, 8), &zeros(0, 4), None)),
        "k has L_k = 0: it must be at least 1"
    );
    assert_eq!(
        message(sdpa(&zeros(2, 0), &zeros(3, 0), &zeros(3, 4), None)),
        "q has d_k = 0: it must be at least 1"
    );
    assert_eq!(
        message(sdpa(&zeros(2, 1), &zeros(3, 1), &zeros(3, 0), None)),
        "v has d_v = 0: it must be at least 1"
    );
    let mask = Mask::causal(3);
    assert_eq!(
        message(sdpa(&zeros(2, 4), &zeros(4, 4), &zeros(4, 4), Some(&mask))),
        "mask has shape [3, 3], which does not broadcast to the scores' shape [2, 4]"
    );
    assert_eq!(message(scores(&zeros(2, 3), &zeros(2, 4))), "q has d_k = 3 but k has d_k = 4");
    assert_eq!(
        message(single_query(&Array1::zeros(3), &zeros(4, 2), &zeros(4, 2))),
        "q has d_k = 3 but k has d_k = 2"
    );
}

#[test]
fn batched_forms_check_the_leading_axes() {
    let q = Array3::<f64>::zeros((2, 3, 4));
    let k = Array3::<f64>::zeros((3, 3, 4));
    assert_eq!(
        message(sdpa_batched(&q, &k, &k, None)),
        "q has leading axes [2] but k has [3]"
    );
    assert_eq!(message(scaled_scores_batched(&q, &k)), "q has leading axes [2] but k has [3]");
    let vector = ArrayD::<f64>::zeros(IxDyn(&[4]));
    assert_eq!(
        message(sdpa_batched(&vector, &vector, &vector, None)),
        "q has shape [4] but a shape (..., L_q, d_k) was expected"
    );
    let empty_batch = Array3::<f64>::zeros((0, 3, 4));
    assert_eq!(
        message(sdpa_batched(&empty_batch, &empty_batch, &empty_batch, None)),
        "q has batch = 0: it must be at least 1"
    );
    let per_item = Mask::padding(&[3, 3, 3], 3, 3).unwrap();
    assert!(
        message(sdpa_batched(&q, &q, &q, Some(&per_item)))
            .starts_with("mask has shape [3, 3, 3]")
    );
}

#[test]
fn layers_check_their_matrices_and_inputs() {
    assert_eq!(message(Linear::new(zeros(0, 3))), "W has d_in = 0: it must be at least 1");
    let w = Linear::new(zeros(4, 2)).unwrap();
    assert_eq!(message(w.apply(&zeros(3, 5))), "x has d_in = 5 but W has d_in = 4");
    assert_eq!(message(w.apply(&zeros(0, 4))), "x has L = 0: it must be at least 1");

    assert_eq!(
        message(SelfAttention::new(zeros(4, 2), zeros(5, 2), zeros(4, 2))),
        "W_Q has d_model = 4 but W_K has d_model = 5"
    );
    assert_eq!(
        message(SelfAttention::new(zeros(4, 2), zeros(4, 3), zeros(4, 2))),
        "W_Q has d_k = 2 but W_K has d_k = 3"
    );
    let layer = SelfAttention::new(zeros(4, 2), zeros(4, 2), zeros(4, 2)).unwrap();
    assert_eq!(
        message(layer.forward(&zeros(3, 6), None)),
        "x has d_in = 6 but W has d_in = 4"
    );

    let eye = Array2::<f64>::eye(6);
    assert_eq!(
        message(MultiHeadAttention::new(
            eye.clone(),
            eye.clone(),
            eye.clone(),
            eye.clone(),
            4
        )),
        "heads = 4 does not divide d_model = 6"
    );
    assert_eq!(
        message(MultiHeadAttention::new(
            eye.clone(),
            eye.clone(),
            eye.clone(),
            eye.clone(),
            0
        )),
        "heads = 0 does not divide d_model = 6"
    );
    assert_eq!(
        message(MultiHeadAttention::new(
            eye.clone(),
            zeros(6, 3),
            eye.clone(),
            eye.clone(),
            2
        )),
        "W_K has shape [6, 3] but a shape (d_model, d_model) = (6, 6) was expected"
    );
    let mha = MultiHeadAttention::<f64>::random(6, 2, &mut StdRng::seed_from_u64(0)).unwrap();
    assert_eq!(message(mha.forward(&zeros(3, 4), None)), "x has d_in = 4 but W has d_in = 6");
    let (a, b) = (Array3::<f64>::zeros((2, 3, 6)), Array3::<f64>::zeros((3, 3, 6)));
    assert!(
        message(mha.cross_batched(&a, &b, None))
            .starts_with("q has leading axes [2, 2] but k has [3, 2]")
    );
    assert_eq!(message(split_heads(&zeros(3, 6), 4)), "heads = 4 does not divide d_model = 6");
    assert_eq!(
        message(merge_heads(&zeros(3, 6))),
        "x has shape [3, 6] but a shape (..., heads, L, d_head) was expected"
    );
}

#[test]
fn masks_embeddings_and_statistics_refuse_bad_input() {
    assert_eq!(
        message(Mask::padding(&[2, 5], 4, 4)),
        "valid length 5 of batch item 1 is longer than L_k = 4"
    );
    assert_eq!(
        message(Mask::from_array(Array1::from_elem(3, true))),
        "mask has shape [3] but a shape (..., L_q, L_k) was expected"
    );
    assert!(Mask::causal(3).and(&Mask::causal(4)).is_err());

    let vocab = Vocabulary::from_sentence("my name is Aj");
    assert_eq!(
        message(vocab.encode("my name is Bo")),
        "the word \"Bo\" is not in the vocabulary"
    );
    let table = EmbeddingTable::new(zeros(4, 3)).unwrap();
    assert_eq!(
        message(table.lookup(&[0, 4])),
        "token id 4 is out of range for a vocabulary of 4 tokens"
    );
    assert_eq!(message(table.lookup(&[])), "sentence has L = 0: it must be at least 1");

    assert!(mean(&zeros(0, 3)).is_err());
    assert!(variance(&zeros(3, 0)).is_err());
}

/// Any shapes at all, including empty and mismatched ones: `Ok` or `Err`, never a panic.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..4usize, 0..5)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_shapes_never_panic(
        q in shape(),
        k in shape(),
        v in shape(),
        m in prop::option::of(shape()),
        heads in 0..4usize,
    ) {
        let array = |s: &Vec<usize>| ArrayD::<f64>::from_elem(IxDyn(s), 0.5);
        let mask =
            m.as_ref().and_then(|s| Mask::from_array(ArrayD::from_elem(IxDyn(s), true)).ok());
        let result = sdpa_batched(&array(&q), &array(&k), &array(&v), mask.as_ref());
        if let Ok(att) = result {
            // Success only for consistent, non-empty shapes.
            prop_assert!(q.len() >= 2 && !q.contains(&0));
            prop_assert_eq!(att.output.shape()[q.len() - 1], v[v.len() - 1]);
        }
        let _ = split_heads(&array(&q), heads);
        let _ = merge_heads(&array(&q));
        let _ = scaled_scores_batched(&array(&q), &array(&k));
        let _ = attention::softmax::softmax(&array(&q));
    }
}
