// Our sockets talking to each other over real loopback TCP: receive backpressure through Bun's
// socket pause/resume, PUB high-water-mark drops against a stalled subscriber, DEALER/ROUTER
// round trips, and close() releasing everything.
import { describe, expect, test } from "bun:test";
import { memoryLogger } from "../helpers/log.ts";
import { DealerSocket, PubSocket, RouterSocket, SubSocket } from "../../src/transport/zmtp/index.ts";

const text = (b: Uint8Array | undefined) => new TextDecoder().decode(b);

describe("ZMTP over loopback (ours <-> ours)", () => {
  test("a slow for-await consumer loses nothing: reading pauses at rcvHwm and resumes", async () => {
    const pub = new PubSocket({ log: memoryLogger(), sndHwm: 1_000_000 });
    const sub = new SubSocket({ log: memoryLogger(), rcvHwm: 50 });
    sub.subscribe("m");
    sub.connect(pub.bind("tcp://127.0.0.1:0"));
    await sub.whenReady();
    // Slow joiner: probe until the SUBSCRIBE has reached the PUB.
    do pub.send(["m", "-1"]);
    while (!(await sub.recv(20)));
    const n = 20_000;
    const payload = new Uint8Array(200).fill(1);
    for (let i = 0; i < n; i++) pub.send(["m", String(i), payload]);
    let next = 0;
    for await (const f of sub) {
      if (text(f[1]) === "-1") continue;
      expect(text(f[1])).toBe(String(next));
      next++;
      if (next % 2000 === 0) await Bun.sleep(5);
      if (next === n) break;
    }
    expect(next).toBe(n);
    expect(pub.stats.dropped).toBe(0);
    pub.close();
    sub.close();
  });

  test("PUB drops per subscriber at sndHwm when the subscriber stops reading; send never blocks", async () => {
    const pub = new PubSocket({ log: memoryLogger(), sndHwm: 100 });
    const sub = new SubSocket({ log: memoryLogger(), rcvHwm: 10 });
    sub.subscribe("");
    sub.connect(pub.bind("tcp://127.0.0.1:0"));
    await sub.whenReady();
    while (pub.send(["x"]) === 0) await Bun.sleep(5);
    // send() is synchronous, so "never blocks" means: past the high-water mark messages are dropped
    // (counted) instead of queued without bound. No wall-clock bound here: CI boxes are shared.
    const big = new Uint8Array(64 * 1024);
    let queued = 0;
    for (let i = 0; i < 5000; i++) queued += pub.send(["y", big]);
    expect(pub.stats.dropped).toBeGreaterThan(0);
    expect(queued).toBeLessThan(5000);
    pub.close();
    sub.close();
  });

  test("DEALER <-> ROUTER round trip, both bind directions, identities and multipart", async () => {
    for (const routerBinds of [true, false]) {
      const router = new RouterSocket({ log: memoryLogger(), identity: "r" });
      const dealer = new DealerSocket({ log: memoryLogger(), identity: "w-1" });
      if (routerBinds) dealer.connect(router.bind("tcp://127.0.0.1:0"));
      else router.connect(dealer.bind("tcp://127.0.0.1:0"));
      router.onMessage = (id, frames) => router.send([id, "re:", ...frames]);
      expect(dealer.send(["", new Uint8Array(300), "z"])).toBe(true);
      const r = (await dealer.recv(3000))!;
      expect(r.map((f) => f.length)).toEqual([3, 0, 300, 1]);
      expect(router.identities().map(text)).toEqual(["w-1"]);
      router.close();
      dealer.close();
    }
  });

  test("PUB forgets a departed subscriber and serves its replacement", async () => {
    const pub = new PubSocket({ log: memoryLogger() });
    const ep = pub.bind("tcp://127.0.0.1:0");
    for (let round = 0; round < 2; round++) {
      const sub = new SubSocket({ log: memoryLogger() });
      sub.subscribe(`r${round}`);
      sub.connect(ep);
      let got: Uint8Array[] | undefined;
      while (!got) {
        pub.send([`r${round}`]);
        got = await sub.recv(20);
      }
      expect(pub.subscribers).toBe(1);
      expect(pub.send(["r0"])).toBe(round === 0 ? 1 : 0); // the old subscription left with its peer
      sub.close();
      while (pub.subscribers > 0) await Bun.sleep(5);
    }
    pub.close();
  });

  test("binding a port in use fails with a clear error", () => {
    const a = new PubSocket({ log: memoryLogger() });
    const ep = a.bind("tcp://127.0.0.1:0");
    const b = new PubSocket({ log: memoryLogger() });
    expect(() => b.bind(ep)).toThrow(/zmtp PUB: cannot bind tcp:\/\/127.0.0.1:\d+/);
    expect(() => b.connect("udp://x:1")).toThrow(/bad ZMQ endpoint/);
    a.close();
    b.close();
  });

  test("close() ends the iterator and stops reconnecting", async () => {
    const events: string[] = [];
    const sub = new SubSocket({ log: memoryLogger(), reconnectIvlMs: 5, onEvent: (e) => events.push(e.type) });
    sub.connect("tcp://127.0.0.1:1"); // nothing listens there
    await Bun.sleep(60);
    const failures = events.filter((e) => e === "connect_failed").length;
    expect(failures).toBeGreaterThanOrEqual(2);
    const it = sub[Symbol.asyncIterator]();
    const pending = it.next();
    sub.close();
    expect((await pending).done).toBe(true);
    await Bun.sleep(60);
    expect(events.filter((e) => e === "connect_failed").length).toBeLessThanOrEqual(failures + 1);
  });
});
