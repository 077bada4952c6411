// Wire-level unit tests: exact bytes of greeting/READY/commands, the resumable decoder, the caps,
// version-dependent subscriptions, partial writes, handshake ordering and heartbeats (no sockets).
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { ZmtpDecoder } from "../../src/transport/zmtp/decoder.ts";
import { DealerSocket, PubSocket, RouterSocket, SubSocket, parseEndpoint, reconnectDelayMs } from "../../src/transport/zmtp/index.ts";
import { buildGreeting, encodeCommand, encodeMessage, encodePing, encodeReady, encodeSubscription } from "../../src/transport/zmtp/protocol.ts";
import { OutQueue } from "../../src/transport/zmtp/out-queue.ts";
import { concat, fakeConnection, peerHello } from "./zmtp-fakes.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

function collect(limits = { maxMessageBytes: 1 << 20, maxFrames: 64 }) {
  const out = { greeting: 0, commands: [] as [string, Uint8Array][], messages: [] as Uint8Array[][] };
  const d = new ZmtpDecoder(
    {
      greeting: () => void out.greeting++,
      command: (n, data) => void out.commands.push([n, data.slice()]),
      message: (f) => void out.messages.push(f.map((x) => x.slice())),
    },
    limits,
  );
  return { d, out };
}

describe("ZMTP encoding", () => {
  test("greeting is 64 bytes: signature, 3.1, NULL, as-server 0", () => {
    const g = buildGreeting();
    expect(g.length).toBe(64);
    expect(hex(g.subarray(0, 16))).toBe("ff00000000000000007f03014e554c4c");
    expect(g.subarray(16).every((b) => b === 0)).toBe(true);
  });

  test("READY matches libzmq's bytes (PUB) and RFC 23's worked example (DEALER, empty identity)", () => {
    expect(hex(encodeReady("PUB"))).toBe("0419" + "05" + hex(enc("READY")) + "0b" + hex(enc("Socket-Type")) + "00000003" + hex(enc("PUB")));
    const d = encodeReady("DEALER", new Uint8Array(0));
    expect(d[0]).toBe(0x04);
    expect(d[1]).toBe(41);
    expect(hex(d.subarray(2))).toBe("05" + hex(enc("READY")) + "0b" + hex(enc("Socket-Type")) + "00000006" + hex(enc("DEALER")) + "08" + hex(enc("Identity")) + "00000000");
  });

  test("frames use LONG only above 255 bytes; MORE on all but the last", () => {
    const m = encodeMessage([enc("ab"), new Uint8Array(300)]);
    expect(hex(m.subarray(0, 4))).toBe("01026162");
    expect(hex(m.subarray(4, 13))).toBe("02000000000000012c");
    expect(m.length).toBe(4 + 9 + 300);
    expect(hex(encodeCommand("SUBSCRIBE", enc("A")))).toBe("040b09" + hex(enc("SUBSCRIBE")) + "41");
    expect(hex(encodePing(3000))).toBe("040704" + hex(enc("PING")) + "001e");
  });

  test("subscriptions: commands for 3.1 peers, 01/00 messages for 3.0 peers", () => {
    expect(hex(encodeSubscription(enc("A"), true, 1))).toBe("040b09" + hex(enc("SUBSCRIBE")) + "41");
    expect(hex(encodeSubscription(enc("A"), false, 1))).toBe("040806" + hex(enc("CANCEL")) + "41");
    expect(hex(encodeSubscription(enc("A"), true, 0))).toBe("00020141");
    expect(hex(encodeSubscription(enc("A"), false, 0))).toBe("00020041");
  });

  test("endpoints and backoff", () => {
    expect(parseEndpoint("tcp://127.0.0.1:5557")).toEqual({ host: "127.0.0.1", port: 5557 });
    expect(parseEndpoint("tcp://*:*")).toEqual({ host: "0.0.0.0", port: 0 });
    expect(parseEndpoint("tcp://[::1]:9")).toEqual({ host: "::1", port: 9 });
    expect(() => parseEndpoint("ipc:///tmp/x")).toThrow(/bad ZMQ endpoint/);
    expect([0, 1, 2, 3, 10].map((a) => reconnectDelayMs(a, 100, 1000, 0.5))).toEqual([100, 200, 400, 800, 1000]);
    expect(reconnectDelayMs(0, 100, 1000, 0)).toBe(75);
    expect(reconnectDelayMs(0, 100, 1000, 0.999)).toBe(125);
  });
});

describe("ZMTP decoder", () => {
  const stream = concat([
    peerHello("PUB"),
    encodeMessage([enc("topic"), new Uint8Array(300).fill(1), enc("")]),
    encodeCommand("PING", new Uint8Array([0, 10, 7])),
    encodeMessage([new Uint8Array(70_000).fill(2)]),
  ]);

  test("any chunking (1 byte at a time, random splits) decodes the same messages", () => {
    const whole = collect();
    whole.d.push(stream);
    expect(whole.out.greeting).toBe(1);
    expect(whole.out.commands.map((c) => c[0])).toEqual(["READY", "PING"]);
    expect(whole.out.messages.map((m) => m.map((f) => f.length))).toEqual([[5, 300, 0], [70_000]]);
    const bytewise = collect();
    for (let i = 0; i < stream.length; i++) bytewise.d.push(stream.subarray(i, i + 1));
    expect(bytewise.out).toEqual(whole.out);
    const rng = new SeededRng(7);
    for (let round = 0; round < 20; round++) {
      const r = collect();
      for (let at = 0; at < stream.length; ) {
        const n = 1 + rng.int(5000);
        r.d.push(stream.subarray(at, at + n));
        at += n;
      }
      expect(r.out).toEqual(whole.out);
    }
  });

  test("libzmq 4.3.4 long-SUBSCRIBE bug: flags 04 with an 8-byte size is read as that size", () => {
    const topic = new Uint8Array(250).fill(0x54);
    const body = concat([new Uint8Array([9]), enc("SUBSCRIBE"), topic]);
    const buggy = concat([new Uint8Array([0x04, 0, 0, 0, 0, 0, 0, 1, 4]), body]);
    for (const chunk of [Infinity, 1]) {
      const r = collect();
      const all = concat([peerHello("SUB"), buggy, encodeMessage([enc("after")])]);
      for (let i = 0; i < all.length; i += chunk === Infinity ? all.length : 1) r.d.push(all.subarray(i, i + (chunk === Infinity ? all.length : 1)));
      expect(r.out.commands[1]![0]).toBe("SUBSCRIBE");
      expect(r.out.commands[1]![1]).toEqual(topic);
      expect(r.out.messages).toEqual([[enc("after")]]);
    }
  });

  test("a 4 GiB frame header is rejected at the header, with almost nothing buffered", () => {
    const r = collect();
    r.d.push(peerHello("PUB"));
    expect(() => r.d.push(new Uint8Array([0x02, 0, 0, 0, 1, 0, 0, 0, 0]))).toThrow(/exceeds max/);
    expect(r.d.bufferedBytes).toBeLessThan(16);
  });

  test("caps: message size across frames, frame count, garbage greeting", () => {
    const small = collect({ maxMessageBytes: 1000, maxFrames: 4 });
    small.d.push(peerHello("PUB"));
    expect(() => small.d.push(encodeMessage([new Uint8Array(600), new Uint8Array(600)]))).toThrow(/exceeds max 1000/);
    const frames = collect({ maxMessageBytes: 1000, maxFrames: 4 });
    frames.d.push(peerHello("PUB"));
    expect(() => frames.d.push(encodeMessage([1, 2, 3, 4, 5].map(() => new Uint8Array(1))))).toThrow(/more than 4 frames/);
    expect(() => collect().d.push(enc("GET / HTTP/1.1\r\n"))).toThrow(/bad greeting signature/);
    const v2 = buildGreeting();
    v2[10] = 2;
    expect(() => collect().d.push(v2.subarray(0, 11))).toThrow(/ZMTP 2.x/);
    const curve = buildGreeting();
    curve.set(enc("CURVE"), 12);
    expect(() => collect().d.push(curve)).toThrow(/mechanism "CURVE"/);
  });

  test("pause() stops after the current message and resume() continues from the same byte", () => {
    const msgs = concat([peerHello("PUB"), ...[1, 2, 3, 4].map((i) => encodeMessage([new Uint8Array([i])]))]);
    let d!: ZmtpDecoder;
    const got: number[] = [];
    d = new ZmtpDecoder({ greeting() {}, command() {}, message: (f) => (got.push(f[0]![0]!), got.length === 2 && d.pause()) }, { maxMessageBytes: 100, maxFrames: 4 });
    d.push(msgs);
    expect(got).toEqual([1, 2]);
    // Input arriving while paused is queued behind the unprocessed tail, in order.
    const more = concat([5, 6, 7].map((i) => encodeMessage([new Uint8Array([i])])));
    d.push(more.subarray(0, 3));
    d.push(more.subarray(3));
    expect(d.bufferedBytes).toBe(6 + more.length);
    d.resume();
    expect(got).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(d.bufferedBytes).toBe(0);
  });
});

describe("ZMTP connection (fake socket)", () => {
  test("sends greeting+READY at once, then nothing until the peer's READY; resubscribes in the peer's version", () => {
    for (const minor of [1, 0]) {
      const sub = new SubSocket({ log: undefined });
      sub.subscribe("A");
      const { sock, conn } = fakeConnection(sub);
      conn.start();
      const hello = concat([buildGreeting(), encodeReady("SUB")]);
      expect(sock.bytes()).toEqual(hello);
      conn.onData(buildGreeting(minor));
      expect(sock.bytes().length).toBe(hello.length); // still nothing after our READY
      conn.onData(encodeReady("PUB"));
      expect(conn.state).toBe("ready");
      expect(hex(sock.bytes().subarray(hello.length))).toBe(hex(encodeSubscription(enc("A"), true, minor)));
      sub.close();
    }
  });

  test("PUB accepts 3.0 subscription messages and 3.1 commands, counted, filtering on the first frame", () => {
    for (const minor of [0, 1]) {
      const pub = new PubSocket();
      const { conn } = fakeConnection(pub);
      conn.start();
      conn.onData(concat([peerHello("SUB", minor), encodeSubscription(enc("A"), true, minor), encodeSubscription(enc("A"), true, minor)]));
      expect(pub.send(["A1", "x"])).toBe(1);
      expect(pub.send(["B1"])).toBe(0);
      conn.onData(encodeSubscription(enc("A"), false, minor));
      expect(pub.send(["A2"])).toBe(1); // subscribed twice, cancelled once
      conn.onData(encodeSubscription(enc("A"), false, minor));
      expect(pub.send(["A3"])).toBe(0);
      conn.onData(encodeMessage([enc("\x02not a subscription")])); // other messages from a SUB are ignored
      expect(pub.send(["A4"])).toBe(0);
    }
  });

  test("partial writes: the unsent tail is kept and flushed in order on drain", () => {
    const pub = new PubSocket();
    const { sock, conn } = fakeConnection(pub);
    conn.start();
    conn.onData(concat([peerHello("SUB"), encodeSubscription(new Uint8Array(0), true, 1)]));
    sock.written = [];
    sock.budget = 7;
    const sent: Uint8Array[] = [];
    for (let i = 0; i < 50; i++) {
      const m = [enc(`t${i}`), new Uint8Array(100 + i).fill(i)];
      expect(pub.send(m)).toBe(1);
      sent.push(encodeMessage(m));
      sock.budget = i % 3 === 0 ? 0 : 13; // sometimes nothing is accepted at all
    }
    expect(conn.queuedMessages).toBeGreaterThan(40);
    sock.budget = 1000;
    while (conn.queuedMessages > 0) conn.onDrain();
    expect(sock.bytes()).toEqual(concat(sent));
  });

  test("output queue stays compact when a slow peer never lets it empty", () => {
    let budget = 0;
    const take = (d: Uint8Array): number => {
      const n = Math.min(d.length, budget);
      budget -= n;
      return n;
    };
    const q = new OutQueue({ write: take, end() {} });
    const msg = new Uint8Array(300_000); // too big to coalesce
    for (let i = 0; i < 2000; i++) q.write(msg);
    for (let i = 0; i < 20_000; i++) {
      budget = 300_000; // room for one message per drain
      q.drain();
      budget = 0;
      q.write(msg);
    }
    expect(q.messages).toBeGreaterThan(1900);
    expect((q as unknown as { items: unknown[] }).items.length).toBeLessThan(5000);
  });

  test("PUB drops at the HWM instead of blocking; DEALER refuses", () => {
    const pub = new PubSocket({ sndHwm: 10 });
    const { sock, conn } = fakeConnection(pub);
    conn.start();
    conn.onData(concat([peerHello("SUB"), encodeSubscription(new Uint8Array(0), true, 1)]));
    sock.budget = 0;
    let queued = 0;
    for (let i = 0; i < 1000; i++) queued += pub.send(["x", "y"]);
    expect(queued).toBe(10);
    expect(pub.stats.dropped).toBe(990);
    const dealer = new DealerSocket({ sndHwm: 3 });
    const d = fakeConnection(dealer);
    d.conn.start();
    d.conn.onData(peerHello("ROUTER", 1, new Uint8Array(0)));
    d.sock.budget = 0;
    expect([1, 2, 3, 4].map(() => dealer.send(["q"]))).toEqual([true, true, true, false]);
  });

  test("answers PING with PONG echoing the context; own heartbeat closes a silent 3.1 peer, never PINGs a 3.0 peer", () => {
    const clock = new VirtualClock();
    const router = new RouterSocket({ clock, heartbeatIvlMs: 100, heartbeatTimeoutMs: 50 });
    const { sock, conn } = fakeConnection(router, clock);
    conn.start();
    conn.onData(peerHello("DEALER", 1, enc("d")));
    sock.written = [];
    conn.onData(encodeCommand("PING", concat([new Uint8Array([0, 0]), enc("ctx123")])));
    expect(hex(sock.bytes())).toBe("040b04" + hex(enc("PONG")) + hex(enc("ctx123")));
    clock.advance(100);
    expect(hex(sock.bytes()).includes(hex(enc("PING")))).toBe(true);
    clock.advance(60);
    expect(conn.state).toBe("closed");
    // A timeout longer than the interval still fires (it is not re-armed by every PING).
    const slow = fakeConnection(new RouterSocket({ clock, heartbeatIvlMs: 100, heartbeatTimeoutMs: 350 }), clock);
    slow.conn.start();
    slow.conn.onData(peerHello("DEALER", 1, enc("d")));
    clock.advance(400);
    expect(slow.conn.state).toBe("ready");
    clock.advance(100);
    expect(slow.conn.state).toBe("closed");
    const old = fakeConnection(new RouterSocket({ clock, heartbeatIvlMs: 100 }), clock);
    old.conn.start();
    old.conn.onData(peerHello("DEALER", 0));
    old.sock.written = [];
    clock.advance(1000);
    expect(old.sock.written.length).toBe(0);
    expect(old.conn.state).toBe("ready");
  });

  test("a peer's PING TTL closes the connection when it then goes silent", () => {
    const clock = new VirtualClock();
    const { conn } = fakeConnection(new SubSocket({ clock }), clock);
    conn.start();
    conn.onData(peerHello("PUB"));
    conn.onData(encodePing(300));
    clock.advance(250);
    expect(conn.state).toBe("ready");
    clock.advance(100);
    expect(conn.state).toBe("closed");
  });

  test("incompatible socket type and messages before READY close with a protocol error log line", () => {
    const { conn, log } = fakeConnection(new PubSocket());
    conn.start();
    conn.onData(peerHello("ROUTER", 1, new Uint8Array(0)));
    expect(conn.state).toBe("closed");
    expect(log.lines.join("\n")).toMatch(/protocol error.*incompatible socket type: we are PUB, peer is ROUTER/);
    const early = fakeConnection(new SubSocket());
    early.conn.start();
    early.conn.onData(concat([buildGreeting(), encodeMessage([enc("x")])]));
    expect(early.log.lines.join("\n")).toMatch(/message before the peer's READY/);
  });

  test("ROUTER: peer identity from READY, generated 00+u32 ids otherwise, duplicates ignored", () => {
    const router = new RouterSocket({ rng: new SeededRng(1) });
    const seen: [string, string][] = [];
    router.onMessage = (id, frames) => seen.push([hex(id), new TextDecoder().decode(frames[0])]);
    const a = fakeConnection(router);
    a.conn.start();
    a.conn.onData(concat([peerHello("DEALER", 1, enc("w1")), encodeMessage([enc("a")])]));
    const b = fakeConnection(router);
    b.conn.start();
    b.conn.onData(concat([peerHello("DEALER", 1, new Uint8Array(0)), encodeMessage([enc("b")])]));
    const c = fakeConnection(router);
    c.conn.start();
    c.conn.onData(concat([peerHello("DEALER", 1, enc("w1")), encodeMessage([enc("c")])]));
    expect(seen[0]).toEqual([hex(enc("w1")), "a"]);
    expect(seen[1]![0]).toMatch(/^00[0-9a-f]{8}$/);
    expect(seen.length).toBe(2);
    expect(router.identities().length).toBe(2);
  });
});
