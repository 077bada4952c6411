// The virtual P/D legs (src/simulate/pd-upstream.ts) as NixlConnector engines answer them: the
// prefill holds its full prompt blocks and names them in kv_transfer_params; the decode waits the
// transfer time, starts with them cached and frees the hold; an unpulled hold ends with its lease;
// a decode aborted during its transfer frees what it reserved.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { DEFAULT_COST } from "../../src/engine/sim/cost.ts";
import { SimScheduler } from "../../src/engine/sim/scheduler.ts";
import { type PdChunk, VirtualPd } from "../../src/simulate/pd-upstream.ts";
import type { LegReply, LegRequest } from "../../src/request/upstream.ts";

const BS = 16;
const NUM_BLOCKS = 64;

function setup(leaseMs = 30_000) {
  const clock = new VirtualClock(0);
  const mk = () => new SimScheduler({ blockSize: BS, numBlocks: NUM_BLOCKS, maxNumSeqs: 8, maxNumBatchedTokens: 8192, maxWaiting: 16, maxModelLen: 1024, cost: DEFAULT_COST, timeScale: 1, hashSeed: 1n }, clock);
  const scheds = new Map([["p", mk()], ["d", mk()]]);
  const finished: { id: string; cached: number }[] = [];
  const pd = new VirtualPd({
    clock, blockSize: BS, kvBytesPerToken: 1000, linkBytesPerS: 1e6, transferMs: 5, leaseMs,
    scheduler: (id) => scheds.get(id)!, onFinish: (leg, f) => void finished.push({ id: leg.id, cached: f.cachedTokens }),
  });
  return { clock, scheds, pd, finished };
}

const prompt = Uint32Array.from({ length: 100 }, (_, i) => 2000 + i); // 6 full blocks + 4 tokens
const leg = (id: string, worker: string, body: Record<string, unknown>, stream: boolean, maxTokens: number): LegRequest => ({
  id, requestId: "r", workerId: worker, workerUrl: `sim://${worker}`, endpoint: "completions", body: JSON.stringify(body), stream, promptTokens: prompt, maxTokens,
});

/** Send a leg and read its body to the end; `text` is the last whole answer, `tokens` the token chunks. */
function send(pd: VirtualPd, l: LegRequest, signal = new AbortController().signal) {
  const out = { status: 0, text: "", tokens: 0, error: null as unknown };
  pd.send(l, signal, (r: LegReply<PdChunk> | { error: unknown }) => {
    if ("error" in r) return void (out.error = r.error);
    out.status = r.status;
    const next = (x: { done: boolean; value?: PdChunk; error?: unknown }) => {
      if (x.done || "error" in x) return;
      if (typeof x.value === "string") out.text = x.value;
      else out.tokens++;
      r.body!.read(next);
    };
    r.body?.read(next);
  });
  return out;
}

const free = (s: SimScheduler) => s.stats().freeBlocks;

describe("virtual P/D legs", () => {
  test("prefill holds its full prompt blocks; decode waits the transfer, starts with them cached, frees the hold", () => {
    const { clock, scheds, pd, finished } = setup();
    const p = send(pd, leg("r.prefill.0", "p", { kv_transfer_params: { do_remote_decode: true } }, false, 1));
    clock.advance(500); // the prefill's answer, well inside the lease
    const params = JSON.parse(p.text).kv_transfer_params;
    expect(params.remote_block_ids[0]).toHaveLength(6);
    expect(params.remote_request_id).toBe("r.prefill.0");
    expect(pd.heldBlocks).toBe(6);
    expect(free(scheds.get("p")!)).toBeLessThan(NUM_BLOCKS);
    const sentAt = clock.now();
    const d = send(pd, leg("r.decode.0", "d", { kv_transfer_params: params }, true, 4));
    expect(d.status).toBe(0); // no answer before the transfer
    clock.step();
    // 6 blocks × 16 tokens × 1000 B at 1 MB/s = 96 ms, + 5 ms
    expect(clock.now() - sentAt).toBeCloseTo(101, 6);
    expect(pd.heldBlocks).toBe(0);
    expect(free(scheds.get("p")!)).toBe(NUM_BLOCKS); // released (they stay in its prefix cache, evictable)
    while (clock.step()) {}
    expect(d.status).toBe(200);
    expect(d.tokens).toBe(4);
    expect(finished.find((f) => f.id === "r.decode.0")!.cached).toBe(96);
    expect(pd.counters).toEqual({ transfers: 1, transferredBytes: 96_000, loadFailures: 0, leaseExpired: 0 });
  });

  test("a hold no decode pulls ends with its lease; a decode that comes after it prefills locally", () => {
    const { clock, pd, finished } = setup(1000);
    const p = send(pd, leg("r.prefill.0", "p", { kv_transfer_params: { do_remote_decode: true } }, false, 1));
    while (clock.step()) {}
    expect(pd.heldBlocks).toBe(0);
    expect(pd.counters.leaseExpired).toBe(1);
    const d = send(pd, leg("r.decode.0", "d", { kv_transfer_params: JSON.parse(p.text).kv_transfer_params }, true, 2));
    while (clock.step()) {}
    expect(d.status).toBe(200);
    expect(pd.counters.loadFailures).toBe(1);
    expect(finished.find((f) => f.id === "r.decode.0")!.cached).toBe(0);
  });

  test("a decode aborted during its transfer answers an error and frees what it reserved", () => {
    const { clock, scheds, pd } = setup();
    const p = send(pd, leg("r.prefill.0", "p", { kv_transfer_params: { do_remote_decode: true } }, false, 1));
    clock.advance(500);
    const before = free(scheds.get("d")!);
    const ac = new AbortController();
    const d = send(pd, leg("r.decode.0", "d", { kv_transfer_params: JSON.parse(p.text).kv_transfer_params }, true, 2), ac.signal);
    expect(free(scheds.get("d")!)).toBe(before - 6);
    ac.abort();
    expect(d.error).toBeInstanceOf(Error);
    expect(free(scheds.get("d")!)).toBe(before);
    while (clock.step()) {}
    expect(pd.counters.transfers).toBe(0);
  });
});
