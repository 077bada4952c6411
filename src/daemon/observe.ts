// What the node's observability reads from its parts: the scrape-time series of
// src/metrics/node-gauges.ts (KV event streams, the cluster's term and leader, the registry, the TLS
// listeners' certificate expiry), the engine view /admin/cluster shows, and the decision log of
// config `decision_log`.
import type { NodeGaugeSources, TlsCertFigure } from "../metrics/node-gauges.ts";
import { isAbsolute, join } from "node:path";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Config } from "../config/types.ts";
import type { Supervisor } from "../engine/supervisor.ts";
import type { RecordSink } from "../request/record.ts";
import { RecordFile } from "../request/record-file.ts";
import type { HerdNode } from "./node.ts";

/** Read lazily: the parts are built after the metrics, and a reload may replace some of them. */
export function nodeGaugeSources(node: HerdNode): NodeGaugeSources {
  return {
    models: node.config.models.map((m) => m.name),
    workers: () => node.registry.list(),
    kvStreams: () => node.kv.ingest.status().map((s) => ({ worker: s.worker, gaps: s.gaps, resyncs: s.resyncs })),
    kvIngestThreads: () => node.kv.ingest.threadFigures(),
    cluster: () => {
      const v = node.cluster.view();
      return { term: v.term, isLeader: v.leader === node.config.node.name, nodes: v.nodes };
    },
    tlsCerts: () => {
      const out: TlsCertFigure[] = [];
      if (node.frontendCertNotAfterS !== null) out.push({ listener: "frontend", notAfterS: node.frontendCertNotAfterS });
      if (node.cluster.peerCertNotAfterS !== null) out.push({ listener: "peer", notAfterS: node.cluster.peerCertNotAfterS });
      return out;
    },
  };
}

/** A local engine as /admin/cluster shows it beside the worker: phase, reason, last exit. */
export function engineView(supervisor: Supervisor, id: string) {
  const s = supervisor.status().find((e) => e.worker.id === id);
  if (!s) return null;
  return { phase: s.phase, reason: s.reason, last_exit: s.lastExit ? { code: s.lastExit.code, signal: s.lastExit.signal } : null };
}

/** The decision log of config `decision_log` (a relative path is under node.data_dir); null when off. */
export function decisionLogOf(config: Config, clock: Clock, log: Logger): RecordFile | null {
  const c = config.decision_log;
  if (c.path === "") return null;
  const path = isAbsolute(c.path) ? c.path : join(config.node.data_dir, c.path);
  return new RecordFile({ path, maxBytes: c.max_bytes, files: c.files, bufferBytes: c.buffer_bytes, clock, log: log.child("decision-log") });
}

export function fanOut(...sinks: RecordSink[]): RecordSink {
  return (r) => {
    for (const s of sinks) s(r);
  };
}
