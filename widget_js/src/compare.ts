// Pin a plan and compare: the pinned plan's figures beside the current plan's, with the
// difference, and the kernels only one of them has (e.g. 1 vs 4 streams, fusion on vs off).

import { formatBytes, formatTime } from "./charts";
import { h } from "./dom";
import type { Send } from "./messages";
import type { PlanFigures } from "./types";

type Fmt = (v: number) => string;

const count: Fmt = (v) => String(v);
const ROWS: [keyof PlanFigures, string, Fmt][] = [
  ["kernels", "kernels", count],
  ["steps", "steps", count],
  ["streams", "streams", count],
  ["events", "events", count],
  ["arena_bytes", "arena", formatBytes],
  ["lower_bound_bytes", "lower bound", formatBytes],
  ["graph_launch", "graph launch", formatTime],
  ["stream_launches", "stream launches", formatTime],
  ["critical_path", "critical path", formatTime],
];

/** "4 streams, fusion on (≤ 16)": a plan's options in words. */
export function optionsText(f: PlanFigures): string {
  const o = f.options;
  return `${o.max_streams} stream${o.max_streams === 1 ? "" : "s"}, fusion ${o.fusion ? `on (≤ ${o.max_group_size})` : "off"}`;
}

/** One row per figure: [name, pinned, current, difference (current − pinned, with %)]. */
export function compareRows(pinned: PlanFigures, current: PlanFigures): [string, string, string, string][] {
  return ROWS.map(([key, label, fmt]) => {
    const a = pinned[key] as number | null;
    const b = current[key] as number | null;
    if (a === null || b === null || a === undefined || b === undefined)
      return [label, a === null || a === undefined ? "—" : fmt(a), b === null || b === undefined ? "—" : fmt(b), ""];
    const d = b - a;
    const pct = a !== 0 ? ` (${d > 0 ? "+" : ""}${((100 * d) / a).toFixed(0)}%)` : "";
    const delta = d === 0 ? "=" : `${d > 0 ? "+" : "−"}${fmt(Math.abs(d))}${pct}`;
    return [label, fmt(a), fmt(b), delta];
  });
}

/** Kernels (by name) only in the pinned plan, and only in the current one. */
export function kernelDiff(pinned: PlanFigures, current: PlanFigures): { onlyPinned: string[]; onlyCurrent: string[] } {
  const a = new Set(pinned.kernel_names);
  const b = new Set(current.kernel_names);
  return { onlyPinned: pinned.kernel_names.filter((k) => !b.has(k)), onlyCurrent: current.kernel_names.filter((k) => !a.has(k)) };
}

export function comparePanel(pinned: PlanFigures | null, current: PlanFigures | null, send: Send): HTMLElement {
  const pinBtn = h("button", {
    class: "ow-btn ow-primary ow-pin",
    text: pinned ? "Pin the current plan" : "Pin this plan",
    disabled: !current,
    onclick: () => send("pin", {}),
  });
  const tools = h(
    "div",
    { class: "ow-compare-tools" },
    pinBtn,
    pinned ? h("button", { class: "ow-btn ow-unpin", text: "Unpin", onclick: () => send("pin", { clear: true }) }) : null,
  );
  if (!pinned || !current) {
    return h(
      "div",
      { class: "ow-panel ow-compare", "data-pinned": "0" },
      tools,
      h("p", {
        class: "ow-hint",
        text: current
          ? "Pin this plan, then change streams or fusion in the pipeline bar: the two plans are compared here."
          : "Waiting for the passes: a plan can be pinned once it exists.",
      }),
    );
  }
  const tbl = h("table", { class: "ow-table ow-compare-table" });
  tbl.append(
    h(
      "tr",
      {},
      ...["", `pinned: ${optionsText(pinned)}`, `current: ${optionsText(current)}`, "difference"].map((t) => h("th", { text: t })),
    ),
  );
  for (const [label, a, b, d] of compareRows(pinned, current)) {
    tbl.append(
      h(
        "tr",
        { "data-figure": label },
        h("td", { text: label }),
        h("td", { text: a }),
        h("td", { text: b }),
        h("td", { class: d.startsWith("+") ? "ow-minus" : d.startsWith("−") ? "ow-plus" : "", text: d }),
      ),
    );
  }
  const diff = kernelDiff(pinned, current);
  const list = (title: string, names: string[], cls: string) =>
    names.length
      ? h(
          "div",
          { class: `ow-kdiff ${cls}` },
          h("h4", { text: `${title} (${names.length})` }),
          h("div", { class: "ow-kdiff-names", text: names.slice(0, 60).join(", ") + (names.length > 60 ? ", …" : "") }),
        )
      : null;
  return h(
    "div",
    { class: "ow-panel ow-compare", "data-pinned": "1" },
    tools,
    tbl,
    list("kernels only in the pinned plan", diff.onlyPinned, "ow-only-pinned"),
    list("kernels only in the current plan", diff.onlyCurrent, "ow-only-current"),
  );
}
