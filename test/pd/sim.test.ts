// `herd simulate --pd` in virtual time: seeded, long prompts through the prefill pool and short
// ones local (the decider), and the transfer timed from the KV size and the link bandwidth.
import { describe, expect, test } from "bun:test";
import { QWEN3_8B_KV_BYTES_PER_TOKEN, simulatePd } from "../../src/pd/sim.ts";
import { simulateMain } from "../../src/simulate/cli.ts";
import { parseRateShape } from "../../src/workload/rate-shapes.ts";

const spec = (w: string, over: Partial<Parameters<typeof simulatePd>[0]> = {}) => ({
  shape: parseRateShape(`step:from=1,to=1,at=0,duration=120,${w}`), durationS: 120, seed: 3, engines: 1, blockSize: 16,
  kvBytesPerToken: QWEN3_8B_KV_BYTES_PER_TOKEN, linkBytesPerS: 25e9, transferMs: 1, minPrefillTokens: 512, ...over,
});

describe("P/D in virtual time", () => {
  test("one seed, one result; every request answered in both modes", () => {
    const s = spec("isl=4000,osl=64");
    expect(simulatePd(s, "pd")).toEqual(simulatePd(s, "pd"));
    const agg = simulatePd(s, "aggregated");
    const pd = simulatePd(s, "pd");
    expect(pd.requests).toBe(agg.requests);
    expect(pd.disaggregated).toBe(pd.requests);
    expect(agg.disaggregated).toBe(0);
  });

  test("the decider keeps short prompts on the decode engine", () => {
    expect(simulatePd(spec("isl=64,osl=16"), "pd").disaggregated).toBe(0);
  });

  test("a slower link shows in time to first token: the blocks' bytes travel before decode starts", () => {
    const fast = simulatePd(spec("isl=8000,osl=16"), "pd");
    const slow = simulatePd(spec("isl=8000,osl=16", { linkBytesPerS: 1e9 }), "pd");
    // A median prompt (lognormal around 8000 tokens) × 144 KiB ≈ 1 GB: ~40 ms at 25 GB/s, ~1 s at 1 GB/s.
    expect(slow.ttft_p50_ms - fast.ttft_p50_ms).toBeGreaterThan(800);
    expect(slow.itl_p50_ms).toBe(fast.itl_p50_ms); // the decode itself does not change
  });

  test("herd simulate --pd prints both modes for each workload", async () => {
    const out: string[] = [];
    const code = await simulateMain(["--pd", "--workload", "step:from=1,to=1,at=0,duration=60,isl=2000,osl=32"], { out: (t) => void out.push(t), err: (t) => void out.push(t) });
    expect(code).toBe(0);
    expect(out.join("\n")).toMatch(/aggregated\s+\d/);
    expect(out.join("\n")).toMatch(/p\/d\s+\d/);
  });
});
