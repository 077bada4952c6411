// Issue 22 rows 5–9 and the AUTH / idle bounds of the RESP server: each input the adversarial probe
// used, scaled to what a shared test machine can send, against the bound that now holds. No timing
// assertions: "the loop was not frozen" is asserted as ordering (another client is answered while
// the flood is still being processed), memory as the server's own held-byte counters.
import { afterAll, describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { RespServer, type RespServerOptions } from "../../src/tier/resp/server.ts";
import { cleanupDirs, openTier, valueOf } from "./helpers.ts";
import { cmd } from "./resp-helpers.ts";
import { rawConnect, writeAll } from "../helpers/raw-socket.ts";

afterAll(cleanupDirs);

function server(extra: Partial<RespServerOptions> = {}) {
  const { tier } = openTier({ cpuBytes: 128 << 20 });
  const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, ...extra });
  s.start();
  return { s, tier };
}

const client = (port: number, opts: { paused?: boolean; keep?: boolean } = {}) => rawConnect(port, opts);

describe("row 5: a pipelined PING flood does not hold the loop", () => {
  test("1.5M inline PINGs: all answered, and another client is answered while the flood runs", async () => {
    const { s } = server();
    const flood = await client(s.port);
    const n = 1_500_000;
    const sent = writeAll(flood.sock, Buffer.from("PING\r\n".repeat(n)), 5000);
    await flood.until(7 * 1000); // the flood is being processed
    const other = await client(s.port, { keep: true });
    other.sock.write(cmd("PING"));
    await other.until(7);
    expect(other.text()).toBe("+PONG\r\n");
    const commandsWhenAnswered = s.stats.commands;
    expect(commandsWhenAnswered).toBeLessThan(n); // answered in between slices of the flood
    await sent;
    await flood.until(7 * n);
    expect(flood.bytes()).toBe(7 * n);
    expect(s.stats.protocol_errors).toBe(0);
    flood.sock.end();
    other.sock.end();
    s.stop();
  }, 120_000);

  test("1M PINGs before AUTH on a password port: NOAUTH for each, in slices", async () => {
    const { s } = server({ password: "pw" });
    const flood = await client(s.port);
    const n = 1_000_000;
    const reply = "-NOAUTH Authentication required.\r\n".length;
    const sent = writeAll(flood.sock, Buffer.from("PING\r\n".repeat(n)), 5000);
    await flood.until(reply * 1000);
    const other = await client(s.port, { keep: true });
    other.sock.write(Buffer.concat([cmd("AUTH", "pw"), cmd("PING")]));
    await other.until(12);
    expect(other.text()).toBe("+OK\r\n+PONG\r\n");
    expect(s.stats.commands).toBeLessThan(n + 2);
    await sent;
    await flood.until(reply * n);
    expect(flood.bytes()).toBe(reply * n);
    flood.sock.end();
    other.sock.end();
    s.stop();
  }, 120_000);
});

describe("row 6: arguments already received count against the input bound", () => {
  test("an unknown command's 25 × 64 MiB arguments are refused at the first header, nothing held", async () => {
    const { s } = server();
    const c = await client(s.port, { keep: true });
    const chunk = Buffer.alloc(1 << 20, 120);
    c.sock.write(Buffer.from(`*26\r\n$3\r\nFOO\r\n$${64 << 20}\r\n`));
    await writeAll(c.sock, chunk);
    await c.until(1 << 30);
    expect(c.closed()).toBe(true);
    expect(c.text()).toMatch(/^-ERR Protocol error: argument 1 of 67108864 bytes is over this command's bound\r\n$/);
    expect(s.heldInputBytes).toBe(0);
    s.stop();
  });

  test("a SET's extra 64 MiB arguments and an EXISTS over the command bound are refused", async () => {
    const { s } = server({ limits: { commandBytesMax: 1 << 20 } });
    const a = await client(s.port, { keep: true });
    a.sock.write(Buffer.from(`*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nabc\r\n$${64 << 20}\r\n`));
    await a.until(1 << 30);
    expect(a.text()).toContain("argument 3 of 67108864 bytes");
    const b = await client(s.port, { keep: true });
    const keys = Array.from({ length: 2000 }, (_, i) => `${i}`.padEnd(1000, "k"));
    await writeAll(b.sock, cmd("EXISTS", ...keys));
    await b.until(1 << 30);
    expect(b.closed()).toBe(true);
    expect(b.text()).toContain("over the 1048576-byte input bound");
    expect(s.heldInputBytes).toBe(0);
    s.stop();
  });
});

describe("row 7: clients that send without reading", () => {
  test("2 unauthenticated connections flooding PINGs, never reading: the server stops reading them", async () => {
    const { s } = server({ password: "pw", outputSoftBytes: 1 << 20 });
    const floods = await Promise.all([client(s.port, { paused: true }), client(s.port, { paused: true })]);
    const payload = Buffer.from("PING\r\n".repeat((64 << 20) / 6));
    const taken = await Promise.all(floods.map((f) => writeAll(f.sock, payload)));
    // The kernel's buffers take some MiB each; the rest waits in the client (TCP backpressure).
    for (const t of taken) expect(t).toBeLessThan(payload.length);
    expect(s.stats.input_paused).toBeGreaterThan(0);
    expect(s.heldInputBytes).toBeLessThan(2 * (1 << 20));
    expect(s.queuedBytes).toBeLessThan(2 * ((1 << 20) + (64 << 10)));
    for (const f of floods) f.sock.end();
    s.stop();
  });
});

describe("row 8: a total output bound across connections", () => {
  test("10 slow readers × 5 GETs of 4 MiB: at most outputTotalBytes (+ one reply) queued; all served once they read", async () => {
    const total = 8 << 20;
    const { s, tier } = server({ outputSoftBytes: 64 << 20, outputTotalBytes: total });
    const v = valueOf("big", 0, 4 << 20);
    tier.put("big", v);
    const readers = await Promise.all(Array.from({ length: 10 }, () => client(s.port, { paused: true })));
    for (const r of readers) r.sock.write(Buffer.concat(Array.from({ length: 5 }, () => cmd("GET", "big"))));
    await Bun.sleep(300);
    expect(s.stats.output_total_peak_bytes).toBeLessThanOrEqual(total + (4 << 20) + 64);
    expect(s.stats.commands).toBeLessThan(50);
    const reply = `$${v.length}\r\n`.length + v.length + 2;
    for (const r of readers) r.sock.resume();
    for (const r of readers) await r.until(5 * reply);
    for (const r of readers) expect(r.bytes()).toBe(5 * reply);
    expect(s.stats.commands).toBe(50);
    expect(s.stats.output_total_peak_bytes).toBeLessThanOrEqual(total + (4 << 20) + 64);
    for (const r of readers) r.sock.end();
    s.stop();
  }, 60_000);
});

describe("row 9: keys are bounded", () => {
  test("a multibulk SET with a 20 MiB key is refused as it arrives; inline and GET keys over the bound get an error", async () => {
    const { s, tier } = server({ keyBytesMax: 1024 });
    const a = await client(s.port, { keep: true });
    a.sock.write(Buffer.from(`*3\r\n$3\r\nSET\r\n$${20 << 20}\r\n`));
    await a.until(1 << 30);
    expect(a.text()).toContain("argument 1 of 20971520 bytes");
    const b = await client(s.port, { keep: true });
    b.sock.write(`SET ${"k".repeat(2000)} v\r\nGET ${"k".repeat(1500)}\r\nSET ${"k".repeat(1024)} v\r\n`);
    await b.until(2 * 62 + 5);
    expect(b.text()).toBe("-ERR key longer than 1024 bytes (kv_tier.resp.key_max_bytes)\r\n".repeat(2) + "+OK\r\n");
    expect(tier.list()).toEqual(["k".repeat(1024)]);
    b.sock.end();
    s.stop();
  });
});

test("row 9: keys are charged against the tier: 1000-byte keys on 1-byte values fill it by their keys", () => {
  const { tier } = openTier({ cpuBytes: 64 << 10 });
  for (let i = 0; i < 200; i++) tier.put(`${i}:`.padEnd(1000, "k"), new Uint8Array([i]));
  const cpu = tier.media.cpu!;
  // Each object costs its 64-byte extent plus 936 key bytes: ≈ 65 fit, not the 1024 extents alone would allow.
  expect(tier.counters.cpu.objects).toBeLessThanOrEqual(Math.floor((64 << 10) / 1000));
  expect(cpu.usedBytes + tier.keyBytes.cpu).toBeLessThanOrEqual(64 << 10);
  expect(tier.keyBytes.cpu).toBe(tier.counters.cpu.objects * 936);
  expect(tier.has(`${199}:`.padEnd(1000, "k"))).toBe(true); // the newest stays; the coldest were evicted
  for (const k of tier.list()) tier.delete(k);
  expect(tier.keyBytes.cpu).toBe(0);
});

describe("AUTH failures and idle connections", () => {
  test("a failed AUTH delays the connection's next command, doubling per failure, and is counted", async () => {
    const clock = new VirtualClock();
    const { s } = server({ password: "pw", clock, authDelayMs: 100, authDelayMaxMs: 250 });
    const c = await client(s.port, { keep: true });
    const WRONG = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    c.sock.write(Buffer.concat([cmd("AUTH", "a"), cmd("AUTH", "b"), cmd("AUTH", "c"), cmd("AUTH", "pw"), cmd("PING")]));
    await c.until(WRONG.length);
    await Bun.sleep(50);
    expect(c.text()).toBe(WRONG); // the second guess waits for the clock
    clock.advance(99);
    await Bun.sleep(50);
    expect(c.text()).toBe(WRONG);
    clock.advance(1);
    await c.until(2 * WRONG.length);
    clock.advance(199); // 200 ms after the second failure
    await Bun.sleep(50);
    expect(c.text()).toBe(WRONG.repeat(2));
    clock.advance(1);
    await c.until(3 * WRONG.length);
    clock.advance(250); // capped
    await c.until(3 * WRONG.length + 12);
    expect(c.text()).toBe(WRONG.repeat(3) + "+OK\r\n+PONG\r\n");
    expect(s.stats.auth_failures).toBe(3);
    c.sock.end();
    s.stop();
  });

  test("idle and unauthenticated connections are closed after their timeouts", async () => {
    const clock = new VirtualClock();
    const { s } = server({ password: "pw", clock, idleTimeoutMs: 60_000, authTimeoutMs: 5_000 });
    const unauth = await client(s.port);
    const authed = await client(s.port, { keep: true });
    authed.sock.write(cmd("AUTH", "pw"));
    await authed.until(5);
    clock.advance(7_000); // the sweep runs every 1.25 s (a quarter of the shortest timeout)
    await unauth.until(1);
    expect(unauth.closed()).toBe(true);
    expect(authed.closed()).toBe(false);
    authed.sock.write(cmd("PING"));
    await authed.until(12);
    clock.advance(59_000); // 66 s since open, 59 s since its PING
    await Bun.sleep(50);
    expect(authed.closed()).toBe(false);
    clock.advance(2_000);
    await authed.until(1 << 20);
    expect(authed.closed()).toBe(true);
    expect(s.stats.timeout_closed).toBe(2);
    s.stop();
  });
});
