// Body graphs of child-graph and conditional nodes in the DAG view (issue 16): each body is a
// small toggle badge under its holding node ("▸ then (3)"), collapsed by default; opening it
// draws a framed cluster with the body's title under the holder, laid out by the same
// layered layout as the main graph (freshLayout). A nested body's holder is a node of its
// parent's cluster, so its badge shows only while the parent is open.
//
// Pure geometry and toggle state, in world coordinates (the DAG view scales and draws them).

import { freshLayout, NODE_H, NODE_W } from "./layout";
import type { DagBody } from "./types";

export const BADGE_H = 13;
export const BADGE_W = 72;
/** Space between a holder (or the badge row) and its cluster's frame, and inside the frame. */
export const PAD = 10;
export const TITLE_H = 18;

export interface Badge {
  body: number;
  /** Centre of the badge. */
  x: number;
  y: number;
  label: string;
  open: boolean;
}

export interface Cluster {
  body: number;
  title: string;
  /** The frame (top-left corner and size). */
  x: number;
  y: number;
  w: number;
  h: number;
  /** Centres of the body's nodes. */
  nx: Float32Array;
  ny: Float32Array;
  names: string[];
  kinds: number[];
  edges: [number, number][];
}

export interface BodyScene {
  badges: Badge[];
  clusters: Cluster[];
}

/** The key of a body in the toggle state: its holder and title, so it survives a redraw. */
export function bodyKey(bodies: readonly DagBody[], i: number): string {
  const b = bodies[i];
  return `${b.parent >= 0 ? bodyKey(bodies, b.parent) : ""}/${b.node}:${b.title}`;
}

/** The toggle state with body `i` opened or closed (a new set; the old one is unchanged). */
export function toggleBody(open: ReadonlySet<string>, bodies: readonly DagBody[], i: number): Set<string> {
  const next = new Set(open);
  const k = bodyKey(bodies, i);
  if (next.has(k)) next.delete(k);
  else next.add(k);
  return next;
}

/** Longest-path levels of a body's nodes (sources at 0), the columns of its layout. */
export function bodyLevels(n: number, edges: readonly [number, number][]): Int32Array {
  const level = new Int32Array(n);
  const indeg = new Int32Array(n);
  const succ: number[][] = Array.from({ length: n }, () => []);
  for (const [a, b] of edges) {
    succ[a].push(b);
    indeg[b]++;
  }
  const queue: number[] = [];
  for (let i = 0; i < n; i++) if (indeg[i] === 0) queue.push(i);
  for (let q = 0; q < queue.length; q++) {
    const v = queue[q];
    for (const w of succ[v]) {
      level[w] = Math.max(level[w], level[v] + 1);
      if (--indeg[w] === 0) queue.push(w);
    }
  }
  return level;
}

/** A body's nodes laid out in a frame whose top-left corner is (x, y). */
export function clusterOf(bodies: readonly DagBody[], i: number, x: number, y: number): Cluster {
  const b = bodies[i];
  const n = b.names.length;
  const level = bodyLevels(n, b.edges);
  const L = freshLayout({
    n,
    ids: Array.from({ length: n }, (_, j) => j),
    names: b.names,
    level,
    src: b.edges.map((e) => e[0]),
    dst: b.edges.map((e) => e[1]),
  });
  const nx = new Float32Array(n);
  const ny = new Float32Array(n);
  const left = x + PAD + NODE_W / 2;
  const top = y + TITLE_H + PAD + NODE_H / 2;
  for (let j = 0; j < n; j++) {
    nx[j] = L.x[j] - L.minX + left;
    ny[j] = L.y[j] - L.minY + top;
  }
  const w = Math.max(NODE_W + 2 * PAD, n ? L.maxX - L.minX + NODE_W + 2 * PAD : 0, 8 * b.title.length + 2 * PAD);
  const h = TITLE_H + 2 * PAD + (n ? L.maxY - L.minY + NODE_H : 0);
  return { body: i, title: b.title, x, y, w, h, nx, ny, names: b.names, kinds: b.kinds, edges: b.edges };
}

/** The short label of a body's badge: "▸ then (3)", "▾ then (3)" when open. */
export function badgeLabel(b: DagBody, open: boolean): string {
  const what = b.title.includes(": ") ? b.title.slice(b.title.indexOf(": ") + 2) : b.title;
  return `${open ? "▾" : "▸"} ${what.split(" ")[0]} (${b.names.length})`;
}

/**
 * Badges and open clusters of all bodies: an outer body's holder is at `holder(node)` (null
 * when not drawn, e.g. inside a collapsed group), a nested one's at its node in the parent's
 * cluster. A holder's badges sit in a row under it; its open bodies stack below the row.
 */
export function bodyScene(
  bodies: readonly DagBody[],
  holder: (node: number) => { x: number; y: number } | null,
  open: ReadonlySet<string>,
): BodyScene {
  const badges: Badge[] = [];
  const clusters: Cluster[] = [];
  const clusterOfBody = new Map<number, Cluster>();
  // Per holder: how many badges so far and where the next open cluster goes.
  const row = new Map<string, { k: number; nextY: number }>();
  for (let i = 0; i < bodies.length; i++) {
    const b = bodies[i];
    let at: { x: number; y: number } | null;
    if (b.parent < 0) at = holder(b.node);
    else {
      const pc = clusterOfBody.get(b.parent);
      at = pc && b.node < pc.nx.length ? { x: pc.nx[b.node], y: pc.ny[b.node] } : null;
    }
    if (!at) continue;
    const hk = `${b.parent}:${b.node}`;
    const r = row.get(hk) ?? { k: 0, nextY: at.y + NODE_H / 2 + BADGE_H + 4 + PAD / 2 };
    row.set(hk, r);
    const isOpen = open.has(bodyKey(bodies, i));
    badges.push({
      body: i,
      x: at.x - NODE_W / 2 + BADGE_W / 2 + r.k * (BADGE_W + 4),
      y: at.y + NODE_H / 2 + 2 + BADGE_H / 2,
      label: badgeLabel(b, isOpen),
      open: isOpen,
    });
    r.k++;
    if (isOpen) {
      const c = clusterOf(bodies, i, at.x - NODE_W / 2, r.nextY);
      clusters.push(c);
      clusterOfBody.set(i, c);
      r.nextY = c.y + c.h + PAD;
    }
  }
  return { badges, clusters };
}

/** The body whose badge contains the world point (wx, wy), or -1 (the last drawn wins). */
export function hitBadge(scene: BodyScene, wx: number, wy: number): number {
  for (let j = scene.badges.length - 1; j >= 0; j--) {
    const g = scene.badges[j];
    if (Math.abs(wx - g.x) <= BADGE_W / 2 && Math.abs(wy - g.y) <= BADGE_H / 2) return g.body;
  }
  return -1;
}
