// Side panels: node details, building (edit forms) and the simulator with its buffer
// inspector. Each panel is rebuilt from the view-model; user data only ever reaches the DOM
// through textContent (see dom.ts).

import { formatBytes, formatTime } from "./charts";
import { clear, fitCanvas, h } from "./dom";
import type {
  EagerOutput,
  EagerVerdict,
  InspectorSection,
  ModelBinding,
  NodeDetails,
  PipelineOptions,
  SimSection,
  TouchedBuffer,
  ViewModel,
} from "./types";
import { isAvailable } from "./types";

import type { Send } from "./messages";
export type { Send };

function row(label: string, value: string | null | undefined): HTMLElement | null {
  if (value === null || value === undefined || value === "") return null;
  return h("div", { class: "ow-kv" }, h("span", { class: "ow-k", text: label }), h("span", { class: "ow-v", text: value }));
}

function time(v: number | null | undefined): string | null {
  return v === null || v === undefined ? null : formatTime(v);
}

export function detailsPanel(
  d: NodeDetails | null,
  editable: boolean,
  send: Send,
  summary: [string, string][] = [],
  onShowCode: () => void = () => {},
): HTMLElement {
  if (!d) {
    return h(
      "div",
      { class: "ow-panel ow-details" },
      summary.length ? h("h4", { text: "Graph" }) : null,
      ...summary.map(([k, v]) => row(k, v)),
      h("p", {
        class: "ow-hint ow-help",
        text: "Click a node for its details. Drag the background to pan, scroll to zoom, double-click to fit. Drag from one node to another to add a dependency.",
      }),
    );
  }
  const rename = h("input", { class: "ow-input ow-rename-input", value: d.name, "aria-label": "new name" });
  const actions = editable
    ? h(
        "div",
        { class: "ow-actions" },
        rename,
        h("button", { class: "ow-btn ow-rename", text: "Rename", onclick: () => send("rename", { node: d.id, name: rename.value }) }),
        h("button", { class: "ow-btn ow-danger ow-delete", text: "Delete", onclick: () => send("delete", { node: d.id }) }),
      )
    : null;
  return h(
    "div",
    { class: "ow-panel ow-details", "data-node": d.id },
    h("div", { class: "ow-detail-name", text: d.name }),
    h("div", { class: "ow-detail-kind", text: d.op ? `${d.kind} · ${d.op}` : d.kind }),
    row("id", String(d.id)),
    row("stream", d.stream === null ? null : String(d.stream)),
    row("reads", d.inputs.join(", ")),
    row("writes", d.outputs.join(", ")),
    row("after", d.predecessors.join(", ")),
    row("before", d.successors.join(", ")),
    row("launch", d.config),
    row("params", d.params.map(([k, v]) => `${k}=${v}`).join(", ")),
    row("fused from", d.fused_from.join(", ")),
    row("cost", time(d.cost)),
    row("asap", time(d.asap)),
    row("alap", time(d.alap)),
    row("slack", time(d.slack)),
    row("critical", d.critical === null ? null : d.critical ? "yes" : "no"),
    actions,
    sourceBlock(d, onShowCode),
    fusionNotes(d),
  );
}

/** Why the node was not fused with each neighbouring kernel (after the passes ran). */
function fusionNotes(d: NodeDetails): HTMLElement | null {
  const rows = d.fusion ?? [];
  if (!rows.length) return null;
  return h(
    "div",
    { class: "ow-fusion-notes" },
    h("h4", { text: "Not fused with" }),
    ...rows.map(([dir, other, why]) =>
      h(
        "div",
        { class: "ow-fusion-note" },
        h("div", { class: "ow-fusion-other", text: `${dir === "after" ? "↤" : "↦"} ${other}` }),
        h("div", { class: "ow-muted", text: why }),
      ),
    ),
  );
}

/** The generated CUDA C is read in the bottom panel's Code tab (wide, highlighted): a link. */
function sourceBlock(d: NodeDetails, onShowCode: () => void): HTMLElement | null {
  if (!d.source) return null;
  const lines = d.source.split("\n").length;
  return h(
    "div",
    { class: "ow-source" },
    h("button", { class: "ow-btn ow-small ow-show-code", text: `generated CUDA C · ${lines} lines ▸ Code tab`, onclick: onShowCode }),
  );
}

function field(label: string, input: HTMLElement): HTMLElement {
  return h("label", { class: "ow-field" }, h("span", { text: label }), input);
}

function select(cls: string, options: [string, string][], value?: string): HTMLSelectElement {
  const s = h("select", { class: `ow-input ${cls}` });
  for (const [v, label] of options) s.append(h("option", { value: v, text: label }));
  if (value !== undefined) s.value = value;
  return s;
}

/** "1, 2" or "4x4" as numbers; a token that is not a number is sent as typed, so the kernel's
 *  refusal names it ("got ['abc']"), instead of JSON's null for NaN. */
export const ints = (s: string): (number | string)[] =>
  s
    .split(/[,x× ]+/)
    .filter(Boolean)
    .map((t) => (Number.isFinite(Number(t)) ? Number(t) : t));

/** How a plan step is named everywhere: "step 3" is plan.steps[3]. */
export function stepLabel(index: number): string {
  return `step ${index}`;
}
const names = (s: string) =>
  s
    .split(",")
    .map((t) => t.trim())
    .filter(Boolean);

/** Parses "k=v, k2=v2" into an object; numbers become numbers. */
export function parseParams(s: string): Record<string, string | number> {
  const out: Record<string, string | number> = {};
  for (const part of s.split(",")) {
    const t = part.trim();
    if (!t) continue;
    const eq = t.indexOf("=");
    const k = (eq < 0 ? t : t.slice(0, eq)).trim();
    const v = eq < 0 ? "" : t.slice(eq + 1).trim();
    out[k] = v !== "" && Number.isFinite(Number(v)) ? Number(v) : v;
  }
  return out;
}

export function buildPanel(vm: ViewModel, send: Send): HTMLElement {
  if (!vm.editable) {
    return h("div", { class: "ow-panel ow-build" }, h("p", { class: "ow-hint", text: vm.edit_reason || "editing is not available" }));
  }
  const bufNames = vm.buffers.map((b) => b.name);
  // Buffer
  const bName = h("input", { class: "ow-input ow-buf-name", placeholder: "name" });
  const bSize = h("input", { class: "ow-input ow-buf-size", value: "4096", type: "number", min: 1 });
  const bType = select(
    "ow-buf-dtype",
    ["float32", "float64", "float16", "int32", "int64", "uint8"].map((d) => [d, d]),
  );
  // Kernel
  const kName = h("input", { class: "ow-input ow-k-name", placeholder: "name" });
  const kOp = select("ow-k-op", [
    ["", "(opaque kernel)"],
    ...vm.ops.map((o) => [o.name, `${o.name}  (${o.arity} in)`] as [string, string]),
  ]);
  const kIn = h("input", { class: "ow-input ow-k-inputs", placeholder: bufNames.slice(0, 2).join(", ") || "a, b" });
  const kOut = h("input", { class: "ow-input ow-k-outputs", placeholder: "out" });
  const kGrid = h("input", { class: "ow-input ow-k-grid", value: "1" });
  const kBlock = h("input", { class: "ow-input ow-k-block", value: "256" });
  const kParams = h("input", { class: "ow-input ow-k-params", placeholder: "alpha=2.0" });
  kOp.addEventListener("change", () => {
    const op = vm.ops.find((o) => o.name === kOp.value);
    if (op) {
      kParams.value = Object.entries(op.params)
        .map(([k, v]) => `${k}=${v}`)
        .join(", ");
      if (!kName.value) kName.value = op.name;
    }
  });
  // Memcpy
  const cName = h("input", { class: "ow-input ow-c-name", placeholder: "name" });
  const bufOpts: [string, string][] = bufNames.map((n) => [n, n]);
  const cSrc = select("ow-c-src", bufOpts);
  const cDst = select("ow-c-dst", bufOpts, bufNames[1]);
  const cDir = select("ow-c-dir", [
    ["d2d", "device → device"],
    ["h2d", "host → device"],
    ["d2h", "device → host"],
  ]);
  const buffers = h(
    "div",
    { class: "ow-buflist" },
    ...vm.buffers.map((b) => {
      const ren = h("input", { class: "ow-input ow-small", value: b.name, "aria-label": `rename ${b.name}` });
      return h(
        "div",
        { class: "ow-bufrow", "data-buffer": b.id },
        h("span", { class: "ow-bufname", text: b.name }),
        h("span", { class: "ow-muted", text: `${formatBytes(b.size_bytes)} ${b.dtype}${b.external ? " · external" : ""}` }),
        ren,
        h("button", { class: "ow-btn ow-small", text: "Rename", onclick: () => send("rename", { buffer: b.id, name: ren.value }) }),
        h("button", {
          class: "ow-btn ow-small ow-danger",
          text: "✕",
          title: "delete buffer",
          onclick: () => send("delete", { buffer: b.id }),
        }),
      );
    }),
  );
  return h(
    "div",
    { class: "ow-panel ow-build" },
    h("h4", { text: "Kernel" }),
    field("name", kName),
    field("op", kOp),
    field("reads", kIn),
    field("writes", kOut),
    h("div", { class: "ow-row2" }, field("grid", kGrid), field("block", kBlock)),
    field("params", kParams),
    h("button", {
      class: "ow-btn ow-primary ow-add-kernel",
      text: "Add kernel",
      onclick: () =>
        send("add_kernel", {
          name: kName.value,
          op: kOp.value || null,
          inputs: names(kIn.value),
          outputs: names(kOut.value),
          grid: ints(kGrid.value),
          block: ints(kBlock.value),
          params: parseParams(kParams.value),
        }),
    }),
    h("h4", { text: "Buffer" }),
    h("div", { class: "ow-row2" }, field("name", bName), field("bytes", bSize)),
    field("dtype", bType),
    h("button", {
      class: "ow-btn ow-add-buffer",
      text: "Add buffer",
      onclick: () => send("add_buffer", { name: bName.value, size_bytes: Number(bSize.value), dtype: bType.value }),
    }),
    h("h4", { text: "Copy" }),
    field("name", cName),
    h("div", { class: "ow-row2" }, field("from", cSrc), field("to", cDst)),
    field("direction", cDir),
    h("button", {
      class: "ow-btn ow-add-memcpy",
      text: "Add copy",
      onclick: () =>
        send("add_memcpy", { name: cName.value, src: cSrc.value, dst: cDst.value, direction: cDir.value as "h2d" | "d2h" | "d2d" }),
    }),
    h("p", { class: "ow-hint", text: "Dependencies: drag from one node to another in the graph." }),
    h("h4", { text: `Buffers (${vm.buffers.length})` }),
    buffers,
  );
}

export function simPanel(
  sim: SimSection | null,
  reason: string,
  model: ModelBinding | null,
  inspector: InspectorSection | null,
  values: Float64Array,
  buffers: ViewModel["buffers"],
  selectedId: number | null,
  send: Send,
  onPickNode: (id: number) => void,
): HTMLElement {
  if (!sim)
    return h(
      "div",
      { class: "ow-panel ow-sim" },
      modelLine(model, null, send),
      h("p", { class: "ow-hint", text: reason || "no simulator" }),
    );
  const cur = sim.position >= 0 && sim.position < sim.steps.length ? sim.steps[sim.position] : null;
  // Positions index the real plan's steps; with an event dropped fewer of them run.
  const done = new Set(sim.executed_steps);
  const dropped = new Set(sim.dropped_steps);
  const runnable = sim.steps.length - dropped.size;
  const btn = (
    cls: string,
    text: string,
    action: "step" | "back" | "run" | "reset",
    extra: { breakpoint?: number } = {},
    disabled = false,
  ) => h("button", { class: `ow-btn ${cls}`, text, disabled, onclick: () => send("sim", { action, ...extra }) });
  const controls = h(
    "div",
    { class: "ow-sim-controls" },
    btn("ow-sim-reset", "Reset", "reset"),
    btn("ow-sim-back", "◀ Back", "back", {}, sim.position < 0),
    btn("ow-sim-step", "Step ▶", "step", {}, sim.finished),
    btn(
      "ow-sim-run",
      selectedId !== null ? "Run to selected ▶▶" : "Run ▶▶",
      "run",
      selectedId !== null ? { breakpoint: selectedId } : {},
      sim.finished,
    ),
  );
  // Step i is plan.steps[i], numbered from 0 as in Python, the kernel's messages, the race
  // reports and the timeline's tooltips (see stepLabel).
  const status = h(
    "div",
    { class: "ow-sim-status", "data-position": sim.position },
    cur ? `${stepLabel(sim.position)}: ` : `${sim.finished ? "finished" : "not started"} · ${runnable} steps (0–${sim.steps.length - 1})`,
    cur ? h("b", { text: cur.name }) : null,
    cur ? h("span", { class: "ow-muted", text: ` · ${sim.executed} of ${runnable} run` }) : null,
  );
  const list = h("ol", { class: "ow-steps", start: 0 });
  const lo = Math.max(0, sim.position - 6);
  const hi = Math.min(sim.steps.length, lo + 14);
  for (let i = lo; i < hi; i++) {
    const s = sim.steps[i];
    const cls =
      i === sim.position ? "ow-step ow-current" : dropped.has(i) ? "ow-step ow-dropped" : done.has(i) ? "ow-step ow-done" : "ow-step";
    const li = h(
      "li",
      { class: cls, value: i, "data-node": s.node, "data-step": i },
      h("span", { text: s.name }),
      h("span", { class: "ow-muted", text: ` ${s.kind} · s${s.stream}${dropped.has(i) ? " · dropped" : ""}` }),
    );
    li.addEventListener("click", () => onPickNode(s.node));
    list.append(li);
  }
  const races = h(
    "div",
    { class: "ow-races", "data-count": sim.races.length },
    h("h4", {
      text: sim.races.length
        ? `Races (${(sim.races_total ?? sim.races.length) > sim.races.length ? `first ${sim.races.length} of ${sim.races_total}` : sim.races.length})`
        : "No races detected",
    }),
    verdictLine(sim),
    ...sim.races.map((r) => {
      const d = h(
        "div",
        { class: r.manifested ? "ow-race ow-manifested" : "ow-race", "data-observed": r.observed ? "1" : "0" },
        r.manifested ? h("b", { text: "ran in reverse: " }) : null,
        h("span", { text: r.message }),
      );
      d.addEventListener("click", () => onPickNode(r.node));
      return d;
    }),
  );
  const msg = sim.message ? h("div", { class: "ow-sim-msg", text: sim.message }) : null;
  return h(
    "div",
    { class: "ow-panel ow-sim" },
    simConfig(sim, send),
    controls,
    status,
    modelLine(model, sim, send),
    eagerBlock(model, sim.eager),
    msg,
    touchedBlock(sim, send),
    list,
    races,
    inspectorPanel(inspector, values, buffers, send),
  );
}

/** The race lab's row: which interleaving policy runs, and which event (if any) is left out. */
function simConfig(sim: SimSection, send: Send): HTMLElement {
  const policy = select(
    "ow-sim-policy",
    sim.policies.map((p) => [p, p.replace("_", " ")] as [string, string]),
    sim.policy,
  );
  policy.addEventListener("change", () => send("sim_config", { policy: policy.value }));
  const none: [string, string] = ["", sim.events.length ? "none" : "none (the plan has no events)"];
  const drop = select(
    "ow-sim-drop",
    [none, ...sim.events.map((e) => [String(e.event), e.label] as [string, string])],
    sim.drop_event === null ? "" : String(sim.drop_event),
  );
  drop.disabled = sim.events.length === 0;
  drop.addEventListener("change", () => send("sim_config", { drop_event: drop.value === "" ? null : Number(drop.value) }));
  return h(
    "div",
    { class: "ow-sim-config", "data-policy": sim.policy, "data-drop-event": sim.drop_event === null ? "" : sim.drop_event },
    h("label", { class: "ow-sim-field" }, h("span", { text: "policy" }), policy),
    h("label", { class: "ow-sim-field" }, h("span", { text: "drop event" }), drop),
  );
}

/** Whose values the simulator computes: the imported model's, generated ones, or why the
 * model's binding was dropped (an edit: the graph is no longer the module). */
function modelLine(model: ModelBinding | null, sim: SimSection | null, send: Send): HTMLElement | null {
  if (model && !model.bound) return h("div", { class: "ow-model ow-model-dropped", "data-bound": "false", text: `⚠ ${model.note}` });
  if (model) {
    const users = model.user_inputs ?? [];
    const weights = Math.max(0, (model.values ?? 0) - users.length);
    const parts = [...(users.length ? [users.join(", ")] : []), `${weights} weight and buffer value${weights === 1 ? "" : "s"}`];
    return h(
      "div",
      { class: "ow-model", "data-bound": "true" },
      h("span", { text: `values: ${model.name}'s own: ${parts.join(" and ")}` }),
      model.eager && sim
        ? h("button", { class: "ow-btn ow-eager-compare", text: "Compare with eager", onclick: () => send("compare_eager", {}) })
        : null,
    );
  }
  if (sim && sim.generated > 0)
    return h("div", { class: "ow-model ow-muted", text: `values: ${sim.generated} input buffer(s) generated from the seed` });
  return null;
}

const num = (v: number | null) => (v === null ? "—" : +v.toPrecision(4) + "");
/** A tolerance as Python writes it: 1.3e-6, not 0.0000013. */
export const sci = (v: number) => (v !== 0 && Math.abs(v) < 1e-3 ? v.toExponential() : String(v));

/** One output's row against eager: its mark, class and the parts of its figures line (pure,
 * so a failure's ✗ and red are unit-tested). */
export function eagerRow(o: EagerOutput): { mark: string; cls: string; parts: string[] } {
  const diff = o.max_abs_diff === null ? o.reason || "—" : `max |Δ| ${o.max_abs_diff.toExponential(2)}`;
  return {
    mark: o.allclose ? "✓" : "✗",
    cls: o.allclose ? "ow-good" : "ow-bad",
    parts: [diff, `rtol ${sci(o.rtol)}`, `atol ${sci(o.atol)}`],
  };
}

/** The imported model's outputs against PyTorch eager: a verdict and one row per output. */
function eagerBlock(model: ModelBinding | null, v: EagerVerdict | null): HTMLElement | null {
  if (!model?.bound || !model.eager) return null;
  if (!v)
    return h("div", {
      class: "ow-eager ow-muted",
      "data-match": "pending",
      text: "Run to the end, or Compare with eager, to check the outputs against PyTorch eager.",
    });
  const cls = v.match === true ? "ow-good" : v.match === false ? "ow-bad" : "ow-muted";
  const box = h(
    "div",
    { class: `ow-eager ${cls}`, "data-match": v.match === null ? "unknown" : String(v.match) },
    h("div", { class: `ow-verdict ${cls}`, text: v.match === false ? `✗ ${v.text}` : v.match ? `✓ ${v.text}` : v.text }),
  );
  if (!v.outputs.length) return box;
  // One compact row per output: the side panel is narrow.
  for (const o of v.outputs) {
    const r = eagerRow(o);
    box.append(
      h(
        "div",
        { class: `ow-eager-row ${r.cls}`, "data-allclose": String(o.allclose) },
        h("b", { text: `${r.mark} ${o.name}` }),
        h("span", { class: "ow-muted", text: ` [${o.shape.join(", ")}] ${o.dtype}` }),
        h("div", { class: "ow-eager-diff" }, ...r.parts.map((t, i) => h("span", { text: i ? ` · ${t}` : t }))),
      ),
    );
  }
  return box;
}

/** The buffers the step on screen read and wrote, with their values: shape, dtype,
 * min/max/mean and the first values; a click opens one in the inspector below. */
function touchedBlock(sim: SimSection, send: Send): HTMLElement | null {
  if (!sim.touched.length) return null;
  const rows = sim.touched.map((b: TouchedBuffer) => {
    const head = b.head.map((v) => (typeof v === "number" ? +v.toPrecision(4) + "" : v)).join(", ");
    const row = h(
      "div",
      { class: "ow-touched-row", "data-buffer": b.buffer, "data-role": b.role },
      h("span", { class: "ow-touched-name", text: b.name }),
      h("span", { class: "ow-muted", text: ` ${b.role} · [${b.shape.join(", ")}] ${b.dtype}` }),
      h("div", {
        class: "ow-touched-stats",
        text: `min ${num(b.min)} · max ${num(b.max)} · mean ${num(b.mean)}${b.nan_count ? ` · ${b.nan_count} NaN` : ""}`,
      }),
      h("div", { class: "ow-touched-head", text: `${head}${b.count > b.head.length ? ", …" : ""}` }),
    );
    row.addEventListener("click", () => send("inspect", { buffer: b.buffer }));
    return row;
  });
  return h("div", { class: "ow-touched" }, h("h4", { text: "Buffers of this step" }), ...rows);
}

/** "outputs differ from the correct plan: y (max |Δ| 1.3)", once a run has finished. */
function verdictLine(sim: SimSection): HTMLElement | null {
  const v = sim.verdict;
  if (v) {
    const cls = v.match === true ? "ow-verdict ow-good" : v.match === false ? "ow-verdict ow-bad" : "ow-verdict ow-muted";
    return h("div", {
      class: cls,
      "data-match": v.match === null ? "unknown" : String(v.match),
      text: v.match === false ? `✗ ${v.text}` : v.match ? `✓ ${v.text}` : v.text,
    });
  }
  if (sim.drop_event === null && sim.policy === "in_order") return null;
  return h("div", {
    class: "ow-verdict ow-muted",
    "data-match": "pending",
    text: "Run to the end to compare the outputs with the correct plan's.",
  });
}

function inspectorPanel(ins: InspectorSection | null, values: Float64Array, buffers: ViewModel["buffers"], send: Send): HTMLElement {
  const pick = select(
    "ow-insp-buffer",
    [["", "inspect a buffer…"], ...buffers.map((b) => [String(b.id), b.name] as [string, string])],
    ins ? String(ins.buffer) : "",
  );
  pick.addEventListener("change", () => {
    if (pick.value !== "") send("inspect", { buffer: Number(pick.value) });
  });
  const box = h("div", { class: "ow-inspector" }, h("h4", { text: "Buffer inspector" }), pick);
  if (!ins) return box;
  if (!ins.written) {
    box.append(h("p", { class: "ow-hint", text: `${ins.name} has not been written yet at this step.` }));
    return box;
  }
  const stat = (k: string, v: string) =>
    h("div", { class: "ow-stat" }, h("span", { class: "ow-k", text: k }), h("span", { class: "ow-v", text: v }));
  const f = (v: number | null) => (v === null ? "—" : v.toPrecision(5));
  box.append(
    h(
      "div",
      { class: "ow-stats" },
      stat("shape", `[${ins.shape.join(", ")}] ${ins.dtype}`),
      stat("min", f(ins.min)),
      stat("max", f(ins.max)),
      stat("mean", f(ins.mean)),
      stat("NaN", String(ins.nan_count)),
    ),
  );
  const hist = h("canvas", { class: "ow-hist" });
  box.append(hist);
  requestAnimationFrame(() => drawHist(hist, ins));
  const cells = h("div", { class: "ow-values" });
  const shown = Math.min(values.length, 48);
  for (let i = 0; i < shown; i++) cells.append(h("span", { text: Number.isNaN(values[i]) ? "NaN" : +values[i].toPrecision(4) + "" }));
  box.append(h("div", { class: "ow-muted", text: `first ${shown} of ${ins.count} values` }), cells);
  return box;
}

function drawHist(c: HTMLCanvasElement, ins: InspectorSection): void {
  if (!c.isConnected || c.clientWidth === 0) return;
  const { ctx, w, h: hh } = fitCanvas(c);
  const max = Math.max(1, ...ins.hist);
  const bw = w / Math.max(1, ins.hist.length);
  ctx.fillStyle = "#4e79a7";
  ins.hist.forEach((v, i) => {
    const bh = (v / max) * (hh - 14);
    ctx.fillRect(i * bw + 1, hh - 12 - bh, bw - 2, bh);
  });
  ctx.fillStyle = "#5a687d";
  ctx.font = "10px system-ui, sans-serif";
  ctx.textBaseline = "bottom";
  ctx.textAlign = "left";
  ctx.fillText(String(+ins.hist_lo.toPrecision(4)), 0, hh);
  ctx.textAlign = "right";
  ctx.fillText(String(+ins.hist_hi.toPrecision(4)), w, hh);
}

export function passesTable(vm: ViewModel, index: number, onPick: (i: number) => void): HTMLElement {
  if (!isAvailable(vm.passes)) return h("div", { class: "ow-panel ow-passes" }, h("p", { class: "ow-hint", text: vm.passes.reason }));
  const tbl = h("table", { class: "ow-table" });
  tbl.append(h("tr", {}, ...["#", "pass", "nodes", "created", "removed", "time"].map((t) => h("th", { text: t }))));
  vm.passes.entries.forEach((e, i) => {
    const tr = h(
      "tr",
      { class: i === index ? "ow-current" : "" },
      h("td", { text: String(i) }),
      h("td", { text: e.name }),
      h("td", { text: i === 0 ? String(e.nodes_after) : `${e.nodes_before} → ${e.nodes_after}` }),
      h("td", { class: e.created ? "ow-plus" : "", text: e.created ? `+${e.created}` : "" }),
      h("td", { class: e.removed ? "ow-minus" : "", text: e.removed ? `−${e.removed}` : "" }),
      h("td", { text: i === 0 ? "" : `${(e.seconds * 1e3).toFixed(1)} ms` }),
    );
    tr.addEventListener("click", () => onPick(i));
    tbl.append(tr);
  });
  return h("div", { class: "ow-panel ow-passes" }, tbl);
}

/** Streams offered in the pipeline bar's menu; a larger value set from Python is added to it. */
export const STREAM_CHOICES = [1, 2, 3, 4, 5, 6, 7, 8];

/** A number typed in a form: the number if it is one, else the text, for the kernel to refuse
 *  with a message naming the field (an empty box is not silently 0). */
function typed(input: HTMLInputElement): number | string {
  const v = input.value.trim();
  return v !== "" && Number.isFinite(Number(v)) ? Number(v) : input.value;
}

/** The pipeline's options in the pass bar: streams, fusion on/off, the fusion group limit.
 *  Built once and kept (so a number being typed survives redraws); `update` shows the
 *  options of the plan on screen. Each change is one `set_options` request. */
export class OptionsBar {
  readonly root: HTMLDivElement;
  private streams: HTMLSelectElement;
  private fusion: HTMLInputElement;
  private group: HTMLInputElement;
  private last: PipelineOptions | null = null;

  constructor(send: Send) {
    this.streams = h("select", { class: "ow-input ow-opt-streams", "aria-label": "most streams" });
    this.fusion = h("input", { class: "ow-opt-fusion", type: "checkbox", "aria-label": "fusion" });
    this.group = h("input", {
      class: "ow-input ow-opt-group",
      type: "number",
      min: 1,
      max: 64,
      step: 1,
      "aria-label": "most kernels per fused group",
    });
    this.streams.addEventListener("change", () => send("set_options", { max_streams: Number(this.streams.value) }));
    this.fusion.addEventListener("change", () => send("set_options", { fusion: this.fusion.checked }));
    this.group.addEventListener("change", () => send("set_options", { max_group_size: typed(this.group) }));
    // Enter commits (Chromium fires no change for it in a number box): leaving the box does, and
    // the notebook around the widget must not take the key as a shortcut.
    this.group.addEventListener("keydown", (e) => {
      if (e.key !== "Enter") return;
      e.preventDefault();
      e.stopPropagation();
      this.group.blur();
    });
    // Leaving the box shows the plan's value again: a refused number does not stay as if applied
    // (an accepted one comes back with the new view and is shown by update).
    this.group.addEventListener("blur", () => {
      if (this.last) this.group.value = String(this.last.max_group_size);
    });
    this.root = h(
      "div",
      { class: "ow-options", title: "Options of the pass pipeline: changing one re-plans the graph" },
      h("label", { class: "ow-inline" }, h("span", { text: "streams" }), this.streams),
      h("label", { class: "ow-inline" }, this.fusion, h("span", { text: "fusion" })),
      h("label", { class: "ow-inline ow-opt-group-label" }, h("span", { text: "group ≤" }), this.group),
    );
  }

  update(o: PipelineOptions): void {
    this.last = o;
    const choices = STREAM_CHOICES.includes(o.max_streams) ? STREAM_CHOICES : [...STREAM_CHOICES, o.max_streams].sort((a, b) => a - b);
    if (this.streams.dataset.choices !== choices.join()) {
      clear(this.streams);
      for (const n of choices) this.streams.append(h("option", { value: n, text: String(n) }));
      this.streams.dataset.choices = choices.join();
    }
    this.streams.value = String(o.max_streams);
    this.fusion.checked = o.fusion;
    this.group.disabled = !o.fusion;
    this.group.title = o.fusion ? "" : "fusion is off";
    // Not while the user types in it: the value arrives when they are done.
    if (document.activeElement !== this.group) this.group.value = String(o.max_group_size);
  }
}

export { clear };
