//! The reading line: what a reader meets in a chapter when every fold is closed.
//!
//! A chapter teaches in its reading line and folds what proves it (Check blocks, plumbing
//! listings, Rust asides, archaeology) into `<details class="fold">`, closed by default and
//! still run by `mdbook test`. On the built HTML of every chapter this module
//!
//! - counts the words of the reading line: the text of `<main>` outside every `<details>`,
//!   code included, mdBook's hidden lines (`<span class="boring">`) and the TeX source that
//!   MathML carries (`<annotation>`) excluded; a word is a run of characters between spaces
//!   that holds a letter or a digit, and block elements (paragraphs, cells, list items, lines
//!   of code) end a word, inline ones (`<em>`, `<code>`, MathML's pieces) do not;
//! - counts the words of the fast path: the reading line's words under headings marked
//!   `{.fast}` in the source (`<h2 class="fast">`: the whole section; `<h3 class="fast">`: that
//!   subsection), the Introduction's "about two and a half hours";
//! - and reports a page that breaks the structure: a fold that is open by default, a code
//!   block under `## Check` outside a fold, a Markdown fence left as text (a code block put
//!   right after `<summary>` with no blank line is not code to Markdown, nor to `mdbook test`),
//!   no `## Recap`, or a recap longer than one screen.

use std::path::Path;

use crate::integrity::{Token, decode_character_references, files_with_ext, read, tokens};
use crate::run::Result;

/// Words a reader reads in a minute of this book's reading line: about half a careful reading
/// of plain prose (some 200 words a minute), because of the formulas and the code, which are
/// counted as words (the fast path's "about two and a half hours" is measured with it).
pub(crate) const WORDS_PER_MINUTE: usize = 100;

/// The Introduction promises a fast path of about two and a half hours: it must take between
/// these many minutes at [`WORDS_PER_MINUTE`].
pub(crate) const FAST_PATH_MINUTES: (usize, usize) = (120, 180);

/// Words of chapters 1-7's reading line before the reader's edit (issue 25; the learner's own
/// count, which also counted the hidden lines and every symbol, gave about 27 700): the edit
/// brought them to half or less, and the check keeps them there.
pub(crate) const BEFORE_CH01_07: usize = 21_414;

/// A recap is one screen: at most this many words, and four to six bullets.
pub(crate) const RECAP_MAX_WORDS: usize = 260;

/// What [`measure`] found on one page.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Reading {
    /// Words of the reading line (everything outside folds).
    pub(crate) words: usize,
    /// Words of the reading line under headings marked `{.fast}`.
    pub(crate) fast: usize,
    /// Words inside folds.
    pub(crate) folded: usize,
    /// Words of the `## Recap` section, if there is one.
    pub(crate) recap: Option<usize>,
    /// Top-level bullets of the recap.
    pub(crate) recap_bullets: usize,
    /// Problems with the page's structure.
    pub(crate) problems: Vec<String>,
}

/// Tags that do not end a word (text on either side of them runs together).
const INLINE: [&str; 18] = [
    "a", "abbr", "b", "code", "del", "em", "i", "ins", "kbd", "mark", "q", "s", "small", "span", "strong", "sub", "sup", "u",
];

/// Where a piece of text goes.
#[derive(Default)]
struct Buckets {
    reading: String,
    fast: String,
    folded: String,
    recap: Option<String>,
}

impl Buckets {
    fn push(&mut self, text: &str, folded: bool, fast: bool, recap: bool) {
        if folded {
            self.folded.push_str(text);
            return;
        }
        self.reading.push_str(text);
        if fast {
            self.fast.push_str(text);
        }
        if recap {
            self.recap.get_or_insert_with(String::new).push_str(text);
        }
    }
}

/// Counts the words of `text` (see the module's documentation).
pub(crate) fn count_words(text: &str) -> usize {
    text.split_whitespace().filter(|w| w.chars().any(char::is_alphanumeric)).count()
}

/// Measures one built chapter page (see the module's documentation).
pub(crate) fn measure(html: &str) -> Reading {
    let mut reading = Reading::default();
    let mut buckets = Buckets::default();
    let (mut in_main, mut details, mut boring, mut math, mut code) = (false, 0usize, 0usize, 0usize, 0usize);
    let (mut fast_h2, mut fast_h3, mut in_check, mut in_recap) = (false, false, false, false);
    let (mut recap_list_depth, mut list_depth) = (None::<usize>, 0usize);
    let mut skipped = 0usize;
    for token in tokens(html) {
        let (name, tag) = match token {
            Token::Text(raw) => {
                if in_main && boring == 0 && skipped == 0 {
                    let text = decode_character_references(&raw.replace("&nbsp;", " "));
                    if code == 0 && text.contains("```") {
                        reading.problems.push(
                            "a Markdown fence (```) is left as text: a code block needs a blank line after \
                             <summary> and before </details>"
                                .into(),
                        );
                    }
                    buckets.push(&text, details > 0, fast_h2 || fast_h3, in_recap);
                }
                continue;
            }
            Token::Close(name) => (name, None),
            Token::Open(tag) => (tag.name.clone(), Some(tag)),
        };
        let block = math == 0 && !INLINE.contains(&name.as_str());
        if block && in_main && boring == 0 && skipped == 0 {
            buckets.push(" ", details > 0, fast_h2 || fast_h3, in_recap);
        }
        let Some(tag) = tag else {
            match name.as_str() {
                "main" => in_main = false,
                "details" => details = details.saturating_sub(1),
                "span" if boring > 0 => boring -= 1,
                "math" => math = math.saturating_sub(1),
                "pre" | "code" => code = code.saturating_sub(1),
                "ul" | "ol" => list_depth = list_depth.saturating_sub(1),
                "annotation" | "title" => skipped = skipped.saturating_sub(1),
                _ => {}
            }
            continue;
        };
        let class_has = |c: &str| tag.attr("class").is_some_and(|classes| classes.split_whitespace().any(|x| x == c));
        match name.as_str() {
            "main" => in_main = true,
            "annotation" | "title" => skipped += 1,
            "details" => {
                details += 1;
                if tag.attr("open").is_some() {
                    reading.problems.push("a fold is open by default (<details open>): folds start closed".into());
                }
            }
            "span" if boring > 0 => boring += 1,
            "span" if class_has("boring") => boring = 1,
            "math" => math += 1,
            "code" => code += 1,
            "ul" | "ol" => {
                list_depth += 1;
                if in_recap && recap_list_depth.is_none() {
                    recap_list_depth = Some(list_depth);
                }
            }
            "li" if in_recap && details == 0 && recap_list_depth == Some(list_depth) => reading.recap_bullets += 1,
            "h1" | "h2" => {
                fast_h2 = name == "h2" && class_has("fast");
                fast_h3 = false;
                in_check = tag.attr("id") == Some("check");
                in_recap = tag.attr("id") == Some("recap");
                if in_recap {
                    buckets.recap = Some(String::new());
                }
            }
            "h3" => fast_h3 = class_has("fast"),
            "pre" => {
                code += 1;
                if in_check && details == 0 {
                    reading.problems.push("a code block under `## Check` is outside a fold: Check blocks are folded".into());
                }
            }
            _ => {}
        }
    }
    reading.words = count_words(&buckets.reading);
    reading.fast = count_words(&buckets.fast);
    reading.folded = count_words(&buckets.folded);
    reading.recap = buckets.recap.as_deref().map(count_words);
    reading
}

/// The chapter pages of the built book (`chNN-*.html`), sorted.
fn chapter_files(html_dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    Ok(files_with_ext(html_dir, "html")?
        .into_iter()
        .filter(|f| {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let bytes = name.as_bytes();
            f.parent() == Some(html_dir)
                && bytes.len() > 5
                && bytes.starts_with(b"ch")
                && bytes[2..4].iter().all(u8::is_ascii_digit)
                && bytes[4] == b'-'
        })
        .collect())
}

/// Measures every chapter and the Introduction of the built book under `html_dir`, prints the
/// table, and returns the problems: each page's own, a recap that is missing or longer than a
/// screen, chapters 1-7 above half of [`BEFORE_CH01_07`], and a fast path outside
/// [`FAST_PATH_MINUTES`].
pub(crate) fn check_reading_line(html_dir: &Path) -> Result<Vec<String>> {
    let intro_html = read(&html_dir.join("introduction.html"))?;
    let intro = measure(&intro_html);
    let mut problems: Vec<String> = intro.problems.iter().map(|p| format!("introduction.html: {p}")).collect();
    let mut rows = vec![("introduction.html".to_string(), intro)];
    for file in chapter_files(html_dir)? {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let reading = measure(&read(&file)?);
        for problem in &reading.problems {
            problems.push(format!("{name}: {problem}"));
        }
        match reading.recap {
            None => problems.push(format!("{name}: no `## Recap` (the formula, the listing, four to six bullets)")),
            Some(words) if words > RECAP_MAX_WORDS => {
                problems.push(format!("{name}: the recap has {words} words (one screen: at most {RECAP_MAX_WORDS})"))
            }
            Some(_) if !(4..=6).contains(&reading.recap_bullets) => problems.push(format!(
                "{name}: the recap has {} bullets (four to six)",
                reading.recap_bullets
            )),
            Some(_) => {}
        }
        rows.push((name, reading));
    }
    println!("reading line (words outside folds, code counted; fast path; folded):");
    let mut first_seven = 0;
    let mut fast = 0;
    for (name, r) in &rows {
        println!("  {name:<28} {:>6} {:>6} {:>6}", r.words, r.fast, r.folded);
        if (1..=7).any(|n| name.starts_with(&format!("ch{n:02}-"))) {
            first_seven += r.words;
        }
        fast += r.fast;
    }
    let minutes = fast / WORDS_PER_MINUTE;
    println!(
        "  chapters 1-7: {first_seven} words in the reading line; fast path: {fast} words, about {minutes} minutes \
         at {WORDS_PER_MINUTE} words a minute"
    );
    if 2 * first_seven > BEFORE_CH01_07 {
        problems.push(format!(
            "chapters 1-7 show {first_seven} words in their reading line, more than half of the {BEFORE_CH01_07} \
             they showed before the reader's edit"
        ));
    }
    let rate = format!("{WORDS_PER_MINUTE} words a minute");
    if !intro_html.contains(&rate) {
        problems.push(format!("introduction.html: the fast path's pace is not given as \"{rate}\", the pace it is timed at"));
    }
    let (low, high) = FAST_PATH_MINUTES;
    if !(low..=high).contains(&minutes) {
        problems.push(format!(
            "the fast path reads in about {minutes} minutes ({fast} words at {WORDS_PER_MINUTE} a minute), but the \
             Introduction promises about two and a half hours ({low} to {high} minutes)"
        ));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<nav>Sidebar words are not counted</nav><main>
<h1 id="t">A title</h1>
<h2 id="the-question" class="fast">The question</h2>
<p>Why <em>divide</em> the scores?</p>
<p>Shape <math><semantics><mrow><mi>Q</mi><msup><mi>K</mi><mo>⊤</mo></msup></mrow><annotation encoding="application/x-tex">QK^\top</annotation></semantics></math> is fine&nbsp;here.</p>
<pre><code class="language-rust"><span class="boring">extern crate attention;
</span>let x = 1; // one
</code></pre>
<h2 id="more">More</h2>
<p>Plain words, three more.</p>
<details class="fold"><summary><b>Check</b> folded</summary>
<pre><code>assert!(true);</code></pre>
</details>
<h2 id="recap">Recap</h2>
<ul><li>one</li><li>two <ul><li>nested</li></ul></li><li>three</li><li>four</li></ul>
</main><footer>Footer</footer>"#;

    #[test]
    fn words_are_counted_as_the_reader_sees_them() {
        let r = measure(PAGE);
        // "A title" 2, "The question" 2, "Why divide the scores?" 4, "Shape QK⊤ is fine here." 5
        // (the formula is one word, its TeX source none), the code without its hidden line:
        // "let x = 1; // one" 4 ("=" and "//" hold no letter or digit), "More" 1, "Plain words,
        // three more." 4, "Recap" 1, "one two nested three four" 5.
        assert_eq!(r.words, 2 + 2 + 4 + 5 + 4 + 1 + 4 + 1 + 5);
        assert_eq!(r.fast, 2 + 4 + 5 + 4, "only the section under the marked heading");
        assert_eq!(r.folded, 2 + 1, "Check folded (summary), assert!(true);");
        assert_eq!(r.recap, Some(6));
        assert_eq!(r.recap_bullets, 4, "nested bullets are not the recap's");
        assert!(r.problems.is_empty(), "{:?}", r.problems);
    }

    #[test]
    fn structure_problems_are_reported() {
        let open = measure("<main><details class=\"fold\" open><summary>x</summary><p>y</p></details></main>");
        assert!(open.problems.iter().any(|p| p.contains("open by default")), "{:?}", open.problems);
        let check = measure("<main><h2 id=\"check\">Check</h2><pre><code>assert!(x);</code></pre></main>");
        assert!(check.problems.iter().any(|p| p.contains("outside a fold")), "{:?}", check.problems);
        let folded = measure("<main><h2 id=\"check\">Check</h2><details><summary>s</summary><pre>a</pre></details></main>");
        assert!(folded.problems.is_empty(), "{:?}", folded.problems);
        let fence = measure("<main><details><summary>s</summary>\n```rust\nlet x = 1;\n```\n</details></main>");
        assert!(fence.problems.iter().any(|p| p.contains("fence")), "{:?}", fence.problems);
        let quoted = measure("<main><pre><code>```rust\nlet x = 1;\n```</code></pre></main>");
        assert!(quoted.problems.is_empty(), "a fence shown inside code is fine: {:?}", quoted.problems);
    }

    #[test]
    fn words_need_a_letter_or_a_digit() {
        assert_eq!(count_words("a = b + 1 — → ⊤ x2"), 4);
        assert_eq!(count_words("  "), 0);
    }
}
