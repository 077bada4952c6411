// The sim engine's pooling endpoints in vLLM's shapes (vllm/entrypoints/pooling: EmbeddingResponse
// `embd-…` {object "list", data [{index, object "embedding", embedding}], usage}; ScoreResponse
// {data [{index, object "score", score}]}; RerankResponse `rerank-…` {results [{index, document
// {text}, relevance_score}] sorted by score, usage {prompt_tokens, total_tokens}}; PoolingResponse
// `pool-…` {data [{index, object "pooling", data}]}). No model: an embedding is the normalised mean
// of one seeded pseudo-random vector per token id, so it is deterministic from the tokens and texts
// sharing tokens are close; score and relevance are the cosine of the two embeddings.
// `encoding_format: "base64"` is little-endian float32 as vLLM (and the openai client) encode it.
import { wallClockMs } from "../../core/clock.ts";
import { HerdError, badRequest } from "../../core/errors.ts";
import type { Tokenizer } from "../../tokenizer/index.ts";
import { renderChat } from "./openai.ts";

/** Hidden size the sim reports (Qwen3-Embedding-0.6B's 1024 is long for tests; 256 keeps answers small). */
export const SIM_EMBEDDING_DIM = 256;

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/** Deterministic unit-ish vector of one token id (xorshift32 seeded by the id). */
function tokenVector(id: number, dim: number, into: Float64Array): void {
  let x = (id + 0x9e3779b9) >>> 0 || 1;
  for (let i = 0; i < dim; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    into[i]! += x / 0xffffffff - 0.5;
  }
}

export function embed(tokens: readonly number[], dim = SIM_EMBEDDING_DIM): number[] {
  const v = new Float64Array(dim);
  for (const t of tokens) tokenVector(t, dim, v);
  let norm = 0;
  for (const x of v) norm += x * x;
  norm = Math.sqrt(norm) || 1;
  return Array.from(v, (x) => Math.fround(x / norm));
}

const cosine = (a: readonly number[], b: readonly number[]) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
};

function base64(v: readonly number[]): string {
  return Buffer.from(new Float32Array(v).buffer).toString("base64");
}

export interface PoolingCtx {
  served: string;
  tokenizer: Tokenizer;
  maxModelLen: number;
}

function checkModel(body: unknown, served: string): Record<string, unknown> {
  if (!isObj(body)) throw badRequest("request body must be a JSON object", null);
  const model = body.model ?? served;
  if (model !== served) throw new HerdError(404, "not_found_error", `The model \`${String(model)}\` does not exist.`, "model_not_found", "model");
  return body;
}

/** Token ids of each input (strings encoded with special tokens, ids as given). */
function inputs(v: unknown, ctx: PoolingCtx, param: string): number[][] {
  const tok = ctx.tokenizer;
  const one = (x: unknown): number[] => {
    if (typeof x === "string") return tok.encode(x, { addSpecialTokens: true });
    if (Array.isArray(x) && x.every((t) => Number.isInteger(t) && t >= 0)) {
      const bad = (x as number[]).find((t) => t >= tok.vocabSize);
      if (bad !== undefined) throw badRequest(`Token id ${bad} is out of vocabulary`, param);
      return x as number[];
    }
    if (isObj(x) && typeof x.text === "string") return tok.encode(x.text, { addSpecialTokens: true });
    throw badRequest(`${param} must be a string, a list of strings or a list of token ids`, param);
  };
  let list: unknown[];
  if (typeof v === "string" || (Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === "number"))) list = [v];
  else if (Array.isArray(v) && v.length > 0) list = v;
  else throw badRequest(`${param} must not be empty`, param);
  const out = list.map(one);
  for (const ids of out)
    if (ids.length > ctx.maxModelLen) throw badRequest(`This model's maximum context length is ${ctx.maxModelLen} tokens. However, you requested ${ids.length} tokens in the input.`, param);
  return out;
}

const hex = () => crypto.randomUUID().replaceAll("-", "");
const created = () => Math.floor(wallClockMs() / 1000);
const usage = (prompt: number) => ({ prompt_tokens: prompt, total_tokens: prompt, completion_tokens: 0, prompt_tokens_details: null });
const total = (xs: number[][]) => xs.reduce((n, x) => n + x.length, 0);

function dimOf(body: Record<string, unknown>): number {
  const d = body.dimensions;
  if (d === undefined || d === null) return SIM_EMBEDDING_DIM;
  if (!Number.isInteger(d) || (d as number) < 1 || (d as number) > SIM_EMBEDDING_DIM) throw badRequest(`dimensions must be an integer in [1, ${SIM_EMBEDDING_DIM}]`, "dimensions");
  return d as number;
}

/** POST /v1/embeddings and /pooling. */
export function embeddings(raw: unknown, ctx: PoolingCtx, kind: "embedding" | "pooling"): unknown {
  const body = checkModel(raw, ctx.served);
  const fmt = body.encoding_format ?? "float";
  if (fmt !== "float" && fmt !== "base64") throw badRequest("encoding_format must be 'float' or 'base64'", "encoding_format");
  const dim = dimOf(body);
  const ids = body.messages !== undefined ? [ctx.tokenizer.encode(renderChat(body, ctx.tokenizer), { addSpecialTokens: false })] : inputs(body.input, ctx, "input");
  const data = ids.map((t, index) => {
    const v = embed(t, dim);
    const value = fmt === "base64" ? base64(v) : v;
    return kind === "embedding" ? { index, object: "embedding", embedding: value } : { index, object: "pooling", data: value };
  });
  return { id: `${kind === "embedding" ? "embd" : "pool"}-${hex()}`, object: "list", created: created(), model: ctx.served, data, usage: usage(total(ids)) };
}

function pairs(body: Record<string, unknown>): [unknown, unknown] {
  for (const [a, b] of [["text_1", "text_2"], ["queries", "documents"], ["queries", "items"], ["data_1", "data_2"]])
    if (body[a!] !== undefined && body[b!] !== undefined) return [body[a!], body[b!]];
  throw badRequest("text_1 and text_2 are required", "text_1");
}

/** POST /v1/score: text_1 (one, or one per text_2) against each text_2. */
export function score(raw: unknown, ctx: PoolingCtx): unknown {
  const body = checkModel(raw, ctx.served);
  const [x, y] = pairs(body);
  const left = inputs(x, ctx, "text_1");
  const right = inputs(y, ctx, "text_2");
  if (left.length !== 1 && left.length !== right.length) throw badRequest("text_1 must hold one text or as many as text_2", "text_1");
  const data = right.map((r, index) => ({ index, object: "score", score: cosine(embed(left.length === 1 ? left[0]! : left[index]!), embed(r)) }));
  const tokens = right.reduce((n, r, i) => n + r.length + (left.length === 1 ? left[0]! : left[i]!).length, 0);
  return { id: `score-${hex()}`, object: "list", created: created(), model: ctx.served, data, usage: usage(tokens) };
}

/** POST /v1/rerank (and /rerank, /v2/rerank): documents by relevance to the query, top_n of them. */
export function rerank(raw: unknown, ctx: PoolingCtx): unknown {
  const body = checkModel(raw, ctx.served);
  if (typeof body.query !== "string") throw badRequest("query must be a string", "query");
  if (!Array.isArray(body.documents) || body.documents.length === 0) throw badRequest("documents must be a non-empty list", "documents");
  const q = ctx.tokenizer.encode(body.query, { addSpecialTokens: true });
  const docs = inputs(body.documents, ctx, "documents");
  const qv = embed(q);
  const topN = Number.isInteger(body.top_n) && (body.top_n as number) > 0 ? (body.top_n as number) : docs.length;
  const results = docs
    .map((d, index) => {
      const doc = body.documents as unknown[];
      const text = typeof doc[index] === "string" ? (doc[index] as string) : isObj(doc[index]) && typeof (doc[index] as { text?: unknown }).text === "string" ? (doc[index] as { text: string }).text : null;
      return { index, document: { text, multi_modal: null }, relevance_score: cosine(qv, embed(d)) };
    })
    .sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index)
    .slice(0, topN);
  const tokens = docs.reduce((n, d) => n + d.length + q.length, 0);
  return { id: `rerank-${hex()}`, model: ctx.served, usage: { prompt_tokens: tokens, total_tokens: tokens }, results };
}
