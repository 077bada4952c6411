// End to end: `herd run` as a subprocess with two sim engines, driven by the openai client.
// Covers: both workers serve traffic, an engine SIGKILLed mid-stream gives the client an error (not a
// hang) and comes back, traffic resumes, /metrics tells the story; a SIGSTOPped engine is taken out
// by health probes (its stream gets an error) and returns after SIGCONT; SIGTERM drains and exits 0.
// Request migration is off here (migration_limit: 0): these are the error paths; test/e2e/migration.test.ts
// covers the same kill with migration on. The tests share one herd process and run in order.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { cleanup, portBase, startHerd, tempDir, waitFor as waitForLog, type HerdProc } from "../helpers/herd.ts";

const MODEL = "e2e-sim";

let dir = "";
let herd: HerdProc | null = null;
let url = "";

const waitFor = <T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 20_000) => waitForLog(what, fn, timeoutMs, () => herd?.log() ?? "");
const cluster = async (): Promise<any> => (await fetch(`${url}/admin/cluster`)).json();
const metricsText = async () => (await fetch(`${url}/metrics`)).text();
const client = () => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0, timeout: 20_000 });

/**
 * Opens a long stream and, after its 20th content chunk, sends `sig` to the engine serving it;
 * reads on until the stream ends or errors. delayMs: from the signal to the end of the read.
 */
async function signalMidStream(c: OpenAI, content: string, sig: "SIGKILL" | "SIGSTOP") {
  const { data: stream, response } = await c.chat.completions
    .create({ model: MODEL, messages: [{ role: "user", content }], max_tokens: 20_000, stream: true })
    .withResponse();
  const victim = response.headers.get("x-herd-worker")!;
  const { pid } = (await cluster()).workers.find((w: any) => w.id === victim);
  let chunks = 0;
  let signalledAt = 0;
  let error: any = null;
  try {
    for await (const ch of stream) {
      if (ch.choices[0]?.delta.content) chunks++;
      if (chunks === 20 && signalledAt === 0) {
        signalledAt = performance.now();
        process.kill(pid, sig);
      }
    }
  } catch (e) {
    error = e;
  }
  return { victim, pid: pid as number, chunks, signalledAt, error, delayMs: performance.now() - signalledAt };
}

beforeAll(async () => {
  dir = tempDir("herd-e2e-");
  herd = await startHerd(
    dir,
    `node: { name: e2e, data_dir: ${JSON.stringify(join(dir, "data"))} }
frontend: { drain_timeout_ms: 10000, first_token_timeout_ms: 10000, idle_timeout_ms: 5000, migration_limit: 0 }
router: { policy: round-robin, metrics_scrape_interval_ms: 200 }
supervisor:
  port_range_start: ${portBase()}
  health_interval_ms: 100
  health_timeout_ms: 300
  restart_backoff_initial_ms: 100
models:
  - name: ${MODEL}
engines:
  - kind: sim
    model: ${MODEL}
    count: 2
    args: ["--time-scale", "4", "--output-len", "0"]
`,
  );
  url = herd.url;
  await waitFor("both workers ready", async () => (await cluster()).workers.every((w: any) => w.state === "ready"), 30_000);
}, 60_000);

afterAll(async () => {
  await herd?.stop(5_000);
  if (dir) cleanup(dir);
});

test("serves OpenAI traffic on both workers, survives an engine SIGKILLed mid-stream, metrics tell it", async () => {
  const c = client();
  // 1. Non-streaming and streaming requests, spread over both workers by round-robin.
  for (let i = 0; i < 4; i++) {
    const r = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: `hello ${i}` }], max_tokens: 5 });
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(r.usage!.completion_tokens).toBe(5);
    const s = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: `stream ${i}` }], max_tokens: 6, stream: true });
    let n = 0;
    for await (const ch of s) if (ch.choices[0]?.delta.content) n++;
    expect(n).toBeGreaterThan(0);
  }
  const text1 = await metricsText();
  const served = [...text1.matchAll(/herd_requests_total\{model="e2e-sim",worker="([^"]+)",status="200"\} (\d+)/g)].map((m) => [m[1], Number(m[2])]);
  expect(served.length).toBe(2);
  for (const [, n] of served) expect(n).toBe(4);

  // 2. Kill the engine serving a long stream, mid-stream.
  const { victim, pid, chunks, signalledAt: killedAt, error, delayMs: errorDelayMs } = await signalMidStream(c, "a long story", "SIGKILL");
  expect(pid).toBeGreaterThan(0);
  console.log(`e2e: engine ${victim} (pid ${pid}) SIGKILLed after ${chunks} chunks; client error after ${errorDelayMs.toFixed(1)} ms`);
  expect(killedAt).toBeGreaterThan(0);
  expect(error).toBeInstanceOf(OpenAI.APIError);
  expect(errorDelayMs).toBeLessThan(5000);

  // 3. The engine comes back (restart counted) and traffic resumes on both workers.
  await waitFor("victim restarted and ready", async () => {
    const w = (await cluster()).workers.find((x: any) => x.id === victim);
    return w.state === "ready" && w.restarts >= 1 && w.pid !== pid;
  });
  const seen = new Set<string>();
  for (let i = 0; i < 4; i++) {
    const { data, response: res } = await c.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: `again ${i}` }], max_tokens: 4 })
      .withResponse();
    expect(data.choices[0]!.finish_reason).toBe("length");
    seen.add(res.headers.get("x-herd-worker")!);
  }
  expect(seen.size).toBe(2);

  // 4. /metrics: restarts, the mid-stream failure, TTFT and latency histograms, in-flight back to 0.
  const text2 = await metricsText();
  expect(text2).toContain(`herd_engine_restarts_total{worker="${victim}"} 1`);
  expect(text2).toMatch(new RegExp(`herd_upstream_errors_total\\{worker="${victim.replace("/", "\\/")}",kind="(reset|eof|worker_down)"\\} [1-9]`));
  expect(text2).toMatch(/herd_time_to_first_token_seconds_count\{model="e2e-sim"\} [1-9]/);
  expect(text2).toMatch(/herd_e2e_request_latency_seconds_count\{model="e2e-sim"\} [1-9]/);
  expect(text2).toMatch(/herd_routing_decisions_total\{policy="round-robin",worker="e2e\/sim-0"\} [1-9]/);
  for (const m of text2.matchAll(/herd_worker_in_flight\{[^}]*\} (\d+)/g)) expect(Number(m[1])).toBe(0);

}, 60_000);

test("a hung engine (SIGSTOP) mid-stream: the client gets an error, the worker leaves rotation and returns", async () => {
  const c = client();
  const { victim, pid, error, delayMs } = await signalMidStream(c, "another long story", "SIGSTOP");
  console.log(`e2e: engine ${victim} SIGSTOPped mid-stream; client error after ${delayMs.toFixed(0)} ms (${error?.code ?? error?.message})`);
  try {
    expect(error).toBeInstanceOf(OpenAI.APIError);
    // Health probes (3 × 100 ms interval, 300 ms timeout) take it out before the 5 s idle timeout.
    expect(error.code).toBe("upstream_worker_down");
    expect((await cluster()).workers.find((w: any) => w.id === victim).state).not.toBe("ready");
    // Meanwhile requests go to the other worker.
    const r = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "still there?" }], max_tokens: 3 }).withResponse();
    expect(r.response.headers.get("x-herd-worker")).not.toBe(victim);
  } finally {
    process.kill(pid, "SIGCONT");
  }
  await waitFor("hung worker back in rotation", async () => (await cluster()).workers.every((w: any) => w.state === "ready"));
  const r2 = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "back?" }], max_tokens: 3 });
  expect(r2.choices[0]!.finish_reason).toBe("length");
}, 30_000);

test("a client that disconnects mid-stream frees the engine's request and herd's in-flight count", async () => {
  const ac = new AbortController();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "long" }], max_tokens: 20_000, stream: true }),
    signal: ac.signal,
  });
  const worker = res.headers.get("x-herd-worker")!;
  const engineUrl = (await cluster()).workers.find((w: any) => w.id === worker).url;
  const running = async () => Number(/^vllm:num_requests_running\{[^}]*\} (\S+)/m.exec(await (await fetch(`${engineUrl}/metrics`)).text())?.[1]);
  const reader = res.body!.getReader();
  for (let i = 0; i < 5; i++) await reader.read();
  expect(await running()).toBe(1);
  ac.abort();
  await waitFor("engine request aborted", async () => (await running()) === 0, 5000);
  await waitFor("herd in-flight back to 0", async () => (await cluster()).workers.every((w: any) => w.load.in_flight === 0), 5000);
  expect(await metricsText()).toMatch(/herd_client_aborts_total\{model="e2e-sim",phase="streaming"\} 1/);
}, 20_000);

test("admin: engine logs, drain and undrain a worker through the daemon", async () => {
  const c = client();
  const ws = (await cluster()).workers;
  const id = ws[0].id;
  const logs: any = await (await fetch(`${url}/admin/workers/${id}/logs?lines=5`)).json();
  expect(logs.worker).toBe(id);
  expect(logs.lines.length).toBeGreaterThan(0);
  expect(logs.lines.length).toBeLessThanOrEqual(5);
  expect((await fetch(`${url}/admin/workers/nope/logs`)).status).toBe(404);

  const drained: any = await (await fetch(`${url}/admin/workers/${id}/drain`, { method: "POST" })).json();
  expect(drained.state).toBe("draining");
  for (let i = 0; i < 4; i++) {
    const r = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 2 }).withResponse();
    expect(r.response.headers.get("x-herd-worker")).not.toBe(id);
  }
  // A drained worker stays drained across health probes (the supervisor keeps reporting it ready).
  await Bun.sleep(400);
  expect((await cluster()).workers.find((w: any) => w.id === id).state).toBe("draining");
  const undrained: any = await (await fetch(`${url}/admin/workers/${id}/undrain`, { method: "POST" })).json();
  expect(undrained.state).toBe("ready");
  const seen = new Set<string>();
  for (let i = 0; i < 4; i++) {
    const r = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 2 }).withResponse();
    seen.add(r.response.headers.get("x-herd-worker")!);
  }
  expect(seen.has(id)).toBe(true);
}, 20_000);

test("SIGTERM drains: health 503, livez 200, new requests 503, the open stream finishes, exit 0", async () => {
  const c = client();
  // SIGTERM while a stream is open: health 503 at once, livez 200, new requests 503, the open
  // stream still finishes, then the process exits 0.
  const open = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "finish me" }], max_tokens: 400, stream: true });
  const it = open[Symbol.asyncIterator]();
  await it.next();
  herd!.proc.kill("SIGTERM");
  await waitFor("health 503", async () => (await fetch(`${url}/health`)).status === 503, 2000);
  expect((await fetch(`${url}/livez`)).status).toBe(200);
  const refused = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "late" }] }),
  });
  expect(refused.status).toBe(503);
  expect(refused.headers.get("retry-after")).not.toBeNull();
  let rest = 0;
  let finish: string | null | undefined = null;
  for (let r = await it.next(); !r.done; r = await it.next()) {
    rest++;
    finish = r.value.choices[0]?.finish_reason ?? finish;
  }
  expect(finish).toBe("length");
  expect(rest).toBeGreaterThan(10);
  const code = await Promise.race([herd!.proc.exited, Bun.sleep(15_000).then(() => "timeout")]);
  expect(code).toBe(0);
  expect(herd!.log()).toContain("herd stopped");
}, 90_000);
