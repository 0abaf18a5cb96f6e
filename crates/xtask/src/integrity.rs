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
