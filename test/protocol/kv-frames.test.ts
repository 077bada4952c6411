import { describe, expect, test } from "bun:test";
import { KvDecodeError } from "../../src/protocol/kv-events.ts";
import { END_SEQ_BYTES, parseLiveMessage, parseReplayMessage, replayRequest, seqFrame, seqOf } from "../../src/protocol/kv-frames.ts";

const E = new Uint8Array(0);
const topic = new TextEncoder().encode("kv@pod-a@M");
const payload = Uint8Array.of(0x93, 0x01, 0x90, 0x00);

describe("KV frames", () => {
  test("seq frames are 8-byte big-endian u64", () => {
    expect([...seqFrame(5n)]).toEqual([0, 0, 0, 0, 0, 0, 0, 5]);
    expect(seqOf(seqFrame(2n ** 64n - 2n))).toBe(2n ** 64n - 2n);
    expect(() => seqOf(new Uint8Array(4))).toThrow(KvDecodeError);
  });

  test("a replay request is [b\"\", u64be(start)] for a DEALER", () => {
    const r = replayRequest(42n);
    expect(r).toHaveLength(2);
    expect(r[0]!.length).toBe(0);
    expect(seqOf(r[1]!)).toBe(42n);
  });

  test("live messages need exactly [topic, seq, payload]", () => {
    expect(parseLiveMessage([topic, seqFrame(7n), payload])).toEqual({ topic, seq: 7n, payload });
    expect(() => parseLiveMessage([seqFrame(7n), payload])).toThrow(KvDecodeError);
  });

  test("replay replies before vLLM #45177 and from SGLang: [b\"\", seq, payload], end [b\"\", END, b\"\"]", () => {
    expect(parseReplayMessage([E, seqFrame(3n), payload])).toEqual({ kind: "batch", topic: null, seq: 3n, payload });
    expect(parseReplayMessage([E, END_SEQ_BYTES, E])).toEqual({ kind: "end" });
    // …and with the delimiter already stripped by the transport
    expect(parseReplayMessage([seqFrame(3n), payload])).toEqual({ kind: "batch", topic: null, seq: 3n, payload });
    expect(parseReplayMessage([END_SEQ_BYTES, E])).toEqual({ kind: "end" });
  });

  test("replay replies from vLLM ≥ 0.26: [b\"\", topic, seq, payload], end [b\"\", b\"\", END, b\"\"]", () => {
    expect(parseReplayMessage([E, topic, seqFrame(9n), payload])).toEqual({ kind: "batch", topic, seq: 9n, payload });
    expect(parseReplayMessage([E, E, seqFrame(9n), payload])).toEqual({ kind: "batch", topic: null, seq: 9n, payload });
    expect(parseReplayMessage([E, E, END_SEQ_BYTES, E])).toEqual({ kind: "end" });
    expect(parseReplayMessage([topic, seqFrame(9n), payload])).toEqual({ kind: "batch", topic, seq: 9n, payload });
  });

  test("other shapes are typed errors", () => {
    expect(() => parseReplayMessage([topic, topic, seqFrame(1n), payload])).toThrow(KvDecodeError);
    expect(() => parseReplayMessage([E])).toThrow(KvDecodeError);
    expect(() => parseReplayMessage([E, E, E, E, E])).toThrow(KvDecodeError);
    expect(() => parseReplayMessage([E, Uint8Array.of(1, 2), payload])).toThrow(KvDecodeError);
  });
});
