// What the data path tells the planner besides arrivals: which pools a model's requests count
// against, and the KV transfers each prefill engine still owes. A P/D request's prefill leg is work
// of the `model/prefill` pool (its uncached prompt tokens) and its decode leg of `model/decode`
// (its output tokens): both pools get the arrival, and demand.ts reads the share that fits the
// role. A prefill engine that answered with held KV blocks owes a transfer until a decode leg
// committed with them (the pull happened before the first decode token) or the orchestrator gave
// them up (abandoned: no decode will pull); decide() never stops or sleeps it meanwhile. The P/D
// orchestrator (src/pd/orchestrator.ts) reports both through its observer; the daemon wires this
// ledger in as one (structural: the planner does not import pd).
import type { Role } from "../config/types.ts";

/** Pools of `model` in the planner's config, in the order a request can be served by them. */
export function poolsOfModel(poolIds: readonly string[], model: string): { pool: string; role: Role }[] {
  const out: { pool: string; role: Role }[] = [];
  for (const role of ["aggregated", "decode", "prefill"] as const) {
    const id = `${model}/${role}`;
    if (poolIds.includes(id)) out.push({ pool: id, role });
  }
  return out;
}

/** The pool a held request of `model` waits for: one that serves it alone (aggregated, else decode, else prefill). */
export function holdPoolOf(poolIds: readonly string[], model: string): string | null {
  return poolsOfModel(poolIds, model)[0]?.pool ?? null;
}

/** Mean of a summed latency (NaN without samples: SLA mode's correction then holds). */
export const latencyMean = (sum: number, count: number): number => (count > 0 ? sum / count : NaN);

/** Bound on the engines tracked (a leak of ids, e.g. engines that left, cannot grow it without end). */
const MAX_ENGINES = 4096;

/** Prefill legs per engine whose decode has not pulled yet. */
export class TransferLedger {
  private readonly owed = new Map<string, number>();

  /** A prefill on `worker` answered with held blocks: a decode will pull them. */
  transferOwed(worker: string): void {
    if (!this.owed.has(worker) && this.owed.size >= MAX_ENGINES) return;
    this.owed.set(worker, (this.owed.get(worker) ?? 0) + 1);
  }

  /** The decode committed: it pulled the blocks. */
  transferPulled(worker: string): void {
    this.settle(worker);
  }

  /** Nobody will pull them (the engine frees them when its lease ends). */
  abandonedPrefill(worker: string): void {
    this.settle(worker);
  }

  private settle(worker: string): void {
    const n = (this.owed.get(worker) ?? 0) - 1;
    if (n > 0) this.owed.set(worker, n);
    else this.owed.delete(worker);
  }

  /** Transfers `worker` still owes (FleetEngine.pendingTransfers). */
  pendingOf(worker: string): number {
    return this.owed.get(worker) ?? 0;
  }

  /** The engine is gone: whatever it held went with it. */
  forget(worker: string): void {
    this.owed.delete(worker);
  }
}
