// KV offload to herd's tier (`--kv-offload-url resp://host:port`), modelled on vLLM's offloading
// connector with herd's RESP server as the CPU store:
// - a block the GPU prefix cache evicts is SET under its tier key (src/protocol/tier-key.ts) with
//   `--kv-offload-bytes-per-block` bytes; once stored, a KV event BlockStored with medium "CPU" is
//   emitted the way vLLM's OffloadingConnector.take_events does (vllm/distributed/kv_transfer/
//   kv_connector/v1/offloading_connector.py: block_hashes, parent_block_hash None, token_ids [],
//   medium from the store's LoadStoreSpec, "CPU" for CPULoadStoreSpec in vllm/v1/kv_offload/mediums.py);
// - a request's prompt blocks beyond its GPU prefix hit are looked up (EXISTS, then GET of the
//   leading run) before it queues; the blocks read back count as cached and cost
//   bytes / `--kv-offload-load-gb-per-s` of waiting instead of their prefill; a key found missing
//   that this engine had stored emits BlockRemoved medium "CPU" (the tier evicted it).
// Nothing here blocks the scheduler: every RESP call is a promise, bounded by `queueMax` commands in
// flight (beyond it an offload is dropped and counted, a lookup is a miss).

import type { Clock } from "../../core/clock.ts";
import type { KvEvent } from "./blocks.ts";
import { tierKey } from "../../protocol/tier-key.ts";
import { RespClient } from "./resp-client.ts";
import type { SchedulerOffload } from "./scheduler.ts";

export interface OffloadOptions {
  url: string;
  /** AUTH password (from --kv-offload-password-file); null = none or the URL's. */
  password: string | null;
  model: string;
  blockSize: number;
  bytesPerBlock: number;
  /** Host→GPU copy rate, GB/s (10^9 bytes per second). */
  loadGbPerS: number;
  /** Commands in flight at most (SETs and lookups together). */
  queueMax: number;
  /** Durations are divided by this, as every sim duration. */
  timeScale: number;
}

export interface OffloadCounters {
  stored: number;
  storeFailed: number;
  /** Offloads dropped: not connected or queue full. */
  dropped: number;
  lookups: number;
  /** Blocks read back from the tier (counted as cached). */
  loadedBlocks: number;
  loadedBytes: number;
  /** Blocks this engine stored that a lookup found gone (BlockRemoved CPU emitted). */
  goneBlocks: number;
  connectFailures: number;
}

const MAX_REMEMBERED = 1 << 20;
const RECONNECT_MS = 1000;

/** The bytes stored for a block: its herd hash (u64 LE) then zeros, so a read can be checked. */
export function blockValue(hash: bigint, bytes: number): Uint8Array {
  const v = new Uint8Array(Math.max(8, bytes));
  new DataView(v.buffer).setBigUint64(0, hash, true);
  return v;
}

function valueMatches(v: Uint8Array, hash: bigint, bytes: number): boolean {
  return v.length === Math.max(8, bytes) && new DataView(v.buffer, v.byteOffset, 8).getBigUint64(0, true) === hash;
}

/** Load time of `blocks` blocks at the configured rate, in (scaled) ms. */
export function loadMs(o: Pick<OffloadOptions, "bytesPerBlock" | "loadGbPerS" | "timeScale">, blocks: number): number {
  if (o.loadGbPerS <= 0) return 0;
  return (blocks * o.bytesPerBlock) / (o.loadGbPerS * 1e6) / o.timeScale;
}

export class SimOffload implements SchedulerOffload {
  readonly counters: OffloadCounters = { stored: 0, storeFailed: 0, dropped: 0, lookups: 0, loadedBlocks: 0, loadedBytes: 0, goneBlocks: 0, connectFailures: 0 };
  private client: RespClient | null = null;
  private stopped = false;
  /** herd hash → engine hash of blocks this engine stored (for BlockRemoved CPU); bounded, oldest dropped. */
  private readonly offloaded = new Map<bigint, bigint>();

  constructor(
    private readonly o: OffloadOptions,
    private readonly clock: Clock,
    private readonly emit: (events: KvEvent[]) => void,
  ) {}

  /** Connect (retrying every second until stop()); resolves after the first attempt. */
  async start(): Promise<void> {
    if (this.stopped) return;
    try {
      this.client = await RespClient.connect(this.o.url, this.o.queueMax, this.o.password);
    } catch {
      this.counters.connectFailures++;
      this.clock.setTimer(RECONNECT_MS, () => void this.start());
    }
  }

  stop(): void {
    this.stopped = true;
    this.client?.close();
  }

  /** No tier command is waiting for its reply (tests and benches wait for offloads to land). */
  inFlightSettled(): boolean {
    return (this.client?.inFlight ?? 0) === 0;
  }

  get connected(): boolean {
    return this.client?.open === true;
  }

  private usable(n: number): RespClient | null {
    const c = this.client;
    if (c === null || !c.open) {
      if (c !== null && !this.stopped) {
        this.client = null;
        void this.start();
      }
      return null;
    }
    return c.inFlight + n <= this.o.queueMax ? c : null;
  }

  offloadEvicted(engineHash: bigint, herdHash: bigint): void {
    if (this.offloaded.has(herdHash)) return; // already in the tier as far as this engine knows
    const c = this.usable(1);
    if (c === null) return void this.counters.dropped++;
    void c.command(["SET", tierKey(this.o.model, herdHash), blockValue(herdHash, this.o.bytesPerBlock)]).then((r) => {
      if (r !== "OK") return void this.counters.storeFailed++;
      this.counters.stored++;
      this.remember(herdHash, engineHash);
      this.emit([{ type: "BlockStored", blockHashes: [engineHash], parentBlockHash: null, tokenIds: [], blockSize: this.o.blockSize, medium: "CPU" }]);
    });
  }

  lookup(herd: readonly bigint[], from: number, done: (blocks: number) => void): void {
    const c = from < herd.length ? this.usable(herd.length - from) : null;
    if (c === null) return done(0);
    this.counters.lookups++;
    const t0 = this.clock.now();
    void this.read(c, herd, from).then(
      (n) => {
        const wait = loadMs(this.o, n) - (this.clock.now() - t0);
        if (wait > 0) this.clock.setTimer(wait, () => done(n));
        else done(n);
      },
      () => done(0),
    );
  }

  /** EXISTS for every candidate, then GET the leading run; returns how many leading blocks were read intact. */
  private async read(c: RespClient, herd: readonly bigint[], from: number): Promise<number> {
    const keys = herd.slice(from).map((h) => tierKey(this.o.model, h));
    const exists = await Promise.all(keys.map((k) => c.command(["EXISTS", k])));
    let lead = 0;
    while (lead < keys.length && exists[lead] === 1) lead++;
    if (lead < keys.length && exists[lead] === 0) this.gone(herd[from + lead]!);
    const values = await Promise.all(keys.slice(0, lead).map((k) => c.command(["GET", k])));
    let n = 0;
    while (n < lead) {
      const v = values[n];
      if (!(v instanceof Uint8Array) || !valueMatches(v, herd[from + n]!, this.o.bytesPerBlock)) {
        if (v === null) this.gone(herd[from + n]!);
        break;
      }
      n++;
    }
    this.counters.loadedBlocks += n;
    this.counters.loadedBytes += n * this.o.bytesPerBlock;
    return n;
  }

  private remember(herdHash: bigint, engineHash: bigint): void {
    this.offloaded.set(herdHash, engineHash);
    if (this.offloaded.size > MAX_REMEMBERED) this.offloaded.delete(this.offloaded.keys().next().value!);
  }

  private gone(herdHash: bigint): void {
    const engineHash = this.offloaded.get(herdHash);
    if (engineHash === undefined) return;
    this.offloaded.delete(herdHash);
    this.counters.goneBlocks++;
    this.emit([{ type: "BlockRemoved", blockHashes: [engineHash], medium: "CPU" }]);
  }
}
