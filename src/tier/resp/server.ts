// RESP2 server over Bun.listen. Per connection: a RespReader, an auth flag, and an output queue.
// Bounds: replies are written at once when the socket takes them; what it does not take is queued
// (copied: a GET reply may be a view into shared memory), and while more than `outputSoftBytes` is
// queued the connection stops executing commands (its input stays buffered, itself bounded by
// `inputMaxBytes`); a client whose queue passes `outputHardBytes` is closed, like Redis'
// client-output-buffer-limit. Connections beyond `maxClients` are closed on accept.
// HTTP-looking input ("GET / HTTP/1.1", POST, Host:) closes the connection without a reply.
// With a `remote` source (peer fetch, issue 14: the daemon wires src/cluster/peer-tier.ts), a GET or
// EXISTS that misses locally asks it asynchronously. The connection goes on executing its pipelined
// commands (a client's EXISTS/GET runs are looked up in parallel) but replies leave in command order:
// a reply behind a pending lookup waits in the connection's slots (≤ PIPELINE_SLOTS_MAX, then it stops
// reading). A reply is what the store held when the command ran plus what the lookup found. One
// lookup per key at a time across clients; at most `remoteMax` keys are looked up at once, and a key
// over the bound, or one the lookup does not find, is a miss ($-1 / :0), never an error.

import type { Socket, TCPSocketListener } from "bun";
import type { TierStore } from "../store.ts";
import { type CommandContext, HTTP_COMMANDS, type Reply, type Session, bulk, err, execute, int } from "./commands.ts";
import { REDIS_LIMITS, RespReader, type RespLimits, latin1 } from "./parser.ts";

export interface RespServerOptions {
  host: string;
  port: number;
  store: TierStore;
  password?: string;
  limits?: Partial<RespLimits>;
  maxClients?: number;
  outputSoftBytes?: number;
  outputHardBytes?: number;
  /** Where a local miss is looked up (other nodes' tiers); it stores what it finds into `store` itself. */
  remote?: RemoteTierSource;
  /** Remote lookups in flight across all clients (default REMOTE_LOOKUPS_MAX); over it a miss is a miss. */
  remoteMax?: number;
}

export interface RemoteTierSource {
  /** False when there is nobody to ask (the command then runs synchronously, as without a source). */
  available(): boolean;
  /** The object or null (a miss); never rejects. */
  get(key: string): Promise<Uint8Array | null>;
}

export const REMOTE_LOOKUPS_MAX = 64;
/** Replies one connection may hold behind a pending lookup before it stops executing commands. */
export const PIPELINE_SLOTS_MAX = 1024;

export interface RespStats {
  connections: number;
  clients: number;
  commands: number;
  protocol_errors: number;
  http_closed: number;
  output_overflow_closed: number;
  rejected_clients: number;
  /** Most output ever queued for one client (bounded by the soft limit plus one reply). */
  output_peak_bytes: number;
  /** Local misses looked up remotely (counted when asked), found, not found, and refused over `remoteMax`. */
  remote_lookups: number;
  remote_hits: number;
  remote_misses: number;
  remote_rejected: number;
}

interface Conn extends Session {
  reader: RespReader;
  out: Uint8Array[];
  outBytes: number;
  closing: boolean;
  /** Replies in command order while a remote lookup ahead of them runs (null: still looking). */
  slots: { reply: Reply | null }[];
  /** Bytes held in slots (counted against the output soft limit). */
  slotBytes: number;
  /** A QUIT (or other closing reply) is queued in the slots: execute nothing more. */
  quitting: boolean;
}

const NIL: Reply = { chunks: [new TextEncoder().encode("$-1\r\n")] };
const HTTP_LINE = /^[A-Z]{3,7} \S+ HTTP\/\d/;

export class RespServer {
  readonly stats: RespStats = { connections: 0, clients: 0, commands: 0, protocol_errors: 0, http_closed: 0, output_overflow_closed: 0, rejected_clients: 0, output_peak_bytes: 0, remote_lookups: 0, remote_hits: 0, remote_misses: 0, remote_rejected: 0 };
  /** Keys being looked up remotely, shared by every client that misses them meanwhile. */
  private readonly lookups = new Map<string, Promise<Uint8Array | null>>();
  private listener: TCPSocketListener<Conn> | undefined;
  private readonly limits: RespLimits;
  private readonly ctx: CommandContext;
  private readonly soft: number;
  private readonly hard: number;
  private readonly inputMax: number;

  constructor(private readonly opts: RespServerOptions) {
    if (!/^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(opts.host) && opts.password === undefined) {
      throw new Error(`RESP server on ${opts.host}: a non-loopback listener requires a password (kv_tier.resp.password_file)`);
    }
    this.limits = { ...REDIS_LIMITS, ...opts.limits };
    this.ctx = { store: opts.store, password: opts.password };
    this.soft = opts.outputSoftBytes ?? 8 * 1024 * 1024;
    this.hard = opts.outputHardBytes ?? 64 * 1024 * 1024 + this.limits.maxBulkBytes;
    this.inputMax = this.limits.maxBulkBytes + this.limits.maxInlineBytes * 2;
  }

  get port(): number {
    return this.listener?.port ?? 0;
  }

  start(): void {
    this.listener = Bun.listen<Conn>({
      hostname: this.opts.host,
      port: this.opts.port,
      socket: {
        open: (s) => this.open(s),
        data: (s, d) => this.data(s, d),
        drain: (s) => this.drain(s),
        close: (s) => {
          s.data.closing = true;
          this.stats.clients--;
        },
        error: () => {},
      },
    });
  }

  stop(): void {
    this.listener?.stop(true);
    this.listener = undefined;
  }

  private open(s: Socket<Conn>): void {
    this.stats.connections++;
    this.stats.clients++;
    const conn: Conn = {
      authed: this.opts.password === undefined,
      reader: undefined as unknown as RespReader,
      out: [],
      outBytes: 0,
      closing: false,
      slots: [],
      slotBytes: 0,
      quitting: false,
    };
    conn.reader = new RespReader(this.limits, () => !conn.authed);
    s.data = conn;
    if (this.stats.clients > (this.opts.maxClients ?? 1024)) {
      this.stats.rejected_clients++;
      this.reply(s, err("ERR max number of clients reached"));
      this.close(s);
    }
  }

  private data(s: Socket<Conn>, d: Uint8Array): void {
    const c = s.data;
    if (c.closing) return;
    c.reader.push(d);
    this.run(s);
    if (!c.closing && c.reader.bufferedBytes > this.inputMax) this.close(s);
  }

  private run(s: Socket<Conn>): void {
    const c = s.data;
    while (!c.closing && !c.quitting && c.slots.length < PIPELINE_SLOTS_MAX && c.outBytes + c.slotBytes <= this.soft) {
      const p = c.reader.next();
      if (!p) return;
      if ("error" in p) {
        this.stats.protocol_errors++;
        if (c.slots.length > 0) return this.hold(c, err(`ERR ${p.error}`, true));
        this.reply(s, err(`ERR ${p.error}`));
        return this.close(s);
      }
      const name = latin1(p.args[0]!.subarray(0, 8)).toLowerCase();
      if (HTTP_COMMANDS.has(name) || (p.inline && HTTP_LINE.test(p.args.map(latin1).join(" ")))) {
        this.stats.http_closed++;
        return this.close(s);
      }
      this.stats.commands++;
      const later = c.authed ? this.lookupRemote(name, p.args) : null;
      if (later) {
        const slot: { reply: Reply | null } = { reply: null };
        c.slots.push(slot);
        void later.then((r) => {
          slot.reply = r;
          for (const b of r.chunks) c.slotBytes += b.length;
          this.flushSlots(s);
        });
        continue;
      }
      const r = execute(p.args, c, this.ctx);
      if (c.slots.length > 0) {
        this.hold(c, r);
        continue;
      }
      this.reply(s, r);
      if (r.close) return this.close(s);
    }
  }

  /** A reply behind a pending lookup: kept as a copy (a GET reply may be a view into shared memory). */
  private hold(c: Conn, r: Reply): void {
    const chunks = r.chunks.map((b) => b.slice());
    for (const b of chunks) c.slotBytes += b.length;
    c.slots.push({ reply: { chunks, ...(r.close ? { close: true } : {}) } });
    if (r.close) c.quitting = true;
  }

  /** Send the replies at the head of the slots that are ready; then go on reading. */
  private flushSlots(s: Socket<Conn>): void {
    const c = s.data;
    if (c.closing) return;
    while (c.slots.length > 0 && c.slots[0]!.reply) {
      const r = c.slots.shift()!.reply!;
      for (const b of r.chunks) c.slotBytes -= b.length;
      this.reply(s, r);
      if (r.close) return this.close(s);
    }
    if (c.slots.length === 0 || !c.quitting) this.run(s);
  }

  /**
   * GET/EXISTS with local misses and a remote source: a promise of the reply (never rejecting), or
   * null to run the command locally (no source, nothing missing, nobody to ask, not authenticated).
   */
  private lookupRemote(name: string, args: Uint8Array[]): Promise<Reply> | null {
    const remote = this.opts.remote;
    if (!remote || (name !== "get" && name !== "exists") || args.length < 2 || (name === "get" && args.length !== 2)) return null;
    const keys = args.slice(1).map(latin1);
    const present = new Set(keys.filter((k) => this.opts.store.has(k)));
    if (present.size === new Set(keys).size || !remote.available()) return null;
    const waits = new Map<string, Promise<Uint8Array | null>>();
    for (const k of keys) {
      if (present.has(k) || waits.has(k)) continue;
      const w = this.lookups.get(k) ?? this.startLookup(remote, k);
      if (w) waits.set(k, w);
    }
    if (waits.size === 0) return null; // every missing key is over the bound: a plain miss
    const order = [...waits.keys()];
    return Promise.all(order.map((k) => waits.get(k)!)).then((found) => {
      const got = new Set(order.filter((_, i) => found[i] !== null));
      if (name === "get") {
        const v = found[0];
        return v ? bulk(v) : NIL;
      }
      return int(keys.filter((k) => present.has(k) || got.has(k)).length);
    });
  }

  private startLookup(remote: RemoteTierSource, key: string): Promise<Uint8Array | null> | null {
    if (this.lookups.size >= (this.opts.remoteMax ?? REMOTE_LOOKUPS_MAX)) {
      this.stats.remote_rejected++;
      return null;
    }
    this.stats.remote_lookups++;
    const w = remote
      .get(key)
      .catch(() => null)
      .then((v) => {
        this.lookups.delete(key);
        if (v) this.stats.remote_hits++;
        else this.stats.remote_misses++;
        return v;
      });
    this.lookups.set(key, w);
    return w;
  }

  private reply(s: Socket<Conn>, r: Reply): void {
    const c = s.data;
    for (const chunk of r.chunks) {
      if (c.out.length === 0) {
        const n = s.write(chunk);
        if (n === chunk.length) continue;
        const rest = chunk.slice(Math.max(0, n));
        c.out.push(rest);
        c.outBytes += rest.length;
      } else {
        c.out.push(chunk.slice());
        c.outBytes += chunk.length;
      }
    }
    if (c.outBytes > this.stats.output_peak_bytes) this.stats.output_peak_bytes = c.outBytes;
    if (c.outBytes > this.hard) {
      this.stats.output_overflow_closed++;
      c.out = [];
      c.outBytes = 0;
      this.close(s);
    }
  }

  private drain(s: Socket<Conn>): void {
    const c = s.data;
    while (c.out.length > 0) {
      const chunk = c.out[0]!;
      const n = s.write(chunk);
      if (n <= 0) return;
      c.outBytes -= n;
      if (n < chunk.length) {
        c.out[0] = chunk.subarray(n);
        return;
      }
      c.out.shift();
    }
    if (c.closing) s.end();
    else this.run(s);
  }

  /** Close after the queued output is flushed (Redis' CLIENT_CLOSE_AFTER_REPLY). */
  private close(s: Socket<Conn>): void {
    const c = s.data;
    c.closing = true;
    if (c.out.length === 0) s.end();
  }
}
