// One seed of the fault simulation, start to verdict. Everything is drawn from the seed through
// named streams (core/seed.ts seedFor): the fault schedule, the workload, the network's delays,
// the engines' KV links, each node's election jitter — so a seed is the whole run, and adding a
// stream never shifts another's draws. The loop runs the virtual clock one instant at a time: every
// timer due at that instant, then the promise continuations they started (the peers backend and
// the KV replay are async), then the invariants (check.ts). After the span every fault has ended;
// the tail lets each request reach its deadline, then the end-of-run invariants are checked.
import { VirtualClock } from "../../core/clock.ts";
import { SeededRng } from "../../core/rng.ts";
import { seedFor } from "../../core/seed.ts";
import type { Config, Role, RouterConfig } from "../../config/types.ts";
import { aggregatedPlan } from "../../request/plan.ts";
import { pdPlanBuilder } from "../../pd/plan.ts";
import { Checker, type Violation } from "./check.ts";
import { ControlPlane, type ControlBugs } from "./control.ts";
import { DataPlane, type DataBugs } from "./data.ts";
import { EventLog } from "./event-log.ts";
import { VirtualNet } from "./net.ts";
import { describeFault, drawSchedule, type FaultKind } from "./schedule.ts";
import { Workload, type WorkloadCounters } from "./workload.ts";
import { FaultInjector } from "./world.ts";
import { QUIET } from "../quiet.ts";

export interface FaultRunOptions {
  nodes: number;
  engines: number;
  requests: number;
  faults: number;
  spanMs: number;
  kinds?: readonly FaultKind[];
  /** herd's config: the router and P/D sections are used. */
  config: Config;
  /** Engines alternate prefill / decode and requests run as P/D plans (runPd over VirtualPd). */
  pd?: boolean;
  bugs?: ControlBugs & DataBugs;
}

export interface FaultRunResult {
  seed: number;
  ok: boolean;
  violations: Violation[];
  log: string;
  injected: Record<FaultKind, number>;
  checks: number;
  requests: WorkloadCounters;
  terms: number;
  actuations: number;
  kv: { published: number; dropped: number; replays: number; resyncs: number };
  /** P/D: KV transfers completed, and decode legs that found no held blocks (prefilled locally). */
  pd: { transfers: number; loadFailures: number };
  virtualMs: number;
  /** Distinct instants run (each followed by the invariants). */
  instants: number;
}

const FIRST_TOKEN_TIMEOUT_MS = 1500;
const IDLE_TIMEOUT_MS = 400;
const MAX_TOKENS = 25;

export async function runFaultSeed(seed: number, o: FaultRunOptions): Promise<FaultRunResult> {
  const clock = new VirtualClock(0);
  const rng = (name: string) => new SeededRng(seedFor(seed, name));
  const log = new EventLog(() => clock.now());
  const check = new Checker(() => clock.now(), log);
  const bugs = o.bugs ?? {};
  const net = new VirtualNet(clock, rng("net"));
  const control = new ControlPlane(clock, net, rng("control"), {
    nodes: o.nodes, timing: { heartbeat_ms: 250, dead_after_ms: 1500 }, election: { heartbeat_ms: 100, election_ms: 600 }, assignEveryMs: 250, bugs,
  }, log, check);
  const router: RouterConfig = { ...o.config.router, metrics_scrape_interval_ms: 0, outlier: { ...o.config.router.outlier, base_ejection_ms: 500, max_ejection_ms: 4000 } };
  const data = new DataPlane(clock, rng("data"), { engines: o.engines, kvBlocks: 48, replayBufferSteps: 6, detectMs: 300, startMs: 400, headTimeoutMs: 1000, tierBlocks: 32, router, bugs,
    ...(o.pd ? { roles: Array.from({ length: o.engines }, (_, i) => (i % 2 === 0 ? "prefill" : "decode") as Role) } : {}) }, log);
  const config: Config = { ...o.config, router, pd: { ...o.config.pd, min_prefill_tokens: 16 } };
  const plans = o.pd
    ? pdPlanBuilder({ config: () => config, registry: data.registry, router: () => data.router, clock, rng: rng("pd"), log: QUIET })
    : aggregatedPlan;
  const workload = new Workload(clock, rng("workload"), data, {
    requests: o.requests, spanMs: o.spanMs, firstTokenTimeoutMs: FIRST_TOKEN_TIMEOUT_MS, idleTimeoutMs: IDLE_TIMEOUT_MS, maxInFlight: 64, retryAttempts: router.retry.attempts, plans, legsPerRequest: o.pd ? 2 : 1,
  }, check, log);
  const injector = new FaultInjector(clock, net, control, data, log);
  const schedule = drawSchedule(rng("schedule"), { count: o.faults, spanMs: o.spanMs, nodes: o.nodes, engines: o.engines, ...(o.kinds ? { kinds: o.kinds } : {}) });
  log.add(`seed ${seed}: ${o.nodes} nodes, ${o.engines} engines, ${o.requests} requests, ${schedule.length} faults`);
  for (const f of schedule) log.add(`  plan ${f.atMs} ${describeFault(f)}`);
  injector.schedule(schedule);
  control.start();
  workload.start();

  const endMs = o.spanMs + (o.pd ? 2 : 1) * (router.retry.attempts + 1) * FIRST_TOKEN_TIMEOUT_MS + MAX_TOKENS * IDLE_TIMEOUT_MS + 2000;
  const lastSeq = new Map<string, string | null>();
  // The tail ends once every request has ended and the KV streams had a second to catch up (or at
  // the latest deadline any request can have).
  let instants = 0;
  for (let next = clock.peek(); next !== undefined && next <= endMs; next = clock.peek()) {
    if (next > o.spanMs + 1000 && workload.open === 0) break;
    instants++;
    while (clock.peek() === next) clock.step();
    await new Promise<void>((ok) => setImmediate(ok));
    control.poll();
    workload.checkNow();
    checkIndex(data, check, lastSeq);
    if (data.tierWrongLoads > 0) {
      check.fail("tier_wrong_block", `${data.tierWrongLoads} blocks loaded that the tier did not hold`);
      data.tierWrongLoads = 0;
    }
  }
  workload.checkEnd();
  control.close();
  const resyncs = data.consumer.ingest.status().reduce((n, s) => n + s.resyncs + s.restarts, 0);
  return {
    seed, ok: check.violations.length === 0, violations: check.violations, log: log.text(), injected: injector.injected, checks: check.checks,
    requests: workload.counters, terms: check.terms, actuations: check.actuations,
    kv: { ...data.kvCounters, resyncs }, pd: { transfers: data.pd.counters.transfers, loadFailures: data.pd.counters.loadFailures }, virtualMs: clock.now(), instants,
  };
}

/** I5: for each worker whose stream just caught up with its live engine, index ⊆ truth on GPU. */
function checkIndex(data: DataPlane, check: Checker, lastSeq: Map<string, string | null>): void {
  for (const s of data.slots) {
    if (!data.caughtUp(s.id)) continue;
    const seq = data.consumer.ingest.stream(s.id)?.status().lastSeq ?? null;
    if (lastSeq.get(s.id) === seq) continue;
    lastSeq.set(s.id, seq);
    let stale = 0;
    let example: bigint | null = null;
    for (const h of data.seen.get(s.id)!) {
      if (data.index.holds(s.id, h, "gpu") && !data.truth.holds(s.id, h, "gpu")) {
        stale++;
        example ??= h;
      }
    }
    check.expect(stale === 0, "stale_block", () => `${s.id}: index credits ${stale} blocks the engine does not hold (e.g. ${example!.toString(16)}) at seq ${seq}`);
  }
}
