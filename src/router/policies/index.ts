// Every routing policy, one line each. A policy is a preset of the one pipeline (./preset.ts); a
// new policy is one file in this folder plus one line here (and its name in POLICIES in
// src/config/types.ts so the config accepts it). The record is keyed by that name union: a name in
// POLICIES without a factory here, or a factory under another name, does not compile. No import
// side effects.
import type { PolicyName, RouterConfig } from "../../config/types.ts";
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
import { predicted } from "./predicted.ts";
import { approx } from "./approx.ts";
import { prefixaware } from "./prefixaware.ts";

export const POLICY_FACTORIES: { readonly [N in PolicyName]: PolicyFactory & { readonly name: N } } = {
  "round-robin": roundRobin,
  random,
  "power-of-two": powerOfTwo,
  "least-loaded": leastLoaded,
  session,
  kv,
  prefix,
  predicted,
  approx,
  prefixaware,
};

/** The factory of a name from outside the type system (CLI flags, tests); undefined when unknown. */
export function policyFactory(name: string): PolicyFactory | undefined {
  return Object.hasOwn(POLICY_FACTORIES, name) ? POLICY_FACTORIES[name as PolicyName] : undefined;
}

/**
 * What a config's policy reads, without building a Router (preprocessing decides from it whether
 * to hash prompts). Unknown policy → every input, to be safe.
 */
export function presetNeeds(cfg: RouterConfig): Required<Needs> {
  const f = policyFactory(cfg.policy); // a hand-built config may carry any string
  if (!f) return { blockHashes: true, load: true, sessionKey: true, role: true };
  return unionNeeds([...BASE_FILTERS, { needs: f.create(cfg).needs ?? { blockHashes: true, load: true, sessionKey: true, role: true } }]);
}
