// The offline host of a notebook saved as HTML (oxiwork.export.notebook inlines it).
//
// A notebook executed with `store_widget_state` saves every widget's model state in its
// metadata; for an anywidget (the Workbench) that state holds the whole ES module (`_esm`)
// and its CSS (`_css`). nbconvert's own page fetches @jupyter-widgets/html-manager and then
// anywidget from a CDN to draw it; this host needs neither: it reads the saved state, gives
// each widget view a small model over its saved values (binary traits as DataViews, as a
// live kernel's would be), imports the module from a Blob and calls its `render`. Nothing
// leaves the page. There is no kernel behind a saved page: the pass slider switches between
// the stages the workbench saved (Workbench.save_stages), and any other request the widget
// sends (select a node, step the simulator) is answered at once with an error saying so,
// while everything drawn from the saved state (the DAG, pan and zoom, search, the charts)
// works as in the notebook.

import type { SavedStages } from "./messages";

export const STATE_MIME = "application/vnd.jupyter.widget-state+json";
export const VIEW_MIME = "application/vnd.jupyter.widget-view+json";

/** A binary trait as nbconvert saves it: where it goes in the state, and its bytes. */
export interface SavedBuffer {
  path: (string | number)[];
  data: string;
  encoding: "base64" | "hex";
}

/** One widget model of a saved notebook's widget state. */
export interface SavedModel {
  model_name: string;
  model_module: string;
  model_module_version?: string;
  state: Record<string, unknown>;
  buffers?: SavedBuffer[];
}

/** The widget state in a saved notebook's metadata (ipywidgets' schema, version 2). */
export interface SavedState {
  version_major: number;
  version_minor: number;
  state: Record<string, SavedModel>;
}

/** The reply to every request of a saved page (messages.ts: Reply). */
export const NO_KERNEL =
  "this is a saved notebook: there is no kernel to run the request; open the notebook in Jupyter and run it to interact";

/** Bytes of a saved buffer. */
export function decodeBuffer(b: SavedBuffer): DataView {
  let bytes: Uint8Array;
  if (b.encoding === "hex") {
    bytes = new Uint8Array(b.data.length / 2);
    for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(b.data.substr(2 * i, 2), 16);
  } else {
    const s = atob(b.data);
    bytes = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
  }
  return new DataView(bytes.buffer);
}

/** The model's values with its binary traits put back where they were taken from (a copy). */
export function withBuffers(m: SavedModel): Record<string, unknown> {
  const state: Record<string, unknown> = structuredClone(m.state);
  for (const b of m.buffers ?? []) {
    if (!b.path.length) continue;
    let at = state as Record<string | number, unknown>;
    for (const key of b.path.slice(0, -1)) at = at[key] as Record<string | number, unknown>;
    at[b.path[b.path.length - 1]] = decodeBuffer(b);
  }
  return state;
}

/**
 * The trait changes the kernel would make for `set_pass` to stage `index`, from the saved
 * stages; null when the state holds no such stage (a big graph saves only the one shown).
 */
export function savedStageChanges(values: Record<string, unknown>, index: number): Record<string, unknown> | null {
  const saved = values.saved_stages as Partial<SavedStages> | undefined;
  const st = saved?.stages?.[index];
  const dag = saved?.dags?.[index];
  if (!saved || !st || !dag || !Number.isInteger(index)) return null;
  const sections = saved.sections ?? [];
  const view = { ...(values.view as Record<string, unknown>), ...st, memory: sections[st.memory], streams: sections[st.streams] };
  // The selected node may not exist at this stage; a saved page cannot ask for details anyway.
  return { pass_index: index, view, dag, selection: -1, details: {} };
}

type Handler = (...args: unknown[]) => void;

/** The model interface anywidget gives a module's `render`, over saved values and no kernel. */
export class SavedWidgetModel {
  private handlers = new Map<string, Handler[]>();
  /** Requests the widget sent (a saved page answers each with NO_KERNEL). */
  readonly sent: unknown[] = [];

  constructor(private values: Record<string, unknown>) {}

  get(key: string): unknown {
    return this.values[key];
  }

  set(key: string, value: unknown): void {
    this.setMany({ [key]: value });
  }

  /** Like one sync message from a kernel: every value first, then the change events. */
  setMany(changes: Record<string, unknown>): void {
    const changed = Object.keys(changes).filter((k) => this.values[k] !== changes[k]);
    for (const k of changed) this.values[k] = changes[k];
    for (const k of changed) this.emit(`change:${k}`);
    if (changed.length) this.emit("change");
  }

  save_changes(): void {}

  on(event: string, cb: Handler): void {
    const list = this.handlers.get(event) ?? [];
    list.push(cb);
    this.handlers.set(event, list);
  }

  off(event?: string | null, cb?: Handler | null): void {
    if (!event) this.handlers.clear();
    else if (!cb) this.handlers.delete(event);
    else
      this.handlers.set(
        event,
        (this.handlers.get(event) ?? []).filter((f) => f !== cb),
      );
  }

  /**
   * No kernel: the pass slider switches between the saved stages as the kernel would;
   * any other request (or a stage not saved) gets an error reply. Replies come on the next
   * task, like a kernel's.
   */
  send(content: unknown): void {
    this.sent.push(content);
    const msg = content as { request_id?: unknown; type?: unknown; index?: unknown } | null;
    const rid = msg?.request_id;
    if (typeof rid !== "string") return;
    const changes = msg?.type === "set_pass" ? savedStageChanges(this.values, Number(msg.index)) : null;
    setTimeout(() => {
      if (changes) {
        this.setMany(changes);
        const title = (changes.view as { dag?: { title?: string } }).dag?.title ?? "";
        this.emit("msg:custom", { type: "ok", request_id: rid, message: `showing ${title} (saved with the notebook)` }, []);
      } else this.emit("msg:custom", { type: "error", request_id: rid, message: NO_KERNEL, kind: "NoKernel" }, []);
    }, 0);
  }

  private emit(event: string, ...args: unknown[]): void {
    for (const f of [...(this.handlers.get(event) ?? [])]) f(...args);
  }
}

/** A saved anywidget's module and CSS, or null for a model that is not an anywidget. */
export function anywidgetSource(m: SavedModel | undefined): { esm: string; css: string } | null {
  if (!m || typeof m.state._esm !== "string") return null;
  return { esm: m.state._esm, css: typeof m.state._css === "string" ? m.state._css : "" };
}

interface WidgetModule {
  render?: (props: { model: SavedWidgetModel; el: HTMLElement }) => unknown;
  initialize?: (props: { model: SavedWidgetModel }) => unknown;
}

/** An anywidget module's widget: `export default { render }`, a function returning it, or named exports. */
async function widgetOf(mod: Record<string, unknown>): Promise<WidgetModule> {
  const def = mod.default ?? mod;
  return (typeof def === "function" ? await (def as () => unknown)() : def) as WidgetModule;
}

/**
 * Draws every widget view of `doc` from its saved state; returns how many it drew. A view
 * of a widget that is not an anywidget (its code is not in the state) gets a note instead.
 */
export async function renderSaved(doc: Document = document): Promise<number> {
  const stateEl = doc.querySelector(`script[type="${STATE_MIME}"]`);
  if (!stateEl) return 0;
  const saved = JSON.parse(stateEl.textContent || "{}") as SavedState;
  const modules = new Map<string, Promise<WidgetModule>>();
  const styled = new Set<string>();
  let drawn = 0;
  for (const viewEl of Array.from(doc.querySelectorAll(`script[type="${VIEW_MIME}"]`))) {
    const { model_id: id } = JSON.parse(viewEl.textContent || "{}") as { model_id?: string };
    const m = id ? saved.state?.[id] : undefined;
    const el = doc.createElement("div");
    el.className = "widget-subarea";
    viewEl.after(el);
    const src = anywidgetSource(m);
    if (!src) {
      el.textContent = `(${m?.model_name ?? "widget"} ${id ?? ""}: not saved with its code, so it is not shown offline)`;
      continue;
    }
    if (src.css && !styled.has(src.css)) {
      styled.add(src.css);
      doc.head.append(Object.assign(doc.createElement("style"), { textContent: src.css }));
    }
    if (!modules.has(src.esm)) {
      const url = URL.createObjectURL(new Blob([src.esm], { type: "text/javascript" }));
      modules.set(src.esm, import(/* @vite-ignore */ url).then(widgetOf));
    }
    try {
      const widget = await modules.get(src.esm)!;
      const model = new SavedWidgetModel(withBuffers(m!));
      await widget.initialize?.({ model });
      await widget.render?.({ model, el });
      drawn++;
    } catch (e) {
      el.textContent = `(widget ${id} could not be drawn offline: ${e})`;
      console.error(e);
    }
  }
  return drawn;
}

// Run on a saved page once it is parsed (the saved state comes at its end); on any other
// page (a test importing this module) there is no saved state and nothing happens.
if (typeof document !== "undefined") {
  const go = () =>
    renderSaved().then((n) => {
      if (n) document.documentElement.dataset.owSavedWidgets = String(n);
    });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", go);
  else void go();
}
