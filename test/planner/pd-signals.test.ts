// P/D pools get their own demand and the "owes a KV transfer" guard reads a real count: a P/D
// model's request counts against its prefill and its decode pool (the gate), the hold waits for a
// pool that can serve alone, and a prefill engine owes a transfer from its answer with held blocks
// until the decode leg commits (or the blocks are abandoned) — reported by the real orchestrator.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import type { PdCandidate } from "../../src/pd/choose.ts";
import { type LegExecutor, type PdLeg, runPd } from "../../src/pd/orchestrator.ts";
import { LocalActuator } from "../../src/planner/actuator-local.ts";
import { PlannerService } from "../../src/planner/service.ts";
import { TransferLedger, holdPoolOf, poolsOfModel } from "../../src/planner/signals.ts";
import { engine, testConfig } from "../fixtures/engines/config.ts";
import { memoryLogger } from "../helpers/log.ts";
import { FakeSupervisor } from "./fake-supervisor.ts";

const cand = (id: string, role: PdCandidate["role"]): PdCandidate => ({
  id, node: "n1", url: `http://${id}`, kind: "sim", role, overlap: { gpu: 0, cpu: 0, disk: 0 }, activePrefillTokens: 0, activeBlocks: 0, waiting: 0, kvUsage: null, numBlocks: null, bootstrapPort: null,
});

describe("P/D demand per pool", () => {
  test("pools of a model in serving order; the hold pool serves alone", () => {
    const ids = ["m/prefill", "m/decode", "x/aggregated"];
    expect(poolsOfModel(ids, "m").map((p) => p.pool)).toEqual(["m/decode", "m/prefill"]);
    expect(holdPoolOf(ids, "m")).toBe("m/decode");
    expect(holdPoolOf(ids, "x")).toBe("x/aggregated");
    expect(holdPoolOf(ids, "y")).toBeNull();
  });

  test("a P/D request's arrival reaches the prefill pool's prompt tokens and the decode pool's output tokens", () => {
    const config = testConfig({ engines: [engine({ kind: "sim", count: 0, role: "prefill" }), engine({ kind: "sim", count: 0, role: "decode" })] });
    const pool = (e: number) => ({ engine: e, min: 0, max: 2, prefill_tokens_per_s: 1_000, decode_tokens_per_s: 100, can_sleep: false, floors: [], pin: -1 });
    config.planner = { ...config.planner, enabled: true, tick_ms: 1_000, pools: [pool(0), pool(1)] };
    const clock = new VirtualClock(0);
    const log = memoryLogger();
    const actuator = new LocalActuator({ config, supervisor: new FakeSupervisor(config, clock), clock, log, inFlight: () => 0, hostGpus: 0 });
    const planner = new PlannerService({ config, clock, log, actuator, timeOfDayS: () => 0 });
    const model = config.engines[0]!.model;
    expect(planner.poolsFor(model).sort()).toEqual([`${model}/decode`, `${model}/prefill`]);
    for (const p of planner.poolsFor(model)) planner.recordArrival(p, 3_000, 300);
    clock.advance(1_000);
    const d = planner.tick("timer");
    const terms = (id: string) => d.pools.find((p) => p.pool === id)!.terms;
    // 3000 prompt tokens/s over 1000 × target for prefill; 300 decode tokens/s over 100 × target for decode.
    const target = planner.plannerConfig.utilizationTarget;
    expect(terms(`${model}/prefill`).demand).toBeCloseTo(3 / target, 2);
    expect(terms(`${model}/decode`).demand).toBeCloseTo(3 / target, 2);
  });
});

describe("pending KV transfers", () => {
  test("owed from the prefill's answer with held blocks until the decode commits; abandoned blocks settle too", async () => {
    const ledger = new TransferLedger();
    const seen: number[] = [];
    let decodeFails = false;
    const exec: LegExecutor = {
      async run(leg: PdLeg) {
        if (leg.name === "prefill") return { kind: "done", text: JSON.stringify({ kv_transfer_params: { remote_block_ids: [1, 2, 3], remote_engine_id: "p" } }) };
        seen.push(ledger.pendingOf("p0"));
        return decodeFails ? { kind: "failed", reason: "boom", status: 500 } : { kind: "committed", answer: null };
      },
    };
    const metrics = { decision() {}, fallback() {}, prefillDone() {}, transferToFirstToken() {}, pair() {} };
    const deps = {
      exec, candidates: () => [cand("p0", "prefill"), cand("d0", "decode")], pd: { min_prefill_tokens: 0, prefill_queue_max: 8 },
      knobs: { prefillLoadScale: 1, credit: { gpu: 1, cpu: 0.5, disk: 0.25 } }, rng: new SeededRng(1), clock: new VirtualClock(0),
      observer: { ...metrics, abandonedPrefill: (w: string) => ledger.abandonedPrefill(w), transferOwed: (w: string) => ledger.transferOwed(w), transferPulled: (w: string) => ledger.transferPulled(w) },
    };
    const input = { requestId: "r", endpoint: "completion" as const, body: { model: "m", prompt: "x".repeat(10), max_tokens: 4 }, stream: false, promptTokens: 2_000, blockSize: 16, flow: "vllm" as const };
    const ok = await runPd(deps, input, new AbortController().signal);
    expect(ok.outcome.kind).toBe("committed");
    expect(seen).toEqual([1]); // owed while the decode leg ran
    expect(ledger.pendingOf("p0")).toBe(0);
    decodeFails = true;
    seen.length = 0;
    const failed = await runPd(deps, input, new AbortController().signal);
    expect(failed.outcome.kind).not.toBe("committed");
    expect(seen.length).toBeGreaterThan(0);
    expect(Math.max(...seen)).toBeGreaterThanOrEqual(1);
    expect(ledger.pendingOf("p0")).toBe(0); // every owed transfer was settled (abandoned)
  });

  test("the local actuator reports the ledger's count per engine", () => {
    const config = testConfig({ engines: [engine({ kind: "sim", count: 0, role: "prefill" })] });
    config.planner = { ...config.planner, enabled: true, pools: [{ engine: 0, min: 0, max: 2, prefill_tokens_per_s: 1_000, decode_tokens_per_s: 100, can_sleep: false, floors: [], pin: -1 }] };
    const clock = new VirtualClock(0);
    const sup = new FakeSupervisor(config, clock);
    const ledger = new TransferLedger();
    const actuator = new LocalActuator({ config, supervisor: sup, clock, log: memoryLogger(), inFlight: () => 0, hostGpus: 0, pendingTransfers: (id) => ledger.pendingOf(id) });
    const id = sup.addEngine(0);
    ledger.transferOwed(id);
    expect(actuator.fleet().engines.find((e) => e.id === id)!.pendingTransfers).toBe(1);
  });
});
