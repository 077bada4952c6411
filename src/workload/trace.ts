// JSONL traces for `--workload trace:FILE`. Two layouts, told apart per line:
//
//   herd:      {"timestamp": 0.25, "session": "u1", "messages": [...], "max_tokens": 128}
//              {"timestamp": 0.50, "session": "u2", "prompt": "…", "max_tokens": 64}
//              timestamp = seconds since the start of the trace; session optional; exactly one of
//              messages (→ /v1/chat/completions) or prompt (→ /v1/completions).
//   Mooncake:  {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, …]}
//              timestamp = milliseconds since the first request; each hash id stands for a 512-token
//              block, the last one partial (input_length − 512·(n−1) tokens). We synthesise each block
//              from its id, so identical ids give identical text and the trace's prefix sharing is kept.
//              Optional `session_id` (AIPerf's multi-turn extension) becomes the session.
//
// Pure: text in, requests out (the CLI reads the file).

import { SeededRng } from "../core/rng.ts";
import type { ChatMessage } from "../tokenizer/types.ts";
import { BenchInputError } from "./plan.ts";
import type { BenchRequest } from "./workloads.ts";
import { words } from "./words.ts";

export const MOONCAKE_BLOCK_TOKENS = 512;

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/** Serialize requests as herd-format JSONL (one line per request, trailing newline). */
export function toJsonl(requests: Iterable<BenchRequest>): string {
  let out = "";
  for (const r of requests) {
    const line: Record<string, unknown> = { timestamp: r.at_s, session: r.session };
    if (r.messages !== undefined) line.messages = r.messages;
    else line.prompt = r.prompt ?? "";
    line.max_tokens = r.max_tokens;
    out += JSON.stringify(line) + "\n";
  }
  return out;
}

/** Each non-blank line of `text` as parsed JSON with its `source:line`; bad JSON names its line. */
function* jsonLines(text: string, source: string): Generator<{ v: unknown; where: string; line: number }> {
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!.trim();
    if (raw === "") continue;
    const where = `${source}:${i + 1}`;
    try {
      yield { v: JSON.parse(raw), where, line: i + 1 };
    } catch (e) {
      if (!(e instanceof SyntaxError)) throw e;
      throw new BenchInputError(`${where}: not JSON (${e.message})`);
    }
  }
}

/**
 * Parse a JSONL trace (herd or Mooncake lines; blank lines skipped). Requests come back sorted by
 * time (stable). Throws BenchInputError naming the line on bad input.
 */
export function parseTrace(text: string, source = "trace"): BenchRequest[] {
  const blocks = new BlockText();
  const out: BenchRequest[] = [];
  for (const { v, where, line } of jsonLines(text, source)) {
    if (!isObj(v)) throw new BenchInputError(`${where}: each line must be a JSON object`);
    out.push("hash_ids" in v || "input_length" in v ? mooncakeLine(v, where, line, blocks) : herdLine(v, where, line));
  }
  // Stable sort: equal timestamps keep file order.
  return out.map((r, i) => [r, i] as const).sort((a, b) => a[0].at_s - b[0].at_s || a[1] - b[1]).map(([r]) => r);
}

/** Refusals that say nothing about capacity (the request itself was bad): not replayed. */
const CLIENT_ERRORS = new Set(["invalid", "not_found", "too_large", "unauthorized", "body_timeout"]);

/**
 * Parse herd's decision log (`decision_log`, src/request/record.ts): each line is a Mooncake line
 * plus herd's fields, timestamps in wall-clock ms. They are re-based on the first arrival; output
 * length is what was generated (else max_tokens); requests refused for their own fault are skipped.
 * Each `hash_ids` id is a 512-token prefix the original run hashed, so replayed prompts share
 * exactly the prefixes the recorded ones did (and nothing when the policy did not hash prompts).
 * `files` in order (a rotated log: oldest first); times are re-based on the earliest of all.
 */
export function parseDecisionLog(files: readonly { text: string; source: string }[]): BenchRequest[] {
  const blocks = new BlockText();
  const rows: { v: Record<string, unknown>; where: string; line: number }[] = [];
  let lineNo = 0;
  for (const { text, source } of files) {
    for (const { v, where } of jsonLines(text, source)) {
      if (!isObj(v) || typeof v.timestamp !== "number" || typeof v.input_length !== "number") throw new BenchInputError(`${where}: not a decision record (timestamp, input_length, …)`);
      lineNo++;
      if (v.outcome === "refused" && CLIENT_ERRORS.has(String(v.error))) continue;
      rows.push({ v, where, line: lineNo });
    }
  }
  let t0 = Infinity;
  for (const r of rows) t0 = Math.min(t0, r.v.timestamp as number);
  const out = rows.map(({ v, where, line }) => {
    const generated = typeof v.output_length === "number" && v.output_length > 0 ? v.output_length : typeof v.max_tokens === "number" && v.max_tokens > 0 ? v.max_tokens : 1;
    const m: Record<string, unknown> = { timestamp: (v.timestamp as number) - t0, input_length: Math.max(1, Math.round(v.input_length as number)), output_length: generated, hash_ids: v.hash_ids ?? [] };
    if (typeof v.session_id === "string") m.session_id = v.session_id;
    return mooncakeLine(m, where, line, blocks);
  });
  return out.map((r, i) => [r, i] as const).sort((a, b) => a[0].at_s - b[0].at_s || a[1] - b[1]).map(([r]) => r);
}

function num(v: Record<string, unknown>, key: string, where: string, opts: { int?: boolean; min?: number; optional?: boolean } = {}): number | undefined {
  const x = v[key];
  if (x === undefined && opts.optional) return undefined;
  if (typeof x !== "number" || !Number.isFinite(x) || (opts.int && !Number.isInteger(x)) || x < (opts.min ?? 0))
    throw new BenchInputError(`${where}: ${key} must be ${opts.int ? "an integer" : "a number"} ≥ ${opts.min ?? 0}`);
  return x;
}

function herdLine(v: Record<string, unknown>, where: string, line: number): BenchRequest {
  const at_s = num(v, "timestamp", where, { optional: true }) ?? 0;
  const max_tokens = num(v, "max_tokens", where, { int: true, min: 1 })!;
  const session = v.session === undefined ? `line-${line}` : String(v.session);
  const hasMessages = v.messages !== undefined;
  const hasPrompt = v.prompt !== undefined;
  if (hasMessages === hasPrompt) throw new BenchInputError(`${where}: exactly one of messages or prompt is required`);
  if (hasPrompt) {
    if (typeof v.prompt !== "string") throw new BenchInputError(`${where}: prompt must be a string`);
    return { at_s, session, prompt: v.prompt, max_tokens };
  }
  const m = v.messages;
  if (!Array.isArray(m) || m.length === 0 || !m.every((x) => isObj(x) && typeof x.role === "string"))
    throw new BenchInputError(`${where}: messages must be a non-empty list of {role, content}`);
  return { at_s, session, messages: m as ChatMessage[], max_tokens };
}

function mooncakeLine(v: Record<string, unknown>, where: string, line: number, blocks: BlockText): BenchRequest {
  const ms = num(v, "timestamp", where, { optional: true }) ?? 0;
  const input = num(v, "input_length", where, { int: true, min: 1 })!;
  const output = num(v, "output_length", where, { int: true, min: 1 })!;
  const ids = v.hash_ids ?? [];
  if (!Array.isArray(ids) || !ids.every((x) => Number.isInteger(x) && x >= 0)) throw new BenchInputError(`${where}: hash_ids must be a list of non-negative integers`);
  const parts: string[] = [];
  let left = input;
  for (let j = 0; j < ids.length && left > 0; j++) {
    const n = Math.min(left, MOONCAKE_BLOCK_TOKENS);
    parts.push(blocks.get(ids[j] as number, n));
    left -= n;
  }
  // No ids (or too few for input_length): the rest is text unique to this line.
  if (left > 0) parts.push(words(new SeededRng(0x6d6f6f6en * 1_000_003n + BigInt(line)), left));
  const session = v.session_id === undefined ? `line-${line}` : String(v.session_id);
  return { at_s: ms / 1000, session, prompt: parts.join(" "), max_tokens: output };
}

/** Text of a hash-id block: words from an Rng seeded by the id; the first n words for a partial block. */
class BlockText {
  private cache = new Map<number, string[]>();

  get(id: number, n: number): string {
    let w = this.cache.get(id);
    if (w === undefined) {
      w = words(new SeededRng(BigInt(id) + 0x9e3779b9n), MOONCAKE_BLOCK_TOKENS).split(" ");
      // Bounded: a large trace has many ids; a dropped block is regenerated identically.
      if (this.cache.size >= 8192) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(id, w);
    }
    return n >= w.length ? w.join(" ") : w.slice(0, n).join(" ");
  }
}
