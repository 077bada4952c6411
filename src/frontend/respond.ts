// Turning the lifecycle's answer (src/request) into an HTTP Response. The committed body becomes a
// pull-based ReadableStream with a high-water mark of 0: a chunk is read from the engine only when
// the client's socket took the previous one. A client that stops reading is cut (the relay decides
// when: client_stalled), so its connection does not hold a worker's slot.
import { HerdError } from "../core/errors.ts";
import type { Answer } from "../request/lifecycle.ts";
import type { RelaySource } from "../request/relay.ts";

export function errorResponse(e: HerdError, extraHeaders: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(e.toJSON()), {
    status: e.status,
    headers: { "content-type": "application/json", ...e.headers, ...extraHeaders },
  });
}

export function toResponse(a: Answer<Uint8Array>): Response {
  if (a.kind === "error") return errorResponse(a.error);
  if (a.kind === "whole") {
    const headers: Record<string, string> = { "content-type": a.contentType };
    if (a.status === 200) headers["x-herd-worker"] = a.workerId;
    return new Response(a.body, { status: a.status, headers });
  }
  const headers: Record<string, string> = a.sse
    ? { "content-type": a.contentType, "cache-control": "no-cache", "x-herd-worker": a.workerId }
    : { "content-type": a.contentType, "x-herd-worker": a.workerId };
  return new Response(bodyStream(a.body), { status: 200, headers });
}

function bodyStream(src: RelaySource<Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      start(ctrl) {
        src.onStall(() => {
          try {
            ctrl.error(new Error("client stopped reading"));
          } catch {
            // already closed
          }
        });
      },
      pull(ctrl) {
        return new Promise<void>((resolve) =>
          src.read((r) => {
            try {
              if ("error" in r) ctrl.error(new Error("upstream body failed"));
              else if (r.done) ctrl.close();
              else ctrl.enqueue(r.value);
            } catch {
              // the stream was already errored (stalled client) or cancelled
            }
            resolve();
          }),
        );
      },
      cancel() {
        src.cancel();
      },
    },
    { highWaterMark: 0 },
  );
}
