// kv_tier.resp.direct_recv: a large SET value read from the socket straight into its tier slot
// (libc recv through bun:ffi, src/tier/resp/direct-recv.ts). What must hold: the bytes stored are
// the bytes sent, whatever the split between Bun's reads and the direct ones (one write, slow
// pieces, pipelined commands right behind the value); replies stay in order; a client leaving
// mid-value frees its slot (test/tier/put-slot.test.ts, with and without it); and the direct path is really taken on Linux (direct_recv_bytes > 0),
// so a Bun without the socket's descriptor fails here rather than silently losing the path.
import { afterAll, describe, expect, test } from "bun:test";
import { directRecv } from "../../src/tier/resp/direct-recv.ts";
import { REDIS_LIMITS, RespReader } from "../../src/tier/resp/parser.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { cleanupDirs, openTier, valueOf } from "./helpers.ts";
import { cmd, transcript } from "./resp-helpers.ts";

afterAll(cleanupDirs);
const KiB = 1024;
const same = (a: Uint8Array | undefined, b: Uint8Array) => a !== undefined && Buffer.from(a).equals(Buffer.from(b));
const linux = process.platform === "linux";

/** `input` in pieces of `pieceBytes`, replies until `want` bytes (transcript, 10 s bound). */
async function exchange(port: number, input: Uint8Array, want: number, pieceBytes = input.length, pauseMs = 0): Promise<string> {
  const parts: Uint8Array[] = [];
  for (let off = 0; off < input.length; off += pieceBytes) parts.push(input.subarray(off, Math.min(input.length, off + pieceBytes)));
  return (await transcript(port, parts, (b) => b.length >= want, 10_000, pauseMs)).bytes.toString("latin1");
}

function server(cpuBytes = 32 * 1024 * KiB, extra: { sliceCommands?: number } = {}) {
  const { tier } = openTier({ cpuBytes });
  const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, directRecv: true, ...extra });
  s.start();
  return { tier, s, done: () => (s.stop(), tier.close()) };
}

describe("RespReader.push(chunk, lend) / release", () => {
  test("a lent chunk is parsed in place; after release() the reader no longer reads it (its rest was copied)", () => {
    const r = new RespReader(REDIS_LIMITS, () => false);
    // Every split of two pipelined commands: lend the first part, release, scribble over it, then the rest.
    const wire = Buffer.from("*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n");
    for (let cut = 0; cut <= wire.length; cut++) {
      const got: string[] = [];
      const take = () => {
        for (let p = r.next(); p; p = r.next()) got.push("args" in p ? p.args.map((a) => Buffer.from(a).toString("latin1")).join(" ") : p.error);
      };
      const a = Buffer.from(wire.subarray(0, cut));
      r.push(a, true);
      take();
      r.release();
      a.fill(0x21); // the caller reuses or discards it
      const b = Buffer.from(wire.subarray(cut));
      r.push(b, true);
      take();
      r.release();
      b.fill(0x21);
      expect(got).toEqual(["SET k1 hello", "GET k1"]);
      expect(r.bufferedBytes).toBe(0);
    }
  });
});

describe("RespReader.bulkGap / filled", () => {
  test("a gap only for a large bulk with nothing buffered ahead of it; filled() is bounded by it", () => {
    const r = new RespReader(REDIS_LIMITS, () => false);
    r.push(Buffer.from("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nabcd"));
    expect(r.next()).toBeUndefined();
    expect(r.bulkGap()).toBeUndefined(); // 4 bytes: not a large bulk
    const big = 100 * KiB;
    const r2 = new RespReader(REDIS_LIMITS, () => false);
    r2.push(Buffer.from(`*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$${big}\r\nxy`));
    expect(r2.bulkGap()).toBeUndefined(); // header and first bytes still buffered: next() first
    expect(r2.next()).toBeUndefined();
    const gap = r2.bulkGap()!;
    expect(gap.length).toBe(big - 2);
    gap.fill(0x61, 0, 1000);
    r2.filled(1000);
    expect(r2.bulkGap()!.length).toBe(big - 1002);
    expect(() => r2.filled(big)).toThrow();
    expect(() => r2.filled(-1)).toThrow();
    r2.bulkGap()!.fill(0x62);
    r2.filled(big - 1002);
    expect(r2.bulkGap()).toBeUndefined(); // full; its CRLF comes through push()
    r2.push(Buffer.from("\r\n"));
    const p = r2.next()!;
    expect("args" in p && p.args[2]!.length).toBe(big);
    if ("args" in p) expect(p.args[2]![0]! + p.args[2]![1]! + p.args[2]![2000]!).toBe(0x78 + 0x79 + 0x62);
  });
});

describe("RESP SET with direct receive", () => {
  test("available on Linux", () => {
    if (!linux) return console.log(`skip: direct receive is Linux-only (${process.platform})`);
    expect(typeof directRecv()).toBe("object");
  });

  test("values of many sizes, sent whole and pipelined, are stored byte for byte", async () => {
    const { tier, s, done } = server();
    try {
      const sizes = [64 * KiB, 64 * KiB + 1, 300_001, 1024 * KiB, 1024 * KiB + 7, 3 * 1024 * KiB + 5];
      const vals = sizes.map((n, i) => valueOf(`k${i}`, i + 1, n));
      // One at a time (each request written whole, as LMCache's client does).
      for (let i = 0; i < vals.length; i++) {
        const r = await transcript(s.port, cmd("SET", `k${i}`, vals[i]!), (b) => b.length >= 5);
        expect(r.bytes.toString()).toBe("+OK\r\n");
      }
      for (let i = 0; i < vals.length; i++) expect(same(tier.get(`k${i}`), vals[i]!)).toBe(true);
      // All pipelined in one write, a PING right behind each value (the tail read after a value).
      const again = sizes.map((n, i) => valueOf(`k${i}`, i + 50, n));
      const input = Buffer.concat(again.flatMap((v, i) => [cmd("SET", `k${i}`, v), cmd("PING")]));
      const want = "+OK\r\n+PONG\r\n".repeat(sizes.length);
      expect(await exchange(s.port, input, want.length)).toBe(want);
      for (let i = 0; i < again.length; i++) expect(same(tier.get(`k${i}`), again[i]!)).toBe(true);
      if (linux) expect(s.stats.direct_recv_bytes).toBeGreaterThan(0);
      expect(s.stats.direct_recv_bytes).toBeLessThanOrEqual(sizes.reduce((a, b) => a + b, 0) * 2);
    } finally {
      done();
    }
  });

  test("a value arriving in slow pieces (reads that find nothing yet) is stored whole", async () => {
    const { tier, s, done } = server();
    try {
      const v = valueOf("slow", 3, 2 * 1024 * KiB + 3);
      expect(await exchange(s.port, cmd("SET", "slow", v), 5, 200 * KiB + 11, 5)).toBe("+OK\r\n");
      expect(same(tier.get("slow"), v)).toBe(true);
      if (linux) expect(s.stats.direct_recv_bytes).toBeGreaterThan(0);
    } finally {
      done();
    }
  });

  test("one command per slice: every pipelined SET still executes, in order", async () => {
    const { tier, s, done } = server(32 * 1024 * KiB, { sliceCommands: 1 });
    try {
      const vals = Array.from({ length: 6 }, (_, i) => valueOf(`p${i}`, i, 512 * KiB + i));
      const input = Buffer.concat([...vals.map((v, i) => cmd("SET", `p${i}`, v)), cmd("GET", "none")]);
      const want = "+OK\r\n".repeat(vals.length) + "$-1\r\n";
      expect(await exchange(s.port, input, want.length)).toBe(want);
      vals.forEach((v, i) => expect(same(tier.get(`p${i}`), v)).toBe(true));
    } finally {
      done();
    }
  });
});
