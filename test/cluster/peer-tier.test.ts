// Peer fetch (issue 14), reader and owner halves over real HTTP on loopback: fake peers are Bun
// servers answering GET /cluster/v1/tier/<key> from a MapStore through `tierResponse` (the owner
// code the peer API runs), behind a Bearer check. The per-peer deadline runs on a VirtualClock, so
// "a slow peer is a miss within the bound" is decided by the clock, not by sleeping.
import { afterAll, describe, expect, test } from "bun:test";
import type { Server } from "bun";
import { RealClock, VirtualClock } from "../../src/core/clock.ts";
import { MapStore } from "../helpers/map-store.ts";
import { PeerFetcher, TIER_CRC_HEADER, crc32, tierResponse, type PeerRef } from "../../src/cluster/peer-tier.ts";

const TOKEN = "peer-tier-token";
const servers: Server<undefined>[] = [];
afterAll(() => {
  for (const s of servers) s.stop(true);
});

type Mode = "ok" | "corrupt" | "hang" | "error";
/** A fake node: its tier is `store`; `mode` bends its answers. Counts the requests it saw. */
function fakePeer(name: string, store: MapStore, mode: Mode = "ok"): PeerRef & { seen: number } {
  const ref = { name, address: "", seen: 0 };
  const source = { get: (k: string) => {
    const d = store.get(k);
    return d ? { data: d.slice(), crc32: crc32(d) } : null;
  } };
  const s = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: async (req) => {
      ref.seen++;
      if (req.headers.get("authorization") !== `Bearer ${TOKEN}`) return new Response("no", { status: 401 });
      const key = decodeURIComponent(new URL(req.url).pathname.slice("/cluster/v1/tier/".length));
      if (mode === "hang") return new Promise<Response>(() => {});
      if (mode === "error") return new Response("boom", { status: 500 });
      const res = tierResponse(source, key);
      if (mode !== "corrupt" || res.status !== 200) return res;
      const body = new Uint8Array(await res.arrayBuffer());
      body[0] = body[0]! ^ 0xff;
      return new Response(body, { headers: { [TIER_CRC_HEADER]: res.headers.get(TIER_CRC_HEADER)! } });
    },
  });
  servers.push(s);
  ref.address = `127.0.0.1:${s.port}`;
  return ref;
}

const bytes = (s: string) => new TextEncoder().encode(s);
const KEY = "llama@1@0@00ff/a%b@bfloat16"; // "/" and "%" must survive the URL

function fetcher(peers: PeerRef[], o: { clock?: VirtualClock | RealClock; token?: string; sink?: MapStore; concurrency?: number } = {}) {
  return new PeerFetcher({ peers: () => peers, token: () => o.token ?? TOKEN, clock: o.clock ?? new RealClock(), sink: o.sink, concurrency: o.concurrency, timeoutMs: 200 });
}

describe("PeerFetcher", () => {
  test("a hit on one peer is returned, verified and stored locally", async () => {
    const owner = new MapStore();
    const value = new Uint8Array(256 * 1024).map((_, i) => (i * 7) & 0xff);
    owner.put(KEY, value);
    const local = new MapStore();
    const f = fetcher([fakePeer("a", new MapStore()), fakePeer("b", owner)], { sink: local });
    const got = await f.get(KEY);
    expect(got).toEqual(value);
    expect(local.get(KEY)).toEqual(value); // the next read is local
    expect(f.stats).toMatchObject({ fetches: 1, hits: 1, misses: 0, corrupt: 0 });
  });

  test("a key no peer has is a miss (null), nothing stored", async () => {
    const local = new MapStore();
    const f = fetcher([fakePeer("a", new MapStore()), fakePeer("b", new MapStore()), fakePeer("c", new MapStore())], { sink: local });
    expect(await f.get("nobody-has-it")).toBeNull();
    expect(local.list()).toEqual([]);
    expect(f.stats).toMatchObject({ hits: 0, misses: 1, peer_errors: 0 });
  });

  test("a corrupt body (checksum mismatch) is a miss; a good copy elsewhere still wins", async () => {
    const owner = new MapStore();
    owner.put(KEY, bytes("the real block"));
    const bad = fakePeer("bad", owner, "corrupt");
    const alone = fetcher([bad]);
    expect(await alone.get(KEY)).toBeNull();
    expect(alone.stats).toMatchObject({ corrupt: 1, misses: 1 });
    const both = fetcher([bad, fakePeer("good", owner)], { concurrency: 1 });
    expect(await both.get(KEY)).toEqual(bytes("the real block"));
    expect(both.stats.corrupt).toBe(1);
  });

  test("a peer that never answers is a miss once the per-peer deadline passes on the clock", async () => {
    const clock = new VirtualClock();
    const hang = fakePeer("hang", new MapStore(), "hang");
    const f = fetcher([hang, fakePeer("empty", new MapStore())], { clock });
    let settled: Uint8Array | null | "pending" = "pending";
    const p = f.get(KEY).then((v) => (settled = v));
    for (let i = 0; i < 200 && hang.seen === 0; i++) await Bun.sleep(5); // the request reached the peer
    expect(settled).toBe("pending");
    clock.advance(200);
    await p;
    expect(settled).toBeNull();
    expect(f.stats).toMatchObject({ misses: 1, peer_errors: 1 });
  });

  test("a slow peer does not delay a hit elsewhere: the first verified hit wins and the rest are dropped", async () => {
    const owner = new MapStore();
    owner.put(KEY, bytes("v"));
    const f = fetcher([fakePeer("hang", new MapStore(), "hang"), fakePeer("owner", owner)], { clock: new VirtualClock() });
    expect(await f.get(KEY)).toEqual(bytes("v")); // resolves without the clock moving
  });

  test("a wrong token, an HTTP error or no peers at all are misses, never a rejection", async () => {
    const owner = new MapStore();
    owner.put(KEY, bytes("v"));
    expect(await fetcher([fakePeer("a", owner)], { token: "wrong" }).get(KEY)).toBeNull();
    expect(await fetcher([fakePeer("e", owner, "error")]).get(KEY)).toBeNull();
    expect(await fetcher([{ name: "gone", address: "127.0.0.1:1" }]).get(KEY)).toBeNull();
    const none = fetcher([]);
    expect(none.available()).toBe(false);
    expect(await none.get(KEY)).toBeNull();
  });

  test("bounded concurrency: with one lane the peers are asked one after another, and asking stops at the first hit", async () => {
    const owner = new MapStore();
    owner.put(KEY, bytes("v"));
    const peers = [fakePeer("e1", new MapStore()), fakePeer("o", owner), fakePeer("e2", new MapStore())];
    expect(await fetcher(peers, { concurrency: 1 }).get(KEY)).toEqual(bytes("v"));
    expect(peers.map((p) => p.seen)).toEqual([1, 1, 0]);
  });
});

describe("tierResponse (owner side)", () => {
  test("bytes with their CRC-32 header, or 404", async () => {
    const store = new MapStore();
    store.put("k", bytes("abc"));
    const src = { get: (k: string) => (store.get(k) ? { data: store.get(k)!, crc32: crc32(store.get(k)!) } : null) };
    const hit = tierResponse(src, "k");
    expect(hit.status).toBe(200);
    expect(Number(hit.headers.get(TIER_CRC_HEADER))).toBe(crc32(bytes("abc")));
    expect(new Uint8Array(await hit.arrayBuffer())).toEqual(bytes("abc"));
    expect(tierResponse(src, "nope").status).toBe(404);
  });
});
