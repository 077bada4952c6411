// Which models run the P/D plan (plan.ts pdServes): this node's config, or the cluster-wide worker
// registry, read per request (issue 13: a P/D pair may span nodes, and remote workers come and go);
// and how the decider's prefill queue sees other nodes' workers.
import { describe, expect, test } from "bun:test";
import type { EngineKind, Role } from "../../src/config/types.ts";
import { type PdPlanDeps, pdServes, prefillQueue } from "../../src/pd/plan.ts";
import { emptyLoad } from "../../src/workers/worker.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";

/** Workers of model `m`, each with `waiting` as its (owner's) last scrape. */
function registryWith(waiting: number | null, ...ws: [node: string, role: Role, kind?: EngineKind][]): WorkerRegistry {
  const r = new WorkerRegistry();
  ws.forEach(([node, role, kind], i) =>
    r.upsert({ id: `${node}/w-${i}`, node, model: "m", role, kind: kind ?? "sim", url: `http://127.0.0.1:${9000 + i}`, state: "ready", load: { ...emptyLoad(), waiting }, restarts: 0 }),
  );
  return r;
}
const registry = (...ws: [node: string, role: Role, kind?: EngineKind][]) => registryWith(null, ...ws);

describe("pdServes", () => {
  test("a model this node's config runs as P/D stays P/D whatever the registry holds", () => {
    expect(pdServes(new Set(["m"]), registry(), "m")).toBe(true);
  });

  test("prefill workers on one node and decode workers on another make the model P/D", () => {
    expect(pdServes(new Set(), registry(["a", "prefill"], ["a", "prefill"], ["b", "decode"]), "m")).toBe(true);
    expect(pdServes(new Set(), registry(["a", "prefill"], ["b", "decode"]), "other")).toBe(false);
  });

  test("only aggregated workers: today's aggregated plan", () => {
    expect(pdServes(new Set(), registry(["a", "aggregated"], ["b", "aggregated"]), "m")).toBe(false);
  });

  test("decode workers left alone (the prefill node is gone) still run P/D: the orchestrator prefills locally", () => {
    expect(pdServes(new Set(), registry(["b", "decode"]), "m")).toBe(true);
  });

  test("prefill workers left alone run P/D too: a clean 'no decode worker' error, not a role-filtered route", () => {
    expect(pdServes(new Set(), registry(["a", "prefill"]), "m")).toBe(true);
  });

  test("an SGLang prefill worker found only in the registry keeps the model off the P/D plan (its bootstrap port is its node's plan, not advertised)", () => {
    expect(pdServes(new Set(), registry(["a", "prefill", "sglang"], ["b", "decode", "sglang"]), "m")).toBe(false);
    expect(pdServes(new Set(), registry(["a", "prefill", "vllm"], ["b", "decode", "vllm"]), "m")).toBe(true);
  });
});

describe("prefillQueue", () => {
  test("local and remote prefill workers count; a remote worker's queue is the larger of herd's bookings and its owner's scrape", () => {
    const reg = registryWith(5, ["a", "prefill"], ["b", "prefill"], ["b", "decode"]);
    const booked = new Map([["a/w-0", 2], ["b/w-1", 9]]);
    const d = {
      config: () => ({ node: { name: "b" } }),
      registry: reg,
      router: () => ({ prefilling: (id: string) => ({ tokens: 0, requests: booked.get(id) ?? 0 }) }),
    } as unknown as PdPlanDeps;
    expect(prefillQueue(d, "m")).toEqual([5, 9]);
    // This node's own worker: herd's bookings only, as on one node (a lagging scrape is not added).
    booked.set("b/w-1", 1);
    expect(prefillQueue(d, "m")).toEqual([5, 1]);
  });
});
