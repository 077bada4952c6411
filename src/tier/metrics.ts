// GET /admin/kv-tier figures and the same figures as Prometheus metrics (prom-client, collected on
// scrape from the live counters, so the two never disagree).

import { Counter, Gauge, type Registry } from "prom-client";
import type { RespStats } from "./resp/server.ts";
import type { RecoveryReport } from "./recover.ts";
import type { SharedDirFigures } from "./shared-dir.ts";

export interface TierFigures {
  tier: "cpu" | "ssd";
  capacity_bytes: number;
  used_bytes: number;
  objects: number;
  hits: number;
  misses: number;
  evictions: number;
}

export interface KvTierFigures {
  enabled: boolean;
  tiers: TierFigures[];
  shared_dirs: SharedDirFigures[];
  corrupt_reads: number;
  recovery: RecoveryReport | null;
  /** direct_recv: "on", or why large SET values take Bun's socket reads (server.ts directOff). */
  resp: (RespStats & { listen: string; direct_recv: string }) | null;
}

export const TIER_METRIC = {
  capacityBytes: "herd_kv_tier_capacity_bytes",
  usedBytes: "herd_kv_tier_used_bytes",
  objects: "herd_kv_tier_objects",
  hitsTotal: "herd_kv_tier_hits_total",
  missesTotal: "herd_kv_tier_misses_total",
  evictionsTotal: "herd_kv_tier_evictions_total",
  corruptReadsTotal: "herd_kv_tier_corrupt_reads_total",
  respClients: "herd_kv_tier_resp_clients",
  respCommandsTotal: "herd_kv_tier_resp_commands_total",
  respRejectedTotal: "herd_kv_tier_resp_rejected_total",
  respRemoteTotal: "herd_kv_tier_resp_remote_lookups_total",
  respAuthFailuresTotal: "herd_kv_tier_resp_auth_failures_total",
} as const;

/** Register the tier's metrics on `registry`; `figures` is read at every scrape (a promise when the
 * tier runs on its own thread: concurrent calls share one answer, see TierThread.freshFigures). */
export function registerTierMetrics(registry: Registry, figures: () => KvTierFigures | Promise<KvTierFigures>): void {
  const registers = [registry];
  // A "tier" label is cpu, ssd, or shared:<path> (one per configured directory: bounded by config).
  const rows = (f: KvTierFigures) => {
    return [
      ...f.tiers,
      ...f.shared_dirs.map((d) => ({ tier: `shared:${d.path}`, capacity_bytes: d.capacity_bytes, used_bytes: d.used_bytes, objects: d.objects, hits: 0, misses: 0, evictions: d.evictions })),
    ];
  };
  const gauge = (name: string, help: string, pick: (r: ReturnType<typeof rows>[number]) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["tier"],
      registers,
      async collect() {
        this.reset();
        for (const r of rows(await figures())) this.set({ tier: r.tier }, pick(r));
      },
    });
  gauge(TIER_METRIC.capacityBytes, "Configured capacity of each KV tier.", (r) => r.capacity_bytes);
  gauge(TIER_METRIC.usedBytes, "Bytes charged in each KV tier: allocation units, plus key bytes beyond the first 64 of each key.", (r) => r.used_bytes);
  gauge(TIER_METRIC.objects, "Objects held in each KV tier.", (r) => r.objects);
  const seen = new Map<string, number>();
  const counter = (name: string, help: string, pick: (r: ReturnType<typeof rows>[number]) => number) =>
    new Counter({
      name,
      help,
      labelNames: ["tier"],
      registers,
      async collect() {
        for (const r of rows(await figures())) {
          const k = `${name}\0${r.tier}`;
          const v = pick(r);
          const before = seen.get(k);
          if (before === undefined || v > before) {
            this.inc({ tier: r.tier }, v - (before ?? 0));
            seen.set(k, v);
          }
        }
      },
    });
  counter(TIER_METRIC.hitsTotal, "Reads served by each KV tier.", (r) => r.hits);
  counter(TIER_METRIC.missesTotal, "Reads each KV tier could not serve.", (r) => r.misses);
  counter(TIER_METRIC.evictionsTotal, "Objects evicted from each KV tier (CPU: demoted to SSD or deleted; SSD and shared dirs: deleted).", (r) => r.evictions);
  let corruptSeen = 0;
  new Counter({
    name: TIER_METRIC.corruptReadsTotal,
    help: "Reads whose data failed its checksum (dropped and served as a miss).",
    registers,
    async collect() {
      const v = (await figures()).corrupt_reads;
      if (v > corruptSeen) this.inc(v - corruptSeen);
      corruptSeen = Math.max(corruptSeen, v);
    },
  });
  new Gauge({
    name: TIER_METRIC.respClients,
    help: "Clients connected to the KV tier's RESP server.",
    registers,
    async collect() {
      this.set((await figures()).resp?.clients ?? 0);
    },
  });
  let cmdSeen = 0;
  new Counter({
    name: TIER_METRIC.respCommandsTotal,
    help: "Commands executed by the KV tier's RESP server.",
    registers,
    async collect() {
      const v = (await figures()).resp?.commands ?? 0;
      if (v > cmdSeen) this.inc(v - cmdSeen);
      cmdSeen = Math.max(cmdSeen, v);
    },
  });
  const remoteSeen = new Map<string, number>();
  new Counter({
    name: TIER_METRIC.respRemoteTotal,
    help: "Local RESP misses looked up on other nodes (peer fetch), by result: hit, miss, rejected (over the in-flight bound: answered as a miss).",
    labelNames: ["result"],
    registers,
    async collect() {
      const r = (await figures()).resp;
      if (!r) return;
      const by = { hit: r.remote_hits, miss: r.remote_misses, rejected: r.remote_rejected };
      for (const [result, v] of Object.entries(by)) {
        const before = remoteSeen.get(result) ?? 0;
        if (v > before) this.inc({ result }, v - before);
        remoteSeen.set(result, Math.max(before, v));
      }
    },
  });
  let authSeen = 0;
  new Counter({
    name: TIER_METRIC.respAuthFailuresTotal,
    help: "Failed RESP AUTH attempts (each delays that connection's next command, doubling per failure).",
    registers,
    async collect() {
      const v = (await figures()).resp?.auth_failures ?? 0;
      if (v > authSeen) this.inc(v - authSeen);
      authSeen = Math.max(authSeen, v);
    },
  });
  const rejSeen = new Map<string, number>();
  new Counter({
    name: TIER_METRIC.respRejectedTotal,
    help: "RESP connections closed by a bound: protocol error, HTTP probe, output overflow, max clients, timeout (idle or not authenticated in time).",
    labelNames: ["reason"],
    registers,
    async collect() {
      const r = (await figures()).resp;
      if (!r) return;
      const by = { protocol_error: r.protocol_errors, http: r.http_closed, output_overflow: r.output_overflow_closed, max_clients: r.rejected_clients, timeout: r.timeout_closed };
      for (const [reason, v] of Object.entries(by)) {
        const before = rejSeen.get(reason);
        if (before === undefined || v > before) {
          this.inc({ reason }, v - (before ?? 0));
          rejSeen.set(reason, v);
        }
      }
    },
  });
}
