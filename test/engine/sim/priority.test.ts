// vLLM's --scheduling-policy priority in the sim scheduler (vllm/v1/core/sched/request_queue.py
// PriorityRequestQueue, scheduler.py): waiting requests leave in (priority, arrival) order, lower
// first; the preemption victim is the running request with the largest (priority, arrival), not the
// last admitted; a priority without the policy is refused as vLLM's processor refuses it.
import { describe, expect, test } from "bun:test";
import { HerdError } from "../../../src/core/errors.ts";
import { harness, seq } from "./helpers.ts";

describe("sim scheduler: priority policy", () => {
  test("waiting requests leave by (priority, arrival), lower value first", () => {
    const h = harness({ maxNumSeqs: 1, policy: "priority" });
    const a = h.submit("a", seq(1, 8), 2);
    h.clock.advance(11); // a is in the engine core
    const t = { b: h.submit("b", seq(100, 8), 2, { priority: 5 }), c: h.submit("c", seq(200, 8), 2, { priority: 1 }), d: h.submit("d", seq(300, 8), 2, { priority: 1 }), e: h.submit("e", seq(400, 8), 2, { priority: -3 }) };
    h.run();
    expect(a.finish?.reason).toBe("length");
    const byStart = Object.entries(t).sort((x, y) => x[1].finish!.scheduledMs! - y[1].finish!.scheduledMs!).map(([id]) => id);
    expect(byStart).toEqual(["e", "c", "d", "b"]);
  });

  test("FCFS (the default) keeps arrival order and refuses a priority, as vLLM does", () => {
    const h = harness({ maxNumSeqs: 1 });
    let err: unknown = null;
    try {
      h.submit("x", seq(1, 8), 2, { priority: 1 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(HerdError);
    expect((err as HerdError).status).toBe(400);
    expect((err as HerdError).message).toBe("Got priority 1 but Priority scheduling is not enabled.");
    expect(() => h.submit("y", seq(1, 8), 2, { priority: 0 })).not.toThrow();
  });

  for (const policy of ["fcfs", "priority"] as const)
    test(`out of KV blocks, the victim is ${policy === "fcfs" ? "the last admitted" : "the largest (priority, arrival)"} (${policy})`, () => {
      // 8 blocks of 4 tokens; each request grows to 5 blocks: both cannot run to the end together.
      const h = harness({ numBlocks: 8, blockSize: 4, policy });
      const low = h.submit("low", seq(1, 8), 12, policy === "priority" ? { priority: 5 } : {});
      h.clock.advance(40); // low runs alone for a few steps
      const high = h.submit("high", seq(100, 8), 12);
      h.run();
      expect(h.s.stats().preemptions).toBeGreaterThan(0);
      expect(low.finish?.reason).toBe("length");
      expect(high.finish?.reason).toBe("length");
      if (policy === "fcfs") expect(low.finish!.finishMs).toBeLessThan(high.finish!.finishMs);
      else expect(high.finish!.finishMs).toBeLessThan(low.finish!.finishMs);
    });
});
