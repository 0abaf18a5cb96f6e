//! The pinned mdBook tools, installed with `cargo install --locked` when missing.
//!
//! They go into one install root outside the repository, shared by every clone:
//! `$ATTENTION_BOOK_TOOLS` if set, else `$XDG_CACHE_HOME/attention-step-by-step`, else
//! `~/.cache/attention-step-by-step`. Nothing is installed when the pinned versions are there.

use std::path::PathBuf;

use crate::run::{Cmd, Result};

/// A crate to install and the version the book is tested with.
struct Tool {
    krate: &'static str,
    version: &'static str,
}

const TOOLS: [Tool; 3] = [
    Tool { krate: "mdbook", version: "0.5.4" },
    Tool { krate: "mdbook-katex", version: "0.10.0" },
    Tool { krate: "mdbook-linkcheck2", version: "0.13.0" },
];

/// The install root.
fn root() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("ATTENTION_BOOK_TOOLS") {
        return Ok(PathBuf::from(dir));
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").ok_or("neither ATTENTION_BOOK_TOOLS nor HOME is set")?)
            .join(".cache"),
    };
    Ok(cache.join("attention-step-by-step"))
}

/// Installs whatever pinned tool is missing (or at another version) and returns the `bin`
/// directory that holds them all.
pub fn ensure() -> Result<PathBuf> {
    let root = root()?;
    let listed = Cmd::new("cargo").arg("install").arg("--list").arg("--root").arg(&root).output()?;
    for tool in &TOOLS {
        if is_installed(&listed, tool) {
            continue;
        }
        println!(
            "installing {} {} into {} (once; this takes several minutes)",
            tool.krate,
            tool.version,
            root.display()
        );
        Cmd::new("cargo")
            .args(["install", "--locked", "--root"])
            .arg(&root)
            .args([tool.krate, "--version", tool.version])
            .run()?;
    }
    Ok(root.join("bin"))
}

/// Whether `cargo install --list` output names the tool at its pinned version.
fn is_installed(listed: &str, tool: &Tool) -> bool {
    let wanted = format!("{} v{}:", tool.krate, tool.version);
    listed.lines().any(|line| line.trim_end() == wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_pinned_version_only() {
        let listed = "mdbook v0.5.4:\n    mdbook\nmdbook-katex v0.9.0:\n    mdbook-katex\n";
        assert!(is_installed(listed, &TOOLS[0]));
        assert!(!is_installed(listed, &TOOLS[1]), "0.9.0 is not the pinned 0.10.0");
        assert!(!is_installed(listed, &TOOLS[2]), "not listed at all");
    }
}
