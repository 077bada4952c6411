// kv (precise): the event-fed block index plus predicted entries (../pipeline/sources.ts kvSource),
// then the stages `router.pipeline` lists (default: overload guard → kv-cost + session → softmax).
import { BlockIndex } from "../../kv/block-index.ts";
import { PrefixMemory } from "../prefix-memory.ts";
import { kvSource } from "../pipeline/sources.ts";
import { preset } from "./preset.ts";

export const kv = preset({
  name: "kv",
  spec: (cfg) => cfg.pipeline,
  source(cfg, deps) {
    // Without an index (a Router built without one) kv still balances by load and predictions.
    const index = deps.kvIndex ?? new BlockIndex();
    const predicted = cfg.kv.predicted_ttl_ms > 0 ? new PrefixMemory(cfg.kv.predicted_ttl_ms, cfg.prefix.max_blocks_per_worker) : null;
    return kvSource(index, predicted);
  },
});
