// Issue 22 "Proof": seeded fuzzing of the TCPStore wire parser (src/pd/tcpstore-wire.ts) the NIXL
// metadata service runs on every read. A grammar-aware generator writes request streams (VALIDATE,
// SET, GET, CHECK, DELETE_KEY, MULTI_GET, PING; lengths and counts around the limits), mutates some
// of them byte-wise (length fields get boundary values: 2^32, 2^63, limit ± 1) and feeds them in
// random chunks the way the server buffers them (append, parse, keep the unused tail). Properties:
// only TcpStoreProtocolError escapes, a valid stream parses back exactly, two chunkings agree, and
// the unused tail never holds a complete request. Budgets: test/helpers/fuzz.ts.
// Replay a failure: HERD_FUZZ_SEED=<seed> HERD_FUZZ_ONLY=<case> bun test test/fuzz/tcpstore.test.ts
import { expect, test } from "bun:test";
import type { Rng } from "../../src/core/rng.ts";
import { encodeBlob, encodeU32, OP, parseRequests, TcpStoreProtocolError, VALIDATION_MAGIC, type Request, type WireLimits } from "../../src/pd/tcpstore-wire.ts";
import { concatBytes, fuzzSettings, mutate, pick, randomBytes, runFuzz, splitPoints, type StepTimer } from "../helpers/fuzz.ts";

const settings = fuzzSettings(20261223, 400);
const LIMITS: WireLimits = { keyBytesMax: 256, valueBytesMax: 64 * 1024, keysPerRequestMax: 64 };
const enc = (s: string) => new TextEncoder().encode(s);

function u64(x: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt.asUintN(64, x), true);
  return out;
}

const DICTIONARY = [u64(0n), u64(1n), u64(2n ** 32n), u64(2n ** 63n), u64(2n ** 64n - 1n), u64(BigInt(LIMITS.keyBytesMax + 1)), u64(BigInt(LIMITS.valueBytesMax + 1)), u64(BigInt(LIMITS.keysPerRequestMax + 1)), Uint8Array.of(OP.MULTI_GET), Uint8Array.of(2), Uint8Array.of(255), encodeU32(VALIDATION_MAGIC)];

function key(rng: Rng): string {
  const n = rng.int(8) === 0 ? LIMITS.keyBytesMax / 4 : rng.int(24);
  return Array.from({ length: n }, () => pick(rng, ["a", "/", "0", "é", "字", "-", "_"])).join("").slice(0, LIMITS.keyBytesMax / 4);
}

function request(rng: Rng): Request {
  switch (rng.int(7)) {
    case 0:
      return { op: "validate", magic: rng.int(4) === 0 ? rng.int(2 ** 32) : VALIDATION_MAGIC };
    case 1:
      return { op: "ping", nonce: rng.int(2 ** 32) };
    case 2: {
      const n = pick(rng, [0, 1, rng.int(100), rng.int(LIMITS.valueBytesMax + 1), LIMITS.valueBytesMax]);
      const value = new Uint8Array(n);
      for (let i = 0; i < Math.min(n, 64); i++) value[i] = rng.int(256);
      return { op: "set", key: key(rng), value };
    }
    case 3:
      return { op: "get", key: key(rng) };
    case 4:
      return { op: "delete", key: key(rng) };
    default:
      return { op: rng.int(2) === 0 ? "check" : "multi_get", keys: Array.from({ length: rng.int(rng.int(5) === 0 ? LIMITS.keysPerRequestMax + 1 : 6) }, () => key(rng)) };
  }
}

function encode(r: Request): Uint8Array {
  const blob = (s: string) => encodeBlob(enc(s));
  switch (r.op) {
    case "validate":
      return concatBytes([Uint8Array.of(OP.VALIDATE), encodeU32(r.magic)]);
    case "ping":
      return concatBytes([Uint8Array.of(OP.PING), encodeU32(r.nonce)]);
    case "set":
      return concatBytes([Uint8Array.of(OP.SET), blob(r.key), encodeBlob(r.value)]);
    case "get":
      return concatBytes([Uint8Array.of(OP.GET), blob(r.key)]);
    case "delete":
      return concatBytes([Uint8Array.of(OP.DELETE_KEY), blob(r.key)]);
    case "check":
    case "multi_get":
      return concatBytes([Uint8Array.of(r.op === "check" ? OP.CHECK : OP.MULTI_GET), u64(BigInt(r.keys.length)), ...r.keys.map(blob)]);
  }
}

/** What the server does per read (src/pd/nixl-metadata.ts onData): append, parse, keep the tail. */
function feed(chunks: Uint8Array[], timer: StepTimer): { requests: Request[]; error?: string } {
  let pending: Uint8Array = new Uint8Array(0);
  const requests: Request[] = [];
  for (const chunk of chunks) {
    pending = concatBytes([pending, chunk]);
    let parsed: { requests: Request[]; used: number };
    try {
      parsed = timer.step("parseRequests", () => parseRequests(pending, LIMITS));
    } catch (e) {
      if (!(e instanceof TcpStoreProtocolError)) throw e;
      return { requests, error: e.message };
    }
    requests.push(...parsed.requests);
    pending = pending.slice(parsed.used);
    // The tail is one partial request: parsing it again yields nothing.
    expect(parseRequests(pending, LIMITS).requests.length).toBe(0);
  }
  return { requests };
}

const normal = (rs: Request[]) => rs.map((r) => (r.op === "set" ? { ...r, value: Buffer.from(r.value).toString("base64") } : r));

test(`seed ${settings.seed}: ${settings.cases} TCPStore request streams, mutated and split`, async () => {
  const stats = await runFuzz("tcpstore", settings, (rng, timer) => {
    const reqs = Array.from({ length: 1 + rng.int(10) }, () => request(rng));
    const overLimit = reqs.some((r) => (r.op === "check" || r.op === "multi_get") && r.keys.length > LIMITS.keysPerRequestMax);
    const valid = concatBytes(reqs.map(encode));
    const mode = rng.int(10);
    const bytes = mode < 4 ? valid : mode < 9 ? mutate(rng, valid, DICTIONARY) : randomBytes(rng, 2048);
    timer.generated();
    const a = feed(splitPoints(rng, bytes), timer);
    const b = feed(splitPoints(rng, bytes), timer);
    expect(a.error).toBe(b.error);
    // A read that ends in a protocol error drops the requests before it in the same read (the
    // connection is closed anyway), so with an error one chunking may see a shorter prefix.
    const [short, long] = a.requests.length <= b.requests.length ? [a, b] : [b, a];
    if (a.error === undefined) expect(a.requests.length).toBe(b.requests.length);
    expect(normal(short.requests)).toEqual(normal(long.requests.slice(0, short.requests.length)));
    if (bytes === valid && !overLimit) {
      expect(a.error).toBeUndefined();
      expect(normal(a.requests)).toEqual(normal(reqs));
    }
    if (bytes === valid && overLimit) expect(a.error).toContain("key count");
  });
  console.log(`tcpstore fuzz: ${stats.cases} cases, longest step ${stats.longestStepMs.toFixed(1)} ms, longest loop stall ${stats.longestStallMs.toFixed(1)} ms (case ${stats.stallCase}), RSS +${(stats.rssGrowthBytes / 2 ** 20).toFixed(1)} MiB`);
}, 120_000);

test("a maximal MULTI_GET sent in MSS-sized reads is not parsed quadratically", () => {
  // Regression (found while fuzzing, seed-independent): every read re-parses the incomplete
  // request, and decoding all its keys each time cost ≈ 4.3 s for this 4 MiB request on the
  // default limits; walking the lengths first brings it to ≈ 0.2 s. The budget is 10× that.
  const keys = Array.from({ length: 1024 }, (_, i) => `${i}`.padEnd(4096, "k"));
  const all = encode({ op: "multi_get", keys });
  let parsed = 0;
  const t0 = performance.now();
  for (let len = 1460; ; len += 1460) {
    parsed += parseRequests(all.subarray(0, Math.min(len, all.length))).requests.length;
    if (len >= all.length) break;
  }
  const ms = performance.now() - t0;
  expect(parsed).toBe(1);
  expect(ms).toBeLessThan(2_000);
});
