// Optional browser check of the built book: every page opened in a real Chromium, served from
// 127.0.0.1. Never needed by `cargo xtask test` or CI (they have no browser); run it by hand:
//
//   cargo xtask book --no-serve                   # the book in target/book/html
//   npm ci --prefix tools/browser                 # playwright-core, to drive Chromium
//   node tools/browser/check_book.mjs             # Debian: apt-get install chromium
//
// It fails (exit code 1) if any page logs a console error or an uncaught exception, if any
// request leaves the machine (each one is recorded and aborted), or if a chapter's quiz does not
// work: on every chapter page the quiz must render with its number of questions, take an answer
// to every question (the first one deliberately wrong, the others right), score them as expected,
// and show an explanation ("Context") under every question once the answers are revealed. It
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
    page.on("console", msg => {
      if (msg.type() === "error") errors.push(msg.text());
      if (msg.type() === "warning") warnings.push(msg.text());
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
    if (chapter) {
      try {
        problems.push(...(await checkQuiz(page, `ch${chapter[1]}`, chapter[1] === "01")));
      } catch (e) {
        problems.push(`quiz: ${e.message.split("\n")[0]}`);
      }
      await page.waitForLoadState("networkidle");
    }
    problems.push(...errors.map(e => `console error: ${e}`));
    problems.push(...offMachine.slice(before).map(u => `request off the machine: ${u}`));
    const quizNote = chapter && problems.length === 0 ? ", quiz rendered, answered, explained" : "";
    console.log(`${problems.length === 0 ? "ok  " : "FAIL"} ${file}: ${errors.length} console error(s), ` +
      `${warnings.length} warning(s), ${offMachine.length - before} request(s) off the machine${quizNote}`);
    for (const w of warnings) console.log(`       warning: ${w}`);
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
  console.log("browser check passed: every page loads with no console error and no request off the machine; every quiz works");
}

main().catch(e => {
  console.error(e);
  process.exit(1);
});
