// The router facade the frontend calls: filters → policy → decision, in-flight leases, the retry
// budget, and hooks for metrics. Everything here is synchronous and I/O-free; the frontend does the
// HTTP. Typical use per request:
//
//   const { worker, decision } = router.route(req);   // throws HerdError 404 / 503
//   const lease = router.book(worker.id, req.promptTokens);   // same tick as route()
//   try { … relay; on first chunk lease.firstToken() … } finally { lease.release(); }
//   on failure before the first byte: if (router.allowRetry(attempt, failure)) route again with
//   exclude = the workers that failed.
import type { Clock } from "../core/clock.ts";
import { HerdError, errorMessage, invariant, unavailable } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { SeededRng, randomSeed, type Rng } from "../core/rng.ts";
import type { RouterConfig } from "../config/types.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { Worker } from "../workers/worker.ts";
import { BASE_FILTERS } from "./pipeline/filters.ts";
import { NEEDS_KEYS, unionNeeds, type Needs } from "./pipeline/types.ts";
import { LoadBook, type BookedPrompt, type Lease, type PrefillLoad } from "./lease.ts";
import type { KvIndex } from "../kv/indexer.ts";
import { policyFactory, POLICY_FACTORIES } from "./policies/index.ts";
import { LEG_PRESETS, LEG_ROLES, type LegPresetName } from "./policies/pd-legs.ts";
import { RetryBudget, retryable, type Failure } from "./retry.ts";
import { OutlierDetector } from "./outlier.ts";
import { evidenceFilters, ejectionOf } from "./evidence.ts";
import type { Decision, Filter, FilteredOut, LatencySample, Policy, RouteRequest } from "./types.ts";

export interface RouteResult {
  worker: Readonly<Worker>;
  decision: Decision;
}

/** Optional hooks (metrics, tracing). Every method is optional; a throwing observer is logged. */
export interface RouterObserver {
  /** A routing decision was made (not called for explain). `elapsedMs` is on the router's clock. */
  decision?(d: Decision, elapsedMs: number): void;
  /** A request could not be routed. */
  rejected?(model: string, code: "model_not_found" | "no_worker_available"): void;
  /** A worker's in-flight count changed to `n`. */
  inFlight?(workerId: string, n: number): void;
  /** A retry was asked for: allowed, or refused (not retryable, attempts or budget exhausted). */
  retry?(allowed: boolean, reason: "allowed" | "not_retryable" | "budget"): void;
  /** A request whose decision carried a latency forecast (Pick.latency) had its first token. */
  latency?(sample: LatencySample): void;
}

/** An observer method's arguments (each takes at most two). */
type ObserverArgs<K extends keyof RouterObserver> = Parameters<NonNullable<RouterObserver[K]>>;

export interface RouterOptions {
  config: RouterConfig;
  registry: WorkerRegistry;
  clock: Clock;
  /** Defaults to a SeededRng from `seed`. */
  rng?: Rng;
  /** Overrides config.seed (e.g. the daemon's one seed); 0 = a random seed, reported as `router.seed`. */
  seed?: number;
  log?: Logger;
  /** Overrides config.policy (tests, benchmarks, the KV issue's pipelines). */
  policy?: Policy;
  /** Base filters (default BASE_FILTERS: model, state, role, excluded); what they drop is a 503. */
  filters?: readonly Filter[];
  /** The event-fed block index for the `kv` policy (src/kv); shared with every other reader. */
  kvIndex?: KvIndex;
  /** Ejections from failures (outlier.ts); pass the same one to a reload's new Router. Default: a fresh one. */
  outliers?: OutlierDetector;
  /** This node's name: a retry after a peer's failure prefers its workers. */
  self?: string;
  /** True while this node's cluster view is stale (cannot reach etcd / a quorum): prefer local workers. */
  isolated?: () => boolean;
}

/** Largest SLO a request header may ask for (1 h); larger values are cut to it. */
export const SLO_HEADER_MAX_MS = 3_600_000;

/** The SLO headers and the RouteRequest field each sets (hoisted: sloFrom runs per request). */
const SLO_HEADERS = [["x-slo-ttft-ms", "sloTtftMs"], ["x-slo-itl-ms", "sloItlMs"]] as const;

/** Longest session id honoured; longer header values are cut (bounded memory in ring lookups). */
export const SESSION_ID_MAX_CHARS = 256;

export class Router {
  readonly policy: Policy;
  /** The P/D legs' policies (RouteRequest.leg): `pd-prefill` and `pd-decode`, from router.pd. */
  readonly legPolicies: Readonly<Record<LegPresetName, Policy>>;
  /**
   * The seed the router's Rng was built from (config.seed, or a random one when that is 0): log it,
   * and a run's routing decisions can be replayed with `router.seed` set to it.
   */
  readonly seed: number;
  /**
   * The request inputs routing reads (union over the base filters and the policy's stages): e.g.
   * `needs.blockHashes` says whether every request must be tokenized and hashed (src/preprocess).
   */
  readonly needs: Readonly<Required<Needs>>;
  readonly retryBudget: RetryBudget;
  readonly sessionHeader: string;
  /** Workers and peer nodes ejected after failures (passive outlier detection, outlier.ts). */
  readonly outliers: OutlierDetector;
  private readonly self: string | null;
  private readonly isolated: () => boolean;
  private readonly registry: WorkerRegistry;
  private readonly clock: Clock;
  private readonly rng: Rng;
  /** Explain draws from its own stream so /admin/route/explain never shifts live routing. */
  private readonly explainRng: Rng;
  private readonly log: Logger | undefined;
  private readonly filters: readonly Filter[];
  private readonly loads: LoadBook;
  private readonly observers = new Set<RouterObserver>();
  /** The observers as an array, rebuilt on (un)subscribe: notify walks it without a Set iterator per call. */
  private observerList: readonly RouterObserver[] = [];
  private unsubscribe: () => void = () => {};

  constructor(opts: RouterOptions) {
    this.registry = opts.registry;
    this.clock = opts.clock;
    this.log = opts.log;
    const seed = opts.seed ?? opts.config.seed;
    this.seed = seed !== 0 || opts.rng ? seed : randomSeed();
    this.rng = opts.rng ?? new SeededRng(this.seed);
    this.explainRng = this.rng.fork();
    this.filters = opts.filters ?? BASE_FILTERS;
    this.sessionHeader = opts.config.session.header.toLowerCase();
    this.retryBudget = new RetryBudget(opts.config.retry, opts.clock);
    this.outliers = opts.outliers ?? new OutlierDetector(opts.clock, opts.config.outlier);
    this.self = opts.self ?? null;
    this.isolated = opts.isolated ?? (() => false);
    this.loads = new LoadBook(opts.registry, (id, n) => this.notify("inFlight", id, n), () => opts.clock.now());
    const loads = this.loads;
    const load = {
      prefilling: (id: string) => loads.prefillOf(id),
      prefillRemaining: (id: string, waiting?: number) => loads.prefillRemaining(id, waiting),
      activeBlocks: (id: string) => loads.activeBlocks(id),
      heldBlocks: (id: string) => loads.heldBlocks(id),
      activeOverlaps: (hashes: readonly bigint[]) => loads.activeOverlaps(hashes),
    };
    const deps = { load, ...(opts.kvIndex ? { kvIndex: opts.kvIndex } : {}) };
    if (opts.policy) this.policy = opts.policy;
    else {
      const f = policyFactory(opts.config.policy);
      if (!f) {
        // Only a hand-built config reaches this (the schema's enum is POLICIES, and every name in it
        // has a factory or policies/index.ts does not compile).
        const known = Object.keys(POLICY_FACTORIES).join(", ");
        throw new HerdError(500, "server_error", `unknown router.policy "${opts.config.policy}", expected one of: ${known}`, "config_error");
      }
      this.policy = f.create(opts.config, deps);
    }
    this.legPolicies = { prefill: LEG_PRESETS.prefill.create(opts.config, deps), decode: LEG_PRESETS.decode.create(opts.config, deps) };
    // A policy without declared needs (a hand-made one) is assumed to read everything.
    const all = Object.fromEntries(NEEDS_KEYS.map((k) => [k, true])) as Required<Needs>;
    this.needs = unionNeeds([...this.filters, { needs: this.policy.needs ?? all }]);
    // Needs are the main policy's: the frontend hashes prompts for it, and the leg presets use
    // the hashes when they are there (the default `kv` policy reads them).
    // A removed worker, or one whose engine restarted, holds none of what a policy remembers.
    const policies = this.policies();
    this.unsubscribe = opts.registry.onChange((c) => {
      if (c.type === "removed" || (c.type === "updated" && c.worker.restarts !== c.previous.restarts)) for (const p of policies) p.forgetWorker?.(c.worker.id);
      // A worker that left, or whose engine came back ready (a restart, or its health check passing
      // again: Envoy un-ejects on an active health check's success), is judged afresh.
      if (c.type === "removed" || (c.type === "updated" && c.worker.state === "ready" && (c.previous.state !== "ready" || c.worker.restarts !== c.previous.restarts)))
        this.outliers.forget("worker", c.worker.id);
    });
  }

  /** Pick a worker for a request. Throws HerdError 404 (model_not_found) or 503 (none ready). */
  route(req: RouteRequest): RouteResult {
    const t0 = this.clock.now();
    const result = this.decide(req, false);
    // One request per client request: a P/D request's prefill leg is not another one.
    if (req.exclude.size === 0 && req.leg !== "prefill") this.retryBudget.recordRequest();
    const elapsedMs = this.clock.now() - t0;
    this.notify("decision", result.decision, elapsedMs);
    // (the fields object only when the line is kept: this runs per request)
    if (this.log !== undefined && this.log.debugEnabled !== false) this.log.debug("routed", { model: req.model, policy: result.decision.policy, worker: result.worker.id, reason: result.decision.reason });
    return result;
  }

  /** What route() would answer, without changing any state (for /admin/route/explain). */
  explain(req: RouteRequest): RouteResult {
    return this.decide(req, true);
  }

  /** route() then book() in one call, so no await can slip between them. */
  routeAndBook(req: RouteRequest): RouteResult & { lease: Lease } {
    const r = this.route(req);
    // Prefill load is what the chosen worker still has to compute: its predicted overlap is not.
    const cachedTokens = r.decision.predictedCachedTokens ?? 0;
    const prompt = req.blockHashes ? { blockHashes: req.blockHashes, blockSize: req.blockSize ?? 16, cachedTokens } : undefined;
    const lease = this.book(r.worker.id, req.promptTokens, prompt);
    const forecast = r.decision.latency;
    return { ...r, lease: forecast ? this.measuring(lease, forecast.rawTtftMs, req.leg ? this.legPolicies[req.leg] : this.policy) : lease };
  }

  /** The lease, whose first token feeds booking → first token back to the policy that forecast it. */
  private measuring(lease: Lease, predictedTtftMs: number, policy: Policy): Lease {
    const bookedMs = this.clock.now();
    const firstToken = (): void => {
      if (!lease.prefilling) return lease.firstToken();
      lease.firstToken();
      const sample: LatencySample = { workerId: lease.workerId, predictedTtftMs, measuredTtftMs: this.clock.now() - bookedMs };
      policy.learn?.(sample);
      this.notify("latency", sample);
    };
    return {
      get workerId() { return lease.workerId; },
      get promptTokens() { return lease.promptTokens; },
      get promptBlocks() { return lease.promptBlocks; },
      get prefilling() { return lease.prefilling; },
      get released() { return lease.released; },
      firstToken,
      release: () => lease.release(),
    };
  }

  /**
   * Count a request as in flight on a worker until the returned lease is released. With `prompt`
   * its KV blocks count as active on the worker (the KV-aware cost's decode term) until release.
   */
  book(workerId: string, promptTokens = 0, prompt?: BookedPrompt): Lease {
    return this.loads.book(workerId, promptTokens, prompt);
  }

  /** Distinct KV blocks of the requests in flight on a worker (a shared prefix counts once). */
  activeBlocks(workerId: string): number {
    return this.loads.activeBlocks(workerId);
  }

  inFlight(workerId: string): number {
    return this.loads.inFlight(workerId);
  }

  /** Requests (and their prompt tokens) booked on a worker that have not had their first token. */
  prefilling(workerId: string): PrefillLoad {
    return this.loads.prefillOf(workerId);
  }

  /**
   * May this failed attempt be retried on another worker? `attempt` is the retry's number (1 for
   * the first retry). Checks the failure kind (never after the first byte), router.retry.attempts
   * and the retry budget; an allowed retry is counted against the budget.
   */
  allowRetry(attempt: number, failure: Failure): boolean {
    if (!retryable(failure)) {
      this.notify("retry", false, "not_retryable");
      return false;
    }
    const ok = this.retryBudget.tryAcquire(attempt, failure.dead === true && this.outliers.config.enabled);
    this.notify("retry", ok, ok ? "allowed" : "budget");
    return ok;
  }

  /**
   * Evidence from an attempt (Ticket.upstreamFailed → the frontend's recorder): a failure that shows
   * the target cannot serve ejects it at once (evidence.ts says which reasons, and whom they eject).
   */
  reportFailure(workerId: string, reason: string, detail = ""): void {
    const w = this.registry.get(workerId);
    const target = ejectionOf(reason, workerId, w?.node ?? null, this.self);
    if (target) this.outliers.failed(target.kind, target.id, detail ? `${reason}: ${detail}` : reason);
  }

  /** The worker answered (first token or a complete answer): a re-admission probe succeeded. */
  reportSuccess(workerId: string): void {
    this.outliers.succeeded("worker", workerId);
    const node = this.registry.get(workerId)?.node;
    if (node !== undefined) this.outliers.succeeded("node", node);
  }

  /** The session id from request headers (the configured header), trimmed and bounded; null if absent. */
  sessionIdFrom(headers: Headers | Readonly<Record<string, string | undefined>>): string | null {
    let v: string | null | undefined;
    if (headers instanceof Headers) v = headers.get(this.sessionHeader);
    else {
      v = headers[this.sessionHeader];
      if (v === undefined) {
        for (const [k, val] of Object.entries(headers)) if (k.toLowerCase() === this.sessionHeader) v = val;
      }
    }
    const s = v?.trim();
    return s ? s.slice(0, SESSION_ID_MAX_CHARS) : null;
  }

  /**
   * The request's SLO from x-slo-ttft-ms / x-slo-itl-ms (RouteRequest.sloTtftMs / sloItlMs): absent
   * headers leave the field out (the model's default applies); a value that is not a positive
   * number of ms is a 400; one above SLO_HEADER_MAX_MS is cut to it.
   */
  sloFrom(headers: Headers): Pick<RouteRequest, "sloTtftMs" | "sloItlMs"> {
    const out: Pick<RouteRequest, "sloTtftMs" | "sloItlMs"> = {};
    for (const [name, key] of SLO_HEADERS) {
      const raw = headers.get(name);
      if (raw === null) continue;
      const v = Number(raw.trim().slice(0, 32));
      if (raw.trim() === "" || !Number.isFinite(v) || v <= 0) {
        throw new HerdError(400, "invalid_request_error", `${name} must be a positive number of milliseconds, got ${JSON.stringify(raw.slice(0, 32))}`, "invalid_slo");
      }
      out[key] = Math.min(SLO_HEADER_MAX_MS, v);
    }
    return out;
  }

  /** The router is being replaced (reload) or the daemon stops: the policy drops its subscriptions. */
  close(): void {
    this.unsubscribe();
    for (const p of this.policies()) p.close?.();
  }

  private policies(): Policy[] {
    return [this.policy, this.legPolicies.prefill, this.legPolicies.decode];
  }

  /** Subscribe to routing events; returns the unsubscribe function. */
  observe(observer: RouterObserver): () => void {
    this.observers.add(observer);
    this.observerList = [...this.observers];
    return () => {
      this.observers.delete(observer);
      this.observerList = [...this.observers];
    };
  }

  private decide(req: RouteRequest, dryRun: boolean): RouteResult {
    const all = this.registry.ofModel(req.model);
    if (all.length === 0) {
      if (!dryRun) this.notify("rejected", req.model, "model_not_found");
      throw new HerdError(404, "invalid_request_error", `The model \`${req.model}\` does not exist.`, "model_not_found");
    }
    const filtered: FilteredOut[] = [];
    let candidates = all;
    const policy = req.leg ? this.legPolicies[req.leg] : this.policy;
    const facts = { req: req.leg && req.role === undefined ? { ...req, role: LEG_ROLES[req.leg] } : req };
    for (const f of this.filters) {
      const keep = f.accepts ? null : f.keep(candidates, facts);
      // A filter that keeps every candidate (the usual case) leaves the array as it is: no copy per filter.
      let kept: Readonly<Worker>[] | null = null;
      for (let i = 0; i < candidates.length; i++) {
        const w = candidates[i]!;
        if (keep ? keep.has(w.id) : f.accepts!(w, facts)) kept?.push(w);
        else {
          kept ??= candidates.slice(0, i);
          filtered.push({ worker: w.id, node: w.node, filter: f.type });
        }
      }
      if (kept !== null) candidates = kept;
    }
    // Evidence filters (ejected targets, the failed node on a retry, local first): guards that never
    // empty the set — with every candidate ejected, trying one beats a certain 503.
    if (candidates.length > 0) candidates = evidenceFilters(candidates, filtered, { req, outliers: this.outliers, registry: this.registry, self: this.self, isolated: this.isolated() });
    if (candidates.length === 0) {
      if (!dryRun) this.notify("rejected", req.model, "no_worker_available");
      const starting = all.some((w) => w.state === "starting");
      throw unavailable(`no worker ready for model \`${req.model}\` (${summarise(all, filtered)})`, "no_worker_available", starting ? 5 : 1);
    }
    const pick = policy.pick(facts.req, candidates, { rng: dryRun ? this.explainRng : this.rng, nowMs: this.clock.now(), dryRun });
    const worker = candidates.find((w) => w.id === pick.chosen);
    invariant(worker, `policy ${policy.name} chose ${pick.chosen}, which is not a candidate`);
    if (!dryRun) {
      // A probing target gets this request as its probe; nobody else goes there until it reports.
      this.outliers.routed("worker", worker.id);
      this.outliers.routed("node", worker.node);
    }
    return { worker, decision: { policy: policy.name, ...pick, filtered } };
  }

  /** Tell every observer of `event` (no closure per call: decision and inFlight run per request, bench/frontend-allocs.ts). */
  private notify<K extends keyof RouterObserver>(event: K, a: ObserverArgs<K>[0], b?: ObserverArgs<K>[1]): void {
    const list = this.observerList;
    for (let i = 0; i < list.length; i++) {
      const o = list[i]!;
      try {
        (o[event] as ((x: unknown, y: unknown) => void) | undefined)?.call(o, a, b);
      } catch (e) {
        this.log?.error("router observer threw", { err: errorMessage(e) });
      }
    }
  }
}

/** "2 starting, 1 excluded": why nothing was left, for the 503 message. */
function summarise(all: readonly Readonly<Worker>[], filtered: readonly FilteredOut[]): string {
  const counts = new Map<string, number>();
  const state = new Map(all.map((w) => [w.id, w.state]));
  for (const f of filtered) {
    const key = f.filter === "state" ? (state.get(f.worker) ?? "unknown") : f.filter === "excluded" ? "failed this request" : `filtered by ${f.filter}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([k, n]) => `${n} ${k}`).join(", ");
}
