// A LegExecutor over fetch for P/D tests against real sim engines (herd's own executor goes through
// the request lifecycle's Upstream). Commit point as the lifecycle's: a whole 200 answer, or a
// stream's first chunk that is not an error event.
import type { PdCandidate } from "../../src/pd/choose.ts";
import type { LegExecutor, LegOutcome, PdLeg } from "../../src/pd/orchestrator.ts";
import type { SimEngine } from "../../src/engine/sim/server.ts";

export interface SentLeg {
  name: string;
  worker: string;
  requestId: string;
  body: Record<string, unknown>;
}

export interface Committed {
  /** The whole answer (non-streaming) or the full stream text (read to the end by the executor). */
  text: string;
}

export class FetchExecutor implements LegExecutor {
  readonly sent: SentLeg[] = [];

  async run(leg: PdLeg, outer: AbortSignal): Promise<LegOutcome> {
    this.sent.push({ name: leg.name, worker: leg.worker.id, requestId: leg.requestId, body: JSON.parse(leg.body) });
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
      if (timedOut && !outer.aborted) return { kind: "failed", reason: `timeout: no commit within ${leg.commitTimeoutMs} ms`, status: null };
      if (outer.aborted) return { kind: "aborted" };
      return { kind: "failed", reason: e instanceof Error ? e.message : String(e), status: null };
    } finally {
      if (timer !== null) clearTimeout(timer);
      outer.removeEventListener("abort", onOuter);
    }
  }

  private async send(leg: PdLeg, signal: AbortSignal, committed: () => void): Promise<LegOutcome> {
    const path = leg.endpoint === "chat" ? "/v1/chat/completions" : "/v1/completions";
    const res = await fetch(leg.worker.url + path, { method: "POST", headers: { "content-type": "application/json", "x-request-id": leg.requestId }, body: leg.body, signal });
    if (res.status !== 200) {
      const text = await res.text();
      return { kind: "failed", reason: `HTTP ${res.status}: ${text.slice(0, 200)}`, status: res.status };
    }
    if (!leg.toClient) return { kind: "done", text: await res.text() };
    if (!leg.stream) return { kind: "committed", answer: { text: await res.text() } satisfies Committed };
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = "";
    while (!text.includes("\n\n")) {
      const r = await reader.read();
      if (r.done) return { kind: "failed", reason: "stream closed before any event", status: null };
      text += dec.decode(r.value, { stream: true });
    }
    if (text.startsWith('data: {"error"')) return { kind: "failed", reason: `error event: ${text.slice(0, 200)}`, status: null };
    committed();
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      text += dec.decode(r.value, { stream: true });
    }
    return { kind: "committed", answer: { text } satisfies Committed };
  }
}

/** A candidate for a sim engine with neutral figures; `over` sets load terms. */
export function candidate(id: string, role: PdCandidate["role"], e: Pick<SimEngine, "url">, over: Partial<PdCandidate> = {}): PdCandidate {
  return {
    id, node: id.split("/")[0]!, url: e.url, kind: "sim", role, overlap: { gpu: 0, cpu: 0, disk: 0 },
    activePrefillTokens: 0, activeBlocks: 0, waiting: 0, kvUsage: null, numBlocks: null, bootstrapPort: null, ...over,
  };
}
