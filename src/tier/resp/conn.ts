// One RESP connection's state (server.ts), and the replies it holds in command order behind a pending
// remote lookup (remote.ts): a reply behind one waits in `slots` (≤ PIPELINE_SLOTS_MAX, then the
// connection stops executing), counted against the connection's output soft limit and the server's
// total output bound (`slotBytes`).

import type { TimerHandle } from "../../core/clock.ts";
import type { Reply } from "./commands.ts";
import type { OutQueue } from "./output.ts";
import type { RespReader } from "./parser.ts";
import type { SlotHolder } from "./set-slots.ts";
import type { TimedConn } from "./timeouts.ts";

/** Replies one connection may hold behind a pending lookup before it stops executing commands. */
export const PIPELINE_SLOTS_MAX = 1024;

export interface Conn extends SlotHolder, TimedConn {
  reader: RespReader;
  out: OutQueue;
  /** Replies in command order while a remote lookup ahead of them runs (null: still looking). */
  slots: { reply: Reply | null }[];
  /** Bytes held in slots (counted against the output soft limit). */
  slotBytes: number;
  /** A QUIT (or other closing reply) is queued in the slots: execute nothing more. */
  quitting: boolean;
  /** A timer that runs this connection later (slice continuation, AUTH delay). */
  later: TimerHandle | null;
  paused: boolean;
}

export function newConn(authed: boolean, out: OutQueue, nowMs: number): Conn {
  return {
    authed,
    authFailures: 0,
    reader: undefined as unknown as RespReader, // set by the server right after (its sink needs the conn)
    out,
    closing: false,
    slots: [],
    slotBytes: 0,
    quitting: false,
    later: null,
    paused: false,
    openedMs: nowMs,
    activeMs: nowMs,
    slotSize: 0,
  };
}

export const replyBytes = (r: Reply): number => r.chunks.reduce((n, b) => n + b.length, 0);

/** A reply that must wait behind a lookup, as a copy: a GET reply may be a view into shared memory,
 * valid only until the next call on the tier. */
export function heldCopy(r: Reply): Reply {
  return { chunks: r.chunks.map((b) => b.slice()), ...(r.close ? { close: true } : {}) };
}
