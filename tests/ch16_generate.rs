//! The `generate` tool, run in-process: the text it streams (the same through the KV cache
//! and without it, the same as chapter 15's sample), a reader closing the pipe, `--score`,
//! and the errors that must be one clear line (a prompt or a file with characters the model
//! does not know, a checkpoint missing or truncated, settings out of range).

#[allow(dead_code)]
#[path = "../examples/generate.rs"]
mod generate;

use std::io::{self, Write};

use attention::gpt::kernels::Exact;
use attention::gpt::train::evaluate;
use clap::Parser;

/// Runs the tool; its exit code (or error), standard output and standard error.
fn run(args: &[&str]) -> (Result<u8, String>, String, String) {
    let cli =
        generate::Cli::try_parse_from(std::iter::once("generate").chain(args.iter().copied()))
            .unwrap();
    let (mut out, mut log) = (Vec::new(), Vec::new());
    let code = generate::run(&cli, &mut out, &mut log);
    (code, String::from_utf8(out).unwrap(), String::from_utf8(log).unwrap())
}

fn error(args: &[&str]) -> String {
    let (code, out, _) = run(args);
    assert!(out.is_empty(), "{out:?}");
    code.unwrap_err()
}

#[test]
fn the_cache_changes_the_speed_not_the_text() {
    let args = ["--prompt", "ROMEO:\n", "--tokens", "40", "--exact"];
    let (code, cached, log) = run(&args);
    assert_eq!(code, Ok(0));
    assert_eq!(cached.chars().count(), 40);
    // The first characters are chapter 15's sample (pretrained::gpt2::write, seed 0).
    assert!(cached.starts_with("That themoy "), "{cached:?}");
    assert!(log.contains("through the KV cache, exact path"), "{log}");
    let (_, plain, log) = run(&[&args[..], &["--no-cache"]].concat());
    assert_eq!(plain, cached);
    assert!(log.contains("no cache"), "{log}");
    // Another seed, another text; greedy needs no seed.
    assert_ne!(run(&[&args[..], &["--seed", "1"]].concat()).1, cached);
    let greedy = ["--temperature", "0", "--tokens", "20", "--exact"];
    assert_eq!(run(&greedy).1, run(&[&greedy[..], &["--seed", "5"]].concat()).1);
}

/// Standard output that takes `room` bytes, then reports a closed pipe; it counts the writes.
struct Pipe {
    room: usize,
    taken: Vec<u8>,
    writes: usize,
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes += 1;
        if self.taken.len() + buf.len() > self.room {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        self.taken.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn it_streams_and_a_closed_pipe_ends_it_quietly() {
    let cli =
        generate::Cli::try_parse_from(["generate", "--tokens", "30", "--exact"]).unwrap();
    let mut pipe = Pipe { room: usize::MAX, taken: vec![], writes: 0 };
    assert_eq!(generate::run(&cli, &mut pipe, &mut io::sink()), Ok(0));
    assert_eq!(pipe.writes, 30); // one write per character, as it is drawn
    let cli = generate::Cli::try_parse_from(["generate", "--tokens", "100000"]).unwrap();
    let mut pipe = Pipe { room: 10, taken: vec![], writes: 0 };
    assert_eq!(generate::run(&cli, &mut pipe, &mut io::sink()), Ok(0));
    assert!(pipe.writes <= 11, "{}", pipe.writes); // it stopped at the first refusal
}

#[test]
fn score_is_the_mean_cross_entropy_per_character() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("text.txt");
    let text = "ROMEO:\nBut soft, what light through yonder window breaks?\n".repeat(3);
    std::fs::write(&file, &text).unwrap();
    let (code, out, _) = run(&["--score", file.to_str().unwrap(), "--exact"]);
    assert_eq!(code, Ok(0));
    let (gpt, vocab) = pretrained::gpt2::load(&pretrained::shakespeare_dir()).unwrap();
    let loss = evaluate(&gpt, &Exact, &vocab.encode(&text).unwrap(), 16).unwrap();
    assert_eq!(out, format!("{loss:.4}\n"));
    // a text the model has seen the like of scores far below a uniform guess, ln 71 = 4.26
    assert!(loss < 2.5, "{loss}");
    // fast and exact agree to the printed digits, or nearly
    let fast: f64 = run(&["--score", file.to_str().unwrap()]).1.trim().parse().unwrap();
    assert!((fast - loss).abs() < 2e-4, "{fast} {loss}");
}

#[test]
fn bad_prompts_files_checkpoints_and_settings_are_one_line() {
    let e = error(&["--prompt", "ROMEO{\né"]);
    assert_eq!(
        e,
        "--prompt: the model's vocabulary (71 characters) has no '{' at 1:6; 'é' at 2:1 \
         (line:column)"
    );
    assert!(error(&["--prompt", ""]).starts_with("--prompt is empty"));
    // settings out of their range are usage errors: clap's message, exit code 2
    for (args, message) in [
        (["--top-p", "1.5"], "P = 1.5 is out of its range (0, 1]"),
        (["--top-p", "0"], "P = 0 is out of its range (0, 1]"),
        (["--min-p", "-0.1"], "M = -0.1 is out of its range [0, 1]"),
        (["--temperature", "-1"], "T = -1 is out of its range [0, ∞)"),
        (["--temperature", "nan"], "T = NaN is out of its range [0, ∞)"),
    ] {
        let all = std::iter::once("generate").chain(args);
        let e = generate::Cli::try_parse_from(all).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(message), "{e}");
    }

    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(path("short.txt"), "A").unwrap();
    assert!(
        error(&["--score", &path("short.txt")])
            .ends_with("1 characters; at least 2 are needed (one to predict)")
    );
    std::fs::write(path("binary.bin"), [0x41, 0xff, 0x41]).unwrap();
    assert!(
        error(&["--score", &path("binary.bin")])
            .ends_with("not UTF-8 text (byte 1 is not valid)")
    );
    std::fs::write(path("many.txt"), "ab\n{}<>#@\n{").unwrap();
    let e = error(&["--score", &path("many.txt")]);
    assert!(e.contains("'{' at 2:1, 3:1; '}' at 2:2"), "{e}");
    assert!(e.ends_with("; and 1 other character (line:column)"), "{e}");

    // a checkpoint folder that is missing, or whose weights were cut short
    assert!(error(&["--checkpoint", &path("none")]).contains("config.json"));
    let copy = dir.path().join("cut");
    std::fs::create_dir(&copy).unwrap();
    for name in ["config.json", "vocab.json", "model.safetensors"] {
        std::fs::copy(pretrained::shakespeare_dir().join(name), copy.join(name)).unwrap();
    }
    let weights = copy.join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let e = error(&["--checkpoint", copy.to_str().unwrap()]);
    assert!(e.starts_with(weights.to_str().unwrap()) && !e.contains('\n'), "{e}");
}
