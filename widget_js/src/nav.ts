// Navigation maths for the DAG view, pure so it is unit-tested without a browser: the view
// transform (zoom about a point, centre on a node, bring a node into view), the minimap's
// world <-> minimap mapping, search by name, and the groups a graph folds into (module
// paths of imported models such as `encoder.layer.3.attention.softmax`, repeated blocks
// such as `L0.*`, `L1.*`).

/** The view transform: screen = world * k + (tx, ty). */
export interface View {
  k: number;
  tx: number;
  ty: number;
}

export const MIN_ZOOM = 0.002;
export const MAX_ZOOM = 8;

/** Zoom by `f` keeping the world point under screen (sx, sy) where it is. */
export function zoomAt(v: View, sx: number, sy: number, f: number, min = MIN_ZOOM, max = MAX_ZOOM): View {
  const k = Math.min(max, Math.max(min, v.k * f));
  const wx = (sx - v.tx) / v.k;
  const wy = (sy - v.ty) / v.k;
  return { k, tx: sx - wx * k, ty: sy - wy * k };
}

/** The transform that puts world point (x, y) at the centre of a w x h screen at zoom k. */
export function centerOn(x: number, y: number, k: number, w: number, h: number): View {
  return { k, tx: w / 2 - x * k, ty: h / 2 - y * k };
}

/**
 * "Bring into view": the view unchanged when the box (x ± hw, y ± hh in world units) is
 * inside the screen with `margin` pixels to spare, else centred on it (at a zoom where
 * labels are legible, `minK`, if the current one is smaller).
 */
export function revealed(v: View, x: number, y: number, hw: number, hh: number, w: number, h: number, margin = 24, minK = 0): View {
  const sx0 = (x - hw) * v.k + v.tx;
  const sx1 = (x + hw) * v.k + v.tx;
  const sy0 = (y - hh) * v.k + v.ty;
  const sy1 = (y + hh) * v.k + v.ty;
  if (v.k >= minK && sx0 >= margin && sx1 <= w - margin && sy0 >= margin && sy1 <= h - margin) return v;
  return centerOn(x, y, Math.max(v.k, minK), w, h);
}

/** World bounds of a drawing. */
export interface Bounds {
  minX: number;
  maxX: number;
  minY: number;
  maxY: number;
}

/** Maps world to minimap pixels: m = world * s + (ox, oy), the whole graph fitted and centred. */
export interface MiniMap {
  s: number;
  ox: number;
  oy: number;
}

export function minimapTransform(b: Bounds, mw: number, mh: number, pad = 4): MiniMap {
  const bw = Math.max(1, b.maxX - b.minX);
  const bh = Math.max(1, b.maxY - b.minY);
  const s = Math.min((mw - 2 * pad) / bw, (mh - 2 * pad) / bh);
  return { s, ox: mw / 2 - ((b.minX + b.maxX) / 2) * s, oy: mh / 2 - ((b.minY + b.maxY) / 2) * s };
}

/** The part of the world the main view shows, as a rectangle in minimap pixels. */
export function viewportOnMinimap(v: View, w: number, h: number, m: MiniMap): { x: number; y: number; w: number; h: number } {
  const wx0 = -v.tx / v.k;
  const wy0 = -v.ty / v.k;
  return { x: wx0 * m.s + m.ox, y: wy0 * m.s + m.oy, w: (w / v.k) * m.s, h: (h / v.k) * m.s };
}

/** The world point under minimap pixel (mx, my). */
export function minimapToWorld(m: MiniMap, mx: number, my: number): { x: number; y: number } {
  return { x: (mx - m.ox) / m.s, y: (my - m.oy) / m.s };
}

/**
 * Positions of the nodes whose name matches `query` (case-insensitive), best first: the
 * exact name, then names starting with it, then names with a dotted segment starting with it,
 * then any substring; ties in position order. At most `limit`; `skip` (ghosts) left out.
 */
export function searchNodes(names: ArrayLike<string>, query: string, limit = 50, skip?: (i: number) => boolean): number[] {
  const q = query.trim().toLowerCase();
  if (!q) return [];
  const ranked: [number, number][] = [];
  for (let i = 0; i < names.length; i++) {
    if (skip?.(i)) continue;
    const n = String(names[i]).toLowerCase();
    const at = n.indexOf(q);
    if (at < 0) continue;
    const rank = n === q ? 0 : at === 0 ? 1 : n.split(/[.\/]/).some((seg) => seg.startsWith(q)) ? 2 : 3;
    ranked.push([rank, i]);
  }
  ranked.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  return ranked.slice(0, limit).map(([, i]) => i);
}

/**
 * The group of a node name at `depth` dotted segments ("encoder.layer.3.attention.softmax"
 * at depth 3 is "encoder.layer.3"); "" when the name has no more segments than that (a
 * node is never a group of its own). A segment that is a number is kept with the one before
 * it, so depth 1 of "layer.3.fc" is "layer.3" (the repeated block, not all layers).
 */
export function groupOf(name: string, depth: number): string {
  const parts = name.split(".");
  const segs: string[] = [];
  for (const p of parts) {
    if (segs.length && /^\d+$/.test(p)) segs[segs.length - 1] += `.${p}`;
    else segs.push(p);
  }
  if (segs.length <= depth || depth <= 0) return "";
  return segs.slice(0, depth).join(".");
}

/** Groups with at least `min` members at `depth`: name -> member positions (in order). */
export function groupsAt(names: ArrayLike<string>, depth: number, min = 2, skip?: (i: number) => boolean): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (let i = 0; i < names.length; i++) {
    if (skip?.(i)) continue;
    const g = groupOf(String(names[i]), depth);
    if (!g) continue;
    const m = out.get(g);
    if (m) m.push(i);
    else out.set(g, [i]);
  }
  for (const [k, v] of out) if (v.length < min) out.delete(k);
  return out;
}

/** The deepest depth worth offering: the most dotted segments of a name, capped. */
export function maxGroupDepth(names: ArrayLike<string>, cap = 4): number {
  let d = 0;
  for (let i = 0; i < names.length && d < cap; i++) {
    const segs = groupOfSegments(String(names[i]));
    d = Math.max(d, Math.min(cap, segs - 1));
  }
  return d;
}

function groupOfSegments(name: string): number {
  let n = 0;
  for (const p of name.split(".")) if (!(n && /^\d+$/.test(p))) n++;
  return n;
}

/**
 * The box a collapsed group is drawn as: from its leftmost to its rightmost member, at their
 * mean height (world units, node centres).
 */
export function groupBox(x: ArrayLike<number>, y: ArrayLike<number>, members: readonly number[]): { x0: number; x1: number; y: number } {
  let x0 = Infinity;
  let x1 = -Infinity;
  let sy = 0;
  for (const i of members) {
    x0 = Math.min(x0, x[i]);
    x1 = Math.max(x1, x[i]);
    sy += y[i];
  }
  return { x0, x1, y: members.length ? sy / members.length : 0 };
}
