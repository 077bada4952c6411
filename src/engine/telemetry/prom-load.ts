// Folds Prometheus samples into load figures, given which metric names mean what for one engine
// kind (the driver says). One API server can front several data-parallel engines (label `engine`
// in vLLM, `dp_rank` in SGLang): request counts are summed across them (and across SGLang's
// `priority` queues), KV usage is averaged (the capacity left overall). Newer SGLang builds label
// series with model-parallel ranks (`tp_rank`, `pp_rank`, `moe_ep_rank`); ranks of one DP replica
// report the same requests, so only rank 0 of those labels is read, lest a TP-2 engine count every
// request twice.
import type { EngineLoad } from "../driver.ts";
import type { Sample } from "./prom-text.ts";

export interface PromLoadNames {
  running: readonly string[];
  waiting: readonly string[];
  /** In order of preference: the first name present wins. Values are 0..1. */
  kvUsage: readonly string[];
}

/** Model-parallel rank labels: only the "0" series (or series without them) are read. */
const SHARD_RANK_LABELS = ["tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"];

export function promLoadNameSet(names: PromLoadNames): Set<string> {
  return new Set([...names.running, ...names.waiting, ...names.kvUsage]);
}

/** Fold samples into load figures; null when none of the named metrics is present. */
export function foldPromLoad(samples: readonly Sample[], names: PromLoadNames): EngineLoad | null {
  const wanted = promLoadNameSet(names);
  const byName = new Map<string, number[]>();
  for (const s of samples) {
    if (!wanted.has(s.name) || !Number.isFinite(s.value) || s.value < 0) continue;
    if (SHARD_RANK_LABELS.some((l) => s.labels[l] !== undefined && s.labels[l] !== "0")) continue;
    let vs = byName.get(s.name);
    if (!vs) byName.set(s.name, (vs = []));
    vs.push(s.value);
  }
  const sumOf = (list: readonly string[]) => {
    for (const n of list) {
      const vs = byName.get(n);
      if (vs) return vs.reduce((a, b) => a + b, 0);
    }
    return null;
  };
  let kv: number | null = null;
  for (const n of names.kvUsage) {
    const vs = byName.get(n);
    if (vs) {
      kv = Math.min(1, vs.reduce((a, b) => a + b, 0) / vs.length);
      break;
    }
  }
  const load = { running: sumOf(names.running), waiting: sumOf(names.waiting), kv_usage: kv };
  return load.running === null && load.waiting === null && load.kv_usage === null ? null : load;
}
