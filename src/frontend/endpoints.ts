// The inference routes beyond chat and completions, what each one means for the lifecycle, and the
// names a model answers to. Every route runs through the same admission and lifecycle as chat
// (src/frontend/app.ts `inference`): these tables only say how its body is checked, whether its
// prompt is hashed for KV-aware routing, and whether it may take a P/D plan.
//
// Paths as vLLM serves them (vllm/entrypoints/openai/api_server.py and its pooling and tokenization
// routers): /v1/responses; /v1/embeddings; /v1/score and /score; /v1/rerank, /rerank and /v2/rerank;
// /pooling; /tokenize and /detokenize. Pooling requests route by load (no decode: nothing to gain
// from a cache-aware placement of a one-pass request); responses route like chat.
import type { Hono } from "hono";
import { HerdError, badRequest } from "../core/errors.ts";
import type { Config } from "../config/types.ts";
import { checkOther } from "../protocol/endpoints.ts";
import { checkRequest, type CheckedRequest, type Endpoint, type RequestLimits } from "../protocol/openai.ts";
import { checkResponses } from "../protocol/responses.ts";
import { requestedMaxTokens } from "../request/bounds.ts";

/** Routes → endpoint, beside /v1/chat/completions and /v1/completions. */
export const EXTRA_ROUTES: readonly (readonly [string, Endpoint])[] = [
  ["/v1/responses", "responses"],
  ["/v1/embeddings", "embeddings"],
  ["/v1/score", "score"],
  ["/score", "score"],
  ["/v1/rerank", "rerank"],
  ["/rerank", "rerank"],
  ["/v2/rerank", "rerank"],
  ["/pooling", "pooling"],
  ["/tokenize", "tokenize"],
  ["/detokenize", "detokenize"],
];

export function mountExtraRoutes(app: Hono<any>, handle: (c: any, endpoint: Endpoint) => Promise<Response>): void {
  for (const [path, endpoint] of EXTRA_ROUTES) app.post(path, (c) => handle(c, endpoint));
}

/** Generation endpoints may run as a P/D plan; the others always run as one aggregated leg. */
export const isGeneration = (e: Endpoint): e is "chat" | "completions" => e === "chat" || e === "completions";

/** Validate a body for any routed endpoint (400 naming the field). */
export function checkEndpoint(endpoint: Endpoint, parsed: unknown, limits: RequestLimits): CheckedRequest {
  if (isGeneration(endpoint)) return checkRequest(endpoint, parsed, limits);
  if (endpoint === "responses") return checkResponses(parsed, limits);
  return checkOther(endpoint, parsed, limits);
}

/** The generation budget the non-streaming bound counts (bounds.ts); pooling is one forward pass. */
export function maxTokensOf(endpoint: Endpoint, body: Record<string, unknown>): number | null {
  if (isGeneration(endpoint)) return requestedMaxTokens(body);
  if (endpoint === "responses") return typeof body.max_output_tokens === "number" ? body.max_output_tokens : null;
  return 1;
}

/** What a name a client sends stands for. */
export interface Named {
  /** The configured model (models[].name) whose workers serve it. */
  model: string;
  /** The LoRA adapter it names, if any (hashes with the adapter; the engine serves it by that name). */
  lora?: string;
  /** The engine knows the model by another name: rewrite the body's `model` to `model`. */
  rename: boolean;
  /** An on-demand adapter (loaded at run time, src/frontend/lora.ts): where engines load it from. */
  onDemandPath?: string;
}

/**
 * The names clients may send: model names, their aliases (models[].aliases, vLLM's several
 * --served-model-name values; the engines are sent the model's name) and LoRA adapter names.
 */
export class ModelNames {
  private readonly byName = new Map<string, Named>();
  private readonly aliasesOf = new Map<string, string[]>();

  constructor(private readonly config: Config) {
    for (const m of config.models) {
      this.byName.set(m.name, { model: m.name, rename: false });
      for (const a of m.aliases) this.byName.set(a, { model: m.name, rename: true });
      for (const a of m.lora_adapters) this.byName.set(a.name, { model: m.name, lora: a.name, rename: false, ...(a.on_demand ? { onDemandPath: a.path } : {}) });
      this.aliasesOf.set(m.name, [...m.aliases]);
    }
  }

  /**
   * The configured model a request names. An unknown name passes as itself (the router answers
   * 404 for a model no worker serves). "" (tokenize without `model`) is the only model, else a 400.
   */
  resolve(name: string): Named {
    if (name === "") {
      if (this.config.models.length === 1) return { model: this.config.models[0]!.name, rename: false };
      throw badRequest("'model' is required when more than one model is served", "model", "missing_required_parameter");
    }
    return this.byName.get(name) ?? { model: name, rename: false };
  }

  aliases(model: string): readonly string[] {
    return this.aliasesOf.get(model) ?? [];
  }

  /** Adapter name → base model, sorted by name (for /v1/models). */
  adapters(): [string, string][] {
    return [...this.byName].filter(([, n]) => n.lora !== undefined).map(([id, n]) => [id, n.model] as [string, string]).sort();
  }
}

/** The 404 for a name nothing serves (OpenAI's model_not_found). */
export const modelNotFound = (id: string) => new HerdError(404, "invalid_request_error", `The model \`${id}\` does not exist.`, "model_not_found", "model");
