// herd's own Prometheus metrics, in a herd-owned Registry (never prom-client's global one, so two
// daemons in one test process and the sim engine's vLLM metrics never collide). Label values are
// bounded: models are the configured names (anything else is "unknown"), workers are registry ids,
// statuses are HTTP codes; never a raw client string (docs/references.md#reliability-2, PYSEC-2026-4325).
import { Counter, Gauge, Registry } from "prom-client";
import type { Worker } from "../workers/worker.ts";
import { WORKER_STATES } from "../workers/worker.ts";
import { METRIC } from "./names.ts";
import { FastHistogram, TallyCounter } from "./fast-series.ts";

export type ClientAbortPhase = "before_first_token" | "streaming";
/** `peer_unreachable`: the peer node owning the worker did not answer (src/cluster/forward.ts); `head_timeout`: the engine sent no response head in time. */
export type UpstreamErrorKind = "connect" | "peer_unreachable" | "head_timeout" | "status_5xx" | "reset" | "eof" | "first_token_timeout" | "idle_timeout" | "worker_down" | "shutdown" | "drain";
export type RejectReason = "overloaded" | "draining" | "unauthorized" | "too_large" | "invalid" | "no_worker" | "not_found" | "body_timeout";
/** Stages of a routing decision: tokenize (chat template + encoding), hash (block hashes), match (cache overlap), score (filters, scorers, pick). */
export type RoutingStage = "tokenize" | "hash" | "match" | "score";

const TTFT_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
// vLLM's time-per-output-token buckets (vllm/v1/metrics/loggers.py), with two finer ones in front.
const ITL_BUCKETS_S = [0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const E2E_BUCKETS_S = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320];
// A warm decision stage takes microseconds; a cold 32k-token prompt's tokenization ~0.1-0.3 s.
const STAGE_BUCKETS_S = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export class HerdMetrics {
  readonly registry = new Registry();
  private readonly knownModels: Set<string>;
  // The per-request series: no prom-client label hashing on the request path (fast-series.ts).
  private readonly requests: TallyCounter<"model" | "worker" | "status">;
  private readonly ttft: FastHistogram<"model">;
  private readonly e2e: FastHistogram<"model">;
  private readonly itl: FastHistogram<"model">;
  private readonly decisions: TallyCounter<"policy" | "worker">;
  private readonly restarts: Counter<"worker">;
  private readonly retries: Counter<"model" | "reason">;
  private readonly migrations: Counter<"model" | "reason" | "result">;
  private readonly aborts: Counter<"model" | "phase">;
  private readonly clientFailures: Counter<"model" | "outcome" | "phase">;
  private readonly upstreamErrors: Counter<"worker" | "kind">;
  private readonly rejected: Counter<"reason">;
  /** Set twice per request; the gauge reads it at scrape time. */
  private frontendInFlightNow = 0;
  private readonly stages: FastHistogram<"stage">;
  private readonly predictedCached: TallyCounter<"model">;
  private readonly reportedCached: TallyCounter<"model">;
  private readonly cachedRatio: Gauge<"model">;
  private readonly promptTokensCounted: TallyCounter<"model">;
  /** Per model: [predicted, reported] cached tokens summed since start (the ratio gauge's source). */
  private readonly cachedSums = new Map<string, [number, number]>();
  private readonly restartsSeen = new Map<string, number>();

  /** `workers` is read at scrape time for the per-worker gauges and the restart counter. */
  constructor(models: readonly string[], workers: () => readonly Worker[]) {
    this.knownModels = new Set(models);
    const registers = [this.registry];
    // The plain series: name, help, labels (and buckets); the scrape-time ones follow below.
    const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) => new Counter<L>({ name, help, labelNames, registers });
    const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[]) => new Gauge<L>({ name, help, labelNames, registers });
    const tally = <L extends string>(name: string, help: string, labelNames: readonly L[]) => new TallyCounter<L>({ name, help, labelNames, registers });
    const histogram = <L extends string>(name: string, help: string, _labelNames: readonly L[], buckets: number[]) => new FastHistogram<L>(name, help, buckets, registers);
    this.requests = tally(
      METRIC.requestsTotal,
      "Requests answered by the frontend, by model, worker (empty when none was chosen) and HTTP status.",
      ["model", "worker", "status"],
    );
    this.ttft = histogram(
      METRIC.ttftSeconds,
      "Time from request arrival at the frontend to the first upstream chunk carrying a token.",
      ["model"],
      TTFT_BUCKETS_S,
    );
    this.e2e = histogram(
      METRIC.e2eSeconds,
      "Time from request arrival at the frontend to the end of the response.",
      ["model"],
      E2E_BUCKETS_S,
    );
    this.itl = histogram(
      METRIC.timePerOutputTokenSeconds,
      "Mean time between output tokens of each completed request: (end − first token) / (output tokens − 1), output tokens from usage.completion_tokens or the stream's events; requests with fewer than two tokens are not counted.",
      ["model"],
      ITL_BUCKETS_S,
    );
    this.decisions = tally(
      METRIC.routingDecisionsTotal,
      "Routing decisions by policy and chosen worker.",
      ["policy", "worker"],
    );
    this.retries = counter(
      METRIC.retriesTotal,
      "Requests re-sent to another worker after a failure before the first byte.",
      ["model", "reason"],
    );
    this.migrations = counter(
      METRIC.migrationsTotal,
      "Streams whose worker failed after tokens were sent, by failure reason and result: migrated (re-sent with the tokens so far to another worker), or why not (limit, not_replayable, too_long, no_worker).",
      ["model", "reason", "result"],
    );
    this.aborts = counter(
      METRIC.clientAbortsTotal,
      "Requests the client abandoned (disconnect), by phase.",
      ["model", "phase"],
    );
    this.clientFailures = counter(
      METRIC.clientFailuresTotal,
      "Requests that ended on the client's side, never a worker's: client_closed (hung up mid-upload, before the first token or mid-stream) or client_stalled (stopped reading a stream), by phase.",
      ["model", "outcome", "phase"],
    );
    this.upstreamErrors = counter(
      METRIC.upstreamErrorsTotal,
      "Upstream (engine) failures seen by the frontend, by worker and kind.",
      ["worker", "kind"],
    );
    this.rejected = counter(
      METRIC.rejectedTotal,
      "Requests refused before routing, by reason.",
      ["reason"],
    );
    const inFlightNow = () => this.frontendInFlightNow;
    new Gauge({
      name: METRIC.frontendInFlight,
      help: "Requests admitted by the frontend and not yet finished.",
      registers,
      collect() {
        this.set(inFlightNow());
      },
    });
    this.stages = histogram(
      METRIC.routingStageSeconds,
      "Time spent per routing decision stage: tokenize (chat template + token ids), hash (KV block hashes), match (cache overlap lookup), score (filters, scorers, pick).",
      ["stage"],
      STAGE_BUCKETS_S,
    );
    this.predictedCached = tally(
      METRIC.predictedCachedTokensTotal,
      "Prompt tokens the KV-aware policy expected the chosen worker to have cached (GPU overlap x block size), for requests whose engine reported usage.",
      ["model"],
    );
    this.reportedCached = tally(
      METRIC.reportedCachedTokensTotal,
      "Prompt tokens the engines reported as served from their prefix cache (usage.prompt_tokens_details.cached_tokens).",
      ["model"],
    );
    this.cachedRatio = gauge(
      METRIC.cachedTokensRatio,
      "Reported / predicted cached prompt tokens since start, for requests routed with a prediction: below 1 the index claims blocks the engines no longer hold (stale), above 1 the engines hold blocks the index has not seen yet.",
      ["model"],
    );
    this.promptTokensCounted = tally(
      METRIC.promptTokensTotal,
      "Prompt tokens (herd's count: exact when the router tokenized the prompt, else characters / 4) of the requests whose engine reported cached tokens: the prefix hit rate is herd_reported_cached_tokens_total over this.",
      ["model"],
    );
    const restartsSeen = this.restartsSeen;
    this.restarts = new Counter({
      name: METRIC.engineRestartsTotal,
      help: "Engine restarts performed by the supervisor, by worker.",
      labelNames: ["worker"],
      registers,
      // The supervisor counts restarts on the Worker; turn that count into a monotonic counter.
      collect() {
        for (const w of workers()) {
          const seen = restartsSeen.get(w.id);
          // First sight creates the series (at 0 or the count so far); later only deltas are added.
          if (seen === undefined || w.restarts > seen) {
            this.inc({ worker: w.id }, w.restarts - (seen ?? 0));
            restartsSeen.set(w.id, w.restarts);
          }
        }
      },
    });
    new Gauge({
      name: METRIC.workerInFlight,
      help: "Requests herd has dispatched to each worker and not yet finished.",
      labelNames: ["worker", "model"],
      registers,
      collect() {
        this.reset();
        for (const w of workers()) this.set({ worker: w.id, model: w.model }, w.load.in_flight);
      },
    });
    new Gauge({
      name: METRIC.workerState,
      help: "1 for each worker's current state (starting, ready, draining, failed, stopped), else 0.",
      labelNames: ["worker", "state"],
      registers,
      collect() {
        this.reset();
        for (const w of workers()) for (const s of WORKER_STATES) this.set({ worker: w.id, state: s }, w.state === s ? 1 : 0);
      },
    });
  }

  /** A model label that cannot grow without bound: configured names only. */
  model(name: string | null | undefined): string {
    return name && this.knownModels.has(name) ? name : "unknown";
  }

  request(model: string | null, worker: string | null, status: number): void {
    const m = this.model(model);
    const w = worker ?? "";
    this.requests.inc(`${m}\0${w}\0${status}`, () => ({ model: m, worker: w, status: String(status) }));
  }
  firstToken(model: string, seconds: number): void {
    const m = this.model(model);
    this.ttft.observe(m, () => ({ model: m }), seconds);
  }
  finished(model: string, seconds: number): void {
    const m = this.model(model);
    this.e2e.observe(m, () => ({ model: m }), seconds);
  }
  timePerOutputToken(model: string, seconds: number): void {
    const m = this.model(model);
    this.itl.observe(m, () => ({ model: m }), seconds);
  }
  decision(policy: string, worker: string): void {
    this.decisions.inc(`${policy}\0${worker}`, () => ({ policy, worker }));
  }
  retry(model: string, reason: UpstreamErrorKind): void {
    this.retries.inc({ model: this.model(model), reason });
  }
  migration(model: string, reason: UpstreamErrorKind, result: string): void {
    this.migrations.inc({ model: this.model(model), reason, result });
  }
  clientAbort(model: string, phase: ClientAbortPhase): void {
    this.aborts.inc({ model: this.model(model), phase });
  }
  /** A client-side end (issue 10): counted here, never as a 5xx and never against a worker. */
  clientFailure(model: string | null, outcome: "client_closed" | "client_stalled", phase: "upload" | ClientAbortPhase): void {
    this.clientFailures.inc({ model: this.model(model), outcome, phase });
    if (outcome === "client_closed" && phase !== "upload") this.aborts.inc({ model: this.model(model), phase });
  }
  upstreamError(worker: string, kind: UpstreamErrorKind): void {
    this.upstreamErrors.inc({ worker, kind });
  }
  reject(reason: RejectReason): void {
    this.rejected.inc({ reason });
  }
  setFrontendInFlight(n: number): void {
    this.frontendInFlightNow = n;
  }
  routingStage(stage: RoutingStage, seconds: number): void {
    this.stages.observe(stage, () => ({ stage }), seconds);
  }
  /**
   * An engine reported `reported` cached prompt tokens for a request the policy predicted
   * `predicted` for (null: the policy makes no prediction; only the reported side counts).
   */
  cachedTokens(model: string, predicted: number | null, reported: number, promptTokens = 0): void {
    const m = this.model(model);
    const labels = () => ({ model: m });
    this.reportedCached.inc(m, labels, reported);
    this.promptTokensCounted.inc(m, labels, Math.max(promptTokens, reported));
    if (predicted === null) return;
    this.predictedCached.inc(m, labels, predicted);
    const sums = this.cachedSums.get(m) ?? [0, 0];
    sums[0] += predicted;
    sums[1] += reported;
    this.cachedSums.set(m, sums);
    if (sums[0] > 0) this.cachedRatio.set({ model: m }, sums[1] / sums[0]);
  }

  contentType(): string {
    return this.registry.contentType;
  }
  render(): Promise<string> {
    return this.registry.metrics();
  }
}
