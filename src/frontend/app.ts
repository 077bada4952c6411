// The OpenAI-compatible HTTP surface (hono). Each inference request gets a ticket (src/request) at
// arrival and goes through a fixed order, cheap refusals first:
//   draining → 503 + Retry-After; API key → 401; declared Content-Length → 413/400; body within
//   frontend.body_timeout_ms → 408 (connection closed); max_in_flight → 429 (a slot is taken only
//   once the body is complete); JSON + fields → 400; then the request lifecycle (src/request:
//   unknown model → 404, no ready worker → 503, route → attempt → retry → commit → relay).
// /health is readiness (200 only when not draining and at least one worker is ready, else 503 with
// the reason); /livez is liveness (200 while the process runs, also while draining).
import { Hono, type Context } from "hono";
import { wallClockMs, type Clock } from "../core/clock.ts";
import { HerdError, errorMessage, unavailable } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { NOOP_SPAN, type Span, type Tracer } from "../core/trace.ts";
import type { Config } from "../config/types.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { HerdMetrics } from "../metrics/herd-metrics.ts";
import type { Router } from "../router/index.ts";
import { adminRoutes, type AdminBackend } from "../admin/routes.ts";
import { statusPageRoutes } from "../admin/status-page.ts";
import { KeySet } from "../http/auth.ts";
import { JsonGuard } from "../http/json-guard.ts";
import { LogLimiter } from "../http/log-limit.ts";
import { metricsDenied } from "../http/metrics-access.ts";
import type { Endpoint } from "../protocol/openai.ts";
import { policyNeedsPrompt, type PromptPreparer } from "../preprocess/shared.ts";
import { routeFields, type PreparedPrompt, type PromptInput } from "../preprocess/index.ts";
import { HttpUpstream } from "../request/http-upstream.ts";
import { refusal, runRequest, type Answer, type LifecycleDeps } from "../request/lifecycle.ts";
import { aggregatedPlan, type PlanBuilder } from "../request/plan.ts";
import { AbortCause, Admission, metricsRecorder, type Outcome, type Ticket } from "../request/ticket.ts";
import { decisionRecord, type RecordSink } from "../request/record.ts";
import { evidenceRecorder } from "../request/evidence.ts";
import { migrationConfig } from "../request/migrate.ts";
import type { Upstream } from "../request/upstream.ts";
import { ClientGone, type RequestGate } from "../request/gate.ts";
import type { AdminRoute } from "../http/admin-route.ts";
import { errorResponse, toResponse } from "./respond.ts";
import { ModelNames, checkEndpoint, isGeneration, maxTokensOf, modelNotFound, mountExtraRoutes } from "./endpoints.ts";
import { ResponsesStore, type PreparedResponses } from "./responses.ts";
import { ResponsesUpstream } from "./responses-upstream.ts";
import { answerLocally, type LocalTokenizers } from "./tokens.ts";
import { Tenants, type SharedBudgets } from "./tenants.ts";
import { FairQueue } from "./fair-queue.ts";
import { admitTenant } from "./tenant-admission.ts";
import { EnginePriorityUpstream, enginePriority } from "./engine-priority.ts";
import { TenantMetrics } from "../metrics/tenant-metrics.ts";
import { OnDemandLora } from "./lora.ts";

export { errorResponse } from "./respond.ts";

/** Per-request values the Bun.serve shell passes to the app. */
export interface ConnEnv {
  /** Remote address from server.requestIP(); null when unknown (tests calling app.fetch directly). */
  ip: string | null;
}
export type HonoEnv = { Bindings: ConnEnv };

export interface FrontendOptions {
  config: Config;
  registry: WorkerRegistry;
  router: Router;
  metrics: HerdMetrics;
  clock: Clock;
  log: Logger;
  /** Supervisor hooks for /admin (logs, drain); absent parts answer 501. */
  admin?: AdminBackend;
  /**
   * Tokenizes and hashes prompts (src/preprocess) for policies that read block hashes (kv, prefix);
   * without it, or under other policies, requests route on the character estimate alone.
   */
  prompts?: PromptPreparer;
  /** How legs reach workers (default: HTTP with the global fetch; tests: a sim upstream). */
  upstream?: Upstream<Uint8Array>;
  /** How a request becomes legs (default: one aggregated leg; P/D: prefill then decode). */
  plan?: PlanBuilder;
  /** Passed by every admitted request before routing (the planner's wake-on-request hold). */
  gate?: RequestGate;
  /** Admin endpoints contributed by other modules (the KV tier, the planner, the cluster). */
  adminRoutes?: readonly AdminRoute[];
  /** Request spans (src/core/trace.ts); default: none. */
  tracer?: Tracer;
  /** The models' own tokenizers, for /tokenize and /detokenize without an engine (tokens.ts). */
  tokenizers?: LocalTokenizers;
  /** Where each finished request's decision record goes (src/request/record.ts). */
  records?: RecordSink;
  /**
   * Whether a worker's engine schedules by the request `priority` field (the engine driver's
   * `requestPriority`); such workers get each leg's rank (engine-priority.ts). Absent: none do.
   */
  enginePriority?: (workerId: string) => boolean;
  /** Tenant budgets counted cluster-wide (src/cluster/quota.ts); absent: each node counts its own. */
  sharedBudgets?: SharedBudgets;
}

const REQUEST_ID = /^[\w.:-]{1,128}$/;
/** At most one "preprocessing failed" warning per this interval. */
const PREP_WARN_EVERY_MS = 10_000;
/** Status recorded for a client that hung up before it could be answered (nginx's convention). */
const CLIENT_CLOSED = 499;

export class Frontend {
  readonly app = new Hono<HonoEnv>();
  /** Admission slots and live tickets: the one in-flight count (drain, /admin status, abort). */
  readonly admission: Admission;
  /** Keys → tenants and their limits (tenants.ts); rebuilt on reload. */
  private tenants: Tenants;
  /** herd's queue in front of saturated models (fair-queue.ts). */
  readonly queue: FairQueue;
  private readonly tenantMetrics: TenantMetrics;
  /** Requests in flight → their model, tenant and class, for the engine priority of their legs (bounded by max_in_flight). */
  private readonly ranks = new Map<string, { model: string; tenant: string; priority: number }>();
  private readonly unwatchQueue: () => void;
  /** On-demand LoRA adapters: where each is loaded (lora.ts). */
  readonly lora: OnDemandLora;
  private readonly deps: LifecycleDeps<Uint8Array>;
  private readonly plan: PlanBuilder;
  private readonly unwatch: () => void;
  private unobserve: () => void;
  /** The running policy reads block hashes, so each request is preprocessed before routing. */
  private hashPrompts: boolean;
  /** Model names, aliases and LoRA adapter names → the configured model (endpoints.ts). */
  private names: ModelNames;
  /** Finished responses by id, for previous_response_id (responses.ts). */
  readonly responses: ResponsesStore;
  /** Bounded JSON parsing (issue 10): a body whose parse would hold the event loop is a 400 first. */
  readonly json = new JsonGuard();
  /** Requests refused before routing (a malformed Host): one line per interval, with the count. */
  private readonly refusedLog: LogLimiter;
  private prepWarnedAtMs = -Infinity;
  private leaving = false;
  private prepWarnSuppressed = 0;

  constructor(private readonly o: FrontendOptions) {
    this.names = new ModelNames(o.config);
    this.refusedLog = new LogLimiter(o.clock, PREP_WARN_EVERY_MS);
    this.responses = new ResponsesStore(o.config.frontend.responses_store_bytes);
    this.tenants = new Tenants(o.config.frontend.api_keys, o.clock, undefined, o.sharedBudgets);
    this.tenantMetrics = TenantMetrics.for(o.metrics);
    this.queue = new FairQueue(o.clock, () => this.o.config.frontend.queue, (model) => this.o.registry.list().filter((w) => w.model === model && w.state === "ready").length);
    this.unwatchQueue = o.registry.onChange(() => this.queue.poke());
    this.lora = new OnDemandLora({ registry: o.registry, clock: o.clock, log: o.log, config: () => this.o.config });
    const records = o.records;
    const toRecord = records ? (t: Ticket, out: Outcome) => records(decisionRecord(t, out, o.clock.now(), wallClockMs())) : undefined;
    // Failures and successes also feed the router's outlier detection (evidence beats membership).
    this.admission = new Admission(o.clock, evidenceRecorder(metricsRecorder(o.metrics, o.clock, toRecord), () => this.o.router), o.config.frontend.max_in_flight);
    this.deps = {
      router: o.router,
      // /v1/responses is translated to chat completions for engines without it (responses-upstream.ts).
      upstream: this.withEnginePriority(new ResponsesUpstream(o.upstream ?? new HttpUpstream(undefined, { clock: o.clock, firstByteTimeoutMs: () => this.o.config.frontend.engine_first_byte_timeout_ms }), (id) => o.registry.get(id)?.kind)),
      clock: o.clock,
      log: o.log,
      firstTokenTimeoutMs: o.config.frontend.first_token_timeout_ms,
      migration: migrationConfig(o.config),
      idleTimeoutMs: o.config.frontend.idle_timeout_ms,
    };
    this.plan = o.plan ?? aggregatedPlan;
    this.unwatch = this.admission.watch(o.registry);
    this.hashPrompts = o.prompts !== undefined && policyNeedsPrompt(o.router);
    this.unobserve = this.observe(o.router);
    this.routes();
  }

  /** Legs to engines that schedule by `priority` carry their request's rank (engine-priority.ts). */
  private withEnginePriority(up: Upstream<Uint8Array>): Upstream<Uint8Array> {
    const supports = this.o.enginePriority;
    if (!supports) return up;
    return new EnginePriorityUpstream(up, {
      supports,
      priorityOf: (id) => {
        const r = this.ranks.get(id);
        return r && enginePriority(r.priority, this.queue.overShare(r.model, r.tenant));
      },
    });
  }

  private observe(router: Router): () => void {
    const m = this.o.metrics;
    return router.observe({
      decision: (d) => {
        m.decision(d.policy, d.chosen);
        if (d.timings?.match_ms !== undefined) m.routingStage("match", d.timings.match_ms / 1000);
        if (d.timings?.score_ms !== undefined) m.routingStage("score", d.timings.score_ms / 1000);
      },
    });
  }

  /**
   * SIGHUP with a changed `router` section: requests admitted from now on route through `router`;
   * those already routed finish on their leases with the old one (the caller closes it).
   */
  swapRouter(router: Router): void {
    this.unobserve();
    this.o.router = router;
    this.deps.router = router;
    this.hashPrompts = this.o.prompts !== undefined && policyNeedsPrompt(router);
    this.unobserve = this.observe(router);
  }

  get isDraining(): boolean {
    return this.admission.draining;
  }

  /** Requests admitted and not yet finished (streams count until their last byte). */
  get inFlightCount(): number {
    return this.admission.size;
  }

  /**
   * Shutdown's first step (Dynamo's order: leave routing, grace, drain): /health turns 503 so load
   * balancers stop sending, but requests that still arrive (routed by peers or balancers that have
   * not noticed yet) are served; startDrain stops admitting after the grace.
   */
  startLeave(): void {
    this.leaving = true;
  }

  get isLeaving(): boolean {
    return this.leaving || this.admission.draining;
  }

  /** Stop admitting: /health turns 503 at once, new inference requests get 503 + Retry-After. */
  startDrain(): void {
    this.admission.draining = true;
  }

  /** Resolves true when nothing is in flight, or false after timeoutMs. */
  waitIdle(timeoutMs: number): Promise<boolean> {
    return this.admission.waitIdle(timeoutMs);
  }

  /**
   * SIGHUP reload (src/daemon/reload.ts decides which keys change): API keys, admin token, limits and
   * timeouts from `config.frontend` apply to requests admitted from now on.
   */
  applyConfig(config: Config): void {
    this.o.config = config;
    this.names = new ModelNames(config);
    this.tenants = new Tenants(config.frontend.api_keys, this.o.clock, undefined, this.o.sharedBudgets);
    this.admission.maxInFlight = config.frontend.max_in_flight;
    this.deps.firstTokenTimeoutMs = config.frontend.first_token_timeout_ms;
    this.deps.idleTimeoutMs = config.frontend.idle_timeout_ms;
    this.deps.migration = migrationConfig(config);
  }

  /**
   * A drain deadline passed (an engine's removal, or this node's shutdown): the requests on
   * `workerId` (every worker when absent) are aborted as `drain` — a committed chat stream or a
   * collected answer migrates to another worker (src/request/migrate.ts), an attempt before its
   * commit point is retried elsewhere, anything else ends as a failure would. Returns how many.
   */
  migrateAway(workerId?: string): number {
    const cause = new AbortCause("drain", workerId ? `worker ${workerId} reached its drain deadline` : "this node reached its drain deadline");
    if (workerId !== undefined) return this.admission.abortWorker(workerId, cause);
    const n = this.admission.size;
    this.admission.abortAll(cause);
    return n;
  }

  /** End every open upstream request (streams get an error event): the drain bound has passed. */
  abortAll(message = "herd is shutting down"): void {
    this.admission.abortAll(new AbortCause("shutdown", message));
  }

  close(): void {
    this.json.close();
    this.unwatch();
    this.unwatchQueue();
    this.lora.close();
    this.unobserve();
  }

  private routes(): void {
    const app = this.app;
    const { metrics, registry } = this.o;
    app.get("/livez", (c) => c.json({ status: "alive" }));
    app.get("/health", (c) => {
      const ready = registry.list().filter((w) => w.state === "ready").length;
      if (this.admission.draining) return c.json({ status: "draining", ready_workers: ready }, 503);
      if (this.leaving) return c.json({ status: "leaving", ready_workers: ready }, 503);
      if (ready === 0) return c.json({ status: "no_ready_worker", ready_workers: 0 }, 503);
      return c.json({ status: "ready", ready_workers: ready }, 200);
    });
    app.get("/metrics", (c) => {
      const denied = metricsDenied(this.o.config.frontend.metrics, c.env?.ip ?? null, c.req.header("authorization"), this.adminToken());
      return denied ? errorResponse(denied) : this.metricsPage();
    });
    app.get("/v1/models", (c) => {
      const denied = this.authFailure(c);
      if (denied) return errorResponse(denied);
      // Models with at least one ready worker: a model nobody can serve right now is not listed
      // (requests for it still get a precise 503 rather than a 404).
      const ready = new Set(registry.list().filter((w) => w.state === "ready").map((w) => w.model));
      const data: Record<string, unknown>[] = [];
      // Each served name of a ready model (vLLM lists every --served-model-name), aliases with root.
      for (const id of [...ready].sort()) {
        data.push({ id, object: "model", created: 0, owned_by: "herd" });
        for (const a of this.names.aliases(id)) data.push({ id: a, object: "model", created: 0, owned_by: "herd", root: id });
      }
      // Adapters of a ready model are listed too, with their parent, as vLLM lists them.
      for (const [id, model] of this.names.adapters()) if (ready.has(model)) data.push({ id, object: "model", created: 0, owned_by: "herd", parent: model });
      return c.json({ object: "list", data });
    });
    app.get("/v1/models/:id{.+}", (c) => {
      const denied = this.authFailure(c);
      if (denied) return errorResponse(denied);
      const id = c.req.param("id");
      const base = this.names.resolve(id).model;
      if (!registry.list().some((w) => w.state === "ready" && w.model === base)) return errorResponse(modelNotFound(id));
      return c.json({ id, object: "model", created: 0, owned_by: "herd" });
    });
    // The Bun.serve shell dispatches these two before hono (server.ts, `direct`); the routes stay
    // for app.fetch callers (tests, the in-process harnesses).
    app.post("/v1/chat/completions", (c) => this.inference(c.req.raw, "chat"));
    app.post("/v1/completions", (c) => this.inference(c.req.raw, "completions"));
    mountExtraRoutes(app, (c, endpoint) => this.inference(c.req.raw, endpoint));
    const o = this.o;
    app.route(
      "/admin",
      adminRoutes({
        get config() {
          return o.config; // a getter: applyConfig replaces it
        },
        registry,
        get router() {
          return o.router; // a getter: swapRouter replaces it
        },
        backend: this.o.admin,
        log: this.o.log,
        clock: this.o.clock,
        contributed: this.o.adminRoutes ?? [],
        json: this.json,
        status: () => ({ draining: this.admission.draining, in_flight: this.admission.size }),
      }),
    );
    // The status page (GET /, /ui/…), behind the admin access rule.
    app.route("/", statusPageRoutes(() => o.config));
    app.notFound((c) =>
      errorResponse(new HerdError(404, "not_found_error", `no route for ${c.req.method} ${new URL(c.req.url).pathname}`, "not_found")),
    );
    app.onError((e) => this.unhandled(e));
  }

  /** What hono's onError answers; also the direct inference dispatch's (server.ts). */
  unhandled(e: unknown): Response {
    if (e instanceof HerdError) return errorResponse(e);
    this.o.log.error("unhandled error in request", { err: errorMessage(e) });
    return errorResponse(new HerdError(500, "server_error", "internal error", "internal_error"));
  }

  /** Log a request the listener refused before the app saw it, at most once per 10 s (counted). */
  refused(why: string, fields: Record<string, string>): void {
    const line = this.refusedLog.take();
    if (line) this.o.log.warn(`request refused: ${why}`, { ...fields, suppressed: String(line.suppressed) });
  }

  /** The admin token as a KeySet, rebuilt when a reload changes it (frontend.metrics: token). */
  private adminToken(): KeySet {
    const t = this.o.config.frontend.admin_token;
    if (this.adminKeys?.text !== t) this.adminKeys = { text: t, keys: new KeySet(t ? [t] : []) };
    return this.adminKeys.keys;
  }
  private adminKeys: { text: string; keys: KeySet } | null = null;

  private authFailure(c: Context<HonoEnv>): HerdError | null {
    return this.keyFailure(c.req.header("authorization"));
  }

  private keyFailure(authorization: string | null | undefined): HerdError | null {
    if (this.tenants.identify(authorization ?? undefined) !== null) return null;
    this.o.metrics.reject("unauthorized");
    return new HerdError(401, "authentication_error", "missing or invalid API key (expected Authorization: Bearer <key>)", "invalid_api_key");
  }

  /** /metrics: its own small handler (access control wraps it here). */
  private async metricsPage(): Promise<Response> {
    const m = this.o.metrics;
    return new Response(await m.render(), { headers: { "content-type": m.contentType() } });
  }

  /**
   * An inference request (a POST to one of the routed endpoints), from the Bun.serve shell
   * directly for chat and completions (server.ts) or through hono for the others. Never rejects:
   * every failure is an answer.
   */
  async inference(req: Request, endpoint: Endpoint): Promise<Response> {
    const t = this.admission.ticket(req.signal);
    // The caller's W3C traceparent is continued (else a new trace); the span ends with the ticket.
    const tracer = this.o.tracer;
    if (tracer?.enabled) t.span = tracer.start("herd.request", req.headers.get("traceparent"), { "http.request.method": req.method, "url.path": new URL(req.url).pathname, "herd.node": this.o.config.node.name });
    const adm = t.span.child("herd.admission");
    const refused = this.refuseEarly(req, t);
    if (refused) return adm.end("refused"), refused;
    let body: { text: string; parsed: unknown };
    try {
      body = await this.readBody(req);
    } catch (e) {
      adm.end("body not read");
      return this.bodyFailed(req, t, e);
    }
    const admitted = t.admit();
    if (adm.recording) adm.set({ "herd.admitted": admitted, "herd.body_bytes": body.text.length });
    adm.end(admitted ? undefined : "too many in flight");
    if (!admitted) {
      const max = this.o.config.frontend.max_in_flight;
      t.release({ kind: "refused", status: 429, reason: "overloaded" });
      return errorResponse(new HerdError(429, "rate_limit_error", `too many requests in flight (limit ${max})`, "too_many_in_flight", null, { "retry-after": "1" }));
    }
    // A limited key's x-ratelimit-* headers go on every answer (tenant-admission.ts fills them).
    const limitHeaders: Record<string, string> = {};
    try {
      return withLimits(toResponse(await this.run(req, t, endpoint, body.text, body.parsed, limitHeaders)), limitHeaders);
    } catch (e) {
      if (e instanceof ClientGone) {
        t.release({ kind: "client_closed", phase: "before_first_token" });
        return new Response(null, { status: CLIENT_CLOSED });
      }
      if (!(e instanceof HerdError)) this.o.log.error("request failed", { err: errorMessage(e) });
      return withLimits(errorResponse((refusal(t, e) as { error: HerdError }).error), limitHeaders);
    }
  }

  /** Draining → 503, API key → 401: refusals that need nothing read. */
  private refuseEarly(req: Request, t: Ticket): Response | null {
    if (this.admission.draining) {
      t.release({ kind: "refused", status: 503, reason: "draining" });
      return errorResponse(unavailable("herd is draining (shutting down); retry on another instance", "draining", 1));
    }
    const denied = this.keyFailure(req.headers.get("authorization"));
    if (!denied) return null;
    t.release({ kind: "refused", status: 401, reason: null });
    return errorResponse(denied);
  }

  /**
   * The body under frontend.max_body_bytes and within frontend.body_timeout_ms of the headers, parsed
   * under the JSON bounds (a large body is checked and decoded off the event loop: http/json-guard.ts):
   * a body that does not arrive holds no slot (admission comes after it) and gets 408.
   */
  private readBody(req: Request): Promise<{ text: string; parsed: unknown }> {
    const f = this.o.config.frontend;
    const body_timeout_ms = f.body_timeout_ms;
    const read = this.json.readJson(req, f.max_body_bytes, f.max_json_values, f.max_body_bytes_in_flight);
    // One promise and one timer (was Promise.race over a timeout promise, then .finally: four
    // promises per request on the hot path). A read that loses to the timer is settled unobserved.
    return new Promise((resolve, reject) => {
      const timer = this.o.clock.setTimer(body_timeout_ms, () =>
        reject(new HerdError(408, "invalid_request_error", `request body not received within ${body_timeout_ms} ms`, "body_timeout")),
      );
      read.then(
        (v) => (timer.cancel(), resolve(v)),
        (e: unknown) => (timer.cancel(), reject(e)),
      );
    });
  }

  /** The body could not be read: too large, bad length, too slow (408, connection closed) or the client left. */
  private bodyFailed(req: Request, t: Ticket, e: unknown): Response {
    if (e instanceof HerdError) {
      const reason = e.status === 413 ? "too_large" : e.status === 408 ? "body_timeout" : e.status === 503 ? "overloaded" : "invalid";
      t.release({ kind: "refused", status: e.status, reason });
      return errorResponse(e, e.status === 408 ? { connection: "close" } : {});
    }
    // Not herd's refusal: the client hung up mid-upload (or its connection broke). Its own outcome,
    // never a 5xx and never an error line.
    this.o.log.debug("client closed the connection during the upload", { aborted: req.signal.aborted, err: errorMessage(e) });
    t.release({ kind: "client_closed", phase: "upload" });
    return new Response(null, { status: CLIENT_CLOSED });
  }

  /** Check, preprocess, plan and run the request through the lifecycle. */
  private async run(req: Request, t: Ticket, endpoint: Endpoint, text: string, parsed: unknown, limitHeaders: Record<string, string>): Promise<Answer<Uint8Array>> {
    const f = this.o.config.frontend;
    const checked = checkEndpoint(endpoint, parsed, { maxMessages: f.max_messages, maxPromptChars: f.max_prompt_chars });
    // A LoRA adapter's name routes to its base model's workers and hashes with the adapter (vLLM's
    // extra keys); the body goes to the engine unchanged (it serves the adapter under that name).
    // An alias is sent to the engine as the model's name.
    const named = this.names.resolve(checked.model);
    const model = named.model;
    t.model = model;
    if (checked.stripped.length > 0) this.o.log.debug("stripped internal fields", { fields: checked.stripped.join(",") });
    let json = named.rename || checked.model === "" ? { ...checked.body, model } : checked.body;
    let rewritten = json !== checked.body || checked.stripped.length > 0;
    if (endpoint === "tokenize" || endpoint === "detokenize") {
      const local = await answerLocally(this.o.tokenizers, endpoint, this.o.config.models.find((m) => m.name === model), json);
      if (local) {
        t.release({ kind: "complete", status: 200, cachedTokens: null });
        return { kind: "whole", workerId: "herd", status: 200, contentType: "application/json", body: JSON.stringify(local) };
      }
    }
    let responses: PreparedResponses | null = null;
    if (endpoint === "responses") {
      responses = this.responses.prepare({ ...checked, body: json }, model);
      json = responses.body;
      rewritten = true;
    }
    const headerId = req.headers.get("x-request-id");
    const requestId = headerId && REQUEST_ID.test(headerId) ? headerId : crypto.randomUUID();
    // The prompt the router hashes: chat messages or a prompt; responses as chat; pooling routes on load.
    const promptInput = isGeneration(endpoint) ? (json as PromptInput) : responses ? responses.prompt : null;
    const prepared = this.hashPrompts && promptInput ? await spanned(t.span, "herd.preprocess", () => this.preparePrompt(promptInput, model, named.lora, checked.model)) : null;
    const route = {
      model,
      sessionId: this.o.router.sessionIdFrom(req.headers) ?? responses?.sessionId ?? null,
      promptTokens: Math.ceil(checked.promptChars / 4),
      ...this.o.router.sloFrom(req.headers), // x-slo-ttft-ms / x-slo-itl-ms (the `predicted` policy)
    };
    const maxTokens = maxTokensOf(endpoint, json);
    const promptTokens = prepared?.tokens ?? route.promptTokens;
    // Tenant limits (429), then the planner's gate, then herd's fair queue when the model is saturated.
    const tenant = admitTenant({ tenants: this.tenants, metrics: this.tenantMetrics, ticket: t, headers: req.headers, tokens: promptTokens + (maxTokens ?? 0), limitHeaders });
    if (this.o.gate) {
      this.o.gate.arrived(model, promptTokens, maxTokens);
      await spanned(t.span, "herd.gate", () => this.o.gate!.pass(model, { bytes: text.length, promptTokens, signal: req.signal }));
    }
    const granted = await this.queue.acquire(model, tenant.name, tenant.priority, promptTokens + (maxTokens ?? 0), req.signal);
    t.onRelease(granted.release);
    this.tenantMetrics.waited(tenant.name, granted.waitedMs / 1000);
    if (this.o.enginePriority && !this.ranks.has(requestId)) {
      this.ranks.set(requestId, { model, tenant: tenant.name, priority: tenant.priority });
      t.onRelease(() => this.ranks.delete(requestId));
    }
    // An on-demand LoRA adapter: loaded where it should run, and the request pinned there.
    if (named.onDemandPath !== undefined) {
      const placed = await this.lora.place(model, named.lora!, named.onDemandPath);
      t.onRelease(placed.release);
      Object.assign(route, { worker: placed.workerId });
    }
    const plan = (isGeneration(endpoint) ? this.plan : aggregatedPlan)({
      endpoint,
      body: rewritten ? JSON.stringify(json) : text,
      stream: checked.stream,
      route: prepared ? { ...route, ...routeFields(prepared) } : route,
      maxTokens,
      json,
    });
    const answer = await new Promise<Answer<Uint8Array>>((resolve) => runRequest(this.deps, t, plan, requestId, resolve));
    return responses ? this.responses.tap(answer, responses) : answer;
  }

  /**
   * Token count and block hashes of a request's prompt, timed per stage. A failure never refuses
   * the request here: the engine judges the prompt itself (a 400 is its to give), and a busy or
   * broken tokenizer only costs this request its cache-aware placement (it routes on load).
   */
  private async preparePrompt(input: PromptInput, model: string, lora: string | undefined, asked: string): Promise<PreparedPrompt | null> {
    const { metrics, log } = this.o;
    try {
      const p = await this.o.prompts!.prepare(model, input, lora !== undefined ? { lora } : undefined);
      metrics.routingStage("tokenize", (p.timings.render_ms + p.timings.tokenize_ms) / 1000);
      metrics.routingStage("hash", p.timings.hash_ms / 1000);
      return p;
    } catch (e) {
      // A prompt longer than the model's context window is refused here, as the engine would.
      if (e instanceof HerdError && e.code === "context_length_exceeded") throw e;
      const status = e instanceof HerdError ? e.status : 500;
      if (status === 400 || status === 404) log.debug("prompt not preprocessed; routing on load", { model: asked, err: errorMessage(e) });
      else if (this.o.clock.now() - this.prepWarnedAtMs >= PREP_WARN_EVERY_MS) {
        // Bounded: a full tokenizer queue under load would otherwise log once per request.
        log.warn("prompt preprocessing failed; routing on load", { model: asked, err: errorMessage(e), suppressed: this.prepWarnSuppressed });
        this.prepWarnedAtMs = this.o.clock.now();
        this.prepWarnSuppressed = 0;
      } else this.prepWarnSuppressed++;
      return null;
    }
  }
}

/** `limits` (a limited key's x-ratelimit-* headers) on `r`, where the answer has not set them. */
function withLimits(r: Response, limits: Record<string, string>): Response {
  for (const k in limits) if (!r.headers.has(k)) r.headers.set(k, limits[k]!);
  return r;
}

/** Await `work` under a child span of `parent` named `name`, ended either way (a rejection marks it failed). */
async function spanned<T>(parent: Span, name: string, work: () => Promise<T>): Promise<T> {
  if (parent === NOOP_SPAN) return work();
  const span = parent.child(name);
  try {
    const r = await work();
    span.end();
    return r;
  } catch (e) {
    span.end(errorMessage(e));
    throw e;
  }
}
