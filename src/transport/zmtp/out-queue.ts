// A connection's own output queue. Bun's socket.write() is unbuffered: it returns how many bytes the
// kernel took (maybe 0) and drops the rest, so unsent tails are kept here, in order, and written on
// `drain`. Counts are in messages and bytes for the send high-water marks.
import type { RawSocket } from "./connection.ts";

interface Queued {
  buf: Uint8Array;
  /** Messages this item carries (several after coalescing). */
  msgs: number;
}

/** Small queued messages are joined up to this size so a backlog drains in few syscalls. */
const BATCH_BYTES = 256 * 1024;

export class OutQueue {
  private items: Queued[] = [];
  private head = 0;
  private msgs = 0;
  private bytesN = 0;

  constructor(private readonly sock: RawSocket) {}

  /** Messages not yet fully handed to the kernel. */
  get messages(): number {
    return this.msgs;
  }

  get bytes(): number {
    return this.bytesN;
  }

  /** Write now if nothing is queued, else append. False when the socket is closed. */
  write(buf: Uint8Array): boolean {
    if (this.head === this.items.length) {
      const n = this.sock.write(buf);
      if (n === buf.length) return true;
      if (n < 0) return false;
      buf = buf.subarray(n);
    }
    this.items.push({ buf, msgs: 1 });
    this.msgs++;
    this.bytesN += buf.length;
    return true;
  }

  /** Continue after Bun's drain callback. False when the socket is closed. */
  drain(): boolean {
    while (this.head < this.items.length) {
      let item = this.items[this.head]!;
      if (item.buf.length < BATCH_BYTES && this.items.length - this.head > 1) item = this.coalesce();
      const n = this.sock.write(item.buf);
      if (n < 0) return false;
      this.bytesN -= n;
      if (n < item.buf.length) {
        item.buf = item.buf.subarray(n);
        break; // the kernel is full again: wait for the next drain
      }
      this.msgs -= item.msgs;
      this.items[this.head++] = undefined as unknown as Queued;
    }
    // Compact the consumed prefix, also when a slow peer keeps the queue from ever emptying.
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return true;
  }

  clear(): void {
    this.items = [];
    this.head = 0;
    this.msgs = 0;
    this.bytesN = 0;
  }

  private coalesce(): Queued {
    let bytes = 0;
    let end = this.head;
    while (end < this.items.length && bytes + this.items[end]!.buf.length <= BATCH_BYTES) bytes += this.items[end++]!.buf.length;
    if (end - this.head < 2) return this.items[this.head]!;
    const out = new Uint8Array(bytes);
    let at = 0;
    let msgs = 0;
    for (let i = this.head; i < end; i++) {
      const q = this.items[i]!;
      out.set(q.buf, at);
      at += q.buf.length;
      msgs += q.msgs;
    }
    const merged = { buf: out, msgs };
    this.items.splice(this.head, end - this.head, merged);
    return merged;
  }
}
