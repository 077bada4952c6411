// On-demand LoRA adapters (models[].lora_adapters[].on_demand): an adapter a request names is loaded
// on an engine at run time, where it is needed, and unloaded when idle. The engines' runtime API:
// vLLM's POST /v1/load_lora_adapter {lora_name, lora_path} and /v1/unload_lora_adapter {lora_name}
// (docs/features/lora.md "Dynamically serving LoRA Adapters", VLLM_ALLOW_RUNTIME_LORA_UPDATING), which
// the sim engine serves alike. Other engine kinds get every adapter at start (their drivers).
//
// Placement (frontend.lora): a request goes to the least busy engine already holding its adapter;
// when every holder has `spread_in_flight` requests in flight (or none holds it), the adapter is also
// loaded on the least busy engine without it that has room (`max_per_engine`; a full engine drops
// its least recently used idle adapter first), so a popular adapter spreads instead of piling onto
// one engine. The request is then pinned to that engine. An engine that restarts forgets its
// adapters (they are loaded again on demand); one unused for `idle_ms` is unloaded.
import type { Clock, TimerHandle } from "../core/clock.ts";
import { every } from "../core/clock.ts";
import { HerdError, errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Config, EngineKind } from "../config/types.ts";
import type { WorkerRegistry } from "../workers/registry.ts";

/** Engine kinds with the runtime LoRA API. */
export const RUNTIME_LORA_KINDS: ReadonlySet<EngineKind> = new Set<EngineKind>(["vllm", "sim"]);

type FetchFn = (url: string, init: RequestInit) => Promise<Response>;

interface Held {
  /** Resolves when the engine has it (a load in progress is shared). */
  ready: Promise<void>;
  inFlight: number;
  lastUsedMs: number;
}

export class OnDemandLora {
  /** worker id → adapter name → state. */
  private readonly held = new Map<string, Map<string, Held>>();
  /** Started with the first on-demand request (a node without such adapters runs no timer). */
  private sweeper: TimerHandle | null = null;
  private readonly unwatch: () => void;

  constructor(
    private readonly o: { registry: WorkerRegistry; clock: Clock; log: Logger; config: () => Config; fetch?: FetchFn },
  ) {
    // A worker that stops serving (restart, crash, removal) has lost what it loaded.
    this.unwatch = o.registry.onChange((ch) => {
      if (ch.type === "removed" || (ch.type === "updated" && ch.worker.state !== "ready" && ch.worker.state !== "draining")) this.held.delete(ch.worker.id);
    });
  }

  close(): void {
    this.sweeper?.cancel();
    this.unwatch();
  }

  /** Adapters loaded per worker (admin, tests). */
  loaded(): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    for (const [w, m] of this.held) out[w] = [...m.keys()].sort();
    return out;
  }

  private post(url: string, body: unknown): Promise<Response> {
    const f = this.o.fetch ?? ((u, i) => fetch(u, i));
    return f(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  }

  /**
   * The worker a request for on-demand `adapter` of `model` goes to, once the adapter is loaded
   * there; and the release to call when the request is over. 503 when no engine can take it.
   */
  async place(model: string, adapter: string, path: string): Promise<{ workerId: string; release: () => void }> {
    const cfg = this.o.config().frontend.lora;
    const { registry } = this.o;
    this.sweeper ??= every(this.o.clock, 1000, () => this.sweep());
    const workers = registry.list().filter((w) => w.model === model && w.state === "ready" && !registry.isCordoned(w.id) && RUNTIME_LORA_KINDS.has(w.kind));
    if (workers.length === 0) throw new HerdError(503, "service_unavailable", `no engine of ${model} can load LoRA adapters at run time`, "no_worker_available", null, { "retry-after": "1" });
    const busy = (id: string) => registry.inFlightOf(id);
    const holders = workers.filter((w) => this.held.get(w.id)?.has(adapter)).sort((a, b) => busy(a.id) - busy(b.id));
    let target = holders[0];
    if (!target || busy(target.id) >= cfg.spread_in_flight) {
      const room = workers
        .filter((w) => !this.held.get(w.id)?.has(adapter) && this.hasRoom(w.id, cfg.max_per_engine))
        .sort((a, b) => busy(a.id) - busy(b.id))[0];
      if (room && (!target || busy(room.id) < busy(target.id))) target = room;
    }
    if (!target) throw new HerdError(503, "service_unavailable", `every engine of ${model} holds ${cfg.max_per_engine} busy LoRA adapters`, "lora_no_room", null, { "retry-after": "1" });
    const h = this.ensure(target.id, target.url, adapter, path, cfg.max_per_engine);
    h.inFlight++;
    h.lastUsedMs = this.o.clock.now();
    try {
      await h.ready;
    } catch (e) {
      h.inFlight--;
      throw e;
    }
    let done = false;
    return {
      workerId: target.id,
      release: () => {
        if (done) return;
        done = true;
        h.inFlight--;
        h.lastUsedMs = this.o.clock.now();
      },
    };
  }

  /** Room on a worker: fewer than max adapters, or an idle one it can give up. */
  private hasRoom(workerId: string, max: number): boolean {
    const m = this.held.get(workerId);
    if (!m || m.size < max) return true;
    for (const h of m.values()) if (h.inFlight === 0) return true;
    return false;
  }

  private ensure(workerId: string, url: string, adapter: string, path: string, max: number): Held {
    let m = this.held.get(workerId);
    if (!m) this.held.set(workerId, (m = new Map()));
    const have = m.get(adapter);
    if (have) return have;
    if (m.size >= max) {
      // Evict the least recently used idle adapter to make room.
      let lru: [string, Held] | null = null;
      for (const e of m) if (e[1].inFlight === 0 && (lru === null || e[1].lastUsedMs < lru[1].lastUsedMs)) lru = e;
      if (lru) this.unload(workerId, url, lru[0]);
    }
    const h: Held = { ready: this.load(workerId, url, adapter, path), inFlight: 0, lastUsedMs: this.o.clock.now() };
    m.set(adapter, h);
    h.ready.catch(() => {
      if (this.held.get(workerId)?.get(adapter) === h) this.held.get(workerId)!.delete(adapter);
    });
    return h;
  }

  private async load(workerId: string, url: string, adapter: string, path: string): Promise<void> {
    let res: Response;
    try {
      res = await this.post(`${url}/v1/load_lora_adapter`, { lora_name: adapter, lora_path: path });
    } catch (e) {
      this.o.log.warn("LoRA adapter load failed", { worker: workerId, adapter, err: errorMessage(e) });
      throw new HerdError(503, "service_unavailable", `could not load LoRA adapter ${adapter} on ${workerId}`, "lora_load_failed", null, { "retry-after": "1" });
    }
    const text = await res.text();
    // 400 "has already been loaded": the engine kept it from before (herd restarted); it is there.
    if (res.status === 200 || (res.status === 400 && text.includes("already been loaded"))) {
      this.o.log.info("LoRA adapter loaded", { worker: workerId, adapter });
      return;
    }
    this.o.log.warn("LoRA adapter load refused", { worker: workerId, adapter, status: res.status, err: text.slice(0, 200) });
    throw new HerdError(503, "service_unavailable", `engine ${workerId} refused to load LoRA adapter ${adapter} (HTTP ${res.status})`, "lora_load_failed", null, { "retry-after": "1" });
  }

  private unload(workerId: string, url: string, adapter: string): void {
    this.held.get(workerId)?.delete(adapter);
    this.post(`${url}/v1/unload_lora_adapter`, { lora_name: adapter }).then(
      async (r) => {
        await r.text();
        this.o.log.info("LoRA adapter unloaded", { worker: workerId, adapter, status: r.status });
      },
      (e: unknown) => this.o.log.warn("LoRA adapter unload failed", { worker: workerId, adapter, err: errorMessage(e) }),
    );
  }

  /** Unload adapters idle for frontend.lora.idle_ms. */
  sweep(): void {
    const idle = this.o.config().frontend.lora.idle_ms;
    const now = this.o.clock.now();
    for (const [w, m] of this.held) {
      const url = this.o.registry.get(w)?.url;
      if (!url) continue;
      for (const [a, h] of [...m]) if (h.inFlight === 0 && now - h.lastUsedMs >= idle) this.unload(w, url, a);
    }
  }
}
