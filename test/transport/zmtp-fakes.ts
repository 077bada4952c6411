// Socketless harness: a ZmtpConnection over a fake socket that records writes and can accept only
// part of each write, like Bun's unbuffered socket.write().
import { type Clock, VirtualClock } from "../../src/core/clock.ts";
import { concatBytes } from "../helpers/fuzz.ts";
import { memoryLogger } from "../helpers/log.ts";
import { type RawSocket, ZmtpConnection } from "../../src/transport/zmtp/connection.ts";
import type { ZmtpSocket } from "../../src/transport/zmtp/socket.ts";
import { buildGreeting, encodeReady, type SocketType } from "../../src/transport/zmtp/protocol.ts";

export class FakeSocket implements RawSocket {
  written: Uint8Array[] = [];
  ended = false;
  paused = false;
  /** Max bytes accepted per write() call (Infinity = all). */
  budget = Infinity;

  write(data: Uint8Array): number {
    if (this.ended) return -1;
    const n = Math.min(data.length, this.budget);
    if (n > 0) this.written.push(data.slice(0, n));
    return n;
  }
  end(): void {
    this.ended = true;
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
  bytes(): Uint8Array {
    return concat(this.written);
  }
}

/** The ZMTP tests' name for test/helpers/fuzz.ts concatBytes. */
export const concat = concatBytes;

/** The bytes a peer of `type` (speaking 3.`minor`) opens with: greeting + READY. */
export function peerHello(type: SocketType, minor = 1, identity?: Uint8Array): Uint8Array {
  return concat([buildGreeting(minor), encodeReady(type, identity)]);
}

/** A connection owned by `owner` (using its options) over a fake socket. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function fakeConnection(owner: ZmtpSocket<any>, clock: Clock = new VirtualClock()) {
  const sock = new FakeSocket();
  const log = memoryLogger();
  const conn = new ZmtpConnection(sock, owner, owner.options, log, clock, "fake");
  return { sock, log, conn, clock };
}
