// The view-model: plain JSON computed kernel-side by oxiwork/widget/viewmodel.py.
// The frontend is a pure function of it (plus local UI state such as zoom and tab).
// Keep these types in step with the Python docstrings in viewmodel.py.

/** The pass pipeline's options: the workbench's `max_streams`, `fusion`, `max_group_size` traits. */
export interface PipelineOptions {
  max_streams: number;
  fusion: boolean;
  max_group_size: number;
}

/** A section that the engine may not provide (yet): views show `reason` instead of data. */
export interface Unavailable {
  available: false;
  reason: string;
  /** The kernel can compute this section on request (memory of large graphs). */
  can_plan?: boolean;
  /** The section waits for the pass pipeline, which the frontend asks for ("load_passes"). */
  pending?: boolean;
}

export interface DagMeta {
  available: true;
  /** Node names by position, the same order as the binary columns. */
  names: string[];
  /** Kind names; the binary `kind` column indexes this list. */
  kinds: string[];
  /** Op name per position ("" when none). */
  ops: string[];
  num_nodes: number;
  num_edges: number;
  /** Buffers of the graph on screen (the details panel's summary counts the same). */
  num_buffers?: number;
  num_streams: number;
  num_groups: number;
  /** Whether topo / dominance analyses were available for this graph. */
  has_topo: boolean;
  has_dominance: boolean;
  title: string;
  /** Fused nodes: [position, ids of the original nodes it replaces], for a stable layout. */
  anchors: [number, number[]][];
  /** Which trace entry this DAG shows (0 = the input graph). */
  pass_index: number;
  /** Why a colour mode has no data ("" when it has), e.g. {stream: "no stream pass yet"}. */
  notes: Record<string, string>;
  /** Child graph / conditional bodies (oxiwork.widget.viewmodel.body_sections), drawn by bodies.ts. */
  bodies?: DagBody[];
}

/** One body graph of the node at position `node` (inside body `parent`'s nodes when parent >= 0). */
export interface DagBody {
  node: number;
  parent: number;
  title: string;
  names: string[];
  /** Codes into DagMeta.kinds. */
  kinds: number[];
  edges: [number, number][];
}

export interface PassEntry {
  name: string;
  nodes_before: number;
  nodes_after: number;
  created: number;
  removed: number;
  removed_names: string[];
  seconds: number;
}

export interface PassesSection {
  available: true;
  /** entries[0] is the input graph ("input"); entries[k] is the graph after pass k. */
  entries: PassEntry[];
}

export interface MemoryRect {
  id: number;
  name: string;
  start: number;
  end: number;
  offset: number;
  size: number;
  /** Set for a view: the id of its base, whose bar it is drawn inside (it holds no bytes). */
  view_of?: number;
}

/** Where a memory alloc (start of its step) or free (end of its step) node bounds a graph-owned buffer's bar. */
export interface MemoryMark {
  kind: "alloc" | "free";
  buffer: number;
  step: number;
  node: number;
}

export interface MemorySection {
  available: true;
  mode: string;
  modes: string[];
  arena_bytes: number;
  lower_bound_bytes: number;
  /** Most bytes live at once over one order; below lower_bound_bytes on several streams. */
  liveness_bound_bytes?: number;
  /** Buffers no event orders pairwise, whose sizes add up to the bound (when it beats liveness). */
  bound_buffers?: number[];
  num_steps: number;
  buffers: MemoryRect[];
  strategy?: string;
  optimal?: boolean;
  /** Graph-owned buffers' memory alloc and free nodes (oxiwork.widget.viewmodel.memory_node_marks). */
  marks?: MemoryMark[];
}

/** One plan step on its stream (oxiwork.executor.timeline): launched at `launch`, runs [start, end). */
export interface StreamBar {
  /** Index in plan.steps (what the simulator's position counts). */
  step: number;
  node: number;
  name: string;
  kind: string;
  stream: number;
  launch: number;
  start: number;
  end: number;
}

/** An event: recorded by step `record` (done at `time`), waited for by step `wait`. */
export interface StreamArrow {
  event: number;
  record: number;
  wait: number;
  from_stream: number;
  to_stream: number;
  time: number;
}

export interface StreamLane {
  stream: number;
  label: string;
  busy: number;
  steps: number;
}

export interface StreamsSection {
  available: true;
  /** Launch mode drawn: "graph" (one CUDA graph launch) or "stream" (a launch per kernel). */
  mode: string;
  modes: string[];
  num_streams: number;
  lanes: StreamLane[];
  bars: StreamBar[];
  arrows: StreamArrow[];
  makespan: number;
  /** Makespan of each launch mode. */
  totals: Record<string, number>;
  /** Every step back to back on one stream, and the dependency-only bound (no launch overheads). */
  work: number;
  critical_path: number | null;
  /** The stream pass's own list schedule (no events, no launch overheads). */
  schedule?: number | null;
  /** Steps the host launches one by one in stream mode (kernels, copies, memsets). */
  launches?: number;
  overheads: Record<string, number>;
  time_unit: string;
}

export interface SimStep {
  index: number;
  node: number;
  name: string;
  kind: string;
  stream: number;
}

export interface RaceReport {
  /** Index in the real plan's steps of the later step of the race. */
  step: number;
  node: number;
  /** The earlier step of the pair and its node. */
  first?: number;
  first_node?: number;
  buffer: number;
  message: string;
  /** Seen by the simulator (else found by the static analysis only). */
  observed?: boolean;
  /** The run executed the two steps in the reverse of plan order. */
  manifested?: boolean;
}

/** An event of the plan, as the "drop event" menu lists it. */
export interface SimEvent {
  event: number;
  /** "e3: record(x) s0 → wait s1". */
  label: string;
  /** Indices in plan.steps of its record and wait steps. */
  steps: number[];
}

/** Whether a finished run's outputs are the real plan's (null until a run finishes). */
export interface SimVerdict {
  /** null: the outputs could not be compared (`text` says why). */
  match: boolean | null;
  text: string;
  buffers: { name: string; max_abs_diff: number | null }[];
}

/** One output of an imported model against PyTorch eager (oxiwork/widget/eager.py). */
export interface EagerOutput {
  name: string;
  shape: number[];
  dtype: string;
  /** null: no size (shapes differ, or NaN/Inf against a number; `reason` says which). */
  max_abs_diff: number | null;
  rtol: number;
  atol: number;
  allclose: boolean;
  reason: string;
}

/** The last comparison with PyTorch eager: a run to the end, or Workbench.compare_eager. */
export interface EagerVerdict {
  /** null: not compared (`text` says why). */
  match: boolean | null;
  text: string;
  /** What ran: "simulation, in_order policy", "plan run in order". */
  source: string;
  outputs: EagerOutput[];
}

/** The imported model the simulator computes (`bound`), or why it no longer does (`note`). */
export interface ModelBinding {
  bound: boolean;
  name: string;
  note: string;
  /** The model carries outputs to compare with (eager's, or `expected=`). */
  eager: boolean;
  /** How many buffers take the model's values, its user inputs' names, its outputs. */
  values?: number;
  user_inputs?: string[];
  outputs?: number;
}

/** A buffer the step on screen read or wrote, with its values now. */
export interface TouchedBuffer {
  buffer: number;
  name: string;
  role: "read" | "write" | "read+write";
  dtype: string;
  shape: number[];
  count: number;
  min: number | null;
  max: number | null;
  mean: number | null;
  nan_count: number;
  /** The first values; a non-finite one as "nan", "inf" or "-inf". */
  head: (number | string)[];
}

/** The simulator's static part, in the view-model (the `sim_state` trait has the rest). */
export interface SimStatic {
  available: true;
  steps: SimStep[];
  /** Interleaving policies the simulator offers. */
  policies?: string[];
  events?: SimEvent[];
}

/** The simulator as the panel sees it: steps plus where it is (`sim_state`). */
export interface SimSection {
  available: true;
  steps: SimStep[];
  policies: string[];
  events: SimEvent[];
  /** Index in plan.steps of the last executed step; -1 before the first step. */
  position: number;
  /** Steps executed so far. */
  executed: number;
  /** Indices in plan.steps of the executed steps, in the order they ran. */
  executed_steps: number[];
  policy: string;
  /** The event the simulated plan lacks, or null. */
  drop_event: number | null;
  /** Indices in plan.steps of that event's record and waits (they never run). */
  dropped_steps: number[];
  verdict: SimVerdict | null;
  /** Against PyTorch eager, for an imported model (null before a comparison). */
  eager: EagerVerdict | null;
  /** Inputs the simulator generated from its seed (0 when all are the model's values). */
  generated: number;
  /** The buffers of the step on screen (at most 8). */
  touched: TouchedBuffer[];
  finished: boolean;
  /** At most 200 races (observed first); races_total counts them all. */
  races: RaceReport[];
  races_total?: number;
  message: string;
  /** Node ids of the displayed graph that the current step executes (fused originals too). */
  highlight: number[];
  /** Buffer ids live at the current step. */
  live_buffers: number[];
}

export interface InspectorSection {
  available: true;
  buffer: number;
  name: string;
  dtype: string;
  shape: number[];
  count: number;
  shown: number;
  min: number | null;
  max: number | null;
  mean: number | null;
  nan_count: number;
  hist: number[];
  hist_lo: number;
  hist_hi: number;
  written: boolean;
}

export interface BufferInfo {
  id: number;
  name: string;
  size_bytes: number;
  dtype: string;
  shape: number[] | null;
  external: boolean;
}

export interface OpInfo {
  name: string;
  arity: number;
  params: Record<string, number | string | boolean>;
  fusion_class: string;
}

export interface NodeDetails {
  id: number;
  name: string;
  kind: string;
  op: string | null;
  stream: number | null;
  inputs: string[];
  outputs: string[];
  predecessors: string[];
  successors: string[];
  config: string | null;
  params: [string, string][];
  fused_from: string[];
  cost: number | null;
  asap: number | null;
  alap: number | null;
  slack: number | null;
  critical: boolean | null;
  /** Why it was not fused with each neighbouring kernel: [after|before, other, reason]. */
  fusion?: [string, string, string][];
  /** The generated CUDA C it launches (kernels with an op or a fused program). */
  source?: string | null;
}

/** A plan's figures for the Compare tab (viewmodel.plan_figures). */
export interface PlanFigures {
  options: PipelineOptions;
  kernels: number;
  kernels_before_fusion: number;
  /** Sorted; empty for plans with very many kernels. */
  kernel_names: string[];
  steps: number;
  streams: number;
  events: number;
  arena_bytes: number;
  lower_bound_bytes: number | null;
  graph_launch: number;
  stream_launches: number;
  critical_path: number | null;
}

export type Section<T> = T | Unavailable;

export interface ViewModel {
  version: number;
  /** The pass pipeline has not run yet: passes, memory, streams and sim are pending. */
  pending?: boolean;
  dag: Section<DagMeta>;
  passes: Section<PassesSection>;
  memory: Section<MemorySection>;
  streams: Section<StreamsSection>;
  sim: Section<SimStatic>;
  buffers: BufferInfo[];
  ops: OpInfo[];
  /** The imported model the simulator computes, or why it stopped; null for a plain graph. */
  model?: ModelBinding | null;
  editable: boolean;
  edit_reason: string;
  /** The current plan's figures (null until the passes ran), compared with `pinned`. */
  figures?: PlanFigures | null;
  /** Graph-level facts shown when no node is selected: [label, value] pairs. */
  summary?: [string, string][];
}

export interface ErrorEntry {
  request_id: string;
  message: string;
  kind: string;
}

export function isAvailable<T extends { available: true }>(s: Section<T> | undefined): s is T {
  return !!s && (s as { available: boolean }).available === true;
}
