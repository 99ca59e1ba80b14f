import { describe, expect, it } from "vitest";
import {
  centerOn,
  groupBox,
  groupOf,
  groupsAt,
  maxGroupDepth,
  minimapToWorld,
  minimapTransform,
  revealed,
  searchNodes,
  viewportOnMinimap,
  zoomAt,
} from "./nav";
import { foldLayout, freshLayout, DX } from "./layout";

const screen = (v: { k: number; tx: number; ty: number }, x: number, y: number) => ({ x: x * v.k + v.tx, y: y * v.k + v.ty });

describe("zoom maths", () => {
  it("keeps the point under the cursor fixed", () => {
    const v = { k: 0.7, tx: 13, ty: -40 };
    for (const f of [0.5, 1.3, 4]) {
      const z = zoomAt(v, 200, 120, f);
      const wx = (200 - v.tx) / v.k;
      const wy = (120 - v.ty) / v.k;
      expect(screen(z, wx, wy).x).toBeCloseTo(200);
      expect(screen(z, wx, wy).y).toBeCloseTo(120);
      expect(z.k).toBeCloseTo(0.7 * f);
    }
  });
  it("clamps the zoom", () => {
    expect(zoomAt({ k: 1, tx: 0, ty: 0 }, 0, 0, 1e6).k).toBe(8);
    expect(zoomAt({ k: 1, tx: 0, ty: 0 }, 0, 0, 1e-9, 0.01).k).toBe(0.01);
  });
  it("centres a point", () => {
    const v = centerOn(500, -30, 2, 800, 400);
    expect(screen(v, 500, -30)).toEqual({ x: 400, y: 200 });
  });
  it("brings a node into view only when it is not already", () => {
    const v = { k: 1, tx: 0, ty: 0 };
    expect(revealed(v, 100, 100, 75, 15, 800, 400)).toBe(v);
    const far = revealed(v, 5000, 100, 75, 15, 800, 400);
    expect(screen(far, 5000, 100)).toEqual({ x: 400, y: 200 });
    // Too small to read: zoomed in to the legible scale as well.
    const tiny = revealed({ k: 0.05, tx: 0, ty: 0 }, 10, 10, 75, 15, 800, 400, 24, 0.4);
    expect(tiny.k).toBe(0.4);
  });
});

describe("minimap", () => {
  const b = { minX: 0, maxX: 2000, minY: -100, maxY: 100 };
  const m = minimapTransform(b, 170, 96);
  it("fits the whole graph inside the minimap", () => {
    for (const [x, y] of [
      [0, -100],
      [2000, 100],
    ]) {
      const px = x * m.s + m.ox;
      const py = y * m.s + m.oy;
      expect(px).toBeGreaterThanOrEqual(0);
      expect(px).toBeLessThanOrEqual(170);
      expect(py).toBeGreaterThanOrEqual(0);
      expect(py).toBeLessThanOrEqual(96);
    }
  });
  it("maps minimap pixels back to the world", () => {
    const p = minimapToWorld(m, 1000 * m.s + m.ox, 50 * m.s + m.oy);
    expect(p.x).toBeCloseTo(1000);
    expect(p.y).toBeCloseTo(50);
  });
  it("outlines the part the view shows", () => {
    const v = { k: 0.5, tx: -100, ty: 20 };
    const r = viewportOnMinimap(v, 800, 400, m);
    const tl = minimapToWorld(m, r.x, r.y);
    expect(screen(v, tl.x, tl.y).x).toBeCloseTo(0);
    expect(screen(v, tl.x, tl.y).y).toBeCloseTo(0);
    expect(r.w / m.s).toBeCloseTo(1600);
  });
});

describe("search", () => {
  const names = ["upload", "L0.attn.softmax", "softmax_2", "L1.attn.softmax", "download", "x.soft"];
  it("ranks exact, prefix, segment, then substring matches", () => {
    expect(searchNodes(names, "softmax_2")).toEqual([2]);
    expect(searchNodes(names, "SOFT")).toEqual([2, 1, 3, 5]);
    expect(searchNodes(names, "load")).toEqual([0, 4]);
  });
  it("finds nothing for an empty query and skips what it is told to", () => {
    expect(searchNodes(names, "  ")).toEqual([]);
    expect(searchNodes(names, "soft", 50, (i) => i === 2)).toEqual([1, 3, 5]);
    expect(searchNodes(names, "soft", 2)).toHaveLength(2);
  });
});

describe("grouping", () => {
  it("cuts module paths at a depth, keeping layer numbers with their layer", () => {
    expect(groupOf("encoder.layer.3.attention.softmax", 1)).toBe("encoder");
    expect(groupOf("encoder.layer.3.attention.softmax", 2)).toBe("encoder.layer.3");
    expect(groupOf("encoder.layer.3.attention.softmax", 3)).toBe("encoder.layer.3.attention");
    expect(groupOf("encoder.layer.3.attention.softmax", 4)).toBe("");
    expect(groupOf("L0.q0", 1)).toBe("L0");
    expect(groupOf("upload", 1)).toBe("");
  });
  it("groups repeated blocks with two or more members", () => {
    const names = ["upload", "L0.q", "L0.k", "L1.q", "L1.k", "L2.q", "download"];
    const g = groupsAt(names, 1);
    expect([...g.keys()]).toEqual(["L0", "L1"]);
    expect(g.get("L1")).toEqual([3, 4]);
    expect(maxGroupDepth(names)).toBe(1);
    expect(maxGroupDepth(["a.b.c.d"])).toBe(3);
  });
  it("draws a group from its first to its last member's column", () => {
    expect(groupBox([0, 190, 380], [0, 46, -46], [1, 2])).toEqual({ x0: 190, x1: 380, y: 0 });
  });
});

describe("foldLayout", () => {
  // A long chain: 60 levels of 2 nodes.
  const n = 120;
  const level = Array.from({ length: n }, (_, i) => i >> 1);
  const src: number[] = [];
  const dst: number[] = [];
  for (let i = 0; i + 2 < n; i++) {
    src.push(i);
    dst.push(i + 2);
  }
  const L = freshLayout({ n, ids: level.map((_, i) => i), names: level.map((_, i) => `n${i}`), level, src, dst });
  it("wraps the levels into bands that fill the screen's aspect ratio", () => {
    const F = foldLayout(L, level, 1000, 500);
    const fw = F.maxX - F.minX;
    const fh = F.maxY - F.minY;
    expect(fw).toBeLessThan((L.maxX - L.minX) / 2);
    expect(fw / fh).toBeLessThan(20);
    const cells = new Set<string>();
    for (let i = 0; i < n; i++) {
      const key = `${F.x[i]},${F.y[i]}`;
      expect(cells.has(key)).toBe(false);
      cells.add(key);
    }
  });
  it("keeps levels in reading order: left to right, then band after band", () => {
    const F = foldLayout(L, level, 1000, 500, 3);
    const cols = Math.ceil(60 / 3);
    for (let i = 0; i < n; i++) expect(F.x[i]).toBe((level[i] % cols) * DX);
    const lo = [Infinity, Infinity, Infinity];
    const hi = [-Infinity, -Infinity, -Infinity];
    for (let i = 0; i < n; i++) {
      const b = Math.floor(level[i] / cols);
      lo[b] = Math.min(lo[b], F.y[i]);
      hi[b] = Math.max(hi[b], F.y[i]);
    }
    expect(hi[0]).toBeLessThan(lo[1]);
    expect(hi[1]).toBeLessThan(lo[2]);
    expect(foldLayout(L, level, 1000, 500, 1)).toBe(L);
  });
});
