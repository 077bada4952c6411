// Incremental RESP2 request parser with Redis' own limits (redis/redis src/networking.c,
// processMultibulkBuffer / processInlineBuffer, 7.x): a `*N` count above INT_MAX is an "invalid
// multibulk length", a `$N` above proto-max-bulk-len (512 MB) an "invalid bulk length"; while the
// client must still AUTH, more than 10 arguments or a bulk above 16384 bytes is refused; a line with
// no newline after 64 KiB is "too big inline request" / "too big mbulk count string" / "too big bulk
// count string". Every protocol error is final: the server replies and closes.
// A bulk's bytes are copied once, straight into a buffer of its declared size (allocated when the
// header arrives, which the limits above bound), or into one the `sink` hands out for it (the server:
// a SET's value goes straight into its shared-memory slot).
// Beyond Redis (issue 22): the arguments of one command count against `commandBytesMax` as they
// arrive (Redis keeps an unknown command's 25 × 64 MiB arguments until the last one is in), and a
// `$N` header is refused at once when N is over what the command may use at that position (`argBytesMax`:
// the server says a GET's key may be 1 KiB, an unknown command's arguments ≤ 1 KiB), so no buffer
// of N bytes is ever allocated for it.

export interface RespLimits {
  maxInlineBytes: number;
  maxMultibulk: number;
  maxBulkBytes: number;
  unauthMultibulk: number;
  unauthBulkBytes: number;
  /** Sum of one command's argument bytes (default: maxBulkBytes + 1 MiB). */
  commandBytesMax?: number;
}

/** The most bytes argument `index` may have, given the command's name (undefined while index is 0). */
export type ArgBytesMax = (name: Uint8Array | undefined, index: number) => number;

/** Where a large bulk goes instead of a buffer of the parser's: `size` bytes for argument `index`
 * (the arguments before it are complete, `left` counts it and those after it), or undefined. */
export type BulkSink = (args: readonly Uint8Array[], index: number, left: number, size: number) => Uint8Array | undefined;

export const REDIS_LIMITS: RespLimits = {
  maxInlineBytes: 64 * 1024,
  maxMultibulk: 2 ** 31 - 1, // INT_MAX, as Redis 7; arguments are not preallocated
  maxBulkBytes: 512 * 1024 * 1024,
  unauthMultibulk: 10,
  unauthBulkBytes: 16 * 1024,
};

/** Bulks of this size or more are parsed into reused buffers (see next()). */
const SCRATCH_MIN_BYTES = 64 * 1024;
/** A connection keeps at most this much scratch per argument position. */
const SCRATCH_MAX_BYTES = 64 * 1024 * 1024;

export type Parsed = { args: Uint8Array[]; inline: boolean } | { error: string };

const CR = 13;
const LF = 10;

export class RespReader {
  /** The reader's own input buffer (reused); `buf` is it, or a chunk lent by push(chunk, true). */
  private own: Uint8Array = Buffer.allocUnsafe(16 * 1024);
  private buf: Uint8Array = this.own;
  private start = 0;
  private end = 0;
  // Multibulk in progress.
  private argsLeft = 0;
  private args: Uint8Array[] = [];
  private bulk: Uint8Array | undefined;
  private bulkFilled = 0;
  private failed = false;
  /** Bytes of the complete arguments of the multibulk in progress. */
  private argsBytes = 0;
  private readonly commandMax: number;
  private readonly scratch: (Uint8Array | undefined)[] = [];

  constructor(
    private readonly limits: RespLimits,
    /** True while the client must still authenticate (limits apply). */
    private readonly authRequired: () => boolean,
    private readonly argMax: ArgBytesMax = () => limits.maxBulkBytes,
    /** Asked for large bulks first (the server: a SET's value straight into its tier slot). */
    private readonly sink?: BulkSink,
  ) {
    this.commandMax = limits.commandBytesMax ?? limits.maxBulkBytes + (1 << 20);
  }

  /** Bytes held for commands not yet returned: unparsed input, complete arguments, a partial bulk. */
  get bufferedBytes(): number {
    return this.end - this.start + this.argsBytes + this.bulkFilled;
  }

  /** Unparsed input bytes only (what arrived beyond the command being assembled). */
  get unparsedBytes(): number {
    return this.end - this.start;
  }

  /**
   * Add input. With `lend`, the caller lets the reader parse `chunk` in place instead of copying it
   * into its own buffer (when nothing is buffered ahead of it) and must call release() before it
   * reuses or discards the chunk: the server lends each socket read (a fresh copy Bun made for it),
   * so a large SET's first bytes are copied once, into its slot, instead of twice (issue 25).
   */
  push(chunk: Uint8Array, lend = false): void {
    let c = chunk;
    if (this.bulk && this.bulkFilled < this.bulk.length && this.end === this.start) {
      const n = Math.min(c.length, this.bulk.length - this.bulkFilled);
      this.bulk.set(c.subarray(0, n), this.bulkFilled);
      this.bulkFilled += n;
      c = c.subarray(n);
    }
    if (c.length === 0) return;
    if (lend && this.end === this.start && this.buf === this.own) {
      this.buf = c;
      this.start = 0;
      this.end = c.length;
      return;
    }
    if (this.buf !== this.own || this.end + c.length > this.buf.length) this.grow(c.length);
    this.buf.set(c, this.end);
    this.end += c.length;
  }

  /** Stop using a lent chunk (push(chunk, true)): its unparsed rest, if any, is copied into the reader's own buffer. */
  release(): void {
    if (this.buf !== this.own) this.grow(0);
  }

  /**
   * The unfilled rest of a large bulk (≥ SCRATCH_MIN_BYTES) being assembled, when no input is
   * buffered ahead of it: the server may read its socket straight into it (direct-recv.ts), then
   * call filled(). Undefined otherwise (buffered bytes go first, through next()).
   */
  bulkGap(): Uint8Array | undefined {
    const b = this.bulk;
    if (!b || this.failed || b.length < SCRATCH_MIN_BYTES || this.end !== this.start || this.bulkFilled >= b.length) return undefined;
    return b.subarray(this.bulkFilled);
  }

  /** `n` bytes were written at the start of bulkGap(). */
  filled(n: number): void {
    const b = this.bulk;
    if (!b || !Number.isInteger(n) || n < 0 || this.bulkFilled + n > b.length) throw new Error(`filled(${n}): over the bulk's ${b ? b.length - this.bulkFilled : 0} open bytes`);
    this.bulkFilled += n;
  }

  /**
   * The next complete command, a protocol error (final), or undefined when more bytes are needed.
   * Arguments of 64 KiB or more are views of buffers reused by the following call: use (or copy)
   * them before calling next() again.
   */
  next(): Parsed | undefined {
    if (this.failed) return undefined;
    for (;;) {
      if (this.bulk) {
        const r = this.finishBulk();
        if (r !== "done") return r;
        if (this.argsLeft === 0) return this.emit();
        continue;
      }
      if (this.argsLeft > 0) {
        const r = this.bulkHeader();
        if (r !== "done") return r;
        continue;
      }
      if (this.start === this.end) return undefined;
      if (this.buf[this.start] !== 42 /* '*' */) {
        const r = this.inline();
        if (r === "skip") continue;
        return r;
      }
      const r = this.multibulkHeader();
      if (r === "skip") continue;
      if (r !== "done") return r;
    }
  }

  private fail(msg: string): Parsed {
    this.failed = true;
    return { error: `Protocol error: ${msg}` };
  }

  private line(tooBig: string): { text: string; ok: true } | Parsed | undefined {
    const nl = this.buf.indexOf(LF, this.start);
    if (nl < 0 || nl >= this.end) {
      return this.end - this.start > this.limits.maxInlineBytes ? this.fail(tooBig) : undefined;
    }
    const stop = nl > this.start && this.buf[nl - 1] === CR ? nl - 1 : nl;
    const text = latin1(this.buf.subarray(this.start, stop));
    this.start = nl + 1;
    return { text, ok: true };
  }

  private inline(): Parsed | "skip" | undefined {
    const l = this.line("too big inline request");
    if (!l || !("ok" in l)) return l;
    const words = l.text.split(/[ \t]+/).filter((w) => w.length > 0);
    if (words.length === 0) return "skip";
    return { args: words.map((w) => Uint8Array.from(w, (ch) => ch.charCodeAt(0))), inline: true };
  }

  private multibulkHeader(): Parsed | "skip" | "done" | undefined {
    const l = this.line("too big mbulk count string");
    if (!l || !("ok" in l)) return l;
    const n = parseInteger(l.text.slice(1));
    if (n === undefined || n > this.limits.maxMultibulk) return this.fail("invalid multibulk length");
    if (n > this.limits.unauthMultibulk && this.authRequired()) return this.fail("unauthenticated multibulk length");
    if (n <= 0) return "skip";
    this.argsLeft = n;
    this.args = [];
    this.argsBytes = 0;
    return "done";
  }

  private bulkHeader(): Parsed | "done" | undefined {
    if (this.start === this.end) return undefined;
    if (this.buf[this.start] !== 36 /* '$' */) {
      return this.fail(`expected '$', got '${String.fromCharCode(this.buf[this.start]!)}'`);
    }
    const l = this.line("too big bulk count string");
    if (!l || !("ok" in l)) return l;
    const n = parseInteger(l.text.slice(1));
    if (n === undefined || n < 0 || n > this.limits.maxBulkBytes) return this.fail("invalid bulk length");
    if (n > this.limits.unauthBulkBytes && this.authRequired()) return this.fail("unauthenticated bulk length");
    const i0 = this.args.length;
    if (n > this.argMax(this.args[0], i0)) return this.fail(`argument ${i0} of ${n} bytes is over this command's bound`);
    if (this.argsBytes + n > this.commandMax) return this.fail(`command over the ${this.commandMax}-byte input bound`);
    // Large bulks land in a per-argument scratch buffer reused across commands: allocating a fresh
    // MiB-sized buffer per SET made garbage collection the bottleneck. Not zero-filled: every byte
    // is written before the bulk is used.
    const i = this.args.length;
    const sunk = n >= SCRATCH_MIN_BYTES ? this.sink?.(this.args, i, this.argsLeft, n) : undefined;
    if (sunk && sunk.length === n) this.bulk = sunk;
    else if (n >= SCRATCH_MIN_BYTES && n <= SCRATCH_MAX_BYTES) {
      let sc = this.scratch[i];
      if (!sc || sc.length < n) this.scratch[i] = sc = Buffer.allocUnsafe(Math.min(SCRATCH_MAX_BYTES, Math.max(n, (sc?.length ?? 0) * 2)));
      this.bulk = sc.subarray(0, n);
    } else this.bulk = Buffer.allocUnsafe(n);
    this.bulkFilled = 0;
    return "done";
  }

  /** Copy buffered bytes into the bulk, then consume its CRLF. */
  private finishBulk(): Parsed | "done" | undefined {
    const b = this.bulk!;
    if (this.bulkFilled < b.length) {
      const n = Math.min(this.end - this.start, b.length - this.bulkFilled);
      b.set(this.buf.subarray(this.start, this.start + n), this.bulkFilled);
      this.bulkFilled += n;
      this.start += n;
      if (this.bulkFilled < b.length) return undefined;
    }
    if (this.end - this.start < 2) return undefined;
    // Redis does not check the two bytes after a bulk either; it skips them.
    this.start += 2;
    this.args.push(b);
    this.argsBytes += b.length;
    this.bulk = undefined;
    this.bulkFilled = 0;
    this.argsLeft--;
    return "done";
  }

  private emit(): Parsed {
    const args = this.args;
    this.args = [];
    this.argsBytes = 0;
    return { args, inline: false };
  }

  /** Make room for `extra` more bytes after the live ones, in the reader's own buffer (a lent chunk is left). */
  private grow(extra: number): void {
    const live = this.end - this.start;
    const need = live + extra;
    const own = this.own;
    const next = this.buf === own ? (need <= own.length / 2 ? own : Buffer.allocUnsafe(Math.max(need, own.length * 2))) : need <= own.length ? own : Buffer.allocUnsafe(Math.max(need, own.length * 2));
    if (next === this.buf) next.copyWithin(0, this.start, this.end);
    else next.set(this.buf.subarray(this.start, this.end), 0);
    this.own = this.buf = next;
    this.start = 0;
    this.end = live;
  }
}

/** Redis' string2ll subset: optional '-', digits, no leading zeros beyond "0", fits in 2^53. */
function parseInteger(s: string): number | undefined {
  if (!/^-?(0|[1-9]\d{0,15})$/.test(s)) return undefined;
  const n = Number(s);
  return Number.isSafeInteger(n) ? n : undefined;
}

export function latin1(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i += 8192) s += String.fromCharCode(...b.subarray(i, Math.min(b.length, i + 8192)));
  return s;
}
