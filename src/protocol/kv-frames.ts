// Framing around KV event payloads (docs/references.md#engines-1.2, #engines-1.3, #engines-6.2):
//   live (PUB → SUB):     [topic, u64be(seq), payload]
//   replay request:       DEALER sends [b"", u64be(start_seq)] to the engine's ROUTER
//   replay reply, per batch with seq >= start, then an end marker whose seq frame is ff×8:
//     vLLM ≤ 0.25 and SGLang: [b"", u64be(seq), payload]            end [b"", END, b""]
//     vLLM ≥ 0.26 (#45177):   [b"", topic, u64be(seq), payload]     end [b"", b"", END, b""]
import { KvDecodeError } from "./kv-events.ts";

export const END_SEQ_BYTES = new Uint8Array(8).fill(0xff);

export function seqFrame(seq: bigint): Uint8Array {
  const f = new Uint8Array(8);
  new DataView(f.buffer).setBigUint64(0, BigInt.asUintN(64, seq), false);
  return f;
}

/** The u64 in an 8-byte big-endian frame; throws KvDecodeError otherwise. */
export function seqOf(frame: Uint8Array): bigint {
  if (frame.length !== 8) throw new KvDecodeError(`sequence frame has ${frame.length} bytes, expected 8`);
  return new DataView(frame.buffer, frame.byteOffset, 8).getBigUint64(0, false);
}

export interface LiveMessage {
  topic: Uint8Array;
  seq: bigint;
  payload: Uint8Array;
}

export function parseLiveMessage(frames: readonly Uint8Array[]): LiveMessage {
  if (frames.length !== 3) throw new KvDecodeError(`live KV message has ${frames.length} frames, expected 3`);
  return { topic: frames[0]!, seq: seqOf(frames[1]!), payload: frames[2]! };
}

export function replayRequest(startSeq: bigint): Uint8Array[] {
  return [new Uint8Array(0), seqFrame(startSeq)];
}

export type ReplayMessage =
  | { kind: "batch"; topic: Uint8Array | null; seq: bigint; payload: Uint8Array }
  | { kind: "end" };

function isEnd(f: Uint8Array): boolean {
  return f.length === 8 && f.every((b) => b === 0xff);
}

/**
 * One reply message as a DEALER receives it, in either layout. The leading empty delimiter may
 * be present (raw DEALER) or already stripped by the transport.
 */
export function parseReplayMessage(frames: readonly Uint8Array[]): ReplayMessage {
  let f = frames;
  if (f.length === 4) {
    if (f[0]!.length !== 0) throw new KvDecodeError("replay reply: 4 frames without an empty delimiter");
    f = f.slice(1);
  }
  if (f.length === 3) {
    // Either [topic, seq, payload] (new, delimiter stripped) or [b"", seq, payload] (old, with
    // delimiter): the same positions, an empty topic in the second case.
    if (isEnd(f[1]!)) return { kind: "end" };
    return { kind: "batch", topic: f[0]!.length > 0 ? f[0]! : null, seq: seqOf(f[1]!), payload: f[2]! };
  }
  if (f.length === 2) {
    if (isEnd(f[0]!)) return { kind: "end" };
    return { kind: "batch", topic: null, seq: seqOf(f[0]!), payload: f[1]! };
  }
  throw new KvDecodeError(`replay reply has ${frames.length} frames`);
}
