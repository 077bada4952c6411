// SUB: sends its prefix subscriptions to every publisher it is handshaken with (again after every
// reconnect), in the form the peer's ZMTP version expects, and filters locally too because
// messages can be in flight across a CANCEL (libzmq SUB does the same).
import type { ZmtpConnection } from "./connection.ts";
import type { ZmtpOptions } from "./options.ts";
import { encodeSubscription, hasPrefix, toBytes } from "./protocol.ts";
import { ZmtpSocket } from "./socket.ts";

export interface SubOptions extends ZmtpOptions {
  /** Callback delivery instead of the async iterator (no receive queue). */
  onMessage?: (frames: Uint8Array[]) => void;
}

const latin1 = new TextDecoder("latin1");

export class SubSocket extends ZmtpSocket<Uint8Array[]> {
  /** Counted subscriptions: subscribing "A" twice needs two unsubscribes. */
  private readonly subs = new Map<string, { topic: Uint8Array; count: number }>();
  private matchAll = false;
  /** The subscribed prefixes as an array: the per-message filter avoids a Map iterator. */
  private topics: Uint8Array[] = [];

  constructor(o: SubOptions = {}) {
    super("SUB", o, false);
    if (o.onMessage) this.handler = o.onMessage;
  }

  /** Switch to callback delivery (messages no longer go to the async iterator). */
  set onMessage(fn: ((frames: Uint8Array[]) => void) | undefined) {
    this.handler = fn;
  }

  /** Subscribe to messages whose first frame starts with `prefix` ("" = everything). */
  subscribe(prefix: Uint8Array | string = ""): void {
    const topic = toBytes(prefix).slice();
    const key = latin1.decode(topic);
    const s = this.subs.get(key);
    if (s) {
      s.count++;
      return;
    }
    this.subs.set(key, { topic, count: 1 });
    this.matchAll ||= topic.length === 0;
    this.topics = [...this.subs.values()].map((x) => x.topic);
    for (const c of this.peers) c.write(encodeSubscription(topic, true, c.peerMinor));
  }

  unsubscribe(prefix: Uint8Array | string = ""): void {
    const topic = toBytes(prefix);
    const key = latin1.decode(topic);
    const s = this.subs.get(key);
    if (!s) return;
    if (--s.count > 0) return;
    this.subs.delete(key);
    this.topics = [...this.subs.values()].map((x) => x.topic);
    if (topic.length === 0) this.matchAll = false;
    for (const c of this.peers) c.write(encodeSubscription(topic, false, c.peerMinor));
  }

  protected peerReady(c: ZmtpConnection): void {
    for (const s of this.subs.values()) c.write(encodeSubscription(s.topic, true, c.peerMinor));
  }

  protected peerMessage(_c: ZmtpConnection, frames: Uint8Array[]): void {
    if (!this.matchAll) {
      const first = frames[0]!;
      const topics = this.topics;
      let ok = false;
      for (let i = 0; i < topics.length && !ok; i++) ok = hasPrefix(first, topics[i]!);
      if (!ok) return;
    }
    this.deliver(frames);
  }
}
