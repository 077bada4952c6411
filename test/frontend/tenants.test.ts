// Tenants: keys as objects with limits (429 + OpenAI's x-ratelimit-* headers, on every answer of a
// limited key), per-tenant metrics by name never key, and herd's fair queue (priority, then VTC
// fair share, aging against starvation, bounded with a deadline) on a virtual clock.
import { afterAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { VirtualClock } from "../../src/core/clock.ts";
import { HerdError } from "../../src/core/errors.ts";
import type { QueueConfig } from "../../src/config/types.ts";
import { SHARE_WINDOW_MS, FairQueue } from "../../src/frontend/fair-queue.ts";
import { TenantLimited, Tenants, resetText } from "../../src/frontend/tenants.ts";
import { ClientGone } from "../../src/request/gate.ts";
import { startSimEngine, type SimEngine } from "../../src/engine/sim/server.ts";
import { MODEL, startHerd, startUpstream, type Herd } from "./harness.ts";

const entry = (o: Partial<{ key: string; key_file: string; name: string; rpm: number; tpm: number; concurrency: number; priority: number }>) => ({
  key: "", key_file: "", name: "", rpm: 0, tpm: 0, concurrency: 0, priority: 0, ...o,
});

describe("Tenants (limits on a virtual clock)", () => {
  test("rpm: a bucket refilled continuously; the 429 carries OpenAI's headers and Retry-After", () => {
    const clock = new VirtualClock(0);
    const t = new Tenants([entry({ key: "k1", name: "team-a", rpm: 2 }), "plain"], clock);
    const a = t.admit("Bearer k1", 10);
    expect(a.tenant.name).toBe("team-a");
    expect(a.headers["x-ratelimit-limit-requests"]).toBe("2");
    expect(a.headers["x-ratelimit-remaining-requests"]).toBe("1");
    expect(a.headers["x-ratelimit-reset-requests"]).toBe("30s");
    t.admit("Bearer k1", 10);
    let err: TenantLimited | null = null;
    try {
      t.admit("Bearer k1", 10);
    } catch (e) {
      err = e as TenantLimited;
    }
    expect(err?.kind).toBe("requests");
    expect(err!.error.status).toBe(429);
    expect(err!.error.code).toBe("rate_limit_exceeded");
    expect(err!.error.headers["retry-after"]).toBe("30");
    expect(err!.error.headers["x-ratelimit-remaining-requests"]).toBe("0");
    clock.advance(30_000);
    expect(t.admit("Bearer k1", 10).headers["x-ratelimit-remaining-requests"]).toBe("0");
    // A bare key has no limits and no headers; a wrong key is no tenant.
    for (let i = 0; i < 10; i++) expect(t.admit("Bearer plain", 1).headers).toEqual({});
    expect(t.identify("Bearer nope")).toBeNull();
    expect(t.identify("Bearer plain")?.name).toBe("tenant-1");
  });

  test("tpm charges prompt + max_tokens; concurrency counts until release; key_file is read", () => {
    const clock = new VirtualClock(0);
    const t = new Tenants([entry({ key_file: "/k", name: "b", tpm: 1000, concurrency: 2 })], clock, (p) => (p === "/k" ? " secret\n" : ""));
    const x = t.admit("Bearer secret", 600);
    expect(x.headers["x-ratelimit-remaining-tokens"]).toBe("400");
    expect(() => t.admit("Bearer secret", 600)).toThrow(TenantLimited);
    const y = t.admit("Bearer secret", 300);
    try {
      t.admit("Bearer secret", 1);
      throw new Error("expected the concurrency limit");
    } catch (e) {
      expect((e as TenantLimited).kind).toBe("concurrency");
    }
    x.release();
    x.release(); // once only
    y.release();
    clock.advance(60_000);
    expect(t.admit("Bearer secret", 1).headers["x-ratelimit-remaining-tokens"]).toBe("999");
  });

  test("reset text in OpenAI's format", () => {
    expect(resetText(20)).toBe("20ms");
    expect(resetText(1500)).toBe("1.5s");
    expect(resetText(360_000)).toBe("6m0s");
  });
});

const qcfg = (o: Partial<QueueConfig> = {}): QueueConfig => ({ worker_slots: 1, max_waiting: 100, timeout_ms: 60_000, aging_ms: 0, headroom_slots: 0, ...o });

describe("FairQueue (virtual clock)", () => {
  async function drain(q: FairQueue, order: string[], grants: Promise<{ release: () => void }>[], labels: string[]): Promise<void> {
    // Release the holder, then each grant in the order it comes.
    const pending = grants.map((g, i) => g.then((x) => ({ x, i })));
    const done = new Set<number>();
    while (done.size < pending.length) {
      const { x, i } = await Promise.race(pending.filter((_, k) => !done.has(k)));
      done.add(i);
      order.push(labels[i]!);
      x.release();
    }
  }

  test("a flooding tenant does not starve a light one: VTC releases by least service", async () => {
    const clock = new VirtualClock(0);
    const q = new FairQueue(clock, () => qcfg(), () => 1);
    const holder = await q.acquire(MODEL, "a", 0, 100, null);
    const labels: string[] = [];
    const grants: Promise<{ release: () => void }>[] = [];
    for (let i = 0; i < 8; i++) (grants.push(q.acquire(MODEL, "a", 0, 100, null)), labels.push("a"));
    for (let i = 0; i < 2; i++) (grants.push(q.acquire(MODEL, "b", 0, 100, null)), labels.push("b"));
    const order: string[] = [];
    holder.release();
    await drain(q, order, grants, labels);
    // b arrived after eight of a's (FIFO would serve it 9th and 10th), yet it alternates with a
    // from the start: lifted to a's counter on arrival, then always the one with less service.
    expect(order.slice(0, 4)).toEqual(["a", "b", "a", "b"]);
    expect(q.counter("a")).toBe(900);
  });

  test("headroom: slots held back for a tenant under its fair share; alone, a tenant uses them all", async () => {
    const clock = new VirtualClock(0);
    const q = new FairQueue(clock, () => qcfg({ worker_slots: 4, headroom_slots: 1 }), () => 1);
    // Alone, the flood is never over its share: all 4 slots.
    const held = await Promise.all([0, 1, 2, 3].map(() => q.acquire(MODEL, "flood", 0, 1, null)));
    held[3]!.release();
    // A light tenant arrives: flood (3 of 4 slots ≥ 4 / 2 tenants) is over its share, light is not,
    // so light takes the last slot — the headroom — at once.
    const light = await q.acquire(MODEL, "light", 0, 1, null);
    expect(q.overShare(MODEL, "flood")).toBe(true);
    expect(q.overShare(MODEL, "light")).toBe(false);
    let floodGot = false;
    const floodNext = q.acquire(MODEL, "flood", 0, 1, null).then((g) => ((floodGot = true), g));
    light.release(); // the headroom slot is free again, but light was here lately: flood may not take it
    await Promise.resolve();
    expect(floodGot).toBe(false);
    held[0]!.release(); // below the headroom line: flood's waiting request gets a slot
    (await floodNext).release();
    expect(floodGot).toBe(true);
    // Light gone for longer than the share window: flood alone again, every slot is its own.
    clock.advance(SHARE_WINDOW_MS + 1);
    const more = await Promise.all([0, 1].map(() => q.acquire(MODEL, "flood", 0, 1, null)));
    expect(more.length).toBe(2);
  });

  test("priority first; aging lifts a waiting low class above newer high ones", async () => {
    const clock = new VirtualClock(0);
    const q = new FairQueue(clock, () => qcfg({ aging_ms: 1000 }), () => 1);
    const holder = await q.acquire(MODEL, "x", 0, 1, null);
    const low = q.acquire(MODEL, "low", 0, 1, null);
    const high = q.acquire(MODEL, "high", 1, 1, null);
    const order: string[] = [];
    void low.then((g) => (order.push("low"), g));
    void high.then((g) => (order.push("high"), g));
    holder.release();
    (await high).release();
    (await low).release();
    expect(order).toEqual(["high", "low"]);
    // Now the low one waits 2.5 s: it ages by two classes and beats a fresh priority-1 request.
    const h2 = await q.acquire(MODEL, "x", 0, 1, null);
    const low2 = q.acquire(MODEL, "low", 0, 1, null);
    clock.advance(2500);
    const high2 = q.acquire(MODEL, "high", 1, 1, null);
    const order2: string[] = [];
    void low2.then(() => order2.push("low"));
    void high2.then(() => order2.push("high"));
    h2.release();
    (await low2).release();
    (await high2).release();
    expect(order2).toEqual(["low", "high"]);
  });

  test("bounded with a deadline; a client that leaves is ClientGone; worker_slots 0 never queues", async () => {
    const clock = new VirtualClock(0);
    const q = new FairQueue(clock, () => qcfg({ max_waiting: 1, timeout_ms: 5000 }), () => 1);
    await q.acquire(MODEL, "a", 0, 1, null);
    const waiting = q.acquire(MODEL, "a", 0, 1, null);
    await expect(q.acquire(MODEL, "a", 0, 1, null)).rejects.toMatchObject({ status: 503, code: "queue_full" });
    clock.advance(5000);
    await expect(waiting).rejects.toMatchObject({ status: 503, code: "queue_timeout" });
    const ac = new AbortController();
    const gone = q.acquire(MODEL, "a", 0, 1, ac.signal);
    ac.abort();
    await expect(gone).rejects.toBeInstanceOf(ClientGone);
    expect(q.size).toBe(0);
    const off = new FairQueue(clock, () => qcfg({ worker_slots: 0 }), () => 1);
    for (let i = 0; i < 5; i++) await off.acquire(MODEL, "a", 0, 1, null);
    expect(off.size).toBe(0);
    expect(new HerdError(503, "service_unavailable", "x").status).toBe(503);
  });
});

describe("tenants through herd", () => {
  let sim: SimEngine;
  let herd: Herd;
  afterAll(async () => {
    await herd?.stop();
    await sim?.stop();
  });

  test("429 rate_limit_exceeded with headers for the openai client; headers on every answer; metrics by name, never key", async () => {
    sim = await startSimEngine({ port: 0, model: MODEL, zeroDelay: true });
    herd = await startHerd({
      workers: [{ id: "w0", url: sim.url, kind: "sim" }],
      frontend: { api_keys: [entry({ key: "sk-team-a-secret", name: "team-a", rpm: 2 }), "sk-plain"] },
    });
    const a = new OpenAI({ baseURL: `${herd.url}/v1`, apiKey: "sk-team-a-secret", maxRetries: 0 });
    const ok = await a.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }).withResponse();
    expect(ok.response.headers.get("x-ratelimit-limit-requests")).toBe("2");
    expect(ok.response.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    // A refusal of the engine (here a 404 from herd) carries them too.
    const notFound = await fetch(`${herd.url}/v1/embeddings`, { method: "POST", headers: { authorization: "Bearer sk-team-a-secret", "content-type": "application/json" }, body: JSON.stringify({ model: "nope", input: "x" }) });
    expect(notFound.status).toBe(404);
    expect(notFound.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    let limited: { status?: number; code?: string; headers?: Headers } = {};
    try {
      await a.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    } catch (e) {
      limited = e as typeof limited;
    }
    expect(limited.status).toBe(429);
    expect(limited.code).toBe("rate_limit_exceeded");
    expect(limited.headers?.get("x-ratelimit-reset-requests")).toMatch(/s$/);
    expect(Number(limited.headers?.get("retry-after"))).toBeGreaterThan(0);
    const plain = await fetch(`${herd.url}/v1/chat/completions`, { method: "POST", headers: { authorization: "Bearer sk-plain", "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }) });
    expect(plain.status).toBe(200);
    expect(plain.headers.get("x-ratelimit-limit-requests")).toBeNull();
    await plain.text();
    const wrong = await fetch(`${herd.url}/v1/chat/completions`, { method: "POST", headers: { authorization: "Bearer nope" }, body: "{}" });
    expect(wrong.status).toBe(401);
    const metrics = await (await fetch(`${herd.url}/metrics`)).text();
    expect(metrics).toContain('herd_tenant_rate_limited_total{tenant="team-a",limit="requests"} 1');
    expect(metrics).toContain('herd_tenant_requests_total{tenant="team-a"} 2');
    expect(metrics).toContain('herd_tenant_requests_total{tenant="tenant-1"} 1');
    expect(metrics).not.toContain("sk-team-a-secret");
    expect(metrics).not.toContain("sk-plain");
  });

  test("a saturated model queues in herd (worker_slots) and releases in order as slots free", async () => {
    const gates: (() => void)[] = [];
    const up = startUpstream(
      () =>
        new Promise<Response>((resolve) =>
          gates.push(() => resolve(Response.json({ id: "x", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] }))),
        ),
    );
    const h = await startHerd({ workers: [{ id: "u0", url: up.url }], frontend: { queue: { worker_slots: 1, max_waiting: 10, timeout_ms: 10_000, aging_ms: 0, headroom_slots: 0 } } });
    try {
      const send = () => fetch(`${h.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }) });
      const first = send();
      const second = send();
      for (let i = 0; i < 50 && up.received.length < 1; i++) await Bun.sleep(10);
      await Bun.sleep(50);
      expect(up.received.length).toBe(1); // the second waits in herd, not on the engine
      expect(h.frontend.queue.size).toBe(1);
      gates.shift()!();
      expect((await first).status).toBe(200);
      for (let i = 0; i < 50 && up.received.length < 2; i++) await Bun.sleep(10);
      expect(up.received.length).toBe(2);
      gates.shift()!();
      expect((await second).status).toBe(200);
      const metrics = await (await fetch(`${h.url}/metrics`)).text();
      expect(metrics).toMatch(/herd_tenant_queue_wait_seconds_count\{tenant="anonymous"\} 2/);
    } finally {
      await h.stop();
      await up.stop();
    }
  });
});
