// Request migration end to end (issue 21): `herd run` with two sim engines, 32 concurrent chat
// streams with ignore_eos, and the engine serving half of them killed with SIGKILL mid-generation.
// Every stream must complete with exactly max_tokens tokens, no error event, one id, and the very
// text an uninterrupted stream of the same prompt produces (the sim's output is a deterministic walk
// per prompt, and it continues a `continue_final_message` answer where it stopped: greedy decoding).
// The same kill under 32 non-streamed requests: each answer is one chat.completion with all the
// tokens (herd streams from the engine internally and migrates; src/request/collect.ts); and under
// 32 short ones (below migration_collect_min_tokens), which are re-run whole instead.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { cleanup, portBase, startHerd, tempDir, waitFor as waitForLog, type HerdProc } from "../helpers/herd.ts";
import { readChatStream, type ChatStreamRead } from "../helpers/chat-stream.ts";

const MODEL = "mig-sim";
const STREAMS = 32;
const MAX_TOKENS = 96;

let dir = "";
let herd: HerdProc | null = null;
const waitFor = <T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 30_000) => waitForLog(what, fn, timeoutMs, () => herd?.log() ?? "");
const cluster = async (): Promise<any> => (await fetch(`${herd!.url}/admin/cluster`)).json();

beforeAll(async () => {
  dir = tempDir("herd-migration-");
  herd = await startHerd(
    dir,
    `node: { name: mig, data_dir: ${JSON.stringify(join(dir, "data"))} }
frontend: { first_token_timeout_ms: 10000, idle_timeout_ms: 5000, migration_limit: 3 }
router: { policy: round-robin, metrics_scrape_interval_ms: 200 }
supervisor: { port_range_start: ${portBase()}, health_interval_ms: 100, health_timeout_ms: 300, restart_backoff_initial_ms: 100 }
models: [ { name: ${MODEL} } ]
engines: [ { kind: sim, model: ${MODEL}, count: 2, args: ["--time-scale", "1"] } ]
`,
  );
  await waitFor("both workers ready", async () => (await cluster()).workers.filter((w: any) => w.state === "ready").length === 2);
}, 60_000);

afterAll(async () => {
  await herd?.stop(5_000);
  if (dir) cleanup(dir);
});

/** One stream, read to its end; `onDelta` sees each content delta's running count. */
function stream(i: number, maxTokens = MAX_TOKENS, onDelta: (n: number) => void = () => {}): Promise<ChatStreamRead> {
  const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `migrate me ${i}` }], max_tokens: maxTokens, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  return readChatStream(herd!.url, body, onDelta);
}

test(`kill -9 of an engine under ${STREAMS} concurrent streams: every stream completes, exactly max_tokens, contiguous`, async () => {
  const workers = (await cluster()).workers;
  const victim = workers[0];
  let killed = false;
  let started = 0;
  const kill = () => {
    if (killed) return;
    killed = true;
    process.kill(victim.pid, "SIGKILL");
  };
  const reads = await Promise.all(
    Array.from({ length: STREAMS }, (_, i) =>
      stream(i, MAX_TOKENS, (n) => {
        if (n === 10) started++;
        if (started >= STREAMS / 2) kill(); // most streams are mid-generation
      }),
    ),
  );
  expect(killed).toBe(true);
  const onVictim = reads.filter((r) => r.worker === victim.id).length;
  expect(onVictim).toBeGreaterThan(0);
  for (const r of reads) {
    expect({ error: r.error, done: r.done }).toEqual({ error: null, done: true });
    expect(r.deltas).toBe(MAX_TOKENS);
    expect(r.usage.completion_tokens).toBe(MAX_TOKENS);
    expect(r.ids.size).toBe(1);
  }
  // Contiguous: the text is what an uninterrupted stream of the same prompt says.
  for (const i of [0, 1, 2, 3]) {
    const ref = await stream(i);
    expect(ref.deltas).toBe(MAX_TOKENS);
    expect(reads[i]!.text).toBe(ref.text);
  }
  const metrics = await (await fetch(`${herd!.url}/metrics`)).text();
  const migrated = [...metrics.matchAll(/herd_migrations_total\{model="mig-sim",reason="[^"]+",result="migrated"\} (\d+)/g)].reduce((s, m) => s + Number(m[1]), 0);
  console.log(`[migration] ${STREAMS} streams, ${onVictim} on the killed engine, ${migrated} migrated, 0 errors`);
  expect(migrated).toBeGreaterThanOrEqual(1);
}, 120_000);

/** One non-streamed request (the client asks for one JSON document; herd streams it internally). */
async function whole(i: number, maxTokens = MAX_TOKENS): Promise<{ status: number; body: any; worker: string }> {
  const res = await fetch(`${herd!.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `migrate me ${i}` }], max_tokens: maxTokens, ignore_eos: true }),
  });
  return { status: res.status, body: await res.json(), worker: res.headers.get("x-herd-worker") ?? "" };
}

const migrations = async (): Promise<number> => {
  const metrics = await (await fetch(`${herd!.url}/metrics`)).text();
  return [...metrics.matchAll(/herd_migrations_total\{model="mig-sim",reason="[^"]+",result="migrated"\} (\d+)/g)].reduce((s, m) => s + Number(m[1]), 0);
};

const generated = async (url: string): Promise<number> => {
  try {
    const m = /^vllm:generation_tokens_total\{[^}]*\} ([\d.e+]+)$/m.exec(await (await fetch(`${url}/metrics`)).text());
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
};

test(`kill -9 of an engine under ${STREAMS} concurrent non-streamed requests: every answer has exactly max_tokens, contiguous, no 5xx`, async () => {
  // The first test's victim is back (the supervisor restarts it).
  await waitFor("both workers ready again", async () => (await cluster()).workers.filter((w: any) => w.state === "ready").length === 2);
  const victim = (await cluster()).workers[1];
  const before = await generated(victim.url);
  const migratedBefore = await migrations();
  const pending = Promise.all(Array.from({ length: STREAMS }, (_, i) => whole(i)));
  // Kill once the victim has generated about a third of its share: its requests are mid-generation.
  await waitFor("victim mid-generation", async () => (await generated(victim.url)) - before >= (STREAMS / 2) * (MAX_TOKENS / 3), 30_000);
  process.kill(victim.pid, "SIGKILL");
  const answers = await pending;
  for (const a of answers) {
    expect(a.status).toBe(200);
    expect(a.body.object).toBe("chat.completion");
    expect(a.body.usage.completion_tokens).toBe(MAX_TOKENS);
    expect(a.body.choices[0].finish_reason).toBe("length");
  }
  // Contiguous: each answer is what an uninterrupted stream of the same prompt says.
  for (const i of [0, 1, 2, 3, 4, 5]) expect(answers[i]!.body.choices[0].message.content).toBe((await stream(i)).text);
  const migrated = (await migrations()) - migratedBefore;
  console.log(`[migration] ${STREAMS} non-streamed requests, one engine killed mid-generation: ${migrated} migrated, all ${answers.length} answered 200 with ${MAX_TOKENS} tokens`);
  expect(migrated).toBeGreaterThanOrEqual(1);
  expect(answers.every((a) => a.worker !== victim.id)).toBe(true); // the migrated ones name the worker that finished them
}, 120_000);

// Below frontend.migration_collect_min_tokens (64) a non-streamed request is not collected
// (collect.ts): the killed engine's requests fail before their answer and are re-run whole on the
// other worker (a dead engine's retry, exempt from the retry budget). Same guarantee for the client.
const SHORT_TOKENS = 48;
const retries = async (): Promise<number> => {
  const metrics = await (await fetch(`${herd!.url}/metrics`)).text();
  return [...metrics.matchAll(/herd_retries_total\{model="mig-sim",reason="[^"]+"\} (\d+)/g)].reduce((s, m) => s + Number(m[1]), 0);
};
test(`kill -9 of an engine under ${STREAMS} concurrent non-streamed requests of ${SHORT_TOKENS} tokens (not collected): every answer whole, no 5xx`, async () => {
  await waitFor("both workers ready again", async () => (await cluster()).workers.filter((w: any) => w.state === "ready").length === 2);
  const victim = (await cluster()).workers[0];
  const before = await generated(victim.url);
  const migratedBefore = await migrations();
  const retriedBefore = await retries();
  const pending = Promise.all(Array.from({ length: STREAMS }, (_, i) => whole(200 + i, SHORT_TOKENS)));
  await waitFor("victim mid-generation", async () => (await generated(victim.url)) - before >= (STREAMS / 2) * (SHORT_TOKENS / 3), 30_000);
  process.kill(victim.pid, "SIGKILL");
  const answers = await pending;
  for (const a of answers) {
    expect(a.status).toBe(200);
    expect(a.body.usage.completion_tokens).toBe(SHORT_TOKENS);
    expect(a.body.choices[0].finish_reason).toBe("length");
  }
  for (const i of [0, 1, 2, 3]) expect(answers[i]!.body.choices[0].message.content).toBe((await stream(200 + i, SHORT_TOKENS)).text);
  expect((await migrations()) - migratedBefore).toBe(0); // re-run whole, not migrated
  const retried = (await retries()) - retriedBefore;
  expect(retried).toBeGreaterThanOrEqual(1); // the kill did catch requests before their answer
  expect(answers.every((a) => a.worker !== victim.id)).toBe(true);
  console.log(`[migration] ${STREAMS} non-streamed requests of ${SHORT_TOKENS} tokens, one engine killed mid-generation: ${retried} re-run whole elsewhere, all answered 200 with ${SHORT_TOKENS} tokens`);
}, 120_000);
