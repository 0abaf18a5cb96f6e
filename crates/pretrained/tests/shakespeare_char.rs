//! Chapter 15's committed model (`model/shakespeare-char/`, the documented run of the `train`
//! tool): transformers computes the same logits from it as the crate; its validation loss is
//! the one its training log recorded; and what it writes on the exact path is the same text on
//! every machine.

use attention::gpt::data::{CharVocab, train_and_validation};
use attention::gpt::kernels::{Exact, Fast};
use attention::gpt::sample::sample;
use attention::gpt::train::evaluate;
use ndarray::{Array2, ArrayD, IxDyn};
use pretrained::{gpt2, shakespeare_dir};
use rand::{SeedableRng, rngs::StdRng};
use safetensors::{Dtype, SafeTensors};

/// The corpus's ids and the index where its validation text (the last 10 %) begins.
fn corpus(vocab: &CharVocab) -> (Vec<usize>, usize) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare/input.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let ids = vocab.encode(&text).unwrap();
    let split = train_and_validation(&ids).0.len();
    (ids, split)
}

fn tensor(file: &SafeTensors, name: &str) -> (Dtype, Vec<usize>, Vec<u8>) {
    let view = file.tensor(name).unwrap();
    (view.dtype(), view.shape().to_vec(), view.data().to_vec())
}

/// transformers' `GPT2LMHeadModel.from_pretrained` on the committed folder, in float64
/// (`tools/make_gpt_fixtures.py`), against the crate's exact path in `f64` from the same
/// stored `f32` weights: they differ by the order of their sums only. Measured: 1.4e-14 on
/// logits up to 10.3 (see the assertion's message with `-- --nocapture`).
#[test]
fn transformers_computes_the_same_logits() {
    let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    assert_eq!(vocab.len(), 71);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/shakespeare-char/logits.safetensors"
    );
    let bytes = std::fs::read(path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let (dtype, shape, data) = tensor(&file, "tokens");
    assert_eq!((dtype, shape.as_slice()), (Dtype::I64, &[2, 64][..]));
    let ids: Vec<usize> = data
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as usize)
        .collect();
    let (ids_all, split) = corpus(&vocab);
    assert_eq!(
        ids,
        ids_all[split..split + 128],
        "the fixture's tokens open the validation text"
    );
    let tokens = Array2::from_shape_vec((2, 64), ids).unwrap();
    let (dtype, shape, data) = tensor(&file, "logits");
    assert_eq!(dtype, Dtype::F64);
    let expected = ArrayD::from_shape_vec(
        IxDyn(&shape),
        data.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect(),
    )
    .unwrap();
    let wide = gpt.map_weights(f64::from);
    let logits = wide.logits_with(&Exact, &tokens.view()).unwrap().into_dyn();
    let worst = (&logits - &expected).iter().fold(0.0f64, |m, d| m.max(d.abs()));
    let largest = expected.iter().fold(0.0f64, |m, d| m.max(d.abs()));
    println!("logits: largest difference {worst:.1e} on logits up to {largest:.1}");
    assert!(worst < 1e-12, "{worst}");
    // the wrong way round, Conv1D's weights read as nn.Linear's, is far off
    let mut transposed = wide.clone();
    let w = transposed.blocks[0].attn_proj.w.t().to_owned();
    transposed.blocks[0].attn_proj.w = w;
    let wrong = transposed.logits_with(&Exact, &tokens.view()).unwrap().into_dyn();
    assert!((&wrong - &expected).iter().fold(0.0f64, |m, d| m.max(d.abs())) > 1e-3);
}

/// The validation loss over the whole validation text, on the fast path, is the one the
/// training log recorded at step 2000 (to the last bits the processor changes).
#[test]
fn its_validation_loss_is_the_one_its_log_recorded() {
    let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    let (ids, split) = corpus(&vocab);
    let loss = evaluate(&gpt, &Fast, &ids[split..], 64).unwrap();
    let log = std::fs::read_to_string(shakespeare_dir().join("log.csv")).unwrap();
    let last = log.lines().last().unwrap();
    let logged: f64 = last.split(',').nth(4).unwrap().parse().unwrap();
    assert!(last.starts_with("2000,"), "{last}");
    assert!((loss - logged).abs() < 1e-4, "{loss} against {logged}");
    assert!(loss < 1.9, "{loss}");
}

/// On the exact path (sums in a fixed order, libm's exponential, ChaCha's random numbers),
/// the seeded sample is the same characters on every machine: the book can quote it.
#[test]
fn it_writes_the_same_text_on_every_machine() {
    let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    let prompt = vocab.encode("ROMEO:\n").unwrap();
    let written =
        sample(&gpt, &Exact, &prompt, 60, 1.0, &mut StdRng::seed_from_u64(0)).unwrap();
    let text = vocab.decode(&written);
    assert_eq!(text, EXPECTED_SAMPLE, "{text:?}");
    // the fast path writes from the same distribution; its text may part from this one
    // wherever the processor's rounding moves a draw across a boundary
    let fast = sample(&gpt, &Fast, &prompt, 60, 1.0, &mut StdRng::seed_from_u64(0)).unwrap();
    assert_eq!(fast.len(), 60);
}

/// What the exact path writes after "ROMEO:\n", seed 0, temperature 1.
const EXPECTED_SAMPLE: &str = "That themoy by loved the loves you\nAnd sbeest in yous sreice";

/// The run's snapshots after 200 and 500 steps are models of their own, and on the exact
/// path (the same numbers on every machine) each predicts the start of the validation text
/// better than the one before.
#[test]
fn its_snapshots_get_better_step_by_step() {
    let (last, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    let (ids, split) = corpus(&vocab);
    let val = &ids[split..split + 257];
    let mut losses = Vec::new();
    for step in ["step-200", "step-500"] {
        let (gpt, snapshot_vocab) = gpt2::load(&shakespeare_dir().join(step)).unwrap();
        assert_eq!(snapshot_vocab, vocab);
        losses.push(evaluate(&gpt, &Exact, val, 4).unwrap());
    }
    losses.push(evaluate(&last, &Exact, val, 4).unwrap());
    assert!(losses.windows(2).all(|w| w[0] > w[1]), "{losses:?}");
}

/// Chapter 16: the committed model's logits through the KV cache (a prefill of 10
/// characters, then one step per character) against one full causal pass over 64 characters
/// of the validation text. The exact path gives the same bits; the fast path, whose products
/// and sums are `f32` in another order, differs from the exact full pass by rounding only.
/// Measured: 6.7e-6 on logits up to 10.0 (see the assertion's message with `-- --nocapture`).
#[test]
fn through_the_cache_it_computes_the_full_pass() {
    let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    let (ids, split) = corpus(&vocab);
    let text = &ids[split..split + 64];
    let ids2 = Array2::from_shape_vec((1, 64), text.to_vec()).unwrap();
    let full =
        gpt.logits_with(&Exact, &ids2.view()).unwrap().index_axis_move(ndarray::Axis(0), 0);
    let scale = full.iter().fold(0.0_f32, |m, v| m.max(v.abs()));
    let mut worst = 0.0_f32;
    for fast in [false, true] {
        let mut cache = gpt.new_cache().unwrap();
        let mut rows = if fast {
            gpt.prefill_with(&Fast, &mut cache, &text[..10]).unwrap()
        } else {
            gpt.prefill_with(&Exact, &mut cache, &text[..10]).unwrap()
        };
        for &token in &text[10..] {
            let row = if fast {
                gpt.step_with(&Fast, &mut cache, token).unwrap()
            } else {
                gpt.step_with(&Exact, &mut cache, token).unwrap()
            };
            rows.push_row(row.view()).unwrap();
        }
        if fast {
            worst = (&rows - &full).iter().fold(0.0, |m, d| m.max(d.abs()));
        } else {
            assert_eq!(
                rows, full,
                "the exact path through the cache is the full pass, bit for bit"
            );
        }
    }
    println!(
        "fast path through the cache: {worst:e} from the exact full pass, logits up to {scale}"
    );
    assert!(worst < 2e-5, "{worst}");
}

/// While the text fits in the model's 64 positions, writing through the cache sees what
/// chapter 15's `sample` sees and draws the same way: the same characters.
#[test]
fn through_the_cache_it_writes_what_sample_writes() {
    use attention::gpt::generate::Writer;
    use attention::gpt::sample::Sampler;
    let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    let prompt = vocab.encode("ROMEO:\n").unwrap();
    let n = 64 - prompt.len();
    let slid = sample(&gpt, &Exact, &prompt, n, 1.0, &mut StdRng::seed_from_u64(0)).unwrap();
    let mut writer = Writer::new(&gpt, &Exact, &prompt, true).unwrap();
    let mut rng = StdRng::seed_from_u64(0);
    let cached: Vec<usize> =
        (0..n).map(|_| writer.next(&Sampler::default(), &mut rng).unwrap()).collect();
    assert_eq!(vocab.decode(&cached), vocab.decode(&slid));
}
