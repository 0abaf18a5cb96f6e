// The interactive head view of "Attention, Step by Step" (additional-js in book.toml; inlined
// into the stand-alone pages of `attend --view` and `multihead --view`).
//
// Plain JavaScript, no library, nothing loaded from anywhere. It draws every element
//
//     <div class="head-view" data-head-view="ID"> static picture (optional) </div>
//
// from the data registered as window.attentionHeadViews["ID"], which figures::HeadView writes
// (crates/figures/src/head_view.rs: title, axes, queries, keys, heads, layers of
// [head][query][key] weights, and optionally start: the layer and head to open on). Each view
// keeps its state in its own object and touches only its own element, so several views on one
// page do not interfere. The static picture stays until the view is drawn, and for print
// (head-view.css); without JavaScript it is all there is.
//
// Its SVG and PNG buttons download what is drawn at that moment (layer, head, mode, the token
// kept or pointed at), with both token columns around the drawing, in the page's current theme
// colours: the SVG as vectors (lines, cells and the tokens as <text>), the PNG as the same
// picture painted on a canvas at the screen's pixel ratio. Both are painted by the same code as
// the view's own canvas (the painters below), from the same numbers.
//
// For tests (tools/browser/check_head_view.mjs) every view's root carries data-state (layer,
// head, mode, the token pointed at) and data-drawn (how many lines or cells were drawn, their
// total opacity, and a checksum of where they are); an exported SVG's root carries both too,
// and data-plot: where the drawing is in it (x y width height).
(function () {
  "use strict";

  if (typeof window.renderHeadViews === "function") {
    // Loaded twice (the book's copy and a page's own): the first copy does the work.
    window.renderHeadViews();
    return;
  }

  /** Above this many lines, the resting picture (nothing pointed at) keeps each query's
   *  RESTING_TOP largest weights per head. */
  const RESTING_LINES = 40000;
  const RESTING_TOP = 3;
  /** The SVG namespace of exported drawings: a name, not an address (nothing is loaded). */
  const SVG_NS = "http://www.w3.org/2000/svg";
  /** Canvas backing stores larger than this on a side are not drawn by every browser. */
  const MAX_CANVAS_PX = 16000;
  /** Nor larger than this in all (Safari's limit is about 16.7 million pixels, 4096²). */
  const MAX_CANVAS_AREA = 16000000;
  /** Backing-store pixels per CSS pixel for a `width` × `height` canvas: the device's pixel
   *  ratio, less where a side or the area would pass MAX_CANVAS_PX or MAX_CANVAS_AREA. */
  function canvasScale(width, height) {
    const side = MAX_CANVAS_PX / Math.max(width, height, 1);
    const area = Math.sqrt(MAX_CANVAS_AREA / Math.max(width * height, 1));
    return Math.min(window.devicePixelRatio || 1, side, area);
  }
  const views = [];

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = v;
      else if (k === "class") node.className = v;
      else node.setAttribute(k, v);
    }
    for (const child of children || []) node.appendChild(child);
    return node;
  }

  function shown(label) {
    return String(label).trim() === "" ? "\u2423" : String(label);
  }

  function quoted(label) {
    return "\u201c" + shown(label) + "\u201d";
  }

  /** Problems with the data, or null when it can be drawn. */
  function malformed(d) {
    if (!d || typeof d !== "object") return "no data";
    if (!Array.isArray(d.queries) || !Array.isArray(d.keys)) return "no token labels";
    if (!Array.isArray(d.layers) || d.layers.length === 0) return "no layers";
    for (const layer of d.layers) {
      const w = layer.weights;
      if (!Array.isArray(w) || w.length !== d.heads) return "a layer without its heads";
      for (const head of w) {
        if (!Array.isArray(head) || head.length !== d.queries.length) return "a head of the wrong shape";
        for (const row of head) {
          if (!Array.isArray(row) || row.length !== d.keys.length) return "a row of the wrong length";
        }
      }
    }
    return null;
  }

  class View {
    constructor(host, data) {
      this.host = host;
      this.d = data;
      const start = opening(data);
      this.s = {
        layer: start.layer,
        head: start.head, // -1: every head of the layer
        mode: "lines",
        hover: null, // {side: "q"|"k", index}
        focus: null,
        pin: null,
        cell: null, // matrix mode: {i, j} under the mouse
      };
      this.colours = null;
      this.layout = null;
      this.build();
      host.classList.add("hv-rendered");
      this.relayout();
    }

    // -- the page -------------------------------------------------------------------------

    build() {
      const d = this.d;
      const [layerWord, headWord] = Array.isArray(d.axes) ? d.axes : ["layer", "head"];
      this.headWord = headWord;
      this.layerWord = layerWord;
      const root = el("div", { class: "hv-root", role: "group" });
      root.setAttribute("aria-label", d.title ? String(d.title) : "attention head view");
      if (d.title) root.appendChild(el("div", { class: "hv-title", text: String(d.title) }));

      const controls = el("div", { class: "hv-controls" });
      if (d.layers.length > 1) {
        this.layerSelect = el("select", { class: "hv-layer" },
          d.layers.map((l, i) => el("option", { value: String(i), text: String(l.label) })));
        this.layerSelect.value = String(this.s.layer);
        this.layerSelect.addEventListener("change", () => {
          this.s.layer = Number(this.layerSelect.value);
          this.draw();
        });
        controls.appendChild(el("label", { class: "hv-control" },
          [el("span", { text: capital(layerWord) + " " }), this.layerSelect]));
      }
      if (d.heads > 1) {
        const options = [el("option", { value: "-1", text: `all ${d.heads}` })];
        for (let h = 0; h < d.heads; h++) options.push(el("option", { value: String(h), text: `${headWord} ${h}` }));
        this.headSelect = el("select", { class: "hv-head" }, options);
        this.headSelect.value = String(this.s.head);
        this.headSelect.addEventListener("change", () => this.setHead(Number(this.headSelect.value)));
        controls.appendChild(el("label", { class: "hv-control" },
          [el("span", { text: capital(headWord) + " " }), this.headSelect]));
        this.swatches = [];
        const legend = el("span", { class: "hv-swatches" });
        for (let h = 0; h < d.heads; h++) {
          const b = el("button", { type: "button", class: "hv-swatch", title: `${headWord} ${h} (click: this ${headWord} alone; again: all)` });
          b.setAttribute("aria-label", `${headWord} ${h}`);
          b.addEventListener("click", () => this.setHead(this.s.head === h ? -1 : h));
          this.swatches.push(b);
          legend.appendChild(b);
        }
        controls.appendChild(legend);
      }
      this.modeButtons = {};
      const modes = el("span", { class: "hv-modes", role: "group", "aria-label": "drawing" });
      for (const mode of ["lines", "matrix"]) {
        const b = el("button", { type: "button", class: "hv-mode", text: mode });
        b.addEventListener("click", () => {
          if (this.s.mode === mode) return;
          this.s.mode = mode;
          this.s.cell = null;
          this.relayout();
        });
        this.modeButtons[mode] = b;
        modes.appendChild(b);
      }
      controls.appendChild(modes);
      // Export: what is drawn now, as a vector drawing or an image (built by exportScene).
      const exports = el("span", { class: "hv-export", role: "group", "aria-label": "download what is drawn" });
      for (const [format, what] of [["svg", "an SVG drawing"], ["png", "a PNG image"]]) {
        const b = el("button", {
          type: "button", class: `hv-export-button hv-export-${format}`, text: format.toUpperCase(),
          title: `Download what is drawn now as ${what}`, "aria-label": `Download what is drawn as ${format.toUpperCase()}`,
        });
        b.addEventListener("click", () => this.download(format));
        exports.appendChild(b);
      }
      controls.appendChild(exports);
      root.appendChild(controls);

      this.queryList = this.tokenList("q", d.queries, "queries (attending from)");
      this.keyList = this.tokenList("k", d.keys, "keys (attended to)");
      this.canvas = el("canvas", { class: "hv-canvas", "aria-hidden": "true" });
      this.plot = el("div", { class: "hv-plot" }, [this.canvas]);
      this.body = el("div", { class: "hv-body" }, [
        el("div", { class: "hv-caption hv-caption-q" }, [
          el("span", { class: "hv-lines-only", text: "query" }),
          el("span", { class: "hv-matrix-only", text: "query \u2193 key \u2192" }),
        ]),
        el("div", { class: "hv-caption hv-caption-k", text: "key" }),
        this.queryList, this.plot, this.keyList,
      ]);
      this.scroller = el("div", { class: "hv-scroll" }, [this.body]);
      root.appendChild(this.scroller);
      // Below the drawing, where the eye goes after pointing at a token.
      this.readout = el("div", { class: "hv-readout", "aria-live": "polite" });
      root.appendChild(this.readout);
      this.root = root;
      this.host.appendChild(root);

      this.canvas.addEventListener("mousemove", e => this.onCanvasMove(e));
      this.canvas.addEventListener("mouseleave", () => {
        if (this.s.cell || this.s.hover) {
          this.s.cell = null;
          this.s.hover = null;
          this.draw();
        }
      });
      this.canvas.addEventListener("click", () => {
        if (this.s.cell) this.togglePin({ side: "q", index: this.s.cell.i });
      });
      if (typeof ResizeObserver === "function") {
        let queued = false;
        new ResizeObserver(() => {
          if (queued) return;
          queued = true;
          requestAnimationFrame(() => {
            queued = false;
            this.relayout();
          });
        }).observe(this.scroller);
      }
    }

    tokenList(side, labels, name) {
      const list = el("ol", { class: `hv-col hv-${side === "q" ? "queries" : "keys"}`, "aria-label": name });
      const items = labels.map((label, i) => {
        const item = el("li", { class: "hv-token", tabindex: i === 0 ? "0" : "-1", title: `${side === "q" ? "query" : "key"} ${i}: ${label}` });
        item.textContent = shown(label);
        item.dataset.index = String(i);
        item.addEventListener("mouseenter", () => { this.s.hover = { side, index: i }; this.draw(); });
        item.addEventListener("mouseleave", () => { this.s.hover = null; this.draw(); });
        item.addEventListener("focus", () => {
          this.setCurrent(side, i);
          this.s.focus = { side, index: i };
          this.draw();
        });
        item.addEventListener("blur", () => { this.s.focus = null; this.draw(); });
        item.addEventListener("click", () => this.togglePin({ side, index: i }));
        item.addEventListener("keydown", e => this.onKey(e, side, i));
        list.appendChild(item);
        return item;
      });
      if (side === "q") this.queryItems = items; else this.keyItems = items;
      return list;
    }

    /** Roving tabindex: one tab stop per list, on the token last visited. */
    setCurrent(side, i) {
      const items = side === "q" ? this.queryItems : this.keyItems;
      for (const item of items) item.tabIndex = -1;
      items[i].tabIndex = 0;
    }

    onKey(e, side, i) {
      const items = side === "q" ? this.queryItems : this.keyItems;
      const along = this.s.mode === "matrix" && side === "k" ? ["ArrowLeft", "ArrowRight"] : ["ArrowUp", "ArrowDown"];
      const across = this.s.mode === "lines" ? { ArrowLeft: "q", ArrowRight: "k" } : {};
      let to = null;
      if (e.key === along[0]) to = [side, i - 1];
      else if (e.key === along[1]) to = [side, i + 1];
      else if (e.key === "PageUp") to = [side, i - 10];
      else if (e.key === "PageDown") to = [side, i + 10];
      else if (e.key === "Home") to = [side, 0];
      else if (e.key === "End") to = [side, items.length - 1];
      else if (across[e.key] && across[e.key] !== side) to = [across[e.key], i];
      else if (e.key === "Enter" || e.key === " ") {
        this.togglePin({ side, index: i });
      } else if (e.key === "Escape") {
        this.s.pin = null;
        this.draw();
      } else if (!e.key.startsWith("Arrow")) {
        return;
      }
      // The view's keys stay in the view: mdBook would turn the page on Left and Right.
      e.preventDefault();
      e.stopPropagation();
      if (to) {
        const target = to[0] === "q" ? this.queryItems : this.keyItems;
        const j = Math.max(0, Math.min(target.length - 1, to[1]));
        target[j].focus({ preventScroll: false });
        if (typeof target[j].scrollIntoView === "function") target[j].scrollIntoView({ block: "nearest", inline: "nearest" });
      }
    }

    togglePin(p) {
      const pin = this.s.pin;
      this.s.pin = pin && pin.side === p.side && pin.index === p.index ? null : p;
      this.draw();
    }

    setHead(h) {
      this.s.head = h;
      if (this.headSelect) this.headSelect.value = String(h);
      this.draw();
    }

    onCanvasMove(e) {
      if (this.s.mode !== "matrix" || !this.layout) return;
      const r = this.canvas.getBoundingClientRect();
      const x = e.clientX - r.left;
      const y = e.clientY - r.top;
      const { cellW, qTop, qBottom } = this.layout;
      const j = Math.floor(x / cellW);
      let i = -1;
      for (let k = 0; k < qTop.length; k++) if (y >= qTop[k] && y < qBottom[k]) i = k;
      const cell = i >= 0 && j >= 0 && j < this.d.keys.length ? { i, j } : null;
      const same = (a, b) => (a && b ? a.i === b.i && a.j === b.j : a === b);
      if (!same(cell, this.s.cell)) {
        this.s.cell = cell;
        this.s.hover = cell ? { side: "q", index: cell.i } : null;
        this.draw();
      }
    }

    /** The token whose weights are shown: under the mouse, else focused, else pinned. */
    pointed() {
      return this.s.hover || this.s.focus || this.s.pin;
    }

    // -- colours and layout ---------------------------------------------------------------

    readColours() {
      const css = getComputedStyle(this.root);
      const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
      const sat = v("--hv-head-s", "70%");
      const light = v("--hv-head-l", "42%");
      const heads = [];
      for (let h = 0; h < this.d.heads; h++) {
        const hue = Math.round((205 + (h * 360) / this.d.heads) % 360);
        heads.push(`hsl(${hue}, ${sat}, ${light})`);
      }
      this.colours = {
        heads, accent: v("--hv-accent", "#1f6fd1"), fg: v("--hv-fg", "#222"), bg: v("--hv-bg", "#fff"),
        muted: v("--hv-muted", "#6b6b6b"), key: `${sat}|${light}`,
      };
      if (this.swatches) this.swatches.forEach((b, h) => { b.style.background = heads[h]; });
    }

    /** Colour of head h, or of the shown heads' mean (h < 0). */
    colour(h) {
      if (h < 0 || this.d.heads === 1) return this.colours.accent;
      return this.colours.heads[h];
    }

    relayout() {
      const matrix = this.s.mode === "matrix";
      this.root.classList.toggle("hv-mode-lines", !matrix);
      this.root.classList.toggle("hv-mode-matrix", matrix);
      for (const [mode, b] of Object.entries(this.modeButtons)) b.setAttribute("aria-pressed", String(mode === this.s.mode));
      const nk = this.d.keys.length;
      let cellW = 0;
      if (matrix) {
        const room = Math.max(120, this.scroller.clientWidth - this.queryList.offsetWidth - 24);
        cellW = Math.max(3, Math.min(28, Math.floor(room / nk)));
        this.root.classList.toggle("hv-dense", cellW < 12);
        for (const item of this.keyItems) item.style.width = `${cellW}px`;
        this.plot.style.width = `${cellW * nk}px`;
      } else {
        this.root.classList.remove("hv-dense");
        for (const item of this.keyItems) item.style.width = "";
        this.plot.style.width = "";
      }
      // Heights from the token rows themselves, so the drawing lines up with any font.
      const plotTop = this.plot.getBoundingClientRect().top;
      const rel = items => items.map(item => {
        const r = item.getBoundingClientRect();
        return [r.top - plotTop, r.bottom - plotTop];
      });
      const q = rel(this.queryItems);
      const k = matrix ? [] : rel(this.keyItems);
      const height = Math.max(
        this.queryList.offsetHeight,
        matrix ? 0 : this.keyList.offsetHeight,
        1,
      );
      const width = matrix ? cellW * nk : Math.max(60, this.plot.clientWidth);
      this.plot.style.height = `${height}px`;
      const scale = canvasScale(width, height);
      this.canvas.width = Math.max(1, Math.round(width * scale));
      this.canvas.height = Math.max(1, Math.round(height * scale));
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
      this.layout = {
        width, height, scale, cellW,
        rowH: q.length ? q[0][1] - q[0][0] : 20,
        qTop: q.map(r => r[0]), qBottom: q.map(r => r[1]),
        qY: q.map(r => (r[0] + r[1]) / 2), kY: k.map(r => (r[0] + r[1]) / 2),
        kTop: k.map(r => r[0]), kBottom: k.map(r => r[1]),
      };
      this.readColours();
      this.draw();
    }

    // -- drawing ----------------------------------------------------------------------------

    /** Weight of (query i, key j) for head h, or the mean over every head for h < 0. */
    weight(h, i, j) {
      if (h >= 0) return this.d.layers[this.s.layer].weights[h][i][j];
      return this.mean()[i * this.d.keys.length + j];
    }

    /** The mean of the current layer's heads, computed once per layer. */
    mean() {
      const l = this.s.layer;
      this.means = this.means || [];
      if (!this.means[l]) {
        const w = this.d.layers[l].weights;
        const nq = this.d.queries.length, nk = this.d.keys.length;
        const mean = new Float64Array(nq * nk);
        for (const head of w) {
          for (let i = 0; i < nq; i++) for (let j = 0; j < nk; j++) mean[i * nk + j] += head[i][j];
        }
        for (let n = 0; n < mean.length; n++) mean[n] /= w.length;
        this.means[l] = mean;
      }
      return this.means[l];
    }

    draw() {
      if (!this.layout) return;
      const ctx = this.canvas.getContext("2d");
      const { scale, width, height } = this.layout;
      ctx.setTransform(scale, 0, 0, scale, 0, 0);
      ctx.clearRect(0, 0, width, height);
      const p = this.pointed();
      const stats = makeStats();
      if (this.s.mode === "lines") this.drawLines(canvasPainter(ctx), p, stats);
      else this.drawMatrix(ctx, p, stats);
      ctx.globalAlpha = 1;
      this.shadeTokens(p);
      this.writeReadout(p);
      for (const [side, items] of [["q", this.queryItems], ["k", this.keyItems]]) {
        items.forEach((item, i) => {
          item.classList.toggle("hv-pointed", !!p && p.side === side && p.index === i);
          item.classList.toggle("hv-pinned", !!this.s.pin && this.s.pin.side === side && this.s.pin.index === i);
        });
      }
      if (this.swatches) this.swatches.forEach((b, h) => b.setAttribute("aria-pressed", String(this.s.head === h)));
      this.root.dataset.state = this.stateText(p);
      this.root.dataset.drawn = stats.text();
    }

    stateText(p) {
      const s = this.s;
      return `layer=${s.layer} head=${s.head < 0 ? "all" : s.head} mode=${s.mode} ` +
        `point=${p ? p.side + p.index : "none"} pin=${s.pin ? s.pin.side + s.pin.index : "none"}` +
        (s.cell ? ` cell=${s.cell.i},${s.cell.j}` : "");
    }

    shownHeads() {
      if (this.s.head >= 0) return [this.s.head];
      return Array.from({ length: this.d.heads }, (_, h) => h);
    }

    /** Lines mode, through `painter` (the canvas, or an export), in the plot's coordinates. */
    drawLines(painter, p, stats) {
      const { width, qY, kY, rowH } = this.layout;
      const heads = this.shownHeads();
      const x0 = 3, x1 = width - 3;
      // Several heads: each its own lane within a token's row, so their lines stay apart.
      const lane = new Map(heads.map((h, n) => [h, heads.length > 1 ? ((n + 0.5) / heads.length - 0.5) * rowH * 0.7 : 0]));
      const line = (h, i, j, w, faint) => {
        const alpha = faint ? 0.1 + 0.4 * w : Math.min(1, 0.12 + 0.88 * w);
        painter.line(x0, qY[i] + lane.get(h), x1, kY[j] + lane.get(h),
          { stroke: this.colour(h), alpha, width: faint ? 1 : 1 + 3 * w, cls: "hv-line" });
        stats.add(h, i, j, alpha);
      };
      const nq = this.d.queries.length, nk = this.d.keys.length;
      if (p) {
        for (const h of heads) {
          if (p.side === "q") {
            for (let j = 0; j < nk; j++) { const w = this.weight(h, p.index, j); if (w > 0) line(h, p.index, j, w, false); }
          } else {
            for (let i = 0; i < nq; i++) { const w = this.weight(h, i, p.index); if (w > 0) line(h, i, p.index, w, false); }
          }
        }
        return;
      }
      // Resting: every row faintly; with very many lines, only each row's largest weights
      // (chosen once per layer and heads).
      this.restingTop = nq * nk * heads.length > RESTING_LINES;
      const key = `${this.s.layer}|${this.s.head}`;
      this.resting = this.resting || new Map();
      if (!this.resting.has(key)) {
        const lines = [];
        for (const h of heads) {
          for (let i = 0; i < nq; i++) {
            let keys = [];
            for (let j = 0; j < nk; j++) {
              const w = this.weight(h, i, j);
              if (w < 0.01) continue;
              keys.push([j, w]);
              if (this.restingTop && keys.length > RESTING_TOP) {
                keys.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
                keys.pop();
              }
            }
            for (const [j, w] of keys) lines.push([h, i, j, w]);
          }
        }
        this.resting.set(key, lines);
      }
      for (const [h, i, j, w] of this.resting.get(key)) line(h, i, j, w, true);
    }

    /** Matrix mode on the view's canvas: the cells from a cache, then the outlines. */
    drawMatrix(ctx, p, stats) {
      const { height, width, scale } = this.layout;
      // The cells are drawn once into a canvas of their own (per layer, head, size and
      // colour); pointing only adds outlines on top, so long inputs stay responsive.
      const key = `${this.s.layer}|${this.s.head}|${this.layout.cellW}|${width}x${height}|${scale}|${this.colour(this.s.head)}`;
      if (!this.cells || this.cells.key !== key) {
        const canvas = document.createElement("canvas");
        canvas.width = this.canvas.width;
        canvas.height = this.canvas.height;
        const cx = canvas.getContext("2d");
        cx.setTransform(scale, 0, 0, scale, 0, 0);
        const drawn = makeStats();
        const max = this.drawCells(canvasPainter(cx), drawn);
        this.cells = { key, canvas, max, drawn };
      }
      this.matrixMax = this.cells.max;
      ctx.save();
      ctx.setTransform(1, 0, 0, 1, 0, 0);
      ctx.drawImage(this.cells.canvas, 0, 0);
      ctx.restore();
      stats.merge(this.cells.drawn);
      this.drawOutlines(canvasPainter(ctx), p, stats);
    }

    /** Matrix mode's cells, through `painter`; returns the largest weight (full colour). */
    drawCells(painter, stats) {
      const { cellW, qTop, qBottom } = this.layout;
      const h = this.s.head;
      const nq = this.d.queries.length, nk = this.d.keys.length;
      // Shading from 0 (none) to the largest weight shown (full colour), said in the readout:
      // over 128 keys most weights are small, and absolute shading would hide them.
      let max = 0;
      for (let i = 0; i < nq; i++) for (let j = 0; j < nk; j++) max = Math.max(max, this.weight(h, i, j));
      const colour = this.colour(h);
      for (let i = 0; i < nq; i++) {
        const top = qTop[i], rowH = qBottom[i] - qTop[i];
        for (let j = 0; j < nk; j++) {
          const w = this.weight(h, i, j);
          if (w <= 0) continue;
          painter.rect(j * cellW, top + 0.5, Math.max(1, cellW - (cellW > 6 ? 1 : 0)), rowH - 1,
            { fill: colour, alpha: w / max, cls: "hv-cell" });
          stats.add(h, i, j, w / max);
        }
      }
      return max;
    }

    /** Matrix mode's outlines: the row or column pointed at, and the cell under the mouse. */
    drawOutlines(painter, p, stats) {
      const { cellW, qTop, qBottom, height } = this.layout;
      const nk = this.d.keys.length;
      const fg = this.colours.fg;
      if (p && p.side === "q") {
        painter.rect(0.75, qTop[p.index] + 0.75, nk * cellW - 1.5, qBottom[p.index] - qTop[p.index] - 1.5,
          { stroke: fg, width: 1.5, cls: "hv-outline" });
        stats.count++;
      } else if (p && p.side === "k") {
        painter.rect(p.index * cellW + 0.75, 0.75, cellW - 1.5, height - 1.5, { stroke: fg, width: 1.5, cls: "hv-outline" });
        stats.count++;
      }
      if (this.s.cell) {
        const { i, j } = this.s.cell;
        painter.rect(j * cellW + 1, qTop[i] + 1, cellW - 2, qBottom[i] - qTop[i] - 2,
          { stroke: fg, width: 2.5, cls: "hv-cell-outline" });
      }
    }

    // -- export ---------------------------------------------------------------------------

    /** The file name of an export, without its extension: the view's id, then the layer,
     *  head and mode shown (e.g. ch13-layer0-head2, view-head-all-matrix). */
    exportName() {
      const d = this.d, s = this.s;
      const parts = [slug(this.host.getAttribute("data-head-view"))];
      if (d.layers.length > 1) parts.push(`${slug(this.layerWord)}${s.layer}`);
      if (d.heads > 1) parts.push(s.head >= 0 ? `${slug(this.headWord)}${s.head}` : `${slug(this.headWord)}-all`);
      if (s.mode === "matrix") parts.push("matrix");
      return parts.join("-");
    }

    /** The line under an export's title: what it shows. */
    exportCaption(p) {
      const d = this.d, s = this.s, parts = [];
      if (d.layers.length > 1) parts.push(String(d.layers[s.layer].label));
      if (d.heads > 1) {
        parts.push(s.head >= 0 ? `${this.headWord} ${s.head}`
          : s.mode === "matrix" ? `the mean of the ${d.heads} ${this.headWord}s` : `all ${d.heads} ${this.headWord}s`);
      }
      if (s.mode === "matrix") parts.push(`shading: 0 to ${this.matrixMax.toFixed(3)}`);
      if (p) {
        const kept = s.pin && s.pin.side === p.side && s.pin.index === p.index ? " (kept)" : "";
        parts.push(`${p.side === "q" ? "query" : "key"} ${p.index} ${quoted(p.side === "q" ? d.queries[p.index] : d.keys[p.index])}${kept}`);
      }
      return parts.join(" \u00b7 ");
    }

    /** Where an export puts everything, in CSS pixels: the tokens' column and row, the plot
     *  (the canvas's drawing, at its size on the page), and the whole picture's size. */
    exportLayout() {
      const L = this.layout, d = this.d;
      const token = getComputedStyle(this.queryItems[0]);
      const rootCss = getComputedStyle(this.root);
      const m = {
        family: token.fontFamily, size: parseFloat(token.fontSize) || 13,
        ui: rootCss.fontFamily, base: parseFloat(rootCss.fontSize) || 14, pad: 10,
      };
      const ctx = document.createElement("canvas").getContext("2d");
      const measure = (text, px, family, bold) => {
        ctx.font = `${bold ? "700 " : ""}${px}px ${family}`;
        return ctx.measureText(text).width;
      };
      const widest = (labels, px) => labels.reduce((w, t) => Math.max(w, measure(shown(t), px, m.family, true)), 0);
      const matrix = this.s.mode === "matrix";
      m.tpad = Math.round(0.45 * m.size);
      m.kSize = matrix ? Math.min(m.size, Math.max(2, L.cellW - 1)) : m.size;
      m.qW = Math.ceil(widest(d.queries, m.size) + 2 * m.tpad);
      m.kW = Math.ceil(widest(d.keys, m.kSize) + 2 * m.tpad);
      m.title = d.title ? String(d.title) : "";
      m.caption = this.exportCaption(this.pointed());
      m.titleY = m.pad + 0.75 * m.base * 1.1;
      m.captionY = m.pad + (m.title ? 1.5 * m.base * 1.1 : 0) + 0.75 * m.base;
      const top = m.captionY + 0.75 * m.base + 8;
      m.plotX = m.pad + m.qW;
      m.plotY = Math.round(top + (matrix ? m.kW : 0));
      m.width = Math.ceil(Math.max(
        m.plotX + L.width + (matrix ? 0 : m.kW) + m.pad,
        2 * m.pad + measure(m.title, 1.1 * m.base, m.ui, true),
        2 * m.pad + measure(m.caption, 0.9 * m.base, m.ui, false),
      ));
      m.height = Math.ceil(m.plotY + L.height + m.pad);
      return m;
    }

    /** Paints what the view shows now through `painter`, laid out by `m` (exportLayout):
     *  background, title, caption, both token columns (shaded, outlined and bold as on the page)
     *  and the drawing. Returns what the drawing drew (as data-drawn counts it). */
    paintExport(painter, m) {
      const L = this.layout, d = this.d, c = this.colours, h = this.s.head;
      const p = this.pointed();
      const matrix = this.s.mode === "matrix";
      painter.rect(0, 0, m.width, m.height, { fill: c.bg, cls: "hv-background" });
      if (m.title) painter.text(m.pad, m.titleY, m.title, { fill: c.fg, size: 1.1 * m.base, bold: true, family: m.ui, cls: "hv-title" });
      painter.text(m.pad, m.captionY, m.caption, { fill: c.muted, size: 0.9 * m.base, family: m.ui, cls: "hv-caption" });
      const colour = this.colour(h);
      const token = (side, i, box, at) => {
        if (p && p.side !== side) {
          const w = p.side === "q" ? this.weight(h, p.index, i) : this.weight(h, i, p.index);
          if (w > 0) painter.rect(box[0], box[1], box[2], box[3], { fill: colour, alpha: Math.round(w * 70) / 100, cls: "hv-shade" });
        }
        if (p && p.side === side && p.index === i) {
          painter.rect(box[0] + 1, box[1] + 1, box[2] - 2, box[3] - 2, { stroke: c.accent, width: 2, cls: "hv-token-outline" });
        }
        const kept = !!this.s.pin && this.s.pin.side === side && this.s.pin.index === i;
        const label = shown(side === "q" ? d.queries[i] : d.keys[i]);
        painter.text(at.x, at.y, label, {
          fill: c.fg, size: side === "k" ? m.kSize : m.size, bold: kept, family: m.family,
          anchor: at.anchor, vertical: at.vertical, cls: `hv-token hv-token-${side}`,
        });
      };
      d.queries.forEach((_, i) => token("q", i,
        [m.pad, m.plotY + L.qTop[i], m.qW, L.qBottom[i] - L.qTop[i]],
        { x: m.plotX - m.tpad, y: m.plotY + L.qY[i], anchor: "end" }));
      d.keys.forEach((_, j) => token("k", j, matrix
        ? [m.plotX + j * L.cellW, m.plotY - m.kW, L.cellW, m.kW]
        : [m.plotX + L.width, m.plotY + L.kTop[j], m.kW, L.kBottom[j] - L.kTop[j]],
      matrix
        ? { x: m.plotX + (j + 0.5) * L.cellW, y: m.plotY - m.tpad, vertical: true }
        : { x: m.plotX + L.width + m.tpad, y: m.plotY + L.kY[j] }));
      const plot = shifted(painter, m.plotX, m.plotY);
      const stats = makeStats();
      if (matrix) {
        this.drawCells(plot, stats);
        this.drawOutlines(plot, p, stats);
      } else {
        this.drawLines(plot, p, stats);
      }
      return stats;
    }

    /** What the view shows now, as an SVG document (text). */
    toSvg() {
      const m = this.exportLayout();
      const out = [];
      const stats = this.paintExport(svgPainter(out, colourSpeller(), m.family), m);
      const label = [m.title, m.caption].filter(Boolean).join(": ");
      return '<?xml version="1.0" encoding="UTF-8"?>\n' +
        `<svg xmlns="${SVG_NS}" width="${m.width}" height="${m.height}" ` +
        `viewBox="0 0 ${m.width} ${m.height}" font-family="${xml(m.family)}" xml:space="preserve" ` +
        `data-state="${xml(this.stateText(this.pointed()))}" data-drawn="${stats.text()}" ` +
        `data-plot="${m.plotX} ${m.plotY} ${this.layout.width} ${this.layout.height}">\n` +
        `<title>${xml(label || "attention head view")}</title>\n${out.join("\n")}\n</svg>\n`;
    }

    /** What the view shows now, as a canvas: the picture of toSvg at the device's pixel
     *  ratio (less where a side or the area would pass MAX_CANVAS_PX or MAX_CANVAS_AREA);
     *  null when the browser gives no canvas to draw on. */
    toCanvas() {
      const m = this.exportLayout();
      const scale = canvasScale(m.width, m.height);
      const canvas = document.createElement("canvas");
      canvas.width = Math.max(1, Math.round(m.width * scale));
      canvas.height = Math.max(1, Math.round(m.height * scale));
      const ctx = canvas.getContext("2d");
      if (!ctx) return null;
      ctx.setTransform(scale, 0, 0, scale, 0, 0);
      this.paintExport(canvasPainter(ctx), m);
      return canvas;
    }

    download(format) {
      const name = this.exportName();
      if (format === "svg") {
        save(new Blob([this.toSvg()], { type: "image/svg+xml" }), `${name}.svg`);
      } else {
        // A browser that cannot make the PNG (a canvas too large for it) says so in the
        // readout rather than doing nothing.
        const failed = () => {
          this.readout.textContent = "The PNG could not be made (the picture is too large " +
            "for this browser); the SVG button saves the same picture.";
        };
        let canvas = null;
        try { canvas = this.toCanvas(); } catch (e) { canvas = null; }
        if (!canvas) { failed(); return; }
        canvas.toBlob(blob => { if (blob) save(blob, `${name}.png`); else failed(); }, "image/png");
      }
    }

    /** The other side's tokens, shaded by their weight to or from the token pointed at. */
    shadeTokens(p) {
      const h = this.s.head;
      const clear = items => items.forEach(item => { item.style.background = ""; item.removeAttribute("data-weight"); });
      clear(this.queryItems);
      clear(this.keyItems);
      if (!p) return;
      const other = p.side === "q" ? this.keyItems : this.queryItems;
      const colour = this.colour(h);
      other.forEach((item, n) => {
        const w = p.side === "q" ? this.weight(h, p.index, n) : this.weight(h, n, p.index);
        item.dataset.weight = w.toFixed(3);
        if (w > 0) item.style.background = `color-mix(in srgb, ${colour} ${Math.round(w * 70)}%, transparent)`;
      });
    }

    writeReadout(p) {
      const d = this.d, h = this.s.head;
      const which = d.heads === 1 ? "" : h >= 0 ? `${this.headWord} ${h}` : `the mean of the ${d.heads} ${this.headWord}s`;
      const suffix = which ? ` (${which})` : "";
      const scale = this.s.mode === "matrix"
        ? ` Shading: none for 0, full colour for ${this.matrixMax.toFixed(3)}, the largest weight shown.` : "";
      if (this.s.mode === "matrix" && this.s.cell) {
        const { i, j } = this.s.cell;
        this.readout.textContent = `query ${i} ${quoted(d.queries[i])} \u2192 key ${j} ${quoted(d.keys[j])}: ` +
          `${this.weight(h, i, j).toFixed(3)}${suffix}.${scale}`;
        return;
      }
      if (!p) {
        const top = this.s.mode === "lines" && this.restingTop
          ? ` Until then each query shows its ${RESTING_TOP} largest weights.` : "";
        const all = d.heads > 1 && h < 0
          ? (this.s.mode === "lines"
            ? ` All ${d.heads} ${this.headWord}s: each draws its own lines in its own colour, and the weights printed here are their mean.`
            : ` All ${d.heads} ${this.headWord}s: each cell shows their mean.`)
          : "";
        this.readout.textContent = "Point at a token (mouse, or Tab and the arrow keys) to see its weights; " +
          `click or Enter keeps it.${all}${top}${scale}`;
        return;
      }
      const from = p.side === "q";
      const n = from ? d.keys.length : d.queries.length;
      const top = [];
      for (let m = 0; m < n; m++) top.push([m, from ? this.weight(h, p.index, m) : this.weight(h, m, p.index)]);
      top.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
      const labels = from ? d.keys : d.queries;
      const best = top.slice(0, 3).filter(t => t[1] > 0).map(t => `${quoted(labels[t[0]])} ${t[1].toFixed(3)}`);
      const pinned = this.s.pin && this.s.pin.side === p.side && this.s.pin.index === p.index ? " [kept]" : "";
      this.readout.textContent = (from
        ? `query ${p.index} ${quoted(d.queries[p.index])}${suffix} attends most to ${best.join(", ") || "nothing"}${pinned}.`
        : `key ${p.index} ${quoted(d.keys[p.index])}${suffix} is attended most by ${best.join(", ") || "nothing"}${pinned}.`) + scale;
    }
  }

  /** What was drawn, in numbers (for tests): how many lines or cells, their total opacity, and
   *  a sum that also depends on which (head, query, key) each one was. */
  function makeStats() {
    return {
      count: 0, alpha: 0, where: 0,
      add(h, i, j, alpha) {
        this.count++;
        this.alpha += alpha;
        this.where += alpha * (((h * 7 + i * 131 + j * 31) % 97) + 1);
      },
      merge(other) {
        this.count += other.count;
        this.alpha += other.alpha;
        this.where += other.where;
      },
      text() {
        return `${this.count} ${this.alpha.toFixed(3)} ${this.where.toFixed(3)}`;
      },
    };
  }

  // -- painters: one drawing, on a canvas or as SVG ----------------------------------------
  //
  // The view draws through a painter with three calls, in CSS pixels:
  //   line(x0, y0, x1, y1, {stroke, alpha, width, cls})
  //   rect(x, y, w, h, {fill, alpha, stroke, width, cls})   (a fill, an outline, or both)
  //   text(x, y, s, {fill, size, bold, anchor: "start"|"end", vertical, cls})
  // (y of a text: the middle of its line; vertical: rotated to read upwards from (x, y)).
  // canvasPainter draws on a 2D context, svgPainter writes SVG elements, so the canvas, the
  // PNG and the SVG are the same drawing from the same numbers.

  function canvasPainter(ctx) {
    return {
      line(x0, y0, x1, y1, o) {
        ctx.globalAlpha = o.alpha === undefined ? 1 : o.alpha;
        ctx.strokeStyle = o.stroke;
        ctx.lineWidth = o.width;
        ctx.beginPath();
        ctx.moveTo(x0, y0);
        ctx.lineTo(x1, y1);
        ctx.stroke();
      },
      rect(x, y, w, h, o) {
        if (o.fill) {
          ctx.globalAlpha = o.alpha === undefined ? 1 : o.alpha;
          ctx.fillStyle = o.fill;
          ctx.fillRect(x, y, w, h);
        }
        if (o.stroke) {
          ctx.globalAlpha = 1;
          ctx.strokeStyle = o.stroke;
          ctx.lineWidth = o.width;
          ctx.strokeRect(x, y, w, h);
        }
      },
      text(x, y, s, o) {
        ctx.globalAlpha = 1;
        ctx.fillStyle = o.fill;
        ctx.font = `${o.bold ? "700 " : ""}${o.size}px ${o.family}`;
        ctx.textAlign = o.anchor === "end" ? "right" : "left";
        ctx.textBaseline = "alphabetic";
        ctx.save();
        ctx.translate(x, y);
        if (o.vertical) ctx.rotate(-Math.PI / 2);
        ctx.fillText(s, 0, 0.35 * o.size);
        ctx.restore();
      },
    };
  }

  /** Numbers in SVG: at most 2 decimals, no trailing zeros. */
  function num(x) {
    return String(Math.round(x * 100) / 100);
  }

  /** Text for XML: escaped, and without the characters XML 1.0 does not allow. */
  function xml(text) {
    return String(text)
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, "\ufffd")
      .replace(/[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]/g, c => (c.length === 2 ? c : "\ufffd"))
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&apos;");
  }

  /** A painter that collects SVG elements in `out` (an array of strings); texts in `family`
   *  leave it to the <svg> element's font-family. */
  function svgPainter(out, colour, family) {
    const opacity = (name, a) => (a === undefined || a >= 1 ? "" : ` ${name}="${+Math.max(0, a).toFixed(3)}"`);
    return {
      line(x0, y0, x1, y1, o) {
        out.push(`<line class="${o.cls}" x1="${num(x0)}" y1="${num(y0)}" x2="${num(x1)}" y2="${num(y1)}" ` +
          `stroke="${colour(o.stroke)}" stroke-width="${num(o.width)}"${opacity("stroke-opacity", o.alpha)}/>`);
      },
      rect(x, y, w, h, o) {
        const fill = o.fill ? `fill="${colour(o.fill)}"${opacity("fill-opacity", o.alpha)}` : `fill="none"`;
        const stroke = o.stroke ? ` stroke="${colour(o.stroke)}" stroke-width="${num(o.width)}"` : "";
        out.push(`<rect class="${o.cls}" x="${num(x)}" y="${num(y)}" width="${num(w)}" height="${num(h)}" ${fill}${stroke}/>`);
      },
      text(x, y, s, o) {
        const turn = o.vertical ? ` transform="rotate(-90 ${num(x)} ${num(y)})"` : "";
        const anchor = o.anchor === "end" ? ` text-anchor="end"` : "";
        const bold = o.bold ? ` font-weight="700"` : "";
        const font = o.family && o.family !== family ? ` font-family="${xml(o.family)}"` : "";
        out.push(`<text class="${o.cls}" x="${num(x)}" y="${num(y)}" dy="0.35em" font-size="${num(o.size)}"` +
          `${font}${bold}${anchor}${turn} fill="${colour(o.fill)}">${xml(s)}</text>`);
      },
    };
  }

  /** A colour as a canvas writes it (#rrggbb, or rgba(…) when translucent): one spelling every
   *  SVG reader knows, whatever CSS syntax the theme used. */
  function colourSpeller() {
    const ctx = document.createElement("canvas").getContext("2d");
    const known = new Map();
    return c => {
      if (!known.has(c)) {
        ctx.fillStyle = "#000000";
        ctx.fillStyle = c;
        known.set(c, ctx.fillStyle);
      }
      return known.get(c);
    };
  }

  /** `painter`, moved right by dx and down by dy. */
  function shifted(painter, dx, dy) {
    return {
      line: (x0, y0, x1, y1, o) => painter.line(x0 + dx, y0 + dy, x1 + dx, y1 + dy, o),
      rect: (x, y, w, h, o) => painter.rect(x + dx, y + dy, w, h, o),
      text: (x, y, t, o) => painter.text(x + dx, y + dy, t, o),
    };
  }

  /** A file name part: lower case letters, digits and dashes. */
  function slug(text) {
    return String(text).toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "") || "view";
  }

  /** Hands `blob` to the browser as a download named `name`. */
  function save(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    a.style.display = "none";
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 30000);
  }

  /** The layer and head a view opens on: the data's `start` if it names ones the view has
   *  (head null: all of them), else the first layer with all its heads. */
  function opening(d) {
    const all = d.heads > 1 ? -1 : 0;
    const st = d.start && typeof d.start === "object" ? d.start : null;
    const inRange = (v, n) => Number.isInteger(v) && v >= 0 && v < n;
    if (!st || !inRange(st.layer, d.layers.length)) return { layer: 0, head: all };
    return { layer: st.layer, head: inRange(st.head, d.heads) ? st.head : all };
  }

  function capital(word) {
    const s = String(word);
    return s.charAt(0).toUpperCase() + s.slice(1);
  }

  /** Draws every head view on the page whose data is registered and which is not drawn yet. */
  function renderHeadViews() {
    const registry = window.attentionHeadViews || {};
    for (const host of document.querySelectorAll("div.head-view[data-head-view]")) {
      if (host.classList.contains("hv-rendered") || host.hvFailed) continue;
      const id = host.getAttribute("data-head-view");
      if (!Object.prototype.hasOwnProperty.call(registry, id)) continue;
      const problem = malformed(registry[id]);
      if (problem) {
        host.hvFailed = true;
        host.appendChild(el("p", { class: "hv-note", text: `(The interactive view "${id}" cannot be drawn: ${problem}.)` }));
        continue;
      }
      views.push(new View(host, registry[id]));
    }
  }

  /** A theme change (mdBook's theme picker, or the system's light/dark setting) recolours. */
  function recolour() {
    for (const view of views) {
      view.readColours();
      view.draw();
    }
  }

  window.renderHeadViews = renderHeadViews;
  if (typeof MutationObserver === "function") {
    new MutationObserver(recolour).observe(document.documentElement, { attributes: true, attributeFilter: ["class"] });
  }
  if (window.matchMedia) {
    const dark = window.matchMedia("(prefers-color-scheme: dark)");
    if (dark.addEventListener) dark.addEventListener("change", recolour);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", renderHeadViews);
  } else {
    renderHeadViews();
  }
  window.addEventListener("load", () => {
    renderHeadViews();
    for (const host of document.querySelectorAll("div.head-view[data-head-view]")) {
      if (!host.classList.contains("hv-rendered") && !host.hvFailed) {
        host.hvFailed = true;
        host.appendChild(el("p", { class: "hv-note", text: "(The interactive view's data did not load; the picture above shows the weights.)" }));
      }
    }
  });
})();
