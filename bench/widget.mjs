// Widget benchmark: time from `Workbench(graph)` to first pixels, and until the pass views are
// filled, for 5,000- and 10,000-node graphs in headless Chromium.
//
// For each size, bench/widget_state.py builds a synthetic graph, runs the kernel side and
// dumps the Workbench's synced state; this script loads oxiwork/static/widget.js into a blank
// page with a stand-in anywidget model holding that state, and measures from render() to the
// end of the first DAG draw (layout + canvas) and the browser's paint, then a pan/zoom redraw.
// Two ways to open, each in its own kernel process and page, in the same run:
//   eager        Workbench(graph, progressive=False): the whole pipeline before the first sync
//                (the behaviour before progressive opening); first pixels = passes filled.
//   progressive  Workbench(graph): the input DAG first; the page must then send load_passes,
//                the kernel's answer (timed in widget_state.py) is applied to the model and
//                the time to redraw the filled views is measured.
// Kernel + browser times add up because they happen one after the other in a notebook.
// Targets (first pixels): 5k < 1.5 s, 10k < 3 s. Prints numbers only; asserts nothing.
//
// Usage: node bench/widget.mjs [--shot dir] [--repeat N] [sizes...]   (needs npm ci + npm run build)

import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..");
const require = createRequire(join(root, "widget_js/package.json"));
const { chromium } = require("playwright-core");

const args = process.argv.slice(2);
let shotDir = null;
const si = args.indexOf("--shot");
if (si >= 0) {
  shotDir = args[si + 1];
  args.splice(si, 2);
  mkdirSync(shotDir, { recursive: true });
}
// --state file.json: draw a saved state (from widget_state.py's format) instead; for screenshots.
let stateArg = null;
const sti = args.indexOf("--state");
if (sti >= 0) {
  stateArg = args[sti + 1];
  args.splice(sti, 2);
}
// --first-only: progressive, first draw only (no pipeline), then a drag-pan of 60 frames: the
// 50,000-node target (first drawn < 3 s, pans at >= 30 frames per second).
const firstOnly = args.includes("--first-only");
if (firstOnly) args.splice(args.indexOf("--first-only"), 1);
// --repeat N: run each (size, mode) N times and keep the fastest (the machine is shared).
let repeat = 1;
const ri = args.indexOf("--repeat");
if (ri >= 0) {
  repeat = Math.max(1, Number(args[ri + 1]));
  args.splice(ri, 2);
}
const sizes = stateArg ? [0] : (args.length ? args : ["5000", "10000"]).map(Number);
const python = process.env.PYTHON || join(root, ".venv/bin/python");
const ORIGIN = "http://oxiwork.invalid";

const PAGE = `<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="${ORIGIN}/widget.css">
<style>body{margin:0;padding:16px;background:#fff}</style></head>
<body><div id="out" style="width:1400px"></div>
<script type="module">
  const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const decode = (state) => {
    for (const [k, v] of Object.entries(state)) if (v && typeof v === "object" && "b64" in v) state[k] = new DataView(b64(v.b64).buffer);
    return state;
  };
  const state = decode(await (await fetch("${ORIGIN}/state.json")).json());
  const loadedResp = await fetch("${ORIGIN}/loaded.json");
  const loaded = loadedResp.ok ? decode(await loadedResp.json()) : null;
  const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  class Model {
    constructor(s) { this.s = s; this.h = {}; this.sent = []; }
    get(k) { return this.s[k]; }
    set(k, v) { this.setMany({ [k]: v }); }
    // Like a widget manager applying one sync message: every value first, then the events.
    setMany(o) { Object.assign(this.s, o); for (const k of Object.keys(o)) for (const f of this.h["change:" + k] || []) f(); }
    emit(e, m) { for (const f of this.h[e] || []) f(m); }
    save_changes() {}
    on(e, f) { (this.h[e] ||= []).push(f); }
    off() {}
    send(m) { this.sent.push(m); }
  }
  const mod = await import("${ORIGIN}/widget.js");
  const model = new Model(state);
  const el = document.getElementById("out");
  await new Promise((r) => requestAnimationFrame(r));
  const t0 = performance.now();
  mod.default.render({ model, el });
  const dag = el.querySelector(".ow-dag");
  const root = el.querySelector(".ow-root");
  window.__result = { renderMs: performance.now() - t0, firstDrawMs: Number(root.dataset.firstDrawMs), drawn: Number(dag.dataset.drawn), nodes: Number(dag.dataset.nodes), draws: Number(dag.dataset.draws || 0), passesAtFirstDraw: root.dataset.passes };
  // One frame later: the time until the browser has painted it.
  await frame();
  window.__result.paintedMs = performance.now() - t0;
  if (loaded) {
    // The page asked for the passes after drawing; apply the kernel's answer, then its reply.
    const req = model.sent.find((m) => m.type === "load_passes");
    window.__result.requested = !!req;
    const t2 = performance.now();
    model.setMany(loaded);
    if (req) model.emit("msg:custom", { type: "ok", request_id: req.request_id, message: "passes computed" });
    window.__result.fillSyncMs = performance.now() - t2;
    await frame();
    window.__result.fillPaintedMs = performance.now() - t2;
    window.__result.passesAfter = root.dataset.passes;
    window.__result.requests = model.sent.filter((m) => m.type === "load_passes").length;
  }
  const canvas = dag.querySelector(".ow-dag-canvas");
  const t1 = performance.now();
  canvas.dispatchEvent(new WheelEvent("wheel", { deltaY: -200, clientX: 400, clientY: 300, bubbles: true, cancelable: true }));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  window.__result.zoomFrameMs = performance.now() - t1;
  window.__result.redrawMs = canvas.owLastDrawMs;
  // The sharp redraw after the wheel stops (big graphs scale their bitmap while it turns).
  await new Promise((r) => setTimeout(r, 400));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  // Pan: drag the background one step per frame for 60 frames; frames per second of the drag.
  const r0 = canvas.getBoundingClientRect();
  const px = r0.left + 8;
  const py = r0.bottom - 8;
  canvas.dispatchEvent(new PointerEvent("pointerdown", { clientX: px, clientY: py, bubbles: true, pointerId: 1 }));
  const t3 = performance.now();
  const draws0 = canvas.owDrawCount;
  let worst = 0;
  let last = t3;
  for (let i = 1; i <= 60; i++) {
    canvas.dispatchEvent(new PointerEvent("pointermove", { clientX: px + 4 * i, clientY: py - 2 * i, bubbles: true, pointerId: 1 }));
    await new Promise((r) => requestAnimationFrame(r));
    const now = performance.now();
    worst = Math.max(worst, now - last);
    last = now;
  }
  canvas.dispatchEvent(new PointerEvent("pointerup", { clientX: px + 240, clientY: py - 120, bubbles: true, pointerId: 1 }));
  window.__result.panFps = 60000 / (performance.now() - t3);
  window.__result.panWorstFrameMs = worst;
  window.__result.panDraws = canvas.owDrawCount - draws0;
  window.__result.panLastDrawMs = canvas.owLastDrawMs;
  window.__result.panLastBaseMs = canvas.owBaseMs;
  window.__result.panLastDrawMs = canvas.owLastDrawMs;
  window.__done = true;
</script></body></html>`;

const browser = await chromium.launch({
  executablePath: process.env.OXIWORK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
});
const tmp = mkdtempSync(join(tmpdir(), "owbench-"));
const rows = [];

/** One kernel run (widget_state.py) plus one page; returns the measurements. */
async function once(n, mode) {
  const stateFile = stateArg ?? join(tmp, `state-${n}-${mode}.json`);
  const loadedFile = stateFile.replace(/\.json$/, ".loaded.json");
  const kernel = stateArg
    ? { nodes: 0, edges: 0, workbench_s: 0, state_bytes: 0 }
    : JSON.parse(
        execFileSync(python, [join(here, "widget_state.py"), String(n), "layered", stateFile, ...(mode === "eager" ? ["--eager"] : firstOnly ? ["--no-passes"] : [])], { encoding: "utf8", maxBuffer: 1 << 26 })
          .trim()
          .split("\n")
          .pop(),
      );
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  await page.route(`${ORIGIN}/**`, (route) => {
    const path = new URL(route.request().url()).pathname;
    const files = {
      "/index.html": [PAGE, "text/html"],
      "/widget.js": [readFileSync(join(root, "oxiwork/static/widget.js")), "text/javascript"],
      "/widget.css": [readFileSync(join(root, "oxiwork/static/widget.css")), "text/css"],
      "/state.json": [readFileSync(stateFile), "application/json"],
    };
    if (mode === "progressive" && !stateArg && !firstOnly) files["/loaded.json"] = [readFileSync(loadedFile), "application/json"];
    const f = files[path];
    return f ? route.fulfill({ body: f[0], contentType: f[1] }) : route.fulfill({ status: 404 });
  });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${ORIGIN}/index.html`);
  await page.waitForFunction(() => window.__done === true, null, { timeout: 180000 });
  const r = await page.evaluate(() => window.__result);
  if (shotDir) {
    if (stateArg) {
      for (const tab of (process.env.OW_TABS ?? "sim").split(",").filter(Boolean)) await page.locator(`.ow-side .ow-tab[data-tab="${tab}"]`).click();
      await page.waitForTimeout(200);
    }
    await page.locator(".ow-root").screenshot({ path: join(shotDir, `bench-${n}-${mode}.png`) });
  }
  await page.close();
  // From `Workbench(graph)` to first pixels, and to the pass views filled (ms).
  const firstPixels = kernel.workbench_s * 1000 + r.paintedMs;
  const filled = mode === "eager" || stateArg || firstOnly ? firstPixels : firstPixels + kernel.load_passes_s * 1000 + r.fillPaintedMs;
  return { n, mode, ...r, kernel, errors, firstPixels, filled };
}

for (const n of sizes) {
  for (const mode of stateArg ? ["given"] : firstOnly ? ["progressive"] : ["eager", "progressive"]) {
    let best = null;
    for (let i = 0; i < repeat; i++) {
      const r = await once(n, mode);
      if (!best || r.filled + r.firstPixels < best.filled + best.firstPixels) best = r;
    }
    const r = best;
    const { kernel, errors } = r;
    const target = n <= 5000 ? 1500 : 3000;
    rows.push({ ...r, target });
    const prog = mode === "progressive" && !firstOnly
      ? ` | load_passes: kernel ${kernel.load_passes_s.toFixed(2)} s (pipeline ${kernel.passes_s.toFixed(2)} s), views filled in ${r.fillSyncMs.toFixed(0)} ms (painted ${r.fillPaintedMs.toFixed(0)} ms), requests ${r.requests}, ${r.passesAtFirstDraw} -> ${r.passesAfter}`
      : "";
    console.log(
      `${String(kernel.nodes).padStart(6)} nodes ${String(kernel.edges).padStart(6)} edges ${mode.padEnd(11)} | ` +
        `Workbench() to first pixels ${(r.firstPixels / 1000).toFixed(2)} s (target < ${(target / 1000).toFixed(1)} s, ${(r.firstPixels / target).toFixed(2)} of it; kernel ${kernel.workbench_s.toFixed(2)} s, browser painted ${r.paintedMs.toFixed(0)} ms, draw ${r.firstDrawMs.toFixed(0)} ms) | ` +
        `to pass views filled ${(r.filled / 1000).toFixed(2)} s${prog} | zoom frame ${r.zoomFrameMs.toFixed(0)} ms | pan ${r.panFps.toFixed(0)} fps (worst frame ${r.panWorstFrameMs.toFixed(0)} ms; last draw ${(r.panLastDrawMs ?? 0).toFixed(1)} ms, base ${(r.panLastBaseMs ?? 0).toFixed(1)} ms, ${r.panDraws} draws) | state ${(kernel.state_bytes / 1e6).toFixed(1)} MB` +
        (errors.length ? ` | ERRORS ${errors.join("; ")}` : ""),
    );
  }
  const e = rows.find((x) => x.n === n && x.mode === "eager");
  const p = rows.find((x) => x.n === n && x.mode === "progressive");
  if (e && p) console.log(`${String(n).padStart(6)} nodes: first pixels progressive/eager = ${(p.firstPixels / e.firstPixels).toFixed(2)}, pass views filled progressive/eager = ${(p.filled / e.filled).toFixed(2)}`);
}
await browser.close();
console.log(JSON.stringify(rows.map(({ n, mode, firstDrawMs, paintedMs, zoomFrameMs, panFps, panWorstFrameMs, kernel, drawn, nodes, firstPixels, filled, fillPaintedMs, requests }) => ({ n, mode, firstDrawMs, paintedMs, zoomFrameMs, panFps, panWorstFrameMs, kernel_s: kernel.workbench_s, load_passes_s: kernel.load_passes_s, fillPaintedMs, requests, firstPixelsMs: firstPixels, filledMs: filled, drawn, nodes }))));
