// A minimal etcd v3 client over the JSON gateway (POST /v3/..., no gRPC dependency), checked against
// etcd 3.4 (etcd-io/etcd v3.4, api/etcdserverpb/rpc.proto and v3electionpb/v3election.proto):
// - bytes fields are standard base64; int64 fields come back as JSON strings. Lease ids exceed 2^53,
//   so they stay strings here; revisions are parsed to numbers and checked to be safe integers.
// - proto3 omits defaults: a missing `succeeded`, `kvs`, `TTL` or `type` means false/empty/0/PUT.
// - keepalive is a bidi stream; over HTTP/1.1 the gateway answers only once the request body ends,
//   so each keepalive is one POST with one message. A dead lease still answers 200, without TTL.
// - campaign, watch: long requests; Bun's fetch idle timeout is disabled for them (`timeout: false`),
//   else a quiet period drops the request and etcd resigns the campaign on the cancelled context.
import { invariant } from "../core/errors.ts";

export interface KeyValue {
  key: string;
  value: string;
  createRevision: number;
  modRevision: number;
  lease: string;
}

export interface WatchEvent {
  type: "PUT" | "DELETE";
  kv: KeyValue;
}

export interface LeaderKey {
  name: string; // base64, as etcd returns it
  key: string; // base64
  rev: string;
  lease: string;
}

export const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64");
export const unb64 = (s: string | undefined) => (s ? Buffer.from(s, "base64").toString("utf8") : "");

/** range_end for a prefix: the prefix with its last byte incremented (etcd clientv3 GetPrefixRangeEnd). */
export function prefixEnd(prefix: string): string {
  const b = Buffer.from(prefix, "utf8");
  for (let i = b.length - 1; i >= 0; i--) {
    if (b[i]! < 0xff) {
      const out = Buffer.from(b.subarray(0, i + 1));
      out[i]! += 1;
      return out.toString("base64");
    }
  }
  return b64("\0");
}

export function revision(v: unknown): number {
  if (v === undefined || v === null || v === "") return 0;
  const n = Number(v);
  invariant(Number.isSafeInteger(n) && n >= 0, `etcd revision ${String(v)} is not a safe integer`);
  return n;
}

function kvOf(raw: any): KeyValue {
  return {
    key: unb64(raw?.key),
    value: unb64(raw?.value),
    createRevision: revision(raw?.create_revision),
    modRevision: revision(raw?.mod_revision),
    lease: raw?.lease ? String(raw.lease) : "0",
  };
}

export class EtcdError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export class EtcdClient {
  private next = 0;

  constructor(
    private readonly endpoints: string[],
    private readonly f: typeof fetch = fetch,
    private readonly requestTimeoutMs = 3000,
  ) {}

  /** POST to one endpoint (rotating to the next on a network error). `long` disables every timeout. */
  async call(path: string, body: unknown, opts: { long?: boolean; signal?: AbortSignal } = {}): Promise<Response> {
    const base = this.endpoints[this.next % this.endpoints.length]!.replace(/\/+$/, "");
    const init: RequestInit & { timeout?: boolean } = {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: opts.long ? opts.signal : AbortSignal.any([AbortSignal.timeout(this.requestTimeoutMs), ...(opts.signal ? [opts.signal] : [])]),
    };
    if (opts.long) init.timeout = false;
    try {
      return await this.f(`${base}${path}`, init);
    } catch (e) {
      this.next++;
      throw e;
    }
  }

  async json(path: string, body: unknown, opts: { long?: boolean; signal?: AbortSignal } = {}): Promise<any> {
    const res = await this.call(path, body, opts);
    const text = await res.text();
    let j: any;
    try {
      j = JSON.parse(text);
    } catch {
      throw new EtcdError(`etcd ${path}: HTTP ${res.status}: ${text.slice(0, 200)}`, res.status);
    }
    if (!res.ok || j?.error) throw new EtcdError(`etcd ${path}: ${j?.error ?? j?.message ?? res.status}`, res.status);
    return j;
  }

  async grant(ttlS: number): Promise<string> {
    const j = await this.json("/v3/lease/grant", { TTL: String(ttlS) });
    invariant(typeof j.ID === "string" && j.ID !== "", "etcd lease grant without ID");
    return j.ID;
  }

  /** Remaining TTL in seconds; 0 when the lease is gone (etcd answers 200 without TTL for a dead lease). */
  async keepalive(id: string): Promise<number> {
    const res = await this.call("/v3/lease/keepalive", { ID: id });
    const text = await res.text();
    if (!res.ok) throw new EtcdError(`etcd keepalive: HTTP ${res.status}`, res.status);
    const line = text.split("\n").find((l) => l.trim() !== "");
    const j = line ? JSON.parse(line) : {};
    if (j.error) throw new EtcdError(`etcd keepalive: ${JSON.stringify(j.error)}`, 500);
    const ttl = Number(j.result?.TTL ?? 0);
    return Number.isFinite(ttl) && ttl > 0 ? ttl : 0;
  }

  async revoke(id: string): Promise<void> {
    await this.json("/v3/lease/revoke", { ID: id }).catch((e) => {
      if (!(e instanceof EtcdError && e.status === 404)) throw e;
    });
  }

  async put(key: string, value: string, lease: string): Promise<number> {
    const j = await this.json("/v3/kv/put", { key: b64(key), value: b64(value), lease });
    return revision(j.header?.revision);
  }

  async del(key: string): Promise<void> {
    await this.json("/v3/kv/deleterange", { key: b64(key) });
  }

  async range(prefix: string): Promise<{ kvs: KeyValue[]; revision: number }> {
    const j = await this.json("/v3/kv/range", { key: b64(prefix), range_end: prefixEnd(prefix) });
    return { kvs: (j.kvs ?? []).map(kvOf), revision: revision(j.header?.revision) };
  }

  /** True when `key` still exists with this create revision (the fencing check of a leader duty). */
  async stillCreatedAt(key: string, createRev: number): Promise<boolean> {
    const j = await this.json("/v3/kv/txn", {
      compare: [{ key: b64(key), target: "CREATE", result: "EQUAL", create_revision: String(createRev) }],
      success: [],
      failure: [],
    });
    return j.succeeded === true;
  }

  /**
   * Watch a prefix from `startRev` until the stream ends or `signal` aborts. Calls `onEvents` per
   * response. Returns normally when the stream ends; throws `compacted` when etcd cancelled it.
   */
  async watch(prefix: string, startRev: number, onEvents: (events: WatchEvent[], rev: number) => void, signal: AbortSignal): Promise<void> {
    const res = await this.call(
      "/v3/watch",
      { create_request: { key: b64(prefix), range_end: prefixEnd(prefix), start_revision: String(startRev) } },
      { long: true, signal },
    );
    if (!res.ok || !res.body) throw new EtcdError(`etcd watch: HTTP ${res.status}`, res.status);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (line === "") continue;
        const j = JSON.parse(line);
        if (j.error) throw new EtcdError(`etcd watch: ${JSON.stringify(j.error)}`, 500);
        const r = j.result ?? {};
        if (r.canceled) throw new EtcdError(`etcd watch canceled (compact_revision ${r.compact_revision ?? "?"})`, 410);
        const events: WatchEvent[] = (r.events ?? []).map((e: any) => ({ type: e.type === "DELETE" ? "DELETE" : "PUT", kv: kvOf(e.kv) }));
        onEvents(events, revision(r.header?.revision));
      }
    }
  }

  /** Blocks until this lease's candidate key is the oldest under `name` (etcd's election API). */
  async campaign(name: string, lease: string, value: string, signal: AbortSignal): Promise<LeaderKey> {
    const j = await this.json("/v3/election/campaign", { name: b64(name), lease, value: b64(value) }, { long: true, signal });
    const l = j.leader;
    invariant(l && typeof l.key === "string", "etcd campaign answered without a leader key");
    return { name: l.name, key: l.key, rev: String(l.rev ?? "0"), lease: String(l.lease ?? lease) };
  }

  /** The current leader's key-value, or null when there is none ("election: no leader"). */
  async leader(name: string): Promise<KeyValue | null> {
    try {
      const j = await this.json("/v3/election/leader", { name: b64(name) });
      return j.kv ? kvOf(j.kv) : null;
    } catch (e) {
      if (e instanceof EtcdError && /no leader/.test(e.message)) return null;
      throw e;
    }
  }

  async resign(leader: LeaderKey): Promise<void> {
    await this.json("/v3/election/resign", { leader });
  }
}
