// What the two browser checks share (check_book.mjs, check_head_view.mjs): the options both
// take, a static file server on 127.0.0.1, and Debian's Chromium launched offline with every
// request that would leave the machine recorded and aborted.

import { chromium } from "playwright-core";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root. */
export const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The value after `name` on the command line, or `fallback`. */
export function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

/** Whether `name` is on the command line. */
export const flag = name => process.argv.includes(name);

/** --book DIR: the built book (default target/book/html). */
export const bookDir = resolve(repo, option("--book", "target/book/html"));
/** --chromium PATH: the browser (default $CHROMIUM or /usr/bin/chromium). */
export const chromiumPath = option("--chromium", process.env.CHROMIUM || "/usr/bin/chromium");
/** --out DIR: where screenshots go (default target/browser-check). */
export const outDir = resolve(repo, option("--out", "target/browser-check"));

// ---------------------------------------------------------------------------------------------
// A static file server on 127.0.0.1, on a free port.

const TYPES = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css",
  ".json": "application/json", ".png": "image/png", ".svg": "image/svg+xml",
  ".woff": "font/woff", ".woff2": "font/woff2", ".ttf": "font/ttf", ".otf": "font/otf",
  ".txt": "text/plain; charset=utf-8", ".toml": "text/plain; charset=utf-8",
};

/** Serves the files under `root` (a directory's index.html for the directory); resolves to
 * the listening server, whose `address().port` is the port. */
export function serve(root) {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://127.0.0.1").pathname);
    let file = normalize(join(root, path));
    if (file !== root && !file.startsWith(root + sep)) {
      res.writeHead(403).end();
      return;
    }
    try {
      if (statSync(file).isDirectory()) file = join(file, "index.html");
      const body = readFileSync(file);
      res.writeHead(200, { "content-type": TYPES[extname(file)] || "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  return new Promise(done => server.listen(0, "127.0.0.1", () => done(server)));
}

// ---------------------------------------------------------------------------------------------
// Chromium, headless, in a fresh profile, offline.

/**
 * Launches Chromium (`chromiumPath`) in a new temporary profile named after `name`, with a
 * window of `viewport`, and routes every request of every page through a guard: requests to
 * 127.0.0.1 or localhost, and data:, blob:, about: and file: URLs, go on; any other is
 * recorded in `offMachine` and aborted. `requests()` counts the requests routed; `close()`
 * closes the browser and removes the profile.
 */
export async function launchOffline(name, viewport) {
  const profile = mkdtempSync(join(tmpdir(), `${name}-profile-`));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    viewport,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run",
    ],
  });
  const offMachine = [];
  let requests = 0;
  await context.route("**/*", route => {
    const url = new URL(route.request().url());
    requests++;
    const local = ["127.0.0.1", "localhost"].includes(url.hostname);
    if (!local && !["data:", "blob:", "about:", "file:"].includes(url.protocol)) {
      offMachine.push(route.request().url());
      return route.abort();
    }
    return route.continue();
  });
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, offMachine, requests: () => requests, close };
}
