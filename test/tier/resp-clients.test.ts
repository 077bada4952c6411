// Real third-party clients (redis-cli, redis-benchmark), a client as strict as LMCache's native
// resp:// connector, HTTP probes, output bounds, and seeded fuzzing of the parser and the server.
import { afterAll, describe, expect, test } from "bun:test";
import { peer } from "../helpers/peers.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { RespReader, REDIS_LIMITS } from "../../src/tier/resp/parser.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { cleanupDirs, openTier, valueOf } from "./helpers.ts";
import { cmd, transcript } from "./resp-helpers.ts";

afterAll(cleanupDirs);
const hasTools = peer("redis-tools", ["redis-cli", "--version"]) && peer("redis-tools", ["redis-benchmark", "--version"]);

function server(password?: string, extra: Partial<ConstructorParameters<typeof RespServer>[0]> = {}) {
  const { tier } = openTier({ cpuBytes: 64 << 20, ssdBytes: 256 << 20 });
  const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, ...(password ? { password } : {}), ...extra });
  s.start();
  return { s, tier };
}

const cli = async (port: number, args: string[], stdin?: Uint8Array) => {
  const p = Bun.spawn(["redis-cli", "-p", String(port), ...args], { stdin: stdin ?? "ignore", stdout: "pipe", stderr: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  return out.trim();
};

describe.skipIf(!hasTools)("redis-cli and redis-benchmark", () => {
  test("redis-cli: SET, GET, EXISTS, DEL, binary value from stdin, AUTH", async () => {
    const { s } = server("pw");
    const a = ["--no-auth-warning", "-a", "pw"];
    expect(await cli(s.port, ["GET", "x"])).toContain("NOAUTH");
    expect(await cli(s.port, [...a, "SET", "x", "hello"])).toBe("OK");
    expect(await cli(s.port, [...a, "GET", "x"])).toBe("hello");
    expect(await cli(s.port, [...a, "EXISTS", "x", "y"])).toBe("1");
    const bin = valueOf("bin", 1, 100_000);
    expect(await cli(s.port, [...a, "-x", "SET", "bin"], bin)).toBe("OK");
    const p = Bun.spawn(["redis-cli", "-p", String(s.port), ...a, "--raw", "GET", "bin"], { stdout: "pipe" });
    const raw = new Uint8Array(await new Response(p.stdout).arrayBuffer());
    expect(Buffer.from(raw.subarray(0, bin.length)).equals(Buffer.from(bin))).toBe(true);
    expect(await cli(s.port, [...a, "DEL", "x", "bin"])).toBe("2");
    expect(await cli(s.port, [...a, "PING"])).toBe("PONG");
    s.stop();
  });

  test("redis-benchmark: SET and GET of 1 KiB values over 10 clients, no errors", async () => {
    const { s, tier } = server();
    const p = Bun.spawn(["redis-benchmark", "-p", String(s.port), "-t", "set,get", "-n", "2000", "-c", "10", "-d", "1024", "-r", "100", "-q"], {
      stdout: "pipe",
      stderr: "pipe",
    });
    const out = await new Response(p.stdout).text();
    expect(await p.exited).toBe(0);
    expect(out).toMatch(/SET: [\d.]+ requests per second/);
    expect(out).toMatch(/GET: [\d.]+ requests per second/);
    expect(s.stats.protocol_errors).toBe(0);
    expect(tier.list().some((k) => k.startsWith("key:"))).toBe(true);
    expect(tier.get(tier.list()[0]!)?.length).toBe(1024);
    s.stop();
  });
});

describe("LMCache-strict client, HTTP, bounds", () => {
  test("a client with LMCache's resp:// expectations: exact +OK, :0/:1 and $<chunk>", async () => {
    const { s } = server("pw");
    const chunk = valueOf("chunk", 1, 256 * 1024);
    const key = "meta-llama/Llama-3.1-8B@1@0@8f3a@bfloat16";
    const auth = "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n";
    const set = Buffer.concat([Buffer.from(`*3\r\n$3\r\nSET\r\n$${key.length}\r\n${key}\r\n$${chunk.length}\r\n`), chunk, Buffer.from("\r\n")]);
    const rest = Buffer.from(
      `*2\r\n$6\r\nEXISTS\r\n$${key.length}\r\n${key}\r\n*2\r\n$6\r\nEXISTS\r\n$3\r\nnop\r\n*2\r\n$3\r\nGET\r\n$${key.length}\r\n${key}\r\n*2\r\n$3\r\nGET\r\n$3\r\nnop\r\n*2\r\n$3\r\nDEL\r\n$${key.length}\r\n${key}\r\n`,
    );
    const want = Buffer.concat([Buffer.from(`+OK\r\n+OK\r\n:1\r\n:0\r\n$${chunk.length}\r\n`), chunk, Buffer.from("\r\n$-1\r\n:1\r\n")]);
    const { bytes } = await transcript(s.port, Buffer.concat([Buffer.from(auth), set, rest]), (b) => b.length >= want.length);
    expect(bytes.equals(want)).toBe(true);
    s.stop();
  });

  test("redis-py's handshake (LMCache redis://): CLIENT SETINFO gets -ERR, which redis-py ignores; the connection stays usable", async () => {
    // redis-py asyncio/connection.py on_connect pipelines CLIENT SETINFO LIB-NAME/LIB-VER and
    // swallows ResponseError for both replies.
    const { s } = server();
    const input = Buffer.concat([cmd("CLIENT", "SETINFO", "LIB-NAME", "redis-py"), cmd("CLIENT", "SETINFO", "LIB-VER", "5.0.1"), cmd("SET", "kkv_bytes", "x"), cmd("EXISTS", "kkv_bytes")]);
    const { bytes } = await transcript(s.port, input, (b) => b.toString().endsWith(":1\r\n"));
    expect(bytes.toString()).toBe(
      "-ERR unknown command 'CLIENT', with args beginning with: 'SETINFO' 'LIB-NAME' 'redis-py' \r\n" +
        "-ERR unknown command 'CLIENT', with args beginning with: 'SETINFO' 'LIB-VER' '5.0.1' \r\n+OK\r\n:1\r\n",
    );
    s.stop();
  });

  test("HTTP-looking input closes the connection without a reply", async () => {
    const { s } = server();
    for (const probe of ["GET / HTTP/1.1\r\nHost: x\r\n\r\n", "POST /v1/completions HTTP/1.1\r\n\r\n", cmd("Host:", "x").toString("latin1")]) {
      const r = await transcript(s.port, probe);
      expect(r.closed).toBe(true);
      expect(r.bytes.length).toBe(0);
    }
    expect(s.stats.http_closed).toBe(3);
    s.stop();
  });

  test("output is bounded: a client that never reads is closed at the hard limit", async () => {
    const { s, tier } = server(undefined, { outputSoftBytes: 1 << 20, outputHardBytes: 8 << 20 });
    tier.put("v", valueOf("v", 0, 4 << 20));
    // 64 pipelined GETs of 4 MiB = 256 MiB of replies to a client that does not read.
    const sock = await Bun.connect({ hostname: "127.0.0.1", port: s.port, socket: { data() {} } });
    sock.pause?.();
    sock.write(Buffer.concat(Array.from({ length: 64 }, () => cmd("GET", "v"))));
    for (let i = 0; i < 50 && s.stats.output_overflow_closed === 0 && s.stats.commands < 64; i++) await Bun.sleep(10);
    // Either the soft limit stopped execution (commands < 64) or the hard limit closed it; never 256 MiB queued.
    expect(s.stats.commands).toBeLessThan(64);
    expect(s.stats.output_peak_bytes).toBeGreaterThan(0); // the socket did push back
    expect(s.stats.output_peak_bytes).toBeLessThanOrEqual((1 << 20) + (4 << 20) + 64);
    sock.end();
    s.stop();
  });

  test("a non-loopback listener without a password is refused", () => {
    const { tier } = openTier({ cpuBytes: 1 << 20 });
    expect(() => new RespServer({ host: "0.0.0.0", port: 0, store: tier })).toThrow(/requires a password/);
    expect(() => new RespServer({ host: "0.0.0.0", port: 0, store: tier, password: "x" })).not.toThrow();
  });

  test("max clients: connections beyond the limit are refused with Redis' message", async () => {
    const { s } = server(undefined, { maxClients: 1 });
    const first = await Bun.connect({ hostname: "127.0.0.1", port: s.port, socket: { data() {} } });
    const r = await transcript(s.port, cmd("PING"));
    expect(r.bytes.toString()).toBe("-ERR max number of clients reached\r\n");
    expect(r.closed).toBe(true);
    first.end();
    s.stop();
  });
});

describe("fuzz (seeded)", () => {
  const seeds = [1, 2, 3, 4, 5, 6, 7, 8];
  const grammar = (rng: SeededRng): Buffer => {
    const parts: Buffer[] = [];
    for (let i = 0; i < 20; i++) {
      const k = `k${rng.int(5)}`;
      const pick = rng.int(6);
      if (pick === 0) parts.push(cmd("SET", k, valueOf(k, i, rng.int(40_000))));
      else if (pick === 1) parts.push(cmd("GET", k));
      else if (pick === 2) parts.push(cmd("EXISTS", k));
      else if (pick === 3) parts.push(cmd("DEL", k));
      else if (pick === 4) parts.push(Buffer.from(`PING\r\n`));
      else parts.push(cmd("AUTH", "x"));
    }
    return Buffer.concat(parts);
  };

  test.each(seeds)("seed %i: any split of the same bytes parses identically; mutations never throw", (seed) => {
    const rng = new SeededRng(seed);
    const input = grammar(rng);
    const parseAll = (chunks: Uint8Array[], authed: boolean) => {
      const r = new RespReader(REDIS_LIMITS, () => !authed);
      const out: string[] = [];
      for (const c of chunks) {
        r.push(c);
        for (let p = r.next(); p; p = r.next()) out.push("error" in p ? `E:${p.error}` : p.args.map((a) => Bun.hash.crc32(a)).join(","));
      }
      return out;
    };
    const whole = parseAll([input], true);
    const chunks: Uint8Array[] = [];
    for (let at = 0; at < input.length; ) {
      const n = 1 + rng.int(rng.float() < 0.5 ? 7 : 70_000);
      chunks.push(input.subarray(at, at + n));
      at += n;
    }
    expect(parseAll(chunks, true)).toEqual(whole);
    expect(whole.length).toBe(20);
    for (let m = 0; m < 200; m++) {
      const mutated = Buffer.from(input);
      for (let j = 0; j < 1 + rng.int(8); j++) mutated[rng.int(mutated.length)] = rng.int(256);
      const out = parseAll([mutated.subarray(0, rng.int(mutated.length))], rng.float() < 0.5);
      expect(out.filter((x) => x.startsWith("E:")).length).toBeLessThanOrEqual(1); // errors are final
    }
  });

  test("the server survives seeded garbage and still answers", async () => {
    const { s } = server("pw");
    const rng = new SeededRng(99);
    for (let i = 0; i < 30; i++) {
      const g = Buffer.alloc(1 + rng.int(5000));
      for (let j = 0; j < g.length; j++) g[j] = rng.float() < 0.3 ? "*$\r\n0123456789"[rng.int(14)]!.charCodeAt(0) : rng.int(256);
      // Garbage that is an unfinished command (seed 99's 16th: 27 bytes, no LF) gets no reply, as from
      // Redis: wait 250 ms for one, not the 5 s bound (one such wait used up the test's 5 s timeout).
      await transcript(s.port, g, (b) => b.includes("\r\n"), 250);
    }
    const r = await transcript(s.port, Buffer.concat([cmd("AUTH", "pw"), cmd("PING")]), (b) => b.toString().endsWith("+PONG\r\n"));
    expect(r.bytes.toString()).toBe("+OK\r\n+PONG\r\n");
    s.stop();
  });
});
