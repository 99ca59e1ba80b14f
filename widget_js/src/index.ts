// The oxiwork workbench frontend: an anywidget ESM module. Everything drawn is a function of
// the kernel-side view-model (the `view` trait plus the binary `dag` columns); local state is
// limited to zoom, open tabs and the layout cache that keeps nodes in place across passes.
// Requests go to Python as typed messages; their errors come back as messages and traits.
// The kernel syncs the input graph's DAG first; after drawing it, the frontend asks for the
// pass pipeline (see passes.ts) and the pending views fill in when it arrives.

import { COLOR_MODES, type LegendItem } from "./colors";
import { decodeDag, STATE_REMOVED, type DagArrays } from "./dagdata";
import { DagView } from "./dagview";
import { clear, h } from "./dom";
import { remember, stableLayout, type Layout, type Placed } from "./layout";
import { MemoryChart, StreamChart, TreeChart } from "./charts_view";
import { buildPanel, detailsPanel, OptionsBar, passesTable, simPanel } from "./panels";
import { figureDefinitions, formatBytes, modeTotals } from "./charts";
import { asBytes } from "./dagdata";
import { PassLoader } from "./passes";
import { CodeView } from "./code";
import { comparePanel } from "./compare";
import { sweepPanel, type SweepTable } from "./sweep";
import type { RenderProps } from "@anywidget/types";
import { Requests, type Model, type Payload, type WorkbenchModel, type Reply, type RequestType, type Send } from "./messages";
import {
  isAvailable,
  type DagMeta,
  type PlanFigures,
  type ErrorEntry,
  type SimSection,
  type InspectorSection,
  type NodeDetails,
  type PipelineOptions,
  type ViewModel,
} from "./types";

type SideTab = "details" | "build" | "sim";
type BottomTab = "memory" | "streams" | "code" | "compare" | "sweep" | "dom" | "postdom" | "passes";

export class App {
  readonly root: HTMLDivElement;
  private dagView: DagView;
  private memory = new MemoryChart();
  private streams = new StreamChart();
  private domTree = new TreeChart("dominator");
  private postTree = new TreeChart("post-dominator");
  private code = new CodeView();
  private vm!: ViewModel;
  private dag: DagArrays = decodeDag(null);
  private layout!: Layout;
  private cache = new Map<number, Placed>();
  private posOf = new Map<number, number>();
  private side: SideTab = "details";
  private bottom: BottomTab = "memory";
  private requests: Requests;
  private status: HTMLDivElement;
  private sideBody: HTMLDivElement;
  private bottomBody: HTMLDivElement;
  private bottomTools: HTMLDivElement;
  private errorsBox: HTMLDivElement;
  private header: HTMLDivElement;
  private passbar: HTMLDivElement;
  /** The slider part of the pass bar, redrawn with the view; the options stay (see OptionsBar). */
  private passMain: HTMLDivElement;
  private optionsBar: OptionsBar;
  private legend: HTMLDivElement;
  private colorSel: HTMLSelectElement;
  private sideTabs: HTMLDivElement;
  private bottomTabs: HTMLDivElement;
  private dismissed = 0;
  private main!: HTMLDivElement;
  private sidePanel!: HTMLDivElement;
  private vsplit!: HTMLDivElement;
  private hsplit!: HTMLDivElement;
  private handlers: [string, (...a: any[]) => void][] = [];
  private passes: PassLoader;
  private readonly t0: number;
  /** Time of the first DAG draw after construction, in ms (read by the benchmark). */
  firstDrawMs = -1;
  /** Time from construction until the pass views were filled, in ms (-1 until then). */
  passesMs = -1;

  constructor(
    private model: Model,
    el: HTMLElement,
  ) {
    const t0 = (this.t0 = performance.now());
    this.requests = new Requests((content) => this.model.send(content));
    this.passes = new PassLoader(() => this.requestPasses());
    this.dagView = new DagView({
      onSelect: (pos) => this.send("select", { node: pos >= 0 ? this.dag.int.id[pos] : null }),
      onLink: (a, b) => this.send("add_dependency", { src: this.dag.int.id[a], dst: this.dag.int.id[b] }),
      onLegend: (items) => this.showLegend(items),
    });
    this.colorSel = h("select", { class: "ow-input ow-color-mode", "aria-label": "colour nodes by" });
    for (const [k, v] of Object.entries(COLOR_MODES)) this.colorSel.append(h("option", { value: k, text: v.label }));
    this.colorSel.addEventListener("change", () => {
      this.model.set("color_mode", this.colorSel.value);
      this.model.save_changes();
    });
    this.legend = h("div", { class: "ow-legend" });
    this.header = h("div", { class: "ow-header" });
    this.passMain = h("div", { class: "ow-pass-main" });
    this.optionsBar = new OptionsBar((type, payload) => this.send(type, payload));
    this.passbar = h("div", { class: "ow-passbar" }, this.passMain, this.optionsBar.root);
    this.errorsBox = h("div", { class: "ow-errors" });
    this.status = h("div", { class: "ow-status", role: "status" });
    this.sideTabs = h("div", { class: "ow-tabs" });
    this.sideBody = h("div", { class: "ow-side-body" });
    this.bottomTabs = h("div", { class: "ow-tabs" });
    this.bottomTools = h("div", { class: "ow-bottom-tools" });
    this.bottomBody = h("div", { class: "ow-bottom-body" });
    this.dagView.root.append(this.legend);
    this.root = h(
      "div",
      { class: "ow-root" },
      this.header,
      this.passbar,
      this.errorsBox,
      (this.main = h(
        "div",
        { class: "ow-main" },
        this.dagView.root,
        (this.vsplit = h("div", {
          class: "ow-split ow-split-v",
          title: "drag to resize the side panel",
          role: "separator",
          "aria-orientation": "vertical",
        })),
        (this.sidePanel = h("div", { class: "ow-side" }, this.sideTabs, this.status, this.sideBody)),
      )),
      (this.hsplit = h("div", {
        class: "ow-split ow-split-h",
        title: "drag to resize the graph and the charts",
        role: "separator",
        "aria-orientation": "horizontal",
      })),
      h("div", { class: "ow-bottom" }, h("div", { class: "ow-bottom-head" }, this.bottomTabs, this.bottomTools), this.bottomBody),
    );
    this.bindSplitters();
    // The timeline is the plan's: a step's node (an event the plan added) may not be in the
    // graph on screen at an earlier slider stop, and then there is nothing to select.
    this.streams.onPick = (id) => {
      const pos = this.posOf.get(id);
      if (pos !== undefined && this.dag.int.state[pos] !== STATE_REMOVED) this.send("select", { node: id });
    };
    this.domTree.onPick = (pos) => this.send("select", { node: this.dag.int.id[pos] });
    this.postTree.onPick = (pos) => this.send("select", { node: this.dag.int.id[pos] });
    el.append(this.root);

    // The view and the DAG columns change together (one sync message), so a new view-model
    // fires both events: the pass request waits for the view's.
    this.listen("change:view", () => {
      this.refresh(true);
      this.passes.viewArrived(this.pending);
    });
    this.listen("change:dag", () => this.refresh(true));
    this.listen(
      "change:selection change:details change:color_mode change:sim_position change:sim_state change:pass_index change:max_streams change:fusion change:max_group_size change:pinned change:sweep_table",
      () => this.refresh(false),
    );
    this.listen("change:inspector change:inspector_values", () => this.renderSide());
    this.listen("change:errors", () => this.renderErrors());
    this.listen("msg:custom", (msg: unknown) => this.onMessage(msg));
    this.refresh(true);
    this.dagView.drawNow();
    this.firstDrawMs = performance.now() - t0;
    this.root.dataset.firstDrawMs = this.firstDrawMs.toFixed(1);
    this.root.dataset.passesAtFirstDraw = this.pending ? "pending" : "ready";
    // Drawn: now the kernel may spend its time on the passes.
    this.passes.viewArrived(this.pending);
  }

  /** Whether the view-model on screen waits for the pass pipeline. */
  private get pending(): boolean {
    return this.vm?.pending === true;
  }

  private requestPasses(): string | null {
    try {
      const id = this.send("load_passes", {});
      this.status.textContent = "computing passes…";
      return id;
    } catch {
      return null; // no kernel (a static export): the synced views are all there is
    }
  }

  /** Resizable panels: the side panel's width and the graph's height follow a drag on the
   *  splitters (kept in this view; sizes are clamped so every panel stays usable). */
  private bindSplitters(): void {
    const drag = (el: HTMLElement, move: (dx: number, dy: number, start: number) => void, start: () => number) => {
      el.addEventListener("pointerdown", (e) => {
        e.preventDefault();
        const x0 = e.clientX;
        const y0 = e.clientY;
        const s0 = start();
        try {
          el.setPointerCapture(e.pointerId);
        } catch {
          /* synthetic events */
        }
        const mv = (ev: PointerEvent) => move(ev.clientX - x0, ev.clientY - y0, s0);
        const up = () => {
          el.removeEventListener("pointermove", mv);
          el.removeEventListener("pointerup", up);
        };
        el.addEventListener("pointermove", mv);
        el.addEventListener("pointerup", up);
      });
    };
    drag(
      this.vsplit,
      (dx, _dy, w0) => {
        const max = Math.max(240, this.root.clientWidth - 320);
        this.sidePanel.style.width = `${Math.min(max, Math.max(220, w0 - dx))}px`;
        this.root.dataset.sideWidth = this.sidePanel.style.width;
      },
      () => this.sidePanel.getBoundingClientRect().width,
    );
    drag(
      this.hsplit,
      (_dx, dy, h0) => {
        this.main.style.height = `${Math.min(1400, Math.max(220, h0 + dy))}px`;
        this.root.dataset.mainHeight = this.main.style.height;
      },
      () => this.main.getBoundingClientRect().height,
    );
  }

  private listen(events: string, cb: (...a: any[]) => void): void {
    for (const ev of events.split(" ")) {
      this.model.on(ev, cb);
      this.handlers.push([ev, cb]);
    }
  }

  destroy(): void {
    for (const [ev, cb] of this.handlers) this.model.off(ev, cb);
    this.dagView.destroy();
    this.memory.destroy();
    this.streams.destroy();
    this.domTree.destroy();
    this.postTree.destroy();
  }

  /** Sends a typed request; returns its request id. Its reply (matched by that id) sets the
   *  status line. */
  send<T extends RequestType>(type: T, payload: Payload<T>): string {
    const { id, reply } = this.requests.send(type, payload);
    this.status.textContent = "…";
    this.status.className = "ow-status ow-pending";
    void reply.then((r) => this.showReply(r));
    return id;
  }

  private onMessage(msg: unknown): void {
    const r = this.requests.received(msg);
    if (r) this.passes.replied(r.request_id, this.pending);
  }

  private showReply(r: Reply): void {
    if (r.type === "error") {
      this.status.textContent = `✗ ${r.message ?? "error"}`;
      this.status.className = "ow-status ow-bad";
    } else {
      this.status.textContent = r.message ? `✓ ${r.message}` : "✓";
      this.status.className = "ow-status ow-good";
    }
    // The reply to an edit comes after the request for its passes went out: say both.
    if (this.passes.waiting) this.status.textContent += " · computing passes…";
  }

  /** The simulator section: its steps from the view-model, its position from `sim_state`. */
  private sim(): SimSection | null {
    const s = this.vm?.sim;
    if (!isAvailable(s)) return null;
    const dyn = (this.model.get("sim_state") ?? {}) as Partial<SimSection>;
    const defaults = {
      policies: [],
      events: [],
      position: -1,
      executed: 0,
      executed_steps: [],
      policy: "in_order",
      drop_event: null,
      dropped_steps: [],
      verdict: null,
      eager: null,
      generated: 0,
      touched: [],
    };
    return { ...defaults, finished: false, races: [], message: "", highlight: [], live_buffers: [], ...s, ...dyn };
  }

  private get selectedPos(): number {
    const id = this.model.get("selection");
    return typeof id === "number" && id >= 0 ? (this.posOf.get(id) ?? -1) : -1;
  }

  private refresh(data: boolean): void {
    const vm = this.model.get("view") as ViewModel | undefined;
    if (!vm || typeof vm !== "object" || !("dag" in vm)) return;
    this.vm = vm;
    if (data) {
      this.dag = decodeDag(this.model.get("dag"));
      this.posOf = new Map();
      const dm = isAvailable(vm.dag) ? vm.dag : null;
      const names = dm?.names ?? [];
      for (let i = 0; i < this.dag.n; i++)
        if (this.dag.int.state[i] !== STATE_REMOVED || !this.posOf.has(this.dag.int.id[i])) this.posOf.set(this.dag.int.id[i], i);
      const anchors = new Map<number, number[]>(dm?.anchors ?? []);
      const hadCache = this.cache.size > 0;
      this.layout = stableLayout(
        { n: this.dag.n, ids: this.dag.int.id, names, level: this.dag.int.level, src: this.dag.src, dst: this.dag.dst, anchors },
        this.cache,
      );
      remember(this.cache, this.dag.int.id, names, this.layout);
      if (!hadCache || this.layout.reused === 0) this.dagView.fit();
    }
    const dm = isAvailable(vm.dag) ? vm.dag : null;
    const mode = String(this.model.get("color_mode") || "kind");
    this.colorSel.value = mode in COLOR_MODES ? mode : "kind";
    const sim = this.sim();
    const simNodes = (sim?.highlight ?? []).map((id) => this.posOf.get(id) ?? -1).filter((p) => p >= 0);
    // Both steps of every race the simulator reports, on the graph on screen.
    const raceIds = new Set<number>();
    for (const r of sim?.races ?? []) {
      raceIds.add(r.node);
      if (r.first_node !== undefined) raceIds.add(r.first_node);
    }
    const raceNodes = [...raceIds].map((id) => this.posOf.get(id) ?? -1).filter((p) => p >= 0 && this.dag.int.state[p] !== STATE_REMOVED);
    const sel = this.selectedPos;
    this.dagView.setState({
      dag: this.dag,
      layout: this.layout,
      names: dm?.names ?? [],
      kinds: dm?.kinds ?? [],
      ops: dm?.ops ?? [],
      colorMode: this.colorSel.value,
      selected: sel,
      simNodes,
      raceNodes,
      hasTopo: !!dm?.has_topo,
      editable: !!this.vm.editable,
      bodies: dm?.bodies ?? [],
    });
    this.renderHeader(dm);
    this.renderPassbar();
    this.renderSide();
    this.renderBottom();
    this.renderErrors();
    this.root.dataset.passes = this.pending ? "pending" : "ready";
    if (!this.pending && this.passesMs < 0 && isAvailable(vm.passes)) {
      this.passesMs = performance.now() - this.t0;
      this.root.dataset.passesMs = this.passesMs.toFixed(1);
    }
    this.root.dataset.passIndex = String(this.model.get("pass_index") ?? 0);
    const o = this.options;
    this.root.dataset.maxStreams = String(o.max_streams);
    this.root.dataset.fusion = String(o.fusion);
    this.root.dataset.maxGroupSize = String(o.max_group_size);
    this.root.dataset.simPosition = String(this.model.get("sim_position") ?? -1);
  }

  private showLegend(items: LegendItem[]): void {
    const key = items.map((i) => i.label + i.color).join("|");
    if (this.legend.dataset.key === key) return;
    this.legend.dataset.key = key;
    clear(this.legend);
    for (const it of items.slice(0, 8)) {
      const sw = h("span", { class: "ow-swatch" });
      sw.style.background = it.color;
      this.legend.append(h("span", { class: "ow-legend-item" }, sw, it.label));
    }
  }

  private renderHeader(dm: DagMeta | null): void {
    clear(this.header);
    const stats = dm
      ? `${dm.num_nodes} nodes · ${dm.num_edges} edges · ${dm.num_buffers ?? this.vm.buffers.length} buffers${dm.num_streams ? ` · ${plural(dm.num_streams, "stream")}` : ""}`
      : (this.vm.dag as { reason: string }).reason;
    const note = dm?.notes?.[this.colorSel.value];
    this.header.append(
      h(
        "div",
        { class: "ow-title" },
        h("span", { class: "ow-logo", text: "◆" }),
        h("span", { text: "oxiwork" }),
        h("span", { class: "ow-subtitle", text: dm?.title ?? "" }),
      ),
      h("div", { class: "ow-graph-stats", text: stats }),
      h("div", { class: "ow-spacer" }),
      h("label", { class: "ow-inline" }, h("span", { text: "colour by" }), this.colorSel),
      note ? h("span", { class: "ow-note", text: note }) : "",
    );
  }

  /** The pipeline options of the plan on screen (the kernel's traits; defaults before they sync). */
  private get options(): PipelineOptions {
    const ms = this.model.get("max_streams");
    const fu = this.model.get("fusion");
    const gs = this.model.get("max_group_size");
    return {
      max_streams: typeof ms === "number" ? ms : 4,
      fusion: typeof fu === "boolean" ? fu : true,
      max_group_size: typeof gs === "number" ? gs : 16,
    };
  }

  private renderPassbar(): void {
    const passes = this.vm.passes;
    this.optionsBar.update(this.options);
    clear(this.passMain);
    if (!isAvailable(passes) || passes.entries.length === 0) {
      const text = isAvailable(passes) ? "no passes" : passes.reason;
      if (!isAvailable(passes) && passes.pending) {
        this.passMain.append(h("span", { class: "ow-passlabel", text: "Pipeline" }), h("span", { class: "ow-muted ow-computing", text }));
      } else this.passMain.append(h("span", { class: "ow-muted", text }));
      return;
    }
    const idx = Math.min(Number(this.model.get("pass_index") ?? 0), passes.entries.length - 1);
    const slider = h("input", {
      class: "ow-pass-slider",
      type: "range",
      min: 0,
      max: passes.entries.length - 1,
      step: 1,
      value: idx,
      "aria-label": "pipeline position",
    });
    slider.addEventListener("change", () => this.send("set_pass", { index: Number(slider.value) }));
    const ticks = h("div", { class: "ow-pass-ticks" });
    passes.entries.forEach((e, i) => {
      const t = h("button", { class: i === idx ? "ow-pass-tick ow-current" : "ow-pass-tick", text: e.name });
      t.addEventListener("click", () => this.send("set_pass", { index: i }));
      ticks.append(t);
    });
    const e = passes.entries[idx];
    const delta = idx === 0 ? "input graph" : `after ${e.name}: ${e.nodes_before} → ${e.nodes_after} nodes`;
    this.passMain.append(
      h("span", { class: "ow-passlabel", text: "Pipeline" }),
      h("div", { class: "ow-pass-track" }, slider, ticks),
      h(
        "span",
        { class: "ow-pass-delta" },
        delta,
        e.created ? h("span", { class: "ow-plus", text: ` +${e.created} created` }) : null,
        e.removed ? h("span", { class: "ow-minus", text: ` −${e.removed} removed` }) : null,
      ),
    );
  }

  private renderSide(): void {
    if (!this.vm) return;
    clear(this.sideTabs);
    const tabs: [SideTab, string][] = [
      ["details", "Details"],
      ["build", "Build"],
      ["sim", "Simulator"],
    ];
    for (const [k, label] of tabs) {
      const b = h("button", { class: k === this.side ? "ow-tab ow-active" : "ow-tab", text: label, "data-tab": k });
      b.addEventListener("click", () => {
        this.side = k;
        this.renderSide();
      });
      this.sideTabs.append(b);
    }
    // Keep focus and typed text in the build form across redraws caused by other traits.
    const active = document.activeElement;
    if (
      this.side === "build" &&
      active &&
      this.sideBody.contains(active) &&
      this.sideBody.dataset.kind === "build" &&
      this.sideBody.dataset.key === this.buildKey()
    )
      return;
    clear(this.sideBody);
    this.sideBody.dataset.kind = this.side;
    const send: Send = (t, p) => this.send(t, p);
    if (this.side === "details") {
      const d = this.model.get("details") as NodeDetails | Record<string, never>;
      this.sideBody.append(
        detailsPanel(d && "id" in d ? (d as NodeDetails) : null, this.vm.editable, send, this.vm.summary ?? [], () => {
          this.bottom = "code";
          this.renderBottom();
        }),
      );
    } else if (this.side === "build") {
      this.sideBody.dataset.key = this.buildKey();
      this.sideBody.append(buildPanel(this.vm, send));
    } else {
      const sim = this.sim();
      const ins = this.model.get("inspector") as InspectorSection | Record<string, never>;
      const raw = asBytes(this.model.get("inspector_values"));
      const values = raw && raw.byteLength >= 8 ? new Float64Array(raw.slice().buffer) : new Float64Array(0);
      const sel = this.model.get("selection");
      this.sideBody.append(
        simPanel(
          sim,
          sim ? "" : (this.vm.sim as { reason: string }).reason,
          this.vm.model ?? null,
          ins && "buffer" in ins ? (ins as InspectorSection) : null,
          values,
          this.vm.buffers,
          typeof sel === "number" && sel >= 0 ? sel : null,
          send,
          (id) => this.send("select", { node: id }),
        ),
      );
    }
  }

  private buildKey(): string {
    return `${this.vm.buffers.map((b) => b.id + b.name).join()}|${this.vm.ops.length}|${this.vm.editable}`;
  }

  private renderBottom(): void {
    clear(this.bottomTabs);
    const tabs: [BottomTab, string][] = [
      ["memory", "Memory"],
      ["streams", "Streams"],
      ["code", "Code"],
      ["compare", "Compare"],
      ["sweep", "Sweep"],
      ["dom", "Dominator tree"],
      ["postdom", "Post-dominator tree"],
      ["passes", "Passes"],
    ];
    for (const [k, label] of tabs) {
      const b = h("button", { class: k === this.bottom ? "ow-tab ow-active" : "ow-tab", text: label, "data-tab": k });
      b.addEventListener("click", () => {
        this.bottom = k;
        this.renderBottom();
      });
      this.bottomTabs.append(b);
    }
    const vm = this.vm;
    const sim = this.sim();
    const simStep = sim ? sim.position : -1;
    const simNode = sim && sim.position >= 0 && sim.position < sim.steps.length ? sim.steps[sim.position].node : -1;
    const selId = Number(this.model.get("selection") ?? -1);
    const ins = this.model.get("inspector") as { buffer?: number } | undefined;
    this.memory.set(isAvailable(vm.memory) ? vm.memory : null, isAvailable(vm.memory) ? "" : vm.memory.reason, simStep, ins?.buffer ?? -1);
    const raceSteps = new Set<number>();
    for (const r of sim?.races ?? []) {
      raceSteps.add(r.step);
      if (r.first !== undefined) raceSteps.add(r.first);
    }
    this.streams.set(isAvailable(vm.streams) ? vm.streams : null, isAvailable(vm.streams) ? "" : vm.streams.reason, simStep, selId, {
      raceSteps,
      droppedEvent: sim?.drop_event ?? null,
      droppedSteps: new Set(sim?.dropped_steps ?? []),
    });
    const dm = isAvailable(vm.dag) ? vm.dag : null;
    const live = Int32Array.from(this.dag.int.state, (s) => (s === STATE_REMOVED ? 0 : 1));
    const simPos = simNode >= 0 ? (this.posOf.get(simNode) ?? -1) : -1;
    this.domTree.set(
      dm?.has_dominance ? this.dag.int.idom : null,
      dm?.names ?? [],
      live,
      this.selectedPos,
      simPos,
      dm?.notes?.dominator || "no dominator tree",
    );
    this.postTree.set(
      dm?.has_dominance ? this.dag.int.ipdom : null,
      dm?.names ?? [],
      live,
      this.selectedPos,
      simPos,
      dm?.notes?.postdominator || "no post-dominator tree",
    );

    const det = this.model.get("details") as Partial<NodeDetails> | undefined;
    this.code.set(
      det?.name ?? "",
      det?.source,
      det?.name
        ? `${det.name} launches no generated CUDA C (not a kernel, or an opaque one)`
        : "Select a kernel to read its generated CUDA C here.",
    );
    clear(this.bottomTools);
    const body = this.bottomBody;
    const want: Record<BottomTab, HTMLElement> = {
      memory: this.memory.root,
      streams: this.streams.root,
      code: this.code.root,
      dom: this.domTree.root,
      postdom: this.postTree.root,
      passes: passesTable(vm, Number(this.model.get("pass_index") ?? 0), (i) => this.send("set_pass", { index: i })),
      compare: comparePanel(pinnedFigures(this.model.get("pinned")), vm.figures && "kernels" in vm.figures ? vm.figures : null, (t, p) =>
        this.send(t, p),
      ),
      sweep: sweepPanel(
        sweepTable(this.model.get("sweep_table")),
        {
          max_streams: Number(this.model.get("max_streams")),
          fusion: !!this.model.get("fusion"),
          max_group_size: Number(this.model.get("max_group_size")),
        },
        (t, p) => this.send(t, p),
        this.bottomBody.clientWidth - 24,
      ),
    };
    // Charts stay attached (hidden) so that their data- counts are always readable.
    for (const k of Object.keys(want) as BottomTab[]) {
      const elx = want[k];
      if (k === "passes" || k === "compare" || k === "sweep") continue;
      if (elx.parentElement !== body) body.append(elx);
      elx.classList.toggle("ow-hidden", k !== this.bottom);
    }
    body.querySelector(".ow-passes")?.remove();
    body.querySelector(".ow-compare")?.remove();
    body.querySelector(".ow-sweep")?.remove();
    if (this.bottom === "passes") body.append(want.passes);
    if (this.bottom === "compare") body.append(want.compare);
    if (this.bottom === "sweep") body.append(want.sweep);
    if (this.bottom === "memory" && isAvailable(vm.memory)) {
      const modeSel = h("select", { class: "ow-input ow-memory-mode", "aria-label": "memory planner" });
      for (const m of vm.memory.modes) modeSel.append(h("option", { value: m, text: m }));
      modeSel.value = vm.memory.mode;
      modeSel.addEventListener("change", () => this.send("set_memory_mode", { mode: modeSel.value }));
      const m = vm.memory;
      this.bottomTools.append(
        h("span", {
          class: "ow-muted",
          text: `execution plan · ${m.buffers.length} buffers over ${m.num_steps} steps · arena ${formatBytes(m.arena_bytes)} = ${(m.arena_bytes / Math.max(1, m.lower_bound_bytes)).toFixed(2)} × lower bound${m.optimal ? " (optimal)" : ""}${(m.liveness_bound_bytes ?? m.lower_bound_bytes) < m.lower_bound_bytes ? ` · streams cost ${formatBytes(m.lower_bound_bytes - (m.liveness_bound_bytes ?? 0))} over one-order liveness` : ""}`,
        }),
        h("label", { class: "ow-inline" }, h("span", { text: "planner" }), modeSel),
      );
    }
    if (this.bottom === "memory" && !isAvailable(vm.memory) && vm.memory.can_plan) {
      this.bottomTools.append(
        h("button", { class: "ow-btn ow-primary ow-plan-memory", text: "Plan memory", onclick: () => this.send("plan_memory", {}) }),
      );
    }
    if (this.bottom === "streams" && isAvailable(vm.streams)) {
      const s = vm.streams;
      const modeSel = h("select", { class: "ow-input ow-stream-mode", "aria-label": "launch mode" });
      for (const m of s.modes) modeSel.append(h("option", { value: m, text: m === "graph" ? "one graph launch" : "a launch per kernel" }));
      modeSel.value = s.mode;
      modeSel.addEventListener("change", () => this.send("set_stream_mode", { mode: modeSel.value }));
      this.bottomTools.append(
        h("span", {
          class: "ow-muted ow-stream-totals",
          text: modeTotals(s),
          title: figureDefinitions(s)
            .map(([k, v]) => `${k}: ${v}`)
            .join("\n"),
        }),
        h("label", { class: "ow-inline" }, h("span", { text: "drawn" }), modeSel),
      );
    }
    this.memory.schedule();
    this.streams.schedule();
    this.domTree.schedule();
    this.postTree.schedule();
  }

  private renderErrors(): void {
    const errs = (this.model.get("errors") as ErrorEntry[] | undefined) ?? [];
    clear(this.errorsBox);
    const shown = errs.slice(this.dismissed);
    this.errorsBox.dataset.count = String(shown.length);
    if (!shown.length) return;
    for (const e of shown.slice(-3)) {
      this.errorsBox.append(
        h(
          "div",
          { class: "ow-error", "data-request": e.request_id },
          h("span", { class: "ow-error-kind", text: e.kind || "error" }),
          h("span", { class: "ow-error-msg", text: e.message }),
        ),
      );
    }
    const dismiss = h("button", { class: "ow-btn ow-small ow-dismiss", text: "Dismiss" });
    dismiss.addEventListener("click", () => {
      this.dismissed = errs.length;
      this.renderErrors();
    });
    this.errorsBox.append(dismiss);
  }
}

function sweepTable(t: unknown): SweepTable | null {
  const x = t as Partial<SweepTable> | null | undefined;
  return x && Array.isArray(x.rows) ? (x as SweepTable) : null;
}

function pinnedFigures(p: unknown): PlanFigures | null {
  return p && typeof p === "object" && "kernels" in p ? (p as PlanFigures) : null;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/** anywidget's entry point, typed with the Workbench's traits. */
function render({ model, el }: Pick<RenderProps<WorkbenchModel>, "model" | "el">): () => void {
  const app = new App(model, el);
  return () => app.destroy();
}

export default { render };
