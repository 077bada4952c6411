// End to end, KV events: `herd run` with sim engines publishing vLLM-style KV events, herd's
// consumer feeding the block index, POST /admin/route/explain reporting per worker the leading
// prompt blocks it holds. Model "kv-m" has two clean engines (sim-0, sim-1); model "kv-drop" has one
// engine dropping half its live batches (sim-2), which herd must repair through replay. Every
// test runs with ingest on the event loop and on an ingest thread (kv_ingest.threads 0 and 1).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { cleanup, startHerd, tempDir, waitFor as waitForLog, type HerdProc } from "../helpers/herd.ts";

let dir = "";
let herd: HerdProc | null = null;
let url = "";

const waitFor = <T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 15_000) => waitForLog(what, fn, timeoutMs, () => herd?.log() ?? "");
const cluster = async (): Promise<any> => (await fetch(`${url}/admin/cluster`)).json();
const workerOf = async (id: string): Promise<any> => (await cluster()).workers.find((w: any) => w.id === id);

// ~1,200 characters of shared system prompt: ≈ 400 fallback tokens ≈ 25 blocks of 16.
const SYSTEM = Array.from({ length: 60 }, (_, i) => `Rule ${i}: answer briefly and cite the source.`).join(" ");
const chatBody = (model: string, user: string, system = SYSTEM) => ({
  model,
  messages: [{ role: "system", content: system }, { role: "user", content: user }],
  max_tokens: 4,
});

async function chat(body: unknown): Promise<string> {
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  expect(r.status).toBe(200);
  await r.json();
  return r.headers.get("x-herd-worker")!;
}

async function explain(body: unknown): Promise<any> {
  const r = await fetch(`${url}/admin/route/explain`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  expect(r.status).toBe(200);
  return r.json();
}

const gpuOf = (e: any, worker: string): number => e.candidates.find((c: any) => c.worker === worker)?.overlap.gpu ?? -1;

async function chat0(prompt: number[]): Promise<string> {
  const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "kv-m", prompt, max_tokens: 2 }) });
  expect(r.status).toBe(200);
  await r.json();
  return r.headers.get("x-herd-worker")!;
}

for (const threads of [0, 1]) describe(`kv_ingest.threads ${threads}`, () => {
  beforeAll(async () => {
    dir = tempDir("herd-kv-e2e-");
    const portBase = 30_000 + Math.floor(Math.random() * 20_000);
    herd = await startHerd(
      dir,
      `node: { name: kv, data_dir: ${JSON.stringify(join(dir, "data"))} }
frontend: { drain_timeout_ms: 2000 }
kv_ingest: { threads: ${threads} }
router: { policy: round-robin, metrics_scrape_interval_ms: 500 }
supervisor:
  port_range_start: ${portBase}
  health_interval_ms: 100
  restart_backoff_initial_ms: 100
models:
  - { name: kv-m, block_size: 16 }
  - { name: kv-drop, block_size: 16 }
engines:
  - kind: sim
    model: kv-m
    count: 2
    args: ["--zero-delay", "--output-len", "0"]
  - kind: sim
    model: kv-drop
    args: ["--zero-delay", "--output-len", "0", "--kv-events-drop-fraction", "0.5", "--kv-events-encoding", "array", "--seed", "5"]
`,
    );
    url = herd.url;
    await waitFor("all workers ready and subscribed", async () => {
      const ws = (await cluster()).workers;
      return ws.length === 3 && ws.every((w: any) => w.state === "ready" && w.kv_events?.connected);
    });
  }, 30_000);

  afterAll(async () => {
    await herd?.stop(5_000);
    if (dir) cleanup(dir);
  });

  test("explain shows the leading prompt blocks each worker holds, per medium", async () => {
    // A prompt nobody has seen: no overlap anywhere, but the prompt is hashed into blocks.
    const fresh = await explain(chatBody("kv-m", "first question"));
    expect(fresh.kv.block_size).toBe(16);
    expect(fresh.kv.prompt_blocks).toBeGreaterThan(20);
    expect(fresh.candidates.map((c: any) => c.overlap)).toEqual([{ gpu: 0, cpu: 0, disk: 0 }, { gpu: 0, cpu: 0, disk: 0 }]);

    // A unique long prompt lands on one worker: that worker holds all its blocks, the other none.
    const unique = chatBody("kv-m", "only here", `Unique context ${"lorem ipsum dolor sit amet ".repeat(40)}`);
    const w1 = await chat(unique);
    const other = w1 === "kv/sim-0" ? "kv/sim-1" : "kv/sim-0";
    const e1 = await waitFor("unique prompt indexed", async () => {
      const e = await explain(unique);
      return gpuOf(e, w1) === e.kv.prompt_blocks ? e : null;
    });
    expect(gpuOf(e1, other)).toBe(0);
    expect(e1.candidates.find((c: any) => c.worker === w1)).toMatchObject({ node: "kv", overlap: { cpu: 0, disk: 0 } });

    // Requests sharing the long system prompt reach both workers (round-robin): a new question with
    // that prefix overlaps on both, by the shared blocks only.
    const served = new Set<string>();
    for (let i = 0; i < 2; i++) served.add(await chat(chatBody("kv-m", `question ${i}`)));
    expect([...served].sort()).toEqual(["kv/sim-0", "kv/sim-1"]);
    const probe = chatBody("kv-m", "a brand new question");
    const e2 = await waitFor("shared prefix indexed on both", async () => {
      const e = await explain(probe);
      return gpuOf(e, "kv/sim-0") >= 20 && gpuOf(e, "kv/sim-1") >= 20 ? e : null;
    });
    for (const w of ["kv/sim-0", "kv/sim-1"]) expect(gpuOf(e2, w)).toBeLessThan(e2.kv.prompt_blocks);

    // Completion prompts given as token ids are hashed as given.
    const ids = Array.from({ length: 100 }, (_, i) => 5000 + i);
    const w3 = await chat0(ids);
    const e3 = await waitFor("token-id prompt indexed", async () => {
      const e = await explain({ model: "kv-m", prompt: ids });
      return gpuOf(e, w3) === 6 ? e : null;
    });
    expect(e3.kv).toEqual({ block_size: 16, prompt_tokens: 100, prompt_blocks: 6, extra_keys: { lora_name: null, cache_salt: null } });

    const c = await cluster();
    for (const w of c.workers) {
      expect(w.kv_events).toMatchObject({ connected: true, resyncs: 0 });
      expect(w.kv_events.topic).toBe(`kv@${w.id}@${w.model}`);
    }
  }, 30_000);

  test("dropped batches (drop-fraction knob) are recovered through replay", async () => {
    const bodies = Array.from({ length: 8 }, (_, i) => chatBody("kv-drop", `drop test ${i}`, `Context ${i}: ${"the quick brown fox ".repeat(30)}`));
    for (const b of bodies) expect(await chat(b)).toBe("kv/sim-2");
    // A lost last batch is noticed only when a later one arrives (as with vLLM): filler requests.
    let k = 0;
    await waitFor("every prompt fully indexed on sim-2", async () => {
      for (const b of bodies) {
        const e = await explain(b);
        if (gpuOf(e, "kv/sim-2") !== e.kv.prompt_blocks) {
          await chat(chatBody("kv-drop", `filler ${k++}`, `Filler ${k} ${"jumps over ".repeat(10)}`));
          return false;
        }
      }
      return true;
    });
    // With ingest threads the status is a snapshot up to 100 ms old (src/kv/README.md "Ingest on
    // worker threads"): wait for the one that saw the replay, then check it.
    const s = await waitFor("sim-2's status shows the replay", async () => {
      const k = (await workerOf("kv/sim-2")).kv_events;
      return k.replays > 0 ? k : null;
    });
    expect(s.gaps).toBeGreaterThan(0);
    expect(s.replays).toBeGreaterThan(0);
    expect(s.resyncs).toBe(0);
  }, 30_000);

  test("after an engine restart (killed, sequence back to 0) the index drops its blocks and recovers", async () => {
    const before = await workerOf("kv/sim-0");
    const body = chatBody("kv-m", "restart probe");
    // Make sure sim-0 holds something first.
    await waitFor("sim-0 holds the shared prefix", async () => gpuOf(await explain(body), "kv/sim-0") > 0);
    process.kill(before.pid, "SIGKILL");
    await waitFor("sim-0 blocks dropped", async () => gpuOf(await explain(body), "kv/sim-0") === 0 || (await workerOf("kv/sim-0")).state !== "ready");
    const after = await waitFor("sim-0 back", async () => {
      const w = await workerOf("kv/sim-0");
      return w.state === "ready" && w.restarts === before.restarts + 1 && w.kv_events?.connected ? w : null;
    });
    expect(after.pid).not.toBe(before.pid);
    expect(after.kv_events.last_seq).toBeNull(); // a fresh stream: nothing published yet
    // Nothing of the old cache is claimed for the new process.
    expect(gpuOf(await explain(body), "kv/sim-0")).toBe(0);
    // New traffic rebuilds it: the new process's events (seq from 0) land in the index.
    const w = await waitFor("a request on sim-0", async () => ((await chat(body)) === "kv/sim-0" ? "kv/sim-0" : null));
    const e = await waitFor("sim-0 indexed again", async () => {
      const x = await explain(body);
      return gpuOf(x, w) === x.kv.prompt_blocks ? x : null;
    });
    expect(gpuOf(e, "kv/sim-0")).toBe(e.kv.prompt_blocks);
    // (with ingest threads the stream's status is a snapshot at most kv_ingest's status interval old)
    await waitFor("sim-0 status shows the new stream", async () => (await workerOf("kv/sim-0")).kv_events.last_seq !== null);
  }, 30_000);

  test("the ingest threads answer GET /admin/debug/memory", async () => {
    const mem = (await (await fetch(`${url}/admin/debug/memory`)).json()) as { threads: Record<string, { heap_used_bytes?: number; error?: string }> };
    if (threads === 0) expect(mem.threads["kv-ingest-0"]).toBeUndefined();
    else expect(mem.threads["kv-ingest-0"]!.heap_used_bytes).toBeGreaterThan(0);
  });
});
