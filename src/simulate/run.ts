// One simulated run: the workload's requests (bench's plan(): same generators, same seed, same
// arrival times) enter a SimCluster at their offered times (open loop) or as closed-loop workers free
// up, and each goes through what the frontend does for a streamed request: admission
// (frontend.max_in_flight → 429), request validation, routeAndBook (route + lease in one tick; token
// count and block hashes for kv/prefix, a size estimate otherwise), submit to the engine, the
// first-token deadline, lease.firstToken() at the first token, lease.release() when it ends, and a
// retry on another worker for a 5xx/429 before the first byte when router.allowRetry says so.
// Requests are timed the way `herd bench` times them (TTFT from send, every inter-token gap, E2E to
// the last token), as RequestRecords for bench's summarize().
import { HerdError } from "../core/errors.ts";
import { policyNeedsPrompt } from "../preprocess/shared.ts";
import { checkRequest } from "../protocol/openai.ts";
import type { Lease } from "../router/lease.ts";
import { OutputVocabulary } from "../engine/sim/output.ts";
import type { FinishInfo } from "../engine/sim/scheduler.ts";
import type { Arrivals, Limit, Workload } from "../workload/plan.ts";
import { plan } from "../workload/plan.ts";
import type { RequestRecord } from "../workload/stats.ts";
import type { BenchRequest } from "../workload/workloads.ts";
import { type ClusterConfig, SimCluster } from "./cluster.ts";
import type { PromptEncoder } from "./prompts.ts";
import { ReuseStats, SharingStats } from "./reuse.ts";

export interface RunSpec {
  workload: Workload;
  arrivals: Arrivals;
  limit: Limit;
  /** Closed loop with this many workers (arrivals must be "closed"); null = open loop. */
  concurrency: number | null;
  /** Closed loop: no new request after this many seconds. */
  duration_s: number | null;
  /** Keep each session's requests in order (multi-turn, traces), as the bench runner does. */
  ordered: boolean;
  /** Send ignore_eos (bench's default): outputs run to max_tokens. */
  ignoreEos: boolean;
}

export interface ReplicaResult {
  id: string;
  requests: number;
  prompt_tokens: number;
  cached_tokens: number;
  generated_tokens: number;
  preemptions: number;
  steps: number;
  /** Time-averaged running + waiting at the emulated scrapes, and its peak. */
  mean_queue: number;
  peak_queue: number;
}

export interface SimRunResult {
  records: RequestRecord[];
  replicas: ReplicaResult[];
  reuse: ReuseStats;
  sharing: SharingStats;
  /** Herd's in-flight count left on the registry after the run (leases not released: should be 0). */
  in_flight_left: number;
  /** Virtual seconds from the first arrival to the last event. */
  virtual_s: number;
  wall_s: number;
}

interface Session {
  /** Later requests of the session, sent one by one as the previous one ends. */
  queue: BenchRequest[];
}

export function simulateRun(cfg: ClusterConfig, spec: RunSpec, encoder: PromptEncoder, vocab = new OutputVocabulary(encoder.tokenizer)): SimRunResult {
  const wall0 = performance.now();
  const c = new SimCluster(cfg);
  const { clock, router } = c;
  const e = cfg.engine;
  const reuse = new ReuseStats(e.kvBlocks);
  const sharing = new SharingStats();
  const records: RequestRecord[] = [];
  const sessions = new Map<string, Session>();
  const it = plan(spec.workload, spec.arrivals, spec.limit, cfg.seed)[Symbol.iterator]();
  let index = 0;
  let frontendInFlight = 0;
  let outstanding = 0;
  let arrivalsLeft = true;
  const hashPrompts = policyNeedsPrompt({ policy: cfg.policy });

  const finish = (rec: RequestRecord, admitted: boolean, r: BenchRequest) => {
    records.push(rec);
    outstanding--;
    if (admitted) frontendInFlight--;
    if (spec.ordered) {
      const s = sessions.get(r.session)!;
      const next = s.queue.shift();
      if (next) send(next);
      else sessions.delete(r.session);
    }
    // Deferred to the same instant: a run of requests failing at once must not recurse without bound.
    if (spec.concurrency !== null) clock.setTimer(0, pull);
  };

  const send = (r: BenchRequest) => {
    const startMs = clock.now();
    const rec: RequestRecord = {
      index: index++, session: r.session, at_s: r.at_s, start_s: startMs / 1000,
      ttft_s: null, itl_s: [], e2e_s: null, prompt_tokens: null, completion_tokens: null, cached_tokens: null, error: null,
    };
    outstanding++;
    if (frontendInFlight >= cfg.frontend.max_in_flight) {
      rec.error = "http_429";
      return finish(rec, false, r);
    }
    frontendInFlight++;
    let prompt;
    let promptChars: number;
    try {
      // The frontend's own validation (400s) and prompt-size estimate, on the body bench would send.
      const body = r.messages !== undefined
        ? { model: cfg.model, messages: r.messages, max_tokens: r.max_tokens, stream: true }
        : { model: cfg.model, prompt: r.prompt ?? "", max_tokens: r.max_tokens, stream: true };
      promptChars = checkRequest(r.messages !== undefined ? "chat" : "completions", body).promptChars;
      prompt = encoder.encode(r);
    } catch (err) {
      rec.error = `http_${err instanceof HerdError ? err.status : 500}`;
      return finish(rec, true, r);
    }
    sharing.add(prompt.blockHashes);
    const exclude = new Set<string>();
    for (let attempt = 0; ; attempt++) {
      let worker: string;
      let lease: Lease;
      try {
        // As the frontend: kv/prefix route on the prompt's token count and block hashes (its
        // preprocessor's output, which the encoder reproduces); other policies on a size estimate.
        const routed = router.routeAndBook(
          hashPrompts
            ? { model: cfg.model, sessionId: r.session, promptTokens: prompt.tokens.length, exclude, blockHashes: prompt.blockHashes, blockSize: e.blockSize }
            : { model: cfg.model, sessionId: r.session, promptTokens: Math.ceil(promptChars / 4), exclude },
        );
        worker = routed.worker.id;
        lease = routed.lease;
      } catch (err) {
        // After a failed attempt the frontend reports that failure (502); otherwise the router's own answer.
        rec.error = attempt > 0 ? "http_502" : `http_${err instanceof HerdError ? err.status : 500}`;
        return finish(rec, true, r);
      }
      const rep = c.replica(worker);
      rep.routed++;
      const id = `r${rec.index}.${attempt}`;
      // Ids only: nothing here reads the output text.
      const out = vocab.stream(e.seed, prompt.tokens, spec.ignoreEos ? 0 : e.outputLen, false);
      // One object per request, not per token: the scheduler reads it before asking for the next.
      const tok = { id: 0, eos: false };
      let lastMs = 0;
      let timedOut = false;
      const deadline = clock.setTimer(cfg.frontend.first_token_timeout_ms, () => {
        timedOut = true;
        rep.scheduler.abort(id);
      });
      const probe = c.kv.probe(worker, prompt.blockHashes);
      try {
        rep.scheduler.submit({
          id, promptTokens: prompt.tokens, maxTokens: r.max_tokens, ignoreEos: spec.ignoreEos,
          nextToken: (i) => {
            tok.id = out.tokenId(i);
            tok.eos = out.isEos(i);
            return tok;
          },
          handlers: {
            onToken: (_tok, i, nowMs) => {
              if (i === 0) {
                deadline.cancel();
                lease.firstToken();
                rec.ttft_s = (nowMs - startMs) / 1000;
              } else rec.itl_s.push((nowMs - lastMs) / 1000);
              lastMs = nowMs;
            },
            onFinish: (f: FinishInfo) => {
              deadline.cancel();
              lease.release();
              if (f.reason === "abort") rec.error = timedOut ? "http_504" : "stream_broken";
              else {
                rec.e2e_s = (f.finishMs - startMs) / 1000;
                rec.prompt_tokens = f.promptTokens;
                rec.completion_tokens = f.outputTokens;
                rec.cached_tokens = f.cachedTokens;
              }
              finish(rec, true, r);
            },
          },
        });
      } catch (err) {
        deadline.cancel();
        lease.release();
        const status = err instanceof HerdError ? err.status : 500;
        if ((status >= 500 || status === 429) && router.allowRetry(attempt + 1, { kind: "status", status, firstByteSent: false })) {
          exclude.add(worker);
          continue;
        }
        rec.error = status >= 500 || status === 429 ? "http_502" : `http_${status}`;
        return finish(rec, true, r);
      }
      reuse.add(probe, prompt.blockHashes.length);
      return;
    }
  };

  const arrive = (r: BenchRequest) => {
    if (!spec.ordered) return send(r);
    const s = sessions.get(r.session);
    if (s) s.queue.push(r);
    else {
      sessions.set(r.session, { queue: [] });
      send(r);
    }
  };

  // Closed loop: one more request whenever a worker is free.
  const pull = () => {
    if (!arrivalsLeft) return;
    if (spec.duration_s !== null && clock.now() >= spec.duration_s * 1000) return void (arrivalsLeft = false);
    const n = it.next();
    if (n.done) return void (arrivalsLeft = false);
    arrive({ ...n.value, at_s: clock.now() / 1000 });
  };

  // Open loop: each arrival schedules the next at its offered time.
  const schedule = () => {
    const n = it.next();
    if (n.done) return void (arrivalsLeft = false);
    const r = n.value;
    clock.setTimer(r.at_s * 1000 - clock.now(), () => {
      arrive(r);
      schedule();
    });
  };

  const scrapeEvery = cfg.router.metrics_scrape_interval_ms;
  const scrape = () => {
    c.scrape();
    if (arrivalsLeft || outstanding > 0) clock.setTimer(scrapeEvery, scrape);
  };

  if (spec.concurrency !== null) clock.setTimer(0, () => {
    for (let w = 0; w < spec.concurrency!; w++) pull();
  });
  else schedule();
  if (scrapeEvery > 0) clock.setTimer(scrapeEvery, scrape);
  while (clock.step()) {
    // every event runs inside step(); the loop ends when nothing is pending
  }

  records.sort((a, b) => a.index - b.index);
  const replicas: ReplicaResult[] = c.replicas.map((rep) => {
    const s = rep.scheduler.stats();
    return {
      id: rep.id, requests: rep.routed, prompt_tokens: s.promptTokens, cached_tokens: s.prefixHits, generated_tokens: s.generationTokens,
      preemptions: s.preemptions, steps: s.steps, mean_queue: c.scrapes > 0 ? rep.loadSum / c.scrapes : 0, peak_queue: rep.loadPeak,
    };
  });
  const in_flight_left = c.replicas.reduce((n, rep) => n + c.registry.inFlightOf(rep.id), 0);
  return { records, replicas, reuse, sharing, in_flight_left, virtual_s: clock.now() / 1000, wall_s: (performance.now() - wall0) / 1000 };
}
