// Checks of the `planner` section across keys (pure): each pool names an engines[] entry herd starts,
// at most one pool per entry and per model/role (the planner's pool id), min ≤ max, pins and floors
// within them. What needs the engine kind's capabilities (a pool on an engine herd does not start,
// can_sleep on a kind without a sleep mode) is checked with the drivers in src/engine/check.ts.
import type { Severity } from "./findings.ts";
import type { Config } from "./types.ts";

/** `HH:MM-HH:MM=N` → seconds since local midnight and the floor; null when malformed. */
export function parseFloor(text: string): { fromS: number; toS: number; min: number } | null {
  const m = /^(\d{2}):(\d{2})-(\d{2}):(\d{2})=(\d{1,4})$/.exec(text);
  if (!m) return null;
  const [h1, m1, h2, m2, n] = m.slice(1).map(Number) as [number, number, number, number, number];
  if (h1 > 23 || m1 > 59 || h2 > 24 || m2 > 59 || (h2 === 24 && m2 !== 0)) return null;
  return { fromS: h1 * 3600 + m1 * 60, toS: h2 * 3600 + m2 * 60, min: n };
}

type Add = (severity: Severity, path: string, message: string) => void;

export function checkPlanner(config: Config, add: Add): void {
  const p = config.planner;
  const byEntry = new Map<number, number>();
  const byPool = new Map<string, number>();
  p.pools.forEach((pool, i) => {
    const at = `planner.pools[${i}]`;
    const entry = config.engines[pool.engine];
    if (!entry) {
      add("error", `${at}.engine`, `no engines[${pool.engine}] (engines has ${config.engines.length} entr${config.engines.length === 1 ? "y" : "ies"})`);
      return;
    }
    const prev = byEntry.get(pool.engine);
    if (prev !== undefined) add("error", `${at}.engine`, `engines[${pool.engine}] already has a pool (planner.pools[${prev}])`);
    else byEntry.set(pool.engine, i);
    const id = `${entry.model}/${entry.role}`;
    const other = byPool.get(id);
    if (other !== undefined && other !== pool.engine) add("error", `${at}.engine`, `engines[${pool.engine}] and engines[${other}] are both ${id}: one pool per model and role`);
    else byPool.set(id, pool.engine);
    if (pool.min > pool.max) add("error", `${at}.min`, `must not exceed max (${pool.max})`);
    if (pool.pin > pool.max) add("error", `${at}.pin`, `must not exceed max (${pool.max})`);
    pool.floors.forEach((f, k) => {
      const parsed = parseFloor(f);
      if (!parsed) add("error", `${at}.floors[${k}]`, `expected HH:MM-HH:MM=N, got ${JSON.stringify(f)}`);
      else if (parsed.min > pool.max) add("warning", `${at}.floors[${k}]`, `floor ${parsed.min} is above max ${pool.max}; max wins`);
    });
  });
  // decide() drains the last engine through an ordinary scale-down once the down window allows it; a
  // shorter down window than idle_to_sleep_ms means a sleeping pool is stopped before it ever sleeps.
  const sleeper = p.pools.findIndex((x) => x.can_sleep && x.min === 0);
  if (sleeper >= 0 && p.down_window_ms < p.idle_to_sleep_ms)
    add("warning", "planner.down_window_ms", `shorter than idle_to_sleep_ms (${p.idle_to_sleep_ms}): planner.pools[${sleeper}] (can_sleep, min 0) would be drained and stopped before it sleeps`);
  if (p.enabled && p.pools.length === 0) add("warning", "planner.pools", "the planner is enabled but has no pools: it scales nothing");
  if (p.slo) checkSlo(config, add);
}

/** planner.slo: the targets need pools to size (a kind without its own step cost: src/engine/check.ts). */
function checkSlo(config: Config, add: Add): void {
  const p = config.planner;
  const slo = p.slo!;
  if (p.pools.length === 0) add("warning", "planner.slo", "SLA mode has no pools to size (planner.pools is empty)");
  // The ITL floor of the step cost is the engine's; an ITL target at or below it is no SLO to size for.
  if (slo.itl_ms <= 2) add("warning", "planner.slo.itl_ms", `${slo.itl_ms} ms is below any engine's decode step: SLA mode will size decode pools at saturation`);
  if (slo.ttft_ms < slo.itl_ms) add("warning", "planner.slo.ttft_ms", `below itl_ms (${slo.itl_ms}): the first token cannot come sooner than a decode step`);
}
