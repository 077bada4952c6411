// Peer fetch (issue 14): a node whose KV tier misses a key asks the other live nodes for it over the
// peer API. Both halves live here, behind two small seams the daemon wires to the tier (src/tier
// never imports cluster, cluster never imports tier):
//   - owner side: GET /cluster/v1/tier/<url-encoded key> (routes.ts) answers the object's bytes with
//     its CRC-32 (the checksum the tier stores per object) in `x-herd-crc32`, or 404;
//   - reader side: `PeerFetcher.get(key)` asks the live peers, `concurrency` at a time, each within
//     `timeoutMs`, first verified hit wins (the other requests are aborted), stores the object into
//     the local tier (the next read is local) and returns it. Any failure, bad checksum, oversize
//     body or timeout is a miss (null), never an error: the engine recomputes what it cannot load.
import type { Clock } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { PEER_API_PREFIX } from "./client.ts";

export const TIER_CRC_HEADER = "x-herd-crc32";
/** Per-peer deadline: a tier object is worth fetching only while it beats recomputing the prefix. */
export const PEER_FETCH_TIMEOUT_MS = 500;
/** Peers asked at once for one key. */
export const PEER_FETCH_CONCURRENCY = 4;
/** Largest object accepted from a peer (Redis' proto-max-bulk-len, the RESP server's own bound). */
export const PEER_FETCH_MAX_BYTES = 512 * 1024 * 1024;

export type PeerTierHit = { data: Uint8Array; crc32: number };

/** What the owner side needs from the tier: the object's bytes (a copy) and stored CRC-32, or null;
 * a promise of it when the tier runs on its own thread (src/tier/tier-thread.ts). */
export interface PeerTierSource {
  get(key: string): PeerTierHit | null | Promise<PeerTierHit | null>;
}

/** Where a fetched object is kept (the local tier); false when it cannot be stored (it is still returned). */
export interface PeerTierSink {
  put(key: string, data: Uint8Array): boolean;
}

export interface PeerRef {
  name: string;
  address: string;
}

export interface PeerFetchStats {
  fetches: number;
  hits: number;
  misses: number;
  /** Peer answers that failed: HTTP errors other than 404, timeouts, bad checksums, oversize bodies. */
  peer_errors: number;
  corrupt: number;
}

export interface PeerFetcherOptions {
  /** The live peers to ask (not this node). */
  peers: () => PeerRef[];
  /** The cluster token ("" = none: a loopback cluster). */
  token: () => string;
  clock: Clock;
  sink?: PeerTierSink;
  log?: Logger;
  timeoutMs?: number;
  concurrency?: number;
  maxBytes?: number;
  /** Test seams. */
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
  /** "https" when the peer API runs over mutual TLS (tls.ts); default "http". */
  scheme?: () => string;
  dial?: (address: string) => string;
}

export const crc32 = (b: Uint8Array): number => Bun.hash.crc32(b) >>> 0;

export function tierPath(key: string): string {
  return `${PEER_API_PREFIX}/tier/${encodeURIComponent(key)}`;
}

/** Owner side: the response for GET /cluster/v1/tier/<key> from a synchronous source. */
export function tierResponse(source: { get(key: string): PeerTierHit | null }, key: string): Response {
  return tierHitResponse(key === "" ? null : source.get(key));
}

/** Owner side, any source: a promise when the tier answers from its thread. */
export function tierAnswer(source: PeerTierSource, key: string): Response | Promise<Response> {
  const hit = key === "" ? null : source.get(key);
  return hit instanceof Promise ? hit.then(tierHitResponse) : tierHitResponse(hit);
}

export function tierHitResponse(hit: PeerTierHit | null): Response {
  if (!hit) return Response.json({ error: { message: "not in this node's KV tier", type: "not_found_error" } }, { status: 404 });
  return new Response(hit.data, { headers: { "content-type": "application/octet-stream", [TIER_CRC_HEADER]: String(hit.crc32 >>> 0) } });
}

export class PeerFetcher {
  readonly stats: PeerFetchStats = { fetches: 0, hits: 0, misses: 0, peer_errors: 0, corrupt: 0 };
  constructor(private readonly o: PeerFetcherOptions) {}

  /** True when there is some peer to ask (callers skip the asynchronous path otherwise). */
  available(): boolean {
    return this.o.peers().length > 0;
  }

  /** The object from the first peer that has it (stored locally), or null: a miss. Never rejects. */
  async get(key: string): Promise<Uint8Array | null> {
    this.stats.fetches++;
    const peers = this.o.peers();
    const done = new AbortController();
    let found: Uint8Array | null = null;
    let next = 0;
    const lane = async () => {
      while (!found && next < peers.length) {
        const p = peers[next++]!;
        const data = await this.ask(p, key, done.signal);
        if (data && !found) {
          found = data;
          done.abort();
        }
      }
    };
    const n = Math.max(1, Math.min(this.o.concurrency ?? PEER_FETCH_CONCURRENCY, peers.length));
    await Promise.all(Array.from({ length: n }, lane));
    const hit = found as Uint8Array | null;
    if (!hit) {
      this.stats.misses++;
      return null;
    }
    this.stats.hits++;
    try {
      this.o.sink?.put(key, hit);
    } catch (e) {
      this.o.log?.warn("peer fetch: storing the object failed", { err: errorMessage(e) });
    }
    return hit;
  }

  /** One peer: its verified bytes, or null (absent, failed, too slow, corrupt). */
  private async ask(p: PeerRef, key: string, done: AbortSignal): Promise<Uint8Array | null> {
    if (done.aborted) return null;
    const ctl = new AbortController();
    const onDone = () => ctl.abort();
    done.addEventListener("abort", onDone);
    const timer = this.o.clock.setTimer(this.o.timeoutMs ?? PEER_FETCH_TIMEOUT_MS, () => ctl.abort());
    try {
      const headers: Record<string, string> = {};
      const token = this.o.token();
      if (token !== "") headers.authorization = `Bearer ${token}`;
      const target = this.o.dial ? this.o.dial(p.address) : p.address;
      const res = await (this.o.fetch ?? fetch)(`${this.o.scheme?.() ?? "http"}://${target}${tierPath(key)}`, { headers, signal: ctl.signal });
      if (res.status === 404) {
        await res.body?.cancel();
        return null;
      }
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const want = Number(res.headers.get(TIER_CRC_HEADER));
      if (!Number.isInteger(want) || res.headers.get(TIER_CRC_HEADER) === null) throw new Error("no checksum header");
      const data = await readBounded(res, this.o.maxBytes ?? PEER_FETCH_MAX_BYTES, ctl.signal);
      if (crc32(data) !== want >>> 0) {
        this.stats.corrupt++;
        throw new Error("checksum mismatch");
      }
      return data;
    } catch (e) {
      if (!done.aborted) {
        this.stats.peer_errors++;
        this.o.log?.debug("peer fetch failed", { peer: p.name, err: errorMessage(e) });
      }
      return null;
    } finally {
      timer.cancel();
      done.removeEventListener("abort", onDone);
    }
  }
}

/** The body as one buffer, streamed chunk by chunk and refused past `max` bytes or once aborted. */
async function readBounded(res: Response, max: number, signal: AbortSignal): Promise<Uint8Array> {
  const declared = Number(res.headers.get("content-length") ?? "-1");
  if (declared > max) throw new Error(`object of ${declared} bytes exceeds ${max}`);
  if (!res.body) return new Uint8Array(0);
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  const abort = () => void reader.cancel().catch(() => {});
  signal.addEventListener("abort", abort);
  try {
    for (;;) {
      const r = await reader.read();
      if (signal.aborted) throw new Error("aborted");
      if (r.done) break;
      size += r.value.length;
      if (size > max) throw new Error(`object exceeds ${max} bytes`);
      chunks.push(r.value);
    }
  } finally {
    signal.removeEventListener("abort", abort);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}
