// End to end against real libzmq: a python3-zmq + python3-msgpack stand-in for vLLM's publisher
// (test/fixtures/kv/vllm_publisher.py) → herd's ZMTP SUB and DEALER (consumer.ts adapters) →
// KvIngest → BlockIndex. Covers both event encodings, both replay reply layouts, a dropped batch
// repaired through replay, and the late-joiner replay from seq 0.
import { afterEach, describe, expect, test } from "bun:test";
import { spawn, type Subprocess } from "bun";
import { join } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { createLogger } from "../../src/core/log.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { ZmtpKvReplayer, ZmtpKvSource } from "../../src/kv/consumer.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { KvIngest } from "../../src/kv/ingest-manager.ts";
import { hasPyZmq, PYTHON } from "../helpers/peers.ts";

const BS = 4;
const TOPIC = "kv@pod-a@m";
const log = createLogger("test", { level: "error" });
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0)) f();
});

class PyPublisher {
  private lines: string[] = [];
  private waiters: ((l: string) => void)[] = [];
  constructor(private readonly proc: Subprocess<"pipe", "pipe", "inherit">) {
    void (async () => {
      let buf = "";
      for await (const chunk of proc.stdout) {
        buf += new TextDecoder().decode(chunk);
        for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          const w = this.waiters.shift();
          if (w) w(line);
          else this.lines.push(line);
        }
      }
    })();
  }
  static async start(format: "map" | "array", layout: "new" | "old"): Promise<{ pub: PyPublisher; ports: [number, number] }> {
    const proc = spawn([PYTHON, join(import.meta.dir, "../fixtures/kv/vllm_publisher.py"), format, layout, TOPIC], {
      stdin: "pipe", stdout: "pipe", stderr: "inherit",
    });
    const pub = new PyPublisher(proc);
    cleanup.push(() => proc.kill());
    const first = await pub.line();
    const [, a, b] = first.split(" ");
    return { pub, ports: [Number(a), Number(b)] };
  }
  line(): Promise<string> {
    const l = this.lines.shift();
    if (l !== undefined) return Promise.resolve(l);
    return new Promise((r) => this.waiters.push(r));
  }
  async publish(events: unknown[], send = true): Promise<string> {
    this.proc.stdin.write(JSON.stringify({ op: "publish", events, send }) + "\n");
    this.proc.stdin.flush();
    return this.line();
  }
}

async function until(what: string, fn: () => boolean, ms = 8000): Promise<void> {
  const t0 = performance.now();
  while (!fn()) {
    if (performance.now() - t0 > ms) throw new Error(`timed out: ${what}`);
    await Bun.sleep(10);
  }
}

const toks = Array.from({ length: 8 * BS }, (_, i) => 151_000 + i);
const H = (i: number) => (18_000_000_000_000_000_000n + BigInt(i)).toString(); // u64 above 2^63
const store = (from: number, to: number) => ({
  type: "BlockStored",
  hashes: Array.from({ length: to - from }, (_, k) => H(from + k)),
  parent: from === 0 ? null : H(from - 1),
  tokens: toks.slice(from * BS, to * BS),
  block_size: BS,
});

describe.skipIf(!hasPyZmq())("KV events from a real libzmq publisher (python3-zmq)", () => {
  for (const [format, layout] of [["map", "new"], ["array", "old"]] as const) {
    test(`${format} events, ${layout} replay layout: a dropped batch comes back through replay`, async () => {
      const { pub, ports } = await PyPublisher.start(format, layout);
      const index = new BlockIndex();
      const clock = new RealClock();
      const ingest = new KvIngest(index, clock, log);
      cleanup.push(() => ingest.close());
      const o = { log, clock, reconnectIvlMaxMs: 200 };
      const stream = ingest.addWorker(
        "n/vllm-0",
        new ZmtpKvSource(`tcp://127.0.0.1:${ports[0]}`, TOPIC, o),
        new ZmtpKvReplayer(`tcp://127.0.0.1:${ports[1]}`, { ...o, timeoutMs: 2000 }),
        { blockSize: BS },
      );
      await until("SUB connected", () => stream.status().connected);
      await Bun.sleep(100); // let the subscription reach the PUB
      expect(await pub.publish([store(0, 4)])).toBe("ok 0");
      expect(await pub.publish([store(4, 6)], false)).toBe("ok 1"); // lost on the wire
      expect(await pub.publish([store(6, 8)])).toBe("ok 2");
      expect(await pub.publish([{ type: "BlockRemoved", hashes: [H(7)], medium: "GPU" }])).toBe("ok 3");
      const prompt = blockHashes(toks, BS);
      await until("index holds blocks 0..6", () => index.findMatches(prompt).get("n/vllm-0")?.gpu === 7);
      const st = stream.status();
      expect(st).toMatchObject({ lastSeq: "3", resyncs: 0, restarts: 0, decodeErrors: 0, unknownSkipped: 0 });
      expect(st.replays).toBeGreaterThanOrEqual(1);
      expect(st.gaps + (st.replays > 0 ? 1 : 0)).toBeGreaterThanOrEqual(1);
      expect(index.holds("n/vllm-0", prompt[7]!, "gpu")).toBe(false);
    }, 20_000);
  }

  test("joining late: the first message seen has seq > 0, the replay from 0 fills in the past", async () => {
    const { pub, ports } = await PyPublisher.start("map", "new");
    expect(await pub.publish([store(0, 3)])).toBe("ok 0");
    expect(await pub.publish([store(3, 5)])).toBe("ok 1");
    const index = new BlockIndex();
    const clock = new RealClock();
    const ingest = new KvIngest(index, clock, log);
    cleanup.push(() => ingest.close());
    const o = { log, clock, reconnectIvlMaxMs: 200 };
    const stream = ingest.addWorker(
      "n/vllm-1",
      new ZmtpKvSource(`tcp://127.0.0.1:${ports[0]}`, TOPIC, o),
      new ZmtpKvReplayer(`tcp://127.0.0.1:${ports[1]}`, o),
    );
    await until("SUB connected", () => stream.status().connected);
    await Bun.sleep(100);
    expect(await pub.publish([store(5, 8)])).toBe("ok 2");
    await until("index holds all 8 blocks", () => index.findMatches(blockHashes(toks, BS)).get("n/vllm-1")?.gpu === 8);
    expect(stream.status()).toMatchObject({ lastSeq: "2", resyncs: 0, replays: 1, blockSize: BS });
  }, 20_000);
});
