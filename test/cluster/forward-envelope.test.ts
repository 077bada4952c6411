// The early-head envelope of forwarded legs (src/cluster/forward.ts, issue 21): the owner answers at
// once and sends a heartbeat byte while its engine works, so the origin tells a dead or black-holed
// peer (TCP accepted, nothing ever answered — what a pooled keep-alive connection across a cut
// looks like) from a slow engine within cluster.peer_first_byte_timeout_ms: `peer_unreachable`.
import { describe, expect, test } from "bun:test";
import { memoryLogger } from "../helpers/log.ts";
import { RealClock } from "../../src/core/clock.ts";
import { RemoteUpstream, forwardHandler } from "../../src/cluster/forward.ts";
import { BYTES_FORMAT, HttpUpstream } from "../../src/request/http-upstream.ts";
import type { ChunkSource, LegError, LegReply, LegRequest, ReadResult, Upstream } from "../../src/request/upstream.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { emptyLoad, type Worker } from "../../src/workers/worker.ts";

const enc = new TextEncoder();
const clock = new RealClock();
const worker = (id: string, node: string): Worker => ({ id, node, model: "m", role: "aggregated", kind: "sim", url: "http://127.0.0.1:9", state: "ready", load: emptyLoad(), restarts: 0 });

/** Answers after `delayMs` with one JSON body (a non-streaming engine), or fails with `error`. */
class SlowEngine implements Upstream<Uint8Array> {
  readonly format = BYTES_FORMAT;
  constructor(private readonly delayMs: number, private readonly error: LegError | null = null) {}
  send(_leg: LegRequest, _signal: AbortSignal, reply: (r: LegReply<Uint8Array> | LegError) => void): void {
    setTimeout(() => {
      if (this.error) return reply(this.error);
      let sent = false;
      const body: ChunkSource<Uint8Array> = {
        read: (cb: (r: ReadResult<Uint8Array>) => void) => (sent ? cb({ done: true }) : ((sent = true), cb({ done: false, value: enc.encode(`{"ok":true}`) }))),
        cancel: () => {},
      };
      reply({ status: 200, contentType: "application/json", contentLength: 11, body });
    }, this.delayMs);
  }
}

const leg = (over: Partial<LegRequest> = {}): LegRequest => ({ id: "r1.0", requestId: "r1", workerId: "b/sim-0", workerUrl: "http://x:1", endpoint: "chat", body: "{}", stream: false, ...over });
const send = (up: Upstream<Uint8Array>, l: LegRequest, ac = new AbortController()) => new Promise<LegReply<Uint8Array> | LegError>((resolve) => up.send(l, ac.signal, resolve));
const text = (body: ChunkSource<Uint8Array>) =>
  new Promise<string>((resolve, reject) => {
    let out = "";
    const next = () => body.read((r) => ("error" in r ? reject(r.error) : r.done ? resolve(out) : ((out += new TextDecoder().decode(r.value)), next())));
    next();
  });

function owner(engine: Upstream<Uint8Array>) {
  const registry = new WorkerRegistry();
  registry.upsert(worker("b/sim-0", "b"));
  return Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: forwardHandler({ self: "b", registry, upstream: engine, maxBodyBytes: () => 1 << 20, clock, log: memoryLogger() }) });
}
const origin = (port: number | undefined, limitMs = 300) =>
  new RemoteUpstream(new SlowEngine(0), { self: "a", peerOf: () => `http://127.0.0.1:${port}`, token: () => "", clock, firstByteTimeoutMs: () => limitMs });

describe("forward envelope", () => {
  test("a slow engine behind a live peer is not a failure: heartbeats keep the leg alive past the deadline", async () => {
    const srv = owner(new SlowEngine(1000));
    try {
      const r = await send(origin(srv.port, 300), leg());
      if ("error" in r) throw r.error;
      expect(r.status).toBe(200);
      expect(r.contentType).toBe("application/json");
      expect(r.contentLength).toBe(11);
      expect(await text(r.body!)).toBe(`{"ok":true}`);
    } finally {
      srv.stop(true);
    }
  });

  test("a streamed answer comes through the envelope byte for byte", async () => {
    const srv = owner(new SlowEngine(10));
    try {
      const r = await send(origin(srv.port), leg({ stream: true }));
      if ("error" in r) throw r.error;
      expect(await text(r.body!)).toBe(`{"ok":true}`);
    } finally {
      srv.stop(true);
    }
  });

  test("a black-holed peer (accepts, never answers) is peer_unreachable within the deadline, not at the response bound", async () => {
    const hole = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    try {
      // Without the envelope's deadline this never settles (the test times out).
      const r = await send(origin(hole.port, 300), leg());
      expect("error" in r && r.kind).toBe("peer_unreachable");
      expect(String((r as LegError).error)).toMatch(/peer sent nothing for 300 ms/);
    } finally {
      hole.stop(true);
    }
  });

  test("a refused connection is peer_unreachable too", async () => {
    const dead = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const port = dead.port;
    dead.stop(true);
    const r = await send(origin(port), leg());
    expect("error" in r && r.kind).toBe("peer_unreachable");
  });

  test("the owner's engine failing is that engine's failure (its kind), not the peer's", async () => {
    const srv = owner(new SlowEngine(5, { error: new Error("no head"), kind: "head_timeout" }));
    try {
      const r = await send(origin(srv.port), leg());
      expect("error" in r && r.kind).toBe("head_timeout");
    } finally {
      srv.stop(true);
    }
  });

  test("the client going away is not the peer's fault", async () => {
    const hole = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    try {
      const ac = new AbortController();
      const p = send(origin(hole.port, 5000), leg(), ac);
      setTimeout(() => ac.abort(new Error("client gone")), 50);
      const r = await p;
      expect("error" in r).toBe(true);
      expect(String((r as LegError).error)).not.toMatch(/peer sent nothing/);
    } finally {
      hole.stop(true);
    }
  });
});

describe("local engine first-byte deadline", () => {
  test("a stream whose engine sends no head in time is head_timeout; a non-streaming leg is not bounded by it", async () => {
    const hole = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const up = new HttpUpstream(undefined, { clock, firstByteTimeoutMs: () => 200 });
    try {
      const r = await send(up, leg({ stream: true, workerUrl: `http://127.0.0.1:${hole.port}` }));
      expect("error" in r && r.kind).toBe("head_timeout");
      const ac = new AbortController();
      let settled = false;
      const p = send(up, leg({ stream: false, workerUrl: `http://127.0.0.1:${hole.port}` }), ac).then((x) => ((settled = true), x));
      await Bun.sleep(600);
      expect(settled).toBe(false);
      ac.abort(new Error("done"));
      const x = await p;
      expect("error" in x && x.kind).toBeUndefined();
    } finally {
      hole.stop(true);
    }
  });
});
