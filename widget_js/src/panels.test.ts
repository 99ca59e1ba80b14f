import { describe, expect, it } from "vitest";
import { ints, parseParams, stepLabel } from "./panels";

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
