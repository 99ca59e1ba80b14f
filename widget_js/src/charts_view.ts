// Canvas drawing of the memory Gantt chart, the stream timeline and the dominator trees.
// Geometry comes from charts.ts; each view records how many shapes it drew in data-
// attributes (data-rects, data-bars...) so the browser test can count them.

import {
  FULL,
  isFull,
  panWindow,
  zoomWindow,
  type XWindow,
  byteTicks,
  formatBytes,
  formatTime,
  ganttGeometry,
  memoryMarkPoints,
  niceTicks,
  timelineGeometry,
  treeGeometry,
  type Rect,
} from "./charts";
import { PALETTE } from "./colors";
import { fitCanvas, fitText, h } from "./dom";
import type { MemorySection, StreamsSection } from "./types";

const FONT = `11px system-ui, -apple-system, "Segoe UI", sans-serif`;

// Dominator trees: pixels per leaf row when the panel scrolls, margins, and the tallest
// canvas drawn (browsers cap canvas sizes; 16k px is safe everywhere).
const TREE_ROW = 15;
const TREE_TOP = 30;
const TREE_BOTTOM = 16;
const TREE_MAX_HEIGHT = 16000;
// Columns: margins and the least width of one depth (room for an inner node's name).
const TREE_LEFT = 20;
const TREE_RIGHT = 170;
const TREE_COL = 120;

/** A canvas with a DOM tooltip for hovering rectangles, a legend, and (for the charts with
 *  a time or step axis) zoom with the wheel, pan by dragging, and a reset. */
abstract class CanvasChart {
  readonly root: HTMLDivElement;
  readonly canvas: HTMLCanvasElement;
  protected tooltip: HTMLDivElement;
  protected legend: HTMLDivElement;
  protected rects: Rect[] = [];
  protected hover = -1;
  /** The visible part of the x axis (zoom); FULL shows everything. */
  protected win: XWindow = FULL;
  private frame = 0;
  private ro: ResizeObserver | null = null;
  private drag: { x: number; win: XWindow; moved: boolean } | null = null;
  private reset: HTMLButtonElement;

  constructor(cls: string, zoomable = false) {
    this.canvas = h("canvas", { class: "ow-chart-canvas" });
    this.tooltip = h("div", { class: "ow-tooltip" });
    this.tooltip.style.display = "none";
    this.legend = h("div", { class: "ow-chart-legend" });
    this.reset = h("button", {
      class: "ow-btn ow-small ow-chart-reset",
      text: "Reset zoom",
      title: "show the whole axis (double-click)",
      onclick: () => this.resetZoom(),
    });
    this.reset.style.display = "none";
    this.root = h(
      "div",
      { class: `ow-chart ${cls}`, "data-zoom": "1" },
      this.canvas,
      this.tooltip,
      h("div", { class: "ow-chart-head" }, this.legend, this.reset),
    );
    this.canvas.addEventListener("pointermove", (e) => {
      const r = this.canvas.getBoundingClientRect();
      const x = e.clientX - r.left;
      const y = e.clientY - r.top;
      if (this.drag) {
        const pw = Math.max(1, r.width - 88);
        if (Math.abs(e.clientX - this.drag.x) > 3) this.drag.moved = true;
        if (this.drag.moved) this.setWindow(panWindow(this.drag.win, -(e.clientX - this.drag.x) / pw));
        return;
      }
      let hit = -1;
      for (let i = this.rects.length - 1; i >= 0; i--) {
        const q = this.rects[i];
        if (x >= q.x && x <= q.x + q.w && y >= q.y && y <= q.y + q.h) {
          hit = i;
          break;
        }
      }
      if (hit !== this.hover) {
        this.hover = hit;
        this.schedule();
      }
      if (hit < 0) this.tooltip.style.display = "none";
      else {
        this.tooltip.replaceChildren(...this.describe(this.rects[hit].index));
        this.tooltip.style.display = "block";
        const tw = this.tooltip.offsetWidth || 200;
        const th = this.tooltip.offsetHeight || 60;
        // Flipped to the pointer's left / above near the right / bottom edge.
        this.tooltip.style.left = `${x + 14 + tw > r.width ? Math.max(0, x - 14 - tw) : x + 14}px`;
        this.tooltip.style.top = `${y + 14 + th > r.height ? Math.max(0, y - 14 - th) : y + 14}px`;
      }
    });
    this.canvas.addEventListener("pointerleave", () => {
      this.tooltip.style.display = "none";
      this.hover = -1;
      this.schedule();
    });
    this.canvas.addEventListener("click", () => {
      if (this.hover >= 0) this.clicked(this.rects[this.hover].index);
    });
    if (zoomable) {
      this.canvas.addEventListener(
        "wheel",
        (e) => {
          e.preventDefault();
          const r = this.canvas.getBoundingClientRect();
          const left = 72;
          const pw = Math.max(1, r.width - left - 16);
          this.setWindow(zoomWindow(this.win, (e.clientX - r.left - left) / pw, Math.exp(-e.deltaY * 0.002)));
        },
        { passive: false },
      );
      this.canvas.addEventListener("pointerdown", (e) => {
        this.drag = { x: e.clientX, win: this.win, moved: false };
        try {
          this.canvas.setPointerCapture(e.pointerId);
        } catch {
          /* synthetic events */
        }
      });
      const end = () => {
        const d = this.drag;
        this.drag = null;
        // A drag is not a click on the bar under the pointer.
        if (d?.moved) this.hover = -1;
      };
      this.canvas.addEventListener("pointerup", end);
      this.canvas.addEventListener("dblclick", () => this.resetZoom());
    }
    if (typeof ResizeObserver !== "undefined") {
      this.ro = new ResizeObserver(() => this.schedule());
      this.ro.observe(this.root);
    }
  }

  /** Shows `win` of the x axis (zoom and pan). */
  setWindow(win: XWindow): void {
    this.win = win;
    const full = isFull(win);
    this.reset.style.display = full ? "none" : "";
    this.root.dataset.zoom = (1 / (win.hi - win.lo)).toFixed(2);
    this.root.dataset.window = `${win.lo.toFixed(4)},${win.hi.toFixed(4)}`;
    this.schedule();
  }

  resetZoom(): void {
    this.setWindow(FULL);
  }

  destroy(): void {
    this.ro?.disconnect();
  }

  schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      // A hidden tab is drawn when it is shown (renderBottom schedules it): a 50,000-node
      // dominator tree must not be drawn behind the memory chart.
      if (this.canvas.clientWidth > 0 && !this.root.classList.contains("ow-hidden")) this.draw();
    });
  }

  /** The legend: one entry per kind of mark drawn, [css class of the swatch, text]. */
  protected showLegend(items: [string, string, string?][]): void {
    const key = items.map(([c, t]) => c + t).join("|");
    if (this.legend.dataset.key === key) return;
    this.legend.dataset.key = key;
    this.legend.replaceChildren(
      ...items.map(([c, t, long]) =>
        h("span", { class: "ow-legend-item", "data-mark": c, title: long ?? t }, h("span", { class: `ow-mark ow-chart-mark-${c}` }), t),
      ),
    );
  }

  protected clicked(_index: number): void {}
  protected abstract describe(index: number): Node[];
  protected abstract draw(): void;
}

function message(ctx: CanvasRenderingContext2D, w: number, hh: number, text: string): void {
  ctx.fillStyle = "#7a8494";
  ctx.font = "13px system-ui, sans-serif";
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  ctx.fillText(text, w / 2, hh / 2);
}

function axes(ctx: CanvasRenderingContext2D, left: number, top: number, right: number, bottom: number): void {
  ctx.strokeStyle = "#aab3c0";
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(left + 0.5, top);
  ctx.lineTo(left + 0.5, bottom + 0.5);
  ctx.lineTo(right, bottom + 0.5);
  ctx.stroke();
}

export class MemoryChart extends CanvasChart {
  private mem: MemorySection | null = null;
  private reason = "";
  private simStep = -1;
  private highlightBuffer = -1;

  constructor() {
    super("ow-memory", true);
    this.root.dataset.rects = "0";
  }

  set(mem: MemorySection | null, reason: string, simStep: number, highlightBuffer: number): void {
    this.mem = mem;
    this.reason = reason;
    this.simStep = simStep;
    this.highlightBuffer = highlightBuffer;
    // The count is part of the data, not of the drawing, so it is right even while hidden.
    this.root.dataset.rects = String(mem ? mem.buffers.length : 0);
    this.root.dataset.available = String(!!mem);
    this.root.dataset.mode = mem ? mem.mode : "";
    this.schedule();
  }

  protected describe(index: number): Node[] {
    const mem = this.mem!;
    const b = mem.buffers[index];
    const inBound = (mem.bound_buffers ?? []).includes(b.id);
    return [
      h("div", { class: "ow-tt-name", text: b.name }),
      h("div", { class: "ow-tt-sub", text: `${formatBytes(b.size)} at offset ${formatBytes(b.offset)}` }),
      b.view_of !== undefined
        ? h("div", {
            class: "ow-tt-sub",
            text: `a view of ${mem.buffers.find((x) => x.id === b.view_of)?.name ?? "its base"}: its bytes, no memory of its own`,
          })
        : null,
      h("div", { class: "ow-tt-sub", text: `live steps [${b.start}, ${b.end})` }),
      inBound
        ? h("div", {
            class: "ow-tt-sub",
            text: `one of ${mem.bound_buffers!.length} outlined buffers, no two of them ordered by the events: they need disjoint bytes, ${formatBytes(mem.lower_bound_bytes)} in all (the lower bound)`,
          })
        : null,
    ].filter((x): x is HTMLDivElement => x !== null);
  }

  protected draw(): void {
    const { ctx, w, h: hh } = fitCanvas(this.canvas);
    const mem = this.mem;
    if (!mem) {
      this.rects = [];
      this.showLegend([]);
      message(ctx, w, hh, this.reason || "no memory plan");
      return;
    }
    const g = ganttGeometry(mem, w, hh, this.win);
    this.rects = g.rects;
    this.root.dataset.drawnRects = String(g.rects.length);
    const bound = new Set(mem.bound_buffers ?? []);
    const lv = mem.liveness_bound_bytes ?? mem.lower_bound_bytes;
    const legend: [string, string, string?][] = [
      ["buffer", "buffer", "a buffer: its live steps (x) by its arena bytes (y), one colour per buffer"],
    ];
    if (bound.size)
      legend.push([
        "bound",
        `bound's ${bound.size} buffers`,
        "outlined: buffers no event orders pairwise; their sizes add up to the lower bound",
      ]);
    const marks = memoryMarkPoints(mem, g);
    this.root.dataset.memMarks = String(marks.length);
    if (marks.some((m) => m.kind === "alloc"))
      legend.push(["alloc", "mem alloc ▸", "a memory alloc node: the graph-owned buffer's bar starts at its step"]);
    if (marks.some((m) => m.kind === "free"))
      legend.push(["free", "mem free ◂", "a memory free node: the graph-owned buffer's bar ends after its step"]);
    if (this.simStep >= 0) legend.push(["sim", "simulator step"]);
    legend.push(
      ["arena", `arena (${mem.mode})`, "the arena the planner made"],
      ["lower", "lower bound", "no safe plan for this schedule is smaller"],
    );
    if (lv < mem.lower_bound_bytes)
      legend.push(["liveness", "liveness, one order", "most bytes live at once over one order (below the bound on several streams)"]);
    this.showLegend(legend);
    const { box } = g;
    const bottom = hh - box.bottom;
    ctx.font = FONT;
    // Grid and y labels (bytes).
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const v of byteTicks(g.yMax, 4)) {
      const y = g.yOf(v);
      ctx.strokeStyle = "#eef1f5";
      ctx.beginPath();
      ctx.moveTo(box.left, y);
      ctx.lineTo(w - box.right, y);
      ctx.stroke();
      ctx.fillStyle = "#5a687d";
      ctx.fillText(formatBytes(v), box.left - 6, y);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const v of niceTicks(this.win.lo * mem.num_steps, this.win.hi * mem.num_steps, 8)) {
      if (v !== Math.round(v)) continue;
      ctx.fillText(String(v), g.xOf(v), bottom + 5);
    }
    // Zoomed in: only the plot area shows buffers.
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.left, 0, w - box.left - box.right, hh);
    ctx.clip();
    ctx.fillText("step", (box.left + w - box.right) / 2, bottom + 15);
    // Current simulator step as a band.
    if (this.simStep >= 0) {
      ctx.fillStyle = "rgba(255,159,28,0.18)";
      ctx.fillRect(g.xOf(this.simStep), box.top, g.xOf(this.simStep + 1) - g.xOf(this.simStep), bottom - box.top);
    }
    this.root.dataset.boundBuffers = String(bound.size);
    g.rects.forEach((r, i) => {
      const b = mem.buffers[r.index];
      const live = this.simStep >= b.start && this.simStep < b.end;
      if (b.view_of !== undefined) {
        // A view: a dashed frame inside its base's bar (drawn after the bases).
        const strong = i === this.hover || b.id === this.highlightBuffer;
        ctx.strokeStyle = strong ? "#1b2430" : "rgba(255,255,255,0.95)";
        ctx.lineWidth = 1.5;
        ctx.setLineDash([3, 2]);
        ctx.strokeRect(r.x + 1.5, r.y + 1.5, Math.max(1, r.w - 3), Math.max(1, r.h - 3));
        ctx.setLineDash([]);
        return;
      }
      ctx.fillStyle = PALETTE[b.id % PALETTE.length];
      ctx.globalAlpha = i === this.hover || b.id === this.highlightBuffer || live ? 0.95 : 0.72;
      ctx.fillRect(r.x, r.y, r.w, r.h);
      ctx.globalAlpha = 1;
      const strong = i === this.hover || b.id === this.highlightBuffer;
      // Buffers of the bound's clique get a dark outline: together they are the bound.
      ctx.strokeStyle = strong || bound.has(b.id) ? "#1b2430" : "rgba(255,255,255,0.9)";
      ctx.lineWidth = strong ? 2 : 1;
      ctx.strokeRect(r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1);
      if (r.w > 40 && r.h > 13) {
        ctx.fillStyle = "#fff";
        ctx.textAlign = "left";
        ctx.textBaseline = "middle";
        ctx.fillText(fitText(ctx, b.name, r.w - 8), r.x + 4, r.y + r.h / 2);
      }
    });
    // Graph-owned memory: a triangle at each alloc (pointing into the bar) and free.
    ctx.fillStyle = "#1b2430";
    for (const m of marks) {
      const d = m.kind === "alloc" ? 5 : -5;
      ctx.beginPath();
      ctx.moveTo(m.x, m.y - 5);
      ctx.lineTo(m.x + d, m.y);
      ctx.lineTo(m.x, m.y + 5);
      ctx.closePath();
      ctx.fill();
    }
    ctx.restore();
    const line = (y: number, color: string, dash: number[], label: string, atLeft: boolean) => {
      ctx.strokeStyle = color;
      ctx.setLineDash(dash);
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      ctx.moveTo(box.left, y);
      ctx.lineTo(w - box.right, y);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.font = `600 ${FONT}`;
      const tw = ctx.measureText(label).width;
      const x = atLeft ? box.left + 6 : w - box.right - 6 - tw;
      // A white backing so the label stays legible over the buffers.
      ctx.fillStyle = "rgba(255,255,255,0.85)";
      ctx.fillRect(x - 3, y - 15, tw + 6, 14);
      ctx.fillStyle = color;
      ctx.textAlign = "left";
      ctx.textBaseline = "bottom";
      ctx.fillText(label, x, y - 2);
      ctx.font = FONT;
    };
    line(g.arenaY, "#1b2430", [], `arena ${formatBytes(mem.arena_bytes)} (${mem.mode})`, false);
    line(g.lowerY, "#d62728", [6, 4], `lower bound ${formatBytes(mem.lower_bound_bytes)}`, true);
    if (lv < mem.lower_bound_bytes) {
      // On several streams the bound exceeds liveness over one order: the gap is the
      // memory that concurrency costs.
      line(g.yOf(lv), "#8a94a6", [2, 3], `liveness over one order ${formatBytes(lv)}`, false);
    }
    axes(ctx, box.left, box.top, w - box.right, bottom);
  }
}

/** What the race lab marks on the timeline: the steps of every race, the dropped event. */
export interface StreamMarks {
  raceSteps: Set<number>;
  droppedEvent: number | null;
  droppedSteps: Set<number>;
}

export class StreamChart extends CanvasChart {
  private st: StreamsSection | null = null;
  private reason = "";
  /** The simulator's current step: bars are the plan's steps, so they match by index. */
  private simStep = -1;
  private selectedNode = -1;
  private marks: StreamMarks = { raceSteps: new Set(), droppedEvent: null, droppedSteps: new Set() };
  onPick: (node: number) => void = () => {};

  constructor() {
    super("ow-streams", true);
    this.root.dataset.bars = "0";
  }

  set(st: StreamsSection | null, reason: string, simStep: number, selectedNode: number, marks?: StreamMarks): void {
    if (marks) this.marks = marks;
    this.st = st;
    this.reason = reason;
    this.simStep = simStep;
    this.selectedNode = selectedNode;
    this.root.dataset.bars = String(st ? st.bars.length : 0);
    this.root.dataset.events = String(st ? st.arrows.length : 0);
    this.root.dataset.mode = st ? st.mode : "";
    // The node of the bar the simulator highlights, for the browser test.
    const hot = st?.bars.find((b) => b.step === simStep);
    this.root.dataset.simNode = hot ? String(hot.node) : "";
    this.root.dataset.available = String(!!st);
    // Lanes drawn (one per stream the plan uses), for the browser test.
    this.root.dataset.streams = String(st ? st.lanes.length : 0);
    this.root.dataset.raceSteps = [...this.marks.raceSteps].sort((a, b) => a - b).join(",");
    this.root.dataset.droppedEvent = this.marks.droppedEvent === null ? "" : String(this.marks.droppedEvent);
    this.schedule();
  }

  protected clicked(index: number): void {
    if (this.st) this.onPick(this.st.bars[index].node);
  }

  protected describe(index: number): Node[] {
    const b = this.st!.bars[index];
    return [
      h("div", { class: "ow-tt-name", text: b.name }),
      h("div", { class: "ow-tt-sub", text: `step ${b.step} · ${b.kind} on stream ${b.stream}` }),
      h("div", { class: "ow-tt-sub", text: `${formatTime(b.start)} → ${formatTime(b.end)} (${formatTime(b.end - b.start)})` }),
      h("div", { class: "ow-tt-sub", text: `launched at ${formatTime(b.launch)} (${this.st!.mode} mode)` }),
    ];
  }

  protected draw(): void {
    const { ctx, w, h: hh } = fitCanvas(this.canvas);
    const st = this.st;
    if (!st) {
      this.rects = [];
      this.showLegend([]);
      message(ctx, w, hh, this.reason || "no stream assignment");
      return;
    }
    const g = timelineGeometry(st, w, hh, this.win, this.marks.droppedEvent);
    this.rects = g.rects;
    this.root.dataset.drawnBars = String(g.rects.length);
    this.root.dataset.drawnArrows = String(g.arrows.length);
    const m = this.marks;
    const legend: [string, string, string?][] = [
      ["bar", "step (colour: stream)", "a step on its stream's lane, [start, end) from the cost model"],
    ];
    if (g.arrows.length) legend.push(["event", "event", "an event: recorded at the end of one step, waited for before another"]);
    if (this.simStep >= 0) legend.push(["sim", "simulator step"]);
    if (this.selectedNode >= 0) legend.push(["selected", "selected"]);
    if (m.raceSteps.size) legend.push(["race", `race (${m.raceSteps.size} steps)`, "a step in a race the simulator reports"]);
    if (m.droppedEvent !== null)
      legend.push(["dropped", `dropped e${m.droppedEvent}`, `event ${m.droppedEvent}'s record and waits are dropped: faded, and no arrow`]);
    this.showLegend(legend);
    const { box } = g;
    const bottom = hh - box.bottom;
    ctx.font = FONT;
    for (let s = 0; s < Math.max(1, st.num_streams); s++) {
      const y = g.laneY(s);
      ctx.fillStyle = s % 2 ? "#f6f8fb" : "#fdfdfe";
      ctx.fillRect(box.left, y, w - box.left - box.right, g.laneH);
      ctx.fillStyle = "#3b4656";
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      ctx.fillText(`stream ${s}`, box.left - 6, y + g.laneH / 2);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.fillStyle = "#5a687d";
    for (const v of niceTicks(this.win.lo * g.tMax, this.win.hi * g.tMax, 6)) ctx.fillText(formatTime(v), g.xOf(v), bottom + 5);
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.left, 0, w - box.left - box.right, hh);
    ctx.clip();
    g.rects.forEach((r, i) => {
      if (r.x > w || r.x + r.w < box.left) return;
      const b = st.bars[r.index];
      const hot = b.step === this.simStep;
      const sel = b.node === this.selectedNode;
      const dropped = m.droppedSteps.has(b.step);
      ctx.fillStyle = PALETTE[b.stream >= 0 ? b.stream % PALETTE.length : 9];
      ctx.globalAlpha = dropped ? 0.25 : i === this.hover || hot || sel ? 1 : 0.8;
      ctx.fillRect(r.x, r.y, r.w, r.h);
      ctx.globalAlpha = 1;
      if (m.raceSteps.has(b.step)) {
        ctx.strokeStyle = "#d62728";
        ctx.setLineDash([3, 2]);
        ctx.lineWidth = 2;
        ctx.strokeRect(r.x - 3, r.y - 3, r.w + 6, r.h + 6);
        ctx.setLineDash([]);
      }
      if (hot || sel || i === this.hover) {
        ctx.strokeStyle = hot ? "#ff9f1c" : "#1b2430";
        ctx.lineWidth = hot ? 3 : 2;
        ctx.strokeRect(r.x - 1, r.y - 1, r.w + 2, r.h + 2);
      }
      if (r.w > 36) {
        ctx.fillStyle = "#fff";
        ctx.textAlign = "left";
        ctx.textBaseline = "middle";
        ctx.fillText(fitText(ctx, b.name, r.w - 6), r.x + 3, r.y + r.h / 2);
      }
    });
    // Event arrows between lanes (record -> wait).
    // Translucent so that dense event traffic does not hide the bars.
    ctx.strokeStyle = "rgba(214,39,40,0.6)";
    ctx.fillStyle = "rgba(214,39,40,0.75)";
    ctx.lineWidth = 1.2;
    for (const a of g.arrows) {
      if (Math.max(a.x0, a.x1) < box.left || Math.min(a.x0, a.x1) > w) continue;
      ctx.beginPath();
      ctx.moveTo(a.x0, a.y0);
      ctx.lineTo(a.x1, a.y1);
      ctx.stroke();
      const dir = a.y1 > a.y0 ? 1 : -1;
      ctx.beginPath();
      ctx.moveTo(a.x1, a.y1);
      ctx.lineTo(a.x1 - 4, a.y1 - 7 * dir);
      ctx.lineTo(a.x1 + 4, a.y1 - 7 * dir);
      ctx.fill();
    }
    ctx.restore();
    axes(ctx, box.left, box.top, w - box.right, bottom);
  }
}

export class TreeChart extends CanvasChart {
  private parent: ArrayLike<number> = [];
  private names: string[] = [];
  private include: ArrayLike<number> | undefined;
  private selected = -1;
  private simNode = -1;
  private reason = "";
  private dotX = new Float64Array(0);
  private dotY = new Float64Array(0);
  private reveal = false;
  onPick: (pos: number) => void = () => {};

  constructor(private word: string) {
    super(`ow-tree ow-tree-${word}`);
    this.root.dataset.nodes = "0";
  }

  set(
    parent: ArrayLike<number> | null,
    names: string[],
    include: ArrayLike<number> | undefined,
    selected: number,
    simNode: number,
    reason: string,
  ): void {
    this.parent = parent ?? [];
    this.names = names;
    this.include = include;
    if (selected !== this.selected) this.reveal = true;
    this.selected = selected;
    this.simNode = simNode;
    this.reason = parent ? "" : reason;
    let count = 0;
    for (let i = 0; i < this.parent.length; i++) if (!include || include[i]) count++;
    this.root.dataset.nodes = String(count);
    this.schedule();
  }

  protected clicked(index: number): void {
    this.onPick(index);
  }

  protected describe(index: number): Node[] {
    const p = this.parent[index];
    return [
      h("div", { class: "ow-tt-name", text: this.names[index] ?? "?" }),
      h("div", {
        class: "ow-tt-sub",
        text: p >= 0 ? `immediate ${this.word}: ${this.names[p] ?? "?"}` : `root of the ${this.word} tree`,
      }),
    ];
  }

  protected draw(): void {
    const g = this.reason ? null : treeGeometry(this.parent, this.include);
    // A tree with many leaves squeezed into the panel is an unreadable smear of dots: give
    // every leaf a text row and let the panel scroll instead, up to a height canvases
    // handle everywhere; beyond that (huge graphs) fall back to fitting the panel.
    const rows = g ? TREE_TOP + TREE_BOTTOM + (g.leaves - 1) * TREE_ROW : 0;
    const scroll = rows > this.root.clientHeight && rows <= TREE_MAX_HEIGHT;
    this.canvas.style.height = scroll ? `${rows}px` : "";
    this.root.dataset.scrollable = scroll ? "1" : "0";
    // Likewise across: every depth gets a column wide enough to name its inner nodes (the
    // panel scrolls sideways), instead of unlabelled dots a few pixels apart.
    const cols = g ? TREE_LEFT + TREE_RIGHT + g.depth * TREE_COL : 0;
    const wide = !!g && cols > this.root.clientWidth && cols <= TREE_MAX_HEIGHT;
    this.canvas.style.width = wide ? `${cols}px` : "";
    this.root.dataset.wide = wide ? "1" : "0";
    const { ctx, w, h: hh } = fitCanvas(this.canvas);
    if (!g) {
      this.rects = [];
      this.showLegend([]);
      this.root.dataset.labels = "0";
      message(ctx, w, hh, this.reason);
      return;
    }
    const n = this.parent.length;
    const left = TREE_LEFT;
    const right = TREE_RIGHT;
    const sxs = (w - left - right) / Math.max(1, g.depth);
    const sys = (hh - TREE_TOP - TREE_BOTTOM) / Math.max(1, g.leaves - 1);
    this.dotX = new Float64Array(n);
    this.dotY = new Float64Array(n);
    const leaf = new Uint8Array(n).fill(1);
    for (let i = 0; i < n; i++) {
      this.dotX[i] = left + g.x[i] * sxs;
      this.dotY[i] = TREE_TOP + (g.leaves > 1 ? g.y[i] * sys : (hh - TREE_TOP - TREE_BOTTOM) / 2);
      const p = this.parent[i];
      if (p >= 0 && p < n && p !== i && !Number.isNaN(g.x[i])) leaf[p] = 0;
    }
    ctx.strokeStyle = "#b9c2cf";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let i = 0; i < n; i++) {
      const p = this.parent[i];
      if (Number.isNaN(g.x[i]) || p < 0 || Number.isNaN(g.x[p])) continue;
      const mx = (this.dotX[p] + this.dotX[i]) / 2;
      ctx.moveTo(this.dotX[p], this.dotY[p]);
      ctx.bezierCurveTo(mx, this.dotY[p], mx, this.dotY[i], this.dotX[i], this.dotY[i]);
    }
    ctx.stroke();
    const r = Math.max(2, Math.min(5, sys / 3));
    // Rows far enough apart for text: a leaf's row is free to its right (only its
    // ancestors share it, to its left), an inner node's label must stop before the next
    // depth, where a child of a chain may sit on the same row.
    const labels = sys >= 11;
    const innerRoom = sxs - 2 * r - 8;
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    this.rects = [];
    let drawn = 0;
    let labelled = 0;
    for (let i = 0; i < n; i++) {
      if (Number.isNaN(g.x[i])) continue;
      drawn++;
      const x = this.dotX[i];
      const y = this.dotY[i];
      ctx.fillStyle = i === this.selected ? "#d62728" : i === this.simNode ? "#ff9f1c" : "#4e79a7";
      ctx.beginPath();
      ctx.arc(x, y, i === this.selected || i === this.simNode ? r + 2 : r, 0, Math.PI * 2);
      ctx.fill();
      this.rects.push({ x: x - r - 2, y: y - r - 2, w: 2 * r + 4, h: 2 * r + 4, index: i });
      const room = leaf[i] ? Math.min(160, w - x - r - 8) : innerRoom;
      if (labels && room >= 24 && i !== this.selected) {
        ctx.fillStyle = "#3b4656";
        ctx.fillText(fitText(ctx, this.names[i] ?? "", room), x + r + 4, y);
        labelled++;
      }
    }
    // The selected node's full name last, on a white backing, over whatever it crosses.
    if (this.selected >= 0 && this.selected < n && !Number.isNaN(g.x[this.selected])) {
      const x = this.dotX[this.selected] + r + 6;
      const y = this.dotY[this.selected];
      ctx.font = `600 ${FONT}`;
      const text = fitText(ctx, this.names[this.selected] ?? "", Math.max(120, Math.min(320, w - x - 4)));
      const tw = ctx.measureText(text).width;
      ctx.fillStyle = "rgba(255,255,255,0.95)";
      ctx.fillRect(x - 3, y - 8, tw + 6, 16);
      ctx.strokeStyle = "#d62728";
      ctx.strokeRect(x - 3 + 0.5, y - 8 + 0.5, tw + 5, 15);
      ctx.fillStyle = "#1b2430";
      ctx.fillText(text, x, y);
      ctx.font = FONT;
      labelled++;
    }
    const legend: [string, string, string?][] = [["tree", `node (linked to its immediate ${this.word})`]];
    if (this.selected >= 0) legend.push(["selected", "selected"]);
    if (this.simNode >= 0) legend.push(["sim", "simulator step"]);
    this.showLegend(legend);
    this.root.dataset.drawnNodes = String(drawn);
    this.root.dataset.labels = String(labelled);
    this.root.dataset.leaves = String(g.leaves);
    if (this.reveal && scroll && this.selected >= 0 && this.selected < n) {
      // Bring a node picked elsewhere (DAG, simulator) into view, unless it already is.
      const y = this.dotY[this.selected];
      const top = this.root.scrollTop;
      if (y < top + 12 || y > top + this.root.clientHeight - 12) {
        this.root.scrollTop = Math.max(0, y - this.root.clientHeight / 2);
      }
    }
    if (this.reveal && wide && this.selected >= 0 && this.selected < n) {
      const x = this.dotX[this.selected];
      const l = this.root.scrollLeft;
      if (x < l + 12 || x > l + this.root.clientWidth - 160) this.root.scrollLeft = Math.max(0, x - this.root.clientWidth / 3);
    }
    this.reveal = false;
  }
}
