// Optional browser check of the built book: every page opened in a real Chromium, served from
// 127.0.0.1. Never needed by `cargo xtask test` or CI (they have no browser); run it by hand:
//
//   cargo xtask book --no-serve                   # the book in target/book/html
//   npm ci --prefix tools/browser                 # playwright-core, to drive Chromium
//   node tools/browser/check_book.mjs             # Debian: apt-get install chromium
//
// It fails (exit code 1) if any page logs anything to the console (an error, a warning or any
// other message) or throws an uncaught exception, if any request leaves the machine (each one is
// recorded and aborted), if a page's folds (<details class="fold">) do not start closed, open on
// a click, open for a link to something inside them, read in every theme and print open, or if a
// chapter's quiz does not work: on every chapter page the quiz must render with its number of questions, take an answer
// to every question (the first one deliberately wrong, the others right), score them as expected,
// and show an explanation ("Context") under every question once the answers are revealed; or if
// the search page finds nothing for a word of the prose, a name from the code or a number. It
// writes screenshots of chapter 1's quiz (a question, then the review) into the output folder.
//
// Options: --book DIR (default target/book/html), --chromium PATH (default $CHROMIUM or
// /usr/bin/chromium), --out DIR (default target/browser-check).

import { mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { bookDir, chromiumPath, launchOffline, outDir, serve } from "./common.mjs";

// ---------------------------------------------------------------------------------------------
// Answering a quiz the way a reader does: click, type, submit.

async function answerQuestion(page, question, right) {
  const form = page.locator(".mdbook-quiz form.response");
  if (question.type === "MultipleChoice") {
    const answer = question.answer.answer;
    const value = right ? answer : question.prompt.distractors[0];
    const radios = form.locator("input[type=radio]");
    const count = await radios.count();
    for (let i = 0; i < count; i++) {
      if ((await radios.nth(i).getAttribute("value")) === value) {
        await radios.nth(i).check();
        break;
      }
    }
  } else if (question.type === "ShortAnswer") {
    await form.locator("input[type=text]").fill(right ? question.answer.answer : "no idea");
  } else if (question.type === "Tracing") {
    const compiles = right ? question.answer.doesCompile : !question.answer.doesCompile;
    await form.locator(`input[type=radio][value="${compiles}"]`).check();
    if (compiles) {
      await form.locator("textarea").fill(right ? question.answer.stdout : "no idea");
    }
  } else {
    throw new Error(`unknown question type ${question.type}`);
  }
  await form.locator("input[type=submit]").click();
}

/** Runs one chapter's quiz through; returns a list of problems (empty when it works). */
async function checkQuiz(page, name, screenshots) {
  const problems = [];
  const placeholders = page.locator(".quiz-placeholder");
  if ((await placeholders.count()) !== 1) {
    return [`expected 1 quiz, found ${await placeholders.count()}`];
  }
  const quiz = JSON.parse(await placeholders.first().getAttribute("data-quiz-questions"));
  const questions = quiz.questions;
  const root = page.locator(".mdbook-quiz");
  await root.waitFor({ timeout: 10_000 });
  const counter = (await root.locator("header .counter").innerText()).trim();
  if (counter !== `${questions.length} questions`) {
    problems.push(`header says "${counter}", expected "${questions.length} questions"`);
  }
  await root.locator("button.start").click();
  for (let i = 0; i < questions.length; i++) {
    await root.locator(".question h4", { hasText: `Question ${i + 1}` }).waitFor({ timeout: 5_000 });
    if (screenshots && i === 1) {
      await root.scrollIntoViewIfNeeded();
      await root.screenshot({ path: join(outDir, `${name}-question.png`) });
    }
    await answerQuestion(page, questions[i], i !== 0);
  }
  await root.locator("h3", { hasText: "Answer Review" }).waitFor({ timeout: 5_000 });
  const score = (await root.locator("p", { hasText: "You answered" }).first().innerText()).trim();
  const expected = `You answered ${questions.length - 1}/${questions.length} questions correctly.`;
  if (score !== expected) problems.push(`review says "${score}", expected "${expected}"`);
  await root.locator("button", { hasText: "see the correct answers" }).first().click();
  const contexts = root.locator(".answer .context");
  await contexts.first().waitFor({ timeout: 5_000 });
  const texts = await contexts.allInnerTexts();
  if (texts.length !== questions.length) {
    problems.push(`${texts.length} explanations shown for ${questions.length} questions`);
  }
  texts.forEach((text, i) => {
    if (!text.startsWith("Context:") || text.length < 80) {
      problems.push(`question ${i + 1}: explanation missing or too short: "${text.slice(0, 60)}"`);
    }
  });
  const corrections = await root.locator(".answer-header", { hasText: "The correct answer is" }).count();
  if (corrections !== 1) problems.push(`${corrections} corrections shown, expected 1 (question 1)`);
  if (screenshots) {
    await root.locator(".answer").first().scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(outDir, `${name}-review.png`) });
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Folds: <details class="fold"> (book/theme/reading.js and reading.css).

/** mdBook's themes (the class on <html>), light first. */
const THEMES = ["light", "rust", "coal", "navy", "ayu"];

/** WCAG's contrast ratio between two CSS colours, computed in the page. */
async function contrast(fold) {
  return fold.evaluate(details => {
    const rgb = c => (c.match(/[\d.]+/g) || []).slice(0, 3).map(Number);
    const lum = c => {
      const [r, g, b] = rgb(c).map(v => v / 255).map(v => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const summary = details.querySelector("summary");
    const fg = lum(getComputedStyle(summary).color);
    // The colour behind the summary: the nearest element (itself included) with an opaque
    // background.
    let behind = "rgb(255, 255, 255)";
    for (let el = summary; el; el = el.parentElement) {
      const c = getComputedStyle(el).backgroundColor;
      const alpha = c.startsWith("rgba") ? Number(c.match(/[\d.]+/g)[3]) : 1;
      if (alpha > 0.99) {
        behind = c;
        break;
      }
    }
    const bg = lum(behind);
    return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
  });
}

/**
 * Checks a page's folds: closed when the page opens; a click on a summary opens that fold and
 * shows what is inside; a link to an element inside a closed fold opens the fold; the summary
 * reads against the fold's background in every theme (contrast at least 4.5); printing (the
 * print media and the beforeprint event) shows every fold, and afterprint closes them again.
 * Returns [problems, number of folds].
 */
async function checkFolds(page, origin, file) {
  const problems = [];
  const folds = page.locator("main details");
  const count = await folds.count();
  if (count === 0) return [problems, 0];
  if (file === "print.html") {
    // The print page calls window.print() when it loads, which opens every fold (beforeprint).
    const closed = await page.locator("main details:not([open])").count();
    if (closed > 0) problems.push(`${closed} of ${count} fold(s) still closed on the print page`);
    return [problems, count];
  }
  const open = await page.locator("main details[open]").count();
  if (open > 0) problems.push(`${open} of ${count} fold(s) open when the page loads`);
  const unclassed = await page.locator("main details:not(.fold)").count();
  if (unclassed > 0) problems.push(`${unclassed} <details> without class "fold"`);
  const visibleInside = d => d.evaluate(el => {
    const inside = Array.from(el.children).find(c => c.tagName !== "SUMMARY");
    return Boolean(inside && inside.checkVisibility() && inside.getBoundingClientRect().height > 0);
  });
  const first = folds.first();
  if (await visibleInside(first)) problems.push("the first fold's content is visible while it is closed");
  await first.locator("summary").first().click();
  if (!(await first.evaluate(el => el.open)) || !(await visibleInside(first))) {
    problems.push("a click on the first fold's summary does not open it");
  }
  await first.locator("summary").first().click();
  const setTheme = theme => page.evaluate(([t, all]) => {
    document.documentElement.classList.remove(...all);
    document.documentElement.classList.add(t);
  }, [theme, THEMES]);
  for (const theme of THEMES) {
    await setTheme(theme);
    const ratio = await contrast(first);
    if (ratio < 4.5) problems.push(`theme ${theme}: the fold's summary has contrast ${ratio.toFixed(2)} (at least 4.5)`);
  }
  await setTheme("light");
  // Printing: the print stylesheet alone, then the script's beforeprint/afterprint.
  await page.emulateMedia({ media: "print" });
  const hiddenInPrint = [];
  for (let i = 0; i < count; i++) if (!(await visibleInside(folds.nth(i)))) hiddenInPrint.push(i + 1);
  if (hiddenInPrint.length) problems.push(`print media: fold(s) ${hiddenInPrint.join(", ")} still hidden`);
  await page.emulateMedia({ media: "screen" });
  await page.evaluate(() => window.dispatchEvent(new Event("beforeprint")));
  const openForPrint = await page.locator("main details.fold[open]").count();
  if (openForPrint !== count) problems.push(`beforeprint opened ${openForPrint} of ${count} folds`);
  await page.evaluate(() => window.dispatchEvent(new Event("afterprint")));
  if ((await page.locator("main details.fold[open]").count()) !== 0) problems.push("afterprint left folds open");
  // A link into a fold: the first element with an id inside a fold, reached by its URL.
  const id = await page.evaluate(() => document.querySelector("main details.fold [id]")?.id ?? null);
  if (id) {
    await page.goto(`${origin}/${file}#${encodeURIComponent(id)}`, { waitUntil: "load" });
    const opened = await page.evaluate(i => {
      const el = document.getElementById(i);
      return Boolean(el && el.closest("details")?.open && el.checkVisibility());
    }, id);
    if (!opened) problems.push(`${file}#${id}: the link does not open the fold around its target`);
  }
  return [problems, count];
}

// ---------------------------------------------------------------------------------------------

async function main() {
  const pages = readdirSync(bookDir).filter(f => f.endsWith(".html")).sort();
  if (!pages.includes("index.html")) {
    throw new Error(`no built book in ${bookDir}: run \`cargo xtask book --no-serve\` first`);
  }
  mkdirSync(outDir, { recursive: true });
  const server = await serve(bookDir);
  const origin = `http://127.0.0.1:${server.address().port}`;
  // Every request any page makes: recorded, and aborted when it would leave the machine.
  const { context, offMachine, requests, close } =
    await launchOffline("book-check", { width: 1280, height: 900 });

  let failures = 0;
  console.log(`Chromium ${context.browser()?.version() ?? ""} (${chromiumPath}), book served at ${origin}`);
  for (const file of pages) {
    const page = await context.newPage();
    const errors = [];
    const warnings = [];
    const messages = [];
    page.on("console", msg => {
      if (msg.type() === "error") errors.push(msg.text());
      else if (msg.type() === "warning") warnings.push(msg.text());
      else messages.push(`${msg.type()}: ${msg.text()}`);
    });
    page.on("pageerror", err => errors.push(`uncaught: ${err.message}`));
    page.on("requestfailed", req => {
      if (!offMachine.includes(req.url())) errors.push(`request failed: ${req.url()}`);
    });
    const before = offMachine.length;
    const response = await page.goto(`${origin}/${file}`, { waitUntil: "load" });
    await page.waitForLoadState("networkidle");
    const problems = [];
    // 404.html is served with status 200 by this server; every other page must exist.
    if (!response || !response.ok()) problems.push(`HTTP ${response?.status()}`);
    const chapter = /^ch(\d\d)-/.exec(file);
    let foldNote = "";
    try {
      const [foldProblems, folds] = await checkFolds(page, origin, file);
      problems.push(...foldProblems.map(p => `folds: ${p}`));
      if (folds > 0) {
        foldNote = file === "print.html"
          ? `, ${folds} fold(s) open for printing`
          : `, ${folds} fold(s) closed, opened by a click, a link and print`;
      }
    } catch (e) {
      problems.push(`folds: ${e.message.split("\n")[0]}`);
    }
    if (chapter) {
      try {
        problems.push(...(await checkQuiz(page, `ch${chapter[1]}`, chapter[1] === "01")));
      } catch (e) {
        problems.push(`quiz: ${e.message.split("\n")[0]}`);
      }
      await page.waitForLoadState("networkidle");
    }
    problems.push(...errors.map(e => `console error: ${e}`));
    problems.push(...warnings.map(w => `console warning: ${w}`));
    problems.push(...messages.map(m => `console message: ${m}`));
    problems.push(...offMachine.slice(before).map(u => `request off the machine: ${u}`));
    const quizNote = chapter && problems.length === 0 ? ", quiz rendered, answered, explained" : "";
    console.log(`${problems.length === 0 ? "ok  " : "FAIL"} ${file}: ${errors.length} console error(s), ` +
      `${warnings.length} warning(s), ${messages.length} other message(s), ` +
      `${offMachine.length - before} request(s) off the machine${foldNote}${quizNote}`);
    for (const p of problems) console.log(`       ${p}`);
    failures += problems.length === 0 ? 0 : 1;
    await page.close();
  }
  // Search: the index that `cargo xtask book` rebuilt (crates/xtask/src/search.rs) must load in
  // mdBook's own search page and find a word of the prose, names from the code and a number,
  // and a query written as code (`Mask::causal`) must be split as the index was (reading.js).
  {
    const page = await context.newPage();
    const problems = [];
    page.on("console", msg => problems.push(`console ${msg.type()}: ${msg.text()}`));
    page.on("pageerror", err => problems.push(`uncaught: ${err.message}`));
    const found = [];
    for (const query of ["softmax", "grad_q", "tiled_sdpa_backward", "0.506", "Mask::causal", "rope.apply"]) {
      await page.goto(`${origin}/ch05-softmax.html?search=${encodeURIComponent(query)}`, { waitUntil: "load" });
      await page.waitForLoadState("networkidle");
      const results = page.locator("#mdbook-searchresults li");
      await results.first().waitFor({ timeout: 5000 }).catch(() => {});
      const count = await results.count();
      found.push(`${query}: ${count}`);
      if (count === 0) problems.push(`searching "${query}" finds nothing`);
    }
    console.log(`${problems.length === 0 ? "ok  " : "FAIL"} search: ${found.join(", ")} result(s)`);
    for (const p of problems) console.log(`       ${p}`);
    failures += problems.length === 0 ? 0 : 1;
    await page.close();
  }
  await close();
  server.close();
  console.log(`\n${pages.length} pages, ${requests()} requests, all to ${origin}` +
    (offMachine.length ? ` except ${offMachine.length}` : "") + `; screenshots in ${outDir}`);
  if (failures > 0 || offMachine.length > 0) {
    console.log(`${failures} page(s) failed`);
    process.exit(1);
  }
  console.log("browser check passed: every page loads with no console message and no request off the machine; " +
    "every fold starts closed and opens on a click, a link and for print; every quiz works; search finds");
}

main().catch(e => {
  console.error(e);
  process.exit(1);
});
