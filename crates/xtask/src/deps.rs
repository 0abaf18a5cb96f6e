//! The link directory for `mdbook test -L`.
//!
//! mdBook hands rustdoc nothing but `-L` paths, so a snippet finds `attention` or `ndarray`
//! by searching those directories, and rustdoc refuses (E0464, "multiple candidates") when a
//! directory holds two rlibs of one crate. `target/debug/deps` collects them: every build
//! with other features, every dev-dependency that pulls a second `rand`, every old version
//! after an update. So we build the book's crates and copy exactly the artifacts of that build,
//! as cargo reports them, into a fresh `target/book-deps`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::run::{Cmd, Result};

/// Crates the book's snippets name with `extern crate`: each must appear exactly once.
const SNIPPET_CRATES: [&str; 8] = ["attention", "figures", "gpu", "ndarray", "ndarray_rand", "pretrained", "rand", "rand_distr"];

/// Builds `attention`, `figures`, `gpu` and `pretrained` and fills `target/book-deps` with the libraries of that
/// build and nothing else. Returns the directory.
pub fn build_link_dir(root: &Path) -> Result<PathBuf> {
    let messages = Cmd::new("cargo")
        .args(["build", "--lib", "-p", "attention", "-p", "figures", "-p", "gpu", "-p", "pretrained", "--message-format=json-render-diagnostics"])
        .cwd(root)
        .output()?;
    let libs = library_files(&messages)?;
    let dir = root.join("target/book-deps");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut by_crate: BTreeMap<String, Vec<&Path>> = BTreeMap::new();
    for lib in &libs {
        let name = lib.file_name().and_then(|n| n.to_str()).ok_or("artifact without a file name")?;
        std::fs::copy(lib, dir.join(name)).map_err(|e| format!("cannot copy {}: {e}", lib.display()))?;
        by_crate.entry(crate_name(name).to_string()).or_default().push(lib);
    }
    for krate in SNIPPET_CRATES {
        match by_crate.get(krate).map(Vec::len) {
            Some(1) => {}
            Some(n) => return Err(format!("{n} libraries named `{krate}` in {}: {:?}", dir.display(), by_crate[krate]).into()),
            None => return Err(format!("the book's crates no longer depend on `{krate}`; update SNIPPET_CRATES").into()),
        }
    }
    Ok(dir)
}

/// The `.rlib` and proc-macro libraries named by cargo's `compiler-artifact` messages.
fn library_files(messages: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for line in messages.lines().filter(|l| l.starts_with('{')) {
        let msg: serde_json::Value = serde_json::from_str(line)?;
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(names) = msg["filenames"].as_array() else { continue };
        for name in names.iter().filter_map(|n| n.as_str()) {
            if [".rlib", ".so", ".dylib", ".dll"].iter().any(|ext| name.ends_with(ext)) {
                files.push(PathBuf::from(name));
            }
        }
    }
    if files.is_empty() {
        return Err("cargo reported no library artifacts for the book's crates".into());
    }
    Ok(files)
}

/// `libndarray-1a2b3c.rlib` -> `ndarray`; `libattention.rlib` (a workspace member, which
/// cargo reports without a hash) -> `attention`.
fn crate_name(file: &str) -> &str {
    let stem = file.strip_prefix("lib").unwrap_or(file);
    let stem = stem.split_once('.').map_or(stem, |(stem, _ext)| stem);
    stem.split_once('-').map_or(stem, |(name, _hash)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_names_drop_prefix_and_hash() {
        assert_eq!(crate_name("libndarray_rand-0123abcd.rlib"), "ndarray_rand");
        assert_eq!(crate_name("libthiserror_impl-99.so"), "thiserror_impl");
        assert_eq!(crate_name("libattention.rlib"), "attention");
    }

    #[test]
    fn only_library_artifacts_are_kept() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","filenames":["/t/deps/libndarray-1.rlib","/t/deps/libndarray-1.rmeta"]}"#,
            "\n",
            r#"{"reason":"build-script-executed","filenames":["/t/build/x.rlib"]}"#,
            "\n",
            r#"{"reason":"compiler-artifact","filenames":["/t/deps/libthiserror_impl-2.so"]}"#,
            "\nCompiling something\n",
        );
        let files = library_files(messages).unwrap();
        assert_eq!(files, [PathBuf::from("/t/deps/libndarray-1.rlib"), PathBuf::from("/t/deps/libthiserror_impl-2.so")]);
        assert!(library_files("").is_err());
    }
}
