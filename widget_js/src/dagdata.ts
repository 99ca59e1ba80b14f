// Decoding of the DAG's binary columns (packed by oxiwork/widget/viewmodel.py:pack_dag).
//
// Layout, all little-endian: an Int32 header [MAGIC, VERSION, n, m, nInt, nFloat, 0, 0],
// then nInt Int32 columns of length n (INT_COLUMNS order), the edges as two Int32 columns
// of length m (source and target *positions*), then nFloat Float32 columns of length n.
// Columnar typed arrays keep 10k-node graphs cheap to ship and to draw.

export const MAGIC = 0x4f584457; // "OXDW"
export const VERSION = 1;
export const INT_COLUMNS = ["id", "level", "kind", "stream", "critical", "group", "idom", "ipdom", "state"] as const;
export const FLOAT_COLUMNS = ["slack", "cost", "asap"] as const;

export type IntColumn = (typeof INT_COLUMNS)[number];
export type FloatColumn = (typeof FLOAT_COLUMNS)[number];

const DEFAULTS: Record<IntColumn, number> = {
  id: 0,
  level: 0,
  kind: 0,
  stream: -1,
  critical: 0,
  group: -1,
  idom: -1,
  ipdom: -1,
  state: 0,
};

/** Node state in a pass view: unchanged, created by the pass, removed by it (a ghost). */
export const STATE_NORMAL = 0;
export const STATE_CREATED = 1;
export const STATE_REMOVED = 2;

export interface DagArrays {
  n: number;
  m: number;
  int: Record<IntColumn, Int32Array>;
  float: Record<FloatColumn, Float32Array>;
  src: Int32Array;
  dst: Int32Array;
}

/** Views a DataView / ArrayBuffer / typed array as bytes without copying. */
export function asBytes(raw: unknown): Uint8Array | null {
  if (raw instanceof Uint8Array) return raw;
  if (raw instanceof ArrayBuffer) return new Uint8Array(raw);
  if (ArrayBuffer.isView(raw)) return new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
  return null;
}

export function emptyDag(): DagArrays {
  const int = {} as Record<IntColumn, Int32Array>;
  for (const c of INT_COLUMNS) int[c] = new Int32Array(0);
  const float = {} as Record<FloatColumn, Float32Array>;
  for (const c of FLOAT_COLUMNS) float[c] = new Float32Array(0);
  return { n: 0, m: 0, int, float, src: new Int32Array(0), dst: new Int32Array(0) };
}

/** Decodes the packed columns; returns an empty DAG for an empty or malformed payload. */
export function decodeDag(raw: unknown): DagArrays {
  const bytes = asBytes(raw);
  if (!bytes || bytes.byteLength < 32) return emptyDag();
  // Copy once into an aligned buffer: typed-array views need 4-byte alignment.
  const buf = bytes.slice().buffer;
  const head = new Int32Array(buf, 0, 8);
  if (head[0] !== MAGIC || head[1] !== VERSION) return emptyDag();
  const [n, m, nInt, nFloat] = [head[2], head[3], head[4], head[5]];
  const expected = 32 + 4 * (nInt * n + 2 * m + nFloat * n);
  if (nInt !== INT_COLUMNS.length || nFloat !== FLOAT_COLUMNS.length || buf.byteLength < expected) {
    return emptyDag();
  }
  let off = 32;
  const int = {} as Record<IntColumn, Int32Array>;
  for (const c of INT_COLUMNS) {
    int[c] = new Int32Array(buf, off, n);
    off += 4 * n;
  }
  const src = new Int32Array(buf, off, m);
  off += 4 * m;
  const dst = new Int32Array(buf, off, m);
  off += 4 * m;
  const float = {} as Record<FloatColumn, Float32Array>;
  for (const c of FLOAT_COLUMNS) {
    float[c] = new Float32Array(buf, off, n);
    off += 4 * n;
  }
  return { n, m, int, float, src, dst };
}

/** Encodes columns in the same format (used by tests and the benchmark). */
export function encodeDag(
  n: number,
  cols: Partial<Record<IntColumn, ArrayLike<number>>>,
  src: ArrayLike<number>,
  dst: ArrayLike<number>,
  fcols: Partial<Record<FloatColumn, ArrayLike<number>>> = {},
): Uint8Array {
  const m = src.length;
  const total = 32 + 4 * (INT_COLUMNS.length * n + 2 * m + FLOAT_COLUMNS.length * n);
  const buf = new ArrayBuffer(total);
  new Int32Array(buf, 0, 8).set([MAGIC, VERSION, n, m, INT_COLUMNS.length, FLOAT_COLUMNS.length]);
  let off = 32;
  for (const c of INT_COLUMNS) {
    const col = new Int32Array(buf, off, n);
    const v = cols[c];
    if (v) col.set(v);
    else if (c === "id") for (let i = 0; i < n; i++) col[i] = i;
    else col.fill(DEFAULTS[c]);
    off += 4 * n;
  }
  new Int32Array(buf, off, m).set(src);
  off += 4 * m;
  new Int32Array(buf, off, m).set(dst);
  off += 4 * m;
  for (const c of FLOAT_COLUMNS) {
    const v = fcols[c];
    if (v) new Float32Array(buf, off, n).set(v);
    off += 4 * n;
  }
  return new Uint8Array(buf);
}
