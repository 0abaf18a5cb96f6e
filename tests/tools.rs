//! The reader tools `attend` and `multihead` (examples/), run on `.npy` files written by
//! NumPy (the PyTorch fixtures) and on broken inputs.
//!
//! The tools' logic lives in `examples/reader_tools/`, included here as a module, so each
//! test calls `run(args)` exactly as `main` does and sees the failure `main` would print.
//! `tests/tool_processes.rs` runs them as separate processes (exit codes, signals, kills).

#[allow(dead_code)]
#[path = "../examples/reader_tools/mod.rs"]
mod reader_tools;
mod support;

use std::ffi::OsString;
use std::path::Path;

use ndarray::{Array, ArrayD, Dimension, IxDyn};
use ndarray_npy::{read_npy, write_npy};
use reader_tools::{Failure, attend, multihead};
use support::{files, fixture, layer_args, self_attention_args};
use tempfile::TempDir;

type Run = fn(Vec<OsString>) -> Result<String, Failure>;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Runs a tool on `list` (without the program name, which is added).
fn call(run: Run, name: &str, list: &[String]) -> Result<String, Failure> {
    run(std::iter::once(name.to_string())
        .chain(list.iter().cloned())
        .map(OsString::from)
        .collect())
}

fn attend_run(list: &[String]) -> Result<String, Failure> {
    call(attend::run, "attend", list)
}

fn multihead_run(list: &[String]) -> Result<String, Failure> {
    call(multihead::run, "multihead", list)
}

/// A successful run's summary, or a panic with the failure as the tool would print it.
fn ok(result: Result<String, Failure>) -> String {
    result.unwrap_or_else(|f| panic!("the tool failed:\n{}", f.message()))
}

fn out_path(dir: &TempDir, name: &str) -> String {
    dir.path().join(name).to_string_lossy().into_owned()
}

fn max_diff(a: &ArrayD<f64>, b: &ArrayD<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The q, k, v arguments of an SDPA fixture case.
fn qkv(case: &str) -> Vec<String> {
    let mut list = Vec::new();
    for name in ["q", "k", "v"] {
        list.push(format!("--{name}"));
        list.push(fixture("sdpa", case, &format!("{name}.npy")));
    }
    list
}

/// [`qkv`] and, for `Some("causal")`, `--mask causal`, for `Some("file")`, `--mask` with the
/// case's own `mask.npy`.
fn qkv_masked(case: &str, mask: Option<&str>) -> Vec<String> {
    let mut list = qkv(case);
    match mask {
        Some("causal") => list.extend(args(&["--mask", "causal"])),
        Some("file") => list.extend(["--mask".to_string(), fixture("sdpa", case, "mask.npy")]),
        _ => {}
    }
    list
}

/// The x and weight arguments of an MHA fixture case.
fn x_and_weights(case: &str) -> Vec<String> {
    layer_args("mha", case, "x_q.npy")
}

#[test]
fn attend_reproduces_pytorch_on_numpy_files() {
    let dir = TempDir::new().unwrap();
    let (out, weights) = (out_path(&dir, "out.npy"), out_path(&dir, "w.npy"));
    for (case, mask) in [
        ("f64_causal_L6_dk8", Some("causal")),
        ("f64_bool_Lq4_Lk12", Some("file")),
        ("f64_batch2_heads2_bool_L4", Some("file")),
        ("f64_batch2_broadcast_mask_L6", Some("file")),
        ("f64_batch2_L5_dk4", None),
    ] {
        let mut list = qkv_masked(case, mask);
        list.extend(args(&["--out", &out, "--weights", &weights]));
        let summary = attend_run(&list).unwrap_or_else(|e| panic!("{case}: {}", e.message()));
        assert!(summary.contains("wrote"), "{summary}");
        let got: ArrayD<f64> = read_npy(&out).unwrap();
        let expected: ArrayD<f64> = read_npy(fixture("sdpa", case, "out.npy")).unwrap();
        assert!(max_diff(&got, &expected) < 1e-12, "{case}: output");
        let got: ArrayD<f64> = read_npy(&weights).unwrap();
        let expected: ArrayD<f64> = read_npy(fixture("sdpa", case, "weights.npy")).unwrap();
        assert!(max_diff(&got, &expected) < 1e-12, "{case}: weights");
    }
}

#[test]
fn attend_keeps_float32() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let mut list = qkv("f32_causal_L33_dk32");
    list.extend(args(&["--mask", "causal", "--out", &out]));
    ok(attend_run(&list));
    let got: ArrayD<f32> = read_npy(&out).expect("the output is float32 like the inputs");
    let expected: ArrayD<f32> =
        read_npy(fixture("sdpa", "f32_causal_L33_dk32", "out.npy")).unwrap();
    assert!(got.iter().zip(&expected).all(|(a, b)| (a - b).abs() < 1e-5));
}

#[test]
fn multihead_reproduces_pytorch_on_numpy_files() {
    let dir = TempDir::new().unwrap();
    let (out, weights) = (out_path(&dir, "out.npy"), out_path(&dir, "w.npy"));
    for (case, heads, mask) in [
        ("f64_d8_h2_L5", "2", None),
        ("f64_d12_h3_L6_causal", "3", Some("causal".to_string())),
        (
            "f64_d8_h2_batch3_L6_padding",
            "2",
            Some(fixture("mha", "f64_d8_h2_batch3_L6_padding", "mask.npy")),
        ),
    ] {
        let mut list = x_and_weights(case);
        list.extend(args(&["--heads", heads, "--out", &out, "--weights", &weights]));
        if let Some(mask) = mask {
            list.extend(["--mask".to_string(), mask]);
        }
        multihead_run(&list).unwrap_or_else(|e| panic!("{case}: {}", e.message()));
        let got: ArrayD<f64> = read_npy(&out).unwrap();
        let expected: ArrayD<f64> = read_npy(fixture("mha", case, "out.npy")).unwrap();
        assert!(max_diff(&got, &expected) < 1e-12, "{case}: output");
        let got: ArrayD<f64> = read_npy(&weights).unwrap();
        let expected: ArrayD<f64> = read_npy(fixture("mha", case, "weights.npy")).unwrap();
        assert!(max_diff(&got, &expected) < 1e-12, "{case}: weights");
    }
}

/// Runs a tool that must fail on bad data: checks the message names `file` and says
/// `problem`, is one line, exits 1, and that the directory is left exactly as it was.
fn assert_fails(
    run: fn(&[String]) -> Result<String, Failure>,
    list: &[String],
    dir: &TempDir,
    file: &str,
    problem: &str,
) {
    let before = files(dir.path());
    let failure = run(list).expect_err("the tool should refuse this input");
    let Failure::Data(message) = &failure else {
        panic!("expected a data error (exit 1), got:\n{}", failure.message())
    };
    assert_eq!(failure.exit_code(), 1);
    assert!(message.starts_with(file), "message should start with {file:?}: {message}");
    assert!(message.contains(problem), "message should say {problem:?}: {message}");
    assert!(!failure.message().contains('\n'), "one line only: {message}");
    assert_eq!(files(dir.path()), before, "a failed run must leave every file as it was");
}

/// Runs a tool that must refuse its command line: clap's standard error, exit code 2, saying
/// `problem`, and no file touched.
fn assert_usage(
    run: fn(&[String]) -> Result<String, Failure>,
    list: &[String],
    dir: &TempDir,
    problem: &str,
) {
    let before = files(dir.path());
    let failure = run(list).expect_err("the tool should refuse this command line");
    assert!(
        matches!(failure, Failure::Usage(_)),
        "expected a usage error:\n{}",
        failure.message()
    );
    assert_eq!(failure.exit_code(), 2);
    let message = failure.message();
    assert!(message.starts_with("error: "), "{message}");
    assert!(message.contains(problem), "message should say {problem:?}:\n{message}");
    assert!(message.contains("For more information, try '--help'."), "{message}");
    assert_eq!(files(dir.path()), before, "a refused run must leave every file as it was");
}

#[test]
fn attend_refuses_bad_input() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let good = "f64_causal_L6_dk8";
    let with = |replace: &str, path: &str| {
        let mut list = qkv(good);
        let i = list.iter().position(|a| a == replace).unwrap();
        list[i + 1] = path.to_string();
        list.extend(["--out".to_string(), out.clone()]);
        list
    };

    let missing = out_path(&dir, "missing.npy");
    assert_fails(attend_run, &with("--q", &missing), &dir, &missing, "cannot read");

    let garbage = out_path(&dir, "garbage.npy");
    std::fs::write(&garbage, b"this is not an npy file").unwrap();
    assert_fails(attend_run, &with("--k", &garbage), &dir, &garbage, "not a valid .npy file");

    // Five bytes: the documented message, not an I/O error.
    let tiny = out_path(&dir, "tiny.npy");
    std::fs::write(&tiny, b"abcde").unwrap();
    assert_fails(
        attend_run,
        &with("--q", &tiny),
        &dir,
        &tiny,
        "not a valid .npy file: it is 5 bytes long",
    );

    let f32_k = fixture("sdpa", "f32_causal_L6_dk8", "k.npy");
    assert_fails(attend_run, &with("--k", &f32_k), &dir, &f32_k, "dtype float32 differs");

    let ints = out_path(&dir, "ints.npy");
    write_npy(&ints, &ndarray::Array2::<i64>::zeros((6, 8))).unwrap();
    assert_fails(
        attend_run,
        &with("--q", &ints),
        &dir,
        &ints,
        "dtype int64 ('<i8') is not float32 or float64",
    );

    let wrong_d_k = fixture("sdpa", "f64_Lq3_Lk5_dk4_dv2", "k.npy");
    assert_fails(
        attend_run,
        &with("--k", &wrong_d_k),
        &dir,
        &fixture("sdpa", good, "q.npy"),
        "q has d_k = 8 but k has d_k = 4",
    );

    let wrong_l_k = fixture("sdpa", "f64_L8_dk8", "v.npy");
    assert_fails(
        attend_run,
        &with("--v", &wrong_l_k),
        &dir,
        &fixture("sdpa", good, "k.npy"),
        "k has L_k = 6 but v has L_k = 8",
    );

    let batched_v = fixture("sdpa", "f64_batch2_L5_dk4", "v.npy");
    assert_fails(attend_run, &with("--v", &batched_v), &dir, &batched_v, "has 3 axes");

    let mut q: ArrayD<f64> = read_npy(fixture("sdpa", good, "q.npy")).unwrap();
    q[IxDyn(&[2, 3])] = f64::NAN;
    let nan = out_path(&dir, "nan.npy");
    write_npy(&nan, &q).unwrap();
    assert_fails(attend_run, &with("--q", &nan), &dir, &nan, "contains NaN at index [2, 3]");

    q[IxDyn(&[2, 3])] = f64::INFINITY;
    let inf = out_path(&dir, "inf.npy");
    write_npy(&inf, &q).unwrap();
    assert_fails(attend_run, &with("--q", &inf), &dir, &inf, "contains an infinite value");

    let mut list = with("--q", &fixture("sdpa", good, "q.npy"));
    let wrong_mask = fixture("sdpa", "f64_bool_L10_dk6", "mask.npy");
    list.extend(["--mask".to_string(), wrong_mask.clone()]);
    assert_fails(
        attend_run,
        &list,
        &dir,
        &wrong_mask,
        "the mask's shape (10, 10) does not broadcast to the weights' shape (6, 6)",
    );

    let mut list = with("--q", &fixture("sdpa", good, "q.npy"));
    let float_mask = fixture("sdpa", good, "weights.npy");
    list.extend(["--mask".to_string(), float_mask.clone()]);
    assert_fails(
        attend_run,
        &list,
        &dir,
        &float_mask,
        "a mask must have dtype bool (True = may attend), not float64 ('<f8')",
    );

    let mut list = with("--q", &fixture("sdpa", good, "q.npy"));
    list.extend([
        "--png".to_string(),
        out_path(&dir, "w.png"),
        "--labels".to_string(),
        "The,cat,sat".to_string(),
    ]);
    assert_fails(attend_run, &list, &dir, "--labels: 3 labels given", "L = 6 tokens");
}

#[test]
fn attend_refuses_bad_command_lines() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let good = "f64_causal_L6_dk8";
    let with = |extra: &[&str]| {
        let mut list = qkv(good);
        list.extend(args(&["--out", &out]));
        list.extend(args(extra));
        list
    };
    assert_usage(attend_run, &qkv(good), &dir, "--out <OUT.npy>");
    assert_usage(attend_run, &with(&["--labels", "a,b,c,d,e,f"]), &dir, "--png <HEATMAP.png>");
    assert_usage(attend_run, &with(&["--bogus", "1"]), &dir, "unexpected argument '--bogus'");
    assert_usage(
        attend_run,
        &with(&["--out", "again.npy"]),
        &dir,
        "cannot be used multiple times",
    );
    assert_usage(
        attend_run,
        &with(&["--png", "w.jpg"]),
        &dir,
        "give a file name ending in .png",
    );
    assert_usage(
        attend_run,
        &with(&["--impl", "fast"]),
        &dir,
        "invalid value 'fast' for '--impl <IMPL>'",
    );
    let weights = out_path(&dir, "w.npy");
    assert_usage(
        attend_run,
        &with(&["--impl", "tiled", "--weights", &weights]),
        &dir,
        "never forms",
    );
    assert_usage(
        attend_run,
        &with(&["--impl", "tiled", "--png", "w.png"]),
        &dir,
        "never forms",
    );
    for n in ["0", "-1", "three", "2.5"] {
        assert_usage(
            attend_run,
            &with(&["--bench", n]),
            &dir,
            &format!("invalid value '{n}' for '--bench <N>'"),
        );
    }
    assert_usage(
        attend_run,
        &with(&["--bench"]),
        &dir,
        "a value is required for '--bench <N>'",
    );
}

#[test]
fn tools_answer_help_and_version() {
    for (run, name, options) in [
        (
            attend_run as fn(&[String]) -> Result<String, Failure>,
            "attend",
            &[
                "--q",
                "--k",
                "--v",
                "--mask",
                "--out",
                "--weights",
                "--png",
                "--view",
                "--labels",
                "--grad-out",
                "--dq",
                "--dk",
                "--dv",
                "--impl",
                "--bench",
            ][..],
        ),
        (
            multihead_run,
            "multihead",
            &[
                "--x",
                "--wq",
                "--wk",
                "--wv",
                "--wo",
                "--heads",
                "--kv-heads",
                "--rope-base",
                "--mask",
                "--out",
                "--weights",
                "--png",
                "--view",
                "--labels",
            ][..],
        ),
    ] {
        for flag in ["--help", "-h"] {
            let failure = run(&args(&[flag])).unwrap_err();
            let Failure::Usage(e) = &failure else { panic!("{flag}: {}", failure.message()) };
            assert_eq!(e.exit_code(), 0, "{name} {flag} is not an error");
            let help = failure.message();
            for option in options {
                assert!(
                    help.contains(&format!("{option} <")),
                    "{name} {flag} does not describe {option}:\n{help}"
                );
            }
            assert!(help.contains("Usage: "), "{help}");
            if name == "multihead" {
                // The two switches take no value.
                for switch in ["--rope", "--decode"] {
                    assert!(
                        help.lines().any(|l| l.split_whitespace().next() == Some(switch)),
                        "{name} {flag} does not describe {switch}:\n{help}"
                    );
                }
                assert!(help.contains("causal|window:W|M.npy"), "{help}");
            }
            if flag == "--help" {
                let examples = if name == "attend" { "Examples" } else { "Example" };
                assert!(
                    help.contains(&format!("{examples} (from the repository root):")),
                    "{help}"
                );
                assert!(
                    help.contains(&format!("cargo run --release --example {name} --")),
                    "{help}"
                );
                assert!(help.contains("Exit codes: 0 done; 1 bad data"), "{help}");
            }
        }
        let failure = run(&args(&["--version"])).unwrap_err();
        assert_eq!(failure.exit_code(), 0);
        assert_eq!(failure.message().trim(), format!("{name} {}", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn attend_accepts_masks_that_broadcast_as_in_pytorch() {
    // q, k, v: (batch 2, heads 4, L 5, d 3); masks of every shape that broadcasts to the weights
    // (2, 4, 5, 5) give the same result as the mask expanded to that shape by hand.
    let dir = TempDir::new().unwrap();
    let x = Array::from_shape_fn((2, 4, 5, 3), |(b, h, i, j)| {
        ((b * 7 + h * 5 + i * 3 + j) % 11) as f64 / 11.0 - 0.5
    });
    let x_path = out_path(&dir, "x.npy");
    write_npy(&x_path, &x).unwrap();
    let full_shape = [2, 4, 5, 5];
    let allowed = |b: usize, h: usize, i: usize, j: usize| {
        (j <= i || b == 1) && (h.is_multiple_of(2) || j != 0)
    };
    let run_with = |mask: &ArrayD<bool>| {
        let (mask_path, out) = (out_path(&dir, "m.npy"), out_path(&dir, "out.npy"));
        write_npy(&mask_path, mask).unwrap();
        let mut list = self_attention_args(&x_path);
        list.extend(args(&["--mask", &mask_path, "--out", &out]));
        attend_run(&list).map(|_| read_npy::<_, ArrayD<f64>>(&out).unwrap())
    };
    for shape in [
        vec![2, 1, 5, 5],
        vec![1, 1, 5, 5],
        vec![1, 5, 5],
        vec![5, 5],
        vec![4, 1, 1],
        vec![5],
        vec![2, 4, 1, 5],
        vec![],
    ] {
        // A mask that varies only along the axes it has (size > 1 there).
        let index = |full: &[usize]| -> Vec<usize> {
            let offset = full.len() - shape.len();
            let mut i = vec![0; 4];
            for (a, &n) in shape.iter().enumerate() {
                i[offset + a] = if n == 1 { 0 } else { full[offset + a] };
            }
            i
        };
        let mask = ArrayD::from_shape_fn(IxDyn(&shape), |idx| {
            let mut full = vec![0; 4];
            let offset = 4 - shape.len();
            for a in 0..shape.len() {
                full[offset + a] = idx[a];
            }
            let i = index(&full);
            allowed(i[0], i[1], i[2], i[3])
        });
        let expanded = ArrayD::from_shape_fn(IxDyn(&full_shape), |idx| {
            let i = index(idx.slice());
            allowed(i[0], i[1], i[2], i[3])
        });
        let got = run_with(&mask).unwrap_or_else(|f| panic!("{shape:?}: {}", f.message()));
        let expected = run_with(&expanded).unwrap();
        assert_eq!(got, expected, "mask {shape:?}");
    }
    for shape in [vec![3, 5, 5], vec![2, 4, 5, 4], vec![1, 2, 4, 5, 5], vec![2, 2, 5, 5]] {
        let failure = run_with(&ArrayD::from_elem(IxDyn(&shape), true)).unwrap_err();
        let message = failure.message();
        assert_eq!(failure.exit_code(), 1, "{message}");
        assert!(
            message.contains("does not broadcast to the weights' shape (2, 4, 5, 5)"),
            "{message}"
        );
        assert!(message.contains("each axis of the mask must be 1 or equal"), "{message}");
    }
}

#[test]
fn no_path_spelling_lets_an_output_replace_an_input() {
    let dir = TempDir::new().unwrap();
    let case = "f64_causal_L6_dk8";
    for name in ["q", "k", "v", "mask"] {
        let from = if name == "mask" {
            fixture("sdpa", "f64_bool_L10_dk6", "mask.npy") // any bool file will do
        } else {
            fixture("sdpa", case, &format!("{name}.npy"))
        };
        std::fs::copy(from, dir.path().join(format!("{name}.npy"))).unwrap();
    }
    std::os::unix::fs::symlink("q.npy", dir.path().join("link.npy")).unwrap();
    std::fs::hard_link(dir.path().join("k.npy"), dir.path().join("hard.npy")).unwrap();
    let cwd_relative = |p: &str| {
        // The same file through "..": dir/../<dir name>/p.
        let name = dir.path().file_name().unwrap().to_string_lossy().into_owned();
        dir.path().join("..").join(name).join(p).to_string_lossy().into_owned()
    };
    let input = |name: &str| out_path(&dir, &format!("{name}.npy"));
    let base = |out_flag: &str, out: &str| {
        let mut list = args(&[
            "--q",
            &input("q"),
            "--k",
            &input("k"),
            "--v",
            &input("v"),
            "--mask",
            &input("mask"),
        ]);
        if out_flag != "--out" {
            list.extend(args(&["--out", &out_path(&dir, "fresh.npy")]));
        }
        list.extend(args(&[out_flag, out]));
        list
    };
    for out_flag in ["--out", "--weights", "--png"] {
        let ext = if out_flag == "--png" { "png" } else { "npy" };
        // Every input, spelled as given, through "./", through "..", absolutely, by symbolic
        // and hard link. A .png target only through links (the name must end in .png).
        let mut spellings: Vec<(String, &str)> = Vec::new();
        for name in ["q", "k", "v", "mask"] {
            if ext == "npy" {
                spellings.push((input(name), name));
                spellings.push((format!("{}/./{name}.npy", dir.path().display()), name));
                spellings.push((cwd_relative(&format!("{name}.npy")), name));
            }
        }
        if ext == "npy" {
            spellings.push((out_path(&dir, "link.npy"), "q"));
            spellings.push((out_path(&dir, "hard.npy"), "k"));
        } else {
            std::os::unix::fs::symlink("v.npy", dir.path().join("v-link.png")).ok();
            spellings.push((out_path(&dir, "v-link.png"), "v"));
        }
        for (spelling, input_name) in spellings {
            let list = base(out_flag, &spelling);
            let flag = format!("--{input_name} ");
            let before = files(dir.path());
            let failure = attend_run(&list).expect_err(&spelling);
            let message = failure.message();
            assert_eq!(failure.exit_code(), 2, "{message}");
            assert!(
                message.contains("is the same file as the input"),
                "{spelling}: {message}"
            );
            assert!(message.contains(&flag), "{spelling} is {flag}: {message}");
            assert_eq!(files(dir.path()), before, "{spelling}");
        }
    }
    // multihead: every input against --out, through "./".
    let mha = "f64_d8_h2_L5";
    for flag in ["--x", "--wq", "--wk", "--wv", "--wo"] {
        let mut list = x_and_weights(mha);
        list.extend(args(&["--heads", "2"]));
        let i = list.iter().position(|a| a == flag).unwrap();
        let target = format!(
            "{}/./{}",
            Path::new(&list[i + 1]).parent().unwrap().display(),
            Path::new(&list[i + 1]).file_name().unwrap().to_string_lossy()
        );
        list.extend(["--out".to_string(), target]);
        let failure = multihead_run(&list).unwrap_err();
        assert_eq!(failure.exit_code(), 2);
        assert!(
            failure.message().contains(&format!("is the same file as the input {flag} ")),
            "{}",
            failure.message()
        );
    }
}

#[test]
fn two_outputs_that_are_one_file_are_refused_and_the_file_is_kept() {
    // The issue's case: --out res.npy --weights res.npy with res.npy already there.
    let dir = TempDir::new().unwrap();
    let res = out_path(&dir, "res.npy");
    std::fs::write(&res, b"my earlier result").unwrap();
    let spelled = format!("{}/./res.npy", dir.path().display());
    for (out, weights) in [(&res, &res), (&res, &spelled)] {
        let mut list = qkv("f64_causal_L6_dk8");
        list.extend(args(&["--out", out, "--weights", weights]));
        assert_usage(
            attend_run,
            &list,
            &dir,
            "are the same file; give each output its own path",
        );
    }
    assert_eq!(std::fs::read(&res).unwrap(), b"my earlier result");
    // A heatmap and the weights under one name: the same.
    let png = out_path(&dir, "w.png");
    let mut list = x_and_weights("f64_d8_h2_L5");
    list.extend(args(&[
        "--heads",
        "2",
        "--out",
        &out_path(&dir, "o.npy"),
        "--weights",
        &png,
        "--png",
        &png,
    ]));
    assert_usage(multihead_run, &list, &dir, "--weights");
}

#[test]
fn a_failed_run_keeps_every_earlier_output() {
    // OUT and W exist from an earlier run; this run is refused because the PNG's directory
    // does not exist: OUT and W keep their old bytes and nothing else appears.
    let dir = TempDir::new().unwrap();
    let (out, weights) = (out_path(&dir, "out.npy"), out_path(&dir, "w.npy"));
    std::fs::write(&out, b"old out").unwrap();
    std::fs::write(&weights, b"old weights").unwrap();
    let png = out_path(&dir, "no-such-dir/w.png");
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out, "--weights", &weights, "--png", &png]));
    assert_fails(
        attend_run,
        &list,
        &dir,
        &png,
        "(--png): the folder",
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"old out");
    // A new file that cannot be written: no output at all.
    let fresh = TempDir::new().unwrap();
    let (out, weights) = (out_path(&fresh, "out.npy"), out_path(&fresh, "no-such-dir/w.npy"));
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out, "--weights", &weights]));
    let folder = out_path(&fresh, "no-such-dir");
    let problem = format!("(--weights): the folder {folder} does not exist");
    assert_fails(attend_run, &list, &fresh, &weights, &problem);
    assert!(!Path::new(&out).exists());
    // The folder is checked before any work: values holding a NaN, which loading would
    // report, are not read.
    let nan_v = out_path(&fresh, "nan_v.npy");
    let mut v = ndarray::Array2::<f64>::zeros((6, 8));
    v[[2, 3]] = f64::NAN;
    write_npy(&nan_v, &v).unwrap();
    let q = fixture("sdpa", "f64_causal_L6_dk8", "q.npy");
    let in_nodir = out_path(&fresh, "nodir/o.npy");
    let list = args(&["--q", &q, "--k", &q, "--v", &nan_v, "--out", &in_nodir]);
    let problem = format!("(--out): the folder {} does not exist", out_path(&fresh, "nodir"));
    assert_fails(attend_run, &list, &fresh, &in_nodir, &problem);
    // An output that is a directory.
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &fresh.path().to_string_lossy()]));
    assert_fails(
        attend_run,
        &list,
        &fresh,
        &fresh.path().to_string_lossy(),
        "(--out): it is a directory; give a file name",
    );
}

#[test]
fn outputs_replace_files_and_keep_their_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    std::fs::write(&out, b"old").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
    // Through a symbolic link the file it points to is replaced, and the link stays.
    std::os::unix::fs::symlink("out.npy", dir.path().join("via-link.npy")).unwrap();
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out_path(&dir, "via-link.npy")]));
    ok(attend_run(&list));
    let got: ArrayD<f64> = read_npy(&out).unwrap();
    assert_eq!(got.shape(), [6, 5]);
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert!(
        std::fs::symlink_metadata(dir.path().join("via-link.npy"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let names: Vec<String> = files(dir.path()).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["out.npy", "via-link.npy"], "no temporary or backup file is left");
}

#[test]
fn malformed_npy_files_give_one_clear_line() {
    let dir = TempDir::new().unwrap();
    let good = fixture("sdpa", "f64_causal_L6_dk8", "q.npy");
    let bytes = std::fs::read(&good).unwrap();
    let out = out_path(&dir, "out.npy");
    let with_q = |q: &str| {
        let mut list = qkv("f64_causal_L6_dk8");
        list[1] = q.to_string();
        list.extend(args(&["--out", &out]));
        list
    };
    let bad = out_path(&dir, "bad.npy");
    // The issue's case: a header claiming (100000, 100000) float32 over 64 bytes of data.
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }";
    let mut huge = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    huge.extend((padded.len() as u16).to_le_bytes());
    huge.extend(padded.as_bytes());
    huge.extend([0u8; 64]);
    std::fs::write(&bad, &huge).unwrap();
    assert_fails(
        attend_run,
        &with_q(&bad),
        &dir,
        &bad,
        "its header says float32 ('<f4') of shape (100000, 100000), which is 40000000000 bytes \
         of data, but the file has 64 bytes after the header (truncated or corrupted)",
    );
    // Cut short, anywhere.
    for len in [0, 5, 9, 10, 11, 60, bytes.len() - 1] {
        std::fs::write(&bad, &bytes[..len]).unwrap();
        assert_fails(attend_run, &with_q(&bad), &dir, &bad, "not a valid .npy file");
    }
    // Extra bytes after the data.
    let mut longer = bytes.clone();
    longer.extend(b"junk");
    std::fs::write(&bad, &longer).unwrap();
    assert_fails(attend_run, &with_q(&bad), &dir, &bad, "(extra bytes)");
    // A format version this tool does not know.
    let mut v9 = bytes.clone();
    v9[6] = 9;
    std::fs::write(&bad, &v9).unwrap();
    assert_fails(attend_run, &with_q(&bad), &dir, &bad, "format version 9.0");
    std::fs::remove_file(&bad).unwrap();
}

#[test]
fn the_summary_names_only_what_was_written() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out]));
    let summary = ok(attend_run(&list));
    assert_eq!(
        summary,
        format!(
            "attention (plain) over (6, 8) with L_q = 6, L_k = 6: wrote {out} (output (6, 5))"
        )
    );
    let w = out_path(&dir, "w.npy");
    list.extend(args(&["--weights", &w]));
    let summary = ok(attend_run(&list));
    assert!(
        summary.ends_with(&format!("wrote {out} (output (6, 5)) and {w} (weights (6, 6))")),
        "{summary}"
    );
    let mut list = x_and_weights("f64_d8_h2_L5");
    list.extend(args(&["--heads", "2", "--out", &out]));
    let summary = ok(multihead_run(&list));
    assert_eq!(summary, format!("2-head attention over (5, 8): wrote {out} (output (5, 8))"));
}

#[test]
fn multihead_refuses_bad_input() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let case = "f64_d12_h3_L6_causal";
    let x = fixture("mha", case, "x_q.npy");
    let with_heads = |heads: &str| {
        let mut list = x_and_weights(case);
        list.extend(args(&["--heads", heads, "--out", &out]));
        list
    };
    assert_fails(
        multihead_run,
        &with_heads("5"),
        &dir,
        &x,
        "heads = 5 does not divide d_model = 12",
    );
    assert_usage(multihead_run, &with_heads("0"), &dir, "invalid value '0' for '--heads <H>'");
    assert_usage(
        multihead_run,
        &with_heads("two"),
        &dir,
        "invalid value 'two' for '--heads <H>'",
    );

    let mut list = with_heads("3");
    let small_wo = fixture("mha", "f64_d8_h2_L5", "w_o.npy");
    let i = list.iter().position(|a| a == "--wo").unwrap();
    list[i + 1] = small_wo.clone();
    assert_fails(
        multihead_run,
        &list,
        &dir,
        &small_wo,
        "has shape (8, 8) but (d_model, d_model) = (12, 12)",
    );

    let mut list = with_heads("3");
    let f32_wq = fixture("mha", "f32_d12_h3_L6_causal", "w_q.npy");
    let i = list.iter().position(|a| a == "--wq").unwrap();
    list[i + 1] = f32_wq.clone();
    assert_fails(multihead_run, &list, &dir, &f32_wq, "dtype float32 differs");

    // The rule attend follows: a mask must broadcast to the weights (3 heads, 6, 6).
    let mut list = with_heads("3");
    let two = out_path(&dir, "two.npy");
    write_npy(&two, &Array::from_elem((2, 6, 6), true)).unwrap();
    list.extend(["--mask".to_string(), two.clone()]);
    assert_fails(
        multihead_run,
        &list,
        &dir,
        &two,
        "the mask's shape (2, 6, 6) does not broadcast to the weights' shape (3, 6, 6)",
    );
    std::fs::remove_file(&two).unwrap();

    let mut list = with_heads("3");
    let vector = out_path(&dir, "vector.npy");
    write_npy(&vector, &ndarray::Array1::<f64>::zeros(12)).unwrap();
    let i = list.iter().position(|a| a == "--x").unwrap();
    list[i + 1] = vector.clone();
    assert_fails(
        multihead_run,
        &list,
        &dir,
        &vector,
        "(L, d_model) or (batch, L, d_model) was expected",
    );
    std::fs::remove_file(&vector).unwrap();

    assert_usage(multihead_run, &x_and_weights(case), &dir, "--heads <H>");
}

#[test]
fn multihead_refuses_bad_values_of_the_part_ii_options() {
    // Each is a usage error found before any file is read: exit code 2, clap's form, no file
    // touched.
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let with = |extra: &[&str]| {
        let mut list = x_and_weights("f64_d12_h3_L6_causal");
        list.extend(args(&["--heads", "3", "--out", &out]));
        list.extend(args(extra));
        list
    };
    for g in ["0", "-1", "two", "1.5"] {
        assert_usage(
            multihead_run,
            &with(&["--kv-heads", g]),
            &dir,
            &format!(
                "invalid value '{g}' for '--kv-heads <G>': expected a whole number, at least 1"
            ),
        );
    }
    for g in ["2", "4", "6"] {
        assert_usage(
            multihead_run,
            &with(&["--kv-heads", g]),
            &dir,
            &format!("--kv-heads {g} does not divide --heads 3"),
        );
    }
    assert_usage(
        multihead_run,
        &with(&["--rope-base", "500000"]),
        &dir,
        "the following required arguments were not provided:\n  --rope",
    );
    for b in ["1", "0.5", "0", "-10000", "inf", "NaN", "ten", ""] {
        assert_usage(
            multihead_run,
            &with(&["--rope", "--rope-base", b]),
            &dir,
            &format!(
                "invalid value '{b}' for '--rope-base <B>': expected a number greater than 1"
            ),
        );
    }
    assert_usage(
        multihead_run,
        &with(&["--mask", "window:0"]),
        &dir,
        "invalid value 'window:0' for '--mask <causal|window:W|M.npy>': a sliding window must \
         hold at least 1 key (the query's own), so W = 0 is not allowed",
    );
    for w in ["", "-2", "2.5", "+3", "three", " 3", "3 "] {
        assert_usage(
            multihead_run,
            &with(&["--mask", &format!("window:{w}")]),
            &dir,
            &format!(
                "invalid value 'window:{w}' for '--mask <causal|window:W|M.npy>': expected \
                 window:W with W a whole number of keys, at least 1, not {w:?} (a file of this \
                 name: ./window:{w})"
            ),
        );
    }
    assert_usage(
        multihead_run,
        &with(&["--mask", "window"]),
        &dir,
        "a sliding window needs its width: window:W, e.g. window:4",
    );
    let mask = fixture("mha", "f64_d8_h2_batch3_L6_padding", "mask.npy");
    assert_usage(
        multihead_run,
        &with(&["--decode", "--mask", &mask]),
        &dir,
        &format!(
            "--decode computes causal attention through a KV cache (a sliding window with \
             --mask window:W), so it takes no mask file: drop --mask {mask} or --decode"
        ),
    );
    // Repeated switches are refused like any repeated option.
    for switch in ["--rope", "--decode"] {
        assert_usage(
            multihead_run,
            &with(&[switch, switch]),
            &dir,
            &format!("the argument '{switch}' cannot be used multiple times"),
        );
    }
    // `attend` reads `--mask` with the same parser and says where a window belongs.
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out, "--mask", "window:3"]));
    assert_usage(
        attend_run,
        &list,
        &dir,
        "--mask window:3 is a sliding window over one sequence, which the multihead tool \
         applies; attend takes causal or a bool .npy mask",
    );
}

/// Reads a PNG's width and height from its header.
fn png_size(path: &str) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{path} is not a PNG");
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}

#[test]
fn attend_draws_the_weights_it_writes() {
    let dir = TempDir::new().unwrap();
    let (out, one, grid) =
        (out_path(&dir, "out.npy"), out_path(&dir, "one.png"), out_path(&dir, "grid.png"));

    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&[
        "--mask",
        "causal",
        "--out",
        &out,
        "--png",
        &one,
        "--labels",
        "The, cat,sat,on,the,mat",
    ]));
    let summary = ok(attend_run(&list));
    assert!(summary.contains(&format!("{one} (heatmap of the weights)")), "{summary}");
    let (w1, h1) = png_size(&one);

    // Leading (batch, heads) axes: one panel per matrix, 2 × 2 of them, so a bigger image.
    let case = "f64_batch2_heads2_bool_L4";
    let mut list = qkv(case);
    list.extend(["--mask".to_string(), fixture("sdpa", case, "mask.npy")]);
    list.extend(args(&["--out", &out, "--png", &grid]));
    ok(attend_run(&list));
    let (w4, h4) = png_size(&grid);
    assert!(w4 > w1 && h4 > h1, "grid {w4}x{h4} should be larger than one heatmap {w1}x{h1}");

    // An upper-case extension is a PNG too.
    let upper = out_path(&dir, "UPPER.PNG");
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out, "--png", &upper]));
    ok(attend_run(&list));
    png_size(&upper);

    // More matrices than one image can show: refused, nothing written (not a truncated grid).
    let many = TempDir::new().unwrap();
    let x = ArrayD::<f64>::ones(IxDyn(&[reader_tools::MAX_PANELS + 1, 2, 3]));
    let mut list = Vec::new();
    for name in ["q", "k", "v"] {
        let path = out_path(&many, &format!("{name}.npy"));
        write_npy(&path, &x).unwrap();
        list.extend([format!("--{name}"), path]);
    }
    let png = out_path(&many, "grid.png");
    list.extend(args(&["--out", &out_path(&many, "out.npy"), "--png", &png]));
    assert_fails(
        attend_run,
        &list,
        &many,
        &png,
        "hold 65 matrices, more than the 64 one image can show",
    );

    // More tokens than labels can be drawn for: refused, with the way out.
    let long = TempDir::new().unwrap();
    let x = ArrayD::<f64>::ones(IxDyn(&[reader_tools::MAX_LABELS + 1, 2]));
    let x_path = out_path(&long, "x.npy");
    write_npy(&x_path, &x).unwrap();
    let labels: Vec<String> =
        (0..=reader_tools::MAX_LABELS).map(|i| format!("t{i}")).collect();
    let mut list = self_attention_args(&x_path);
    list.extend(args(&[
        "--out",
        &out_path(&long, "o.npy"),
        "--png",
        &out_path(&long, "w.png"),
        "--labels",
        &labels.join(","),
    ]));
    assert_fails(
        attend_run,
        &list,
        &long,
        "--labels: 65 labels are more than the 64",
        "leave --labels out",
    );
}

#[test]
fn multihead_draws_one_panel_per_batch_item_and_head() {
    let dir = TempDir::new().unwrap();
    let (out, png) = (out_path(&dir, "out.npy"), out_path(&dir, "heads.png"));
    let case = "f64_d8_h2_batch3_L6_padding";
    let mut list = x_and_weights(case);
    list.extend(["--mask".to_string(), fixture("mha", case, "mask.npy")]);
    list.extend(args(&[
        "--heads",
        "2",
        "--out",
        &out,
        "--png",
        &png,
        "--labels",
        "a,b,c,d,e,f",
    ]));
    ok(multihead_run(&list));
    let (w, h) = png_size(&png);
    assert!(h > w, "3 batch items × 2 heads lay out as 3 rows of 2 panels: {w}x{h}");

    let mut list = x_and_weights(case);
    list.extend(args(&["--heads", "2", "--out", &out, "--png", &png, "--labels", "a,b"]));
    let failure = multihead_run(&list).unwrap_err();
    assert!(
        failure
            .message()
            .contains("--labels: 2 labels given but the weights have L = 6 tokens"),
        "{}",
        failure.message()
    );
}

/// The page `--view` should have written for `weights` (…, L_q, L_k): the same
/// `figures::HeadView` the tools build, so the file must match it byte for byte.
fn expected_view(
    weights: &ArrayD<f64>,
    (queries, keys): (&[String], &[String]),
    title: &str,
    axes: (&str, &str),
) -> String {
    let n = weights.ndim();
    let (l_q, l_k) = (weights.shape()[n - 2], weights.shape()[n - 1]);
    let layers = if n == 4 { weights.shape()[0] } else { 1 };
    let heads = weights.len() / (layers * l_q * l_k);
    let stacked = weights.to_shape((layers, heads, l_q, l_k)).unwrap();
    let mut view =
        figures::HeadView::new("view", queries, keys).title(title).axis_names(axes.0, axes.1);
    for (b, layer) in stacked.outer_iter().enumerate() {
        let label = if n == 4 { format!("{} {b}", axes.0) } else { "weights".to_string() };
        view = view.layer(&label, layer).unwrap();
    }
    view.to_html().unwrap()
}

#[test]
fn tools_write_a_head_view_of_the_weights_they_computed() {
    let dir = TempDir::new().unwrap();
    let (out, w, page) =
        (out_path(&dir, "out.npy"), out_path(&dir, "w.npy"), out_path(&dir, "view.html"));
    // multihead, one sequence: one "layer" of 3 heads, tokens named by --labels, two of which
    // would break a page that pasted them in as they are.
    let case = "f64_d12_h3_L6_causal";
    let tokens =
        ["</script><script>alert(1)</script>", "<b>cat</b>", "sat", "&amp;", "\"q\"", "."];
    let mut list = x_and_weights(case);
    list.extend(args(&["--heads", "3", "--mask", "causal", "--out", &out, "--weights", &w]));
    list.extend(args(&["--view", &page, "--labels", &tokens.join(",")]));
    let summary = ok(multihead_run(&list));
    assert!(summary.ends_with(&format!("{page} (head view of the weights)")), "{summary}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..60]);
    let weights: ArrayD<f64> = read_npy(&w).unwrap();
    let labels: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        html,
        expected_view(
            &weights,
            (&labels, &labels),
            "3-head attention weights",
            ("layer", "head")
        )
    );
    // Self-contained: the viewer and the data inline, nothing loaded; the labels escaped.
    assert_eq!(html.matches("<script>").count(), 2, "the data and the viewer, no more");
    assert_eq!(html.matches("</script>").count(), 2);
    assert!(!html.contains(" src=") && !html.contains("<link"), "loads nothing");
    assert!(
        html.contains(r#""\u003c/script\u003e\u003cscript\u003ealert(1)\u003c/script\u003e""#)
    );
    assert!(
        html.contains(r#""\u003cb\u003ecat\u003c/b\u003e","sat","\u0026amp;","\"q\"","."#)
    );
    assert!(
        html.contains(r#""heads":3,"layers":[{"label":"weights","weights":[[[1,0,0,0,0,0],"#)
    );

    // attend with (batch, heads): one "layer" per batch item; without --labels the tokens are
    // numbered (here 4 queries and 6 keys).
    let case = "f64_batch2_heads2_bool_L4";
    let mut list = qkv_masked(case, Some("file"));
    list.extend(args(&["--out", &out, "--weights", &w, "--view", &page]));
    ok(attend_run(&list));
    let weights: ArrayD<f64> = read_npy(&w).unwrap();
    assert_eq!(weights.shape(), [2, 2, 4, 6]);
    let numbers: Vec<String> = (0..6).map(|i| i.to_string()).collect();
    let mask = fixture("sdpa", case, "mask.npy");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html,
        expected_view(
            &weights,
            (&numbers[..4], &numbers),
            &format!("Attention weights (mask: {mask})"),
            ("batch", "head")
        )
    );
    assert!(html.contains(r#""queries":["0","1","2","3"],"keys":["0","1","2","3","4","5"]"#));
    assert!(html.contains(r#"{"label":"batch 1","weights":"#));

    // attend with one leading axis: its matrices are the view's "heads", named "batch".
    let mut list = qkv("f64_batch2_L5_dk4");
    list.extend(args(&["--out", &out, "--weights", &w, "--view", &page]));
    ok(attend_run(&list));
    let weights: ArrayD<f64> = read_npy(&w).unwrap();
    let numbers: Vec<String> = (0..5).map(|i| i.to_string()).collect();
    assert_eq!(
        std::fs::read_to_string(&page).unwrap(),
        expected_view(
            &weights,
            (&numbers, &numbers),
            "Attention weights (no mask)",
            ("layer", "batch")
        )
    );

    // A page for many tokens: --labels is not limited to the 64 a heatmap can draw, and
    // float32 weights are shown too; --view alone picks the plain path (it needs the weights).
    let long = TempDir::new().unwrap();
    let l = 100;
    let x = Array::from_shape_fn((l, 4), |(i, j)| ((i * 7 + j * 3) % 11) as f32 / 11.0);
    let x_path = out_path(&long, "x.npy");
    write_npy(&x_path, &x).unwrap();
    let labels: Vec<String> = (0..l).map(|i| format!("w{i}")).collect();
    let page = out_path(&long, "long.HTM");
    let mut list = self_attention_args(&x_path);
    list.extend(args(&[
        "--mask",
        "causal",
        "--out",
        &out_path(&long, "o.npy"),
        "--view",
        &page,
        "--labels",
        &labels.join(","),
    ]));
    let summary = ok(attend_run(&list));
    assert!(summary.starts_with("attention (plain)"), "{summary}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(r#""w0","w1","#) && html.contains(r#""w99"]"#));
}

#[test]
fn bad_head_view_paths_and_sizes_are_refused() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let with = |extra: &[&str]| {
        let mut list = qkv("f64_causal_L6_dk8");
        list.extend(args(&["--out", &out]));
        list.extend(args(extra));
        list
    };
    assert_usage(
        attend_run,
        &with(&["--view", "view.png"]),
        &dir,
        "invalid value 'view.png' for '--view <VIEW.html>': the head view is written as one \
         HTML page: give a file name ending in .html",
    );
    assert_usage(
        attend_run,
        &with(&["--impl", "tiled", "--view", "v.html"]),
        &dir,
        "never forms",
    );
    // --labels needs something to name: a heatmap or a head view.
    assert_usage(attend_run, &with(&["--labels", "a,b,c,d,e,f"]), &dir, "--view <VIEW.html>");
    // A head view and a heatmap together, with the labels.
    let (png, page) = (out_path(&dir, "w.png"), out_path(&dir, "w.html"));
    ok(attend_run(&with(&["--png", &png, "--view", &page, "--labels", "a,b,c,d,e,f"])));
    assert!(Path::new(&png).is_file() && Path::new(&page).is_file());
    for file in [&out, &png, &page] {
        std::fs::remove_file(file).unwrap();
    }
    // The labels must fit the weights.
    assert_fails(
        attend_run,
        &with(&["--view", &page, "--labels", "a,b"]),
        &dir,
        "--labels: 2 labels given",
        "the weights have L = 6 tokens",
    );
    // A directory that does not exist: nothing written, not even --out.
    let nowhere = out_path(&dir, "no-such-dir/view.html");
    assert_fails(
        attend_run,
        &with(&["--view", &nowhere]),
        &dir,
        &nowhere,
        "(--view): the folder",
    );
    assert!(!Path::new(&out).exists());
    // Not an input, however it is spelled, nor another output.
    let q = out_path(&dir, "q.npy");
    std::fs::copy(fixture("sdpa", "f64_causal_L6_dk8", "q.npy"), &q).unwrap();
    std::os::unix::fs::symlink("q.npy", dir.path().join("q-link.html")).unwrap();
    let mut list = with(&["--view", &out_path(&dir, "q-link.html")]);
    list[1] = q.clone();
    assert_usage(attend_run, &list, &dir, "--view");
    let failure = attend_run(&list).unwrap_err();
    assert!(
        failure.message().contains("is the same file as the input --q "),
        "{}",
        failure.message()
    );
    let twice = out_path(&dir, "twice.html");
    assert_usage(
        attend_run,
        &with(&["--png", &out_path(&dir, "x.png"), "--view", &twice, "--weights", &twice]),
        &dir,
        "are the same file; give each output its own path",
    );
    // More weights than a page can hold: refused with the way out, nothing written.
    let big = TempDir::new().unwrap();
    let l = 2049; // 2049² > MAX_VIEW_WEIGHTS = 2²²
    assert!(l * l > reader_tools::MAX_VIEW_WEIGHTS);
    let x = ndarray::Array2::<f32>::zeros((l, 1));
    let x_path = out_path(&big, "x.npy");
    write_npy(&x_path, &x).unwrap();
    let page = out_path(&big, "big.html");
    let mut list = self_attention_args(&x_path);
    list.extend(args(&["--out", &out_path(&big, "o.npy"), "--view", &page]));
    assert_fails(
        attend_run,
        &list,
        &big,
        &page,
        "the weights (2049, 2049) hold 4198401 values, more than the 4194304 one page can show; \
         pass fewer tokens or a smaller batch",
    );
}

#[test]
fn attend_tiled_reproduces_pytorch_and_the_plain_path() {
    let dir = TempDir::new().unwrap();
    let (tiled_out, plain_out) = (out_path(&dir, "tiled.npy"), out_path(&dir, "plain.npy"));
    for (case, mask) in [
        ("f64_causal_L33_dk32", Some("causal")),
        ("f64_causal_Lq3_Lk5", Some("causal")),
        ("f64_fully_masked_rows_L5", Some("file")),
        ("f64_batch2_heads2_bool_L4", Some("file")),
        ("f64_batch2_broadcast_mask_L6", Some("file")),
        ("f64_batch2_L5_dk4", None),
    ] {
        let list = qkv_masked(case, mask);
        for (implementation, out) in [("tiled", &tiled_out), ("plain", &plain_out)] {
            let mut list = list.clone();
            list.extend(args(&["--out", out, "--impl", implementation]));
            let summary =
                attend_run(&list).unwrap_or_else(|e| panic!("{case}: {}", e.message()));
            assert!(
                summary.starts_with(&format!("attention ({implementation})")),
                "{summary}"
            );
        }
        let tiled: ArrayD<f64> = read_npy(&tiled_out).unwrap();
        let plain: ArrayD<f64> = read_npy(&plain_out).unwrap();
        let expected: ArrayD<f64> = read_npy(fixture("sdpa", case, "out.npy")).unwrap();
        assert!(max_diff(&tiled, &expected) < 1e-12, "{case}: tiled vs PyTorch");
        assert!(max_diff(&tiled, &plain) < 1e-12, "{case}: tiled vs plain");
    }
}

#[test]
fn attend_picks_the_tiled_path_for_large_inputs_unless_weights_are_wanted() {
    let dir = TempDir::new().unwrap();
    let write = |name: &str, l: usize| {
        let path = out_path(&dir, name);
        let a = ArrayD::from_shape_fn(IxDyn(&[l, 4]), |i| {
            ((i[0] * 7 + i[1] * 3) % 11) as f32 / 11.0 - 0.5
        });
        write_npy(&path, &a).unwrap();
        path
    };
    // 255² < 256² ≤ 256²
    let (small, large) = (write("small.npy", 255), write("large.npy", 256));
    let out = out_path(&dir, "out.npy");
    let run = |x: &str, extra: &[&str]| {
        let mut list = args(&["--q", x, "--k", x, "--v", x, "--out", &out]);
        list.extend(args(extra));
        ok(attend_run(&list))
    };
    assert!(run(&small, &[]).starts_with("attention (plain)"));
    assert!(run(&large, &[]).starts_with("attention (tiled)"));
    let summary = run(&large, &["--mask", "causal"]);
    assert!(
        summary.starts_with("attention (tiled)") && !summary.contains("weights"),
        "{summary}"
    );
    let weights = out_path(&dir, "w.npy");
    assert!(run(&large, &["--weights", &weights]).starts_with("attention (plain)"));
    assert!(run(&small, &["--impl", "tiled"]).starts_with("attention (tiled)"));
    assert!(run(&large, &["--impl", "plain"]).starts_with("attention (plain)"));
}

#[test]
fn attend_bench_ends_with_the_median() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    for implementation in ["plain", "tiled"] {
        let mut list = qkv("f32_causal_L33_dk32");
        list.extend(args(&[
            "--mask",
            "causal",
            "--out",
            &out,
            "--impl",
            implementation,
            "--bench",
            "3",
        ]));
        let summary = ok(attend_run(&list));
        let last = summary.lines().last().unwrap();
        let ms: f64 = last
            .strip_prefix("median_ms=")
            .unwrap_or_else(|| panic!("last line: {last}"))
            .parse()
            .unwrap();
        assert!(ms.is_finite() && ms >= 0.0, "{last}");
        assert!(summary.contains(&format!("{implementation} median of 3 runs")), "{summary}");
        let got: ArrayD<f32> = read_npy(&out).unwrap(); // the output is still written, once
        let expected: ArrayD<f32> =
            read_npy(fixture("sdpa", "f32_causal_L33_dk32", "out.npy")).unwrap();
        assert!(got.iter().zip(&expected).all(|(a, b)| (a - b).abs() < 1e-5));
    }
    // Without --bench there is no median line.
    let mut list = qkv("f32_causal_L33_dk32");
    list.extend(args(&["--out", &out]));
    assert!(!ok(attend_run(&list)).contains("median_ms"));
}

// multihead's options of chapters 9 and 10: --kv-heads, --rope, --rope-base, --mask window:W
// and --decode.

/// A layer of `heads` query heads and `kv_heads` key/value heads, d_model = `d_model`, on a
/// sequence of `l` tokens (a batch of `batch` of them if given), written into `dir` in the
/// dtype `A` with deterministic values (a sine of the index, scaled like a trained layer:
/// entries of size about 1/√d_model); returns the arguments `--x … --wo …`.
fn write_layer<A: ndarray_npy::WritableElement + Copy>(
    dir: &TempDir,
    [d_model, heads, kv_heads, l]: [usize; 4],
    batch: Option<usize>,
    convert: fn(f64) -> A,
) -> Vec<String> {
    let d_kv = kv_heads * d_model / heads;
    let fill = |shape: &[usize], seed: usize, scale: f64| {
        ArrayD::from_shape_fn(IxDyn(shape), |i| {
            let n = i.slice().iter().fold(seed, |n, &k| n * 31 + k);
            convert(scale * ((n * 7919 % 10007) as f64).sin())
        })
    };
    let x_shape = match batch {
        Some(b) => vec![b, l, d_model],
        None => vec![l, d_model],
    };
    let w_scale = 1.5 / (d_model as f64).sqrt();
    let mut list = Vec::new();
    for (flag, shape, seed, scale) in [
        ("--x", x_shape, 1, 1.0),
        ("--wq", vec![d_model, d_model], 2, w_scale),
        ("--wk", vec![d_model, d_kv], 3, w_scale),
        ("--wv", vec![d_model, d_kv], 4, w_scale),
        ("--wo", vec![d_model, d_model], 5, w_scale),
    ] {
        let path = out_path(dir, &format!("{}.npy", &flag[2..]));
        write_npy(&path, &fill(&shape, seed, scale)).unwrap();
        list.extend([flag.to_string(), path]);
    }
    list
}

fn to_f32(x: f64) -> f32 {
    x as f32
}

fn to_f64(x: f64) -> f64 {
    x
}

/// Runs multihead with `list` and `extra`, writing out.npy and w.npy into `dir`; returns the
/// summary, the output and the weights (as f64, whatever the dtype of the files).
fn multihead_outputs(
    dir: &TempDir,
    list: &[String],
    extra: &[&str],
) -> (String, ArrayD<f64>, ArrayD<f64>) {
    let (out, w) = (out_path(dir, "out.npy"), out_path(dir, "w.npy"));
    let mut list = list.to_vec();
    list.extend(args(extra));
    list.extend(args(&["--out", &out, "--weights", &w]));
    let summary = multihead_run(&list)
        .unwrap_or_else(|f| panic!("multihead {extra:?} failed:\n{}", f.message()));
    (summary, read_f64(&out), read_f64(&w))
}

#[test]
fn multihead_decodes_token_by_token_to_the_full_pass() {
    // --decode (the KV cache, one token at a time) against one masked pass over the whole
    // sequence: MHA, GQA and MQA, with and without RoPE, causal and a window, one sequence and
    // a batch, float64 to 1e-12 and float32 to 1e-5.
    let dir = TempDir::new().unwrap();
    for (kv_heads, rope, window, batch) in [
        (4, false, None, None),
        (2, true, None, Some(2)),
        (1, true, Some(3), None),
        (2, false, Some(2), Some(3)),
        (4, true, Some(4), Some(2)),
    ] {
        let shape = [16, 4, kv_heads, 7];
        for (f32_too, tolerance) in [(false, 1e-12), (true, 1e-5)] {
            let list = if f32_too {
                write_layer(&dir, shape, batch, to_f32)
            } else {
                write_layer(&dir, shape, batch, to_f64)
            };
            let mask = window.map_or("causal".to_string(), |w| format!("window:{w}"));
            let mut common = vec!["--heads".to_string(), "4".to_string()];
            common.extend(args(&["--kv-heads", &kv_heads.to_string()]));
            if rope {
                common.push("--rope".into());
            }
            let mut full = common.clone();
            full.extend(["--mask".to_string(), mask.clone()]);
            let mut decode = common.clone();
            decode.push("--decode".into());
            if window.is_some() {
                decode.extend(["--mask".to_string(), mask.clone()]);
            }
            let full: Vec<&str> = full.iter().map(String::as_str).collect();
            let decode: Vec<&str> = decode.iter().map(String::as_str).collect();
            let (_, out_full, w_full) = multihead_outputs(&dir, &list, &full);
            let (summary, out_dec, w_dec) = multihead_outputs(&dir, &list, &decode);
            let what =
                format!("G = {kv_heads}, rope {rope}, {mask}, batch {batch:?}, f32 {f32_too}");
            assert!(summary.contains("decoded token by token"), "{what}: {summary}");
            let lead = batch.map_or(vec![], |b| vec![b]);
            assert_eq!(out_dec.shape(), [lead.clone(), vec![7, 16]].concat(), "{what}");
            assert_eq!(w_dec.shape(), [lead, vec![4, 7, 7]].concat(), "{what}");
            let (diff_out, diff_w) = (max_diff(&out_dec, &out_full), max_diff(&w_dec, &w_full));
            assert!(diff_out < tolerance && diff_w < tolerance, "{what}: {diff_out:e}, {diff_w:e}");
            // The window (or the causal mask) holds: no weight on a key out of reach.
            let w = window.unwrap_or(7);
            for (index, &weight) in w_dec.indexed_iter() {
                let n = index.ndim();
                let (i, j) = (index[n - 2], index[n - 1]);
                if j > i || i - j >= w {
                    assert_eq!(weight, 0.0, "{what}: weight at {:?}", index.slice());
                }
            }
        }
    }
}

#[test]
fn multihead_options_that_change_nothing_change_nothing() {
    let dir = TempDir::new().unwrap();
    let list = write_layer(&dir, [16, 4, 4, 6], Some(2), to_f64);
    let run = |extra: &[&str]| multihead_outputs(&dir, &list, extra);
    let (plain_summary, plain, plain_w) = run(&["--heads", "4", "--mask", "causal"]);
    // Without the new options the tool is chapter 6's layer, to the last bit (it computes
    // through GroupedQueryAttention, which with G = H is MultiHeadAttention).
    let matrix = |i: usize| -> ndarray::Array2<f64> { read_npy(&list[2 * i + 1]).unwrap() };
    let mha = attention::multihead::MultiHeadAttention::new(
        matrix(1),
        matrix(2),
        matrix(3),
        matrix(4),
        4,
    )
    .unwrap();
    let x: ndarray::Array3<f64> = read_npy(&list[1]).unwrap();
    let causal = attention::mask::Mask::causal(6);
    let chapter6 = mha.forward_batched(&x, Some(&causal)).unwrap();
    assert_eq!(
        (&plain, &plain_w),
        (&chapter6.output.into_dyn(), &chapter6.weights.into_dyn())
    );
    // G = H is multi-head attention, bit for bit.
    let (summary, out, w) = run(&["--heads", "4", "--kv-heads", "4", "--mask", "causal"]);
    assert_eq!((&summary, &out, &w), (&plain_summary, &plain, &plain_w));
    // A window as long as the sequence (or longer) is the causal mask.
    for window in ["window:6", "window:100"] {
        let (_, out, w) = run(&["--heads", "4", "--mask", window]);
        assert_eq!((&out, &w), (&plain, &plain_w), "{window}");
    }
    // --rope-base 10000 is the default.
    let (summary, rope, rope_w) = run(&["--heads", "4", "--rope", "--mask", "causal"]);
    assert!(summary.contains("RoPE base 10000"), "{summary}");
    let (_, out, w) =
        run(&["--heads", "4", "--rope", "--rope-base", "1e4", "--mask", "causal"]);
    assert_eq!((&out, &w), (&rope, &rope_w));
    // ... and RoPE does change the result, and so does its base; but not for the first token,
    // whose position 0 is no rotation at all: it sees only itself under the causal mask.
    let (_, other_base, _) =
        run(&["--heads", "4", "--rope", "--rope-base", "500000", "--mask", "causal"]);
    for changed in [&rope, &other_base] {
        assert!(max_diff(changed, &plain) > 1e-3);
    }
    assert!(max_diff(&rope, &other_base) > 1e-6);
    let first = |a: &ArrayD<f64>| a.slice(ndarray::s![.., 0, ..]).to_owned().into_dyn();
    assert!(max_diff(&first(&rope), &first(&plain)) < 1e-12);
    // Decoding without a mask is causal decoding.
    let (_, decoded, decoded_w) = run(&["--heads", "4", "--decode"]);
    assert!(max_diff(&decoded, &plain) < 1e-12 && max_diff(&decoded_w, &plain_w) < 1e-12);
    let (_, with_mask, with_mask_w) = run(&["--heads", "4", "--decode", "--mask", "causal"]);
    assert_eq!((&with_mask, &with_mask_w), (&decoded, &decoded_w));
}

#[test]
fn multihead_window_of_one_sees_only_itself() {
    // W = 1: each query sees its own key alone, so every head's weights are the identity,
    // whatever the scores (RoPE included), and token i's output is the layer's output for
    // token i alone: its values, head by head through its group's W_V columns, then W_O.
    let dir = TempDir::new().unwrap();
    let list = write_layer(&dir, [8, 4, 2, 5], None, to_f64);
    let gqa = ["--heads", "4", "--kv-heads", "2"];
    let (_, out, w) = multihead_outputs(
        &dir,
        &list,
        &[&gqa[..], &["--rope", "--mask", "window:1"]].concat(),
    );
    let eye = ndarray::Array2::<f64>::eye(5);
    for head in w.outer_iter() {
        assert_eq!(head, eye.view().into_dyn());
    }
    let x: ArrayD<f64> = read_npy(&list[1]).unwrap();
    let lone = TempDir::new().unwrap();
    for i in 0..5 {
        let mut one = list.clone();
        one[1] = out_path(&lone, "x.npy");
        write_npy(&one[1], &x.slice(ndarray::s![i..i + 1, ..]).to_owned()).unwrap();
        let (_, alone, _) = multihead_outputs(&lone, &one, &gqa);
        let row = out.slice(ndarray::s![i..i + 1, ..]).to_owned().into_dyn();
        assert!(max_diff(&row, &alone) < 1e-12, "token {i}");
    }
}

#[test]
fn multihead_says_what_it_did() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    for (layer, extra, expected) in [
        ([8, 2, 2, 5], &["--heads", "2"][..], "2-head attention over (5, 8)"),
        (
            [8, 2, 2, 5],
            &["--heads", "2", "--mask", "causal"][..],
            "2-head attention over (5, 8), causal",
        ),
        (
            [16, 4, 2, 6],
            &["--heads", "4", "--kv-heads", "2", "--rope", "--decode"][..],
            "4 query heads sharing 2 key/value heads over (6, 16), RoPE base 10000, causal, \
             decoded token by token through a KV cache",
        ),
        (
            [16, 4, 1, 6],
            &[
                "--heads",
                "4",
                "--kv-heads",
                "1",
                "--rope",
                "--rope-base",
                "500000",
                "--mask",
                "window:3",
            ][..],
            "4 query heads sharing 1 key/value head (multi-query attention) over (6, 16), RoPE \
             base 500000, sliding window W = 3",
        ),
        (
            [16, 4, 4, 6],
            &["--heads", "4", "--mask", "window:2", "--decode"][..],
            "4-head attention over (6, 16), sliding window W = 2, decoded token by token through \
             a KV cache",
        ),
    ] {
        let mut list = write_layer(&dir, layer, None, to_f64);
        list.extend(args(extra));
        list.extend(args(&["--out", &out]));
        let summary = ok(multihead_run(&list));
        assert_eq!(
            summary,
            format!("{expected}: wrote {out} (output ({}, {}))", layer[3], layer[0])
        );
    }
    let mut list = x_and_weights("f64_d8_h2_batch3_L6_padding");
    let mask = fixture("mha", "f64_d8_h2_batch3_L6_padding", "mask.npy");
    list.extend(args(&["--heads", "2", "--mask", &mask, "--out", &out]));
    assert!(
        ok(multihead_run(&list))
            .starts_with(&format!("2-head attention over (3, 6, 8), mask {mask}: wrote")),
    );
}

#[test]
fn multihead_refuses_data_that_does_not_fit_the_part_ii_options() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    // W_K and W_V for G = 2 of 4 heads (d_model 16, d_head 4): (16, 8).
    let list = write_layer(&dir, [16, 4, 2, 5], None, to_f64);
    let x = list[1].clone();
    let with = |extra: &[&str]| {
        let mut l = list.clone();
        l.extend(args(extra));
        l.extend(args(&["--out", &out]));
        l
    };
    // Without --kv-heads W_K must be (d_model, d_model).
    let wk = list[5].clone();
    assert_fails(
        multihead_run,
        &with(&["--heads", "4"]),
        &dir,
        &wk,
        "has shape (16, 8) but (d_model, d_model) = (16, 16) was expected",
    );
    // With the wrong G: the shape that G asks for, and where each number comes from.
    assert_fails(
        multihead_run,
        &with(&["--heads", "4", "--kv-heads", "1"]),
        &dir,
        &wk,
        &format!(
            "has shape (16, 8) but (d_model, G·d_head) = (16, 4) was expected, with d_model = \
             16 the last axis of {x}, G = 1 key/value heads (--kv-heads) and d_head = d_model / \
             H = 16 / 4 = 4"
        ),
    );
    // W_V is checked too, and W_Q, W_O stay (d_model, d_model).
    let mut swapped = with(&["--heads", "4", "--kv-heads", "2"]);
    let (wq, wv) = (list[3].clone(), list[7].clone());
    swapped[5] = wq.clone();
    assert_fails(
        multihead_run,
        &swapped,
        &dir,
        &wq,
        &format!(
            "has shape (16, 16) but (d_model, G·d_head) = (16, 8) was expected, with d_model = \
             16 the last axis of {x}, G = 2 key/value heads (--kv-heads) and d_head = d_model / \
             H = 16 / 4 = 4"
        ),
    );
    let mut swapped = with(&["--heads", "4", "--kv-heads", "2"]);
    swapped[7] = wq.clone();
    assert_fails(
        multihead_run,
        &swapped,
        &dir,
        &wq,
        "has shape (16, 16) but (d_model, G·d_head) = (16, 8)",
    );
    let mut swapped = with(&["--heads", "4", "--kv-heads", "2"]);
    swapped[3] = wv.clone();
    assert_fails(
        multihead_run,
        &swapped,
        &dir,
        &wv,
        "has shape (16, 8) but (d_model, d_model) = (16, 16)",
    );
    // RoPE turns pairs of columns: d_head = 16 / 8 = 2 is fine, 16 / 16 = 1 is not.
    let layer = write_layer(&dir, [16, 16, 16, 5], None, to_f64);
    let mut odd = layer.clone();
    odd.extend(args(&["--heads", "16", "--rope", "--out", &out]));
    assert_fails(
        multihead_run,
        &odd,
        &dir,
        &layer[1],
        "--rope turns pairs of columns, so d_head must be even, but d_head = d_model / H = \
         16 / 16 = 1",
    );
    // G divides H but H does not divide d_model: the old message, naming X.
    let mut bad = with(&["--heads", "6", "--kv-heads", "2"]);
    bad[1] = x.clone();
    assert_fails(multihead_run, &bad, &dir, &x, "heads = 6 does not divide d_model = 16");
}

#[test]
fn multihead_draws_and_writes_the_weights_of_every_mode() {
    let dir = TempDir::new().unwrap();
    let png = out_path(&dir, "w.png");
    for (kv_heads, batch, extra) in [
        (2, None, &["--mask", "window:2"][..]),
        (1, Some(2), &["--rope", "--decode", "--mask", "window:3"][..]),
        (4, Some(3), &["--decode"][..]),
    ] {
        let list = write_layer(&dir, [8, 4, kv_heads, 5], batch, to_f32);
        let g = kv_heads.to_string();
        let mut extra = extra.to_vec();
        extra.extend([
            "--heads",
            "4",
            "--kv-heads",
            &g,
            "--png",
            &png,
            "--labels",
            "a,b,c,d,e",
        ]);
        let (summary, _, w) = multihead_outputs(&dir, &list, &extra);
        let lead = batch.map_or(vec![], |b| vec![b]);
        assert_eq!(w.shape(), [lead, vec![4, 5, 5]].concat(), "{extra:?}");
        assert!(summary.contains(&format!("{png} (heatmap of the weights)")), "{summary}");
        png_size(&png);
    }
}

/// Every case of `tests/fixtures/gqa/` (PyTorch's grouped-query layers: see
/// `tools/make_fixtures.py`), with the multihead options that case's own files ask for:
/// `--heads` from heads.npy, `--kv-heads` from kv_heads.npy, `--rope --rope-base` from
/// rope_base.npy, `--mask causal` from causal.npy, `--mask window:W` from window.npy.
/// Returns (case, arguments, whether the mask is causal or a window).
fn gqa_cases() -> Vec<(String, Vec<String>, bool)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gqa");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|case| {
            let file = |name: &str| fixture("gqa", &case, name);
            let has = |name: &str| Path::new(&file(name)).exists();
            let int = |name: &str| scalar::<i64>(&file(name));
            let mut list = layer_args("gqa", &case, "x.npy");
            list.extend(args(&["--heads", &int("heads.npy").to_string()]));
            list.extend(args(&["--kv-heads", &int("kv_heads.npy").to_string()]));
            if has("rope_base.npy") {
                let base = scalar::<f64>(&file("rope_base.npy"));
                list.extend(args(&["--rope", "--rope-base", &base.to_string()]));
            }
            let causal = has("causal.npy");
            if causal {
                assert!(scalar::<bool>(&file("causal.npy")));
                list.extend(args(&["--mask", "causal"]));
            }
            let window = has("window.npy");
            if window {
                list.extend(args(&["--mask", &format!("window:{}", int("window.npy"))]));
            }
            assert!(!(causal && window), "{case}: causal.npy and window.npy");
            assert_eq!(has("mask.npy"), causal || window, "{case}: mask.npy is the mask used");
            (case, list, causal || window)
        })
        .collect()
}

#[test]
fn multihead_reproduces_pytorch_grouped_query_layers() {
    // Each case as PyTorch computed it (SDPA with enable_gqa=True, RoPE written out in the
    // fixture script), then the same through --decode where the mask allows it (a causal mask
    // or a window; a case without a mask has no token-by-token form).
    let dir = TempDir::new().unwrap();
    let cases = gqa_cases();
    let (mut decoded, mut kinds) = (0, std::collections::BTreeSet::new());
    for (case, list, decodable) in &cases {
        let tolerance = if case.starts_with("f32") { 1e-5 } else { 1e-12 };
        let expected_out: ArrayD<f64> = read_f64(&fixture("gqa", case, "out.npy"));
        let expected_w: ArrayD<f64> = read_f64(&fixture("gqa", case, "weights.npy"));
        let mut runs = vec![vec![]];
        if *decodable {
            runs.push(vec!["--decode"]);
            decoded += 1;
        }
        for extra in runs {
            let (summary, out, w) = multihead_outputs(&dir, list, &extra);
            let (diff_out, diff_w) = (max_diff(&out, &expected_out), max_diff(&w, &expected_w));
            assert!(
                diff_out < tolerance && diff_w < tolerance,
                "{case} {extra:?}: |out − PyTorch| = {diff_out:e}, |weights − PyTorch| = {diff_w:e} \
                 ({summary})"
            );
        }
        // What the cases cover, read from their options.
        let g = &list[list.iter().position(|a| a == "--kv-heads").unwrap() + 1];
        let h = &list[list.iter().position(|a| a == "--heads").unwrap() + 1];
        kinds.insert(if g == h {
            "G = H"
        } else if g == "1" {
            "G = 1"
        } else {
            "1 < G < H"
        });
        for (flag, kind) in [("--rope", "RoPE"), ("causal", "causal"), ("--mask", "a mask")] {
            if list.iter().any(|a| a == flag) {
                kinds.insert(kind);
            }
        }
        if list.iter().any(|a| a.starts_with("window:")) {
            kinds.insert("a window");
        }
        if expected_out.ndim() == 3 {
            kinds.insert("a batch");
        }
        if !list.iter().any(|a| a == "--mask") {
            kinds.insert("no mask");
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "1 < G < H",
            "G = 1",
            "G = H",
            "RoPE",
            "a batch",
            "a mask",
            "a window",
            "causal",
            "no mask"
        ],
        "the fixtures cover every kind of case"
    );
    assert!(cases.iter().any(|(c, ..)| c.starts_with("f32")), "float32 cases too");
    assert!(decoded >= cases.len() / 2, "{decoded} of {} cases decoded", cases.len());
}

/// The one value of a fixture's setting (`heads.npy`, …): saved as a 0-d array or, through
/// `np.ascontiguousarray`, as a 1-element one.
fn scalar<T: ndarray_npy::ReadableElement + Copy>(path: &str) -> T {
    let a: ArrayD<T> = read_npy(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(a.len(), 1, "{path}: one value");
    *a.iter().next().unwrap()
}

/// A float32 or float64 .npy file, as float64.
fn read_f64(path: &str) -> ArrayD<f64> {
    read_npy::<_, ArrayD<f64>>(path)
        .or_else(|_| read_npy::<_, ArrayD<f32>>(path).map(|a| a.mapv(f64::from)))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The command after the line `G=tests/fixtures/gqa/<case>` in `text` (a shell command, its
/// lines joined at the trailing `\`): the case, the tool's options (after ` -- `, as written)
/// and the lines after the command.
fn gqa_command<'a>(text: &'a str, prompt: &str) -> (String, Vec<String>, Vec<&'a str>) {
    let start = text
        .find(&format!("{prompt}G=tests/fixtures/gqa/"))
        .expect("a command on a tests/fixtures/gqa case");
    let mut lines = text[start..].lines();
    let case = lines.next().unwrap().rsplit('/').next().unwrap().to_string();
    let mut command = String::new();
    for line in lines.by_ref() {
        match line.strip_suffix('\\') {
            Some(part) => command += part,
            None => {
                command += line;
                break;
            }
        }
    }
    let options = command
        .split_once(" -- ")
        .expect("cargo run ... -- options")
        .1
        .split_whitespace()
        .map(String::from)
        .collect();
    (case, options, lines.collect())
}

#[test]
fn appendix_c_shows_what_multihead_prints() {
    // Appendix C runs multihead on a grouped-query fixture and shows the line it prints: run
    // that command (its /tmp files moved into a temporary directory) and compare. The example
    // in --help is the same command.
    let appendix = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("book/appendix-tools.md"),
    )
    .unwrap();
    let block = appendix.split("```console\n").find(|b| b.starts_with("$ G=")).unwrap();
    let (command, prose) = block.split_once("```").unwrap();
    let (case, options, after) = gqa_command(command, "$ ");
    assert!(after.is_empty(), "the block is the command alone: {after:?}");
    // The line is too long for a code block, so the prose quotes it (wrapped).
    let printed = prose
        .split_once("prints one line, `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .expect("the paragraph after the block quotes the line the tool prints")
        .0
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let dir = TempDir::new().unwrap();
    let tmp = dir.path().to_string_lossy().into_owned();
    let list: Vec<String> = options
        .iter()
        .map(|a| match a.strip_prefix("/tmp/") {
            Some(name) => out_path(&dir, name),
            None => a.replace("$G", fixture("gqa", &case, "").trim_end_matches('/')),
        })
        .collect();
    let summary = ok(multihead_run(&list));
    assert_eq!(summary.replace(&tmp, "/tmp"), printed);
    let out = read_f64(&out_path(&dir, "out.npy"));
    assert!(max_diff(&out, &read_f64(&fixture("gqa", &case, "out.npy"))) < 1e-12);

    let help = multihead_run(&args(&["--help"])).unwrap_err().message();
    let (help_case, help_options, _) = gqa_command(&help, "");
    let no_tmp = |list: &[String]| -> Vec<String> {
        list.iter().map(|a| a.trim_start_matches("/tmp/").to_string()).collect()
    };
    assert_eq!((help_case, no_tmp(&help_options)), (case, no_tmp(&options)));
}

// attend's gradients (chapter Gradients): --grad-out DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy.

/// A deterministic dO of `shape` (a sine of the index, entries in [−1, 1]).
fn grad_o_of<A>(shape: &[usize], convert: fn(f64) -> A) -> ArrayD<A> {
    ArrayD::from_shape_fn(IxDyn(shape), |i| {
        let n = i.slice().iter().fold(7usize, |n, &k| n * 31 + k);
        convert(((n * 7919 % 10007) as f64).sin())
    })
}

/// The four gradient options writing `do.npy`'s dQ, dK, dV into `dir`.
fn grad_args(dir: &TempDir, grad_o: &str) -> Vec<String> {
    let mut list = vec!["--grad-out".to_string(), grad_o.to_string()];
    for name in ["dq", "dk", "dv"] {
        list.extend([format!("--{name}"), out_path(dir, &format!("{name}.npy"))]);
    }
    list
}

/// The cases of `tests/fixtures/grad/` (PyTorch's autograd through
/// `scaled_dot_product_attention`), each with the `--mask` values that give its mask: none;
/// `causal` and its `mask.npy` for a causal case (it has `causal.npy`); its `mask.npy`.
fn grad_cases() -> Vec<(String, Vec<Option<String>>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/grad");
    let mut cases: Vec<(String, Vec<Option<String>>)> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| root.join(name).is_dir())
        .map(|case| {
            let has = |file: &str| root.join(&case).join(file).exists();
            let mask = fixture("grad", &case, "mask.npy");
            let masks = if has("causal.npy") {
                vec![Some("causal".to_string()), Some(mask)]
            } else if has("mask.npy") {
                vec![Some(mask)]
            } else {
                vec![None]
            };
            (case, masks)
        })
        .collect();
    cases.sort();
    cases
}

/// Runs attend with `--impl implementation` on `inputs` (q, k, v, dO) and `mask`, writing into
/// `dir`, and returns the summary and the output, dQ, dK and dV as float64, after checking
/// that they are written in `dtype` (`"f32"` or `"f64"`).
fn attend_grads(
    dir: &TempDir,
    inputs: [&str; 4],
    mask: Option<&str>,
    implementation: &str,
    dtype: &str,
) -> (String, [ArrayD<f64>; 4]) {
    let [q, k, v, grad_o] = inputs;
    let mut list = args(&["--q", q, "--k", k, "--v", v, "--out", &out_path(dir, "out.npy")]);
    if let Some(mask) = mask {
        list.extend(args(&["--mask", mask]));
    }
    list.extend(grad_args(dir, grad_o));
    list.extend(args(&["--impl", implementation]));
    let summary = attend_run(&list)
        .unwrap_or_else(|e| panic!("{inputs:?} {mask:?} {implementation}: {}", e.message()));
    let read = |name: &str| {
        let path = out_path(dir, name);
        if dtype == "f32" {
            read_npy::<_, ArrayD<f32>>(&path)
                .unwrap_or_else(|e| panic!("{name} should be float32: {e}"))
                .mapv(f64::from)
        } else {
            read_npy::<_, ArrayD<f64>>(&path)
                .unwrap_or_else(|e| panic!("{name} should be float64: {e}"))
        }
    };
    (summary, ["out.npy", "dq.npy", "dk.npy", "dv.npy"].map(read))
}

/// The largest `|got − want| − rtol·|want|` over the entries: within the issue's tolerance
/// `|a − b| ≤ atol + rtol·|b|` (atol = rtol) when it is at most `rtol`.
fn worst_excess(got: &ArrayD<f64>, want: &ArrayD<f64>, rtol: f64) -> f64 {
    assert_eq!(got.shape(), want.shape());
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() - rtol * w.abs())
        .fold(f64::NEG_INFINITY, f64::max)
}

#[test]
fn attend_gradients_reproduce_pytorch_autograd() {
    // Every case of tests/fixtures/grad (no mask, causal, a bool mask with a query that sees
    // no key, L_q ≠ L_k, d_k ≠ d_v, 0 or 2 leading axes, float32 and float64), with every
    // --mask that gives its mask, through both implementations; then the 2-axis cases again
    // with their (batch, heads) axes flattened into one, for 1 leading axis.
    let dir = TempDir::new().unwrap();
    let cases = grad_cases();
    let (mut runs, mut covered) = (0, std::collections::BTreeSet::new());
    for (case, masks) in &cases {
        let dtype = &case[..3];
        let rtol = if dtype == "f32" { 1e-5 } else { 1e-12 };
        let file = |name: &str| fixture("grad", case, name);
        let names = ["out.npy", "dq.npy", "dk.npy", "dv.npy"];
        let expected = names.map(|n| read_f64(&file(n)));
        let lead = expected[0].ndim() - 2;
        // For 1 leading axis: the same numbers with (batch, heads) as one axis.
        let mut forms = vec![(
            [file("q.npy"), file("k.npy"), file("v.npy"), file("do.npy")],
            masks.clone(),
            expected.clone(),
            lead,
        )];
        if lead == 2 {
            let flat = |a: &ArrayD<f64>| {
                let s = a.shape();
                a.to_shape(IxDyn(&[s[0] * s[1], s[2], s[3]])).unwrap().to_owned()
            };
            let write_as = |name: &str, a: &ArrayD<f64>| {
                let path = out_path(&dir, &format!("flat_{name}"));
                if dtype == "f32" {
                    write_npy(&path, &a.mapv(|x| x as f32)).unwrap();
                } else {
                    write_npy(&path, a).unwrap();
                }
                path
            };
            let inputs = ["q.npy", "k.npy", "v.npy", "do.npy"]
                .map(|n| write_as(n, &flat(&read_f64(&file(n)))));
            let flat_masks = masks
                .iter()
                .map(|mask| match mask.as_deref() {
                    Some(path) if path != "causal" => {
                        let m: ArrayD<bool> = read_npy(path).unwrap();
                        if m.ndim() < 4 {
                            return Some(path.to_string()); // broadcasts as it is
                        }
                        let s = m.shape().to_vec();
                        let flat_mask =
                            m.to_shape(IxDyn(&[s[0] * s[1], s[2], s[3]])).unwrap().to_owned();
                        let path = out_path(&dir, "flat_mask.npy");
                        write_npy(&path, &flat_mask).unwrap();
                        Some(path)
                    }
                    other => other.map(String::from),
                })
                .collect();
            forms.push((inputs, flat_masks, expected.clone().map(|a| flat(&a)), 1));
        }
        for (inputs, masks, expected, lead) in forms {
            for mask in &masks {
                for implementation in ["plain", "tiled"] {
                    let inputs =
                        [&inputs[0], &inputs[1], &inputs[2], &inputs[3]].map(String::as_str);
                    let (summary, got) =
                        attend_grads(&dir, inputs, mask.as_deref(), implementation, dtype);
                    assert!(
                        summary.starts_with(&format!(
                            "attention ({implementation}) and its backward over"
                        )),
                        "{summary}"
                    );
                    for ((name, got), want) in names.iter().zip(&got).zip(&expected) {
                        let excess = worst_excess(got, want, rtol);
                        assert!(
                            excess <= rtol,
                            "{case}, {lead} leading axes, --mask {mask:?}, {implementation}: \
                             {name} misses PyTorch's by {excess:e} beyond rtol·|b|"
                        );
                    }
                    runs += 1;
                }
                covered.insert(format!("{lead} leading axes"));
                covered.insert(match mask.as_deref() {
                    None => "no mask".into(),
                    Some("causal") => "causal".into(),
                    Some(path)
                        if read_npy::<_, ArrayD<bool>>(path).unwrap().ndim() < lead + 2 =>
                    {
                        "a mask file that broadcasts".into()
                    }
                    Some(_) => "a mask file".into(),
                });
                if case.contains("blind_row") {
                    covered.insert("a query that sees no key".into());
                }
            }
        }
    }
    assert_eq!(
        covered.into_iter().collect::<Vec<_>>(),
        [
            "0 leading axes",
            "1 leading axes",
            "2 leading axes",
            "a mask file",
            "a mask file that broadcasts",
            "a query that sees no key",
            "causal",
            "no mask"
        ],
        "the fixtures cover every kind of case"
    );
    assert!(cases.iter().any(|(c, _)| c.starts_with("f32")), "float32 cases too");
    assert!(runs >= 2 * cases.len(), "{runs} runs for {} cases", cases.len());
}

#[test]
fn attend_refuses_bad_gradient_command_lines() {
    let dir = TempDir::new().unwrap();
    let case = "f64_causal_L6_dk8";
    let (out, grad_o) = (out_path(&dir, "out.npy"), out_path(&dir, "do.npy"));
    write_npy(&grad_o, &grad_o_of(&[6, 5], to_f64)).unwrap();
    let with = |extra: &[&str]| {
        let mut list = qkv(case);
        list.extend(args(&["--out", &out]));
        list.extend(args(extra));
        list
    };
    let dq = out_path(&dir, "dq.npy");
    // A gradient to write, but no dO.
    for flag in ["--dq", "--dk", "--dv"] {
        assert_usage(
            attend_run,
            &with(&[flag, &dq]),
            &dir,
            "the following required arguments were not provided:\n  --grad-out <DO.npy>",
        );
    }
    // dO, but no gradient to write.
    assert_usage(
        attend_run,
        &with(&["--grad-out", &grad_o]),
        &dir,
        &format!(
            "--grad-out {grad_o} asks for the backward pass but names no file for its result"
        ),
    );
    // Two outputs that are one file, among the gradients and with --out, --weights, --png.
    let w = out_path(&dir, "w.npy");
    let spelled = format!("{}/./dq.npy", dir.path().display());
    for (extra, problem) in [
        (vec!["--dq", &dq, "--dk", &dq], format!("--dq {dq} and --dk {dq} are the same file")),
        (
            vec!["--dq", &dq, "--dv", &spelled],
            format!("--dq {dq} and --dv {spelled} are the same file"),
        ),
        (vec!["--dv", &out], format!("--out {out} and --dv {out} are the same file")),
        (
            vec!["--weights", &w, "--dk", &w],
            format!("--weights {w} and --dk {w} are the same file"),
        ),
    ] {
        let mut extra = extra;
        extra.extend(["--grad-out", &grad_o]);
        assert_usage(attend_run, &with(&extra), &dir, &problem);
    }
    // A gradient written over an input: dO itself, or Q.
    assert_usage(
        attend_run,
        &with(&["--grad-out", &grad_o, "--dq", &grad_o]),
        &dir,
        &format!("--dq {grad_o} is the same file as the input --grad-out {grad_o}"),
    );
    let q = fixture("sdpa", case, "q.npy");
    assert_usage(
        attend_run,
        &with(&["--grad-out", &grad_o, "--dq", &q]),
        &dir,
        &format!("--dq {q} is the same file as the input --q {q}"),
    );
    // …and the other way round: --out over dO.
    let mut list = qkv(case);
    list.extend(args(&["--out", &grad_o, "--grad-out", &grad_o, "--dq", &dq]));
    assert_usage(
        attend_run,
        &list,
        &dir,
        &format!("--out {grad_o} is the same file as the input --grad-out {grad_o}"),
    );
    assert!(!Path::new(&dq).exists() && !Path::new(&out).exists());
}

#[test]
fn attend_refuses_bad_gradient_data() {
    let dir = TempDir::new().unwrap();
    let case = "f64_causal_L6_dk8";
    // Outputs from an earlier run: every failure below must leave them as they are (and
    // assert_fails checks that no file appears or changes).
    for name in ["out.npy", "dq.npy", "dk.npy", "dv.npy"] {
        std::fs::write(dir.path().join(name), format!("the old {name}")).unwrap();
    }
    let run_with = |grad_o: &str| {
        let mut list = qkv_masked(case, Some("causal"));
        list.extend(args(&["--out", &out_path(&dir, "out.npy")]));
        list.extend(grad_args(&dir, grad_o));
        list
    };
    let write = |name: &str, array: &ArrayD<f64>| {
        let path = out_path(&dir, name);
        write_npy(&path, array).unwrap();
        path
    };
    // dO must have the output's shape, (6, 5): not Q's, not transposed, not with an axis more.
    for shape in [vec![6, 8], vec![5, 6], vec![1, 6, 5], vec![6]] {
        let grad_o = write("do.npy", &grad_o_of(&shape, to_f64));
        let found = reader_tools::shape_text(&shape);
        assert_fails(
            attend_run,
            &run_with(&grad_o),
            &dir,
            &grad_o,
            &format!(
                "has shape {found} but the output (…, L_q, d_v) has shape (6, 5): dO must have \
                 the output's shape"
            ),
        );
    }
    // …and the inputs' dtype.
    let f32_d_o = out_path(&dir, "do32.npy");
    write_npy(&f32_d_o, &grad_o_of(&[6, 5], to_f32)).unwrap();
    assert_fails(
        attend_run,
        &run_with(&f32_d_o),
        &dir,
        &f32_d_o,
        &format!("dtype float32 differs from {}'s float64", fixture("sdpa", case, "q.npy")),
    );
    let ints = out_path(&dir, "ints.npy");
    write_npy(&ints, &ndarray::Array2::<i64>::zeros((6, 5))).unwrap();
    assert_fails(
        attend_run,
        &run_with(&ints),
        &dir,
        &ints,
        "dtype int64 ('<i8') is not float32 or float64",
    );
    let missing = out_path(&dir, "missing.npy");
    assert_fails(attend_run, &run_with(&missing), &dir, &missing, "cannot read");
    let mut nan = grad_o_of(&[6, 5], to_f64);
    nan[IxDyn(&[4, 1])] = f64::NAN;
    let nan = write("nan.npy", &nan);
    assert_fails(attend_run, &run_with(&nan), &dir, &nan, "contains NaN at index [4, 1]");
    // A gradient output that is a directory: refused before any work, every output as it was.
    let grad_o = write("do.npy", &grad_o_of(&[6, 5], to_f64));
    std::fs::remove_file(dir.path().join("dv.npy")).unwrap();
    std::fs::create_dir(dir.path().join("dv.npy")).unwrap();
    assert_fails(
        attend_run,
        &run_with(&grad_o),
        &dir,
        &out_path(&dir, "dv.npy"),
        "(--dv): it is a directory; give a file name",
    );
    for name in ["out.npy", "dq.npy", "dk.npy"] {
        assert_eq!(
            std::fs::read(dir.path().join(name)).unwrap(),
            format!("the old {name}").as_bytes()
        );
    }
}

#[test]
fn attend_bench_with_gradients_times_forward_and_backward() {
    let dir = TempDir::new().unwrap();
    let case = "f32_causal_L6_dk8_dv5";
    let file = |name: &str| fixture("grad", case, name);
    for implementation in ["plain", "tiled"] {
        let mut list =
            args(&["--q", &file("q.npy"), "--k", &file("k.npy"), "--v", &file("v.npy")]);
        list.extend(args(&["--mask", "causal", "--out", &out_path(&dir, "out.npy")]));
        list.extend(grad_args(&dir, &file("do.npy")));
        list.extend(args(&["--impl", implementation, "--bench", "3"]));
        let summary = ok(attend_run(&list));
        let lines: Vec<&str> = summary.lines().collect();
        assert_eq!(lines.len(), 3, "{summary}");
        assert_eq!(
            lines[1],
            format!(
                "{implementation} forward + backward median of 3 runs after one warm-up, \
                 without file I/O:"
            )
        );
        let ms: f64 = lines[2].strip_prefix("median_ms=").unwrap().parse().unwrap();
        assert!(ms.is_finite() && ms >= 0.0, "{summary}");
        for name in ["dq.npy", "dk.npy", "dv.npy"] {
            let got: ArrayD<f32> = read_npy(out_path(&dir, name)).unwrap(); // written once
            let want: ArrayD<f32> = read_npy(file(name)).unwrap();
            let excess = worst_excess(&got.mapv(f64::from), &want.mapv(f64::from), 1e-5);
            assert!(excess <= 1e-5, "{implementation} {name}: {excess:e}");
        }
    }
}

#[test]
fn appendix_c_shows_what_attend_prints_with_gradients() {
    // Appendix C runs attend --grad-out on a gradient fixture and quotes the line it prints:
    // run that command (its /tmp files moved into a temporary directory) and compare, then
    // check the gradients against PyTorch's as the text says.
    let appendix = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("book/appendix-tools.md"),
    )
    .unwrap();
    let block = appendix
        .split("```console\n")
        .find(|b| b.starts_with("$ D=tests/fixtures/grad/"))
        .expect("a command on a tests/fixtures/grad case");
    let (command, prose) = block.split_once("```").unwrap();
    let mut lines = command.lines();
    let case = lines.next().unwrap().rsplit('/').next().unwrap().to_string();
    let joined: String = lines.map(|l| l.trim_end_matches('\\')).collect();
    let options: Vec<&str> = joined
        .split_once(" -- ")
        .expect("cargo run ... -- options")
        .1
        .split_whitespace()
        .collect();
    let printed = prose
        .split_once("prints one line, `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .expect("the paragraph after the block quotes the line the tool prints")
        .0
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let dir = TempDir::new().unwrap();
    let tmp = dir.path().to_string_lossy().into_owned();
    let list: Vec<String> = options
        .iter()
        .map(|a| match a.strip_prefix("/tmp/") {
            Some(name) => out_path(&dir, name),
            None => a.replace("$D", fixture("grad", &case, "").trim_end_matches('/')),
        })
        .collect();
    assert_eq!(ok(attend_run(&list)).replace(&tmp, "/tmp"), printed);
    assert!(prose.contains("to $10^{-12}$"), "the tolerance the text quotes");
    for name in ["out.npy", "dq.npy", "dk.npy", "dv.npy"] {
        let got: ArrayD<f64> = read_npy(out_path(&dir, name)).unwrap();
        let want: ArrayD<f64> = read_npy(fixture("grad", &case, name)).unwrap();
        assert!(worst_excess(&got, &want, 1e-12) <= 1e-12, "{name}");
    }
}

#[test]
fn attend_picks_the_path_for_gradients_as_for_the_output() {
    // Gradients do not change the default: plain below 256 × 256 scores or when the weights
    // are asked for, tiled otherwise (each path has its backward).
    let dir = TempDir::new().unwrap();
    let write = |name: &str, l: usize| {
        let (x, grad_o) = (
            out_path(&dir, &format!("{name}.npy")),
            out_path(&dir, &format!("{name}_do.npy")),
        );
        write_npy(&x, &grad_o_of(&[l, 4], to_f32).mapv(|a| a / 2.0)).unwrap();
        write_npy(&grad_o, &grad_o_of(&[l, 4], to_f32)).unwrap();
        (x, grad_o)
    };
    let (small, large) = (write("small", 255), write("large", 256));
    let run = |(x, grad_o): &(String, String), extra: &[&str]| {
        let mut list =
            args(&["--q", x, "--k", x, "--v", x, "--out", &out_path(&dir, "out.npy")]);
        list.extend(args(&["--grad-out", grad_o, "--dq", &out_path(&dir, "dq.npy")]));
        list.extend(args(extra));
        ok(attend_run(&list))
    };
    assert!(run(&small, &[]).starts_with("attention (plain) and its backward"));
    assert!(run(&large, &[]).starts_with("attention (tiled) and its backward"));
    let weights = out_path(&dir, "w.npy");
    assert!(run(&large, &["--weights", &weights]).starts_with("attention (plain)"));
    assert!(run(&small, &["--impl", "tiled"]).starts_with("attention (tiled)"));
    assert!(
        run(&large, &["--impl", "plain", "--mask", "causal"]).starts_with("attention (plain)")
    );
}

/// `--impl gpu` against PyTorch's output on the f32 fixtures (masks of every kind, rows that
/// see no key, batches and heads) when the machine has a Vulkan adapter; its refusals always.
#[test]
fn attend_gpu_reproduces_pytorch_and_refuses_what_it_cannot_do() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let with = |case: &str, mask: Option<&str>, extra: &[&str]| {
        let mut list = qkv_masked(case, mask);
        list.extend(args(&["--out", &out, "--impl", "gpu"]));
        list.extend(args(extra));
        list
    };
    // Refused before any device is looked for, so on every machine.
    let weights = out_path(&dir, "w.npy");
    let case = "f32_causal_L33_dk32";
    assert_usage(attend_run, &with(case, None, &["--weights", &weights]), &dir, "never forms");
    let grad_o = fixture("sdpa", case, "q.npy");
    let dq = out_path(&dir, "dq.npy");
    let backward = with(case, None, &["--grad-out", &grad_o, "--dq", &dq]);
    assert_usage(attend_run, &backward, &dir, "computes the forward pass only");
    let f64_case = "f64_batch2_L5_dk4";
    assert_fails(
        attend_run,
        &with(f64_case, None, &[]),
        &dir,
        &fixture("sdpa", f64_case, "q.npy"),
        "is float64, but --impl gpu computes in float32",
    );

    match gpu::Gpu::optional() {
        Ok(Some(_)) => {}
        Ok(None) => {
            println!("attend --impl gpu: skipped the GPU runs, no Vulkan adapter here");
            return;
        }
        Err(e) => panic!("{e}"),
    }
    for (case, mask) in [
        ("f32_causal_L33_dk32", Some("causal")),
        ("f32_causal_Lq3_Lk5", Some("causal")),
        ("f32_fully_masked_rows_L5", Some("file")),
        ("f32_batch2_heads2_bool_L4", Some("file")),
        ("f32_batch2_broadcast_mask_L6", Some("file")),
        ("f32_Lq3_Lk5_dk4_dv2", None),
        ("f32_large_scores", None),
        ("f32_L64_dk64", None),
    ] {
        let summary = attend_run(&with(case, mask, &[]))
            .unwrap_or_else(|e| panic!("{case}: {}", e.message()));
        assert!(summary.starts_with("attention (gpu on "), "{summary}");
        let got: ArrayD<f32> = read_npy(&out).unwrap();
        let expected: ArrayD<f32> = read_npy(fixture("sdpa", case, "out.npy")).unwrap();
        assert_eq!(got.shape(), expected.shape(), "{case}");
        let worst = (&got - &expected).iter().fold(0f32, |m, d| m.max(d.abs()));
        assert!(worst < 1e-5, "{case}: |gpu − PyTorch| = {worst:e}");
    }
}

/// One mask rule for both tools: multihead takes the key-padding and broadcast masks that
/// attend takes, and they give the numbers of the full mask they stand for.
#[test]
fn multihead_takes_the_masks_attend_takes() {
    let dir = TempDir::new().unwrap();
    let case = "f64_d8_h2_batch3_L6_padding";
    let full = fixture("mha", case, "mask.npy");
    let run_with = |mask: &str, name: &str| -> ArrayD<f64> {
        let out = out_path(&dir, name);
        let mut list = x_and_weights(case);
        list.extend(args(&["--heads", "2", "--mask", mask, "--out", &out]));
        ok(multihead_run(&list));
        read_npy(&out).unwrap()
    };
    let reference = run_with(&full, "full.npy");
    // (batch, 1, 1, L): one flag per key and item, PyTorch's key-padding mask as attn_mask.
    let m: ArrayD<bool> = read_npy(&full).unwrap();
    let padding = m.slice(ndarray::s![.., 0..1, ..]).insert_axis(ndarray::Axis(1)).to_owned();
    assert_eq!(padding.shape(), [3, 1, 1, 6]);
    let padding_path = out_path(&dir, "padding.npy");
    write_npy(&padding_path, &padding).unwrap();
    assert_eq!(run_with(&padding_path, "padding_out.npy"), reference);
    // (L,): one flag per key for every item and head, as attend takes it.
    let keys = out_path(&dir, "keys.npy");
    write_npy(&keys, &ndarray::arr1(&[true, true, true, true, false, false])).unwrap();
    let some = out_path(&dir, "some.npy");
    write_npy(&some, &Array::from_shape_fn((3, 6, 6), |(_, _, j)| j < 4)).unwrap();
    assert_eq!(run_with(&keys, "keys_out.npy"), run_with(&some, "some_out.npy"));
}

/// Results that may not be what was meant get a note on stderr (the run still succeeds); a
/// slip of causal, a float mask and an object array get one clear error.
#[test]
fn the_tools_say_when_a_result_may_not_be_what_was_meant() {
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    // A mask of PyTorch's other polarity (True = blocked): the last query sees no key.
    let inverted = out_path(&dir, "inverted.npy");
    write_npy(&inverted, &Array::from_shape_fn((6, 6), |(i, j)| j > i)).unwrap();
    reader_tools::take_notes();
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--mask", &inverted, "--out", &out]));
    ok(attend_run(&list));
    let notes = reader_tools::take_notes();
    assert!(
        notes.iter().any(|n| n.contains("1 of the 6 query rows see no key") && n.contains("~mask")),
        "{notes:?}"
    );
    let mut list = x_and_weights("f64_d12_h3_L6_causal");
    list.extend(args(&["--heads", "3", "--mask", &inverted, "--out", &out]));
    ok(multihead_run(&list));
    let notes = reader_tools::take_notes();
    assert!(notes.iter().any(|n| n.contains("3 of the 18 query rows see no key")), "{notes:?}");
    // A causal mask leaves no query blind: no note.
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--mask", "causal", "--out", &out]));
    ok(attend_run(&list));
    assert!(reader_tools::take_notes().is_empty());

    // A debug build says once that it is slow, for a run of more than DEBUG_NOTE_FROM.
    reader_tools::note_if_debug("attend", reader_tools::DEBUG_NOTE_FROM * 2.0);
    reader_tools::note_if_debug("attend", reader_tools::DEBUG_NOTE_FROM / 2.0);
    let notes = reader_tools::take_notes();
    if cfg!(debug_assertions) {
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("unoptimised (debug) build") && notes[0].contains("--release"));
    } else {
        assert!(notes.is_empty());
    }

    for slip in ["casual", "casaul", "Causal"] {
        let mut list = qkv("f64_causal_L6_dk8");
        list.extend(args(&["--mask", slip, "--out", &out]));
        let failure = attend_run(&list).unwrap_err();
        assert_eq!(failure.exit_code(), 2);
        assert!(failure.message().contains("did you mean causal?"), "{}", failure.message());
    }

    let float_mask = out_path(&dir, "float_mask.npy");
    write_npy(&float_mask, &Array::from_elem((6, 6), 0.0f64)).unwrap();
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--mask", &float_mask, "--out", &out]));
    assert_fails(attend_run, &list, &dir, &float_mask, "additive form (0 = attend, -inf = blocked)");

    // np.save(path, np.array([{'a': 1}], dtype=object), allow_pickle=True), as NumPy writes it.
    let object = out_path(&dir, "object.npy");
    let header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    bytes.extend((padded.len() as u16).to_le_bytes());
    bytes.extend(padded.as_bytes());
    bytes.extend(b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00pickled-object-array.");
    std::fs::write(&object, bytes).unwrap();
    let mut list = qkv("f64_causal_L6_dk8");
    let i = list.iter().position(|a| a == "--q").unwrap();
    list[i + 1] = object.clone();
    list.extend(args(&["--out", &out]));
    assert_fails(attend_run, &list, &dir, &object, "object arrays are not supported");
}

/// The progress line: shown on a terminal (here a buffer standing for one) once the run has
/// taken longer than the delay, with the time it took when it ends; nothing without one.
#[test]
fn the_progress_line_shows_what_runs() {
    use reader_tools::progress::Progress;
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Shared::default();
    let progress = Progress::start_to(
        "attend: attention (tiled) over (200000, 8)".into(),
        Some(Box::new(sink.clone())),
        std::time::Duration::ZERO,
    );
    while sink.0.lock().unwrap().is_empty() {
        std::thread::yield_now();
    }
    progress.finish();
    let shown = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(shown.starts_with("\rattend: attention (tiled) over (200000, 8): 0 s so far"), "{shown}");
    assert!(shown.contains(": done after 0 s") && shown.ends_with('\n'), "{shown:?}");
    // Shown only after the delay: a run that ends first leaves no line.
    let quiet = Shared::default();
    let progress = Progress::start_to(
        "quick".into(),
        Some(Box::new(quiet.clone())),
        std::time::Duration::from_secs(3600),
    );
    progress.finish();
    assert!(quiet.0.lock().unwrap().is_empty());
    // A run that fails drops its line without finishing it: the line is cleared, and says
    // neither "done" nor a time.
    let failed = Shared::default();
    let progress = Progress::start_to(
        "attend: attention (plain) over (9, 9)".into(),
        Some(Box::new(failed.clone())),
        std::time::Duration::ZERO,
    );
    while failed.0.lock().unwrap().is_empty() {
        std::thread::yield_now();
    }
    drop(progress);
    let shown = String::from_utf8(failed.0.lock().unwrap().clone()).unwrap();
    let blank = shown.strip_suffix('\r').and_then(|s| s.rsplit_once('\r')).unwrap().1;
    assert!(!shown.contains("done"), "{shown:?}");
    assert!(blank.len() > 40 && blank.trim().is_empty(), "the line is cleared: {shown:?}");
}

/// The limits Appendix C quotes ("Limits, checked before any work", "Notes on standard error").
#[test]
fn the_limits_are_those_appendix_c_quotes() {
    assert_eq!(reader_tools::MAX_WEIGHT_BYTES, 2 * 1024 * 1024 * 1024);
    assert_eq!(reader_tools::MAX_WEIGHT_BYTES, 16384 * 16384 * 8, "one 16384² float64 matrix");
    assert_eq!(reader_tools::weight_bytes(&[200_000, 200_000], 4), Some(160_000_000_000));
    assert_eq!(figures::MAX_SIDE, 8000);
    assert_eq!(reader_tools::PNG_MIN_CELL, 2);
    assert_eq!(reader_tools::MAX_VIEW_WEIGHTS, 1 << 22);
    assert_eq!(reader_tools::progress::AFTER, std::time::Duration::from_secs(2));
    assert_eq!(reader_tools::DEBUG_NOTE_FROM, 2e8);
    let book = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("book/appendix-tools.md"),
    )
    .unwrap();
    for quoted in [
        "2 GiB ($2^{31}$ bytes)",
        "cells of at least 2 pixels",
        "limit of 8000 pixels a side",
        "$2 \\times 10^8$",
        "160000000000 bytes",
    ] {
        assert!(book.contains(quoted), "Appendix C should say {quoted:?}");
    }
}

/// How many pixels of a PNG are dark red (luminance under 150 of 255, red well above blue):
/// the cells of high weight and the top of the colour bar, not the grey and black text.
fn dark_pixels(png: &[u8]) -> usize {
    let mut decoder = png::Decoder::new(png);
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected colour type {other:?}"),
    };
    buf[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| {
            let luminance = 0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]);
            luminance + 0.114 * f64::from(p[2]) < 150.0 && p[0] > p[2].saturating_add(60)
        })
        .count()
}

/// A 600-key row averages 1/600, pale on the fixed 0-1 scale; `--png-scale row` scales each
/// row to its own maximum, so the same weights come out dark. The colour bar's label and the
/// summary name the scale; the default is the fixed scale, byte for byte.
#[test]
fn png_scale_row_shows_the_small_weights_of_a_long_row() {
    let dir = tempfile::tempdir().unwrap();
    let (l_q, l_k, d) = (3, 600, 4);
    // Small, varied scores: every weight is near 1/600 (between about 1/660 and 1/540).
    let wave = |n: usize, phase: f32| {
        ArrayD::from_shape_fn(IxDyn(&[n, d]), |i| 0.1 * ((i[0] * d + i[1]) as f32 + phase).sin())
    };
    for (name, array) in [("q", wave(l_q, 0.0)), ("k", wave(l_k, 1.0)), ("v", wave(l_k, 2.0))] {
        write_npy(dir.path().join(format!("{name}.npy")), &array).unwrap();
    }
    let run = |png: &str, scale: Option<&str>| {
        let mut list = Vec::new();
        for name in ["q", "k", "v"] {
            list.extend([format!("--{name}"), out_path(&dir, &format!("{name}.npy"))]);
        }
        list.extend(args(&["--out", &out_path(&dir, "o.npy"), "--weights"]));
        list.extend([out_path(&dir, "w.npy"), "--png".into(), out_path(&dir, png)]);
        if let Some(scale) = scale {
            list.extend(args(&["--png-scale", scale]));
        }
        let summary = ok(attend_run(&list));
        (summary, std::fs::read(dir.path().join(png)).unwrap())
    };
    let (default_summary, default) = run("default.png", None);
    let (_, fixed) = run("fixed.png", Some("fixed"));
    let (row_summary, row) = run("row.png", Some("row"));
    assert_eq!(default, fixed, "fixed is the default");
    let w: ArrayD<f32> = read_npy(dir.path().join("w.npy")).unwrap();
    let largest = w.iter().copied().fold(0.0, f32::max);
    assert!(largest < 1.2 / 600.0, "the weights are near 1/600: largest {largest}");
    let (pale, dark) = (dark_pixels(&fixed), dark_pixels(&row));
    // The cells: 3 rows of 600, at least 2 × 2 pixels each, nearly all dark on the row scale
    // (the fixed scale's dark red is the colour bar's top alone).
    let cells = 3 * 600 * 4;
    assert!(dark >= pale + cells * 9 / 10, "row scale: {dark} dark pixels, fixed: {pale}");
    assert!(row_summary.contains("each row scaled to its maximum"), "{row_summary}");
    assert!(!default_summary.contains("scaled"), "{default_summary}");
    assert_eq!(reader_tools::PngScale::Row.colorbar_label(), "weight / row max");
    assert_eq!(reader_tools::PngScale::Fixed.colorbar_label(), "attention weight");
    // Without --png there is nothing to scale.
    let list = args(&["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"]);
    let with_scale = [list, args(&["--png-scale", "row"])].concat();
    assert!(matches!(attend_run(&with_scale), Err(Failure::Usage(_))));
}

/// `multihead --png-scale row` draws every head's panel with its rows scaled.
#[test]
fn multihead_png_scale_row() {
    let dir = tempfile::tempdir().unwrap();
    let png = out_path(&dir, "heads.png");
    let mut list = x_and_weights("f64_d12_h3_L6_causal");
    list.extend(args(&["--heads", "3", "--out", &out_path(&dir, "o.npy"), "--png", &png]));
    list.extend(args(&["--png-scale", "row"]));
    let summary = ok(multihead_run(&list));
    assert!(summary.contains("each row scaled to its maximum"), "{summary}");
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
}

/// multihead reads a (batch, L, L) mask as one mask per item; when batch = H, attend would
/// read the same file as one per head, so a note says which reading was taken and how to
/// ask for either. A (batch, 1, L, L) mask says it already: no note.
#[test]
fn multihead_notes_how_an_ambiguous_mask_was_read() {
    let dir = TempDir::new().unwrap();
    let case = "f64_d6_h3_batch2_L4";
    let x = out_path(&dir, "x.npy");
    let values = Array::from_shape_fn((3, 4, 6), |(b, i, j)| (b + 2 * i + 3 * j) as f64 * 0.05);
    write_npy(&x, &values).unwrap();
    let out = out_path(&dir, "out.npy");
    let mut base = layer_args("mha", case, "x.npy");
    base[1] = x.clone();
    base.extend(args(&["--heads", "3", "--out", &out]));
    let causal = |b: usize, i: usize, j: usize| j <= i || b == 0;
    let (ambiguous, explicit) = (out_path(&dir, "m3.npy"), out_path(&dir, "m4.npy"));
    write_npy(&ambiguous, &Array::from_shape_fn((3, 4, 4), |(b, i, j)| causal(b, i, j)))
        .unwrap();
    write_npy(&explicit, &Array::from_shape_fn((3, 1, 4, 4), |(b, _, i, j)| causal(b, i, j)))
        .unwrap();
    let _ = reader_tools::take_notes();
    let mut list = base.clone();
    list.extend(["--mask".to_string(), ambiguous.clone()]);
    multihead_run(&list).unwrap();
    let first = read_npy::<_, ArrayD<f64>>(&out).unwrap();
    let notes = reader_tools::take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(&format!("{ambiguous}: a (3, 4, 4) mask with batch = H = 3"))
            && notes[0].contains("one mask per batch item")
            && notes[0].contains("(3, 1, 4, 4) for one per item or (1, 3, 4, 4) for one per head"),
        "{notes:?}"
    );
    let mut list = base.clone();
    list.extend(["--mask".to_string(), explicit]);
    multihead_run(&list).unwrap();
    assert!(reader_tools::take_notes().is_empty());
    assert_eq!(read_npy::<_, ArrayD<f64>>(&out).unwrap(), first, "the same reading");
}
