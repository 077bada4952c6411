// The engine metrics scraper: every router.metrics_scrape_interval_ms, GET each ready worker's
// metrics endpoint and fold the load figures into the registry. Which path, which format and which
// names mean load is the worker's driver's business (drivers/<kind>.ts `metrics`); this file is the
// imperative shell around those pure readers.
// - A failed or timed-out scrape clears running/waiting/kv_usage to null: a stale figure would keep
//   steering traffic by a queue that no longer exists; with nulls, policies fall back to herd's own
//   in-flight count. The same happens when a worker leaves `ready` (e.g. restarts).
// - Rounds never overlap (a slow engine delays the next round, it does not stack them); bodies are
//   read up to maxBytes and then abandoned; scrapes run at most `concurrency` at a time.
import type { Clock, TimerHandle } from "../../core/clock.ts";
import { errorMessage } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { WorkerRegistry } from "../../workers/registry.ts";
import type { Worker } from "../../workers/worker.ts";
import type { EngineLoad } from "../driver.ts";
import { driverFor } from "../drivers/registry.ts";
import { readTextLimited } from "../../core/read-limited.ts";

export interface ScraperOptions {
  registry: WorkerRegistry;
  clock: Clock;
  /** router.metrics_scrape_interval_ms; 0 disables the loop (scrapeOnce still works). */
  intervalMs: number;
  /** Per-request timeout; defaults to min(interval, 2 s). */
  timeoutMs?: number;
  /** Largest body read; vLLM's /metrics with all histograms is a few hundred KB. */
  maxBytes?: number;
  concurrency?: number;
  fetch?: (url: string, init: { signal: AbortSignal }) => Promise<Response>;
  log?: Logger;
  /** Wall clock for WorkerLoad.scraped_at_ms (documented as wall-clock ms). */
  wallNowMs?: () => number;
  /** Which workers this node scrapes (default: all); other nodes' workers arrive with their loads. */
  owns?: (w: Readonly<Worker>) => boolean;
  /** Called when an engine reports its KV capacity (vLLM: num_gpu_blocks of vllm:cache_config_info). */
  onKvCapacity?: (workerId: string, blocks: number) => void;
}

export interface ScrapeOutcome {
  worker: string;
  ok: boolean;
  load: EngineLoad | null;
  /** KV capacity in blocks, when the engine reports it. */
  kvBlocks?: number;
  error?: string;
}

export class MetricsScraper {
  private timer: TimerHandle | null = null;
  private running: Promise<ScrapeOutcome[]> | null = null;
  private stopped = true;
  private unsubscribe: (() => void) | null = null;
  /** Workers whose last scrape failed (warn once per failure streak, info on recovery). */
  private readonly failing = new Set<string>();
  private readonly timeoutMs: number;
  private readonly maxBytes: number;
  private readonly concurrency: number;
  private readonly doFetch: NonNullable<ScraperOptions["fetch"]>;
  private readonly wallNowMs: () => number;

  constructor(private readonly opts: ScraperOptions) {
    this.timeoutMs = opts.timeoutMs ?? Math.min(Math.max(opts.intervalMs, 100), 2000);
    this.maxBytes = opts.maxBytes ?? 4 * 1024 * 1024;
    this.concurrency = Math.max(1, opts.concurrency ?? 8);
    this.doFetch = opts.fetch ?? ((url, init) => fetch(url, init));
    // Wall-clock ms without Date.now (kept to src/core): the time origin plus the monotonic offset.
    this.wallNowMs = opts.wallNowMs ?? (() => Math.round(performance.timeOrigin + performance.now()));
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.unsubscribe = this.opts.registry.onChange((c) => {
      if (c.type === "updated" && c.worker.state !== "ready" && c.previous.state === "ready" && (this.opts.owns?.(c.worker) ?? true)) this.clear(c.worker.id);
      if (c.type === "removed") this.failing.delete(c.worker.id);
    });
    if (this.opts.intervalMs > 0) this.schedule(0);
  }

  /** Stop the loop; resolves once an in-progress round has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    this.timer = null;
    this.unsubscribe?.();
    this.unsubscribe = null;
    await this.running?.catch(() => {});
  }

  /** One round over every ready worker (joins the round in progress, if any). */
  scrapeOnce(): Promise<ScrapeOutcome[]> {
    if (!this.running) {
      this.running = this.round().finally(() => {
        this.running = null;
      });
    }
    return this.running;
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = this.opts.clock.setTimer(delayMs, () => {
      this.timer = null;
      void this.scrapeOnce().finally(() => this.schedule(this.opts.intervalMs));
    });
  }

  private async round(): Promise<ScrapeOutcome[]> {
    const owns = this.opts.owns ?? (() => true);
    const workers = this.opts.registry.list().filter((w) => w.state === "ready" && owns(w));
    const out: ScrapeOutcome[] = [];
    let next = 0;
    const lane = async () => {
      while (next < workers.length) {
        const w = workers[next++]!;
        out.push(await this.scrapeWorker(w));
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, workers.length) }, lane));
    return out;
  }

  private async scrapeWorker(w: Readonly<Worker>): Promise<ScrapeOutcome> {
    try {
      const metrics = driverFor(w.kind).metrics;
      const text = await this.fetchText(`${w.url.replace(/\/+$/, "")}${metrics.path}`);
      const { load, kvBlocks } = metrics.read(text);
      if (!load) throw new Error(`no engine load metrics in ${metrics.path} (metrics disabled?)`);
      // The worker may have left `ready` while we waited; its figures are cleared on that transition.
      if (this.opts.registry.get(w.id)?.state !== "ready") return { worker: w.id, ok: false, load: null, error: "not ready" };
      this.opts.registry.updateLoad(w.id, { ...load, scraped_at_ms: this.wallNowMs() });
      if (kvBlocks !== undefined) this.opts.onKvCapacity?.(w.id, kvBlocks);
      if (this.failing.delete(w.id)) this.opts.log?.info("engine metrics scrape recovered", { worker: w.id });
      return kvBlocks !== undefined ? { worker: w.id, ok: true, load, kvBlocks } : { worker: w.id, ok: true, load };
    } catch (e) {
      const error = errorMessage(e);
      this.clear(w.id);
      if (!this.failing.has(w.id)) {
        this.failing.add(w.id);
        this.opts.log?.warn("engine metrics scrape failed", { worker: w.id, url: w.url, err: error });
      }
      return { worker: w.id, ok: false, load: null, error };
    }
  }

  private clear(id: string): void {
    this.opts.registry.updateLoad(id, { running: null, waiting: null, kv_usage: null });
  }

  private async fetchText(url: string): Promise<string> {
    const ac = new AbortController();
    const t = this.opts.clock.setTimer(this.timeoutMs, () => ac.abort(new Error(`timed out after ${this.timeoutMs} ms`)));
    try {
      const res = await this.doFetch(url, { signal: ac.signal });
      if (!res.ok) {
        await res.body?.cancel().catch(() => {});
        throw new Error(`HTTP ${res.status}`);
      }
      return await readTextLimited(res.body, this.maxBytes, () => new Error(`/metrics body over ${this.maxBytes} bytes`));
    } finally {
      t.cancel();
    }
  }
}
