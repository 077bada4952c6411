// The clients of the fault simulation: seeded arrivals of streamed chat requests through the REAL
// request lifecycle (src/request: ticket, admission, routeAndBook, attempt, retry within the
// budget, commit, relay with first-token and idle deadlines) over the data plane's engines, with
// the router's outlier ejection fed by each attempt's evidence (src/request/evidence.ts). Prompts
// share a few system prefixes, so the `kv` policy routes on the index the faults disturb.
// Each request carries a deadline: (retry attempts + 1) × first_token_timeout_ms + max_tokens ×
// idle_timeout_ms + 1 s (× 2 legs for P/D); the checker's I4 holds every request to it and to a visible end.
import type { VirtualClock } from "../../core/clock.ts";
import { HerdError } from "../../core/errors.ts";
import type { Rng } from "../../core/rng.ts";
import { blockHashes } from "../../kv/hash.ts";
import { runRequest, refusal, type LifecycleDeps } from "../../request/lifecycle.ts";
import { evidenceRecorder } from "../../request/evidence.ts";
import { Admission, type Outcome, type Ticket } from "../../request/ticket.ts";
import type { ReadResult } from "../../request/upstream.ts";
import type { PdChunk } from "../pd-upstream.ts";
import type { PlanBuilder } from "../../request/plan.ts";
import { BLOCK_SIZE, MODEL, type DataPlane } from "./data.ts";
import type { Checker } from "./check.ts";
import type { EventLog } from "./event-log.ts";
import { outcomeRecorder, QUIET } from "../quiet.ts";

export interface WorkloadOptions {
  requests: number;
  /** Arrivals spread uniformly over [0, spanMs). */
  spanMs: number;
  firstTokenTimeoutMs: number;
  idleTimeoutMs: number;
  maxInFlight: number;
  /** router.retry.attempts: extra attempts after a failure before the first byte. */
  retryAttempts: number;
  /** How a request becomes a plan: aggregated, or P/D (src/pd pdPlanBuilder → runPd). */
  plans: PlanBuilder;
  /** Legs a request may run in sequence before its answer (1; P/D: 2, a prefill then a decode). */
  legsPerRequest: number;
}

interface Client {
  id: string;
  maxTokens: number;
  deadlineMs: number;
  tokens: number;
  sawError: boolean;
  ended: number;
  outcome: Outcome | null;
}

export interface WorkloadCounters {
  sent: number;
  complete: number;
  refused: number;
  upstreamFailed: number;
  broken: number;
}

export class Workload {
  readonly counters: WorkloadCounters = { sent: 0, complete: 0, refused: 0, upstreamFailed: 0, broken: 0 };
  private readonly live = new Map<Ticket, Client>();
  private readonly clients: Client[] = [];
  private readonly admission: Admission;
  private readonly deps: LifecycleDeps<PdChunk>;
  private readonly prefixes: number[][];

  constructor(
    private readonly clock: VirtualClock,
    private readonly rng: Rng,
    private readonly data: DataPlane,
    private readonly o: WorkloadOptions,
    private readonly check: Checker,
    private readonly log: EventLog,
  ) {
    const inner = outcomeRecorder((t, o) => this.done(t, o));
    this.admission = new Admission(clock, evidenceRecorder(inner, () => data.router), o.maxInFlight);
    this.deps = { router: data.router, upstream: data.upstream, clock, log: QUIET, firstTokenTimeoutMs: o.firstTokenTimeoutMs, idleTimeoutMs: o.idleTimeoutMs };
    this.prefixes = Array.from({ length: 4 }, () => this.tokens(BLOCK_SIZE * (2 + rng.int(6))));
  }

  private tokens(n: number): number[] {
    return Array.from({ length: n }, () => 10 + this.rng.int(30_000));
  }

  start(): void {
    const attempts = this.o.retryAttempts + 1;
    for (let i = 0; i < this.o.requests; i++) {
      const at = this.rng.int(this.o.spanMs);
      const prompt = [...this.prefixes[this.rng.int(this.prefixes.length)]!, ...this.tokens(1 + this.rng.int(3 * BLOCK_SIZE))];
      const maxTokens = 2 + this.rng.int(24);
      const id = `r${i}`;
      this.clock.setTimer(at, () => this.send(id, prompt, maxTokens, at + this.o.legsPerRequest * attempts * this.o.firstTokenTimeoutMs + maxTokens * this.o.idleTimeoutMs + 1000));
    }
  }

  private send(id: string, prompt: number[], maxTokens: number, deadlineMs: number): void {
    const c: Client = { id, maxTokens, deadlineMs, tokens: 0, sawError: false, ended: 0, outcome: null };
    this.clients.push(c);
    this.counters.sent++;
    const t = this.admission.ticket();
    this.live.set(t, c);
    if (!t.admit()) return t.release({ kind: "refused", status: 429, reason: "overloaded" });
    const tokens = Uint32Array.from(prompt);
    const route = { model: MODEL, sessionId: null, promptTokens: tokens.length, blockHashes: blockHashes(tokens, BLOCK_SIZE), blockSize: BLOCK_SIZE };
    const json = { model: MODEL, messages: [{ role: "user", content: id }], max_tokens: maxTokens, stream: true };
    const plan = this.o.plans({ endpoint: "chat", body: JSON.stringify(json), stream: true, route, promptTokens: tokens, maxTokens, json });
    try {
      runRequest(this.deps, t, plan, id, (a) => {
        if (a.kind !== "stream") return;
        const read = (r: ReadResult<PdChunk>): void => {
          if (r.done) return;
          if ("error" in r || typeof r.value !== "number" || r.value < 0) return void (c.sawError = true);
          c.tokens++;
          a.body.read(read);
        };
        a.body.read(read);
      });
    } catch (e) {
      refusal(t, e instanceof HerdError ? e : new HerdError(500, "server_error", "internal error", "internal_error"));
    }
  }

  private done(t: Ticket, o: Outcome): void {
    const c = this.live.get(t);
    if (!c) return this.check.fail("request_lost", `a ticket released twice (${o.kind})`);
    c.ended++;
    c.outcome = o;
    this.live.delete(t);
    this.log.add(`request ${c.id} ${o.kind}${"status" in o ? ` ${o.status}` : ""}${"reason" in o && o.reason ? ` ${o.reason}` : ""} on ${t.workerId ?? "-"}`);
    if (o.kind === "complete") this.counters.complete++;
    else if (o.kind === "refused") this.counters.refused++;
    else if (o.kind === "upstream_failed") this.counters.upstreamFailed++;
    else if (o.kind === "broken") this.counters.broken++;
    this.check.expect(this.clock.now() <= c.deadlineMs, "request_hung", () => `${c.id} ended at ${this.clock.now()} ms, past its deadline ${c.deadlineMs} ms`);
  }

  get open(): number {
    return this.live.size;
  }

  /** I4 at an instant: nothing in flight past its deadline. */
  checkNow(): void {
    const now = this.clock.now();
    for (const c of this.live.values()) this.check.expect(now <= c.deadlineMs, "request_hung", () => `${c.id} still open at ${now} ms, deadline ${c.deadlineMs} ms`);
  }

  /** I4 at the end: every request ended once, visibly; no slot or lease left. Stream bodies are read by now. */
  checkEnd(): void {
    this.check.expect(this.live.size === 0 && this.admission.size === 0, "request_lost", () => `${this.live.size} requests never ended (${this.admission.size} slots held)`);
    for (const c of this.clients) {
      const o = c.outcome;
      this.check.expect(c.ended === 1, "request_lost", () => `${c.id} ended ${c.ended} times`);
      if (o?.kind === "complete" && o.status === 200) this.check.expect(c.tokens === c.maxTokens, "request_lost", () => `${c.id} complete with ${c.tokens} of ${c.maxTokens} tokens`);
      if (o?.kind === "broken") this.check.expect(c.sawError, "request_lost", () => `${c.id} broke after ${c.tokens} tokens without an error event`);
    }
    const leases = this.data.slots.reduce((n, s) => n + this.data.registry.inFlightOf(s.id), 0);
    this.check.expect(leases === 0, "lease_leak", () => `${leases} leases still booked`);
  }
}
