import { describe, expect, it } from "vitest";
import { NO_KERNEL, SavedWidgetModel, anywidgetSource, decodeBuffer, savedStageChanges, withBuffers, type SavedModel } from "./embed";

const b64 = (bytes: number[]) => btoa(String.fromCharCode(...bytes));

describe("saved widget state", () => {
  it("decodes base64 and hex buffers to the same bytes", () => {
    const bytes = [0, 1, 127, 128, 255, 42];
    const hex = bytes.map((x) => x.toString(16).padStart(2, "0")).join("");
    for (const b of [
      decodeBuffer({ path: ["x"], data: b64(bytes), encoding: "base64" }),
      decodeBuffer({ path: ["x"], data: hex, encoding: "hex" }),
    ]) {
      expect(Array.from(new Uint8Array(b.buffer))).toEqual(bytes);
    }
  });

  it("puts binary traits back at their paths, nested ones too, without touching the saved state", () => {
    const m: SavedModel = {
      model_name: "AnyModel",
      model_module: "anywidget",
      state: { dag: null, nested: { list: [0, null] }, view: { a: 1 } },
      buffers: [
        { path: ["dag"], data: b64([1, 2, 3]), encoding: "base64" },
        { path: ["nested", "list", 1], data: b64([9]), encoding: "base64" },
      ],
    };
    const s = withBuffers(m);
    expect(s.dag).toBeInstanceOf(DataView);
    expect((s.dag as DataView).byteLength).toBe(3);
    expect(((s.nested as { list: unknown[] }).list[1] as DataView).getUint8(0)).toBe(9);
    expect(m.state.dag).toBeNull();
    expect(s.view).toEqual({ a: 1 });
  });

  it("finds an anywidget's module and CSS, and nothing for other widgets", () => {
    expect(
      anywidgetSource({ model_name: "AnyModel", model_module: "anywidget", state: { _esm: "export default {}", _css: ".a{}" } }),
    ).toEqual({ esm: "export default {}", css: ".a{}" });
    expect(anywidgetSource({ model_name: "IntSliderModel", model_module: "@jupyter-widgets/controls", state: { value: 3 } })).toBeNull();
    expect(anywidgetSource(undefined)).toBeNull();
  });
});

describe("SavedWidgetModel", () => {
  it("fires change events for changed values only, and stops after off", () => {
    const m = new SavedWidgetModel({ color_mode: "kind" });
    const seen: string[] = [];
    const cb = () => seen.push(String(m.get("color_mode")));
    m.on("change:color_mode", cb);
    m.set("color_mode", "kind");
    m.set("color_mode", "stream");
    m.off("change:color_mode", cb);
    m.set("color_mode", "slack");
    expect(seen).toEqual(["stream"]);
    expect(m.get("color_mode")).toBe("slack");
  });

  it("answers every request with an error saying there is no kernel", async () => {
    const m = new SavedWidgetModel({});
    const replies: unknown[] = [];
    m.on("msg:custom", (msg) => replies.push(msg));
    m.send({ type: "select", node: 3, request_id: "r7" });
    m.send({ no: "id" });
    expect(replies).toEqual([]); // asynchronously, like a kernel
    await new Promise((r) => setTimeout(r, 5));
    expect(replies).toEqual([{ type: "error", request_id: "r7", message: NO_KERNEL, kind: "NoKernel" }]);
    expect(m.sent.length).toBe(2);
  });
});

describe("saved stages (the pass slider without a kernel)", () => {
  const dags = [new DataView(new ArrayBuffer(1)), new DataView(new ArrayBuffer(2))];
  const values = () => ({
    pass_index: 0,
    selection: 4,
    dag: dags[0],
    view: {
      version: 1,
      passes: { available: true },
      dag: { title: "input graph" },
      memory: { available: false },
      streams: { available: false },
    },
    saved_stages: {
      stages: [
        { dag: { title: "input graph" }, memory: 0, streams: 0, summary: [["a", "1"]], editable: true },
        { dag: { title: "after memory" }, memory: 1, streams: 2, summary: [["a", "2"]], editable: false },
      ],
      dags,
      sections: [{ available: false }, { available: true, buffers: [] }, { available: true, lanes: [] }],
    },
  });

  it("gives the stage's DAG, sections and summary, keeps the rest of the view, clears the selection", () => {
    const c = savedStageChanges(values(), 1)!;
    expect(c.pass_index).toBe(1);
    expect(c.dag).toBe(dags[1]);
    expect(c.selection).toBe(-1);
    const view = c.view as Record<string, unknown>;
    expect(view.memory).toEqual({ available: true, buffers: [] });
    expect(view.streams).toEqual({ available: true, lanes: [] });
    expect(view.summary).toEqual([["a", "2"]]);
    expect(view.passes).toEqual({ available: true });
    expect(view.editable).toBe(false);
  });

  it("has nothing for a stage not saved, or without saved stages", () => {
    expect(savedStageChanges(values(), 2)).toBeNull();
    expect(savedStageChanges(values(), 0.5)).toBeNull();
    expect(savedStageChanges({ view: {} }, 0)).toBeNull();
  });

  it("switches on set_pass with one batch of changes, then replies ok", async () => {
    const m = new SavedWidgetModel(values());
    const events: string[] = [];
    for (const k of ["view", "dag", "pass_index"]) m.on(`change:${k}`, () => events.push(`${k}@${m.get("pass_index")}`));
    const replies: { type: string }[] = [];
    m.on("msg:custom", (msg) => replies.push(msg as { type: string }));
    m.send({ type: "set_pass", index: 1, request_id: "r1" });
    m.send({ type: "set_pass", index: 9, request_id: "r2" });
    await new Promise((r) => setTimeout(r, 5));
    // every event sees the new pass index: the values were all set before the first event
    expect(events.sort()).toEqual(["dag@1", "pass_index@1", "view@1"]);
    expect(replies.map((r) => r.type)).toEqual(["ok", "error"]);
  });
});
