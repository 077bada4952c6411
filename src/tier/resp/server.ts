// RESP2 server over Bun.listen. Per connection: a RespReader, an auth flag, and an output queue.
// Bounds: replies are written at once when the socket takes them; what it does not take is queued
// (copied: a GET reply may be a view into shared memory), and while more than `outputSoftBytes` is
// queued the connection stops executing commands (its input stays buffered, itself bounded by
// `inputMaxBytes`); a client whose queue passes `outputHardBytes` is closed, like Redis'
// client-output-buffer-limit. Connections beyond `maxClients` are closed on accept.
// HTTP-looking input ("GET / HTTP/1.1", POST, Host:) closes the connection without a reply.
// With a `remote` source (peer fetch, issue 14: the daemon wires src/cluster/peer-tier.ts), a GET or
// EXISTS that misses locally asks it asynchronously: only that connection waits (its later commands
// stay queued so replies keep their order), other clients go on; at most `remoteMax` such lookups run
// at once and a lookup over the bound, or one that fails, is a miss ($-1 / :0), never an error.

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
  /** A remote lookup for this connection's current command is running. */
  waiting: boolean;
}

const NIL: Reply = { chunks: [new TextEncoder().encode("$-1\r\n")] };
const HTTP_LINE = /^[A-Z]{3,7} \S+ HTTP\/\d/;

export class RespServer {
  readonly stats: RespStats = { connections: 0, clients: 0, commands: 0, protocol_errors: 0, http_closed: 0, output_overflow_closed: 0, rejected_clients: 0, output_peak_bytes: 0, remote_lookups: 0, remote_hits: 0, remote_misses: 0, remote_rejected: 0 };
  private remoteInFlight = 0;
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
      waiting: false,
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
    while (!c.closing && !c.waiting && c.outBytes <= this.soft) {
      const p = c.reader.next();
      if (!p) return;
      if ("error" in p) {
        this.stats.protocol_errors++;
        this.reply(s, err(`ERR ${p.error}`));
        return this.close(s);
      }
      const name = latin1(p.args[0]!.subarray(0, 8)).toLowerCase();
      if (HTTP_COMMANDS.has(name) || (p.inline && HTTP_LINE.test(p.args.map(latin1).join(" ")))) {
        this.stats.http_closed++;
        return this.close(s);
      }
      this.stats.commands++;
      if (this.lookupRemote(s, name, p.args)) return;
      const r = execute(p.args, c, this.ctx);
      this.reply(s, r);
      if (r.close) return this.close(s);
    }
  }

  /** GET/EXISTS with local misses and a remote source: look them up, reply when done. False: run it locally. */
  private lookupRemote(s: Socket<Conn>, name: string, args: Uint8Array[]): boolean {
    const remote = this.opts.remote;
    const c = s.data;
    if (!remote || !c.authed || (name !== "get" && name !== "exists") || args.length < 2 || (name === "get" && args.length !== 2)) return false;
    const keys = args.slice(1).map(latin1);
    const missing = [...new Set(keys.filter((k) => !this.opts.store.has(k)))];
    if (missing.length === 0 || !remote.available()) return false;
    if (this.remoteInFlight + missing.length > (this.opts.remoteMax ?? REMOTE_LOOKUPS_MAX)) {
      this.stats.remote_rejected++;
      return false;
    }
    this.remoteInFlight += missing.length;
    this.stats.remote_lookups += missing.length;
    c.waiting = true;
    void Promise.all(missing.map((k) => remote.get(k).catch(() => null))).then((found) => {
      this.remoteInFlight -= missing.length;
      const got = new Map<string, Uint8Array>();
      found.forEach((v, i) => {
        if (v) got.set(missing[i]!, v);
      });
      this.stats.remote_hits += got.size;
      this.stats.remote_misses += missing.length - got.size;
      c.waiting = false;
      if (c.closing) return;
      if (name === "get") {
        const local = this.opts.store.get(keys[0]!);
        const v = local ?? got.get(keys[0]!);
        this.reply(s, v ? bulk(v) : NIL);
      } else {
        this.reply(s, int(keys.filter((k) => got.has(k) || this.opts.store.has(k)).length));
      }
      this.run(s);
    });
    return true;
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
