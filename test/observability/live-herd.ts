// A `herd run` with every part that exports metrics or admin views switched on (two sim engines,
// the planner, a CPU KV tier), for the observability tests: dashboards and rules are checked
// against its /metrics, the status page is loaded from it.
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cleanup, portBase, startHerd, tempDir, type HerdProc } from "../helpers/herd.ts";

export interface LiveHerd {
  herd: HerdProc;
  stop(): Promise<void>;
}

export async function startLiveHerd(prefix: string, extraYaml = ""): Promise<LiveHerd> {
  const dir = tempDir(`${prefix}-`);
  const shm = mkdtempSync(`/dev/shm/${prefix}-`);
  const yaml = `node: { name: obs-node, data_dir: ${JSON.stringify(join(dir, "data"))} }
models: [{ name: herd-sim, path: herd-sim }]
engines:
  - { kind: sim, model: herd-sim, count: 2, args: ["--time-scale", "10"] }
supervisor: { port_range_start: ${portBase()} }
planner:
  enabled: true
  tick_ms: 500
  pools: [{ engine: 0, min: 2, max: 2, prefill_tokens_per_s: 1000, decode_tokens_per_s: 100 }]
kv_tier:
  cpu: { size: 16MiB, path: ${JSON.stringify(join(shm, "cpu"))} }
${extraYaml}`;
  let herd: HerdProc;
  try {
    herd = await startHerd(dir, yaml, { readyTimeoutMs: 40_000 });
  } catch (e) {
    cleanup(dir);
    rmSync(shm, { recursive: true, force: true });
    throw e;
  }
  return {
    herd,
    async stop() {
      await herd.stop();
      cleanup(dir);
      rmSync(shm, { recursive: true, force: true });
    },
  };
}
