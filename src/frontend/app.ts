// The OpenAI-compatible HTTP surface (hono). Admission happens in a fixed order so that cheap
// refusals come first and nothing is read or parsed for a request that will be refused anyway:
//   draining → 503 + Retry-After; API key → 401; max_in_flight → 429; body size → 413;
//   JSON + fields → 400; unknown model → 404; no ready worker → 503; then dispatch (dispatch.ts).
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
import { metricsDenied } from "../http/metrics-access.ts";
import { dispatch, errorResponse, type DispatchDeps } from "./dispatch.ts";
import { AbortCause, InFlightTracker } from "./inflight.ts";
import { checkRequest, type CheckedRequest, type Endpoint } from "../protocol/openai.ts";
import { policyNeedsPrompt, type PromptPreparer } from "../preprocess/shared.ts";
import { routeFields, type PreparedPrompt, type PromptInput } from "../preprocess/index.ts";

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
}

const REQUEST_ID = /^[\w.:-]{1,128}$/;
/** At most one "preprocessing failed" warning per this interval. */
const PREP_WARN_EVERY_MS = 10_000;

export class Frontend {
  readonly app = new Hono<HonoEnv>();
  readonly tracker = new InFlightTracker();
  private inFlight = 0;
  private draining = false;
  private readonly idleWaiters = new Set<() => void>();
  private keys: KeySet;
  private readonly deps: DispatchDeps;
  private readonly unwatch: () => void;
  private readonly unobserve: () => void;
  /** The running policy reads block hashes, so each request is preprocessed before routing. */
  private readonly hashPrompts: boolean;
  /** Bounded JSON parsing (issue 10): a body whose parse would hold the event loop is a 400 first. */
  private readonly json = new JsonGuard();
  private prepWarnedAtMs = -Infinity;
  private prepWarnSuppressed = 0;

  constructor(private readonly o: FrontendOptions) {
    this.keys = new KeySet(o.config.frontend.api_keys);
    this.deps = {
      router: o.router,
      registry: o.registry,
      metrics: o.metrics,
      tracker: this.tracker,
      clock: o.clock,
      log: o.log,
      firstTokenTimeoutMs: o.config.frontend.first_token_timeout_ms,
      idleTimeoutMs: o.config.frontend.idle_timeout_ms,
    };
    this.unwatch = this.tracker.watch(o.registry);
    this.hashPrompts = o.prompts !== undefined && policyNeedsPrompt({ policy: o.router.policy.name });
    this.unobserve = o.router.observe({
      decision: (d) => {
        o.metrics.decision(d.policy, d.chosen);
        if (d.timings?.match_ms !== undefined) o.metrics.routingStage("match", d.timings.match_ms / 1000);
        if (d.timings?.score_ms !== undefined) o.metrics.routingStage("score", d.timings.score_ms / 1000);
      },
    });
    this.routes();
  }

  get isDraining(): boolean {
    return this.draining;
  }

  /** Requests admitted and not yet finished (streams count until their last byte). */
  get inFlightCount(): number {
    return this.inFlight;
  }

  /** Stop admitting: /health turns 503 at once, new inference requests get 503 + Retry-After. */
  startDrain(): void {
    this.draining = true;
  }

  /** Resolves true when nothing is in flight, or false after timeoutMs. */
  waitIdle(timeoutMs: number): Promise<boolean> {
    if (this.inFlight === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = this.o.clock.setTimer(timeoutMs, () => {
        this.idleWaiters.delete(done);
        resolve(false);
      });
      const done = () => {
        timer.cancel();
        resolve(true);
      };
      this.idleWaiters.add(done);
    });
  }

  /**
   * SIGHUP reload (src/daemon/reload.ts decides which keys change): API keys, admin token, limits and
   * timeouts from `config.frontend` apply to requests admitted from now on.
   */
  applyConfig(config: Config): void {
    this.o.config = config;
    this.keys = new KeySet(config.frontend.api_keys);
    this.deps.firstTokenTimeoutMs = config.frontend.first_token_timeout_ms;
    this.deps.idleTimeoutMs = config.frontend.idle_timeout_ms;
  }

  /** End every open upstream request (streams get an error event): the drain bound has passed. */
  abortAll(message = "herd is shutting down"): void {
    this.tracker.abortAll(new AbortCause("shutdown", message));
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
      if (this.draining) return c.json({ status: "draining", ready_workers: ready }, 503);
      if (ready === 0) return c.json({ status: "no_ready_worker", ready_workers: 0 }, 503);
      return c.json({ status: "ready", ready_workers: ready }, 200);
    });
    app.get("/metrics", async (c) => {
      const denied = metricsDenied(this.o.config.frontend.metrics, c.env?.ip ?? null, c.req.header("authorization"), this.adminToken());
      if (denied) return errorResponse(denied);
      return new Response(await metrics.render(), { headers: { "content-type": metrics.contentType() } });
    });
    app.get("/v1/models", (c) => {
      const denied = this.authFailure(c);
      if (denied) return errorResponse(denied);
      // Models with at least one ready worker: a model nobody can serve right now is not listed
      // (requests for it still get a precise 503 rather than a 404).
      const ready = new Set(registry.list().filter((w) => w.state === "ready").map((w) => w.model));
      const data = [...ready].sort().map((id) => ({ id, object: "model", created: 0, owned_by: "herd" }));
      return c.json({ object: "list", data });
    });
    app.get("/v1/models/:id{.+}", (c) => {
      const denied = this.authFailure(c);
      if (denied) return errorResponse(denied);
      const id = c.req.param("id");
      if (!registry.list().some((w) => w.state === "ready" && w.model === id))
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
        router: this.o.router,
        backend: this.o.admin,
        log: this.o.log,
        clock: this.o.clock,
        status: () => ({ draining: this.draining, in_flight: this.inFlight }),
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

  private async inference(c: Context<HonoEnv>, endpoint: Endpoint): Promise<Response> {
    const { metrics, config, clock } = this.o;
    const arrivedAtMs = clock.now();
    if (this.draining) {
      metrics.reject("draining");
      metrics.request(null, null, 503);
      return errorResponse(unavailable("herd is draining (shutting down); retry on another instance", "draining", 1));
    }
    const denied = this.authFailure(c);
    if (denied) {
      metrics.request(null, null, 401);
      return errorResponse(denied);
    }
    if (this.inFlight >= config.frontend.max_in_flight) {
      metrics.reject("overloaded");
      metrics.request(null, null, 429);
      return errorResponse(
        new HerdError(429, "rate_limit_error", `too many requests in flight (limit ${config.frontend.max_in_flight})`, "too_many_in_flight", null, { "retry-after": "1" }),
      );
    }
    this.admit();
    let finished = false;
    let model: string | null = null;
    const done = (status: number, worker: string | null) => {
      if (finished) return;
      finished = true;
      metrics.request(model, worker, status);
      this.release();
    };
    try {
      const f = config.frontend;
      const { text, parsed } = await this.json.readJson(c.req.raw, f.max_body_bytes, f.max_json_values, f.max_body_bytes_in_flight);
      const checked = checkRequest(endpoint, parsed, { maxMessages: f.max_messages, maxPromptChars: f.max_prompt_chars });
      model = checked.model;
      if (checked.stripped.length > 0) this.o.log.debug("stripped internal fields", { fields: checked.stripped.join(",") });
      const headerId = c.req.header("x-request-id");
      const requestId = headerId && REQUEST_ID.test(headerId) ? headerId : crypto.randomUUID();
      const prepared = this.hashPrompts ? await this.preparePrompt(checked) : null;
      const route = {
        model: checked.model,
        sessionId: this.o.router.sessionIdFrom(c.req.raw.headers),
        promptTokens: Math.ceil(checked.promptChars / 4),
      };
      return await dispatch(this.deps, {
        checked,
        bodyText: checked.stripped.length > 0 ? JSON.stringify(checked.body) : text,
        route: prepared ? { ...route, ...routeFields(prepared) } : route,
        clientSignal: c.req.raw.signal,
        requestId,
        arrivedAtMs,
        onDone: done,
      });
    } catch (e) {
      const err = e instanceof HerdError ? e : new HerdError(500, "server_error", "internal error", "internal_error");
      if (!(e instanceof HerdError)) this.o.log.error("request failed", { err: errorMessage(e) });
      if (err.status === 413) metrics.reject("too_large");
      else if (err.status === 400) metrics.reject("invalid");
      else if (err.status === 404) metrics.reject("not_found");
      else if (err.status === 503) metrics.reject("no_worker");
      done(err.status, null);
      return errorResponse(err);
    }
  }

  /**
   * Token count and block hashes of a request's prompt, timed per stage. A failure never refuses
   * the request here: the engine judges the prompt itself (a 400 is its to give), and a busy or
   * broken tokenizer only costs this request its cache-aware placement (it routes on load).
   */
  private async preparePrompt(checked: CheckedRequest): Promise<PreparedPrompt | null> {
    const { metrics, log } = this.o;
    try {
      const p = await this.o.prompts!.prepare(checked.model, checked.body as PromptInput);
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

  private admit(): void {
    this.inFlight++;
    this.o.metrics.setFrontendInFlight(this.inFlight);
  }

  private release(): void {
    this.inFlight--;
    this.o.metrics.setFrontendInFlight(this.inFlight);
    if (this.inFlight === 0) {
      for (const w of [...this.idleWaiters]) w();
      this.idleWaiters.clear();
    }
  }
}
