// The early-head envelope of forwarded legs (see forward.ts's header for why): the origin's reader
// (EnvelopeRead: heartbeats re-arm its deadline until the head line) and the owner's writer
// (runEnveloped: 200 at once, a newline per heartbeat while the engine works, the head line, the
// engine's body as is).
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import { legReply, readerSource } from "../request/http-upstream.ts";
import type { ChunkSource, LegError, LegReply, LegRequest, ReadResult, Upstream } from "../request/upstream.ts";

/** Origin → owner: answer in an envelope, with a heartbeat byte every this many ms. */
export const H_EARLY_HEAD = "x-herd-forward-early-head";
/** Owner → origin: the body is an envelope (heartbeats, head line, engine body). */
export const H_ENVELOPE = "x-herd-forward-envelope";
/** Longest envelope head line. */
const MAX_HEAD_BYTES = 4096;
const NL = 10;

type FetchFn = (url: string, init: RequestInit) => Promise<Response>;

/**
 * The origin's side of one early-head leg: every byte from the peer re-arms the deadline until the
 * head line; silence past it aborts the leg as `peer_unreachable`. After the head the lifecycle's
 * own bounds (first token, idle) apply.
 */
export class EnvelopeRead {
  private readonly own = new AbortController();
  private timer: { cancel(): void } | null = null;
  private settled = false;

  constructor(
    private readonly clock: Clock,
    private readonly limitMs: number,
    private readonly signal: AbortSignal,
    private readonly reply: (r: LegReply<Uint8Array> | LegError) => void,
  ) {}

  start(fetchFn: FetchFn, url: string, init: RequestInit): void {
    this.arm();
    fetchFn(url, { ...init, signal: AbortSignal.any([this.signal, this.own.signal]) }).then(
      (res) => {
        if (res.headers.get(H_ENVELOPE) !== "1") return this.settle(legReply(res)); // a refusal, or an older owner
        this.arm();
        this.readHead(res.body!.getReader() as ReadableStreamDefaultReader<Uint8Array>, []);
      },
      (error: unknown) => this.fail(error),
    );
  }

  private arm(): void {
    this.timer?.cancel();
    this.timer = this.clock.setTimer(this.limitMs, () => this.own.abort(new Error(`peer sent nothing for ${this.limitMs} ms`)));
  }

  private fail(error: unknown): void {
    // The lifecycle's own abort (client gone, timeout, worker removed) is not the peer's fault.
    const mine = this.own.signal.aborted && !this.signal.aborted;
    this.settle({ error: mine ? this.own.signal.reason : error, kind: "peer_unreachable" });
  }

  private settle(r: LegReply<Uint8Array> | LegError): void {
    this.timer?.cancel();
    if (this.settled) return;
    this.settled = true;
    this.reply(r);
  }

  private readHead(reader: ReadableStreamDefaultReader<Uint8Array>, head: number[]): void {
    reader.read().then(
      (r) => {
        if (r.done) return this.fail(new Error("peer closed the forwarded leg before its head"));
        this.arm();
        const bytes = r.value;
        let i = 0;
        for (; i < bytes.length; i++) {
          const b = bytes[i]!;
          if (b === NL) {
            if (head.length > 0) break;
            continue; // a heartbeat
          }
          head.push(b);
          if (head.length > MAX_HEAD_BYTES) {
            void reader.cancel().catch(() => {});
            return this.settle({ error: new Error("forward envelope head too long"), kind: "reset" });
          }
        }
        if (i === bytes.length) return this.readHead(reader, head);
        this.onHead(reader, new TextDecoder().decode(new Uint8Array(head)), bytes.subarray(i + 1));
      },
      (error: unknown) => this.fail(error),
    );
  }

  private onHead(reader: ReadableStreamDefaultReader<Uint8Array>, line: string, rest: Uint8Array): void {
    let h: { status?: unknown; content_type?: unknown; content_length?: unknown; failure?: unknown };
    try {
      h = JSON.parse(line) as typeof h;
    } catch {
      void reader.cancel().catch(() => {});
      return this.settle({ error: new Error("forward envelope head is not JSON"), kind: "reset" });
    }
    if (typeof h.failure === "string") {
      void reader.cancel().catch(() => {});
      const kind: UpstreamErrorKind = h.failure === "head_timeout" || h.failure === "reset" || h.failure === "eof" ? h.failure : "connect";
      return this.settle({ error: new Error(`the peer's engine gave no answer (${h.failure})`), kind });
    }
    const src = readerSource(reader);
    let pending: Uint8Array | null = rest.length > 0 ? new Uint8Array(rest) : null;
    const body: ChunkSource<Uint8Array> = {
      read(cb) {
        if (pending === null) return src.read(cb);
        const value = pending;
        pending = null;
        cb({ done: false, value });
      },
      cancel: () => src.cancel(),
    };
    this.settle({
      status: typeof h.status === "number" ? h.status : 502,
      contentType: typeof h.content_type === "string" ? h.content_type : null,
      contentLength: typeof h.content_length === "number" ? h.content_length : null,
      body,
    });
  }
}

/** The owner's envelope (see the header): 200 now, heartbeats, the engine's head line, its body. */
export function runEnveloped(upstream: Upstream<Uint8Array>, clock: Clock, leg: LegRequest, open: { ac: AbortController; end: () => void }, log: Logger, heartbeatMs: number, onAnswer?: (status: number | null) => void): Response {
  const { ac, end } = open;
  const enc = new TextEncoder();
  let answer: LegReply<Uint8Array> | LegError | null = null;
  let wake: (() => void) | null = null;
  let cancelled = false;
  let src: ChunkSource<Uint8Array> | null = null;
  let started = false;
  upstream.send(leg, ac.signal, (r) => {
    answer = r;
    onAnswer?.("error" in r ? null : r.status);
    if (cancelled && !("error" in r)) r.body?.cancel();
    wake?.();
  });
  const waitAnswer = () =>
    new Promise<void>((done) => {
      const t = clock.setTimer(heartbeatMs, () => {
        wake = null;
        done();
      });
      wake = () => {
        wake = null;
        t.cancel();
        done();
      };
    });
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (cancelled) return;
      if (src === null) {
        if (!started) {
          started = true;
          if (answer === null) return controller.enqueue(new Uint8Array([NL])); // the origin hears from us now
        }
        if (answer === null) await waitAnswer();
        if (cancelled) return;
        const a = answer as LegReply<Uint8Array> | LegError | null;
        if (a === null) return controller.enqueue(new Uint8Array([NL]));
        if ("error" in a) {
          end();
          log.debug("forwarded leg failed before an answer", { worker: leg.workerId, request_id: leg.requestId });
          controller.enqueue(enc.encode(`${JSON.stringify({ status: 502, failure: a.kind ?? "connect" })}\n`));
          return controller.close();
        }
        controller.enqueue(enc.encode(`${JSON.stringify({ status: a.status, content_type: a.contentType, content_length: a.contentLength })}\n`));
        if (!a.body) {
          end();
          return controller.close();
        }
        src = a.body;
        return;
      }
      const body = src;
      await new Promise<void>((done) =>
        body.read((r: ReadResult<Uint8Array>) => {
          if (cancelled) return done();
          if ("error" in r) {
            end();
            controller.error(r.error);
          } else if (r.done) {
            end();
            controller.close();
          } else controller.enqueue(new Uint8Array(r.value));
          done();
        }),
      );
    },
    cancel() {
      cancelled = true;
      end();
      src?.cancel();
      wake?.();
      ac.abort(new Error("origin node cancelled"));
    },
  });
  return new Response(stream, { status: 200, headers: { "content-type": "application/octet-stream", [H_ENVELOPE]: "1", "x-request-id": leg.requestId } });
}
