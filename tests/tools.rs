//! The reader tools `attend` and `multihead` (examples/), run on `.npy` files written by
//! NumPy (the PyTorch fixtures) and on broken inputs.
//!
//! The tools' logic lives in `examples/reader_tools/`, included here as a module, so each
//! test calls `run(args)` exactly as `main` does and sees the message `main` would print
//! after `error: `.

#[allow(dead_code)]
#[path = "../examples/reader_tools/mod.rs"]
mod reader_tools;

use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{read_npy, write_npy};
use reader_tools::{attend, multihead};
use tempfile::TempDir;

fn fixture(kind: &str, case: &str, file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind)
        .join(case)
        .join(file);
    path.to_string_lossy().into_owned()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn out_path(dir: &TempDir, name: &str) -> String {
    dir.path().join(name).to_string_lossy().into_owned()
}

fn max_diff(a: &ArrayD<f64>, b: &ArrayD<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Files in a directory, sorted (to check that nothing, not even a temporary file, is left).
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
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
        ("f64_batch2_L5_dk4", None),
    ] {
        let mut list = qkv_masked(case, mask);
        list.extend([
            "--out".to_string(),
            out.clone(),
            "--weights".to_string(),
            weights.clone(),
        ]);
        let summary = attend::run(&list).unwrap_or_else(|e| panic!("{case}: {e}"));
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
    attend::run(&list).unwrap();
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
        multihead::run(&list).unwrap_or_else(|e| panic!("{case}: {e}"));
        let got: ArrayD<f64> = read_npy(&out).unwrap();
        let expected: ArrayD<f64> = read_npy(fixture("mha", case, "out.npy")).unwrap();
        assert!(max_diff(&got, &expected) < 1e-12, "{case}: output");
        let got: ArrayD<f64> = read_npy(&weights).unwrap();
        let expected: ArrayD<f64> = read_npy(fixture("mha", case, "weights.npy")).unwrap();
        assert!(max_diff(&got, &expected) < 1e-12, "{case}: weights");
    }
}

/// Runs a tool that must fail: checks the message names `file` and says `problem`, is one
/// line, and that the output directory is left as it was.
fn assert_fails(
    run: fn(&[String]) -> Result<String, String>,
    list: &[String],
    dir: &TempDir,
    file: &str,
    problem: &str,
) {
    let before = listing(dir.path());
    let message = run(list).expect_err("the tool should refuse this input");
    assert!(message.starts_with(file), "message should start with {file:?}: {message}");
    assert!(message.contains(problem), "message should say {problem:?}: {message}");
    assert!(!message.contains('\n'), "one line only: {message}");
    assert_eq!(listing(dir.path()), before, "a failed run must leave no file behind");
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
    assert_fails(attend::run, &with("--q", &missing), &dir, &missing, "cannot read");

    let garbage = out_path(&dir, "garbage.npy");
    std::fs::write(&garbage, b"this is not an npy file").unwrap();
    assert_fails(attend::run, &with("--k", &garbage), &dir, &garbage, "not a valid .npy file");

    let f32_k = fixture("sdpa", "f32_causal_L6_dk8", "k.npy");
    assert_fails(attend::run, &with("--k", &f32_k), &dir, &f32_k, "dtype float32 differs");

    let wrong_d_k = fixture("sdpa", "f64_Lq3_Lk5_dk4_dv2", "k.npy");
    assert_fails(
        attend::run,
        &with("--k", &wrong_d_k),
        &dir,
        &fixture("sdpa", good, "q.npy"),
        "q has d_k = 8 but k has d_k = 4",
    );

    let wrong_l_k = fixture("sdpa", "f64_L8_dk8", "v.npy");
    assert_fails(
        attend::run,
        &with("--v", &wrong_l_k),
        &dir,
        &fixture("sdpa", good, "k.npy"),
        "k has L_k = 6 but v has L_k = 8",
    );

    let batched_v = fixture("sdpa", "f64_batch2_L5_dk4", "v.npy");
    assert_fails(attend::run, &with("--v", &batched_v), &dir, &batched_v, "has 3 axes");

    let mut q: ArrayD<f64> = read_npy(fixture("sdpa", good, "q.npy")).unwrap();
    q[IxDyn(&[2, 3])] = f64::NAN;
    let nan = out_path(&dir, "nan.npy");
    write_npy(&nan, &q).unwrap();
    assert_fails(attend::run, &with("--q", &nan), &dir, &nan, "contains NaN at index [2, 3]");

    q[IxDyn(&[2, 3])] = f64::INFINITY;
    let inf = out_path(&dir, "inf.npy");
    write_npy(&inf, &q).unwrap();
    assert_fails(attend::run, &with("--q", &inf), &dir, &inf, "contains an infinite value");

    let mut list = with("--q", &fixture("sdpa", good, "q.npy"));
    let wrong_mask = fixture("sdpa", "f64_bool_L10_dk6", "mask.npy");
    list.extend(["--mask".to_string(), wrong_mask.clone()]);
    assert_fails(
        attend::run,
        &list,
        &dir,
        &wrong_mask,
        "mask has shape (10, 10) but (6, 6) was expected",
    );

    let mut list = with("--q", &fixture("sdpa", good, "q.npy"));
    let float_mask = fixture("sdpa", good, "weights.npy");
    list.extend(["--mask".to_string(), float_mask.clone()]);
    assert_fails(attend::run, &list, &dir, &float_mask, "a mask must have dtype bool");

    let mut list = with("--q", &fixture("sdpa", good, "q.npy"));
    list.extend(args(&["--labels", "a,b,c,d,e,f"]));
    assert_fails(attend::run, &list, &dir, "--labels only names the tokens", "add --png");

    let mut list = with("--q", &fixture("sdpa", good, "q.npy"));
    list.extend([
        "--png".to_string(),
        out_path(&dir, "w.png"),
        "--labels".to_string(),
        "The,cat,sat".to_string(),
    ]);
    assert_fails(attend::run, &list, &dir, "--labels: 3 labels given", "L = 6 tokens");

    let no_out: Vec<String> = qkv(good);
    assert_fails(attend::run, &no_out, &dir, "--out is required", "usage");

    let q_path = fixture("sdpa", good, "q.npy");
    let mut same = qkv(good);
    same.extend(["--out".to_string(), q_path.clone()]);
    assert_fails(attend::run, &same, &dir, &q_path, "is also an input file");
}

#[test]
fn attend_leaves_no_partial_output() {
    // OUT can be written, W cannot: neither may exist afterwards.
    let dir = TempDir::new().unwrap();
    let out = out_path(&dir, "out.npy");
    let weights = out_path(&dir, "no-such-dir/w.npy");
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(["--out".to_string(), out.clone(), "--weights".to_string(), weights.clone()]);
    assert_fails(attend::run, &list, &dir, &weights, "cannot write");
    assert!(!Path::new(&out).exists());
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
        multihead::run,
        &with_heads("5"),
        &dir,
        &x,
        "heads = 5 does not divide d_model = 12",
    );
    assert_fails(
        multihead::run,
        &with_heads("0"),
        &dir,
        "--heads: \"0\"",
        "not a positive whole number",
    );
    assert_fails(
        multihead::run,
        &with_heads("two"),
        &dir,
        "--heads: \"two\"",
        "not a positive whole number",
    );

    let mut list = with_heads("3");
    let small_wo = fixture("mha", "f64_d8_h2_L5", "w_o.npy");
    let i = list.iter().position(|a| a == "--wo").unwrap();
    list[i + 1] = small_wo.clone();
    assert_fails(
        multihead::run,
        &list,
        &dir,
        &small_wo,
        "has shape (8, 8) but (d_model, d_model) = (12, 12)",
    );

    let mut list = with_heads("3");
    let f32_wq = fixture("mha", "f32_d12_h3_L6_causal", "w_q.npy");
    let i = list.iter().position(|a| a == "--wq").unwrap();
    list[i + 1] = f32_wq.clone();
    assert_fails(multihead::run, &list, &dir, &f32_wq, "dtype float32 differs");

    let mut list = with_heads("3");
    let batch_mask = fixture("mha", "f64_d8_h2_batch3_L6_padding", "mask.npy");
    list.extend(["--mask".to_string(), batch_mask.clone()]);
    assert_fails(
        multihead::run,
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
        multihead::run,
        &list,
        &dir,
        &vector,
        "(L, d_model) or (batch, L, d_model) was expected",
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
    let summary = attend::run(&list).unwrap();
    assert!(summary.contains(&one), "{summary}");
    let (w1, h1) = png_size(&one);

    // Leading (batch, heads) axes: one panel per matrix, 2 × 2 of them, so a bigger image.
    let case = "f64_batch2_heads2_bool_L4";
    let mut list = qkv(case);
    list.extend(["--mask".to_string(), fixture("sdpa", case, "mask.npy")]);
    list.extend(args(&["--out", &out, "--png", &grid]));
    attend::run(&list).unwrap();
    let (w4, h4) = png_size(&grid);
    assert!(w4 > w1 && h4 > h1, "grid {w4}x{h4} should be larger than one heatmap {w1}x{h1}");

    // Unwritable PNG: no output at all, not even OUT.
    let fresh = TempDir::new().unwrap();
    let (out, png) = (out_path(&fresh, "out.npy"), out_path(&fresh, "no-such-dir/w.png"));
    let mut list = qkv("f64_causal_L6_dk8");
    list.extend(args(&["--out", &out, "--png", &png]));
    assert_fails(attend::run, &list, &fresh, &png, "cannot write");

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
    list.extend([
        "--out".to_string(),
        out_path(&many, "out.npy"),
        "--png".to_string(),
        png.clone(),
    ]);
    assert_fails(
        attend::run,
        &list,
        &many,
        &png,
        "hold 65 matrices, more than the 64 one image can show",
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
    multihead::run(&list).unwrap();
    let (w, h) = png_size(&png);
    assert!(h > w, "3 batch items × 2 heads lay out as 3 rows of 2 panels: {w}x{h}");

    let mut list = x_and_weights(case);
    list.extend(args(&["--heads", "2", "--out", &out, "--png", &png, "--labels", "a,b"]));
    let message = multihead::run(&list).unwrap_err();
    assert!(
        message.contains("--labels: 2 labels given but the weights have L = 6 tokens"),
        "{message}"
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
        ("f64_batch2_L5_dk4", None),
    ] {
        let list = qkv_masked(case, mask);
        for (implementation, out) in [("tiled", &tiled_out), ("plain", &plain_out)] {
            let mut list = list.clone();
            list.extend(args(&["--out", out, "--impl", implementation]));
            let summary = attend::run(&list).unwrap_or_else(|e| panic!("{case}: {e}"));
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
        attend::run(&list).unwrap()
    };
    assert!(run(&small, &[]).starts_with("attention (plain)"));
    assert!(run(&large, &[]).starts_with("attention (tiled)"));
    let summary = run(&large, &["--mask", "causal"]);
    assert!(
        summary.starts_with("attention (tiled)") && summary.contains("weights not formed"),
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
        let summary = attend::run(&list).unwrap();
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
    assert!(!attend::run(&list).unwrap().contains("median_ms"));
}

#[test]
fn attend_refuses_bad_impl_and_bench_options() {
    let dir = TempDir::new().unwrap();
    let (out, weights, png) =
        (out_path(&dir, "out.npy"), out_path(&dir, "w.npy"), out_path(&dir, "w.png"));
    let with = |extra: &[&str]| {
        let mut list = qkv("f64_L8_dk8");
        list.extend(args(&["--out", &out]));
        list.extend(args(extra));
        list
    };
    assert_fails(
        attend::run,
        &with(&["--impl", "fast"]),
        &dir,
        "--impl fast",
        "expected plain or tiled",
    );
    assert_fails(
        attend::run,
        &with(&["--impl", "tiled", "--weights", &weights]),
        &dir,
        "--impl tiled",
        "never forms",
    );
    assert_fails(
        attend::run,
        &with(&["--impl", "tiled", "--png", &png]),
        &dir,
        "--impl tiled",
        "never forms",
    );
    for n in ["0", "-1", "three", "2.5"] {
        assert_fails(
            attend::run,
            &with(&["--bench", n]),
            &dir,
            &format!("--bench {n}"),
            "at least 1",
        );
    }
    assert_fails(attend::run, &with(&["--bench"]), &dir, "--bench needs a value", "usage");
}
