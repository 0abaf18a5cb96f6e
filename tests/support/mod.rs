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
