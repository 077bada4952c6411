// The P/D orchestrator: the sequence of a disaggregated request's legs and what happens when one
// fails (issue 13). It owns the sequence; each leg is routed by the routing framework (its preset,
// `pd-prefill` / `pd-decode`, router.pd) and run by the request layer, both through one LegRunner
// (src/request/plan.ts), and ends in one LegOutcome. The same code explains: /admin/route/explain
// runs it over a dry-run runner (plan.ts `explainPd`), so the legs it shows are the legs it runs.
//
// vLLM flow (prefill first, as vLLM's toy proxy and Dynamo do; legs.ts builds the bodies):
//   prefill leg (1 token, not streamed) → its kv_transfer_params → decode leg (the client's body
//   with them), whose answer goes to the client. Same X-Request-Id on both legs.
// SGLang flow (sgl-router's PD mode, mini_lb): one body with bootstrap_host/port/room sent to both
//   at once; the decode answer goes to the client, the prefill answer is drained.
// Failures:
//   prefill fails or times out  → one retry on another prefill worker, then local prefill on the
//                                 decode worker (the client's body, no transfer);
//   decode fails before its first token → another decode worker with the same params (the prefill
//                                 side still holds the blocks until its lease ends), else redo from
//                                 prefill once (on another prefill worker when there is one);
//   client disconnect           → the signal aborts the running leg(s); nothing is retried.
// Conditional disaggregation (decider.ts) runs first, on a dry run of the decode leg (its cached
// tokens): short uncached prompts and a saturated prefill pool prefill locally. Every choice,
// fallback and leg lands in the trace (explain) and the observer (metrics).
import type { Clock } from "../core/clock.ts";
import { HerdError } from "../core/errors.ts";
import type { Rng } from "../core/rng.ts";
import type { PdConfig, Role } from "../config/types.ts";
import type { Endpoint } from "../protocol/openai.ts";
import type { LegOutcome, LegRunner, PinnedLeg } from "../request/plan.ts";
import type { Decision, RouteRequest, RouteResult } from "../router/index.ts";
import type { Worker } from "../workers/worker.ts";
import { type DisaggDecision, decideDisagg } from "./decider.ts";
import { bootstrapRoom, kvTransferParamsOf, sglangPdBody, vllmDecodeBody, vllmPrefillBody } from "./legs.ts";

export type PdFlow = "vllm" | "sglang";
export type LegName = "prefill" | "decode" | "local";
export type { LegOutcome };

export type FallbackReason = "prefill_retry" | "prefill_failed_local" | "no_transfer_params" | "decode_retry" | "decode_redo_prefill" | "local_retry";

export interface PdObserver {
  decision(d: DisaggDecision): void;
  fallback(reason: FallbackReason): void;
  /** A prefill leg answered, after `ms`. */
  prefillDone(ms: number): void;
  /** The client leg committed `ms` after the prefill answered (vLLM: transfer + first decode token). */
  transferToFirstToken(ms: number): void;
  pair(prefillNode: string, decodeNode: string): void;
  /**
   * A prefill answered with held blocks that no committed decode leg used (decodes failed, redo,
   * client gone): the prefill engine holds them until its lease ends (vLLM kv_lease_duration, 30 s)
   * — the leak window operators should see. An upper bound: a decode that failed after its pull
   * had already freed them.
   */
  abandonedPrefill(prefillWorker: string): void;
}

/** The routing decision that chose a leg's worker: the leg preset, its reason, every candidate's terms. */
export type LegDecision = Pick<Decision, "policy" | "chosen" | "reason" | "candidates" | "filtered">;

export interface LegTrace {
  name: LegName;
  worker: string;
  node: string;
  outcome: LegOutcome["kind"];
  reason?: string;
  startMs: number;
  endMs: number;
  decision: LegDecision;
}

export interface PdTrace {
  flow: PdFlow;
  decision: DisaggDecision;
  /** The decode leg's dry run the decider read (its pick's cached tokens), when a worker could decode. */
  lookahead: LegDecision | null;
  legs: LegTrace[];
  fallbacks: FallbackReason[];
}

export interface PdDeps {
  /** Routes each leg (the router, or its explain on a dry run) and runs it (the request lifecycle). */
  runner: LegRunner;
  pd: Pick<PdConfig, "min_prefill_tokens" | "prefill_queue_max">;
  /** Requests waiting (booked, no first token) on each ready prefill worker of the model. */
  prefillQueue: () => readonly number[];
  /** An SGLang prefill worker's bootstrap port (--disaggregation-bootstrap-port); null when unknown. */
  bootstrapPort?: (worker: Readonly<Worker>) => number | null;
  rng: Rng;
  clock: Clock;
  observer?: PdObserver;
  /** Commit bounds per leg: the prefill answer, and the client leg's first token. */
  timeouts?: { prefillMs: number; firstTokenMs: number };
}

export interface PdInput {
  requestId: string;
  endpoint: Endpoint;
  /** The client's checked body. */
  body: Record<string, unknown>;
  stream: boolean;
  /** The request's route (model, session, prompt tokens, block hashes): each leg adds its preset. */
  route: Omit<RouteRequest, "exclude">;
  /** The prompt's token ids when preprocessing produced them (the sim upstream reads them). */
  promptIds?: ArrayLike<number>;
  /** The client's max_tokens (the client leg's non-streaming bound); null = engine default. */
  maxTokens: number | null;
  flow: PdFlow;
}

export interface PdResult {
  /** committed, failed (final: the client gets a clean error) or aborted (client gone). */
  outcome: LegOutcome;
  trace: PdTrace;
}

const NOOP: PdObserver = { decision() {}, fallback() {}, prefillDone() {}, transferToFirstToken() {}, pair() {}, abandonedPrefill() {} };

/** Whether prefill params name held blocks (remote_block_ids with at least one id). */
function holdsBlocks(params: Record<string, unknown> | null): boolean {
  const ids = params?.remote_block_ids;
  return Array.isArray(ids) && ids.some((g) => (Array.isArray(g) ? g.length > 0 : true));
}

/** Per-request state shared by the steps below. */
interface Run {
  deps: PdDeps;
  input: PdInput;
  signal: AbortSignal;
  trace: PdTrace;
  obs: PdObserver;
}

/** Roles that may run the whole request (prefill and decode on one worker). */
const LOCAL_ROLES: readonly Role[] = ["decode", "aggregated"];

export async function runPd(deps: PdDeps, input: PdInput, signal: AbortSignal): Promise<PdResult> {
  const r: Run = { deps, input, signal, obs: deps.observer ?? NOOP, trace: { flow: input.flow, decision: null!, lookahead: null, legs: [], fallbacks: [] } };
  // The decider reads what a local prefill would compute: the decode leg's pick, on a dry run.
  const best = route(r, "decode", new Set(), LOCAL_ROLES, true);
  const tokens = input.route.promptTokens;
  const cached = Math.min(tokens, best?.decision.predictedCachedTokens ?? 0);
  const decision = decideDisagg({ uncachedTokens: tokens - cached, prefillQueue: deps.prefillQueue() }, deps.pd);
  r.trace.decision = decision;
  r.trace.lookahead = best ? legDecision(best.decision) : null;
  r.obs.decision(decision);
  // No worker can decode (in a cluster: the decode node is gone): a prefill would only hold blocks
  // nobody pulls, so the request fails at once with a clean 503.
  if (best === null) return { outcome: noWorker("decode"), trace: r.trace };
  const outcome = !decision.disaggregate ? await runLocal(r, new Set()) : input.flow === "vllm" ? await runVllm(r) : await runSglang(r);
  return { outcome, trace: r.trace };
}

function fallback(r: Run, reason: FallbackReason): void {
  r.trace.fallbacks.push(reason);
  r.obs.fallback(reason);
}

const noWorker = (what: string): LegOutcome => ({ kind: "failed", reason: "no_worker", message: `no ${what} worker available`, status: 503 });

function legDecision(d: Decision): LegDecision {
  return { policy: d.policy, chosen: d.chosen, reason: d.reason, candidates: d.candidates, filtered: d.filtered };
}

/** A leg's worker by its preset (router.pd.<leg>); null when none is left (404/503 from the router). */
function route(r: Run, leg: "prefill" | "decode", exclude: ReadonlySet<string>, role?: readonly Role[], dryRun = false): RouteResult | null {
  try {
    return r.deps.runner.route({ ...r.input.route, leg, exclude, ...(role ? { role } : {}) }, dryRun);
  } catch (e) {
    if (e instanceof HerdError && (e.status === 404 || e.status === 503)) return null;
    throw e;
  }
}

async function runLeg(r: Run, name: LegName, choice: RouteResult, body: string, stream: boolean, toClient: boolean, signal = r.signal): Promise<LegOutcome> {
  const worker = choice.worker;
  const startMs = r.deps.clock.now();
  const t = r.deps.timeouts;
  const commitTimeoutMs = t === undefined ? null : toClient ? t.firstTokenMs : t.prefillMs;
  const { input } = r;
  const leg: PinnedLeg = {
    name, route: input.route, endpoint: input.endpoint, body, stream, worker: { id: worker.id, url: worker.url }, toClient, commitTimeoutMs,
    ...(input.promptIds ? { promptTokens: input.promptIds } : {}),
    maxTokens: toClient ? input.maxTokens : 1,
  };
  let out: LegOutcome;
  try {
    out = signal.aborted ? { kind: "aborted" } : await r.deps.runner.run(leg, signal);
  } catch (e) {
    out = { kind: "failed", reason: "connect", message: e instanceof Error ? e.message : String(e), status: null };
  }
  if (signal.aborted && out.kind === "failed") out = { kind: "aborted" };
  const lt: LegTrace = { name, worker: worker.id, node: worker.node, outcome: out.kind, startMs, endMs: r.deps.clock.now(), decision: legDecision(choice.decision) };
  if (out.kind === "failed") lt.reason = out.message;
  r.trace.legs.push(lt);
  return out;
}

/** The whole request on a decode (or aggregated) worker: one retry elsewhere before a clean error. */
async function runLocal(r: Run, exclude: Set<string>): Promise<LegOutcome> {
  const body = JSON.stringify(vllmDecodeBody(r.input.body, null));
  let last: LegOutcome = noWorker("decode");
  for (let attempt = 0; attempt < 2; attempt++) {
    const choice = route(r, "decode", exclude, LOCAL_ROLES);
    if (choice === null) return last;
    if (attempt > 0) fallback(r, "local_retry");
    last = await runLeg(r, "local", choice, body, r.input.stream, true);
    if (last.kind !== "failed") return last;
    exclude.add(choice.worker.id);
  }
  return last;
}

interface Prefilled {
  params: Record<string, unknown> | null;
  worker: Readonly<Worker>;
  doneMs: number;
}

/** Prefill with one retry on another worker; null when both failed (or none was there). */
async function prefillPhase(r: Run, exclude: Set<string>): Promise<Prefilled | LegOutcome | null> {
  const body = JSON.stringify(vllmPrefillBody(r.input.body));
  for (let attempt = 0; attempt < 2; attempt++) {
    const choice = route(r, "prefill", exclude);
    if (choice === null) return null;
    if (attempt > 0) fallback(r, "prefill_retry");
    const t0 = r.deps.clock.now();
    const out = await runLeg(r, "prefill", choice, body, false, false);
    if (out.kind === "aborted" || out.kind === "committed") return out; // the request is over (or answered: an engine's 4xx)
    if (out.kind === "done") {
      const doneMs = r.deps.clock.now();
      r.obs.prefillDone(doneMs - t0);
      let parsed: unknown = null;
      try {
        parsed = JSON.parse(out.text);
      } catch {
        // an unreadable answer carries no params: decode runs the full request
      }
      return { params: kvTransferParamsOf(parsed), worker: choice.worker, doneMs };
    }
    exclude.add(choice.worker.id);
  }
  return null;
}

async function runVllm(r: Run): Promise<LegOutcome> {
  const prefillExclude = new Set<string>();
  const decodeExclude = new Set<string>();
  let last: LegOutcome = noWorker("decode");
  for (let round = 0; round < 2; round++) {
    const p = await prefillPhase(r, prefillExclude);
    if (p !== null && "kind" in p) return p; // aborted, or answered
    if (p === null) {
      fallback(r, "prefill_failed_local");
      return runLocal(r, decodeExclude);
    }
    if (p.params === null) fallback(r, "no_transfer_params");
    const body = JSON.stringify(vllmDecodeBody(r.input.body, p.params));
    for (let attempt = 0; attempt < 2; attempt++) {
      const choice = route(r, "decode", decodeExclude);
      if (choice === null) break;
      if (attempt > 0) fallback(r, "decode_retry");
      last = await runLeg(r, "decode", choice, body, r.input.stream, true);
      if (last.kind === "committed") {
        r.obs.transferToFirstToken(r.deps.clock.now() - p.doneMs);
        r.obs.pair(p.worker.node, choice.worker.node);
      }
      if (last.kind === "aborted" && holdsBlocks(p.params)) r.obs.abandonedPrefill(p.worker.id);
      if (last.kind !== "failed") return last;
      decodeExclude.add(choice.worker.id);
    }
    if (holdsBlocks(p.params)) r.obs.abandonedPrefill(p.worker.id);
    if (round > 0) break;
    // The held blocks are gone or unreachable: prefill again, elsewhere when possible.
    fallback(r, "decode_redo_prefill");
    if (route(r, "prefill", new Set([...prefillExclude, p.worker.id]), undefined, true) !== null) prefillExclude.add(p.worker.id);
    if (route(r, "decode", decodeExclude, undefined, true) === null) decodeExclude.clear();
  }
  return last;
}

/** SGLang: both legs at once with one bootstrap room; two pairs at most, then local prefill. */
async function runSglang(r: Run): Promise<LegOutcome> {
  const prefillExclude = new Set<string>();
  const decodeExclude = new Set<string>();
  let retry: FallbackReason | null = null;
  for (let attempt = 0; attempt < 2; attempt++) {
    const pc = route(r, "prefill", prefillExclude);
    const dc = pc === null ? null : route(r, "decode", decodeExclude);
    if (pc === null || dc === null) break;
    if (retry !== null) fallback(r, retry);
    const body = sglangPdBody(r.input.body, pc.worker.url, r.deps.bootstrapPort?.(pc.worker) ?? null, bootstrapRoom(r.deps.rng));
    const pair = new AbortController();
    const onAbort = () => pair.abort();
    r.signal.addEventListener("abort", onAbort, { once: true });
    const t0 = r.deps.clock.now();
    const pLeg = runLeg(r, "prefill", pc, body, false, false, pair.signal);
    const dLeg = runLeg(r, "decode", dc, body, r.input.stream, true, pair.signal);
    // A prefill that fails first dooms its decode (it would wait for a bootstrap that never comes).
    const first = await Promise.race([dLeg.then((o) => ({ from: "d" as const, o })), pLeg.then((o) => ({ from: "p" as const, o }))]);
    if (first.from === "p" && first.o.kind === "failed") pair.abort();
    void pLeg.then((o) => o.kind === "done" && r.obs.prefillDone(r.deps.clock.now() - t0));
    const d = await dLeg;
    if (d.kind === "committed") {
      r.obs.pair(pc.worker.node, dc.worker.node);
      return d; // the prefill leg drains on its own; the client's disconnect still aborts it
    }
    r.signal.removeEventListener("abort", onAbort);
    if (r.signal.aborted) return { kind: "aborted" };
    pair.abort();
    const prefillFailed = first.from === "p" && first.o.kind === "failed";
    if (prefillFailed) prefillExclude.add(pc.worker.id);
    else decodeExclude.add(dc.worker.id);
    retry = prefillFailed ? "prefill_retry" : "decode_retry";
  }
  fallback(r, "prefill_failed_local");
  // A decode that failed inside a pair may have failed on the bootstrap, not on its own: when
  // every decode worker is excluded, the local prefill may go to any of them again.
  const left = route(r, "decode", decodeExclude, LOCAL_ROLES, true) !== null;
  return runLocal(r, left ? decodeExclude : new Set());
}
