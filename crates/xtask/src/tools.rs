//! The pinned mdBook tools, installed with `cargo install --locked` when missing.
//!
//! They go into one install root outside the repository, shared by every clone:
//! `$ATTENTION_BOOK_TOOLS` if set, else `$XDG_CACHE_HOME/attention-step-by-step`, else
//! `~/.cache/attention-step-by-step` (or, without a `HOME`, `target/tools` in the repository).
//! Nothing is installed when the pinned versions are there.

use std::path::{Path, PathBuf};

use crate::run::{Cmd, Result};

/// A crate to install and the version the book is tested with.
struct Tool {
    krate: &'static str,
    version: &'static str,
}

const TOOLS: [Tool; 4] = [
    Tool { krate: "mdbook", version: "0.5.4" },
    Tool { krate: "mdbook-katex", version: "0.10.0" },
    Tool { krate: "mdbook-linkcheck2", version: "0.13.0" },
    Tool { krate: "mdbook-quiz", version: "0.5.0" },
];

/// The install root; with no `HOME` at all (some CI sandboxes), the repository's own
/// `target/tools`.
fn root(workspace: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("ATTENTION_BOOK_TOOLS") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")));
    match cache {
        Some(cache) => cache.join("attention-step-by-step"),
        None => workspace.join("target/tools"),
    }
}

/// Installs whatever pinned tool is missing (or at another version) and returns the `bin`
/// directory that holds them all.
pub fn ensure(workspace: &Path) -> Result<PathBuf> {
    let root = root(workspace);
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

    #[test]
    fn every_book_tool_is_pinned_once_and_quiz_is_among_them() {
        let listed = "mdbook-quiz v0.5.0:\n    mdbook-quiz\nmdbook-quiz-schema v0.5.0:\n";
        let quiz = TOOLS.iter().find(|t| t.krate == "mdbook-quiz").expect("mdbook-quiz is pinned");
        assert!(is_installed(listed, quiz));
        assert!(!is_installed("mdbook-quiz v0.4.0:\n    mdbook-quiz\n", quiz), "0.4.0 is not the pinned 0.5.0");
        assert!(!is_installed("mdbook-quiz-schema v0.5.0:\n", quiz), "a longer crate name is another crate");
        let mut names: Vec<&str> = TOOLS.iter().map(|t| t.krate).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TOOLS.len(), "a tool is listed twice");
        assert!(TOOLS.iter().all(|t| t.version.split('.').count() == 3), "exact versions only");
    }
}
