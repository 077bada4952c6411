// Synthetic workloads for `herd bench` and `herd simulate`: pure, seeded generators of request shapes
// (no I/O, no clock), so the same seed gives the same prompts whether they go over HTTP or into an
// in-process simulation. Prompt lengths are in words, and words ≈ tokens (see words.ts).
//
// Each generator is an infinite iterator of `RequestShape`; `plan()` (plan.ts) attaches arrival times.

import type { Rng } from "../core/rng.ts";
import type { ChatMessage } from "../tokenizer/types.ts";
import { words, wordsFor } from "./words.ts";

/** One request of a workload. Exactly one of `messages` (chat) or `prompt` (completions) is set. */
export interface BenchRequest {
  /** Offered arrival time in seconds from the start of the run (0 for closed-loop runs). */
  at_s: number;
  /** Who sends it: a user or conversation id (session-affinity routers key on it; multi-turn turns stay in order). */
  session: string;
  messages?: ChatMessage[];
  prompt?: string;
  max_tokens: number;
}

export type RequestShape = Omit<BenchRequest, "at_s">;

export interface DocQaSpec { kind: "doc-qa"; documents: number; doc_tokens: number; system_tokens: number; question_tokens: number; users: number; output: number }
export interface MultiTurnSpec { kind: "multi-turn"; sessions: number; turns: number; system_tokens: number; user_tokens: number; output: number }
export interface RagSpec { kind: "rag"; chunks: number; chunk_tokens: number; k: number; question_tokens: number; output: number }
export interface HotPrefixSpec { kind: "hot-prefix"; prefixes: number; prefix_tokens: number; suffix_tokens: number; zipf: number; users: number; output: number }
export interface FixedSpec { kind: "fixed"; input: number; output: number; api: "completions" | "chat" }
export interface MixedSpec { kind: "mixed"; long_percent: number; documents: number; doc_tokens: number; question_tokens: number; long_output: number; short_tokens: number; short_output: number }

export type SyntheticSpec = DocQaSpec | MultiTurnSpec | RagSpec | HotPrefixSpec | FixedSpec | MixedSpec;

/** Defaults of every synthetic workload (documented in src/bench/README.md). */
export const DEFAULTS: { [K in SyntheticSpec["kind"]]: Extract<SyntheticSpec, { kind: K }> } = {
  "doc-qa": { kind: "doc-qa", documents: 4, doc_tokens: 3000, system_tokens: 1000, question_tokens: 50, users: 100, output: 128 },
  "multi-turn": { kind: "multi-turn", sessions: 16, turns: 8, system_tokens: 200, user_tokens: 100, output: 128 },
  rag: { kind: "rag", chunks: 1000, chunk_tokens: 256, k: 4, question_tokens: 30, output: 128 },
  "hot-prefix": { kind: "hot-prefix", prefixes: 100, prefix_tokens: 1000, suffix_tokens: 200, zipf: 1.1, users: 100, output: 128 },
  fixed: { kind: "fixed", input: 512, output: 128, api: "completions" },
  mixed: { kind: "mixed", long_percent: 25, documents: 8, doc_tokens: 6000, question_tokens: 50, long_output: 64, short_tokens: 200, short_output: 256 },
};

/** Infinite, deterministic stream of request shapes for `spec`, drawing only from `rng`. */
export function* shapes(spec: SyntheticSpec, rng: Rng): Generator<RequestShape, never> {
  switch (spec.kind) {
    case "doc-qa": {
      // The "employee handbook" case: one long shared system prompt, then one of N documents, then a
      // short question. Requests on the same document share system + document as a prefix.
      const system = `You answer questions about the documents below. ${words(rng, wordsFor(spec.system_tokens))}`;
      const docs = Array.from({ length: spec.documents }, (_, i) => `Document ${i}: ${words(rng, wordsFor(spec.doc_tokens))}`);
      for (;;) {
        const doc = docs[rng.int(docs.length)]!;
        const user = rng.int(spec.users);
        yield {
          session: `user-${user}`,
          messages: [{ role: "system", content: `${system}\n\n${doc}` }, { role: "user", content: words(rng, wordsFor(spec.question_tokens)) }],
          max_tokens: spec.output,
        };
      }
    }
    case "multi-turn": {
      // `sessions` conversations are open at once; each request continues a random one. A turn carries
      // the whole history: earlier questions and (synthetic, `output` words) answers, so the previous
      // prompt is a prefix of the next. The answer text is synthetic, not the server's real answer, so
      // a prefix cache hits up to the end of the previous turn's prompt (as after any edited answer).
      const system = `You are a patient assistant. ${words(rng, wordsFor(spec.system_tokens))}`;
      let next = 0;
      const open = (): { id: string; history: ChatMessage[]; turn: number } => ({ id: `conv-${next++}`, history: [{ role: "system", content: system }], turn: 0 });
      const live = Array.from({ length: Math.max(1, spec.sessions) }, open);
      for (;;) {
        const i = rng.int(live.length);
        const s = live[i]!;
        s.history.push({ role: "user", content: words(rng, wordsFor(spec.user_tokens)) });
        yield { session: s.id, messages: s.history.slice(), max_tokens: spec.output };
        s.history.push({ role: "assistant", content: words(rng, wordsFor(spec.output)) });
        if (++s.turn >= spec.turns) live[i] = open();
      }
    }
    case "rag": {
      // Retrieved chunks come first, so requests begin differently: little prefix is shared unless the
      // same top chunk is retrieved again (1 in `chunks`).
      const corpus = Array.from({ length: spec.chunks }, () => words(rng, wordsFor(spec.chunk_tokens)));
      for (let n = 0; ; n++) {
        const picked: string[] = [];
        for (let j = 0; j < spec.k; j++) picked.push(corpus[rng.int(corpus.length)]!);
        const q = words(rng, wordsFor(spec.question_tokens));
        yield { session: `rag-${n}`, messages: [{ role: "user", content: `${picked.join("\n\n")}\n\nQuestion: ${q}` }], max_tokens: spec.output };
      }
    }
    case "hot-prefix": {
      // Zipf-skewed choice among `prefixes` long system prompts: a few are hot, most are cold.
      const prefixes = Array.from({ length: spec.prefixes }, (_, i) => `Prefix ${i}. ${words(rng, wordsFor(spec.prefix_tokens))}`);
      const cdf = zipfCdf(spec.prefixes, spec.zipf);
      for (;;) {
        const p = prefixes[sampleCdf(cdf, rng.float())]!;
        yield {
          session: `user-${rng.int(spec.users)}`,
          messages: [{ role: "system", content: p }, { role: "user", content: words(rng, wordsFor(spec.suffix_tokens)) }],
          max_tokens: spec.output,
        };
      }
    }
    case "mixed": {
      // Short chats and long document questions in one stream (the `predicted` policy's benchmark,
      // bench/routing-predicted.ts): `long_percent` % of requests ask about one of `documents` long
      // documents (shared prefixes, expensive when uncached), the rest are short unique chats.
      const docs = Array.from({ length: spec.documents }, (_, i) => `Document ${i}: ${words(rng, wordsFor(spec.doc_tokens))}`);
      for (let n = 0; ; n++) {
        if (rng.int(100) < spec.long_percent) {
          const doc = docs[rng.int(docs.length)]!;
          yield { session: `doc-${n}`, messages: [{ role: "system", content: doc }, { role: "user", content: words(rng, wordsFor(spec.question_tokens)) }], max_tokens: spec.long_output };
        } else yield { session: `chat-${n}`, messages: [{ role: "user", content: words(rng, wordsFor(spec.short_tokens)) }], max_tokens: spec.short_output };
      }
    }
    case "fixed": {
      // Random words from the first one on: no two prompts share a KV block.
      for (let n = 0; ; n++) {
        const text = words(rng, wordsFor(spec.input));
        yield spec.api === "chat"
          ? { session: `fixed-${n}`, messages: [{ role: "user", content: text }], max_tokens: spec.output }
          : { session: `fixed-${n}`, prompt: text, max_tokens: spec.output };
      }
    }
  }
}

/** Cumulative probabilities of Zipf(s) over ranks 1..n. */
export function zipfCdf(n: number, s: number): Float64Array {
  const cdf = new Float64Array(Math.max(1, n));
  let sum = 0;
  for (let i = 0; i < cdf.length; i++) cdf[i] = sum += 1 / Math.pow(i + 1, s);
  for (let i = 0; i < cdf.length; i++) cdf[i]! /= sum;
  return cdf;
}

/** Index of the first cdf entry ≥ u (binary search). */
export function sampleCdf(cdf: Float64Array, u: number): number {
  let lo = 0;
  let hi = cdf.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cdf[mid]! >= u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
