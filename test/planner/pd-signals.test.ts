// P/D pools get their own demand and the "owes a KV transfer" guard reads a real count: a P/D
// model's request counts against its prefill and its decode pool (the gate), the hold waits for a
// pool that can serve alone, and a prefill engine owes a transfer from its answer with held blocks
// until the decode leg commits (or the blocks are abandoned) — reported by the real orchestrator.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { type PdDeps, type PdInput, runPd } from "../../src/pd/orchestrator.ts";
import type { LegOutcome, LegRunner, PinnedLeg } from "../../src/request/plan.ts";
import type { RouteRequest } from "../../src/router/index.ts";
import { pdRouter, pdWorker } from "../pd/helpers.ts";
import { LocalActuator } from "../../src/planner/actuator-local.ts";
import { PlannerService } from "../../src/planner/service.ts";
import { TransferLedger, holdPoolOf, poolsOfModel } from "../../src/planner/signals.ts";
import { engine, testConfig } from "../fixtures/engines/config.ts";
import { memoryLogger } from "../helpers/log.ts";
import { FakeSupervisor } from "./fake-supervisor.ts";

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
    // The real router chooses the legs (pd presets); the legs themselves are answered here.
    const { router } = pdRouter([pdWorker("n1/p0", "prefill", { url: "http://p0" }), pdWorker("n1/d0", "decode", { url: "http://d0" })]);
    const runner: LegRunner = {
      route: (req: RouteRequest, dryRun?: boolean) => (dryRun ? router.explain(req) : router.route(req)),
      async run(leg: PinnedLeg): Promise<LegOutcome> {
        if (leg.name === "prefill") return { kind: "done", text: JSON.stringify({ kv_transfer_params: { remote_block_ids: [1, 2, 3], remote_engine_id: "p" } }) };
        seen.push(ledger.pendingOf("n1/p0"));
        return decodeFails ? { kind: "failed", reason: "status_5xx", message: "HTTP 500", status: 500 } : { kind: "committed", answer: null };
      },
    };
    const metrics = { decision() {}, fallback() {}, prefillDone() {}, transferToFirstToken() {}, pair() {} };
    const deps: PdDeps = {
      runner, pd: { min_prefill_tokens: 0, prefill_queue_max: 8 }, prefillQueue: () => [0], rng: new SeededRng(1), clock: new VirtualClock(0),
      observer: { ...metrics, abandonedPrefill: (w: string) => ledger.abandonedPrefill(w), transferOwed: (w: string) => ledger.transferOwed(w), transferPulled: (w: string) => ledger.transferPulled(w) },
    };
    const input: PdInput = {
      requestId: "r", endpoint: "completions", body: { model: "sim", prompt: "x".repeat(10), max_tokens: 4 }, stream: false,
      route: { model: "sim", sessionId: null, promptTokens: 2_000, blockSize: 16 }, maxTokens: 4, flow: "vllm",
    };
    const ok = await runPd(deps, input, new AbortController().signal);
    expect(ok.outcome.kind).toBe("committed");
    expect(seen).toEqual([1]); // owed while the decode leg ran
    expect(ledger.pendingOf("n1/p0")).toBe(0);
    decodeFails = true;
    seen.length = 0;
    const failed = await runPd(deps, input, new AbortController().signal);
    expect(failed.outcome.kind).not.toBe("committed");
    expect(seen.length).toBeGreaterThan(0);
    expect(Math.max(...seen)).toBeGreaterThanOrEqual(1);
    expect(ledger.pendingOf("n1/p0")).toBe(0); // every owed transfer was settled (abandoned)
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
