//! What the tests of the reader tools share (`tests/tools.rs`, `tests/tool_processes.rs`).

use std::path::Path;

/// The path of a PyTorch fixture file, e.g. `fixture("sdpa", "f64_causal_L6_dk8", "q.npy")`.
pub fn fixture(kind: &str, case: &str, file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind)
        .join(case)
        .join(file)
        .to_string_lossy()
        .into_owned()
}

/// The `--x` and `--wq` … `--wo` arguments of a layer fixture case: its `x_file` and its
/// `w_q.npy` … `w_o.npy`, e.g. `layer_args("mha", "f64_d12_h3_L6_causal", "x_q.npy")`.
pub fn layer_args(kind: &str, case: &str, x_file: &str) -> Vec<String> {
    let mut list = vec!["--x".to_string(), fixture(kind, case, x_file)];
    for (flag, file) in [("--wq", "w_q"), ("--wk", "w_k"), ("--wv", "w_v"), ("--wo", "w_o")] {
        list.extend([flag.to_string(), fixture(kind, case, &format!("{file}.npy"))]);
    }
    list
}

/// Every file of a directory (hidden ones too) with its bytes, sorted by name: two snapshots
/// are equal when no file was added, removed or changed, temporary files included.
pub fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    all.sort();
    all
}

/// `--q X --k X --v X`: self-attention on the one file `x`.
pub fn self_attention_args(x: &str) -> Vec<String> {
    ["--q", x, "--k", x, "--v", x].map(String::from).to_vec()
}
