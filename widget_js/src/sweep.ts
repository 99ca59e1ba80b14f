// The Sweep tab: oxiwork.explore.sweep as a chart of modelled makespan against arena, one
// point per setting, the Pareto front joined and filled, the current setting ringed;
// clicking a point asks the kernel to plan that setting (set_options). Geometry is pure
// (sweepGeometry, currentRow, nearestPoint) and unit-tested; sweepPanel draws it as SVG
// (a sweep has a few dozen points at most).

import { byteTicks, formatBytes, formatTime, niceTicks } from "./charts";
import { h } from "./dom";
import type { Send } from "./messages";

/** One row of the sweep (SweepTable.to_records in Python). */
export interface SweepRow {
  max_streams: number;
  fusion: boolean;
  memory_mode: string;
  max_group_size: number;
  num_streams: number;
  makespan: number;
  arena_bytes: number;
  lower_bound: number;
  event_count: number;
  kernel_count: number;
  pareto: boolean;
}

/** The synced `sweep_table` trait (Workbench.sweep). */
export interface SweepTable {
  rows: SweepRow[];
  objectives: string[];
  nodes: number;
}

export interface SweepOptions {
  max_streams: number;
  fusion: boolean;
  max_group_size: number;
}

export interface SweepPoint {
  x: number;
  y: number;
  index: number;
}

export interface SweepGeometry {
  points: SweepPoint[];
  /** The front's points by makespan: the staircase joins them. */
  front: SweepPoint[];
  xTicks: { x: number; label: string }[];
  yTicks: { y: number; label: string }[];
  plot: { left: number; top: number; right: number; bottom: number };
}

const PAD = { left: 70, right: 16, top: 12, bottom: 38 };

/** Pixel positions: makespan on x (from 0), arena on y (from 0, upwards), with nice ticks. */
export function sweepGeometry(rows: SweepRow[], width: number, height: number): SweepGeometry {
  const plot = { left: PAD.left, top: PAD.top, right: width - PAD.right, bottom: height - PAD.bottom };
  const maxT = Math.max(1e-12, ...rows.map((r) => r.makespan)) * 1.08;
  const maxB = Math.max(1, ...rows.map((r) => r.arena_bytes)) * 1.08;
  const sx = (t: number) => plot.left + (t / maxT) * (plot.right - plot.left);
  const sy = (b: number) => plot.bottom - (b / maxB) * (plot.bottom - plot.top);
  const points = rows.map((r, index) => ({ x: sx(r.makespan), y: sy(r.arena_bytes), index }));
  const front = points
    .filter((p) => rows[p.index].pareto)
    .sort((a, b) => rows[a.index].makespan - rows[b.index].makespan || rows[a.index].arena_bytes - rows[b.index].arena_bytes);
  const xTicks = niceTicks(0, maxT, 5)
    .filter((t) => t <= maxT)
    .map((t) => ({ x: sx(t), label: formatTime(t) }));
  const yTicks = byteTicks(maxB, 4)
    .filter((b) => b <= maxB)
    .map((b) => ({ y: sy(b), label: formatBytes(b) }));
  return { points, front, xTicks, yTicks, plot };
}

/** The row whose setting the workbench plans now, or -1 (the memory mode is the workbench's own). */
export function currentRow(rows: SweepRow[], o: SweepOptions): number {
  return rows.findIndex((r) => r.max_streams === o.max_streams && r.fusion === o.fusion && r.max_group_size === o.max_group_size);
}

/** The point nearest (x, y) within `radius` pixels, or -1. */
export function nearestPoint(points: SweepPoint[], x: number, y: number, radius = 12): number {
  let best = -1;
  let bestD = radius * radius;
  for (const p of points) {
    const d = (p.x - x) ** 2 + (p.y - y) ** 2;
    if (d <= bestD) {
      bestD = d;
      best = p.index;
    }
  }
  return best;
}

/** "4 streams (cap 8), fusion on (≤ 16): 92.6 µs, 112 KiB, 12 events, 40 kernels". */
export function rowText(r: SweepRow): string {
  const streams = `${r.num_streams} stream${r.num_streams === 1 ? "" : "s"}${r.num_streams !== r.max_streams ? ` (cap ${r.max_streams})` : ""}`;
  return `${streams}, fusion ${r.fusion ? `on (≤ ${r.max_group_size})` : "off"}: makespan ${formatTime(r.makespan)}, arena ${formatBytes(r.arena_bytes)}, ${r.event_count} events, ${r.kernel_count} kernels${r.pareto ? " · on the Pareto front" : ""}`;
}

const SVG = "http://www.w3.org/2000/svg";
function s<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>,
  ...kids: (Node | string)[]
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const k of kids) el.append(k);
  return el;
}

/** The Sweep tab: a button before any sweep, then the chart and its legend. */
export function sweepPanel(table: SweepTable | null, options: SweepOptions, send: Send, width: number): HTMLElement {
  const run = h("button", {
    class: "ow-btn ow-primary ow-sweep-run",
    text: table ? "Sweep again" : "Sweep 1/2/4/8 streams × fusion on/off",
    onclick: () => send("sweep", {}),
  });
  const root = h(
    "div",
    { class: "ow-sweep" },
    h(
      "div",
      { class: "ow-compare-tools" },
      run,
      h("span", {
        class: "ow-muted",
        text: "modelled makespan against arena per setting (oxiwork.explore.sweep); click a point to plan that setting",
      }),
    ),
  );
  if (!table || !table.rows.length) {
    root.dataset.points = "0";
    return root;
  }
  const rows = table.rows;
  const W = Math.max(360, Math.min(width, 900));
  const H = 260;
  const g = sweepGeometry(rows, W, H);
  const cur = currentRow(rows, options);
  const { plot } = g;
  const svg = s("svg", { width: W, height: H, class: "ow-sweep-chart", role: "img", "aria-label": "sweep: makespan against arena" });
  for (const t of g.xTicks) {
    svg.append(
      s("line", { x1: t.x, x2: t.x, y1: plot.top, y2: plot.bottom, class: "ow-sweep-grid" }),
      s("text", { x: t.x, y: plot.bottom + 14, "text-anchor": "middle", class: "ow-sweep-tick" }, t.label),
    );
  }
  for (const t of g.yTicks) {
    svg.append(
      s("line", { x1: plot.left, x2: plot.right, y1: t.y, y2: t.y, class: "ow-sweep-grid" }),
      s("text", { x: plot.left - 6, y: t.y + 4, "text-anchor": "end", class: "ow-sweep-tick" }, t.label),
    );
  }
  svg.append(
    s(
      "text",
      { x: (plot.left + plot.right) / 2, y: H - 4, "text-anchor": "middle", class: "ow-sweep-axis" },
      "modelled makespan (time, µs/ms)",
    ),
    s(
      "text",
      {
        x: 12,
        y: (plot.top + plot.bottom) / 2,
        "text-anchor": "middle",
        class: "ow-sweep-axis",
        transform: `rotate(-90 12 ${(plot.top + plot.bottom) / 2})`,
      },
      "arena (bytes)",
    ),
  );
  // The front as a staircase: what no setting beats in both at once.
  if (g.front.length > 1) {
    let d = `M${g.front[0].x},${g.front[0].y}`;
    for (const p of g.front.slice(1)) d += `H${p.x}V${p.y}`;
    svg.append(s("path", { d, class: "ow-sweep-front" }));
  }
  for (const p of g.points) {
    const r = rows[p.index];
    const dot = s(
      "circle",
      {
        cx: p.x,
        cy: p.y,
        r: 6,
        class: `ow-sweep-point ${r.pareto ? "ow-sweep-pareto" : "ow-sweep-dominated"}${r.fusion ? "" : " ow-sweep-nofusion"}`,
        "data-index": p.index,
      },
      s("title", {}, rowText(r)),
    );
    dot.addEventListener("click", () =>
      send("set_options", { max_streams: r.max_streams, fusion: r.fusion, max_group_size: r.max_group_size }),
    );
    svg.append(dot);
    svg.append(s("text", { x: p.x + 8, y: p.y - 6, class: "ow-sweep-label" }, `${r.max_streams}${r.fusion ? "" : "·nf"}`));
  }
  if (cur >= 0) {
    const p = g.points[cur];
    svg.append(s("circle", { cx: p.x, cy: p.y, r: 11, class: "ow-sweep-current" }));
  }
  const legend = h(
    "div",
    { class: "ow-chart-legend ow-sweep-legend" },
    h("span", {}, h("i", { class: "ow-sweep-key ow-sweep-pareto" }), " on the Pareto front (no setting is faster and smaller)"),
    h("span", {}, h("i", { class: "ow-sweep-key ow-sweep-dominated" }), " dominated"),
    h("span", {}, h("i", { class: "ow-sweep-key ow-sweep-current-key" }), " the setting planned now"),
    h("span", { text: "label: stream cap, ·nf = fusion off; — the front" }),
  );
  root.append(svg, legend);
  root.dataset.points = String(rows.length);
  root.dataset.front = String(g.front.length);
  root.dataset.current = String(cur);
  return root;
}
