import { describe, expect, it } from "vitest";
import { DX, DY, freshLayout, hitTest, NODE_H, NODE_W, remember, SpatialGrid, stableLayout, type Placed } from "./layout";

/** A random DAG: edges only from lower to higher index, levels = longest path. */
function randomDag(n: number, m: number, seed: number) {
  let s = seed;
  const rnd = () => (s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  const src: number[] = [];
  const dst: number[] = [];
  for (let e = 0; e < m; e++) {
    const a = Math.floor(rnd() * (n - 1));
    const b = a + 1 + Math.floor(rnd() * (n - a - 1));
    src.push(a);
    dst.push(b);
  }
  const level = new Array(n).fill(0);
  for (let v = 0; v < n; v++) for (let e = 0; e < m; e++) if (dst[e] === v) level[v] = Math.max(level[v], level[src[e]] + 1);
  const ids = Array.from({ length: n }, (_, i) => i * 3 + 1);
  const names = ids.map((i) => `n${i}`);
  return { n, ids, names, level, src, dst };
}

const key = (x: number, y: number) => `${Math.round(x)},${Math.round(y)}`;

describe("freshLayout", () => {
  it.each([1, 2, 7, 11])("puts nodes in level columns without overlaps (seed %i)", (seed) => {
    const g = randomDag(60, 120, seed);
    const L = freshLayout(g);
    const seen = new Set<string>();
    for (let i = 0; i < g.n; i++) {
      expect(L.x[i]).toBe(g.level[i] * DX);
      const k = key(L.x[i], L.y[i]);
      expect(seen.has(k)).toBe(false);
      seen.add(k);
    }
    expect(L.minX).toBe(0);
    expect(L.maxX).toBe(Math.max(...g.level) * DX);
  });

  it("keeps edges left to right", () => {
    const g = randomDag(40, 80, 3);
    const L = freshLayout(g);
    for (let e = 0; e < g.src.length; e++) expect(L.x[g.dst[e]]).toBeGreaterThan(L.x[g.src[e]]);
  });

  it("is deterministic", () => {
    const g = randomDag(50, 90, 5);
    expect(Array.from(freshLayout(g).y)).toEqual(Array.from(freshLayout(g).y));
  });

  it("untangles a crossed pair (barycentre)", () => {
    // a0 -> b1, a1 -> b0: sorting layer b by its parents' rank removes the crossing.
    const g = { n: 4, ids: [0, 1, 2, 3], names: ["a0", "a1", "b0", "b1"], level: [0, 0, 1, 1], src: [0, 1], dst: [3, 2] };
    const L = freshLayout(g);
    expect(Math.sign(L.y[0] - L.y[1])).toBe(Math.sign(L.y[3] - L.y[2]));
  });

  it("handles the empty graph", () => {
    const L = freshLayout({ n: 0, ids: [], names: [], level: [], src: [], dst: [] });
    expect(L.x.length).toBe(0);
  });
});

describe("stableLayout", () => {
  it("keeps every known node where it was", () => {
    const g = randomDag(50, 100, 9);
    const cache = new Map<number, Placed>();
    const L0 = freshLayout(g);
    remember(cache, g.ids, g.names, L0);
    // A pass adds two nodes and removes one.
    const ids = [...g.ids.slice(1), 1000, 1001];
    const names = [...g.names.slice(1), "new1", "new2"];
    const level = [...g.level.slice(1), 0, 3];
    const keep = (i: number) => i >= 1;
    const src: number[] = [];
    const dst: number[] = [];
    for (let e = 0; e < g.src.length; e++)
      if (keep(g.src[e]) && keep(g.dst[e])) {
        src.push(g.src[e] - 1);
        dst.push(g.dst[e] - 1);
      }
    src.push(0);
    dst.push(ids.length - 1);
    const L1 = stableLayout({ n: ids.length, ids, names, level, src, dst }, cache);
    expect(L1.reused).toBe(g.n - 1);
    for (let i = 0; i < g.n - 1; i++) {
      expect(L1.x[i]).toBe(L0.x[i + 1]);
      expect(L1.y[i]).toBe(L0.y[i + 1]);
    }
    const cells = new Set<string>();
    for (let i = 0; i < ids.length; i++) {
      const k = key(L1.x[i], L1.y[i]);
      expect(cells.has(k)).toBe(false);
      cells.add(k);
    }
  });

  it("moves a node whose level changed to its level's column, at its old height", () => {
    // An edit adds k (level 3) and an edge k -> download: download goes from level 3 to 4.
    const cache = new Map<number, Placed>([
      [0, { x: 0, y: 0, name: "upload" }],
      [1, { x: DX, y: 0, name: "relu" }],
      [2, { x: 2 * DX, y: 0, name: "scale" }],
      [3, { x: 3 * DX, y: 0, name: "download" }],
    ]);
    const L = stableLayout(
      {
        n: 5,
        ids: [0, 1, 2, 3, 4],
        names: ["upload", "relu", "scale", "download", "k"],
        level: [0, 1, 2, 4, 3],
        src: [0, 1, 2, 4],
        dst: [1, 2, 3, 3],
      },
      cache,
    );
    for (let i = 0; i < 5; i++) expect(L.x[i]).toBe([0, 1, 2, 4, 3][i] * DX);
    expect([L.y[0], L.y[1], L.y[2], L.y[3]]).toEqual([0, 0, 0, 0]);
    for (const [a, b] of [
      [0, 1],
      [1, 2],
      [2, 3],
      [4, 3],
    ])
      expect(L.x[b]).toBeGreaterThan(L.x[a]);
  });

  it("puts a fused node at the height of the nodes it replaces, in its level's column", () => {
    const cache = new Map<number, Placed>([
      [1, { x: 0, y: 0, name: "a" }],
      [2, { x: DX, y: 0, name: "b" }],
      [3, { x: 2 * DX, y: 0, name: "c" }],
      [4, { x: 3 * DX, y: 0, name: "d" }],
    ]);
    const L = stableLayout(
      { n: 3, ids: [1, 9, 4], names: ["a", "b+c", "d"], level: [0, 1, 2], src: [0, 1], dst: [1, 2], anchors: new Map([[1, [2, 3]]]) },
      cache,
    );
    expect(L.x[0]).toBe(0);
    expect(L.x[1]).toBe(DX);
    expect(L.x[2]).toBe(2 * DX); // d moved from level 3 to 2
    expect(L.y[1]).toBe(0);
  });

  it("does not reuse a position when the name changed (a different node)", () => {
    const cache = new Map<number, Placed>([[0, { x: 500, y: 500, name: "old" }]]);
    const L = stableLayout({ n: 1, ids: [0], names: ["new"], level: [0], src: [], dst: [] }, cache);
    expect(L.reused).toBe(0);
    expect(L.x[0]).toBe(0);
  });
});

describe("hitTest", () => {
  it("finds the node under a point, with and without the grid", () => {
    const g = randomDag(200, 300, 4);
    const L = freshLayout(g);
    const grid = new SpatialGrid(L);
    for (const i of [0, 17, 99, 199]) {
      expect(hitTest(L, L.x[i] + NODE_W / 2 - 1, L.y[i] - NODE_H / 2 + 1)).toBe(i);
      expect(hitTest(L, L.x[i], L.y[i], grid)).toBe(i);
    }
    expect(hitTest(L, L.minX - 5 * DX, L.minY - 5 * DY, grid)).toBe(-1);
  });
});

import { fitTransform, LABEL_ZOOM } from "./dagview";

describe("fitTransform", () => {
  const box = (minX: number, maxX: number, minY: number, maxY: number) => ({
    x: new Float32Array(0),
    y: new Float32Array(0),
    minX,
    maxX,
    minY,
    maxY,
    reused: 0,
  });
  it("shows a compact graph whole and centred", () => {
    const f = fitTransform(box(0, 4 * DX, -2 * DY, 2 * DY), 1000, 500);
    const cx = (0 + 4 * DX) / 2;
    expect(f.k * cx + f.tx).toBeCloseTo(500);
    expect(f.k * (4 * DX + NODE_W / 2) + f.tx).toBeLessThanOrEqual(1000);
    expect(f.k * (0 - NODE_W / 2) + f.tx).toBeGreaterThanOrEqual(0);
  });
  it("zooms a long thin graph to a readable scale from its sources", () => {
    const f = fitTransform(box(0, 300 * DX, -DY, DY), 1000, 500);
    expect(f.k).toBeGreaterThanOrEqual(LABEL_ZOOM);
    expect(f.k * (0 - NODE_W / 2) + f.tx).toBeCloseTo(20);
  });
  it("keeps a big square graph whole even if labels do not fit", () => {
    const f = fitTransform(box(0, 100 * DX, 0, 200 * DY), 1000, 500);
    expect(f.k).toBeLessThan(LABEL_ZOOM);
    expect(f.k * 200 * DY).toBeLessThanOrEqual(500);
  });
});
