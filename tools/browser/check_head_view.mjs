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
//   - themes: a dark mdBook theme class (coal) and a dark system setting recolour the view;
//   - export: the SVG and PNG buttons are labelled buttons that work by mouse and by keyboard
//     (Playwright's download events); the SVG parses as SVG, has no raster image in it, has
//     every token as <text> with its label, as many lines (lines mode) or cells and outlines
//     (matrix mode) as the view drew, and the view's data-state and data-drawn; the PNG is a PNG
//     that decodes, is the SVG's picture at the device pixel ratio (so larger than the canvas:
//     it has the tokens too), is not blank and has the drawing where the SVG has it; another
//     head (or another kept token) gives another SVG; the files are named after the view, the
//     layer, the head and the mode (chapter 13 at opening: ch13-layer0-head2.svg), and are kept
//     in the --out directory to look at; print hides the buttons.
// If the book is built (target/book/html/ch13-real-model.html), chapter 13's view is checked
// too, in the light theme and in coal (it must open on head 0.2, one line per token); otherwise
// that part is skipped with a message.
//
// Options: --debug (use target/debug), --no-build (use the tools as built), --book DIR
// (default target/book/html), --chromium PATH (default $CHROMIUM or /usr/bin/chromium),
// --out DIR (screenshots and exports; default target/browser-check), --current-viewer (the
// pages the tools write inline head-view.js and .css as they were when the tools were built:
// if those differ from book/theme/ now, the check fails, unless this option puts the current
// ones in their place; for --no-build with tools built before a change to the viewer).

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
  for (const page of [long, small]) currentViewer(page);
  return { long, small, site };
}

/** A page of the tools inlines the viewer and its style as they were when the tools were built;
 * with --no-build those may be older than book/theme/head-view.js and .css. That is an error
 * (the check would test an old viewer), unless --current-viewer asks to put the current ones
 * into the page in their place (the page's data, written by the tools, stays as it is). */
function currentViewer(page) {
  let html = readFileSync(page, "utf8");
  const script = readFileSync(join(repo, "book/theme/head-view.js"), "utf8");
  const style = readFileSync(join(repo, "book/theme/head-view.css"), "utf8");
  // The page ends with <script>\n{viewer}</script>, and its second <style> is the viewer's.
  const scriptAt = html.lastIndexOf("<script>\n") + "<script>\n".length;
  const scriptEnd = html.lastIndexOf("</script>");
  const styleAt = html.indexOf("<style>\n", html.indexOf("</style>")) + "<style>\n".length;
  const styleEnd = html.indexOf("</style>", styleAt);
  if (html.slice(scriptAt, scriptEnd) === script && html.slice(styleAt, styleEnd) === style) return;
  if (!flag("--current-viewer")) {
    throw new Error(`${page}: its viewer is not book/theme/head-view.js and .css as they are now ` +
      "(the tools were built before a change to them): build them (without --no-build), or pass " +
      "--current-viewer to check the current viewer on the pages they write");
  }
  console.log(`${page}: the tools' viewer is older than book/theme/head-view.js/.css; put the current one in (--current-viewer)`);
  html = html.slice(0, styleAt) + style + html.slice(styleEnd, scriptAt) + script + html.slice(scriptEnd);
  writeFileSync(page, html);
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

// ---------------------------------------------------------------------------------------------
// Export: the SVG and PNG buttons.

/** Presses the view's `format` button ("svg" or "png"), by mouse or (`keyboard`) by Tab focus
 * and Enter, and returns the download: its suggested name and its bytes. */
async function download(page, view, format, keyboard) {
  const button = view.locator(`button.hv-export-${format}`);
  const event = page.waitForEvent("download", { timeout: 10000 });
  if (keyboard) {
    await button.focus();
    await page.keyboard.press("Enter");
  } else {
    await button.click();
  }
  const file = await event;
  return { name: file.suggestedFilename(), bytes: readFileSync(await file.path()) };
}

/** An SVG export, read back by the browser's XML parser: whether it parsed, its size, its
 * token texts, how many lines, cells and outlines it has, and what it says it shows. */
async function readSvg(page, bytes) {
  return page.evaluate(text => {
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const root = doc.documentElement;
    const all = sel => Array.from(doc.querySelectorAll(sel));
    return {
      parsed: doc.getElementsByTagName("parsererror").length === 0 && root.localName === "svg" &&
        root.namespaceURI === "http://www.w3.org/2000/svg",
      width: Number(root.getAttribute("width")), height: Number(root.getAttribute("height")),
      queries: all("text.hv-token-q").map(t => t.textContent),
      keys: all("text.hv-token-k").map(t => t.textContent),
      lines: all("line.hv-line").length,
      cells: all("rect.hv-cell").length,
      outlines: all("rect.hv-outline").length,
      raster: all("image, foreignObject").length,
      state: root.getAttribute("data-state"),
      drawn: root.getAttribute("data-drawn"),
      plot: (root.getAttribute("data-plot") || "").split(" ").map(Number),
    };
  }, bytes.toString("utf8"));
}

/** A PNG export: its size from its header (read here), and from the browser's decoder how many
 * of its pixels differ from its top-left corner (the background), in all and within `plot`
 * (x, y, width, height in the image's pixels: where the drawing is). */
async function readPng(page, bytes, plot) {
  const signature = bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  const header = { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
  const decoded = await page.evaluate(async ([b64, plot]) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    try { await img.decode(); } catch { return null; }
    const canvas = document.createElement("canvas");
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const ctx = canvas.getContext("2d");
    ctx.drawImage(img, 0, 0);
    const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let marked = 0, inPlot = 0;
    const [x0, y0, w, h] = plot.map(Math.round);
    for (let n = 0; n < px.length; n += 4) {
      if (Math.abs(px[n] - px[0]) + Math.abs(px[n + 1] - px[1]) + Math.abs(px[n + 2] - px[2]) <= 30) continue;
      marked++;
      const x = (n / 4) % canvas.width, y = Math.floor(n / 4 / canvas.width);
      if (x >= x0 && x < x0 + w && y >= y0 && y < y0 + h) inPlot++;
    }
    return { width: img.naturalWidth, height: img.naturalHeight, marked, inPlot, total: px.length / 4 };
  }, [bytes.toString("base64"), plot]);
  return { signature, header, decoded };
}

/** The SVG and PNG buttons: they are buttons, work by mouse and keyboard, and download what the
 * view draws now: an SVG whose tokens are text and whose lines or cells are the ones drawn (as
 * many, and the same data-drawn sums), and a PNG of the same picture; another head, another SVG.
 * `name`: the file name expected at the view's current state, if known. */
async function checkExport(c, page, view, { name, tag } = {}) {
  const buttons = await view.locator("button.hv-export-button").evaluateAll(bs => bs.map(b => [b.textContent, b.getAttribute("aria-label")]));
  c.ok(buttons.length === 2 && buttons.every(([t, l]) => l.includes(t)) && buttons.map(b => b[0]).join() === "SVG,PNG",
    `two export buttons, SVG and PNG, labelled with what they download: ${JSON.stringify(buttons)}`);
  const id = await view.getAttribute("data-head-view");
  const tokens = await view.locator(".hv-queries .hv-token").evaluateAll(items => items.map(i => i.textContent));
  const keyTokens = await view.locator(".hv-keys .hv-token").evaluateAll(items => items.map(i => i.textContent));

  /** Exports the SVG and checks it against what the view shows now; returns it. */
  const svgNow = async (what, keyboard) => {
    const file = await download(page, view, "svg", keyboard);
    const shown = await snapshot(view);
    const svg = await readSvg(page, file.bytes);
    const count = Number(shown.drawn.split(" ")[0]);
    const matrix = /mode=matrix/.test(shown.state);
    c.ok(new RegExp(`^${id}(-[a-z0-9-]+)?\\.svg$`).test(file.name), `${what}: the SVG is named after the view (${file.name})`);
    c.ok(svg.parsed, `${what}: the SVG parses as SVG`);
    c.ok(svg.raster === 0, `${what}: the SVG is drawn in vectors (${svg.raster} image or foreignObject elements)`);
    c.ok(JSON.stringify(svg.queries) === JSON.stringify(tokens) && JSON.stringify(svg.keys) === JSON.stringify(keyTokens),
      `${what}: the SVG has the ${tokens.length} + ${keyTokens.length} tokens as text (${svg.queries.length} + ${svg.keys.length}: ` +
      `${JSON.stringify(svg.queries.slice(0, 5))})`);
    const marks = matrix ? svg.cells + svg.outlines : svg.lines;
    c.ok(count > 0 && marks === count && (matrix ? svg.lines === 0 : svg.cells === 0),
      `${what}: the SVG has the ${count} ${matrix ? "cells and outlines" : "lines"} drawn (lines ${svg.lines}, cells ${svg.cells}, outlines ${svg.outlines})`);
    c.ok(svg.state === shown.state && svg.drawn === shown.drawn,
      `${what}: the SVG shows what the view shows (state ${svg.state} / ${shown.state}, drawn ${svg.drawn} / ${shown.drawn})`);
    return { ...file, svg, shown };
  };

  // With a token kept (it stays shown when the mouse goes to the buttons).
  await view.locator(".hv-queries .hv-token").nth(Math.min(3, tokens.length - 1)).click();
  const first = await svgNow("a kept query", false);
  const keep = file => writeFileSync(join(outDir, `export-${tag ? `${tag}-` : ""}${file.name}`), file.bytes); // to look at
  keep(first);
  if (name) c.ok(first.name === `${name}.svg`, `the SVG's name says what it shows: ${first.name}, expected ${name}.svg`);
  const png = await download(page, view, "png", false);
  keep(png);
  const ratio = await page.evaluate(() => window.devicePixelRatio || 1);
  const read = await readPng(page, png.bytes, first.svg.plot.map(v => v * ratio));
  const size = [Math.round(first.svg.width * ratio), Math.round(first.svg.height * ratio)];
  const canvas = await view.locator("canvas").evaluate(cv => [cv.width, cv.height]);
  c.ok(png.name === first.name.replace(/\.svg$/, ".png"), `the PNG is named as the SVG: ${png.name}`);
  c.ok(read.signature && read.decoded !== null, "the PNG is a PNG, and decodes");
  c.ok(read.header.width === size[0] && read.header.height === size[1] && read.decoded?.width === size[0] && read.decoded?.height === size[1],
    `the PNG is the SVG's picture at ${ratio} pixel(s) per CSS pixel: ${read.header.width}×${read.header.height}, expected ${size.join("×")}`);
  c.ok(read.header.width >= canvas[0] && read.header.height >= canvas[1],
    `the PNG holds the canvas (${canvas.join("×")}) and the tokens around it (${read.header.width}×${read.header.height})`);
  const share = read.decoded ? read.decoded.marked / read.decoded.total : 0;
  c.ok(share > 0.01, `the PNG is not blank: ${(100 * share).toFixed(1)}% of its pixels are not background`);
  c.ok(first.svg.plot.length === 4 && read.decoded?.inPlot > 0,
    `the PNG has the drawing where the SVG has it (${first.svg.plot.join(" ")}): ${read.decoded?.inPlot} pixels drawn there`);

  // By keyboard, and another head or another token gives another SVG.
  const headSelect = view.locator("select.hv-head");
  let second;
  if (await headSelect.count()) {
    const head = /head=1 /.test(first.shown.state) ? "0" : "1";
    await headSelect.selectOption(head);
    second = await svgNow(`head ${head}, by keyboard`, true);
    c.ok(new RegExp(`head${head}(-|\\.)`).test(second.name), `the SVG's name follows the head: ${second.name}`);
  } else {
    await view.locator(".hv-queries .hv-token").nth(0).click();
    second = await svgNow("another kept query, by keyboard", true);
  }
  c.ok(!second.bytes.equals(first.bytes) && second.svg.drawn !== first.svg.drawn,
    `another ${await headSelect.count() ? "head" : "query"}, another SVG (drawn ${first.svg.drawn} → ${second.svg.drawn})`);

  // Matrix mode: the cells and the row outline.
  await view.locator("button.hv-mode", { hasText: "matrix" }).click();
  const matrix = await svgNow("matrix mode", false);
  keep(matrix);
  c.ok(/-matrix\.svg$/.test(matrix.name) && matrix.svg.cells > 0 && matrix.svg.outlines === 1,
    `matrix mode exports its cells and the kept row's outline (${matrix.name}: ${matrix.svg.cells} cells, ${matrix.svg.outlines} outline)`);
  await view.locator("button.hv-mode", { hasText: "lines" }).click();
  // Back as it was: the first head, nothing kept, focused or pointed at.
  if (await headSelect.count()) await headSelect.selectOption(/head=(\w+)/.exec(first.shown.state)[1].replace("all", "-1"));
  const kept = /pin=q(\d+)/.exec((await snapshot(view)).state);
  if (kept) await view.locator(".hv-queries .hv-token").nth(Number(kept[1])).click();
  await page.evaluate(() => document.activeElement?.blur());
  await page.mouse.move(0, 0);
}

/** The static picture: hidden once the view is drawn, back in print, the view hidden there. */
async function checkFallback(c, page, view) {
  const shown = () => view.evaluate(host => ({
    img: getComputedStyle(host.querySelector("img")).display,
    root: getComputedStyle(host.querySelector(".hv-root")).display,
    export: getComputedStyle(host.querySelector(".hv-export")).display,
  }));
  const screen = await shown();
  c.ok(screen.img === "none" && screen.root !== "none", `on screen the picture is hidden: ${JSON.stringify(screen)}`);
  await page.emulateMedia({ media: "print" });
  const print = await shown();
  c.ok(print.img !== "none" && print.root === "none" && print.export === "none",
    `in print the picture is back, the view and its export buttons hidden: ${JSON.stringify(print)}`);
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
    await checkExport(c, page, view);
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
    await checkExport(c, page, view, { name: "view" });
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
    const oneBefore = await snapshot(one);
    await checkExport(c, page, two, { name: "two" });
    c.ok(JSON.stringify(await snapshot(one)) === JSON.stringify(oneBefore), "exporting one view changes nothing in the other");
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
        await checkExport(c, page, view, { name: "ch13-layer0-head2", tag: theme });
        const back = await snapshot(view);
        c.ok(back.state === opening.state && back.pixels === opening.pixels, `after the exports the view is as it opened: ${back.state}`);
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
    "two views independent, long inputs usable, themes followed, SVG and PNG exports as drawn, no console error, " +
    "nothing off the machine");
}

main().catch(e => {
  console.error(e);
  process.exit(1);
});
