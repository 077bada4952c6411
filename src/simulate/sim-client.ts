// simulate's side of the request lifecycle: the SimSchedulers as its Upstream (plus what a run
// counts per attempt), and the bench client reading each answer token by token on the virtual clock.
import type { OutputVocabulary } from "../engine/sim/output.ts";
import type { FinishInfo } from "../engine/sim/scheduler.ts";
import { SimUpstream, TOKEN_FRAMES } from "./sim-upstream.ts";
import type { ChunkSource, LegRequest, ReadResult, Upstream } from "../request/upstream.ts";
import type { RequestRecord } from "../workload/stats.ts";
import type { BenchRequest } from "../workload/workloads.ts";
import type { SimCluster } from "./cluster.ts";
import type { EncodedPrompt } from "./prompts.ts";
import type { ReuseStats } from "./reuse.ts";
import type { RunSpec } from "./run.ts";

/** One request in flight in the run: its record, timing state and prompt. */
export interface InRun {
  rec: RequestRecord;
  r: BenchRequest;
  requestId: string;
  startMs: number;
  lastMs: number;
  prompt: EncodedPrompt | null;
}

/** The bench client's side: every token timed as it arrives (TTFT from send, each gap after). */
export function consume(body: ChunkSource<number>, q: InRun, clock: SimCluster["clock"]): void {
  let first = true;
  const next = (r: ReadResult<number>): void => {
    if (r.done || "error" in r || r.value < 0) return; // the ticket's outcome says how it ended
    const now = clock.now();
    if (first) q.rec.ttft_s = (now - q.startMs) / 1000;
    else q.rec.itl_s.push((now - q.lastMs) / 1000);
    first = false;
    q.lastMs = now;
    body.read(next);
  };
  body.read(next);
}

/**
 * The sim schedulers as the lifecycle's Upstream, plus what simulate counts per attempt: requests
 * routed to each replica, and the prompt's reuse on it (probed before submit, kept if accepted).
 */
export function simUpstream(c: SimCluster, spec: RunSpec, vocab: OutputVocabulary, byRequest: Map<string, InRun>, reuse: ReuseStats): Upstream<number> {
  const e = c.cfg.engine;
  const sim = new SimUpstream<number>({
    frames: TOKEN_FRAMES,
    scheduler: (id) => c.replica(id).scheduler,
    ignoreEos: spec.ignoreEos,
    output(leg: LegRequest) {
      // Ids only: nothing here reads the output text.
      const out = vocab.stream(e.seed, byRequest.get(leg.requestId)!.prompt!.tokens, spec.ignoreEos ? 0 : e.outputLen, false);
      // One object per request, not per token: the scheduler reads it before asking for the next.
      const tok = { id: 0, eos: false };
      return (i) => {
        tok.id = out.tokenId(i);
        tok.eos = out.isEos(i);
        return tok;
      };
    },
    onFinish(leg: LegRequest, f: FinishInfo) {
      if (f.reason === "abort") return;
      const q = byRequest.get(leg.requestId)!;
      q.rec.e2e_s = (f.finishMs - q.startMs) / 1000;
      q.rec.prompt_tokens = f.promptTokens;
      q.rec.completion_tokens = f.outputTokens;
      q.rec.cached_tokens = f.cachedTokens;
    },
  });
  return {
    format: sim.format,
    send(leg, signal, reply) {
      c.replica(leg.workerId).routed++;
      const hashes = byRequest.get(leg.requestId)!.prompt!.blockHashes;
      const probe = c.kv.probe(leg.workerId, hashes);
      sim.send(leg, signal, (res) => {
        if (!("error" in res) && res.status === 200) reuse.add(probe, hashes.length);
        reply(res);
      });
    },
  };
}
