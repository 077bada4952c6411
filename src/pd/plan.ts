// The P/D plan (issue 13): the PlanBuilder the daemon gives the Frontend. A model is P/D when this
// node's config has prefill and decode engines for it (pdModels), or — decided per request, since
// other nodes' workers come and go — when the cluster-wide worker registry holds prefill or decode
// workers of it (pdServes). For such a model a request is an orchestrated plan: `runPd`
// (orchestrator.ts) sequences the legs over the lifecycle's LegRunner (each leg routed by its
// router.pd preset, run through the same Upstream, ticket, commit point and relay as any request).
// Every other model keeps `aggregatedPlan` unchanged. `explainPd` runs the very same `runPd` over a
// dry-run runner (the router's explain, legs that succeed without being sent), so explain shows
// the legs a request would run, each with its preset and every candidate's terms.
//
// Everything read from the config is read per request through `config()`, the node's live config,
// so a SIGHUP reaches P/D as it reaches aggregated routing.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { SeededRng, type Rng } from "../core/rng.ts";
import type { Config } from "../config/types.ts";
import type { Router, RouteRequest } from "../router/index.ts";
import type { Worker } from "../workers/worker.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import { aggregatedPlan, type LegOutcome, type LegRunner, type PlanBuilder, type PlanInput } from "../request/plan.ts";
import type { DisaggDecision } from "./decider.ts";
import { modelFlow, pdFlowOfKind } from "./flow.ts";
import { pdModels } from "./launch.ts";
import { type LegDecision, type PdDeps, type PdFlow, type PdInput, type PdObserver, type PdTrace, runPd } from "./orchestrator.ts";

export interface PdPlanDeps {
  /** The node's live config (reloads included): read on every request. */
  config: () => Config;
  registry: WorkerRegistry;
  /** The live router (a reload may replace it): `prefilling` for the decider's queue. */
  router: () => Pick<Router, "prefilling" | "explain">;
  clock: Clock;
  /** One fork per request (SGLang's bootstrap room). */
  rng: Rng;
  log: Logger;
  observer?: PdObserver;
  /** Every finished request's trace (explain: both legs, the terms that chose each). */
  onTrace?: (requestId: string, trace: PdTrace) => void;
  /** An SGLang prefill worker's bootstrap port (its engine plan's); null when unknown. */
  bootstrapPort?: (worker: Readonly<Worker>) => number | null;
}

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
    // Another node's SGLang prefill worker: its bootstrap port is its node's plan, not advertised.
    if (w.role === "prefill" && pdFlowOfKind(w.kind) !== "vllm") return false;
    split = true;
  }
  return split;
}

/**
 * Requests waiting on each ready prefill worker of `model` (the decider's saturation check). herd's
 * bookings are only the requests that entered this node; another node's worker also serves its own
 * node's and the rest of the cluster's, which its owner's scrape (published in its advert) counts.
 * The larger of the two keeps the check cluster-wide.
 */
export function prefillQueue(d: Pick<PdPlanDeps, "config" | "registry" | "router" | "bootstrapPort">, model: string, flow: PdFlow = "vllm"): number[] {
  const self = d.config().node.name;
  const router = d.router();
  return d.registry
    .ofModel(model)
    // SGLang's flow needs the prefill worker's bootstrap port: one without it is no prefill worker.
    .filter((w) => w.state === "ready" && w.role === "prefill" && (flow === "vllm" || (d.bootstrapPort?.(w) ?? null) !== null))
    .map((w) => Math.max(router.prefilling(w.id).requests, w.node !== self ? (w.load.waiting ?? 0) : 0));
}

/** This node's configured flow for the model (flow.ts), else vLLM's (the registry-found models). */
function flowOf(d: PdPlanDeps, model: string): PdFlow {
  return modelFlow(d.config(), model) ?? "vllm";
}

function pdDeps(d: PdPlanDeps, runner: LegRunner, model: string, rng: Rng): PdDeps {
  const config = d.config();
  const firstTokenMs = config.frontend.first_token_timeout_ms;
  return {
    runner,
    pd: config.pd,
    prefillQueue: () => prefillQueue(d, model, flowOf(d, model)),
    rng,
    clock: d.clock,
    ...(d.observer ? { observer: d.observer } : {}),
    ...(d.bootstrapPort ? { bootstrapPort: d.bootstrapPort } : {}),
    timeouts: { prefillMs: firstTokenMs, firstTokenMs },
  };
}

function pdInput(d: PdPlanDeps, input: PlanInput, requestId: string): PdInput {
  const blockSize = input.route.blockSize ?? d.config().models.find((m) => m.name === input.route.model)?.block_size ?? 16;
  return {
    requestId,
    endpoint: input.endpoint,
    body: input.json,
    stream: input.stream,
    route: { ...input.route, blockSize },
    ...(input.promptTokens ? { promptIds: input.promptTokens } : {}),
    maxTokens: input.maxTokens ?? null,
    flow: flowOf(d, input.route.model),
  };
}

/** pdModels per config object: it was recomputed on every request (a live reload makes a new object). */
const pdModelsOf = new WeakMap<object, Set<string>>();
function cachedPdModels(config: ReturnType<PdPlanDeps["config"]>): Set<string> {
  let m = pdModelsOf.get(config);
  if (m === undefined) pdModelsOf.set(config, (m = pdModels(config)));
  return m;
}

export function pdPlanBuilder(d: PdPlanDeps): PlanBuilder {
  return (input) => {
    if (!pdServes(cachedPdModels(d.config()), d.registry, input.route.model)) return aggregatedPlan(input);
    return {
      kind: "orchestrated",
      run: async (runner, requestId, signal) => {
        const r = await runPd(pdDeps(d, runner, input.route.model, d.rng.fork()), pdInput(d, input, requestId), signal);
        d.onTrace?.(requestId, r.trace);
        d.log.debug("P/D request", { request: requestId, decision: r.trace.decision.reason, legs: r.trace.legs.map((l) => `${l.name}@${l.worker}:${l.outcome}`).join(","), fallbacks: r.trace.fallbacks.join(",") });
        return r.outcome;
      },
    };
  };
}

/** What /admin/route/explain shows for a P/D model: the decision, then each leg as its preset chose it. */
export interface PdExplain {
  flow: PdFlow;
  decision: DisaggDecision;
  /** The decode leg's dry run the decider read (its pick's cached tokens). */
  lookahead: LegDecision | null;
  legs: (LegDecision & { name: string })[];
}

/** A runner that routes with the router's explain and answers every leg at once, sending nothing. */
function dryRunner(router: Pick<Router, "explain">): LegRunner {
  // A prefill answer with params that name no blocks: the decode leg's body is built as for a real one.
  const prefillAnswer = JSON.stringify({ kv_transfer_params: { dry_run: true } });
  return {
    route: (req: RouteRequest) => router.explain(req),
    run: (leg) => Promise.resolve<LegOutcome>(leg.toClient ? { kind: "committed", answer: null } : { kind: "done", text: prefillAnswer }),
  };
}

/** The P/D legs this route would run now, by running the real sequence dry (nothing sent, no state moved). */
export async function explainPd(d: PdPlanDeps, input: PlanInput): Promise<PdExplain | null> {
  if (!pdServes(cachedPdModels(d.config()), d.registry, input.route.model)) return null;
  const router = d.router();
  // Its own stream (the bootstrap room is not shown): explaining never shifts live requests' draws.
  const deps: PdDeps = pdDeps(d, dryRunner(router), input.route.model, new SeededRng(1));
  delete deps.observer; // a dry run is not a request: no metrics
  delete deps.timeouts;
  const { trace } = await runPd(deps, pdInput(d, input, "explain"), new AbortController().signal);
  return { flow: trace.flow, decision: trace.decision, lookahead: trace.lookahead, legs: trace.legs.map((l) => ({ name: l.name, ...l.decision })) };
}
