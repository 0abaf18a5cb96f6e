//! The reader's paths through chapter 13's example, run in-process: a sentence of their own,
//! `--compare`, `--model`, and the errors (an empty sentence, a missing or corrupt model
//! directory) that must be one clear message, never a panic. The example's `main` prints that
//! message as `error: …` and exits with 1.

#[allow(dead_code)]
#[path = "../examples/ch13_real_model.rs"]
mod ch13;

use std::path::Path;

use clap::Parser;
use ndarray::{Array, Array4, ArrayD, Axis, IxDyn, s};
use ndarray_npy::{read_npy, write_npy};

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
    assert_eq!(error_of(&["--time", ""]), "the text \"\" has no tokens: there is nothing to embed");
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
    // Both paths, timed (the tiny model runs them in milliseconds).
    ch13::main_with(cli(&["--model", tiny.to_str().unwrap(), "--time", "the cat sat"])).unwrap();
}

/// `--time`'s report has the lines `tools/bench_bert.py` reads, and the two paths agree.
#[test]
fn time_reports_both_paths() {
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/pretrained/tests/fixtures/tiny-bert/model");
    let encoder = pretrained::SentenceEncoder::load(&tiny).unwrap();
    let report = ch13::time_report(&encoder, "the cat sat").unwrap();
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 4, "{report}");
    assert!(lines[0].starts_with("forward pass of 5 tokens, "), "{report}");
    for (line, path) in lines[1..3].iter().zip(["fast path:  median ", "plain path: median "]) {
        let rest = line.trim_start().strip_prefix(path).unwrap_or_else(|| panic!("{report}"));
        let ms: f64 = rest.split(" ms").next().unwrap().parse().unwrap();
        assert!(ms.is_finite() && ms >= 0.0, "{report}");
    }
    let differs: f64 = lines[3].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(differs < 1e-5, "{report}");
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

/// The files of a directory, sorted (hidden ones too: a temporary file left behind shows).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn output_names_are_checked_before_the_model_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    // A --view in a folder that does not exist: refused before anything is written, and
    // before the model is read (this model does not exist: its error would come first).
    let (png, view) = (path("a.png"), path("nodir/v.html"));
    let args = ["a sentence", "--model", "/no/such/model", "--out", &png, "--view", &view];
    let err = error_of(&args);
    assert!(err.starts_with(&format!("{view} (--view): the folder ")), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    // The same with the committed model: still nothing written.
    let err = error_of(&["a sentence", "--out", &png, "--view", &view]);
    assert!(err.contains("nodir"), "{err}");
    // A --out in a folder that does not exist, an output that is a folder, two the same file.
    let err = error_of(&["a sentence", "--out", &path("nodir/a.png")]);
    assert!(err.contains("nodir/a.png (--out): the folder "), "{err}");
    std::fs::create_dir(dir.path().join("d.html")).unwrap();
    let err = error_of(&["a sentence", "--out", &png, "--view", &path("d.html")]);
    assert!(err.contains("d.html (--view): it is a directory"), "{err}");
    assert_eq!(listing(dir.path()), ["d.html"], "nothing written");
    // Wrong extensions are usage errors, at parse time.
    let parse = |args: &[&str]| {
        let all = std::iter::once("ch13_real_model").chain(args.iter().copied());
        ch13::Cli::try_parse_from(all)
    };
    for args in [
        ["a sentence", "--out", "c.jpg"],
        ["a sentence", "--view", "v.png"],
        ["a sentence", "--weights-out", "w.npz"],
    ] {
        let err = parse(&args).unwrap_err().to_string();
        assert!(err.contains(args[2]), "{err}");
    }
    assert_eq!(listing(dir.path()), ["d.html"], "nothing written");
}

#[test]
fn two_outputs_that_are_one_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("a.png");
    std::fs::write(&png, b"old").unwrap();
    let view = dir.path().join("v.html");
    std::os::unix::fs::symlink(&png, &view).unwrap();
    let (png_arg, view_arg) = (png.to_str().unwrap(), view.to_str().unwrap());
    let err = error_of(&["a sentence", "--out", png_arg, "--view", view_arg]);
    assert!(err.contains("are the same file"), "{err}");
    assert_eq!(std::fs::read(&png).unwrap(), b"old");
    assert_eq!(listing(dir.path()), ["a.png", "v.html"]);
}

#[test]
fn without_out_the_grid_goes_to_target_ch13() {
    let default = ch13::default_out();
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(default, repository.join("target/ch13/ch13_your_sentence.png"));
    let _ = std::fs::remove_file(&default);
    let tiny = repository.join("crates/pretrained/tests/fixtures/tiny-bert/model");
    ch13::main_with(cli(&["a cat", "--model", tiny.to_str().unwrap()])).unwrap();
    assert!(std::fs::read(&default).unwrap().starts_with(b"\x89PNG"));
    assert!(!repository.join("ch13_your_sentence.png").exists(), "nothing in the root");
}

/// `--weights-out` saves the real model's weights, float32 `(layers, heads, L, L)`, and
/// Appendix C's round trip works: one layer, as `attend`'s queries `ln W` with keys `√L · I`
/// and values `I`, gives back the same weights (and draws them with --png).
#[test]
fn weights_out_saves_every_head_and_attend_draws_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let args = ["The cat sat.", "--out", &path("g.png"), "--weights-out", &path("w.npy")];
    ch13::main_with(cli(&args)).unwrap();
    let w: Array4<f32> = read_npy(dir.path().join("w.npy")).unwrap();
    let l = w.shape()[3];
    assert_eq!(w.shape(), [6, 12, l, l]);
    assert_eq!(l, 6, "[CLS] the cat sat . [SEP]");
    for row in w.lanes(Axis(3)) {
        assert!((row.sum() - 1.0).abs() < 1e-5, "each row sums to 1");
    }
    // The round trip, as Appendix C's NumPy lines write it.
    let layer: ArrayD<f32> = w.slice(s![0..1, .., .., ..]).to_owned().into_dyn();
    let q = layer.mapv(|x| x.max(1e-30).ln());
    let eye =
        Array::from_shape_fn(IxDyn(&[1, 12, l, l]), |i| f32::from(u8::from(i[2] == i[3])));
    let k = eye.mapv(|x| x * (l as f32).sqrt());
    for (name, a) in [("q", &q), ("k", &k), ("v", &eye)] {
        write_npy(dir.path().join(format!("{name}.npy")), a).unwrap();
    }
    let args: Vec<std::ffi::OsString> = [
        "attend", "--q", &path("q.npy"), "--k", &path("k.npy"), "--v", &path("v.npy"),
        "--out", &path("o.npy"), "--weights", &path("w0.npy"), "--png", &path("layer0.png"),
        "--png-scale", "row",
    ]
    .iter()
    .map(Into::into)
    .collect();
    ch13::reader_tools::attend::run(args).unwrap_or_else(|f| panic!("{}", f.message()));
    let back: ArrayD<f32> = read_npy(dir.path().join("w0.npy")).unwrap();
    let out: ArrayD<f32> = read_npy(dir.path().join("o.npy")).unwrap();
    let diff = |a: &ArrayD<f32>| {
        a.iter().zip(&layer).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    };
    assert!(diff(&back) < 1e-5 && diff(&out) < 1e-5, "{} {}", diff(&back), diff(&out));
    assert!(std::fs::read(dir.path().join("layer0.png")).unwrap().starts_with(b"\x89PNG"));
}
