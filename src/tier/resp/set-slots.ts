// SET values parsed straight into tier slots (server.ts's parser sink). A SET's value of ≥ 64 KiB from
// an authenticated client goes into its tier slot (store.reserve, tier.ts): one copy from the socket's
// chunk into shared memory, where the parser's scratch buffer made it two (as Redis reads a large bulk
// into the string it then stores, networking.c processMultibulkBuffer). The slot is committed by the
// SET (commands.ts), given back on anything else (an error reply, the client leaving mid-value,
// stop()); open slots are bounded in total (SLOTS_TOTAL_BYTES).

import type { TierStore } from "../store.ts";
import type { Session } from "./commands.ts";
import { latin1 } from "./parser.ts";

/** SET values being received straight into tier slots, across all connections; beyond it a value is
 * parsed into the connection's own buffer as before (a client that announces a value and stalls
 * holds its slot until the idle timeout: this bounds what such clients make the tier evict). */
export const SLOTS_TOTAL_BYTES = 128 * 1024 * 1024;

/** A session that may hold one open slot, and its size (counted in SetSlots.bytes). */
export interface SlotHolder extends Session {
  slotSize: number;
  closing: boolean;
}

export class SetSlots {
  /** Bytes of the open tier slots of all connections (≤ SLOTS_TOTAL_BYTES). */
  bytes = 0;

  constructor(private readonly store: TierStore) {}

  /** The parser's sink: the buffer a SET's value goes into, or undefined (the parser's own buffer). */
  sink(c: SlotHolder, args: readonly Uint8Array[], index: number, left: number, size: number): Uint8Array | undefined {
    const reserve = this.store.reserve;
    if (!reserve || index !== 2 || left !== 1 || !c.authed || c.closing || c.slot) return undefined;
    const name = args[0]!;
    if (name.length !== 3 || (name[0]! | 0x20) !== 0x73 || (name[1]! | 0x20) !== 0x65 || (name[2]! | 0x20) !== 0x74) return undefined; // "set"
    if (this.bytes + size > SLOTS_TOTAL_BYTES) return undefined;
    const slot = reserve.call(this.store, latin1(args[1]!), size);
    if (!slot) return undefined;
    c.slot = slot;
    c.slotSize = size;
    this.bytes += size;
    return slot.bytes;
  }

  /** Give back the connection's open slot, if any (a committed one is already gone: abort is a no-op). */
  drop(c: SlotHolder): void {
    if (c.slotSize === 0) return;
    c.slot?.abort();
    c.slot = undefined;
    this.bytes -= c.slotSize;
    c.slotSize = 0;
  }
}
