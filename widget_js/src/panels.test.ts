import { describe, expect, it } from "vitest";
import { eagerRow, ints, parseParams, sci, stepLabel } from "./panels";

describe("parseParams", () => {
  it("parses numbers and keeps strings", () => {
    expect(parseParams("alpha=2.0, mode = fast,  n=3")).toEqual({ alpha: 2, mode: "fast", n: 3 });
  });
  it("ignores empty parts and keeps keys without values", () => {
    expect(parseParams(" , flag")).toEqual({ flag: "" });
    expect(parseParams("")).toEqual({});
  });
});

describe("ints (grid and block fields)", () => {
  it("parses numbers in any separator", () => {
    expect(ints("4, 2")).toEqual([4, 2]);
    expect(ints("4x4x1")).toEqual([4, 4, 1]);
  });
  it("sends what is not a number as typed, so the refusal names it (not null)", () => {
    expect(ints("abc")).toEqual(["abc"]);
    expect(JSON.stringify(ints("2, abc"))).toBe('[2,"abc"]');
  });
});

describe("stepLabel", () => {
  it("numbers steps as plan.steps does, from 0", () => {
    expect(stepLabel(0)).toBe("step 0");
  });
});

describe("eagerRow (an output against PyTorch eager)", () => {
  const out = { name: "y", shape: [2], dtype: "float32", rtol: 1.3e-6, atol: 1e-5, reason: "" };
  it("marks a mismatch as a failure, with its difference and tolerance", () => {
    const r = eagerRow({ ...out, max_abs_diff: 0.5, allclose: false });
    expect([r.mark, r.cls]).toEqual(["✗", "ow-bad"]);
    expect(r.parts).toEqual(["max |Δ| 5.00e-1", "rtol 1.3e-6", "atol 1e-5"]);
  });
  it("says why a difference has no size", () => {
    const r = eagerRow({ ...out, max_abs_diff: null, allclose: false, reason: "shape (2,), eager (3,)" });
    expect([r.mark, r.parts[0]]).toEqual(["✗", "shape (2,), eager (3,)"]);
  });
  it("marks a match", () => {
    expect(eagerRow({ ...out, max_abs_diff: 0, allclose: true }).mark).toBe("✓");
  });
  it("writes tolerances as Python does", () => {
    expect([sci(1.3e-6), sci(0), sci(0.01)]).toEqual(["1.3e-6", "0", "0.01"]);
  });
});
