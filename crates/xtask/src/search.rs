//! The book's search index, rebuilt smaller, and the check on its size.
//!
//! mdBook 0.5.4 writes `searchindex-HASH.js`: every section's title, text and breadcrumbs (the
//! document store, which the search page quotes), and an elasticlunr index of their words
//! for each field. It reached 9.2 MB, near the 10 MB at which mdBook warns (and a warning
//! fails the build), for two reasons:
//!
//! - its tokenizer splits only at white space and `-`, so every line of code gives words such
//!   as `0).unwrap().dot(&rope.apply(k`: thousands of long words nobody types, each a chain of
//!   nodes in the index's tree, and a reader who searches for `rope` does not find that line;
//! - elasticlunr-rs 3.0.2 (`Index::add_doc`) counts a document's words over all its fields
//!   together, so the index of the last field, the breadcrumbs, holds every word of every
//!   section a second time.
//!
//! [`shrink`] rebuilds the index from mdBook's own document store with the same library and
//! the same English pipeline (trimmer, stop words, stemmer), but with a tokenizer that splits
//! code at its punctuation (keeping `d_k`, `0.506` and `don't` whole), and with the fields in
//! an order where that counting is harmless (title, then breadcrumbs, which hold the title,
//! then body). The document store, the URLs and the search options are kept as they are, and
//! so is the file's name (the pages load it by that name). [`check`] prints the size and fails
//! above [`MAX_BYTES`].

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::run::Result;

/// The most the rebuilt search index, the one readers load, may weigh, in bytes: half of the
/// size at which mdBook warns. The book is built at about 3.6 MB (from mdBook's 9.2 MB), so it
/// can grow by a third before this check asks for more. mdBook's warning about its own index
/// is dropped by `build_book` (`search_size_warning`), since that index is replaced at once.
pub const MAX_BYTES: u64 = 5_000_000;

const PREFIX: &str = "window.search = Object.assign(window.search, JSON.parse('";
const SUFFIX: &str = "'));";

/// Words longer than this are not indexed (mdBook's own limit).
const MAX_WORD: usize = 80;

/// The one `searchindex-*.js` in `html_dir`.
pub fn index_file(html_dir: &Path) -> Result<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(html_dir).map_err(|e| format!("cannot read {}: {e}", html_dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("searchindex") && name.ends_with(".js") {
            found.push(path);
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!("no searchindex*.js in {} (is search enabled in book.toml?)", html_dir.display()).into()),
        many => Err(format!("{} searchindex*.js files in {}: expected one", many.len(), html_dir.display()).into()),
    }
}

/// Splits text into the words to index: runs of letters, digits and `_`, where a `.` between
/// two digits (`0.506`) and an apostrophe between two letters (`don't`) stay inside the word;
/// everything else separates words. Lower case, and no word over [`MAX_WORD`] bytes.
pub fn tokenize(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut words = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|k| chars[k]);
        let next = chars.get(i + 1).copied();
        let joins = match c {
            '.' => prev.is_some_and(|p| p.is_ascii_digit()) && next.is_some_and(|n| n.is_ascii_digit()),
            '\'' | '’' => prev.is_some_and(char::is_alphabetic) && next.is_some_and(char::is_alphabetic),
            _ => false,
        };
        if word(c) || (joins && !current.is_empty()) {
            current.extend(c.to_lowercase());
        } else if !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words.retain(|w| w.len() <= MAX_WORD);
    words
}

/// Reads the JSON inside a `searchindex.js` (mdBook escapes `\` and `'` in it).
fn read_index(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let inner = text
        .strip_prefix(PREFIX)
        .and_then(|t| t.trim_end().strip_suffix(SUFFIX))
        .ok_or_else(|| format!("{}: not the searchindex.js mdBook 0.5 writes", path.display()))?;
    let mut json = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | '\'')) => json.push(e),
                other => return Err(format!("{}: unexpected escape `\\{}`", path.display(), other.unwrap_or(' ')).into()),
            }
        } else {
            json.push(c);
        }
    }
    serde_json::from_str(&json).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// Writes `value` back in mdBook's form, through a temporary file and a rename.
fn write_index(path: &Path, value: &Value) -> Result<()> {
    let json = serde_json::to_string(value)?;
    let text = format!("{PREFIX}{}{SUFFIX}", json.replace('\\', "\\\\").replace('\'', "\\'"));
    let tmp = path.with_extension("js.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()).into())
}

/// Rebuilds the search index in `html_dir` (see the module's documentation) and returns its
/// size before and after, in bytes. Running it twice gives the same file.
pub fn shrink(html_dir: &Path) -> Result<(u64, u64)> {
    let path = index_file(html_dir)?;
    let before = std::fs::metadata(&path)?.len();
    let mut value = read_index(&path)?;
    let docs = value
        .pointer("/index/documentStore/docs")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{}: no index.documentStore.docs", path.display()))?;
    let mut refs: Vec<(usize, &str)> = Vec::new();
    for key in docs.keys() {
        let n = key.parse().map_err(|_| format!("{}: document `{key}` is not a number", path.display()))?;
        refs.push((n, key));
    }
    refs.sort();
    let mut index = elasticlunr::IndexBuilder::new()
        .add_field_with_tokenizer("title", Box::new(tokenize))
        .add_field_with_tokenizer("breadcrumbs", Box::new(tokenize))
        .add_field_with_tokenizer("body", Box::new(tokenize))
        .build();
    for (_, key) in refs {
        let field = |name: &str| docs[key].get(name).and_then(Value::as_str).unwrap_or_default().to_string();
        index.add_doc(key, [field("title"), field("breadcrumbs"), field("body")]);
    }
    value["index"] = serde_json::to_value(&index)?;
    write_index(&path, &value)?;
    Ok((before, std::fs::metadata(&path)?.len()))
}

/// Prints the search index's size and returns a problem if it is over [`MAX_BYTES`].
pub fn check(html_dir: &Path) -> Result<Vec<String>> {
    let path = index_file(html_dir)?;
    let size = std::fs::metadata(&path)?.len();
    println!("search index: {} ({:.2} MB; at most {:.0} MB)", path.display(), size as f64 / 1e6, MAX_BYTES as f64 / 1e6);
    Ok(if size > MAX_BYTES {
        vec![format!(
            "the search index {} is {size} bytes, over the limit of {MAX_BYTES}: after a plain \
             `mdbook build`, run `cargo xtask search-index` (`cargo xtask book` and `test` do it); \
             if it is still over, see what the pages hold that nobody searches for",
            path.display()
        )]
    } else {
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_splits_at_punctuation_and_numbers_stay_whole() {
        assert_eq!(tokenize("0).unwrap().dot(&rope.apply(k"), ["0", "unwrap", "dot", "rope", "apply", "k"]);
        assert_eq!(tokenize("d_k = 0.506, Don't; x.y 3."), ["d_k", "0.506", "don't", "x", "y", "3"]);
        assert_eq!(tokenize("Q·Kᵀ / √d_k"), ["q", "kᵀ", "d_k"]);
        assert_eq!(tokenize(&"a".repeat(81)), Vec::<String>::new());
    }

    /// A tiny index as mdBook writes it: two sections, one with code, and an escaped quote.
    fn fixture(dir: &Path) -> PathBuf {
        // mdBook 0.5.4's tokenizer: white space and `-` separate words.
        let mdbook = |text: &str| -> Vec<String> {
            text.split(|c: char| c.is_whitespace() || c == '-').filter(|s| !s.is_empty()).map(str::to_lowercase).collect()
        };
        let mut index = elasticlunr::IndexBuilder::new()
            .add_field_with_tokenizer("title", Box::new(mdbook))
            .add_field_with_tokenizer("body", Box::new(mdbook))
            .add_field_with_tokenizer("breadcrumbs", Box::new(mdbook))
            .build();
        index.add_doc("0", ["Masking", "let w = sdpa(&q, &k, &v, Some(&mask))?; the model's mask", "Ch » Masking"]);
        index.add_doc("1", ["Softmax", "weights 0.506 and 0.186", "Ch » Softmax"]);
        let value = serde_json::json!({
            "results_options": {"limit_results": 30, "teaser_word_count": 30},
            "doc_urls": ["a.html#masking", "a.html#softmax"],
            "index": serde_json::to_value(&index).unwrap(),
        });
        let path = dir.join("searchindex-0123.js");
        write_index(&path, &value).unwrap();
        path
    }

    fn words(value: &Value, field: &str) -> Vec<String> {
        fn walk(node: &Value, prefix: &str, out: &mut Vec<String>) {
            for (k, v) in node.as_object().unwrap() {
                if k == "docs" || k == "df" {
                    continue;
                }
                let word = format!("{prefix}{k}");
                if v["docs"].as_object().is_some_and(|d| !d.is_empty()) {
                    out.push(word.clone());
                }
                walk(v, &word, out);
            }
        }
        let mut out = Vec::new();
        walk(&value["index"]["index"][field]["root"], "", &mut out);
        out.sort();
        out
    }

    #[test]
    fn the_rebuilt_index_finds_code_words_and_keeps_the_documents() {
        let dir = tempfile::tempdir().unwrap();
        let path = fixture(dir.path());
        let before = read_index(&path).unwrap();
        assert!(words(&before, "body").contains(&"sdpa(&q".to_string()), "mdBook's tokenizer keeps code whole");
        assert!(words(&before, "breadcrumbs").contains(&"0.506".to_string()), "elasticlunr-rs mixes the fields");
        shrink(dir.path()).unwrap();
        let after = read_index(&path).unwrap();
        let body = words(&after, "body");
        for w in ["sdpa", "mask", "0.506", "model'"] {
            assert!(body.iter().any(|b| b.starts_with(w)), "{w} in {body:?}");
        }
        assert!(!body.iter().any(|b| b.contains('(')), "no code punctuation: {body:?}");
        let crumbs = words(&after, "breadcrumbs");
        assert!(!crumbs.contains(&"0.506".to_string()), "the breadcrumbs hold only themselves: {crumbs:?}");
        assert_eq!(after["index"]["documentStore"]["docs"], before["index"]["documentStore"]["docs"]);
        assert_eq!(after["doc_urls"], before["doc_urls"]);
        let once = std::fs::read(&path).unwrap();
        shrink(dir.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), once, "a second run changes nothing");
    }

    #[test]
    fn the_size_check_fails_above_the_limit_and_a_missing_index_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(index_file(dir.path()).unwrap_err().to_string().contains("no searchindex"));
        let path = fixture(dir.path());
        assert!(check(dir.path()).unwrap().is_empty());
        let big = format!("{PREFIX}{}{SUFFIX}", " ".repeat(MAX_BYTES as usize));
        std::fs::write(&path, big).unwrap();
        let problems = check(dir.path()).unwrap();
        assert!(problems.len() == 1 && problems[0].contains("over the limit of 5000000"), "{problems:?}");
    }
}
