// End to end with a real libzmq peer: two Python processes (python3-zmq + msgpack) play vLLM workers
// of kind `external`, one in vLLM ≥ 0.26 shape (map events, 4-frame replay, joins "late" so herd
// must replay from 0), one in the older shape (array events, 3-frame replay, empty topic). herd
// takes their KV endpoints from engines[].kv_events, and /admin/route/explain reports what each holds.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { ROOT, cleanup, readLines, startHerd, tempDir, waitFor as waitForLog, type HerdProc } from "../helpers/herd.ts";
import { PYTHON, hasPyZmq } from "../helpers/peers.ts";

const FIXTURE = join(ROOT, "test/fixtures/kv/fake_vllm_publisher.py");
const run = hasPyZmq();

let dir = "";
let herd: HerdProc | null = null;
const fakes: ReturnType<typeof Bun.spawn>[] = [];
let url = "";
/** The fake publishers' stderr, shown with herd's log when a wait times out. */
let fakeLog = "";

const waitFor = <T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 10_000) =>
  waitForLog(what, fn, timeoutMs, () => fakeLog + (herd?.log() ?? ""));

interface Ports {
  pub: number;
  replay: number;
  http: number;
}

async function startFake(args: string[]): Promise<Ports> {
  const p = Bun.spawn([PYTHON, FIXTURE, ...args, "--seconds", "30"], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
  fakes.push(p);
  void readLines(p.stderr as ReadableStream<Uint8Array>, (l) => (fakeLog += `fake: ${l}\n`));
  let resolvePorts: (x: Ports) => void = () => {};
  const ports = new Promise<Ports>((r) => (resolvePorts = r));
  void readLines(p.stdout as ReadableStream<Uint8Array>, (l) => resolvePorts(JSON.parse(l)));
  const got = await Promise.race([ports, Bun.sleep(10_000).then(() => null)]);
  if (!got) throw new Error(`fake vLLM publisher did not start\n${fakeLog}`);
  return got;
}

const BS = 16;
const A = { first: 10_000, len: 160, cpu: 4 }; // 10 blocks on GPU, the first 4 also on CPU
const B = { first: 50_000, len: 96 }; // 6 blocks
const ids = (first: number, len: number) => Array.from({ length: len }, (_, i) => first + i);

describe.skipIf(!run)("external vLLM worker (libzmq publisher)", () => {
  beforeAll(async () => {
    dir = tempDir("herd-kv-ext-");
    const a = await startFake([
      "--first-token", String(A.first), "--prompt-len", String(A.len), "--cpu-blocks", String(A.cpu), "--encoding", "map",
      "--replay-layout", "new", "--topic", "kv@fake-a@ext-m", "--skip-live", "2", "--model", "ext-m",
    ]);
    const b = await startFake(["--first-token", String(B.first), "--prompt-len", String(B.len), "--encoding", "array", "--replay-layout", "old", "--model", "ext-m"]);
    herd = await startHerd(
      dir,
      `node: { name: x, data_dir: ${JSON.stringify(join(dir, "data"))} }
router: { policy: least-loaded, metrics_scrape_interval_ms: 500 }
supervisor: { health_interval_ms: 100 }
models:
  - { name: ext-m, block_size: ${BS} }
engines:
  - kind: external
    model: ext-m
    url: http://127.0.0.1:${a.http}
    kv_events: { endpoint: "tcp://127.0.0.1:${a.pub}", replay_endpoint: "tcp://127.0.0.1:${a.replay}", topic: "kv@fake-a@ext-m" }
  - kind: external
    model: ext-m
    url: http://127.0.0.1:${b.http}
    kv_events: { endpoint: "tcp://127.0.0.1:${b.pub}", replay_endpoint: "tcp://127.0.0.1:${b.replay}", topic: "" }
`,
      { readyTimeoutMs: 15_000 },
    );
    url = herd.url;
  }, 30_000);

  afterAll(async () => {
    await herd?.stop(5_000);
    for (const f of fakes) if (f.exitCode === null) f.kill("SIGKILL");
    if (dir) cleanup(dir);
  });

  const explain = async (prompt: number[]): Promise<any> => {
    const r = await fetch(`${url}/admin/route/explain`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "ext-m", prompt }) });
    if (r.status !== 200) throw new Error(`explain ${r.status}: ${await r.text()}`);
    return r.json();
  };
  const overlapOf = (e: any, w: string) => e.candidates.find((c: any) => c.worker === w)?.overlap;

  test("their events appear in explain, per worker and per medium", async () => {
    const ea = await waitFor("fake A's blocks", async () => {
      const e = await explain(ids(A.first, A.len));
      return e.candidates.length === 2 && overlapOf(e, "x/external-0")?.gpu === 10 ? e : null;
    });
    expect(overlapOf(ea, "x/external-0")).toEqual({ gpu: 10, cpu: 0, disk: 0 }); // the CPU copies of blocks 0-3 add nothing beyond the GPU run (tiers)
    expect(overlapOf(ea, "x/external-1")).toEqual({ gpu: 0, cpu: 0, disk: 0 });
    expect(ea.kv).toEqual({ block_size: BS, prompt_tokens: A.len, prompt_blocks: 10, extra_keys: { lora_name: null, cache_salt: null } });

    const eb = await waitFor("fake B's blocks", async () => {
      const e = await explain(ids(B.first, B.len));
      return overlapOf(e, "x/external-1")?.gpu === 6 ? e : null;
    });
    expect(overlapOf(eb, "x/external-0")).toEqual({ gpu: 0, cpu: 0, disk: 0 });
    // A prompt sharing only B's first 3 blocks overlaps by exactly 3.
    const partial = [...ids(B.first, 48), ...ids(90_000, 40)];
    expect(overlapOf(await explain(partial), "x/external-1")).toEqual({ gpu: 3, cpu: 0, disk: 0 });

    const c: any = await (await fetch(`${url}/admin/cluster`)).json();
    const sa = c.workers.find((w: any) => w.id === "x/external-0").kv_events;
    const sb = c.workers.find((w: any) => w.id === "x/external-1").kv_events;
    // A's first two batches were never sent live: herd learned them from the replay socket.
    expect(sa).toMatchObject({ connected: true, topic: "kv@fake-a@ext-m", resyncs: 0 });
    expect(sa.replays).toBeGreaterThanOrEqual(1);
    expect(BigInt(sa.last_seq)).toBeGreaterThanOrEqual(2n);
    expect(sb).toMatchObject({ connected: true, topic: "", resyncs: 0 });
    // The removal of a hash herd never saw is counted, not fatal.
    expect(sa.batches).toBeGreaterThanOrEqual(3);
  }, 20_000);
});
