// The ticket: one per request, released exactly once whatever calls release, with its slot and
// lease freed and its outcome recorded once.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { HerdMetrics } from "../../src/metrics/herd-metrics.ts";
import { AbortCause, Admission, metricsRecorder, outcomeStatus, type Outcome, type RequestRecorder } from "../../src/request/ticket.ts";
import type { Lease } from "../../src/router/index.ts";

function fakeLease(): Lease & { releases: number } {
  const l = {
    workerId: "w0", promptTokens: 1, promptBlocks: 1, prefilling: true, released: false, releases: 0,
    firstToken() {},
    release() {
      l.releases++;
    },
  };
  return l;
}

function recorder(): RequestRecorder & { outcomes: Outcome[]; inFlights: number[] } {
  const r = {
    outcomes: [] as Outcome[], inFlights: [] as number[],
    inFlight: (n: number) => void r.inFlights.push(n),
    firstToken() {}, upstreamError() {}, retry() {},
    done: (_t: unknown, o: Outcome) => void r.outcomes.push(o),
  };
  return r;
}

describe("ticket", () => {
  test("a second release is a no-op: one outcome, one slot freed, the lease released once", () => {
    const rec = recorder();
    const adm = new Admission(new VirtualClock(), rec, 2);
    const t = adm.ticket();
    expect(t.admit()).toBe(true);
    const lease = fakeLease();
    t.beginAttempt("w0", lease, null);
    t.release({ kind: "complete", status: 200, cachedTokens: null });
    t.release({ kind: "broken", reason: "reset" });
    t.release({ kind: "client_stalled" });
    expect(rec.outcomes).toEqual([{ kind: "complete", status: 200, cachedTokens: null }]);
    expect(t.outcome?.kind).toBe("complete");
    expect(lease.releases).toBe(1);
    expect(adm.size).toBe(0);
    expect(rec.inFlights).toEqual([1, 0]);
  });

  test("slots: the limit refuses, a release frees one; waitIdle resolves on the last release", async () => {
    const clock = new VirtualClock();
    const adm = new Admission(clock, recorder(), 1);
    const a = adm.ticket();
    const b = adm.ticket();
    expect(a.admit()).toBe(true);
    expect(b.admit()).toBe(false);
    const idle = adm.waitIdle(1000);
    a.release({ kind: "complete", status: 200, cachedTokens: null });
    expect(await idle).toBe(true);
    expect(b.admit()).toBe(true);
  });

  test("a retry's new attempt releases the previous lease; abortWorker reaches only that worker's attempts", () => {
    const adm = new Admission(new VirtualClock(), recorder(), 10);
    const t = adm.ticket();
    t.admit();
    const l1 = fakeLease();
    const ac1 = t.beginAttempt("w0", l1, null);
    const l2 = fakeLease();
    const ac2 = t.beginAttempt("w1", l2, null);
    expect(l1.releases).toBe(1);
    expect(adm.abortWorker("w0", new AbortCause("worker_down", "w0 went failed"))).toBe(0);
    expect(ac1.signal.aborted).toBe(false);
    expect(adm.abortWorker("w1", new AbortCause("worker_down", "w1 went failed"))).toBe(1);
    expect(ac2.signal.aborted).toBe(true);
    expect((ac2.signal.reason as AbortCause).kind).toBe("worker_down");
  });

  test("an orchestrated plan's legs side by side (SGLang: prefill and decode at once): each ends alone, abortWorker and the client reach each, release ends all", () => {
    const adm = new Admission(new VirtualClock(), recorder(), 10);
    const client = new AbortController();
    const t = adm.ticket(client.signal);
    t.admit();
    const [lp, ld, lx] = [fakeLease(), fakeLease(), fakeLease()];
    const p = t.beginAttempt("p0", lp, null, true);
    const d = t.beginAttempt("d0", ld, null, true);
    expect(lp.releases).toBe(0); // alongside: the prefill's attempt stays
    t.endAttempt(p); // the prefill answered whole
    expect([lp.releases, ld.releases]).toEqual([1, 0]);
    expect(adm.abortWorker("p0", new AbortCause("worker_down", "p0 went failed"))).toBe(0);
    const x = t.beginAttempt("p1", lx, null, true);
    expect(adm.abortWorker("p1", new AbortCause("worker_down", "p1 went failed"))).toBe(1);
    expect([x.signal.aborted, d.signal.aborted]).toEqual([true, false]);
    client.abort();
    expect((d.signal.reason as AbortCause).kind).toBe("client");
    t.release({ kind: "client_closed", phase: "before_first_token" });
    expect([lp.releases, ld.releases, lx.releases]).toEqual([1, 1, 1]);
  });

  test("client-side outcomes are never a 5xx and are counted as client failures, not upstream errors", async () => {
    const clock = new VirtualClock();
    const m = new HerdMetrics(["m"], () => []);
    const adm = new Admission(clock, metricsRecorder(m, clock), 10);
    for (const o of [{ kind: "client_closed", phase: "upload" }, { kind: "client_stalled" }] as Outcome[]) {
      const t = adm.ticket();
      t.model = "m";
      t.release(o);
      expect(outcomeStatus(o)).toBeLessThan(500);
    }
    const text = await m.render();
    expect(text).toContain('herd_client_failures_total{model="m",outcome="client_closed",phase="upload"} 1');
    expect(text).toContain('herd_client_failures_total{model="m",outcome="client_stalled",phase="streaming"} 1');
    expect(text).not.toMatch(/herd_requests_total\{[^}]*status="5\d\d"/);
    expect(text).not.toContain("herd_upstream_errors_total{");
  });
});
