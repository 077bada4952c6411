// The simulated engine's KV event publisher: flags and config JSON, and its wire format as real
// libzmq + python3-msgpack see it (SUB for live batches, DEALER for replay), plus the seeded drop
// knob and the bounded replay buffer.
import { afterEach, describe, expect, test } from "bun:test";
import { createLogger } from "../../../src/core/log.ts";
import type { KvEvent } from "../../../src/engine/sim/blocks.ts";
import { SimKvPublisher, parseKvEventsConfig } from "../../../src/engine/sim/kv-publisher.ts";
import { parseSimArgs } from "../../../src/engine/sim/options.ts";
import { parseReplayMessage, replayRequest } from "../../../src/protocol/kv-frames.ts";
import { DealerSocket } from "../../../src/transport/zmtp/index.ts";
import { PYTHON, hasPyZmq } from "../../helpers/peers.ts";

const log = createLogger("test", { level: "error" });
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0)) f();
});

function publisher(o: { encoding?: "map" | "array"; drop?: number; seed?: number; bufferSteps?: number } = {}) {
  const p = new SimKvPublisher({
    config: { endpoint: "tcp://127.0.0.1:0", replayEndpoint: "tcp://127.0.0.1:0", topic: "kv@t@m", bufferSteps: o.bufferSteps ?? 100, hwm: 1000 },
    encoding: o.encoding ?? "map",
    dropFraction: o.drop ?? 0,
    seed: o.seed ?? 1,
    log,
    bind: true,
    nowS: () => 1700000000.5,
  });
  cleanup.push(() => p.close());
  return p;
}

const BIG = (1n << 63n) + 5n;
const EVENTS: KvEvent[][] = [
  [{ type: "BlockStored", blockHashes: [BIG, 7n], parentBlockHash: null, tokenIds: [1, 2, 3, 4, 5, 6, 7, 8], blockSize: 4 }],
  [{ type: "BlockRemoved", blockHashes: [BIG] }],
  [{ type: "AllBlocksCleared" }],
];

describe("--kv-events-config and flags", () => {
  test("vLLM's JSON: defaults, disabled forms, bad keys", () => {
    expect(parseKvEventsConfig('{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv@a@m"}')).toEqual({
      endpoint: "tcp://*:5557", replayEndpoint: "tcp://*:5558", topic: "kv@a@m", bufferSteps: 10_000, hwm: 100_000,
    });
    expect(parseKvEventsConfig("{}")).toEqual({ endpoint: "tcp://*:5557", replayEndpoint: null, topic: "", bufferSteps: 10_000, hwm: 100_000 });
    expect(parseKvEventsConfig('{"publisher":"null"}')).toBeNull();
    expect(parseKvEventsConfig('{"enable_kv_cache_events":false,"publisher":"zmq"}')).toBeNull();
    expect(() => parseKvEventsConfig('{"endpont":"x"}')).toThrow('unknown key "endpont"');
    expect(() => parseKvEventsConfig('{"buffer_steps":0}')).toThrow("buffer_steps");
    expect(() => parseKvEventsConfig('{"endpoint":"ipc:///tmp/x"}')).toThrow("tcp://");
    expect(() => parseKvEventsConfig("[")).toThrow("not valid JSON");
  });

  test("sim-engine flags", () => {
    const o = parseSimArgs(["--kv-events-config", '{"publisher":"zmq","endpoint":"tcp://*:6000","buffer_steps":5}', "--kv-events-encoding", "array", "--kv-events-drop-fraction", "0.25"])!;
    expect(o.kvEvents).toMatchObject({ endpoint: "tcp://*:6000", bufferSteps: 5 });
    expect(o.kvEventsEncoding).toBe("array");
    expect(o.kvEventsDropFraction).toBe(0.25);
    expect(parseSimArgs([])!.kvEvents).toBeNull();
    expect(() => parseSimArgs(["--kv-events-config", "{nope"])).toThrow("--kv-events-config: not valid JSON");
    expect(() => parseSimArgs(["--kv-events-encoding", "json"])).toThrow("expected map or array");
    expect(() => parseSimArgs(["--kv-events-drop-fraction", "1.5"])).toThrow("at most 1");
  });
});

// A libzmq SUB and DEALER decoding with python3-msgpack, independent of herd's decoder.
const PY = `
import sys, json, zmq, msgpack
pub, rep, topic, n = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB); sub.setsockopt(zmq.SUBSCRIBE, topic); sub.setsockopt(zmq.RCVTIMEO, 5000); sub.connect(pub)
print("ready", flush=True)
def conv(x):
    if isinstance(x, list): return [conv(y) for y in x]
    if isinstance(x, dict): return {k: conv(v) for k, v in x.items()}
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > 2**53: return str(x)
    return x
live = []
for _ in range(n):
    t, s, p = sub.recv_multipart()
    live.append({"topic": t.decode(), "seq": int.from_bytes(s, "big"), "batch": conv(msgpack.unpackb(p, raw=False)), "f64": p[1] == 0xcb})
d = ctx.socket(zmq.DEALER); d.setsockopt(zmq.RCVTIMEO, 5000); d.connect(rep)
d.send_multipart([b"", (1).to_bytes(8, "big")])
replay = []
while True:
    f = d.recv_multipart()
    replay.append([x.hex() for x in f])
    if f[-2] == b"\\xff" * 8: break
print(json.dumps({"live": live, "replay": replay}), flush=True)
`;

async function pyPeer(p: SimKvPublisher, n: number): Promise<any> {
  const proc = Bun.spawn([PYTHON, "-c", PY, p.endpoint, p.replayEndpoint!, "kv@t", String(n)], { stdout: "pipe", stderr: "pipe" });
  cleanup.push(() => proc.kill("SIGKILL"));
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = "";
  const dec = new TextDecoder();
  while (!text.includes("ready\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`python peer died: ${await new Response(proc.stderr as ReadableStream).text()}`);
    text += dec.decode(value);
  }
  // Slow joiner: publish only once the subscription reached us.
  for (let i = 0; i < 200 && p.subscribers === 0; i++) await Bun.sleep(10);
  await Bun.sleep(50);
  for (const ev of EVENTS) p.publish(ev);
  for (;;) {
    const { value, done } = await reader.read();
    if (value) text += dec.decode(value);
    if (done || text.split("\n").length > 2) break;
  }
  await proc.exited;
  return JSON.parse(text.split("\n")[1]!);
}

const hex = (s: string) => Buffer.from(s).toString("hex");

describe.skipIf(!hasPyZmq())("wire format against libzmq + python3-msgpack", () => {
  test("map encoding: live [topic, u64be seq, [ts, events, 0]], replay in vLLM ≥ 0.26 layout", async () => {
    const r = await pyPeer(publisher(), 3);
    expect(r.live.map((m: any) => [m.topic, m.seq, m.f64])).toEqual([["kv@t@m", 0, true], ["kv@t@m", 1, true], ["kv@t@m", 2, true]]);
    expect(r.live[0].batch).toEqual([
      1700000000.5,
      // The fields of the vLLM v0.26.0 capture (volcano-sh/kthena#1535): extra_keys per block, group_idx, kind.
      [{
        type: "BlockStored", block_hashes: [BIG.toString(), 7], parent_block_hash: null, token_ids: [1, 2, 3, 4, 5, 6, 7, 8], block_size: 4, lora_id: null, medium: "GPU", lora_name: null,
        extra_keys: [null, null], group_idx: 0, kv_cache_spec_kind: "full_attention",
      }],
      0,
    ]);
    expect(r.live[1].batch[1]).toEqual([{ type: "BlockRemoved", block_hashes: [BIG.toString()], medium: "GPU", group_idx: 0 }]);
    expect(r.live[2].batch[1]).toEqual([{ type: "AllBlocksCleared" }]);
    // Replay from 1: batches 1 and 2 as [b"", topic, seq, payload], then [b"", b"", ff×8, b""].
    expect(r.replay.map((f: string[]) => f.slice(0, 3))).toEqual([
      ["", hex("kv@t@m"), "0000000000000001"],
      ["", hex("kv@t@m"), "0000000000000002"],
      ["", "", "ffffffffffffffff"],
    ]);
    expect(r.replay[2][3]).toBe("");
  });

  test("array encoding: positional events with the tag first", async () => {
    const r = await pyPeer(publisher({ encoding: "array" }), 3);
    expect(r.live[0].batch[1]).toEqual([["BlockStored", [BIG.toString(), 7], null, [1, 2, 3, 4, 5, 6, 7, 8], 4, null, "GPU", null, [null, null], 0, "full_attention"]]);
    expect(r.live[1].batch[1]).toEqual([["BlockRemoved", [BIG.toString()], "GPU", 0]]);
    expect(r.live[2].batch[1]).toEqual([["AllBlocksCleared"]]);
  });
});

describe("drop knob and replay buffer", () => {
  test("the drop pattern is seeded; dropped batches keep their seq and stay replayable", () => {
    const pattern = (seed: number) => {
      const p = publisher({ drop: 0.4, seed });
      const out: number[] = [];
      for (let i = 0; i < 200; i++) {
        const before = p.stats.dropped;
        p.publish(EVENTS[2]!);
        out.push(p.stats.dropped - before);
      }
      p.close();
      return out;
    };
    const a = pattern(3);
    expect(pattern(3)).toEqual(a);
    expect(pattern(4)).not.toEqual(a);
    const dropped = a.reduce((x, y) => x + y, 0);
    expect(dropped).toBeGreaterThan(50);
    expect(dropped).toBeLessThan(110);
    expect(() => publisher({ drop: 1.5 })).toThrow("drop fraction");
  });

  test("replay answers from a buffer of the last buffer_steps batches; bad requests are ignored", async () => {
    const p = publisher({ bufferSteps: 3 });
    for (let i = 0; i < 5; i++) p.publish(EVENTS[2]!);
    p.publish([]); // a step without events publishes nothing
    expect(p.stats.batches).toBe(5);
    const got: Uint8Array[][] = [];
    const d = new DealerSocket({ log, onMessage: (f) => got.push(f) });
    cleanup.push(() => d.close());
    d.connect(p.replayEndpoint!);
    d.send([new Uint8Array(8)]); // not [b"", seq]: ignored, like vLLM
    d.send(replayRequest(0n));
    for (let i = 0; i < 200 && got.length < 4; i++) await Bun.sleep(10);
    const msgs = got.map((f) => parseReplayMessage(f));
    expect(msgs.map((m) => (m.kind === "batch" ? Number(m.seq) : "end"))).toEqual([2, 3, 4, "end"]);
    expect(p.stats.invalidReplayRequests).toBe(1);
    expect(p.stats.replayRequests).toBe(1);
  });
});
