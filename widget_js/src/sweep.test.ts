import { describe, expect, it } from "vitest";
import { currentRow, nearestPoint, rowText, sweepGeometry, type SweepRow } from "./sweep";

const row = (max_streams: number, fusion: boolean, makespan: number, arena_bytes: number, pareto: boolean): SweepRow => ({
  max_streams,
  fusion,
  memory_mode: "auto",
  max_group_size: 16,
  num_streams: max_streams,
  makespan,
  arena_bytes,
  lower_bound: arena_bytes,
  event_count: 2 * (max_streams - 1),
  kernel_count: fusion ? 10 : 20,
  pareto,
});
const rows = [
  row(1, true, 100e-6, 1000, true),
  row(4, true, 60e-6, 3000, true),
  row(2, true, 80e-6, 2000, true),
  row(1, false, 150e-6, 4000, false),
];

describe("sweep chart geometry", () => {
  const g = sweepGeometry(rows, 600, 260);
  it("puts faster settings left and bigger arenas higher, inside the plot", () => {
    const [a, b, c, d] = g.points;
    expect(b.x).toBeLessThan(c.x);
    expect(c.x).toBeLessThan(a.x);
    expect(a.x).toBeLessThan(d.x);
    expect(d.y).toBeLessThan(b.y); // more bytes: higher up (smaller y)
    for (const p of g.points) {
      expect(p.x).toBeGreaterThanOrEqual(g.plot.left);
      expect(p.x).toBeLessThanOrEqual(g.plot.right);
      expect(p.y).toBeGreaterThanOrEqual(g.plot.top);
      expect(p.y).toBeLessThanOrEqual(g.plot.bottom);
    }
  });
  it("joins exactly the Pareto rows, by makespan", () => {
    expect(g.front.map((p) => p.index)).toEqual([1, 2, 0]);
  });
  it("labels the axes with units", () => {
    expect(g.xTicks.length).toBeGreaterThan(1);
    expect(g.xTicks.every((t) => /s$/.test(t.label))).toBe(true);
    expect(g.yTicks.every((t) => /B$/.test(t.label))).toBe(true);
  });
  it("hit-tests the nearest point within the radius only", () => {
    const p = g.points[2];
    expect(nearestPoint(g.points, p.x + 3, p.y - 2)).toBe(2);
    expect(nearestPoint(g.points, p.x + 40, p.y + 40, 12)).toBe(-1);
  });
});

describe("sweep rows", () => {
  it("finds the setting planned now by its options", () => {
    expect(currentRow(rows, { max_streams: 2, fusion: true, max_group_size: 16 })).toBe(2);
    expect(currentRow(rows, { max_streams: 2, fusion: false, max_group_size: 16 })).toBe(-1);
    expect(currentRow(rows, { max_streams: 4, fusion: true, max_group_size: 8 })).toBe(-1);
  });
  it("says a point's setting, figures with units, and whether it is on the front", () => {
    const t = rowText({ ...rows[1], num_streams: 3 });
    expect(t).toContain("3 streams (cap 4)");
    expect(t).toContain("60.0 µs");
    expect(t).toContain("2.93 KiB");
    expect(t).toContain("Pareto");
    expect(rowText(rows[3])).not.toContain("Pareto");
  });
});
