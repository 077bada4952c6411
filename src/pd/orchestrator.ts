// The P/D orchestrator: which worker prefills, which decodes, in what order, and what happens when
// a leg fails (issue 13). It decides and sequences; a LegExecutor sends each leg (over the request
// lifecycle's Upstream in herd, over fetch in tests) and reports how it ended.
//
// vLLM flow (prefill first, as vLLM's toy proxy and Dynamo do; legs.ts builds the bodies):
//   prefill leg (1 token, not streamed) → its kv_transfer_params → decode leg (the client's body
//   with them), whose answer goes to the client. Same X-Request-Id on both legs.
// SGLang flow (mini_lb): one body with bootstrap_host/port/room sent to both at once; the decode
//   answer goes to the client, the prefill answer is drained.
// Failures:
//   prefill fails or times out  → one retry on another prefill worker, then local prefill on the
//                                 decode worker (the client's body, no transfer);
//   decode fails before its first token → another decode worker with the same params (the prefill
//                                 side still holds the blocks until its lease ends), else redo from
//                                 prefill once (on another prefill worker when there is one);
//   client disconnect           → the signal aborts the running leg(s); nothing is retried.
// Conditional disaggregation (decider.ts) runs first: short uncached prompts and a saturated prefill
// pool prefill locally. Every choice, fallback and leg lands in the trace (explain) and the observer
// (metrics).
import type { Clock } from "../core/clock.ts";
import type { Rng } from "../core/rng.ts";
import type { PdConfig } from "../config/types.ts";
import type { CostKnobs } from "../router/cost.ts";
import { type Choice, chooseDecode, choosePrefill, type PdCandidate, uncachedTokens } from "./choose.ts";
import { type DisaggDecision, decideDisagg } from "./decider.ts";
import { bootstrapRoom, kvTransferParamsOf, sglangPdBody, vllmDecodeBody, vllmPrefillBody } from "./legs.ts";

export type PdFlow = "vllm" | "sglang";
export type LegName = "prefill" | "decode" | "local";

export interface PdLeg {
  name: LegName;
  worker: PdCandidate;
  endpoint: "chat" | "completion";
  /** The exact JSON text to send. */
  body: string;
  stream: boolean;
  /** The client's request id: X-Request-Id on every leg. */
  requestId: string;
  /** The answer goes to the client (commit point: first token, or the whole 200 answer). */
  toClient: boolean;
  /**
   * The executor reports `failed` (reason "timeout") when the leg has not reached its commit point
   * (a leg not for the client: its whole answer) within this; null = the executor's own bound.
   * A P/D leg's timeout is retried like any failure (issue 13: "prefill fails or times out").
   */
  commitTimeoutMs: number | null;
}

export type LegOutcome =
  /** A leg not for the client, read whole. */
  | { kind: "done"; text: string }
  /** The client leg passed its commit point; `answer` is the executor's (a relay, a response). */
  | { kind: "committed"; answer: unknown }
  /** Failed before the commit point (refused, 5xx, error event first, timeout). */
  | { kind: "failed"; reason: string; status: number | null }
  | { kind: "aborted" };

export interface LegExecutor {
  run(leg: PdLeg, signal: AbortSignal): Promise<LegOutcome>;
}

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
  /** A prefill answered with held blocks a decode leg will pull (the planner's pending transfers). */
  transferOwed?(prefillWorker: string): void;
  /** A decode leg committed with those blocks: the pull is done. */
  transferPulled?(prefillWorker: string): void;
}

export interface LegTrace {
  name: LegName;
  worker: string;
  node: string;
  outcome: LegOutcome["kind"];
  reason?: string;
  startMs: number;
  endMs: number;
  /** The candidates' terms that chose this worker. */
  chosenBy: Choice["explain"];
}

export interface PdTrace {
  flow: PdFlow;
  decision: DisaggDecision;
  legs: LegTrace[];
  fallbacks: FallbackReason[];
}

export interface PdDeps {
  exec: LegExecutor;
  /** Ready workers of the request's model with this prompt's overlap and their load. */
  candidates: () => readonly PdCandidate[];
  pd: Pick<PdConfig, "min_prefill_tokens" | "prefill_queue_max">;
  knobs: CostKnobs;
  rng: Rng;
  clock: Clock;
  observer?: PdObserver;
  /** Commit bounds per leg: the prefill answer, and the client leg's first token. */
  timeouts?: { prefillMs: number; firstTokenMs: number };
}

export interface PdInput {
  requestId: string;
  endpoint: "chat" | "completion";
  /** The client's checked body. */
  body: Record<string, unknown>;
  stream: boolean;
  promptTokens: number;
  blockSize: number;
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
  cands: readonly PdCandidate[];
}

export async function runPd(deps: PdDeps, input: PdInput, signal: AbortSignal): Promise<PdResult> {
  const cands = deps.candidates();
  const req = { promptTokens: input.promptTokens, blockSize: input.blockSize };
  const bestDecode = chooseDecode(cands, req, new Set(), deps.rng, ["decode", "aggregated"]).pick;
  const prefillQueue = cands.filter((c) => c.role === "prefill" && (input.flow === "vllm" || c.bootstrapPort !== null)).map((c) => c.waiting);
  const decision = decideDisagg({ uncachedTokens: uncachedTokens(bestDecode, req), prefillQueue }, deps.pd);
  const obs = deps.observer ?? NOOP;
  obs.decision(decision);
  const r: Run = { deps, input, signal, obs, cands, trace: { flow: input.flow, decision, legs: [], fallbacks: [] } };
  // No worker can decode (in a cluster: the decode node is gone): a prefill would only hold blocks
  // nobody pulls, so the request fails at once with a clean 503.
  if (bestDecode === null) return { outcome: noWorker("decode"), trace: r.trace };
  const outcome = !decision.disaggregate ? await runLocal(r, new Set()) : input.flow === "vllm" ? await runVllm(r) : await runSglang(r);
  return { outcome, trace: r.trace };
}

function fallback(r: Run, reason: FallbackReason): void {
  r.trace.fallbacks.push(reason);
  r.obs.fallback(reason);
}

const shape = (r: Run) => ({ promptTokens: r.input.promptTokens, blockSize: r.input.blockSize });
const noWorker = (what: string): LegOutcome => ({ kind: "failed", reason: `no ${what} worker available`, status: 503 });

async function runLeg(r: Run, name: LegName, choice: Choice, body: string, stream: boolean, toClient: boolean, signal = r.signal): Promise<LegOutcome> {
  const worker = choice.pick!;
  const startMs = r.deps.clock.now();
  const t = r.deps.timeouts;
  const commitTimeoutMs = t === undefined ? null : toClient ? t.firstTokenMs : t.prefillMs;
  const leg: PdLeg = { name, worker, endpoint: r.input.endpoint, body, stream, requestId: r.input.requestId, toClient, commitTimeoutMs };
  let out: LegOutcome;
  try {
    out = signal.aborted ? { kind: "aborted" } : await r.deps.exec.run(leg, signal);
  } catch (e) {
    out = { kind: "failed", reason: e instanceof Error ? e.message : String(e), status: null };
  }
  if (signal.aborted && out.kind === "failed") out = { kind: "aborted" };
  const lt: LegTrace = { name, worker: worker.id, node: worker.node, outcome: out.kind, startMs, endMs: r.deps.clock.now(), chosenBy: choice.explain };
  if (out.kind === "failed") lt.reason = out.reason;
  r.trace.legs.push(lt);
  return out;
}

/** The whole request on a decode (or aggregated) worker: one retry elsewhere before a clean error. */
async function runLocal(r: Run, exclude: Set<string>): Promise<LegOutcome> {
  const body = JSON.stringify(vllmDecodeBody(r.input.body, null));
  let last: LegOutcome = noWorker("decode");
  for (let attempt = 0; attempt < 2; attempt++) {
    const choice = chooseDecode(r.cands, shape(r), exclude, r.deps.rng, ["decode", "aggregated"]);
    if (choice.pick === null) return last;
    if (attempt > 0) fallback(r, "local_retry");
    last = await runLeg(r, "local", choice, body, r.input.stream, true);
    if (last.kind !== "failed") return last;
    exclude.add(choice.pick.id);
  }
  return last;
}

/** Prefill with one retry on another worker; null when both failed (or none was there). */
async function prefillPhase(r: Run, exclude: Set<string>): Promise<{ params: Record<string, unknown> | null; worker: PdCandidate; doneMs: number } | LegOutcome | null> {
  const body = JSON.stringify(vllmPrefillBody(r.input.body));
  for (let attempt = 0; attempt < 2; attempt++) {
    const choice = choosePrefill(r.cands, shape(r), r.deps.knobs, exclude, r.deps.rng);
    if (choice.pick === null) return null;
    if (attempt > 0) fallback(r, "prefill_retry");
    const t0 = r.deps.clock.now();
    const out = await runLeg(r, "prefill", choice, body, false, false);
    if (out.kind === "aborted") return out;
    if (out.kind === "done") {
      const doneMs = r.deps.clock.now();
      r.obs.prefillDone(doneMs - t0);
      let parsed: unknown = null;
      try {
        parsed = JSON.parse(out.text);
      } catch {
        // an unreadable answer carries no params: decode runs the full request
      }
      return { params: kvTransferParamsOf(parsed), worker: choice.pick, doneMs };
    }
    exclude.add(choice.pick.id);
  }
  return null;
}

async function runVllm(r: Run): Promise<LegOutcome> {
  const prefillExclude = new Set<string>();
  const decodeExclude = new Set<string>();
  let last: LegOutcome = noWorker("decode");
  for (let round = 0; round < 2; round++) {
    const p = await prefillPhase(r, prefillExclude);
    if (p !== null && "kind" in p) return p; // aborted
    if (p === null) {
      fallback(r, "prefill_failed_local");
      return runLocal(r, decodeExclude);
    }
    if (p.params === null) fallback(r, "no_transfer_params");
    if (holdsBlocks(p.params)) r.obs.transferOwed?.(p.worker.id);
    const body = JSON.stringify(vllmDecodeBody(r.input.body, p.params));
    for (let attempt = 0; attempt < 2; attempt++) {
      const choice = chooseDecode(r.cands, shape(r), decodeExclude, r.deps.rng);
      if (choice.pick === null) break;
      if (attempt > 0) fallback(r, "decode_retry");
      last = await runLeg(r, "decode", choice, body, r.input.stream, true);
      if (last.kind === "committed") {
        r.obs.transferToFirstToken(r.deps.clock.now() - p.doneMs);
        r.obs.pair(p.worker.node, choice.pick.node);
        if (holdsBlocks(p.params)) r.obs.transferPulled?.(p.worker.id);
      }
      if (last.kind === "aborted" && holdsBlocks(p.params)) r.obs.abandonedPrefill(p.worker.id);
      if (last.kind !== "failed") return last;
      decodeExclude.add(choice.pick.id);
    }
    if (holdsBlocks(p.params)) r.obs.abandonedPrefill(p.worker.id);
    if (round > 0) break;
    // The held blocks are gone or unreachable: prefill again, elsewhere when possible.
    fallback(r, "decode_redo_prefill");
    if (r.cands.some((c) => c.role === "prefill" && c.id !== p.worker.id && !prefillExclude.has(c.id))) prefillExclude.add(p.worker.id);
    if (!r.cands.some((c) => c.role === "decode" && !decodeExclude.has(c.id))) decodeExclude.clear();
  }
  return last;
}

/** SGLang: both legs at once with one bootstrap room; two pairs at most, then local prefill. */
async function runSglang(r: Run): Promise<LegOutcome> {
  const prefillExclude = new Set<string>();
  const decodeExclude = new Set<string>();
  let retry: FallbackReason | null = null;
  for (let attempt = 0; attempt < 2; attempt++) {
    const pc = choosePrefill(r.cands.filter((c) => c.bootstrapPort !== null), shape(r), r.deps.knobs, prefillExclude, r.deps.rng);
    const dc = chooseDecode(r.cands, shape(r), decodeExclude, r.deps.rng);
    if (pc.pick === null || dc.pick === null) break;
    if (retry !== null) fallback(r, retry);
    const body = sglangPdBody(r.input.body, pc.pick.url, pc.pick.bootstrapPort, bootstrapRoom(r.deps.rng));
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
      r.obs.pair(pc.pick.node, dc.pick.node);
      return d; // the prefill leg drains on its own; the client's disconnect still aborts it
    }
    r.signal.removeEventListener("abort", onAbort);
    if (r.signal.aborted) return { kind: "aborted" };
    pair.abort();
    const prefillFailed = first.from === "p" && first.o.kind === "failed";
    if (prefillFailed) prefillExclude.add(pc.pick.id);
    else decodeExclude.add(dc.pick.id);
    retry = prefillFailed ? "prefill_retry" : "decode_retry";
  }
  fallback(r, "prefill_failed_local");
  // A decode that failed inside a pair may have failed on the bootstrap, not on its own: when
  // every decode worker is excluded, the local prefill may go to any of them again.
  const left = r.cands.some((c) => (c.role === "decode" || c.role === "aggregated") && !decodeExclude.has(c.id));
  return runLocal(r, left ? decodeExclude : new Set());
}
