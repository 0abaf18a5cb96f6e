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

use attention::gpt::heads::Pattern;
use ndarray::Array2;
use pretrained::writing::{HeadStudy, head_study};
use pretrained::{gpt2, shakespeare_dir};

fn show(name: &str, t: &Array2<f64>, baseline: f64) {
    println!("{name} (an even spread: {baseline:.3}):");
    for row in t.rows() {
        println!("  {}", row.iter().map(|v| format!("{v:6.3}")).collect::<Vec<_>>().join(" "));
    }
}

fn study() -> HeadStudy {
    let (gpt, vocab) = gpt2::load(&shakespeare_dir()).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare/input.txt");
    head_study(&gpt, &vocab, &std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_heads_are_soft_with_no_sink_and_no_induction() {
    let study = study();
    for p in &study.patterns {
        show(&format!("{:?}", p.pattern), &p.scores, p.even);
    }
    let get = |pattern: Pattern| {
        let p = study.patterns.iter().find(|p| p.pattern == pattern).unwrap();
        (p.best(), p.even)
    };
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
    let ((_, prefix), even) = get(Pattern::PrefixMatch);
    assert!(prefix < even, "no head matches prefixes: {prefix} against {even}");
    // and the model does not predict the copy better than the first half
    let (first, second) = study.halves;
    println!(
        "random string: {first:.3} nats a letter in its first half, {second:.3} in its copy"
    );
    assert!(second > first - 0.1, "{first} {second}");

    let rise = &study.rise;
    show(&format!("loss rise without each head (all heads: {:.4})", study.loss), rise, 0.0);
    let most = rise.indexed_iter().fold(
        ((0, 0), f64::MIN),
        |b, (i, &v)| {
            if v > b.1 { (i, v) } else { b }
        },
    );
    assert_eq!(most.0, (0, 3));
    assert!((most.1 - 0.162).abs() < 2e-3 && rise.iter().all(|&r| r > 0.0), "{rise}");
}
