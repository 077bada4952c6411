// The RESP server against the real redis-server: the same bytes in, the same bytes out, for every
// command and protocol error herd implements; plus redis-cli and redis-benchmark as real clients.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { peer } from "../helpers/peers.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { cleanupDirs, openTier } from "./helpers.ts";
import { cmd, startRedis, transcript } from "./resp-helpers.ts";

const hasRedis = peer("redis-server", ["redis-server", "--version"]);
const hasTools = peer("redis-tools", ["redis-cli", "--version"]) && peer("redis-tools", ["redis-benchmark", "--version"]);
const SENTINEL = cmd("PING");
const endsWithSentinel = (b: Buffer) => /(\+PONG|-NOAUTH Authentication required\.)\r\n$/.test(b.toString("latin1"));

const plainCases: [string, Buffer | string][] = [
  ["set/get/exists/del", Buffer.concat([cmd("SET", "k", "v1"), cmd("GET", "k"), cmd("EXISTS", "k", "k", "nope"), cmd("DEL", "k", "k"), cmd("GET", "k")])],
  ["binary value", Buffer.concat([cmd("SET", "b", new Uint8Array([0, 13, 10, 255])), cmd("GET", "b")])],
  ["ping", Buffer.concat([cmd("PING", "hello"), cmd("PING", "a", "b")])],
  ["inline", "SET i 123\r\nGET i\r\nEXISTS i\r\n"],
  ["arity", Buffer.concat([cmd("GET"), cmd("SET", "a"), cmd("DEL"), Buffer.from("GET\r\n")])],
  ["unknown", Buffer.concat([cmd("NOPE"), cmd("FOO", "GET", "save"), cmd("BAR", "x".repeat(100), "y".repeat(40), "z"), cmd("Q".repeat(200)), cmd("E", "a\r\nb")])],
  ["auth without password", cmd("AUTH", "pw")],
  ["select 0", cmd("SELECT", "0")],
  ["pipelined empty lines", "\r\n\r\nPING\r\n"],
  ["bad multibulk", "*abc\r\n"],
  ["bad bulk", "*1\r\n$-5\r\n"],
  ["expected $", "*1\r\nX\r\n"],
  ["quit", Buffer.concat([cmd("QUIT"), cmd("PING")])],
];
const authCases: [string, Buffer | string][] = [
  ["noauth", Buffer.concat([cmd("GET", "a"), cmd("PING"), cmd("NOPE")])],
  ["wrongpass", Buffer.concat([cmd("AUTH", "bad"), cmd("AUTH", "bob", "secret"), cmd("AUTH", "secret"), cmd("GET", "a")])],
  ["auth user", Buffer.concat([cmd("AUTH", "default", "secret"), cmd("SET", "a", "b")])],
  ["unauth multibulk", "*11\r\n"],
  ["unauth bulk", "*1\r\n$20000\r\n"],
  ["too big inline", "A".repeat(70 * 1024)],
  ["authed lifts limits", Buffer.concat([cmd("AUTH", "secret"), cmd("SET", "big", "z".repeat(20000)), cmd("EXISTS", "big")])],
];

describe.skipIf(!hasRedis)("byte-exact against redis-server", () => {
  let redis: { port: number; proc: Subprocess };
  let redisAuth: { port: number; proc: Subprocess };
  const herd = new RespServer({ host: "127.0.0.1", port: 0, store: openTier({ cpuBytes: 4 << 20 }).tier });
  const herdAuth = new RespServer({ host: "127.0.0.1", port: 0, store: openTier({ cpuBytes: 4 << 20 }).tier, password: "secret" });
  beforeAll(async () => {
    redis = await startRedis();
    redisAuth = await startRedis(["--requirepass", "secret"]);
    herd.start();
    herdAuth.start();
  });
  afterAll(() => {
    redis.proc.kill();
    redisAuth.proc.kill();
    herd.stop();
    herdAuth.stop();
    cleanupDirs();
  });

  test.each(plainCases)("%s", async (_n, input) => {
    const want = await transcript(redis.port, Buffer.concat([Buffer.from(input), SENTINEL]), endsWithSentinel);
    const got = await transcript(herd.port, Buffer.concat([Buffer.from(input), SENTINEL]), endsWithSentinel);
    expect(got.bytes.toString("latin1")).toBe(want.bytes.toString("latin1"));
    expect(got.closed).toBe(want.closed);
  });

  test.each(authCases)("with password: %s", async (_n, input) => {
    const want = await transcript(redisAuth.port, Buffer.concat([Buffer.from(input), SENTINEL]), endsWithSentinel);
    const got = await transcript(herdAuth.port, Buffer.concat([Buffer.from(input), SENTINEL]), endsWithSentinel);
    expect(got.bytes.toString("latin1")).toBe(want.bytes.toString("latin1"));
    expect(got.closed).toBe(want.closed);
  });
});
