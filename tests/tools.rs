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
use support::{files, fixture};
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
    let mut list = vec!["--x".to_string(), fixture("mha", case, "x_q.npy")];
    for (flag, file) in [("--wq", "w_q"), ("--wk", "w_k"), ("--wv", "w_v"), ("--wo", "w_o")] {
        list.push(flag.to_string());
        list.push(fixture("mha", case, &format!("{file}.npy")));
    }
    list
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
                "--labels",
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
                "--mask",
                "--out",
                "--weights",
                "--png",
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
            if flag == "--help" {
                assert!(help.contains("Example (from the repository root):"), "{help}");
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
        attend_run(&args(&[
            "--q", &x_path, "--k", &x_path, "--v", &x_path, "--mask", &mask_path, "--out",
            &out,
        ]))
        .map(|_| read_npy::<_, ArrayD<f64>>(&out).unwrap())
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
    // The case: --out res.npy --weights res.npy with res.npy already there.
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
    // OUT and W exist from an earlier run; this run fails while staging the PNG (its directory
    // does not exist): OUT and W keep their old bytes and nothing else appears.
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
        "cannot write: No such file or directory (os error 2); no output was changed",
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"old out");
    // A new file that cannot be written: no output at all.
    let fresh = TempDir::new().unwrap();
    let (out, weights) = (out_path(&fresh, "out.npy"), out_path(&fresh, "no-such-dir/w.npy"));
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out, "--weights", &weights]));
    assert_fails(attend_run, &list, &fresh, &weights, "cannot write");
    assert!(!Path::new(&out).exists());
    // An output that is a directory.
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &fresh.path().to_string_lossy()]));
    assert_fails(
        attend_run,
        &list,
        &fresh,
        &fresh.path().to_string_lossy(),
        "cannot write: it is a directory",
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
    // The case: a header claiming (100000, 100000) float32 over 64 bytes of data.
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

    let mut list = with_heads("3");
    let batch_mask = fixture("mha", "f64_d8_h2_batch3_L6_padding", "mask.npy");
    list.extend(["--mask".to_string(), batch_mask.clone()]);
    assert_fails(
        multihead_run,
        &list,
        &dir,
        &batch_mask,
        "mask has shape (3, 6, 6) but (6, 6) was expected",
    );

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
    let list = args(&[
        "--q",
        &x_path,
        "--k",
        &x_path,
        "--v",
        &x_path,
        "--out",
        &out_path(&long, "o.npy"),
        "--png",
        &out_path(&long, "w.png"),
        "--labels",
        &labels.join(","),
    ]);
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
