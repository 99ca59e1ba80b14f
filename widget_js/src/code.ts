// The code view: the generated CUDA C of the selected kernel in a bottom-panel tab, wide
// enough to read, monospace without wrapping, highlighted by a small tokenizer of our own
// (the generated code is a small subset of C: no bundled highlighter is needed), with a copy
// button. The view is kept across re-renders: its element stays, and it is redrawn only when
// the source changes, so the scroll position survives every other update.

import { h } from "./dom";

export type TokenKind = "keyword" | "type" | "qualifier" | "number" | "string" | "comment" | "preproc" | "ident" | "punct" | "space";

export interface Token {
  kind: TokenKind;
  text: string;
}

const KEYWORDS = new Set(
  "if else for while do return break continue switch case default goto sizeof typedef struct union enum extern static inline const volatile restrict auto register".split(
    " ",
  ),
);
const TYPES = new Set(
  "void bool char short int long float double signed unsigned size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t half __half float2 float4 int2 int4 dim3".split(
    " ",
  ),
);
// CUDA's qualifiers and built-in variables.
const QUALIFIERS = new Set(
  "__global__ __device__ __host__ __shared__ __constant__ __restrict__ __forceinline__ __launch_bounds__ threadIdx blockIdx blockDim gridDim __syncthreads".split(
    " ",
  ),
);

// One regular expression, alternatives in priority order; every character is matched by one.
const TOKEN =
  /(\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|(^[ \t]*#[^\n]*)|("(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?)|((?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fFuUlL]*)|([A-Za-z_]\w*)|(\s+)|(.)/gm;

/** Splits C/CUDA source into tokens; concatenating their texts gives the source back. */
export function tokenize(src: string): Token[] {
  const out: Token[] = [];
  TOKEN.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = TOKEN.exec(src)) !== null) {
    if (m[0] === "") {
      TOKEN.lastIndex++;
      continue;
    }
    let kind: TokenKind;
    if (m[1] !== undefined) kind = "comment";
    else if (m[2] !== undefined) kind = "preproc";
    else if (m[3] !== undefined) kind = "string";
    else if (m[4] !== undefined) kind = "number";
    else if (m[5] !== undefined)
      kind = KEYWORDS.has(m[5]) ? "keyword" : TYPES.has(m[5]) ? "type" : QUALIFIERS.has(m[5]) ? "qualifier" : "ident";
    else if (m[6] !== undefined) kind = "space";
    else kind = "punct";
    const last = out[out.length - 1];
    // Merge neighbours of the same plain kind: fewer DOM nodes.
    if (last && last.kind === kind && (kind === "space" || kind === "punct" || kind === "ident")) last.text += m[0];
    else out.push({ kind, text: m[0] });
  }
  return out;
}

/** The source as highlighted lines: one element per line (numbered by CSS), tokens as spans
 *  (through textContent, never innerHTML). */
export function highlighted(src: string): HTMLElement {
  const code = h("code", { class: "ow-code-lines" });
  let line = h("span", { class: "ow-code-line" });
  const push = (kind: TokenKind, text: string) => {
    if (!text) return;
    if (kind === "space" || kind === "ident" || kind === "punct") line.append(text);
    else line.append(h("span", { class: `ow-tok-${kind}`, text }));
  };
  for (const t of tokenize(src)) {
    const parts = t.text.split("\n");
    parts.forEach((p, i) => {
      if (i > 0) {
        code.append(line);
        line = h("span", { class: "ow-code-line" });
      }
      push(t.kind, p);
    });
  }
  code.append(line);
  return code;
}

/** The bottom panel's Code tab. */
export class CodeView {
  readonly root: HTMLDivElement;
  private title: HTMLSpanElement;
  private body: HTMLPreElement;
  private copyBtn: HTMLButtonElement;
  private source = "";
  private key = "";

  constructor() {
    this.title = h("span", { class: "ow-code-title" });
    this.copyBtn = h("button", {
      class: "ow-btn ow-small ow-code-copy",
      text: "Copy",
      title: "copy the source to the clipboard",
      onclick: () => void this.copy(),
    });
    this.body = h("pre", { class: "ow-code" });
    this.root = h(
      "div",
      { class: "ow-chart ow-code-view", "data-lines": 0 },
      h("div", { class: "ow-code-head" }, this.title, this.copyBtn),
      this.body,
    );
  }

  /** Shows `source` (the node `name`'s CUDA C), or `empty` when there is none. */
  set(name: string, source: string | null | undefined, empty: string): void {
    const key = `${name}\u0000${source ?? ""}\u0000${empty}`;
    if (key === this.key) return; // unchanged: keep the DOM and its scroll position
    this.key = key;
    this.source = source ?? "";
    this.body.replaceChildren();
    if (source) {
      this.title.textContent = `${name} · generated CUDA C · ${source.split("\n").length} lines`;
      this.body.append(highlighted(source));
      this.body.scrollTop = 0;
      this.body.scrollLeft = 0;
    } else {
      this.title.textContent = "";
      this.body.append(h("span", { class: "ow-hint", text: empty }));
    }
    this.copyBtn.disabled = !source;
    this.root.dataset.lines = String(source ? source.split("\n").length : 0);
    this.root.dataset.node = source ? name : "";
  }

  private async copy(): Promise<void> {
    const text = this.source;
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch {
      // No clipboard permission (an http page, a headless browser): select the text instead,
      // so Ctrl+C copies it.
      const sel = window.getSelection();
      if (sel) {
        const r = document.createRange();
        r.selectNodeContents(this.body);
        sel.removeAllRanges();
        sel.addRange(r);
      }
    }
    this.copyBtn.textContent = ok ? "Copied ✓" : "Selected: press Ctrl+C";
    this.root.dataset.copied = ok ? "clipboard" : "selection";
    setTimeout(() => (this.copyBtn.textContent = "Copy"), 1500);
  }
}
