// A RESP connection's output. Small replies (PONG, +OK, :1) are gathered and written with one
// write() per slice of commands, as Redis' reply buffer does (src/networking.c _addReplyToBuffer):
// one syscall per pipelined PING made 1.5M PINGs a multi-second stall (issue 22 row 5). A large
// chunk (a GET value, possibly a view into shared memory valid only until the next tier call) is
// written at once and whatever the socket does not take is copied. What is queued counts against the
// connection's bounds (server.ts) and against one `OutputBudget` shared by all connections (row 8).
// A bulk reply up to JOIN_MAX_BYTES (`$N\r\n`, the value, `\r\n`) leaves in one write through a
// reused per-connection buffer (`pushReply`): on loopback each write is a send() that wakes the
// reader, and three per GET of 1 MiB cost more than copying the value once.

import type { Socket } from "bun";

/** Replies at most this big are gathered (copied) rather than written one by one. */
const GATHER_MAX_BYTES = 16 * 1024;
const GATHER_FLUSH_BYTES = 64 * 1024;
/** Replies with a large part up to this size are joined into one write (pushReply). */
export const JOIN_MAX_BYTES = 4 * 1024 * 1024 + 64;

/** Output queued across every connection of a server. */
export class OutputBudget {
  queuedBytes = 0;
  constructor(readonly maxBytes: number) {}
  get over(): boolean {
    return this.queuedBytes > this.maxBytes;
  }
}

export class OutQueue {
  private readonly queue: Uint8Array[] = [];
  /** Small replies copied here (a GET value may be a view into shared memory) until flush(). */
  private gather: Uint8Array | undefined;
  private gatheredBytes = 0;
  /** Reused buffer a multi-part reply is joined in (pushReply); at most JOIN_MAX_BYTES. */
  private join: Uint8Array | undefined;
  /** Bytes written by the server but not yet taken by the socket. */
  bytes = 0;

  constructor(private readonly budget: OutputBudget) {}

  get empty(): boolean {
    return this.queue.length === 0 && this.gatheredBytes === 0;
  }

  /** Queue bytes of a reply, in order. */
  push(s: Socket<unknown>, chunk: Uint8Array): void {
    if (chunk.length <= GATHER_MAX_BYTES) {
      this.gather ??= Buffer.allocUnsafe(GATHER_FLUSH_BYTES + GATHER_MAX_BYTES);
      this.gather.set(chunk, this.gatheredBytes);
      this.gatheredBytes += chunk.length;
      this.account(chunk.length);
      if (this.gatheredBytes >= GATHER_FLUSH_BYTES) this.flush(s);
      return;
    }
    this.flush(s);
    this.write(s, chunk);
  }

  /** Queue a reply's parts, in order: one with a part too large to gather is joined into one write. */
  pushReply(s: Socket<unknown>, chunks: Uint8Array[]): void {
    let total = 0;
    let large = false;
    for (const c of chunks) {
      total += c.length;
      if (c.length > GATHER_MAX_BYTES) large = true;
    }
    if (!large || chunks.length < 2 || total > JOIN_MAX_BYTES) {
      for (const c of chunks) this.push(s, c);
      return;
    }
    this.flush(s);
    if (!this.join || this.join.length < total) this.join = Buffer.allocUnsafe(Math.min(JOIN_MAX_BYTES, Math.max(total, (this.join?.length ?? 0) * 2)));
    let at = 0;
    for (const c of chunks) {
      this.join.set(c, at);
      at += c.length;
    }
    this.write(s, this.join.subarray(0, total)); // what the socket does not take is copied out of it
  }

  /** Send what was gathered (end of a slice, or before a large chunk). */
  flush(s: Socket<unknown>): void {
    if (this.gatheredBytes === 0) return;
    const n = this.gatheredBytes;
    this.gatheredBytes = 0;
    this.account(-n);
    this.write(s, this.gather!.subarray(0, n)); // the gather buffer is reused: copy what waits
  }

  /** The socket can take more: write the queue; true when it is empty. */
  drain(s: Socket<unknown>): boolean {
    this.flush(s);
    while (this.queue.length > 0) {
      const chunk = this.queue[0]!;
      const n = s.write(chunk);
      if (n <= 0) return false;
      this.account(-n);
      if (n < chunk.length) {
        this.queue[0] = chunk.subarray(n);
        return false;
      }
      this.queue.shift();
    }
    return true;
  }

  /** Drop everything (the connection is gone). */
  clear(): void {
    this.account(-this.bytes);
    this.queue.length = 0;
    this.gatheredBytes = 0;
    this.gather = undefined;
    this.join = undefined;
  }

  /** Write now if nothing waits, else queue; what is queued is copied (the chunk may not be ours). */
  private write(s: Socket<unknown>, chunk: Uint8Array): void {
    let rest = chunk;
    if (this.queue.length === 0) {
      const n = Math.max(0, s.write(chunk));
      if (n === chunk.length) return;
      rest = chunk.subarray(n);
    }
    this.queue.push(rest.slice());
    this.account(rest.length);
  }

  private account(delta: number): void {
    this.bytes += delta;
    this.budget.queuedBytes += delta;
  }
}
