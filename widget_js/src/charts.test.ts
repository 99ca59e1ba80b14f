import { describe, expect, it } from "vitest";
import {
  byteTicks,
  FULL,
  isFull,
  panWindow,
  zoomWindow,
  figureDefinitions,
  formatBytes,
  formatTime,
  ganttGeometry,
  memoryMarkPoints,
  modeTotals,
  niceTicks,
  timelineGeometry,
  treeGeometry,
} from "./charts";
import type { MemorySection, StreamsSection } from "./types";

const mem: MemorySection = {
  available: true,
  mode: "heuristic",
  modes: ["heuristic", "exact"],
  arena_bytes: 8192,
  lower_bound_bytes: 8192,
  num_steps: 4,
  buffers: [
    { id: 0, name: "a", start: 0, end: 2, offset: 0, size: 4096 },
    { id: 1, name: "b", start: 1, end: 4, offset: 4096, size: 4096 },
    { id: 2, name: "c", start: 2, end: 4, offset: 0, size: 4096 },
  ],
};

describe("ganttGeometry", () => {
  const g = ganttGeometry(mem, 600, 300);
  it("draws one rectangle per buffer inside the plot", () => {
    expect(g.rects).toHaveLength(3);
    for (const r of g.rects) {
      expect(r.x).toBeGreaterThanOrEqual(g.box.left);
      expect(r.x + r.w).toBeLessThanOrEqual(600 - g.box.right + 1e-9);
      expect(r.y).toBeGreaterThanOrEqual(g.box.top - 1e-9);
      expect(r.y + r.h).toBeLessThanOrEqual(300 - g.box.bottom + 1e-9);
    }
  });
  it("maps steps to x and offsets to y (offset 0 at the bottom)", () => {
    const [a, b, c] = g.rects;
    expect(a.x).toBeCloseTo(g.xOf(0));
    expect(a.w).toBeCloseTo(g.xOf(2) - g.xOf(0));
    expect(b.y + b.h).toBeCloseTo(a.y); // b sits on top of a
    expect(c.x).toBeCloseTo(a.x + a.w); // c reuses a's bytes after a ends
    expect(c.y).toBeCloseTo(a.y);
  });
  it("places the arena line at or above the lower bound line", () => {
    expect(g.arenaY).toBeLessThanOrEqual(g.lowerY);
  });
});

const st: StreamsSection = {
  available: true,
  mode: "graph",
  modes: ["graph", "stream"],
  num_streams: 2,
  lanes: [
    { stream: 0, label: "stream 0", busy: 1e-6, steps: 2 },
    { stream: 1, label: "stream 1", busy: 2e-6, steps: 1 },
  ],
  bars: [
    { step: 0, node: 0, name: "a", stream: 0, launch: 0, start: 0, end: 1e-6, kind: "kernel" },
    { step: 1, node: 4, name: "rec", stream: 0, launch: 0, start: 1e-6, end: 1e-6, kind: "event_record" },
    { step: 2, node: 1, name: "b", stream: 1, launch: 0, start: 1.5e-6, end: 3e-6, kind: "kernel" },
  ],
  arrows: [{ event: 0, record: 1, wait: 2, from_stream: 0, to_stream: 1, time: 1e-6 }],
  makespan: 3e-6,
  totals: { graph: 3e-6, stream: 6e-6 },
  work: 2.5e-6,
  critical_path: 2.5e-6,
  overheads: { graph: 1e-6, stream: 4e-6 },
  time_unit: "s",
};

describe("timelineGeometry", () => {
  const g = timelineGeometry(st, 500, 200);
  it("one bar per step, on its lane", () => {
    expect(g.rects).toHaveLength(3);
    expect(g.rects[2].y).toBeGreaterThan(g.rects[0].y + g.rects[0].h - 1e-9);
    expect(g.rects[2].x).toBeCloseTo(g.xOf(1.5e-6));
    expect(g.xOf(st.makespan)).toBeCloseTo(500 - g.box.right);
  });
  it("event arrows go from the record on its lane to the wait on its lane", () => {
    expect(g.arrows).toHaveLength(1);
    expect(g.arrows[0].y0).toBeLessThan(g.arrows[0].y1);
    expect(g.arrows[0].x0).toBeCloseTo(g.xOf(1e-6));
    expect(g.arrows[0].x1).toBeCloseTo(g.rects[2].x);
  });
  it("compares the launch modes", () => {
    expect(modeTotals(st)).toBe(
      "graph launch 3.0 µs · stream launches 6.0 µs (graph ×2.00 faster) · critical path 2.5 µs · device work 2.5 µs · 2 streams",
    );
    expect(modeTotals({ ...st, totals: { graph: 2e-6, stream: 1e-6 } })).toContain("stream ×2.00 faster");
  });
  it("says when the stream mode is host-bound, and names every figure it shows", () => {
    const bound = { ...st, launches: 2, schedule: 2e-6, totals: { graph: 3e-6, stream: 8.2e-6 } };
    const text = modeTotals(bound);
    expect(text).toContain("stream launches 8.2 µs (host-bound: 2 launches × 4.0 µs; graph ×2.73 faster)");
    const named = figureDefinitions(bound).map(([k]) => k);
    for (const chunk of text.split(" · ").slice(0, -1)) expect(named.some((k) => chunk.startsWith(k))).toBe(true);
  });
});

describe("treeGeometry", () => {
  it("children are one level deeper, parents between their children", () => {
    const parent = [-1, 0, 0, 1, 1, -1];
    const g = treeGeometry(parent);
    expect(g.leaves).toBe(4); // 2, 3, 4, 5
    for (let i = 0; i < parent.length; i++) if (parent[i] >= 0) expect(g.x[i]).toBe(g.x[parent[i]] + 1);
    expect(g.y[1]).toBe((g.y[3] + g.y[4]) / 2);
  });
  it("skips excluded nodes and survives deep chains", () => {
    const n = 20000;
    const parent = Array.from({ length: n }, (_, i) => i - 1);
    const g = treeGeometry(parent);
    expect(g.depth).toBe(n - 1);
    const h = treeGeometry([-1, 0, 1], [1, 1, 0]);
    expect(Number.isNaN(h.x[2])).toBe(true);
  });
});

describe("ticks and formats", () => {
  it("niceTicks covers the range with round steps", () => {
    expect(niceTicks(0, 10, 5)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(niceTicks(5, 5)).toEqual([5]);
  });
  it("byteTicks uses round numbers of the unit", () => {
    expect(byteTicks(150 * 1024, 3).map(formatBytes)).toEqual(["0 B", "50.0 KiB", "100 KiB", "150 KiB"]);
  });
  it("formats", () => {
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(4096)).toBe("4.00 KiB");
    expect(formatTime(2.5e-6)).toBe("2.5 µs");
    expect(formatTime(0)).toBe("0 s");
  });
});

describe("chart zoom windows", () => {
  it("zooms about the pointer and back out to the whole axis", () => {
    const z = zoomWindow(FULL, 0.25, 4);
    expect(z.hi - z.lo).toBeCloseTo(0.25);
    // The domain point under the pointer stays under it.
    expect(z.lo + 0.25 * (z.hi - z.lo)).toBeCloseTo(0.25);
    expect(isFull(zoomWindow(z, 0.5, 1 / 100))).toBe(true);
  });
  it("pans within the axis", () => {
    const z = zoomWindow(FULL, 0.5, 10);
    const right = panWindow(z, 100);
    expect(right.hi).toBeCloseTo(1);
    expect(right.hi - right.lo).toBeCloseTo(0.1);
    expect(panWindow(z, -100).lo).toBeCloseTo(0);
  });
  it("maps the window onto the plot in the geometry", () => {
    const g = timelineGeometry(st, 500, 200, { lo: 0.5, hi: 1 });
    expect(g.xOf(st.makespan / 2)).toBeCloseTo(g.box.left);
    expect(g.xOf(st.makespan)).toBeCloseTo(500 - g.box.right);
  });
  it("draws no arrow for the dropped event", () => {
    expect(timelineGeometry(st, 500, 200, FULL, st.arrows[0].event).arrows).toHaveLength(0);
    expect(timelineGeometry(st, 500, 200, FULL, 999).arrows).toHaveLength(st.arrows.length);
  });
});

describe("memoryMarkPoints", () => {
  it("puts each alloc/free mark at its step on its buffer's bar and skips undrawn buffers", () => {
    const m: MemorySection = {
      ...mem,
      marks: [
        { kind: "alloc", buffer: 1, step: 1, node: 5 },
        { kind: "free", buffer: 1, step: 4, node: 6 },
        { kind: "alloc", buffer: 9, step: 0, node: 7 },
      ],
    };
    const g = ganttGeometry(m, 400, 200);
    const pts = memoryMarkPoints(m, g);
    expect(pts.map((p) => p.kind)).toEqual(["alloc", "free"]);
    const bar = g.rects[1];
    expect(pts[0].x).toBeCloseTo(bar.x);
    expect(pts[1].x).toBeCloseTo(bar.x + bar.w);
    for (const p of pts) (expect(p.y).toBeGreaterThan(bar.y), expect(p.y).toBeLessThan(bar.y + bar.h));
    expect(memoryMarkPoints(mem, g)).toEqual([]);
  });
});
