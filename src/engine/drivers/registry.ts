// The one list of engine drivers. A new kind: one file in this folder, one line here, its name in
// config ENGINE_KINDS (the Record type below fails to compile until all three agree).
import type { EngineKind } from "../../config/types.ts";
import type { EngineDriver } from "../driver.ts";
import { command } from "./command.ts";
import { external } from "./external.ts";
import { sglang } from "./sglang.ts";
import { sim } from "./sim.ts";
import { trtllm } from "./trtllm.ts";
import { vllm } from "./vllm.ts";

const DRIVERS: Record<EngineKind, EngineDriver> = { sim, vllm, sglang, trtllm, command, external };

export const ALL_DRIVERS: readonly EngineDriver[] = Object.values(DRIVERS);

export function driverFor(kind: EngineKind): EngineDriver {
  return DRIVERS[kind];
}
