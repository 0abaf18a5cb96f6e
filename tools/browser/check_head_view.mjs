// Optional browser check of the interactive head view (book/theme/head-view.js and .css, the
// pages of `attend --view` and `multihead --view`, and chapter 13's view when the book is
// built). Never needed by `cargo xtask test` or CI (they have no browser); run it by hand:
//
//   npm ci --prefix tools/browser                  # playwright-core, to drive Chromium
//   node tools/browser/check_head_view.mjs         # Debian: apt-get install chromium
//
// It builds the two tools (cargo build --release, or with --debug the debug build), writes
// seeded random .npy inputs, and makes three pages with them:
//   - long.html: `multihead --view` on a batch of 2 × 128 tokens, 4 heads, labels that include
//     `</script>`, `<b>…</b>`, `&amp;` and quotes; opened from file://, like a reader would;
//   - small.html: `attend --view` on one 8 × 8 matrix, also from file://;
//   - two-views.html: both views on one page, loaded the way the book loads them (the viewer and
//     the data as separate <script src> files, the data of one view before the viewer and of the
//     other after it, a static picture inside each), served from 127.0.0.1.
// Then it checks, and fails (exit code 1) on any problem:
//   - no console error or uncaught exception, no request leaving the machine (all are recorded);
//   - every view is drawn and its static picture hidden, and in print the picture is back and the
//     interactive part hidden;
//   - labels are text: the token `</script>` reads "</script>", `<b>` makes no element, and the
//     page has no script element but its own;
//   - pointing changes what is drawn (the canvas pixels and the root's data-state/data-drawn):
//     hovering a query token, a key token, a matrix cell; the keyboard (focus, arrow keys,
//     Enter pins, Escape unpins, Left/Right change column); the head, layer and mode pickers;
//   - 128 tokens stay usable: the token columns scroll inside a box of fixed height, token 120
//     can be scrolled to and pointed at, matrix mode draws all 128 × 128 cells;
//   - the readout sits below the drawing, and with all heads shown it says it prints their mean;
//   - two views on one page do not interfere: acting on one changes nothing in the other;
//   - themes: a dark mdBook theme class (coal) and a dark system setting recolour the view.
// If the book is built (target/book/html/ch13-real-model.html), chapter 13's view is checked
// too, in the light theme and in coal (it must open on head 0.2, one line per token); otherwise
// that part is skipped with a message.
//
// Options: --debug (use target/debug), --no-build (use the tools as built), --book DIR
// (default target/book/html), --chromium PATH (default $CHROMIUM or /usr/bin/chromium),
// --out DIR (screenshots; default target/browser-check).

import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { bookDir, chromiumPath, flag, launchOffline, outDir, repo, serve } from "./common.mjs";

const profile = flag("--debug") ? "debug" : "release";

// ---------------------------------------------------------------------------------------------
// Inputs: seeded random .npy files, written here (format version 1.0, little-endian float64).

function rng(seed) {
  // mulberry32: a small seeded generator, so every run makes the same files.
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function writeNpy(path, shape, fill) {
  const n = shape.reduce((a, b) => a * b, 1);
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  let header = `{'descr': '<f8', 'fortran_order': False, 'shape': ${shapeText}, }`;
  header += " ".repeat(63 - ((10 + header.length) % 64)) + "\n"; // 10 + header: a multiple of 64
  const head = Buffer.alloc(10);
  Buffer.from([0x93, ...Buffer.from("NUMPY"), 1, 0]).copy(head);
  head.writeUInt16LE(header.length, 8);
  const data = Buffer.alloc(8 * n);
  for (let i = 0; i < n; i++) data.writeDoubleLE(fill(i), 8 * i);
  writeFileSync(path, Buffer.concat([head, Buffer.from(header, "latin1"), data]));
  return path;
}

/** Runs a tool (built beforehand) and returns its summary line. */
function tool(name, args) {
  const exe = join(repo, "target", profile, "examples", name);
  return execFileSync(exe, args, { encoding: "utf8" }).trim();
}

const SPECIAL = ["</script>", "<b>bold</b>", "&amp;", "\"quoted\"", "<img src=x>"];

function makePages(work) {
  if (!flag("--no-build")) {
    const args = ["build", "--example", "attend", "--example", "multihead"];
    if (profile === "release") args.splice(1, 0, "--release");
    console.log(`cargo ${args.join(" ")}`);
    execFileSync("cargo", args, { cwd: repo, stdio: "inherit" });
  }
  const random = rng(13);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  // multihead: X (2, 128, 16), 4 heads of 4; W_Q scaled up for peaked, readable weights.
  const d = 16;
  const x = writeNpy(join(work, "x.npy"), [2, 128, d], () => gauss());
  const w = {};
  for (const [name, scale] of [["wq", 3], ["wk", 1], ["wv", 1], ["wo", 1]]) {
    w[name] = writeNpy(join(work, `${name}.npy`), [d, d], () => (scale * gauss()) / Math.sqrt(d));
  }
  const labels = Array.from({ length: 128 }, (_, i) => (i < SPECIAL.length ? SPECIAL[i] : `tok${i}`));
  const long = join(work, "long.html");
  console.log(tool("multihead", [
    "--x", x, "--wq", w.wq, "--wk", w.wk, "--wv", w.wv, "--wo", w.wo, "--heads", "4",
    "--mask", "causal", "--out", join(work, "out.npy"), "--view", long, "--labels", labels.join(","),
  ]));
  // attend: one (8, 8) matrix of weights, numbered tokens.
  const qkv = ["q", "k", "v"].map(n => writeNpy(join(work, `${n}.npy`), [8, 4], () => 2 * gauss()));
  const small = join(work, "small.html");
  console.log(tool("attend", [
    "--q", qkv[0], "--k", qkv[1], "--v", qkv[2], "--out", join(work, "out2.npy"), "--view", small,
  ]));

  // Two views on one page, loaded as the book loads one: viewer and data as files of their own.
  const site = join(work, "site");
  mkdirSync(site);
  // A page's first <script> is the data script, as HeadView::write_data_script writes it.
  const dataScript = (page, id) => {
    const html = readFileSync(page, "utf8");
    const start = html.indexOf("<script>\n") + "<script>\n".length;
    const text = html.slice(start, html.indexOf("</script>", start));
    if (!text.includes('(window.attentionHeadViews = window.attentionHeadViews || {})["view"] = {')) {
      throw new Error(`${page}: its first script does not register the view's data`);
    }
    return text.replace('["view"]', `["${id}"]`);
  };
  writeFileSync(join(site, "one.js"), dataScript(long, "one"));
  writeFileSync(join(site, "two.js"), dataScript(small, "two"));
  copyFileSync(join(repo, "book/theme/head-view.js"), join(site, "head-view.js"));
  copyFileSync(join(repo, "book/theme/head-view.css"), join(site, "head-view.css"));
  const png = readdirSync(join(repo, "book/img")).find(f => f.endsWith(".png"));
  copyFileSync(join(repo, "book/img", png), join(site, "fallback.png"));
  writeFileSync(join(site, "two-views.html"), `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Two head views</title>
<link rel="stylesheet" href="head-view.css"></head>
<body>
<h1>Two head views on one page</h1>
<div class="head-view" data-head-view="one"><img src="fallback.png" alt="static picture one"></div>
<script src="one.js"></script>
<div class="head-view" data-head-view="two"><img src="fallback.png" alt="static picture two"></div>
<script src="head-view.js"></script>
<script src="two.js"></script>
</body></html>
`);
  return { long, small, site };
}

// ---------------------------------------------------------------------------------------------
// Looking at a view.

/** Everything that says what a view draws: its state, its counters, its canvas's pixels. */
async function snapshot(view) {
  return view.evaluate(host => {
    const root = host.querySelector(".hv-root");
    const canvas = host.querySelector("canvas");
    return {
      state: root.dataset.state,
      drawn: root.dataset.drawn,
      pixels: canvas.toDataURL(),
      readout: host.querySelector(".hv-readout").textContent,
      tokens: host.querySelectorAll(".hv-queries .hv-token").length,
    };
  });
}

function differs(a, b) {
  return a.pixels !== b.pixels && a.drawn !== b.drawn;
}

class Checks {
  constructor(name) {
    this.name = name;
    this.problems = [];
    this.passed = 0;
  }
  ok(condition, what) {
    if (condition) this.passed++;
    else this.problems.push(what);
    return condition;
  }
}

/** Opens `url` in a new page; `errors` collects its console errors and uncaught exceptions
 * (requests off the machine are recorded by the guard `launchOffline` puts on every page). */
async function openPage(context, url) {
  const page = await context.newPage();
  const errors = [];
  page.on("console", msg => { if (msg.type() === "error") errors.push(msg.text()); });
  page.on("pageerror", err => errors.push(`uncaught: ${err.message}`));
  page.on("requestfailed", req => errors.push(`request failed: ${req.url()}`));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForTimeout(150);
  return { page, errors };
}

/** Hover, keyboard, pickers and matrix mode on one view; `twin` must not change meanwhile. */
async function exercise(c, page, view, { tokens, layers, twin }) {
  const twinBefore = twin ? await snapshot(twin) : null;
  const url = page.url();
  const rest = await snapshot(view);
  c.ok(/point=none/.test(rest.state), `at rest nothing is pointed at: ${rest.state}`);
  c.ok(Number(rest.drawn.split(" ")[0]) > 0, `at rest the rows are drawn faintly: drawn=${rest.drawn}`);
  if (/head=all/.test(rest.state)) {
    c.ok(/their mean/.test(rest.readout), `with all heads, the readout says it prints their mean: ${rest.readout}`);
  }
  const below = await view.evaluate(host => {
    const readout = host.querySelector(".hv-readout").getBoundingClientRect();
    const drawing = host.querySelector(".hv-scroll").getBoundingClientRect();
    return readout.top >= drawing.bottom - 1;
  });
  c.ok(below, "the readout sits below the drawing, where it is read with it");

  // Mouse on a query token.
  const queries = view.locator(".hv-queries .hv-token");
  c.ok((await queries.count()) === tokens, `${tokens} query tokens, found ${await queries.count()}`);
  await queries.nth(3).hover();
  const hovered = await snapshot(view);
  c.ok(/point=q3/.test(hovered.state), `hovering query 3 points at it: ${hovered.state}`);
  c.ok(differs(rest, hovered), "hovering query 3 changes the drawing");
  c.ok(/query 3 .* attends most to/.test(hovered.readout), `readout names the weights: ${hovered.readout}`);
  // Mouse on a key token: the column. Not key 2: in a previous-token head (chapter 13's view
  // opens on one) the column of key 2 is the single line of query 3, drawn just before.
  const k = tokens > 5 ? 5 : 2;
  await view.locator(".hv-keys .hv-token").nth(k).hover();
  const key = await snapshot(view);
  c.ok(new RegExp(`point=k${k} `).test(key.state) && differs(hovered, key), `hovering key ${k} draws its column: ${key.state}`);
  await page.mouse.move(0, 0);
  const away = await snapshot(view);
  c.ok(/point=none/.test(away.state) && away.pixels === rest.pixels, "leaving the tokens restores the resting picture");

  // Keyboard: focus, arrows, Enter pins, Escape unpins, Right goes to the keys.
  await queries.nth(0).focus();
  const focused = await snapshot(view);
  c.ok(/point=q0/.test(focused.state), `focus points at query 0: ${focused.state}`);
  await page.keyboard.press("ArrowDown");
  const down = await snapshot(view);
  c.ok(/point=q1/.test(down.state) && differs(focused, down), `ArrowDown moves to query 1 and redraws: ${down.state}`);
  await page.keyboard.press("Enter");
  c.ok(/pin=q1/.test((await snapshot(view)).state), "Enter pins query 1");
  await page.keyboard.press("ArrowRight");
  const right = await snapshot(view);
  c.ok(/point=k1/.test(right.state) && /pin=q1/.test(right.state), `ArrowRight goes to key 1, the pin stays: ${right.state}`);
  await page.keyboard.press("ArrowRight"); // nothing further right: nothing happens
  await queries.nth(0).focus();
  await page.keyboard.press("ArrowLeft"); // nothing further left either
  c.ok(page.url() === url, `arrow keys in the view stay in the view (mdBook turns the page on them): ${page.url()}`);
  await view.locator(".hv-keys .hv-token").nth(1).focus();
  await page.keyboard.press("End");
  c.ok(new RegExp(`point=k${tokens - 1}`).test((await snapshot(view)).state), "End goes to the last key");
  await page.evaluate(() => document.activeElement.blur());
  const pinned = await snapshot(view);
  c.ok(/point=q1/.test(pinned.state), `with nothing focused or hovered the pinned token is shown: ${pinned.state}`);
  await queries.nth(1).focus();
  await page.keyboard.press("Escape");
  await page.evaluate(() => document.activeElement.blur());
  c.ok(/point=none pin=none/.test((await snapshot(view)).state), "Escape unpins");
  const tabStops = await view.locator(".hv-token[tabindex='0']").count();
  c.ok(tabStops === 2, `one tab stop per column (roving tabindex), found ${tabStops}`);

  // Head picker (if there are heads to pick), layer picker (if layers).
  const headSelect = view.locator("select.hv-head");
  if (await headSelect.count()) {
    await queries.nth(3).hover();
    const before = await snapshot(view);
    const pick = /head=2 /.test(before.state) ? 3 : 2; // a head other than the one shown
    await headSelect.selectOption(String(pick));
    const one = await snapshot(view);
    c.ok(new RegExp(`head=${pick} `).test(one.state) && differs(before, one), `picking head ${pick} redraws: ${one.state}`);
    await view.locator(".hv-swatch").nth(pick).click(); // the selected head's square: back to all
    const all = await snapshot(view);
    c.ok(/head=all/.test(all.state), "clicking the selected head's square shows all heads");
    c.ok(/mean/.test(all.readout), `with all heads, the readout says it prints their mean: ${all.readout}`);
  }
  if (layers > 1) {
    await queries.nth(3).hover();
    const first = await snapshot(view);
    await view.locator("select.hv-layer").selectOption("1");
    const second = await snapshot(view);
    c.ok(/layer=1/.test(second.state) && differs(first, second), `picking layer 1 redraws: ${second.state}`);
  }

  // Matrix mode: every cell, and pointing at a cell.
  await view.locator("button.hv-mode", { hasText: "matrix" }).click();
  await page.mouse.move(0, 0);
  const matrix = await snapshot(view);
  c.ok(/mode=matrix/.test(matrix.state), `matrix mode: ${matrix.state}`);
  const cells = Number(matrix.drawn.split(" ")[0]);
  c.ok(cells > tokens && cells <= tokens * tokens, `matrix mode draws the cells (${cells} of ${tokens}×${tokens})`);
  const canvas = view.locator("canvas");
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  await page.mouse.move(box.x + box.width * 0.4, box.y + 5);
  const cell = await snapshot(view);
  c.ok(/cell=0,\d+/.test(cell.state) && differs(matrix, cell), `pointing at a cell outlines it: ${cell.state}`);
  c.ok(/→ key \d+ .*: 0\.\d{3}|→ key \d+ .*: [01]\.\d{3}/.test(cell.readout), `the cell's weight is printed: ${cell.readout}`);
  await view.locator("button.hv-mode", { hasText: "lines" }).click();
  await page.mouse.move(0, 0);

  if (twin) {
    const twinAfter = await snapshot(twin);
    c.ok(JSON.stringify(twinBefore) === JSON.stringify(twinAfter), "the other view on the page did not change");
  }
}

/** The static picture: hidden once the view is drawn, back in print, the view hidden there. */
async function checkFallback(c, page, view) {
  const shown = () => view.evaluate(host => ({
    img: getComputedStyle(host.querySelector("img")).display,
    root: getComputedStyle(host.querySelector(".hv-root")).display,
  }));
  const screen = await shown();
  c.ok(screen.img === "none" && screen.root !== "none", `on screen the picture is hidden: ${JSON.stringify(screen)}`);
  await page.emulateMedia({ media: "print" });
  const print = await shown();
  c.ok(print.img !== "none" && print.root === "none", `in print the picture is back: ${JSON.stringify(print)}`);
  await page.emulateMedia({ media: "screen" });
}

async function checkLabels(c, page, view, scriptsExpected) {
  const texts = await view.locator(".hv-queries .hv-token").evaluateAll(items => items.slice(0, 5).map(i => i.textContent));
  c.ok(JSON.stringify(texts) === JSON.stringify(SPECIAL), `labels are shown as text: ${JSON.stringify(texts)}`);
  const markup = await view.locator(".hv-token b, .hv-token img, .hv-token script").count();
  c.ok(markup === 0, `no label became markup (${markup} elements)`);
  const scripts = await page.locator("script").count();
  c.ok(scripts === scriptsExpected, `${scriptsExpected} script elements, as the page wrote them (found ${scripts})`);
}

async function checkLong(c, page, view) {
  const scroller = view.locator(".hv-scroll");
  const size = await scroller.evaluate(s => ({ client: s.clientHeight, scroll: s.scrollHeight, font: parseFloat(getComputedStyle(s).fontSize) }));
  c.ok(size.scroll > size.client * 2 && size.client <= 33 * size.font,
    `128 tokens scroll in a fixed box (${size.client}px shown of ${size.scroll}px)`);
  const token = view.locator(".hv-queries .hv-token").nth(120);
  await token.scrollIntoViewIfNeeded();
  await token.hover();
  const s = await snapshot(view);
  c.ok(/point=q120/.test(s.state) && Number(s.drawn.split(" ")[0]) > 0, `token 120 can be reached and pointed at: ${s.state}`);
  await page.mouse.move(0, 0);
  await scroller.evaluate(s => { s.scrollTop = 0; });
}

/** A theme change while the page is open recolours the drawing (the palette is read again). */
async function checkThemeSwitch(c, page, view, apply, undo, what) {
  const palette = () => view.evaluate(h => getComputedStyle(h).getPropertyValue("--hv-head-l").trim());
  const before = await snapshot(view);
  const paletteBefore = await palette();
  await apply();
  await page.waitForTimeout(100);
  const after = await snapshot(view);
  const paletteAfter = await palette();
  c.ok(paletteBefore !== paletteAfter, `${what}: the palette follows (--hv-head-l ${paletteBefore} → ${paletteAfter})`);
  c.ok(before.pixels !== after.pixels, `${what}: the drawing is recoloured at once`);
  await undo();
  await page.waitForTimeout(100);
}

// ---------------------------------------------------------------------------------------------

async function main() {
  mkdirSync(outDir, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), "head-view-check-"));
  const { long, small, site } = makePages(work);
  const server = await serve(site);
  const origin = `http://127.0.0.1:${server.address().port}`;
  // Every request any page makes: recorded, and aborted when it would leave the machine.
  const { context, offMachine, close } =
    await launchOffline("head-view-check", { width: 1100, height: 900 });
  console.log(`Chromium ${context.browser()?.version() ?? ""} (${chromiumPath})`);
  const results = [];

  // 1. The long page, from file://.
  {
    const c = new Checks("long.html (multihead --view, 2 × 128 tokens, 4 heads, file://)");
    const before = offMachine.length;
    const { page, errors } = await openPage(context, pathToFileURL(long).href);
    const view = page.locator(".head-view").first();
    c.ok(await page.locator(".head-view.hv-rendered").count() === 1, "the view is drawn");
    await checkLabels(c, page, view, 2);
    await checkLong(c, page, view);
    await exercise(c, page, view, { tokens: 128, layers: 2 });
    await page.screenshot({ path: join(outDir, "head-view-long.png") });
    const textColour = () => view.evaluate(h => getComputedStyle(h.querySelector(".hv-root")).color);
    const light = await textColour();
    await checkThemeSwitch(c, page, view,
      () => page.emulateMedia({ colorScheme: "dark" }),
      async () => {}, "a dark system setting");
    const dark = await textColour();
    c.ok(light !== dark, `a dark system setting changes the text colour (${light} → ${dark})`);
    await view.locator(".hv-queries .hv-token").nth(7).hover();
    await page.screenshot({ path: join(outDir, "head-view-long-dark.png") });
    await page.emulateMedia({ colorScheme: "light" });
    c.ok(errors.length === 0, `console errors: ${errors.join(" | ")}`);
    c.ok(offMachine.length === before, `requests off the machine: ${offMachine.slice(before).join(" ")}`);
    results.push(c);
    await page.close();
  }

  // 2. The small page (attend, one matrix), from file://.
  {
    const c = new Checks("small.html (attend --view, one 8 × 8 matrix, file://)");
    const before = offMachine.length;
    const { page, errors } = await openPage(context, pathToFileURL(small).href);
    const view = page.locator(".head-view").first();
    c.ok(await page.locator(".head-view.hv-rendered").count() === 1, "the view is drawn");
    c.ok(await view.locator("select").count() === 0, "one matrix: no layer or head picker");
    await exercise(c, page, view, { tokens: 8, layers: 1 });
    await view.locator(".hv-queries .hv-token").nth(5).hover();
    await page.screenshot({ path: join(outDir, "head-view-small.png") });
    c.ok(errors.length === 0, `console errors: ${errors.join(" | ")}`);
    c.ok(offMachine.length === before, `requests off the machine: ${offMachine.slice(before).join(" ")}`);
    results.push(c);
    await page.close();
  }

  // 3. Two views on one page, loaded as the book loads them, from 127.0.0.1.
  {
    const c = new Checks("two-views.html (two views, <script src> data before and after the viewer, http)");
    const before = offMachine.length;
    const { page, errors } = await openPage(context, `${origin}/two-views.html`);
    const one = page.locator(".head-view[data-head-view='one']");
    const two = page.locator(".head-view[data-head-view='two']");
    c.ok(await page.locator(".head-view.hv-rendered").count() === 2, "both views are drawn");
    await checkLabels(c, page, one, 3);
    await checkFallback(c, page, one);
    await exercise(c, page, one, { tokens: 128, layers: 2, twin: two });
    await exercise(c, page, two, { tokens: 8, layers: 1, twin: one });
    await checkThemeSwitch(c, page, two,
      () => page.evaluate(() => { document.documentElement.className = "coal"; }),
      () => page.evaluate(() => { document.documentElement.className = ""; }),
      "an mdBook dark theme class (coal)");
    await page.screenshot({ path: join(outDir, "head-view-two.png"), fullPage: true });
    c.ok(errors.length === 0, `console errors: ${errors.join(" | ")}`);
    c.ok(offMachine.length === before, `requests off the machine: ${offMachine.slice(before).join(" ")}`);
    results.push(c);
    await page.close();
  }

  // 4. Chapter 13 in the built book, if it is there: light and coal.
  const chapter = join(bookDir, "ch13-real-model.html");
  if (!existsSync(chapter)) {
    console.log(`skipped: ${chapter} does not exist (build the book with \`cargo xtask book --no-serve\` to check chapter 13's view)`);
  } else {
    const book = await serve(bookDir);
    const bookOrigin = `http://127.0.0.1:${book.address().port}`;
    const colours = {};
    for (const theme of ["light", "coal"]) {
      const c = new Checks(`ch13-real-model.html (the built book, theme ${theme}, http)`);
      const before = offMachine.length;
      const page0 = await context.newPage();
      await page0.goto(`${bookOrigin}/index.html`);
      await page0.evaluate(t => localStorage.setItem("mdbook-theme", t), theme);
      await page0.close();
      const { page, errors } = await openPage(context, `${bookOrigin}/ch13-real-model.html`);
      const cls = await page.evaluate(() => document.documentElement.className);
      c.ok(cls.split(/\s+/).includes(theme), `the page is in theme ${theme} (html class "${cls}")`);
      const views = page.locator(".head-view[data-head-view]");
      const count = await views.count();
      c.ok(count >= 1, `the chapter has a head view (${count})`);
      c.ok(await page.locator(".head-view.hv-rendered").count() === count, "every view is drawn");
      if (count >= 1) {
        const view = views.first();
        await view.scrollIntoViewIfNeeded();
        const opening = await snapshot(view);
        c.ok(/layer=0 head=2 mode=lines point=none/.test(opening.state),
          `the chapter's view opens on head 0.2, one line per token: ${opening.state}`);
        c.ok(Number(opening.drawn.split(" ")[0]) <= 2 * opening.tokens,
          `and draws few lines at rest (${opening.drawn.split(" ")[0]})`);
        if (await view.locator("img").count()) await checkFallback(c, page, view);
        const tokens = await view.locator(".hv-queries .hv-token").count();
        const layers = await view.locator("select.hv-layer option").count();
        await exercise(c, page, view, { tokens, layers: Math.max(1, layers) });
        const l = await view.evaluate(h => getComputedStyle(h).getPropertyValue("--hv-head-l").trim());
        c.ok(l === (theme === "light" ? "42%" : "68%"), `the palette follows the theme (--hv-head-l ${l})`);
        colours[theme] = await view.evaluate(h => getComputedStyle(h.querySelector(".hv-root")).color);
        if (theme === "coal") {
          c.ok(colours.coal !== colours.light, `the text colour follows the theme (light ${colours.light}, coal ${colours.coal})`);
        }
        await view.locator(".hv-queries .hv-token").nth(Math.min(3, tokens - 1)).hover();
        await view.screenshot({ path: join(outDir, `head-view-ch13-${theme}.png`) });
      }
      c.ok(errors.length === 0, `console errors: ${errors.join(" | ")}`);
      c.ok(offMachine.length === before, `requests off the machine: ${offMachine.slice(before).join(" ")}`);
      results.push(c);
      await page.close();
    }
    book.close();
  }

  await close();
  server.close();
  rmSync(work, { recursive: true, force: true });
  let failed = 0;
  for (const c of results) {
    console.log(`${c.problems.length === 0 ? "ok  " : "FAIL"} ${c.name}: ${c.passed} checks passed`);
    for (const p of c.problems) console.log(`       ${p}`);
    if (c.problems.length) failed++;
  }
  console.log(`screenshots in ${outDir}`);
  if (failed > 0 || offMachine.length > 0) {
    console.log(`${failed} page(s) failed; ${offMachine.length} request(s) off the machine`);
    process.exit(1);
  }
  console.log("head view check passed: drawn, pointed at by mouse and keyboard, labels as text, " +
    "two views independent, long inputs usable, themes followed, no console error, nothing off the machine");
}

main().catch(e => {
  console.error(e);
  process.exit(1);
});
