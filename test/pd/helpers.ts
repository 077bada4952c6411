// A LegRunner over fetch for P/D tests against real sim engines (herd's own runner is the request
// lifecycle's, src/request/orchestrated.ts): legs are routed by a real Router (the router.pd
// presets), sent with fetch. Commit point as the lifecycle's: a whole 200 answer, or a stream's
// first chunk that is not an error event.
import { RealClock } from "../../src/core/clock.ts";
import type { LegOutcome, LegRunner, PinnedLeg } from "../../src/request/plan.ts";
import { Router, type RouteRequest } from "../../src/router/index.ts";
import type { RouteResult } from "../../src/router/router.ts";
import { emptyLoad, type Worker, type WorkerLoad } from "../../src/workers/worker.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import type { KvIndex } from "../../src/kv/indexer.ts";
import { routerConfig } from "../router/fixtures.ts";

export interface SentLeg {
  name: string;
  worker: string;
  requestId: string;
  body: Record<string, unknown>;
}

export interface Committed {
  /** The whole answer (non-streaming) or the full stream text (read to the end by the runner). */
  text: string;
}

export class FetchRunner implements LegRunner {
  readonly sent: SentLeg[] = [];

  constructor(
    readonly router: Router,
    private readonly requestId = "req-42",
  ) {}

  route(req: RouteRequest, dryRun?: boolean): RouteResult {
    return dryRun ? this.router.explain(req) : this.router.route(req);
  }

  async run(leg: PinnedLeg, outer: AbortSignal): Promise<LegOutcome> {
    this.sent.push({ name: leg.name, worker: leg.worker.id, requestId: this.requestId, body: JSON.parse(leg.body) });
    // The commit bound: a timer aborts this leg's own controller until the commit point passes.
    const ac = new AbortController();
    const onOuter = () => ac.abort();
    outer.addEventListener("abort", onOuter, { once: true });
    let timedOut = false;
    const timer = leg.commitTimeoutMs === null ? null : setTimeout(() => ((timedOut = true), ac.abort()), leg.commitTimeoutMs);
    const committed = () => timer !== null && clearTimeout(timer);
    try {
      return await this.send(leg, ac.signal, committed);
    } catch (e) {
      if (timedOut && !outer.aborted) return { kind: "failed", reason: "first_token_timeout", message: `timeout: no commit within ${leg.commitTimeoutMs} ms`, status: null };
      if (outer.aborted) return { kind: "aborted" };
      return { kind: "failed", reason: "connect", message: e instanceof Error ? e.message : String(e), status: null };
    } finally {
      if (timer !== null) clearTimeout(timer);
      outer.removeEventListener("abort", onOuter);
    }
  }

  private async send(leg: PinnedLeg, signal: AbortSignal, committed: () => void): Promise<LegOutcome> {
    const path = leg.endpoint === "chat" ? "/v1/chat/completions" : "/v1/completions";
    const res = await fetch(leg.worker.url + path, { method: "POST", headers: { "content-type": "application/json", "x-request-id": this.requestId }, body: leg.body, signal });
    if (res.status !== 200) {
      const text = await res.text();
      return { kind: "failed", reason: "status_5xx", message: `HTTP ${res.status}: ${text.slice(0, 200)}`, status: res.status };
    }
    if (!leg.toClient) return { kind: "done", text: await res.text() };
    if (!leg.stream) return { kind: "committed", answer: { text: await res.text() } satisfies Committed };
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = "";
    while (!text.includes("\n\n")) {
      const r = await reader.read();
      if (r.done) return { kind: "failed", reason: "eof", message: "stream closed before any event", status: null };
      text += dec.decode(r.value, { stream: true });
    }
    if (text.startsWith('data: {"error"')) return { kind: "failed", reason: "status_5xx", message: `error event: ${text.slice(0, 200)}`, status: null };
    committed();
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      text += dec.decode(r.value, { stream: true });
    }
    return { kind: "committed", answer: { text } satisfies Committed };
  }
}

/**
 * A ready worker of model `sim` at `url`; `load` sets scraped figures. Requests herd did not send
 * steer the presets: `waiting` adds a prompt's worth of prefill per request (pd-prefill's kv-cost),
 * `running` a request's blocks (pd-decode's decode-load).
 */
export function pdWorker(id: string, role: Worker["role"], e: { url: string }, load: Partial<WorkerLoad> = {}, over: Partial<Worker> = {}): Worker {
  return { id, node: id.split("/")[0]!, model: "sim", role, kind: "sim", url: e.url, state: "ready", restarts: 0, load: { ...emptyLoad(), in_flight_at_scrape: 0, ...load }, ...over };
}

/** A Router over these workers with the router.pd presets at their defaults (seeded). */
export function pdRouter(workers: Worker[], kvIndex?: KvIndex, seed = 1): { router: Router; registry: WorkerRegistry } {
  const registry = new WorkerRegistry();
  for (const w of workers) registry.upsert(w);
  const router = new Router({ config: routerConfig({ policy: "kv" }), registry, clock: new RealClock(), seed, ...(kvIndex ? { kvIndex } : {}) });
  return { router, registry };
}
