// PUB: keeps each subscriber's prefix subscriptions (from SUBSCRIBE/CANCEL commands of 3.1 peers and
// 01/00-prefixed messages of 3.0 peers), filters on the first frame, and never blocks: a subscriber
// whose queue is at the high-water mark loses that whole message, as with libzmq's ZMQ_SNDHWM.
import type { ZmtpConnection } from "./connection.ts";
import type { ZmtpOptions } from "./options.ts";
import { encodeMessage, hasPrefix, toBytes } from "./protocol.ts";
import { ZmtpSocket } from "./socket.ts";

interface PeerSubs {
  topics: Map<string, { topic: Uint8Array; count: number }>;
  all: number;
}

const latin1 = new TextDecoder("latin1");

// Nothing is ever received on a PUB; the element type only satisfies the shared base.
export class PubSocket extends ZmtpSocket<Uint8Array[]> {
  private readonly subs = new Map<ZmtpConnection, PeerSubs>();

  constructor(o: ZmtpOptions = {}) {
    super("PUB", o, false);
  }

  /** Number of subscribers currently handshaken. */
  get subscribers(): number {
    return this.peers.length;
  }

  /**
   * Publish one multipart message. Returns how many subscribers it was queued for; a subscriber at
   * its HWM misses it (counted in stats.dropped).
   */
  send(frames: readonly (Uint8Array | string)[]): number {
    if (this.closed || frames.length === 0) return 0;
    const bytes = frames.map(toBytes);
    const first = bytes[0]!;
    let wire: Uint8Array | undefined;
    let sent = 0;
    for (const c of this.peers) {
      const s = this.subs.get(c);
      if (!s || !matches(s, first)) continue;
      wire ??= encodeMessage(bytes);
      if (!c.hasRoom(wire.length)) {
        this.stats.dropped++;
        continue;
      }
      c.write(wire);
      sent++;
    }
    if (sent > 0) this.stats.messagesOut++;
    return sent;
  }

  override connSubscription(c: ZmtpConnection, topic: Uint8Array, subscribe: boolean): void {
    const s = this.subs.get(c);
    if (!s) return;
    const key = latin1.decode(topic);
    const cur = s.topics.get(key);
    if (subscribe) {
      if (cur) cur.count++;
      else s.topics.set(key, { topic: topic.slice(), count: 1 });
      if (topic.length === 0) s.all++;
    } else if (cur) {
      if (--cur.count === 0) s.topics.delete(key);
      if (topic.length === 0) s.all--;
    }
  }

  protected peerReady(c: ZmtpConnection): void {
    this.subs.set(c, { topics: new Map(), all: 0 });
  }

  protected peerMessage(c: ZmtpConnection, frames: Uint8Array[]): void {
    // 3.0 subscriptions are single-frame messages starting 01/00; anything else from a subscriber
    // is discarded (RFC 29).
    const f = frames[0]!;
    if (frames.length === 1 && f.length >= 1 && f[0]! <= 1) this.connSubscription(c, f.subarray(1), f[0] === 1);
  }

  protected override peerClosed(c: ZmtpConnection): void {
    this.subs.delete(c);
  }
}

function matches(s: PeerSubs, first: Uint8Array): boolean {
  if (s.all > 0) return true;
  for (const t of s.topics.values()) if (hasPrefix(first, t.topic)) return true;
  return false;
}
