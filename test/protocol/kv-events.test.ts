import { beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { decodeKvEventBatch, KvDecodeError, type KvEvent, type KvEventBatch } from "../../src/protocol/kv-events.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { xxh3_64 } from "../../src/kv/xxh3.ts";
import { PYTHON, peer, requirePeers } from "../helpers/peers.ts";

const hasMsgpack = peer("python3-msgpack", [PYTHON, "-c", "import msgpack"]);

/** The decoded batch in the JSON shape the Python generator writes. */
function plain(b: KvEventBatch) {
  const ev = (e: KvEvent) => {
    if (e.type === "AllBlocksCleared") return { type: e.type };
    const base = { ...e, blockHashes: e.blockHashes.map(String) } as Record<string, unknown>;
    if (e.type === "BlockStored") {
      base.parentBlockHash = e.parentBlockHash === null ? null : String(e.parentBlockHash);
      base.tokenIds = Array.from(e.tokenIds); // lists of 8+ ids decode packed (Uint32Array)
    }
    return base;
  };
  return {
    ts: b.ts, dpRank: b.dpRank, events: b.events.map(ev),
    unknownEvents: b.unknownEvents, unknownFields: b.unknownFields, invalidEvents: b.invalidEvents,
  };
}

const hex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/[^0-9a-f]/gi, ""), "hex"));

type Vectors = { cases: { name: string; hex: string; expect?: unknown; error?: boolean }[]; xxh3?: [number, string, string][] };

// The generator runs inside beforeAll, never at collection time: Bun runs a skipped describe's
// callback while collecting, so a peer used there breaks `npm test` on a machine without it.
describe.skipIf(!hasMsgpack)("KV event vectors from python3-msgpack", () => {
  let out: Vectors = { cases: [] };
  beforeAll(() => {
    const run = spawnSync(PYTHON, [join(import.meta.dir, "../fixtures/kv/gen_vectors.py")], { encoding: "utf8", timeout: 30_000 });
    if (run.status !== 0) throw new Error(`gen_vectors.py failed: ${run.stderr || run.error?.message}`);
    out = JSON.parse(run.stdout) as Vectors;
  });

  test("the generator covers every version layout", () => {
    const names = out.cases.map((c) => c.name);
    for (const n of ["vllm-0.9-array", "vllm-0.14-array", "vllm-0.17-array-group", "vllm-0.26-map", "vllm-0.29-map",
      "vllm-bytes-hashes", "sglang-early-array", "sglang-0.5.18-array", "sglang-map", "ext-type-in-event"]) {
      expect(names).toContain(n);
    }
  });

  test("every vector decodes to what python3-msgpack encoded (or is refused where it must be)", () => {
    expect(out.cases.length).toBeGreaterThan(0);
    const wrong: string[] = [];
    for (const c of out.cases) {
      const bytes = hex(c.hex);
      if (c.error) {
        try {
          decodeKvEventBatch(bytes);
          wrong.push(`${c.name}: decoded, expected KvDecodeError`);
        } catch (e) {
          if (!(e instanceof KvDecodeError)) wrong.push(`${c.name}: threw ${String(e)}, expected KvDecodeError`);
        }
        continue;
      }
      try {
        const got = plain(decodeKvEventBatch(bytes));
        if (!Bun.deepEquals(got, c.expect)) wrong.push(`${c.name}: got ${JSON.stringify(got)} want ${JSON.stringify(c.expect)}`);
      } catch (e) {
        wrong.push(`${c.name}: threw ${String(e)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  test("XXH3 agrees with python3-xxhash (when the generator had it)", () => {
    if (!out.xxh3) {
      if (requirePeers) throw new Error("python3-xxhash is missing but HERD_REQUIRE_PEERS=1 (gen_vectors.py wrote no xxh3 vectors)");
      return console.error("skip: python3-xxhash not installed (gen_vectors.py wrote no xxh3 vectors)");
    }
    const data = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 131 + 7) & 255);
    for (const [n, s, want] of out.xxh3) expect(xxh3_64(data(n), BigInt(s))).toBe(BigInt(want));
  });
});

describe("KV event decoding", () => {
  test("decodes the hand-encoded msgspec bytes (docs/references.md#engines-1.8)", () => {
    const b = decodeKvEventBatch(hex("93 cb 41d954fc40200000 91 94 ac 426c6f636b52656d6f766564 91 cf dab89baa7b5857c0 a3 475055 00 00"));
    expect(b.ts).toBe(1700000000.5);
    expect(b.dpRank).toBe(0);
    expect(b.events).toEqual([{ type: "BlockRemoved", blockHashes: [15760518052499183552n], medium: "GPU", groupIdx: 0, locality: null }]);
  });

  test("round-trips our own encoder in both formats", () => {
    const events: KvEvent[] = [
      blockStored({ blockHashes: [2n ** 64n - 1n, 5n], parentBlockHash: 9n, tokenIds: [1, 2, 3, 4], blockSize: 2, loraName: "x" }),
      blockStored({ blockHashes: [7n], parentBlockHash: null, tokenIds: [1, 2], blockSize: 2, groupIdx: 1, kvCacheSpecKind: "sliding_window", slidingWindow: 128 }),
      blockRemoved([5n], "CPU"),
      { type: "AllBlocksCleared" },
    ];
    for (const format of ["array", "map"] as const) {
      const b = decodeKvEventBatch(encodeKvEventBatch({ ts: 1700000000, events, dpRank: 0 }, format));
      expect(b.ts).toBe(1700000000);
      expect(b.events).toEqual(events);
      expect(b.unknownFields + b.unknownEvents + b.invalidEvents).toBe(0);
    }
  });
});
