// One seed per run: config `seed` (or HERD_SEED in the environment, which wins so a logged run can
// be replayed without editing the file) drives every Rng in the node, each component taking its own
// stream by name (`seedFor(seed, "router")`), so adding a component never shifts another's draws.
// 0 means "pick one": drawn once from the OS's entropy and logged at start, so even an unseeded run
// can be replayed.
import { getRandomValues } from "node:crypto";

export const SEED_MAX = 2 ** 32 - 1;

/** The run's seed: HERD_SEED if set (a decimal integer in 1..2^32-1), else config, else entropy. */
export function resolveSeed(configSeed: number, env: Readonly<Record<string, string | undefined>> = process.env): { seed: number; source: "env" | "config" | "entropy" } {
  const raw = env.HERD_SEED?.trim();
  if (raw) {
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1 || n > SEED_MAX) throw new Error(`HERD_SEED must be an integer in 1..${SEED_MAX}, got "${raw}"`);
    return { seed: n, source: "env" };
  }
  if (configSeed > 0) return { seed: configSeed, source: "config" };
  return { seed: entropySeed(), source: "entropy" };
}

/** A fresh seed from the OS (never 0). */
export function entropySeed(): number {
  const v = getRandomValues(new Uint32Array(1))[0]!;
  return v === 0 ? 1 : v;
}

/** The seed of one named component's stream: FNV-1a of the name mixed into the run's seed. */
export function seedFor(seed: number, component: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < component.length; i++) {
    h ^= component.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  const s = (Math.imul(seed ^ h, 0x9e3779b1) ^ (seed >>> 16)) >>> 0;
  return s === 0 ? 1 : s;
}
