import { describe, expect, it } from "vitest";
import { colorNodes, COLOR_MODES, KIND_COLORS, mix, MUTED, STRONG, subtreeMask } from "./colors";
import { decodeDag, encodeDag } from "./dagdata";

const kinds = ["kernel", "memcpy", "memset", "event_record", "event_wait", "host_callback", "barrier"];
// 0 -> 1 -> 2, 0 -> 3; idom: 1,3 under 0; 2 under 1.
const dag = decodeDag(
  encodeDag(
    4,
    {
      kind: [1, 0, 0, 2],
      critical: [1, 1, 1, 0],
      stream: [0, 0, 1, -1],
      group: [-1, 2, 2, -1],
      idom: [-1, 0, 1, 0],
      ipdom: [2, 2, -1, -1],
    },
    [0, 1, 0],
    [1, 2, 3],
    { slack: [0, 0, 0, 4] },
  ),
);

describe("colour modes", () => {
  it.each(Object.keys(COLOR_MODES))("%s gives one colour per node and a legend", (mode) => {
    const c = colorNodes(mode, { dag, kinds, selected: 1 });
    expect(c.colors).toHaveLength(4);
    for (const col of c.colors) expect(col).toMatch(/^#[0-9a-f]{6}$/);
    expect(c.legend.length).toBeGreaterThan(0);
  });

  it("kind uses the kind table", () => {
    const c = colorNodes("kind", { dag, kinds, selected: -1 });
    expect(c.colors).toEqual([KIND_COLORS.memcpy, KIND_COLORS.kernel, KIND_COLORS.kernel, KIND_COLORS.memset]);
  });

  it("critical marks exactly the critical nodes", () => {
    const c = colorNodes("critical", { dag, kinds, selected: -1 });
    expect(c.colors).toEqual([STRONG, STRONG, STRONG, MUTED]);
  });

  it("slack: zero slack is the strong colour, more slack is lighter", () => {
    const c = colorNodes("slack", { dag, kinds, selected: -1 });
    expect(c.colors[0]).toBe(STRONG);
    expect(c.colors[3]).not.toBe(STRONG);
  });

  it("dominator subtree of the selected node", () => {
    const c = colorNodes("dominator", { dag, kinds, selected: 1 });
    expect(c.colors[1]).toBe(STRONG);
    expect(c.colors[2]).not.toBe(MUTED); // 2 is dominated by 1
    expect(c.colors[0]).toBe(MUTED);
    expect(c.colors[3]).toBe(MUTED);
  });

  it("falls back to kind for an unknown mode", () => {
    expect(colorNodes("nope", { dag, kinds, selected: -1 })).toEqual(colorNodes("kind", { dag, kinds, selected: -1 }));
  });
});

describe("subtreeMask", () => {
  it("matches a naive walk up the parent chain", () => {
    let s = 7;
    const rnd = (k: number) => ((s = (s * 48271) % 2147483647), s % k);
    for (let t = 0; t < 20; t++) {
      const n = 1 + rnd(40);
      const parent = Array.from({ length: n }, (_, i) => (i === 0 || rnd(5) === 0 ? -1 : rnd(i)));
      const root = rnd(n);
      const mask = subtreeMask(parent, root);
      for (let v = 0; v < n; v++) {
        let u = v;
        while (u >= 0 && u !== root) u = parent[u];
        expect(mask[v]).toBe(u === root ? 1 : 0);
      }
    }
  });

  it("is empty for no selection", () => {
    expect(Array.from(subtreeMask([-1, 0], -1))).toEqual([0, 0]);
  });
});

describe("mix", () => {
  it("interpolates and clamps", () => {
    expect(mix("#000000", "#ffffff", 0)).toBe("#000000");
    expect(mix("#000000", "#ffffff", 1)).toBe("#ffffff");
    expect(mix("#000000", "#ffffff", 2)).toBe("#ffffff");
    expect(mix("#000000", "#ffffff", NaN)).toBe("#000000");
  });
});
