// When the frontend asks the kernel for the pass pipeline. The kernel syncs the input
// graph's DAG first and marks the views that need the passes as pending (`view.pending`);
// after drawing such a view the frontend sends one `load_passes` request, and the kernel
// computes the pipeline and fills those views. No timers and no polling: at most one request
// is in flight, a view that arrives meanwhile (an edit, a new graph) is asked for when the
// reply comes, and a refused request is not repeated until the kernel sends a new view.

export class PassLoader {
  private inFlight: string | null = null;
  /** A new view-model arrived while a request was in flight. */
  private stale = false;
  /** Requests sent (for tests and the benchmark). */
  sent = 0;

  /** `request` sends `load_passes` and returns its request id (null if it could not send). */
  constructor(private readonly request: () => string | null) {}

  /** A view-model from the kernel was drawn; `pending` is its `pending` flag. */
  viewArrived(pending: boolean): void {
    if (this.inFlight !== null) {
      this.stale = true;
      return;
    }
    if (pending) this.ask();
  }

  /** Any reply from the kernel; returns whether it answered the request in flight.
   *  `pending` is the flag of the view-model on screen now. */
  replied(requestId: string | undefined, pending: boolean): boolean {
    if (this.inFlight === null || requestId !== this.inFlight) return false;
    this.inFlight = null;
    const again = this.stale && pending;
    this.stale = false;
    if (again) this.ask();
    return true;
  }

  get waiting(): boolean {
    return this.inFlight !== null;
  }

  private ask(): void {
    const id = this.request();
    if (id === null) return;
    this.inFlight = id;
    this.sent++;
  }
}
