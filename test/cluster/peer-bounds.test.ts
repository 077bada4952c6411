// Issue 22, rows 1–4: what one token holder can do to the peer API. Bodies are bounded while they
// arrive (not by Content-Length alone), terms are bounded, one gossip message cannot fill the member
// table, and only a member itself may move its address or raise its incarnation (SWIM's rule).
import { afterEach, describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { clusterRoutes, PEER_BODY_MAX_BYTES } from "../../src/cluster/routes.ts";
import { ClusterService } from "../../src/cluster/service.ts";
import { TERM_MAX } from "../../src/cluster/election.ts";
import { CANDIDATES_PER_MESSAGE, PeersBackend, type PeerClient } from "../../src/cluster/peers.ts";
import { StateStore } from "../../src/cluster/state.ts";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { removeDir, tempDir } from "./harness/cluster.ts";

const dirs: string[] = [];
const services: ClusterService[] = [];
afterEach(async () => {
  for (const s of services.splice(0)) await s.stop().catch(() => {});
  for (const d of dirs.splice(0)) removeDir(d);
});

async function peersNode(kv?: (c: { epoch: string; seq: number }) => unknown) {
  const dir = tempDir("bounds");
  dirs.push(dir);
  const config = defaultConfig();
  config.node.name = "a";
  config.node.data_dir = dir;
  config.cluster.discovery = "peers";
  config.cluster.token = "t0ken";
  config.cluster.peers.seeds = ["127.0.0.1:1"];
  const svc = new ClusterService({ config, address: "127.0.0.1:1", clock: new VirtualClock(0), rng: new SeededRng(1), log: memoryLogger(), fetch: (async () => { throw new Error("offline"); }) as unknown as typeof fetch });
  await svc.start();
  services.push(svc);
  return clusterRoutes(svc, kv ? { kv } : {});
}

/** A chunked body (no Content-Length) of `totalBytes`, produced only as fast as it is read. */
function chunked(totalBytes: number, head = '{"members":[], "pad":"'): { stream: ReadableStream<Uint8Array>; sent: () => number } {
  let sent = 0;
  const chunk = new Uint8Array(1 << 20).fill(0x61);
  const stream = new ReadableStream<Uint8Array>({
    pull(ctl) {
      if (sent === 0) {
        const h = new TextEncoder().encode(head);
        sent += h.byteLength;
        return ctl.enqueue(h);
      }
      if (sent >= totalBytes) return ctl.close();
      sent += chunk.byteLength;
      ctl.enqueue(chunk);
    },
  });
  return { stream, sent: () => sent };
}

const post = (app: Awaited<ReturnType<typeof peersNode>>, path: string, body: RequestInit["body"]) =>
  app.fetch(new Request(`http://x/cluster/v1/${path}`, { method: "POST", headers: { authorization: "Bearer t0ken" }, body }), { ip: "10.0.0.9" });

describe("row 1: peer API bodies are bounded while they arrive", () => {
  test("chunked gossip beyond 16 MiB: 413 and the rest of the body is never read", async () => {
    const app = await peersNode();
    const b = chunked(400 * 1024 * 1024);
    const r = await post(app, "gossip", b.stream);
    expect(r.status).toBe(413);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("request_too_large");
    expect(b.sent()).toBeLessThan(PEER_BODY_MAX_BYTES + 4 * 1024 * 1024);
  });

  test("vote and beat too; a small chunked gossip still works", async () => {
    const app = await peersNode();
    for (const path of ["vote", "beat"]) expect((await post(app, path, chunked(64 * 1024 * 1024).stream)).status).toBe(413);
    const r = await post(app, "gossip", new ReadableStream({ start: (c) => (c.enqueue(new TextEncoder().encode('{"members":[]}')), c.close()) }));
    expect(r.status).toBe(200);
  });

  test("/cluster/v1/kv: a cursor is tiny, anything beyond 4 KiB is 413 (it had no bound at all)", async () => {
    let called = 0;
    const app = await peersNode(() => (called++, { epoch: "e", seq: 0, updates: [] }));
    const b = chunked(300 * 1024 * 1024, '{"epoch":"');
    expect((await post(app, "kv", b.stream)).status).toBe(413);
    expect(b.sent()).toBeLessThan(4 * 1024 * 1024);
    expect(called).toBe(0);
    expect((await post(app, "kv", JSON.stringify({ epoch: "e", seq: 3 }))).status).toBe(200);
    expect(called).toBe(1);
  });
});

function backend(client: PeerClient = { post: () => Promise.reject(new Error("offline")) }, seeds = ["10.0.0.1:8000"], self = "10.0.0.1:8000") {
  const dir = tempDir("bounds");
  dirs.push(dir);
  const clock = new VirtualClock(0);
  const log = memoryLogger();
  const store = new StateStore(dir);
  const b = new PeersBackend({ seeds, store, client, clock, rng: new SeededRng(2), log });
  return { b, clock, log, store, dir, start: () => b.start({ name: self, address: self, meta: {} }) };
}

describe("row 2: terms are bounded", () => {
  test("a beat with term 2^53−1 is refused (logged, rate limited), never persisted; elections still work", async () => {
    const n = backend();
    await n.start();
    const r = n.b.onBeat({ term: Number.MAX_SAFE_INTEGER, leader: "evil" });
    expect(r).toEqual({ term: 0, ok: false });
    for (let i = 0; i < 20; i++) n.b.onBeat({ term: TERM_MAX + 1, leader: "evil" });
    expect(n.log.lines.filter((l) => l.includes("beat with a term beyond the bound refused")).length).toBe(1);
    expect(n.store.get().term).toBe(0);
    expect(JSON.parse(readFileSync(n.store.path, "utf8")).term).toBe(0);
    const v = n.b.onVote({ pre: false, term: 2 ** 50, candidate: "x", address: "10.0.0.2:8000", voters: "h" });
    expect(v.granted).toBe(false);
    expect(v.reason).toContain("term beyond");
    expect(n.b.onBeat({ term: 7, leader: "10.0.0.2:8000" })).toEqual({ term: 7, ok: true });
    void n.b.close();
  });

  test("a vote or beat reply carrying a huge term is not adopted", async () => {
    const seeds = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"];
    let asked = 0;
    const client: PeerClient = {
      post: async <T>(_a: string, path: string, body: unknown) => {
        if (path !== "vote") return { members: [] } as T;
        if ((body as { pre: boolean }).pre) return { term: 0, granted: true } as T;
        asked++;
        return { term: Number.MAX_SAFE_INTEGER, granted: false } as T;
      },
    };
    const n = backend(client, seeds);
    await n.start();
    n.b.campaign();
    for (let i = 0; i < 100; i++) {
      n.clock.advance(100);
      await new Promise((r) => setImmediate(r));
    }
    expect(asked).toBeGreaterThan(0);
    expect(n.store.get().term).toBeLessThanOrEqual(TERM_MAX);
    void n.b.close();
  });

  test("state.json with a term beyond the bound: the node refuses to start, naming the file and field", () => {
    const dir = tempDir("bounds");
    dirs.push(dir);
    mkdirSync(join(dir, "cluster"), { recursive: true });
    writeFileSync(join(dir, "cluster", "state.json"), JSON.stringify({ incarnation: 3, term: Number.MAX_SAFE_INTEGER, votedFor: null }));
    expect(() => new StateStore(dir)).toThrow(/state\.json: term 9007199254740991 is not an integer in \[0, 1099511627776\]/);
    writeFileSync(join(dir, "cluster", "state.json"), JSON.stringify({ incarnation: 3, term: 12, votedFor: null }));
    expect(new StateStore(dir).get().term).toBe(12);
    const s = new StateStore(dir);
    expect(() => s.save({ incarnation: 3, term: TERM_MAX + 1, votedFor: null })).toThrow(/term/);
    expect(new StateStore(dir).get().term).toBe(12);
  });
});

/** In-process network of PeersBackends on a VirtualClock: a push arrives with the caller's host as its IP. */
class Net {
  readonly clock = new VirtualClock(0);
  readonly nodes = new Map<string, PeersBackend>();
  readonly dialed: string[] = [];
  client(from: string): PeerClient {
    return {
      post: <T>(to: string, path: string, body: unknown, timeoutMs: number) =>
        new Promise<T>((resolve, reject) => {
          this.dialed.push(to);
          const t = this.clock.setTimer(timeoutMs, () => reject(new Error("timeout")));
          this.clock.setTimer(2, () => {
            const n = this.nodes.get(to);
            if (!n) return;
            const b = body as any;
            const reply = path === "gossip" ? n.onGossip(b, from.split(":")[0]!) : path === "vote" ? n.onVote(b) : n.onBeat(b);
            this.clock.setTimer(2, () => (t.cancel(), resolve(reply as T)));
          });
        }),
    };
  }
  async add(name: string, address: string, seeds: string[]) {
    const dir = tempDir("gossip");
    dirs.push(dir);
    const b = new PeersBackend({ seeds, store: new StateStore(dir), client: this.client(address), clock: this.clock, rng: new SeededRng(name.length), log: memoryLogger() });
    this.nodes.set(address, b);
    await b.start({ name, address, meta: {} });
    return b;
  }
  async run(ms: number) {
    const end = this.clock.now() + ms;
    while (this.clock.now() < end) {
      this.clock.advance(10);
      await new Promise((r) => setImmediate(r));
    }
  }
  stop() {
    for (const b of this.nodes.values()) void b.close();
  }
}

const A = "10.0.0.1:8000";
const B = "10.0.0.2:8000";
const EVIL_IP = "10.0.0.66";
const names = (b: PeersBackend) => b.members().map((m) => `${m.name}@${m.address}`).join(",");

describe("rows 3–4: gossip hearsay cannot admit, move, restart or kill a member", () => {
  test("2000 invented members in one push: none admitted, ≤ 16 dials; a genuine new node joins within 2 s", async () => {
    const net = new Net();
    const a = await net.add("a", A, [A]);
    const b = await net.add("b", B, [A]);
    await net.run(2000);
    expect(names(a)).toBe(`a@${A},b@${B}`);
    const members = Array.from({ length: 2000 }, (_, i) => ({ name: `fake${i}`, address: `10.9.${i >> 8}.${i & 255}:8000`, meta: {}, incarnation: 1, beat: 1 }));
    a.onGossip({ from: "fake0", members }, EVIL_IP);
    net.dialed.length = 0;
    await net.run(1000);
    expect(a.members().length).toBe(2);
    expect(net.dialed.filter((d) => d.startsWith("10.9.")).length).toBeLessThanOrEqual(CANDIDATES_PER_MESSAGE);
    const c = await net.add("c", "10.0.0.3:8000", [A]);
    await net.run(2000);
    for (const n of [a, b, c]) expect(names(n)).toBe(`a@${A},b@${B},c@10.0.0.3:8000`);
    net.stop();
  });

  test("a forged record for a live member (other address, incarnation 1e15, or beat 1e15) changes nothing", async () => {
    const net = new Net();
    const a = await net.add("a", A, [A]);
    const b = await net.add("b", B, [A]);
    await net.run(2000);
    const inc = a.members().length === 2 ? (a.onGossip({ members: [] }).members.find((r) => r.name === "b")!.incarnation) : -1;
    const forged = [
      { name: "b", address: `${EVIL_IP}:8000`, meta: {}, incarnation: 1e15, beat: 0 },
      { name: "b", address: B, meta: {}, incarnation: 1e15, beat: 0 },
      { name: "b", address: B, meta: {}, incarnation: inc, beat: 1e15 },
      { name: "b", address: B, meta: {}, incarnation: inc, beat: 1e6, left: true },
    ];
    for (const rec of forged) {
      a.onGossip({ from: "evil", members: [rec] }, EVIL_IP);
      a.onGossip({ from: "b", members: [rec] }, EVIL_IP); // claiming to be b, from another host
      // from b's own host: only a leave is taken from a push; a beat or incarnation jump is not
      if (!("left" in rec)) a.onGossip({ from: "b", members: [rec] }, B.split(":")[0]!);
    }
    for (let i = 0; i < 10; i++) {
      await net.run(1000);
      expect(names(a)).toBe(`a@${A},b@${B}`);
      expect(a.members().find((m) => m.name === "b")!.state).toBe("alive");
    }
    const rec = a.onGossip({ members: [] }).members.find((r) => r.name === "b")!;
    expect(rec.incarnation).toBe(inc);
    expect(rec.beat).toBeLessThan(1000);
    void b;
    net.stop();
  });

  test("a genuine restart (new incarnation) and a graceful leave still propagate", async () => {
    const net = new Net();
    const a = await net.add("a", A, [A]);
    const b = await net.add("b", B, [A]);
    const c = await net.add("c", "10.0.0.3:8000", [A]);
    await net.run(2000);
    const incOf = (n: PeersBackend, name: string) => n.onGossip({ members: [] }).members.find((r) => r.name === name)?.incarnation;
    const before = incOf(c, "b")!;
    const closing = b.close();
    await net.run(50);
    await closing;
    net.nodes.delete(B);
    expect(names(a)).toBe(`a@${A},c@10.0.0.3:8000`); // the farewell push came from b's own host
    // b restarts on the same data dir: a higher incarnation, heard by c through a first
    const dir = dirs[dirs.length - 2]!;
    const b2 = new PeersBackend({ seeds: [A], store: new StateStore(dir), client: net.client(B), clock: net.clock, rng: new SeededRng(9), log: memoryLogger() });
    net.nodes.set(B, b2);
    await b2.start({ name: "b", address: B, meta: {} });
    await net.run(2000);
    expect(incOf(c, "b")).toBe(before + 1);
    expect(names(c)).toBe(`a@${A},b@${B},c@10.0.0.3:8000`);
    net.stop();
  });
});
