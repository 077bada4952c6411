// One seed replays a run: the frontend, the request lifecycle, the real router and simulated engines
// on one virtual clock (test/frontend/virtual-harness.ts) answer the same requests with the same
// decisions every time for a seed, and with different ones for another seed.
import { describe, expect, test } from "bun:test";
import { MODEL, virtualHerd } from "../frontend/virtual-harness.ts";

/** 40 requests, a few ms apart, under a policy that draws from the router's Rng; the decision log. */
async function run(seed: number): Promise<string[]> {
  const h = virtualHerd({ workers: 4, router: { policy: "power-of-two", seed } });
  const log: string[] = [];
  const pending: Promise<void>[] = [];
  for (let i = 0; i < 40; i++) {
    const body = { model: MODEL, prompt: `request ${i} `.repeat(1 + (i % 7)), max_tokens: 3 + (i % 5), stream: i % 2 === 0 };
    pending.push(
      h.fetch("/v1/completions", body).then(async (r) => {
        await r.text();
        log.push(`${i} ${r.status} ${r.headers.get("x-herd-worker")}`);
      }),
    );
    await h.advance(3);
  }
  await h.drive(Promise.all(pending));
  return log.sort((a, b) => Number(a.split(" ")[0]) - Number(b.split(" ")[0]));
}

describe("replayable runs", () => {
  test("the same seed gives the same decision log; another seed another one", async () => {
    const a = await run(11);
    const b = await run(11);
    expect(a).toHaveLength(40);
    expect(a.every((l) => l.includes(" 200 "))).toBe(true);
    expect(b).toEqual(a);
    const c = await run(12);
    expect(c).not.toEqual(a);
  });
});
