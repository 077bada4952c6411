// What the node's scrape-time series (src/metrics/node-gauges.ts) read from its parts, and the
// status page's view of them: KV event streams, the cluster's term and leader, the registry.
import type { NodeGaugeSources } from "../metrics/node-gauges.ts";
import type { Supervisor } from "../engine/supervisor.ts";
import type { HerdNode } from "./node.ts";

/** Read lazily: the parts are built after the metrics, and a reload may replace some of them. */
export function nodeGaugeSources(node: HerdNode): NodeGaugeSources {
  return {
    models: node.config.models.map((m) => m.name),
    workers: () => node.registry.list(),
    kvStreams: () => node.kv.ingest.status().map((s) => ({ worker: s.worker, gaps: s.gaps, resyncs: s.resyncs })),
    cluster: () => {
      const v = node.cluster.view();
      return { term: v.term, isLeader: v.leader === node.config.node.name, nodes: v.nodes };
    },
  };
}

/** A local engine as /admin/cluster shows it beside the worker: phase, reason, last exit. */
export function engineView(supervisor: Supervisor, id: string) {
  const s = supervisor.status().find((e) => e.worker.id === id);
  if (!s) return null;
  return { phase: s.phase, reason: s.reason, last_exit: s.lastExit ? { code: s.lastExit.code, signal: s.lastExit.signal } : null };
}
