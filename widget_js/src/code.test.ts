import { describe, expect, it } from "vitest";
import { tokenize } from "./code";

const SRC = `#include <cuda_fp16.h>
extern "C" __global__ void relu_scale(const float* __restrict__ x, float* y, int n) {
  // one thread per element
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f) * 2.5e-1f; /* scaled */
}`;

describe("tokenize", () => {
  const toks = tokenize(SRC);
  const kinds = (text: string) => toks.filter((t) => t.text === text).map((t) => t.kind);
  it("gives the source back, character for character", () => {
    expect(toks.map((t) => t.text).join("")).toBe(SRC);
  });
  it("classifies C and CUDA words", () => {
    expect(kinds("__global__")).toEqual(["qualifier"]);
    expect(kinds("__restrict__")).toEqual(["qualifier"]);
    expect(kinds("void")).toEqual(["type"]);
    expect(kinds("if")).toEqual(["keyword"]);
    expect(kinds("0.0f")).toEqual(["number"]);
    expect(kinds("2.5e-1f")).toEqual(["number"]);
    expect(kinds('"C"')).toEqual(["string"]);
    expect(kinds("// one thread per element")).toEqual(["comment"]);
    expect(kinds("/* scaled */")).toEqual(["comment"]);
    expect(kinds("#include <cuda_fp16.h>")).toEqual(["preproc"]);
  });
  it("never splits an identifier (no mid-token breaks)", () => {
    for (const t of toks) if (t.kind === "ident") expect(/^[\w\s.,;()\[\]{}<>=+*\-&|!?:]*$/.test(t.text)).toBe(true);
    expect(toks.some((t) => t.kind === "ident" && t.text.includes("relu_scale"))).toBe(true);
  });
  it("survives unterminated strings and comments", () => {
    expect(
      tokenize('x = "abc')
        .map((t) => t.text)
        .join(""),
    ).toBe('x = "abc');
    expect(tokenize("/* open").map((t) => t.kind)).toEqual(["comment"]);
  });
});
