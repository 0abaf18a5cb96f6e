//! The book's build and test commands, in Rust so that they need nothing but cargo.
//!
//! ```text
//! cargo xtask book [--no-serve] [--open]   regenerate the figures, build the book, serve it
//! cargo xtask test                          every test: cargo test, mdbook test, book integrity
//! cargo xtask tools                         install the pinned mdBook tools (done by both above)
//! cargo xtask deps                          build the link directory for `mdbook test -L`
//! cargo xtask figures                       run every chapter example (writes book/img/)
//! cargo xtask check-book [--html DIR]       check an existing build in target/book/html (or DIR,
//!                                           as written by `mdbook build -d DIR`)
//! cargo xtask search-index [--html DIR]     rebuild the search index of an existing build (done
//!                                           by `book` and `test` after every `mdbook build`)
//! ```

mod deps;
mod integrity;
mod reading;
mod run;
mod search;
mod tools;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use run::{Cmd, Result};

const USAGE: &str = "usage: cargo xtask <book [--no-serve] [--open] | test | tools | deps | figures | \
     check-book [--html DIR] | search-index [--html DIR]>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let (task, flags) = args.split_first().ok_or(USAGE)?;
    if task == "check-book" || task == "search-index" {
        let html = match flags {
            [] => root.join("target/book/html"),
            [flag, dir] if flag == "--html" => root.join(dir),
            _ => return Err(format!("{task} takes nothing or `--html DIR`\n{USAGE}").into()),
        };
        if task == "check-book" {
            return integrity::check_book(&root, &html);
        }
        let (before, after) = search::shrink(&html)?;
        println!("search index rebuilt: {:.2} MB -> {:.2} MB", before as f64 / 1e6, after as f64 / 1e6);
        return Ok(());
    }
    let allowed: &[&str] = match task.as_str() {
        "book" => &["--no-serve", "--open"],
        _ => &[],
    };
    if let Some(bad) = flags.iter().find(|f| !allowed.contains(&f.as_str())) {
        return Err(format!("unknown option `{bad}` for `{task}`\n{USAGE}").into());
    }
    let has = |flag: &str| flags.iter().any(|f| f == flag);
    if has("--open") && has("--no-serve") {
        return Err("--open opens the served book: it cannot go with --no-serve (open target/book/html/index.html yourself)".into());
    }
    match task.as_str() {
        "book" => book(&root, !has("--no-serve"), has("--open")),
        "test" => test(&root),
        "tools" => tools::ensure(&root).map(|_| ()),
        "deps" => deps::build_link_dir(&root).map(|dir| println!("{}", dir.display())),
        "figures" => figures(&root),
        _ => Err(USAGE.into()),
    }
}

/// The repository root: two levels above this crate's manifest.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/xtask sits two levels below the workspace root")
        .to_path_buf()
}

/// Command 1: everything the book needs, then the rendered book.
fn book(root: &Path, serve: bool, open: bool) -> Result<()> {
    let bin = tools::ensure(root)?;
    figures(root)?;
    build_book(root, &bin)?;
    let index = root.join("target/book/html/index.html");
    println!("\nThe book is built: {}", index.display());
    if serve {
        println!("Serving it at http://localhost:3000 (Ctrl-C to stop).");
        let mut cmd = Cmd::new(bin.join("mdbook")).arg("serve").tools(&bin).cwd(root);
        if open {
            cmd = cmd.arg("--open");
        }
        cmd.run_filtered(katex_version_warning)?;
    }
    Ok(())
}

/// Command 2: every test there is.
fn test(root: &Path) -> Result<()> {
    let bin = tools::ensure(root)?;
    step("cargo test --workspace (unit, integration and doc tests)");
    Cmd::new("cargo").args(["test", "--workspace"]).cwd(root).run()?;
    step("mdbook test (every snippet in the book)");
    let link_dir = deps::build_link_dir(root)?;
    Cmd::new(bin.join("mdbook"))
        .arg("test")
        .arg("-L")
        .arg(&link_dir)
        .tools(&bin)
        .cwd(root)
        .run_filtered(katex_version_warning)?;
    step("mdbook build + link check + integrity check");
    build_book(root, &bin)?;
    integrity::check_book(root, &root.join("target/book/html"))?;
    println!("\nall checks passed: cargo test, mdbook test, book build, link and integrity checks");
    Ok(())
}

/// `mdbook build`, failing on any warning but [`katex_version_warning`] and
/// [`search_size_warning`], then the search index rebuilt smaller ([`search::shrink`]), whose
/// size `check-book` limits.
fn build_book(root: &Path, bin: &Path) -> Result<()> {
    Cmd::new(bin.join("mdbook"))
        .arg("build")
        .tools(bin)
        .cwd(root)
        .run_without_warnings(|line| katex_version_warning(line) || search_size_warning(line))?;
    let (before, after) = search::shrink(&root.join("target/book/html"))?;
    println!("search index rebuilt: {:.2} MB -> {:.2} MB (crates/xtask/src/search.rs)", before as f64 / 1e6, after as f64 / 1e6);
    Ok(())
}

/// The warning mdbook-katex 0.10.0 logs every time mdBook runs it (for `mdbook build`,
/// `test` and `serve` alike): it was built against mdBook 0.5.3 and is called from the pinned
/// 0.5.4, a pair the book is built and tested with. Only this exact pair is tolerated; the
/// line is dropped from the log, and any other warning is shown.
fn katex_version_warning(line: &str) -> bool {
    line.contains(" WARN ")
        && line.contains("mdbook_katex")
        && line.contains("This mdbook-katex was built against mdbook v0.5.3, but we are being called from mdbook v0.5.4.")
}

/// The warning mdBook 0.5.4 logs when the search index it wrote passes 10 MB. That index never
/// reaches a reader: [`build_book`] rebuilds it at once, about 2.5 times smaller
/// ([`search::shrink`]), and `check-book` fails when the rebuilt one passes
/// [`search::MAX_BYTES`]. So the warning about the first one is dropped, and only that one.
/// mdBook names its source (`mdbook_html::...`) only when its output is a terminal; in a pipe,
/// as under CI, the line is ` WARN search index is very large (N bytes)`, so both are accepted.
fn search_size_warning(line: &str) -> bool {
    let Some((_, message)) = line.split_once(" WARN ") else {
        return false;
    };
    let message = message.trim_start();
    let message = match message.strip_prefix("mdbook_html") {
        Some(rest) => rest.split_once(": ").map_or("", |(_, m)| m),
        None => message,
    };
    message.starts_with("search index is very large (")
}

/// Runs every chapter example (`examples/chNN_*.rs`) in release mode with `--figures-only`
/// (chapter 8 then skips its timing sweep); each writes its figures and report into `book/img/`.
fn figures(root: &Path) -> Result<()> {
    let examples = chapter_examples(root)?;
    step(&format!("regenerating figures ({} chapter examples)", examples.len()));
    for name in examples {
        Cmd::new("cargo")
            .args(["run", "--quiet", "--release", "--example", &name, "--", "--figures-only"])
            .cwd(root)
            .quiet_stdout()
            .run()?;
        println!("  {name}: done");
    }
    Ok(())
}

/// The names of the chapter examples, sorted: `ch01_embeddings`, `ch02_...`.
fn chapter_examples(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("examples");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else { continue };
        let is_chapter = stem.len() > 4
            && stem.starts_with("ch")
            && stem[2..4].bytes().all(|b| b.is_ascii_digit())
            && path.extension().is_some_and(|e| e == "rs");
        if is_chapter {
            names.push(stem.to_string());
        }
    }
    names.sort();
    Ok(names)
}

fn step(what: &str) {
    println!("\n==> {what}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pinned_katex_pair_is_tolerated() {
        let line = |built: &str, called: &str| {
            format!("2026-11-23T02:13:57.774990Z  WARN mdbook_katex: This mdbook-katex was built against mdbook v{built}, but we are being called from mdbook v{called}. If you have any issue, this might be a reason.")
        };
        assert!(katex_version_warning(&line("0.5.3", "0.5.4")));
        assert!(!katex_version_warning(&line("0.5.3", "0.5.5")), "another mdBook");
        assert!(!katex_version_warning(&line("0.5.2", "0.5.4")), "another mdbook-katex");
        assert!(!katex_version_warning(" WARN mdbook_katex: could not render `\\frac{`"));
        assert!(!katex_version_warning(" WARN unclosed HTML tag `<mo>` found in `ch04.md`"));
    }

    #[test]
    fn only_mdbooks_search_size_warning_is_tolerated() {
        let line = "2026-11-28T00:40:00.000000Z  WARN mdbook_html::html_handlebars::search: search index is very large (10485761 bytes)";
        assert!(search_size_warning(line));
        assert!(!search_size_warning(" WARN mdbook_html::html_handlebars::hbs_renderer: unclosed HTML tag"));
        assert!(!search_size_warning("search index is very large (10485761 bytes)"), "not a warning line");
        // In a pipe (CI), mdBook leaves out the timestamp and the source.
        assert!(search_size_warning(" WARN search index is very large (10036235 bytes)"));
        assert!(!search_size_warning(" WARN mdbook_katex: search index is very large (1 bytes)"));
        assert!(!search_size_warning(" WARN unclosed HTML tag: search index is very large (1 bytes)"));
    }
}
