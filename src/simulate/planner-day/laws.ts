// The planners a simulation compares: herd's decide(), static peak provisioning, and the anchors'
// scaling rules emulated on the same signals (their defaults as documented by each project):
//   hpa-keda     Kubernetes HPA on concurrency per engine (target 32, ±10% tolerance, scale-up at
//                once, scale-down to the max desired of the last 300 s) with KEDA's scale to zero
//                after a 300 s cooldown (kubernetes.io HPA algorithm; keda.sh ScaledObject docs)
//   knative-kpa  Knative KPA: concurrency averaged over 60 s (stable) and 6 s (panic, entered at 2×
//                capacity, no scale-down while in it), scale-down at most halving per tick, to zero
//                after the stable window of no traffic (knative/serving config-autoscaler defaults)
//   aibrix-apa   AIBrix APA: ceil(current × metric/target) with 10% up / 20% down tolerance
//   dynamo-load  Dynamo's load mode: ±1 engine per 60 s against a flat 0.8 utilisation threshold
//                (the rule behind ai-dynamo/dynamo#9294's 2↔1 oscillation)
//   llmd-token   llm-d's token-aware rule: engines = ceil(token demand / (capacity × 0.8)) each minute,
//                no down window
// The emulations share `toward()`: start on free hosts, drain the quietest, stop drained empties.
import { decide } from "../../planner/decide.ts";
import { engineDemand } from "../../planner/demand.ts";
import { pickHost, pickVictim } from "../../planner/placement.ts";
import type { Action, Decision, Fleet, PlannerConfig, PlannerMemory, PoolSignals } from "../../planner/types.ts";
import type { LawExtras, PlannerLaw } from "./fleet-sim.ts";

type Signals = ReadonlyMap<string, PoolSignals & LawExtras>;
/** Law-specific memory rides in the planner memory's pool record as samples of desired counts. */
type Law = (nowMs: number, s: PoolSignals & LawExtras, current: number, ready: number, cfg: PlannerConfig, past: readonly { atMs: number; need: number }[], target: number) => number;

export const HERD: PlannerLaw = { name: "herd", decide };
/** herd in SLA mode: the same decide(), its planner config carrying planner.slo (compare.ts sets it). */
export const HERD_SLA: PlannerLaw = { name: "herd-sla", decide };

export function staticLaw(n: number): PlannerLaw {
  return { name: "static", decide: (now, _tod, _s, fleet, cfg, mem) => toward(n, now, fleet, cfg, mem, []) };
}

/**
 * The concurrency-based rules (HPA, KPA, APA) scale on requests in flight per engine against a
 * target. Their users set it per deployment; the comparison gives each the concurrency one engine
 * holds at its SLO capacity (measured by the same calibration herd's capacity model comes from),
 * so they are judged at a target their operators would pick, not at an arbitrary default.
 */
export const DEFAULT_TARGET_CONCURRENCY = 32;

const hpaKeda: Law = (now, s, current, ready, _cfg, past, target) => {
  if (current === 0) return s.arrivalsPerS > 0 || s.heldRequests > 0 ? 1 : 0; // KEDA activation
  const ratio = s.concurrencyPerEngine / target;
  let want = Math.abs(ratio - 1) <= 0.1 ? current : Math.ceil(ready * ratio);
  if (s.arrivalsPerS === 0 && past.filter((x) => x.atMs > now - 300_000).every((x) => x.need === 0) && past.length > 0 && now - past[0]!.atMs >= 300_000) return 0;
  want = Math.max(want, s.heldRequests > 0 ? 1 : 0, 1);
  const window = past.filter((x) => x.atMs > now - 300_000).map((x) => x.need);
  return want >= current ? want : Math.max(want, ...window);
};

const knativeKpa: Law = (now, s, current, ready, _cfg, past, target) => {
  const total = s.concurrencyPerEngine * ready + s.heldRequests;
  const stable = [...past.filter((x) => x.atMs > now - 60_000).map((x) => x.need), total];
  const panicWindow = [...past.filter((x) => x.atMs > now - 6_000).map((x) => x.need), total];
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const stableWant = Math.ceil(mean(stable) / target);
  const panicWant = Math.ceil(mean(panicWindow) / target);
  if (panicWant >= 2 * Math.max(1, ready)) return Math.max(current, panicWant);
  if (stable.every((x) => x === 0)) return 0;
  return Math.max(stableWant, Math.ceil(current / 2), total > 0 ? 1 : 0);
};

const aibrixApa: Law = (_now, s, current, ready, _cfg, _past, target) => {
  if (current === 0) return s.arrivalsPerS > 0 || s.heldRequests > 0 ? 1 : 0;
  const ratio = s.concurrencyPerEngine / target;
  if (ratio > 1.1 || ratio < 0.8) return Math.max(1, Math.ceil(ready * ratio));
  return current;
};

const dynamoLoad: Law = (now, s, current, ready, cfg, past) => {
  const last = past.length > 0 ? past[past.length - 1]! : null;
  if (last && now - last.atMs < 60_000) return current; // one adjustment per interval
  const pool = cfg.pools[0]!;
  const util = ready > 0 ? engineDemand(pool, s, 1) / ready : Infinity;
  if (util > 0.8) return current + 1;
  if (util < 0.8 * 0.8 && current > 1) return current - 1; // flat threshold: ignores N/(N−1)
  return Math.max(current, 1);
};

const llmdToken: Law = (_now, s, current, _ready, cfg, past) => {
  const last = past.length > 0 ? past[past.length - 1]! : null;
  if (last && _now - last.atMs < 60_000) return current;
  return Math.max(1, Math.ceil(engineDemand(cfg.pools[0]!, s, 0.8)));
};

const LAWS: Record<string, Law> = { "hpa-keda": hpaKeda, "knative-kpa": knativeKpa, "aibrix-apa": aibrixApa, "dynamo-load": dynamoLoad, "llmd-token": llmdToken };
export const EMULATED_LAWS = Object.keys(LAWS);

export function emulatedLaw(name: string, targetConcurrency = DEFAULT_TARGET_CONCURRENCY): PlannerLaw | null {
  const law = LAWS[name];
  if (!law) return null;
  return {
    name,
    decide(now, _tod, signals: Signals, fleet, cfg, mem) {
      const pool = cfg.pools[0]!;
      const s = signals.get(pool.id)!;
      const engines = fleet.engines.filter((e) => e.pool === pool.id);
      const ready = engines.filter((e) => e.state === "ready").length;
      const current = ready + engines.filter((e) => e.state === "starting" || e.state === "waking").length;
      const past = mem.pools[pool.id]?.samples ?? [];
      // KPA keeps concurrency samples; the others keep their own past desired counts.
      const raw = law(now, s, current, ready, cfg, past, targetConcurrency);
      const want = Math.min(pool.max, Math.max(pool.min, raw));
      const sample = name === "knative-kpa" ? s.concurrencyPerEngine * ready + s.heldRequests : want;
      // The interval rules remember when they last acted; the others remember every tick.
      const intervalRule = name === "dynamo-load" || name === "llmd-token";
      const record = !intervalRule || want !== current || past.length === 0;
      const keep = [...past.filter((x) => x.atMs > now - 600_000), ...(record ? [{ atMs: now, need: sample }] : [])];
      return toward(want, now, fleet, cfg, mem, keep);
    },
  };
}

/** Actions that move the pool toward `desired` engines, for rules without herd's safeguards. */
export function toward(desired: number, nowMs: number, fleet: Fleet, cfg: PlannerConfig, mem: PlannerMemory, samples: readonly { atMs: number; need: number }[]): Decision {
  const pool = cfg.pools[0]!;
  const engines = fleet.engines.filter((e) => e.pool === pool.id);
  const actions: Action[] = [];
  for (const e of engines) if (e.state === "draining" && e.inFlight === 0 && e.pendingTransfers === 0) actions.push({ kind: "stop", pool: pool.id, engine: e.id });
  const ready = engines.filter((e) => e.state === "ready");
  const current = ready.length + engines.filter((e) => e.state === "starting" || e.state === "waking").length;
  const free = new Map(fleet.hosts.map((h) => [h.name, h.gpusFree]));
  for (let n = current; n < desired; n++) {
    const host = pickHost(pool, fleet, free, nowMs);
    if (host === null) break;
    free.set(host, free.get(host)! - pool.gpusPerEngine);
    actions.push({ kind: "start", pool: pool.id, host });
  }
  const leaving = new Set<string>();
  for (let n = current; n > desired; n--) {
    const v = pickVictim(ready.filter((e) => !leaving.has(e.id)));
    if (!v) break;
    leaving.add(v.id);
    actions.push({ kind: "drain", pool: pool.id, engine: v.id });
  }
  const prev = mem.pools[pool.id];
  return {
    actions,
    pools: [{ pool: pool.id, desired, current, reason: desired > current ? "scale_up" : desired < current ? "scale_down" : "hold", terms: {} }],
    memory: { ...mem, pools: { [pool.id]: { samples, samplingSinceMs: prev?.samplingSinceMs ?? nowMs, lastUpMs: null, lastDownMs: null, idleSinceMs: null } } },
  };
}
