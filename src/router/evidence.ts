// What a failure says, and the routing filters that act on it (run by Router.decide after the base
// filters, for every policy). Each is a guard: it never empties the candidate set.
//   ejected     — the worker, or the peer node owning it, is ejected (outlier.ts) or its probe is out
//   failed_node — a retry avoids every worker on the peer node of a worker that already failed the
//                 request (a dead or cut-off node takes all its workers with it); a local engine's
//                 failure does not push the retry off this node (another local engine is closer)
//   prefer_local — a retry after a peer's failure, or any request while this node's cluster view
//                 is stale (isolated from etcd / the voters), goes to this node's own workers
import type { WorkerRegistry } from "../workers/registry.ts";
import type { Worker } from "../workers/worker.ts";
import type { OutlierDetector, TargetKind } from "./outlier.ts";
import type { FilteredOut, RouteRequest } from "./types.ts";

/**
 * Whom a failure ejects. A peer that cannot be reached (no connection, no answer head before the
 * peer deadline) ejects its node; an engine that refused, reset or did not answer in time ejects
 * its worker. A 5xx/429 answer (the engine is alive and said so), a first-token timeout (slow is
 * not dead: the retry rules already send it elsewhere) and client-side ends eject nothing.
 */
export function ejectionOf(reason: string, workerId: string, node: string | null, self: string | null): { kind: TargetKind; id: string } | null {
  if (reason === "peer_unreachable") return node !== null && node !== self ? { kind: "node", id: node } : { kind: "worker", id: workerId };
  if (reason === "connect" || reason === "reset" || reason === "eof" || reason === "head_timeout") return { kind: "worker", id: workerId };
  return null;
}

export interface EvidenceFacts {
  req: RouteRequest;
  outliers: OutlierDetector;
  registry: WorkerRegistry;
  self: string | null;
  isolated: boolean;
}

/** Apply the evidence guards; removals are appended to `filtered` (decision.filtered, explain). */
export function evidenceFilters(ws: readonly Readonly<Worker>[], filtered: FilteredOut[], f: EvidenceFacts): Readonly<Worker>[] {
  // The usual first attempt: nothing ejected, nothing failed, not isolated: no guard runs (no closure, no Set).
  if (f.outliers.empty && f.req.exclude.size === 0 && !f.isolated) return ws as Readonly<Worker>[];
  let out = f.outliers.empty ? (ws as Readonly<Worker>[]) : guard(ws, filtered, "ejected", (w) => f.outliers.blocked("node", w.node) ?? f.outliers.blocked("worker", w.id));
  const failedNodes = new Set<string>();
  for (const id of f.req.exclude) {
    const n = f.registry.get(id)?.node;
    if (n !== undefined && f.self !== null && n !== f.self) failedNodes.add(n);
  }
  if (failedNodes.size > 0) out = guard(out, filtered, "failed_node", (w) => (failedNodes.has(w.node) ? `node ${w.node} already failed this request` : null));
  if (f.self !== null && (failedNodes.size > 0 || f.isolated)) {
    const why = f.isolated ? "this node's cluster view is stale: local workers first" : "a peer node failed this request: local workers first";
    out = guard(out, filtered, "prefer_local", (w) => (w.node !== f.self ? why : null));
  }
  return out;
}

/** Drop the workers `why` names a reason for, unless that would drop all of them. */
function guard(ws: readonly Readonly<Worker>[], filtered: FilteredOut[], filter: string, why: (w: Readonly<Worker>) => string | null): Readonly<Worker>[] {
  const kept: Readonly<Worker>[] = [];
  const dropped: FilteredOut[] = [];
  for (const w of ws) {
    const d = why(w);
    if (d === null) kept.push(w);
    else dropped.push({ worker: w.id, node: w.node, filter, detail: d });
  }
  if (kept.length === 0) return [...ws];
  filtered.push(...dropped);
  return kept;
}
