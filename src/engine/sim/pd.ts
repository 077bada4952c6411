// P/D in the simulated engine, as vLLM's NixlConnector behaves to a router (vllm
// docs/features/nixl_connector_usage.md; tests/v1/kv_connector/nixl_integration/toy_proxy_server.py drives it):
// - prefill side: a request with `kv_transfer_params.do_remote_decode` that finishes length-capped
//   (max_tokens 1) keeps its full prompt blocks and answers with top-level `kv_transfer_params`
//   {do_remote_prefill, do_remote_decode, remote_block_ids (one list per KV-cache group),
//   remote_engine_id, remote_request_id, remote_host, remote_port, tp_size, remote_num_tokens}
//   (nixl scheduler request_finished); the blocks stay held until a decode engine pulls them or the
//   lease (kv_lease_duration) ends;
// - decode side: a request with `do_remote_prefill` and the remote fields pulls those blocks' bytes
//   from the prefill engine's side channel, enters them in its prefix cache (so they count as
//   cached tokens) and then runs; a failed load errors the request (kv_load_failure_policy "fail")
//   or prefills locally ("recompute").
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import type { Clock } from "../../core/clock.ts";
import { HerdError, errorMessage } from "../../core/errors.ts";
import { SeededRng } from "../../core/rng.ts";
import type { Block } from "./blocks.ts";
import type { PdHooks } from "./generate.ts";
import { errorBody, type GenerationRequest } from "./openai.ts";
import { type KvFaults, KvHoldServer, pullBlocks } from "./kv-side-channel.ts";
import { type KvTransferConfig, kvParamsIntent, type RemotePrefillParams } from "./kv-transfer-config.ts";
import type { FinishReason, SimScheduler } from "./scheduler.ts";

export interface SimPdOptions {
  kv: KvTransferConfig;
  /** SGLang's --disaggregation-mode; null = vLLM's NixlConnector contract. */
  sglangMode?: "prefill" | "decode" | null;
  /** VLLM_NIXL_SIDE_CHANNEL_HOST: bound and advertised in remote_host. */
  sideChannelHost: string;
  /** VLLM_NIXL_SIDE_CHANNEL_PORT (0 = ephemeral, for tests). */
  sideChannelPort: number;
  bytesPerBlock: number;
  faults: KvFaults;
  /** Share of remote-decode (prefill leg) requests answered 500 (fault knob). */
  prefillFailRate: number;
  transferTimeoutMs: number;
  tpSize: number;
  seed: number;
}

/** What a prefill-leg request hands generate(): which blocks to keep, and the params to answer. */
export interface PrefillHooks {
  keepBlocks(requestId: string, blocks: readonly Block[], reason: FinishReason): number;
  params(requestId: string): Record<string, unknown> | null;
}

export type RemoteLoad = { ok: true; blocks: Block[]; bytes: number; ms: number } | { ok: false; message: string };

export class SimPd {
  readonly server: KvHoldServer;
  readonly port: number;
  private readonly rng: SeededRng;
  private readonly answers = new Map<string, Record<string, unknown>>();
  private readonly m: ReturnType<typeof pdMetrics>;

  constructor(
    readonly o: SimPdOptions,
    private readonly scheduler: SimScheduler,
    private readonly clock: Clock,
    registry: Registry,
  ) {
    this.rng = new SeededRng(o.seed ^ 0x5eed_9d);
    this.m = pdMetrics(registry);
    const m = this.m;
    this.server = new KvHoldServer({
      engineId: o.kv.engineId,
      leaseMs: o.kv.leaseDurationS * 1000,
      bytesPerBlock: o.bytesPerBlock,
      faults: o.faults,
      clock,
      rng: this.rng,
      release: (blocks) => scheduler.releaseBlocks(blocks),
      events: {
        expired: () => m.expired.inc(),
        heldBlocksChanged: (n) => m.held.set(n),
        served: (bytes, ok) => {
          m.served.inc({ result: ok ? "ok" : "failed" });
          m.servedBytes.inc(bytes);
        },
      },
    });
    this.port = this.server.listen(o.sideChannelHost, o.sideChannelPort);
  }

  get engineId(): string {
    return this.o.kv.engineId;
  }

  /**
   * What a generation request's kv_transfer_params ask of this engine, done before it runs: the
   * prefill leg's hooks, or the decode leg's remote load (its blocks released when it ends), or
   * the answer when that cannot go on (a prefill-fail fault, a failed load under policy fail).
   */
  async prepare(body: unknown, g: GenerationRequest, signal: AbortSignal, logError: (line: string) => void): Promise<{ hooks: PdHooks } | { response: Response }> {
    if (this.o.sglangMode) return this.prepareSglang(body, g, signal, logError);
    const intent = kvParamsIntent(body);
    if (intent.kind === "invalid") throw new HerdError(400, "invalid_request_error", intent.message, "invalid_value", "kv_transfer_params");
    if (intent.kind === "remote_decode") {
      if (this.failPrefill()) return { response: Response.json(errorBody(500, "simulated prefill failure (--pd-prefill-fail-rate)"), { status: 500 }) };
      return { hooks: this.prefillHooks(g.promptTokens.length) };
    }
    if (intent.kind !== "remote_prefill") return { hooks: {} };
    const load = await this.loadRemote(g.promptTokens, g.lora, g.cacheSalt, intent.remote, signal);
    if (!load.ok) {
      logError(`KV load failed (${this.o.kv.loadFailurePolicy}): ${load.message}`);
      if (signal.aborted) return { response: new Response(null, { status: 499 }) };
      if (this.o.kv.loadFailurePolicy === "fail") return { response: kvLoadFailed(g.stream, load.message) };
      return { hooks: {} }; // "recompute": the request prefills locally, as if it had no remote blocks
    }
    if (load.blocks.length === 0) return { hooks: {} };
    let done = false;
    return { hooks: { onDone: () => void (done || ((done = true), this.scheduler.releaseBlocks(load.blocks))) } };
  }

  /**
   * SGLang (python/sglang/srt/disaggregation, mini_lb.py): both servers get one body with
   * bootstrap_host/port/room. The prefill server runs the request and holds its prompt blocks
   * under the room; the decode server waits for that room on the prefill's bootstrap port, pulls
   * the blocks and decodes. Sim key "room:<bootstrap_room>"; no answer carries transfer params.
   */
  private async prepareSglang(body: unknown, g: GenerationRequest, signal: AbortSignal, logError: (line: string) => void): Promise<{ hooks: PdHooks } | { response: Response }> {
    const b = (body ?? {}) as Record<string, unknown>;
    if (b.bootstrap_room === undefined || b.bootstrap_room === null) return { hooks: {} };
    const key = `room:${String(b.bootstrap_room)}`;
    if (this.o.sglangMode === "prefill") {
      if (this.failPrefill()) return { response: Response.json(errorBody(500, "simulated prefill failure (--pd-prefill-fail-rate)"), { status: 500 }) };
      const bs = this.scheduler.cfg.blockSize;
      const promptLen = g.promptTokens.length;
      g.maxTokens = 1; // a prefill server computes the prompt and its first token only
      return { hooks: { keepBlocks: (_id, blocks) => { const k = Math.min(Math.floor(promptLen / bs), blocks.length); return k > 0 && this.server.hold(key, blocks.slice(0, k)) ? k : 0; } } };
    }
    const host = String(b.bootstrap_host ?? "").replace(/^\[(.*)\]$/, "$1");
    const port = Number(b.bootstrap_port);
    if (host === "" || !Number.isInteger(port)) throw new HerdError(400, "invalid_request_error", "bootstrap_host and bootstrap_port are required with bootstrap_room", "invalid_value", "bootstrap_host");
    const n = Math.floor(g.promptTokens.length / this.scheduler.cfg.blockSize);
    const remote = { engineId: "", requestId: key, host, port, blockIds: Array.from({ length: n }, (_, i) => i) };
    const load = await this.loadRemote(g.promptTokens, g.lora, g.cacheSalt, remote, signal, true);
    if (!load.ok) {
      logError(`KV transfer for ${key} failed: ${load.message}`);
      return { response: signal.aborted ? new Response(null, { status: 499 }) : kvLoadFailed(g.stream, load.message) };
    }
    let done = false;
    return { hooks: { onDone: () => void (done || ((done = true), this.scheduler.releaseBlocks(load.blocks))) } };
  }

  /** The prefill-fail fault knob: true when this prefill leg must fail. */
  failPrefill(): boolean {
    if (this.o.prefillFailRate > 0 && this.rng.float() < this.o.prefillFailRate) {
      this.m.prefillFailed.inc();
      return true;
    }
    return false;
  }

  prefillHooks(promptLen: number): PrefillHooks {
    const bs = this.scheduler.cfg.blockSize;
    return {
      keepBlocks: (id, blocks, reason) => {
        // vLLM holds only for FINISHED_LENGTH_CAPPED; only full prompt blocks are transferred
        // ("if the prompt is shorter than one block, no blocks are held").
        if (reason !== "length") return 0;
        const keep = Math.min(Math.floor(promptLen / bs), blocks.length);
        this.answers.set(id, this.paramsFor(id, blocks.slice(0, keep).map((b) => b.id), promptLen));
        return keep > 0 && this.server.hold(id, blocks.slice(0, keep)) ? keep : 0;
      },
      params: (id) => {
        const p = this.answers.get(id) ?? null;
        this.answers.delete(id);
        return p;
      },
    };
  }

  private paramsFor(id: string, blockIds: number[], promptLen: number): Record<string, unknown> {
    return {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: [blockIds], // one list per KV-cache group (one full-attention group here)
      remote_engine_id: this.o.kv.engineId,
      remote_request_id: id,
      remote_host: this.o.sideChannelHost,
      remote_port: this.port,
      tp_size: this.o.tpSize,
      remote_num_tokens: promptLen,
    };
  }

  /**
   * Decode side: reserve blocks, pull their bytes from the prefill engine, enter them in the prefix
   * cache. On success the caller releases `blocks` when its request finishes.
   */
  async loadRemote(prompt: readonly number[], lora: string | null, salt: string | null, remote: RemotePrefillParams, signal: AbortSignal, waitForHold = false): Promise<RemoteLoad> {
    const bs = this.scheduler.cfg.blockSize;
    const n = Math.min(remote.blockIds.length, Math.floor(prompt.length / bs));
    if (n === 0) return { ok: true, blocks: [], bytes: 0, ms: 0 };
    const blocks = this.scheduler.reserveBlocks(n);
    if (blocks === null) return { ok: false, message: `no free KV blocks for ${n} remote blocks` };
    const t0 = this.clock.now();
    try {
      const bytes = await this.pull(remote, signal, waitForHold ? t0 + this.o.transferTimeoutMs : null);
      const ms = this.clock.now() - t0;
      this.scheduler.commitImported(blocks, prompt, lora, salt);
      this.m.pulls.inc({ result: "ok" });
      this.m.pullBytes.inc(bytes);
      this.m.pullSeconds.observe(ms / 1000);
      return { ok: true, blocks, bytes, ms };
    } catch (e) {
      this.scheduler.releaseBlocks(blocks);
      this.m.pulls.inc({ result: "failed" });
      return { ok: false, message: errorMessage(e) };
    }
  }

  /**
   * One pull; with `waitUntilMs` (SGLang: the decode may arrive before its prefill has finished) a
   * "not held" answer is retried every 10 ms until then.
   */
  private async pull(remote: RemotePrefillParams, signal: AbortSignal, waitUntilMs: number | null): Promise<number> {
    for (;;) {
      try {
        return await pullBlocks({
          host: remote.host, port: remote.port, engineId: remote.engineId, requestId: remote.requestId, blockIds: remote.blockIds,
          clock: this.clock, timeoutMs: this.o.transferTimeoutMs, signal,
        });
      } catch (e) {
        if (waitUntilMs === null || signal.aborted || !/not held/.test(errorMessage(e)) || this.clock.now() >= waitUntilMs) throw e;
        await new Promise<void>((ok) => this.clock.setTimer(10, ok));
      }
    }
  }

  stop(): void {
    this.server.close();
  }
}

/**
 * kv_load_failure_policy "fail": the request ends with FINISHED_ERROR, which vLLM's OpenAI server
 * answers as a 500 (non-streaming) or an error event in the stream (vllm PR #26813, #37148).
 */
function kvLoadFailed(stream: boolean, detail: string): Response {
  const body = errorBody(500, `KV cache load failed: ${detail}`);
  if (!stream) return Response.json(body, { status: 500 });
  const text = `data: ${JSON.stringify(body)}\n\ndata: [DONE]\n\n`;
  return new Response(text, { headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
}

/**
 * Sim-only metrics (not vLLM's names: vLLM exports no lease-expiry count, which is what an
 * operator needs to see the leak window of abandoned P/D pairs).
 */
function pdMetrics(registry: Registry) {
  const r = [registry];
  return {
    expired: new Counter({ name: "sim_kv_lease_expired_total", help: "Held prefill block sets freed because no decode pulled them before the lease ended.", registers: r }),
    held: new Gauge({ name: "sim_kv_held_blocks", help: "Blocks held for remote decode.", registers: r }),
    served: new Counter({ name: "sim_kv_transfers_served_total", help: "Pulls served on the side channel, by result.", labelNames: ["result"], registers: r }),
    servedBytes: new Counter({ name: "sim_kv_transfer_served_bytes_total", help: "KV bytes sent on the side channel.", registers: r }),
    pulls: new Counter({ name: "sim_kv_pulls_total", help: "Remote KV loads by this engine, by result.", labelNames: ["result"], registers: r }),
    pullBytes: new Counter({ name: "sim_kv_pull_bytes_total", help: "KV bytes pulled from remote prefill engines.", registers: r }),
    pullSeconds: new Histogram({ name: "sim_kv_pull_seconds", help: "Time of a remote KV load.", buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30], registers: r }),
    prefillFailed: new Counter({ name: "sim_pd_prefill_failures_total", help: "Prefill legs failed by the --pd-prefill-fail-rate fault knob.", registers: r }),
  };
}
