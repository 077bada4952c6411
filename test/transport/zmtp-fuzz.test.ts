// Fuzzing with fixed seeds: thousands of valid, truncated, mutated and random byte streams fed in
// random chunks to a connection of each socket type. Properties: nothing throws out of onData, no
// unhandled rejection, valid streams decode exactly, and every protocol close leaves a log line.
// A few cases go over real TCP sockets to the listening and connecting sides.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { memoryLogger } from "../helpers/log.ts";
import { type Rng, SeededRng } from "../../src/core/rng.ts";
import { DealerSocket, PubSocket, RouterSocket, SubSocket, type ZmtpSocket } from "../../src/transport/zmtp/index.ts";
import { buildGreeting, encodeCommand, encodeMessage, encodeReady, encodeSubscription, type SocketType } from "../../src/transport/zmtp/protocol.ts";
import { concat, fakeConnection } from "./zmtp-fakes.ts";

let unhandled = 0;
const onUnhandled = () => void unhandled++;
beforeAll(() => {
  process.on("unhandledRejection", onUnhandled);
  process.on("uncaughtException", onUnhandled);
});
afterAll(() => {
  process.off("unhandledRejection", onUnhandled);
  process.off("uncaughtException", onUnhandled);
});

function bytes(rng: Rng, n: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = rng.int(256);
  return b;
}

// Each of our types with the peer type it talks to.
const PAIRS: [() => ZmtpSocket<Uint8Array[]>, SocketType][] = [
  [() => new SubSocket({ log: memoryLogger(), maxMessageBytes: 8192, maxFrames: 16 }), "PUB"],
  [() => new PubSocket({ log: memoryLogger(), maxMessageBytes: 8192, maxFrames: 16 }), "SUB"],
  [() => new RouterSocket({ log: memoryLogger(), maxMessageBytes: 8192, maxFrames: 16 }), "DEALER"],
  [() => new DealerSocket({ log: memoryLogger(), maxMessageBytes: 8192, maxFrames: 16 }), "ROUTER"],
];

/** A valid peer stream and the data messages in it. */
function validStream(rng: Rng, peerType: SocketType): { wire: Uint8Array; messages: Uint8Array[][] } {
  const minor = rng.int(2);
  const parts: Uint8Array[] = [buildGreeting(minor), encodeReady(peerType, peerType === "DEALER" || peerType === "ROUTER" ? bytes(rng, rng.int(3)).map((b) => b | 1) : undefined)];
  const messages: Uint8Array[][] = [];
  const n = rng.int(6);
  for (let i = 0; i < n; i++) {
    const r = rng.float();
    if (r < 0.15) parts.push(encodeCommand(["PING", "PONG", "X-UNKNOWN"][rng.int(3)]!, new Uint8Array([0, 0, ...bytes(rng, rng.int(4))])));
    else if (r < 0.25 && peerType === "SUB") parts.push(encodeSubscription(bytes(rng, rng.int(5)), rng.int(2) === 0, minor));
    else {
      const frames = Array.from({ length: 1 + rng.int(3) }, () => bytes(rng, rng.float() < 0.1 ? 256 + rng.int(1500) : rng.int(40)));
      if (peerType === "SUB") frames[0] = concat([new Uint8Array([2]), frames[0]!]); // not a 3.0 subscription
      parts.push(encodeMessage(frames));
      messages.push(frames);
    }
  }
  return { wire: concat(parts), messages };
}

function mutate(rng: Rng, w: Uint8Array): Uint8Array {
  switch (rng.int(7)) {
    case 0:
      return w.subarray(0, rng.int(w.length + 1)); // truncate
    case 1: {
      const m = w.slice();
      for (let k = 1 + rng.int(4); k > 0 && m.length > 0; k--) {
        const at = rng.int(m.length);
        m[at] = m[at]! ^ (1 << rng.int(8));
      }
      return m;
    }
    case 2: {
      const at = rng.int(w.length + 1);
      return concat([w.subarray(0, at), bytes(rng, 1 + rng.int(12)), w.subarray(at)]);
    }
    case 3: {
      const at = rng.int(w.length + 1);
      return concat([w.subarray(0, at), w.subarray(Math.min(w.length, at + 1 + rng.int(20)))]);
    }
    case 4: {
      // A huge declared length right after the handshake.
      const hdr = new Uint8Array([rng.int(2) === 0 ? 0x02 : 0x06, ...bytes(rng, 8)]);
      hdr[1] = 0x7f;
      return concat([w, hdr, bytes(rng, rng.int(64))]);
    }
    case 5:
      return bytes(rng, rng.int(200));
    default:
      return concat([w, bytes(rng, 1 + rng.int(100))]);
  }
}

function feed(rng: Rng, onData: (c: Uint8Array) => void, wire: Uint8Array): void {
  for (let at = 0; at < wire.length; ) {
    const n = 1 + rng.int(rng.int(2) === 0 ? 8 : 600);
    onData(wire.subarray(at, at + n));
    at += n;
  }
}

describe("ZMTP decoder fuzz (fixed seeds)", () => {
  test("valid streams in random chunks decode exactly, for every socket type", () => {
    const rng = new SeededRng(20261130);
    for (let i = 0; i < 1500; i++) {
      const [make, peerType] = PAIRS[i % PAIRS.length]!;
      const s = make();
      const got: Uint8Array[][] = [];
      if (!(s instanceof PubSocket)) (s as SubSocket).onMessage = (f: Uint8Array[]) => void got.push(f.map((x) => x.slice()));
      if (s instanceof RouterSocket) s.onMessage = (_id, f) => void got.push(f.map((x) => x.slice()));
      if (s instanceof SubSocket) s.subscribe("");
      const { conn, log } = fakeConnection(s);
      conn.start();
      const { wire, messages } = validStream(rng, peerType);
      feed(rng, (c) => conn.onData(c), wire);
      expect(conn.state).toBe("ready");
      expect(log.lines).toEqual([]);
      if (!(s instanceof PubSocket)) expect(got).toEqual(messages);
      s.close();
    }
  });

  test("mutated, truncated and random streams never throw; protocol closes are logged", () => {
    const rng = new SeededRng(42);
    let closed = 0;
    for (let i = 0; i < 4000; i++) {
      const [make, peerType] = PAIRS[rng.int(PAIRS.length)]!;
      const s = make();
      if (s instanceof SubSocket) s.subscribe("");
      const { conn, log, sock } = fakeConnection(s);
      conn.start();
      const wire = mutate(rng, validStream(rng, peerType).wire);
      expect(() => feed(rng, (c) => conn.onData(c), wire)).not.toThrow();
      if (conn.state === "closed") {
        closed++;
        expect(sock.ended).toBe(true);
        expect(log.lines.length).toBe(1);
        expect(log.lines[0]).toMatch(/zmtp protocol error, closing connection conn=fake reason=.+ buffered_bytes=\d+/);
      }
      s.close();
    }
    expect(closed).toBeGreaterThan(2000); // most mutations must be caught
    expect(unhandled).toBe(0);
  });
});

describe("ZMTP garbage over real sockets", () => {
  async function rawClient(port: number, payload: Uint8Array): Promise<{ closedWithinMs: number }> {
    const t0 = performance.now();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("server did not close the connection")), 3000);
      void Bun.connect({
        hostname: "127.0.0.1",
        port,
        socket: {
          open: (s) => void s.write(payload),
          data: () => {},
          close: () => {
            clearTimeout(timer);
            resolve({ closedWithinMs: performance.now() - t0 });
          },
        },
      }).catch(reject);
    });
  }

  test("listening PUB and ROUTER close garbage connections with a log line and keep serving", async () => {
    const rng = new SeededRng(9);
    const log = memoryLogger();
    const pub = new PubSocket({ log });
    const router = new RouterSocket({ log, maxMessageBytes: 1 << 20 });
    const pubPort = Number(pub.bind("tcp://127.0.0.1:0").split(":").pop());
    const routerPort = Number(router.bind("tcp://127.0.0.1:0").split(":").pop());
    const hello = (t: SocketType) => concat([buildGreeting(), encodeReady(t, t === "DEALER" ? new Uint8Array(0) : undefined)]);
    const payloads = [
      new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
      bytes(rng, 500),
      concat([hello("SUB"), new Uint8Array([0x02, 0, 0, 0, 1, 0, 0, 0, 0])]), // 4 GiB frame
    ];
    for (const p of payloads) {
      await rawClient(pubPort, p);
      await rawClient(routerPort, p);
    }
    await rawClient(pubPort, hello("ROUTER")); // incompatible socket types
    await rawClient(routerPort, hello("PUB"));
    await rawClient(routerPort, concat([hello("DEALER"), new Uint8Array([0x02, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff])])); // 2 GiB > 1 MiB cap
    expect(log.lines.filter((l) => l.includes("zmtp protocol error")).length).toBeGreaterThanOrEqual(9);
    // Still serving real peers.
    const sub = new SubSocket({ log });
    sub.subscribe("");
    sub.connect(`tcp://127.0.0.1:${pubPort}`);
    await sub.whenReady(2000);
    let got: Uint8Array[] | undefined;
    for (let i = 0; i < 100 && !got; i++) {
      pub.send(["ok"]);
      got = await sub.recv(20);
    }
    expect(new TextDecoder().decode(got?.[0])).toBe("ok");
    sub.close();
    pub.close();
    router.close();
    expect(unhandled).toBe(0);
  });

  test("a connecting SUB facing a garbage server logs, backs off and retries without throwing", async () => {
    const rng = new SeededRng(3);
    let accepts = 0;
    const server = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open: (s) => {
          accepts++;
          s.write(bytes(rng, 100));
        },
        data: () => {},
      },
    });
    const log = memoryLogger();
    const sub = new SubSocket({ log, reconnectIvlMs: 10, reconnectIvlMaxMs: 40 });
    sub.subscribe("x");
    sub.connect(`tcp://127.0.0.1:${server.port}`);
    const end = performance.now() + 2000;
    while (accepts < 3 && performance.now() < end) await Bun.sleep(10);
    sub.close();
    server.stop(true);
    expect(accepts).toBeGreaterThanOrEqual(3);
    expect(log.lines.some((l) => l.includes("zmtp protocol error"))).toBe(true);
    expect(sub.stats.protocolErrors).toBeGreaterThanOrEqual(2);
    expect(unhandled).toBe(0);
  });
});
