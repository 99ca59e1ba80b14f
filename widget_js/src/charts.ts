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
export function ganttGeometry(mem: MemorySection, width: number, height: number): GanttGeometry {
  const box = plotArea(width, height, { left: 72 });
  const steps = Math.max(1, mem.num_steps);
  let top = Math.max(mem.arena_bytes, mem.lower_bound_bytes, 1);
  for (const b of mem.buffers) top = Math.max(top, b.offset + b.size);
  const yMax = top * 1.05;
  const pw = Math.max(1, width - box.left - box.right);
  const ph = Math.max(1, height - box.top - box.bottom);
  const xOf = (s: number) => box.left + (s / steps) * pw;
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
 * lane to the start of the waiting step on its lane.
 */
export function timelineGeometry(st: StreamsSection, width: number, height: number): TimelineGeometry {
  const box = plotArea(width, height, { left: 72 });
  const lanes = Math.max(1, st.num_streams);
  let tMax = Math.max(st.makespan, 1e-12);
  for (const b of st.bars) tMax = Math.max(tMax, b.end);
  const pw = Math.max(1, width - box.left - box.right);
  const ph = Math.max(1, height - box.top - box.bottom);
  const laneH = ph / lanes;
  const xOf = (t: number) => box.left + (t / tMax) * pw;
  const laneY = (s: number) => box.top + Math.max(0, s) * laneH;
  const rects = st.bars.map((b, index) => {
    const x0 = xOf(b.start);
    const x1 = xOf(b.end);
    return { x: x0, y: laneY(b.stream) + laneH * 0.18, w: Math.max(1, x1 - x0), h: laneH * 0.64, index };
  });
  const arrows = st.arrows.map((a, index) => ({
    x0: xOf(a.time),
    y0: laneY(a.from_stream) + laneH / 2,
    x1: xOf(st.bars[a.wait]?.start ?? a.time),
    y1: laneY(a.to_stream) + laneH / 2,
    index,
  }));
  return { box, rects, laneH, tMax, xOf, laneY, arrows };
}

/** "graph 12.0 µs · stream 20.0 µs (graph ×1.67 faster)": the two launch modes' makespans. */
export function modeTotals(st: StreamsSection): string {
  const g = st.totals.graph;
  const s = st.totals.stream;
  const ratio = s / Math.max(1e-15, g);
  const cmp = ratio >= 1 ? `graph ×${ratio.toFixed(2)} faster` : `stream ×${(1 / ratio).toFixed(2)} faster`;
  return `graph launch ${formatTime(g)} · stream launches ${formatTime(s)} (${cmp})`;
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
