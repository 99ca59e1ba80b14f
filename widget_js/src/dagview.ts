// The DAG view: canvas rendering with culling and level-of-detail, so 5k-10k nodes pan and
// zoom smoothly; pan by dragging the background, zoom with the wheel, hover for a tooltip,
// click to select, drag from node to node to add a dependency.
//
// Testability: the canvas carries data-nodes / data-edges / data-drawn / data-selected /
// data-sim, and a hidden hit-test API (`owHitTest`, `owClientPos`) on the element.

import { colorNodes, type LegendItem } from "./colors";
import { STATE_CREATED, STATE_REMOVED, type DagArrays } from "./dagdata";
import { formatTime } from "./charts";
import { fitCanvas, fitText, h } from "./dom";
import { hitTest, NODE_H, NODE_W, SpatialGrid, type Layout } from "./layout";

export interface DagViewState {
  dag: DagArrays;
  layout: Layout;
  names: string[];
  kinds: string[];
  ops: string[];
  colorMode: string;
  selected: number; // position or -1
  simNodes: number[]; // positions highlighted for the current simulator step
  hasTopo: boolean;
  /** Whether edits apply to the graph on screen (dragging a node then adds a dependency). */
  editable: boolean;
}

export interface DagCallbacks {
  onSelect(pos: number): void;
  onLink(srcPos: number, dstPos: number): void;
  onLegend(items: LegendItem[]): void;
}

export interface DagCanvas extends HTMLCanvasElement {
  owHitTest?: (clientX: number, clientY: number) => number | null;
  owClientPos?: (nodeId: number) => { x: number; y: number } | null;
  owLastDrawMs?: number;
  owDrawCount?: number;
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
  private drag: { mode: "pan" | "link"; x: number; y: number; tx: number; ty: number; src: number; moved: boolean } | null =
    null;
  private linkTo: { x: number; y: number } | null = null;
  private ro: ResizeObserver | null = null;
  private drawCount = 0;

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
    this.root = h("div", { class: "ow-dag", "data-nodes": 0, "data-edges": 0, "data-drawn": 0 }, this.canvas, this.tooltip, zoom);
    this.canvas.owHitTest = (cx, cy) => {
      const i = this.pick(cx, cy);
      return i >= 0 && this.state ? this.state.dag.int.id[i] : null;
    };
    this.canvas.owClientPos = (id) => this.clientPos(id);
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
    const layoutChanged = !this.state || this.state.layout !== s.layout;
    this.state = s;
    if (layoutChanged) this.grid = new SpatialGrid(s.layout);
    if (refit) this.fitted = false;
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
    const k = Math.min(8, Math.max(0.01, this.k * f));
    const wx = (sx - this.tx) / this.k;
    const wy = (sy - this.ty) / this.k;
    this.k = k;
    this.tx = sx - wx * k;
    this.ty = sy - wy * k;
    this.schedule();
  }

  private doFit(w: number, hh: number): void {
    const L = this.state!.layout;
    const f = fitTransform(L, w, hh);
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

  private pick(cx: number, cy: number): number {
    if (!this.state) return -1;
    const p = this.local(cx, cy);
    return hitTest(this.state.layout, (p.x - this.tx) / this.k, (p.y - this.ty) / this.k, this.grid ?? undefined);
  }

  private clientPos(id: number): { x: number; y: number } | null {
    if (!this.state) return null;
    const ids = this.state.dag.int.id;
    for (let i = 0; i < ids.length; i++) {
      if (ids[i] === id && this.state.dag.int.state[i] !== STATE_REMOVED) {
        const r = this.canvas.getBoundingClientRect();
        return { x: r.left + this.state.layout.x[i] * this.k + this.tx, y: r.top + this.state.layout.y[i] * this.k + this.ty };
      }
    }
    return null;
  }

  private bind(): void {
    const c = this.canvas;
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const p = this.local(e.clientX, e.clientY);
      this.zoomAt(p.x, p.y, Math.exp(-e.deltaY * 0.0015));
    }, { passive: false });
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
        // A press and release without moving is a click, on a node or on the background.
        this.cb.onSelect(this.pick(e.clientX, e.clientY));
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
    const p = this.local(cx, cy);
    t.style.display = "block";
    t.style.left = `${p.x + 14}px`;
    t.style.top = `${p.y + 14}px`;
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
      return;
    }
    if (!this.fitted || (!this.userMoved && this.fitSize !== `${w}x${hh}`)) this.doFit(w, hh);
    const { dag, layout: L } = s;
    const { colors, legend } = colorNodes(s.colorMode, { dag, kinds: s.kinds, selected: s.selected });
    this.cb.onLegend(legend);
    const k = this.k;
    const tx = this.tx;
    const ty = this.ty;
    const sx = (i: number) => L.x[i] * k + tx;
    const sy = (i: number) => L.y[i] * k + ty;
    const hw = (NODE_W / 2) * k;
    const hh2 = (NODE_H / 2) * k;
    const visible = (i: number) => sx(i) + hw >= 0 && sx(i) - hw <= w && sy(i) + hh2 >= 0 && sy(i) - hh2 <= hh;

    // Edges: one batched path (straight lines at low zoom, curves when close enough to read).
    const curved = k > 0.35 && dag.m < 20000;
    const critical = dag.int.critical;
    const edgeLayer = (crit: boolean) => {
      ctx.beginPath();
      for (let e = 0; e < dag.m; e++) {
        const a = dag.src[e];
        const b = dag.dst[e];
        if (crit !== (critical[a] === 1 && critical[b] === 1)) continue;
        const x0 = sx(a) + hw;
        const y0 = sy(a);
        const x1 = sx(b) - hw;
        const y1 = sy(b);
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
        const b = dag.dst[e];
        if (!visible(b)) continue;
        const x1 = sx(b) - hw;
        const y1 = sy(b);
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
    // Rings: created (green), sim step (amber), hover, selection (dark).
    const ring = (i: number, color: string, width: number, pad: number, dash: number[] = []) => {
      if (i < 0 || i >= dag.n) return;
      ctx.setLineDash(dash);
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      const p = pad + width / 2;
      roundRect(ctx, sx(i) - hw - p, sy(i) - hh2 - p, hw * 2 + 2 * p, hh2 * 2 + 2 * p, Math.min(8, 8 * k) + p);
      ctx.stroke();
      ctx.setLineDash([]);
    };
    if (detail) for (let i = 0; i < dag.n; i++) if (state[i] === STATE_CREATED && visible(i)) ring(i, "#2ca02c", 2.5, 2, [5, 3]);
    ring(this.hover, "rgba(30,40,60,0.45)", 2, 1);
    for (const i of s.simNodes) ring(i, "#ff9f1c", 4, 3);
    ring(s.selected, "#1b2430", 2.5, 1);

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
    this.drawCount++;
    const ms = performance.now() - t0;
    this.canvas.owLastDrawMs = ms;
    this.canvas.owDrawCount = this.drawCount;
    this.root.dataset.drawn = String(drawn);
    this.root.dataset.draws = String(this.drawCount);
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

/** Smallest zoom at which node labels are drawn (see `detail` in draw). */
export const LABEL_ZOOM = 0.4;

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
