// A node shut down under streams (issue 21): two `herd run` nodes (peers discovery, one sim engine
// each, round-robin), 12 long streams entering each node, then SIGTERM to node b with a drain bound
// far shorter than the streams. Dynamo's order: b leaves routing, a short grace, the drain; at the
// deadline b moves the streams on its own engine to a's worker and keeps relaying them
// (frontend.migration_grace_ms) before it exits; the streams a relays from b's engine migrate to a's
// own engine when b's engine stops. Every stream, entering either node, completes with exactly
// max_tokens, no error event, one id, and the text of an uninterrupted stream of the same prompt.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { cleanup, HerdNodes, portBase, startHerd, tempDir } from "../helpers/herd.ts";
import { readChatStream, type ChatStreamRead } from "../helpers/chat-stream.ts";

const MODEL = "shut-sim";
const PER_NODE = 12;
const MAX_TOKENS = 600;
const NAMES = ["a", "b"] as const;
type Name = (typeof NAMES)[number];

let dir = "";
const herds = new HerdNodes(NAMES, { logTailChars: 3000, waitMs: 30_000 });
const { procs: nodes, port, url, logs, waitFor } = herds;
const admin = async (n: Name): Promise<any> => (await fetch(`${url(n)}/admin/cluster`, { signal: AbortSignal.timeout(2000) })).json();

function config(n: Name): string {
  return `node: { name: ${n}, data_dir: ${JSON.stringify(join(dir, n, "data"))} }
frontend: { first_token_timeout_ms: 10000, idle_timeout_ms: 5000, drain_timeout_ms: 1000, leave_grace_ms: 300, migration_limit: 3, migration_grace_ms: 30000 }
router: { policy: round-robin, metrics_scrape_interval_ms: 200 }
supervisor: { port_range_start: ${herds.base + 100 + 100 * NAMES.indexOf(n)}, health_interval_ms: 100, health_timeout_ms: 300 }
models: [ { name: ${MODEL} } ]
engines: [ { kind: sim, model: ${MODEL}, count: 1, args: ["--time-scale", "1"] } ]
cluster:
  discovery: peers
  token: e2e-shutdown-token
  peers: { seeds: ${JSON.stringify(NAMES.map((m) => `127.0.0.1:${port(m)}`))} }
`;
}

beforeAll(async () => {
  herds.base = portBase();
  dir = tempDir("herd-shutdown-migration-");
  await Promise.all(NAMES.map(async (n) => {
    mkdirSync(join(dir, n));
    nodes.set(n, await startHerd(join(dir, n), config(n), { args: ["--listen", `127.0.0.1:${port(n)}`], readyTimeoutMs: 40_000 }));
  }));
  for (const n of NAMES) await waitFor(`${n} sees both workers`, async () => (await admin(n)).workers.filter((w: any) => w.state === "ready").length === 2);
}, 90_000);

afterAll(async () => {
  await Promise.all([...nodes.values()].map((h) => h.stop(5_000)));
  if (dir) cleanup(dir);
});

function stream(entry: Name, i: number, onDelta: (n: number) => void = () => {}): Promise<ChatStreamRead> {
  const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `shut down under me ${i}` }], max_tokens: MAX_TOKENS, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  return readChatStream(url(entry), body, onDelta);
}

test(`SIGTERM to a node under ${2 * PER_NODE} streams: the ones on its engine migrate (entering it or its peer), all complete`, async () => {
  let started = 0;
  let stopping: Promise<void> | null = null;
  let t0 = 0;
  const onDelta = (n: number) => {
    if (n === 5 && ++started === 2 * PER_NODE) {
      t0 = Date.now();
      stopping = nodes.get("b")!.stop(60_000); // SIGTERM; resolves when b has exited
    }
  };
  const entries: Name[] = Array.from({ length: 2 * PER_NODE }, (_, i) => (i % 2 === 0 ? "a" : "b"));
  const reads = await Promise.all(entries.map((e, i) => stream(e, i, onDelta)));
  expect(stopping).not.toBeNull();
  await stopping;
  const exitMs = Date.now() - t0;
  const onB = reads.filter((r) => r.worker.startsWith("b/"));
  expect(onB.length).toBeGreaterThan(0); // some ran on the engine that stopped
  for (const [i, r] of reads.entries()) {
    expect({ i, entry: entries[i], error: r.error, done: r.done }).toEqual({ i, entry: entries[i]!, error: null, done: true });
    expect(r.deltas).toBe(MAX_TOKENS);
    expect(r.usage.completion_tokens).toBe(MAX_TOKENS);
    expect(r.ids.size).toBe(1);
  }
  // Contiguous: the text of an uninterrupted stream of the same prompt (a, now alone).
  for (const i of [0, 1, 2, 3]) expect(reads[i]!.text).toBe((await stream("a", i)).text);
  const log = nodes.get("b")!.log();
  expect(log).toMatch(/migrating open requests to other nodes/);
  console.log(`[shutdown-migration] ${2 * PER_NODE} streams of ${MAX_TOKENS} tokens (half entering b), b stopped (drain bound 1000 ms): ${onB.length} started on b's engine, all complete, b exited after ${exitMs} ms`);
}, 150_000);
