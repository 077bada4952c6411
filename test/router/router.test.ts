import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { HerdError } from "../../src/core/errors.ts";
import { SeededRng } from "../../src/core/rng.ts";
import type { WorkerRegistry } from "../../src/workers/registry.ts";
import { Router, type RouterObserver } from "../../src/router/router.ts";
import type { RouterConfig } from "../../src/config/types.ts";
import { registryWith, req, routerConfig, worker, workers } from "./fixtures.ts";

function setup(ws = workers(3), cfg: Partial<RouterConfig> = {}): { router: Router; registry: WorkerRegistry; clock: VirtualClock } {
  const registry = registryWith(ws);
  const clock = new VirtualClock();
  return { router: new Router({ config: routerConfig(cfg), registry, clock, rng: new SeededRng(1) }), registry, clock };
}

function routeError(router: Router, r = req()): HerdError {
  try {
    router.route(r);
  } catch (e) {
    if (e instanceof HerdError) return e;
    throw e;
  }
  throw new Error("route did not throw");
}

describe("filters and errors", () => {
  test("an unknown model is 404 model_not_found in OpenAI shape", () => {
    const { router } = setup();
    const e = routeError(router, req({ model: "nope" }));
    expect(e.status).toBe(404);
    expect(e.toJSON().error).toMatchObject({ type: "invalid_request_error", code: "model_not_found" });
    expect(e.message).toContain("nope");
  });

  test("a model with workers but none ready is 503 with Retry-After, naming why", () => {
    const { router } = setup([worker("a", { state: "starting" }), worker("b", { state: "draining" }), worker("c", { state: "failed" })]);
    const e = routeError(router);
    expect(e.status).toBe(503);
    expect(e.code).toBe("no_worker_available");
    expect(e.headers["retry-after"]).toBe("5");
    expect(e.message).toContain("1 starting");
    expect(e.message).toContain("1 draining");
  });

  test("when every ready worker already failed this request, 503 (retry has nowhere to go)", () => {
    const { router } = setup(workers(2));
    const e = routeError(router, req({ exclude: new Set(["w0", "w1"]) }));
    expect(e.status).toBe(503);
    expect(e.headers["retry-after"]).toBe("1");
    expect(e.message).toContain("2 failed this request");
  });

  test("only ready, aggregated workers of the model that did not fail the request are candidates", () => {
    const ws = [
      worker("ok1"),
      worker("ok2"),
      worker("starting", { state: "starting" }),
      worker("prefill", { role: "prefill" }),
      worker("other", { model: "x" }),
      worker("failed-before"),
    ];
    const { router } = setup(ws);
    const { decision } = router.route(req({ exclude: new Set(["failed-before"]) }));
    expect(decision.candidates.map((c) => c.worker).sort()).toEqual(["ok1", "ok2"]);
    expect(decision.filtered).toEqual([
      { worker: "starting", node: "n1", filter: "state" },
      { worker: "prefill", node: "n1", filter: "role" },
      { worker: "failed-before", node: "n1", filter: "excluded" },
    ]);
  });

  test("registry changes take effect on the next decision", () => {
    const { router, registry } = setup(workers(2), { policy: "least-loaded" });
    registry.setState("w0", "draining");
    for (let i = 0; i < 10; i++) expect(router.route(req()).worker.id).toBe("w1");
    registry.remove("w1");
    expect(routeError(router).status).toBe(503);
  });

  test("an unknown policy name is a config error naming the accepted ones", () => {
    expect(() => new Router({ config: routerConfig({ policy: "bogus" as never }), registry: registryWith([]), clock: new VirtualClock() })).toThrow(/round-robin/);
  });
});

describe("explain", () => {
  test("answers like route without advancing state or booking", () => {
    const { router } = setup(workers(3), { policy: "round-robin" });
    const e1 = router.explain(req());
    const e2 = router.explain(req());
    expect(e1.worker.id).toBe(e2.worker.id);
    expect(router.route(req()).worker.id).toBe(e1.worker.id);
    expect(router.inFlight(e1.worker.id)).toBe(0);
    expect(router.explain(req()).worker.id).not.toBe(e1.worker.id);
  });

  test("explain does not count as a routing decision", () => {
    const { router } = setup();
    let n = 0;
    router.observe({ decision: () => n++ });
    router.explain(req());
    router.route(req());
    expect(n).toBe(1);
  });
});

describe("leases", () => {
  test("in-flight goes up on book and back to zero on release, first token or not", () => {
    const { router, registry } = setup(workers(1));
    const a = router.book("w0", 100);
    const b = router.book("w0", 50);
    expect(router.inFlight("w0")).toBe(2);
    expect(registry.get("w0")?.load.in_flight).toBe(2);
    expect(router.prefilling("w0")).toEqual({ requests: 2, tokens: 150 });
    a.firstToken();
    a.firstToken();
    expect(router.prefilling("w0")).toEqual({ requests: 1, tokens: 50 });
    a.release();
    b.release(); // released before its first token (abort / error)
    expect(router.inFlight("w0")).toBe(0);
    expect(router.prefilling("w0")).toEqual({ requests: 0, tokens: 0 });
  });

  test("release is idempotent, and firstToken after release changes nothing", () => {
    const { router } = setup(workers(1));
    const l = router.book("w0");
    const other = router.book("w0");
    l.release();
    l.release();
    l.firstToken();
    expect(l.released).toBe(true);
    expect(router.inFlight("w0")).toBe(1);
    other.release();
    expect(router.inFlight("w0")).toBe(0);
  });

  test("every path returns to zero: success, throw, abort, worker removed mid-request", async () => {
    const { router, registry } = setup(workers(2), { policy: "least-loaded" });
    const run = async (outcome: "ok" | "throw" | "abort" | "remove") => {
      const { worker, lease } = router.routeAndBook(req());
      const ac = new AbortController();
      ac.signal.addEventListener("abort", () => lease.release());
      try {
        await Promise.resolve();
        lease.firstToken();
        if (outcome === "throw") throw new Error("upstream died");
        if (outcome === "abort") ac.abort();
        if (outcome === "remove") registry.remove(worker.id);
      } finally {
        lease.release();
      }
    };
    const outcomes = ["ok", "throw", "abort", "remove"] as const;
    await Promise.allSettled(Array.from({ length: 40 }, (_, i) => run(outcomes[i % 4]!)).concat());
    for (const id of ["w0", "w1"]) expect(router.inFlight(id)).toBe(0);
    registry.upsert(worker("w0"));
    registry.upsert(worker("w1"));
    expect(registry.get("w0")?.load.in_flight).toBe(0);
    expect(registry.get("w1")?.load.in_flight).toBe(0);
  });

  test("booked load steers load-aware policies between decisions", () => {
    const { router } = setup(workers(3), { policy: "least-loaded" });
    const leases = Array.from({ length: 9 }, () => router.routeAndBook(req()).lease);
    expect([0, 1, 2].map((i) => router.inFlight(`w${i}`))).toEqual([3, 3, 3]);
    for (const l of leases) l.release();
  });

  test("observers see in-flight changes", () => {
    const { router } = setup(workers(1));
    const seen: number[] = [];
    const off = router.observe({ inFlight: (_id, n) => seen.push(n) });
    const l = router.book("w0");
    l.release();
    off();
    router.book("w0").release();
    expect(seen).toEqual([1, 0]);
  });
});

describe("retries through the router", () => {
  test("only failures before the first byte, and within attempts and budget", () => {
    const { router } = setup(workers(3), { retry: { attempts: 1, budget_ratio: 0.2, min_retries_per_window: 2 } });
    const log: string[] = [];
    const obs: RouterObserver = { retry: (ok, why) => log.push(`${ok}:${why}`) };
    router.observe(obs);
    expect(router.allowRetry(1, { kind: "connect", firstByteSent: true })).toBe(false);
    expect(router.allowRetry(1, { kind: "status", status: 400, firstByteSent: false })).toBe(false);
    expect(router.allowRetry(2, { kind: "connect", firstByteSent: false })).toBe(false); // attempts = 1
    expect(router.allowRetry(1, { kind: "status", status: 503, firstByteSent: false })).toBe(true);
    expect(router.allowRetry(1, { kind: "connect", firstByteSent: false })).toBe(true);
    expect(router.allowRetry(1, { kind: "connect", firstByteSent: false })).toBe(false); // min 2, no traffic
    expect(log).toEqual(["false:not_retryable", "false:not_retryable", "false:budget", "true:allowed", "true:allowed", "false:budget"]);
  });

  test("routed first attempts grow the budget; retries (exclude non-empty) do not", () => {
    const { router } = setup(workers(3), { retry: { attempts: 1, budget_ratio: 0.2, min_retries_per_window: 0 } });
    for (let i = 0; i < 20; i++) router.route(req());
    for (let i = 0; i < 20; i++) router.route(req({ exclude: new Set(["w0"]) }));
    expect(router.retryBudget.snapshot()).toMatchObject({ requests: 20, limit: 4 });
  });
});

test("observers count decisions by policy and rejections by code; a throwing observer is harmless", () => {
  const { router } = setup([worker("a"), worker("b", { state: "starting", model: "cold" })], { policy: "power-of-two" });
  const byPolicy = new Map<string, number>();
  const rejected: string[] = [];
  router.observe({
    decision: (d) => byPolicy.set(d.policy, (byPolicy.get(d.policy) ?? 0) + 1),
    rejected: (model, code) => rejected.push(`${model}:${code}`),
  });
  router.observe({
    decision: () => {
      throw new Error("metrics bug");
    },
  });
  for (let i = 0; i < 5; i++) expect(router.route(req()).worker.id).toBe("a");
  expect(() => router.route(req({ model: "nope" }))).toThrow(HerdError);
  expect(() => router.route(req({ model: "cold" }))).toThrow(HerdError);
  expect(() => router.explain(req({ model: "nope" }))).toThrow(HerdError);
  expect(byPolicy).toEqual(new Map([["power-of-two", 5]]));
  expect(rejected).toEqual(["nope:model_not_found", "cold:no_worker_available"]);
});

test("sessionIdFrom reads the configured header, case-insensitively, trimmed and bounded", () => {
  const { router } = setup(workers(1), { session: { header: "X-Session-Id", load_factor: 1.25, virtual_nodes: 10 } });
  expect(router.sessionIdFrom(new Headers({ "x-session-id": " abc " }))).toBe("abc");
  expect(router.sessionIdFrom({ "X-SESSION-ID": "def" })).toBe("def");
  expect(router.sessionIdFrom({ "x-session-id": "" })).toBeNull();
  expect(router.sessionIdFrom(new Headers())).toBeNull();
  expect(router.sessionIdFrom({ "x-session-id": "z".repeat(10_000) })?.length).toBe(256);
});
