// Node colouring: one pure function per colour mode, each returning a colour per node and a
// legend. A table of modes (not an if-chain) so that adding a mode is one entry.

import type { DagArrays } from "./dagdata";

// Tableau 10 and the kind colours: defined once in oxiwork/palette.json (read by oxiwork.render
// too, so figures and the widget colour alike); esbuild inlines the JSON into the bundle.
import palette from "../../oxiwork/palette.json";

export const PALETTE: string[] = palette.palette;
export const MUTED: string = palette.muted;
export const STRONG: string = palette.strong;
export const SUBTREE: string = palette.subtree;
export const SLACK_MAX: string = palette.slack_max;

export const KIND_COLORS: Record<string, string> = palette.kinds;

export interface LegendItem {
  label: string;
  color: string;
}

export interface Coloring {
  colors: string[];
  legend: LegendItem[];
}

export interface ColorContext {
  dag: DagArrays;
  kinds: string[];
  /** Position of the selected node, or -1. */
  selected: number;
}

/** Linear blend of two #rrggbb colours, t in [0, 1]. */
export function mix(a: string, b: string, t: number): string {
  const pa = parseInt(a.slice(1), 16);
  const pb = parseInt(b.slice(1), 16);
  const tt = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0));
  const ch = (s: number) => {
    const ca = (pa >> s) & 255;
    const cb = (pb >> s) & 255;
    return Math.round(ca + (cb - ca) * tt);
  };
  return `#${((1 << 24) | (ch(16) << 16) | (ch(8) << 8) | ch(0)).toString(16).slice(1)}`;
}

/**
 * Whether each node lies in the subtree rooted at `root` of the tree given by `parent`
 * (positions, -1 for a root). Memoised walk up the parent chain, O(n) overall.
 */
export function subtreeMask(parent: ArrayLike<number>, root: number): Uint8Array {
  const n = parent.length;
  // 0 unknown, 1 inside, 2 outside
  const state = new Uint8Array(n);
  if (root < 0 || root >= n) return state;
  state[root] = 1;
  const path: number[] = [];
  for (let v = 0; v < n; v++) {
    let u = v;
    path.length = 0;
    let guard = 0;
    while (u >= 0 && state[u] === 0 && guard++ <= n) {
      path.push(u);
      u = parent[u];
    }
    const verdict = u >= 0 && state[u] === 1 ? 1 : 2;
    for (const w of path) state[w] = verdict;
  }
  return state.map((s) => (s === 1 ? 1 : 0));
}

type ModeFn = (ctx: ColorContext) => Coloring;

const byKind: ModeFn = ({ dag, kinds }) => {
  const colors = Array.from(dag.int.kind, (k) => KIND_COLORS[kinds[k]] ?? PALETTE[9]);
  const present = new Set(dag.int.kind);
  const legend = [...present].sort().map((k) => ({
    label: kinds[k] ?? "?",
    color: KIND_COLORS[kinds[k]] ?? PALETTE[9],
  }));
  return { colors, legend };
};

const bySlack: ModeFn = ({ dag }) => {
  let max = 0;
  for (const s of dag.float.slack) if (Number.isFinite(s)) max = Math.max(max, s);
  const colors = Array.from(dag.float.slack, (s) => (max > 0 ? mix(STRONG, SLACK_MAX, s / max) : STRONG));
  return {
    colors,
    legend: [
      { label: "no slack", color: STRONG },
      { label: `slack ${max.toPrecision(3)}`, color: SLACK_MAX },
    ],
  };
};

const byCritical: ModeFn = ({ dag }) => ({
  colors: Array.from(dag.int.critical, (c) => (c ? STRONG : MUTED)),
  legend: [
    { label: "critical path", color: STRONG },
    { label: "other", color: MUTED },
  ],
});

const byStream: ModeFn = ({ dag }) => {
  const colors = Array.from(dag.int.stream, (s) => (s >= 0 ? PALETTE[s % 10] : MUTED));
  const present = [...new Set(dag.int.stream)].sort((a, b) => a - b);
  return {
    colors,
    legend: present.map((s) => ({
      label: s >= 0 ? `stream ${s}` : "unassigned",
      color: s >= 0 ? PALETTE[s % 10] : MUTED,
    })),
  };
};

const byGroup: ModeFn = ({ dag }) => {
  const colors = Array.from(dag.int.group, (g) => (g >= 0 ? PALETTE[g % 10] : MUTED));
  return {
    colors,
    legend: [
      { label: "fusion group (colour per group)", color: PALETTE[0] },
      { label: "not fused", color: MUTED },
    ],
  };
};

function treeMode(column: "idom" | "ipdom", word: string): ModeFn {
  return ({ dag, selected }) => {
    const mask = subtreeMask(dag.int[column], selected);
    const colors = Array.from(mask, (m, i) => (i === selected ? STRONG : m ? SUBTREE : MUTED));
    return {
      colors,
      legend: [
        { label: "selected", color: STRONG },
        { label: selected >= 0 ? `${word} by selected` : "select a node", color: SUBTREE },
      ],
    };
  };
}

export const COLOR_MODES: Record<string, { label: string; fn: ModeFn }> = {
  kind: { label: "kind", fn: byKind },
  slack: { label: "slack", fn: bySlack },
  critical: { label: "critical path", fn: byCritical },
  stream: { label: "stream", fn: byStream },
  group: { label: "fusion group", fn: byGroup },
  dominator: { label: "dominator subtree", fn: treeMode("idom", "dominated") },
  postdominator: { label: "post-dominator subtree", fn: treeMode("ipdom", "post-dominated") },
};

export function colorNodes(mode: string, ctx: ColorContext): Coloring {
  return (COLOR_MODES[mode] ?? COLOR_MODES.kind).fn(ctx);
}
