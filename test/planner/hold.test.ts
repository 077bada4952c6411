// The hold queue on the virtual clock: FIFO release, bounds by count and bytes, per-request
// deadlines, one poke per pool going from empty to held, Retry-After from the predicted ready time.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { HerdError } from "../../src/core/errors.ts";
import { HoldQueue, type HoldOutcome } from "../../src/planner/hold.ts";

function setup(over: Partial<ConstructorParameters<typeof HoldQueue>[0]> = {}) {
  const clock = new VirtualClock(1_000);
  const pokes: string[] = [];
  const rejects: string[] = [];
  const waits: number[] = [];
  let predicted: number | null = 4_200;
  const q = new HoldQueue({
    clock, maxCount: 3, maxBytes: 1_000, timeoutMs: 10_000, poke: (p) => pokes.push(p), predictReadyMs: () => predicted,
    onReject: (p, why) => rejects.push(`${p}:${why}`), onRelease: (_p, ms) => waits.push(ms), ...over,
  });
  return { clock, q, pokes, rejects, waits, predict: (ms: number | null) => (predicted = ms) };
}

const track = (p: Promise<HoldOutcome>, log: string[], tag: string) => void p.then((o) => log.push(`${tag}:${o}`), (e: HerdError) => log.push(`${tag}:${e.status}`));

describe("hold queue", () => {
  test("releases a pool's requests in arrival order; pokes once per pool going from empty to held", async () => {
    const { clock, q, pokes, waits } = setup();
    const log: string[] = [];
    track(q.hold("m/aggregated", { bytes: 10, promptTokens: 100 }), log, "a");
    clock.advance(500);
    track(q.hold("m/aggregated", { bytes: 10, promptTokens: 50 }), log, "b");
    track(q.hold("m/decode", { bytes: 10, promptTokens: 7 }), log, "c");
    expect(pokes).toEqual(["m/aggregated", "m/decode"]);
    expect(q.summary("m/aggregated")).toEqual({ requests: 2, promptTokens: 150, bytes: 20, oldestWaitMs: 500 });
    clock.advance(250);
    expect(q.readyFor("m/aggregated")).toBe(2);
    await Bun.sleep(0);
    expect(log).toEqual(["a:release", "b:release"]);
    expect(waits).toEqual([750, 250]);
    expect(q.size).toEqual({ count: 1, bytes: 10 });
    // Empty again: the next held request pokes again.
    track(q.hold("m/aggregated", { bytes: 1, promptTokens: 1 }), log, "d");
    expect(pokes).toEqual(["m/aggregated", "m/decode", "m/aggregated"]);
    expect(q.readyFor("nothing-held")).toBe(0);
  });

  test("past the count or byte bound: 503 at once with Retry-After from the predicted ready time", async () => {
    const { q, rejects, predict } = setup();
    void q.hold("p", { bytes: 900, promptTokens: 1 });
    const tooBig = await q.hold("p", { bytes: 200, promptTokens: 1 }).catch((e: HerdError) => e);
    expect(tooBig).toBeInstanceOf(HerdError);
    expect((tooBig as HerdError).status).toBe(503);
    expect((tooBig as HerdError).headers["Retry-After"]).toBe("5"); // ceil(4.2 s)
    expect((tooBig as HerdError).message).toMatch(/hold_max_bytes/);
    void q.hold("p", { bytes: 1, promptTokens: 1 });
    void q.hold("p", { bytes: 1, promptTokens: 1 });
    predict(null); // unknown: the hold timeout
    const full = (await q.hold("p", { bytes: 1, promptTokens: 1 }).catch((e: HerdError) => e)) as HerdError;
    expect(full.headers["Retry-After"]).toBe("10");
    expect(full.message).toMatch(/planner.hold_max\)/);
    expect(rejects).toEqual(["p:bytes", "p:count"]);
  });

  test("the deadline answers timeout, and unavailable() carries Retry-After; nothing else is touched", async () => {
    const { clock, q, rejects } = setup({ timeoutMs: 2_000 });
    const log: string[] = [];
    track(q.hold("p", { bytes: 5, promptTokens: 1 }), log, "a");
    clock.advance(1_000);
    track(q.hold("p", { bytes: 5, promptTokens: 1 }), log, "b");
    clock.advance(1_000);
    await Bun.sleep(0);
    expect(log).toEqual(["a:timeout"]);
    expect(rejects).toEqual(["p:timeout"]);
    expect(q.summary("p").requests).toBe(1);
    const e = q.unavailable("p");
    expect([e.status, e.headers["Retry-After"], e.code]).toEqual([503, "5", "no_ready_engine"]);
    clock.advance(1_000);
    await Bun.sleep(0);
    expect(log).toEqual(["a:timeout", "b:timeout"]);
    expect(q.size).toEqual({ count: 0, bytes: 0 });
    expect(clock.pending).toBe(0);
  });

  test("a client that leaves frees its place; a release after settles nothing twice", async () => {
    const { clock, q } = setup();
    const ac = new AbortController();
    const log: string[] = [];
    track(q.hold("p", { bytes: 5, promptTokens: 1, signal: ac.signal }), log, "a");
    track(q.hold("p", { bytes: 5, promptTokens: 1 }), log, "b");
    ac.abort();
    expect(q.readyFor("p")).toBe(1);
    clock.advance(20_000);
    await Bun.sleep(0);
    expect(log).toEqual(["a:aborted", "b:release"]);
  });

  test("hold_max 0 turns holding off: 503 at once", async () => {
    const { q } = setup({ maxCount: 0 });
    const e = (await q.hold("p", { bytes: 1, promptTokens: 1 }).catch((x: HerdError) => x)) as HerdError;
    expect(e.status).toBe(503);
  });
});
