// One simulated run: the workload's requests (bench's plan(): same generators, same seed, same
// arrival times) enter a SimCluster at their offered times (open loop) or as closed-loop workers free
// up, and each goes through the frontend's own request lifecycle (src/request) for a streamed
// request: a ticket and its admission slot (frontend.max_in_flight → 429), request validation, a
// one-leg plan routed with routeAndBook (token count and block hashes for kv/prefix, a size estimate
// otherwise), the attempt through a SimUpstream on the virtual clock, the first-token deadline, the
// lease's first token and release, and a retry on another worker for a 5xx/429 before the first byte
// when router.allowRetry says so. Requests are timed the way `herd bench` times them (TTFT from
// send, every inter-token gap, E2E to the last token), as RequestRecords for bench's summarize().
import { HerdError } from "../core/errors.ts";
import { policyNeedsPrompt } from "../preprocess/shared.ts";
import { checkRequest } from "../protocol/openai.ts";
import { OutputVocabulary } from "../engine/sim/output.ts";
import { refusal, runRequest, type LifecycleDeps } from "../request/lifecycle.ts";
import { aggregatedPlan, type Plan } from "../request/plan.ts";
import { Admission, type Outcome, type Ticket } from "../request/ticket.ts";
import type { Arrivals, Limit, Workload } from "../workload/plan.ts";
import { plan } from "../workload/plan.ts";
import type { RequestRecord } from "../workload/stats.ts";
import type { BenchRequest } from "../workload/workloads.ts";
import { type ClusterConfig, SimCluster } from "./cluster.ts";
import type { PromptEncoder } from "./prompts.ts";
import { consume, simUpstream, type InRun } from "./sim-client.ts";
import { ReuseStats, SharingStats } from "./reuse.ts";
import { outcomeRecorder, QUIET } from "./quiet.ts";

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


/** simulate logs nothing per request (a seeded run prints its summary only). */
/** The RequestRecord error of a request's outcome (null: answered in full). */
function errorOf(o: Outcome): string | null {
  switch (o.kind) {
    case "complete":
      return o.status === 200 ? null : `http_${o.status}`;
    case "refused":
    case "upstream_failed":
      return `http_${o.status}`;
    case "broken":
      return "stream_broken";
    default:
      return o.kind;
  }
}

export function simulateRun(cfg: ClusterConfig, spec: RunSpec, encoder: PromptEncoder, vocab = new OutputVocabulary(encoder.tokenizer)): SimRunResult {
  return new SimRun(cfg, spec, encoder, vocab).run();
}

/** One run's state: the cluster, the arrivals, the requests in flight and what is recorded. */
class SimRun {
  private readonly c: SimCluster;
  private readonly clock: SimCluster["clock"];
  private readonly reuse: ReuseStats;
  private readonly sharing = new SharingStats();
  private readonly records: RequestRecord[] = [];
  private readonly sessions = new Map<string, Session>();
  private readonly it: Iterator<BenchRequest>;
  private index = 0;
  private outstanding = 0;
  private arrivalsLeft = true;
  private readonly hashPrompts: boolean;
  private readonly byTicket = new Map<Ticket, InRun>();
  private readonly byRequest = new Map<string, InRun>();
  private readonly admission: Admission;
  private readonly deps: LifecycleDeps<number>;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly spec: RunSpec,
    private readonly encoder: PromptEncoder,
    vocab: OutputVocabulary,
  ) {
    this.c = new SimCluster(cfg);
    this.clock = this.c.clock;
    this.reuse = new ReuseStats(cfg.engine.kvBlocks);
    this.it = plan(spec.workload, spec.arrivals, spec.limit, cfg.seed)[Symbol.iterator]();
    this.hashPrompts = policyNeedsPrompt({ policy: cfg.policy });
    // The ticket's outcome is the record's error; it is the last thing that happens to a request.
    const recorder = outcomeRecorder((t, o) => {
      const q = this.byTicket.get(t)!;
      this.byTicket.delete(t);
      q.rec.error = errorOf(o);
      this.finish(q);
    });
    this.admission = new Admission(this.clock, recorder, cfg.frontend.max_in_flight);
    this.deps = {
      router: this.c.router,
      upstream: simUpstream(this.c, spec, vocab, this.byRequest, this.reuse),
      clock: this.clock,
      log: QUIET,
      firstTokenTimeoutMs: cfg.frontend.first_token_timeout_ms,
      idleTimeoutMs: cfg.frontend.idle_timeout_ms ?? Infinity,
    };
  }

  run(): SimRunResult {
    const wall0 = performance.now();
    const { clock, spec, c } = this;
    if (spec.concurrency !== null) clock.setTimer(0, () => {
      for (let w = 0; w < spec.concurrency!; w++) this.pull();
    });
    else this.schedule();
    if (this.cfg.router.metrics_scrape_interval_ms > 0) clock.setTimer(this.cfg.router.metrics_scrape_interval_ms, this.scrape);
    while (clock.step()) {
      // every event runs inside step(); the loop ends when nothing is pending
    }
    this.records.sort((a, b) => a.index - b.index);
    const in_flight_left = c.replicas.reduce((n, rep) => n + c.registry.inFlightOf(rep.id), 0);
    return {
      records: this.records, replicas: replicaResults(c), reuse: this.reuse, sharing: this.sharing, in_flight_left,
      virtual_s: clock.now() / 1000, wall_s: (performance.now() - wall0) / 1000,
    };
  }

  private finish(q: InRun): void {
    this.records.push(q.rec);
    this.outstanding--;
    this.byRequest.delete(q.requestId);
    if (this.spec.ordered) {
      const s = this.sessions.get(q.r.session)!;
      const next = s.queue.shift();
      if (next) this.send(next);
      else this.sessions.delete(q.r.session);
    }
    // Deferred to the same instant: a run of requests failing at once must not recurse without bound.
    if (this.spec.concurrency !== null) this.clock.setTimer(0, this.pull);
  }

  /** One request through the frontend's lifecycle: ticket, admission, validation, plan, run. */
  private send(r: BenchRequest): void {
    const clock = this.clock;
    const rec: RequestRecord = {
      index: this.index++, session: r.session, at_s: r.at_s, start_s: clock.now() / 1000,
      ttft_s: null, itl_s: [], e2e_s: null, prompt_tokens: null, completion_tokens: null, cached_tokens: null, error: null,
    };
    const q: InRun = { rec, r, requestId: `r${rec.index}`, startMs: clock.now(), lastMs: 0, prompt: null };
    this.outstanding++;
    const t = this.admission.ticket();
    this.byTicket.set(t, q);
    if (!t.admit()) return t.release({ kind: "refused", status: 429, reason: "overloaded" });
    let legs: Plan;
    try {
      legs = requestPlan(this.cfg, this.encoder, r, this.hashPrompts, q);
    } catch (err) {
      return void refusal(t, err instanceof HerdError ? err : new HerdError(500, "server_error", "internal error", "internal_error"));
    }
    this.sharing.add(q.prompt!.blockHashes);
    this.byRequest.set(q.requestId, q);
    runRequest(this.deps, t, legs, q.requestId, (a) => {
      if (a.kind === "stream") consume(a.body, q, clock);
    });
  }

  private arrive(r: BenchRequest): void {
    if (!this.spec.ordered) return this.send(r);
    const s = this.sessions.get(r.session);
    if (s) s.queue.push(r);
    else {
      this.sessions.set(r.session, { queue: [] });
      this.send(r);
    }
  }

  /** Closed loop: one more request whenever a worker is free. */
  private readonly pull = (): void => {
    if (!this.arrivalsLeft) return;
    if (this.spec.duration_s !== null && this.clock.now() >= this.spec.duration_s * 1000) return void (this.arrivalsLeft = false);
    const n = this.it.next();
    if (n.done) return void (this.arrivalsLeft = false);
    this.arrive({ ...n.value, at_s: this.clock.now() / 1000 });
  };

  /** Open loop: each arrival schedules the next at its offered time. */
  private schedule(): void {
    const n = this.it.next();
    if (n.done) return void (this.arrivalsLeft = false);
    const r = n.value;
    this.clock.setTimer(r.at_s * 1000 - this.clock.now(), () => {
      this.arrive(r);
      this.schedule();
    });
  }

  private readonly scrape = (): void => {
    this.c.scrape();
    if (this.arrivalsLeft || this.outstanding > 0) this.clock.setTimer(this.cfg.router.metrics_scrape_interval_ms, this.scrape);
  };
}

function replicaResults(c: SimCluster): ReplicaResult[] {
  return c.replicas.map((rep) => {
    const s = rep.scheduler.stats();
    return {
      id: rep.id, requests: rep.routed, prompt_tokens: s.promptTokens, cached_tokens: s.prefixHits, generated_tokens: s.generationTokens,
      preemptions: s.preemptions, steps: s.steps, mean_queue: c.scrapes > 0 ? rep.loadSum / c.scrapes : 0, peak_queue: rep.loadPeak,
    };
  });
}

/**
 * What the frontend does before routing, on the body bench would send: its validation (400s) and,
 * as the frontend, kv/prefix route on the prompt's token count and block hashes (its
 * preprocessor's output, which the encoder reproduces), other policies on the chars/4 estimate.
 * Sets q.prompt; throws as the frontend would refuse.
 */
function requestPlan(cfg: ClusterConfig, encoder: PromptEncoder, r: BenchRequest, hashPrompts: boolean, q: InRun): Plan {
  const endpoint = r.messages !== undefined ? "chat" : "completions";
  const body = r.messages !== undefined
    ? { model: cfg.model, messages: r.messages, max_tokens: r.max_tokens, stream: true }
    : { model: cfg.model, prompt: r.prompt ?? "", max_tokens: r.max_tokens, stream: true };
  const promptChars = checkRequest(endpoint, body).promptChars;
  const prompt = (q.prompt = encoder.encode(r));
  const route = hashPrompts
    ? { model: cfg.model, sessionId: r.session, promptTokens: prompt.tokens.length, blockHashes: prompt.blockHashes, blockSize: cfg.engine.blockSize }
    : { model: cfg.model, sessionId: r.session, promptTokens: Math.ceil(promptChars / 4) };
  return aggregatedPlan({ endpoint, body: "", stream: true, route, promptTokens: prompt.tokens, maxTokens: r.max_tokens, json: {} });
}
