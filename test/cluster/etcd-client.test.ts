// etcd JSON-gateway details that decide correctness, checked against a real etcd where one is
// installed and against recorded gateway shapes otherwise: lease ids stay exact strings (they exceed
// 2^53), a keepalive on a dead lease is HTTP 200 without TTL, prefixes become range_end correctly.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { EtcdClient, prefixEnd, revision } from "../../src/cluster/etcd-client.ts";
import { peer } from "../helpers/peers.ts";
import { EtcdServer } from "./harness/cluster.ts";

const fakeFetch = (body: string, status = 200) => (async () => new Response(body, { status })) as unknown as typeof fetch;

describe("etcd client (gateway shapes)", () => {
  test("lease ids above 2^53 survive exactly", async () => {
    const id = "7587869125356230001"; // > Number.MAX_SAFE_INTEGER; Number() would round it
    expect(String(Number(id))).not.toBe(id);
    const c = new EtcdClient(["http://x"], fakeFetch(JSON.stringify({ header: {}, ID: id, TTL: "10" })));
    expect(await c.grant(10)).toBe(id);
  });

  test("keepalive: TTL when alive, 0 for a dead lease (200 without TTL)", async () => {
    const alive = new EtcdClient(["http://x"], fakeFetch(`{"result":{"header":{},"ID":"1","TTL":"10"}}\n`));
    expect(await alive.keepalive("1")).toBe(10);
    const dead = new EtcdClient(["http://x"], fakeFetch(`{"result":{"header":{},"ID":"1"}}\n`));
    expect(await dead.keepalive("1")).toBe(0);
  });

  test("prefix range_end increments the last byte; revisions must be safe integers", () => {
    expect(Buffer.from(prefixEnd("/herd/"), "base64").toString()).toBe("/herd0");
    expect(Buffer.from(prefixEnd("a\xff"), "base64").toString("latin1")).not.toBe("");
    expect(revision("42")).toBe(42);
    expect(revision(undefined)).toBe(0);
    expect(() => revision("9007199254740993")).toThrow(/not a safe integer/);
  });
});

const run = peer("etcd", ["etcd", "--version"]);
describe("etcd client against a real etcd", () => {
  const etcd = new EtcdServer();
  beforeAll(async () => {
    if (run) await etcd.start();
  }, 30_000);
  afterAll(() => etcd.destroy());

  test.skipIf(!run)("lease, put, range, fencing compare, revoke, keepalive on the revoked lease", async () => {
    const c = new EtcdClient([etcd.url]);
    const lease = await c.grant(5);
    expect(lease).toMatch(/^\d+$/);
    const rev = await c.put("/t/a", "1", lease);
    const r = await c.range("/t/");
    expect(r.kvs.map((k) => [k.key, k.value, k.lease])).toEqual([["/t/a", "1", lease]]);
    expect(await c.stillCreatedAt("/t/a", rev)).toBe(true);
    expect(await c.stillCreatedAt("/t/a", rev + 1)).toBe(false);
    expect(await c.keepalive(lease)).toBe(5);
    await c.revoke(lease);
    expect(await c.keepalive(lease)).toBe(0); // 200 without TTL: lost
    expect((await c.range("/t/")).kvs).toEqual([]);
    expect(await c.leader("/t/election")).toBeNull();
  });
});
