// RESP2 server over Bun.listen. Per connection: a RespReader, an auth flag, and an OutQueue.
// What each bound does (slices, backpressure, input/output bounds per connection and in total, AUTH
// delay, timeouts, client count, HTTP-looking input, SET slots, replies behind a remote lookup):
// README.md "Bounds". Parts: conn.ts (a connection's state), set-slots.ts, timeouts.ts, output.ts.

import type { Socket, TCPSocketListener } from "bun";
import { type Clock, RealClock, type TimerHandle } from "../../core/clock.ts";
import { type CommandContext, HTTP_COMMANDS, KEY_BYTES_MAX, type Reply, argBytesMax, err, execute } from "./commands.ts";
import { type Conn, PIPELINE_SLOTS_MAX, heldCopy, newConn, replyBytes } from "./conn.ts";
import { OutQueue, OutputBudget } from "./output.ts";
import { REDIS_LIMITS, RespReader, type RespLimits, latin1 } from "./parser.ts";
import { type RespServerOptions, type RespStats, newRespStats } from "./options.ts";
import { REMOTE_LOOKUPS_MAX, RemoteLookups } from "./remote.ts";
import { type DirectRecv, chooseDirectRecv, plainFd } from "./direct-recv.ts";
import { SetSlots } from "./set-slots.ts";
import { late, sweepEveryMs } from "./timeouts.ts";

export { REMOTE_LOOKUPS_MAX, type RemoteTierSource } from "./remote.ts";
export type { RespServerOptions, RespStats } from "./options.ts";
export { PIPELINE_SLOTS_MAX } from "./conn.ts";
export { SLOTS_TOTAL_BYTES } from "./set-slots.ts";

export const SLICE_COMMANDS = 1024;
/** Argument plus reply bytes one connection handles per slice (a few 16 MiB SETs at most). */
const SLICE_BYTES = 32 * 1024 * 1024;
/** Read after a directly received bulk: its CRLF and the start of what follows. */
const DIRECT_TAIL_BYTES = 64 * 1024;

const HTTP_LINE = /^[A-Z]{3,7} \S+ HTTP\/\d/;

/**
 * Free a socket read's bytes now instead of at a later garbage collection. Bun hands `data` a fresh
 * copy of what it read (oven-sh/bun: the socket's onData passes `binary_type.toJS(data)`, whose
 * `createBuffer` "clones bytes"), referenced by nothing but this callback once the reader has
 * released it; detaching it (ArrayBuffer.prototype.transfer(0)) gives its memory back to the
 * allocator at once. Left to the collector, up to 512 KiB a read piled up between collections and
 * came back as fresh pages, ~16 page faults a 1 MiB SET (perf stat; docs/benchmarks.md, issue 25
 * sixth pass). Only a view of its whole, non-shared buffer is detached.
 */
function discard(d: Uint8Array): void {
  const b = d.buffer as ArrayBuffer & { transfer?: (n: number) => ArrayBuffer };
  if (d.byteOffset !== 0 || d.byteLength !== b.byteLength || typeof b.transfer !== "function" || b instanceof SharedArrayBuffer) return;
  try {
    b.transfer(0);
  } catch {
    // not detachable: the collector frees it as before
  }
}

export class RespServer {
  readonly stats: RespStats = newRespStats();
  private listener: TCPSocketListener<Conn> | undefined;
  private readonly limits: RespLimits;
  private readonly ctx: CommandContext;
  private readonly soft: number;
  private readonly hard: number;
  private readonly inputMax: number;
  private readonly budget: OutputBudget;
  private readonly remote: RemoteLookups;
  private readonly clock: Clock;
  private readonly open = new Set<Socket<Conn>>();
  /** Connections stopped by the total output bound. */
  private readonly waiting = new Set<Socket<Conn>>();
  private sweep: TimerHandle | undefined;
  private readonly setSlots: SetSlots;
  /** kv_tier.resp.direct_recv: libc recv into open bulks (undefined: off or unavailable). */
  private readonly direct: DirectRecv | undefined;
  /** What follows a directly received bulk (its CRLF, the next command's start), read with it. */
  private readonly tail = new Uint8Array(DIRECT_TAIL_BYTES);

  constructor(private readonly opts: RespServerOptions) {
    if (!/^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(opts.host) && opts.password === undefined) {
      throw new Error(`RESP server on ${opts.host}: a non-loopback listener requires a password (kv_tier.resp.password_file)`);
    }
    this.limits = { ...REDIS_LIMITS, ...opts.limits };
    this.ctx = { store: opts.store, password: opts.password, keyBytesMax: opts.keyBytesMax ?? KEY_BYTES_MAX };
    this.soft = opts.outputSoftBytes ?? 8 * 1024 * 1024;
    this.hard = opts.outputHardBytes ?? 64 * 1024 * 1024 + this.limits.maxBulkBytes;
    this.inputMax = opts.inputMaxBytes ?? (this.limits.commandBytesMax ?? this.limits.maxBulkBytes + (1 << 20)) + (1 << 20);
    this.budget = new OutputBudget(opts.outputTotalBytes ?? 256 * 1024 * 1024);
    this.remote = new RemoteLookups(opts.store, opts.remote, opts.remoteMax ?? REMOTE_LOOKUPS_MAX, this.stats);
    this.clock = opts.clock ?? new RealClock();
    this.setSlots = new SetSlots(opts.store);
    const d = chooseDirectRecv(opts.directRecv ?? true);
    this.direct = d.recv;
    this.directOff = d.off;
  }

  /** Why large bulks are not read directly (kv_tier.resp.direct_recv false, or unavailable here); undefined: they are. */
  readonly directOff: string | undefined;

  get port(): number {
    return this.listener?.port ?? 0;
  }

  /** Output queued across all connections now. */
  get queuedBytes(): number {
    return this.budget.queuedBytes;
  }

  /** Input held across all connections now (tests, figures). */
  get heldInputBytes(): number {
    let n = 0;
    for (const s of this.open) n += s.data.reader.bufferedBytes;
    return n;
  }

  start(): void {
    this.listener = Bun.listen<Conn>({
      hostname: this.opts.host,
      port: this.opts.port,
      socket: {
        open: (s) => this.onOpen(s),
        data: (s, d) => this.data(s, d),
        drain: (s) => this.drain(s),
        close: (s) => this.onClose(s),
        error: () => {},
      },
    });
    const every = sweepEveryMs(this.opts.idleTimeoutMs ?? 0, this.opts.authTimeoutMs ?? 0);
    if (every !== undefined) this.sweepEvery(every);
  }

  stop(): void {
    this.sweep?.cancel();
    this.sweep = undefined;
    for (const s of this.open) {
      s.data.later?.cancel();
      this.dropSlot(s.data);
    }
    this.listener?.stop(true);
    this.listener = undefined;
  }

  private onOpen(s: Socket<Conn>): void {
    this.stats.connections++;
    this.stats.clients++;
    const conn = newConn(this.opts.password === undefined, new OutQueue(this.budget), this.clock.now());
    conn.reader = new RespReader(this.limits, () => !conn.authed, argBytesMax(this.ctx.keyBytesMax, this.limits.maxBulkBytes), (args, i, left, n) =>
      this.setSlots.sink(conn, args, i, left, n),
    );
    s.data = conn;
    this.open.add(s);
    if (this.stats.clients > (this.opts.maxClients ?? 1024)) {
      this.stats.rejected_clients++;
      this.reply(s, err("ERR max number of clients reached"));
      this.close(s);
    }
  }

  private onClose(s: Socket<Conn>): void {
    const c = s.data;
    c.closing = true;
    c.later?.cancel();
    c.later = null;
    this.stats.clients--;
    this.open.delete(s);
    this.waiting.delete(s);
    this.dropSlot(c);
    c.out.clear();
    this.budget.queuedBytes -= c.slotBytes;
    c.slotBytes = 0;
    this.wakeWaiting();
  }

  private data(s: Socket<Conn>, d: Uint8Array): void {
    const c = s.data;
    if (c.closing) return;
    c.activeMs = this.clock.now();
    c.reader.push(d, true); // parsed in place: d is Bun's own copy of what it read, ours until release()
    this.run(s);
    if (this.direct) this.readDirect(s, this.direct);
    c.reader.release();
    discard(d);
    this.checkInput(s);
  }

  private checkInput(s: Socket<Conn>): void {
    const c = s.data;
    if (!c.closing && c.reader.bufferedBytes > this.inputMax) {
      this.reply(s, err("ERR input over the connection's bound"));
      this.close(s);
    }
  }

  /**
   * kv_tier.resp.direct_recv: while the parser has a large bulk open with nothing buffered ahead of
   * it (a SET's value going into its tier slot), read the socket straight into it (direct-recv.ts),
   * then the bytes after it into `tail` and go on executing. Only while the connection may read
   * (not paused, closing or waiting for a later turn) and ≤ SLICE_BYTES per data event, so one
   * fast client cannot hold the loop; ≤ 0 (nothing yet, EOF, an error) is left to Bun's own read.
   */
  private readDirect(s: Socket<Conn>, direct: DirectRecv): void {
    const c = s.data;
    for (let budget = SLICE_BYTES; budget > 0 && !c.closing && !c.paused && !c.later; ) {
      const gap = c.reader.bulkGap();
      if (!gap) return;
      const fd = plainFd(s);
      if (fd === undefined) return;
      const n = direct.recv(fd, gap.length > budget ? gap.subarray(0, budget) : gap);
      if (n <= 0) return;
      this.stats.direct_recv_bytes += n;
      budget -= n;
      c.reader.filled(n);
      c.activeMs = this.clock.now();
      if (n < gap.length) continue;
      const t = direct.recv(fd, this.tail);
      if (t > 0) c.reader.push(this.tail.subarray(0, t));
      this.run(s);
    }
  }

  private run(s: Socket<Conn>): void {
    const c = s.data;
    if (c.later || c.closing) return this.setPaused(s, true);
    let cmds = this.opts.sliceCommands ?? SLICE_COMMANDS;
    let bytes = SLICE_BYTES;
    let blocked = true;
    for (;;) {
      if (c.closing || c.quitting || c.slots.length >= PIPELINE_SLOTS_MAX || c.out.bytes + c.slotBytes > this.soft) break;
      if (this.budget.over) {
        this.waiting.add(s);
        break;
      }
      if (cmds <= 0 || bytes <= 0) {
        this.runLater(s, 0);
        break;
      }
      const p = c.reader.next();
      if (!p) {
        blocked = false;
        break;
      }
      cmds--;
      if ("error" in p) {
        this.dropSlot(c);
        this.stats.protocol_errors++;
        if (c.slots.length > 0) {
          this.hold(c, err(`ERR ${p.error}`, true));
          break;
        }
        this.reply(s, err(`ERR ${p.error}`));
        this.close(s);
        break;
      }
      for (const a of p.args) bytes -= a.length;
      const name = latin1(p.args[0]!.subarray(0, 8)).toLowerCase();
      if (HTTP_COMMANDS.has(name) || (p.inline && p.args.length === 3 && HTTP_LINE.test(p.args.map(latin1).join(" ")))) {
        this.dropSlot(c);
        this.stats.http_closed++;
        this.close(s);
        break;
      }
      this.stats.commands++;
      const later = c.authed ? this.remote.lookup(name, p.args) : null;
      if (later) {
        const slot: { reply: Reply | null } = { reply: null };
        c.slots.push(slot);
        void later.then((r) => {
          slot.reply = r;
          this.addSlotBytes(c, replyBytes(r));
          this.flushSlots(s);
        });
        continue;
      }
      const failures = c.authFailures;
      const r = execute(p.args, c, this.ctx);
      this.dropSlot(c); // a SET committed it; any other outcome (an error reply) gives it back
      for (const b of r.chunks) bytes -= b.length;
      if (c.slots.length > 0) this.hold(c, r);
      else this.reply(s, r);
      if (r.close && c.slots.length === 0) {
        this.close(s);
        break;
      }
      if (c.authFailures > failures) {
        this.stats.auth_failures++;
        const base = this.opts.authDelayMs ?? 50;
        this.runLater(s, Math.min(this.opts.authDelayMaxMs ?? 5000, base * 2 ** Math.min(20, c.authFailures - 1)));
        break;
      }
    }
    c.out.flush(s);
    this.peaks(c);
    this.setPaused(s, blocked);
  }

  private dropSlot(c: Conn): void {
    this.setSlots.drop(c);
  }

  /** Stop reading while the connection cannot execute (its client feels TCP backpressure). */
  private setPaused(s: Socket<Conn>, paused: boolean): void {
    const c = s.data;
    if (c.paused === paused || c.closing) return;
    // pause() stops reading the socket: the client sees TCP backpressure rather than herd buffering.
    c.paused = paused;
    if (paused) {
      s.pause();
      this.stats.input_paused++;
    } else s.resume();
  }

  private runLater(s: Socket<Conn>, ms: number): void {
    const c = s.data;
    c.later?.cancel();
    const go = () => {
      c.later = null;
      this.run(s);
    };
    c.later = ms <= 0 && this.clock.immediate ? this.clock.immediate(go) : this.clock.setTimer(ms, go);
  }

  private addSlotBytes(c: Conn, n: number): void {
    c.slotBytes += n;
    this.budget.queuedBytes += n;
  }

  /** A reply behind a pending lookup: kept as a copy (a GET reply may be a view into shared memory). */
  private hold(c: Conn, r: Reply): void {
    const copy = heldCopy(r);
    this.addSlotBytes(c, replyBytes(copy));
    c.slots.push({ reply: copy });
    if (r.close) c.quitting = true;
  }

  /** Send the replies at the head of the slots that are ready; then go on reading. */
  private flushSlots(s: Socket<Conn>): void {
    const c = s.data;
    if (c.closing) return;
    while (c.slots.length > 0 && c.slots[0]!.reply) {
      const r = c.slots.shift()!.reply!;
      this.addSlotBytes(c, -replyBytes(r));
      this.reply(s, r);
      if (r.close) {
        c.out.flush(s);
        return this.close(s);
      }
    }
    c.out.flush(s);
    if (c.slots.length === 0 || !c.quitting) this.run(s);
  }

  private reply(s: Socket<Conn>, r: Reply): void {
    const c = s.data;
    c.out.pushReply(s, r.chunks);
    this.peaks(c);
    if (c.out.bytes > this.hard) {
      this.stats.output_overflow_closed++;
      c.out.clear();
      this.close(s);
    }
  }

  private peaks(c: Conn): void {
    if (c.out.bytes > this.stats.output_peak_bytes) this.stats.output_peak_bytes = c.out.bytes;
    if (this.budget.queuedBytes > this.stats.output_total_peak_bytes) this.stats.output_total_peak_bytes = this.budget.queuedBytes;
  }

  private drain(s: Socket<Conn>): void {
    const c = s.data;
    c.activeMs = this.clock.now();
    const empty = c.out.drain(s);
    this.wakeWaiting();
    if (!empty) return;
    if (c.closing) s.end();
    else this.run(s);
  }

  /** Under the total output bound again: let the stopped connections go on (each on its own turn). */
  private wakeWaiting(): void {
    if (this.budget.over || this.waiting.size === 0) return;
    const ready = [...this.waiting];
    this.waiting.clear();
    for (const w of ready) if (!w.data.closing && !w.data.later) this.runLater(w, 0);
  }

  private sweepEvery(ms: number): void {
    this.sweep = this.clock.setTimer(ms, () => {
      const now = this.clock.now();
      const idle = this.opts.idleTimeoutMs ?? 0;
      const auth = this.opts.authTimeoutMs ?? 0;
      for (const s of [...this.open]) {
        const c = s.data;
        if (!late(c, now, idle, auth)) continue;
        this.stats.timeout_closed++;
        c.out.clear();
        c.closing = true;
        s.end();
      }
      this.sweepEvery(ms);
    });
  }

  /** Close after the queued output is flushed (Redis' CLIENT_CLOSE_AFTER_REPLY). */
  private close(s: Socket<Conn>): void {
    const c = s.data;
    c.closing = true;
    c.out.flush(s);
    if (c.out.empty) s.end();
  }
}
