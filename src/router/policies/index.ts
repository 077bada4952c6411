// Every routing policy, one line each. A policy is a preset of the one pipeline (./preset.ts); a
// new policy is one file in this folder plus one line here (and its name in POLICIES in
// src/config/types.ts so the config accepts it). No import side effects.
import type { RouterConfig } from "../../config/types.ts";
import { BASE_FILTERS } from "../pipeline/filters.ts";
import { unionNeeds, type Needs } from "../pipeline/types.ts";
import type { PolicyFactory } from "../types.ts";
import { roundRobin } from "./round-robin.ts";
import { random } from "./random.ts";
import { powerOfTwo } from "./power-of-two.ts";
import { leastLoaded } from "./least-loaded.ts";
import { session } from "./session.ts";
import { kv } from "./kv.ts";
import { prefix } from "./prefix.ts";

export const POLICY_FACTORIES: readonly PolicyFactory[] = [roundRobin, random, powerOfTwo, leastLoaded, session, kv, prefix];

export function policyFactory(name: string): PolicyFactory | undefined {
  return POLICY_FACTORIES.find((f) => f.name === name);
}

/**
 * What a config's policy reads, without building a Router (preprocessing decides from it whether
 * to hash prompts). Unknown policy → every input, to be safe.
 */
export function presetNeeds(cfg: RouterConfig): Required<Needs> {
  const f = policyFactory(cfg.policy);
  if (!f) return { blockHashes: true, load: true, sessionKey: true, role: true };
  return unionNeeds([...BASE_FILTERS, { needs: f.create(cfg).needs ?? { blockHashes: true, load: true, sessionKey: true, role: true } }]);
}
