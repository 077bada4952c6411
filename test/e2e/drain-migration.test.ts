// Migration at an engine's drain deadline (issue 21), on real processes without the daemon: a
// Supervisor over two sim engines, the Frontend over them, wired as the daemon wires them
// (src/daemon/node.ts: `migrateAway` → Frontend.migrateAway). One engine is removed (the planner's
// scale-down path: drainEngine + removeEngine) with a drain bound far shorter than the streams and
// non-streamed requests running on it: at the deadline they move to the other engine and complete
// with exactly max_tokens, the same text an uninterrupted request says; then the engine stops.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import { Frontend } from "../../src/frontend/app.ts";
import { listen, type Listening } from "../../src/frontend/server.ts";
import { HerdMetrics } from "../../src/metrics/herd-metrics.ts";
import { Router } from "../../src/router/index.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { engine, randomPortStart, testConfig } from "../fixtures/engines/config.ts";
import { readChatStream, type ChatStreamRead } from "../helpers/chat-stream.ts";
import { memoryLogger } from "../helpers/log.ts";

const MAX_TOKENS = 300;
const DRAIN_MS = 600;
const config = testConfig({ engines: [engine({ kind: "sim", count: 2, args: ["--time-scale", "1"], env: { HERD_SUPERVISOR_PID: "" } })], supervisor: { port_range_start: randomPortStart() } });
Object.assign(config.frontend, { migration_limit: 3, idle_timeout_ms: 5_000, first_token_timeout_ms: 10_000 });
const clock = new RealClock();
const log = memoryLogger();
const registry = new WorkerRegistry();
const router = new Router({ config: config.router, registry, clock, log });
const metrics = new HerdMetrics(config.models.map((m) => m.name), () => registry.list());
const frontend = new Frontend({ config, registry, router, metrics, clock, log });
const supervisor = new Supervisor({
  config, clock, logger: log, inFlight: (id) => registry.inFlightOf(id), onChange: (w) => registry.upsert(w),
  migrateAway: (id) => void frontend.migrateAway(id),
});
let server: Listening | null = null;

beforeAll(async () => {
  await supervisor.start();
  server = listen(frontend, "127.0.0.1", 0, config.frontend.max_body_bytes);
  const t0 = Date.now();
  while (registry.list().filter((w) => w.state === "ready").length < 2) {
    if (Date.now() - t0 > 30_000) throw new Error(`engines not ready:\n${log.lines.join("\n")}`);
    await Bun.sleep(50);
  }
}, 60_000);

afterAll(async () => {
  await supervisor.stop({ drainMs: 0 });
  server?.stop(true);
  frontend.close();
});

const body = (i: number, stream: boolean) => JSON.stringify({ model: "m", messages: [{ role: "user", content: `drain me ${i}` }], max_tokens: MAX_TOKENS, ignore_eos: true, ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) });

function stream(i: number, onDelta: (n: number) => void = () => {}): Promise<ChatStreamRead> {
  return readChatStream(server!.url, body(i, true), onDelta);
}

async function whole(i: number): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server!.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body(i, false) });
  return { status: res.status, body: await res.json() };
}

test("an engine removed with long requests running past its drain deadline: they finish on the other engine, exactly max_tokens", async () => {
  const victim = registry.list()[0]!.id;
  let started = 0;
  let removal: Promise<void> | null = null;
  const t0 = Date.now();
  const streams = Array.from({ length: 8 }, (_, i) => stream(i, (n) => {
    if (n === 5 && ++started === 8) {
      // Every stream is under way: remove one engine with a drain bound far shorter than the streams.
      supervisor.drainEngine(victim);
      removal = supervisor.removeEngine(victim, { drainMs: DRAIN_MS });
    }
  }));
  const wholes = Array.from({ length: 4 }, (_, i) => whole(100 + i));
  const reads = await Promise.all(streams);
  const answers = await Promise.all(wholes);
  expect(removal).not.toBeNull();
  await removal;
  const elapsedMs = Date.now() - t0;
  expect(registry.get(victim)?.state ?? "stopped").toBe("stopped");
  for (const r of reads) {
    expect(r.error).toBeNull();
    expect(r.deltas).toBe(MAX_TOKENS);
    expect(r.usage.completion_tokens).toBe(MAX_TOKENS);
  }
  for (const a of answers) {
    expect(a.status).toBe(200);
    expect(a.body.usage.completion_tokens).toBe(MAX_TOKENS);
  }
  const m = await metrics.render();
  const drained = [...m.matchAll(/herd_migrations_total\{model="m",reason="drain",result="migrated"\} (\d+)/g)].reduce((s, x) => s + Number(x[1]), 0);
  expect(drained).toBeGreaterThanOrEqual(1);
  // Contiguous: each text is what an uninterrupted request of the same prompt (on the survivor) says.
  for (const i of [0, 1, 2, 3]) expect(reads[i]!.text).toBe((await stream(i)).text);
  for (const i of [0, 1]) expect(answers[i]!.body.choices[0].message.content).toBe((await stream(100 + i)).text);
  console.log(`[drain-migration] 8 streams + 4 non-streamed, ${MAX_TOKENS} tokens each, engine drained with a ${DRAIN_MS} ms bound: ${drained} migrated at the deadline, 0 errors, ${elapsedMs} ms`);
}, 120_000);
