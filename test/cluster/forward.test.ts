// Remote legs over a real HTTP hop (Bun.serve on loopback): RemoteUpstream on the origin side,
// forwardHandler on the owner side. The owner runs legs only on its own workers (never onward,
// never to a URL from the request), streams chunk by chunk, counts the leg in its worker's
// in-flight figure, and a client that goes away aborts the owner's engine leg. A peer that cannot
// be reached answers `{ error }` (the lifecycle retries that elsewhere).
import { afterAll, describe, expect, test } from "bun:test";
import { memoryLogger } from "../helpers/log.ts";
import { FORWARD_PATH, H_WORKER, RemoteUpstream, forwardHandler } from "../../src/cluster/forward.ts";
import { BYTES_FORMAT } from "../../src/request/http-upstream.ts";
import type { ChunkSource, LegReply, LegRequest, ReadResult, Upstream } from "../../src/request/upstream.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { emptyLoad, type Worker } from "../../src/workers/worker.ts";

const enc = new TextEncoder();
const worker = (id: string, node: string, url = "http://127.0.0.1:9"): Worker => ({ id, node, model: "m", role: "aggregated", kind: "sim", url, state: "ready", load: emptyLoad(), restarts: 0 });

/** An engine stand-in: answers every leg with `chunks` SSE chunks, one per read, 5 ms apart. */
class FakeEngine implements Upstream<Uint8Array> {
  readonly format = BYTES_FORMAT;
  legs: LegRequest[] = [];
  cancelled = 0;
  aborted = 0;
  constructor(private readonly chunks = 3) {}
  send(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<Uint8Array> | { error: unknown }) => void): void {
    this.legs.push(leg);
    signal.addEventListener("abort", () => this.aborted++);
    let i = 0;
    const body: ChunkSource<Uint8Array> = {
      read: (cb: (r: ReadResult<Uint8Array>) => void) => {
        if (i >= this.chunks) return cb({ done: true });
        const n = i++;
        setTimeout(() => cb({ done: false, value: enc.encode(`data: {"n":${n}}\n\n`) }), 5);
      },
      cancel: () => void this.cancelled++,
    };
    reply({ status: 200, contentType: "text/event-stream", contentLength: null, body });
  }
}

const registry = new WorkerRegistry();
registry.upsert(worker("b/sim-0", "b", "http://127.0.0.1:20001"));
registry.upsert(worker("a/sim-0", "a")); // a remote worker as b's registry holds it
const engine = new FakeEngine(3);
const owner = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: forwardHandler({ self: "b", registry, upstream: engine, maxBodyBytes: () => 1 << 20, log: memoryLogger() }) });
const peer = `http://127.0.0.1:${owner.port}`;
afterAll(() => owner.stop(true));

const local = new FakeEngine(1);
const remote = new RemoteUpstream(local, { self: "a", peerOf: (id) => (id.startsWith("b/") ? peer : null), token: () => "t0k" });
const leg = (workerId: string, over: Partial<LegRequest> = {}): LegRequest => ({
  id: "r1.0.0", requestId: "r1", workerId, workerUrl: "http://should-not-be-dialled:1", endpoint: "chat", body: `{"model":"m"}`, stream: true, ...over,
});

function send(up: Upstream<Uint8Array>, l: LegRequest, ac = new AbortController()): Promise<LegReply<Uint8Array> | { error: unknown }> {
  return new Promise((resolve) => up.send(l, ac.signal, resolve));
}
function readAll(body: ChunkSource<Uint8Array>): Promise<string[]> {
  const out: string[] = [];
  return new Promise((resolve, reject) => {
    const next = () => body.read((r) => ("error" in r ? reject(r.error) : r.done ? resolve(out) : (out.push(new TextDecoder().decode(r.value)), next())));
    next();
  });
}

describe("remote legs", () => {
  test("a remote worker's leg runs on the owner's engine and streams back chunk by chunk", async () => {
    const r = await send(remote, leg("b/sim-0"));
    if ("error" in r) throw r.error;
    expect(r.status).toBe(200);
    expect(r.contentType).toBe("text/event-stream");
    expect(registry.inFlightOf("b/sim-0")).toBe(1); // the owner counts the forwarded leg
    const chunks = await readAll(r.body!);
    expect(chunks.join("")).toBe(`data: {"n":0}\n\ndata: {"n":1}\n\ndata: {"n":2}\n\n`);
    expect(chunks.length).toBeGreaterThanOrEqual(2); // not buffered into one answer
    const sent = engine.legs.at(-1)!;
    expect(sent.workerUrl).toBe("http://127.0.0.1:20001"); // the owner's registry, never the request's URL
    expect(sent.requestId).toBe("r1");
    expect(sent.body).toBe(`{"model":"m"}`);
    await Bun.sleep(10);
    expect(registry.inFlightOf("b/sim-0")).toBe(0);
  });

  test("a local worker's leg goes to the wrapped upstream, not over the peer API", async () => {
    const before = engine.legs.length;
    const r = await send(remote, leg("a/sim-0"));
    expect("error" in r).toBe(false);
    expect(local.legs.at(-1)!.workerId).toBe("a/sim-0");
    expect(engine.legs.length).toBe(before);
  });

  test("the owner never proxies onward: a worker of another node, or an unknown one, is a 503", async () => {
    const before = engine.legs.length;
    for (const id of ["a/sim-0", "c/sim-9"]) {
      const res = await fetch(peer + FORWARD_PATH, { method: "POST", headers: { [H_WORKER]: id, "x-herd-forward-endpoint": "chat", "x-request-id": "r2" }, body: "{}" });
      expect(res.status).toBe(503);
      expect(((await res.json()) as any).error.code).toBe("forward_not_here");
    }
    expect(engine.legs.length).toBe(before);
  });

  test("a draining owner refuses new legs with a 503 (the origin retries elsewhere)", async () => {
    const srv = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: forwardHandler({ self: "b", registry, upstream: engine, maxBodyBytes: () => 1 << 20, draining: () => true, log: memoryLogger() }) });
    try {
      const up = new RemoteUpstream(local, { self: "a", peerOf: () => `http://127.0.0.1:${srv.port}`, token: () => "" });
      const r = await send(up, leg("b/sim-0"));
      if ("error" in r) throw r.error;
      expect(r.status).toBe(503);
      await readAll(r.body!);
    } finally {
      srv.stop(true);
    }
  });

  test("forwarded legs are bounded: over maxInFlight the owner answers 429 (retryable at the origin)", async () => {
    const stats = { open: 0, rejected: 0 };
    const slow = new FakeEngine(1000);
    const srv = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: forwardHandler({ self: "b", registry, upstream: slow, maxBodyBytes: () => 1 << 20, maxInFlight: () => 1, log: memoryLogger() }, stats) });
    const ac = new AbortController();
    try {
      const up = new RemoteUpstream(local, { self: "a", peerOf: () => `http://127.0.0.1:${srv.port}`, token: () => "" });
      const first = await send(up, leg("b/sim-0"), ac);
      expect("error" in first ? 0 : first.status).toBe(200);
      expect(stats.open).toBe(1);
      const second = await send(up, leg("b/sim-0", { id: "r2.0.0", requestId: "r2" }));
      if ("error" in second) throw second.error;
      expect(second.status).toBe(429);
      await readAll(second.body!);
      expect(stats.rejected).toBe(1);
    } finally {
      ac.abort();
      srv.stop(true);
    }
  });

  test("the origin aborting mid-stream aborts the owner's engine leg and frees its in-flight slot", async () => {
    const slow = new FakeEngine(1000);
    const reg = new WorkerRegistry();
    reg.upsert(worker("b/sim-1", "b"));
    const srv = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: forwardHandler({ self: "b", registry: reg, upstream: slow, maxBodyBytes: () => 1 << 20, log: memoryLogger() }) });
    try {
      const up = new RemoteUpstream(local, { self: "a", peerOf: () => `http://127.0.0.1:${srv.port}`, token: () => "" });
      const ac = new AbortController();
      const r = await send(up, leg("b/sim-1"), ac);
      if ("error" in r) throw r.error;
      await new Promise<void>((res) => r.body!.read(() => res()));
      expect(reg.inFlightOf("b/sim-1")).toBe(1);
      ac.abort(new Error("client gone"));
      for (let i = 0; i < 100 && reg.inFlightOf("b/sim-1") > 0; i++) await Bun.sleep(10);
      expect(reg.inFlightOf("b/sim-1")).toBe(0);
      expect(slow.cancelled + slow.aborted).toBeGreaterThan(0);
    } finally {
      srv.stop(true);
    }
  });

  test("an unreachable peer is an error before any byte (retryable by the lifecycle)", async () => {
    const dead = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const port = dead.port;
    dead.stop(true);
    const up = new RemoteUpstream(local, { self: "a", peerOf: () => `http://127.0.0.1:${port}`, token: () => "" });
    const r = await send(up, leg("b/sim-0"));
    expect("error" in r).toBe(true);
  });
});
