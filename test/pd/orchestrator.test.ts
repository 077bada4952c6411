// The P/D orchestrator end to end over 2 prefill + 2 decode sim engines (real HTTP, real KV pulls
// over the side channels), every failure path of issue 13 driven by the sims' fault knobs. Two
// "nodes" (n1, n2) by worker naming: a pair may span them.
import { afterEach, describe, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { parseKvTransferConfig } from "../../src/engine/sim/kv-transfer-config.ts";
import { type SimEngine, type StartSimEngineOptions, startSimEngine } from "../../src/engine/sim/server.ts";
import { type FallbackReason, type PdDeps, type PdInput, type PdObserver, runPd } from "../../src/pd/orchestrator.ts";
import type { Router } from "../../src/router/index.ts";
import type { WorkerRegistry } from "../../src/workers/registry.ts";
import { type Committed, FetchRunner, pdRouter, pdWorker } from "./helpers.ts";

const started: SimEngine[] = [];
afterEach(async () => {
  for (const e of started.splice(0)) await e.stop();
});

async function sim(over: StartSimEngineOptions = {}, policy = "fail"): Promise<SimEngine> {
  const kvTransfer = parseKvTransferConfig(JSON.stringify({ kv_connector: "NixlConnector", kv_role: "kv_both", kv_load_failure_policy: policy }));
  const e = await startSimEngine({ port: 0, timeScale: 50, seed: 3, kvTransfer, sideChannelHost: "127.0.0.1", sideChannelPort: 0, kvBytesPerBlock: 8192, ...over });
  started.push(e);
  return e;
}

interface Pool {
  p: SimEngine[];
  d: SimEngine[];
  router: Router;
  registry: WorkerRegistry;
  waiting: number;
}

/**
 * P0 (n1) and D0 (n2) are the presets' first choice (the others carry requests herd did not send:
 * p1 one waiting prompt, d1 one running request); pairs span nodes.
 */
async function pool(o: { p0?: StartSimEngineOptions; p1?: StartSimEngineOptions; d0?: StartSimEngineOptions; d1?: StartSimEngineOptions; policy?: string; waiting?: number } = {}): Promise<Pool> {
  const p = [await sim(o.p0), await sim(o.p1)];
  const d = [await sim(o.d0, o.policy), await sim(o.d1, o.policy)];
  const { router, registry } = pdRouter([
    pdWorker("n1/p0", "prefill", p[0]!),
    pdWorker("n2/p1", "prefill", p[1]!, { running: 0, waiting: 1 }),
    pdWorker("n2/d0", "decode", d[0]!),
    pdWorker("n1/d1", "decode", d[1]!, { running: 1, waiting: 0 }),
  ]);
  return { p, d, router, registry, waiting: o.waiting ?? 0 };
}

class Recorder implements PdObserver {
  readonly log: string[] = [];
  decision(d: { reason: string }) { this.log.push(`decision:${d.reason}`); }
  fallback(r: FallbackReason) { this.log.push(`fallback:${r}`); }
  prefillDone() { this.log.push("prefill_done"); }
  transferToFirstToken(ms: number) { this.log.push(`ttft_after_transfer:${ms >= 0}`); }
  pair(a: string, b: string) { this.log.push(`pair:${a}->${b}`); }
  abandonedPrefill(w: string) { this.log.push(`abandoned:${w}`); }
}

const PROMPT = Array.from({ length: 1200 }, (_, i) => 500 + i); // 75 blocks of 16

function deps(pl: Pool, obs = new Recorder()): PdDeps & { runner: FetchRunner; observer: Recorder } {
  return {
    runner: new FetchRunner(pl.router), observer: obs, pd: { min_prefill_tokens: 512, prefill_queue_max: 8 },
    prefillQueue: () => [pl.waiting, pl.waiting + 1], rng: new SeededRng(1), clock: new RealClock(),
  };
}
const input = (over: Partial<PdInput> & { promptTokens?: number } = {}): PdInput => {
  const { promptTokens = PROMPT.length, ...rest } = over;
  return {
    requestId: "req-42", endpoint: "completions", body: { model: "sim", prompt: PROMPT, max_tokens: 6, ignore_eos: true }, stream: false,
    route: { model: "sim", sessionId: null, promptTokens, blockSize: 16 }, maxTokens: 6, flow: "vllm", ...rest,
  };
};
const answerOf = (o: { kind: string; answer?: unknown }) => JSON.parse((o.answer as Committed).text) as { usage: { completion_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
const legs = (t: { legs: { name: string; worker: string; outcome: string }[] }) => t.legs.map((l) => `${l.name}@${l.worker}:${l.outcome}`);

describe("vLLM flow", () => {
  test("prefill on p0, decode on d0 with the pulled blocks cached; same X-Request-Id on both legs; the pair spans nodes", async () => {
    const pl = await pool();
    const dp = deps(pl);
    const r = await runPd(dp, input(), new AbortController().signal);
    expect(r.outcome.kind).toBe("committed");
    expect(legs(r.trace)).toEqual(["prefill@n1/p0:done", "decode@n2/d0:committed"]);
    expect(answerOf(r.outcome).usage.prompt_tokens_details.cached_tokens).toBe(1184); // 74 blocks: one token is always computed
    expect(answerOf(r.outcome).usage.completion_tokens).toBe(6);
    expect(dp.runner.sent.map((s) => s.requestId)).toEqual(["req-42", "req-42"]);
    expect(dp.runner.sent[0]!.body).toMatchObject({ max_tokens: 1, stream: false, kv_transfer_params: { do_remote_decode: true } });
    expect(dp.runner.sent[1]!.body.kv_transfer_params).toMatchObject({ do_remote_prefill: true, remote_engine_id: pl.p[0]!.pd!.engineId });
    expect(dp.observer.log).toEqual(["decision:disaggregated", "prefill_done", "ttft_after_transfer:true", "pair:n1->n2"]);
    expect(pl.p[0]!.pd!.server.heldRequests).toBe(0);
    // Each leg chosen by its preset, every candidate explained term by term.
    expect(r.trace.legs.map((l) => l.decision.policy)).toEqual(["pd-prefill", "pd-decode"]);
    expect(r.trace.legs[0]!.decision.candidates.map((c) => c.worker)).toEqual(["n1/p0", "n2/p1"]);
    expect(r.trace.legs[0]!.decision.candidates[1]!.terms).toMatchObject({ outside_requests: 1, active_prefill_tokens: PROMPT.length });
    expect(r.trace.legs[1]!.decision.candidates.map((c) => `${c.worker}:${c.terms.decode_blocks}`)).toEqual(["n2/d0:75", "n1/d1:150"]);
  });

  test("streaming: the decode leg's stream reaches the client whole", async () => {
    const pl = await pool();
    const r = await runPd(deps(pl), input({ stream: true, body: { model: "sim", prompt: PROMPT, max_tokens: 6, ignore_eos: true, stream: true, stream_options: { include_usage: true } } }), new AbortController().signal);
    expect(r.outcome.kind).toBe("committed");
    const text = (r.outcome as { answer: Committed }).answer.text;
    expect(text).toContain('"cached_tokens":1184');
    expect(text.trim().endsWith("data: [DONE]")).toBe(true);
  });

  test("short uncached prompt or saturated prefill pool: local prefill on the decode worker, with the reason", async () => {
    const pl = await pool();
    const short = await runPd(deps(pl), input({ body: { model: "sim", prompt: PROMPT.slice(0, 100), max_tokens: 3 }, promptTokens: 100 }), new AbortController().signal);
    expect(short.trace.decision.reason).toBe("short_uncached_prompt");
    expect(legs(short.trace)).toEqual(["local@n2/d0:committed"]);
    const busy = await pool({ waiting: 8 });
    const sat = await runPd(deps(busy), input(), new AbortController().signal);
    expect(sat.trace.decision).toMatchObject({ reason: "prefill_saturated", terms: { least_prefill_queue: 8, prefill_queue_max: 8 } });
    expect(legs(sat.trace)).toEqual(["local@n2/d0:committed"]);
  });

  test("no worker can decode (the decode node is gone): a clean 503 at once, no prefill leg holding blocks", async () => {
    const pl = await pool();
    for (const id of ["n2/d0", "n1/d1"]) pl.registry.remove(id);
    const dp = deps(pl);
    const r = await runPd(dp, input(), new AbortController().signal);
    expect(r.outcome).toEqual({ kind: "failed", reason: "no_worker", message: "no decode worker available", status: 503 });
    expect(dp.runner.sent).toEqual([]);
    expect(r.trace.legs).toEqual([]);
  });

  test("prefill fails → one retry on the other prefill worker", async () => {
    const pl = await pool({ p0: { pdPrefillFailRate: 1 } });
    const r = await runPd(deps(pl), input(), new AbortController().signal);
    expect(legs(r.trace)).toEqual(["prefill@n1/p0:failed", "prefill@n2/p1:done", "decode@n2/d0:committed"]);
    expect(r.trace.fallbacks).toEqual(["prefill_retry"]);
    expect(answerOf(r.outcome).usage.prompt_tokens_details.cached_tokens).toBe(1184);
  });

  test("both prefill workers fail → local prefill on the decode worker", async () => {
    const pl = await pool({ p0: { pdPrefillFailRate: 1 }, p1: { failAfter: 0 } });
    const r = await runPd(deps(pl), input(), new AbortController().signal);
    expect(legs(r.trace)).toEqual(["prefill@n1/p0:failed", "prefill@n2/p1:failed", "local@n2/d0:committed"]);
    expect(r.trace.fallbacks).toEqual(["prefill_retry", "prefill_failed_local"]);
    expect(answerOf(r.outcome).usage.prompt_tokens_details.cached_tokens).toBe(0);
  });

  test("decode fails before its first token → the other decode worker with the same params (blocks still held)", async () => {
    const pl = await pool({ d0: { failAfter: 0 } });
    const dp = deps(pl);
    const r = await runPd(dp, input(), new AbortController().signal);
    expect(legs(r.trace)).toEqual(["prefill@n1/p0:done", "decode@n2/d0:failed", "decode@n1/d1:committed"]);
    expect(r.trace.fallbacks).toEqual(["decode_retry"]);
    expect(dp.runner.sent[2]!.body.kv_transfer_params).toEqual(dp.runner.sent[1]!.body.kv_transfer_params as Record<string, unknown>);
    expect(answerOf(r.outcome).usage.prompt_tokens_details.cached_tokens).toBe(1184);
    expect(dp.observer.log).toContain("pair:n1->n1");
  });

  test("the blocks are gone (lease expired) → both decodes fail their load → redo from prefill on the other prefill worker", async () => {
    const pl = await pool({ p0: { kvLeaseExpireRate: 1 } });
    const r = await runPd(deps(pl), input({ stream: true, body: { model: "sim", prompt: PROMPT, max_tokens: 4, stream: true } }), new AbortController().signal);
    expect(legs(r.trace)).toEqual(["prefill@n1/p0:done", "decode@n2/d0:failed", "decode@n1/d1:failed", "prefill@n2/p1:done", "decode@n2/d0:committed"]);
    expect(r.trace.fallbacks).toEqual(["decode_retry", "decode_redo_prefill"]);
    expect(r.trace.legs[1]!).toMatchObject({ outcome: "failed" });
    expect(r.trace.legs[1]!.reason).toContain("not held");
    expect((r.outcome as { answer: Committed }).answer.text).toContain("[DONE]");
    expect(await (await fetch(`${pl.p[0]!.url}/metrics`)).text()).toContain("sim_kv_lease_expired_total 1");
  });

  test("a cut-off transfer under kv_load_failure_policy recompute: the decode worker prefills itself", async () => {
    const pl = await pool({ p0: { kvTransferFailRate: 1 }, policy: "recompute" });
    const r = await runPd(deps(pl), input(), new AbortController().signal);
    expect(legs(r.trace)).toEqual(["prefill@n1/p0:done", "decode@n2/d0:committed"]);
    expect(answerOf(r.outcome).usage.prompt_tokens_details.cached_tokens).toBe(0);
    // The prefill side never saw the transfer confirmed: it holds the blocks until the lease ends.
    expect(pl.p[0]!.pd!.server.heldRequests).toBe(1);
  });

  test("every worker failing ends in a clean failure, not a hang", async () => {
    const pl = await pool({ p0: { failAfter: 0 }, p1: { failAfter: 0 }, d0: { failAfter: 0 }, d1: { failAfter: 0 } });
    const r = await runPd(deps(pl), input(), new AbortController().signal);
    expect(r.outcome).toMatchObject({ kind: "failed", status: 500 });
    expect(legs(r.trace)).toEqual(["prefill@n1/p0:failed", "prefill@n2/p1:failed", "local@n2/d0:failed", "local@n1/d1:failed"]);
  });

  test("a hung prefill times out and is retried elsewhere; a decode with no first token in time goes to the other decode worker", async () => {
    const timeouts = { prefillMs: 300, firstTokenMs: 300 };
    const hungPrefill = await pool({ p0: { hangAfter: 0 } });
    const a = await runPd({ ...deps(hungPrefill), timeouts }, input(), new AbortController().signal);
    expect(legs(a.trace)).toEqual(["prefill@n1/p0:failed", "prefill@n2/p1:done", "decode@n2/d0:committed"]);
    expect(a.trace.legs[0]!.reason).toMatch(/^timeout/);
    for (const e of started.splice(0)) await e.stop();
    const hungDecode = await pool({ d0: { hangAfter: 0 } });
    const b = await runPd({ ...deps(hungDecode), timeouts }, input({ stream: true, body: { model: "sim", prompt: PROMPT, max_tokens: 4, stream: true } }), new AbortController().signal);
    expect(legs(b.trace)).toEqual(["prefill@n1/p0:done", "decode@n2/d0:failed", "decode@n1/d1:committed"]);
    expect((b.outcome as { answer: Committed }).answer.text).toContain("[DONE]");
  });

  test("client disconnect aborts the running leg and nothing is retried (prefill hung, then decode hung)", async () => {
    for (const hung of ["p0", "d0"] as const) {
      const pl = await pool({ [hung]: { hangAfter: 0 } });
      const ac = new AbortController();
      const t0 = performance.now();
      const dp = deps(pl);
      const running = runPd(dp, input(), ac.signal);
      await Bun.sleep(150);
      ac.abort();
      const r = await running;
      expect(r.outcome.kind).toBe("aborted");
      expect(r.trace.legs.at(-1)!.outcome).toBe("aborted");
      expect(r.trace.legs.filter((l) => l.outcome === "failed")).toEqual([]);
      expect(performance.now() - t0).toBeLessThan(5000);
      // A prefill that answered with held blocks no decode used is counted (the lease leak window).
      expect(dp.observer.log.filter((l) => l.startsWith("abandoned"))).toEqual(hung === "d0" ? ["abandoned:n1/p0"] : []);
      for (const e of started.splice(0)) await e.stop();
    }
  });
});

describe("metrics", () => {
  test("decisions, fallbacks, prefill and transfer times, pairs by node pair, abandoned prefills; promtool accepts them and the sims' P/D series", async () => {
    const { Registry } = await import("prom-client");
    const { PdMetrics } = await import("../../src/pd/metrics.ts");
    const reg = new Registry();
    const m = new PdMetrics(reg);
    const pl = await pool({ p0: { kvLeaseExpireRate: 1 } });
    const dp = deps(pl);
    await runPd({ ...dp, observer: m }, input(), new AbortController().signal);
    const text = await reg.metrics();
    expect(text).toContain('herd_pd_decisions_total{reason="disaggregated"} 1');
    expect(text).toContain('herd_pd_fallbacks_total{reason="decode_redo_prefill"} 1');
    expect(text).toContain('herd_pd_pairs_total{prefill_node="n2",decode_node="n2"} 1');
    expect(text).toContain('herd_pd_abandoned_prefills_total{worker="n1/p0"} 1');
    expect(text).toMatch(/^herd_pd_prefill_seconds_count 2$/m);
    expect(text).toMatch(/^herd_pd_transfer_to_first_token_seconds_count 1$/m);
    const { peer } = await import("../helpers/peers.ts");
    if (!peer("promtool", ["promtool", "--version"])) return;
    const sims = await Promise.all([...pl.p, ...pl.d].map(async (e) => (await fetch(`${e.url}/metrics`)).text()));
    for (const body of [text, ...sims]) {
      const r = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: new TextEncoder().encode(body) });
      const findings = (r.stdout.toString() + r.stderr.toString()).split("\n").filter((l) => l.trim() !== "" && !/^vllm:\w+ metric names should not contain ':'$/.test(l));
      expect(findings).toEqual([]);
    }
  });
});
