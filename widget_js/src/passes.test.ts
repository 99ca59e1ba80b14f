import { describe, expect, it } from "vitest";
import { PassLoader } from "./passes";

function loader(ok = true) {
  const ids: string[] = [];
  const l = new PassLoader(() => {
    if (!ok) return null;
    const id = `r${ids.length + 1}`;
    ids.push(id);
    return id;
  });
  return { l, ids };
}

describe("PassLoader", () => {
  it("asks once for a pending view and not for a complete one", () => {
    const { l, ids } = loader();
    l.viewArrived(false);
    expect(ids).toEqual([]);
    l.viewArrived(true);
    l.viewArrived(true); // a redraw while waiting: no second request
    expect(ids).toEqual(["r1"]);
    expect(l.waiting).toBe(true);
  });

  it("asks again when a new pending view arrived while waiting (an edit)", () => {
    const { l, ids } = loader();
    l.viewArrived(true);
    l.viewArrived(false); // the passes arrive
    l.viewArrived(true); // then an edit: a new graph, pending
    expect(l.replied("r1", true)).toBe(true);
    expect(ids).toEqual(["r1", "r2"]);
  });

  it("does not repeat a request the kernel answered with the views filled", () => {
    const { l, ids } = loader();
    l.viewArrived(true);
    l.viewArrived(false);
    expect(l.replied("r1", false)).toBe(true);
    expect(ids).toEqual(["r1"]);
    expect(l.waiting).toBe(false);
  });

  it("does not loop on a refused request; a new view asks again", () => {
    const { l, ids } = loader();
    l.viewArrived(true);
    expect(l.replied("r1", true)).toBe(true); // an error reply, nothing changed
    expect(ids).toEqual(["r1"]);
    l.viewArrived(true);
    expect(ids).toEqual(["r1", "r2"]);
  });

  it("ignores replies to other requests", () => {
    const { l, ids } = loader();
    l.viewArrived(true);
    expect(l.replied("r9", true)).toBe(false);
    expect(l.replied(undefined, true)).toBe(false);
    expect(l.waiting).toBe(true);
    expect(ids).toEqual(["r1"]);
  });

  it("stays quiet when it cannot send (a static export without a kernel)", () => {
    const { l } = loader(false);
    l.viewArrived(true);
    expect(l.waiting).toBe(false);
    expect(l.sent).toBe(0);
  });
});
