// Public surface of the simulated engine: the HTTP server for tests and benchmarks, the pure scheduler
// and cost model for `herd simulate`, the flag parser for the supervisor and the CLI.

export { type SimEngine, type SimEngineStats, type StartSimEngineOptions, startSimEngine } from "./server.ts";
export { simEngineMain, CRASH_EXIT_CODE } from "./main.ts";
export { DEFAULT_OPTIONS, FLAGS, parseSimArgs, type SimEngineOptions, simUsage, UsageError } from "./options.ts";
export { type CostParams, DEFAULT_COST, ZERO_COST, stepCostMs, chunkPairs, type StepWork } from "./cost.ts";
export {
  type FinishInfo, type FinishReason, type RequestHandlers, type SchedulerConfig, type SchedulerStats, SimScheduler, type SubmitRequest,
} from "./scheduler.ts";
export { type BlockHash, BlockPool, hashBlock, type KvEvent } from "./blocks.ts";
export { OutputVocabulary, StopMatcher } from "./output.ts";
