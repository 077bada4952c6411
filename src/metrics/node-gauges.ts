// Series read from the node's parts at scrape time, for the alert rules and dashboards of
// config/observability/: KV event stream gaps and resyncs per worker (src/kv/ingest.ts counters),
// each worker's KV cache usage (the scraped engine figure), the cluster's term, leadership and
// members, and when the certificates this node's TLS listeners present expire. The parts are passed as plain functions so this folder imports none of them (layering,
// docs/architecture.md). Counters built from cumulative figures add only the delta since the last
// scrape; a figure that went down (the stream was rebuilt) starts a new count from there.
import { Counter, Gauge, type Registry } from "prom-client";
import type { Worker } from "../workers/worker.ts";
import { METRIC } from "./names.ts";

export interface KvStreamFigures {
  worker: string;
  gaps: number;
  resyncs: number;
}

/** One KV ingest thread (src/kv/threaded-ingest.ts; none with kv_ingest.threads 0). */
export interface KvIngestThreadFigures {
  thread: string;
  stallSeconds: number;
  restarts: number;
}

export interface ClusterFigures {
  term: number;
  isLeader: boolean;
  /** Members by state as the discovery backend sees them (alive, suspect, dead, …). */
  nodes: readonly { state: string }[];
}

/** A TLS listener's certificate: which listener presents it and its notAfter (Unix seconds). */
export interface TlsCertFigure {
  listener: "frontend" | "peer";
  notAfterS: number;
}

export interface NodeGaugeSources {
  /** The configured model names: each gets a ready-worker count, 0 included. */
  models: readonly string[];
  workers: () => readonly Worker[];
  kvStreams: () => readonly KvStreamFigures[];
  kvIngestThreads?: () => readonly KvIngestThreadFigures[];
  /** null when the node runs no cluster section (a single node). */
  cluster: () => ClusterFigures | null;
  /** The certificates the node's TLS listeners loaded at start (none without frontend.tls / cluster.tls). */
  tlsCerts?: () => readonly TlsCertFigure[];
}

/** A counter fed from a cumulative per-worker figure: adds what grew since the last scrape. */
function cumulative(registry: Registry, name: string, help: string, read: () => Iterable<[string, number]>, label = "worker"): void {
  const seen = new Map<string, number>();
  new Counter({
    name,
    help,
    labelNames: [label],
    registers: [registry],
    collect() {
      for (const [key, n] of read()) {
        const last = seen.get(key);
        if (last === undefined || n < last) this.inc({ [label]: key }, n);
        else if (n > last) this.inc({ [label]: key }, n - last);
        seen.set(key, n);
      }
    },
  });
}

export function registerNodeGauges(registry: Registry, src: NodeGaugeSources): void {
  cumulative(registry, METRIC.kvEventGapsTotal, "Sequence gaps seen in a worker's KV event stream (each one is a replay request or a resync).", function* () {
    for (const s of src.kvStreams()) yield [s.worker, s.gaps];
  });
  cumulative(registry, METRIC.kvEventResyncsTotal, "Times a worker's KV view was cleared and rebuilt (gap without replay, replay failure, engine restart).", function* () {
    for (const s of src.kvStreams()) yield [s.worker, s.resyncs];
  });
  cumulative(registry, METRIC.kvIngestStallSecondsTotal, "Time a KV ingest thread waited because the event loop had not yet applied its index ops (kv_ingest.max_inflight_mib); meanwhile it reads none of its sockets.", function* () {
    for (const t of src.kvIngestThreads?.() ?? []) yield [t.thread, t.stallSeconds];
  }, "thread");
  cumulative(registry, METRIC.kvIngestThreadRestartsTotal, "KV ingest threads that died and were replaced (their workers' streams start afresh).", function* () {
    for (const t of src.kvIngestThreads?.() ?? []) yield [t.thread, t.restarts];
  }, "thread");
  new Gauge({
    name: METRIC.modelReadyWorkers,
    help: "Ready workers per configured model in this node's registry (the cluster's, remote ones included); 0 means requests for it are held or refused.",
    labelNames: ["model"],
    registers: [registry],
    collect() {
      const ready = new Map(src.models.map((m) => [m, 0]));
      for (const w of src.workers()) if (w.state === "ready" && ready.has(w.model)) ready.set(w.model, ready.get(w.model)! + 1);
      for (const [model, n] of ready) this.set({ model }, n);
    },
  });
  new Gauge({
    name: METRIC.workerKvUsageRatio,
    help: "Each worker's KV cache usage (0..1) from its engine's /metrics (vllm:kv_cache_usage_perc); absent until scraped.",
    labelNames: ["worker", "model"],
    registers: [registry],
    collect() {
      this.reset();
      for (const w of src.workers()) if (w.load.kv_usage !== null) this.set({ worker: w.id, model: w.model }, w.load.kv_usage);
    },
  });
  new Gauge({
    name: METRIC.clusterTerm,
    help: "The election term this node sees (0 without a cluster); it grows by one per election, so its rise over a window counts leader changes.",
    registers: [registry],
    collect() {
      this.set(src.cluster()?.term ?? 0);
    },
  });
  new Gauge({
    name: METRIC.clusterIsLeader,
    help: "1 when this node is the cluster's leader (a single node without a cluster section leads itself), else 0.",
    registers: [registry],
    collect() {
      const c = src.cluster();
      this.set(c === null || c.isLeader ? 1 : 0);
    },
  });
  new Gauge({
    name: METRIC.clusterNodes,
    help: "Cluster members by state as this node's discovery backend sees them.",
    labelNames: ["state"],
    registers: [registry],
    collect() {
      this.reset();
      const c = src.cluster();
      if (c === null) return;
      const by = new Map<string, number>();
      for (const n of c.nodes) by.set(n.state, (by.get(n.state) ?? 0) + 1);
      for (const [state, n] of by) this.set({ state }, n);
    },
  });
  new Gauge({
    name: METRIC.tlsCertExpiryTimestampSeconds,
    help: "When the certificate a TLS listener presents expires (its notAfter, Unix seconds), read from frontend.tls.cert / cluster.tls.cert at start; absent without TLS.",
    labelNames: ["listener"],
    registers: [registry],
    collect() {
      this.reset();
      for (const c of src.tlsCerts?.() ?? []) this.set({ listener: c.listener }, c.notAfterS);
    },
  });
}
