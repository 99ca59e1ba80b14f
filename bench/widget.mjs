// Widget benchmark: time to first draw of 5,000- and 10,000-node graphs in headless Chromium.
//
// For each size, bench/widget_state.py builds a synthetic graph, runs the engine and dumps the
// Workbench's synced state; this script loads oxiwork/static/widget.js into a blank page with
// a stand-in anywidget model holding that state, and measures from render() to the end of
// the first DAG draw (layout + canvas), then a pan/zoom redraw. Targets: 5k < 1.5 s,
// 10k < 3 s. Prints numbers only; it asserts nothing (timings are not tests).
//
// Usage: node bench/widget.mjs [--shot dir] [sizes...]    (needs npm ci + npm run build)

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
const sizes = stateArg ? [0] : (args.length ? args : ["5000", "10000"]).map(Number);
const python = process.env.PYTHON || join(root, ".venv/bin/python");
const ORIGIN = "http://oxiwork.invalid";

const PAGE = `<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="${ORIGIN}/widget.css">
<style>body{margin:0;padding:16px;background:#fff}</style></head>
<body><div id="out" style="width:1400px"></div>
<script type="module">
  const state = await (await fetch("${ORIGIN}/state.json")).json();
  const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  for (const [k, v] of Object.entries(state)) if (v && typeof v === "object" && "b64" in v) state[k] = new DataView(b64(v.b64).buffer);
  class Model {
    constructor(s) { this.s = s; this.h = {}; this.sent = []; }
    get(k) { return this.s[k]; }
    set(k, v) { this.s[k] = v; for (const f of this.h["change:" + k] || []) f(); }
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
  window.__result = { renderMs: performance.now() - t0, firstDrawMs: Number(el.querySelector(".ow-root").dataset.firstDrawMs), drawn: Number(dag.dataset.drawn), nodes: Number(dag.dataset.nodes), draws: Number(dag.dataset.draws || 0) };
  // One frame later: the time until the browser has painted it.
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  window.__result.paintedMs = performance.now() - t0;
  const canvas = dag.querySelector("canvas");
  const t1 = performance.now();
  canvas.dispatchEvent(new WheelEvent("wheel", { deltaY: -200, clientX: 400, clientY: 300, bubbles: true, cancelable: true }));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  window.__result.zoomFrameMs = performance.now() - t1;
  window.__result.redrawMs = canvas.owLastDrawMs;
  window.__done = true;
</script></body></html>`;

const browser = await chromium.launch({
  executablePath: process.env.OXIWORK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
});
const tmp = mkdtempSync(join(tmpdir(), "owbench-"));
const rows = [];
for (const n of sizes) {
  const stateFile = stateArg ?? join(tmp, `state-${n}.json`);
  const kernel = stateArg
    ? { nodes: 0, edges: 0, workbench_s: 0, state_bytes: 0 }
    : JSON.parse(execFileSync(python, [join(here, "widget_state.py"), String(n), "layered", stateFile], { encoding: "utf8" }).trim().split("\n").pop());
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  await page.route(`${ORIGIN}/**`, (route) => {
    const path = new URL(route.request().url()).pathname;
    const files = {
      "/index.html": [PAGE, "text/html"],
      "/widget.js": [readFileSync(join(root, "oxiwork/static/widget.js")), "text/javascript"],
      "/widget.css": [readFileSync(join(root, "oxiwork/static/widget.css")), "text/css"],
      "/state.json": [readFileSync(stateFile), "application/json"],
    };
    const f = files[path];
    return f ? route.fulfill({ body: f[0], contentType: f[1] }) : route.fulfill({ status: 404 });
  });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${ORIGIN}/index.html`);
  await page.waitForFunction(() => window.__done === true, null, { timeout: 60000 });
  const r = await page.evaluate(() => window.__result);
  if (shotDir) {
    if (stateArg) {
      for (const tab of (process.env.OW_TABS ?? "sim").split(",").filter(Boolean)) await page.locator(`.ow-side .ow-tab[data-tab="${tab}"]`).click();
      await page.waitForTimeout(200);
    }
    await page.locator(".ow-root").screenshot({ path: join(shotDir, `bench-${n}.png`) });
  }
  await page.close();
  const target = n <= 5000 ? 1500 : 3000;
  rows.push({ n, ...r, kernel, errors, target });
  console.log(
    `${String(kernel.nodes).padStart(6)} nodes ${String(kernel.edges).padStart(6)} edges | ` +
      `first draw ${r.firstDrawMs.toFixed(0)} ms (render ${r.renderMs.toFixed(0)} ms, painted ${r.paintedMs.toFixed(0)} ms; target < ${target} ms, ` +
      `${(r.paintedMs / target).toFixed(2)} of it) | zoom frame ${r.zoomFrameMs.toFixed(0)} ms (draw ${r.redrawMs.toFixed(0)} ms) | ` +
      `kernel side ${kernel.workbench_s.toFixed(2)} s (engine ${(kernel.engine_s ?? 0).toFixed(2)} s, view-model ${(kernel.view_s ?? 0).toFixed(2)} s), state ${(kernel.state_bytes / 1e6).toFixed(1)} MB` +
      (errors.length ? ` | ERRORS ${errors.join("; ")}` : ""),
  );
}
await browser.close();
console.log(JSON.stringify(rows.map(({ n, firstDrawMs, paintedMs, zoomFrameMs, kernel, drawn, nodes }) => ({ n, firstDrawMs, paintedMs, zoomFrameMs, kernel_s: kernel.workbench_s, drawn, nodes }))));
