// End-to-end check of the workbench in JupyterLab, driven by playwright-core and Debian's
// Chromium (no downloaded browser). Started by test_workbench_browser.py, which runs the
// Jupyter server; this script opens notebooks/workbench.ipynb, runs it and checks what the
// user sees against what the kernel holds. Prints one JSON line of results; exits 1 on the
// first failed check (its message says which).
//
// Usage: node workbench_e2e.mjs <lab url of the notebook> <artifacts dir> [<Notebook 7 url>]

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { checker, launch } from "./chromium.mjs";

const [url, artifacts, nb7url] = process.argv.slice(2);
mkdirSync(artifacts, { recursive: true });
const results = { checks: [], console_errors: [], dialogs: 0, skipped: [] };
const t0 = Date.now();
const log = (msg) => process.stderr.write(`[e2e ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);

const check = checker(results, log);

const browser = await launch();
async function newPage() {
  // A laptop screen (issue 15): every view must work, and is screenshot, at 1280x800.
  const p = await browser.newPage({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  p.on("console", (m) => {
    if (m.type() === "error") results.console_errors.push(m.text());
  });
  p.on("pageerror", (e) => results.console_errors.push(`pageerror: ${e.message}`));
  p.on("dialog", async (d) => {
    results.dialogs++;
    await d.dismiss();
  });
  return p;
}
let page = await newPage();

/** Runs Python in the notebook's kernel and returns its stdout (and any error). */
async function py(code) {
  return page.evaluate(async (code) => {
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    let out = "";
    const future = kernel.requestExecute({ code, store_history: false });
    future.onIOPub = (msg) => {
      if (msg.header.msg_type === "stream") out += msg.content.text;
      if (msg.header.msg_type === "error") out += `PYERROR ${msg.content.ename}: ${msg.content.evalue}`;
    };
    await future.done;
    return out.trim();
  }, code);
}

const widget = (i) => page.locator(".ow-root").nth(i);
const shot = async (loc, name) => {
  await loc.scrollIntoViewIfNeeded();
  await page.waitForTimeout(150); // one animation frame for the canvases
  await loc.screenshot({ path: join(artifacts, `${name}.png`) });
};
/** Clicks node `id` of widget `i` through the DAG's hit-test API. */
async function clickNode(i, id, opts = {}) {
  const dag = widget(i).locator(".ow-dag");
  await dag.scrollIntoViewIfNeeded();
  const p = await dag.locator(".ow-dag-canvas").evaluate((c, id) => c.owClientPos(id), id);
  if (!p) throw new Error(`node ${id} is not drawn in widget ${i}`);
  await page.mouse.click(p.x, p.y, opts);
}
const waitAttr = (loc, attr, value, timeout = 15000) =>
  loc.evaluate(
    (el, [attr, value, timeout]) =>
      new Promise((res, rej) => {
        const t = Date.now();
        const tick = () => {
          if (el.getAttribute(attr) === value) return res(true);
          if (Date.now() - t > timeout) return rej(new Error(`${attr} is ${el.getAttribute(attr)}, wanted ${value}`));
          setTimeout(tick, 25);
        };
        tick();
      }),
    [attr, String(value), timeout],
  );

try {
  log(`open ${url}`);
  await page.goto(url);
  await page.waitForFunction(
    () => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status === "idle",
    null,
    { timeout: 60000 },
  );
  log("kernel idle; run all");
  await page.evaluate(() => window.jupyterapp.commands.execute("notebook:run-all-cells"));
  await page.waitForFunction(() => document.querySelectorAll(".ow-root .ow-dag[data-draws]").length >= 3, null, { timeout: 60000 });
  log("three widgets drawn");

  // 0. Progressive opening: each workbench drew its input DAG with the pass views pending,
  //    then asked for the passes and filled them in.
  for (let i = 0; i < 3; i++) {
    await waitAttr(widget(i), "data-passes", "ready", 60000);
    const d = await widget(i).evaluate((el) => ({ ...el.dataset }));
    check(`widget ${i} drew its DAG before the passes were computed`, d.passesAtFirstDraw === "pending", JSON.stringify(d));
    check(`widget ${i} filled the pass views after its first draw`, Number(d.passesMs) > Number(d.firstDrawMs), `first draw ${d.firstDrawMs} ms, passes ${d.passesMs} ms`);
  }
  check("the kernel computed the passes on the frontend's request", (await py("print(w.passes_loaded, big.passes_loaded, hostile.passes_loaded)")) === "True True True");

  // 1. The DAG views drew the graphs' nodes.
  const expected = (await py("print(w.graph.num_nodes, big.graph.num_nodes, hostile.graph.num_nodes)")).split(/\s+/).map(Number);
  for (let i = 0; i < 3; i++) {
    const n = await widget(i).locator(".ow-dag").getAttribute("data-nodes");
    check(`widget ${i} DAG has the graph's node count`, Number(n) === expected[i], `${n} vs ${expected[i]}`);
  }
  const drawnSmall = Number(await widget(0).locator(".ow-dag").getAttribute("data-drawn"));
  check("the fitted quick-start DAG draws every node", drawnSmall === expected[0], `${drawnSmall}`);
  // A long transformer stack opens zoomed to a readable scale at its sources.
  const drawnBig = Number(await widget(1).locator(".ow-dag").getAttribute("data-drawn"));
  check("the transformer DAG draws its first layers", drawnBig >= 20 && drawnBig <= expected[1], `${drawnBig}`);
  await shot(widget(0), "quickstart");
  await shot(widget(1), "transformer");

  // 2. A click on a node reaches Python (selection trait, read by a later cell).
  const relu = Number(await py("print(int(next(n.id for n in w.graph.nodes if n.name == 'relu')))"));
  await clickNode(0, relu);
  await waitAttr(widget(0).locator(".ow-dag"), "data-selected", relu);
  await page.evaluate(() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    nb.activeCellIndex = nb.widgets.findIndex((c) => c.model.sharedModel.getSource().includes("SELECTED="));
  });
  await page.evaluate(() => window.jupyterapp.commands.execute("notebook:run-cell"));
  const selCell = page.locator(".jp-OutputArea-output", { hasText: "SELECTED=" }).first();
  await selCell.waitFor({ timeout: 15000 });
  const selText = await selCell.textContent();
  check("click selects the node in the kernel", selText.includes(`SELECTED=${relu}`), selText.trim().split("\n")[0]);
  check("details panel names the selected node", (await widget(0).locator(".ow-detail-name").textContent()) === "relu");
  await shot(widget(0), "quickstart-selected");

  // 3. Build in the UI: a buffer, then a kernel writing it.
  await widget(0).locator('.ow-side .ow-tab[data-tab="build"]').click();
  const build = widget(0).locator(".ow-build");
  await build.locator(".ow-buf-name").fill("extra");
  await build.locator(".ow-add-buffer").click();
  await widget(0).locator(".ow-status.ow-good").waitFor({ timeout: 15000 });
  await build.locator(".ow-bufrow", { hasText: "extra" }).waitFor({ timeout: 15000 });
  await build.locator(".ow-k-name").fill("added_k");
  await build.locator(".ow-k-op").selectOption("relu");
  await build.locator(".ow-k-inputs").fill("output");
  await build.locator(".ow-k-outputs").fill("extra");
  await build.locator(".ow-add-kernel").click();
  await waitAttr(widget(0).locator(".ow-dag"), "data-nodes", expected[0] + 1);
  const names = await py("print(','.join(n.name for n in w.graph.nodes))");
  check("adding a kernel in the UI changes w.graph", names.split(",").includes("added_k"), names);
  await shot(widget(0), "build-added-kernel");

  // 3b. Dragging from one node to another adds a dependency; a cycle is refused.
  const ids = JSON.parse(await py("import json; print(json.dumps({n.name: int(n.id) for n in w.graph.nodes}))"));
  async function drag(i, a, b) {
    const c = widget(i).locator(".ow-dag-canvas");
    const pa = await c.evaluate((el, id) => el.owClientPos(id), a);
    const pb = await c.evaluate((el, id) => el.owClientPos(id), b);
    await page.mouse.move(pa.x, pa.y);
    await page.mouse.down();
    await page.mouse.move((pa.x + pb.x) / 2, (pa.y + pb.y) / 2 + 20, { steps: 4 });
    await page.mouse.move(pb.x, pb.y, { steps: 4 });
    await page.mouse.up();
  }
  await drag(0, ids.upload, ids.added_k);
  await waitAttr(widget(0).locator(".ow-dag"), "data-edges", 5);
  const hasEdge = await py(`print((${ids.upload}, ${ids.added_k}) in {(int(a), int(b)) for a, b in w.graph.edges})`);
  check("dragging from node to node adds a dependency", hasEdge === "True", hasEdge);
  await drag(0, ids.added_k, ids.upload);
  const cyc = widget(0).locator(".ow-errors .ow-error-msg", { hasText: "cycle" });
  await cyc.waitFor({ timeout: 15000 });
  check("a dependency closing a cycle is refused", /cycle/.test(await cyc.textContent()), await cyc.textContent());
  await widget(0).locator(".ow-errors .ow-dismiss").click();

  // 3c. Issue 15 (2): an edge from the new kernel to `download` raises download's level; the
  //     layout follows: its column is its level, and the edge points left to right.
  await drag(0, ids.added_k, ids.download);
  await waitAttr(widget(0).locator(".ow-dag"), "data-edges", 6);
  const col = await widget(0).locator(".ow-dag-canvas").evaluate((c, id) => c.owColumn(id), ids.download);
  const lvl = await py(`from oxiwork.analysis import topo as _t\n_lv = {n: i for i, layer in enumerate(_t.levels(w.graph)) for n in layer}\nprint(_lv[${ids.download}], _lv[${ids.added_k}])`);
  check(
    "after the edit, download's column equals its level",
    col && col.column === col.level && String(col.level) === lvl.split(" ")[0] && Number(lvl.split(" ")[0]) > Number(lvl.split(" ")[1]),
    `${JSON.stringify(col)} | kernel levels ${lvl}`,
  );
  const pk = await widget(0).locator(".ow-dag-canvas").evaluate((c, id) => c.owClientPos(id), ids.added_k);
  const pd = await widget(0).locator(".ow-dag-canvas").evaluate((c, id) => c.owClientPos(id), ids.download);
  check("the new edge points left to right", pk.x < pd.x, `${pk.x} -> ${pd.x}`);
  await shot(widget(0), "edit-relayout");

  // 4. An invalid edit is refused, its error shown, the graph unchanged.
  await build.locator(".ow-k-name").fill("bad_k");
  await build.locator(".ow-k-inputs").fill("no_such_buffer");
  await build.locator(".ow-k-outputs").fill("extra");
  await build.locator(".ow-add-kernel").click();
  const err = widget(0).locator(".ow-errors .ow-error-msg", { hasText: "no_such_buffer" });
  await err.waitFor({ timeout: 15000 });
  const errText = await err.textContent();
  check("an invalid edit shows its error", errText.includes("no_such_buffer"), errText);
  const after = await py("print(w.graph.num_nodes)");
  check("an invalid edit leaves the graph unchanged", Number(after) === expected[0] + 1, after);
  await shot(widget(0), "invalid-edit-error");

  // 4b. While the passes of a new graph are computed (slowed down here so that the state can be
  //     seen), the DAG is drawn, the pass views say so, and edits still work.
  await py(
    "import time as _t\nfrom oxiwork.widget.session import Session as _S\n_S._fast_build = _S._build\n" +
      "def _slow_build(self):\n    _t.sleep(8)\n    _S._fast_build(self)\n_S._build = _slow_build\nprint('slow')",
  );
  try {
    await build.locator(".ow-buf-name").fill("while_pending");
    await build.locator(".ow-add-buffer").click();
    await build.locator(".ow-bufrow", { hasText: "while_pending" }).waitFor({ timeout: 15000 });
    await waitAttr(widget(0), "data-passes", "pending");
    const bar = await widget(0).locator(".ow-passbar").textContent();
    check("the pass bar says the passes are being computed", /computing passes/.test(bar), bar);
    check("the memory view waits for the passes", (await widget(0).locator(".ow-memory").getAttribute("data-available")) === "false");
    check("the DAG of the edited graph is drawn meanwhile", Number(await widget(0).locator(".ow-dag").getAttribute("data-drawn")) === expected[0] + 1);
    await widget(0).locator('.ow-side .ow-tab[data-tab="sim"]').click();
    const simHint = await widget(0).locator(".ow-sim .ow-hint").textContent();
    check("the simulator panel waits for the passes", /computing passes/.test(simHint), simHint);
    await shot(widget(0), "passes-pending");
    await widget(0).locator('.ow-side .ow-tab[data-tab="build"]').click();
    // An edit while the kernel computes the passes: it queues, then applies.
    await build.locator(".ow-buf-name").fill("second_pending");
    await build.locator(".ow-add-buffer").click();
    await build.locator(".ow-bufrow", { hasText: "second_pending" }).waitFor({ timeout: 20000 });
    await waitAttr(widget(0), "data-passes", "ready", 30000);
    const bufs = await py("print(sorted(b.name for b in w.graph.buffers if b.name.endswith('pending')), w.passes_loaded)");
    check("edits made while the passes load apply, and the passes follow", bufs === "['second_pending', 'while_pending'] True", bufs);
    const ticksNow = await widget(0).locator(".ow-pass-tick").count();
    check("the pass slider fills in", ticksNow >= 2, `${ticksNow} positions`);
  } finally {
    await py("_S._build = _S._fast_build\nprint('fast')");
  }

  // 5. Passes: move the transformer to the last pass; the stream timeline then has one bar per step.
  const big = widget(1);
  const ticks = big.locator(".ow-pass-tick");
  const nTicks = await ticks.count();
  check("the pass slider lists the pipeline", nTicks >= 2, `${nTicks} positions`);
  await ticks.nth(nTicks - 1).click();
  await waitAttr(big, "data-pass-index", nTicks - 1);
  const finalNodes = Number(await py("print(big.session.stages[-1].graph.num_nodes)"));
  await waitAttr(big.locator(".ow-dag"), "data-nodes", finalNodes);
  await shot(big, "transformer-last-pass");

  // 5b. Details of a fused kernel: why its members did not fuse further, and its CUDA C.
  const fusedId = Number(
    await py("print(int(next(n.id for n in big.session.stages[-1].graph.nodes if n.name == 'L0.q0+L0.q0_bias')))"),
  );
  await clickNode(1, fusedId);
  await waitAttr(big.locator(".ow-dag"), "data-selected", fusedId);
  const details = big.locator(".ow-details");
  await details.locator(".ow-show-code").click();
  const codeView = big.locator(".ow-code-view");
  await waitAttr(codeView, "data-node", "L0.q0+L0.q0_bias");
  const code = await codeView.locator(".ow-code").textContent();
  check("a fused kernel's details show its generated CUDA C", /__global__ void/.test(code) && /matmul/.test(code), code.slice(0, 80));
  // Issue 15 (4): wide, monospace, not wrapped, highlighted, and kept across re-renders.
  const cv = await codeView.locator(".ow-code").evaluate((el) => {
    const cs = getComputedStyle(el);
    return { width: el.clientWidth, ws: cs.whiteSpace, font: cs.fontFamily, tokens: el.querySelectorAll(".ow-tok-qualifier").length };
  });
  check("the code view is wide, monospace, unwrapped and highlighted", cv.width >= 700 && cv.ws === "pre" && /mono/i.test(cv.font) && cv.tokens > 0, JSON.stringify(cv));
  await codeView.locator(".ow-code").evaluate((el) => (el.scrollTop = 40));
  await big.locator(".ow-color-mode").selectOption("stream");
  await waitAttr(big.locator(".ow-dag"), "data-color-mode", "stream");
  const keptScroll = await codeView.locator(".ow-code").evaluate((el) => el.scrollTop);
  check("the code view keeps its state across re-renders", keptScroll === 40 && (await codeView.getAttribute("data-node")) === "L0.q0+L0.q0_bias", `scrollTop ${keptScroll}`);
  await big.locator(".ow-color-mode").selectOption("kind");
  await codeView.locator(".ow-code-copy").click();
  await codeView.locator("[data-copied]").waitFor({ timeout: 5000 }).catch(() => {});
  check("the copy button copies (or selects) the source", ["clipboard", "selection"].includes(await codeView.getAttribute("data-copied")));
  await shot(big, "code-view");
  const notes = await details.locator(".ow-fusion-note").allTextContents();
  check("and why it was not fused with its neighbours", notes.some((t) => t.includes("L0.scores0")), `${notes.length} notes`);
  await shot(details, "details-fusion");

  // 6. Memory view: one rectangle per planned buffer.
  const memCount = Number(await py("print(len(big.view['memory'].get('buffers', [])))"));
  const indep = Number(
    await py(
      "from oxiwork.analysis import liveness as _lv\n_g = big.session.final_graph\n_l = _lv.analyze(_g, big.session.step_order)\n" +
        "print(sum(1 for b, iv in _l.intervals.items() if not _g.buffer(b).external and b not in _l.dead))",
    ),
  );
  check("memory view plans every live buffer", memCount === indep && memCount > 0, `${memCount} vs ${indep}`);
  await big.locator('.ow-bottom .ow-tab[data-tab="memory"]').click();
  await waitAttr(big.locator(".ow-memory"), "data-drawn-rects", memCount);
  check("memory Gantt drew one rectangle per buffer", true, `${memCount}`);
  await shot(big.locator(".ow-bottom"), "memory");
  // Issue 11: another planner re-runs the memory pass for the plan's schedule: never below its bound.
  await big.locator(".ow-memory-mode").selectOption("exact");
  await waitAttr(big.locator(".ow-memory"), "data-mode", "exact", 30000);
  const mem = await py("m = big.view['memory']; print(m['mode'], m['lower_bound_bytes'] == big.plan.memory.lower_bound, m['arena_bytes'] >= big.plan.memory.lower_bound)");
  check("the exact planner's chart keeps the pass's lower bound", mem === "exact True True", mem);
  await big.locator(".ow-memory-mode").selectOption("heuristic");
  await waitAttr(big.locator(".ow-memory"), "data-mode", "heuristic", 30000);
  // Issue 15 (6): zoom and pan with the wheel, a reset, and a legend for every mark.
  const memChart = big.locator(".ow-memory");
  const mbox = await memChart.boundingBox();
  await page.mouse.move(mbox.x + mbox.width / 2, mbox.y + mbox.height / 2);
  await page.mouse.wheel(0, -600);
  await page.waitForTimeout(100);
  const zoomed = Number(await memChart.getAttribute("data-zoom"));
  await page.mouse.down();
  await page.mouse.move(mbox.x + mbox.width / 2 - 120, mbox.y + mbox.height / 2, { steps: 4 });
  await page.mouse.up();
  const win = await memChart.getAttribute("data-window");
  await shot(big.locator(".ow-bottom"), "memory-zoomed");
  await memChart.locator(".ow-chart-reset").click();
  const reset = Number(await memChart.getAttribute("data-zoom"));
  const memLegend = await memChart.locator(".ow-chart-legend .ow-legend-item").allTextContents();
  check("the memory chart zooms and pans with the wheel and a drag, and resets", zoomed > 1.5 && win !== "0.0000,1.0000" && reset === 1, `zoom ${zoomed}, window ${win}, reset ${reset}`);
  check("the memory chart has a legend for its marks", memLegend.some((t) => /arena/.test(t)) && memLegend.some((t) => /lower bound/.test(t)) && memLegend.some((t) => /buffer/.test(t)), memLegend.join(" | "));
  // Issue 15 (5): the header counts the buffers of the graph on screen, as the details do.
  await py("big.selection = -1");
  await big.locator(".ow-details .ow-kv", { hasText: "buffers" }).first().waitFor({ timeout: 15000 });
  const header = await big.locator(".ow-graph-stats").textContent();
  const detailBuffers = await big.locator(".ow-details .ow-kv", { hasText: "buffers" }).first().textContent();
  const hb = header.match(/(\d+) buffers/)?.[1];
  check("the header's buffer count is the details panel's", hb && detailBuffers.includes(`${hb} ·`), `${header} | ${detailBuffers}`);

  // 7. Stream timeline: one bar per step of the graph on screen.
  const streamsWhy = await py("print(big.view['streams'].get('reason', ''))");
  check("the stream timeline is available", streamsWhy === "", streamsWhy);
  await big.locator('.ow-bottom .ow-tab[data-tab="streams"]').click();
  await waitAttr(big.locator(".ow-streams"), "data-drawn-bars", finalNodes);
  check("stream timeline drew one bar per step", true, `${finalNodes}`);
  const totalsText = await big.locator(".ow-stream-totals").textContent();
  check("the stream view shows both launch modes' totals", /graph launch .* stream launches /.test(totalsText), totalsText);
  const defs = await big.locator(".ow-stream-totals").getAttribute("title");
  check(
    "every figure of the stream view is named and defined",
    ["graph launch", "stream launches", "critical path", "device work"].every((k) => totalsText.includes(k) && defs.includes(`${k}:`)),
    totalsText,
  );
  const stLegend = await big.locator(".ow-streams .ow-chart-legend .ow-legend-item").allTextContents();
  check("the timeline has a legend for its marks", stLegend.some((t) => /step \(colour: stream\)/.test(t)) && stLegend.some((t) => /event/.test(t)), stLegend.join(" | "));
  await shot(big.locator(".ow-bottom"), "streams");
  await big.locator(".ow-stream-mode").selectOption("stream");
  await waitAttr(big.locator(".ow-streams"), "data-mode", "stream");
  check("the launch mode switch reaches the kernel", (await py("print(big.stream_mode)")) === "stream");
  await waitAttr(big.locator(".ow-streams"), "data-drawn-bars", finalNodes);
  await shot(big.locator(".ow-bottom"), "streams-stream-mode");
  await big.locator(".ow-stream-mode").selectOption("graph");
  await waitAttr(big.locator(".ow-streams"), "data-mode", "graph");

  // 7b. The pipeline's options in the pass bar: one stream and back, fusion off and on again,
  //     and a refused value. Every change re-plans; the slider stays on the memory pass.
  const opts = big.locator(".ow-options");
  const lanes = Number(await big.locator(".ow-streams").getAttribute("data-streams"));
  check("the stream view draws the plan's streams", lanes > 1 && String(lanes) === (await py("print(big.plan.num_streams)")), `${lanes} lanes`);
  await shot(big.locator(".ow-passbar"), "options-bar");
  // Pin the 4-stream plan, to compare the 1-stream plan against it.
  await big.locator('.ow-bottom .ow-tab[data-tab="compare"]').click();
  await big.locator(".ow-pin").click();
  await big.locator('.ow-compare[data-pinned="1"]').waitFor({ timeout: 15000 });
  await opts.locator(".ow-opt-streams").selectOption("1");
  await waitAttr(big, "data-max-streams", 1);
  await waitAttr(big.locator(".ow-streams"), "data-streams", 1);
  const one = await py("print(big.max_streams, big.plan.num_streams, big.session.stages[big.pass_index].name)");
  check("one stream in the options: the stream view shows one lane", one === "1 1 memory", one);
  await big.locator('.ow-compare tr[data-figure="streams"]', { hasText: "1" }).waitFor({ timeout: 15000 });
  const cmp = await big.locator('.ow-compare tr[data-figure="streams"] td').allTextContents();
  const cmpEvents = await big.locator('.ow-compare tr[data-figure="events"] td').allTextContents();
  check("pin and compare: the pinned plan beside the current one", cmp[1] === String(lanes) && cmp[2] === "1" && cmpEvents[2] === "0" && cmpEvents[3].startsWith("−"), `${cmp.join(" | ")} ; ${cmpEvents.join(" | ")}`);
  await shot(big.locator(".ow-bottom"), "compare");
  await big.locator('.ow-bottom .ow-tab[data-tab="streams"]').click();
  // One stream needs no events: fewer steps than on four.
  await waitAttr(big.locator(".ow-streams"), "data-drawn-bars", Number(await py("print(len(big.plan.steps))")));
  await shot(big.locator(".ow-bottom"), "streams-one-stream");
  await opts.locator(".ow-opt-streams").selectOption("4");
  await waitAttr(big.locator(".ow-streams"), "data-streams", lanes);
  check("back to four streams: the stream view follows", (await py("print(big.max_streams, big.plan.num_streams)")) === `4 ${lanes}`);
  await opts.locator(".ow-opt-fusion").uncheck();
  await waitAttr(big, "data-fusion", "false");
  check("fusion off disables the group limit", await opts.locator(".ow-opt-group").isDisabled());
  await big.locator('.ow-bottom .ow-tab[data-tab="passes"]').click();
  const passRows = await big.locator(".ow-passes tr td:nth-child(2)").allTextContents();
  const tickNames = await big.locator(".ow-pass-tick").allTextContents();
  const unfused = await py("print(big.plan.kernel_count_fused == big.plan.kernel_count_original, any(n.fused_from for n in big.plan.graph.nodes))");
  check(
    "fusion off: no fusion pass and no fused kernel",
    !passRows.includes("fusion") && !tickNames.includes("fusion") && passRows.includes("streams") && unfused === "True False",
    `${passRows.join(",")} | ${unfused}`,
  );
  await shot(big, "fusion-off");
  await opts.locator(".ow-opt-fusion").check();
  await waitAttr(big, "data-fusion", "true");
  await big.locator(".ow-pass-tick", { hasText: "fusion" }).waitFor({ timeout: 15000 });
  await opts.locator(".ow-opt-group").fill("0");
  await opts.locator(".ow-opt-group").press("Enter");
  const optErr = big.locator(".ow-errors .ow-error-msg", { hasText: "max_group_size" });
  await optErr.waitFor({ timeout: 15000 });
  const kept = await py("print(big.max_group_size, big.plan.options['max_group_size'])");
  check("a refused option shows its error and changes nothing", kept === "16 16" && /from 1 to 64/.test(await optErr.textContent()), `${await optErr.textContent()} | ${kept}`);
  await shot(big.locator(".ow-passbar"), "options-refused");
  await big.locator(".ow-errors .ow-dismiss").click();
  await opts.locator(".ow-opt-group").blur();

  // 8. Dominator trees.
  for (const [tab, cls] of [["dom", ".ow-tree-dominator"], ["postdom", ".ow-tree-post-dominator"]]) {
    await big.locator(`.ow-bottom .ow-tab[data-tab="${tab}"]`).click();
    await waitAttr(big.locator(cls), "data-drawn-nodes", finalNodes);
    await shot(big.locator(".ow-bottom"), tab === "dom" ? "dominator-tree" : "post-dominator-tree");
    // Too many leaves for the panel: it scrolls, one text row per leaf, every leaf named.
    const tree = big.locator(cls);
    const [scrollable, labels, leaves] = await Promise.all(
      ["data-scrollable", "data-labels", "data-leaves"].map((a) => tree.getAttribute(a)),
    );
    const overflow = await tree.evaluate((el) => el.scrollHeight > el.clientHeight + 20);
    check(
      `the ${tab} tree scrolls and labels every leaf`,
      scrollable === "1" && overflow && Number(leaves) > 20 && Number(labels) >= Number(leaves),
      `scrollable ${scrollable}, overflow ${overflow}, ${labels} labels, ${leaves} leaves`,
    );
    // Issue 15 (7): inner nodes are named too (a column per depth, scrolling sideways).
    const drawnTree = Number(await tree.getAttribute("data-drawn-nodes"));
    check(`the ${tab} tree names every node, inner ones too`, Number(labels) >= drawnTree, `${labels} labels for ${drawnTree} nodes`);
  }
  check("dominator trees drew every node", true);
  await big.locator('.ow-bottom .ow-tab[data-tab="passes"]').click();
  await shot(big.locator(".ow-bottom"), "passes");

  // 9. Simulator: stepping moves the highlight in the DAG, and the kernel follows.
  await big.locator('.ow-side .ow-tab[data-tab="sim"]').click();
  const simWhy = await py("print(big.view['sim'].get('reason', ''))");
  check("the simulator panel is available", simWhy === "", simWhy);
  const firstStep = await py("print(int(big.session.plan.steps[0].node))");
  await big.locator(".ow-sim-step").click();
  await waitAttr(big, "data-sim-position", 0);
  await waitAttr(big.locator(".ow-dag"), "data-sim", firstStep);
  const first = await big.locator(".ow-dag").getAttribute("data-sim");
  await big.locator(".ow-sim-step").click();
  await waitAttr(big, "data-sim-position", 1);
  const second = await big.locator(".ow-dag").getAttribute("data-sim");
  check("stepping the simulator moves the highlight", first !== second && second !== "", `${first} -> ${second}`);
  const pos = await py("print(big.sim_position)");
  check("the kernel's simulator position follows", pos === "1", pos);
  // Issue 15 (1): one numbering: step i is plan.steps[i] in the header, the list and the message.
  await big.locator(".ow-status", { hasText: "ran step 1 (" }).waitFor({ timeout: 15000 });
  const simHead = await big.locator(".ow-sim-status").textContent();
  const curItem = await big.locator(".ow-step.ow-current").getAttribute("value");
  const msg = await big.locator(".ow-status").textContent();
  check("the header's step number equals the message's and the list's", simHead.startsWith("step 1: ") && curItem === "1" && msg.includes("ran step 1 ("), `${simHead} | item ${curItem} | ${msg}`);
  const secondStep = await py("print(int(big.session.plan.steps[1].node))");
  await waitAttr(big.locator(".ow-streams"), "data-sim-node", secondStep);
  check("the stream timeline highlights the simulator's step", true, secondStep);
  await big.locator(".ow-sim-back").click();
  await waitAttr(big, "data-sim-position", 0);
  check("step back returns to the previous highlight", (await big.locator(".ow-dag").getAttribute("data-sim")) === first);
  const bufId = await py("print(int(big.session.final_graph.buffers[0].id))");
  await big.locator(".ow-insp-buffer").selectOption(bufId);
  await big.locator(".ow-inspector .ow-stats").waitFor({ timeout: 15000 });
  const statsText = await big.locator(".ow-inspector .ow-stats").textContent();
  check("the buffer inspector shows statistics", /min/.test(statsText) && /NaN/.test(statsText), statsText);
  await shot(big, "simulator");

  // 9b. Race lab: drop an event, run adversarially: the races and the outputs' verdict show.
  // The panel is rebuilt on every change, so these wait for a matching element to appear.
  await py("big.selection = -1"); // "Run" then runs to the end, not to a selected node
  await big.locator(".ow-sim-run", { hasText: /^Run ▶▶$/ }).waitFor({ timeout: 15000 });
  await big.locator(".ow-sim-policy").selectOption("adversarial");
  await big.locator(`.ow-sim-config[data-policy="adversarial"]`).waitFor({ timeout: 15000 });
  const nEvents = Number(await py("print(len(big.session.events))"));
  const options = await big.locator(".ow-sim-drop option").allTextContents();
  check("race lab: the drop-event menu lists the plan's events", nEvents > 0 && options.length === nEvents + 1 && /^e0: record\(/.test(options[1]), `${nEvents} events; ${options[1]}`);
  await big.locator(".ow-sim-drop").selectOption("0");
  await big.locator(`.ow-sim-config[data-drop-event="0"]`).waitFor({ timeout: 15000 });
  const settings = await py("print(big.sim_settings)");
  check("race lab: the kernel's simulator drops the event", settings === "{'policy': 'adversarial', 'drop_event': 0}", settings);
  const struck = await big.locator(".ow-step.ow-dropped").count();
  const dropped = Number(await py("print(len(big.session.events[0]))"));
  check("race lab: the event's record and waits are struck from the steps", struck === dropped, `${struck} of ${dropped}`);
  await shot(big.locator(".ow-side"), "race-lab-dropped");
  await big.locator(".ow-sim-run").click();
  await big.locator(".ow-verdict[data-match='false']").waitFor({ timeout: 15000 });
  const raceCount = Number(await big.locator(".ow-races").getAttribute("data-count"));
  const verdict = await big.locator(".ow-verdict").textContent();
  check(
    "race lab: a dropped event shows races and the outputs that differ",
    raceCount > 0 && /outputs differ from the correct plan: \S+ \(max \|Δ\| [0-9.e+]+\)/.test(verdict),
    `${raceCount} races; ${verdict}`,
  );
  // Issue 15 (8): the racing pairs are marked in the DAG and the timeline; the dropped event's
  // arrows are not drawn.
  await waitAttr(big.locator(".ow-streams"), "data-dropped-event", "0");
  const raceSteps = (await big.locator(".ow-streams").getAttribute("data-race-steps")).split(",").filter(Boolean);
  const raceDag = (await big.locator(".ow-dag").getAttribute("data-races")).split(",").filter(Boolean);
  const expectRace = JSON.parse(await py("import json; print(json.dumps(sorted({i for r in big.sim_state['races'] for i in (r['first'], r['step'])})))"));
  check("race lab: both steps of every race are marked on the timeline", raceSteps.map(Number).join() === expectRace.join() && raceSteps.length > 1, `${raceSteps.length} steps`);
  check("race lab: racing nodes are ringed in the DAG", raceDag.length > 0, `${raceDag.length} nodes`);
  const arrowsLeft = Number(await py("print(sum(1 for a in big.view['streams']['arrows'] if a['event'] != 0))"));
  await big.locator('.ow-bottom .ow-tab[data-tab="streams"]').click();
  await waitAttr(big.locator(".ow-streams"), "data-drawn-arrows", arrowsLeft);
  check("race lab: the dropped event's arrows are not drawn", true, `${arrowsLeft} arrows left`);
  await shot(big, "race-lab-marks");
  const ran = await py("print(big.sim_position, big.session.plan.steps[big.sim_position].node == big.session.sim.history[-1].node)");
  check("race lab: the highlighted step is the one that ran", ran.endsWith(" True") && (await big.getAttribute("data-sim-position")) === ran.split(" ")[0], ran);
  await shot(big.locator(".ow-side"), "race-lab");
  await big.locator(".ow-sim-drop").selectOption("");
  await big.locator(`.ow-sim-config[data-drop-event=""]`).waitFor({ timeout: 15000 });
  await big.locator(".ow-sim-run").click();
  await big.locator(".ow-verdict[data-match='true']").waitFor({ timeout: 15000 });
  const restored = Number(await big.locator(".ow-races").getAttribute("data-count"));
  check("race lab: with the event restored the outputs match and nothing races", restored === 0, `${restored} races`);
  await big.locator(".ow-sim-policy").selectOption("in_order");
  await big.locator(`.ow-sim-config[data-policy="in_order"]`).waitFor({ timeout: 15000 });

  // 9c. Issue 15 (3): search by name jumps to a node, selects it and brings it into view;
  //     groups fold the repeated blocks; the minimap is drawn.
  const target = "L5.ff2";
  const tid = await py(`print(int(next(n.id for n in big.session.stages[big.pass_index].graph.nodes if n.name.startswith(${JSON.stringify(target)}))))`);
  await big.locator(".ow-search").fill(target);
  await big.locator(".ow-search").press("Enter");
  await waitAttr(big.locator(".ow-dag"), "data-selected", tid);
  await waitAttr(big.locator(".ow-dag"), "data-revealed", tid);
  await page.waitForTimeout(150);
  const inView = await big.locator(".ow-dag-canvas").evaluate((c, id) => {
    const p = c.owClientPos(id);
    const r = c.getBoundingClientRect();
    return p && p.x > r.left + 20 && p.x < r.right - 20 && p.y > r.top + 20 && p.y < r.bottom - 20;
  }, Number(tid));
  const selPy = await py("print(big.selection)");
  check("search finds a node, selects it in the kernel and centres it", inView && selPy === tid, `${tid} in view: ${inView}`);
  await shot(big, "search");
  const depthOpts = await big.locator(".ow-group-depth option").count();
  await big.locator(".ow-group-depth").selectOption("1");
  const groups = Number(await big.locator(".ow-dag").getAttribute("data-groups"));
  check("the repeated blocks collapse into groups", depthOpts >= 2 && groups >= 8, `${groups} groups`);
  await shot(big, "groups-collapsed");
  await big.locator(".ow-group-depth").selectOption("0");
  const mini = await big.locator(".ow-minimap").boundingBox();
  check("the DAG has a minimap", mini && mini.width > 100 && mini.height > 50, JSON.stringify(mini));
  // A long thin graph opens folded into bands (legible, many nodes drawn); Unfold shows one line.
  const foldedDrawn = Number(await big.locator(".ow-dag").getAttribute("data-drawn"));
  const wasFolded = await big.locator(".ow-dag").getAttribute("data-folded");
  await big.locator(".ow-fold").click();
  await waitAttr(big.locator(".ow-dag"), "data-folded", "false");
  await page.waitForTimeout(150);
  const lineDrawn = Number(await big.locator(".ow-dag").getAttribute("data-drawn"));
  await shot(big, "unfolded");
  await big.locator(".ow-fold").click();
  await waitAttr(big.locator(".ow-dag"), "data-folded", "true");
  check("a long graph is folded into bands that show more of it", wasFolded === "true" && foldedDrawn > lineDrawn, `${foldedDrawn} drawn folded, ${lineDrawn} unfolded`);
  await shot(big, "folded");

  // 10. A hostile name is shown literally, never parsed as HTML.
  const hostileName = "<img src=x onerror=alert(1)>";
  const hid = Number(await py(`print(int(next(n.id for n in hostile.graph.nodes if n.name == ${JSON.stringify(hostileName)})))`));
  await clickNode(2, hid);
  await waitAttr(widget(2).locator(".ow-dag"), "data-selected", hid);
  const shown = await widget(2).locator(".ow-detail-name").textContent();
  check("the hostile name is shown literally", shown === hostileName, shown);
  const imgs = await page.locator(".ow-root img").count();
  check("no element was created from a name", imgs === 0, `${imgs} img elements`);
  check("no script ran from a name", results.dialogs === 0, `${results.dialogs} dialogs`);
  await shot(widget(2), "hostile-name");

  // 12. Issue 14: the Sweep tab charts explore.sweep; clicking a point plans that setting.
  const w0 = widget(0);
  const swBefore = await py("print(w.max_streams, w.fusion, w.plan.kernel_count_fused)");
  await w0.locator('.ow-bottom .ow-tab[data-tab="sweep"]').click();
  await w0.locator(".ow-sweep-run").click();
  await w0.locator(".ow-sweep[data-points='8']").waitFor({ timeout: 60000 });
  const sw = await w0.locator(".ow-sweep").evaluate((el) => ({ ...el.dataset, legend: el.querySelectorAll(".ow-sweep-legend span").length, ticks: el.querySelectorAll(".ow-sweep-tick").length, axes: [...el.querySelectorAll(".ow-sweep-axis")].map((t) => t.textContent) }));
  check("the sweep chart has every setting, its front, a legend and axes with units", Number(sw.front) >= 1 && Number(sw.current) >= 0 && sw.legend >= 3 && sw.ticks >= 4 && sw.axes.some((a) => /µs/.test(a)) && sw.axes.some((a) => /bytes/.test(a)), JSON.stringify(sw));
  await shot(w0, "sweep");
  await w0.locator(".ow-sweep-point.ow-sweep-nofusion").last().click(); // the topmost of coincident points
  await w0.locator(".ow-sweep[data-points='8']").waitFor({ timeout: 15000 });
  let swAfter = "";
  for (let i = 0; i < 60 && (swAfter === "" || swAfter === swBefore); i++) {
    await page.waitForTimeout(250);
    swAfter = await py("print(w.max_streams, w.fusion, w.plan.kernel_count_fused)");
  }
  const curAfter = Number(await w0.locator(".ow-sweep").getAttribute("data-current"));
  check("clicking a sweep point switches the plan to that setting", swAfter !== swBefore && swAfter.split(" ")[1] === "False" && curAfter >= 0, `${swBefore} -> ${swAfter}, ringed ${curAfter}`);
  await shot(w0, "sweep-clicked");

  // 13. Issue 15 (9): a laptop screen, 1280x800 with JupyterLab's file browser open: the
  //     colour menu and the group field not clipped, the DAG and a chart in view together,
  //     a tooltip at the right edge not squashed.
  await page.evaluate(() => window.jupyterapp.commands.execute("filebrowser:activate"));
  await page.waitForTimeout(500);
  const fbw = await page.evaluate(() => document.querySelector(".jp-FileBrowser")?.getBoundingClientRect().width ?? 0);
  check("JupyterLab's file browser is open beside the notebook", fbw > 150, `${fbw.toFixed(0)} px`);
  const lw = widget(1);
  await lw.evaluate((el) => el.scrollIntoView({ block: "start" }));
  await lw.evaluate((el) => {
    for (let a = el.parentElement; a; a = a.parentElement) if (a.scrollHeight > a.clientHeight && /(auto|scroll)/.test(getComputedStyle(a).overflowY)) return void (a.scrollTop -= 12);
  });
  await page.waitForTimeout(400);
  const lay = await lw.evaluate((root) => {
    // What of an element can be seen: the viewport cut by the scrolling ancestors (the
    // notebook's scroller) that hold it.
    const clip = (el) => {
      let c = { left: 0, top: 0, right: window.innerWidth, bottom: window.innerHeight };
      for (let a = el.parentElement; a; a = a.parentElement) {
        const st = getComputedStyle(a);
        if (/(auto|scroll)/.test(st.overflowY) && a.scrollHeight > a.clientHeight) {
          const r = a.getBoundingClientRect();
          c = { left: Math.max(c.left, r.left), top: Math.max(c.top, r.top), right: Math.min(c.right, r.right), bottom: Math.min(c.bottom, r.bottom) };
        }
      }
      const r = el.getBoundingClientRect();
      return { w: Math.max(0, Math.min(r.right, c.right) - Math.max(r.left, c.left)), h: Math.max(0, Math.min(r.bottom, c.bottom) - Math.max(r.top, c.top)), fullW: r.width, fullH: r.height };
    };
    // Whole and on top: the element itself is what the page shows at its four inner corners.
    const control = (sel) => {
      const el = root.querySelector(sel);
      const r = el.getBoundingClientRect();
      const at = (x, y) => {
        const hit = document.elementFromPoint(x, y);
        return !!hit && (hit === el || el.contains(hit));
      };
      const corners = [at(r.left + 2, r.top + 2), at(r.right - 2, r.top + 2), at(r.left + 2, r.bottom - 2), at(r.right - 2, r.bottom - 2)];
      return { left: r.left, right: r.right, top: r.top, fullW: r.width, fullH: r.height, onTop: corners.some(Boolean), whole: corners.every(Boolean) && r.right <= window.innerWidth };
    };
    return { color: control(".ow-color-mode"), group: control(".ow-opt-group"), dag: clip(root.querySelector(".ow-dag-canvas")), chart: clip(root.querySelector(".ow-bottom-body")) };
  });
  check("laptop: the colour menu is whole and on top", lay.color.whole && lay.color.onTop && lay.color.fullW >= 60, JSON.stringify(lay.color));
  check("laptop: the group field is whole and on top", lay.group.whole && lay.group.onTop && lay.group.fullW >= 30, JSON.stringify(lay.group));
  check("laptop: the DAG and the charts are in view together", lay.dag.h >= 200 && lay.chart.h >= 120, `DAG ${lay.dag.h.toFixed(0)} px, chart ${lay.chart.h.toFixed(0)} px visible`);
  await page.screenshot({ path: join(artifacts, "laptop-filebrowser.png") });
  // Hover the rightmost node in view: its tooltip stays inside the DAG at its own width.
  const spot = await lw.locator(".ow-dag-canvas").evaluate((c) => {
    const r = c.getBoundingClientRect();
    for (let x = r.right - 6; x > r.left + r.width / 2; x -= 4)
      for (let y = r.top + 10; y < Math.min(r.bottom, window.innerHeight) - 10; y += 4) if (c.owHitTest(x, y) !== null && c.owHitTest(x, y) >= 0) return { x, y, right: r.right, left: r.left };
    return null;
  });
  check("laptop: a node is drawn near the DAG's right edge", !!spot, JSON.stringify(spot));
  await page.mouse.move(spot.x - 2, spot.y);
  await page.mouse.move(spot.x, spot.y);
  await page.waitForTimeout(200);
  const tip = await lw.locator(".ow-dag > .ow-tooltip").first().evaluate((t) => {
    const r = t.getBoundingClientRect();
    const name = t.querySelector(".ow-tt-name");
    return { left: r.left, right: r.right, w: r.width, shown: getComputedStyle(t).display !== "none", nameLines: name ? Math.round(name.getBoundingClientRect().height / parseFloat(getComputedStyle(name).lineHeight || "16")) : 0 };
  });
  check("laptop: the tooltip at the right edge is not squashed", tip.shown && tip.right <= spot.right + 1 && tip.left >= spot.left - 1 && tip.w >= 120, JSON.stringify(tip));
  await page.screenshot({ path: join(artifacts, "laptop-tooltip.png") });
  await page.mouse.move(5, 5);

  // 11. Notebook 7: the same notebook renders and a click reaches the kernel.
  if (nb7url) {
    await page.evaluate(() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.shutdown());
    // A fresh page: leaving JupyterLab with a modified notebook asks "leave page?".
    await page.close();
    page = await newPage();
    log(`open ${nb7url}`);
    await page.goto(nb7url);
    await page.waitForFunction(
      () => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status === "idle",
      null,
      { timeout: 60000 },
    );
    await page.evaluate(() => window.jupyterapp.commands.execute("notebook:run-all-cells"));
    await page.waitForFunction(() => document.querySelectorAll(".ow-root .ow-dag[data-draws]").length >= 3, null, { timeout: 60000 });
    const nb7nodes = await widget(0).locator(".ow-dag").getAttribute("data-nodes");
    check("Notebook 7 draws the workbench", Number(nb7nodes) === expected[0], nb7nodes);
    const relu7 = Number(await py("print(int(next(n.id for n in w.graph.nodes if n.name == 'relu')))"));
    await clickNode(0, relu7);
    await waitAttr(widget(0).locator(".ow-dag"), "data-selected", relu7);
    check("Notebook 7: a click reaches the kernel", (await py("print(w.selection)")) === String(relu7));
    await shot(widget(0), "notebook7");
  } else results.skipped.push("Notebook 7: the notebook package is not installed");

  const bad = results.console_errors.filter((e) => /oxiwork|widget\.js|ow-|anywidget/i.test(e));
  check("no widget errors in the browser console", bad.length === 0, bad.join(" | "));
  results.ok = true;
} catch (e) {
  results.ok = false;
  results.error = String(e?.stack || e);
  try {
    await page.screenshot({ path: join(artifacts, "failure.png"), fullPage: false });
  } catch {
    /* the page may be gone */
  }
} finally {
  try {
    await page.evaluate(() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.shutdown());
  } catch {
    /* best effort */
  }
  await browser.close();
  results.seconds = (Date.now() - t0) / 1000;
  writeFileSync(join(artifacts, "results.json"), JSON.stringify(results, null, 2));
  process.stdout.write(JSON.stringify(results) + "\n");
  process.exit(results.ok ? 0 : 1);
}
