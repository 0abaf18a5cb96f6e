//! The `train` tool's paths, run in-process on a small text: a run and its checkpoint, an
//! interrupted run resumed to the very same bits, and the errors that must be one clear line
//! before anything is written (a corpus empty, binary, not UTF-8 or too short; an output
//! folder that is not a checkpoint; a checkpoint from another vocabulary, or truncated).

#[allow(dead_code)]
#[path = "../examples/train.rs"]
mod train;

use std::path::Path;
use std::sync::atomic::AtomicUsize;

use clap::Parser;

fn cli(args: &[&str]) -> train::Cli {
    train::Cli::try_parse_from(std::iter::once("train").chain(args.iter().copied())).unwrap()
}

fn run(args: &[&str]) -> Result<u8, String> {
    train::run(&cli(args), &AtomicUsize::new(0))
}

/// A text of a few thousand characters with a small vocabulary.
fn corpus(dir: &Path) -> String {
    let line = "to be, or not to be: that is the question.\n";
    let path = dir.join("corpus.txt");
    std::fs::write(&path, line.repeat(60)).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_run_leaves_a_checkpoint_in_gpt2s_layout() {
    let dir = tempfile::tempdir().unwrap();
    let text = corpus(dir.path());
    let out = dir.path().join("run");
    let out_arg = out.to_str().unwrap();
    assert_eq!(
        run(&[
            "--corpus",
            &text,
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--out",
            out_arg,
            "--sample",
            "20",
            "--snapshot-at",
            "1,3"
        ]),
        Ok(0)
    );
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "config.json",
            "log.csv",
            "model.safetensors",
            "optimizer.safetensors",
            "trainer_state.json",
            "vocab.json"
        ]
    );
    let config = std::fs::read_to_string(out.join("config.json")).unwrap();
    assert!(
        config.contains(r#""model_type": "gpt2""#)
            && config.contains(r#""activation_function": "gelu""#)
    );
    let log = std::fs::read_to_string(out.join("log.csv")).unwrap();
    assert_eq!(log.lines().count(), 1 + 4);
    assert!(
        log.lines().nth(2).unwrap().split(',').nth(4).is_some_and(|v| !v.is_empty()),
        "val at 2"
    );
    let (gpt, vocab) = pretrained::gpt2::load(&out).unwrap();
    assert_eq!((vocab.len(), gpt.config.block_size), (17, 64));
    // the snapshots after steps 1 and 3 are models of their own, and differ from the last
    for step in [1, 3] {
        let (snapshot, _) =
            pretrained::gpt2::load(&dir.path().join(format!("run-step-{step}"))).unwrap();
        assert_ne!(snapshot.wte, gpt.wte, "step {step}");
    }
    // nothing else is left beside the folders
    let mut beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, ["corpus.txt", "run", "run-step-1", "run-step-3"]);
}

#[test]
fn an_interrupted_run_resumes_to_the_same_bits() {
    let dir = tempfile::tempdir().unwrap();
    let text = corpus(dir.path());
    let (whole, parts) = (dir.path().join("whole"), dir.path().join("parts"));
    let (whole_arg, parts_arg) = (whole.to_str().unwrap(), parts.to_str().unwrap());
    // seed 7, so that a resume that started afresh (seed 0) could not end on the same bits
    let common = ["--corpus", &text, "--steps", "6", "--eval-every", "4", "--sample", "0"];
    let seeded = [&common[..], &["--seed", "7"]].concat();
    assert_eq!(run(&[&seeded[..], &["--out", whole_arg]].concat()), Ok(0));
    // Ctrl-C during step 3: the checkpoint is saved after it, and the run exits with 130
    assert_eq!(
        run(&[&seeded[..], &["--out", parts_arg, "--stop-after", "3"]].concat()),
        Ok(130)
    );
    let state = std::fs::read_to_string(parts.join("trainer_state.json")).unwrap();
    assert!(state.contains(r#""step": 3"#), "{state}");
    // the seed and the schedule's length come from the checkpoint
    let resume =
        ["--corpus", &text, "--resume", parts_arg, "--eval-every", "4", "--sample", "0"];
    let wrong_seed = run(&[&resume[..], &["--seed", "8"]].concat()).unwrap_err();
    assert!(wrong_seed.contains("this run was seeded with 7, not 8"), "{wrong_seed}");
    assert_eq!(run(&resume), Ok(0));
    let log = std::fs::read_to_string(parts.join("log.csv")).unwrap();
    assert_eq!(log.lines().count(), 1 + 6);
    for file in ["model.safetensors", "optimizer.safetensors", "log.csv"] {
        assert!(
            std::fs::read(whole.join(file)).unwrap()
                == std::fs::read(parts.join(file)).unwrap(),
            "{file} differs"
        );
    }
}

#[test]
fn a_finished_run_is_neither_overwritten_nor_resumed_past_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let text = corpus(dir.path());
    let out = dir.path().join("run");
    let out_arg = out.to_str().unwrap();
    let args = ["--corpus", &text, "--steps", "2", "--eval-every", "2", "--sample", "0"];
    assert_eq!(run(&[&args[..], &["--out", out_arg]].concat()), Ok(0));
    let model = std::fs::read(out.join("model.safetensors")).unwrap();
    // a fresh run into the same folder would replace it: refused
    let again = run(&[&args[..], &["--out", out_arg]].concat()).unwrap_err();
    assert!(again.contains("holds a checkpoint already; pass --resume"), "{again}");
    // resuming a finished run without more steps: nothing to do, said so
    let done = run(&["--corpus", &text, "--resume", out_arg]).unwrap_err();
    assert!(done.contains("the run is at step 2 already; pass a --steps above it"), "{done}");
    assert_eq!(std::fs::read(out.join("model.safetensors")).unwrap(), model);
}

#[test]
fn bad_corpora_are_one_line_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let out_arg = out.to_str().unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("empty.txt", b"", "the file is empty"),
        (
            "binary.bin",
            b"PK\x03\x04\x00\x00 zip",
            "a binary file (a zero byte at 4), not text",
        ),
        ("latin1.txt", b"caf\xe9 au lait", "not UTF-8 text (byte 3 is invalid)"),
        ("short.txt", b"To be, or not to be.", "20 characters; at least 73 are needed"),
    ];
    for (name, bytes, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = run(&["--corpus", path.to_str().unwrap(), "--out", out_arg]).unwrap_err();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(err.contains(expected), "{name}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
    let missing = run(&["--corpus", "/no/such/corpus.txt", "--out", out_arg]).unwrap_err();
    assert!(missing.starts_with("/no/such/corpus.txt: "), "{missing}");
    assert!(!out.exists(), "nothing was written");
}

#[test]
fn a_folder_that_is_not_a_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = corpus(dir.path());
    // the corpus's own folder holds the corpus: replacing it would lose it
    let err = run(&["--corpus", &text, "--steps", "2", "--out", dir.path().to_str().unwrap()])
        .unwrap_err();
    assert!(
        err.ends_with(
            "holds corpus.txt and is not a checkpoint folder; each checkpoint replaces the \
             whole folder, so name a new one"
        ),
        "{err}"
    );
    assert!(Path::new(&text).exists());
}

/// A folder the checkpoint cannot be written to is found before training, not at the first
/// save (here `--out` lies inside a file; a read-only folder would not stop root).
#[test]
fn an_out_folder_that_cannot_be_written_is_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let text = corpus(dir.path());
    let out = Path::new(&text).join("run");
    let err = run(&["--corpus", &text, "--steps", "2", "--out", out.to_str().unwrap()])
        .unwrap_err();
    // the probe's own message, naming the folder it tried (the save would say something else)
    let inside = format!("run: cannot write a checkpoint in {text}: ");
    assert!(err.contains(&inside), "{err}");
    assert!(Path::new(&text).is_file());
}

#[test]
fn a_checkpoint_from_another_text_or_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = corpus(dir.path());
    let out = dir.path().join("run");
    let out_arg = out.to_str().unwrap();
    assert_eq!(
        run(&[
            "--corpus",
            &text,
            "--steps",
            "2",
            "--eval-every",
            "2",
            "--out",
            out_arg,
            "--sample",
            "0"
        ]),
        Ok(0)
    );
    let other = dir.path().join("other.txt");
    std::fs::write(&other, "Now is the winter of our discontent!\n".repeat(60)).unwrap();
    let err = run(&["--corpus", other.to_str().unwrap(), "--resume", out_arg, "--steps", "4"])
        .unwrap_err();
    assert!(
        err.contains(
            "vocab.json: its vocabulary (17 characters) is not the corpus's (17 characters"
        ),
        "{err}"
    );
    assert!(err.ends_with("'!' is not in the checkpoint's"), "{err}");
    // a truncated weights file
    let weights = out.join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let err = run(&["--corpus", &text, "--resume", out_arg, "--steps", "4"]).unwrap_err();
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}
