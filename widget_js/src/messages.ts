// The typed boundary with the kernel: the synced model (one field per traitlet of
// oxiwork/widget/workbench.py's Workbench), the requests the frontend sends (one union member
// per entry of oxiwork/widget/messages.py's SCHEMAS; tests/widget/test_ts_boundary.py checks
// that both sides list the same messages and fields) and their replies, matched to the
// request that asked by its id.

import type { AnyModel } from "@anywidget/types";
import type { ErrorEntry, InspectorSection, NodeDetails, PlanFigures, SimSection, ViewModel } from "./types";
import type { SweepTable } from "./sweep";

/** The Workbench's synced traits, as the frontend sees them. */
export interface WorkbenchModel {
  view: ViewModel | Record<string, never>;
  /** The DAG's packed columns (dagdata.ts); a DataView when it comes from the kernel. */
  dag: DataView | ArrayBuffer | Uint8Array | null;
  selection: number;
  details: NodeDetails | Record<string, never>;
  pass_index: number;
  sim_position: number;
  color_mode: string;
  memory_mode: string;
  stream_mode: string;
  sim_state: Partial<SimSection>;
  errors: ErrorEntry[];
  inspector: InspectorSection | Record<string, never>;
  inspector_values: DataView | ArrayBuffer | Uint8Array | null;
  max_streams: number;
  fusion: boolean;
  max_group_size: number;
  pinned: PlanFigures | Record<string, never>;
  /** Every stage's view for a saved notebook (Workbench.save_stages); read by embed.ts only. */
  saved_stages: SavedStages | Record<string, never>;
  /** The last Workbench.sweep (sweep.ts draws it); {} before one. */
  sweep_table: SweepTable | Record<string, never>;
}

/** Every pass stage's view as Workbench.save_stages syncs it: the stage-dependent part of
 * the view (memory and streams as indices into `sections`, which stages share), and the
 * DAG's packed columns per stage. */
export interface SavedStages {
  stages: (Record<string, unknown> & { memory: number; streams: number; dag: { title?: string } })[];
  dags: DataView[];
  sections: Record<string, unknown>[];
}

export type Model = AnyModel<WorkbenchModel>;

type Id = number | string;
/** A number typed in a form, or the text when it is not one (the kernel names it in its refusal). */
type Typed = number | string;

// One member per line: `type` first, then the fields, `?` for the optional ones.
export type Request =
  | { type: "select"; node: number | null }
  | { type: "set_pass"; index: number }
  | { type: "sim"; action: "step" | "back" | "run" | "reset"; breakpoint?: number | null }
  | { type: "sim_config"; policy?: string; drop_event?: number | null }
  | { type: "inspect"; buffer: number }
  | { type: "pin"; clear?: boolean }
  | { type: "set_memory_mode"; mode: string }
  | { type: "set_stream_mode"; mode: string }
  | { type: "set_options"; max_streams?: number; fusion?: boolean; max_group_size?: Typed }
  | { type: "plan_memory" }
  | { type: "sweep" }
  | { type: "compare_eager" }
  | { type: "load_passes" }
  | { type: "add_buffer"; name: string; size_bytes: number; dtype?: string }
  | {
      type: "add_kernel";
      name: string;
      op?: string | null;
      inputs: Id[];
      outputs: Id[];
      grid: Typed[];
      block: Typed[];
      params?: Record<string, number | string | boolean>;
    }
  | { type: "add_memcpy"; name: string; src?: Id | null; dst?: Id | null; direction: "h2d" | "d2h" | "d2d"; size_bytes?: number }
  | { type: "add_dependency"; src: number; dst: number }
  | { type: "delete"; node?: number; buffer?: number }
  | { type: "rename"; node?: number; buffer?: number; name: string };

export type RequestType = Request["type"];
/** The fields of request `T` (what a caller passes besides the type). */
export type Payload<T extends RequestType> = Omit<Extract<Request, { type: T }>, "type">;
/** Sends a request; returns its id. */
export type Send = <T extends RequestType>(type: T, payload: Payload<T>) => string;

/** The kernel's answer to one request. */
export interface Reply {
  type: "ok" | "error";
  request_id: string;
  message: string;
  kind?: string;
}

/** Whether a custom message from the kernel is a reply to a request. */
export function isReply(msg: unknown): msg is Reply {
  const m = msg as Partial<Reply> | null;
  return !!m && (m.type === "ok" || m.type === "error") && typeof m.request_id === "string";
}

/**
 * Requests in flight: each gets an id (`r1`, `r2`...), is sent with it, and its promise
 * resolves with the reply carrying that id (the kernel answers every request once, in order).
 * A reply nobody waits for (an id from before a re-render) is ignored.
 */
export class Requests {
  private counter = 0;
  private waiting = new Map<string, (r: Reply) => void>();

  constructor(private readonly post: (content: Request & { request_id: string }) => void) {}

  send<T extends RequestType>(type: T, payload: Payload<T>): { id: string; reply: Promise<Reply> } {
    const id = `r${++this.counter}`;
    const reply = new Promise<Reply>((resolve) => this.waiting.set(id, resolve));
    this.post({ ...(payload as object), type, request_id: id } as Request & { request_id: string });
    return { id, reply };
  }

  /** Hands a custom message to the request it answers; returns the reply, or null if it is none. */
  received(msg: unknown): Reply | null {
    if (!isReply(msg)) return null;
    const resolve = this.waiting.get(msg.request_id);
    if (resolve) {
      this.waiting.delete(msg.request_id);
      resolve(msg);
    }
    return msg;
  }

  /** Requests sent and not answered yet. */
  get inFlight(): number {
    return this.waiting.size;
  }
}
