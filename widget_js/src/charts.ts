// Pure geometry of the memory Gantt chart, the stream timeline and the dominator trees:
// view-model in, rectangles in pixel space out. Drawing (canvas) lives in charts_view.ts, so these
// functions are unit-tested without a browser.

import type { MemorySection, StreamsSection } from "./types";

export interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
  /** Index into the source list (buffer, bar...). */
  index: number;
}

export interface Box {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

export function plotArea(width: number, height: number, pad: Partial<Box> = {}): Box {
  const left = pad.left ?? 64;
  const right = pad.right ?? 16;
  const top = pad.top ?? 14;
  const bottom = pad.bottom ?? 28;
  return { width, height, left, right, top, bottom };
}

/** Nice tick values covering [lo, hi] (Heckbert, "Nice numbers for graph labels", 1990). */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

/** Tick values for a byte axis at round numbers of the unit that fits `max` (KiB, MiB...). */
export function byteTicks(max: number, count = 4): number[] {
  let unit = 1;
  while (max / unit >= 1024 && unit < 1024 ** 4) unit *= 1024;
  return niceTicks(0, max / unit, count).map((v) => v * unit);
}

export function formatBytes(b: number): string {
  if (!Number.isFinite(b)) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  let v = b;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${u === 0 ? v : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${units[u]}`;
}

export function formatTime(s: number): string {
  if (!Number.isFinite(s)) return "?";
  const a = Math.abs(s);
  if (a === 0) return "0 s";
  if (a < 1e-6) return `${(s * 1e9).toFixed(1)} ns`;
  if (a < 1e-3) return `${(s * 1e6).toFixed(1)} µs`;
  if (a < 1) return `${(s * 1e3).toFixed(2)} ms`;
  return `${s.toFixed(3)} s`;
}

/** The visible part of a chart's x domain, as fractions of it: [lo, hi] within [0, 1]. */
export interface XWindow {
  lo: number;
  hi: number;
}

export const FULL: XWindow = { lo: 0, hi: 1 };

/** Zooms the window by `f` (> 1 zooms in) about `at`, a fraction of the plot's width. */
export function zoomWindow(win: XWindow, at: number, f: number, minSpan = 1e-4): XWindow {
  const span = win.hi - win.lo;
  const next = Math.min(1, Math.max(minSpan, span / f));
  const pivot = win.lo + Math.min(1, Math.max(0, at)) * span;
  const lo = pivot - (pivot - win.lo) * (next / span);
  return clampWindow({ lo, hi: lo + next });
}

/** Moves the window by `d` (a fraction of the plot's width, > 0 moves right), kept in [0, 1]. */
export function panWindow(win: XWindow, d: number): XWindow {
  const span = win.hi - win.lo;
  return clampWindow({ lo: win.lo + d * span, hi: win.hi + d * span });
}

function clampWindow(w: XWindow): XWindow {
  const span = Math.min(1, w.hi - w.lo);
  const lo = Math.min(1 - span, Math.max(0, w.lo));
  return { lo, hi: lo + span };
}

/** Whether a window shows the whole domain. */
export function isFull(w: XWindow): boolean {
  return w.lo <= 1e-9 && w.hi >= 1 - 1e-9;
}

/** Pixels above the plot for the chart's legend row. */
export const LEGEND_ROOM = 30;

export interface GanttGeometry {
  box: Box;
  rects: Rect[];
  /** y pixel of the lower bound line and of the arena size line. */
  lowerY: number;
  arenaY: number;
  /** Maximum byte value on the y axis. */
  yMax: number;
  xOf: (step: number) => number;
  yOf: (bytes: number) => number;
}

/** One rectangle per buffer: x = [start, end) in steps, y = [offset, offset + size) in bytes. */
export function ganttGeometry(mem: MemorySection, width: number, height: number, win: XWindow = FULL): GanttGeometry {
  const box = plotArea(width, height, { left: 72, top: LEGEND_ROOM });
  const steps = Math.max(1, mem.num_steps);
  let top = Math.max(mem.arena_bytes, mem.lower_bound_bytes, 1);
  for (const b of mem.buffers) top = Math.max(top, b.offset + b.size);
  const yMax = top * 1.05;
  const pw = Math.max(1, width - box.left - box.right);
  const ph = Math.max(1, height - box.top - box.bottom);
  const xOf = (s: number) => box.left + ((s / steps - win.lo) / (win.hi - win.lo)) * pw;
  // Offset 0 at the bottom: the arena grows upwards like a stack of buffers.
  const yOf = (b: number) => box.top + ph - (b / yMax) * ph;
  const rects = mem.buffers.map((b, index) => {
    const x0 = xOf(b.start);
    const x1 = xOf(b.end);
    const y1 = yOf(b.offset);
    const y0 = yOf(b.offset + b.size);
    return { x: x0, y: y0, w: Math.max(1, x1 - x0), h: Math.max(1, y1 - y0), index };
  });
  return {
    box,
    rects,
    lowerY: yOf(mem.lower_bound_bytes),
    arenaY: yOf(mem.arena_bytes),
    yMax,
    xOf,
    yOf,
  };
}

/** A memory alloc (▸) or free (◂) node's mark: at its step's x, the buffer's bar's middle. */
export interface MarkPoint {
  x: number;
  y: number;
  kind: "alloc" | "free";
  node: number;
}

/** The alloc/free marks of `mem` on a Gantt geometry (marks of buffers not drawn are skipped). */
export function memoryMarkPoints(mem: MemorySection, g: GanttGeometry): MarkPoint[] {
  const bar = new Map<number, MemorySection["buffers"][number]>();
  for (const b of mem.buffers) if (b.view_of === undefined) bar.set(b.id, b);
  const out: MarkPoint[] = [];
  for (const m of mem.marks ?? []) {
    const b = bar.get(m.buffer);
    if (!b) continue;
    out.push({ x: g.xOf(m.step), y: g.yOf(b.offset + b.size / 2), kind: m.kind, node: m.node });
  }
  return out;
}

export interface TimelineGeometry {
  box: Box;
  rects: Rect[];
  laneH: number;
  tMax: number;
  xOf: (t: number) => number;
  laneY: (stream: number) => number;
  arrows: { x0: number; y0: number; x1: number; y1: number; index: number }[];
}

/**
 * One bar per step on its stream's lane; event arrows from the end of the recording step on its
 * lane to the start of the waiting step on its lane (none for `droppedEvent`). `win` is the
 * part of the time axis shown (zoom).
 */
export function timelineGeometry(
  st: StreamsSection,
  width: number,
  height: number,
  win: XWindow = FULL,
  droppedEvent: number | null = null,
): TimelineGeometry {
  const box = plotArea(width, height, { left: 72, top: LEGEND_ROOM });
  const lanes = Math.max(1, st.num_streams);
  let tMax = Math.max(st.makespan, 1e-12);
  for (const b of st.bars) tMax = Math.max(tMax, b.end);
  const pw = Math.max(1, width - box.left - box.right);
  const ph = Math.max(1, height - box.top - box.bottom);
  const laneH = ph / lanes;
  const xOf = (t: number) => box.left + ((t / tMax - win.lo) / (win.hi - win.lo)) * pw;
  const laneY = (s: number) => box.top + Math.max(0, s) * laneH;
  const rects = st.bars.map((b, index) => {
    const x0 = xOf(b.start);
    const x1 = xOf(b.end);
    return { x: x0, y: laneY(b.stream) + laneH * 0.18, w: Math.max(1, x1 - x0), h: laneH * 0.64, index };
  });
  // The race lab's dropped event orders nothing in the simulated plan: no arrow for it.
  const arrows = st.arrows
    .map((a, index) => ({
      x0: xOf(a.time),
      y0: laneY(a.from_stream) + laneH / 2,
      x1: xOf(st.bars[a.wait]?.start ?? a.time),
      y1: laneY(a.to_stream) + laneH / 2,
      index,
    }))
    .filter((a) => droppedEvent === null || st.arrows[a.index].event !== droppedEvent);
  return { box, rects, laneH, tMax, xOf, laneY, arrows };
}

/**
 * The stream view's figures, each named as in figureDefinitions: "graph launch 242.6 µs ·
 * stream launches 650.3 µs (host-bound: 162 launches × 4.0 µs) · critical path ... ".
 */
export function modeTotals(st: StreamsSection): string {
  const g = st.totals.graph;
  const s = st.totals.stream;
  const parts = [`graph launch ${formatTime(g)}`];
  const per = st.overheads.stream ?? 0;
  const n = st.launches ?? 0;
  // Launches issued back to back from one host thread: when they take longer than the device
  // work, the stream mode's makespan is theirs, the same on 1, 4 or 8 streams.
  const hostBound = n > 0 && per > 0 && n * per >= 0.9 * s;
  const ratio = s / Math.max(1e-15, g);
  const cmp = ratio >= 1 ? `graph ×${ratio.toFixed(2)} faster` : `stream ×${(1 / ratio).toFixed(2)} faster`;
  parts.push(`stream launches ${formatTime(s)} (${hostBound ? `host-bound: ${n} launches × ${formatTime(per)}; ` : ""}${cmp})`);
  if (st.critical_path !== null && st.critical_path !== undefined) parts.push(`critical path ${formatTime(st.critical_path)}`);
  if (st.schedule !== null && st.schedule !== undefined) parts.push(`stream-pass schedule ${formatTime(st.schedule)}`);
  parts.push(`device work ${formatTime(st.work)}`);
  parts.push(`${st.num_streams} stream${st.num_streams === 1 ? "" : "s"}`);
  return parts.join(" · ");
}

/** One definition per figure the stream view reports: [name, what it measures]. */
export function figureDefinitions(st: StreamsSection): [string, string][] {
  const per = formatTime(st.overheads.stream ?? 0);
  const node = formatTime(st.overheads.graph ?? 0);
  return [
    [
      "graph launch",
      `modelled makespan of the plan as one CUDA graph launch: ${per} once, then ${node} in front of every node, on the plan's streams with its events`,
    ],
    [
      "stream launches",
      `modelled makespan when the host launches every kernel, copy and memset itself, ${per} each, one after another; when launches dominate it is host-bound and more streams cannot shorten it`,
    ],
    [
      "critical path",
      "longest chain of dependencies in the plan's graph (its event nodes included) under the cost model, launch overheads left out: no schedule can be shorter",
    ],
    ["stream-pass schedule", "the stream pass's own list schedule of the graph before events are inserted, launch overheads left out"],
    ["device work", "every step's duration added up, as if on one stream with no overheads"],
  ];
}

export interface TreeGeometry {
  /** x, y per node position (NaN when not in the tree, e.g. ghosts). */
  x: Float64Array;
  y: Float64Array;
  depth: number;
  leaves: number;
}

/**
 * Tidy-enough tree layout: depth on x, leaves spaced evenly on y, a parent at the middle of its
 * children (Reingold and Tilford, "Tidier drawings of trees", IEEE TSE 7(2), 1981, without the
 * contour compaction, which does not matter for the narrow dominator trees of compute graphs).
 * `parent[i]` is a position or -1 for a root; several roots share a virtual root.
 */
export function treeGeometry(parent: ArrayLike<number>, include?: ArrayLike<number>): TreeGeometry {
  const n = parent.length;
  const children: number[][] = Array.from({ length: n }, () => []);
  const roots: number[] = [];
  for (let i = 0; i < n; i++) {
    if (include && !include[i]) continue;
    const p = parent[i];
    if (p >= 0 && p < n && p !== i) children[p].push(i);
    else roots.push(i);
  }
  const x = new Float64Array(n).fill(NaN);
  const y = new Float64Array(n).fill(NaN);
  let leaf = 0;
  let depth = 0;
  // Iterative post-order so that deep chains (10k nodes) do not overflow the stack.
  for (const r of roots) {
    const stack: [number, number, number][] = [[r, 0, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [v, d, k] = top;
      if (k < children[v].length) {
        top[2]++;
        stack.push([children[v][k], d + 1, 0]);
        continue;
      }
      stack.pop();
      x[v] = d;
      depth = Math.max(depth, d);
      if (children[v].length === 0) y[v] = leaf++;
      else {
        const ys = children[v].map((c) => y[c]);
        y[v] = (Math.min(...ys) + Math.max(...ys)) / 2;
      }
    }
  }
  return { x, y, depth, leaves: leaf };
}
