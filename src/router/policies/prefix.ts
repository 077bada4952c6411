// prefix (approximate): no engine events. The router remembers which block hashes it sent to which
// worker (router.prefix: TTL after the last send, per-worker capacity, least recently sent
// forgotten first; ../prefix-memory.ts) and treats them as GPU overlap in the same pipeline and cost
// as `kv` (Dynamo's --no-router-kv-events, routers.md §1.7).
import type { RouterConfig } from "../../config/types.ts";
import type { Overlap } from "../../kv/indexer.ts";
import { PrefixMemory } from "../prefix-memory.ts";
import { buildPipeline } from "../pipeline/registry.ts";
import { PipelinePolicy, type CacheSource } from "../pipeline/runner.ts";
import type { PolicyDeps, PolicyFactory } from "../types.ts";

export function prefixSource(memory: PrefixMemory): CacheSource {
  return {
    match(hashes, nowMs) {
      const overlap = new Map<string, Overlap>();
      for (const [w, n] of memory.overlaps(hashes, nowMs)) overlap.set(w, { gpu: n, cpu: 0, disk: 0 });
      return { overlap, predicted: new Map() };
    },
    record: (worker, hashes, nowMs) => memory.record(worker, hashes, nowMs),
    forget: (worker) => memory.forget(worker),
  };
}

export const prefix: PolicyFactory = {
  name: "prefix",
  create(config: RouterConfig, deps: PolicyDeps = {}) {
    const memory = new PrefixMemory(config.prefix.ttl_ms, config.prefix.max_blocks_per_worker);
    return new PipelinePolicy("prefix", buildPipeline(config), prefixSource(memory), deps.load);
  },
};
