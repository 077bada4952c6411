// The admin API, mounted under /admin on the frontend's listener.
// Access: loopback clients always; others only with `Authorization: Bearer <frontend.admin_token>`,
// and never when no token is configured. Loopback callers must also send a loopback Host and no
// foreign Origin: a browser page on another site cannot reach it through DNS rebinding or CSRF
// (docs/references.md#reliability-2, mitigation 4). No response carries a configured secret: workers are rendered
// field by field from the registry, never by dumping config.
import { Hono, type Context } from "hono";
import { HerdError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Config } from "../config/types.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { Worker } from "../workers/worker.ts";
import type { RouteRequest, Router } from "../router/index.ts";
import { KeySet, isLoopback, isLoopbackHost } from "../http/auth.ts";
import type { AdminRoute } from "../http/admin-route.ts";
import { checkRequest, type Endpoint } from "../protocol/openai.ts";
import type { KvAdminBackend } from "./kv-explain.ts";
import type { Clock } from "../core/clock.ts";
import { LogLimiter } from "../http/log-limit.ts";
import { JsonGuard } from "../http/json-guard.ts";

/** Supervisor-backed operations; each is optional and answers 501 when absent. KV index views (kv-explain.ts) are optional too. */
export interface AdminBackend extends Partial<KvAdminBackend> {
  /** Last `lines` lines of a worker's engine output; null when the id is unknown. */
  logs?(workerId: string, lines: number): string[] | null;
  /** OS process id of a worker's engine (null for external or not running), shown in /admin/cluster. */
  pid?(workerId: string): number | null;
  /** Why a worker's engine last crashed (its last error line, a lost port); null when ready or unknown. */
  lastError?(workerId: string): string | null;
  /** Take a worker out of rotation (admitted requests finish); false when the id is unknown. */
  drain?(workerId: string): boolean;
  /** Put a drained worker back into rotation; false when the id is unknown. */
  undrain?(workerId: string): boolean;
  /** A local engine's supervisor phase, its reason and its last exit (null: not a local engine). */
  engine?(workerId: string): { phase: string; reason: string; last_exit: { code: number | null; signal: string | null } | null } | null;
  /** Cluster leader, term and nodes (src/cluster/node.ts), merged into /admin/cluster. */
  cluster?(): { leader: string | null; term: number; is_leader?: boolean; view_stale?: boolean; discovery: string; nodes: { name: string; address: string; state: string; last_seen_ms: number }[]; forwarded?: { open: number; rejected: number } };
  /** P/D models (src/pd): the decision and each leg's preset, pick and candidates' terms (a dry run of the real sequence); null for other models. */
  pdExplain?(route: RouteRequest, body: Record<string, unknown>, endpoint: Endpoint): Promise<{ legs: unknown[] } | null>;
  /** The last P/D requests' traces (both legs, outcomes, fallbacks), newest last. */
  pdTraces?(): unknown[];
}

export interface AdminOptions {
  config: Config;
  registry: WorkerRegistry;
  router: Router;
  backend: AdminBackend | undefined;
  log: Logger;
  /** Frontend status for /admin/cluster (draining flag, in-flight count). */
  status?: () => { draining: boolean; in_flight: number };
  /** For the rate limit on "admin request refused" lines; without it every refusal is logged. */
  clock?: Clock;
  /** Endpoints other modules contribute (src/http/admin-route.ts), behind the same access rule. */
  contributed?: readonly AdminRoute[];
  /** The frontend's JSON guard (shared thread and body budget); default: one of its own. */
  json?: JsonGuard;
}

/** At most one "admin request refused" warning per this interval (a remote client can send many). */
export const REFUSED_LOG_EVERY_MS = 10_000;

type Env = { Bindings: { ip: string | null } };

const err = (status: number, type: "permission_error" | "authentication_error" | "not_found_error" | "invalid_request_error", message: string, code: string) =>
  new HerdError(status, type, message, code);

const json = (e: HerdError) =>
  new Response(JSON.stringify(e.toJSON()), { status: e.status, headers: { "content-type": "application/json", ...e.headers } });

export function renderWorker(w: Readonly<Worker>) {
  return {
    id: w.id,
    node: w.node,
    model: w.model,
    role: w.role,
    kind: w.kind,
    url: w.url,
    state: w.state,
    load: { ...w.load },
    restarts: w.restarts,
  };
}

export function adminRoutes(o: AdminOptions): Hono<Env> {
  const app = new Hono<Env>();
  // Rebuilt when a reload changes frontend.admin_token (o.config is read per request).
  let tokenText = o.config.frontend.admin_token;
  let token = new KeySet(tokenText ? [tokenText] : []);
  const refusedLog = o.clock ? new LogLimiter(o.clock, REFUSED_LOG_EVERY_MS) : null;

  app.use("*", async (c, next) => {
    if (o.config.frontend.admin_token !== tokenText) {
      tokenText = o.config.frontend.admin_token;
      token = new KeySet(tokenText ? [tokenText] : []);
    }
    const denied = checkAccess(c, token);
    if (denied) {
      const fields = { ip: c.env?.ip ?? "unknown", path: c.req.path, code: denied.code };
      const line = refusedLog ? refusedLog.take() : { suppressed: 0 };
      if (line) o.log.warn("admin request refused", { ...fields, suppressed: line.suppressed });
      else o.log.debug("admin request refused", fields);
      return json(denied);
    }
    await next();
  });

  app.get("/cluster", (c) =>
    c.json({
      node: o.config.node.name,
      policy: o.router.policy.name,
      ...(o.status ? o.status() : {}),
      ...(o.backend?.cluster ? o.backend.cluster() : {}),
      ejections: o.router.outliers.list(),
      workers: o.registry.list().map((w) => ({
        ...renderWorker(w), pid: o.backend?.pid?.(w.id) ?? null, last_error: o.backend?.lastError?.(w.id) ?? null, kv_events: o.backend?.kvStatus?.(w.id) ?? null,
        engine: o.backend?.engine?.(w.id) ?? null, drained: o.registry.isCordoned(w.id),
      })),
      // What else this node's admin API serves (the status page polls only those).
      admin_endpoints: (o.contributed ?? []).map((r) => `${r.method} ${r.path}`),
    }),
  );

  // The frontend's bounded parse (issue 22: 5M-deep nesting was accepted here): values, depth, and
  // bodies over 256 KiB scanned off the event loop.
  const jsonGuard = o.json ?? new JsonGuard();
  app.post("/route/explain", async (c) => {
    const f = o.config.frontend;
    const { parsed } = await jsonGuard.readJson(c.req.raw, f.max_body_bytes, f.max_json_values, f.max_body_bytes_in_flight);
    // One endpoint explains both shapes: `messages` means chat, otherwise a completions prompt.
    const isChat = typeof parsed === "object" && parsed !== null && "messages" in parsed;
    const checked = checkRequest(isChat ? "chat" : "completions", parsed);
    // Tokens and block hashes first (the daemon's shared preprocessor), so the policy explains the
    // very decision it would make for this prompt: overlap, load terms, cost, pick.
    const kv = o.backend?.kvExplain ? await o.backend.kvExplain(checked.model, checked.body, isChat) : null;
    // A LoRA adapter routes on its base model's workers.
    const routedModel = o.config.models.find((m) => m.lora_adapters.some((a) => a.name === checked.model))?.name ?? checked.model;
    const estimate = Math.ceil(checked.promptChars / 4);
    const req = {
      model: routedModel,
      sessionId: o.router.sessionIdFrom(c.req.raw.headers),
      promptTokens: kv ? kv.prompt_tokens : estimate,
      exclude: new Set<string>(),
      ...o.router.sloFrom(c.req.raw.headers), // as the frontend: x-slo-ttft-ms / x-slo-itl-ms
      ...(kv ? { blockHashes: kv.block_hashes, blockSize: kv.block_size } : {}),
    };
    // A P/D model (prefill + decode workers) is routed leg by leg, each by its preset: show the legs.
    const pd = (await o.backend?.pdExplain?.(req, checked.body, isChat ? "chat" : "completions")) ?? null;
    if (pd !== null) return c.json({ model: checked.model, session_id: req.sessionId, prompt_tokens_estimate: estimate, stripped_fields: checked.stripped, policy: "pd", ...pd });
    const { decision } = o.router.explain(req);
    // Per candidate, the leading prompt blocks the index says it holds (whatever the policy).
    const none = { gpu: 0, cpu: 0, disk: 0 };
    const candidates = kv ? decision.candidates.map((cd) => ({ ...cd, overlap: { ...(kv.overlaps.get(cd.worker) ?? none) } })) : decision.candidates;
    return c.json({
      model: checked.model,
      session_id: req.sessionId,
      prompt_tokens_estimate: estimate,
      stripped_fields: checked.stripped,
      policy: decision.policy,
      chosen: decision.chosen,
      reason: decision.reason,
      candidates,
      filtered: decision.filtered,
      // Workers and peer nodes ejected after failures (src/router/outlier.ts), and why.
      ejections: o.router.outliers.list(),
      kv: kv ? { block_size: kv.block_size, prompt_tokens: kv.prompt_tokens, prompt_blocks: kv.prompt_blocks, extra_keys: kv.extra_keys } : null,
      // The request-level figures the policy used (tokens, block_size, hashed/request blocks), what
      // it expects the pick to have cached, and where the time went (ms): null when not reported.
      request: decision.request ?? null,
      predicted_cached_tokens: decision.predictedCachedTokens ?? null,
      timings_ms: { ...(kv ? kv.timings : {}), ...(decision.timings ?? {}) },
    });
  });

  app.get("/pd/traces", (c) => {
    const traces = o.backend?.pdTraces?.();
    return traces ? c.json({ traces }) : json(err(501, "invalid_request_error", "no P/D models in this herd", "not_implemented"));
  });

  app.get("/workers/:id{.+}/logs", (c) => {
    const id = c.req.param("id");
    if (!o.backend?.logs) return json(new HerdError(501, "server_error", "engine logs are not available in this daemon", "not_implemented"));
    const n = Number(c.req.query("lines") ?? "200");
    const lines = Number.isInteger(n) && n > 0 ? Math.min(n, 10_000) : 200;
    const out = o.backend.logs(id, lines);
    if (out === null) return json(err(404, "not_found_error", `unknown worker ${id}`, "worker_not_found"));
    return c.json({ worker: id, lines: out });
  });

  for (const action of ["drain", "undrain"] as const) {
    app.post(`/workers/:id{.+}/${action}`, (c) => {
      const id = c.req.param("id");
      const fn = o.backend?.[action];
      if (!fn) return json(new HerdError(501, "server_error", `${action} is not available in this daemon`, "not_implemented"));
      if (!fn.call(o.backend, id)) return json(err(404, "not_found_error", `unknown worker ${id}`, "worker_not_found"));
      const w = o.registry.get(id);
      return c.json({ worker: id, state: w?.state ?? null });
    });
  }
  for (const r of o.contributed ?? []) {
    const handler = (c: Context<Env>) => r.handle(c.req.raw, c.req.param() as Record<string, string>);
    if (r.method === "GET") app.get(r.path, handler);
    else app.post(r.path, handler);
  }
  return app;
}

/** The admin access rule (see the top of this file); null when the request may pass. */
export function checkAccess(c: Context<Env>, token: KeySet): HerdError | null {
  const ip = c.env?.ip ?? null;
  if (isLoopback(ip)) {
    if (!isLoopbackHost(c.req.header("host")))
      return err(403, "permission_error", "admin API: Host header must name a loopback address", "admin_bad_host");
    const origin = c.req.header("origin");
    if (origin && !isLoopbackHost(safeHost(origin)))
      return err(403, "permission_error", "admin API: cross-origin requests are refused", "admin_bad_origin");
    return null;
  }
  if (!token.enabled)
    return err(403, "permission_error", "admin API is loopback-only (set frontend.admin_token to allow remote access)", "admin_loopback_only");
  if (!token.accepts(c.req.header("authorization")))
    return err(401, "authentication_error", "admin API: missing or invalid admin token", "invalid_admin_token");
  return null;
}

function safeHost(origin: string): string {
  try {
    return new URL(origin).host;
  } catch {
    return "invalid.invalid";
  }
}
