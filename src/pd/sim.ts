// Aggregated vs P/D in virtual time (`herd simulate --pd`): the same seeded arrivals through 2N
// aggregated engines, or N prefill + N decode engines with the KV transfer between them timed from
// the real KV size and a link bandwidth (issue 13). Engines are the planner simulation's engine model
// (src/planner/sim/engine-model.ts: continuous batching priced by the sim engine's step cost). The
// prefill engine computes the prompt and one token; after the transfer, the decode engine starts
// with the prompt's full blocks cached, samples the first token and decodes. The decider runs as in
// herd run: a prompt shorter than `minPrefillTokens` prefills on its decode engine. Least-loaded
// placement on both pools. Pure and seeded: one seed gives one result.
import { VirtualClock } from "../core/clock.ts";
import { SeededRng } from "../core/rng.ts";
import { EngineModel } from "../planner/sim/engine-model.ts";
import { DEFAULT_ENGINE } from "../planner/sim/fleet-sim.ts";
import { shapedArrivals, type RateShape } from "../workload/rate-shapes.ts";

/** Qwen3-8B's KV: 144 KiB per token (36 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes). */
export const QWEN3_8B_KV_BYTES_PER_TOKEN = 144 * 1024;

export interface PdSimSpec {
  shape: RateShape;
  durationS: number;
  seed: number;
  /** Engines per pool in P/D; aggregated runs twice as many. */
  engines: number;
  blockSize: number;
  kvBytesPerToken: number;
  /** Link bandwidth between a prefill and a decode engine, bytes per second. */
  linkBytesPerS: number;
  /** Fixed cost of a transfer (handshake, notification), ms. */
  transferMs: number;
  minPrefillTokens: number;
}

export interface PdSimResult {
  requests: number;
  ttft_p50_ms: number;
  ttft_p95_ms: number;
  /** Mean inter-token latency per request: p50 / p95 over requests. */
  itl_p50_ms: number;
  itl_p95_ms: number;
  throughput_rps: number;
  /** Requests that went through the prefill pool (P/D only). */
  disaggregated: number;
}

interface Engine {
  model: EngineModel;
  timer: { cancel(): void } | null;
  inFlight: number;
}

export function simulatePd(spec: PdSimSpec, mode: "aggregated" | "pd"): PdSimResult {
  const clock = new VirtualClock(0);
  const pool = (n: number): Engine[] => Array.from({ length: n }, () => ({ model: new EngineModel(DEFAULT_ENGINE, 0), timer: null, inFlight: 0 }));
  const decode = pool(mode === "pd" ? spec.engines : 2 * spec.engines);
  const prefill = mode === "pd" ? pool(spec.engines) : [];
  const ttft: number[] = [];
  const itl: number[] = [];
  let done = 0;
  let lastMs = 0;
  let disaggregated = 0;
  const pump = (e: Engine) => {
    e.timer?.cancel();
    const at = e.model.nextEventMs();
    e.timer = at === null ? null : clock.setTimer(Math.max(0, at - clock.now()), () => (e.model.advanceTo(clock.now()), pump(e)));
  };
  const least = (es: Engine[]) => es.reduce((a, b) => (b.inFlight < a.inFlight ? b : a));
  const submit = (e: Engine, isl: number, osl: number, cached: number, onFirst: (t: number) => void, onDone: (t: number) => void) => {
    e.inFlight++;
    e.model.advanceTo(clock.now());
    e.model.submit({
      isl, osl, cachedTokens: cached, arrivalMs: clock.now() + DEFAULT_ENGINE.cost.requestMs, onFirstToken: onFirst,
      onFinish: (t) => {
        e.inFlight--;
        onDone(t);
      },
    });
    pump(e);
  };
  const decodeLeg = (arrivedMs: number, isl: number, osl: number, cached: number) => {
    let first = 0;
    submit(least(decode), isl, osl, cached, (t) => {
      first = t;
      ttft.push(t - arrivedMs);
    }, (t) => {
      if (osl > 1) itl.push((t - first) / (osl - 1));
      done++;
      lastMs = Math.max(lastMs, t);
    });
  };
  const arrive = (isl: number, osl: number) => {
    const at = clock.now();
    if (mode === "aggregated" || isl < spec.minPrefillTokens) return decodeLeg(at, isl, osl, 0);
    disaggregated++;
    // The prefill leg: the prompt and one token (max_tokens 1), then the full blocks travel.
    submit(least(prefill), isl, 1, 0, () => {}, () => {
      const blocks = Math.floor(isl / spec.blockSize);
      const bytes = blocks * spec.blockSize * spec.kvBytesPerToken;
      clock.setTimer(spec.transferMs + (bytes / spec.linkBytesPerS) * 1000, () => decodeLeg(at, isl, osl, blocks * spec.blockSize));
    });
  };
  const it = shapedArrivals(spec.shape, spec.durationS, new SeededRng(spec.seed));
  const next = () => {
    const n = it.next();
    if (n.done) return;
    clock.setTimer(n.value.atS * 1000 - clock.now(), () => {
      arrive(n.value.isl, n.value.osl);
      next();
    });
  };
  next();
  while (clock.step()) {
    // every event runs inside step()
  }
  const pct = (xs: number[], q: number) => (xs.length === 0 ? 0 : [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!);
  const r1 = (x: number) => Math.round(x * 10) / 10;
  return {
    requests: done,
    ttft_p50_ms: r1(pct(ttft, 0.5)),
    ttft_p95_ms: r1(pct(ttft, 0.95)),
    itl_p50_ms: r1(pct(itl, 0.5)),
    itl_p95_ms: r1(pct(itl, 0.95)),
    throughput_rps: lastMs > 0 ? Math.round((done / (lastMs / 1000)) * 100) / 100 : 0,
    disaggregated,
  };
}
