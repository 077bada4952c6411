// Where a new engine goes, and which engine leaves (pure).
//  - a start goes to a host that has the pool's engines[] entry (its template), with enough free
//    GPUs on that one host (a TP engine never spans hosts) and no start backoff (failed starts back off per
//    host), preferring a host that already runs the same model (P/D pairs close: KV moves over
//    NVLink or the host's own NIC), then the host with the most free GPUs (fewer stranded GPUs),
//    then by name (deterministic);
//  - a removal takes the ready engine with the fewest requests in flight, then the youngest (the
//    least prefix cache to lose), never one that owes a KV transfer.
import type { Fleet, FleetEngine, PoolSpec } from "./types.ts";

export function pickHost(pool: PoolSpec, fleet: Fleet, free: ReadonlyMap<string, number>, nowMs: number): string | null {
  const sameModel = new Set(fleet.engines.filter((e) => e.state !== "stopped" && e.pool.startsWith(`${pool.model}/`)).map((e) => e.host));
  let best: { name: string; score: [number, number] } | null = null;
  for (const h of fleet.hosts) {
    const f = free.get(h.name) ?? 0;
    if (f < pool.gpusPerEngine || h.backoffUntilMs > nowMs || (h.pools && !h.pools.includes(pool.id))) continue;
    const score: [number, number] = [sameModel.has(h.name) ? 1 : 0, f];
    if (!best || score[0] > best.score[0] || (score[0] === best.score[0] && (score[1] > best.score[1] || (score[1] === best.score[1] && h.name < best.name))))
      best = { name: h.name, score };
  }
  return best?.name ?? null;
}

export function pickVictim(ready: readonly FleetEngine[]): FleetEngine | null {
  const candidates = ready.filter((e) => e.pendingTransfers === 0);
  if (candidates.length === 0) return null;
  return [...candidates].sort((a, b) => a.inFlight - b.inFlight || b.sinceMs - a.sinceMs || (a.id < b.id ? -1 : 1))[0]!;
}
