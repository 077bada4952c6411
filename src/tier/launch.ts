// With `kv_tier.resp` set, the engines this node starts use the tier, by the connector their driver
// declares (`EngineDriver.tier`, src/engine/driver.ts): `sim-offload` engines offload their evicted
// blocks to it (src/engine/sim/offload.ts), `lmcache-vllm` engines get LMCache's connector with its
// remote backend on the tier's RESP server (engine-flags.ts); other kinds run without the tier.
// Applied to the engine plan after the ports are fixed, like the P/D flags, and before the entry's
// own args so an operator's wins.
import { readFileSync } from "node:fs";
import type { Config } from "../config/types.ts";
import { driverFor } from "../engine/drivers/registry.ts";
import type { EnginePlan } from "../engine/types.ts";
import { simTierFlags, tierRespUrl, vllmTierLaunch } from "./engine-flags.ts";

/** The tier's AUTH password for engines; `redacted` for display (herd run --dry-run). */
export function tierPassword(config: Config, redacted = false): string | null {
  const f = config.kv_tier.resp?.password_file;
  if (!f) return null;
  return redacted ? "<redacted>" : readFileSync(f, "utf8").replace(/\r?\n$/, "");
}

/** Adds the tier flags to the planned engines; returns lines to log (and problems, named per engine). */
export function applyTierLaunch(config: Config, plans: EnginePlan[], password: () => string | null): string[] {
  const t = config.kv_tier;
  const url = tierRespUrl(t);
  if (url === null) return [];
  const lines: string[] = [];
  for (const p of plans) {
    if (p.spec === null) continue;
    const cut = p.spec.argv.length - config.engines[p.entryIndex]!.args.length;
    const insert = (args: string[]) => (p.spec!.argv = [...p.spec!.argv.slice(0, cut), ...args, ...p.spec!.argv.slice(cut)]);
    const connector = driverFor(p.kind).tier;
    if (connector === "sim-offload") insert(simTierFlags(t));
    else if (connector === "lmcache-vllm") {
      const r = vllmTierLaunch(t, password(), p.spec.argv);
      if (r === null) continue;
      if ("conflict" in r) {
        lines.push(`${p.id}: ${r.conflict}; it runs without the tier`);
        continue;
      }
      insert(r.argv);
      p.spec.env = { ...r.env, ...p.spec.env };
    }
  }
  const users = [...new Set(plans.filter((p) => p.spec !== null && driverFor(p.kind).tier !== null).map((p) => p.kind))];
  lines.push(`KV tier: ${users.length > 0 ? `${users.join(", ")} engines use` : "no engine here uses"} ${url}`);
  return lines;
}
