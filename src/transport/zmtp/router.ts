// ROUTER: knows each peer by its routing id — the Identity from its READY when non-empty and not
// taken, else a generated 5-byte `00`+u32 id like libzmq. Received messages get the id prepended;
// send([id, ...frames]) routes by it and silently drops for an unknown id or a full queue.
import type { ZmtpConnection } from "./connection.ts";
import type { ZmtpOptions } from "./options.ts";
import { encodeMessage, toBytes } from "./protocol.ts";
import { ZmtpSocket } from "./socket.ts";

export interface RouterOptions extends ZmtpOptions {
  onMessage?: (identity: Uint8Array, frames: Uint8Array[]) => void;
}

const latin1 = new TextDecoder("latin1");

export class RouterSocket extends ZmtpSocket<Uint8Array[]> {
  private readonly byId = new Map<string, ZmtpConnection>();
  private nextId: number;

  constructor(o: RouterOptions = {}) {
    super("ROUTER", o, true);
    this.nextId = this.rng.int(0x1_0000_0000);
    if (o.onMessage) this.onMessage = o.onMessage;
  }

  /** Callback delivery: (identity, frames). Otherwise the iterator yields [identity, ...frames]. */
  set onMessage(fn: ((identity: Uint8Array, frames: Uint8Array[]) => void) | undefined) {
    this.handler = fn ? (item) => fn(item[0]!, item.slice(1)) : undefined;
  }

  /** Routing ids of the ready peers. */
  identities(): Uint8Array[] {
    return [...this.byId.values()].map((c) => c.routingId!);
  }

  /** Send [identity, ...frames]; false when the identity is unknown or that peer's queue is full. */
  send(frames: readonly (Uint8Array | string)[]): boolean {
    if (this.closed || frames.length < 2) return false;
    const c = this.byId.get(latin1.decode(toBytes(frames[0]!)));
    const body = frames.slice(1).map(toBytes);
    if (!c) {
      this.stats.dropped++;
      return false;
    }
    const wire = encodeMessage(body);
    if (!c.hasRoom(wire.length)) {
      this.stats.dropped++;
      return false;
    }
    c.write(wire);
    this.stats.messagesOut++;
    return true;
  }

  protected peerReady(c: ZmtpConnection): void {
    const wanted = c.peerIdentity;
    if (wanted.length > 0 && wanted[0] !== 0) {
      const key = latin1.decode(wanted);
      if (!this.byId.has(key)) {
        c.routingId = wanted;
        this.byId.set(key, c);
        return;
      }
      // libzmq ignores a second peer with a taken identity (no ROUTER_HANDOVER); so do we.
      this.log.warn("zmtp router: identity already in use; ignoring the new peer's messages", { conn: c.label, identity: key });
      return;
    }
    let id: Uint8Array;
    do {
      id = new Uint8Array(5);
      new DataView(id.buffer).setUint32(1, this.nextId);
      this.nextId = (this.nextId + 1) >>> 0;
    } while (this.byId.has(latin1.decode(id)));
    c.routingId = id;
    this.byId.set(latin1.decode(id), c);
  }

  protected peerMessage(c: ZmtpConnection, frames: Uint8Array[]): void {
    if (!c.routingId) return;
    this.deliver([c.routingId, ...frames]);
  }

  protected override peerClosed(c: ZmtpConnection): void {
    if (c.routingId) {
      const key = latin1.decode(c.routingId);
      if (this.byId.get(key) === c) this.byId.delete(key);
    }
  }
}
