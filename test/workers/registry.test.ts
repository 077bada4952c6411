import { describe, expect, test } from "bun:test";
import { WorkerRegistry, type RegistryChange } from "../../src/workers/registry.ts";
import { worker } from "../router/fixtures.ts";

describe("WorkerRegistry", () => {
  test("upsert, get, list, remove keep insertion order and copies", () => {
    const r = new WorkerRegistry();
    const a = worker("a");
    r.upsert(a);
    r.upsert(worker("b"));
    a.state = "failed"; // mutating the caller's object does not reach the registry
    expect(r.get("a")?.state).toBe("ready");
    expect(r.list().map((w) => w.id)).toEqual(["a", "b"]);
    expect(r.remove("a")).toBe(true);
    expect(r.remove("a")).toBe(false);
    expect(r.list().map((w) => w.id)).toEqual(["b"]);
    expect(r.size).toBe(1);
  });

  test("eligible: ready workers of the model, optionally of a role", () => {
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    r.upsert(worker("b", { state: "starting" }));
    r.upsert(worker("c", { model: "other" }));
    r.upsert(worker("d", { role: "prefill" }));
    expect(r.eligible("m").map((w) => w.id)).toEqual(["a", "d"]);
    expect(r.eligible("m", "aggregated").map((w) => w.id)).toEqual(["a"]);
    expect(r.ofModel("m").map((w) => w.id)).toEqual(["a", "b", "d"]);
    expect(r.models()).toEqual(["m", "other"]);
  });

  test("onChange reports added, updated (identity only), load and removed; unsubscribe stops it", () => {
    const r = new WorkerRegistry();
    const seen: string[] = [];
    const off = r.onChange((c: RegistryChange) => seen.push(`${c.type}:${c.worker.id}:${c.worker.state}`));
    r.upsert(worker("a", { state: "starting" }));
    r.upsert(worker("a", { state: "starting" })); // no change → no event
    r.setState("a", "ready");
    r.updateLoad("a", { running: 2 });
    r.addInFlight("a", 1);
    r.remove("a");
    off();
    r.upsert(worker("b"));
    expect(seen).toEqual(["added:a:starting", "updated:a:ready", "load:a:ready", "load:a:ready", "removed:a:ready"]);
  });

  test("a throwing listener does not break the registry or other listeners", () => {
    const r = new WorkerRegistry();
    let calls = 0;
    r.onChange(() => {
      throw new Error("boom");
    });
    r.onChange(() => calls++);
    r.upsert(worker("a"));
    expect(calls).toBe(1);
    expect(r.get("a")).toBeDefined();
  });

  test("an upsert of a known worker keeps its load (supervisor cannot reset in-flight)", () => {
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    r.addInFlight("a", 1);
    r.addInFlight("a", 1);
    r.updateLoad("a", { running: 5, waiting: 1, kv_usage: 0.5 });
    r.upsert(worker("a", { state: "draining", load: { in_flight: 0, running: null } }));
    expect(r.get("a")?.load).toMatchObject({ in_flight: 2, running: 5, waiting: 1, kv_usage: 0.5 });
    expect(r.get("a")?.state).toBe("draining");
  });

  test("updateLoad cannot set in_flight; unknown ids are ignored", () => {
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    r.updateLoad("a", { in_flight: 7 } as never);
    r.updateLoad("zzz", { running: 1 });
    expect(r.get("a")?.load.in_flight).toBe(0);
  });

  test("in-flight counts outlive remove and re-add, and never go below zero", () => {
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    r.addInFlight("a", 1);
    r.remove("a");
    expect(r.inFlightOf("a")).toBe(1);
    r.upsert(worker("a"));
    expect(r.get("a")?.load.in_flight).toBe(1);
    r.addInFlight("a", -1);
    r.addInFlight("a", -1);
    expect(r.get("a")?.load.in_flight).toBe(0);
    r.remove("a");
    r.addInFlight("gone", 1);
    r.addInFlight("gone", -1);
    expect(r.inFlightOf("gone")).toBe(0);
  });
});
