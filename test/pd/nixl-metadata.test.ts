// herd's NIXL metadata service against an independent client (test/fixtures/nixl/tcpstore_client.py,
// written from NIXL's own client source) and byte-level checks of the wire subset.
import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { type Clock, RealClock, VirtualClock } from "../../src/core/clock.ts";
import { createLogger } from "../../src/core/log.ts";
import { NixlMetadataService, agentOfKey } from "../../src/pd/nixl-metadata.ts";
import { OP, TcpStoreProtocolError, VALIDATION_MAGIC, encodeBlob, parseRequests } from "../../src/pd/tcpstore-wire.ts";
import { PYTHON, peer } from "../helpers/peers.ts";

const log = createLogger("test", { level: "error" });
const CLIENT = join(import.meta.dir, "../fixtures/nixl/tcpstore_client.py");
const services: NixlMetadataService[] = [];
afterEach(() => {
  while (services.length) services.pop()!.stop();
});

function start(clock: Clock = new RealClock(), graceMs = 50): NixlMetadataService {
  const s = new NixlMetadataService({ host: "127.0.0.1", port: 0, clock, log, orphanGraceMs: graceMs });
  s.start();
  services.push(s);
  return s;
}

function le(bytes: number[]): Uint8Array {
  return new Uint8Array(bytes);
}
function str(s: string): number[] {
  const b = new TextEncoder().encode(s);
  const len = new Uint8Array(8);
  new DataView(len.buffer).setBigUint64(0, BigInt(b.length), true);
  return [...len, ...b];
}

describe("TCPStore wire subset (pure)", () => {
  test("parses whole requests and leaves a partial one for the next read", () => {
    const magic = [0xce, 0xf7, 0x85, 0x3c];
    const set = [OP.SET, ...str("/k"), ...str("vv")];
    const bytes = le([OP.VALIDATE, ...magic, ...set, OP.GET, ...str("/k").slice(0, 5)]);
    const { requests, used } = parseRequests(bytes);
    expect(requests).toEqual([
      { op: "validate", magic: VALIDATION_MAGIC },
      { op: "set", key: "/k", value: new TextEncoder().encode("vv") },
    ]);
    expect(used).toBe(5 + set.length);
  });

  test("an unknown query type or an oversized length is a protocol error", () => {
    expect(() => parseRequests(le([2]))).toThrow(TcpStoreProtocolError);
    const huge = new Uint8Array(9);
    huge[0] = OP.GET;
    new DataView(huge.buffer).setBigUint64(1, 1n << 40n, true);
    expect(() => parseRequests(huge)).toThrow(/key length/);
  });

  test("a value is a u64 little-endian length then the bytes", () => {
    expect([...encodeBlob(new Uint8Array([7, 8]))]).toEqual([2, 0, 0, 0, 0, 0, 0, 0, 7, 8]);
  });

  test("agent names come from NIXL's key layout", () => {
    expect(agentOfKey("//nixl/agents/metadata/agent-a/NULL_AGENT")).toBe("agent-a");
    expect(agentOfKey("/nixl/agents/metadata/agent-b/NULL_AGENT")).toBe("agent-b");
    expect(agentOfKey("/other")).toBeNull();
  });
});

describe("NixlMetadataService", () => {
  const havePy = () => peer("python3", [PYTHON, "-c", "import json, struct, socket"]);
  // Async: the server runs on this event loop, so a blocking spawn would deadlock it.
  const run = async (svc: NixlMetadataService, ops: unknown[]) => {
    const p = Bun.spawn([PYTHON, CLIENT, svc.endpoint, JSON.stringify(ops)], { stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`client failed: ${err}`);
    return JSON.parse(out);
  };
  const key = (agent: string) => `//nixl/agents/metadata/${agent}/NULL_AGENT`;

  test.skipIf(!havePy())("an independent client publishes, checks, fetches and deletes metadata", async () => {
    const svc = start();
    const partial = "//nixl/agents/partial/a/NULL_AGENT"; // one connection publishes for one agent
    expect(await run(svc, [["check", key("a")], ["set", key("a"), "blob-a"], ["check", key("a")], ["get", key("a")], ["set", partial, "blob-b"], ["multi_get", key("a"), partial], ["check", key("a"), key("zz")], ["delete", key("a")], ["delete", key("a")], ["check", key("a")]])).toEqual([
      "NOT_READY", null, "READY", "blob-a", null, ["blob-a", "blob-b"], "NOT_READY", 1, 0, "NOT_READY",
    ]);
  });

  test.skipIf(!havePy())("a peer that skips VALIDATE, sends an unknown query or GETs a missing key is disconnected", async () => {
    const svc = start();
    expect(await run(svc, [["raw", "02"]])).toEqual(["closed"]);
    expect(await run(svc, [["get", key("missing")]])).toEqual(["closed"]);
    // The server still serves others.
    expect(await run(svc, [["set", key("c"), "x"], ["get", key("c")]])).toEqual([null, "x"]);
  });

  test.skipIf(!havePy())("a closed agent connection's keys are deleted after the grace; dropAgent deletes at once", async () => {
    const svc = start(new RealClock(), 100);
    await run(svc, [["set", key("gone"), "1"]]); // the client exits: its connection closes
    expect(svc.keys()).toEqual([key("gone")]);
    for (let i = 0; i < 100 && svc.keys().length > 0; i++) await Bun.sleep(20);
    expect(svc.keys()).toEqual([]);
    const long = start(new VirtualClock(), 100); // virtual clock: the grace never passes here
    await run(long, [["set", key("a1"), "1"], ["set", "//nixl/agents/partial/a1/NULL_AGENT", "2"]]);
    await run(long, [["set", key("a2"), "3"]]); // another agent: its own connection
    expect(long.dropAgent("a1")).toBe(2);
    expect(long.keys()).toEqual([key("a2")]);
  });

  test("a key SET again by a new connection after the first one closed survives that close's grace", async () => {
    const clock = new VirtualClock();
    const svc = start(clock, 100);
    const conn = async (ops: Uint8Array) => {
      const sock = await Bun.connect({ hostname: "127.0.0.1", port: svc.port, socket: { data() {} } });
      sock.write(ops);
      await Bun.sleep(30);
      return sock;
    };
    const hello = le([OP.VALIDATE, 0xce, 0xf7, 0x85, 0x3c]);
    const setOp = (v: string) => le([...hello, OP.SET, ...str(key("x")), ...str(v)]);
    const a = await conn(setOp("from-a"));
    a.end(); // the agent restarts: its old connection closes, the new one publishes again within the grace
    await Bun.sleep(30);
    const b = await conn(setOp("from-b"));
    clock.advance(1000);
    expect(svc.keys()).toEqual([key("x")]);
    b.end();
    await Bun.sleep(30);
    clock.advance(1000);
    expect(svc.keys()).toEqual([]);
  });
});
