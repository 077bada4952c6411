// prefix (approximate): the router's own memory of which blocks it sent where stands in for engine
// events (../pipeline/sources.ts prefixSource), then the same `router.pipeline` stages as `kv`.
import { PrefixMemory } from "../prefix-memory.ts";
import { prefixSource } from "../pipeline/sources.ts";
import { preset } from "./preset.ts";

export const prefix = preset({
  name: "prefix",
  spec: (cfg) => cfg.pipeline,
  source: (cfg) => prefixSource(new PrefixMemory(cfg.prefix.ttl_ms, cfg.prefix.max_blocks_per_worker)),
});
