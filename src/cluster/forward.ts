// Remote legs, both halves of POST /cluster/v1/forward (the peer API, token-checked by routes.ts).
//
// Origin node (RemoteUpstream, an Upstream decorator): a leg whose worker lives on another node is
// POSTed to that node's peer API instead of an engine; every other leg goes to the wrapped upstream.
// The body is the leg's JSON as is; the worker, endpoint and ids ride in headers. fetch keeps the
// connection alive (pooled per peer), the answer streams back chunk by chunk, and the lifecycle's
// abort signal (client gone, timeout, worker removed) aborts the remote leg. A peer that cannot be
// reached before the answer head is `{ error }`, which the lifecycle retries elsewhere; a failure
// after bytes is the usual error event.
//
// Early head (issue 21): the origin asks for it (H_EARLY_HEAD, a heartbeat period) and the owner
// answers 200 at once with an envelope: a newline every heartbeat while its engine works, then one
// JSON head line `{"status", "content_type", "content_length"}` (or `{"status": 502, "failure"}`
// when its engine gave no answer), then the engine's body as is. So the origin hears from a live
// peer within a heartbeat whatever the engine does, and a black-holed connection (an asymmetric
// cut, a dead host behind a pooled keep-alive connection) is `peer_unreachable` after
// cluster.peer_first_byte_timeout_ms instead of the 60 s response bound; the worker's node is then
// ejected from routing (src/router/outlier.ts) and the request retried on another node. An owner
// without the envelope header (an older herd) is read as before.
//
// Owner node (forwardHandler): runs the leg on one of ITS OWN workers with its local upstream and
// pipes the answer back. It never proxies onward and never dials a URL from the request: the worker
// id is looked up in the registry and must be this node's. The leg counts in the worker's in-flight
// figure here too, so this node's router and advert see the load remote nodes put on it.
import type { Clock } from "../core/clock.ts";
import { HerdError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { NOOP_SPAN, type Span, type Tracer } from "../core/trace.ts";
import { readBodyLimited } from "../http/body.ts";
import { isEndpoint, type Endpoint } from "../protocol/openai.ts";
import type { ChunkSource, LegError, LegReply, LegRequest, ReadResult, Upstream } from "../request/upstream.ts";
import { legReply } from "../request/http-upstream.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import { PEER_API_PREFIX } from "./client.ts";
import { EnvelopeRead, H_EARLY_HEAD, runEnveloped } from "./forward-envelope.ts";

export const FORWARD_PATH = `${PEER_API_PREFIX}/forward`;
export const H_WORKER = "x-herd-forward-worker";
export const H_ENDPOINT = "x-herd-forward-endpoint";
export const H_LEG = "x-herd-forward-leg";
export const H_STREAM = "x-herd-forward-stream";
export const H_ORIGIN = "x-herd-forward-origin";

export type FetchFn = (url: string, init: RequestInit) => Promise<Response>;

export interface RemoteUpstreamOptions {
  /** This node's name (sent as the origin, for the owner's logs). */
  self: string;
  /** Peer API base URL (http://host:port) of a remote worker's node; null when the worker is local. */
  peerOf(workerId: string): string | null;
  /** The cluster token (read when the cluster service starts). */
  token(): string;
  fetch?: FetchFn;
  /** With both: the early-head envelope and its deadline (cluster.peer_first_byte_timeout_ms). */
  clock?: Clock;
  firstByteTimeoutMs?: () => number;
}

export class RemoteUpstream implements Upstream<Uint8Array> {
  readonly format;
  private readonly fetchFn: FetchFn;

  constructor(
    private readonly local: Upstream<Uint8Array>,
    private readonly o: RemoteUpstreamOptions,
  ) {
    this.format = local.format;
    this.fetchFn = o.fetch ?? ((url, init) => fetch(url, init));
  }

  send(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<Uint8Array> | LegError) => void): void {
    const peer = this.o.peerOf(leg.workerId);
    if (peer === null) return this.local.send(leg, signal, reply);
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: leg.stream ? "text/event-stream" : "application/json",
      "x-request-id": leg.requestId,
      [H_WORKER]: leg.workerId,
      [H_ENDPOINT]: leg.endpoint,
      [H_LEG]: leg.id,
      [H_STREAM]: leg.stream ? "1" : "0",
      [H_ORIGIN]: this.o.self,
    };
    if (leg.traceparent) headers.traceparent = leg.traceparent; // the owner's span is this attempt's child
    const token = this.o.token();
    if (token !== "") headers.authorization = `Bearer ${token}`;
    const limitMs = this.o.clock ? (this.o.firstByteTimeoutMs?.() ?? 0) : 0;
    if (limitMs <= 0) {
      return void this.fetchFn(peer + FORWARD_PATH, { method: "POST", headers, body: leg.body, signal }).then(
        (res) => reply(legReply(res)),
        (error: unknown) => reply({ error, kind: "peer_unreachable" }),
      );
    }
    headers[H_EARLY_HEAD] = String(Math.max(50, Math.floor(limitMs / 4)));
    new EnvelopeRead(this.o.clock!, limitMs, signal, reply).start(this.fetchFn, peer + FORWARD_PATH, { method: "POST", headers, body: leg.body });
  }
}


export interface ForwardOptions {
  self: string;
  registry: WorkerRegistry;
  /** This node's own way to its engines (HttpUpstream): never the RemoteUpstream. */
  upstream: Upstream<Uint8Array>;
  maxBodyBytes: () => number;
  /** This node is draining (shutting down): refuse new legs so the origin retries elsewhere. */
  draining?: () => boolean;
  /** Forwarded legs open at once on this node (frontend.max_in_flight); more get 429 (retryable at the origin). */
  maxInFlight?: () => number;
  /** For the early-head envelope's heartbeats; without it the owner answers as before. */
  clock?: Clock;
  log: Logger;
  /** A span per forwarded leg, continuing the origin's traceparent (its attempt span). */
  tracer?: Tracer;
}

/** Open forwarded legs and refusals, for /admin and tests. */
export interface ForwardStats {
  open: number;
  rejected: number;
}

const REQUEST_ID = /^[\w.:-]{1,128}$/;
const refuse = (status: number, message: string, code: string) =>
  Response.json({ error: { message, type: status === 400 ? "invalid_request_error" : "server_error", code } }, { status });

/** The owner's side of a remote leg. A refusal before the engine is a 503 (the origin may retry elsewhere). */
export function forwardHandler(o: ForwardOptions, stats: ForwardStats = { open: 0, rejected: 0 }): (req: Request) => Promise<Response> {
  return async (req) => {
    if (stats.open >= (o.maxInFlight?.() ?? Infinity)) {
      stats.rejected++;
      return refuse(429, `node ${o.self} has too many forwarded requests in flight`, "forward_overloaded");
    }
    const workerId = req.headers.get(H_WORKER) ?? "";
    const endpoint = req.headers.get(H_ENDPOINT);
    const requestId = req.headers.get("x-request-id") ?? "";
    if (!isEndpoint(endpoint) || !REQUEST_ID.test(requestId))
      return refuse(400, "forward: missing or invalid endpoint / x-request-id", "forward_invalid");
    if (o.draining?.()) return refuse(503, `node ${o.self} is draining`, "forward_draining");
    const w = o.registry.get(workerId);
    if (!w || w.node !== o.self) return refuse(503, `worker ${workerId} is not on node ${o.self}`, "forward_not_here");
    if (w.state !== "ready" && w.state !== "draining") return refuse(503, `worker ${workerId} is ${w.state}`, "forward_not_ready");
    let body: string;
    try {
      body = await readBodyLimited(req, o.maxBodyBytes());
    } catch (e) {
      if (e instanceof HerdError) return refuse(e.status, e.message, e.code ?? "forward_body");
      return new Response(null, { status: 499 });
    }
    const leg: LegRequest = {
      id: req.headers.get(H_LEG) ?? requestId,
      requestId,
      workerId,
      workerUrl: w.url,
      endpoint: endpoint as Endpoint,
      body,
      stream: req.headers.get(H_STREAM) === "1",
    };
    const span = !o.tracer?.enabled ? NOOP_SPAN : o.tracer.start("herd.forward", req.headers.get("traceparent"), { "herd.node": o.self, "herd.origin": req.headers.get(H_ORIGIN) ?? "", "herd.worker": workerId, "herd.attempt_id": leg.id }, "server");
    if (span.traceparent) leg.traceparent = span.traceparent;
    const hb = Number(req.headers.get(H_EARLY_HEAD) ?? NaN);
    if (o.clock && Number.isFinite(hb)) return runEnveloped(o.upstream, o.clock, leg, openLeg(o, leg, req.signal, stats, span), o.log, Math.min(5000, Math.max(50, hb)), (status) => {
        if (span.recording) span.set(status === null ? { "herd.error": "no answer" } : { "http.response.status_code": status });
      });
    return runLocal(o, leg, req.signal, stats, span);
  };
}

/** Count a forwarded leg as open on its worker until `end()` (idempotent, ends its span); the origin's abort aborts it. */
export function openLeg(o: ForwardOptions, leg: LegRequest, clientSignal: AbortSignal, stats: ForwardStats, span: Span = NOOP_SPAN): { ac: AbortController; end: () => void } {
  const ac = new AbortController();
  const onGone = () => ac.abort(new Error("origin node closed the forwarded leg"));
  if (clientSignal.aborted) onGone();
  else clientSignal.addEventListener("abort", onGone, { once: true });
  o.registry.addInFlight(leg.workerId, 1);
  stats.open++;
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    stats.open--;
    clientSignal.removeEventListener("abort", onGone);
    o.registry.addInFlight(leg.workerId, -1);
    span.end(clientSignal.aborted ? "origin closed the leg" : undefined);
  };
  return { ac, end };
}


function runLocal(o: ForwardOptions, leg: LegRequest, clientSignal: AbortSignal, stats: ForwardStats, span: Span): Promise<Response> {
  const { ac, end } = openLeg(o, leg, clientSignal, stats, span);
  return new Promise((resolve) => {
    o.upstream.send(leg, ac.signal, (r) => {
      if ("error" in r) {
        if (span.recording) span.set({ "herd.error": "no answer" });
        end();
        o.log.debug("forwarded leg failed before an answer", { worker: leg.workerId, request_id: leg.requestId });
        return resolve(refuse(502, `worker ${leg.workerId} did not answer`, "forward_upstream_failed"));
      }
      const headers: Record<string, string> = { "content-type": r.contentType ?? "application/json", "x-request-id": leg.requestId };
      if (span.recording) span.set({ "http.response.status_code": r.status });
      if (!r.body) {
        end();
        return resolve(new Response(null, { status: r.status, headers }));
      }
      resolve(new Response(pipe(r.body, end, () => ac.abort(new Error("origin node cancelled"))), { status: r.status, headers }));
    });
  });
}

/** A ChunkSource as a pull ReadableStream: one engine chunk per pull, so backpressure reaches the engine. */
function pipe(src: ChunkSource<Uint8Array>, end: () => void, abort: () => void): ReadableStream<Uint8Array> {
  let cancelled = false;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      return new Promise<void>((done) =>
        src.read((r: ReadResult<Uint8Array>) => {
          if (cancelled) return done(); // a read answered after the origin went away
          if ("error" in r) {
            end();
            controller.error(r.error);
          } else if (r.done) {
            end();
            controller.close();
          } else controller.enqueue(new Uint8Array(r.value)); // the source may reuse its chunk
          done();
        }),
      );
    },
    cancel() {
      cancelled = true;
      end();
      src.cancel();
      abort();
    },
  });
}
