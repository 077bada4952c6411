// Passive outlier detection (src/router/outlier.ts) and the evidence filters every policy gets
// (src/router/evidence.ts): one failure ejects, the ejection doubles on repeats and is capped, one
// probe re-admits, a peer that cannot be reached ejects its whole node, a retry after a peer's
// failure goes to this node's own workers, and explain says why.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { OutlierDetector } from "../../src/router/outlier.ts";
import { ejectionOf } from "../../src/router/evidence.ts";
import { Router } from "../../src/router/router.ts";
import { POLICIES } from "../../src/config/types.ts";
import { registryWith, req, routerConfig, worker } from "./fixtures.ts";

const cfg = { enabled: true, base_ejection_ms: 1000, max_ejection_ms: 8000 };

describe("OutlierDetector", () => {
  test("one failure ejects at once; the ejection doubles per repeat up to the cap; one probe at a time", () => {
    const clock = new VirtualClock();
    const d = new OutlierDetector(clock, cfg);
    expect(d.blocked("worker", "w0")).toBeNull();
    d.failed("worker", "w0", "connect");
    expect(d.blocked("worker", "w0")).toMatch(/ejected for 1000 ms more after connect/);
    const lengths: number[] = [];
    for (let i = 0; i < 6; i++) {
      const t0 = clock.now();
      while (d.blocked("worker", "w0")?.startsWith("ejected")) clock.advance(100);
      lengths.push(clock.now() - t0);
      // probing: admitted for one request, which fails
      expect(d.blocked("worker", "w0")).toBeNull();
      d.routed("worker", "w0");
      expect(d.blocked("worker", "w0")).toMatch(/probe is in flight/);
      d.failed("worker", "w0", "reset");
    }
    expect(lengths).toEqual([1000, 2000, 4000, 8000, 8000, 8000]);
    expect(d.list()).toEqual([{ target: "w0", kind: "worker", state: "ejected", reason: "reset", ejections: 7, remaining_ms: 8000 }]);
  });

  test("a probe's success re-admits; healthy for max_ejection_ms starts again from the base", () => {
    const clock = new VirtualClock();
    const d = new OutlierDetector(clock, cfg);
    d.failed("node", "n2", "peer_unreachable");
    clock.advance(1000);
    d.routed("node", "n2");
    d.succeeded("node", "n2");
    expect(d.blocked("node", "n2")).toBeNull();
    expect(d.list()).toEqual([]);
    d.failed("node", "n2", "peer_unreachable"); // soon after: longer
    expect(d.list()[0]!.remaining_ms).toBe(2000);
    clock.advance(2000);
    d.succeeded("node", "n2");
    clock.advance(8000);
    d.failed("node", "n2", "peer_unreachable"); // after a long healthy spell: the base again
    expect(d.list()[0]!.remaining_ms).toBe(1000);
  });

  test("a probe that never reports lets another request probe after one base time", () => {
    const clock = new VirtualClock();
    const d = new OutlierDetector(clock, cfg);
    d.failed("worker", "w0", "eof");
    clock.advance(1000);
    d.routed("worker", "w0");
    clock.advance(999);
    expect(d.blocked("worker", "w0")).not.toBeNull();
    clock.advance(1);
    expect(d.blocked("worker", "w0")).toBeNull();
  });

  test("disabled: nothing is ejected; failures while ejected do not extend it", () => {
    const clock = new VirtualClock();
    const off = new OutlierDetector(clock, { ...cfg, enabled: false });
    off.failed("worker", "w0", "connect");
    expect(off.blocked("worker", "w0")).toBeNull();
    const d = new OutlierDetector(clock, cfg);
    d.failed("worker", "w0", "connect");
    clock.advance(500);
    d.failed("worker", "w0", "connect"); // a request that was in flight when it failed
    expect(d.list()[0]).toMatchObject({ ejections: 1, remaining_ms: 500 });
  });

  test("which failures eject whom", () => {
    expect(ejectionOf("peer_unreachable", "n2/w", "n2", "n1")).toEqual({ kind: "node", id: "n2" });
    for (const r of ["connect", "reset", "eof", "head_timeout"]) expect(ejectionOf(r, "n1/w", "n1", "n1")).toEqual({ kind: "worker", id: "n1/w" });
    for (const r of ["status_5xx", "first_token_timeout", "idle_timeout", "worker_down", "shutdown"]) expect(ejectionOf(r, "w", "n1", "n1")).toBeNull();
  });
});

describe("Router: evidence filters under every policy", () => {
  const ws = () => [worker("n1/a", { node: "n1" }), worker("n2/a", { node: "n2" }), worker("n2/b", { node: "n2" }), worker("n3/a", { node: "n3" })];

  for (const policy of POLICIES) {
    test(`${policy}: a peer node that cannot be reached loses all its workers at once; explain says why`, () => {
      const clock = new VirtualClock();
      const r = new Router({ config: routerConfig({ policy }), registry: registryWith(ws()), clock, self: "n1" });
      r.reportFailure("n2/a", "peer_unreachable");
      for (let i = 0; i < 40; i++) expect(r.route(req({ sessionId: `s${i}` })).worker.node).not.toBe("n2");
      const e = r.explain(req());
      expect(e.decision.filtered.filter((f) => f.filter === "ejected").map((f) => f.worker).sort()).toEqual(["n2/a", "n2/b"]);
      expect(e.decision.filtered.find((f) => f.worker === "n2/b")!.detail).toMatch(/peer_unreachable/);
    });
  }

  test("a retry after a peer's failure avoids that node and prefers this node's workers", () => {
    const clock = new VirtualClock();
    const r = new Router({ config: routerConfig({ policy: "round-robin" }), registry: registryWith(ws()), clock, self: "n1" });
    for (let i = 0; i < 8; i++) expect(r.route(req({ exclude: new Set(["n2/a"]) })).worker.id).toBe("n1/a");
    // without local workers left, still not the failed node
    for (let i = 0; i < 8; i++) expect(r.route(req({ exclude: new Set(["n2/a", "n1/a"]) })).worker.id).toBe("n3/a");
  });

  test("a local engine's failure does not push the retry off this node", () => {
    const clock = new VirtualClock();
    const reg = registryWith([worker("n1/a", { node: "n1" }), worker("n1/b", { node: "n1" }), worker("n2/a", { node: "n2" })]);
    const r = new Router({ config: routerConfig({ policy: "round-robin" }), registry: reg, clock, self: "n1" });
    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) seen.add(r.route(req({ exclude: new Set(["n1/a"]) })).worker.id);
    expect(seen).toEqual(new Set(["n1/b", "n2/a"]));
  });

  test("a stale view prefers local workers; with everything ejected one is still tried (no certain 503)", () => {
    const clock = new VirtualClock();
    let stale = true;
    const r = new Router({ config: routerConfig({ policy: "round-robin" }), registry: registryWith(ws()), clock, self: "n1", isolated: () => stale });
    for (let i = 0; i < 6; i++) expect(r.route(req()).worker.id).toBe("n1/a");
    expect(r.explain(req()).decision.filtered.find((f) => f.filter === "prefer_local")!.detail).toMatch(/stale/);
    stale = false;
    for (const w of ws()) r.reportFailure(w.id, "connect");
    expect(r.route(req()).worker).toBeDefined();
  });

  test("a probed worker's first token re-admits it", () => {
    const clock = new VirtualClock();
    const r = new Router({ config: routerConfig({ policy: "round-robin" }), registry: registryWith([worker("a"), worker("b")]), clock });
    r.reportFailure("a", "head_timeout");
    for (let i = 0; i < 4; i++) expect(r.route(req()).worker.id).toBe("b");
    clock.advance(routerConfig().outlier.base_ejection_ms);
    const picks = new Set<string>();
    for (let i = 0; i < 4; i++) picks.add(r.route(req()).worker.id);
    expect(picks.has("a")).toBe(true); // the probe
    r.reportSuccess("a");
    expect(r.outliers.list()).toEqual([]);
  });
});

describe("retry budget and dead targets", () => {
  test("a retry after a dead target (it ejects) is not charged to the budget; others are; attempts still bound both", () => {
    const clock = new VirtualClock();
    const r = new Router({ config: routerConfig({ retry: { attempts: 1, budget_ratio: 0, min_retries_per_window: 1 } }), registry: registryWith([worker("a"), worker("b")]), clock });
    for (let i = 0; i < 10; i++) expect(r.allowRetry(1, { kind: "connect", firstByteSent: false, dead: true })).toBe(true);
    expect(r.allowRetry(2, { kind: "connect", firstByteSent: false, dead: true })).toBe(false);
    expect(r.allowRetry(1, { kind: "status", status: 503, firstByteSent: false })).toBe(true);
    expect(r.allowRetry(1, { kind: "status", status: 503, firstByteSent: false })).toBe(false); // budget spent
    const off = new Router({ config: routerConfig({ retry: { attempts: 1, budget_ratio: 0, min_retries_per_window: 0 }, outlier: { enabled: false, base_ejection_ms: 1000, max_ejection_ms: 1000 } }), registry: registryWith([worker("a")]), clock });
    expect(off.allowRetry(1, { kind: "connect", firstByteSent: false, dead: true })).toBe(false); // no ejection: the budget applies
  });
});

describe("ejection and the registry", () => {
  test("a worker whose engine comes back ready (restart, health check) is no longer ejected", () => {
    const clock = new VirtualClock();
    const reg = registryWith([worker("a"), worker("b")]);
    const r = new Router({ config: routerConfig(), registry: reg, clock });
    r.reportFailure("a", "reset");
    expect(r.outliers.list().map((e) => e.target)).toEqual(["a"]);
    reg.setState("a", "failed");
    expect(r.outliers.list().length).toBe(1);
    reg.setState("a", "ready");
    expect(r.outliers.list()).toEqual([]);
    r.close();
  });
});
