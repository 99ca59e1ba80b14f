// Layered DAG layout: x from the ASAP level, y from a barycentre ordering inside each layer.
//
// Sugiyama, Tagawa and Toda, "Methods for visual understanding of hierarchical system
// structures", IEEE SMC 11(2), 1981: layer assignment, then crossing reduction by the
// barycentre heuristic (one down sweep and one up sweep here, which is enough to untangle
// the fan-out/fan-in shapes of compute graphs while staying O(m + n log n) for 10k nodes).
//
// Stability across passes and edits: every node sits in its level's column; a node drawn
// before at the same level keeps its position (the caller keeps a cache keyed by node id and
// checks the name), one whose level changed moves to its new column at its old height, a fused
// kernel goes to the height of the nodes it replaces, and any other new node to the barycentre
// of its already placed neighbours, nudged down until it does not sit on another node.

export const DX = 190;
export const DY = 46;
export const NODE_W = 150;
export const NODE_H = 30;

export interface Placed {
  x: number;
  y: number;
  name: string;
}

export interface LayoutInput {
  n: number;
  ids: ArrayLike<number>;
  names: ArrayLike<string>;
  level: ArrayLike<number>;
  src: ArrayLike<number>;
  dst: ArrayLike<number>;
  /** Positions of the original nodes a fused node replaces (by node id), keyed by position. */
  anchors?: ReadonlyMap<number, readonly number[]>;
}

export interface Layout {
  x: Float32Array;
  y: Float32Array;
  /** Bounding box of the node centres. */
  minX: number;
  maxX: number;
  minY: number;
  maxY: number;
  /** How many nodes kept a previous position. */
  reused: number;
}

function adjacency(n: number, a: ArrayLike<number>, b: ArrayLike<number>): number[][] {
  const out: number[][] = Array.from({ length: n }, () => []);
  for (let e = 0; e < a.length; e++) out[a[e]].push(b[e]);
  return out;
}

/** A fresh layered layout (no previous positions). */
export function freshLayout(inp: LayoutInput): Layout {
  const { n, level, src, dst } = inp;
  const pred = adjacency(n, dst, src);
  const succ = adjacency(n, src, dst);
  let maxLevel = 0;
  for (let i = 0; i < n; i++) maxLevel = Math.max(maxLevel, level[i]);
  const layers: number[][] = Array.from({ length: maxLevel + 1 }, () => []);
  for (let i = 0; i < n; i++) layers[level[i]].push(i);
  const rank = new Float64Array(n);
  layers.forEach((layer) => layer.forEach((v, r) => (rank[v] = r)));

  const sweep = (order: number[], neigh: number[][]) => {
    for (const li of order) {
      const layer = layers[li];
      const key = new Map<number, number>();
      for (const v of layer) {
        const ns = neigh[v];
        if (ns.length === 0) key.set(v, rank[v]);
        else {
          let s = 0;
          for (const u of ns) s += rank[u];
          key.set(v, s / ns.length);
        }
      }
      // Ties keep the previous order so the result is deterministic.
      layer.sort((a, b) => key.get(a)! - key.get(b)! || rank[a] - rank[b]);
      layer.forEach((v, r) => (rank[v] = r));
    }
  };
  const down = layers.map((_, i) => i).slice(1);
  sweep(down, pred);
  sweep(
    [...down].reverse().map((i) => i - 1),
    succ,
  );

  const x = new Float32Array(n);
  const y = new Float32Array(n);
  for (const layer of layers) {
    const off = ((layer.length - 1) * DY) / 2;
    layer.forEach((v, r) => {
      x[v] = level[v] * DX;
      y[v] = r * DY - off;
    });
  }
  return withBounds(x, y, 0);
}

function withBounds(x: Float32Array, y: Float32Array, reused: number): Layout {
  let minX = Infinity;
  let maxX = -Infinity;
  let minY = Infinity;
  let maxY = -Infinity;
  for (let i = 0; i < x.length; i++) {
    if (x[i] < minX) minX = x[i];
    if (x[i] > maxX) maxX = x[i];
    if (y[i] < minY) minY = y[i];
    if (y[i] > maxY) maxY = y[i];
  }
  if (x.length === 0) minX = maxX = minY = maxY = 0;
  return { x, y, minX, maxX, minY, maxY, reused };
}

const cell = (x: number, y: number) => `${Math.round(x / DX)},${Math.round(y / DY)}`;

/**
 * Layout that keeps the positions of nodes seen before (`prev`, keyed by node id, reused only
 * when the name matches). Falls back to a fresh layout when fewer than a fifth of the nodes
 * are known, which is the case for a different graph (a fusion pass that merges most kernels
 * still keeps well over a fifth: the copies and the unfused kernels).
 *
 * A node's column is always its level (x = level * DX): an edit or a pass that changes a
 * node's level (an edge added to `download`, a chain fused before it) moves it to its new
 * column at its old height, so edges keep pointing left to right; nodes whose level did not
 * change keep their place exactly.
 */
export function stableLayout(inp: LayoutInput, prev: ReadonlyMap<number, Placed>): Layout {
  const { n, ids, names, level, src, dst, anchors } = inp;
  let known = 0;
  for (let i = 0; i < n; i++) {
    const p = prev.get(ids[i]);
    if (p && p.name === names[i]) known++;
  }
  if (n === 0 || known * 5 < n) return freshLayout(inp);

  const x = new Float32Array(n);
  const y = new Float32Array(n);
  const placed = new Uint8Array(n);
  const occupied = new Set<string>();
  const moved: number[] = [];
  for (let i = 0; i < n; i++) {
    const p = prev.get(ids[i]);
    if (!p || p.name !== names[i]) continue;
    if (p.x === level[i] * DX) {
      x[i] = p.x;
      y[i] = p.y;
      placed[i] = 1;
      occupied.add(cell(p.x, p.y));
    } else moved.push(i);
  }
  // Known nodes whose level changed: the new column, the old height (the nearest free cell).
  for (const i of moved) {
    const px = level[i] * DX;
    let py = Math.round(prev.get(ids[i])!.y / DY) * DY;
    while (occupied.has(cell(px, py))) py += DY;
    occupied.add(cell(px, py));
    x[i] = px;
    y[i] = py;
    placed[i] = 1;
  }
  const pred = adjacency(n, dst, src);
  const succ = adjacency(n, src, dst);
  // Place the new nodes in level order so that their predecessors are placed first.
  const order = Array.from({ length: n }, (_, i) => i).filter((i) => !placed[i]);
  order.sort((a, b) => level[a] - level[b] || a - b);
  for (const i of order) {
    let py = NaN;
    const anc = anchors?.get(i);
    if (anc && anc.length) {
      // A fused node at the height of the nodes it replaces.
      let sy = 0;
      let k = 0;
      for (const id of anc) {
        const p = prev.get(id);
        if (p) {
          sy += p.y;
          k++;
        }
      }
      if (k) py = sy / k;
    }
    if (Number.isNaN(py)) {
      let sy = 0;
      let k = 0;
      for (const u of pred[i].length ? pred[i] : succ[i]) {
        if (placed[u]) {
          sy += y[u];
          k++;
        }
      }
      py = k ? sy / k : 0;
    }
    // Snap to the grid and walk down until the cell is free.
    const px = level[i] * DX;
    py = Math.round(py / DY) * DY;
    while (occupied.has(cell(px, py))) py += DY;
    occupied.add(cell(px, py));
    x[i] = px;
    y[i] = py;
    placed[i] = 1;
  }
  return withBounds(x, y, known);
}

/** Records a layout into the position cache (id -> position and name). */
export function remember(cache: Map<number, Placed>, ids: ArrayLike<number>, names: ArrayLike<string>, lay: Layout): void {
  for (let i = 0; i < ids.length; i++) cache.set(ids[i], { x: lay.x[i], y: lay.y[i], name: names[i] });
}

/** Index of the node whose box contains (wx, wy) in world coordinates, or -1. */
export function hitTest(lay: Layout, wx: number, wy: number, grid?: SpatialGrid): number {
  const cands = grid ? grid.query(wx, wy) : null;
  const hw = NODE_W / 2;
  const hh = NODE_H / 2;
  if (cands) {
    for (const i of cands) {
      if (Math.abs(lay.x[i] - wx) <= hw && Math.abs(lay.y[i] - wy) <= hh) return i;
    }
    return -1;
  }
  for (let i = 0; i < lay.x.length; i++) {
    if (Math.abs(lay.x[i] - wx) <= hw && Math.abs(lay.y[i] - wy) <= hh) return i;
  }
  return -1;
}

/** A uniform bucket grid over node centres, so hover hit tests on 10k nodes stay O(1). */
export class SpatialGrid {
  private buckets = new Map<string, number[]>();
  constructor(lay: Layout) {
    for (let i = 0; i < lay.x.length; i++) {
      const k = this.key(lay.x[i], lay.y[i]);
      const b = this.buckets.get(k);
      if (b) b.push(i);
      else this.buckets.set(k, [i]);
    }
  }
  private key(x: number, y: number): string {
    return `${Math.floor(x / DX)},${Math.floor(y / DY)}`;
  }
  query(x: number, y: number): number[] {
    const out: number[] = [];
    const cx = Math.floor(x / DX);
    const cy = Math.floor(y / DY);
    for (let dx = -1; dx <= 1; dx++) {
      for (let dy = -1; dy <= 1; dy++) {
        const b = this.buckets.get(`${cx + dx},${cy + dy}`);
        if (b) out.push(...b);
      }
    }
    return out;
  }
}

/**
 * Folds a long, thin layered layout into bands so that it fills a w x h screen: level L goes
 * to column L mod C of band L div C, bands stacked downwards with a gap of one row (like a
 * line of text wrapping). `bands` defaults to the count that brings the aspect ratio closest
 * to the screen's; 1 band is the layout itself.
 */
export function foldLayout(L: Layout, level: ArrayLike<number>, w: number, h: number, bands?: number): Layout {
  const n = L.x.length;
  let maxLevel = 0;
  for (let i = 0; i < n; i++) maxLevel = Math.max(maxLevel, level[i]);
  const width = (maxLevel + 1) * DX;
  const bandH = L.maxY - L.minY + 2 * DY;
  const b = Math.max(1, Math.min(maxLevel + 1, bands ?? Math.round(Math.sqrt((width * h) / Math.max(1, w * bandH)))));
  if (b === 1) return L;
  const cols = Math.ceil((maxLevel + 1) / b);
  const x = new Float32Array(n);
  const y = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const band = Math.floor(level[i] / cols);
    // Keep a node's offset inside its column (ghosts of a pass sit at their old level).
    x[i] = L.x[i] - band * cols * DX;
    y[i] = L.y[i] - L.minY + band * bandH;
  }
  return withBounds(x, y, L.reused);
}
