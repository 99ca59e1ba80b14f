import { describe, expect, it } from "vitest";
import { parseParams } from "./panels";

describe("parseParams", () => {
  it("parses numbers and keeps strings", () => {
    expect(parseParams("alpha=2.0, mode = fast,  n=3")).toEqual({ alpha: 2, mode: "fast", n: 3 });
  });
  it("ignores empty parts and keeps keys without values", () => {
    expect(parseParams(" , flag")).toEqual({ flag: "" });
    expect(parseParams("")).toEqual({});
  });
});
