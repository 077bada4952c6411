// The simulated engine's HTTP server (Bun.serve), speaking vLLM's OpenAI server routes. Like vLLM it
// does not accept connections while "loading" (--startup-delay-ms: the port is not listening until the
// delay has passed) and then prints vLLM's readiness lines, ending with uvicorn's
// "Application startup complete.".

import { type Clock, RealClock, wallClockMs } from "../../core/clock.ts";
import { HerdError, errorMessage } from "../../core/errors.ts";
import { loadTokenizer, type Tokenizer } from "../../tokenizer/index.ts";
import type { KvEvent } from "./blocks.ts";
import { type GenerateContext, type PdHooks, generate } from "./generate.ts";
import { SimPd } from "./pd.ts";
import { SimMetrics } from "./metrics.ts";
import { errorBody, parseGeneration, parsePrompt, renderChat } from "./openai.ts";
import { ZERO_COST } from "./cost.ts";
import { DEFAULT_OPTIONS, type SimEngineOptions, VLLM_VERSION } from "./options.ts";
import { OutputVocabulary } from "./output.ts";
import { type SchedulerStats, SimScheduler } from "./scheduler.ts";

export interface StartSimEngineOptions extends Partial<SimEngineOptions> {
  /** Readiness and warning lines (vLLM's log lines). Default: discarded. */
  log?: (line: string) => void;
  /** What --crash-after does. Default (in-process): drop every connection and turn unhealthy. */
  onCrash?: () => void;
  /** KV cache events, one batch per scheduler step (for the vLLM-style publisher). */
  onKvEvents?: (events: KvEvent[]) => void;
  /** Block-hash seed; default from PYTHONHASHSEED like vLLM (random per process when unset). */
  hashSeed?: bigint;
  /** Same as --zero-delay: every timing figure 0 (`cost` figures given alongside still apply). */
  zeroDelay?: boolean;
}

export interface SimEngineStats extends SchedulerStats {
  /** Generation requests received (what the fault knobs count). */
  requests: number;
}

export interface SimEngine {
  url: string;
  port: number;
  readonly options: SimEngineOptions;
  readonly scheduler: SimScheduler;
  readonly tokenizer: Tokenizer;
  /** The P/D connector (with --kv-transfer-config): engine id, side-channel port, held blocks. */
  readonly pd: SimPd | null;
  stats(): SimEngineStats;
  stop(): Promise<void>;
}

function defaultHashSeed(): bigint {
  const env = process.env.PYTHONHASHSEED;
  if (env !== undefined && env !== "" && env !== "random") return BigInt(Bun.hash.xxHash3(env));
  return BigInt(Bun.hash.xxHash3(crypto.getRandomValues(new Uint8Array(16))));
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}) => Response.json(body, { status, headers });

function errorResponse(e: unknown): Response {
  if (e instanceof HerdError) return json(e.status, errorBody(e.status, e.message, e.param), e.headers);
  return json(500, errorBody(500, `internal error: ${errorMessage(e)}`));
}

async function readJson(req: Request): Promise<unknown> {
  try {
    return await req.json();
  } catch (e) {
    throw new HerdError(400, "invalid_request_error", `invalid JSON body: ${errorMessage(e)}`, "invalid_json");
  }
}

const ts = () => new Date().toISOString().slice(5, 19).replace("T", " ");

export async function startSimEngine(opts: StartSimEngineOptions = {}): Promise<SimEngine> {
  const { log: _l, onCrash: _c, onKvEvents: _k, hashSeed: _h, zeroDelay, ...simOpts } = opts;
  const baseCost = zeroDelay === true ? ZERO_COST : DEFAULT_OPTIONS.cost;
  const o: SimEngineOptions = { ...DEFAULT_OPTIONS, ...stripUndefined(simOpts), cost: { ...baseCost, ...(opts.cost ?? {}) } };
  const log = opts.log ?? (() => {});
  const clock: Clock = new RealClock();
  const tokenizer = await loadTokenizer(o.tokenizer);
  const maxModelLen = Math.min(o.maxModelLen, o.kvBlocks * o.blockSize);
  const scheduler = new SimScheduler(
    {
      blockSize: o.blockSize, numBlocks: o.kvBlocks, maxNumSeqs: o.maxNumSeqs, maxNumBatchedTokens: o.maxNumBatchedTokens,
      maxWaiting: o.maxWaiting, maxModelLen, cost: o.cost, timeScale: o.timeScale, hashSeed: opts.hashSeed ?? defaultHashSeed(),
    },
    clock,
    opts.onKvEvents,
    (fn) => void setImmediate(fn),
  );
  let requests = 0;
  const stats = (): SimEngineStats => ({ ...scheduler.stats(), requests });
  const metrics = new SimMetrics(o.model, scheduler.stats.bind(scheduler), { blockSize: o.blockSize, numBlocks: o.kvBlocks });
  const vocab = new OutputVocabulary(tokenizer);
  const inflight = new Map<string, () => void>();
  const hung = new Set<() => void>();
  let dead = false;
  // vLLM's sleep mode (level 1 offloads weights, discards the KV cache): asleep, generation is
  // refused; the sim frees nothing else (docs/features/sleep_mode.md in vllm-project/vllm).
  let asleep = false;
  // SGLang mode: the prefill side's bootstrap server on the engine's own host and bootstrap port.
  const sglang = o.disaggregationMode;
  const kv = o.kvTransfer ?? (sglang === null ? null : { connector: "NixlConnector" as const, role: "kv_both" as const, engineId: crypto.randomUUID(), loadFailurePolicy: "fail" as const, leaseDurationS: 30 });
  const pd = kv === null ? null : new SimPd(
    {
      kv,
      sglangMode: sglang,
      sideChannelHost: sglang !== null ? o.host : (o.sideChannelHost ?? process.env.VLLM_NIXL_SIDE_CHANNEL_HOST ?? "localhost"),
      sideChannelPort: sglang !== null ? o.disaggregationBootstrapPort : (o.sideChannelPort ?? envPort(process.env.VLLM_NIXL_SIDE_CHANNEL_PORT) ?? 5600),
      bytesPerBlock: o.kvBytesPerBlock,
      faults: { transferFailRate: o.kvTransferFailRate, bytesPerS: o.kvTransferBytesPerS, leaseExpireRate: o.kvLeaseExpireRate },
      prefillFailRate: o.pdPrefillFailRate,
      transferTimeoutMs: o.kvTransferTimeoutMs,
      tpSize: 1,
      seed: o.seed,
    },
    scheduler,
    clock,
    metrics.registry,
  );
  let server: ReturnType<typeof Bun.serve> | null = null;

  const crash = () => {
    if (dead) return;
    dead = true;
    log(`ERROR ${ts()} [core] EngineCore encountered a fatal error (simulated crash after ${o.crashAfter} requests).`);
    // Let the chunk already written reach the socket, then die.
    clock.setTimer(10, () => (opts.onCrash ?? (() => void server?.stop(true)))());
  };

  await loadModel(o, maxModelLen, log);
  const handleGeneration = async (endpoint: "chat" | "completion", req: Request): Promise<Response> => {
    const n = ++requests;
    if (dead) return json(500, errorBody(500, "EngineCore has failed (simulated crash)"));
    if (asleep) return json(503, errorBody(503, "The engine is sleeping (POST /wake_up first)"));
    if (o.failAfter !== null && n > o.failAfter) return json(500, errorBody(500, `simulated failure: request ${n} after --fail-after ${o.failAfter}`));
    if (o.hangAfter !== null && n > o.hangAfter) {
      // Accepted and never answered: resolves only when the client goes away or the engine stops.
      return new Promise<Response>((resolve) => {
        const done = () => {
          hung.delete(done);
          resolve(new Response(null, { status: 499 }));
        };
        hung.add(done);
        req.signal.addEventListener("abort", done, { once: true });
      });
    }
    const body = await readJson(req);
    const g = parseGeneration(endpoint, body, o.model, tokenizer, o.loraModules.map((l) => l.name));
    const ctx: GenerateContext = {
      scheduler, metrics, vocab, seed: o.seed, outputLen: o.outputLen, maxModelLen, now: () => clock.now(),
      crash: o.crashAfter !== null && n === o.crashAfter + 1 ? crash : null, inflight,
    };
    let hooks: PdHooks = {};
    if (pd !== null) {
      const prep = await pd.prepare(body, g, req.signal, (line) => log(`ERROR ${ts()} [nixl] ${line}`));
      if ("response" in prep) return prep.response;
      hooks = prep.hooks;
    }
    try {
      return await generate(ctx, g, req.signal, hooks);
    } catch (e) {
      hooks.onDone?.();
      throw e;
    }
  };

  const route = async (req: Request): Promise<Response> => {
    const path = new URL(req.url).pathname;
    const method = req.method;
    const want = (m: string) => {
      if (method !== m) throw new HerdError(405, "invalid_request_error", "Method Not Allowed", "method_not_allowed");
    };
    switch (path) {
      case "/health":
        want("GET");
        return new Response(null, { status: dead ? 503 : 200 });
      case "/v1/models":
        want("GET");
        return json(200, { object: "list", data: modelCards(o, maxModelLen) });
      case "/version":
        return json(200, { version: VLLM_VERSION });
      case "/metrics":
        want("GET");
        return new Response(await metrics.text(), { headers: { "content-type": metrics.registry.contentType } });
      case "/tokenize": {
        want("POST");
        const body = await readJson(req);
        if (body === null || typeof body !== "object") throw new HerdError(400, "invalid_request_error", "request body must be a JSON object", "invalid_value");
        const b = body as Record<string, unknown>;
        let tokens: number[];
        if (b.messages !== undefined) {
          // vLLM's chat form defaults to add_special_tokens=false (the template already has them).
          tokens = tokenizer.encode(renderChat(b, tokenizer), { addSpecialTokens: b.add_special_tokens === true });
        } else if (typeof b.prompt === "string") {
          tokens = tokenizer.encode(b.prompt, { addSpecialTokens: b.add_special_tokens !== false });
        } else tokens = parsePrompt(b.prompt, tokenizer);
        // return_token_strs: transformers' convert_ids_to_tokens (vllm serving_tokenization.py).
        const strs = b.return_token_strs === true ? tokens.map((id) => tokenizer.idToToken?.(id) ?? tokenizer.decode([id])) : null;
        return json(200, { count: tokens.length, max_model_len: maxModelLen, tokens, token_strs: strs });
      }
      case "/detokenize": {
        want("POST");
        const b = (await readJson(req)) as { tokens?: unknown } | null;
        const t = b?.tokens;
        if (!Array.isArray(t) || !t.every((x) => Number.isInteger(x) && x >= 0)) throw new HerdError(400, "invalid_request_error", "tokens must be a list of token ids", "invalid_value", "tokens");
        const oov = (t as number[]).find((id) => id >= tokenizer.vocabSize);
        if (oov !== undefined) throw new HerdError(400, "invalid_request_error", `Token id ${oov} is out of vocabulary`, "invalid_value", "tokens");
        return json(200, { prompt: tokenizer.decode(t as number[]) });
      }
      case "/sleep":
      case "/wake_up":
      case "/is_sleeping":
        // Mounted only in sleep mode, as vLLM mounts them only with VLLM_SERVER_DEV_MODE=1.
        if (!o.sleepMode) return json(404, { detail: "Not Found" });
        if (path === "/is_sleeping") {
          want("GET");
          return json(200, { is_sleeping: asleep });
        }
        want("POST");
        if (path === "/sleep") {
          asleep = true;
          log(`INFO ${ts()} [api_server.py] sleep the engine with level ${new URL(req.url).searchParams.get("level") ?? "1"}`);
        } else {
          if (asleep && o.wakeDelayMs > 0) await Bun.sleep(o.wakeDelayMs);
          asleep = false;
          log(`INFO ${ts()} [api_server.py] wake up the engine`);
        }
        return new Response(null, { status: 200 });
      case "/reset_prefix_cache":
        want("POST");
        scheduler.resetPrefixCache();
        return new Response(null, { status: 200 });
      case "/v1/chat/completions":
        want("POST");
        return handleGeneration("chat", req);
      case "/v1/completions":
        want("POST");
        return handleGeneration("completion", req);
      default:
        return json(404, { detail: "Not Found" });
    }
  };

  server = Bun.serve({
    hostname: o.host,
    port: o.port,
    idleTimeout: 0, // streams may pause for long (slow steps, --hang-after); the client decides
    fetch: async (req) => {
      try {
        return await route(req);
      } catch (e) {
        return errorResponse(e);
      }
    },
  });
  const port = server.port!;
  const url = `http://${o.host.includes(":") ? `[${o.host}]` : o.host}:${port}`;
  log(`INFO ${ts()} [api_server] Starting vLLM API server 0 on ${url}`);
  log(`INFO:     Started server process [${process.pid}]`);
  log("INFO:     Waiting for application startup.");
  log("INFO:     Application startup complete.");

  return {
    url,
    port,
    options: o,
    scheduler,
    tokenizer,
    pd,
    stats,
    async stop() {
      pd?.stop();
      for (const abort of [...inflight.values()]) abort();
      for (const done of [...hung]) done();
      await server?.stop(true);
      server = null;
    },
  };
}

/** /v1/models: the base model, then one card per LoRA adapter (vllm serving_models.py show_available_models). */
function modelCards(o: SimEngineOptions, maxModelLen: number): unknown[] {
  const created = Math.floor(wallClockMs() / 1000);
  const permission = () => [{
    id: `modelperm-${crypto.randomUUID().replaceAll("-", "")}`, object: "model_permission", created, allow_create_engine: false, allow_sampling: true,
    allow_logprobs: true, allow_search_indices: false, allow_view: true, allow_fine_tuning: false, organization: "*", group: null, is_blocking: false,
  }];
  const base = { id: o.model, object: "model", created, owned_by: "vllm", root: o.modelPath ?? o.model, parent: null, max_model_len: maxModelLen, permission: permission() };
  const loras = o.loraModules.map((l) => ({ id: l.name, object: "model", created, owned_by: "vllm", root: l.path, parent: o.model, max_model_len: null, permission: permission() }));
  return [base, ...loras];
}

/**
 * "Loading the model": vLLM V1's start-up lines, spread over --startup-delay-ms in the proportions
 * of a real start (planner notes: bootstrap and imports first, then weights, torch.compile, KV
 * profiling, CUDA graphs). Wording as vLLM logs it (vllm/v1/engine/core.py "init engine (profile,
 * create kv cache, warmup model) took …", v1/core/kv_cache_utils.py "GPU KV cache size", …).
 */
async function loadModel(o: SimEngineOptions, maxModelLen: number, log: (line: string) => void): Promise<void> {
  const total = o.startupDelayMs;
  const path = o.modelPath ?? o.model;
  const secs = (f: number) => ((total * f) / 1000).toFixed(2);
  let at = 0;
  const until = async (f: number) => {
    const ms = total * f - at;
    if (ms > 0) await Bun.sleep(ms);
    at = total * f;
  };
  const kvTokens = o.kvBlocks * o.blockSize;
  log(`INFO ${ts()} [api_server.py] vLLM API server version ${VLLM_VERSION}`);
  log(`INFO ${ts()} [model.py] Using max model len ${maxModelLen}`);
  log(`INFO ${ts()} [scheduler.py] Chunked prefill is enabled with max_num_batched_tokens=${o.maxNumBatchedTokens}.`);
  await until(0.4);
  log(`INFO ${ts()} [gpu_model_runner.py] Starting to load model ${path}...`);
  await until(0.55);
  log(`INFO ${ts()} [default_loader.py] Loading weights took ${secs(0.15)} seconds`);
  log(`INFO ${ts()} [gpu_model_runner.py] Model loading took 15.27 GiB memory and ${secs(0.16)} seconds`);
  await until(0.85);
  log(`INFO ${ts()} [monitor.py] torch.compile takes ${secs(0.28)} s in total`);
  log(`INFO ${ts()} [gpu_worker.py] Available KV cache memory: ${((kvTokens * 147_456) / 2 ** 30).toFixed(2)} GiB`);
  log(`INFO ${ts()} [kv_cache_utils.py] GPU KV cache size: ${kvTokens.toLocaleString("en-US")} tokens`);
  log(`INFO ${ts()} [kv_cache_utils.py] Maximum concurrency for ${maxModelLen.toLocaleString("en-US")} tokens per request: ${(kvTokens / maxModelLen).toFixed(2)}x`);
  await until(0.97);
  log(`INFO ${ts()} [gpu_model_runner.py] Graph capturing finished in ${Math.round((total * 0.1) / 1000)} secs, took 0.53 GiB`);
  await until(1);
  log(`INFO ${ts()} [core.py] init engine (profile, create kv cache, warmup model) took ${secs(0.6)} seconds`);
  log(`INFO ${ts()} [loggers.py] Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: ${o.kvBlocks}`);
  log(`INFO ${ts()} [api_server.py] Supported_tasks: ['generate']`);
}

function envPort(v: string | undefined): number | null {
  const n = Number(v);
  return v !== undefined && v !== "" && Number.isInteger(n) && n >= 0 && n <= 65535 ? n : null;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
