import { describe, expect, test } from "bun:test";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { emptyLoad, type Worker } from "../../src/workers/worker.ts";

const w = (state: Worker["state"], restarts = 0): Worker => ({
  id: "n/sim-0", node: "n", model: "m", role: "aggregated", kind: "sim", url: "http://127.0.0.1:1", state, restarts, load: emptyLoad(),
});

describe("registry cordon (operator drain)", () => {
  test("a cordoned worker stays out of rotation across producer updates until uncordoned", () => {
    const r = new WorkerRegistry();
    r.upsert(w("ready"));
    expect(r.cordon("n/sim-0", true)).toBe(true);
    expect(r.get("n/sim-0")!.state).toBe("draining");
    r.upsert(w("starting", 1)); // engine restarted
    expect(r.get("n/sim-0")!.state).toBe("starting");
    r.upsert(w("ready", 1)); // health came back: still cordoned
    expect(r.get("n/sim-0")!.state).toBe("draining");
    expect(r.eligible("m")).toEqual([]);
    r.cordon("n/sim-0", false);
    expect(r.get("n/sim-0")!.state).toBe("ready");
    expect(r.isCordoned("n/sim-0")).toBe(false);
  });

  test("uncordoning restores what the producer reported meanwhile, not ready", () => {
    const r = new WorkerRegistry();
    r.upsert(w("ready"));
    r.cordon("n/sim-0", true);
    r.upsert(w("failed"));
    r.cordon("n/sim-0", false);
    expect(r.get("n/sim-0")!.state).toBe("failed");
    expect(r.cordon("nope", true)).toBe(false);
  });
});
