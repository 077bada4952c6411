// herd's NIXL metadata service: a TCPStore server (tcpstore-wire.ts) that NIXL agents publish their
// metadata to and fetch peers' from, when engines get NIXL_TCPSTORE_ENDPOINT(S)=host:port
// (`pd.nixl_metadata: herd`). NIXL reads the singular name up to ai-dynamo/nixl 7389391 and the
// plural `NIXL_TCPSTORE_ENDPOINTS` in later commits (src/core/nixl_tcpstore_metadata_backend.cpp),
// so herd sets both.
//
// Why herd serves it rather than etcd: one less process on each host, and herd knows when a worker
// dies. A dead agent's metadata must go, or peers keep connecting to a ghost: every key remembers
// the connection that last SET it; when that connection closes (the engine process died, or its
// agent went away), its keys are deleted after `orphanGraceMs` unless another connection SETs them
// again first (an agent that reconnects keeps its metadata). `dropAgent(name)` deletes an agent's
// keys at once, for when herd learns of a worker's death by other means.
//
// Bounded: connections, bytes buffered per connection, keys and bytes stored, keys per connection
// (`keysPerConnectionMax`: one full agent must not fill the store for the others); a peer beyond
// them, or one that sends anything but a VALIDATE first, is disconnected. A connection that has not
// sent VALIDATE within `validateTimeoutMs`, or nothing for `idleTimeoutMs` (0 = never: a NIXL agent
// keeps one connection for its life and sends only when it publishes or fetches), is closed.
//
// Ownership (issue 22 row 10). NIXL's TCPStore backend (ai-dynamo/nixl
// src/core/nixl_tcpstore_metadata_backend.cpp) publishes only `/nixl/agents/<label>/<its own
// name>/<dst>` keys, deletes only keys it published itself (invalidateLocal), and reads peers' keys
// with CHECK then GET, over one connection per agent. So herd enforces: a key set by a connection
// that is still open may be overwritten or deleted only by that connection (another's SET is
// refused and disconnected, its DELETE_KEY deletes nothing: 0), and a connection that published
// keys for one agent may not publish keys for another. Reads stay open to every client of the
// store: that is how peers find each other. The store binds loopback by default (pd.nixl_metadata_listen):
// its clients are this host's engines. Warnings about refused clients are at most one per 10 s.
import type { Socket, TCPSocketListener } from "bun";
import type { Clock, TimerHandle } from "../core/clock.ts";
import { LogLimiter } from "../http/log-limit.ts";
import type { Logger } from "../core/log.ts";
import type { Service } from "../core/service.ts";
import {
  DEFAULT_WIRE_LIMITS,
  TcpStoreProtocolError,
  VALIDATION_MAGIC,
  encodeBlob,
  encodeI64,
  encodeU32,
  parseRequests,
  type Request,
  type WireLimits,
} from "./tcpstore-wire.ts";

export interface NixlMetadataOptions {
  host: string;
  /** 0 = any free port (see `port` after start). */
  port: number;
  clock: Clock;
  log: Logger;
  limits?: WireLimits;
  orphanGraceMs?: number;
  connectionsMax?: number;
  /** Sum of stored value bytes; a SET beyond it disconnects the writer. */
  storeBytesMax?: number;
  keysMax?: number;
  /** Keys one connection may own at once (default 1024; an agent publishes one per label). */
  keysPerConnectionMax?: number;
  /** 0 = never (default 10 s). */
  validateTimeoutMs?: number;
  /** 0 = never (the default). */
  idleTimeoutMs?: number;
}

interface Conn {
  id: number;
  /** Received bytes not yet parsed: buf[0, len). Grown by doubling, so a 64 MiB SET arriving in
   * 64 KiB reads costs O(size) copying, not O(size²) as re-merging per read did. */
  buf: Uint8Array;
  len: number;
  validated: boolean;
  peer: string;
  /** Keys this connection owns now. */
  owned: number;
  /** The NIXL agent this connection published keys for (null: none yet). */
  agent: string | null;
  openedMs: number;
  activeMs: number;
}

/** What a client was refused for, counted (admin, tests). */
export interface NixlMetadataStats {
  refused: number;
  foreign_writes: number;
  foreign_deletes: number;
  timeouts: number;
}

const READY = new Uint8Array([0]);
const NOT_READY = new Uint8Array([1]);

/** `…nixl/agents/<label>/<agent>/<dst>` → agent; null for keys of another layout. */
export function agentOfKey(key: string): string | null {
  const at = key.indexOf("nixl/agents/");
  if (at < 0) return null;
  const parts = key.slice(at + "nixl/agents/".length).split("/");
  return parts.length >= 2 && parts[1] ? parts[1] : null;
}

export class NixlMetadataService implements Service {
  readonly name = "nixl-metadata";
  private listener: TCPSocketListener<Conn> | null = null;
  private readonly values = new Map<string, Uint8Array>();
  /** key → id of the connection that last SET it. */
  private readonly owner = new Map<string, number>();
  private readonly open = new Set<Socket<Conn>>();
  private nextConnId = 1;
  private storedBytes = 0;
  private readonly limits: WireLimits;
  private readonly graceMs: number;
  private readonly connectionsMax: number;
  private readonly storeBytesMax: number;
  private readonly keysMax: number;
  private readonly perConnMax: number;
  /** Open connections by id (ownership is enforced only against live owners). */
  private readonly byId = new Map<number, Socket<Conn>>();
  private readonly warnLimit: LogLimiter;
  private sweepTimer: TimerHandle | null = null;
  readonly stats: NixlMetadataStats = { refused: 0, foreign_writes: 0, foreign_deletes: 0, timeouts: 0 };

  constructor(private readonly o: NixlMetadataOptions) {
    this.limits = o.limits ?? DEFAULT_WIRE_LIMITS;
    this.graceMs = o.orphanGraceMs ?? 10_000;
    this.connectionsMax = o.connectionsMax ?? 1024;
    this.storeBytesMax = o.storeBytesMax ?? 256 << 20;
    this.keysMax = o.keysMax ?? 65_536;
    this.perConnMax = o.keysPerConnectionMax ?? 1024;
    this.warnLimit = new LogLimiter(o.clock, 10_000);
  }

  /** The bound port (after start). */
  get port(): number {
    return this.listener?.port ?? this.o.port;
  }

  /** `host:port` for NIXL_TCPSTORE_ENDPOINT(S). */
  get endpoint(): string {
    const h = this.o.host.includes(":") ? `[${this.o.host}]` : this.o.host;
    return `${h}:${this.port}`;
  }

  start(): void {
    this.listener = Bun.listen<Conn>({
      hostname: this.o.host,
      port: this.o.port,
      socket: {
        open: (s) => {
          const now = this.o.clock.now();
          s.data = { id: this.nextConnId++, buf: new Uint8Array(0), len: 0, validated: false, peer: s.remoteAddress, owned: 0, agent: null, openedMs: now, activeMs: now };
          if (this.open.size >= this.connectionsMax) void this.refuse(s, "too many connections");
          else {
            this.open.add(s);
            this.byId.set(s.data.id, s);
          }
        },
        data: (s, chunk) => void this.onData(s, chunk),
        close: (s) => this.onClose(s),
        error: (s) => this.onClose(s),
      },
    });
    const timeouts = [this.o.validateTimeoutMs ?? 10_000, this.o.idleTimeoutMs ?? 0].filter((t) => t > 0);
    if (timeouts.length > 0) this.sweep(Math.max(10, Math.min(...timeouts) / 4));
  }

  private sweep(everyMs: number): void {
    this.sweepTimer = this.o.clock.setTimer(everyMs, () => {
      const now = this.o.clock.now();
      const validate = this.o.validateTimeoutMs ?? 10_000;
      const idle = this.o.idleTimeoutMs ?? 0;
      for (const s of [...this.open]) {
        const c = s.data;
        if (validate > 0 && !c.validated && now - c.openedMs > validate) this.timeout(s, "no VALIDATE in time");
        else if (idle > 0 && now - c.activeMs > idle) this.timeout(s, "idle");
      }
      this.sweep(everyMs);
    });
  }

  private timeout(s: Socket<Conn>, why: string): void {
    this.stats.timeouts++;
    void this.refuse(s, why);
  }

  stop(): void {
    this.sweepTimer?.cancel();
    this.sweepTimer = null;
    for (const s of this.open) s.end();
    this.open.clear();
    this.listener?.stop(true);
    this.listener = null;
  }

  /** Keys stored now, sorted (admin views and tests). */
  keys(): string[] {
    return [...this.values.keys()].sort();
  }

  /** Delete every key an agent published (its worker left); returns how many. */
  dropAgent(agent: string): number {
    let n = 0;
    for (const k of [...this.values.keys()]) if (agentOfKey(k) === agent) n += this.delete(k);
    if (n > 0) this.o.log.info("nixl metadata of a departed agent deleted", { agent, keys: n });
    return n;
  }

  private onData(s: Socket<Conn>, chunk: Uint8Array): boolean {
    const c = s.data;
    c.activeMs = this.o.clock.now();
    if (c.len + chunk.length > c.buf.length) {
      const grown = new Uint8Array(Math.max(c.len + chunk.length, c.buf.length * 2, 4096));
      grown.set(c.buf.subarray(0, c.len));
      c.buf = grown;
    }
    c.buf.set(chunk, c.len);
    c.len += chunk.length;
    let parsed: { requests: Request[]; used: number };
    try {
      parsed = parseRequests(c.buf.subarray(0, c.len), this.limits);
    } catch (e) {
      return this.refuse(s, e instanceof TcpStoreProtocolError ? e.message : "malformed request");
    }
    if (parsed.used > 0) {
      c.buf.copyWithin(0, parsed.used, c.len);
      c.len -= parsed.used;
      if (c.len === 0 && c.buf.length > 1 << 20) c.buf = new Uint8Array(0); // idle agents hold nothing
    }
    // One request is at most a key, a value and their lengths: more buffered means a stuck parser.
    if (c.len > this.limits.valueBytesMax + this.limits.keyBytesMax + 64) return this.refuse(s, "request too large");
    for (const r of parsed.requests) {
      if (!this.answer(s, r)) return false;
    }
    return true;
  }

  /** Handle one request; false when the connection was closed. */
  private answer(s: Socket<Conn>, r: Request): boolean {
    const c = s.data;
    if (!c.validated) {
      if (r.op !== "validate" || r.magic !== VALIDATION_MAGIC) return this.refuse(s, "first request is not VALIDATE with the c10d magic");
      c.validated = true;
      return true;
    }
    switch (r.op) {
      case "validate":
        return true;
      case "ping":
        s.write(encodeU32(r.nonce));
        return true;
      case "set":
        return this.set(s, r.key, r.value);
      case "get": {
        const v = this.values.get(r.key);
        // c10d's server fails a GET of a missing key; NIXL always CHECKs first, so this is a bug.
        if (!v) return this.refuse(s, `GET of a missing key ${JSON.stringify(r.key.slice(0, 200))}`);
        s.write(encodeBlob(v));
        return true;
      }
      case "check":
        s.write(r.keys.every((k) => this.values.has(k)) ? READY : NOT_READY);
        return true;
      case "delete": {
        const owner = this.owner.get(r.key);
        if (owner !== undefined && owner !== c.id && this.byId.has(owner)) {
          // Another live agent's key: NIXL only deletes its own (invalidateLocal), so nothing is deleted.
          this.stats.foreign_deletes++;
          this.warn("nixl metadata: DELETE_KEY of a key another connection owns ignored", s, r.key);
          s.write(encodeI64(0));
          return true;
        }
        s.write(encodeI64(this.delete(r.key)));
        return true;
      }
      case "multi_get": {
        const vs = r.keys.map((k) => this.values.get(k));
        if (vs.some((v) => v === undefined)) return this.refuse(s, "MULTI_GET of a missing key");
        for (const v of vs) s.write(encodeBlob(v!));
        return true;
      }
    }
  }

  private set(s: Socket<Conn>, key: string, value: Uint8Array): boolean {
    const c = s.data;
    const owner = this.owner.get(key);
    if (owner !== undefined && owner !== c.id && this.byId.has(owner)) {
      this.stats.foreign_writes++;
      return this.refuse(s, `SET of a key another open connection owns (${JSON.stringify(key.slice(0, 200))})`);
    }
    const agent = agentOfKey(key);
    if (agent !== null && c.agent !== null && agent !== c.agent) {
      this.stats.foreign_writes++;
      return this.refuse(s, `SET for agent ${JSON.stringify(agent.slice(0, 200))} from the connection of agent ${JSON.stringify(c.agent.slice(0, 200))}`);
    }
    const mine = owner === c.id;
    if (!mine && c.owned >= this.perConnMax) return this.refuse(s, `more than ${this.perConnMax} keys from one connection`);
    const old = this.values.get(key);
    const bytes = this.storedBytes - (old?.length ?? 0) + value.length;
    if (bytes > this.storeBytesMax || (!old && this.values.size >= this.keysMax)) return this.refuse(s, "metadata store is full");
    this.values.set(key, value);
    this.storedBytes = bytes;
    if (!mine) {
      if (owner !== undefined) this.disown(owner);
      this.owner.set(key, c.id);
      c.owned++;
    }
    if (agent !== null) c.agent = agent;
    return true;
  }

  private disown(id: number): void {
    const s = this.byId.get(id);
    if (s) s.data.owned--;
  }

  private delete(key: string): number {
    const v = this.values.get(key);
    if (!v) return 0;
    this.values.delete(key);
    const owner = this.owner.get(key);
    if (owner !== undefined) this.disown(owner);
    this.owner.delete(key);
    this.storedBytes -= v.length;
    return 1;
  }

  private onClose(s: Socket<Conn>): void {
    if (!this.open.delete(s)) return;
    const id = s.data.id;
    this.byId.delete(id);
    const mine = [...this.owner].filter(([, o]) => o === id).map(([k]) => k);
    if (mine.length === 0) return;
    this.o.clock.setTimer(this.graceMs, () => {
      let n = 0;
      for (const k of mine) if (this.owner.get(k) === id) n += this.delete(k);
      if (n > 0) this.o.log.info("nixl metadata of a closed agent connection deleted", { peer: s.data.peer, keys: n, grace_ms: this.graceMs });
    });
  }

  private warn(msg: string, s: Socket<Conn>, key: string): void {
    const line = this.warnLimit.take();
    if (line) this.o.log.warn(msg, { peer: s.data?.peer ?? "unknown", key: key.slice(0, 200), suppressed: line.suppressed });
  }

  private refuse(s: Socket<Conn>, why: string): false {
    this.stats.refused++;
    const line = this.warnLimit.take();
    if (line) this.o.log.warn("nixl metadata client disconnected", { peer: s.data?.peer ?? "unknown", reason: why, suppressed: line.suppressed });
    // close() then runs onClose, so the keys this connection set still age out after the grace.
    s.end();
    return false;
  }
}
