// The DAG view: canvas rendering with culling and level-of-detail, so 5k-10k nodes pan and
// zoom smoothly; pan by dragging the background, zoom with the wheel, hover for a tooltip,
// click to select, drag from node to node to add a dependency.
//
// Testability: the canvas carries data-nodes / data-edges / data-drawn / data-selected /
// data-sim, and a hidden hit-test API (`owHitTest`, `owClientPos`) on the element.

import { BADGE_H, BADGE_W, bodyScene, hitBadge, toggleBody, TITLE_H, type BodyScene } from "./bodies";
import { colorNodes, KIND_COLORS, type LegendItem } from "./colors";
import { STATE_CREATED, STATE_REMOVED, type DagArrays } from "./dagdata";
import { formatTime } from "./charts";
import { clear, fitCanvas, fitText, h } from "./dom";
import { DX, foldLayout, hitTest, NODE_H, NODE_W, SpatialGrid, type Layout } from "./layout";
import type { DagBody } from "./types";
import {
  groupBox,
  groupsAt,
  maxGroupDepth,
  minimapToWorld,
  minimapTransform,
  revealed,
  searchNodes,
  viewportOnMinimap,
  zoomAt as zoomView,
  type MiniMap,
} from "./nav";

export interface DagViewState {
  dag: DagArrays;
  layout: Layout;
  names: string[];
  kinds: string[];
  ops: string[];
  colorMode: string;
  selected: number; // position or -1
  simNodes: number[]; // positions highlighted for the current simulator step
  /** Positions of the steps in a race the simulator reports (both steps of each pair). */
  raceNodes?: number[];
  hasTopo: boolean;
  /** Whether edits apply to the graph on screen (dragging a node then adds a dependency). */
  editable: boolean;
  /** Body graphs of child-graph / conditional nodes (drawn collapsed: see bodies.ts). */
  bodies?: DagBody[];
}

export interface DagCallbacks {
  onSelect(pos: number): void;
  onLink(srcPos: number, dstPos: number): void;
  onLegend(items: LegendItem[]): void;
}

export interface DagCanvas extends HTMLCanvasElement {
  owHitTest?: (clientX: number, clientY: number) => number | null;
  owClientPos?: (nodeId: number) => { x: number; y: number } | null;
  /** The drawn column (x / DX, unfolded) and ASAP level of a node: equal after any edit. */
  owColumn?: (nodeId: number) => { column: number; level: number } | null;
  owLastDrawMs?: number;
  /** Of which the base layer (nodes, edges; a bitmap copy on big graphs when panning). */
  owBaseMs?: number;
  owDrawCount?: number;
  /** Client centre of body i's toggle badge (null when not drawn). */
  owBodyBadge?: (body: number) => { x: number; y: number } | null;
}

export class DagView {
  readonly root: HTMLDivElement;
  readonly canvas: DagCanvas;
  private tooltip: HTMLDivElement;
  private state: DagViewState | null = null;
  private grid: SpatialGrid | null = null;
  private k = 1;
  private tx = 0;
  private ty = 0;
  private fitted = false;
  /** Canvas size at the last fit; the view refits on resize until the user pans or zooms. */
  private fitSize = "";
  private userMoved = false;
  private frame = 0;
  private hover = -1;
  private drag: { mode: "pan" | "link"; x: number; y: number; tx: number; ty: number; src: number; moved: boolean } | null = null;
  private linkTo: { x: number; y: number } | null = null;
  private ro: ResizeObserver | null = null;
  private drawCount = 0;
  /** The layout drawn: the state's, or folded into bands (see foldLayout). */
  private drawn: Layout | null = null;
  /** Fold a long graph into bands: null decides by its shape (see isLongThin), else the user's choice. */
  private foldChoice: boolean | null = null;
  private fold = false;
  private foldKey = "";
  /** Collapsed groups: dotted-name depth (0: none), and the groups the user opened again. */
  private groupDepth = 0;
  private expanded = new Set<string>();
  private groups: { name: string; members: number[]; x0: number; x1: number; y: number }[] = [];
  /** Group index per position (-1: drawn itself). */
  private groupOf = new Int32Array(0);
  private hits: number[] = [];
  private hitAt = 0;
  private searchBox: HTMLInputElement;
  private searchInfo: HTMLSpanElement;
  private groupSel: HTMLSelectElement;
  private foldBtn: HTMLButtonElement;
  private mini: HTMLCanvasElement;
  private miniMap: MiniMap | null = null;
  private lastSelected = -1;
  private lastSim = "";
  private ringLegend: HTMLDivElement;
  /** The big-graph bitmap (see blitBase) and the minimap's dots; dropped when the drawing changes. */
  private base: { canvas: HTMLCanvasElement; k: number; ox: number; oy: number; w: number; h: number; drawn: number } | null = null;
  private miniBase: HTMLCanvasElement | null = null;
  private zoomingUntil = 0;
  private coloring: ReturnType<typeof colorNodes> | null = null;
  /** Open body graphs (keys from bodies.ts bodyKey) and what the last draw showed of them. */
  private bodyOpen = new Set<string>();
  private bodies: BodyScene = { badges: [], clusters: [] };

  constructor(private cb: DagCallbacks) {
    this.canvas = h("canvas", { class: "ow-dag-canvas" }) as DagCanvas;
    this.tooltip = h("div", { class: "ow-tooltip" });
    this.tooltip.style.display = "none";
    const zoom = h(
      "div",
      { class: "ow-zoom" },
      h("button", { class: "ow-btn ow-small", text: "−", title: "zoom out", onclick: () => this.zoomBy(1 / 1.4) }),
      h("button", { class: "ow-btn ow-small", text: "+", title: "zoom in", onclick: () => this.zoomBy(1.4) }),
      h("button", { class: "ow-btn ow-small ow-fit", text: "Fit", title: "fit the graph (double-click)", onclick: () => this.fit() }),
    );
    this.foldBtn = h("button", {
      class: "ow-btn ow-small ow-fold",
      text: "Fold",
      title: "fold a long graph into rows that fill the view",
      onclick: () => this.toggleFold(),
    });
    zoom.append(this.foldBtn);
    this.searchBox = h("input", {
      class: "ow-input ow-search",
      type: "search",
      placeholder: "find a node…",
      "aria-label": "find a node by name",
    });
    this.searchInfo = h("span", { class: "ow-search-info" });
    this.searchBox.addEventListener("input", () => this.search(this.searchBox.value, false));
    this.searchBox.addEventListener("keydown", (e) => {
      // The notebook around the widget must not take the keys as shortcuts.
      e.stopPropagation();
      if (e.key === "Enter") {
        e.preventDefault();
        this.search(this.searchBox.value, true, e.shiftKey ? -1 : 1);
      } else if (e.key === "Escape") {
        this.searchBox.value = "";
        this.search("", false);
      }
    });
    this.groupSel = h("select", {
      class: "ow-input ow-group-depth",
      "aria-label": "collapse groups",
      title: "collapse the nodes that share a dotted name prefix (a module path, a repeated block) into one box; click a box to open it",
    });
    this.groupSel.addEventListener("change", () => {
      this.groupDepth = Number(this.groupSel.value);
      this.expanded.clear();
      this.regroup();
      this.schedule();
    });
    const find = h("div", { class: "ow-find" }, this.searchBox, this.searchInfo, this.groupSel);
    this.mini = h("canvas", { class: "ow-minimap", title: "minimap: click or drag to move the view" });
    this.ringLegend = h("div", { class: "ow-ring-legend" });
    this.root = h(
      "div",
      { class: "ow-dag", "data-nodes": 0, "data-edges": 0, "data-drawn": 0 },
      this.canvas,
      this.tooltip,
      zoom,
      find,
      this.mini,
      this.ringLegend,
    );
    this.canvas.owHitTest = (cx, cy) => {
      const i = this.pick(cx, cy);
      return i >= 0 && this.state ? this.state.dag.int.id[i] : null;
    };
    this.canvas.owClientPos = (id) => this.clientPos(id);
    this.canvas.owColumn = (id) => {
      const s = this.state;
      if (!s) return null;
      for (let i = 0; i < s.dag.n; i++) {
        if (s.dag.int.id[i] === id && s.dag.int.state[i] !== STATE_REMOVED)
          return { column: s.layout.x[i] / DX, level: s.dag.int.level[i] };
      }
      return null;
    };
    this.canvas.owBodyBadge = (body) => {
      const b = this.bodies.badges.find((g) => g.body === body);
      if (!b) return null;
      const r = this.canvas.getBoundingClientRect();
      return { x: r.left + b.x * this.k + this.tx, y: r.top + b.y * this.k + this.ty };
    };
    this.bindMinimap();
    this.bind();
    if (typeof ResizeObserver !== "undefined") {
      this.ro = new ResizeObserver(() => this.schedule());
      this.ro.observe(this.root);
    }
  }

  destroy(): void {
    this.ro?.disconnect();
    cancelAnimationFrame(this.frame);
  }

  setState(s: DagViewState, refit = false): void {
    this.base = null;
    this.coloring = null;
    this.miniBase = null;
    const layoutChanged = !this.state || this.state.layout !== s.layout;
    const namesChanged = !this.state || this.state.names !== s.names;
    this.state = s;
    if (layoutChanged) {
      this.foldKey = "";
      this.updateDrawn();
      // A view the user has not moved stays fitted to the graph as edits grow it.
      if (!this.userMoved) this.fitted = false;
    }
    if (namesChanged) {
      const depth = maxGroupDepth(s.names);
      if (this.groupDepth > depth) this.groupDepth = 0;
      clear(this.groupSel);
      this.groupSel.append(h("option", { value: 0, text: "no groups" }));
      for (let d = 1; d <= depth; d++) this.groupSel.append(h("option", { value: d, text: `groups: ${d} level${d === 1 ? "" : "s"}` }));
      this.groupSel.value = String(this.groupDepth);
      this.groupSel.style.display = depth ? "" : "none";
      this.expanded.clear();
    }
    if (layoutChanged || namesChanged) this.regroup();
    if (refit) this.fitted = false;
    // Bring into view what was just selected (a timeline bar, a tree node, a search hit)
    // and the simulator's current step.
    const sim = s.simNodes.join(",");
    if (s.selected >= 0 && s.selected !== this.lastSelected) this.reveal(s.selected);
    else if (sim && sim !== this.lastSim) this.reveal(s.simNodes[0]);
    this.lastSelected = s.selected;
    this.lastSim = sim;
    if (this.hits.length && namesChanged) this.search(this.searchBox.value, false);
    const ds = this.root.dataset;
    let live = 0;
    for (const st of s.dag.int.state) if (st !== STATE_REMOVED) live++;
    ds.nodes = String(live);
    ds.edges = String(s.dag.m);
    ds.selected = s.selected >= 0 ? String(s.dag.int.id[s.selected]) : "";
    ds.sim = s.simNodes.map((i) => s.dag.int.id[i]).join(",");
    ds.colorMode = s.colorMode;
    this.schedule();
  }

  /** Draws now (used for the first draw so its time can be measured). */
  drawNow(): void {
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.draw();
  }

  schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  fit(): void {
    this.fitted = false;
    this.userMoved = false;
    this.schedule();
  }

  zoomBy(f: number): void {
    const w = this.canvas.clientWidth / 2;
    const hh = this.canvas.clientHeight / 2;
    this.zoomAt(w, hh, f);
  }

  private zoomAt(sx: number, sy: number, f: number): void {
    this.userMoved = true;
    this.zoomingUntil = performance.now() + 150;
    const v = zoomView({ k: this.k, tx: this.tx, ty: this.ty }, sx, sy, f, 0.01, 8);
    this.k = v.k;
    this.tx = v.tx;
    this.ty = v.ty;
    this.schedule();
  }

  private toggleFold(): void {
    this.foldChoice = !this.fold;
    this.foldKey = "";
    this.updateDrawn();
    this.regroup();
    this.fit();
  }

  /** The layout drawn: folded into bands for the canvas's aspect ratio when fold is on. */
  private updateDrawn(): void {
    const s = this.state;
    if (!s) return;
    const w = this.canvas.clientWidth || 800;
    const hh = this.canvas.clientHeight || 480;
    const key = `${this.foldChoice}|${w}x${hh}`;
    if (this.drawn && this.foldKey === key) return;
    this.foldKey = key;
    // A long, thin graph (a transformer stack: ~100 levels of ~5 nodes) shown whole would be
    // an unlabelled line: it folds into bands, as many as fit the height at a legible zoom.
    this.fold = this.foldChoice ?? isLongThin(s.layout, w, hh);
    let bands: number | undefined;
    if (this.fold) {
      // As many levels per band as the width shows at a legible zoom; the bands stack
      // downwards (the fit starts at the top, the minimap shows the rest).
      const cols = Math.max(2, Math.floor((w / FOLD_ZOOM - NODE_W) / DX) + 1);
      let maxLevel = 0;
      for (let i = 0; i < s.dag.n; i++) maxLevel = Math.max(maxLevel, s.dag.int.level[i]);
      bands = Math.max(1, Math.ceil((maxLevel + 1) / cols));
    }
    this.drawn = this.fold ? foldLayout(s.layout, s.dag.int.level, w, hh, bands) : s.layout;
    this.base = null;
    this.miniBase = null;
    this.grid = new SpatialGrid(this.drawn);
    this.root.dataset.folded = String(this.drawn !== s.layout);
    this.foldBtn.classList.toggle("ow-active", this.fold);
    this.foldBtn.textContent = this.fold ? "Unfold" : "Fold";
  }

  private regroup(): void {
    this.base = null;
    const s = this.state;
    const L = this.drawn;
    this.groups = [];
    if (!s || !L) return;
    this.groupOf = new Int32Array(s.dag.n).fill(-1);
    if (this.groupDepth > 0) {
      const removed = (i: number) => s.dag.int.state[i] === STATE_REMOVED;
      for (const [name, members] of groupsAt(s.names, this.groupDepth, 2, removed)) {
        if (this.expanded.has(name)) continue;
        const b = groupBox(L.x, L.y, members);
        for (const i of members) this.groupOf[i] = this.groups.length;
        this.groups.push({ name, members, ...b });
      }
    }
    this.root.dataset.groups = String(this.groups.length);
  }

  /** Opens the group a node is folded into (so that a search hit or a selection shows). */
  private expandFor(pos: number): void {
    const g = this.groupOf[pos];
    if (g === undefined || g < 0) return;
    this.expanded.add(this.groups[g].name);
    this.regroup();
  }

  /** Brings node `pos` into view (centres it if it is off screen or too small to read). */
  reveal(pos: number): void {
    const s = this.state;
    if (!s || pos < 0 || pos >= s.dag.n) return;
    this.expandFor(pos);
    const w = this.canvas.clientWidth;
    const hh = this.canvas.clientHeight;
    if (!w || !hh) return;
    if (!this.fitted) this.doFit(w, hh);
    const L = this.drawn ?? s.layout;
    const v = revealed({ k: this.k, tx: this.tx, ty: this.ty }, L.x[pos], L.y[pos], NODE_W / 2, NODE_H / 2, w, hh, 24, LABEL_ZOOM);
    if (v.k !== this.k || v.tx !== this.tx || v.ty !== this.ty) {
      this.k = v.k;
      this.tx = v.tx;
      this.ty = v.ty;
      this.userMoved = true;
    }
    this.root.dataset.revealed = String(s.dag.int.id[pos]);
    this.schedule();
  }

  /** Search by name: highlights every match; `jump` selects and centres the next one. */
  search(q: string, jump: boolean, dir = 1): void {
    const s = this.state;
    const prev = this.hits;
    this.hits = s ? searchNodes(s.names, q, 500, (i) => s.dag.int.state[i] === STATE_REMOVED) : [];
    if (prev.join() !== this.hits.join()) this.hitAt = -1;
    this.root.dataset.searchHits = String(this.hits.length);
    this.searchInfo.textContent = q.trim()
      ? this.hits.length
        ? `${this.hits.length >= 500 ? "500+" : this.hits.length} found`
        : "no match"
      : "";
    if (jump && this.hits.length) {
      this.hitAt = (this.hitAt + dir + this.hits.length) % this.hits.length;
      const pos = this.hits[this.hitAt];
      this.searchInfo.textContent = `${this.hitAt + 1} of ${this.hits.length}`;
      this.reveal(pos);
      this.cb.onSelect(pos);
    }
    this.schedule();
  }

  private doFit(w: number, hh: number): void {
    this.updateDrawn();
    const L = this.drawn ?? this.state!.layout;
    let f = fitTransform(L, w, hh);
    if (this.fold && f.k < LABEL_ZOOM) {
      // Folded and still too big to show whole legibly: legible, from the top-left (sources).
      const k = LABEL_ZOOM;
      f = { k, tx: 20 - (L.minX - NODE_W / 2) * k, ty: 44 - (L.minY - NODE_H / 2) * k };
    }
    this.k = f.k;
    this.tx = f.tx;
    this.ty = f.ty;
    this.fitted = true;
    this.fitSize = `${w}x${hh}`;
  }

  private local(cx: number, cy: number): { x: number; y: number } {
    const r = this.canvas.getBoundingClientRect();
    return { x: cx - r.left, y: cy - r.top };
  }

  /** The node under a client point (a member of a collapsed group is not: see pickGroup). */
  private pick(cx: number, cy: number): number {
    if (!this.state) return -1;
    const p = this.local(cx, cy);
    const i = hitTest(this.drawn ?? this.state.layout, (p.x - this.tx) / this.k, (p.y - this.ty) / this.k, this.grid ?? undefined);
    return i >= 0 && this.groupOf[i] >= 0 ? -1 : i;
  }

  /** The body whose toggle badge is under a client point, or -1. */
  private pickBody(cx: number, cy: number): number {
    const p = this.local(cx, cy);
    return hitBadge(this.bodies, (p.x - this.tx) / this.k, (p.y - this.ty) / this.k);
  }

  /** The collapsed group whose box is under a client point, or -1. */
  private pickGroup(cx: number, cy: number): number {
    const p = this.local(cx, cy);
    const wx = (p.x - this.tx) / this.k;
    const wy = (p.y - this.ty) / this.k;
    for (let g = this.groups.length - 1; g >= 0; g--) {
      const b = this.groups[g];
      if (wx >= b.x0 - NODE_W / 2 && wx <= b.x1 + NODE_W / 2 && Math.abs(wy - b.y) <= NODE_H / 2) return g;
    }
    return -1;
  }

  private clientPos(id: number): { x: number; y: number } | null {
    if (!this.state) return null;
    const ids = this.state.dag.int.id;
    for (let i = 0; i < ids.length; i++) {
      if (ids[i] === id && this.state.dag.int.state[i] !== STATE_REMOVED) {
        const r = this.canvas.getBoundingClientRect();
        const L = this.drawn ?? this.state.layout;
        return { x: r.left + L.x[i] * this.k + this.tx, y: r.top + L.y[i] * this.k + this.ty };
      }
    }
    return null;
  }

  private bind(): void {
    const c = this.canvas;
    c.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        const p = this.local(e.clientX, e.clientY);
        this.zoomAt(p.x, p.y, Math.exp(-e.deltaY * 0.0015));
      },
      { passive: false },
    );
    c.addEventListener("pointerdown", (e) => {
      const i = this.pick(e.clientX, e.clientY);
      // Dragging from a node draws a dependency (when the graph on screen is editable);
      // dragging the background, or shift-dragging anywhere, pans.
      const link = i >= 0 && !e.shiftKey && !!this.state?.editable;
      this.drag = { mode: link ? "link" : "pan", x: e.clientX, y: e.clientY, tx: this.tx, ty: this.ty, src: i, moved: false };
      try {
        c.setPointerCapture(e.pointerId);
      } catch {
        /* synthetic events have no capture */
      }
    });
    c.addEventListener("pointermove", (e) => {
      const d = this.drag;
      if (d) {
        if (Math.abs(e.clientX - d.x) + Math.abs(e.clientY - d.y) > 3) d.moved = true;
        if (d.mode === "pan") {
          if (d.moved) this.userMoved = true;
          this.tx = d.tx + (e.clientX - d.x);
          this.ty = d.ty + (e.clientY - d.y);
        } else this.linkTo = this.local(e.clientX, e.clientY);
        this.schedule();
        return;
      }
      const i = this.pick(e.clientX, e.clientY);
      if (i !== this.hover) {
        this.hover = i;
        this.schedule();
      }
      this.showTooltip(i, e.clientX, e.clientY);
    });
    const end = (e: PointerEvent) => {
      const d = this.drag;
      this.drag = null;
      this.linkTo = null;
      if (!d) return;
      if (d.mode === "link" && d.moved) {
        const j = this.pick(e.clientX, e.clientY);
        if (d.src >= 0 && j >= 0 && j !== d.src) this.cb.onLink(d.src, j);
        this.schedule();
      } else if (!d.moved) {
        // A press and release without moving is a click: on a collapsed group it opens the
        // group, else it selects the node under it (or clears the selection).
        const body = this.pickBody(e.clientX, e.clientY);
        const g = body >= 0 ? -1 : this.pickGroup(e.clientX, e.clientY);
        if (body >= 0) {
          this.bodyOpen = toggleBody(this.bodyOpen, this.state?.bodies ?? [], body);
          this.schedule();
        } else if (g >= 0) {
          this.expanded.add(this.groups[g].name);
          this.regroup();
          this.schedule();
        } else this.cb.onSelect(this.pick(e.clientX, e.clientY));
      }
    };
    c.addEventListener("pointerup", end);
    c.addEventListener("pointerleave", () => {
      this.tooltip.style.display = "none";
      if (this.hover !== -1) {
        this.hover = -1;
        this.schedule();
      }
    });
    c.addEventListener("dblclick", () => this.fit());
  }

  private showTooltip(i: number, cx: number, cy: number): void {
    const s = this.state;
    const g = s && i < 0 ? this.pickGroup(cx, cy) : -1;
    if (g >= 0) {
      const b = this.groups[g];
      this.tooltip.replaceChildren(
        h("div", { class: "ow-tt-name", text: b.name }),
        h("div", { class: "ow-tt-sub", text: `${b.members.length} nodes · click to open` }),
      );
      this.placeTooltip(cx, cy);
      return;
    }
    if (!s || i < 0) {
      this.tooltip.style.display = "none";
      return;
    }
    const t = this.tooltip;
    t.replaceChildren();
    t.append(h("div", { class: "ow-tt-name", text: s.names[i] }));
    const kind = s.kinds[s.dag.int.kind[i]] ?? "?";
    const op = s.ops[i];
    t.append(h("div", { class: "ow-tt-sub", text: op ? `${kind} · ${op}` : kind }));
    const parts = [`id ${s.dag.int.id[i]}`, `level ${s.dag.int.level[i]}`];
    if (s.hasTopo) parts.push(`slack ${formatTime(s.dag.float.slack[i])}`);
    if (s.dag.int.stream[i] >= 0) parts.push(`stream ${s.dag.int.stream[i]}`);
    if (s.dag.int.state[i] === STATE_CREATED) parts.push("created by this pass");
    if (s.dag.int.state[i] === STATE_REMOVED) parts.push("removed by this pass");
    t.append(h("div", { class: "ow-tt-sub", text: parts.join(" · ") }));
    this.placeTooltip(cx, cy);
  }

  /** Next to the pointer, flipped to its left / above it near the right / bottom edge. */
  private placeTooltip(cx: number, cy: number): void {
    const t = this.tooltip;
    const p = this.local(cx, cy);
    t.style.display = "block";
    const r = this.root.getBoundingClientRect();
    // Measured at the left edge, where nothing squeezes it (its width is its content's).
    t.style.left = "0px";
    const tw = t.offsetWidth || 220;
    const th = t.offsetHeight || 60;
    t.style.left = `${p.x + 14 + tw > r.width ? Math.max(0, p.x - 14 - tw) : p.x + 14}px`;
    t.style.top = `${p.y + 14 + th > r.height ? Math.max(0, p.y - 14 - th) : p.y + 14}px`;
  }

  private draw(): void {
    const s = this.state;
    const t0 = performance.now();
    // Not laid out yet (not in the document, or a hidden tab): the ResizeObserver draws later.
    if (this.canvas.clientWidth === 0 || this.canvas.clientHeight === 0) return;
    const { ctx, w, h: hh } = fitCanvas(this.canvas);
    ctx.fillStyle = "#fbfcfe";
    ctx.fillRect(0, 0, w, hh);
    if (!s || s.dag.n === 0) {
      ctx.fillStyle = "#7a8494";
      ctx.font = "14px system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.fillText(s ? "empty graph — add buffers and kernels in the Build tab" : "no graph", w / 2, hh / 2);
      this.root.dataset.drawn = "0";
      this.drawMinimap();
      return;
    }
    {
      const before = this.drawn;
      this.updateDrawn(); // the canvas may have a new size: the folding follows it
      if (this.drawn !== before) this.regroup();
    }
    if (!this.fitted || (!this.userMoved && this.fitSize !== `${w}x${hh}`)) this.doFit(w, hh);
    const { dag } = s;
    const L = this.drawn ?? s.layout;
    // Colours change with the state, not with a pan: computed once per state.
    if (!this.coloring) this.coloring = colorNodes(s.colorMode, { dag, kinds: s.kinds, selected: s.selected });
    const { colors, legend } = this.coloring;
    this.cb.onLegend(legend);
    // The nodes, edges and groups; on big graphs drawn once per zoom into a bitmap that a pan
    // only moves (see blitBase), so dragging 50,000 nodes is one image copy per frame.
    const paint = (ctx: CanvasRenderingContext2D, w: number, hh: number, k: number, tx: number, ty: number): number => {
      const grp = this.groupOf.length === dag.n ? this.groupOf : new Int32Array(dag.n).fill(-1);
      const groups = this.groups;
      const sx = (i: number) => L.x[i] * k + tx;
      const sy = (i: number) => L.y[i] * k + ty;
      const hw = (NODE_W / 2) * k;
      const hh2 = (NODE_H / 2) * k;
      const visible = (i: number) => grp[i] < 0 && sx(i) + hw >= 0 && sx(i) - hw <= w && sy(i) + hh2 >= 0 && sy(i) - hh2 <= hh;
      // Where an edge leaves / enters a node, or the box of the collapsed group it is in.
      const outX = (i: number) => (grp[i] >= 0 ? groups[grp[i]].x1 * k + tx : sx(i)) + hw;
      const inX = (i: number) => (grp[i] >= 0 ? groups[grp[i]].x0 * k + tx : sx(i)) - hw;
      const atY = (i: number) => (grp[i] >= 0 ? groups[grp[i]].y * k + ty : sy(i));

      // Edges: one batched path (straight lines at low zoom, curves when close enough to read).
      const curved = k > 0.35 && dag.m < 20000;
      const critical = dag.int.critical;
      const edgeLayer = (crit: boolean) => {
        ctx.beginPath();
        for (let e = 0; e < dag.m; e++) {
          const a = dag.src[e];
          const b = dag.dst[e];
          if (crit !== (critical[a] === 1 && critical[b] === 1)) continue;
          if (grp[a] >= 0 && grp[a] === grp[b]) continue; // inside a collapsed group
          const x0 = outX(a);
          const y0 = atY(a);
          const x1 = inX(b);
          const y1 = atY(b);
          if (Math.max(x0, x1) < 0 || Math.min(x0, x1) > w || Math.max(y0, y1) < 0 || Math.min(y0, y1) > hh) continue;
          ctx.moveTo(x0, y0);
          if (curved) {
            const mx = (x0 + x1) / 2;
            ctx.bezierCurveTo(mx, y0, mx, y1, x1, y1);
          } else ctx.lineTo(x1, y1);
        }
        ctx.stroke();
      };
      ctx.lineWidth = Math.max(0.5, Math.min(1.5, k * 1.2));
      ctx.strokeStyle = "rgba(90,104,125,0.45)";
      edgeLayer(false);
      if (s.colorMode === "critical") {
        ctx.strokeStyle = "rgba(214,39,40,0.8)";
        ctx.lineWidth = Math.max(1, Math.min(2.5, k * 2));
      }
      edgeLayer(true);

      // Arrow heads only when zoomed in.
      if (k > 0.5) {
        ctx.fillStyle = "rgba(90,104,125,0.7)";
        ctx.beginPath();
        for (let e = 0; e < dag.m; e++) {
          const a = dag.src[e];
          const b = dag.dst[e];
          if (grp[a] >= 0 && grp[a] === grp[b]) continue;
          const x1 = inX(b);
          const y1 = atY(b);
          if (x1 < -10 || x1 > w + 10 || y1 < -10 || y1 > hh + 10) continue;
          ctx.moveTo(x1, y1);
          ctx.lineTo(x1 - 7 * k, y1 - 3.5 * k);
          ctx.lineTo(x1 - 7 * k, y1 + 3.5 * k);
        }
        ctx.fill();
      }

      // Nodes.
      let drawn = 0;
      const detail = k >= LABEL_ZOOM;
      const state = dag.int.state;
      ctx.font = `${Math.max(8, Math.min(13, 12 * k))}px system-ui, -apple-system, "Segoe UI", sans-serif`;
      ctx.textBaseline = "middle";
      ctx.textAlign = "left";
      for (let i = 0; i < dag.n; i++) {
        if (!visible(i)) continue;
        drawn++;
        const x = sx(i) - hw;
        const y = sy(i) - hh2;
        const ghost = state[i] === STATE_REMOVED;
        ctx.globalAlpha = ghost ? 0.35 : 1;
        ctx.fillStyle = colors[i];
        if (detail) {
          roundRect(ctx, x, y, hw * 2, hh2 * 2, Math.min(6, 6 * k));
          ctx.fill();
          if (ghost) {
            ctx.setLineDash([4, 3]);
            ctx.strokeStyle = "#5a687d";
            ctx.lineWidth = 1;
            ctx.stroke();
            ctx.setLineDash([]);
          }
          ctx.fillStyle = textOn(colors[i]);
          const label = fitText(ctx, s.names[i], hw * 2 - 12 * k);
          ctx.fillText(label, x + 6 * k, sy(i));
        } else {
          ctx.fillRect(x, y, Math.max(1.5, hw * 2), Math.max(1.5, hh2 * 2));
        }
        ctx.globalAlpha = 1;
      }
      // Collapsed groups: one box from the first member's column to the last one's.
      for (const g of groups) {
        const x = g.x0 * k + tx - hw;
        const x1 = g.x1 * k + tx + hw;
        const y = g.y * k + ty - hh2;
        if (x1 < 0 || x > w || y + 2 * hh2 < 0 || y > hh) continue;
        ctx.fillStyle = "#e8edf6";
        ctx.strokeStyle = "#6d7e99";
        ctx.lineWidth = 1.5;
        roundRect(ctx, x, y, x1 - x, hh2 * 2, Math.min(6, 6 * k));
        ctx.fill();
        ctx.setLineDash([6, 3]);
        ctx.stroke();
        ctx.setLineDash([]);
        if (detail || x1 - x > 60) {
          ctx.fillStyle = "#1b2430";
          ctx.fillText(fitText(ctx, `▸ ${g.name} (${g.members.length})`, x1 - x - 12), x + 6, g.y * k + ty);
        }
      }
      return drawn;
    };
    const tBase = performance.now();
    const drawn = dag.n > CACHE_NODES ? this.blitBase(ctx, w, hh, L, paint) : paint(ctx, w, hh, this.k, this.tx, this.ty);
    this.canvas.owBaseMs = performance.now() - tBase;
    const k = this.k;
    const tx = this.tx;
    const ty = this.ty;
    const grp = this.groupOf.length === dag.n ? this.groupOf : new Int32Array(dag.n).fill(-1);
    const groups = this.groups;
    const sx = (i: number) => L.x[i] * k + tx;
    const sy = (i: number) => L.y[i] * k + ty;
    const hw = (NODE_W / 2) * k;
    const hh2 = (NODE_H / 2) * k;
    const visible = (i: number) => grp[i] < 0 && sx(i) + hw >= 0 && sx(i) - hw <= w && sy(i) + hh2 >= 0 && sy(i) - hh2 <= hh;
    const detail = k >= LABEL_ZOOM;
    const state = dag.int.state;
    // Rings: created (green), search hits (blue), races (red), sim step (amber), hover,
    // selection (dark). A member of a collapsed group rings its group's box.
    const ring = (i: number, color: string, width: number, pad: number, dash: number[] = []) => {
      if (i < 0 || i >= dag.n) return;
      ctx.setLineDash(dash);
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      const p = pad + width / 2;
      if (grp[i] >= 0) {
        const g = groups[grp[i]];
        roundRect(
          ctx,
          g.x0 * k + tx - hw - p,
          g.y * k + ty - hh2 - p,
          (g.x1 - g.x0) * k + 2 * hw + 2 * p,
          hh2 * 2 + 2 * p,
          Math.min(8, 8 * k) + p,
        );
      } else roundRect(ctx, sx(i) - hw - p, sy(i) - hh2 - p, hw * 2 + 2 * p, hh2 * 2 + 2 * p, Math.min(8, 8 * k) + p);
      ctx.stroke();
      ctx.setLineDash([]);
    };
    let created = 0;
    let ghosts = 0;
    for (let i = 0; i < dag.n; i++) {
      if (state[i] === STATE_CREATED) {
        created++;
        if (detail && visible(i)) ring(i, "#2ca02c", 2.5, 2, [5, 3]);
      } else if (state[i] === STATE_REMOVED) ghosts++;
    }
    for (const i of this.hits) ring(i, "#3867d6", 2.5, 5);
    const races = s.raceNodes ?? [];
    for (const i of races) ring(i, "#d62728", 3, 6, [3, 2]);
    ring(this.hover, "rgba(30,40,60,0.45)", 2, 1);
    for (const i of s.simNodes) ring(i, "#ff9f1c", 4, 3);
    ring(s.selected, "#1b2430", 2.5, 1);

    this.drawBodies(ctx, L, grp, w, hh);

    if (this.drag?.mode === "link" && this.linkTo && this.drag.src >= 0) {
      ctx.strokeStyle = "#2ca02c";
      ctx.lineWidth = 2;
      ctx.setLineDash([6, 4]);
      ctx.beginPath();
      ctx.moveTo(sx(this.drag.src) + hw, sy(this.drag.src));
      ctx.lineTo(this.linkTo.x, this.linkTo.y);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    this.showRingLegend([
      ["edge", "→ dependency (arrow heads when zoomed in)", true],
      ["critical", "critical edge", s.colorMode === "critical"],
      ["created", `created by this pass (${created})`, created > 0],
      ["ghost", `removed by this pass (${ghosts})`, ghosts > 0],
      ["group", `collapsed group (${groups.length}): click to open`, groups.length > 0],
      ["hit", `search match (${this.hits.length})`, this.hits.length > 0],
      ["race", `step in a race (${races.length})`, races.length > 0],
      ["sim", "simulator's current step", s.simNodes.length > 0],
      ["selected", "selected", s.selected >= 0],
    ]);
    this.drawMinimap();
    this.drawCount++;
    const ms = performance.now() - t0;
    this.canvas.owLastDrawMs = ms;
    this.canvas.owDrawCount = this.drawCount;
    this.root.dataset.drawn = String(drawn);
    this.root.dataset.draws = String(this.drawCount);
    this.root.dataset.races = races.map((i) => dag.int.id[i]).join(",");
  }

  /**
   * Body graphs on top of the graph: a badge under each holder drawn, and each open body as a
   * framed, titled cluster of its nodes and edges (geometry from bodies.ts).
   */
  private drawBodies(ctx: CanvasRenderingContext2D, L: Layout, grp: Int32Array, w: number, hh: number): void {
    const s = this.state!;
    const bodies = s.bodies ?? [];
    const state = s.dag.int.state;
    this.bodies = bodyScene(
      bodies,
      (p) => (p < s.dag.n && grp[p] < 0 && state[p] !== STATE_REMOVED ? { x: L.x[p], y: L.y[p] } : null),
      this.bodyOpen,
    );
    const { k, tx, ty } = this;
    const X = (x: number) => x * k + tx;
    const Y = (y: number) => y * k + ty;
    const font = (px: number) => `${Math.max(7, Math.min(13, px * k))}px system-ui, -apple-system, "Segoe UI", sans-serif`;
    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    let nodesDrawn = 0;
    const hw = (NODE_W / 2) * k;
    const hn = (NODE_H / 2) * k;
    for (const c of this.bodies.clusters) {
      const x = X(c.x);
      const y = Y(c.y);
      if (x > w || y > hh || x + c.w * k < 0 || y + c.h * k < 0) continue;
      ctx.fillStyle = "rgba(250,251,253,0.96)";
      ctx.strokeStyle = "#6d7e99";
      ctx.lineWidth = 1.5;
      roundRect(ctx, x, y, c.w * k, c.h * k, Math.min(8, 8 * k));
      ctx.fill();
      ctx.stroke();
      ctx.fillStyle = "#1b2430";
      ctx.font = font(12);
      ctx.fillText(fitText(ctx, c.title, c.w * k - 12), x + 6, y + (TITLE_H / 2 + 2) * k);
      ctx.strokeStyle = "rgba(90,104,125,0.6)";
      ctx.lineWidth = Math.max(0.5, Math.min(1.5, k * 1.2));
      ctx.beginPath();
      for (const [a, b] of c.edges) {
        const x0 = X(c.nx[a]) + hw;
        const x1 = X(c.nx[b]) - hw;
        const mx = (x0 + x1) / 2;
        ctx.moveTo(x0, Y(c.ny[a]));
        ctx.bezierCurveTo(mx, Y(c.ny[a]), mx, Y(c.ny[b]), x1, Y(c.ny[b]));
      }
      ctx.stroke();
      for (let j = 0; j < c.names.length; j++) {
        const color = KIND_COLORS[s.kinds[c.kinds[j]]] ?? "#9aa5b5";
        ctx.fillStyle = color;
        roundRect(ctx, X(c.nx[j]) - hw, Y(c.ny[j]) - hn, 2 * hw, 2 * hn, Math.min(6, 6 * k));
        ctx.fill();
        ctx.fillStyle = textOn(color);
        ctx.fillText(fitText(ctx, c.names[j], 2 * hw - 12 * k), X(c.nx[j]) - hw + 6 * k, Y(c.ny[j]));
        nodesDrawn++;
      }
    }
    for (const b of this.bodies.badges) {
      const x = X(b.x - BADGE_W / 2);
      const y = Y(b.y - BADGE_H / 2);
      if (x > w || y > hh || x + BADGE_W * k < 0 || y + BADGE_H * k < 0) continue;
      ctx.fillStyle = b.open ? "#dfe7f5" : "#ffffff";
      ctx.strokeStyle = "#6d7e99";
      ctx.lineWidth = 1;
      roundRect(ctx, x, y, BADGE_W * k, BADGE_H * k, Math.min(4, 4 * k));
      ctx.fill();
      ctx.stroke();
      ctx.fillStyle = "#1b2430";
      ctx.font = font(10);
      ctx.fillText(fitText(ctx, b.label, BADGE_W * k - 6), x + 3, y + (BADGE_H / 2) * k);
    }
    this.root.dataset.bodies = String(bodies.length);
    this.root.dataset.bodiesOpen = String(this.bodies.clusters.length);
    this.root.dataset.bodyNodesDrawn = String(nodesDrawn);
    this.root.dataset.bodyNodes = this.bodies.clusters.flatMap((c) => c.names).join("|");
  }

  /**
   * Draws the base layer of a big graph through a bitmap of the whole graph at the current
   * zoom: rebuilt when the zoom or the drawing changes, only moved by a pan. While the wheel
   * turns, the old bitmap is scaled and the sharp one follows when it stops. Zoomed in so far
   * that the bitmap would be huge, it draws directly (culling keeps that cheap).
   */
  private blitBase(
    ctx: CanvasRenderingContext2D,
    w: number,
    hh: number,
    L: Layout,
    paint: (c: CanvasRenderingContext2D, w: number, h: number, k: number, tx: number, ty: number) => number,
  ): number {
    const k = this.k;
    const pad = 24;
    const bw = Math.ceil((L.maxX - L.minX + NODE_W) * k + 2 * pad);
    const bh = Math.ceil((L.maxY - L.minY + NODE_H) * k + 2 * pad);
    if (bw > 8192 || bh > 8192 || bw * bh > 24e6) {
      this.base = null;
      return paint(ctx, w, hh, k, this.tx, this.ty);
    }
    const b = this.base;
    if (b && b.k !== k && performance.now() < this.zoomingUntil) {
      const f = k / b.k;
      ctx.drawImage(b.canvas, this.tx - b.ox * f, this.ty - b.oy * f, b.w * f, b.h * f);
      setTimeout(() => this.schedule(), 160);
      return b.drawn;
    }
    if (!b || b.k !== k) {
      const dpr = (typeof window !== "undefined" && window.devicePixelRatio) || 1;
      const c = document.createElement("canvas");
      c.width = Math.ceil(bw * dpr);
      c.height = Math.ceil(bh * dpr);
      const octx = c.getContext("2d")!;
      octx.setTransform(dpr, 0, 0, dpr, 0, 0);
      const ox = pad - (L.minX - NODE_W / 2) * k;
      const oy = pad - (L.minY - NODE_H / 2) * k;
      const drawn = paint(octx, bw, bh, k, ox, oy);
      this.base = { canvas: c, k, ox, oy, w: bw, h: bh, drawn };
    }
    const base = this.base!;
    // Whole pixels: a copy, not a resampling (which costs a software rasteriser tens of ms).
    ctx.drawImage(base.canvas, Math.round(this.tx - base.ox), Math.round(this.ty - base.oy), base.w, base.h);
    return base.drawn;
  }

  /** The marks drawn over the nodes, named (the colour legend names the fills). */
  private showRingLegend(items: [string, string, boolean][]): void {
    const shown = items.filter(([, , on]) => on);
    const key = shown.map(([k, t]) => k + t).join("|");
    if (this.ringLegend.dataset.key === key) return;
    this.ringLegend.dataset.key = key;
    clear(this.ringLegend);
    for (const [k, text] of shown)
      this.ringLegend.append(h("span", { class: "ow-legend-item", "data-mark": k }, h("span", { class: `ow-mark ow-mark-${k}` }), text));
  }

  private bindMinimap(): void {
    const move = (e: PointerEvent) => {
      if (!this.miniMap || !this.state) return;
      const r = this.mini.getBoundingClientRect();
      const p = minimapToWorld(this.miniMap, e.clientX - r.left, e.clientY - r.top);
      this.tx = this.canvas.clientWidth / 2 - p.x * this.k;
      this.ty = this.canvas.clientHeight / 2 - p.y * this.k;
      this.userMoved = true;
      this.fitted = true;
      this.schedule();
    };
    let dragging = false;
    this.mini.addEventListener("pointerdown", (e) => {
      dragging = true;
      try {
        this.mini.setPointerCapture(e.pointerId);
      } catch {
        /* synthetic events */
      }
      move(e);
    });
    this.mini.addEventListener("pointermove", (e) => {
      if (dragging) move(e);
    });
    this.mini.addEventListener("pointerup", () => (dragging = false));
  }

  /** The whole graph in the corner, with the part the view shows outlined. */
  private drawMinimap(): void {
    const s = this.state;
    const c = this.mini;
    if (!c.clientWidth || !c.clientHeight) return;
    const { ctx, w, h: hh } = fitCanvas(c);
    ctx.fillStyle = "rgba(255,255,255,0.92)";
    ctx.fillRect(0, 0, w, hh);
    if (!s || s.dag.n === 0) return;
    const L = this.drawn ?? s.layout;
    const m = minimapTransform(L, w, hh);
    this.miniMap = m;
    // The dots are drawn once per drawing (a bitmap), the viewport outline every frame.
    if (!this.miniBase || this.miniBase.width !== c.width || this.miniBase.height !== c.height) {
      const mb = document.createElement("canvas");
      mb.width = c.width;
      mb.height = c.height;
      const mctx = mb.getContext("2d")!;
      mctx.setTransform(c.width / w, 0, 0, c.height / hh, 0, 0);
      mctx.fillStyle = "#8ea3c3";
      const dot = Math.max(1, Math.min(3, NODE_W * m.s));
      for (let i = 0; i < s.dag.n; i++) {
        if (s.dag.int.state[i] === STATE_REMOVED) continue;
        mctx.fillRect(L.x[i] * m.s + m.ox - dot / 2, L.y[i] * m.s + m.oy - 0.75, dot, 1.5);
      }
      this.miniBase = mb;
    }
    ctx.drawImage(this.miniBase, 0, 0, w, hh);
    const mark = (i: number, color: string) => {
      if (i < 0 || i >= s.dag.n) return;
      ctx.fillStyle = color;
      ctx.fillRect(L.x[i] * m.s + m.ox - 2.5, L.y[i] * m.s + m.oy - 2.5, 5, 5);
    };
    for (const i of this.hits) mark(i, "#3867d6");
    for (const i of s.simNodes) mark(i, "#ff9f1c");
    mark(s.selected, "#1b2430");
    const v = viewportOnMinimap({ k: this.k, tx: this.tx, ty: this.ty }, this.canvas.clientWidth, this.canvas.clientHeight, m);
    // The whole graph is in view: the minimap would only repeat it.
    const all = v.x <= 1 && v.y <= 1 && v.x + v.w >= w - 1 && v.y + v.h >= hh - 1;
    c.classList.toggle("ow-mini-idle", all);
    ctx.strokeStyle = "#3867d6";
    ctx.lineWidth = 1.5;
    ctx.strokeRect(Math.max(0.5, v.x), Math.max(0.5, v.y), Math.min(w - 1, v.w), Math.min(hh - 1, v.h));
  }
}

function roundRect(ctx: CanvasRenderingContext2D, x: number, y: number, w: number, h: number, r: number): void {
  const rr = Math.max(0, Math.min(r, w / 2, h / 2));
  ctx.beginPath();
  ctx.moveTo(x + rr, y);
  ctx.arcTo(x + w, y, x + w, y + h, rr);
  ctx.arcTo(x + w, y + h, x, y + h, rr);
  ctx.arcTo(x, y + h, x, y, rr);
  ctx.arcTo(x, y, x + w, y, rr);
  ctx.closePath();
}

/** Dark or white text, whichever reads better on `bg` (#rrggbb), by relative luminance. */
export function textOn(bg: string): string {
  const v = parseInt(bg.slice(1), 16);
  if (!Number.isFinite(v)) return "#111";
  const r = (v >> 16) & 255;
  const g = (v >> 8) & 255;
  const b = v & 255;
  const lum = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  return lum > 150 ? "#1b2430" : "#ffffff";
}

/** Graphs bigger than this draw their base layer through a bitmap (see blitBase). */
const CACHE_NODES = 5000;

/** Smallest zoom at which node labels are drawn (see `detail` in draw). */
export const LABEL_ZOOM = 0.4;
/** The zoom a folded long graph is sized for (its bands fill the height at this zoom). */
const FOLD_ZOOM = LABEL_ZOOM;

/** Whether fitting the whole layout would shrink it below legibility into a long line. */
export function isLongThin(L: Layout, w: number, hh: number): boolean {
  const bw = L.maxX - L.minX + NODE_W + 40;
  const bh = L.maxY - L.minY + NODE_H + 40;
  return Math.min(w / bw, hh / bh) < LABEL_ZOOM && bw / bh > (4 * w) / hh;
}

/**
 * The view transform that shows a layout: the whole graph when that keeps it readable;
 * for long, thin graphs (a transformer stack is ~100 levels by ~5 nodes) the whole graph
 * would be a line, so it zooms to a readable scale, fits the height and starts at the sources.
 */
export function fitTransform(L: Layout, w: number, hh: number): { k: number; tx: number; ty: number } {
  const bw = L.maxX - L.minX + NODE_W + 40;
  const bh = L.maxY - L.minY + NODE_H + 40;
  const all = Math.min(w / bw, hh / bh);
  if (all < LABEL_ZOOM && bw / bh > (4 * w) / hh) {
    const k = Math.min(0.7, Math.max(LABEL_ZOOM, hh / bh));
    return { k, tx: 20 - (L.minX - NODE_W / 2) * k, ty: hh / 2 - ((L.minY + L.maxY) / 2) * k };
  }
  const k = Math.min(1.4, Math.max(0.002, all));
  return { k, tx: w / 2 - ((L.minX + L.maxX) / 2) * k, ty: hh / 2 - ((L.minY + L.maxY) / 2) * k };
}
