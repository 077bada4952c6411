// A minimal pipelined RESP2 client for the sim engine's KV offload (herd's tier speaks RESP2; the
// sim must not depend on src/tier). Commands are written at once and answered in order; replies are
// parsed incrementally. Bounded: at most `maxInFlight` commands wait for a reply — beyond that a
// command is refused at once (the caller counts it), never queued without limit. A closed or failed
// connection fails every waiting command; the caller reconnects.

import type { Socket } from "bun";

export type RespReply = string | number | Uint8Array | null | Error;

interface Waiter {
  resolve(r: RespReply): void;
}

/** `resp://[:password@]host:port` or `redis://…` → host, port, password. */
export function parseRespUrl(url: string): { host: string; port: number; password: string | null } {
  const m = /^(?:resp|redis):\/\/(?:(?:[^:@/]*):([^@/]*)@)?(\[[^\]]+\]|[^:/@]+):(\d{1,5})\/?$/.exec(url);
  if (!m) throw new Error(`expected resp://HOST:PORT, got ${JSON.stringify(url)}`);
  const port = Number(m[3]);
  if (port < 1 || port > 65535) throw new Error(`port out of range in ${url}`);
  return { host: m[2]!.replace(/^\[|\]$/g, ""), port, password: m[1] !== undefined ? decodeURIComponent(m[1]) : null };
}

export function encodeCommand(args: readonly (string | Uint8Array)[]): Uint8Array {
  const enc = new TextEncoder();
  const parts: Uint8Array[] = [enc.encode(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = typeof a === "string" ? enc.encode(a) : a;
    parts.push(enc.encode(`$${b.length}\r\n`), b, enc.encode("\r\n"));
  }
  return Buffer.concat(parts);
}

/** Parse one reply at `buf[at..]`; null when incomplete. Arrays are not needed (GET/SET/EXISTS/AUTH). */
export function parseReply(buf: Buffer, at: number): { reply: RespReply; next: number } | null {
  const eol = buf.indexOf("\r\n", at, "latin1");
  if (eol < 0) return null;
  const line = buf.toString("latin1", at + 1, eol);
  switch (String.fromCharCode(buf[at]!)) {
    case "+":
      return { reply: line, next: eol + 2 };
    case "-":
      return { reply: new Error(line), next: eol + 2 };
    case ":":
      return { reply: Number(line), next: eol + 2 };
    case "$": {
      const n = Number(line);
      if (n < 0) return { reply: null, next: eol + 2 };
      if (buf.length < eol + 2 + n + 2) return null;
      return { reply: new Uint8Array(buf.subarray(eol + 2, eol + 2 + n)), next: eol + 2 + n + 2 };
    }
    default:
      throw new Error(`unexpected RESP reply type ${JSON.stringify(String.fromCharCode(buf[at]!))}`);
  }
}

/** Total bytes a partial reply needs, when its header says (a bulk string); 0 when not known yet. */
export function bytesNeeded(buf: Buffer): number {
  if (buf.length === 0 || buf[0] !== 0x24) return 0;
  const eol = buf.indexOf("\r\n", 0, "latin1");
  if (eol < 0) return 0;
  const n = Number(buf.toString("latin1", 1, eol));
  return n < 0 ? 0 : eol + 2 + n + 2;
}

export class RespClient {
  private readonly waiting: Waiter[] = [];
  private chunks: Buffer[] = [];
  private have = 0;
  /** Bytes the partial reply at the head of `chunks` needs before it can parse (0 = unknown). */
  private need = 0;
  private closed = false;
  /** Bytes the socket did not take yet (written on drain); bounded by maxInFlight commands. */
  private out: Uint8Array[] = [];

  private constructor(
    private readonly sock: Socket<undefined>,
    readonly maxInFlight: number,
  ) {}

  /** `password` (e.g. read from a file) overrides one in the URL. */
  static async connect(url: string, maxInFlight = 1024, passwordOverride: string | null = null): Promise<RespClient> {
    const { host, port, password: inUrl } = parseRespUrl(url);
    const password = passwordOverride ?? inUrl;
    let client!: RespClient;
    const sock = await Bun.connect<undefined>({
      hostname: host,
      port,
      socket: {
        data: (_s, d) => client.onData(d),
        drain: () => client.flush(),
        close: () => client.fail("connection closed"),
        error: (_s, e) => client.fail(e.message),
      },
    });
    client = new RespClient(sock, maxInFlight);
    if (password !== null) {
      const r = await client.command(["AUTH", password]);
      if (r instanceof Error) {
        client.close();
        throw new Error(`AUTH refused: ${r.message}`);
      }
    }
    return client;
  }

  get inFlight(): number {
    return this.waiting.length;
  }

  get open(): boolean {
    return !this.closed;
  }

  /** Send a command; resolves with its reply (an Error for -ERR, a refused or failed command). */
  command(args: readonly (string | Uint8Array)[]): Promise<RespReply> {
    if (this.closed) return Promise.resolve(new Error("not connected"));
    if (this.waiting.length >= this.maxInFlight) return Promise.resolve(new Error("too many commands in flight"));
    return new Promise((resolve) => {
      this.waiting.push({ resolve });
      this.out.push(encodeCommand(args));
      if (this.out.length === 1) this.flush();
    });
  }

  /** Write queued bytes until the socket stops taking them (Bun writes partially under pressure). */
  flush(): void {
    while (this.out.length > 0 && !this.closed) {
      const head = this.out[0]!;
      const n = this.sock.write(head);
      if (n < head.length) {
        this.out[0] = head.subarray(Math.max(0, n));
        return;
      }
      this.out.shift();
    }
  }

  close(): void {
    if (!this.closed) this.sock.end();
    this.fail("closed");
  }

  /**
   * Input is kept as a list of chunks and joined only once the reply being read can be complete
   * (`need` bytes, known from a bulk header): joining on every chunk made a 64 KiB GET cost O(n²).
   */
  private onData(d: Uint8Array): void {
    this.chunks.push(Buffer.from(d));
    this.have += d.length;
    if (this.have < this.need) return;
    const buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.have);
    let at = 0;
    try {
      while (at < buf.length) {
        const r = parseReply(buf, at);
        if (r === null) break;
        at = r.next;
        this.waiting.shift()?.resolve(r.reply);
      }
    } catch (e) {
      this.sock.end();
      this.fail(e instanceof Error ? e.message : String(e));
      return;
    }
    const rest = buf.subarray(at);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.have = rest.length;
    this.need = bytesNeeded(rest);
  }

  private fail(why: string): void {
    this.closed = true;
    this.out = [];
    for (const w of this.waiting.splice(0)) w.resolve(new Error(why));
  }
}
