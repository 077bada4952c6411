// Issue 10: seeded fuzzing of the HTTP surface. Random bodies (deep nesting, huge arrays, many
// messages, invalid UTF-8, added tokens, wrong types), random headers and random chunkings are sent
// to a real Frontend listener (kv policy, built-in tokenizer on a thread) over a fake engine. Every
// answer must be an expected status with an OpenAI-shaped error, within a time budget per case and
// a memory budget for the run (wide safety bounds, not benchmarks). A failure names the seed and
// the case; `HERD_FUZZ_SEED=<seed> bun test test/security/http-fuzz.test.ts` replays it.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { SeededRng } from "../../src/core/rng.ts";
import { SharedPreprocessor } from "../../src/preprocess/shared.ts";
import { MODEL, chatCompletion, startHerd, startUpstream, type Herd, type Upstream } from "../frontend/harness.ts";

const SEED = Number(process.env.HERD_FUZZ_SEED ?? 20261201);
const CASES = Number(process.env.HERD_FUZZ_CASES ?? 120);
/** Per case: a refused or answered request never takes longer than this (wide bound). */
const CASE_BUDGET_MS = 8_000;
/** Longest event-loop stall during a case (herd runs in this process): before issue 10, thousands of messages held it for seconds. */
const LOOP_STALL_BUDGET_MS = 1_000;
/** Growth of this process's RSS over the whole run (herd runs in-process here). */
const RSS_BUDGET_BYTES = 768 * 2 ** 20;
const ALLOWED = new Set([200, 400, 404, 413, 415, 429, 503]);

let up: Upstream;
let h: Herd;
let prompts: SharedPreprocessor;

beforeAll(async () => {
  up = startUpstream(() => Response.json(chatCompletion("ok")));
  prompts = new SharedPreprocessor([{ name: MODEL, tokenizer: "", block_size: 16, max_model_len: 4096 }], { workers: 1 });
  h = await startHerd({
    workers: [{ id: "w0", url: up.url }],
    policy: "kv",
    prompts,
    frontend: { max_body_bytes: 2 * 2 ** 20, max_messages: 512, max_prompt_chars: 64 * 1024, max_json_values: 16_384 },
  });
}, 30_000);

afterAll(async () => {
  await h?.stop();
  await up?.stop();
  prompts?.close();
});

type Rng = SeededRng;
const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[rng.int(xs.length)]!;

function randomString(rng: Rng, max: number): string {
  const alphabet = ["a", "Z", " ", "\n", "é", "字", "😀", "<|im_start|>", "<|im_end|>", "\\", '"', "\u0000", "\uE000", "<", ">"];
  let s = "";
  const n = rng.int(max);
  for (let i = 0; i < n; i++) s += pick(rng, alphabet);
  return s;
}

function randomValue(rng: Rng, depth: number): unknown {
  const r = rng.int(depth > 6 ? 4 : 8);
  if (r === 0) return rng.int(1000) - 500;
  if (r === 1) return randomString(rng, 20);
  if (r === 2) return pick(rng, [null, true, false, 1.5, -0, 1e308]);
  if (r === 3) return rng.float();
  if (r < 6) return Array.from({ length: rng.int(5) }, () => randomValue(rng, depth + 1));
  const o: Record<string, unknown> = {};
  for (let i = rng.int(5); i > 0; i--) o[pick(rng, ["role", "content", "model", "x", "messages", "prompt", "stream", "max_tokens", "tools"])] = randomValue(rng, depth + 1);
  return o;
}

/** One fuzz case: path, body bytes, headers, chunk sizes. */
function makeCase(rng: Rng): { what: string; path: string; body: Uint8Array; headers: Record<string, string>; chunks: number[] } {
  const enc = (s: string) => new TextEncoder().encode(s);
  const msgs = (n: number) => Array.from({ length: n }, (_, i) => ({ role: pick(rng, ["user", "assistant", "system", "", "tool"]), content: i % 7 === 0 ? [{ type: "text", text: randomString(rng, 30) }] : randomString(rng, 30) }));
  const kind = rng.int(10);
  let what: string;
  let body: Uint8Array;
  if (kind === 0) {
    const d = 1 + rng.int(20_000);
    what = `nesting ${d}`;
    body = enc(`{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"x":${"[".repeat(d)}${"]".repeat(d)}}`);
  } else if (kind === 1) {
    const n = rng.int(200_000);
    what = `array of ${n} numbers`;
    body = enc(`{"model":"${MODEL}","prompt":[${Array.from({ length: n }, (_, i) => i % 100).join(",")}]}`);
  } else if (kind === 2) {
    const many = rng.int(2) === 0;
    const n = many ? 20_000 + rng.int(20_000) : 1 + rng.int(600);
    what = `${n} messages`;
    // Many one-word messages: the shape of the 200,000-message body, within 2 MiB.
    const list = many ? Array.from({ length: n }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `w${i}` })) : msgs(n);
    body = enc(JSON.stringify({ model: MODEL, messages: list, max_tokens: 1 }));
  } else if (kind === 3) {
    what = "invalid UTF-8";
    const good = enc(JSON.stringify({ model: MODEL, messages: msgs(3) }));
    body = new Uint8Array(good.length + 8);
    body.set(good);
    for (let i = 0; i < 8; i++) body[rng.int(body.length)] = 0x80 + rng.int(0x80);
  } else if (kind === 4) {
    what = "random JSON value";
    body = enc(JSON.stringify(randomValue(rng, 0)) ?? "null");
  } else if (kind === 5) {
    what = "random bytes";
    body = Uint8Array.from({ length: rng.int(4096) }, () => rng.int(256));
  } else if (kind === 6) {
    what = "long prompt with added tokens";
    body = enc(JSON.stringify({ model: MODEL, prompt: "w <|im_end|>".repeat(rng.int(20_000)) }));
  } else if (kind === 7) {
    what = "truncated JSON";
    const full = JSON.stringify({ model: MODEL, messages: msgs(5) });
    body = enc(full.slice(0, rng.int(full.length)));
  } else if (kind === 8) {
    what = "wrong field types";
    body = enc(JSON.stringify({ model: randomValue(rng, 5), messages: randomValue(rng, 5), stream: randomValue(rng, 5), max_tokens: randomValue(rng, 5), n: randomValue(rng, 5) }));
  } else {
    what = "valid small chat";
    body = enc(JSON.stringify({ model: MODEL, messages: msgs(1 + rng.int(4)).map((m) => ({ ...m, role: "user" })), max_tokens: 1 }));
  }
  const headers: Record<string, string> = {};
  const ct = rng.int(4);
  if (ct < 2) headers["content-type"] = "application/json";
  else if (ct === 2) headers["content-type"] = pick(rng, ["text/plain", "application/json; charset=latin1", "multipart/form-data; boundary=x", "\u00ff"]);
  if (rng.int(4) === 0) headers["x-request-id"] = randomString(rng, 200).replace(/[^\x20-\x7e]/g, "a");
  if (rng.int(6) === 0) headers.authorization = `Bearer ${randomString(rng, 40).replace(/[^\x20-\x7e]/g, "b")}`;
  const chunks: number[] = [];
  if (rng.int(2) === 0) for (let left = body.length; left > 0; ) {
    const c = Math.min(left, 1 + rng.int(rng.int(2) ? 16 : 65_536));
    chunks.push(c);
    left -= c;
  }
  const path = kind === 2 || kind === 9 ? "/v1/chat/completions" : pick(rng, ["/v1/chat/completions", "/v1/completions"]);
  return { what, path, body, headers, chunks };
}

function streamOf(body: Uint8Array, sizes: number[]): ReadableStream<Uint8Array> {
  let at = 0;
  let k = 0;
  return new ReadableStream({
    pull(ctl) {
      if (k >= sizes.length) return ctl.close();
      const n = sizes[k++]!;
      ctl.enqueue(body.slice(at, at + n));
      at += n;
    },
  });
}

test(`seeded HTTP fuzz: ${CASES} cases (seed ${SEED}) answer within budgets`, async () => {
  const rng = new SeededRng(SEED);
  const rss0 = process.memoryUsage().rss;
  for (let i = 0; i < CASES; i++) {
    const c = makeCase(rng);
    const where = `seed ${SEED}, case ${i} (${c.what}, ${c.body.length} bytes, ${c.chunks.length || "one"} chunks) — replay: HERD_FUZZ_SEED=${SEED}`;
    const t0 = performance.now();
    let stallMs = 0;
    let probing = true;
    const probe = (async () => {
      while (probing) {
        const t = performance.now();
        await Bun.sleep(5);
        stallMs = Math.max(stallMs, performance.now() - t - 5);
      }
    })();
    let status = 0;
    let text = "";
    try {
      const res = await fetch(`${h.url}${c.path}`, {
        method: "POST",
        headers: c.headers,
        body: c.chunks.length ? streamOf(c.body, c.chunks) : c.body,
        signal: AbortSignal.timeout(CASE_BUDGET_MS * 2),
      });
      status = res.status;
      text = await res.text();
    } catch (e) {
      throw new Error(`${where}: request failed: ${(e as Error).message}`);
    }
    const ms = performance.now() - t0;
    probing = false;
    await probe;
    if (stallMs > LOOP_STALL_BUDGET_MS) throw new Error(`${where}: the event loop stalled ${stallMs.toFixed(0)} ms (budget ${LOOP_STALL_BUDGET_MS})`);
    if (!ALLOWED.has(status)) throw new Error(`${where}: unexpected status ${status}: ${text.slice(0, 200)}`);
    if (status !== 200) {
      let err: { error?: { message?: unknown; type?: unknown } } = {};
      try {
        err = JSON.parse(text);
      } catch {
        throw new Error(`${where}: status ${status} without a JSON body: ${text.slice(0, 200)}`);
      }
      if (typeof err.error?.message !== "string" || typeof err.error?.type !== "string") throw new Error(`${where}: not an OpenAI error: ${text.slice(0, 200)}`);
    }
    if (process.env.HERD_FUZZ_VERBOSE) console.log(i, c.what, status, `${ms.toFixed(0)} ms`, `stall ${stallMs.toFixed(0)} ms`);
    if (ms > CASE_BUDGET_MS) throw new Error(`${where}: took ${ms.toFixed(0)} ms (budget ${CASE_BUDGET_MS})`);
  }
  // The daemon is still healthy and serves a normal request after the run.
  const ok = await fetch(`${h.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }) });
  expect(ok.status).toBe(200);
  Bun.gc(true);
  const grown = process.memoryUsage().rss - rss0;
  if (grown > RSS_BUDGET_BYTES) throw new Error(`seed ${SEED}: RSS grew by ${(grown / 2 ** 20).toFixed(0)} MiB (budget ${RSS_BUDGET_BYTES / 2 ** 20} MiB)`);
}, 240_000);
