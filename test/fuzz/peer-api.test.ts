// Issue 22 "Proof": seeded fuzzing of the peer API's JSON handlers (src/cluster/routes.ts: gossip,
// vote, beat, kv, view) through the real hono app of a peers-backend node. A grammar-aware generator
// writes the bodies those routes expect — gossip records, vote and beat requests, KV relay cursors —
// then breaks them: wrong types, boundary numbers, keys such as "toString"/"__proto__", deep
// nesting, long strings, mutated JSON text, invalid UTF-8; sent whole, with or without
// Content-Length, or chunked at random split points; with the token, a wrong one, or none.
// Properties: every answer is one of the expected statuses with a JSON body (an OpenAI-style error
// when not 200), never a 500 or an exception; time and memory budgets: test/helpers/fuzz.ts.
// (test/cluster/gossip-fuzz.test.ts checks the cluster's invariants under hostile gossip; this file
// checks the HTTP surface in front of it.)
// Replay a failure: HERD_FUZZ_SEED=<seed> HERD_FUZZ_ONLY=<case> bun test test/fuzz/peer-api.test.ts
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng, type Rng } from "../../src/core/rng.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { clusterRoutes } from "../../src/cluster/routes.ts";
import { ClusterService } from "../../src/cluster/service.ts";
import { RelayIndex } from "../../src/cluster/kv-relay.ts";
import { TERM_HEADROOM, TERM_MAX } from "../../src/cluster/election.ts";
import { PeersBackend } from "../../src/cluster/peers.ts";
import { StateStore } from "../../src/cluster/state.ts";
import { memoryLogger } from "../helpers/log.ts";
import { removeDir, tempDir } from "../cluster/harness/cluster.ts";
import { fuzzSettings, INTERESTING_INTS, mutate, pick, runFuzz, splitPoints } from "../helpers/fuzz.ts";

const settings = fuzzSettings(20261224, 300);
const ALLOWED = new Set([200, 400, 401, 404, 405, 413]);
/** Per request, wide: a refused or answered body never takes longer than this. */
const REQUEST_MS_MAX = 5_000;

let dir = "";
/** Advanced between cases, so rate-limited paths (a refused beat's log line) open again. */
const clock = new VirtualClock(0);
let svc: ClusterService;
let app: ReturnType<typeof clusterRoutes>;

beforeAll(async () => {
  dir = tempDir("peer-fuzz");
  const config = defaultConfig();
  config.node.name = "a";
  config.node.data_dir = dir;
  config.cluster.discovery = "peers";
  config.cluster.token = "t0ken";
  config.cluster.peers.seeds = ["127.0.0.1:1"];
  svc = new ClusterService({ config, address: "127.0.0.1:1", clock, rng: new SeededRng(1), log: memoryLogger(), fetch: (async () => { throw new Error("offline"); }) as unknown as typeof fetch });
  await svc.start();
  const relay = new RelayIndex("e0");
  relay.apply("w0", { kind: "stored", medium: "gpu", hashes: [1n, 2n, 3n] });
  app = clusterRoutes(svc, { kv: (c) => relay.since(c.epoch, c.seq) });
});

const regDirs: string[] = [];
afterAll(async () => {
  await svc?.stop().catch(() => {});
  if (dir) removeDir(dir);
  regDirs.forEach(removeDir);
});

const NUMBERS = [...INTERESTING_INTS, -0.5, 1e308, -1e308, 2 ** 60, 1e15];
const KEYS = ["name", "address", "meta", "incarnation", "beat", "left", "term", "leader", "candidate", "voters", "pre", "epoch", "seq", "members", "from"];
/** Keys that shadow Object.prototype: String(x), `${x}` and x + "" throw on {"toString": 1}. */
const PROTO_KEYS = ["toString", "valueOf", "__proto__", "constructor", "hasOwnProperty", "toJSON"];

function str(rng: Rng): string {
  const n = rng.int(8) === 0 ? rng.int(5000) : rng.int(24);
  return Array.from({ length: n }, () => pick(rng, ["a", "1", ":", ".", "\u0000", "é", "😀", "\\", "\ud800", " "])).join("");
}

function junk(rng: Rng, depth: number): unknown {
  const r = rng.int(depth > 4 ? 4 : 7);
  if (r === 0) return pick(rng, NUMBERS);
  if (r === 1) return str(rng);
  if (r === 2) return pick(rng, [null, true, false]);
  if (r === 3) return rng.int(2) === 0 ? {} : [];
  if (r === 4) return Array.from({ length: rng.int(6) }, () => junk(rng, depth + 1));
  return Object.fromEntries(Array.from({ length: rng.int(5) }, () => [pick(rng, rng.int(2) === 0 ? PROTO_KEYS : KEYS), junk(rng, depth + 1)]));
}

/** A field's value: usually well-typed, sometimes anything. */
const field = <T>(rng: Rng, good: () => T): unknown => (rng.int(4) === 0 ? (rng.int(3) === 0 ? { [pick(rng, PROTO_KEYS)]: junk(rng, 3) } : junk(rng, 2)) : good());

function record(rng: Rng): unknown {
  const o: Record<string, unknown> = {
    name: field(rng, () => pick(rng, ["a", "b", `n${rng.int(4000)}`, str(rng)])),
    address: field(rng, () => `10.0.${rng.int(256)}.${rng.int(256)}:${rng.int(70000)}`),
    meta: field(rng, () => ({ workers: Array.from({ length: rng.int(3) }, () => ({ id: str(rng) })) })),
    incarnation: field(rng, () => pick(rng, NUMBERS)),
    beat: field(rng, () => pick(rng, NUMBERS)),
  };
  if (rng.int(4) === 0) o.left = field(rng, () => true);
  if (rng.int(6) === 0) o[pick(rng, KEYS)] = junk(rng, 2);
  return o;
}

/** Terms around the bound (TERM_MAX = 2^40, src/cluster/election.ts) as often as ordinary ones. */
const term = (rng: Rng): number => (rng.int(2) === 0 ? rng.int(100) : pick(rng, [2 ** 40, 2 ** 40 + 1, 2 ** 53 - 1, 2 ** 53, 1e308, -1, 0.5]));

function body(rng: Rng, route: string): unknown {
  if (rng.int(10) === 0) return junk(rng, 0);
  switch (route) {
    case "gossip":
      return { from: field(rng, () => pick(rng, ["a", "b", str(rng)])), members: field(rng, () => Array.from({ length: rng.int(rng.int(8) === 0 ? 3000 : 8) }, () => record(rng))) };
    case "vote":
      return { pre: field(rng, () => rng.int(2) === 0), term: field(rng, () => term(rng)), candidate: field(rng, () => str(rng)), address: field(rng, () => str(rng)), voters: field(rng, () => str(rng)) };
    case "beat":
      return { term: field(rng, () => term(rng)), leader: field(rng, () => (rng.int(3) === 0 ? { [pick(rng, PROTO_KEYS)]: junk(rng, 3) } : str(rng))) };
    default:
      return { epoch: field(rng, () => pick(rng, ["e0", "", str(rng)])), seq: field(rng, () => pick(rng, NUMBERS)) };
  }
}

function deep(rng: Rng): string {
  const n = pick(rng, [100, 10_000, 200_000]);
  const [o, c] = rng.int(2) === 0 ? ["[", "]"] : ['{"a":', "}"];
  return o.repeat(n) + "1" + (rng.int(3) === 0 ? "" : c.repeat(n));
}

function bodyBytes(rng: Rng, route: string): Uint8Array {
  const text = rng.int(12) === 0 ? deep(rng) : JSON.stringify(body(rng, route)) ?? "null";
  const bytes = new TextEncoder().encode(text);
  const r = rng.int(10);
  if (r < 3) return mutate(rng, bytes, ["{", "}", "[", "]", '"', ",", ":", "\\u0000", "\\ud800", "1e999", "-"].map((s) => new TextEncoder().encode(s)));
  if (r === 3) return Uint8Array.of(...bytes.subarray(0, 64), 0xff, 0xfe, 0xc0, 0x80);
  return bytes;
}

function stream(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream<Uint8Array>({ pull: (c) => (i < chunks.length ? c.enqueue(chunks[i++]!) : c.close()) });
}

test(`seed ${settings.seed}: ${settings.cases} hostile peer API requests get expected statuses`, async () => {
  const stats = await runFuzz("peer-api", settings, async (rng, timer) => {
    clock.advance(rng.int(4) === 0 ? 61_000 : rng.int(2_000));
    await new Promise((r) => setImmediate(r));
    const route = pick(rng, ["gossip", "vote", "beat", "kv", "gossip", "vote", "beat", "kv", "view", "nope"]);
    const bytes = bodyBytes(rng, route);
    const headers: Record<string, string> = {};
    const auth = rng.int(8);
    if (auth > 1) headers.authorization = "Bearer t0ken";
    else if (auth === 1) headers.authorization = pick(rng, ["Bearer wrong", "Bearer ", "Basic dDBrZW4=", "t0ken", "Bearer t0ken\u0000"]).replace("\u0000", "x");
    if (rng.int(3) === 0) headers["content-type"] = pick(rng, ["application/json", "text/plain", "application/x-www-form-urlencoded"]);
    const mode = rng.int(8);
    if (mode < 3) headers["content-length"] = String(bytes.length);
    if (mode === 3) headers["content-length"] = pick(rng, ["-1", "abc", "1e9", "99999999999", "0"]);
    const method = route === "view" ? pick(rng, ["GET", "POST"]) : pick(rng, ["POST", "POST", "POST", "POST", "POST", "POST", "GET", "PUT"]);
    const init: RequestInit = { method, headers };
    if (method !== "GET") init.body = mode < 4 ? bytes : stream(splitPoints(rng, bytes));
    const ips = [null, "127.0.0.1", "10.0.0.9"];
    timer.generated();
    const t0 = performance.now();
    let res: Response;
    try {
      res = await app.fetch(new Request(`http://x/cluster/v1/${route}`, init), { ip: pick(rng, ips) });
    } catch (e) {
      // A Request the WHATWG constructor itself refuses (e.g. a GET with a body) never reaches herd.
      if (e instanceof TypeError && !String(e.message).includes("herd")) return;
      throw e;
    }
    const text = await res.text();
    const ms = performance.now() - t0;
    if (ms > REQUEST_MS_MAX) throw new Error(`${method} ${route} took ${ms.toFixed(0)} ms`);
    if (!ALLOWED.has(res.status)) throw new Error(`${method} ${route}: status ${res.status}: ${text.slice(0, 300)}`);
    if (res.status === 404 || res.status === 405) return; // hono's plain-text not-found for unknown routes
    const json = JSON.parse(text) as { error?: { message?: unknown; type?: unknown } };
    if (res.status !== 200) {
      expect(typeof json.error?.message).toBe("string");
      expect(typeof json.error?.type).toBe("string");
    }
  });
  console.log(`peer-api fuzz: ${stats.cases} cases, longest loop stall ${stats.longestStallMs.toFixed(1)} ms (case ${stats.stallCase}), RSS +${(stats.rssGrowthBytes / 2 ** 20).toFixed(1)} MiB`);
}, 180_000);

describe("regressions found by this fuzzer", () => {
  const backend = (term = 0) => {
    const d = tempDir("peer-fuzz-reg");
    regDirs.push(d);
    const store = new StateStore(d);
    if (term > 0) store.save({ ...store.get(), term });
    const log = memoryLogger();
    const c = new VirtualClock(0);
    const b = new PeersBackend({ seeds: ["10.0.0.1:8000"], store, client: { post: () => Promise.reject(new Error("offline")) }, clock: c, rng: new SeededRng(3), log });
    return { b, log, store, clock: c };
  };

  test('seed 20261224 case 163: a refused beat whose leader is {"toString": 1} is answered, not a 500', async () => {
    const n = backend();
    await n.b.start({ name: "a", address: "10.0.0.1:8000", meta: {} });
    expect(n.b.onBeat(JSON.parse('{"term": 1e15, "leader": {"toString": 1}}'))).toEqual({ term: 0, ok: false });
    expect(n.log.lines.some((l) => l.includes("beat with a term beyond the bound refused"))).toBe(true);
    await n.b.close();
  });

  test("HERD_FUZZ_SEED=2 HERD_FUZZ_CASES=1000 (an unhandled rejection out of preVote): a forged term of exactly TERM_MAX is refused; at the top of the term space the node stops campaigning and says so", async () => {
    const n = backend();
    await n.b.start({ name: "a", address: "10.0.0.1:8000", meta: {} });
    expect(n.b.onBeat({ term: TERM_MAX, leader: "evil" }).ok).toBe(false);
    expect(n.b.onBeat({ term: TERM_MAX - TERM_HEADROOM, leader: "10.0.0.2:8000" }).ok).toBe(true);
    await n.b.close();
    const top = backend(TERM_MAX);
    await top.b.start({ name: "a", address: "10.0.0.1:8000", meta: {} });
    top.b.campaign();
    for (let i = 0; i < 100; i++) {
      top.clock.advance(100);
      await new Promise((r) => setImmediate(r));
    }
    expect(top.store.get().term).toBe(TERM_MAX);
    expect(top.log.lines.some((l) => l.includes("election term space exhausted"))).toBe(true);
    await top.b.close();
  });
});
