// kv_tier.resp.direct_recv's default and fallback (src/tier/resp/direct-recv.ts chooseDirectRecv):
// on by default wherever libc recv through bun:ffi is available; off when the key is false or the
// receiver is unavailable (the reason is kept and logged at start, in process and from the tier's
// thread); a TLS socket never gets a descriptor for it (plainFd), whatever the key says.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { parseConfigText } from "../../src/config/index.ts";
import { chooseDirectRecv, directRecv, directRecvLine, plainFd } from "../../src/tier/resp/direct-recv.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { TierService } from "../../src/tier/service.ts";
import { memoryLogger } from "../helpers/log.ts";
import { peer } from "../helpers/peers.ts";
import { makePki } from "../helpers/pki.ts";
import { cleanupDirs, openTier, tempDirs, valueOf } from "./helpers.ts";
import { cmd, transcript } from "./resp-helpers.ts";

afterAll(cleanupDirs);
const linux = process.platform === "linux";
const MiB = 1024 * 1024;

/** One 1 MiB SET on a server with these options: its reply, direct bytes, and why direct is off. */
async function oneSet(directRecvOpt: boolean | undefined): Promise<{ reply: string; direct: number; off: string | undefined }> {
  const { tier } = openTier({ cpuBytes: 8 * MiB });
  const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, ...(directRecvOpt === undefined ? {} : { directRecv: directRecvOpt }) });
  s.start();
  try {
    const v = valueOf("d", 1, 2 * MiB + 5); // more than Bun's 512 KiB read, so a direct read must happen when on
    const r = await transcript(s.port, cmd("SET", "d", v), (b) => b.length >= 5);
    expect(Buffer.from(tier.get("d")!).equals(Buffer.from(v))).toBe(true);
    return { reply: r.bytes.toString(), direct: s.stats.direct_recv_bytes, off: s.directOff };
  } finally {
    s.stop();
    tier.close();
  }
}

describe("chooseDirectRecv", () => {
  const fakeRecv = { recv: () => 0 };
  test("asked and available: on, no reason", () => {
    const c = chooseDirectRecv(true, () => fakeRecv);
    expect(c.recv).toBe(fakeRecv);
    expect(c.off).toBeUndefined();
  });
  test("kv_tier.resp.direct_recv false: off, the receiver is not even probed", () => {
    let probed = false;
    const c = chooseDirectRecv(false, () => ((probed = true), fakeRecv));
    expect(c).toEqual({ recv: undefined, off: "kv_tier.resp.direct_recv is false" });
    expect(probed).toBe(false);
  });
  test("unavailable (not Linux, no libc, no bun:ffi): off with the probe's reason", () => {
    for (const why of ["direct receive needs Linux (this is darwin)", "direct receive unavailable: Failed to open library"]) {
      expect(chooseDirectRecv(true, () => why)).toEqual({ recv: undefined, off: why });
    }
  });
  test("the start line says which path large values take", () => {
    expect(directRecvLine(undefined)).toMatch(/straight into shared memory/);
    expect(directRecvLine("kv_tier.resp.direct_recv is false")).toBe("kv_tier.resp: direct receive off (kv_tier.resp.direct_recv is false); large SET values go through Bun's socket reads");
  });
  test("this host (Linux): the real probe is available", () => {
    if (!linux) return console.log(`skip: direct receive is Linux-only (${process.platform})`);
    expect(typeof directRecv()).toBe("object");
    expect(chooseDirectRecv(true).off).toBeUndefined();
  });
});

describe("RespServer: direct receive by default", () => {
  test("no directRecv option: on where available, and a large SET really takes it", async () => {
    const r = await oneSet(undefined);
    expect(r.reply).toBe("+OK\r\n");
    if (!linux) return expect(r.off).toMatch(/Linux/);
    expect(r.off).toBeUndefined();
    expect(r.direct).toBeGreaterThan(0);
  });
  test("directRecv false: off with the reason, the same bytes stored, no direct bytes", async () => {
    const r = await oneSet(false);
    expect(r.reply).toBe("+OK\r\n");
    expect(r.off).toBe("kv_tier.resp.direct_recv is false");
    expect(r.direct).toBe(0);
  });
});

describe("kv_tier.resp.direct_recv in the config and the start log", () => {
  const env = { hostname: "h", dataDir: "/srv/herd" };
  const config = (shm: string, disk: string, extra: string, thread: "main" | "worker") =>
    parseConfigText(`node: { data_dir: ${disk} }\nkv_tier:\n  cpu: { size: 4MiB, path: ${shm} }\n  resp: { listen: 127.0.0.1:0${extra} }\n  thread: ${thread}\n`, "herd.yaml", env).config!;

  test("default true", () => {
    const { shm, disk } = tempDirs();
    expect(config(shm, disk, "", "main").kv_tier.resp!.direct_recv).toBe(true);
    expect(config(shm, disk, ", direct_recv: false", "main").kv_tier.resp!.direct_recv).toBe(false);
  });

  test.each([
    { thread: "main" as const, extra: "", on: true },
    { thread: "main" as const, extra: ", direct_recv: false", on: false },
    { thread: "worker" as const, extra: "", on: true },
    { thread: "worker" as const, extra: ", direct_recv: false", on: false },
  ])("thread $thread, key '$extra': one start line says which path, a large SET takes it, figures agree", async ({ thread, extra, on }) => {
    const { shm, disk } = tempDirs();
    const log = memoryLogger();
    const svc = new TierService({ config: config(shm, disk, extra, thread), clock: new RealClock(), bootId: "b1", log, ...(thread === "worker" ? { thread: true } : {}) });
    await svc.start();
    try {
      const lines = log.lines.filter((l) => l.includes("kv_tier.resp:"));
      expect(lines.length).toBe(1);
      const directOn = on && linux;
      expect(lines[0]).toContain(directOn ? "straight into shared memory" : "direct receive off");
      if (!on) expect(lines[0]).toContain("kv_tier.resp.direct_recv is false");
      const r = await transcript(svc.respPort!, cmd("SET", "w", valueOf("w", 1, 2 * MiB + 3)), (b) => b.length >= 5);
      expect(r.bytes.toString()).toBe("+OK\r\n");
      const f = await svc.freshFigures();
      if (directOn) expect(f.resp!.direct_recv_bytes).toBeGreaterThan(0); // really taken, on the tier's thread too
      else expect(f.resp!.direct_recv_bytes).toBe(0);
      expect(f.resp!.direct_recv).toBe(directOn ? "on" : on ? expect.stringMatching(/Linux/) : "kv_tier.resp.direct_recv is false");
    } finally {
      await svc.stop();
    }
  });
});

describe("TLS: no descriptor for direct reads", () => {
  test("a real TLS server socket: plainFd refuses it once the handshake is done", async () => {
    if (!peer("openssl", ["openssl", "version"])) return;
    const dir = mkdtempSync(join(tmpdir(), "herd-resp-tls-"));
    try {
      const pki = makePki(dir, ["resp"]);
      const seen: (number | undefined)[] = [];
      const l = Bun.listen({
        hostname: "127.0.0.1",
        port: 0,
        tls: { cert: readFileSync(pki.nodes.resp!.cert, "utf8"), key: readFileSync(pki.nodes.resp!.key, "utf8") },
        socket: {
          data(s) {
            seen.push(plainFd(s as never));
            s.end("+OK\r\n");
          },
        },
      });
      try {
        let got = "";
        const done = Promise.withResolvers<void>();
        const c = await Bun.connect({
          hostname: "127.0.0.1",
          port: l.port,
          tls: { ca: readFileSync(pki.ca, "utf8") },
          socket: {
            open: (s) => void s.write("PING\r\n"),
            data: (_s, d) => void (got += Buffer.from(d).toString()),
            close: () => done.resolve(),
            error: () => done.resolve(),
          },
        });
        await Promise.race([done.promise, Bun.sleep(5000)]);
        c.end();
        expect(got).toBe("+OK\r\n");
        expect(seen.length).toBeGreaterThan(0);
        expect(seen.every((fd) => fd === undefined)).toBe(true);
      } finally {
        l.stop(true);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
