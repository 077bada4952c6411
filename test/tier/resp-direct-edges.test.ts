// kv_tier.resp.direct_recv at its edges (src/tier/resp/direct-recv.ts reads the socket behind
// uSockets' back while a large bulk is open): a pipeline split at every boundary where the parser
// changes state (inside each header, at a value's start, at Bun's 512 KiB read, a value's last byte,
// between its CR and LF, inside the commands behind it) and at seeded random points; clients that
// send FIN or RST mid-value or right after a value's last byte; 40 connections at once; TLS sockets
// (getTLSVersion() non-null) and closed descriptors refused. What must hold: the bytes stored and the replies are exactly
// redis' (order included), the daemon survives, every slot comes back, and the direct path was
// really taken (direct_recv_bytes > 0 on Linux) so these tests cannot pass on the copying path alone.
import { afterAll, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { plainFd } from "../../src/tier/resp/direct-recv.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { cleanupDirs, openTier, valueOf } from "./helpers.ts";
import { cmd, transcript } from "./resp-helpers.ts";

afterAll(cleanupDirs);
const KiB = 1024;
const linux = process.platform === "linux";

function server(cpuBytes = 64 * 1024 * KiB, directRecv = true) {
  const { tier } = openTier({ cpuBytes });
  const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, directRecv });
  s.start();
  return { tier, s, done: () => (s.stop(), tier.close()) };
}

/** Each piece written `pauseMs` apart, replies until `want` bytes or the server closes (transcript, 10 s bound). */
async function pieces(port: number, parts: Uint8Array[], want: number, pauseMs = 3): Promise<Buffer> {
  return (await transcript(port, parts, (b) => b.length >= want, 10_000, pauseMs)).bytes;
}

const splitAt = (b: Uint8Array, cuts: number[]): Uint8Array[] => {
  const at = [...new Set(cuts.filter((c) => c > 0 && c < b.length))].sort((x, y) => x - y);
  return [0, ...at].map((c, i) => b.subarray(c, at[i] ?? b.length));
};

describe("direct receive: a pipeline split anywhere", () => {
  // SET a (1.5 MiB: more than Bun's 512 KiB read, so direct reads happen), GET a, SET b (100 KiB), PING.
  const a = valueOf("a", 1, 1536 * KiB + 3);
  const b = valueOf("b", 2, 100 * KiB + 1);
  const setA = cmd("SET", "a", a);
  const getA = cmd("GET", "a");
  const setB = cmd("SET", "b", b);
  const input = Buffer.concat([setA, getA, setB, cmd("PING")]);
  const want = Buffer.concat([Buffer.from(`+OK\r\n$${a.length}\r\n`), a, Buffer.from("\r\n+OK\r\n+PONG\r\n")]);
  const hA = setA.length - a.length - 2; // header bytes before a's value
  const endA = hA + a.length; // a's CR
  const hB = setA.length + getA.length + (setB.length - b.length - 2);
  const endB = hB + b.length;
  const boundaries = [
    ...Array.from({ length: hA + 2 }, (_, i) => i), // every byte of SET a's header, and a's first
    hA + 512 * KiB - 1, hA + 512 * KiB, hA + 512 * KiB + 1, // around one full Bun read
    endA - 1, endA, endA + 1, endA + 2, // a's last byte, its CR, between CR and LF, after LF
    ...Array.from({ length: getA.length }, (_, i) => endA + 2 + i), // every byte of GET a
    ...Array.from({ length: hB - setA.length - getA.length + 1 }, (_, i) => setA.length + getA.length + i), // SET b's header
    endB - 1, endB, endB + 1, endB + 2, input.length - 3,
  ];

  test(`split in two at each of ${boundaries.length} boundaries: replies and values exact`, async () => {
    const { tier, s, done } = server();
    try {
      for (const cut of boundaries) {
        const got = await pieces(s.port, splitAt(input, [cut]), want.length);
        if (!got.equals(want)) throw new Error(`split at ${cut}: reply of ${got.length} bytes differs from redis' ${want.length}`);
        expect(Buffer.from(tier.get("a")!).equals(Buffer.from(a))).toBe(true);
        expect(Buffer.from(tier.get("b")!).equals(Buffer.from(b))).toBe(true);
        tier.delete("a");
        tier.delete("b");
      }
      if (linux) expect(s.stats.direct_recv_bytes).toBeGreaterThan(boundaries.length * 512 * KiB);
      expect(s.heldInputBytes).toBe(0);
    } finally {
      done();
    }
  });

  test("split in 2..7 pieces at seeded random points (half of them near a boundary), 0..3 ms apart", async () => {
    const { tier, s, done } = server();
    const rng = new SeededRng(25);
    try {
      for (let run = 0; run < 40; run++) {
        const cuts = Array.from({ length: 1 + rng.int(6) }, () => (rng.float() < 0.5 ? boundaries[rng.int(boundaries.length)]! + rng.int(3) - 1 : rng.int(input.length)));
        const got = await pieces(s.port, splitAt(input, cuts), want.length, rng.int(4));
        if (!got.equals(want)) throw new Error(`run ${run}, cuts ${cuts.join(",")}: reply differs`);
        expect(Buffer.from(tier.get("a")!).equals(Buffer.from(a))).toBe(true);
        expect(Buffer.from(tier.get("b")!).equals(Buffer.from(b))).toBe(true);
      }
      if (linux) expect(s.stats.direct_recv_bytes).toBeGreaterThan(0);
    } finally {
      done();
    }
  });

  test("direct_recv off (the fallback): the same pipeline, same replies, no direct bytes", async () => {
    const { tier, s, done } = server(64 * 1024 * KiB, false);
    try {
      for (const cut of [hA, hA + 512 * KiB, endA + 1]) expect((await pieces(s.port, splitAt(input, [cut]), want.length)).equals(want)).toBe(true);
      expect(Buffer.from(tier.get("a")!).equals(Buffer.from(a))).toBe(true);
      expect(s.stats.direct_recv_bytes).toBe(0);
    } finally {
      done();
    }
  });
});

describe("direct receive: clients that leave", () => {
  async function leave(how: "fin" | "rst", upTo: (headerBytes: number, valueBytes: number) => number): Promise<void> {
    const { tier, s, done } = server(16 * 1024 * KiB);
    try {
      const v1 = valueOf("k", 1, 600 * KiB);
      expect((await pieces(s.port, [cmd("SET", "k", v1)], 5)).toString()).toBe("+OK\r\n");
      tier.flush();
      const used = tier.media.cpu!.usedBytes;
      const v2 = valueOf("k", 2, 2048 * KiB);
      const full = cmd("SET", "k", v2);
      const partial = full.subarray(0, upTo(full.length - v2.length - 2, v2.length));
      const sock = await Bun.connect({ hostname: "127.0.0.1", port: s.port, socket: { data() {}, error() {} } });
      let rest: Uint8Array = partial;
      while (rest.length > 0) {
        rest = rest.subarray(Math.max(0, sock.write(rest)));
        if (rest.length > 0) await Bun.sleep(1);
      }
      for (let i = 0; i < 100 && s.heldInputBytes < partial.length - 64; i++) await Bun.sleep(10);
      if (how === "rst") sock.terminate();
      else sock.end();
      for (let i = 0; i < 300 && (s.stats.clients > 0 || tier.media.cpu!.usedBytes !== used); i++) await Bun.sleep(10);
      expect(s.stats.clients).toBe(0);
      expect(tier.media.cpu!.usedBytes).toBe(used); // the slot came back
      expect(Buffer.from(tier.get("k")!).equals(Buffer.from(v1))).toBe(true); // not the partial value
      // The server goes on serving.
      const v3 = valueOf("k", 3, 700 * KiB);
      expect((await pieces(s.port, [cmd("SET", "k", v3), cmd("PING")], 12)).toString()).toBe("+OK\r\n+PONG\r\n");
      expect(Buffer.from(tier.get("k")!).equals(Buffer.from(v3))).toBe(true);
      if (linux) expect(s.stats.direct_recv_bytes).toBeGreaterThan(0);
    } finally {
      done();
    }
  }

  test("FIN mid-value", () => leave("fin", (h, n) => h + Math.floor(n * 0.75)));
  test("RST (ECONNRESET) mid-value", () => leave("rst", (h, n) => h + Math.floor(n * 0.75)));
  test("FIN right after the value's last byte, before its CRLF", () => leave("fin", (h, n) => h + n));
  test("RST between the value's CR and LF", () => leave("rst", (h, n) => h + n + 1));
});

test("40 connections at once, each pipelining 3 SETs of ~700 KiB and GETs of them: all exact", async () => {
  const { tier, s, done } = server(160 * 1024 * KiB);
  try {
    const conns = Array.from({ length: 40 }, (_, c) => Array.from({ length: 3 }, (_, i) => valueOf(`c${c}-${i}`, 1, 700 * KiB + c * 13 + i)));
    const results = await Promise.all(
      conns.map((vals, c) => {
        const input = Buffer.concat([...vals.map((v, i) => cmd("SET", `c${c}-${i}`, v)), ...vals.map((_, i) => cmd("GET", `c${c}-${i}`))]);
        const want = Buffer.concat(["+OK\r\n".repeat(3), ...vals.flatMap((v) => [`$${v.length}\r\n`, v, "\r\n"])].map((x) => (typeof x === "string" ? Buffer.from(x) : Buffer.from(x))));
        return pieces(s.port, [input], want.length, 0).then((got) => got.equals(want));
      }),
    );
    expect(results.every(Boolean)).toBe(true);
    conns.forEach((vals, c) => vals.forEach((v, i) => expect(Buffer.from(tier.get(`c${c}-${i}`)!).equals(Buffer.from(v))).toBe(true)));
    if (linux) expect(s.stats.direct_recv_bytes).toBeGreaterThan(0);
    for (let i = 0; i < 100 && s.stats.clients > 0; i++) await Bun.sleep(10);
    expect(s.stats.clients).toBe(0);
  } finally {
    done();
  }
}, 20_000); // 2.0–2.4 s alone, over 5 s with the whole folder on a loaded 2-core box

describe("plainFd: only an open plain TCP socket's descriptor", () => {
  const fake = (x: object) => x as unknown as Socket<unknown>;
  test("TLS, closed (-1), no getTLSVersion, no fd: refused", () => {
    expect(plainFd(fake({ fd: 7, getTLSVersion: () => null }))).toBe(7);
    expect(plainFd(fake({ fd: 7, getTLSVersion: () => "TLSv1.3" }))).toBeUndefined();
    expect(plainFd(fake({ fd: -1, getTLSVersion: () => null }))).toBeUndefined();
    expect(plainFd(fake({ fd: 7 }))).toBeUndefined();
    expect(plainFd(fake({ getTLSVersion: () => null }))).toBeUndefined();
  });
});
