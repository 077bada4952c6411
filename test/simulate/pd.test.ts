// `herd simulate --pd` in virtual time: herd's lifecycle, router and the real `runPd` over the sim
// engine's scheduler; seeded, long prompts through the prefill pool and short ones local (the
// decider), the transfer timed from the KV size and the link bandwidth.
import { describe, expect, test } from "bun:test";
import { defaultConfig } from "../../src/config/load.ts";
import { QWEN3_8B_KV_BYTES_PER_TOKEN, simulatePd } from "../../src/simulate/pd.ts";
import { simulateMain } from "../../src/simulate/cli.ts";
import { parseRateShape } from "../../src/workload/rate-shapes.ts";

const base = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-simulate-test" });
const spec = (w: string, over: Partial<Parameters<typeof simulatePd>[0]> = {}) => ({
  shape: parseRateShape(`step:from=1,to=1,at=0,duration=60,${w}`), durationS: 60, seed: 3, engines: 1, blockSize: 16,
  kvBytesPerToken: QWEN3_8B_KV_BYTES_PER_TOKEN, linkBytesPerS: 25e9, transferMs: 1, minPrefillTokens: 512, base, ...over,
});

describe("P/D in virtual time", () => {
  test("one seed, one result; every request answered in both modes, each long one through a transfer", async () => {
    const s = spec("isl=4000,osl=64");
    const pd = await simulatePd(s, "pd");
    expect(await simulatePd(s, "pd")).toEqual(pd);
    const agg = await simulatePd(s, "aggregated");
    expect(pd.failed).toBe(0);
    expect(pd.requests).toBe(agg.requests);
    expect(pd.disaggregated).toBe(pd.requests);
    expect(pd.transfers).toBe(pd.requests); // each decode leg started with the prefill's blocks
    expect(pd.load_failures).toBe(0);
    expect(agg.disaggregated).toBe(0);
    expect(agg.transfers).toBe(0);
  });

  test("the decider keeps short prompts on the decode engine", async () => {
    const r = await simulatePd(spec("isl=64,osl=16"), "pd");
    expect(r.requests).toBeGreaterThan(0);
    expect(r.disaggregated).toBe(0);
    expect(r.transfers).toBe(0);
  });

  test("min_prefill_tokens reaches the real decider: 0 sends even short prompts through the prefill pool", async () => {
    const r = await simulatePd(spec("isl=64,osl=16", { minPrefillTokens: 0 }), "pd");
    expect(r.disaggregated).toBe(r.requests);
  });

  test("a slower link shows in time to first token: the blocks' bytes travel before decode starts", async () => {
    const fast = await simulatePd(spec("isl=8000,osl=16"), "pd");
    const slow = await simulatePd(spec("isl=8000,osl=16", { linkBytesPerS: 1e9 }), "pd");
    // A median prompt (lognormal around 8000 tokens) × 144 KiB ≈ 1 GB: ~40 ms at 25 GB/s, ~1 s at 1 GB/s.
    expect(slow.ttft_p50_ms - fast.ttft_p50_ms).toBeGreaterThan(800);
    expect(slow.requests).toBe(fast.requests);
  });

  test("herd simulate --pd prints both modes for each workload", async () => {
    const out: string[] = [];
    const code = await simulateMain(["--pd", "--workload", "step:from=1,to=1,at=0,duration=30,isl=2000,osl=32"], { out: (t) => void out.push(t), err: (t) => void out.push(t) });
    expect(code).toBe(0);
    expect(out.join("\n")).toMatch(/aggregated\s+\d/);
    expect(out.join("\n")).toMatch(/p\/d\s+\d/);
  });
});
