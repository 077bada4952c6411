// The OpenAI-compatible HTTP surface (hono). Each inference request gets a ticket (src/request) at
// arrival and goes through a fixed order, cheap refusals first:
//   draining → 503 + Retry-After; API key → 401; declared Content-Length → 413/400; body within
//   frontend.body_timeout_ms → 408 (connection closed); max_in_flight → 429 (a slot is taken only
//   once the body is complete); JSON + fields → 400; then the request lifecycle (src/request:
//   unknown model → 404, no ready worker → 503, route → attempt → retry → commit → relay).
// /health is readiness (200 only when not draining and at least one worker is ready, else 503 with
// the reason); /livez is liveness (200 while the process runs, also while draining).
import { Hono, type Context } from "hono";
import type { Clock } from "../core/clock.ts";
import { HerdError, errorMessage, unavailable } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Config } from "../config/types.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { HerdMetrics } from "../metrics/herd-metrics.ts";
import type { Router } from "../router/index.ts";
import { adminRoutes, type AdminBackend } from "../admin/routes.ts";
import { KeySet } from "../http/auth.ts";
import { JsonGuard } from "../http/json-guard.ts";
import { LogLimiter } from "../http/log-limit.ts";
import { metricsDenied } from "../http/metrics-access.ts";
import { checkRequest, type CheckedRequest, type Endpoint } from "../protocol/openai.ts";
import { policyNeedsPrompt, type PromptPreparer } from "../preprocess/shared.ts";
import { routeFields, type PreparedPrompt, type PromptInput } from "../preprocess/index.ts";
import { requestedMaxTokens } from "../request/bounds.ts";
import { HttpUpstream } from "../request/http-upstream.ts";
import { refusal, runRequest, type Answer, type LifecycleDeps } from "../request/lifecycle.ts";
import { aggregatedPlan, type PlanBuilder } from "../request/plan.ts";
import { AbortCause, Admission, metricsRecorder, type Ticket } from "../request/ticket.ts";
import { evidenceRecorder } from "../request/evidence.ts";
import type { Upstream } from "../request/upstream.ts";
import { ClientGone, type RequestGate } from "../request/gate.ts";
import type { AdminRoute } from "../http/admin-route.ts";
import { errorResponse, toResponse } from "./respond.ts";

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
  private keys: KeySet;
  private readonly deps: LifecycleDeps<Uint8Array>;
  private readonly plan: PlanBuilder;
  private readonly unwatch: () => void;
  private unobserve: () => void;
  /** The running policy reads block hashes, so each request is preprocessed before routing. */
  private hashPrompts: boolean;
  /** LoRA adapter name → its base model (models[].lora_adapters). */
  private readonly baseOf: ReadonlyMap<string, { model: string; lora: string }>;
  /** Bounded JSON parsing (issue 10): a body whose parse would hold the event loop is a 400 first. */
  private readonly json = new JsonGuard();
  /** Requests refused before routing (a malformed Host): one line per interval, with the count. */
  private readonly refusedLog: LogLimiter;
  private prepWarnedAtMs = -Infinity;
  private leaving = false;
  private prepWarnSuppressed = 0;

  constructor(private readonly o: FrontendOptions) {
    this.baseOf = adapterIndex(o.config);
    this.refusedLog = new LogLimiter(o.clock, PREP_WARN_EVERY_MS);
    this.keys = new KeySet(o.config.frontend.api_keys);
    // Failures and successes also feed the router's outlier detection (evidence beats membership).
    this.admission = new Admission(o.clock, evidenceRecorder(metricsRecorder(o.metrics, o.clock), () => this.o.router), o.config.frontend.max_in_flight);
    this.deps = {
      router: o.router,
      upstream: o.upstream ?? new HttpUpstream(undefined, { clock: o.clock, firstByteTimeoutMs: () => this.o.config.frontend.engine_first_byte_timeout_ms }),
      clock: o.clock,
      log: o.log,
      firstTokenTimeoutMs: o.config.frontend.first_token_timeout_ms,
      migration: { limit: o.config.frontend.migration_limit, maxTokens: o.config.frontend.migration_max_tokens },
      idleTimeoutMs: o.config.frontend.idle_timeout_ms,
    };
    this.plan = o.plan ?? aggregatedPlan;
    this.unwatch = this.admission.watch(o.registry);
    this.hashPrompts = o.prompts !== undefined && policyNeedsPrompt(o.router);
    this.unobserve = this.observe(o.router);
    this.routes();
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
    this.keys = new KeySet(config.frontend.api_keys);
    this.admission.maxInFlight = config.frontend.max_in_flight;
    this.deps.firstTokenTimeoutMs = config.frontend.first_token_timeout_ms;
    this.deps.idleTimeoutMs = config.frontend.idle_timeout_ms;
    this.deps.migration = { limit: config.frontend.migration_limit, maxTokens: config.frontend.migration_max_tokens };
  }

  /** End every open upstream request (streams get an error event): the drain bound has passed. */
  abortAll(message = "herd is shutting down"): void {
    this.admission.abortAll(new AbortCause("shutdown", message));
  }

  close(): void {
    this.json.close();
    this.unwatch();
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
      const data: Record<string, unknown>[] = [...ready].sort().map((id) => ({ id, object: "model", created: 0, owned_by: "herd" }));
      // Adapters of a ready model are listed too, with their parent, as vLLM lists them.
      for (const [id, b] of [...this.baseOf].sort()) if (ready.has(b.model)) data.push({ id, object: "model", created: 0, owned_by: "herd", parent: b.model });
      return c.json({ object: "list", data });
    });
    app.get("/v1/models/:id{.+}", (c) => {
      const denied = this.authFailure(c);
      if (denied) return errorResponse(denied);
      const id = c.req.param("id");
      const base = this.baseOf.get(id)?.model ?? id;
      if (!registry.list().some((w) => w.state === "ready" && w.model === base))
        return errorResponse(new HerdError(404, "invalid_request_error", `The model \`${id}\` does not exist.`, "model_not_found", "model"));
      return c.json({ id, object: "model", created: 0, owned_by: "herd" });
    });
    app.post("/v1/chat/completions", (c) => this.inference(c, "chat"));
    app.post("/v1/completions", (c) => this.inference(c, "completions"));
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
    app.notFound((c) =>
      errorResponse(new HerdError(404, "not_found_error", `no route for ${c.req.method} ${new URL(c.req.url).pathname}`, "not_found")),
    );
    app.onError((e) => {
      if (e instanceof HerdError) return errorResponse(e);
      this.o.log.error("unhandled error in request", { err: errorMessage(e) });
      return errorResponse(new HerdError(500, "server_error", "internal error", "internal_error"));
    });
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
    if (!this.keys.enabled || this.keys.accepts(c.req.header("authorization"))) return null;
    this.o.metrics.reject("unauthorized");
    return new HerdError(401, "authentication_error", "missing or invalid API key (expected Authorization: Bearer <key>)", "invalid_api_key");
  }

  /** /metrics: its own small handler (access control wraps it here). */
  private async metricsPage(): Promise<Response> {
    const m = this.o.metrics;
    return new Response(await m.render(), { headers: { "content-type": m.contentType() } });
  }

  private async inference(c: Context<HonoEnv>, endpoint: Endpoint): Promise<Response> {
    const t = this.admission.ticket(c.req.raw.signal);
    const refused = this.refuseEarly(c, t);
    if (refused) return refused;
    let body: { text: string; parsed: unknown };
    try {
      body = await this.readBody(c.req.raw);
    } catch (e) {
      return this.bodyFailed(c.req.raw, t, e);
    }
    if (!t.admit()) {
      const max = this.o.config.frontend.max_in_flight;
      t.release({ kind: "refused", status: 429, reason: "overloaded" });
      return errorResponse(new HerdError(429, "rate_limit_error", `too many requests in flight (limit ${max})`, "too_many_in_flight", null, { "retry-after": "1" }));
    }
    try {
      return toResponse(await this.run(c, t, endpoint, body.text, body.parsed));
    } catch (e) {
      if (e instanceof ClientGone) {
        t.release({ kind: "client_closed", phase: "before_first_token" });
        return new Response(null, { status: CLIENT_CLOSED });
      }
      if (!(e instanceof HerdError)) this.o.log.error("request failed", { err: errorMessage(e) });
      return errorResponse((refusal(t, e) as { error: HerdError }).error);
    }
  }

  /** Draining → 503, API key → 401: refusals that need nothing read. */
  private refuseEarly(c: Context<HonoEnv>, t: Ticket): Response | null {
    if (this.admission.draining) {
      t.release({ kind: "refused", status: 503, reason: "draining" });
      return errorResponse(unavailable("herd is draining (shutting down); retry on another instance", "draining", 1));
    }
    const denied = this.authFailure(c);
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
    let timer: { cancel(): void } | null = null;
    const timeout = new Promise<never>((_, reject) => {
      timer = this.o.clock.setTimer(body_timeout_ms, () =>
        reject(new HerdError(408, "invalid_request_error", `request body not received within ${body_timeout_ms} ms`, "body_timeout")),
      );
    });
    read.catch(() => {}); // a read that loses the race must not surface as unhandled
    return Promise.race([read, timeout]).finally(() => (timer as { cancel(): void } | null)?.cancel());
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
  private async run(c: Context<HonoEnv>, t: Ticket, endpoint: Endpoint, text: string, parsed: unknown): Promise<Answer<Uint8Array>> {
    const f = this.o.config.frontend;
    const checked = checkRequest(endpoint, parsed, { maxMessages: f.max_messages, maxPromptChars: f.max_prompt_chars });
    // A LoRA adapter's name routes to its base model's workers and hashes with the adapter (vLLM's
    // extra keys); the body goes to the engine unchanged (it serves the adapter under that name).
    const base = this.baseOf.get(checked.model);
    const model = base?.model ?? checked.model;
    t.model = model;
    if (checked.stripped.length > 0) this.o.log.debug("stripped internal fields", { fields: checked.stripped.join(",") });
    const headerId = c.req.header("x-request-id");
    const requestId = headerId && REQUEST_ID.test(headerId) ? headerId : crypto.randomUUID();
    const prepared = this.hashPrompts ? await this.preparePrompt(checked, model, base?.lora) : null;
    const route = {
      model,
      sessionId: this.o.router.sessionIdFrom(c.req.raw.headers),
      promptTokens: Math.ceil(checked.promptChars / 4),
    };
    if (this.o.gate) {
      const promptTokens = prepared?.tokens ?? route.promptTokens;
      this.o.gate.arrived(model, promptTokens, requestedMaxTokens(checked.body));
      await this.o.gate.pass(model, { bytes: text.length, promptTokens, signal: c.req.raw.signal });
    }
    const plan = this.plan({
      endpoint,
      body: checked.stripped.length > 0 ? JSON.stringify(checked.body) : text,
      stream: checked.stream,
      route: prepared ? { ...route, ...routeFields(prepared) } : route,
      maxTokens: requestedMaxTokens(checked.body),
      json: checked.body,
    });
    return new Promise((resolve) => runRequest(this.deps, t, plan, requestId, resolve));
  }

  /**
   * Token count and block hashes of a request's prompt, timed per stage. A failure never refuses
   * the request here: the engine judges the prompt itself (a 400 is its to give), and a busy or
   * broken tokenizer only costs this request its cache-aware placement (it routes on load).
   */
  private async preparePrompt(checked: CheckedRequest, model: string, lora: string | undefined): Promise<PreparedPrompt | null> {
    const { metrics, log } = this.o;
    try {
      const p = await this.o.prompts!.prepare(model, checked.body as PromptInput, lora !== undefined ? { lora } : undefined);
      metrics.routingStage("tokenize", (p.timings.render_ms + p.timings.tokenize_ms) / 1000);
      metrics.routingStage("hash", p.timings.hash_ms / 1000);
      return p;
    } catch (e) {
      // A prompt longer than the model's context window is refused here, as the engine would.
      if (e instanceof HerdError && e.code === "context_length_exceeded") throw e;
      const status = e instanceof HerdError ? e.status : 500;
      if (status === 400 || status === 404) log.debug("prompt not preprocessed; routing on load", { model: checked.model, err: errorMessage(e) });
      else if (this.o.clock.now() - this.prepWarnedAtMs >= PREP_WARN_EVERY_MS) {
        // Bounded: a full tokenizer queue under load would otherwise log once per request.
        log.warn("prompt preprocessing failed; routing on load", { model: checked.model, err: errorMessage(e), suppressed: this.prepWarnSuppressed });
        this.prepWarnedAtMs = this.o.clock.now();
        this.prepWarnSuppressed = 0;
      } else this.prepWarnSuppressed++;
      return null;
    }
  }
}

/** Every LoRA adapter the config names, by the name clients send, with its base model. */
function adapterIndex(config: Config): Map<string, { model: string; lora: string }> {
  const out = new Map<string, { model: string; lora: string }>();
  for (const m of config.models) for (const a of m.lora_adapters) out.set(a.name, { model: m.name, lora: a.name });
  return out;
}
