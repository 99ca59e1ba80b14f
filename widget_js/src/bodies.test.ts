import { describe, expect, it } from "vitest";
import { BADGE_H, bodyKey, bodyLevels, bodyScene, clusterOf, hitBadge, toggleBody } from "./bodies";
import { NODE_H, NODE_W } from "./layout";
import type { DagBody } from "./types";

// The shape oxiwork.widget.viewmodel.body_sections sends for course.countdown_branch.
const BODIES: DagBody[] = [
  {
    node: 4,
    parent: -1,
    title: "count down: while ≠ 0 (≤ 16×)",
    names: ["c - 1", "c = relu", "acc + 1"],
    kinds: [0, 0, 0],
    edges: [[0, 1]],
  },
  { node: 5, parent: -1, title: "finish: child graph", names: ["flag?"], kinds: [8], edges: [] },
  { node: 0, parent: 1, title: "flag?: then", names: ["acc * 2"], kinds: [0], edges: [] },
  { node: 0, parent: 1, title: "flag?: else", names: ["-acc"], kinds: [0], edges: [] },
];
const HOLDERS: Record<number, { x: number; y: number }> = { 4: { x: 0, y: 0 }, 5: { x: 400, y: 0 } };
const holder = (p: number) => HOLDERS[p] ?? null;

describe("body levels", () => {
  it("puts every edge's head in a later column", () => {
    const edges: [number, number][] = [
      [0, 2],
      [1, 2],
      [2, 3],
      [0, 3],
    ];
    const lv = bodyLevels(4, edges);
    for (const [a, b] of edges) expect(lv[b]).toBeGreaterThan(lv[a]);
    expect(lv[0]).toBe(0);
  });
});

describe("clusters", () => {
  it("frames every body node inside the cluster, below its title", () => {
    const c = clusterOf(BODIES, 0, 10, 20);
    expect(c.nx.length).toBe(3);
    for (let j = 0; j < 3; j++) {
      expect(c.nx[j] - NODE_W / 2).toBeGreaterThanOrEqual(c.x);
      expect(c.nx[j] + NODE_W / 2).toBeLessThanOrEqual(c.x + c.w);
      expect(c.ny[j] - NODE_H / 2).toBeGreaterThan(c.y);
      expect(c.ny[j] + NODE_H / 2).toBeLessThanOrEqual(c.y + c.h);
    }
    // The edge c - 1 -> c = relu runs left to right.
    expect(c.nx[1]).toBeGreaterThan(c.nx[0]);
  });
});

describe("body scene", () => {
  it("is collapsed by default: one badge per outer body, no cluster, nested hidden", () => {
    const s = bodyScene(BODIES, holder, new Set());
    expect(s.clusters).toEqual([]);
    expect(s.badges.map((b) => b.body)).toEqual([0, 1]);
    expect(s.badges[0].label).toBe("▸ while (3)");
    // Under its holder, not on another node's row.
    expect(s.badges[0].y - BADGE_H / 2).toBeGreaterThanOrEqual(NODE_H / 2);
  });

  it("opens and closes a body with a click on its badge", () => {
    let open = new Set<string>();
    const s0 = bodyScene(BODIES, holder, open);
    const b = s0.badges[1];
    const hit = hitBadge(s0, b.x, b.y);
    expect(hit).toBe(1);
    open = toggleBody(open, BODIES, hit);
    const s1 = bodyScene(BODIES, holder, open);
    expect(s1.clusters.map((c) => c.title)).toEqual(["finish: child graph"]);
    // Below the holder, and now the nested then/else badges of flag? show.
    expect(s1.clusters[0].y).toBeGreaterThan(HOLDERS[5].y + NODE_H / 2);
    expect(s1.badges.map((g) => g.body)).toEqual([0, 1, 2, 3]);
    expect(s1.badges[1].label.startsWith("▾")).toBe(true);
    const closed = toggleBody(open, BODIES, 1);
    expect(closed.size).toBe(0);
    expect(open.size).toBe(1); // toggling returns a new set
    expect(bodyScene(BODIES, holder, closed).clusters).toEqual([]);
  });

  it("stacks a holder's open bodies without overlap and skips undrawn holders", () => {
    const open = new Set([bodyKey(BODIES, 1), bodyKey(BODIES, 2), bodyKey(BODIES, 3)]);
    const s = bodyScene(BODIES, holder, open);
    const [then, els] = s.clusters.filter((c) => c.body >= 2);
    expect(els.y).toBeGreaterThanOrEqual(then.y + then.h);
    expect(bodyKey(BODIES, 2)).not.toBe(bodyKey(BODIES, 3));
    // The holder of body 0 hidden (in a collapsed group): no badge for it.
    const s2 = bodyScene(BODIES, (p) => (p === 5 ? HOLDERS[5] : null), new Set());
    expect(s2.badges.map((g) => g.body)).toEqual([1]);
    expect(hitBadge(s2, -1000, -1000)).toBe(-1);
  });
});
