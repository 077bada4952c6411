// DEALER: round-robins outgoing messages over ready peers and fair-queues incoming ones. It never
// drops silently: send() returns false when every peer (or, before any peer is ready, the pending
// queue) is at the high-water mark, where libzmq's DEALER would block.
import type { ZmtpConnection } from "./connection.ts";
import type { ZmtpOptions } from "./options.ts";
import { encodeMessage, toBytes } from "./protocol.ts";
import { ZmtpSocket } from "./socket.ts";

export interface DealerOptions extends ZmtpOptions {
  onMessage?: (frames: Uint8Array[]) => void;
}

export class DealerSocket extends ZmtpSocket<Uint8Array[]> {
  private next = 0;
  /** Messages sent before any peer was ready (bounded by sndHwm), flushed to the first ready peer. */
  private pending: Uint8Array[] = [];

  constructor(o: DealerOptions = {}) {
    super("DEALER", o, true);
    if (o.onMessage) this.handler = o.onMessage;
  }

  set onMessage(fn: ((frames: Uint8Array[]) => void) | undefined) {
    this.handler = fn;
  }

  /** Queue a multipart message for one peer. False (nothing queued) when all queues are full. */
  send(frames: readonly (Uint8Array | string)[]): boolean {
    if (this.closed || frames.length === 0) return false;
    const wire = encodeMessage(frames.map(toBytes));
    const n = this.peers.length;
    for (let i = 0; i < n; i++) {
      const c = this.peers[(this.next + i) % n]!;
      if (c.hasRoom(wire.length)) {
        this.next = (this.next + i + 1) % n;
        c.write(wire);
        this.stats.messagesOut++;
        return true;
      }
    }
    if (n === 0 && this.pending.length < this.opts.sndHwm) {
      this.pending.push(wire);
      this.stats.messagesOut++;
      return true;
    }
    return false;
  }

  protected peerReady(c: ZmtpConnection): void {
    while (this.pending.length > 0 && c.hasRoom(this.pending[0]!.length)) c.write(this.pending.shift()!);
  }

  protected peerMessage(_c: ZmtpConnection, frames: Uint8Array[]): void {
    this.deliver(frames);
  }
}
