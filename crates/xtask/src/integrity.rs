//! The book integrity check: what mdbook-linkcheck2 does not cover.
//!
//! On the sources (`book/**/*.md`): every `{{#include}}` / `{{#rustdoc_include}}` names a file
//! that exists and, where it names an anchor, a file that has `ANCHOR: name` and
//! `ANCHOR_END: name` (mdBook only warns about a missing anchor and includes nothing).
//!
//! On the code blocks of the book's pages, includes expanded as mdBook expands them, and only
//! the lines the reader sees counted: no line is wider than 95 columns; doc comments (`///`,
//! `//!`) stay under 10 % of the shown lines (the figure is printed); every anchor of an
//! included file is balanced; and every function of `crates/attention` that a listing calls is
//! shown by an earlier listing, or its page links to the page that shows it.
//!
//! On the built HTML (`target/book/html`): every image exists and has alt text, every internal
//! link and `#anchor` resolves, no `{{#...}}` directive and no raw `$$` math is left outside
//! code, nothing is loaded from the network (no external `src` on scripts, images, frames; no
//! external stylesheet or `url(http...)` in CSS), the Introduction holds rendered MathML, and
//! every interactive head view (`<div class="head-view" data-head-view="ID">`) has a local
//! script on its page that registers its data (else it would show only its picture).

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use crate::run::Result;

/// Runs every check on the sources under `root` and the book built into `html_dir`, and reports
/// every problem at once.
pub fn check_book(root: &Path, html_dir: &Path) -> Result<()> {
    if !html_dir.join("index.html").is_file() {
        return Err(format!("no built book in {} (run `mdbook build` first)", html_dir.display()).into());
    }
    let mut problems = check_sources(&root.join("book"))?;
    let (listings, listing_problems) = check_listings(&root.join("book"), &root.join("crates/attention/src"))?;
    println!("{}", listings.summary());
    problems.extend(listing_problems);
    problems.extend(check_html(html_dir)?);
    problems.extend(check_quizzes(&root.join("book"), html_dir)?);
    problems.extend(crate::reading::check_reading_line(html_dir)?);
    problems.extend(crate::search::check(html_dir)?);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        return Err(format!("book integrity check found {} problem(s):\n{}", problems.len(), list.join("\n")).into());
    }
    println!("book integrity check: sources and {} passed", html_dir.display());
    Ok(())
}

/// Every file under `dir` (recursively) whose extension is `ext`, sorted.
pub(crate) fn files_with_ext(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, ext, out)?;
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, ext, &mut files)?;
    files.sort();
    Ok(files)
}

/// The text between each `open` and the next `close` after it, in order.
fn delimited<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(close) else { break };
        found.push(&after[..end]);
        rest = &after[end..];
    }
    found
}

pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()).into())
}

// ---------------------------------------------------------------------------------------------
// Sources

/// Problems with the include directives of every Markdown file under `src`.
pub fn check_sources(src: &Path) -> Result<Vec<String>> {
    let pages = files_with_ext(src, "md")?;
    let mut problems = Vec::new();
    for page in pages {
        let text = read(&page)?;
        let dir = page.parent().unwrap_or(src);
        for directive in include_directives(&text) {
            if let Err(problem) = check_include(dir, directive) {
                problems.push(format!("{}: {{{{#{directive}}}}}: {problem}", page.display()));
            }
        }
    }
    Ok(problems)
}

/// The insides of `{{#include ...}}` and `{{#rustdoc_include ...}}` directives.
fn include_directives(text: &str) -> Vec<&str> {
    delimited(text, "{{#", "}}")
        .into_iter()
        .map(str::trim)
        .filter(|inner| inner.starts_with("include ") || inner.starts_with("rustdoc_include "))
        .collect()
}

fn check_include(dir: &Path, directive: &str) -> std::result::Result<(), String> {
    let (path, text, lines) = expand_include_text(dir, directive)?;
    if path.extension().is_some_and(|e| e == "txt") && directive.starts_with("include ") {
        check_output_sections(&path, &text, &lines)?;
    }
    Ok(())
}

/// A line range of a captured output (`img/chNN_output.txt`, written by a chapter example) must
/// be whole paragraphs: it starts at the file's first line or after a blank line, and ends at its
/// last line or before a blank line, neither end blank. When the example's report changes shape,
/// a range cut out of it by line numbers then fails here instead of showing the wrong lines.
///
/// `text` is the whole file at `path`, `included` the lines the directive put in.
fn check_output_sections(path: &Path, text: &str, included: &[(usize, String)]) -> std::result::Result<(), String> {
    let (Some((first, _)), Some((last, _))) = (included.first(), included.last()) else {
        return Err(format!("includes no line of {}", path.display()));
    };
    let lines: Vec<&str> = text.lines().collect();
    let blank = |i: usize| lines.get(i).is_none_or(|l| l.trim().is_empty());
    let starts_a_paragraph = *first == 0 || blank(first - 1);
    let ends_a_paragraph = blank(last + 1);
    if blank(*first) || blank(*last) || !starts_a_paragraph || !ends_a_paragraph {
        return Err(format!(
            "lines {}-{} of {} are not whole paragraphs (a range must start after a blank line and end before \
             one): did the report change shape?",
            first + 1,
            last + 1,
            path.display()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Includes, expanded as mdBook expands them

/// One `ANCHOR: name` or `ANCHOR_END: name` marker, read as mdBook reads it
/// (`ANCHOR:\s*([\w_-]+)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker<'a> {
    Start(&'a str),
    End(&'a str),
}

fn anchor_marker(line: &str) -> Option<Marker<'_>> {
    let name_after = |tag: &str| {
        let rest = line[line.find(tag)? + tag.len()..].trim_start();
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')).unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    };
    name_after("ANCHOR_END:").map(Marker::End).or_else(|| name_after("ANCHOR:").map(Marker::Start))
}

/// What a directive's selector asks for (mdBook's `parse_range_or_anchor`): line indices
/// `start..end` (0-based, `end` exclusive) or an anchor.
enum Selector<'a> {
    Lines(usize, Option<usize>),
    Anchor(&'a str),
}

fn parse_selector(selector: Option<&str>) -> Selector<'_> {
    let mut parts = selector.unwrap_or("").splitn(3, ':');
    let first = parts.next().unwrap_or("");
    let start = match first.parse::<usize>() {
        Ok(line) => Some(line.saturating_sub(1)),
        Err(_) if first.is_empty() => None,
        Err(_) => return Selector::Anchor(first),
    };
    match (start, parts.next().map(str::parse::<usize>)) {
        (Some(start), Some(Ok(end))) => Selector::Lines(start, Some(end)),
        (Some(start), Some(Err(_))) => Selector::Lines(start, None),
        (Some(start), None) => Selector::Lines(start, Some(start + 1)),
        (None, Some(Ok(end))) => Selector::Lines(0, Some(end)),
        (None, _) => Selector::Lines(0, None),
    }
}

/// What mdBook puts in place of one `{{#include ...}}` or `{{#rustdoc_include ...}}`
/// directive (its `take_lines`, `take_anchored_lines` and `take_rustdoc_include_*`): the
/// included file and the lines put in, each with its index in that file. A `rustdoc_include`
/// keeps the whole file and hides (`# `) every line outside the range or anchor, and an anchor
/// named several times contributes all its segments; a plain `include` of an anchor takes its
/// first segment only. Marker lines are never included. Fails when the file cannot be read or
/// lacks the anchor (mdBook would only warn and include nothing).
fn expand_include(dir: &Path, directive: &str) -> std::result::Result<(PathBuf, Vec<(usize, String)>), String> {
    expand_include_text(dir, directive).map(|(path, _, lines)| (path, lines))
}

/// [`expand_include`], with the whole text of the included file as well.
fn expand_include_text(dir: &Path, directive: &str) -> std::result::Result<(PathBuf, String, Vec<(usize, String)>), String> {
    let (kind, spec) = directive.split_once(' ').map(|(k, s)| (k, s.trim())).unwrap_or((directive, ""));
    let spec = spec.split_whitespace().next().unwrap_or("");
    let (file, selector) = match spec.split_once(':') {
        Some((file, selector)) => (file, Some(selector)),
        None => (spec, None),
    };
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let lines = text.lines().enumerate();
    let rustdoc = kind == "rustdoc_include";
    let out: Vec<(usize, String)> = match parse_selector(selector) {
        Selector::Lines(start, end) => {
            let inside = |i: usize| i >= start && end.is_none_or(|end| i < end);
            if rustdoc {
                lines.map(|(i, l)| (i, if inside(i) { l.to_string() } else { format!("# {l}") })).collect()
            } else {
                lines.filter(|&(i, _)| inside(i)).map(|(i, l)| (i, l.to_string())).collect()
            }
        }
        Selector::Anchor(anchor) => {
            let markers: Vec<Option<Marker>> = text.lines().map(anchor_marker).collect();
            if !markers.contains(&Some(Marker::Start(anchor))) {
                return Err(format!("{} has no `ANCHOR: {anchor}`", path.display()));
            }
            if !markers.contains(&Some(Marker::End(anchor))) {
                return Err(format!("{} has no `ANCHOR_END: {anchor}`", path.display()));
            }
            let mut out = Vec::new();
            let mut within = false;
            for ((i, line), marker) in lines.zip(markers) {
                match marker {
                    Some(Marker::Start(name)) if name == anchor => within = true,
                    Some(Marker::End(name)) if name == anchor => {
                        within = false;
                        if !rustdoc {
                            break;
                        }
                    }
                    Some(_) => {}
                    None if within => out.push((i, line.to_string())),
                    None if rustdoc => out.push((i, format!("# {line}"))),
                    None => {}
                }
            }
            out
        }
    };
    Ok((path, text, out))
}

// ---------------------------------------------------------------------------------------------
// Listings: the code blocks as the reader sees them

/// The widest line a code block may show: the code column holds 97 characters of code
/// (`book/theme/book.css`); the crates' `rustfmt.toml` format their code to 95.
const MAX_COLUMNS: usize = 95;

/// Doc-comment lines (`///`, `//!`) must stay below this share of the lines the book's code
/// blocks show: a listing shows code (signature and body), not rustdoc (GUIDE.md §7).
const MAX_DOC_SHARE: f64 = 0.10;

/// One line of a page after its include directives are expanded.
#[derive(Debug, Clone)]
struct PageLine {
    text: String,
    /// The included file the line comes from, and its index there.
    source: Option<(PathBuf, usize)>,
}

/// One fenced code block of an expanded page.
#[derive(Debug)]
struct CodeBlock {
    /// The language: the first word of the info string (`rust` for `rust,ignore`).
    language: String,
    lines: Vec<PageLine>,
}

impl CodeBlock {
    /// The lines the reader sees, as mdBook's HTML shows them: in a Rust block, a line
    /// `# ...` (or a lone `#`) is hidden and `##...` shows as `#...`.
    fn shown(&self) -> impl Iterator<Item = (String, &PageLine)> {
        let rust = self.language == "rust";
        self.lines.iter().filter_map(move |line| {
            let text = &line.text;
            let indent = text.len() - text.trim_start().len();
            if rust && let Some(rest) = text[indent..].strip_prefix('#') {
                if rest.is_empty() || rest.starts_with(' ') {
                    return None;
                }
                if rest.starts_with('#') {
                    return Some((format!("{}{}", &text[..indent], rest), line));
                }
            }
            Some((text.clone(), line))
        })
    }

    /// Whether any line comes from an included Rust file: a listing of real code.
    fn is_listing(&self) -> bool {
        self.lines.iter().any(|l| l.source.as_ref().is_some_and(|(p, _)| p.extension().is_some_and(|e| e == "rs")))
    }
}

/// A page with its include directives replaced by what mdBook puts there. A directive alone on
/// its line becomes the included lines, each knowing its source; directives that fail are left
/// as they are (`check_sources` reports them).
fn expand_page(dir: &Path, text: &str) -> Vec<PageLine> {
    let mut out = Vec::new();
    for line in text.lines() {
        let directives = include_directives(line);
        let alone = directives.len() == 1 && line.trim() == format!("{{{{#{}}}}}", directives[0]);
        match (directives.first(), alone) {
            (Some(directive), true) => match expand_include(dir, directive) {
                Ok((path, lines)) => out.extend(
                    lines.into_iter().map(|(i, text)| PageLine { text, source: Some((path.clone(), i)) }),
                ),
                Err(_) => out.push(PageLine { text: line.to_string(), source: None }),
            },
            (Some(_), false) => {
                let mut expanded = line.to_string();
                for directive in directives {
                    if let Ok((_, lines)) = expand_include(dir, directive) {
                        let lines: Vec<String> = lines.into_iter().map(|(_, l)| l).collect();
                        expanded = expanded.replacen(&format!("{{{{#{directive}}}}}"), &lines.join("\n"), 1);
                    }
                }
                out.extend(expanded.lines().map(|l| PageLine { text: l.to_string(), source: None }));
            }
            (None, _) => out.push(PageLine { text: line.to_string(), source: None }),
        }
    }
    out
}

/// The fenced code blocks (```` ``` ```` or `~~~`, three or more) of an expanded page.
fn code_blocks(lines: &[PageLine]) -> Vec<CodeBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<(char, usize, CodeBlock)> = None;
    for line in lines {
        let trimmed = line.text.trim_start();
        let fence = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        match open.take() {
            None => {
                for c in ['`', '~'] {
                    if fence(c) >= 3 {
                        let info = trimmed.trim_start_matches(c);
                        let language = info.split([' ', '\t', ',']).find(|s| !s.is_empty()).unwrap_or("").to_string();
                        open = Some((c, fence(c), CodeBlock { language, lines: Vec::new() }));
                    }
                }
            }
            Some((c, n, mut block)) => {
                if fence(c) >= n && trimmed.trim_start_matches(c).trim().is_empty() {
                    blocks.push(block);
                } else {
                    block.lines.push(line.clone());
                    open = Some((c, n, block));
                }
            }
        }
    }
    blocks
}

/// The pages of the book in reading order: the `.md` links of `SUMMARY.md`.
fn summary_pages(src: &Path) -> Result<Vec<PathBuf>> {
    let summary = read(&src.join("SUMMARY.md"))?;
    Ok(delimited(&summary, "](", ")")
        .into_iter()
        .filter(|target| target.ends_with(".md"))
        .map(|target| src.join(target))
        .collect())
}

/// What the listings check measured.
#[derive(Debug, Default, PartialEq)]
pub struct ListingStats {
    /// Lines shown in all code blocks of the book.
    pub shown: usize,
    /// Doc-comment lines among them.
    pub doc: usize,
    /// Lines shown in listings (code blocks holding lines of an included `.rs` file).
    pub listing_shown: usize,
    /// Doc-comment lines among those.
    pub listing_doc: usize,
}

impl ListingStats {
    fn share(doc: usize, shown: usize) -> f64 {
        if shown == 0 { 0.0 } else { doc as f64 / shown as f64 }
    }

    /// The line `cargo xtask check-book` prints.
    pub fn summary(&self) -> String {
        format!(
            "listings: {} lines shown in code blocks, {} doc-comment lines ({:.1} %); in the {} lines \
             of included Rust, {} ({:.1} %)",
            self.shown,
            self.doc,
            100.0 * Self::share(self.doc, self.shown),
            self.listing_shown,
            self.listing_doc,
            100.0 * Self::share(self.listing_doc, self.listing_shown),
        )
    }
}

fn is_doc_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("///") || t.starts_with("//!")
}

fn shown_path(path: &Path) -> String {
    normalize(path).display().to_string()
}

/// The code blocks of the book as the reader sees them (the pages of `SUMMARY.md` under `src`,
/// includes expanded as mdBook does): no line wider than [`MAX_COLUMNS`], doc comments under
/// [`MAX_DOC_SHARE`] of the shown lines, every included anchor balanced, and every function of
/// the crate under `crate_src` that a listing calls shown by an earlier listing or linked to.
pub fn check_listings(src: &Path, crate_src: &Path) -> Result<(ListingStats, Vec<String>)> {
    let mut stats = ListingStats::default();
    let mut problems = Vec::new();
    let mut pages = Vec::new();
    for page in summary_pages(src)? {
        let text = read(&page)?;
        let blocks = code_blocks(&expand_page(page.parent().unwrap_or(src), &text));
        pages.push((page, text, blocks));
    }
    let mut included: Vec<PathBuf> = Vec::new();
    for (page, _, blocks) in &pages {
        for block in blocks {
            let listing = block.is_listing();
            for (text, line) in block.shown() {
                let doc = is_doc_comment(&text);
                stats.shown += 1;
                stats.doc += usize::from(doc);
                if listing {
                    stats.listing_shown += 1;
                    stats.listing_doc += usize::from(doc);
                }
                let columns = text.chars().count();
                if columns > MAX_COLUMNS {
                    let from = match &line.source {
                        Some((file, i)) => format!(" ({}:{})", shown_path(file), i + 1),
                        None => String::new(),
                    };
                    problems.push(format!(
                        "{}: a code block shows a line of {columns} columns (at most {MAX_COLUMNS}){from}: `{}`",
                        page.display(),
                        text.trim()
                    ));
                }
            }
            for line in &block.lines {
                if let Some((file, _)) = &line.source
                    && !included.contains(file)
                {
                    included.push(file.clone());
                }
            }
        }
    }
    let share = ListingStats::share(stats.doc, stats.shown);
    if share >= MAX_DOC_SHARE {
        problems.push(format!(
            "doc comments are {:.1} % of the lines the code blocks show (at most {:.0} %): anchor the \
             listings below their doc comments",
            100.0 * share,
            100.0 * MAX_DOC_SHARE
        ));
    }
    for file in &included {
        problems.extend(unbalanced_anchors(file, &read(file)?));
    }
    problems.extend(unshown_calls(&pages, crate_src)?);
    Ok((stats, problems))
}

/// Every `ANCHOR: name` must be closed by an `ANCHOR_END: name` before it opens again, and
/// every `ANCHOR_END: name` must close an open one.
fn unbalanced_anchors(file: &Path, text: &str) -> Vec<String> {
    let mut open: Vec<(&str, usize)> = Vec::new();
    let mut problems = Vec::new();
    let at = |i: usize| format!("{}:{}", shown_path(file), i + 1);
    for (i, line) in text.lines().enumerate() {
        match anchor_marker(line) {
            Some(Marker::Start(name)) => {
                if let Some(&(_, first)) = open.iter().find(|(n, _)| *n == name) {
                    problems.push(format!("{}: `ANCHOR: {name}` opens again before the one of line {} is closed", at(i), first + 1));
                } else {
                    open.push((name, i));
                }
            }
            Some(Marker::End(name)) => match open.iter().position(|(n, _)| *n == name) {
                Some(k) => {
                    open.remove(k);
                }
                None => problems.push(format!("{}: `ANCHOR_END: {name}` closes no open `ANCHOR: {name}`", at(i))),
            },
            None => {}
        }
    }
    problems.extend(open.into_iter().map(|(name, i)| format!("{}: `ANCHOR: {name}` is never closed", at(i))));
    problems
}

// ---------------------------------------------------------------------------------------------
// Listings: every function they call is shown, or linked to

/// A function defined in the crate the book teaches.
#[derive(Debug)]
struct FnDef {
    /// The file and the index of the line with `fn name`.
    file: PathBuf,
    line: usize,
    /// The file's module (its stem): `sdpa` for `sdpa.rs`, `learn` for `learn/mod.rs`.
    module: String,
    /// The folder's module, for a file in a folder (`learn` for `learn/train.rs`), else empty.
    parent: String,
    /// The type of the `impl` (or the trait) it sits in; `None` for a free function.
    owner: Option<String>,
    name: String,
    /// Whether it takes `self` (so that it is called as `x.name(...)`).
    method: bool,
}

impl FnDef {
    fn path(&self) -> String {
        match &self.owner {
            Some(owner) => format!("{owner}::{}", self.name),
            None => format!("{}::{}", self.module, self.name),
        }
    }
}

/// Method names the standard library and ndarray use too (`v.len()`, `x.shape()`,
/// `Zip::from(a).and(b)`, `vec.push(x)`, `a.append(axis, b)`, `iter.position(p)`,
/// `text.bytes()`, and chapter 14's `params.bytes()` and `kernel.name()` beside
/// `KvCache::bytes` and `Pattern::name`), or that
/// another crate of the book defines as well (`pretrained::Bert::layers` and `config` beside
/// chapter 12's `TinyTransformer`): a call `x.name(...)` with one of these names is not
/// taken for the crate's method, which is then checked only where a listing names its type.
const COMMON_METHOD_NAMES: [&str; 12] = [
    "len", "is_empty", "shape", "and", "push", "default", "append", "position", "layers",
    "config", "bytes", "name",
];

/// The name of the function a line defines, if it does: `pub(crate) fn name<...>(`.
fn defined_fn(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in ["pub(crate) ", "pub(super) ", "pub ", "const ", "unsafe ", "async "] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// What follows the generic parameters `<...>` that `s` starts with (nested `<>` included), or
/// `None` if they are not closed.
fn skip_generics(s: &str) -> Option<&str> {
    let mut depth = 0;
    let (end, _) = s.char_indices().find(|&(_, c)| {
        depth += match c {
            '<' => 1,
            '>' => -1,
            _ => 0,
        };
        depth == 0
    })?;
    Some(&s[end + 1..])
}

/// The type an `impl` (or `trait`) line at column 0 is about: `Linear` for
/// `impl<A: Float> Linear<A> {`, `Running` for `impl<A: Float> Default for Running<A> {`.
fn impl_owner(line: &str) -> Option<String> {
    let rest = if let Some(rest) = line.strip_prefix("impl") {
        let rest = if rest.starts_with('<') { skip_generics(rest)? } else { rest };
        match rest.split_once(" for ") {
            Some((_, ty)) => ty,
            None => rest,
        }
    } else {
        line.strip_prefix("pub trait ").or_else(|| line.strip_prefix("trait "))?
    };
    let rest = rest.trim_start();
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_string())
}

/// Every function of the crate under `crate_src` (its tests left out), and the names of its
/// types and modules.
fn crate_functions(crate_src: &Path) -> Result<(Vec<FnDef>, HashSet<String>, HashSet<String>)> {
    let mut defs = Vec::new();
    let mut types = HashSet::new();
    let mut modules = HashSet::new();
    for file in files_with_ext(crate_src, "rs")? {
        // A module is named by its file, or by its folder for a `mod.rs`; the items of a file
        // in a folder are also reachable through the folder's module (`learn::train` is
        // defined in `training/learn/train.rs`).
        let name_of = |p: Option<&Path>| {
            p.and_then(|p| p.file_name()).and_then(|s| s.to_str()).unwrap_or_default().to_string()
        };
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        let folder = name_of(file.parent());
        let module = if stem == "mod" { folder.clone() } else { stem };
        let parent = if file.parent().is_some_and(|p| p != crate_src) { folder } else { String::new() };
        modules.insert(module.clone());
        if !parent.is_empty() {
            modules.insert(parent.clone());
        }
        let text = read(&file)?;
        let lines: Vec<&str> = text.lines().collect();
        let mut owner = None;
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("#[cfg(test)]") {
                break; // the unit tests come last
            }
            if line.starts_with('}') {
                owner = None;
            } else if let Some(ty) = impl_owner(line) {
                types.insert(ty.clone());
                owner = Some(ty);
            }
            for kind in ["struct ", "enum ", "type "] {
                let decl = line.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                if let Some(rest) = decl.strip_prefix(kind) {
                    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
                    types.insert(rest[..end].to_string());
                }
            }
            let Some(name) = defined_fn(line) else { continue };
            let signature: String = lines[i..]
                .iter()
                .take_while(|l| !l.contains('{') && !l.trim_end().ends_with(';'))
                .chain(lines[i..].iter().find(|l| l.contains('{') || l.trim_end().ends_with(';')))
                .copied()
                .collect();
            let method = ["(&self", "(&mut self", "(self", "(mut self", "&self,", "&self)"]
                .iter()
                .any(|s| signature.replace(char::is_whitespace, "").contains(&s.replace(' ', "")));
            defs.push(FnDef {
                file: normalize(&file),
                line: i,
                module: module.clone(),
                parent: parent.clone(),
                owner: owner.clone(),
                name: name.to_string(),
                method,
            });
        }
    }
    Ok((defs, types, modules))
}

/// A line of Rust without its `//` comment and with the insides of its string literals blanked.
fn code_only(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_string = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (in_string, c) {
            (false, '/') if chars.peek() == Some(&'/') => break,
            (false, '"') => {
                in_string = true;
                out.push(c);
            }
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => {
                in_string = false;
                out.push(c);
            }
            (true, _) => {}
            (false, _) => out.push(c),
        }
    }
    out
}

/// The crate functions a line of a listing calls (or names, as in `map(Mask::for_heads)`):
/// for each, the indices in `defs` of the functions it may be.
fn calls_in(line: &str, defs: &[FnDef], types: &HashSet<String>, modules: &HashSet<String>) -> Vec<Vec<usize>> {
    let code = code_only(line);
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut calls = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !(bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') || (i > 0 && is_ident(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        let name = &code[start..i];
        let before = code[..start].trim_end();
        if before == "fn" || before.ends_with(" fn") {
            continue; // a definition, not a call
        }
        // After the name: an optional turbofish `::<...>`, then `(` for a call.
        let mut after = code[i..].trim_start();
        if let Some(rest) = after.strip_prefix("::").filter(|r| r.starts_with('<')) {
            after = skip_generics(rest).unwrap_or("").trim_start();
        }
        let is_call = after.starts_with('(');
        let candidates: Vec<usize> = if let Some(path) = code[..start].strip_suffix("::") {
            // `Q::name` or `Q::<T>::name`: the qualifier decides.
            let mut path = path;
            if path.ends_with('>') {
                let mut depth = 0;
                let open = path.char_indices().rev().find(|&(_, c)| {
                    depth += match c {
                        '>' => 1,
                        '<' => -1,
                        _ => 0,
                    };
                    depth == 0
                });
                path = open.map_or("", |(k, _)| path[..k].strip_suffix("::").unwrap_or(""));
            }
            let q_start = path.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |k| k + 1);
            let qualifier = &path[q_start..];
            defs.iter()
                .enumerate()
                .filter(|(_, d)| d.name == name)
                .filter(|(_, d)| match &d.owner {
                    Some(owner) => qualifier == "Self" || (types.contains(qualifier) && owner == qualifier),
                    None => modules.contains(qualifier) && (d.module == qualifier || d.parent == qualifier),
                })
                .map(|(k, _)| k)
                .collect()
        } else if before.ends_with('.') {
            if !is_call || COMMON_METHOD_NAMES.contains(&name) {
                continue;
            }
            defs.iter().enumerate().filter(|(_, d)| d.method && d.name == name).map(|(k, _)| k).collect()
        } else {
            if !is_call {
                continue;
            }
            defs.iter().enumerate().filter(|(_, d)| d.owner.is_none() && d.name == name).map(|(k, _)| k).collect()
        };
        if !candidates.is_empty() {
            calls.push(candidates);
        }
    }
    calls
}

/// Walks the listings in reading order: a listing may call a function of the crate only if an
/// earlier listing (or the same one) shows it, or if its page links to the page that does.
fn unshown_calls(pages: &[(PathBuf, String, Vec<CodeBlock>)], crate_src: &Path) -> Result<Vec<String>> {
    let (defs, types, modules) = crate_functions(crate_src)?;
    let index: HashMap<(PathBuf, usize), usize> =
        defs.iter().enumerate().map(|(k, d)| ((d.file.clone(), d.line), k)).collect();
    let shown_in = |block: &CodeBlock| -> Vec<usize> {
        block
            .shown()
            .filter_map(|(_, line)| line.source.as_ref())
            .filter_map(|(file, i)| index.get(&(normalize(file), *i)).copied())
            .collect()
    };
    // Where each function is first shown: the page's position in the book.
    let mut first_page: HashMap<usize, usize> = HashMap::new();
    for (p, (_, _, blocks)) in pages.iter().enumerate() {
        for block in blocks.iter().filter(|b| b.is_listing()) {
            for def in shown_in(block) {
                first_page.entry(def).or_insert(p);
            }
        }
    }
    let mut shown = HashSet::new();
    let mut problems = Vec::new();
    for (p, (page, text, blocks)) in pages.iter().enumerate() {
        for block in blocks.iter().filter(|b| b.is_listing()) {
            shown.extend(shown_in(block));
            for (line, page_line) in block.shown() {
                let Some((file, i)) = &page_line.source else { continue };
                if file.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                for candidates in calls_in(&line, &defs, &types, &modules) {
                    if candidates.iter().any(|k| shown.contains(k)) {
                        continue;
                    }
                    let def = &defs[candidates[0]];
                    let at = format!("{}:{}", shown_path(file), i + 1);
                    let later = candidates.iter().filter_map(|k| first_page.get(k)).min();
                    match later.map(|&q| (q, &pages[q].0)) {
                        Some((q, _)) if q == p && text.contains("](#") => {}
                        Some((q, target)) if q != p && linked(page, text, target) => {}
                        Some((_, target)) => problems.push(format!(
                            "{}: a listing calls `{}` ({at}) before any listing shows it; link to {} where it is shown",
                            page.display(),
                            def.path(),
                            target.file_name().unwrap_or_default().to_string_lossy(),
                        )),
                        None => problems.push(format!(
                            "{}: a listing calls `{}` ({at}), which no listing of the book shows",
                            page.display(),
                            def.path()
                        )),
                    }
                }
            }
        }
    }
    problems.dedup();
    Ok(problems)
}

/// Whether the Markdown of `page` links to the page `target` (a relative `](target.md` link).
fn linked(page: &Path, text: &str, target: &Path) -> bool {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let same_dir = page.parent() == target.parent();
    same_dir && (text.contains(&format!("]({name})")) || text.contains(&format!("]({name}#")))
}

// ---------------------------------------------------------------------------------------------
// Built HTML

/// One start tag: its name and attributes (values with `&amp;` and friends decoded).
#[derive(Debug)]
pub(crate) struct Tag {
    pub(crate) name: String,
    attrs: Vec<(String, String)>,
}

impl Tag {
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A parsed page: its tags, and its text with scripts, styles, comments and code removed.
struct Page {
    tags: Vec<Tag>,
    prose: String,
    /// Markdown's own tags (`em`, `del`, `a`, …) found inside `<math>`: Markdown read part of a
    /// formula as emphasis, strikethrough or a link, and the formula is garbled.
    markdown_in_math: Vec<String>,
}

/// HTML tags that Markdown produces and MathML never contains.
const MARKDOWN_TAGS: [&str; 7] = ["em", "strong", "del", "a", "code", "img", "p"];

/// One piece of an HTML page, as [`tokens`] reads it.
pub(crate) enum Token<'a> {
    /// Text between tags (character references not decoded).
    Text(&'a str),
    /// A start tag (or a self-closing one).
    Open(Tag),
    /// An end tag: its name, in lower case.
    Close(String),
}

/// A small, forgiving HTML scanner, enough for mdBook's well-formed output: the page's text,
/// start tags and end tags in order. Comments are skipped, and so is the content of `<script>`
/// and `<style>` (their end tags still come through); an unfinished tag at the end comes back
/// as text.
pub(crate) fn tokens(html: &str) -> impl Iterator<Item = Token<'_>> {
    let mut rest = html;
    let mut pending: Option<Token> = None;
    std::iter::from_fn(move || {
        if let Some(token) = pending.take() {
            return Some(token);
        }
        loop {
            if rest.is_empty() {
                return None;
            }
            let lt = rest.find('<').unwrap_or(rest.len());
            let text = &rest[..lt];
            rest = &rest[lt..];
            let tag = if let Some(after) = rest.strip_prefix("<!--") {
                rest = after.find("-->").map_or("", |end| &after[end + 3..]);
                None
            } else if let Some(gt) = tag_end(rest) {
                let raw = &rest[1..gt];
                rest = &rest[gt + 1..];
                Some(match raw.strip_prefix('/') {
                    Some(closing) => Token::Close(closing.trim().to_ascii_lowercase()),
                    None => {
                        let tag = parse_tag(raw);
                        if tag.name == "script" || tag.name == "style" {
                            let close = format!("</{}", tag.name);
                            rest = rest.find(&close).map_or("", |i| &rest[i..]);
                        }
                        Token::Open(tag)
                    }
                })
            } else {
                // An unfinished tag: the rest is text.
                let text = &html[html.len() - rest.len() - text.len()..];
                rest = "";
                return Some(Token::Text(text));
            };
            match (text.is_empty(), tag) {
                (true, Some(tag)) => return Some(tag),
                (false, tag) => {
                    pending = tag;
                    return Some(Token::Text(text));
                }
                (true, None) => continue,
            }
        }
    })
}

/// Reads a page: its start tags, its prose (text outside code) and any Markdown tag inside a
/// formula.
fn parse_html(html: &str) -> Page {
    let mut tags = Vec::new();
    let mut prose = String::new();
    let mut code_depth = 0usize;
    let mut math_depth = 0usize;
    let mut markdown_in_math = Vec::new();
    for token in tokens(html) {
        match token {
            Token::Text(text) if code_depth == 0 => prose.push_str(text),
            Token::Text(_) => {}
            Token::Close(name) => {
                if (name == "code" || name == "pre") && code_depth > 0 {
                    code_depth -= 1;
                }
                if name == "math" && math_depth > 0 {
                    math_depth -= 1;
                }
            }
            Token::Open(tag) => {
                if math_depth > 0 && MARKDOWN_TAGS.contains(&tag.name.as_str()) {
                    markdown_in_math.push(tag.name.clone());
                }
                match tag.name.as_str() {
                    "code" | "pre" => code_depth += 1,
                    "math" => math_depth += 1,
                    _ => {}
                }
                tags.push(tag);
            }
        }
    }
    Page { tags, prose, markdown_in_math }
}

/// Index of the `>` closing the tag that starts `s`, skipping quoted attribute values.
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices().skip(1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

fn parse_tag(raw: &str) -> Tag {
    let raw = raw.trim_end_matches('/');
    let name_end = raw.find(|c: char| c.is_whitespace()).unwrap_or(raw.len());
    let name = raw[..name_end].to_ascii_lowercase();
    let mut attrs = Vec::new();
    let mut rest = raw[name_end..].trim_start();
    while !rest.is_empty() {
        let key_end = rest.find(|c: char| c == '=' || c.is_whitespace()).unwrap_or(rest.len());
        let key = rest[..key_end].to_ascii_lowercase();
        rest = rest[key_end..].trim_start();
        let mut value = String::new();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (v, remaining) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let body = &after[1..];
                    let end = body.find(q).unwrap_or(body.len());
                    (&body[..end], body.get(end + 1..).unwrap_or(""))
                }
                _ => {
                    let end = after.find(char::is_whitespace).unwrap_or(after.len());
                    (&after[..end], &after[end..])
                }
            };
            value = decode_character_references(v);
            rest = remaining.trim_start();
        }
        if !key.is_empty() {
            attrs.push((key, value));
        }
    }
    Tag { name, attrs }
}


fn is_external(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.starts_with("http:") || lower.starts_with("https:") || lower.starts_with("//")
}

/// Tags whose `src`/`href`/`data` the browser fetches on its own when the page loads.
const LOADING_TAGS: [&str; 10] = ["script", "link", "img", "iframe", "source", "video", "audio", "embed", "object", "track"];

/// Problems found in the built HTML under `html_dir`.
pub fn check_html(html_dir: &Path) -> Result<Vec<String>> {
    let files = files_with_ext(html_dir, "html")?;
    let mut pages = HashMap::new();
    for file in &files {
        pages.insert(file.clone(), parse_html(&read(file)?));
    }
    let ids: HashMap<&PathBuf, HashSet<&str>> = pages
        .iter()
        .map(|(file, page)| (file, page.tags.iter().filter_map(|t| t.attr("id")).collect()))
        .collect();

    let mut problems = Vec::new();
    for file in &files {
        let page = &pages[file];
        let shown = file.strip_prefix(html_dir).unwrap_or(file).display().to_string();
        let mut problem = |p: String| problems.push(format!("{shown}: {p}"));
        if page.prose.contains("{{#") {
            problem("an unexpanded `{{#...}}` directive is left in the page".into());
        }
        if let Some(tag) = page.markdown_in_math.first() {
            problem(format!(
                "Markdown garbled a formula: <{tag}> inside <math> ({} such tag(s); a `_` after `)` or `}}` \
                 reads as emphasis, two `~` as strikethrough, `[...]` as a link)",
                page.markdown_in_math.len()
            ));
        }
        if page.prose.contains("$$") {
            problem("raw `$$` math is left in the page (was the katex preprocessor run?)".into());
        }
        for tag in &page.tags {
            for attr in ["src", "href", "data"] {
                let Some(url) = tag.attr(attr) else { continue };
                if is_external(url) {
                    if LOADING_TAGS.contains(&tag.name.as_str()) {
                        problem(format!("<{} {attr}=\"{url}\"> loads from the network", tag.name));
                    }
                    continue;
                }
                if url.is_empty() || url.starts_with("mailto:") || url.starts_with("javascript:") || url.starts_with("data:") {
                    continue;
                }
                if let Err(p) = resolve(html_dir, file, url, &ids) {
                    problem(format!("<{} {attr}=\"{url}\">: {p}", tag.name));
                }
            }
            if tag.name == "img" && tag.attr("alt").is_none_or(|alt| alt.trim().is_empty()) {
                problem(format!("<img src=\"{}\"> has no alt text", tag.attr("src").unwrap_or("")));
            }
        }
        for id in head_views_without_data(file, page) {
            problem(format!(
                "<div class=\"head-view\" data-head-view=\"{id}\">: no local <script src> on the page registers \
                 its data (window.attentionHeadViews[\"{id}\"], written by figures::HeadView::write_data_script), \
                 so only its static picture would show"
            ));
        }
    }
    let intro = html_dir.join("introduction.html");
    match pages.get(&intro) {
        Some(page) if page.tags.iter().any(|t| t.name == "math") => {}
        Some(_) => problems.push("introduction.html: no MathML (<math>) found: math is not rendered at build time".into()),
        None => problems.push("introduction.html is missing".into()),
    }
    // The stylesheets the pages load (mdBook also copies unreferenced files from the sources).
    let mut stylesheets: Vec<PathBuf> = files
        .iter()
        .flat_map(|file| {
            pages[file].tags.iter().filter(|t| t.name == "link" && t.attr("rel") == Some("stylesheet")).filter_map(
                move |t| {
                    let href = t.attr("href")?;
                    (!is_external(href)).then(|| normalize(&file.parent().unwrap_or(html_dir).join(href)))
                },
            )
        })
        .filter(|css| css.is_file())
        .collect();
    stylesheets.sort();
    stylesheets.dedup();
    for css in stylesheets {
        let shown = css.strip_prefix(html_dir).unwrap_or(&css).display().to_string();
        let text = read(&css)?;
        if text.to_ascii_lowercase().contains("@import") {
            problems.push(format!("{shown}: @import (stylesheets must be listed in the page, not imported)"));
        }
        for url in css_urls(&text) {
            if is_external(url) {
                problems.push(format!("{shown}: url({url}) loads from the network"));
            } else if !url.starts_with("data:") && !url.starts_with('#') {
                let target = normalize(&css.parent().unwrap_or(html_dir).join(url.split(['?', '#']).next().unwrap_or(url)));
                if !target.is_file() {
                    problems.push(format!("{shown}: url({url}): {} does not exist", target.display()));
                }
            }
        }
    }
    Ok(problems)
}

/// The ids of the head views on a page (`<div class="head-view" data-head-view="ID">`, drawn
/// by book/theme/head-view.js) whose data no local script of the page registers.
fn head_views_without_data(file: &Path, page: &Page) -> Vec<String> {
    let scripts: Vec<String> = page
        .tags
        .iter()
        .filter(|t| t.name == "script")
        .filter_map(|t| t.attr("src").filter(|src| !is_external(src)))
        .filter_map(|src| std::fs::read_to_string(normalize(&file.parent().unwrap_or(file).join(src))).ok())
        .collect();
    page.tags
        .iter()
        .filter(|t| t.name == "div" && t.attr("class").is_some_and(|c| c.split_whitespace().any(|c| c == "head-view")))
        .filter_map(|t| t.attr("data-head-view"))
        .filter(|id| !scripts.iter().any(|s| s.contains(&format!("[\"{id}\"] ="))))
        .map(str::to_string)
        .collect()
}

/// The targets of `url(...)` in a stylesheet, without quotes.
fn css_urls(css: &str) -> Vec<&str> {
    delimited(css, "url(", ")").into_iter().map(|url| url.trim().trim_matches(['"', '\''])).collect()
}

/// Resolves a local URL from `from` and checks its file and fragment.
fn resolve(html_dir: &Path, from: &Path, url: &str, ids: &HashMap<&PathBuf, HashSet<&str>>) -> std::result::Result<(), String> {
    let url = url.split('?').next().unwrap_or(url);
    let (path, fragment) = match url.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (url, None),
    };
    let target = if path.is_empty() {
        from.to_path_buf()
    } else if let Some(absolute) = path.strip_prefix('/') {
        normalize(&html_dir.join(absolute))
    } else {
        normalize(&from.parent().unwrap_or(html_dir).join(path))
    };
    let target = if target.is_dir() { target.join("index.html") } else { target };
    if !target.starts_with(html_dir) {
        return Err(format!("points outside the book ({})", target.display()));
    }
    if !target.is_file() {
        return Err(format!("{} does not exist", target.display()));
    }
    match (fragment, ids.get(&target)) {
        (Some(f), Some(page_ids)) if !f.is_empty() && !page_ids.contains(f) => {
            Err(format!("no element with id \"{f}\" in {}", target.display()))
        }
        _ => Ok(()),
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` to `dir/name`, creating the folders on the way.
    pub(super) fn write(dir: &Path, name: &str, text: &str) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Asserts that every expected message is among `problems` (one per line).
    pub(super) fn assert_reported(problems: &str, expected: &[&str]) {
        for expected in expected {
            assert!(problems.contains(expected), "expected {expected:?} in:\n{problems}");
        }
    }

    fn good_book(dir: &Path) {
        write(
            dir,
            "index.html",
            r#"<link rel="stylesheet" href="css/general.css"><a href="introduction.html#notation">intro</a><script src="book.js"></script>"#,
        );
        write(dir, "unused/broken.css", "a { b: url(nothing.png) }");
        write(dir, "introduction.html", r##"<h2 id="notation">N</h2><math><mi>x</mi></math><img src="img/a.png" alt="a heatmap"><a href="#notation">x</a><a href="https://example.org">web links are fine</a><pre><code>let s = "$$ {{#not a directive}}";</code></pre>"##);
        write(dir, "img/a.png", "png");
        write(dir, "book.js", "");
        // An interactive head view, its picture and its data.
        write(
            dir,
            "views.html",
            r#"<div class="head-view" data-head-view="ch13"><img src="img/a.png" alt="heads"></div><script src="img/ch13_view.js"></script>"#,
        );
        write(dir, "img/ch13_view.js", r#"(window.attentionHeadViews = window.attentionHeadViews || {})["ch13"] = {};"#);
        write(dir, "css/general.css", "body { background: url(\"../img/a.png\"); }");
    }

    #[test]
    fn a_clean_book_passes() {
        let dir = tempfile::tempdir().unwrap();
        good_book(dir.path());
        assert_eq!(check_html(dir.path()).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn every_kind_of_breakage_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        good_book(dir.path());
        write(
            dir.path(),
            "ch1.html",
            concat!(
                r#"<img src="img/missing.png" alt="x"><img src="img/a.png">"#,
                r#"<a href="introduction.html#nowhere">a</a><a href="gone.html">b</a>"#,
                r#"<script src="https://cdn.example/x.js"></script><link rel="stylesheet" href="//cdn.example/k.css">"#,
                "<p>{{#include ../x.rs:anchor}}</p><p>$$ x^2 $$</p>",
                "<math><mi>x</mi><em>i</em></math>",
                r#"<div class="head-view" data-head-view="lost"><img src="img/a.png" alt="h"></div><script src="img/ch13_view.js"></script>"#,
                r#"<link rel="stylesheet" href="css/extra.css"><link rel="stylesheet" href="css/fonts.css">"#,
            ),
        );
        write(dir.path(), "introduction.html", r#"<h2 id="notation">N</h2>"#);
        write(dir.path(), "css/extra.css", "@import url(https://fonts.example/x.css);");
        write(dir.path(), "css/fonts.css", "@font-face { src: url('../fonts/missing.woff2'); } a { b: url(https://x.example/y.png) }");
        let problems = check_html(dir.path()).unwrap().join("\n");
        assert_reported(
            &problems,
            &[
                "img/missing.png\">:",
                "<img src=\"img/a.png\"> has no alt text",
                "no element with id \"nowhere\"",
                "gone.html does not exist",
                "<script src=\"https://cdn.example/x.js\"> loads from the network",
                "<link href=\"//cdn.example/k.css\"> loads from the network",
                "unexpanded",
                "raw `$$` math",
                "Markdown garbled a formula: <em> inside <math>",
                "no MathML",
                "css/extra.css: @import",
                "css/fonts.css: url(../fonts/missing.woff2):",
                "css/fonts.css: url(https://x.example/y.png) loads from the network",
                "ch1.html: <div class=\"head-view\" data-head-view=\"lost\">: no local <script src> on the page registers its data",
            ],
        );
    }

    #[test]
    fn line_ranges_of_captured_outputs_are_whole_paragraphs() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "img/out.txt", "title\nline 2\n\nsection\nmore\n\nlast\n");
        for ok in ["include img/out.txt:1:2", "include img/out.txt:4:5", "include img/out.txt:4:", "include img/out.txt:7"] {
            assert_eq!(check_include(dir.path(), ok), Ok(()), "{ok}");
        }
        for bad in ["include img/out.txt:2:2", "include img/out.txt:4:4", "include img/out.txt:3:5", "include img/out.txt:1:3"] {
            let err = check_include(dir.path(), bad).unwrap_err();
            assert!(err.contains("not whole paragraphs"), "{bad}: {err}");
        }
        // Rust files and rustdoc_include are not reports.
        write(dir.path(), "src/a.rs", "fn a() {}\nfn b() {}\n");
        assert_eq!(check_include(dir.path(), "include src/a.rs:2"), Ok(()));
    }

    #[test]
    fn include_directives_are_checked_against_anchors() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "code.rs", "// ANCHOR: good\nfn f() {}\n// ANCHOR_END: good\n// ANCHOR: open\n");
        write(
            dir.path(),
            "page.md",
            "{{#rustdoc_include code.rs:good}}\n{{#include code.rs:3:4}}\n{{#include code.rs:bad}}\n{{#include code.rs:open}}\n{{#include missing.rs}}\n",
        );
        let problems = check_sources(dir.path()).unwrap().join("\n");
        assert!(!problems.contains("good"), "{problems}");
        assert!(problems.contains("has no `ANCHOR: bad`"), "{problems}");
        assert!(problems.contains("has no `ANCHOR_END: open`"), "{problems}");
        assert!(problems.contains("cannot read"), "{problems}");
        assert_eq!(problems.lines().count(), 3, "{problems}");
    }

    /// The text mdBook would put in place of a directive, line by line.
    fn expanded(dir: &Path, directive: &str) -> Vec<String> {
        expand_include(dir, directive).unwrap().1.into_iter().map(|(_, line)| line).collect()
    }

    #[test]
    fn includes_expand_as_mdbook_expands_them() {
        let dir = tempfile::tempdir().unwrap();
        let code = "/// Doc.\n// ANCHOR: f\nfn f() {\n// ANCHOR_END: f\n    /// Inner doc.\n// ANCHOR: f\n}\n\
                    // ANCHOR_END: f\n// ANCHOR: other\nlet x = 1;\n// ANCHOR_END: other\n";
        write(dir.path(), "code.rs", code);
        // rustdoc_include: the whole file, lines outside the anchor hidden, every segment of
        // the anchor shown in order, no marker line kept.
        assert_eq!(
            expanded(dir.path(), "rustdoc_include code.rs:f"),
            ["# /// Doc.", "fn f() {", "#     /// Inner doc.", "}", "# let x = 1;"]
        );
        // include of an anchor: its first segment only.
        assert_eq!(expanded(dir.path(), "include code.rs:f"), ["fn f() {"]);
        // Line ranges, 1-based and inclusive, as mdBook reads `file:a:b`, `file:a` and `file::b`.
        assert_eq!(expanded(dir.path(), "include code.rs:3:4"), ["fn f() {", "// ANCHOR_END: f"]);
        assert_eq!(expanded(dir.path(), "include code.rs:3"), ["fn f() {"]);
        assert_eq!(expanded(dir.path(), "include code.rs::1"), ["/// Doc."]);
        assert_eq!(expanded(dir.path(), "rustdoc_include code.rs:3:3")[1..3], ["# // ANCHOR: f", "fn f() {"]);
        assert_eq!(expanded(dir.path(), "include code.rs").len(), 11);
        let (path, lines) = expand_include(dir.path(), "rustdoc_include code.rs:other").unwrap();
        assert_eq!(path, dir.path().join("code.rs"));
        assert_eq!(lines[4], (9, "let x = 1;".to_string()), "each line keeps its index in the file");
    }

    /// A book (`src`) with the given pages in SUMMARY order, and a crate under `src/../krate`.
    fn listing_book(pages: &[(&str, &str)], crate_files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let summary: String = pages.iter().map(|(name, _)| format!("- [{name}]({name})\n")).collect();
        write(dir.path(), "book/SUMMARY.md", &format!("# Summary\n\n{summary}"));
        for (name, text) in pages {
            write(dir.path(), &format!("book/{name}"), text);
        }
        for (name, text) in crate_files {
            write(dir.path(), &format!("krate/{name}"), text);
        }
        dir
    }

    fn check(dir: &tempfile::TempDir) -> (ListingStats, String) {
        let (stats, problems) = check_listings(&dir.path().join("book"), &dir.path().join("krate")).unwrap();
        (stats, problems.join("\n"))
    }

    const LIB: &str = "\
/// Adds.
// ANCHOR: add
pub fn add(a: f64, b: f64) -> f64 {
    a + b
}
// ANCHOR_END: add

pub struct Layer {
    w: f64,
}

impl Layer {
    /// Applies.
    // ANCHOR: apply
    pub fn apply(&self, x: f64) -> f64 {
        add(self.w * x, 0.0)
    }
    // ANCHOR_END: apply

    // ANCHOR: len
    pub fn len(&self) -> usize {
        1
    }
    // ANCHOR_END: len
}

// ANCHOR: twice
pub fn twice(x: f64) -> f64 {
    let v: Vec<f64> = vec![x];
    let _ = v.len(); // a Vec's len, not Layer::len
    Layer::apply(&Layer { w: 2.0 }, x)
}
// ANCHOR_END: twice
";

    #[test]
    fn shown_lines_doc_share_and_width_are_measured_as_the_reader_sees_them() {
        let long = format!("let s = \"{}\";", "x".repeat(90));
        let page = format!(
            "```rust,ignore\n{{{{#rustdoc_include ../krate/lib.rs:add}}}}\n```\n\n\
             ```rust\n# hidden();\n#\n## shown_as_one_hash();\n{long}\n//! a doc line in a snippet\n```\n\n\
             ```text\nplain output\n```\n"
        );
        let dir = listing_book(&[("ch1.md", &page)], &[("lib.rs", LIB)]);
        let (stats, problems) = check(&dir);
        // Shown: the 3 lines of `add`; 3 of the 5 snippet lines; 1 line of output.
        assert_eq!(stats, ListingStats { shown: 7, doc: 1, listing_shown: 3, listing_doc: 0 });
        assert!(problems.contains("a line of 101 columns (at most 95)"), "{problems}");
        assert!(problems.contains("doc comments are 14.3 % of the lines"), "{problems}");
        assert!(!problems.contains("hidden"), "a hidden line is not measured: {problems}");
        assert_eq!(problems.lines().count(), 2, "{problems}");
        assert!(stats.summary().starts_with("listings: 7 lines shown in code blocks, 1 doc-comment lines (14.3 %)"));

        // The same listing anchored above its doc comment shows rustdoc, and fails.
        let docs = LIB.replace("/// Adds.\n// ANCHOR: add\n", "// ANCHOR: add\n/// Adds.\n///\n/// More.\n");
        let dir = listing_book(&[("ch1.md", "```rust,ignore\n{{#rustdoc_include ../krate/lib.rs:add}}\n```\n")], &[("lib.rs", &docs)]);
        let (stats, problems) = check(&dir);
        assert_eq!((stats.shown, stats.doc), (6, 3));
        assert!(problems.contains("doc comments are 50.0 %"), "{problems}");
    }

    #[test]
    fn anchors_must_be_balanced() {
        let code = "// ANCHOR: a\nfn a() {}\n// ANCHOR: a\n// ANCHOR_END: a\n// ANCHOR_END: b\n// ANCHOR: c\nfn c() {}\n";
        let page = "```rust,ignore\n{{#rustdoc_include ../krate/lib.rs:a}}\n```\n";
        let dir = listing_book(&[("ch1.md", page)], &[("lib.rs", code)]);
        let (_, problems) = check(&dir);
        assert!(problems.contains("lib.rs:3: `ANCHOR: a` opens again before the one of line 1 is closed"), "{problems}");
        assert!(problems.contains("lib.rs:5: `ANCHOR_END: b` closes no open `ANCHOR: b`"), "{problems}");
        assert!(problems.contains("lib.rs:6: `ANCHOR: c` is never closed"), "{problems}");
        assert_eq!(problems.lines().count(), 3, "{problems}");
    }

    #[test]
    fn every_function_a_listing_calls_is_shown_earlier_or_linked() {
        let include = |anchor: &str| format!("```rust,ignore\n{{{{#rustdoc_include ../krate/lib.rs:{anchor}}}}}\n```\n");
        // `apply` calls `add`, shown on an earlier page; `twice` calls `Layer::apply`, shown
        // just before it; `v.len()` is a Vec's, not `Layer::len`.
        let good = [("ch1.md", include("add")), ("ch2.md", format!("{}{}", include("apply"), include("twice")))];
        let good: Vec<(&str, &str)> = good.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let dir = listing_book(&good, &[("lib.rs", LIB)]);
        assert_eq!(check(&dir).1, "");

        // `add` shown only on a later page: the page must link there.
        let later = [("ch1.md", include("apply")), ("ch2.md", include("add"))];
        let later: Vec<(&str, &str)> = later.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let dir = listing_book(&later, &[("lib.rs", LIB)]);
        let problems = check(&dir).1;
        assert!(problems.contains("ch1.md: a listing calls `lib::add`"), "{problems}");
        assert!(problems.contains("before any listing shows it; link to ch2.md"), "{problems}");
        let linked = format!("{}`add` is [shown later](ch2.md#add).\n", include("apply"));
        let dir = listing_book(&[("ch1.md", &linked), ("ch2.md", &include("add"))], &[("lib.rs", LIB)]);
        assert_eq!(check(&dir).1, "");

        // Never shown at all: `Layer::apply`, called by its path from `twice`.
        let dir = listing_book(&[("ch1.md", &include("twice"))], &[("lib.rs", LIB)]);
        let problems = check(&dir).1;
        assert!(problems.contains("a listing calls `Layer::apply`"), "{problems}");
        assert!(problems.contains("which no listing of the book shows"), "{problems}");
        assert_eq!(problems.lines().count(), 1, "{problems}");
    }
}

// ---------------------------------------------------------------------------------------------
// Quizzes
//
// Every chapter (`book/chNN-*.md`) ends with mdbook-quiz's directive `{{#quiz quizzes/chNN.toml}}`.
// At build time the preprocessor replaces it with a `<div class="quiz-placeholder">` that holds
// the questions as JSON, and links its script and stylesheet (copied into `book/quiz/`) at the end
// of the page; the script renders the quiz in the reader's browser. These checks make sure every
// chapter has its quiz, that the directive was expanded into a quiz a reader can use, that the
// page loads mdbook-quiz's files from the book itself, and that the questions keep the book's
// rules (4 to 7 questions, each with an `id` and an explanation; no "all of the above", no
// "which is NOT"; one question, `chNN-predict`, whose answer is a number the chapter does not
// print, asserted in the chapter beside its id; no line that Markdown would read as a numbered
// list by accident).

/// How many questions a chapter's quiz has.
const QUIZ_LENGTH: std::ops::RangeInclusive<usize> = 4..=7;

/// The question types mdbook-quiz 0.5.0 renders; all of them work offline (a `Tracing` program
/// is compiled and run by the preprocessor at build time, with the local `rustc`).
const QUIZ_TYPES: [&str; 3] = ["MultipleChoice", "ShortAnswer", "Tracing"];

/// mdbook-quiz's files, relative to the book's root, which every page with a quiz must load.
const QUIZ_ASSETS: [&str; 2] = ["quiz/quiz-embed.iife.js", "quiz/style.css"];

/// Problems with the chapters' quizzes: in the sources under `src` (the book's `book/`) and in
/// the built pages under `html_dir`.
pub fn check_quizzes(src: &Path, html_dir: &Path) -> Result<Vec<String>> {
    let chapters = chapter_pages(src)?;
    let mut problems = check_quiz_sources(src, &chapters)?;
    let mut ids = HashSet::new();
    for (number, page) in &chapters {
        let html = html_dir.join(page).with_extension("html");
        let shown = html.strip_prefix(html_dir).unwrap_or(&html).display().to_string();
        let Ok(text) = std::fs::read_to_string(&html) else {
            problems.push(format!("{shown}: missing (chapter {number})"));
            continue;
        };
        for problem in quiz_page_problems(html_dir, &html, &text, &mut ids) {
            problems.push(format!("{shown}: {problem}"));
        }
    }
    Ok(problems)
}

/// The chapters under `src`: (`"01"`, `"ch01-embeddings.md"`), sorted by file name.
fn chapter_pages(src: &Path) -> Result<Vec<(String, String)>> {
    let mut chapters = Vec::new();
    for entry in std::fs::read_dir(src).map_err(|e| format!("cannot read {}: {e}", src.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let number = name.strip_prefix("ch").and_then(|rest| rest.get(..2)).filter(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if let Some(number) = number.filter(|_| name.ends_with(".md") && name[4..].starts_with('-')) {
            chapters.push((number.to_string(), name));
        }
    }
    chapters.sort();
    Ok(chapters)
}

/// Every chapter ends with its own quiz directive, every quiz file exists and is used, and every
/// question in it has an `id` (without one, mdbook-quiz writes a random id into the source file
/// at every build) and a `context`.
fn check_quiz_sources(src: &Path, chapters: &[(String, String)]) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut used = HashSet::new();
    for (number, page) in chapters {
        let text = read(&src.join(page))?;
        let directive = format!("{{{{#quiz quizzes/ch{number}.toml}}}}");
        let last = text.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("").trim();
        if last != directive {
            problems.push(format!("{page}: does not end with its quiz, `{directive}` (last line: `{last}`)"));
        }
        if text.matches("{{#quiz ").count() > 1 {
            problems.push(format!("{page}: more than one `{{{{#quiz ...}}}}` directive"));
        }
        let quiz = format!("quizzes/ch{number}.toml");
        used.insert(quiz.clone());
        match std::fs::read_to_string(src.join(&quiz)) {
            Ok(toml) => {
                problems.extend(quiz_source_problems(&toml).into_iter().map(|p| format!("{quiz}: {p}")));
                problems.extend(predict_problems(number, &toml, &text).into_iter().map(|p| format!("{quiz}: {p}")));
            }
            Err(e) => problems.push(format!("{quiz}: cannot read it ({e}), but {page} includes it")),
        }
    }
    if let Ok(entries) = std::fs::read_dir(src.join("quizzes")) {
        let mut orphans = Vec::new();
        for entry in entries {
            let name = format!("quizzes/{}", entry?.file_name().to_string_lossy());
            if !used.contains(&name) {
                orphans.push(name);
            }
        }
        orphans.sort();
        problems.extend(orphans.into_iter().map(|name| format!("{name}: no chapter includes it")));
    }
    Ok(problems)
}

/// Chapter `number`'s quiz (`toml`) has a question `chNN-predict` (predict a number the chapter
/// did not print, then see why), and the chapter's source (`chapter`) names that id beside the
/// assertion of its answer.
fn predict_problems(number: &str, toml: &str, chapter: &str) -> Vec<String> {
    let id = format!("ch{number}-predict");
    let mut problems = Vec::new();
    if !toml.lines().any(|line| line.split_once('=').is_some_and(|(k, v)| k.trim() == "id" && v.trim() == format!("\"{id}\""))) {
        problems.push(format!("no question `{id}` (a number the chapter did not print: predict it, then see why)"));
    } else if !chapter.contains(&id) {
        problems.push(format!("the answer of `{id}` is not asserted in the chapter (name `{id}` in a comment beside the assertion)"));
    }
    problems
}

/// A line that starts with a number and `.` or `)` after a line of text: mdbook-quiz's Markdown
/// reads it as the start of a numbered list ("1024. What happens..." became item 1024).
fn accidental_list(previous: &str, line: &str) -> bool {
    // The text after a leading number and `.` or `)`, if the line starts with one.
    let after_number = |l: &str| {
        let l = l.trim_start();
        let digits = l.bytes().take_while(u8::is_ascii_digit).count();
        (digits > 0 && l[digits..].starts_with(['.', ')'])).then(|| l[digits + 1..].to_string())
    };
    let starts_item = |l: &str| {
        after_number(l).is_some_and(|rest| rest.starts_with(' '))
            || l.trim_start().starts_with("- ")
            || l.trim_start().starts_with("* ")
    };
    let numbered = after_number(line).is_some_and(|rest| rest.is_empty() || rest.starts_with(' '));
    numbered && !previous.trim().is_empty() && !starts_item(previous)
}

/// Problems of one quiz file, read line by line: each `[[questions]]` table needs `id = ...` and
/// `context = ...` lines, and no line may start a numbered list by accident.
fn quiz_source_problems(toml: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let lines: Vec<&str> = toml.lines().collect();
    for (i, pair) in lines.windows(2).enumerate() {
        if accidental_list(pair[0], pair[1]) {
            problems.push(format!(
                "line {}: `{}` starts with a number and a full stop after a line of text, which Markdown reads as \
                 a numbered list: rewrap the line",
                i + 2,
                pair[1].trim()
            ));
        }
    }
    let toml = format!("\n{toml}");
    let mut tables = toml.split("\n[[questions]]").skip(1).peekable();
    if tables.peek().is_none() {
        problems.push("no `[[questions]]` table".to_string());
    }
    for (i, table) in tables.enumerate() {
        for key in ["id", "context"] {
            let has_key = table.lines().any(|line| line.split_once('=').is_some_and(|(k, _)| k.trim() == key));
            if !has_key {
                problems.push(format!("question {} has no `{key}`", i + 1));
            }
        }
    }
    problems
}

/// Problems of one built chapter page (`file`, whose HTML is `text`): its quiz placeholder, its
/// questions, its quiz files.
fn quiz_page_problems(html_dir: &Path, file: &Path, text: &str, ids: &mut HashSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let page = parse_html(text);
    let placeholders: Vec<&Tag> = page
        .tags
        .iter()
        .filter(|t| t.name == "div" && t.attr("class").is_some_and(|c| c.split_whitespace().any(|c| c == "quiz-placeholder")))
        .collect();
    if placeholders.len() != 1 {
        problems.push(format!("{} quiz placeholders, expected 1 (was the quiz preprocessor run?)", placeholders.len()));
    }
    if placeholders.is_empty() {
        return problems;
    }
    // The questions are JSON in an attribute, escaped by mdbook-quiz with named and numeric
    // character references (`&quot;`, `&#92;` for a backslash), which `parse_tag` decodes.
    for placeholder in placeholders {
        let Some(json) = placeholder.attr("data-quiz-questions") else {
            problems.push("a quiz placeholder has no data-quiz-questions".to_string());
            continue;
        };
        match serde_json::from_str::<serde_json::Value>(json) {
            Ok(quiz) => problems.extend(quiz_problems(&quiz, ids)),
            Err(e) => problems.push(format!("the quiz's data-quiz-questions is not JSON: {e}")),
        }
    }
    for asset in QUIZ_ASSETS {
        let wanted = normalize(&html_dir.join(asset));
        let linked = page.tags.iter().any(|t| {
            let url = match t.name.as_str() {
                "script" => t.attr("src"),
                "link" if t.attr("rel") == Some("stylesheet") => t.attr("href"),
                _ => None,
            };
            url.is_some_and(|url| !is_external(url) && normalize(&file.parent().unwrap_or(html_dir).join(url)) == wanted)
        });
        if !linked {
            problems.push(format!("does not load mdbook-quiz's {asset} from the book"));
        } else if !wanted.is_file() {
            problems.push(format!("loads {asset}, which is not in the built book"));
        }
    }
    problems
}

/// Problems of one quiz, as the page hands it to mdbook-quiz's script: `{"questions": [...]}`.
/// Question ids must be unique across the book (`ids` collects them from page to page).
fn quiz_problems(quiz: &serde_json::Value, ids: &mut HashSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(questions) = quiz.get("questions").and_then(|q| q.as_array()) else {
        return vec!["the quiz has no list of questions".to_string()];
    };
    if !QUIZ_LENGTH.contains(&questions.len()) {
        problems.push(format!(
            "{} questions, expected {} to {}",
            questions.len(),
            QUIZ_LENGTH.start(),
            QUIZ_LENGTH.end()
        ));
    }
    fn text(value: Option<&serde_json::Value>) -> &str {
        value.and_then(|v| v.as_str()).map(str::trim).unwrap_or("")
    }
    for (i, question) in questions.iter().enumerate() {
        let mut problem = |p: String| problems.push(format!("question {}: {p}", i + 1));
        let id = text(question.get("id"));
        if id.is_empty() {
            problem("no id".into());
        } else if !ids.insert(id.to_string()) {
            problem(format!("id \"{id}\" is used twice in the book"));
        }
        if text(question.get("context")).is_empty() {
            problem("no context explaining the answer".into());
        }
        let kind = text(question.get("type"));
        if !QUIZ_TYPES.contains(&kind) {
            problem(format!("type \"{kind}\" is none of {QUIZ_TYPES:?}"));
        }
        let prompt = question.get("prompt");
        let answer = question.get("answer");
        if kind == "Tracing" {
            if text(prompt.and_then(|p| p.get("program"))).is_empty() {
                problem("no program".into());
            }
            if answer.and_then(|a| a.get("doesCompile")).and_then(|d| d.as_bool()).is_none() {
                problem("no answer.doesCompile".into());
            }
            continue;
        }
        let prompt_text = text(prompt.and_then(|p| p.get("prompt")));
        if prompt_text.is_empty() {
            problem("no prompt".into());
        }
        if let Some(wording) = banned_wording(prompt_text) {
            problem(format!("the prompt says {wording}"));
        }
        let answers: Vec<&str> = match answer.and_then(|a| a.get("answer")) {
            Some(serde_json::Value::Array(all)) => all.iter().map(|a| text(Some(a))).collect(),
            one => vec![text(one)],
        };
        if answers.iter().any(|a| a.is_empty()) {
            problem("an empty answer".into());
        }
        if kind == "MultipleChoice" {
            let distractors: Vec<&str> = prompt
                .and_then(|p| p.get("distractors"))
                .and_then(|d| d.as_array())
                .map(|d| d.iter().map(|d| text(Some(d))).collect())
                .unwrap_or_default();
            if distractors.len() < 2 || distractors.iter().any(|d| d.is_empty()) {
                problem(format!("{} distractors, expected at least 2, none empty", distractors.len()));
            }
            let mut options: Vec<&str> = answers.iter().chain(&distractors).copied().collect();
            for option in &options {
                if let Some(wording) = banned_wording(option) {
                    problem(format!("the option \"{option}\" says {wording}"));
                }
            }
            options.sort_unstable();
            if options.windows(2).any(|pair| pair[0] == pair[1]) {
                problem("two options are the same".into());
            }
        }
    }
    problems
}

/// Decodes HTML character references in one pass: `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;`
/// and numeric ones (`&#92;`, `&#x5C;`). Anything else is kept as it is.
pub(crate) fn decode_character_references(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let reference = rest.find(';').filter(|&end| end <= 10).map(|end| &rest[1..end]);
        let decoded = reference.and_then(|name| match name {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => {
                let number = name.strip_prefix('#')?;
                let code = match number.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                    None => number.parse().ok()?,
                };
                char::from_u32(code)
            }
        });
        match (decoded, reference) {
            (Some(c), Some(name)) => {
                out.push(c);
                rest = &rest[name.len() + 2..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// "All of the above" (and its kin) as an option, or a question asking for the option that is
/// NOT something: the wordings the book's quizzes do not use.
fn banned_wording(text: &str) -> Option<&'static str> {
    let lower = text.to_lowercase();
    if lower.contains("all of the above") || lower.contains("none of the above") || lower.contains("both of the above") {
        return Some("\"... of the above\"");
    }
    let words = |s: &str| s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_string).collect::<Vec<_>>();
    if words(text).iter().any(|w| w == "NOT" || w == "EXCEPT") {
        return Some("NOT or EXCEPT in capitals");
    }
    let asks_for_the_odd_one = lower.split(['.', '?', '!', ':']).any(|sentence| {
        let sentence = words(sentence);
        sentence.first().is_some_and(|w| w == "which")
            && sentence.iter().any(|w| w == "not" || w == "except" || w == "false" || w == "incorrect")
    });
    asks_for_the_odd_one.then_some("\"which ... not\"")
}

#[cfg(test)]
mod quiz_tests {
    use super::tests::{assert_reported, write};
    use super::*;

    fn question(id: &str) -> serde_json::Value {
        serde_json::json!({
            "id": id,
            "type": "MultipleChoice",
            "prompt": {"prompt": "What shape is X in \"the cat\" & <pad>?", "distractors": ["(8, 6)", "(7, 8)"]},
            "answer": {"answer": "(6, 8)"},
            "context": "One row per token."
        })
    }

    fn quiz(prefix: &str, n: usize) -> serde_json::Value {
        serde_json::json!({"questions": (1..=n).map(|i| question(&format!("{prefix}-{i}"))).collect::<Vec<_>>()})
    }

    /// A chapter page as mdbook-quiz leaves it: the placeholder, then its script and stylesheet.
    fn page_with_quiz(quiz: &serde_json::Value) -> String {
        let json = quiz
            .to_string()
            .replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('\\', "&#92;");
        format!(
            r#"<h2 id="check">Check your understanding</h2><div class="quiz-placeholder" data-quiz-name="&quot;ch01&quot;" data-quiz-questions="{json}"></div>

<script type="text/javascript" src="quiz/quiz-embed.iife.js"></script><link rel="stylesheet" type="text/css" href="quiz/style.css">"#
        )
    }

    fn good_book(src: &Path, html: &Path) {
        for (n, name) in [("01", "ch01-embeddings"), ("02", "ch02-qkv")] {
            write(
                src,
                &format!("{name}.md"),
                &format!("# T\n\nassert_eq!(x, 7); // ch{n}-predict\n\n## Check your understanding\n\n{{{{#quiz quizzes/ch{n}.toml}}}}\n"),
            );
            write(
                src,
                &format!("quizzes/ch{n}.toml"),
                &format!("[[questions]]\nid = \"ch{n}-predict\"\ntype = \"ShortAnswer\"\ncontext = \"\"\"\nwhy\n\"\"\"\n"),
            );
            write(html, &format!("{name}.html"), &page_with_quiz(&quiz(&format!("ch{n}"), 4)));
        }
        write(src, "introduction.md", "# Intro, no quiz\n");
        write(html, "quiz/quiz-embed.iife.js", "");
        write(html, "quiz/style.css", "");
    }

    #[test]
    fn a_book_whose_chapters_all_end_with_a_working_quiz_passes() {
        let (src, html) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        good_book(src.path(), html.path());
        assert_eq!(check_quizzes(src.path(), html.path()).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn missing_unexpanded_or_unlinked_quizzes_are_reported() {
        let (src, html) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        good_book(src.path(), html.path());
        // Chapter 3 has no quiz at all; chapter 2's directive is not the last line, and the
        // chapter no longer asserts its prediction; a quiz file no chapter uses; chapter 1's
        // question has no id (so it has no prediction either).
        write(src.path(), "ch03-scaling.md", "# Scaling\n\nno quiz here\n");
        write(html.path(), "ch03-scaling.html", "<p>no quiz here</p>");
        write(src.path(), "ch02-qkv.md", "{{#quiz quizzes/ch02.toml}}\n\nmore text\n");
        write(src.path(), "quizzes/ch09.toml", "[[questions]]\nid = \"z\"\ncontext = \"z\"\n");
        write(src.path(), "quizzes/ch01.toml", "[[questions]]\ntype = \"ShortAnswer\"\ncontext = \"why\"\n");
        // Chapter 1's page lost its script, the book its quiz stylesheet; chapter 2's page was
        // built without the preprocessor.
        let ch01 = page_with_quiz(&quiz("ch01", 4)).replace(r#"<script type="text/javascript" src="quiz/quiz-embed.iife.js"></script>"#, "");
        write(html.path(), "ch01-embeddings.html", &ch01);
        write(html.path(), "ch02-qkv.html", "<p>{{#quiz quizzes/ch02.toml}}</p>");
        std::fs::remove_file(html.path().join("quiz/style.css")).unwrap();
        let problems = check_quizzes(src.path(), html.path()).unwrap().join("\n");
        assert_reported(
            &problems,
            &[
                "ch03-scaling.md: does not end with its quiz, `{{#quiz quizzes/ch03.toml}}`",
                "quizzes/ch03.toml: cannot read it",
                "ch02-qkv.md: does not end with its quiz",
                "quizzes/ch09.toml: no chapter includes it",
                "quizzes/ch01.toml: question 1 has no `id`",
                "ch01-embeddings.html: does not load mdbook-quiz's quiz/quiz-embed.iife.js",
                "ch02-qkv.html: 0 quiz placeholders, expected 1",
                "ch03-scaling.html: 0 quiz placeholders",
                "ch01-embeddings.html: loads quiz/style.css, which is not in the built book",
                "quizzes/ch01.toml: no question `ch01-predict`",
                "quizzes/ch02.toml: the answer of `ch02-predict` is not asserted in the chapter",
            ],
        );
        assert_eq!(problems.lines().count(), 11, "{problems}");
    }

    #[test]
    fn every_rule_for_questions_is_enforced() {
        let mut ids = HashSet::new();
        assert_eq!(quiz_problems(&quiz("a", 4), &mut ids), Vec::<String>::new());
        assert!(quiz_problems(&quiz("a", 4), &mut ids).iter().all(|p| p.contains("is used twice in the book")));
        assert_eq!(quiz_problems(&quiz("b", 3), &mut ids), ["3 questions, expected 4 to 7"]);
        assert_eq!(quiz_problems(&quiz("c", 8), &mut ids), ["8 questions, expected 4 to 7"]);

        let mut bad = quiz("d", 4);
        let questions = bad["questions"].as_array_mut().unwrap();
        questions[0]["context"] = "  ".into();
        questions[1]["prompt"]["prompt"] = "Which of these is not a shape?".into();
        questions[2]["prompt"]["distractors"] = serde_json::json!(["(6, 8)", "All of the above"]);
        questions[3]["type"] = "Essay".into();
        questions[3].as_object_mut().unwrap().remove("id");
        let problems = quiz_problems(&bad, &mut ids).join("\n");
        assert_reported(
            &problems,
            &[
                "question 1: no context explaining the answer",
                "question 2: the prompt says \"which ... not\"",
                "question 3: the option \"All of the above\" says \"... of the above\"",
                "question 3: two options are the same",
                "question 4: no id",
                "question 4: type \"Essay\" is none of",
            ],
        );
        assert_eq!(problems.lines().count(), 6, "{problems}");
    }

    #[test]
    fn character_references_are_decoded_once() {
        assert_eq!(decode_character_references(r#"a&#92;&quot;b&quot; &amp;lt; &#x27;&lt;pad&gt;"#), r#"a\"b" &lt; '<pad>"#);
        assert_eq!(decode_character_references("AT&T & &unknown; &#xZZ; &"), "AT&T & &unknown; &#xZZ; &");
    }

    #[test]
    fn the_wording_rule_allows_not_in_ordinary_questions() {
        assert_eq!(banned_wording("Why does the loop start at −∞ and not at 0?"), None);
        assert_eq!(banned_wording("A mask where `True` = not allowed is passed on. What happens?"), None);
        assert_eq!(banned_wording("Which keys may query i attend to?"), None);
        assert!(banned_wording("Which statement is NOT true?").is_some());
        assert!(banned_wording("Which of the following is false?").is_some());
        assert!(banned_wording("All shapes EXCEPT one are right. Pick it.").is_some());
    }

    #[test]
    fn numbered_lines_after_text_and_missing_predictions_are_reported() {
        assert!(accidental_list("rows of 16 scores are measured for `d_k` from 1 to", "1024. What happens?"));
        assert!(accidental_list("prompt.prompt = \"\"\"", "2) then"));
        assert!(!accidental_list("", "1. A list after a blank line"));
        assert!(!accidental_list("1. first", "2. second"));
        assert!(!accidental_list("- a bullet", "3. then a number"));
        assert!(!accidental_list("some text", "1024 is a number, not an item"));
        assert!(!accidental_list("some text", "3.5 is a number too"));
        let toml = "[[questions]]\nid = \"ch03-a\"\ncontext = \"\"\"\nmeasured from 1 to\n1024. What?\n\"\"\"\n";
        assert_eq!(quiz_source_problems(toml).len(), 1, "{:?}", quiz_source_problems(toml));
        let quiz = "[[questions]]\nid = \"ch03-predict\"\n";
        assert_eq!(predict_problems("03", "id = \"ch03-other\"", "").len(), 1);
        assert!(predict_problems("03", quiz, "assert_eq!(x, 7); // ch03-predict").is_empty());
        assert!(predict_problems("03", quiz, "assert_eq!(x, 7);")[0].contains("not asserted"));
    }

    #[test]
    fn the_real_quizzes_follow_the_rules() {
        // The committed quiz files, read as sources (the built pages are checked by
        // `cargo xtask test`, which builds the book first).
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book");
        let chapters = chapter_pages(&src).unwrap();
        assert!(chapters.len() >= 8, "{chapters:?}");
        assert_eq!(check_quiz_sources(&src, &chapters).unwrap(), Vec::<String>::new());
    }
}
