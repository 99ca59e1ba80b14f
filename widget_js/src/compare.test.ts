import { describe, expect, it } from "vitest";
import { compareRows, kernelDiff, optionsText } from "./compare";
import type { PlanFigures } from "./types";

const base: PlanFigures = {
  options: { max_streams: 4, fusion: true, max_group_size: 16 },
  kernels: 3,
  kernels_before_fusion: 5,
  kernel_names: ["a+b", "c", "d+e"],
  steps: 8,
  streams: 2,
  events: 2,
  arena_bytes: 8192,
  lower_bound_bytes: 8192,
  graph_launch: 10e-6,
  stream_launches: 20e-6,
  critical_path: 5e-6,
};

describe("compare", () => {
  const other: PlanFigures = {
    ...base,
    options: { max_streams: 1, fusion: false, max_group_size: 16 },
    kernels: 5,
    kernel_names: ["a", "b", "c", "d", "e"],
    streams: 1,
    events: 0,
    graph_launch: 15e-6,
    critical_path: null,
  };
  it("names the options", () => {
    expect(optionsText(base)).toBe("4 streams, fusion on (≤ 16)");
    expect(optionsText(other)).toBe("1 stream, fusion off");
  });
  it("gives every figure and the difference from the pinned plan", () => {
    const rows = Object.fromEntries(compareRows(base, other).map((r) => [r[0], r.slice(1)]));
    expect(rows.kernels).toEqual(["3", "5", "+2 (+67%)"]);
    expect(rows.events).toEqual(["2", "0", "−2 (-100%)"]);
    expect(rows.arena).toEqual(["8.00 KiB", "8.00 KiB", "="]);
    expect(rows["graph launch"][2]).toBe("+5.0 µs (+50%)");
    expect(rows["critical path"]).toEqual(["5.0 µs", "—", ""]);
  });
  it("lists the kernels only one plan has", () => {
    expect(kernelDiff(base, other)).toEqual({ onlyPinned: ["a+b", "d+e"], onlyCurrent: ["a", "b", "d", "e"] });
    expect(kernelDiff(base, base)).toEqual({ onlyPinned: [], onlyCurrent: [] });
  });
});
