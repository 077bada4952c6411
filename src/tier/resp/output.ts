// A RESP connection's output. Small replies (PONG, +OK, :1) are gathered and written with one
// write() per slice of commands, as Redis' reply buffer does (src/networking.c _addReplyToBuffer):
// one syscall per pipelined PING made 1.5M PINGs a multi-second stall (issue 22 row 5). A large
// chunk (a GET value, possibly a view into shared memory valid only until the next tier call) is
// written at once and whatever the socket does not take is copied. What is queued counts against the
// connection's bounds (server.ts) and against one `OutputBudget` shared by all connections (row 8).

import type { Socket } from "bun";

/** Replies at most this big are gathered (copied) rather than written one by one. */
const GATHER_MAX_BYTES = 16 * 1024;
const GATHER_FLUSH_BYTES = 64 * 1024;

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
