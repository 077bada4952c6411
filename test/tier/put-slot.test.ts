// KvTier.reserve (a value written in place, then committed) and the RESP server's use of it: a SET's
// value of ≥ 64 KiB is parsed straight into its shared-memory slot. What must hold: a committed slot
// is a put; an aborted one (the client went away mid-value, the server stopped) gives its extent
// back and leaves the previous value; an open slot counts against capacity and the model's quota.
import { shmCharge } from "../../src/tier/shm-medium.ts";
import { afterAll, describe, expect, test } from "bun:test";
import { bulkOf } from "../../src/tier/resp/commands.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { cleanupDirs, openTier, valueOf } from "./helpers.ts";
import { cmd, transcript } from "./resp-helpers.ts";

afterAll(cleanupDirs);
const KiB = 1024;
const same = (a: Uint8Array | undefined, b: Uint8Array) => a !== undefined && Buffer.from(a).equals(Buffer.from(b));

describe("KvTier.reserve", () => {
  test("commit stores the bytes written into the slot and replaces the previous value", () => {
    const { tier } = openTier({ cpuBytes: 1024 * KiB });
    tier.put("k", valueOf("k", 1, 100 * KiB));
    const v2 = valueOf("k", 2, 70 * KiB);
    const slot = tier.reserve("k", v2.length)!;
    expect(slot.bytes.length).toBe(v2.length);
    expect(same(tier.get("k"), valueOf("k", 1, 100 * KiB))).toBe(true); // not visible before commit
    slot.bytes.set(v2);
    expect(slot.commit()).toBe(true);
    expect(slot.commit()).toBe(false);
    expect(same(tier.get("k"), v2)).toBe(true);
    tier.flush();
    expect(tier.media.cpu!.usedBytes).toBe(tier.media.cpu!.charge(v2.length));
    expect(tier.counters.cpu.objects).toBe(1);
    tier.close();
  });

  test("abort frees the extent at once and keeps the previous value; abort after commit is a no-op", () => {
    const { tier } = openTier({ cpuBytes: 1024 * KiB });
    const v1 = valueOf("k", 1, 100 * KiB);
    tier.put("k", v1);
    tier.flush();
    const used = tier.media.cpu!.usedBytes;
    const slot = tier.reserve("k", 300 * KiB)!;
    expect(tier.media.cpu!.usedBytes).toBe(used + shmCharge(300 * KiB)); // an open slot is charged
    slot.bytes.fill(7);
    slot.abort();
    slot.abort();
    expect(slot.commit()).toBe(false);
    expect(tier.media.cpu!.usedBytes).toBe(used);
    expect(same(tier.get("k"), v1)).toBe(true);
    const s2 = tier.reserve("j", 64 * KiB)!;
    s2.bytes.fill(1);
    s2.commit();
    s2.abort();
    expect(tier.get("j")?.length).toBe(64 * KiB);
    tier.close();
  });

  test("a value the CPU tier cannot hold gets no slot (put() sends it to SSD)", () => {
    const { tier } = openTier({ cpuBytes: 128 * KiB, ssdBytes: 1024 * KiB });
    expect(tier.reserve("big", 200 * KiB)).toBeUndefined();
    expect(tier.put("big", valueOf("big", 1, 200 * KiB))).toBe(true);
    expect(tier.describe("big")!.tier).toBe("ssd");
    tier.close();
  });

  test("open slots count against the model's quota", () => {
    const { tier } = openTier({ cpuBytes: 1024 * KiB }, { modelQuotaBytes: { m: 2 * shmCharge(128 * KiB) } });
    const a = tier.reserve("m@1@0@a@half", 128 * KiB)!;
    const b = tier.reserve("m@1@0@b@half", 128 * KiB)!;
    a.bytes.fill(1);
    b.bytes.fill(2);
    a.commit();
    b.commit();
    // A third slot of the same model must make room by evicting the model's coldest, as put does.
    const c = tier.reserve("m@1@0@c@half", 128 * KiB)!;
    c.bytes.fill(3);
    c.commit();
    const held = ["a", "b", "c"].filter((k) => tier.has(`m@1@0@${k}@half`));
    expect(held.length).toBe(2);
    expect(held).toContain("c");
    tier.close();
  });
});

describe("RESP SET into a slot", () => {
  test("a 1 MiB SET round-trips, and replacing it leaves one object's worth of the tier used", async () => {
    const { tier } = openTier({ cpuBytes: 8 * 1024 * KiB });
    const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier });
    s.start();
    try {
      const v1 = valueOf("k", 1, 1024 * KiB);
      const v2 = valueOf("k", 2, 1024 * KiB);
      const head = `$${v2.length}\r\n`;
      const want = 10 + head.length + v2.length + 2;
      const r = await transcript(s.port, Buffer.concat([cmd("SET", "k", v1), cmd("SET", "k", v2), cmd("GET", "k")]), (b) => b.length >= want);
      expect(r.bytes.subarray(0, 10).toString()).toBe("+OK\r\n+OK\r\n");
      expect(r.bytes.subarray(10, 10 + head.length).toString()).toBe(head);
      expect(Buffer.from(r.bytes.subarray(10 + head.length, 10 + head.length + v2.length)).equals(Buffer.from(v2))).toBe(true);
      tier.flush();
      expect(tier.media.cpu!.usedBytes).toBe(shmCharge(1024 * KiB));
    } finally {
      s.stop();
      tier.close();
    }
  });

  // With kv_tier.resp.direct_recv the cut lies past Bun's first 512 KiB read, so the value's rest
  // was being read straight into the slot when the client left.
  test.each([
    { directRecv: false, cutKiB: 1024 },
    { directRecv: true, cutKiB: 1536 },
  ])("a client that leaves mid-value: its slot is freed and the previous value stays (direct_recv $directRecv)", async ({ directRecv, cutKiB }) => {
    const { tier } = openTier({ cpuBytes: 8 * 1024 * KiB });
    const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, directRecv });
    s.start();
    try {
      const v1 = valueOf("k", 1, 512 * KiB);
      await transcript(s.port, cmd("SET", "k", v1), (b) => b.length >= 5);
      tier.flush();
      const used = tier.media.cpu!.usedBytes;
      const partial = cmd("SET", "k", valueOf("k", 2, 2048 * KiB)).subarray(0, cutKiB * KiB);
      const first = await Bun.connect({ hostname: "127.0.0.1", port: s.port, socket: { data() {} } });
      first.write(partial);
      for (let i = 0; i < 200 && tier.media.cpu!.usedBytes === used; i++) await Bun.sleep(10);
      expect(tier.media.cpu!.usedBytes).toBe(used + shmCharge(2048 * KiB)); // the slot is open
      first.end();
      for (let i = 0; i < 200 && tier.media.cpu!.usedBytes !== used; i++) await Bun.sleep(10);
      expect(tier.media.cpu!.usedBytes).toBe(used);
      expect(same(tier.get("k"), v1)).toBe(true);
      // A client still mid-value when the server stops gives its slot back too.
      const sock = await Bun.connect({ hostname: "127.0.0.1", port: s.port, socket: { data() {} } });
      sock.write(partial);
      for (let i = 0; i < 200 && tier.media.cpu!.usedBytes === used; i++) await Bun.sleep(10);
      expect(tier.media.cpu!.usedBytes).toBe(used + shmCharge(2048 * KiB));
      s.stop();
      expect(tier.media.cpu!.usedBytes).toBe(used);
      sock.end();
    } finally {
      s.stop();
      tier.close();
    }
  });
});

describe("GET of a CPU-tier value: one contiguous reply", () => {
  test("the extent frames the value as its RESP bulk reply; other buffers get three parts", () => {
    const { tier } = openTier({ cpuBytes: 4096 * KiB });
    for (const n of [16 * KiB, 100_000, 1024 * KiB]) {
      const v = valueOf("f", n, n);
      tier.put(`f${n}`, v);
      const r = bulkOf(tier.get(`f${n}`)!);
      expect(r.chunks.length).toBe(1);
      expect(Buffer.from(r.chunks[0]!).equals(Buffer.concat([Buffer.from(`$${n}\r\n`), v, Buffer.from("\r\n")]))).toBe(true);
    }
    const heap = valueOf("h", 1, 64 * KiB);
    expect(bulkOf(heap).chunks.length).toBe(3);
    // Bytes that look almost like a frame (a wrong length digit) are not taken for one.
    const fake = Buffer.concat([Buffer.from(`$${64 * KiB + 1}\r\n`), heap, Buffer.from("\r\n")]);
    const inner = fake.subarray(fake.length - 2 - heap.length, fake.length - 2);
    expect(bulkOf(inner).chunks.length).toBe(3);
    const real = Buffer.concat([Buffer.from(`$${64 * KiB}\r\n`), heap, Buffer.from("\r\n")]);
    expect(bulkOf(real.subarray(real.length - 2 - heap.length, real.length - 2)).chunks.length).toBe(1);
    tier.close();
  });
});
