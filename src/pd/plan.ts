// The P/D plan (issue 13): the PlanBuilder the daemon gives the Frontend. A model is P/D when this
// node's config has prefill and decode engines for it (pdModels), or — decided per request, since
// other nodes' workers come and go — when the cluster-wide worker registry holds prefill or decode
// workers of it (pdServes). For such a model a request runs `runPd` (orchestrator.ts) over a
// LegExecutor that sends each leg through the request lifecycle's LegRunner (same Upstream, ticket,
// commit point and relay as any request; plan.ts in src/request). Every other model keeps
// `aggregatedPlan` unchanged, so an aggregated request takes exactly today's path.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Rng } from "../core/rng.ts";
import type { Config } from "../config/types.ts";
import type { KvIndex, Overlap } from "../kv/indexer.ts";
import type { Router } from "../router/index.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import { aggregatedPlan, type LegRunner, type PinnedEnd, type PlanBuilder, type PlanInput } from "../request/plan.ts";
import { type Choice, chooseDecode, choosePrefill, type PdCandidate, uncachedTokens } from "./choose.ts";
import { type DisaggDecision, decideDisagg } from "./decider.ts";
import { pdFlowOf } from "./engine-flags.ts";
import { pdModels } from "./launch.ts";
import { type LegExecutor, type LegOutcome, type PdObserver, type PdTrace, runPd } from "./orchestrator.ts";

export interface PdPlanDeps {
  config: Config;
  registry: WorkerRegistry;
  router: Router;
  kvIndex?: KvIndex;
  clock: Clock;
  /** One fork per request (SGLang's bootstrap room, random ties). */
  rng: Rng;
  log: Logger;
  observer?: PdObserver;
  /** Every finished request's trace (explain: both legs, the terms that chose each). */
  onTrace?: (requestId: string, trace: PdTrace) => void;
}

const NONE: Overlap = { gpu: 0, cpu: 0, disk: 0 };

/**
 * Whether `model` runs the P/D plan now: this node's config says so (pdModels, fixed), or the
 * registry (local and remote workers) holds a prefill or decode worker of it and every prefill
 * worker speaks vLLM's NixlConnector contract (the SGLang flow is not orchestrated: see launch.ts).
 * Decode workers alone still count: the orchestrator then prefills locally on one (decider reason
 * `no_prefill_worker`) — what a decode node does when the prefill node is gone; prefill workers
 * alone give a clean "no decode worker" error instead of an aggregated route that has no worker.
 */
export function pdServes(configured: ReadonlySet<string>, registry: WorkerRegistry, model: string): boolean {
  if (configured.has(model)) return true;
  let split = false;
  for (const w of registry.ofModel(model)) {
    if (w.role === "aggregated") continue;
    if (w.role === "prefill" && pdFlowOf(w.kind) !== "vllm-nixl") return false;
    split = true;
  }
  return split;
}

/** Ready workers of `model` as the chooser sees them: overlap for this prompt, herd's load, scraped KV. */
export function pdCandidates(d: PdPlanDeps, route: PlanInput["route"]): PdCandidate[] {
  const hashes = route.blockHashes;
  const overlaps = hashes && d.kvIndex ? d.kvIndex.findMatches(hashes) : new Map<string, Overlap>();
  return d.registry
    .ofModel(route.model)
    .filter((w) => w.state === "ready")
    .map((w) => {
      const pre = d.router.prefilling(w.id);
      // herd's bookings are only the requests that entered this node; another node's worker also
      // serves its own node's and the rest of the cluster's, which its owner's scrape (published in
      // its advert) counts. The larger of the two keeps the decider's saturation check cluster-wide.
      const remoteWaiting = w.node !== d.config.node.name ? (w.load.waiting ?? 0) : 0;
      return {
        id: w.id, node: w.node, url: w.url, kind: w.kind, role: w.role,
        overlap: overlaps.get(w.id) ?? NONE,
        activePrefillTokens: pre.tokens,
        activeBlocks: d.router.activeBlocks(w.id),
        waiting: Math.max(pre.requests, remoteWaiting),
        kvUsage: w.load.kv_usage,
        numBlocks: null,
        // SGLang workers are not orchestrated through herd run yet (pdModels): no bootstrap port.
        bootstrapPort: null,
      };
    });
}

/** How runPd's end maps onto the lifecycle's (the committed answer already went to the client). */
function toPinnedEnd(o: LegOutcome): PinnedEnd {
  if (o.kind === "committed") return { kind: "committed" };
  return o;
}

function executor(runner: LegRunner, input: PlanInput): LegExecutor {
  return {
    run: (leg, signal) =>
      new Promise<LegOutcome>((resolve) =>
        runner.run(
          {
            name: leg.name,
            route: { ...input.route, role: leg.worker.role, worker: leg.worker.id },
            endpoint: input.endpoint,
            body: leg.body,
            stream: leg.stream,
            ...(input.promptTokens ? { promptTokens: input.promptTokens } : {}),
            maxTokens: leg.toClient ? (input.maxTokens ?? null) : 1,
            workerId: leg.worker.id,
            workerUrl: leg.worker.url,
            toClient: leg.toClient,
            commitTimeoutMs: leg.commitTimeoutMs,
          },
          signal,
          (end) => resolve(end.kind === "committed" ? { kind: "committed", answer: null } : end),
        ),
      ),
  };
}

export function pdPlanBuilder(d: PdPlanDeps): PlanBuilder {
  const models = pdModels(d.config);
  const blockSize = new Map(d.config.models.map((m) => [m.name, m.block_size])); // cluster-wide equal (model cards)
  const knobs = { prefillLoadScale: d.config.router.kv.prefill_load_scale, credit: d.config.router.kv.overlap_credit };
  const firstTokenMs = d.config.frontend.first_token_timeout_ms;
  return (input) => {
    const plan = aggregatedPlan(input);
    if (!pdServes(models, d.registry, input.route.model)) return plan;
    return {
      ...plan,
      orchestrate: async (runner, requestId, signal) => {
        const r = await runPd(
          {
            exec: executor(runner, input),
            candidates: () => pdCandidates(d, input.route),
            pd: d.config.pd,
            knobs,
            rng: d.rng.fork(),
            clock: d.clock,
            ...(d.observer ? { observer: d.observer } : {}),
            timeouts: { prefillMs: firstTokenMs, firstTokenMs },
          },
          {
            requestId,
            endpoint: input.endpoint === "chat" ? "chat" : "completion",
            body: input.json,
            stream: input.stream,
            promptTokens: input.route.promptTokens,
            blockSize: blockSize.get(input.route.model) ?? 16,
            flow: "vllm",
          },
          signal,
        );
        d.onTrace?.(requestId, r.trace);
        d.log.debug("P/D request", { request: requestId, decision: r.trace.decision.reason, legs: r.trace.legs.map((l) => `${l.name}@${l.worker}:${l.outcome}`).join(","), fallbacks: r.trace.fallbacks.join(",") });
        return toPinnedEnd(r.outcome);
      },
    };
  };
}

/** What /admin/route/explain shows for a P/D model: the decision and the terms that would choose each leg. */
export interface PdExplain {
  flow: "vllm";
  decision: DisaggDecision;
  prefill: Choice | null;
  decode: Choice;
}

/** The P/D choice this route would get now, without running it (a fork of the rng: nothing advances). */
export function explainPd(d: PdPlanDeps, route: PlanInput["route"]): PdExplain | null {
  if (!pdServes(pdModels(d.config), d.registry, route.model)) return null;
  const cands = pdCandidates(d, route);
  const req = { promptTokens: route.promptTokens, blockSize: route.blockSize ?? d.config.models.find((m) => m.name === route.model)?.block_size ?? 16 };
  const rng = d.rng.fork();
  const local = chooseDecode(cands, req, new Set(), rng, ["decode", "aggregated"]);
  const queue = cands.filter((c) => c.role === "prefill").map((c) => c.waiting);
  const decision = decideDisagg({ uncachedTokens: uncachedTokens(local.pick, req), prefillQueue: queue }, d.config.pd);
  if (!decision.disaggregate) return { flow: "vllm", decision, prefill: null, decode: local };
  const knobs = { prefillLoadScale: d.config.router.kv.prefill_load_scale, credit: d.config.router.kv.overlap_credit };
  return { flow: "vllm", decision, prefill: choosePrefill(cands, req, knobs, new Set(), rng), decode: chooseDecode(cands, req, new Set(), rng) };
}
