// Every routing policy, one line each. A new policy is one file in this folder plus one line here
// (and its name in POLICIES in src/config/types.ts so the config accepts it). No import side effects.
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
