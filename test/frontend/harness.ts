// Test harness: a real Frontend (hono on Bun.serve, port 0) over a hand-filled WorkerRegistry and the
// real Router, in front of tiny fake upstreams that speak OpenAI SSE the way vLLM does.
import { afterEach } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { defaultConfig } from "../../src/config/index.ts";
import type { Config, EngineKind, FrontendConfig, ModelConfig, PolicyName } from "../../src/config/types.ts";
import type { LocalTokenizers } from "../../src/frontend/tokens.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { emptyLoad, type WorkerState } from "../../src/workers/worker.ts";
import { HerdMetrics } from "../../src/metrics/herd-metrics.ts";
import { Router } from "../../src/router/index.ts";
import { Frontend } from "../../src/frontend/app.ts";
import { listen, type Listening } from "../../src/frontend/server.ts";
import type { AdminBackend } from "../../src/admin/routes.ts";
import type { PromptPreparer } from "../../src/preprocess/shared.ts";
import type { KvIndex } from "../../src/kv/indexer.ts";

export const MODEL = "m1";

export interface FakeWorker {
  id: string;
  url: string;
  state?: WorkerState;
  model?: string;
  /** Engine kind (default external); decides e.g. whether /v1/responses is sent natively. */
  kind?: EngineKind;
}

export interface Herd {
  url: string;
  frontend: Frontend;
  registry: WorkerRegistry;
  router: Router;
  metrics: HerdMetrics;
  config: Config;
  log: ReturnType<typeof memoryLogger>;
  listening: Listening;
  stop(): Promise<void>;
}

export async function startHerd(opts: {
  workers: FakeWorker[];
  frontend?: Partial<FrontendConfig>;
  policy?: PolicyName;
  admin?: AdminBackend;
  /** Prompt preprocessing for kv/prefix (the daemon's SharedPreprocessor). */
  prompts?: PromptPreparer;
  /** Block index for the kv policy. */
  kvIndex?: KvIndex;
  /** Adjust the router config (after the policy is set). */
  router?: (r: Config["router"]) => void;
  /** Fields of the one model's config (aliases, tokenizer, max_model_len…). */
  model?: Partial<ModelConfig>;
  tokenizers?: LocalTokenizers;
}): Promise<Herd> {
  const config = defaultConfig({ hostname: "testnode", dataDir: "/tmp/herd-test" });
  config.models = [{ name: MODEL, path: MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "", aliases: [], lora_adapters: [], ...opts.model }];
  config.engines = [];
  config.router.policy = opts.policy ?? "round-robin";
  config.router.seed = 7;
  opts.router?.(config.router);
  Object.assign(config.frontend, { listen: "127.0.0.1:0" }, opts.frontend ?? {});
  const registry = new WorkerRegistry();
  for (const w of opts.workers) {
    registry.upsert({
      id: w.id,
      node: "testnode",
      model: w.model ?? MODEL,
      role: "aggregated",
      kind: w.kind ?? "external",
      url: w.url,
      state: w.state ?? "ready",
      load: emptyLoad(),
      restarts: 0,
    });
  }
  const clock = new RealClock();
  const log = memoryLogger();
  const router = new Router({ config: config.router, registry, clock, log, ...(opts.kvIndex ? { kvIndex: opts.kvIndex } : {}) });
  const metrics = new HerdMetrics([MODEL], () => registry.list());
  const frontend = new Frontend({ config, registry, router, metrics, clock, log, ...(opts.admin ? { admin: opts.admin } : {}), ...(opts.prompts ? { prompts: opts.prompts } : {}), ...(opts.tokenizers ? { tokenizers: opts.tokenizers } : {}) });
  const listening = listen(frontend, "127.0.0.1", 0, config.frontend.max_body_bytes);
  return {
    url: listening.url,
    frontend,
    registry,
    router,
    metrics,
    config,
    log,
    listening,
    stop: async () => {
      frontend.close();
      await listening.stop(true);
    },
  };
}

// ---- fake upstreams -------------------------------------------------------------------------

export interface Upstream {
  url: string;
  /** Requests received (path and parsed body). */
  received: { path: string; body: any; headers: Headers }[];
  /** Requests whose connection was aborted by herd. */
  aborted: number;
  stop(): Promise<void>;
}

export type UpstreamHandler = (req: Request, body: any, up: Upstream) => Response | Promise<Response>;

export function startUpstream(handler: UpstreamHandler): Upstream {
  const up: Upstream = { url: "", received: [], aborted: 0, stop: async () => {} };
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      const text = req.method === "POST" ? await req.text() : "";
      const body = text ? JSON.parse(text) : null;
      up.received.push({ path, body, headers: req.headers });
      req.signal.addEventListener("abort", () => up.aborted++);
      return handler(req, body, up);
    },
  });
  up.url = `http://127.0.0.1:${server.port}`;
  up.stop = () => server.stop(true);
  return up;
}

const enc = new TextEncoder();
export const sse = (obj: unknown) => enc.encode(`data: ${typeof obj === "string" ? obj : JSON.stringify(obj)}\n\n`);

export function chatChunk(content: string, finish: string | null = null, role = false) {
  return {
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1,
    model: MODEL,
    choices: [{ index: 0, delta: role ? { role: "assistant", content: "" } : { content }, logprobs: null, finish_reason: finish }],
  };
}

export function chatCompletion(content: string) {
  return {
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1,
    model: MODEL,
    choices: [{ index: 0, message: { role: "assistant", content }, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  };
}

/**
 * A streaming chat answer of `tokens` tokens, one chunk every `gapMs`. `dieAfter` (token count)
 * makes it stop mid-stream the way a killed engine does: `mode` "reset" errors the body (connection
 * lost), "eof" ends it cleanly without [DONE].
 */
export function streamingReply(opts: { tokens: number; gapMs?: number; dieAfter?: number; mode?: "reset" | "eof"; onCancel?: () => void }) {
  let i = -1;
  return new Response(
    new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        if (opts.gapMs) await Bun.sleep(opts.gapMs);
        if (i === -1) {
          i++;
          ctrl.enqueue(sse(chatChunk("", null, true)));
          return;
        }
        if (opts.dieAfter !== undefined && i >= opts.dieAfter) {
          if (opts.mode === "eof") ctrl.close();
          else ctrl.error(new Error("engine killed"));
          return;
        }
        if (i < opts.tokens) {
          i++;
          ctrl.enqueue(sse(chatChunk(`t${i} `, i === opts.tokens ? "length" : null)));
          return;
        }
        ctrl.enqueue(sse("[DONE]"));
        ctrl.close();
      },
      cancel() {
        opts.onCancel?.();
      },
    }),
    { headers: { "content-type": "text/event-stream" } },
  );
}

export const chatBody = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: "user", content: "hello" }],
  max_tokens: 8,
  ...extra,
});

export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

/** Wait until cond() holds (polling), or fail after timeoutMs. */
export async function until(cond: () => boolean, timeoutMs = 3000, what = "condition"): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(5);
  }
}

/**
 * Registers an afterEach in the calling test file that stops everything passed to the returned
 * `track` (herds, upstreams, raw servers), so a failed assertion leaves nothing listening.
 */
export function trackForCleanup(): <T extends { stop(): unknown }>(x: T) => T {
  const stops: (() => unknown)[] = [];
  afterEach(async () => {
    for (const stop of stops.splice(0)) await stop();
  });
  return (x) => {
    stops.push(() => x.stop());
    return x;
  };
}
