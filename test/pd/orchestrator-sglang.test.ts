// The SGLang flow (mini_lb: one body with bootstrap_host/port/room to both workers at once) and the
// pair choice, with a scripted executor (the sim engine speaks vLLM's NixlConnector, not SGLang's
// bootstrap protocol).
import { describe, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { type LegOutcome, runPd } from "../../src/pd/orchestrator.ts";
import type { LegRunner, PinnedLeg } from "../../src/request/plan.ts";
import type { Router, RouteRequest } from "../../src/router/index.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { pdRouter, pdWorker } from "./helpers.ts";

const url = (id: string) => ({ url: `http://10.0.0.${id.endsWith("1") ? 2 : 1}:30000` });
/** n2/p1 has a prompt waiting, n2/d1 a request running (outside herd): n1's workers are first choices. */
const WORKERS = (): Worker[] => [
  pdWorker("n1/p0", "prefill", url("p0"), {}, { kind: "sglang" }),
  pdWorker("n2/p1", "prefill", url("p1"), { running: 0, waiting: 1 }, { kind: "sglang" }),
  pdWorker("n1/d0", "decode", url("d0"), {}, { kind: "sglang" }),
  pdWorker("n2/d1", "decode", url("d1"), { running: 1, waiting: 0 }, { kind: "sglang" }),
];

type Script = (leg: PinnedLeg, signal: AbortSignal) => Promise<LegOutcome>;
class Scripted implements LegRunner {
  readonly started: { name: string; worker: string; body: string; atMs: number }[] = [];
  readonly aborted: string[] = [];
  readonly router: Router;
  constructor(private readonly script: Script, workers = WORKERS()) {
    this.router = pdRouter(workers, undefined, 5).router;
  }
  route(req: RouteRequest, dryRun?: boolean) {
    return dryRun ? this.router.explain(req) : this.router.route(req);
  }
  run(leg: PinnedLeg, signal: AbortSignal): Promise<LegOutcome> {
    this.started.push({ name: leg.name, worker: leg.worker.id, body: leg.body, atMs: performance.now() });
    signal.addEventListener("abort", () => this.aborted.push(`${leg.name}@${leg.worker.id}`), { once: true });
    return this.script(leg, signal);
  }
}
/** Resolves after ms, or as aborted when the signal fires first. */
const after = (ms: number, o: LegOutcome, signal: AbortSignal) =>
  new Promise<LegOutcome>((ok) => {
    const t = setTimeout(() => ok(o), ms);
    signal.addEventListener("abort", () => (clearTimeout(t), ok({ kind: "aborted" })), { once: true });
  });
const failed = (status: number): LegOutcome => ({ kind: "failed", reason: "status_5xx", message: `HTTP ${status}`, status });

const PROMPT_TOKENS = 4000;
const run = (runner: LegRunner, signal = new AbortController().signal) =>
  runPd(
    { runner, pd: { min_prefill_tokens: 512, prefill_queue_max: 8 }, prefillQueue: () => [0, 1], bootstrapPort: (w) => (w.role === "prefill" ? 8998 : null), rng: new SeededRng(5), clock: new RealClock() },
    { requestId: "r1", endpoint: "chat", body: { model: "sim", messages: [{ role: "user", content: "x" }], stream: true }, stream: true, route: { model: "sim", sessionId: null, promptTokens: PROMPT_TOKENS, blockSize: 16 }, maxTokens: null, flow: "sglang" },
    signal,
  );

describe("SGLang flow", () => {
  test("both legs start at once with one identical body carrying the prefill worker's bootstrap fields; the decode answer is the client's", async () => {
    const exec = new Scripted((leg, s) => after(leg.name === "prefill" ? 30 : 10, leg.name === "prefill" ? { kind: "done", text: "{}" } : { kind: "committed", answer: "decode" }, s));
    const r = await run(exec);
    expect(r.outcome).toEqual({ kind: "committed", answer: "decode" });
    expect(exec.started.map((s) => `${s.name}@${s.worker}`)).toEqual(["prefill@n1/p0", "decode@n1/d0"]);
    expect(Math.abs(exec.started[0]!.atMs - exec.started[1]!.atMs)).toBeLessThan(20);
    expect(exec.started[0]!.body).toBe(exec.started[1]!.body);
    const body = exec.started[0]!.body;
    expect(body).toMatch(/"bootstrap_host":"10\.0\.0\.1","bootstrap_port":8998,"bootstrap_room":\d+\}$/);
    expect(BigInt(/"bootstrap_room":(\d+)/.exec(body)![1]!) < 1n << 63n).toBe(true);
  });

  test("the prefill leg fails first: its decode is aborted, the next pair uses the other prefill worker", async () => {
    const exec: Scripted = new Scripted((leg, s): Promise<LegOutcome> =>
      leg.name === "prefill" && leg.worker.id === "n1/p0" ? after(5, failed(500), s)
      : leg.name === "prefill" ? after(30, { kind: "done", text: "{}" }, s)
      : leg.worker.id === "n1/d0" && exec.started.length <= 2 ? after(1000, { kind: "committed", answer: "late" }, s)
      : after(10, { kind: "committed", answer: "ok" }, s));
    const r = await run(exec);
    expect(r.outcome).toEqual({ kind: "committed", answer: "ok" });
    expect(exec.aborted).toContain("decode@n1/d0");
    expect(exec.started.map((s) => `${s.name}@${s.worker}`)).toEqual(["prefill@n1/p0", "decode@n1/d0", "prefill@n2/p1", "decode@n1/d0"]);
    expect(r.trace.fallbacks).toEqual(["prefill_retry"]);
    const rooms = exec.started.map((s) => /"bootstrap_room":(\d+)/.exec(s.body)![1]);
    expect(rooms[0]).not.toBe(rooms[2]); // a new pair, a new room
  });

  test("two failed pairs: local prefill on a decode worker without bootstrap fields", async () => {
    // Decode workers fail first (their prefill answers later): both pairs fail on the decode side.
    const exec = new Scripted((leg, s) =>
      leg.name === "local" ? after(5, { kind: "committed", answer: "local" }, s)
      : leg.name === "decode" ? after(5, failed(503), s)
      : after(40, { kind: "done", text: "{}" }, s));
    const r = await run(exec);
    expect(r.outcome).toEqual({ kind: "committed", answer: "local" });
    expect(r.trace.fallbacks).toEqual(["decode_retry", "prefill_failed_local"]);
    expect(exec.aborted.filter((a) => a.startsWith("prefill"))).toEqual(["prefill@n1/p0", "prefill@n1/p0"]); // each doomed pair's prefill is aborted
    expect(exec.started.filter((s) => s.name === "decode").map((s) => s.worker)).toEqual(["n1/d0", "n2/d1"]);
    expect(exec.started.at(-1)!.body).not.toContain("bootstrap_room");
  });

  test("client disconnect aborts both running legs", async () => {
    const exec = new Scripted((_leg, s) => after(10_000, { kind: "committed", answer: "never" }, s));
    const ac = new AbortController();
    const running = run(exec, ac.signal);
    await Bun.sleep(50);
    ac.abort();
    const r = await running;
    expect(r.outcome.kind).toBe("aborted");
    expect(exec.aborted.sort()).toEqual(["decode@n1/d0", "prefill@n1/p0"]);
    expect(exec.started).toHaveLength(2);
  });

});

describe("SGLang flow over sim engines in SGLang mode (--disaggregation-mode, bootstrap port)", () => {
  test("both legs at once; the decode waits for the room, pulls the prefill's blocks, answers with them cached; a failed prefill moves the pair", async () => {
    const { startSimEngine } = await import("../../src/engine/sim/server.ts");
    const { FetchRunner } = await import("./helpers.ts");
    const engines = [
      await startSimEngine({ port: 0, timeScale: 50, disaggregationMode: "prefill", disaggregationBootstrapPort: 0, pdPrefillFailRate: 1 }),
      await startSimEngine({ port: 0, timeScale: 50, disaggregationMode: "prefill", disaggregationBootstrapPort: 0 }),
      await startSimEngine({ port: 0, timeScale: 50, disaggregationMode: "decode", disaggregationBootstrapPort: 0, kvTransferTimeoutMs: 2000 }),
    ];
    try {
      const [p0, p1, d0] = engines as [typeof engines[0], typeof engines[0], typeof engines[0]];
      const ws = [pdWorker("n1/p0", "prefill", p0), pdWorker("n2/p1", "prefill", p1, { running: 0, waiting: 1 }), pdWorker("n1/d0", "decode", d0)];
      const ports = new Map([["n1/p0", p0.pd!.port], ["n2/p1", p1.pd!.port]]);
      const runner = new FetchRunner(pdRouter(ws).router, "r9");
      const prompt = Array.from({ length: 800 }, (_, i) => 200 + i); // 50 blocks
      const r = await runPd(
        { runner, pd: { min_prefill_tokens: 512, prefill_queue_max: 8 }, prefillQueue: () => [0, 1], bootstrapPort: (w) => ports.get(w.id) ?? null, rng: new SeededRng(5), clock: new RealClock() },
        { requestId: "r9", endpoint: "completions", body: { model: "sim", prompt, max_tokens: 5, ignore_eos: true }, stream: false, route: { model: "sim", sessionId: null, promptTokens: 800, blockSize: 16 }, maxTokens: 5, flow: "sglang" },
        new AbortController().signal,
      );
      expect(r.outcome.kind).toBe("committed");
      expect(r.trace.fallbacks).toEqual(["prefill_retry"]);
      expect(r.trace.legs.map((l) => `${l.name}@${l.worker}:${l.outcome}`)).toEqual(["prefill@n1/p0:failed", "decode@n1/d0:aborted", "prefill@n2/p1:done", "decode@n1/d0:committed"]);
      const answer = JSON.parse((r.outcome as { answer: { text: string } }).answer.text) as { usage: { completion_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
      expect(answer.usage.completion_tokens).toBe(5);
      expect(answer.usage.prompt_tokens_details.cached_tokens).toBe(49 * 16);
      expect(p1.pd!.server.heldRequests).toBe(0);
      expect(p1.stats().generationTokens).toBe(1); // the prefill server stops after the first token
    } finally {
      for (const e of engines) await e.stop();
    }
  });
});
