// `herd simulate --pd [--workload SHAPE] [--engines N] [--link-gbps G] [--min-prefill-tokens T]`:
// aggregated (2N engines) vs P/D (N prefill + N decode) on the same seeded arrivals, in virtual time
// (pd.ts: herd's lifecycle, router and `runPd` over the sim engine's scheduler). Defaults compare a
// long-input and a short workload, where P/D wins and loses.
import { BenchInputError } from "../workload/plan.ts";
import { parseRateShape } from "../workload/rate-shapes.ts";
import { defaultConfig } from "../config/load.ts";
import { QWEN3_8B_KV_BYTES_PER_TOKEN, simulatePd, type PdSimResult } from "./pd.ts";
import type { SimIo } from "./cli.ts";

export const PD_HELP = `herd simulate --pd: aggregated vs prefill/decode disaggregation in virtual time

Usage: herd simulate --pd [--workload SHAPE[:k=v,…]]… [--engines N] [--link-gbps G] [--min-prefill-tokens T] [--seed K]

Options:
  --workload SHAPE      a load shape (step, ramp, sine, burst, diurnal) with isl/osl; repeatable
                        (default: 8k in / 256 out at 1.5 req/s, and 256 in / 256 out at 12 req/s, 600 s)
  --engines N           engines per P/D pool; aggregated runs 2N (default 2)
  --link-gbps G         prefill → decode KV bandwidth, GB/s (default 25); KV size is Qwen3-8B's 144 KiB/token
  --min-prefill-tokens T  shorter prompts prefill on their decode engine (default 512, as pd.min_prefill_tokens)
  --seed K              (default 1)`;

const DEFAULTS = ["step:from=1.5,to=1.5,at=0,duration=600,isl=8000,osl=256", "step:from=12,to=12,at=0,duration=600,isl=256,osl=256"];

export function isPdRun(argv: readonly string[]): boolean {
  return argv.includes("--pd");
}

export async function pdSimMain(argv: readonly string[], io: SimIo): Promise<number> {
  const workloads: string[] = [];
  const num: Record<string, number> = { engines: 2, "link-gbps": 25, "min-prefill-tokens": 512, seed: 1 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--pd") continue;
    if (a === "--help" || a === "-h") return io.out(PD_HELP), 0;
    const key = a.replace(/^--/, "");
    const v = argv[++i];
    if (v === undefined) throw new BenchInputError(`${a} needs a value`);
    if (key === "workload") workloads.push(v);
    else if (key in num && Number.isFinite(Number(v)) && Number(v) >= 0) num[key] = Number(v);
    else throw new BenchInputError(`--pd runs take no ${a} ${v}`);
  }
  if (!(num.engines! >= 1) || !(num["link-gbps"]! > 0)) throw new BenchInputError("--engines must be ≥ 1 and --link-gbps > 0");
  const row = (name: string, r: PdSimResult) =>
    `  ${name.padEnd(11)} ${String(r.ttft_p50_ms).padStart(9)} ${String(r.ttft_p95_ms).padStart(9)} ${String(r.itl_p50_ms).padStart(8)} ${String(r.itl_p95_ms).padStart(8)} ${String(r.throughput_rps).padStart(7)} ${String(r.disaggregated).padStart(6)} ${String(r.failed).padStart(6)}`;
  const base = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-simulate" });
  for (const w of workloads.length > 0 ? workloads : DEFAULTS) {
    const shape = parseRateShape(w);
    const spec = {
      shape, durationS: shape.durationS, seed: num.seed!, engines: num.engines!, blockSize: 16, kvBytesPerToken: QWEN3_8B_KV_BYTES_PER_TOKEN,
      linkBytesPerS: num["link-gbps"]! * 1e9, transferMs: 1, minPrefillTokens: num["min-prefill-tokens"]!, base,
    };
    io.out(`${w} (${num.engines} + ${num.engines} P/D engines vs ${2 * num.engines!} aggregated, ${num["link-gbps"]} GB/s)`);
    io.out(`  mode        TTFT p50  TTFT p95  ITL p50  ITL p95   req/s  via P failed`);
    io.out(row("aggregated", await simulatePd(spec, "aggregated")));
    io.out(row("p/d", await simulatePd(spec, "pd")));
  }
  return 0;
}
