//! The book integrity check: what mdbook-linkcheck2 does not cover.
//!
//! On the sources (`book/**/*.md`): every `{{#include}}` / `{{#rustdoc_include}}` names a file
//! that exists and, where it names an anchor, a file that has `ANCHOR: name` and
//! `ANCHOR_END: name` (mdBook only warns about a missing anchor and includes nothing).
//!
//! On the built HTML (`target/book/html`): every image exists and has alt text, every internal
//! link and `#anchor` resolves, no `{{#...}}` directive and no raw `$$` math is left outside
//! code, nothing is loaded from the network (no external `src` on scripts, images, frames; no
//! external stylesheet or `url(http...)` in CSS), and the Introduction holds rendered MathML.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use crate::run::Result;

/// Runs both halves and reports every problem at once.
pub fn check_book(root: &Path) -> Result<()> {
    let html_dir = root.join("target/book/html");
    if !html_dir.join("index.html").is_file() {
        return Err(format!("no built book in {} (run `mdbook build` first)", html_dir.display()).into());
    }
    let mut problems = check_sources(&root.join("book"))?;
    problems.extend(check_html(&html_dir)?);
    problems.extend(check_quizzes(&root.join("book"), &html_dir)?);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        return Err(format!("book integrity check found {} problem(s):\n{}", problems.len(), list.join("\n")).into());
    }
    println!("book integrity check: sources and {} passed", html_dir.display());
    Ok(())
}

/// Every file under `dir` (recursively) whose extension is `ext`, sorted.
fn files_with_ext(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
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

fn read(path: &Path) -> Result<String> {
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
    let spec = directive.split_once(' ').map(|(_, s)| s.trim()).unwrap_or_default();
    let (file, selector) = match spec.split_once(':') {
        Some((file, selector)) => (file, Some(selector)),
        None => (spec, None),
    };
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let Some(selector) = selector else { return Ok(()) };
    let is_line_range = selector.split(':').all(|part| part.is_empty() || part.bytes().all(|b| b.is_ascii_digit()));
    if is_line_range {
        return Ok(());
    }
    let has_marker = |marker: &str| {
        text.lines().any(|line| {
            line.split_once(marker).is_some_and(|(_, name)| name.trim() == selector)
        })
    };
    match (has_marker("ANCHOR:"), has_marker("ANCHOR_END:")) {
        (true, true) => Ok(()),
        (false, _) => Err(format!("{} has no `ANCHOR: {selector}`", path.display())),
        (true, false) => Err(format!("{} has no `ANCHOR_END: {selector}`", path.display())),
    }
}

// ---------------------------------------------------------------------------------------------
// Built HTML

/// One start tag: its name and attributes (values with `&amp;` and friends decoded).
#[derive(Debug)]
struct Tag {
    name: String,
    attrs: Vec<(String, String)>,
}

impl Tag {
    fn attr(&self, name: &str) -> Option<&str> {
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

/// A small, forgiving HTML scanner: enough for mdBook's well-formed output.
fn parse_html(html: &str) -> Page {
    let mut tags = Vec::new();
    let mut prose = String::new();
    let mut rest = html;
    let mut code_depth = 0usize;
    let mut math_depth = 0usize;
    let mut markdown_in_math = Vec::new();
    while let Some(lt) = rest.find('<') {
        if code_depth == 0 {
            prose.push_str(&rest[..lt]);
        }
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some(gt) = tag_end(rest) else { break };
        let raw = &rest[1..gt];
        rest = &rest[gt + 1..];
        if let Some(closing) = raw.strip_prefix('/') {
            let name = closing.trim().to_ascii_lowercase();
            if (name == "code" || name == "pre") && code_depth > 0 {
                code_depth -= 1;
            }
            if name == "math" && math_depth > 0 {
                math_depth -= 1;
            }
            continue;
        }
        let tag = parse_tag(raw);
        if math_depth > 0 && MARKDOWN_TAGS.contains(&tag.name.as_str()) {
            markdown_in_math.push(tag.name.clone());
        }
        match tag.name.as_str() {
            "script" | "style" => {
                let close = format!("</{}", tag.name);
                rest = rest.find(&close).map_or("", |i| &rest[i..]);
            }
            "code" | "pre" => code_depth += 1,
            "math" => math_depth += 1,
            _ => {}
        }
        tags.push(tag);
    }
    if code_depth == 0 {
        prose.push_str(rest);
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
            value = decode_entities(v);
            rest = remaining.trim_start();
        }
        if !key.is_empty() {
            attrs.push((key, value));
        }
    }
    Tag { name, attrs }
}

fn decode_entities(s: &str) -> String {
    s.replace("&quot;", "\"").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
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

    fn write(dir: &Path, name: &str, text: &str) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
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
                r#"<link rel="stylesheet" href="css/extra.css"><link rel="stylesheet" href="css/fonts.css">"#,
            ),
        );
        write(dir.path(), "introduction.html", r#"<h2 id="notation">N</h2>"#);
        write(dir.path(), "css/extra.css", "@import url(https://fonts.example/x.css);");
        write(dir.path(), "css/fonts.css", "@font-face { src: url('../fonts/missing.woff2'); } a { b: url(https://x.example/y.png) }");
        let problems = check_html(dir.path()).unwrap().join("\n");
        for expected in [
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
        ] {
            assert!(problems.contains(expected), "expected {expected:?} in:\n{problems}");
        }
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
// rules (4 to 6 questions, each with an `id` and an explanation; no "all of the above", no
// "which is NOT").

/// How many questions a chapter's quiz has.
const QUIZ_LENGTH: std::ops::RangeInclusive<usize> = 4..=6;

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
            Ok(toml) => problems.extend(quiz_source_problems(&toml).into_iter().map(|p| format!("{quiz}: {p}"))),
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

/// Problems of one quiz file, read line by line: each `[[questions]]` table needs `id = ...` and
/// `context = ...` lines.
fn quiz_source_problems(toml: &str) -> Vec<String> {
    let mut problems = Vec::new();
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
    // character references (`&quot;`, `&#92;` for a backslash): read them raw, decode them once.
    let raw = delimited(text, "data-quiz-questions=\"", "\"");
    if raw.len() != placeholders.len() {
        problems.push("a quiz placeholder has no data-quiz-questions".to_string());
    }
    for json in raw {
        match serde_json::from_str::<serde_json::Value>(&decode_character_references(json)) {
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
fn decode_character_references(s: &str) -> String {
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
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

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
            write(src, &format!("{name}.md"), &format!("# T\n\ntext\n\n## Check your understanding\n\n{{{{#quiz quizzes/ch{n}.toml}}}}\n"));
            write(src, &format!("quizzes/ch{n}.toml"), "[[questions]]\nid = \"a\"\ntype = \"ShortAnswer\"\ncontext = \"\"\"\nwhy\n\"\"\"\n");
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
        // Chapter 3 has no quiz at all; chapter 2's directive is not the last line; a quiz file
        // no chapter uses; chapter 1's question has no id.
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
        for expected in [
            "ch03-scaling.md: does not end with its quiz, `{{#quiz quizzes/ch03.toml}}`",
            "quizzes/ch03.toml: cannot read it",
            "ch02-qkv.md: does not end with its quiz",
            "quizzes/ch09.toml: no chapter includes it",
            "quizzes/ch01.toml: question 1 has no `id`",
            "ch01-embeddings.html: does not load mdbook-quiz's quiz/quiz-embed.iife.js",
            "ch02-qkv.html: 0 quiz placeholders, expected 1",
            "ch03-scaling.html: 0 quiz placeholders",
            "ch01-embeddings.html: loads quiz/style.css, which is not in the built book",
        ] {
            assert!(problems.contains(expected), "expected {expected:?} in:\n{problems}");
        }
        assert_eq!(problems.lines().count(), 9, "{problems}");
    }

    #[test]
    fn every_rule_for_questions_is_enforced() {
        let mut ids = HashSet::new();
        assert_eq!(quiz_problems(&quiz("a", 4), &mut ids), Vec::<String>::new());
        assert!(quiz_problems(&quiz("a", 4), &mut ids).iter().all(|p| p.contains("is used twice in the book")));
        assert_eq!(quiz_problems(&quiz("b", 3), &mut ids), ["3 questions, expected 4 to 6"]);
        assert_eq!(quiz_problems(&quiz("c", 7), &mut ids), ["7 questions, expected 4 to 6"]);

        let mut bad = quiz("d", 4);
        let questions = bad["questions"].as_array_mut().unwrap();
        questions[0]["context"] = "  ".into();
        questions[1]["prompt"]["prompt"] = "Which of these is not a shape?".into();
        questions[2]["prompt"]["distractors"] = serde_json::json!(["(6, 8)", "All of the above"]);
        questions[3]["type"] = "Essay".into();
        questions[3].as_object_mut().unwrap().remove("id");
        let problems = quiz_problems(&bad, &mut ids).join("\n");
        for expected in [
            "question 1: no context explaining the answer",
            "question 2: the prompt says \"which ... not\"",
            "question 3: the option \"All of the above\" says \"... of the above\"",
            "question 3: two options are the same",
            "question 4: no id",
            "question 4: type \"Essay\" is none of",
        ] {
            assert!(problems.contains(expected), "expected {expected:?} in:\n{problems}");
        }
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
    fn the_real_quizzes_follow_the_rules() {
        // The committed quiz files, read as sources (the built pages are checked by
        // `cargo xtask test`, which builds the book first).
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book");
        let chapters = chapter_pages(&src).unwrap();
        assert!(chapters.len() >= 8, "{chapters:?}");
        assert_eq!(check_quiz_sources(&src, &chapters).unwrap(), Vec::<String>::new());
    }
}
