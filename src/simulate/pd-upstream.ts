// The P/D legs in virtual time: a SimUpstream over the sim engine's schedulers that behaves to the
// lifecycle as vLLM's NixlConnector engines behave to a router (the contract src/engine/sim/pd.ts
// serves over HTTP, vllm docs/features/nixl_connector_usage.md), with the KV transfer timed at a
// link bandwidth instead of carried over a socket:
// - prefill leg (`kv_transfer_params.do_remote_decode`, max_tokens 1, not streamed): runs on its
//   scheduler; finishing length-capped it keeps its full prompt blocks (NixlConnector's
//   request_finished delays the free) and answers one JSON document whose top-level
//   `kv_transfer_params` name them (remote_block_ids, remote_engine_id = the worker, remote_request_id);
//   held blocks are freed when a decode pulls them or when the lease (kv_lease_duration, 30 s) ends;
// - decode leg (`do_remote_prefill` + those fields): reserves the blocks on its scheduler
//   (WAITING_FOR_REMOTE_KVS), waits `transferMs + bytes / linkBytesPerS`, enters them in its prefix
//   cache (commitImported: BlockStored events, cached tokens) and frees the prefill side's hold, then
//   runs; its blocks are released when it finishes. No free blocks, or the hold is gone: the decode
//   prefills locally (kv_load_failure_policy "recompute"), counted in `loadFailures`.
// Chunks are token indexes (number, -1 = error event) or, for a leg that is not streamed, the whole
// JSON answer (string): the orchestrator reads the prefill answer's text.
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Block } from "../engine/sim/blocks.ts";
import { DEFAULT_KV_LEASE_S } from "../engine/sim/kv-transfer-config.ts";
import type { FinishInfo, SimScheduler } from "../engine/sim/scheduler.ts";
import { SimUpstream, type TokenFrames } from "./sim-upstream.ts";
import type { ChunkScanner, LegReply, LegRequest, Upstream } from "../request/upstream.ts";

export type PdChunk = number | string;

export interface PdLink {
  /** KV bytes per prompt token (Qwen3-8B: 144 KiB). */
  kvBytesPerToken: number;
  /** Prefill → decode bandwidth, bytes per second. */
  linkBytesPerS: number;
  /** Fixed cost of one transfer (handshake, notification), ms. */
  transferMs: number;
}

export interface VirtualPdOptions extends PdLink {
  clock: Clock;
  blockSize: number;
  scheduler(workerId: string): SimScheduler;
  /** Each leg that finished on its scheduler (not aborted), for the run's records. */
  onFinish?(leg: LegRequest, info: FinishInfo): void;
  leaseMs?: number;
}

export interface VirtualPdCounters {
  /** Transfers completed (decode legs that started with the prefill's blocks). */
  transfers: number;
  transferredBytes: number;
  /** Decode legs that found no hold or no free blocks and prefilled locally. */
  loadFailures: number;
  /** Holds freed by their lease (no decode pulled them). */
  leaseExpired: number;
}

interface Hold {
  scheduler: SimScheduler;
  blocks: Block[];
  lease: TimerHandle;
}

function scanner(): ChunkScanner<PdChunk> {
  const s = {
    sawToken: false,
    ended: true,
    cachedTokens: null,
    push(c: PdChunk) {
      if (s.sawToken || typeof c !== "number" || c < 0) return false;
      return (s.sawToken = true);
    },
  };
  return s;
}

export class VirtualPd implements Upstream<PdChunk> {
  readonly counters: VirtualPdCounters = { transfers: 0, transferredBytes: 0, loadFailures: 0, leaseExpired: 0 };
  private readonly inner: SimUpstream<PdChunk>;
  /** Held prefill blocks by remote_request_id (the prefill leg's id). */
  private readonly holds = new Map<string, Hold>();
  /** A finished prefill leg's transfer params, until its answer is framed. */
  private readonly params = new Map<string, Record<string, unknown>>();
  /** Imported decode blocks, released when that leg ends. */
  private readonly imported = new Map<string, { scheduler: SimScheduler; blocks: Block[] }>();
  readonly format: Upstream<PdChunk>["format"];

  constructor(private readonly o: VirtualPdOptions) {
    const frames: TokenFrames<PdChunk> = {
      format: {
        scanner,
        usage: scanner,
        size: (c) => (typeof c === "string" ? c.length : 1),
        concat: (cs) => {
          for (let i = cs.length - 1; i >= 0; i--) if (typeof cs[i] === "string") return cs[i]!;
          return cs[cs.length - 1] ?? -1;
        },
        text: (c) => (typeof c === "string" ? c : ""),
        errorEvent: () => -1,
      },
      contentType: "application/x-herd-tokens",
      token: (_leg, index) => index,
      end: (leg, info) => (leg.stream ? [] : [this.answer(leg, info)]),
      error: () => null,
    };
    this.format = frames.format;
    this.inner = new SimUpstream<PdChunk>({
      frames,
      scheduler: o.scheduler,
      ignoreEos: true,
      keepBlocks: (leg) => (transferParams(leg)?.do_remote_decode === true ? this.keep(leg) : undefined),
      onFinish: (leg, info) => {
        this.releaseImported(leg.id);
        if (info.reason !== "abort") o.onFinish?.(leg, info);
      },
    });
  }

  send(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<PdChunk> | { error: unknown }) => void): void {
    const p = transferParams(leg);
    if (p?.do_remote_prefill !== true) return this.inner.send(leg, signal, reply);
    const hold = typeof p.remote_request_id === "string" ? this.holds.get(p.remote_request_id) : undefined;
    const sched = this.o.scheduler(leg.workerId);
    const blocks = hold === undefined ? null : sched.reserveBlocks(hold.blocks.length);
    if (hold === undefined || blocks === null) {
      this.counters.loadFailures++;
      return this.inner.send(leg, signal, reply);
    }
    const bytes = blocks.length * this.o.blockSize * this.o.kvBytesPerToken;
    const onAbort = () => {
      timer.cancel();
      sched.releaseBlocks(blocks);
      reply({ error: new Error("request aborted during the KV transfer") });
    };
    const timer = this.o.clock.setTimer(this.o.transferMs + (bytes / this.o.linkBytesPerS) * 1000, () => {
      signal.removeEventListener("abort", onAbort);
      sched.commitImported(blocks, leg.promptTokens ?? [], null, null);
      this.release(p.remote_request_id as string);
      this.counters.transfers++;
      this.counters.transferredBytes += bytes;
      this.imported.set(leg.id, { scheduler: sched, blocks });
      this.inner.send(leg, signal, (r) => {
        if ("error" in r || r.status !== 200) this.releaseImported(leg.id); // refused: it never runs
        reply(r);
      });
    });
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
  }

  /** Blocks held right now for decodes that have not pulled them. */
  get heldBlocks(): number {
    let n = 0;
    for (const h of this.holds.values()) n += h.blocks.length;
    return n;
  }

  /** The prefill side's keepBlocks: vLLM holds only length-capped requests' full prompt blocks. */
  private keep(leg: LegRequest): (blocks: readonly Block[], reason: string) => number {
    const promptLen = leg.promptTokens?.length ?? 0;
    const sched = this.o.scheduler(leg.workerId);
    return (blocks, reason) => {
      if (reason !== "length") return 0;
      const keep = Math.min(Math.floor(promptLen / this.o.blockSize), blocks.length);
      if (keep === 0) return 0;
      const held = blocks.slice(0, keep);
      const lease = this.o.clock.setTimer(this.o.leaseMs ?? DEFAULT_KV_LEASE_S * 1000, () => {
        this.counters.leaseExpired++;
        this.release(leg.id);
      });
      this.holds.set(leg.id, { scheduler: sched, blocks: held, lease });
      this.params.set(leg.id, {
        do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [held.map((b) => b.id)], remote_engine_id: leg.workerId,
        remote_request_id: leg.id, remote_host: leg.workerUrl, remote_port: 0, tp_size: 1, remote_num_tokens: promptLen,
      });
      return keep;
    };
  }

  private release(holdId: string): void {
    const h = this.holds.get(holdId);
    if (h === undefined) return;
    this.holds.delete(holdId);
    h.lease.cancel();
    h.scheduler.releaseBlocks(h.blocks);
  }

  private releaseImported(legId: string): void {
    const i = this.imported.get(legId);
    if (i === undefined) return;
    this.imported.delete(legId);
    i.scheduler.releaseBlocks(i.blocks);
  }

  /** A non-streamed leg's whole answer, as vLLM's OpenAI server writes it (with the prefill's params). */
  private answer(leg: LegRequest, f: FinishInfo): string {
    const params = this.params.get(leg.id) ?? null;
    this.params.delete(leg.id);
    return JSON.stringify({
      id: leg.id, object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "" }, finish_reason: f.reason }],
      usage: { prompt_tokens: f.promptTokens, completion_tokens: f.outputTokens, prompt_tokens_details: { cached_tokens: f.cachedTokens } },
      kv_transfer_params: params,
    });
  }
}

/** The leg body's kv_transfer_params (the orchestrator's legs.ts wrote them), or null. */
function transferParams(leg: LegRequest): Record<string, unknown> | null {
  if (!leg.body.includes("kv_transfer_params")) return null;
  const p = (JSON.parse(leg.body) as { kv_transfer_params?: unknown }).kv_transfer_params;
  return typeof p === "object" && p !== null ? (p as Record<string, unknown>) : null;
}
