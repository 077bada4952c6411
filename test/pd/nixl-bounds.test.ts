// Issue 22 row 10: herd's NIXL metadata store binds loopback by default, keys belong to the live
// connection that set them (NIXL agents publish and delete only their own: ai-dynamo/nixl
// src/core/nixl_tcpstore_metadata_backend.cpp), one connection cannot fill the store for the
// others, connections that never VALIDATE (or, when configured, go idle) are closed, and warnings
// about refused clients are rate-limited.
import { afterEach, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { VirtualClock } from "../../src/core/clock.ts";
import { createLogger } from "../../src/core/log.ts";

type LogRecord = { msg: string; suppressed?: number };
import { NixlMetadataService, type NixlMetadataOptions } from "../../src/pd/nixl-metadata.ts";
import { NixlMetadataThread } from "../../src/pd/nixl-thread.ts";
import { RealClock } from "../../src/core/clock.ts";
import { OP } from "../../src/pd/tcpstore-wire.ts";
import { parseConfigText } from "../../src/config/index.ts";
import { exposureWarnings } from "../../src/daemon/exposure.ts";

const services: NixlMetadataService[] = [];
afterEach(() => {
  while (services.length) services.pop()!.stop();
});

function start(extra: Partial<NixlMetadataOptions> = {}, lines: LogRecord[] = []) {
  const clock = new VirtualClock();
  const log = createLogger("test", { level: "warn", json: true, sink: { write: (l) => lines.push(JSON.parse(l)) } });
  const svc = new NixlMetadataService({ host: "127.0.0.1", port: 0, clock, log, orphanGraceMs: 100, ...extra });
  svc.start();
  services.push(svc);
  return { svc, clock };
}

const u64 = (n: number) => {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(n), true);
  return [...b];
};
const str = (s: string) => {
  const b = new TextEncoder().encode(s);
  return [...u64(b.length), ...b];
};
const HELLO = [OP.VALIDATE, 0xce, 0xf7, 0x85, 0x3c];
const set = (k: string, v: string) => [OP.SET, ...str(k), ...str(v)];
const del = (k: string) => [OP.DELETE_KEY, ...str(k)];
const key = (agent: string, label = "metadata") => `/nixl/agents/${label}/${agent}/NULL_AGENT`;

async function conn(port: number) {
  const got: number[] = [];
  let closed = false;
  const sock: Socket<undefined> = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_s, d) {
        got.push(...d);
      },
      close() {
        closed = true;
      },
    },
  });
  return {
    send: async (bytes: number[]) => {
      sock.write(new Uint8Array(bytes));
      await Bun.sleep(30);
    },
    got,
    closed: () => closed,
    end: () => sock.end(),
  };
}

describe("NIXL metadata store ownership and bounds", () => {
  test("another live connection can neither overwrite nor delete an agent's key; reads stay open", async () => {
    const { svc } = start();
    const a = await conn(svc.port);
    await a.send([...HELLO, ...set(key("a"), "mine")]);
    const b = await conn(svc.port);
    await b.send([...HELLO, ...del(key("a"))]);
    expect(b.got).toEqual(u64(0)); // nothing deleted
    expect(svc.keys()).toEqual([key("a")]);
    await b.send([OP.GET, ...str(key("a"))]);
    expect(b.got.slice(8)).toEqual([...u64(4), ...new TextEncoder().encode("mine")]);
    await b.send(set(key("a"), "forged"));
    expect(b.closed()).toBe(true);
    expect(svc.stats.foreign_writes).toBe(1);
    expect(svc.stats.foreign_deletes).toBe(1);
    // The owner itself may delete its key.
    await a.send(del(key("a")));
    expect(a.got).toEqual(u64(1));
    a.end();
  });

  test("a connection that published for one agent cannot publish for another", async () => {
    const { svc } = start();
    const a = await conn(svc.port);
    await a.send([...HELLO, ...set(key("a"), "1"), ...set(key("a", "partial"), "2"), ...set(key("b"), "3")]);
    expect(a.closed()).toBe(true);
    expect(svc.keys()).toEqual([key("a"), key("a", "partial")]);
  });

  test("per-connection key quota: one client cannot fill the store for the others", async () => {
    const { svc } = start({ keysPerConnectionMax: 4, keysMax: 100 });
    const greedy = await conn(svc.port);
    await greedy.send([...HELLO, ...Array.from({ length: 10 }, (_, i) => set(`/other/${i}`, "x")).flat()]);
    expect(greedy.closed()).toBe(true);
    expect(svc.keys().length).toBe(4);
    const agent = await conn(svc.port);
    await agent.send([...HELLO, ...set(key("ok"), "v"), OP.CHECK, ...u64(1), ...str(key("ok"))]);
    expect(agent.got).toEqual([0]); // READY
    agent.end();
  });

  test("no VALIDATE within validateTimeoutMs, or idle past idleTimeoutMs: closed; refusals warn at most once per 10 s", async () => {
    const lines: LogRecord[] = [];
    const { svc, clock } = start({ validateTimeoutMs: 1000, idleTimeoutMs: 60_000 }, lines);
    const silent = await conn(svc.port);
    const agent = await conn(svc.port);
    await agent.send(HELLO);
    clock.advance(1500);
    await Bun.sleep(30);
    expect(silent.closed()).toBe(true);
    expect(agent.closed()).toBe(false);
    clock.advance(60_000);
    await Bun.sleep(30);
    expect(agent.closed()).toBe(true);
    expect(svc.stats.timeouts).toBe(2);
    const bad = await Promise.all(Array.from({ length: 20 }, () => conn(svc.port)));
    for (const b of bad) await b.send([2]); // an unknown query type
    expect(bad.every((b) => b.closed())).toBe(true);
    const warns = lines.filter((l) => l.msg === "nixl metadata client disconnected");
    expect(warns.length).toBe(2); // the two timeouts, 60 s apart; the 20 refusals fall in the second's 10 s window
    clock.advance(10_000);
    const one = await conn(svc.port);
    await one.send([2]);
    const after = lines.filter((l) => l.msg === "nixl metadata client disconnected");
    expect(after.length).toBe(3);
    expect(after[2]!.suppressed).toBe(20);
  });

  test("the store binds loopback by default; another host is a start-up exposure warning", () => {
    const yaml = (pd: string) => `models:\n  - { name: q, tokenizer: "" }\nengines:\n  - { kind: sim, model: q, role: prefill }\n  - { kind: sim, model: q, role: decode }\n${pd}`;
    const dflt = parseConfigText(yaml("")).config!;
    expect(dflt.pd.nixl_metadata_host).toBe("127.0.0.1");
    const plans = [{ role: "prefill" }, { role: "decode" }] as unknown as Parameters<typeof exposureWarnings>[1];
    expect(exposureWarnings(dflt, plans).filter((w) => w.includes("nixl"))).toEqual([]);
    const open = parseConfigText(yaml("pd:\n  nixl_metadata_host: 10.0.0.5\n")).config!;
    expect(exposureWarnings(open, plans).some((w) => w.startsWith("pd.nixl_metadata_host 10.0.0.5: herd's NIXL metadata store has no authentication"))).toBe(true);
  });
});

describe("NIXL metadata store on its own thread (the daemon's)", () => {
  test("serves the wire from a worker: endpoint known after start, log lines forwarded, stop closes it", async () => {
    const lines: LogRecord[] = [];
    const log = createLogger("test", { level: "warn", json: true, sink: { write: (l) => lines.push(JSON.parse(l)) } });
    const t = new NixlMetadataThread({ host: "127.0.0.1", port: 0, clock: new RealClock(), log });
    await t.start();
    expect(t.port).toBeGreaterThan(0);
    expect(t.endpoint).toBe(`127.0.0.1:${t.port}`);
    const a = await conn(t.port);
    await a.send([...HELLO, ...set(key("a"), "md"), OP.CHECK, ...u64(1), ...str(key("a"))]);
    expect(a.got).toEqual([0]);
    const bad = await conn(t.port);
    await bad.send([2]);
    expect(bad.closed()).toBe(true);
    for (let i = 0; i < 50 && lines.length === 0; i++) await Bun.sleep(10);
    expect(lines[0]!.msg).toBe("nixl metadata client disconnected");
    const mem = await t.memory(true, 10_000); // the thread's own heap (GET /admin/debug/memory)
    expect("error" in mem ? mem.error : mem.gc).toBe(true);
    a.end();
    await t.stop();
    expect(await t.memory(true, 10_000)).toEqual({ error: "not_running" });
    await expect(Bun.connect({ hostname: "127.0.0.1", port: t.port, socket: { data() {} } })).rejects.toThrow();
  });
});
