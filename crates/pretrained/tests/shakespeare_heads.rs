//! Chapter 16: what the committed model's heads do, measured on held-out text (the first
//! 100 windows of 64 characters of the validation text) as chapter 13 measured BERT's: each
//! head's weight on the keys a pattern names, against what a head that spreads its weight
//! evenly would put there, and what removing each head costs.
//!
//! Measured (`cargo test -p pretrained --test shakespeare_heads -- --nocapture` prints the
//! tables): the model's heads are soft. The strongest previous-character head puts 0.312
//! of its weight on the previous character (block 1, head 0; an even spread puts 0.059
//! there), the strongest word-start head 0.294 on the first letter of the word (block 2,
//! head 1; even: 0.045). No head looks at the speaker's name more than an even spread
//! would (0.181 at most, against 0.192), and none is a sink (0.062 at most on the first
//! position, against 0.059). On a random string of letters written twice no head matches
//! prefixes (0.011 at most, below an even spread's 0.022), and the model predicts the
//! copy no better than the first half (6.33 nats a letter against 6.23): at this size and
//! training, no induction heads. Removing a head costs 0.012 to 0.162 nats (the most:
//! block 0, head 3) on a loss of 1.910.

use attention::gpt::data::train_and_validation;
use attention::gpt::heads::{
    Pattern, ablation, pattern_scores, repeated_random, uniform_baseline,
};
use attention::gpt::kernels::{Exact, Fast};
use ndarray::{Array2, s};
use pretrained::{gpt2, shakespeare_dir};

fn show(name: &str, t: &Array2<f64>, baseline: f64) {
    println!("{name} (an even spread: {baseline:.3}):");
    for row in t.rows() {
        println!("  {}", row.iter().map(|v| format!("{v:6.3}")).collect::<Vec<_>>().join(" "));
    }
}

/// The largest entry and its (block, head).
fn best(t: &Array2<f64>) -> ((usize, usize), f64) {
    t.indexed_iter()
        .map(|(i, &v)| (i, v))
        .fold(((0, 0), f64::MIN), |b, x| if x.1 > b.1 { x } else { b })
}

#[test]
fn the_heads_are_soft_with_no_sink_and_no_induction() {
    let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare/input.txt");
    let ids = vocab.encode(&std::fs::read_to_string(path).unwrap()).unwrap();
    let held_out = &train_and_validation(&ids).1[..64 * 100];
    let texts: Vec<(Vec<usize>, Vec<char>)> = held_out
        .chunks_exact(64)
        .map(|w| (w.to_vec(), vocab.decode(w).chars().collect()))
        .collect();
    let chars: Vec<Vec<char>> = texts.iter().map(|(_, c)| c.clone()).collect();
    let mut found = vec![];
    for pattern in Pattern::ON_TEXT {
        let scores = pattern_scores(&gpt, &Exact, &texts, pattern).unwrap();
        let baseline = uniform_baseline(&chars, pattern);
        show(&format!("{pattern:?}"), &scores, baseline);
        found.push((pattern, best(&scores), baseline));
    }
    let get = |p: Pattern| found.iter().find(|f| f.0 == p).map(|f| (f.1, f.2)).unwrap();
    let ((at, previous), even) = get(Pattern::Previous);
    assert_eq!(at, (1, 0));
    assert!((previous - 0.312).abs() < 5e-4 && previous > 3.0 * even, "{previous} {even}");
    let ((at, word), even) = get(Pattern::WordStart);
    assert_eq!(at, (2, 1));
    assert!((word - 0.294).abs() < 5e-4 && word > 3.0 * even, "{word} {even}");
    let ((at, name), even) = get(Pattern::Speaker);
    assert_eq!(at, (1, 1));
    assert!((name - 0.181).abs() < 5e-4 && name < even, "no speaker head: {name} {even}");
    let ((_, sink), even) = get(Pattern::Sink);
    assert!(sink < 1.2 * even, "a sink: {sink} against {even}");

    // A random string of letters written twice: an induction head would look from each
    // letter of the copy to the letter after its first occurrence.
    let letters: Vec<char> = ('a'..='z').collect();
    let twice: Vec<(Vec<usize>, Vec<char>)> = repeated_random(&letters, 50, 32, 0)
        .into_iter()
        .map(|c| (vocab.encode(&c.iter().collect::<String>()).unwrap(), c))
        .collect();
    let prefix = pattern_scores(&gpt, &Exact, &twice, Pattern::PrefixMatch).unwrap();
    let chars: Vec<Vec<char>> = twice.iter().map(|(_, c)| c.clone()).collect();
    show("PrefixMatch", &prefix, uniform_baseline(&chars, Pattern::PrefixMatch));
    let even = uniform_baseline(&chars, Pattern::PrefixMatch);
    assert!(best(&prefix).1 < even, "no head matches prefixes: {prefix}");
    // and the model does not predict the copy better than the first half
    let (first, second) = halves_loss(&gpt, &twice);
    println!(
        "random string: {first:.3} nats a letter in its first half, {second:.3} in its copy"
    );
    assert!(second > first - 0.1, "{first} {second}");

    let (rise, full) = ablation(&gpt, &Fast, held_out).unwrap();
    show(&format!("loss rise without each head (all heads: {full:.4})"), &rise, 0.0);
    let (at, most) = best(&rise);
    assert_eq!(at, (0, 3));
    assert!((most - 0.162).abs() < 2e-3 && rise.iter().all(|&r| r > 0.0), "{rise}");
}

/// The mean loss predicting the characters of each text's first half and of its copy.
fn halves_loss(
    gpt: &attention::gpt::weights::Gpt<f32>,
    texts: &[(Vec<usize>, Vec<char>)],
) -> (f64, f64) {
    let (mut first, mut second, mut n) = (0.0, 0.0, (0, 0));
    for (ids, _) in texts {
        let half = ids.len() / 2;
        let x =
            Array2::from_shape_vec((1, ids.len() - 1), ids[..ids.len() - 1].to_vec()).unwrap();
        let logits = gpt.logits_with(&Exact, &x.view()).unwrap();
        for i in 0..ids.len() - 1 {
            let row = logits.slice(s![0, i, ..]);
            let max = row.iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
            let lse = max + row.iter().map(|&v| (f64::from(v) - max).exp()).sum::<f64>().ln();
            let loss = lse - f64::from(row[ids[i + 1]]);
            if i + 1 < half {
                (first, n.0) = (first + loss, n.0 + 1);
            } else {
                (second, n.1) = (second + loss, n.1 + 1);
            }
        }
    }
    (first / n.0 as f64, second / n.1 as f64)
}
