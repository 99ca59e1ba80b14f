import { describe, expect, it } from "vitest";
import { decodeDag, encodeDag, FLOAT_COLUMNS, INT_COLUMNS } from "./dagdata";

describe("dag columns", () => {
  it("round-trips through the binary format", () => {
    const n = 5;
    const ints = Object.fromEntries(INT_COLUMNS.map((c, k) => [c, Array.from({ length: n }, (_, i) => i * 10 + k - 3)]));
    const floats = Object.fromEntries(FLOAT_COLUMNS.map((c, k) => [c, Array.from({ length: n }, (_, i) => i + k / 4)]));
    const blob = encodeDag(n, ints, [0, 1, 2], [1, 2, 4], floats);
    // Through a DataView at an odd offset, as a comm buffer may arrive.
    const padded = new Uint8Array(blob.byteLength + 3);
    padded.set(blob, 3);
    const d = decodeDag(new DataView(padded.buffer, 3, blob.byteLength));
    expect(d.n).toBe(n);
    for (const c of INT_COLUMNS) expect(Array.from(d.int[c])).toEqual(ints[c]);
    for (const c of FLOAT_COLUMNS) expect(Array.from(d.float[c])).toEqual(floats[c]);
    expect(Array.from(d.src)).toEqual([0, 1, 2]);
    expect(Array.from(d.dst)).toEqual([1, 2, 4]);
  });
  it("defaults missing columns", () => {
    const d = decodeDag(encodeDag(2, {}, [], []));
    expect(Array.from(d.int.id)).toEqual([0, 1]);
    expect(Array.from(d.int.stream)).toEqual([-1, -1]);
    expect(Array.from(d.int.critical)).toEqual([0, 0]);
  });
  it.each([null, undefined, new Uint8Array(10), new Uint8Array(64)])("rejects malformed input %#", (raw) => {
    expect(decodeDag(raw).n).toBe(0);
  });
  it("rejects a truncated payload", () => {
    const blob = encodeDag(10, {}, [0], [1]);
    expect(decodeDag(blob.slice(0, blob.byteLength - 4)).n).toBe(0);
  });
});
