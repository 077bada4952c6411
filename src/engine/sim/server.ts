// The simulated engine's HTTP server (Bun.serve), speaking vLLM's OpenAI server routes. Like vLLM it
// does not accept connections while "loading" (--startup-delay-ms: the port is not listening until the
// delay has passed) and then prints vLLM's readiness lines, ending with uvicorn's
// "Application startup complete.".

import { readFileSync } from "node:fs";
import { type Clock, RealClock } from "../../core/clock.ts";
import { loadTokenizer, type Tokenizer } from "../../tokenizer/index.ts";
import type { KvEvent } from "./blocks.ts";
import { SimPd } from "./pd.ts";
import { SimMetrics } from "./metrics.ts";
import { ZERO_COST } from "./cost.ts";
import { DEFAULT_OPTIONS, type SimEngineOptions, VLLM_VERSION } from "./options.ts";
import { OutputVocabulary } from "./output.ts";
import { SimScheduler } from "./scheduler.ts";
import { SimOffload } from "./offload.ts";
import { type SimEngineStats, SimRoutes, ts } from "./routes.ts";

export type { SimEngineStats } from "./routes.ts";

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

export interface SimEngine {
  url: string;
  port: number;
  readonly options: SimEngineOptions;
  readonly scheduler: SimScheduler;
  readonly tokenizer: Tokenizer;
  /** The P/D connector (with --kv-transfer-config): engine id, side-channel port, held blocks. */
  readonly pd: SimPd | null;
  /** The KV tier offload (with --kv-offload-url): counters, connection state. */
  readonly offload: SimOffload | null;
  stats(): SimEngineStats;
  stop(): Promise<void>;
}

function defaultHashSeed(): bigint {
  const env = process.env.PYTHONHASHSEED;
  if (env !== undefined && env !== "" && env !== "random") return BigInt(Bun.hash.xxHash3(env));
  return BigInt(Bun.hash.xxHash3(crypto.getRandomValues(new Uint8Array(16))));
}

export async function startSimEngine(opts: StartSimEngineOptions = {}): Promise<SimEngine> {
  const o = resolveOptions(opts);
  // vLLM's envs.py: VLLM_ALLOW_RUNTIME_LORA_UPDATING is true for "1" or "true" (any case).
  if (opts.runtimeLora === undefined && /^(1|true)$/i.test(process.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING ?? "")) o.runtimeLora = true;
  const log = opts.log ?? (() => {});
  const clock: Clock = new RealClock();
  const tokenizer = await loadTokenizer(o.tokenizer);
  const maxModelLen = Math.min(o.maxModelLen, o.kvBlocks * o.blockSize);
  const scheduler = newScheduler(o, maxModelLen, clock, opts);
  const metrics = new SimMetrics(o.model, scheduler.stats.bind(scheduler), { blockSize: o.blockSize, numBlocks: o.kvBlocks });
  const vocab = new OutputVocabulary(tokenizer);
  const pd = newPd(o, scheduler, clock, metrics);
  const offload = o.kvOffloadUrl === null ? null : newOffload(o, scheduler, clock, opts, log);
  await offload?.start();
  let server: ReturnType<typeof Bun.serve> | null = null;
  const die = () => (opts.onCrash ?? (() => void server?.stop(true)))();
  const routes = new SimRoutes({ o, maxModelLen, log, clock, tokenizer, scheduler, metrics, vocab, pd, die });

  await loadModel(o, maxModelLen, log);
  server = Bun.serve({
    hostname: o.host,
    port: o.port,
    idleTimeout: 0, // streams may pause for long (slow steps, --hang-after); the client decides
    fetch: (req) => routes.fetch(req),
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
    offload,
    stats: () => routes.stats(),
    async stop() {
      pd?.stop();
      offload?.stop();
      routes.endAll();
      await server?.stop(true);
      server = null;
    },
  };
}

function resolveOptions(opts: StartSimEngineOptions): SimEngineOptions {
  const { log: _l, onCrash: _c, onKvEvents: _k, hashSeed: _h, zeroDelay, ...simOpts } = opts;
  const baseCost = zeroDelay === true ? ZERO_COST : DEFAULT_OPTIONS.cost;
  return { ...DEFAULT_OPTIONS, ...stripUndefined(simOpts), cost: { ...baseCost, ...(opts.cost ?? {}) } };
}

function newScheduler(o: SimEngineOptions, maxModelLen: number, clock: Clock, opts: StartSimEngineOptions): SimScheduler {
  return new SimScheduler(
    {
      blockSize: o.blockSize, numBlocks: o.kvBlocks, maxNumSeqs: o.maxNumSeqs, maxNumBatchedTokens: o.maxNumBatchedTokens,
      maxWaiting: o.maxWaiting, maxModelLen, cost: o.cost, timeScale: o.timeScale, hashSeed: opts.hashSeed ?? defaultHashSeed(), policy: o.schedulingPolicy,
    },
    clock,
    opts.onKvEvents,
    (fn) => void setImmediate(fn),
  );
}

/** The KV tier offload: evicted prompt blocks go to herd's RESP server, prefix misses look there. */
function newOffload(o: SimEngineOptions, scheduler: SimScheduler, clock: Clock, opts: StartSimEngineOptions, log: (l: string) => void): SimOffload {
  const emit = opts.onKvEvents ?? (() => {});
  const off = new SimOffload(
    {
      url: o.kvOffloadUrl!, password: o.kvOffloadPasswordFile === null ? null : readFileSync(o.kvOffloadPasswordFile, "utf8").replace(/\r?\n$/, ""), model: o.model, blockSize: o.blockSize, bytesPerBlock: o.kvOffloadBytesPerBlock ?? o.kvBytesPerBlock,
      loadGbPerS: o.kvOffloadLoadGbPerS, queueMax: o.kvOffloadQueueMax, timeScale: o.timeScale,
    },
    clock,
    emit,
  );
  scheduler.attachOffload(off);
  log(`INFO ${ts()} [offloading_connector.py] KV offload to ${o.kvOffloadUrl!.replace(/\/\/[^@/]*@/, "//")} (${o.kvOffloadBytesPerBlock ?? o.kvBytesPerBlock} B per block, load ${o.kvOffloadLoadGbPerS} GB/s)`);
  return off;
}

/** The P/D connector: with --kv-transfer-config, or SGLang mode (bootstrap server on the engine's own host and bootstrap port). */
function newPd(o: SimEngineOptions, scheduler: SimScheduler, clock: Clock, metrics: SimMetrics): SimPd | null {
  const sglang = o.disaggregationMode;
  const kv = o.kvTransfer ?? (sglang === null ? null : { connector: "NixlConnector" as const, role: "kv_both" as const, engineId: crypto.randomUUID(), loadFailurePolicy: "fail" as const, leaseDurationS: 30 });
  if (kv === null) return null;
  return new SimPd(
    {
      kv,
      sglangMode: sglang,
      sideChannelHost: sglang !== null ? o.host : (o.sideChannelHost ?? process.env.VLLM_NIXL_SIDE_CHANNEL_HOST ?? "localhost"),
      // An SGLang decode server has no bootstrap server of its own (it connects to the prefill's):
      // its sim listener takes any free port, so decode engines on one host never collide on 8998.
      sideChannelPort: sglang === "decode" ? 0 : sglang !== null ? o.disaggregationBootstrapPort : (o.sideChannelPort ?? envPort(process.env.VLLM_NIXL_SIDE_CHANNEL_PORT) ?? 5600),
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
