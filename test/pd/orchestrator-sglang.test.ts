// The SGLang flow (mini_lb: one body with bootstrap_host/port/room to both workers at once) and the
// pair choice, with a scripted executor (the sim engine speaks vLLM's NixlConnector, not SGLang's
// bootstrap protocol).
import { describe, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { chooseDecode, choosePrefill, type PdCandidate } from "../../src/pd/choose.ts";
import { type LegExecutor, type LegOutcome, type PdLeg, runPd } from "../../src/pd/orchestrator.ts";

const cand = (id: string, role: PdCandidate["role"], over: Partial<PdCandidate> = {}): PdCandidate => ({
  id, node: id.split("/")[0]!, url: `http://10.0.0.${id.endsWith("1") ? 2 : 1}:30000`, kind: "sglang", role, overlap: { gpu: 0, cpu: 0, disk: 0 },
  activePrefillTokens: 0, activeBlocks: 0, waiting: 0, kvUsage: null, numBlocks: null, bootstrapPort: role === "prefill" ? 8998 : null, ...over,
});
const CANDS = [cand("n1/p0", "prefill"), cand("n2/p1", "prefill", { activePrefillTokens: 9999 }), cand("n1/d0", "decode"), cand("n2/d1", "decode", { activeBlocks: 50 })];
const knobs = { prefillLoadScale: 1, credit: { gpu: 1, cpu: 0.5, disk: 0.25 } };

type Script = (leg: PdLeg, signal: AbortSignal) => Promise<LegOutcome>;
class Scripted implements LegExecutor {
  readonly started: { name: string; worker: string; body: string; atMs: number }[] = [];
  readonly aborted: string[] = [];
  constructor(private readonly script: Script) {}
  run(leg: PdLeg, signal: AbortSignal): Promise<LegOutcome> {
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

const PROMPT_TOKENS = 4000;
const run = (exec: LegExecutor, signal = new AbortController().signal, cands = CANDS) =>
  runPd(
    { exec, candidates: () => cands, pd: { min_prefill_tokens: 512, prefill_queue_max: 8 }, knobs, rng: new SeededRng(5), clock: new RealClock() },
    { requestId: "r1", endpoint: "chat", body: { model: "m", messages: [{ role: "user", content: "x" }], stream: true }, stream: true, promptTokens: PROMPT_TOKENS, blockSize: 16, flow: "sglang" },
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
      leg.name === "prefill" && leg.worker.id === "n1/p0" ? after(5, { kind: "failed", reason: "HTTP 500", status: 500 }, s)
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
      : leg.name === "decode" ? after(5, { kind: "failed", reason: "HTTP 503", status: 503 }, s)
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

  test("no prefill worker with a bootstrap port: the prefill pool counts as absent", async () => {
    const exec = new Scripted((_l, s) => after(1, { kind: "committed", answer: "local" }, s));
    const r = await run(exec, undefined, CANDS.map((c) => ({ ...c, bootstrapPort: null })));
    expect(r.trace.decision.reason).toBe("no_prefill_worker");
    expect(exec.started.map((s) => s.name)).toEqual(["local"]);
  });
});

describe("choosing the pair", () => {
  const req = { promptTokens: 1600, blockSize: 16 };
  test("prefill: a worker holding the prompt's prefix beats an idle one; load breaks it again", () => {
    const warm = cand("n1/p0", "prefill", { overlap: { gpu: 90, cpu: 0, disk: 0 }, activePrefillTokens: 800 });
    const idle = cand("n2/p1", "prefill");
    const c = choosePrefill([idle, warm], req, knobs, new Set(), new SeededRng(1));
    expect(c.pick!.id).toBe("n1/p0");
    expect(c.explain.find((e) => e.worker === "n1/p0")!.terms).toMatchObject({ overlap_blocks: 90, prefill_blocks: 60, cost: 60 + 10 });
    const swamped = { ...warm, activePrefillTokens: 16 * 500 };
    expect(choosePrefill([idle, swamped], req, knobs, new Set(), new SeededRng(1)).pick!.id).toBe("n2/p1");
    expect(choosePrefill([idle, warm], req, knobs, new Set(["n1/p0"]), new SeededRng(1)).pick!.id).toBe("n2/p1");
  });

  test("decode: least decode load among workers with room for the request's KV", () => {
    const full = cand("n1/d0", "decode", { kvUsage: 0.99, numBlocks: 1000 }); // 10 free < 100 needed
    const busy = cand("n2/d1", "decode", { activeBlocks: 400, kvUsage: 0.5, numBlocks: 1000 });
    const c = chooseDecode([full, busy], req, new Set(), new SeededRng(1));
    expect(c.pick!.id).toBe("n2/d1");
    expect(c.explain.find((e) => e.worker === "n1/d0")!.terms).toMatchObject({ fits: 0, free_blocks: 10 });
    // With no room anywhere the least loaded still gets it (it will queue), rather than no answer.
    expect(chooseDecode([full], req, new Set(), new SeededRng(1)).pick!.id).toBe("n1/d0");
    expect(chooseDecode([cand("a/x", "aggregated")], req, new Set(), new SeededRng(1)).pick).toBeNull();
    expect(chooseDecode([cand("a/x", "aggregated")], req, new Set(), new SeededRng(1), ["decode", "aggregated"]).pick!.id).toBe("a/x");
  });
});

describe("SGLang flow over sim engines in SGLang mode (--disaggregation-mode, bootstrap port)", () => {
  test("both legs at once; the decode waits for the room, pulls the prefill's blocks, answers with them cached; a failed prefill moves the pair", async () => {
    const { startSimEngine } = await import("../../src/engine/sim/server.ts");
    const { FetchExecutor } = await import("./helpers.ts");
    const engines = [
      await startSimEngine({ port: 0, timeScale: 50, disaggregationMode: "prefill", disaggregationBootstrapPort: 0, pdPrefillFailRate: 1 }),
      await startSimEngine({ port: 0, timeScale: 50, disaggregationMode: "prefill", disaggregationBootstrapPort: 0 }),
      await startSimEngine({ port: 0, timeScale: 50, disaggregationMode: "decode", disaggregationBootstrapPort: 0, kvTransferTimeoutMs: 2000 }),
    ];
    try {
      const [p0, p1, d0] = engines as [typeof engines[0], typeof engines[0], typeof engines[0]];
      const c = (id: string, role: PdCandidate["role"], e: typeof p0, over: Partial<PdCandidate> = {}) => cand(id, role, { url: e.url, kind: "sim", bootstrapPort: role === "prefill" ? e.pd!.port : null, ...over });
      const cands = [c("n1/p0", "prefill", p0), c("n2/p1", "prefill", p1, { activePrefillTokens: 9999 }), c("n1/d0", "decode", d0)];
      const exec = new FetchExecutor();
      const prompt = Array.from({ length: 800 }, (_, i) => 200 + i); // 50 blocks
      const r = await runPd(
        { exec, candidates: () => cands, pd: { min_prefill_tokens: 512, prefill_queue_max: 8 }, knobs, rng: new SeededRng(5), clock: new RealClock() },
        { requestId: "r9", endpoint: "completion", body: { model: "sim", prompt, max_tokens: 5, ignore_eos: true }, stream: false, promptTokens: 800, blockSize: 16, flow: "sglang" },
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
