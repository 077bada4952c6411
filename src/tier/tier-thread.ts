// The daemon's end of the KV tier's thread (tier-worker.ts). Supervised: a thread that dies
// (an uncaught error, a failed allocation) is logged and started again after RESTART_DELAY_MS, so
// the RESP port comes back and the catalog is recovered as after a crash; meanwhile peer reads miss
// and puts are dropped. What the daemon asks synchronously (figures for /metrics) is the snapshot
// the thread last pushed (at most a second old); GET /admin/kv-tier and peer reads ask and wait.
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Config } from "../config/types.ts";
import type { TierChange } from "./index-feed.ts";
import type { TierName } from "./medium.ts";
import type { KvTierFigures } from "./metrics.ts";
import type { RemoteTierSource } from "./resp/remote.ts";
import { type ThreadMemory, type ThreadMemoryAnswer, ThreadMemoryAsker } from "../core/thread-memory.ts";

export type PeerHit = { data: Uint8Array; crc32: number };

export type ToTier =
  | { t: "start"; config: Config; bootId?: string; remote: boolean; remoteAvailable: boolean }
  | { t: "put"; key: string; data: Uint8Array }
  | { t: "peer-get"; id: number; key: string }
  | { t: "entries"; id: number }
  | { t: "figures"; id: number }
  | { t: "remote-found"; id: number; data: Uint8Array | null }
  | { t: "remote-available"; v: boolean }
  | { t: "memory"; id: number; gc: boolean }
  | { t: "stop" };

export type FromTier =
  | { t: "started"; port: number | null; error?: string; /** directRecvLine(): how large SET values are read. */ direct?: string }
  | { t: "changes"; list: TierChange[] }
  | { t: "figures"; id?: number; f: KvTierFigures }
  | { t: "got"; id: number; hit: PeerHit | null }
  | { t: "entries"; id: number; list: { key: string; tier: TierName }[] }
  | { t: "remote-get"; id: number; key: string }
  | { t: "memory"; id: number; m: ThreadMemory }
  | { t: "stopped" };

export const RESTART_DELAY_MS = 1000;
/** How often the daemon tells the thread whether there are peers to ask (RemoteTierSource.available). */
const AVAILABLE_EVERY_MS = 1000;
/** Requests to the thread waiting for answers; beyond it a peer read is a miss at once. */
const PENDING_MAX = 4096;

/** Where tier-worker.ts lives: next to this file from source; in a compiled binary (scripts/build.sh
 * lists it as an entry point) under /$bunfs/root/, as src/preprocess/pool.ts finds its worker. */
function workerUrls(): string[] {
  const here = new URL("./tier-worker.ts", import.meta.url).href;
  const m = /^(file:\/\/\/\$bunfs\/root\/)/.exec(import.meta.url);
  if (!m) return [here];
  return ["src/tier/tier-worker.ts", "tier/tier-worker.ts", "tier-worker.ts"].map((p) => m[1] + p);
}

export interface TierThreadOptions {
  config: Config;
  clock: Clock;
  log?: Logger;
  bootId?: string;
  onChange?: (c: TierChange) => void;
  remote?: RemoteTierSource;
}

export class TierThread {
  private worker: Worker | null = null;
  private snapshot: KvTierFigures | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, (m: FromTier) => void>();
  private started: ((m: FromTier & { t: "started" }) => void) | null = null;
  private stopped: (() => void) | null = null;
  private stopping = false;
  private availTimer: TimerHandle | null = null;
  private restartTimer: TimerHandle | null = null;
  /** The RESP port the thread bound (kv_tier.resp.listen may say port 0). */
  port: number | null = null;
  restarts = 0;
  readonly name = "kv-tier";
  /** GET /admin/debug/memory's questions: apart from `pending` so they have deadlines of their own. */
  private readonly mem: ThreadMemoryAsker;

  constructor(private readonly o: TierThreadOptions) {
    this.mem = ThreadMemoryAsker.overWorker(o.clock, () => this.worker, (id, gc) => ({ t: "memory", id, gc }) satisfies ToTier);
  }

  /** The thread's own heap (after a GC on it when `gc`); "timeout" when it does not answer in time. */
  memory(gc: boolean, timeoutMs: number): Promise<ThreadMemoryAnswer> {
    return this.mem.ask(gc, timeoutMs);
  }

  /** Resolves once the tier is open and its RESP server listens; rejects with the tier's own error. */
  async start(): Promise<void> {
    this.stopping = false;
    const m = await this.spawn();
    if (m.error) {
      this.worker?.terminate();
      this.worker = null;
      throw new Error(m.error);
    }
    this.port = m.port;
    this.tickAvailable();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.availTimer?.cancel();
    this.restartTimer?.cancel();
    const w = this.worker;
    if (!w) return;
    await new Promise<void>((resolve) => {
      const wedged = this.o.clock.setTimer(5000, resolve); // a wedged thread is terminated anyway
      this.stopped = () => (wedged.cancel(), resolve());
      w.postMessage({ t: "stop" } satisfies ToTier);
    });
    w.terminate();
    this.worker = null;
    this.failPending();
  }

  figures(): KvTierFigures | null {
    return this.snapshot;
  }

  private figuresWait: Promise<KvTierFigures | null> | null = null;

  /** Ask the thread; calls while one question is out share its answer (one per /metrics scrape). */
  freshFigures(): Promise<KvTierFigures | null> {
    this.figuresWait ??= this.ask((id) => ({ t: "figures", id })).then((m) => {
      this.figuresWait = null;
      return m && m.t === "figures" ? m.f : this.snapshot;
    });
    return this.figuresWait;
  }

  async peerGet(key: string): Promise<PeerHit | null> {
    const m = await this.ask((id) => ({ t: "peer-get", id, key }));
    return m && m.t === "got" ? m.hit : null;
  }

  async entries(): Promise<{ key: string; tier: TierName }[]> {
    const m = await this.ask((id) => ({ t: "entries", id }));
    return m && m.t === "entries" ? m.list : [];
  }

  /** Queued for the thread (a copy crosses; the caller keeps its bytes). */
  put(key: string, data: Uint8Array): boolean {
    if (!this.worker) return false;
    this.worker.postMessage({ t: "put", key, data } satisfies ToTier);
    return true;
  }

  private ask(make: (id: number) => ToTier): Promise<FromTier | null> {
    if (!this.worker || this.pending.size >= PENDING_MAX) return Promise.resolve(null);
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.worker!.postMessage(make(id));
    });
  }

  /** Start the thread from the first of workerUrls() that loads (a compiled binary's layout varies). */
  private spawn(at = 0): Promise<FromTier & { t: "started" }> {
    const urls = workerUrls();
    return new Promise((resolve) => {
      this.started = (m) => {
        if (m.error?.includes("ModuleNotFound") && at + 1 < urls.length) {
          this.worker = null;
          void this.spawn(at + 1).then(resolve);
        } else resolve(m);
      };
      const w = new Worker(urls[at]!);
      this.worker = w;
      w.onmessage = (ev: MessageEvent<FromTier>) => this.onMessage(ev.data);
      w.onerror = (ev) => this.died(w, ev.message);
      w.addEventListener("close", () => this.died(w, "exited"));
      const remote = this.o.remote;
      w.postMessage({ t: "start", config: this.o.config, remote: remote !== undefined, remoteAvailable: remote?.available() ?? false, ...(this.o.bootId ? { bootId: this.o.bootId } : {}) } satisfies ToTier);
    });
  }

  private onMessage(m: FromTier): void {
    switch (m.t) {
      case "started":
        if (m.direct) this.o.log?.info(m.direct);
        this.started?.(m);
        this.started = null;
        return;
      case "changes":
        if (this.o.onChange) for (const c of m.list) this.o.onChange(c);
        return;
      case "figures":
        this.snapshot = m.f;
        if (m.id !== undefined) this.answer(m.id, m);
        return;
      case "got":
      case "entries":
        this.answer(m.id, m);
        return;
      case "remote-get":
        void this.remoteGet(m.id, m.key);
        return;
      case "memory":
        this.mem.answer(m.id, m.m);
        return;
      case "stopped":
        this.stopped?.();
        this.stopped = null;
        return;
    }
  }

  private async remoteGet(id: number, key: string): Promise<void> {
    const data = (await this.o.remote?.get(key).catch(() => null)) ?? null;
    this.worker?.postMessage({ t: "remote-found", id, data } satisfies ToTier);
  }

  private answer(id: number, m: FromTier): void {
    const r = this.pending.get(id);
    this.pending.delete(id);
    r?.(m);
  }

  private failPending(): void {
    this.mem.failAll();
    for (const r of this.pending.values()) r(null as unknown as FromTier);
    this.pending.clear();
  }

  private tickAvailable(): void {
    let last: boolean | null = null;
    const tick = () => {
      const v = this.o.remote?.available() ?? false;
      if (v !== last) this.worker?.postMessage({ t: "remote-available", v } satisfies ToTier);
      last = v;
      this.availTimer = this.o.clock.setTimer(AVAILABLE_EVERY_MS, tick);
    };
    tick();
  }

  /** The thread is gone without being asked to stop: log, fail what waits, start it again. */
  private died(w: Worker, why: string): void {
    if (this.worker !== w || this.stopping) return;
    this.worker = null;
    this.failPending();
    if (this.started) {
      const started = this.started;
      this.started = null;
      return started({ t: "started", port: null, error: `kv tier thread failed to start: ${why}` });
    }
    this.o.log?.error("kv tier thread died; restarting", { reason: why, restart_in_ms: RESTART_DELAY_MS });
    this.restartTimer = this.o.clock.setTimer(RESTART_DELAY_MS, () => {
      if (this.stopping) return;
      this.restarts++;
      void this.spawn().then((m) => {
        if (m.error) this.o.log?.error("kv tier thread did not come back", { error: m.error });
        else this.port = m.port;
      });
    });
  }
}
