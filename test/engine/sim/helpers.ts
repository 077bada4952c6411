import { VirtualClock } from "../../../src/core/clock.ts";
import type { KvEvent } from "../../../src/engine/sim/blocks.ts";
import { DEFAULT_COST } from "../../../src/engine/sim/cost.ts";
import { type FinishInfo, type SchedulerConfig, SimScheduler } from "../../../src/engine/sim/scheduler.ts";

export interface Trace {
  tokens: { id: number; at: number }[];
  finish?: FinishInfo;
}

export function harness(over: Partial<SchedulerConfig> = {}) {
  const clock = new VirtualClock(0);
  const events: KvEvent[][] = [];
  const cfg: SchedulerConfig = {
    blockSize: 4,
    numBlocks: 64,
    maxNumSeqs: 16,
    maxNumBatchedTokens: 64,
    maxWaiting: 100,
    maxModelLen: 1024,
    cost: DEFAULT_COST,
    timeScale: 1,
    hashSeed: 7n,
    ...over,
  };
  const s = new SimScheduler(cfg, clock, (e) => events.push(e));
  const traces = new Map<string, Trace>();
  let next = 1000;
  const submit = (id: string, prompt: number[], maxTokens: number, opts: { eosAt?: number; stopAt?: number; priority?: number } = {}) => {
    const t: Trace = { tokens: [] };
    traces.set(id, t);
    s.submit({
      id,
      promptTokens: prompt,
      maxTokens,
      ignoreEos: false,
      ...(opts.priority !== undefined ? { priority: opts.priority } : {}),
      nextToken: (i) => ({ id: i === opts.eosAt ? 2 : next++, eos: i === opts.eosAt }),
      handlers: {
        onToken: (id, i, at) => {
          t.tokens.push({ id, at });
          return i === opts.stopAt;
        },
        onFinish: (f) => void (t.finish = f),
      },
    });
    return t;
  };
  const run = (limit = 100_000) => {
    for (let i = 0; i < limit && clock.step(); i++);
  };
  return { clock, s, events, traces, submit, run, cfg };
}

export const seq = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
