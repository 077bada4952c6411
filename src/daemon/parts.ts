// The services a node runs, as small factories (each a `Service`, src/core/service.ts): the daemon
// lists them in start order (src/daemon/node.ts). Kept apart from the wiring so each reads alone.
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { service, type Service } from "../core/service.ts";
import type { Config } from "../config/types.ts";
import { kvCapacityHint } from "../engine/drivers/registry.ts";
import type { Supervisor } from "../engine/supervisor.ts";
import type { EnginePlan } from "../engine/types.ts";
import type { KvConsumer } from "../kv/consumer.ts";
import type { SharedPreprocessor } from "../preprocess/shared.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import { exposureInfo, exposureWarnings } from "./exposure.ts";

/** Engines: spawn them (start returns once spawned, not ready), publish them, say what they expose. */
export function supervisorService(config: Config, supervisor: Supervisor, registry: WorkerRegistry, log: Logger): Service {
  return service(
    "supervisor",
    async () => {
      await supervisor.start();
      for (const w of supervisor.list()) registry.upsert(w);
      for (const line of exposureWarnings(config, supervisor.plans())) log.warn(line);
      for (const line of exposureInfo(config)) log.info(line);
    },
    () => supervisor.stop({ drainMs: 0 }),
  );
}

/** Tokenizers: a router whose stages hash prompts needs every one before the first request. */
export function preprocessService(prompts: SharedPreprocessor, needed: () => { needs: boolean; policy: string }): Service {
  return service(
    "preprocess",
    async () => {
      const { needs, policy } = needed();
      if (!needs) return;
      await prompts.start().catch((e: unknown) => {
        throw new Error(`router.policy ${policy} needs each model's tokenizer, which cannot be loaded: ${errorMessage(e)}`);
      });
    },
    () => prompts.close(),
  );
}

/**
 * KV events: every worker with endpoints (generated for local engines, from config for external
 * ones) feeds the shared block index; the supervisor's state changes take failed, stopped and
 * restarted engines out of it; engines the planner adds later join like the planned ones.
 */
export function kvIngestService(config: Config, kv: KvConsumer, supervisor: Supervisor): Service {
  let unwatch: (() => void) | null = null;
  let unwatchAdded: (() => void) | null = null;
  const addPlan = (p: EnginePlan) => {
    if (!p.kvEvents) return;
    const blockSize = config.models.find((m) => m.name === p.model)?.block_size ?? 16;
    const kvBlocks = kvCapacityHint(p);
    kv.add({
      id: p.id, model: p.model, blockSize, endpoint: p.kvEvents.endpoint, replayEndpoint: p.kvEvents.replayEndpoint, topic: p.kvEvents.topic,
      ...(kvBlocks !== undefined ? { kvBlocks } : {}),
    });
  };
  return service(
    "kv-ingest",
    () => {
      for (const p of supervisor.plans()) addPlan(p);
      unwatch = supervisor.onChange((w) => kv.observe(w));
      for (const w of supervisor.list()) kv.observe(w);
      unwatchAdded = supervisor.onAdded((p) => addPlan(p));
    },
    () => {
      unwatch?.();
      unwatchAdded?.();
      kv.close();
    },
  );
}

/** host:port of this node's peer API: node.advertise with the listener's port ([v6]:port for IPv6). */
export function peerAddress(advertise: string, port: number): string {
  return advertise.includes(":") ? `[${advertise}]:${port}` : `${advertise}:${port}`;
}
