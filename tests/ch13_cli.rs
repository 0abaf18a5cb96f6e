//! The reader's paths through chapter 13's example, run in-process: a sentence of their own,
//! `--compare`, `--model`, and the errors (an empty sentence, a missing or corrupt model
//! directory) that must be one clear message, never a panic. The example's `main` prints that
//! message as `error: …` and exits with 1.

#[allow(dead_code)]
#[path = "../examples/ch13_real_model.rs"]
mod ch13;

use std::path::Path;

use clap::Parser;

fn cli(args: &[&str]) -> ch13::Cli {
    ch13::Cli::try_parse_from(std::iter::once("ch13_real_model").chain(args.iter().copied()))
        .unwrap()
}

fn error_of(args: &[&str]) -> String {
    ch13::main_with(cli(args)).unwrap_err().to_string()
}

/// A model directory with the committed model's config and tokenizer and the given weights.
fn model_with(weights: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json", "sentence_bert_config.json"] {
        std::fs::copy(pretrained::minilm_dir().join(file), dir.path().join(file)).unwrap();
    }
    std::fs::write(dir.path().join("model.safetensors"), weights).unwrap();
    dir
}

#[test]
fn your_sentence_draws_its_heads_and_a_view() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("mine.png");
    let html = dir.path().join("mine.html");
    let (png_arg, html_arg) = (png.to_str().unwrap(), html.to_str().unwrap());
    ch13::main_with(cli(&["Attention is all you need.", "--out", png_arg, "--view", html_arg]))
        .unwrap();
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("attention") && page.contains("[CLS]"), "the page holds the tokens");
    // It opens on head 0.2, the previous-token head, as the chapter's view does.
    assert!(page.contains(r#""start":{"layer":0,"head":2}"#), "the page opens on head 0.2");
}

#[test]
fn another_models_view_opens_on_all_heads() {
    let dir = tempfile::tempdir().unwrap();
    let (png, html) = (dir.path().join("tiny.png"), dir.path().join("tiny.html"));
    let model = pretrained::minilm_dir().join("../../tests/fixtures/tiny-bert/model");
    let args = [
        "a cat",
        "--model",
        model.to_str().unwrap(),
        "--out",
        png.to_str().unwrap(),
        "--view",
        html.to_str().unwrap(),
    ];
    ch13::main_with(cli(&args)).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#""layers":[{"label":"layer 0""#), "{}", &page[..200]);
    assert!(!page.contains(r#""start":"#), "no head chosen for another model");
}

#[test]
fn compare_runs_and_rejects_an_empty_text() {
    ch13::main_with(cli(&["--compare", "A cat sleeps.", "A kitten naps."])).unwrap();
    let long = "word ".repeat(400); // cut to 256 tokens, with a note on stderr
    ch13::main_with(cli(&["--compare", &long, "A kitten naps."])).unwrap();
    assert_eq!(
        error_of(&["--compare", "  ", "A kitten naps."]),
        "the text \"  \" has no tokens: there is nothing to embed"
    );
}

#[test]
fn an_empty_sentence_is_an_error() {
    assert_eq!(error_of(&[""]), "the text \"\" has no tokens: there is nothing to embed");
}

#[test]
fn a_missing_model_names_its_config() {
    let err = error_of(&["--model", "/no/such/model", "Hello"]);
    assert!(err.starts_with("/no/such/model/config.json: "), "{err}");
}

#[test]
fn a_corrupt_model_names_its_weights_file() {
    let bytes = std::fs::read(pretrained::minilm_dir().join("model.safetensors")).unwrap();
    let dir = model_with(&bytes[..1000]);
    let err = error_of(&["--model", dir.path().to_str().unwrap(), "Hello"]);
    let expected = format!("{}: not a valid safetensors file", dir.path().join("model.safetensors").display());
    assert!(err.starts_with(&expected), "{err}");
}

#[test]
fn another_bert_directory_runs() {
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/pretrained/tests/fixtures/tiny-bert/model");
    ch13::main_with(cli(&["--model", tiny.to_str().unwrap()])).unwrap();
    ch13::main_with(cli(&["--model", tiny.to_str().unwrap(), "--compare", "the cat", "a dog"])).unwrap();
}

#[test]
fn options_that_need_a_sentence_are_usage_errors() {
    let parse = |args: &[&str]| {
        ch13::Cli::try_parse_from(std::iter::once("ch13_real_model").chain(args.iter().copied()))
    };
    assert!(parse(&["--view", "x.html"]).is_err());
    assert!(parse(&["--out", "x.png"]).is_err());
    assert!(parse(&["--compare", "only one"]).is_err());
    assert!(parse(&["a sentence", "--compare", "a", "b"]).is_err());
    assert!(parse(&["a sentence", "--view", "x.html"]).is_ok());
}
