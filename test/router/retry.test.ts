import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { RetryBudget, retryable, type Failure } from "../../src/router/retry.ts";

describe("retryable", () => {
  test.each<[Failure, boolean]>([
    [{ kind: "connect", firstByteSent: false }, true],
    [{ kind: "timeout", firstByteSent: false }, true],
    [{ kind: "status", status: 502, firstByteSent: false }, true],
    [{ kind: "status", status: 503, firstByteSent: false }, true],
    [{ kind: "status", status: 429, firstByteSent: false }, true],
    [{ kind: "status", status: 400, firstByteSent: false }, false],
    [{ kind: "status", status: 404, firstByteSent: false }, false],
    [{ kind: "status", firstByteSent: false }, false],
    [{ kind: "connect", firstByteSent: true }, false],
    [{ kind: "status", status: 503, firstByteSent: true }, false],
    [{ kind: "client_abort", firstByteSent: false }, false],
  ])("%o → %p", (f, want) => expect(retryable(f)).toBe(want));
});

describe("RetryBudget", () => {
  const cfg = { attempts: 2, budget_ratio: 0.2, min_retries_per_window: 3 };

  test("a quiet service still gets min_retries_per_window", () => {
    const b = new RetryBudget(cfg, new VirtualClock());
    expect([1, 1, 1, 1].map((a) => b.tryAcquire(a))).toEqual([true, true, true, false]);
  });

  test("under traffic, retries are capped at budget_ratio × requests in the window", () => {
    const clock = new VirtualClock();
    const b = new RetryBudget(cfg, clock);
    for (let i = 0; i < 100; i++) b.recordRequest();
    let allowed = 0;
    for (let i = 0; i < 50; i++) if (b.tryAcquire(1)) allowed++;
    expect(allowed).toBe(20);
  });

  test("attempts beyond config.attempts are refused whatever the budget", () => {
    const b = new RetryBudget(cfg, new VirtualClock());
    expect(b.tryAcquire(3)).toBe(false);
    expect(b.tryAcquire(0)).toBe(false);
    expect(b.tryAcquire(2)).toBe(true);
  });

  test("the window slides: old requests and retries stop counting", () => {
    const clock = new VirtualClock(0);
    const b = new RetryBudget(cfg, clock, 10_000);
    for (let i = 0; i < 100; i++) b.recordRequest();
    for (let i = 0; i < 20; i++) expect(b.tryAcquire()).toBe(true);
    expect(b.tryAcquire()).toBe(false);
    clock.advance(5_000);
    expect(b.snapshot()).toMatchObject({ requests: 100, retries: 20 });
    clock.advance(5_000); // the first bucket has left the window
    expect(b.snapshot()).toMatchObject({ requests: 0, retries: 0, limit: 3 });
    expect(b.tryAcquire()).toBe(true);
    clock.advance(60_000);
    expect(b.snapshot()).toMatchObject({ requests: 0, retries: 0 });
  });

  test("counts spread across buckets expire bucket by bucket", () => {
    const clock = new VirtualClock(0);
    const b = new RetryBudget({ attempts: 1, budget_ratio: 1, min_retries_per_window: 0 }, clock, 10_000);
    for (let s = 0; s < 10; s++) {
      b.recordRequest();
      clock.advance(1_000);
    }
    // now = 10 s: the request at t=0 has left the window, the ones at 1..9 s remain
    expect(b.snapshot().requests).toBe(9);
    clock.advance(4_000);
    expect(b.snapshot().requests).toBe(5);
  });
});
