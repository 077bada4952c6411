// A raw TCP client for wire-level tests and benches of herd's RESP tier server (and any listener):
// it counts the reply bytes (keeping them when asked), notices the server closing, waits for a byte
// count without busy-looping, and writes floods larger than the kernel's buffer respecting
// backpressure. One copy for test/tier/resp-bounds.test.ts, test/e2e/kv-tier-daemon.test.ts,
// bench/kv-tier/load.ts and bench/soak.ts (bench/ imports test/helpers already, e.g. herd.ts).
import type { Socket } from "bun";

export interface RawClient {
  sock: Socket<undefined>;
  /** Reply bytes received so far. */
  bytes(): number;
  /** The bytes received, as latin1 (only with `keep`). */
  text(): string;
  closed(): boolean;
  /** Resolves once `test(bytes)` holds, the server closed, or `timeoutMs` passed; wakes on every read. */
  waitUntil(test: (bytes: number) => boolean, timeoutMs: number, pollMs?: number): Promise<void>;
  /** waitUntil(bytes >= n), polling every 10 ms (default: at most 60 s). */
  until(n: number, timeoutMs?: number): Promise<void>;
  /** Writes `data` now and the rest whenever the socket drains, 1 MiB at a time, after what earlier calls left unwritten. */
  send(data: Uint8Array): void;
  /** Bytes the kernel has taken from send() so far. */
  sent(): number;
  /** Bytes given to send() not yet written. */
  pending(): number;
  end(): void;
}

export interface RawOptions {
  host?: string;
  /** Do not read: replies pile up in the kernel and then in the server (a client that never reads). */
  paused?: boolean;
  /** Keep the received bytes for text(). */
  keep?: boolean;
}

const CHUNK_BYTES = 1 << 20;

export async function rawConnect(port: number, opts: RawOptions = {}): Promise<RawClient> {
  let got = 0;
  let closed = false;
  const kept: Buffer[] = [];
  let wake = () => {};
  const queue: Uint8Array[] = [];
  let queueOff = 0;
  let sentBytes = 0;
  const pump = () => {
    while (queue.length > 0 && !closed) {
      const head = queue[0]!;
      const w = sock.write(head.subarray(queueOff, Math.min(head.length, queueOff + CHUNK_BYTES)));
      if (w <= 0) return;
      queueOff += w;
      sentBytes += w;
      if (queueOff >= head.length) {
        queue.shift();
        queueOff = 0;
      }
    }
  };
  const sock = await Bun.connect({
    hostname: opts.host ?? "127.0.0.1",
    port,
    socket: {
      data(_s, d) {
        got += d.length;
        if (opts.keep) kept.push(Buffer.from(d));
        wake();
      },
      drain: () => pump(),
      close() {
        closed = true;
        wake();
      },
      error() {
        closed = true;
        wake();
      },
    },
  });
  if (opts.paused) sock.pause();
  const waitUntil = async (test: (bytes: number) => boolean, timeoutMs: number, pollMs = 10) => {
    const end = performance.now() + timeoutMs;
    while (!closed && !test(got) && performance.now() < end) await new Promise<void>((r) => ((wake = r), setTimeout(r, pollMs)));
  };
  return {
    sock,
    bytes: () => got,
    text: () => Buffer.concat(kept).toString("latin1"),
    closed: () => closed,
    waitUntil,
    until: (n, timeoutMs = 60_000) => waitUntil((b) => b >= n, timeoutMs),
    send(data) {
      // Queued behind what earlier calls have not written yet, so bytes go out in call order.
      queue.push(data);
      pump();
    },
    sent: () => sentBytes,
    pending: () => queue.reduce((a, b) => a + b.length, 0) - queueOff,
    end: () => void sock.end(),
  };
}

/** Write `data` polling the socket's backpressure; resolves with the bytes the kernel took (gives up after `stallMs` without progress). */
export async function writeAll(sock: Socket<undefined>, data: Uint8Array, stallMs = 300): Promise<number> {
  let off = 0;
  let idle = 0;
  while (off < data.length && idle < stallMs) {
    const n = sock.write(data.subarray(off, Math.min(data.length, off + CHUNK_BYTES)));
    if (n > 0) {
      off += n;
      idle = 0;
    } else {
      await Bun.sleep(10);
      idle += 10;
    }
  }
  return off;
}
