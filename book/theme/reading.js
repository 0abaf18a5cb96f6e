// The reading line and its folds (additional-js in book.toml; plain JavaScript, nothing loaded).
//
// A chapter folds what proves its teaching (Check blocks, plumbing listings, Rust asides,
// archaeology) into <details class="fold">: closed by default, one click away, and still
// compiled and run by `mdbook test`, because the code inside is ordinary Markdown. HTML's own
// <details> opens and closes without any script; this file adds the three things it cannot do
// alone:
//
// 1. A link to something inside a closed fold (a search result, a cross-reference such as
//    ch06-multihead.html#from-pytorch, a heading in the sidebar) opens the folds around its target
//    before the browser scrolls to it, on page load, on a change of the URL's fragment and on a
//    click on a link to this page.
// 2. Printing opens every fold (paper has no clicks) and closes again afterwards the ones the
//    reader had closed; the print stylesheet does the same in browsers that style
//    ::details-content, and this covers the others.
// 3. The search box splits what a reader types the way the book's search index was built
//    (crates/xtask/src/search.rs): at every character that is not a letter, a digit or `_`,
//    except a `.` between digits (0.506) and an apostrophe between letters (don't), so that
//    `Mask::causal` or `rope.apply` finds the code that calls them. mdBook's own search splits
//    only at white space and `-`.
// 4. Nothing else: with JavaScript off, folds still open on click and the book still reads.
(function () {
  "use strict";

  /** Opens every <details> that contains `element`. */
  function openAround(element) {
    for (let node = element; node; node = node.parentElement) {
      if (node.tagName === "DETAILS" && !node.open) node.open = true;
    }
  }

  /** The element a fragment names on this page, or null. */
  function target(hash) {
    if (!hash || hash.length < 2) return null;
    let id;
    try {
      id = decodeURIComponent(hash.slice(1));
    } catch (e) {
      return null;
    }
    return document.getElementById(id);
  }

  function revealHash() {
    const element = target(window.location.hash);
    if (element && element.closest("details:not([open])")) {
      openAround(element);
      element.scrollIntoView();
    }
  }

  document.addEventListener("DOMContentLoaded", revealHash);
  window.addEventListener("hashchange", revealHash);

  // A click on a link to this page opens the folds around its target before the browser
  // follows it (a second click on the same link changes no fragment, so hashchange alone would
  // miss it).
  document.addEventListener("click", function (event) {
    const link = event.target instanceof Element ? event.target.closest("a[href]") : null;
    if (!link) return;
    const url = new URL(link.href, window.location.href);
    if (url.pathname !== window.location.pathname || !url.hash) return;
    const element = target(url.hash);
    if (element) openAround(element);
  });

  // Printing: every fold open on paper, and the reader's page as it was afterwards.
  let openedForPrint = [];
  window.addEventListener("beforeprint", function () {
    openedForPrint = Array.from(document.querySelectorAll("main details:not([open])"));
    for (const fold of openedForPrint) fold.open = true;
  });
  window.addEventListener("afterprint", function () {
    for (const fold of openedForPrint) fold.open = false;
    openedForPrint = [];
  });

  // The query's words, split as the index's were (see 3 above). elasticlunr drops the empty
  // strings the split leaves.
  if (window.elasticlunr && elasticlunr.tokenizer && elasticlunr.tokenizer.setSeperator) {
    elasticlunr.tokenizer.setSeperator(
      /(?:[^\p{L}\p{N}_.'’]|(?<!\p{N})\.|\.(?!\p{N})|(?<!\p{L})['’]|['’](?!\p{L}))+/u
    );
    // A page opened with ?search=… may have loaded the index and searched before this script
    // ran (the index is loaded by an async script): search again, now split the right way.
    const bar = document.getElementById("mdbook-searchbar");
    if (bar && bar.value.trim() !== "" && window.search && window.search.index) {
      bar.dispatchEvent(new KeyboardEvent("keyup"));
    }
  }
})();
