// The simulated engine's routes (vLLM's OpenAI server paths) and the state they share: requests
// counted for the fault knobs, the crash, sleep mode, and the requests stop() must end.

import { type Clock, wallClockMs } from "../../core/clock.ts";
import { HerdError, errorMessage } from "../../core/errors.ts";
import type { Tokenizer } from "../../tokenizer/index.ts";
import { type GenerateContext, type PdHooks, generate } from "./generate.ts";
import type { SimMetrics } from "./metrics.ts";
import { errorBody, parseGeneration, parsePrompt, renderChat } from "./openai.ts";
import { type SimEngineOptions, VLLM_VERSION } from "./options.ts";
import type { OutputVocabulary } from "./output.ts";
import type { SimPd } from "./pd.ts";
import type { SchedulerStats, SimScheduler } from "./scheduler.ts";
import { embeddings, rerank, score, type PoolingCtx } from "./pooling.ts";
import { asResponses, responsesAsChat } from "./responses.ts";

export interface SimEngineStats extends SchedulerStats {
  /** Generation requests received (what the fault knobs count). */
  requests: number;
}

/** What the routes serve from; built once by startSimEngine. */
export interface SimParts {
  o: SimEngineOptions;
  maxModelLen: number;
  log: (line: string) => void;
  clock: Clock;
  tokenizer: Tokenizer;
  scheduler: SimScheduler;
  metrics: SimMetrics;
  vocab: OutputVocabulary;
  pd: SimPd | null;
  /** What a simulated crash finally does (drop every connection, or the caller's onCrash). */
  die: () => void;
}

export const ts = () => new Date().toISOString().slice(5, 19).replace("T", " ");

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

function want(req: Request, method: string): void {
  if (req.method !== method) throw new HerdError(405, "invalid_request_error", "Method Not Allowed", "method_not_allowed");
}

export class SimRoutes {
  private requests = 0;
  private readonly inflight = new Map<string, () => void>();
  private readonly hung = new Set<() => void>();
  private dead = false;
  // vLLM's sleep mode (level 1 offloads weights, discards the KV cache): asleep, generation is
  // refused; the sim frees nothing else (docs/features/sleep_mode.md in vllm-project/vllm).
  private asleep = false;

  constructor(private readonly e: SimParts) {}

  stats(): SimEngineStats {
    return { ...this.e.scheduler.stats(), requests: this.requests };
  }

  /** Ends every in-flight and hung request (stop()). */
  endAll(): void {
    for (const abort of [...this.inflight.values()]) abort();
    for (const done of [...this.hung]) done();
  }

  async fetch(req: Request): Promise<Response> {
    try {
      return await this.route(req);
    } catch (e) {
      return errorResponse(e);
    }
  }

  private async route(req: Request): Promise<Response> {
    const { o, maxModelLen, metrics, scheduler } = this.e;
    const path = new URL(req.url).pathname;
    switch (path) {
      case "/health":
        want(req, "GET");
        return new Response(null, { status: this.dead ? 503 : 200 });
      case "/v1/models":
        want(req, "GET");
        return json(200, { object: "list", data: modelCards(o, maxModelLen) });
      case "/version":
        return json(200, { version: VLLM_VERSION });
      case "/metrics":
        want(req, "GET");
        return new Response(await metrics.text(), { headers: { "content-type": metrics.registry.contentType } });
      case "/tokenize":
        want(req, "POST");
        return this.tokenize(await readJson(req));
      case "/detokenize":
        want(req, "POST");
        return this.detokenize(await readJson(req));
      case "/sleep":
      case "/wake_up":
      case "/is_sleeping":
        return this.sleepMode(path, req);
      case "/reset_prefix_cache":
        want(req, "POST");
        scheduler.resetPrefixCache();
        return new Response(null, { status: 200 });
      case "/v1/chat/completions":
        want(req, "POST");
        return this.generation("chat", req);
      case "/v1/completions":
        want(req, "POST");
        return this.generation("completion", req);
      case "/v1/load_lora_adapter":
      case "/v1/unload_lora_adapter":
        if (!o.runtimeLora) return json(404, { detail: "Not Found" });
        want(req, "POST");
        return this.runtimeLora(path === "/v1/load_lora_adapter", await readJson(req));
      case "/v1/responses":
        want(req, "POST");
        return this.generation("responses", req);
      case "/v1/embeddings":
      case "/pooling":
        want(req, "POST");
        return this.pooling((b) => embeddings(b, this.poolingCtx(), path === "/pooling" ? "pooling" : "embedding"), req);
      case "/v1/score":
      case "/score":
        want(req, "POST");
        return this.pooling((b) => score(b, this.poolingCtx()), req);
      case "/v1/rerank":
      case "/rerank":
      case "/v2/rerank":
        want(req, "POST");
        return this.pooling((b) => rerank(b, this.poolingCtx()), req);
      default:
        return json(404, { detail: "Not Found" });
    }
  }

  private poolingCtx(): PoolingCtx {
    return { served: this.e.o.model, tokenizer: this.e.tokenizer, maxModelLen: this.e.maxModelLen };
  }

  /** A pooling request: no decode, answered at once (the sim models no pooling cost); faults apply. */
  private async pooling(answer: (body: unknown) => unknown, req: Request): Promise<Response> {
    if (this.dead) return json(500, errorBody(500, "EngineCore has failed (simulated crash)"));
    if (this.asleep) return json(503, errorBody(503, "The engine is sleeping (POST /wake_up first)"));
    return json(200, answer(await readJson(req)));
  }

  /**
   * vLLM's runtime LoRA updates (serving_models.py load_lora_adapter / unload_lora_adapter): 200
   * with a plain-text "Success: …", 400 for an adapter already loaded, 404 for one not loaded.
   */
  private runtimeLora(load: boolean, body: unknown): Response {
    const { o, log } = this.e;
    const b = (body ?? {}) as { lora_name?: unknown; lora_path?: unknown };
    if (typeof b.lora_name !== "string" || b.lora_name === "") throw new HerdError(400, "invalid_request_error", "lora_name must be a non-empty string", "invalid_value", "lora_name");
    const name = b.lora_name;
    const i = o.loraModules.findIndex((l) => l.name === name);
    if (load) {
      if (typeof b.lora_path !== "string" || b.lora_path === "") throw new HerdError(400, "invalid_request_error", "lora_path must be a non-empty string", "invalid_value", "lora_path");
      if (i >= 0) throw new HerdError(400, "invalid_request_error", `The lora adapter '${name}' has already been loaded.`, "invalid_value");
      o.loraModules = [...o.loraModules, { name, path: b.lora_path }];
      log(`INFO ${ts()} [serving_models.py] Loaded new LoRA adapter: name '${name}', path '${b.lora_path}'`);
      return new Response(`Success: LoRA adapter '${name}' added successfully.`, { status: 200 });
    }
    if (i < 0) throw new HerdError(404, "not_found_error", `The lora adapter '${name}' cannot be found.`, "model_not_found");
    o.loraModules = o.loraModules.filter((l) => l.name !== name);
    log(`INFO ${ts()} [serving_models.py] Removed LoRA adapter: name '${name}'`);
    return new Response(`Success: LoRA adapter '${name}' removed successfully.`, { status: 200 });
  }

  private tokenize(body: unknown): Response {
    const { tokenizer, maxModelLen } = this.e;
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

  private detokenize(body: unknown): Response {
    const { tokenizer } = this.e;
    const t = (body as { tokens?: unknown } | null)?.tokens;
    if (!Array.isArray(t) || !t.every((x) => Number.isInteger(x) && x >= 0)) throw new HerdError(400, "invalid_request_error", "tokens must be a list of token ids", "invalid_value", "tokens");
    const oov = (t as number[]).find((id) => id >= tokenizer.vocabSize);
    if (oov !== undefined) throw new HerdError(400, "invalid_request_error", `Token id ${oov} is out of vocabulary`, "invalid_value", "tokens");
    return json(200, { prompt: tokenizer.decode(t as number[]) });
  }

  private async sleepMode(path: string, req: Request): Promise<Response> {
    const { o, log } = this.e;
    // Mounted only in sleep mode, as vLLM mounts them only with VLLM_SERVER_DEV_MODE=1.
    if (!o.sleepMode) return json(404, { detail: "Not Found" });
    if (path === "/is_sleeping") {
      want(req, "GET");
      return json(200, { is_sleeping: this.asleep });
    }
    want(req, "POST");
    if (path === "/sleep") {
      this.asleep = true;
      log(`INFO ${ts()} [api_server.py] sleep the engine with level ${new URL(req.url).searchParams.get("level") ?? "1"}`);
    } else {
      if (this.asleep && o.wakeDelayMs > 0) await Bun.sleep(o.wakeDelayMs);
      this.asleep = false;
      log(`INFO ${ts()} [api_server.py] wake up the engine`);
    }
    return new Response(null, { status: 200 });
  }

  private async generation(kind: "chat" | "completion" | "responses", req: Request): Promise<Response> {
    const { o, tokenizer, pd, log } = this.e;
    const n = ++this.requests;
    if (this.dead) return json(500, errorBody(500, "EngineCore has failed (simulated crash)"));
    if (this.asleep) return json(503, errorBody(503, "The engine is sleeping (POST /wake_up first)"));
    if (o.failAfter !== null && n > o.failAfter) return json(500, errorBody(500, `simulated failure: request ${n} after --fail-after ${o.failAfter}`));
    if (o.hangAfter !== null && n > o.hangAfter) return this.hang(req);
    let body = await readJson(req);
    // /v1/responses runs as the chat request it stands for, its answer reshaped (responses.ts).
    const asked = kind === "responses" ? responsesAsChat(body, o.model) : null;
    if (asked) body = asked.chat;
    const endpoint = kind === "responses" ? "chat" : kind;
    const g = parseGeneration(endpoint, body, o.model, tokenizer, o.loraModules.map((l) => l.name));
    const ctx = this.generateContext(o.crashAfter !== null && n === o.crashAfter + 1);
    let hooks: PdHooks = {};
    if (pd !== null) {
      const prep = await pd.prepare(body, g, req.signal, (line) => log(`ERROR ${ts()} [nixl] ${line}`));
      if ("response" in prep) return prep.response;
      hooks = prep.hooks;
    }
    try {
      const answer = await generate(ctx, g, req.signal, hooks);
      return asked ? await asResponses(answer, asked.head, asked.stream) : answer;
    } catch (e) {
      hooks.onDone?.();
      throw e;
    }
  }

  private generateContext(crashes: boolean): GenerateContext {
    const { o, scheduler, metrics, vocab, maxModelLen, clock } = this.e;
    return {
      scheduler, metrics, vocab, seed: o.seed, outputLen: o.outputLen, maxModelLen, now: () => clock.now(),
      crash: crashes ? this.crash : null, inflight: this.inflight,
    };
  }

  /** Accepted and never answered: resolves only when the client goes away or the engine stops. */
  private hang(req: Request): Promise<Response> {
    return new Promise<Response>((resolve) => {
      const done = () => {
        this.hung.delete(done);
        resolve(new Response(null, { status: 499 }));
      };
      this.hung.add(done);
      req.signal.addEventListener("abort", done, { once: true });
    });
  }

  private readonly crash = () => {
    if (this.dead) return;
    this.dead = true;
    this.e.log(`ERROR ${ts()} [core] EngineCore encountered a fatal error (simulated crash after ${this.e.o.crashAfter} requests).`);
    // Let the chunk already written reach the socket, then die.
    this.e.clock.setTimer(10, () => this.e.die());
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
