// predicted: each worker's TTFT and ITL for this request, forecast from the engine's step-cost model
// (src/engine/sim/cost.ts, the figures `herd simulate --calibrate` fits, router.predicted.engine)
// over what the router sees live — herd's queued prefill (../lease.ts prefillRemaining), the
// requests decoding there and their KV (heldBlocks), traffic herd did not send (../load.ts
// outsideRequests) and the prompt's overlap per medium (the kv index, as `kv`) — times a per-worker
// correction learned online from measured TTFTs. The picker takes, among the workers whose
// forecast meets the request's SLO (x-slo-ttft-ms / x-slo-itl-ms, else router.predicted.models /
// .slo), the one with the most headroom; when none meets it (or there is no SLO), the lowest
// forecast TTFT. llm-d's predicted-latency scorer needs a trained XGBoost sidecar for this; herd
// already has the engine's model (issue 25).
//
// The forecast, for a worker with R sequences decoding over K context tokens, W prefill tokens
// queued ahead (in k prompts) and this prompt's n uncached tokens after c cached ones:
//   C = max(1, B − R) prefill tokens per step (B = max_num_batched_tokens; decodes go first, as in
//       vLLM's chunked prefill and the sim's scheduler), S = ceil((W + n) / C) steps,
//   TTFT = request_ms + S × (step_ms + kv_token_ms × K) + Σ_steps max(weights_ms, token_ms × T_s)
//          + pair_ms × (n·c + n²/2 + W²/2k)
//   ITL  = one decode step with R + 1 sequences over K + prompt tokens (what follows it is unknown).
// Cached tokens credit CPU/disk overlap at router.kv.overlap_credit (a copy, not a recompute).
// Both are multiplied by the worker's correction: exp(EWMA of ln(measured / forecast TTFT)),
// clamped to [1/correction_max, correction_max]. The Router feeds it (Policy.learn) from each
// forecast request's booking → first token on its own clock, so the core stays pure.
import type { RouterConfig } from "../../config/types.ts";
import { chunkPairs, type CostParams } from "../../engine/sim/cost.ts";
import type { Overlap } from "../../kv/indexer.ts";
import { BlockIndex } from "../../kv/block-index.ts";
import { pickByCost } from "../cost.ts";
import { outsideRequests } from "../load.ts";
import { PrefixMemory } from "../prefix-memory.ts";
import { kvSource } from "../pipeline/sources.ts";
import { KV_BLOCKED_USAGE, r3 } from "../pipeline/scorers.ts";
import { PipelinePolicy } from "../pipeline/runner.ts";
import type { Picker, RequestFacts, Row, Scorer } from "../pipeline/types.ts";
import type { LatencySample, Pick, PolicyDeps, PolicyFactory, RouteCtx, RouteRequest } from "../types.ts";
import type { Worker } from "../../workers/worker.ts";

/** Workers whose correction is remembered (a bound; forgotten workers start again at 1). */
export const CORRECTIONS_MAX = 4096;
/** Longest SLO a header may ask for (ms); larger values are clamped (bounded arithmetic). */
export const SLO_MAX_MS = 3_600_000;

const NO_OVERLAP: Overlap = { gpu: 0, cpu: 0, disk: 0 };

export interface ForecastInputs {
  /** This prompt's tokens still to compute, and those cached before them. */
  newTokens: number;
  cachedTokens: number;
  /** Prefill tokens queued ahead on the worker, in `queuedRequests` prompts. */
  queuedTokens: number;
  queuedRequests: number;
  /** Sequences decoding on the worker, and their context tokens. */
  decoding: number;
  contextTokens: number;
  /** This request's own context once decoding (its prompt). */
  ownContextTokens: number;
}

/** The engine figures of router.predicted.engine as the sim's CostParams + the step budget. */
export function engineCost(cfg: RouterConfig["predicted"]["engine"]): CostParams & { budget: number } {
  return {
    stepMs: cfg.step_ms, weightsMs: cfg.weights_ms, linearMsPerToken: cfg.token_ms, pairMs: cfg.pair_ms,
    kvReadMsPerToken: cfg.kv_token_ms, requestMs: cfg.request_ms, budget: cfg.max_num_batched_tokens,
  };
}

/** Uncorrected TTFT and ITL forecasts (ms), from the step-cost model (see the header). */
export function forecast(c: CostParams & { budget: number }, x: ForecastInputs): { ttftMs: number; itlMs: number; steps: number } {
  const perStep = Math.max(1, c.budget - x.decoding);
  const work = x.queuedTokens + x.newTokens;
  const steps = Math.max(1, Math.ceil(work / perStep));
  // Σ max(weights, token × T_s): full steps carry R + C tokens, the last the remainder.
  const full = steps - 1;
  const last = x.decoding + (work - full * perStep);
  const compute = full * Math.max(c.weightsMs, c.linearMsPerToken * (x.decoding + perStep)) + Math.max(c.weightsMs, c.linearMsPerToken * last);
  const pairs = chunkPairs(x.cachedTokens, x.newTokens) + (x.queuedRequests > 0 ? (x.queuedTokens * x.queuedTokens) / (2 * x.queuedRequests) : 0);
  const ttftMs = c.requestMs + steps * (c.stepMs + c.kvReadMsPerToken * x.contextTokens) + compute + c.pairMs * pairs;
  const batch = x.decoding + 1;
  const itlMs = c.stepMs + Math.max(c.weightsMs, c.linearMsPerToken * batch) + c.kvReadMsPerToken * (x.contextTokens + x.ownContextTokens);
  return { ttftMs, itlMs, steps };
}

/** A worker's measured/forecast TTFT ratio, as an EWMA of its logarithm (a ratio of 2 and of ½ weigh alike). */
export class Corrections {
  private readonly logs = new Map<string, number>();
  constructor(private readonly alpha: number, private readonly max: number) {}

  factor(workerId: string): number {
    return Math.exp(this.logs.get(workerId) ?? 0);
  }

  learn(s: LatencySample): void {
    if (this.alpha <= 0 || !(s.predictedTtftMs > 0) || !(s.measuredTtftMs > 0)) return;
    const bound = Math.log(this.max);
    const x = Math.min(bound, Math.max(-bound, Math.log(s.measuredTtftMs / s.predictedTtftMs)));
    const prev = this.logs.get(s.workerId);
    this.logs.delete(s.workerId);
    this.logs.set(s.workerId, prev === undefined ? this.alpha * x : (1 - this.alpha) * prev + this.alpha * x);
    if (this.logs.size > CORRECTIONS_MAX) this.logs.delete(this.logs.keys().next().value!);
  }

  forget(workerId: string): void {
    this.logs.delete(workerId);
  }
}

/** The request's SLO: its headers, else the model's default, else router.predicted.slo; 0 = none. */
export function sloOf(req: RouteRequest, cfg: RouterConfig["predicted"]): { ttftMs: number; itlMs: number } {
  const m = cfg.models.find((x) => x.model === req.model);
  const pick = (h: number | undefined, model: number | undefined, dflt: number) => {
    const v = h !== undefined && Number.isFinite(h) && h > 0 ? h : (model ?? 0) > 0 ? model! : dflt;
    return Math.min(SLO_MAX_MS, Math.max(0, v));
  };
  return { ttftMs: pick(req.sloTtftMs, m?.ttft_ms, cfg.slo.ttft_ms), itlMs: pick(req.sloItlMs, m?.itl_ms, cfg.slo.itl_ms) };
}

/** Scorer `predicted-ttft`: cost = corrected TTFT forecast in ms (not KV blocks: the picker reads the terms). */
export function predictedScorer(cfg: RouterConfig, corrections: Corrections): Scorer {
  const engine = engineCost(cfg.predicted.engine);
  const credit = cfg.kv.overlap_credit;
  return {
    type: "predicted-ttft",
    needs: { blockHashes: true, load: true },
    explain: (t) =>
      `forecast TTFT ${t.ttft_ms} ms, ITL ${t.itl_ms} ms (model ${t.model_ttft_ms} ms × correction ${t.correction}; ${t.queued_tokens} tokens queued ahead, ${t.decoding} decoding, ${t.new_tokens} new + ${t.cached_tokens} cached)`,
    score(w: Readonly<Worker>, f: RequestFacts) {
      const o = f.overlap.get(w.id) ?? NO_OVERLAP;
      const blocked = (w.load.kv_usage ?? 0) >= KV_BLOCKED_USAGE ? (w.load.waiting ?? 0) : 0;
      const pre = f.load.prefillRemaining ? f.load.prefillRemaining(w.id, blocked) : f.load.prefilling(w.id);
      const outside = outsideRequests(w.load);
      const outsideWaiting = Math.min(outside, Math.max(0, (w.load.waiting ?? 0) - pre.requests));
      const cachedBlocks = o.gpu + credit.cpu * o.cpu + credit.disk * o.disk;
      const cachedTokens = Math.min(Math.max(0, f.tokens - 1), Math.floor(cachedBlocks * f.blockSize));
      const held = f.load.heldBlocks ? f.load.heldBlocks(w.id) : f.load.activeBlocks(w.id);
      const decoding = Math.max(0, w.load.in_flight - pre.requests) + (outside - outsideWaiting);
      const x: ForecastInputs = {
        newTokens: f.tokens - cachedTokens, cachedTokens,
        queuedTokens: pre.tokens + outsideWaiting * f.tokens, queuedRequests: pre.requests + outsideWaiting,
        decoding, contextTokens: (held + outside * f.requestBlocks) * f.blockSize, ownContextTokens: f.tokens,
      };
      const raw = forecast(engine, x);
      const k = corrections.factor(w.id);
      const ttft = raw.ttftMs * k;
      return {
        cost: ttft,
        terms: {
          overlap_gpu: o.gpu, overlap_cpu: o.cpu, overlap_disk: o.disk, cached_tokens: cachedTokens, new_tokens: x.newTokens,
          queued_tokens: x.queuedTokens, queued_requests: x.queuedRequests, decoding, context_tokens: x.contextTokens, steps: raw.steps,
          model_ttft_ms: r3(raw.ttftMs), model_itl_ms: r3(raw.itlMs), correction: r3(k), ttft_ms: r3(ttft), itl_ms: r3(raw.itlMs),
        },
      };
    },
    forget: (id) => corrections.forget(id),
  };
}

/** Picker `slo`: the most headroom among the workers meeting the SLO, else the lowest forecast TTFT. */
export function sloPicker(cfg: RouterConfig["predicted"]): Picker {
  return {
    type: "slo",
    needs: {},
    pick(rows: Row[], f, rng) {
      const slo = sloOf(f.req, cfg);
      const has = slo.ttftMs > 0 || slo.itlMs > 0;
      let best = -1;
      let bestRoom = -Infinity;
      rows.forEach((r, i) => {
        const ttft = r.terms.ttft_ms as number;
        const itl = r.terms.itl_ms as number;
        // Headroom: the tighter of the two objectives' spare fraction; ≥ 0 = meets both.
        const room = Math.min(slo.ttftMs > 0 ? 1 - ttft / slo.ttftMs : Infinity, slo.itlMs > 0 ? 1 - itl / slo.itlMs : Infinity);
        r.terms.slo_ttft_ms = slo.ttftMs || null;
        r.terms.slo_itl_ms = slo.itlMs || null;
        r.terms.headroom = has ? r3(room) : null;
        r.terms.meets_slo = has ? (room >= 0 ? 1 : 0) : null;
        if (has && room >= 0 && (room > bestRoom || (room === bestRoom && r.cost < rows[best]!.cost))) [best, bestRoom] = [i, room];
      });
      if (best >= 0) {
        const meeting = rows.filter((r) => r.terms.meets_slo === 1).length;
        return { index: best, reason: `most SLO headroom ${r3(bestRoom)} among ${meeting} of ${rows.length} worker(s) meeting TTFT ${slo.ttftMs || "-"} ms / ITL ${slo.itlMs || "-"} ms` };
      }
      const i = pickByCost(rows.map((r) => r.cost), 0, rng);
      return { index: i, reason: `${has ? "no worker meets the SLO; " : ""}lowest forecast TTFT ${r3(rows[i]!.cost)} ms among ${rows.length} worker(s)` };
    },
  };
}

class PredictedPolicy extends PipelinePolicy {
  constructor(cfg: RouterConfig, deps: PolicyDeps, private readonly corrections: Corrections) {
    const index = deps.kvIndex ?? new BlockIndex();
    const predicted = cfg.kv.predicted_ttl_ms > 0 ? new PrefixMemory(cfg.kv.predicted_ttl_ms, cfg.prefix.max_blocks_per_worker) : null;
    super("predicted", { source: kvSource(index, predicted), filters: [], scorers: [{ scorer: predictedScorer(cfg, corrections), weight: 1 }], picker: sloPicker(cfg.predicted) }, deps.load);
  }

  override pick(req: RouteRequest, candidates: readonly Readonly<Worker>[], ctx: RouteCtx): Pick {
    const p = super.pick(req, candidates, ctx);
    const t = p.candidates.find((c) => c.worker === p.chosen)!.terms;
    p.latency = { ttftMs: t.ttft_ms as number, itlMs: t.itl_ms as number, rawTtftMs: t.model_ttft_ms as number };
    return p;
  }

  learn(s: LatencySample): void {
    this.corrections.learn(s);
  }
}

export const predicted: PolicyFactory & { readonly name: "predicted" } = {
  name: "predicted",
  create: (cfg, deps = {}) => new PredictedPolicy(cfg, deps, new Corrections(cfg.predicted.correction_ewma, cfg.predicted.correction_max)),
};
