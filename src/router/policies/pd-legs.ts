// The P/D legs' presets (src/pd routes each leg through them): `pd-prefill` runs `router.pd.prefill`
// over workers of role prefill, `pd-decode` runs `router.pd.decode` over decode workers (the P/D
// orchestrator widens it to aggregated ones when a request prefills locally). Both read overlap
// from the same event-fed index as `kv` (plus their own predictions: the blocks a prefill leg sends
// are on its worker before the engine's events say so, and the decode worker holds them after the
// transfer), so explain shows each leg's overlap and the decider reads the decode pick's cached
// tokens. Not in POLICY_FACTORIES: a leg preset is chosen per leg (RouteRequest.leg), never as
// `router.policy`.
import type { Role } from "../../config/types.ts";
import { kv } from "./kv.ts";
import { preset } from "./preset.ts";

export type LegPresetName = "prefill" | "decode";

/** The role a leg's workers have unless the request names others (RouteRequest.role). */
export const LEG_ROLES: Record<LegPresetName, readonly Role[]> = { prefill: ["prefill"], decode: ["decode"] };

export const LEG_PRESETS = {
  prefill: preset({ name: "pd-prefill", spec: (cfg) => cfg.pd.prefill, source: (cfg, deps) => kv.preset.source!(cfg, deps) }),
  decode: preset({ name: "pd-decode", spec: (cfg) => cfg.pd.decode, source: (cfg, deps) => kv.preset.source!(cfg, deps) }),
} as const;
