// The sim engine's RESP2 client (offload to herd's tier): replies parsed however the bytes are split,
// pipelined commands answered in order against a real redis-server, the in-flight bound, URLs.
import { expect, test } from "bun:test";
import { RespClient, bytesNeeded, encodeCommand, parseReply, parseRespUrl } from "../../../src/engine/sim/resp-client.ts";
import { peer } from "../../helpers/peers.ts";
import { startRedis } from "../../tier/resp-helpers.ts";

test("parseReply: every reply type, incomplete input waits, at every split point", () => {
  const wire = Buffer.from("+OK\r\n-ERR no\r\n:1\r\n$-1\r\n$5\r\nab\r\nc\r\n:0\r\n", "latin1");
  const all: unknown[] = [];
  let at = 0;
  for (let r = parseReply(wire, at); r !== null; r = at < wire.length ? parseReply(wire, at) : null) {
    all.push(r.reply);
    at = r.next;
  }
  expect(all).toEqual(["OK", new Error("ERR no"), 1, null, new Uint8Array(Buffer.from("ab\r\nc")), 0]);
  // Any prefix of the bytes parses to a prefix of the replies (the rest waits for more input).
  for (let cut = 0; cut <= wire.length; cut++) {
    const part = wire.subarray(0, cut);
    const got: unknown[] = [];
    for (let p = 0, r = parseReply(part, 0); r !== null; r = p < part.length ? parseReply(part, p) : null) {
      got.push(r.reply);
      p = r.next;
    }
    expect(got).toEqual(all.slice(0, got.length));
    if (cut === wire.length) expect(got.length).toBe(6);
  }
  expect([bytesNeeded(Buffer.from("$5\r\nab")), bytesNeeded(Buffer.from("$5")), bytesNeeded(Buffer.from("$-1\r\n")), bytesNeeded(Buffer.from("+O"))]).toEqual([11, 0, 0, 0]); // "$5\r\n" + 5 + "\r\n"
  expect(Buffer.from(encodeCommand(["SET", "k", new Uint8Array([0, 13, 10])])).toString("latin1")).toBe("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\n\x00\r\n\r\n");
});

test("parseRespUrl: resp:// and redis://, password, IPv6; anything else refused", () => {
  expect(parseRespUrl("resp://127.0.0.1:6390")).toEqual({ host: "127.0.0.1", port: 6390, password: null });
  expect(parseRespUrl("redis://:p%40ss@localhost:1/")).toEqual({ host: "localhost", port: 1, password: "p@ss" });
  expect(parseRespUrl("resp://[::1]:6390")).toEqual({ host: "::1", port: 6390, password: null });
  for (const bad of ["http://a:1", "resp://a", "resp://a:0", "resp://a:70000"]) expect(() => parseRespUrl(bad)).toThrow();
});

test.skipIf(!peer("redis-server", ["redis-server", "--version"]))("against redis-server: pipelined SET/EXISTS/GET of 1 MiB values in order; the in-flight bound refuses, never queues", async () => {
  const { port, proc } = await startRedis();
  try {
    const c = await RespClient.connect(`resp://127.0.0.1:${port}`, 8);
    const big = new Uint8Array(1 << 20).map((_, i) => i & 255);
    const replies = await Promise.all([c.command(["SET", "a", big]), c.command(["EXISTS", "a"]), c.command(["EXISTS", "b"]), c.command(["GET", "a"]), c.command(["GET", "b"])]);
    expect(replies.slice(0, 3)).toEqual(["OK", 1, 0]);
    expect(Buffer.from(replies[3] as Uint8Array).equals(Buffer.from(big))).toBe(true);
    expect(replies[4]).toBeNull();
    const many = Array.from({ length: 10 }, () => c.command(["PING"]));
    const got = await Promise.all(many);
    expect(got.filter((r) => r === "PONG").length).toBe(8);
    expect(got.filter((r) => r instanceof Error && r.message === "too many commands in flight").length).toBe(2);
    c.close();
    expect(await c.command(["PING"])).toEqual(new Error("not connected"));
  } finally {
    proc.kill();
  }
});
