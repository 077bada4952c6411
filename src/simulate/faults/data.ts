// The data plane of the fault simulation: engines (the sim engine's own scheduler, one process per
// life), the REAL worker registry and router (`kv` policy, retry budget, outlier ejection), the REAL
// KV ingest (src/kv KvConsumer → KvEventStream → BlockIndex) fed by kv-link.ts, and the host's KV
// tier as the simulator models it (../virtual-tier.ts) with a "disk full" switch. Engine faults: a
// kill aborts every leg on it (streams break mid-way, or fail before their first token and retry),
// calls to it are refused until the supervisor notices (`detectMs`: the registry says failed, the
// consumer drops its blocks), a restart brings a fresh process (empty cache, sequence from 0).
//
// The truth the invariants compare against: a second BlockIndex fed from every engine's events at
// once, never dropped (what the engines really hold), and every hash any engine ever stored.
import type { VirtualClock } from "../../core/clock.ts";
import type { Rng } from "../../core/rng.ts";
import type { Role, RouterConfig } from "../../config/types.ts";
import { WorkerRegistry } from "../../workers/registry.ts";
import { emptyLoad, type Worker } from "../../workers/worker.ts";
import { SimScheduler } from "../../engine/sim/scheduler.ts";
import type { KvEvent as SimKvEvent } from "../../engine/sim/blocks.ts";
import { DEFAULT_COST } from "../../engine/sim/cost.ts";
import { Router } from "../../router/router.ts";
import { BlockIndex } from "../../kv/block-index.ts";
import type { KvIndex } from "../../kv/indexer.ts";
import { KvConsumer } from "../../kv/consumer.ts";
import { WorkerBlockMap } from "../../kv/worker-blocks.ts";
import type { Upstream } from "../../request/upstream.ts";
import { sendHangable } from "./hang.ts";
import { VirtualPd, type PdChunk } from "../pd-upstream.ts";
import { toWireEvent } from "../kv.ts";
import { VirtualTier } from "../virtual-tier.ts";
import { VirtualKvLink, type KvLinkCounters, type KvLinkFaults } from "./kv-link.ts";
import type { EventLog } from "./event-log.ts";
import { QUIET } from "../quiet.ts";

export const MODEL = "m";
export const BLOCK_SIZE = 16;

export interface DataBugs {
  /** The router's index ignores a worker clear (the resync / restart clear is skipped). */
  skipResyncClear?: boolean;
}

export interface DataOptions {
  engines: number;
  kvBlocks: number;
  /** Ring of the engines' replay sockets, in batches (small: replays run out and resync). */
  replayBufferSteps: number;
  detectMs: number;
  startMs: number;
  /** frontend.engine_first_byte_timeout_ms: a stream's answer head must come within this. */
  headTimeoutMs: number;
  tierBlocks: number;
  /** Each engine's role (P/D: prefill and decode pools); absent = all aggregated. */
  roles?: readonly Role[];
  router: RouterConfig;
  bugs: DataBugs;
}

interface EngineProc {
  sched: SimScheduler;
  link: VirtualKvLink;
  truthMap: WorkerBlockMap;
  legs: Set<string>;
  alive: boolean;
  /** Hung (pause_engine): replies and chunks wait in `held`. */
  paused: boolean;
  held: (() => void)[];
}

export interface EngineSlot {
  id: string;
  proc: EngineProc | null;
  restarts: number;
  /** Incarnation counter across kills (batch timestamps grow with it). */
  lives: number;
}

export class DataPlane {
  readonly registry = new WorkerRegistry();
  readonly router: Router;
  readonly consumer: KvConsumer;
  /** What the router reads (possibly wrapped by a deliberate bug). */
  readonly index: KvIndex;
  readonly truth = new BlockIndex();
  /** Every herd hash each worker ever stored (the candidates of the stale-credit check). */
  readonly seen = new Map<string, Set<bigint>>();
  readonly slots: EngineSlot[] = [];
  readonly kvFaults: KvLinkFaults = { dropShare: 0, replayDown: false, extraDelayMs: 0 };
  readonly kvCounters: KvLinkCounters = { published: 0, dropped: 0, replays: 0 };
  readonly tier: VirtualTier;
  /** Shadow of the tier's contents (from its change feed) and loads checked against it. */
  readonly tierHeld = new Set<bigint>();
  tierFull = false;
  tierWrongLoads = 0;
  readonly upstream: Upstream<PdChunk>;
  /** The P/D legs' upstream (aggregated legs pass through it unchanged). */
  readonly pd: VirtualPd;

  constructor(
    private readonly clock: VirtualClock,
    private readonly rng: Rng,
    private readonly o: DataOptions,
    private readonly log: EventLog,
  ) {
    const base = new BlockIndex();
    this.index = o.bugs.skipResyncClear ? ignoreClears(base) : base;
    this.consumer = new KvConsumer({ clock, log: QUIET, index: this.index, connect: (spec) => this.connect(spec.id) });
    this.router = new Router({ config: { ...o.router, policy: "kv" }, registry: this.registry, clock, rng: rng.fork(), kvIndex: this.index, log: QUIET });
    this.tier = new VirtualTier({ capacityBlocks: o.tierBlocks, bytesPerBlock: 1 << 20, loadGbPerS: 10, timeScale: 1 }, clock, (kind, h) => {
      if (kind === "stored") this.tierHeld.add(h);
      else this.tierHeld.delete(h);
    });
    // VirtualPd answers aggregated legs as SimUpstream does and P/D legs as NixlConnector engines.
    const sim = (this.pd = new VirtualPd({
      clock, blockSize: BLOCK_SIZE, kvBytesPerToken: 144 * 1024, linkBytesPerS: 25e9, transferMs: 2,
      scheduler: (id) => this.slot(id).proc!.sched,
    }));
    this.upstream = {
      format: sim.format,
      send: (leg, signal, reply) => {
        const p = this.slot(leg.workerId).proc;
        if (p === null || !p.alive) return reply({ error: new Error("connect ECONNREFUSED"), kind: "connect" });
        p.legs.add(leg.id);
        sendHangable(p, this.clock, this.o.headTimeoutMs, sim, leg, signal, reply);
      },
    };
    for (let i = 0; i < o.engines; i++) {
      const id = `e${i}`;
      this.slots.push({ id, proc: null, restarts: 0, lives: 0 });
      this.seen.set(id, new Set());
      this.registry.upsert(this.worker(id, "starting", 0));
      this.spawn(this.slots[i]!);
      this.consumer.add({ id, model: MODEL, blockSize: BLOCK_SIZE, endpoint: `sim://${id}`, replayEndpoint: `sim://${id}/replay`, topic: "" });
      this.setState(this.slots[i]!, "ready");
    }
  }

  slot(id: string): EngineSlot {
    return this.slots.find((s) => s.id === id)!;
  }

  private worker(id: string, state: Worker["state"], restarts: number): Worker {
    const role = this.o.roles?.[Number(id.slice(1))] ?? "aggregated";
    return { id, node: "n", model: MODEL, role, kind: "sim", url: `sim://${id}`, state, load: emptyLoad(), restarts };
  }

  private setState(s: EngineSlot, state: Worker["state"]): void {
    this.registry.setState(s.id, state);
    this.consumer.observe(this.registry.get(s.id)!);
  }

  private connect(id: string) {
    const p = this.slot(id).proc;
    // A consumer attaching while no process runs subscribes to nothing until the next one starts.
    if (p === null) return { source: { start() {}, close() {} }, replayer: null };
    return { source: p.link.source(), replayer: p.link.replayer() };
  }

  private spawn(s: EngineSlot): void {
    s.lives++;
    const link = new VirtualKvLink(this.clock, this.rng.fork(), this.kvFaults, this.kvCounters, this.o.replayBufferSteps, s.lives * 1e6);
    const seen = this.seen.get(s.id)!;
    const truthIndex: KvIndex = {
      apply: (w, ev, unchanged) => {
        if (ev.kind === "stored") for (const h of ev.hashes) seen.add(h);
        this.truth.apply(w, ev, unchanged);
      },
      clearWorker: (w) => this.truth.clearWorker(w),
      removeWorker: (w) => this.truth.removeWorker(w),
      findMatches: (h) => this.truth.findMatches(h),
      holds: (w, h, m) => this.truth.holds(w, h, m),
      size: () => this.truth.size(),
      stats: () => this.truth.stats(),
    };
    const truthMap = new WorkerBlockMap(s.id, truthIndex, { blockSize: BLOCK_SIZE });
    const proc: EngineProc = { sched: null as unknown as SimScheduler, link, truthMap, legs: new Set(), alive: true, paused: false, held: [] };
    const onEvents = (events: SimKvEvent[]) => {
      if (!proc.alive) return;
      for (const e of events) truthMap.apply(toWireEvent(e));
      link.publish(events);
    };
    proc.sched = new SimScheduler(
      { blockSize: BLOCK_SIZE, numBlocks: this.o.kvBlocks, maxNumSeqs: 16, maxNumBatchedTokens: 2048, maxWaiting: 32, maxModelLen: this.o.kvBlocks * BLOCK_SIZE, cost: DEFAULT_COST, timeScale: 1, hashSeed: BigInt(s.lives * 131 + Number(s.id.slice(1))) },
      this.clock,
      onEvents,
    );
    proc.sched.attachOffload(this.offload());
    s.proc = proc;
  }

  /** The tier as one engine sees it: refuses stores while the disk is full; loads checked against the shadow. */
  private offload() {
    const inner = this.tier.engine();
    return {
      offloadEvicted: (engineHash: bigint, herdHash: bigint) => {
        if (!this.tierFull) inner.offloadEvicted(engineHash, herdHash);
      },
      lookup: (herd: readonly bigint[], from: number, done: (n: number) => void) => {
        const held = herd.slice(from).map((h) => this.tierHeld.has(h));
        inner.lookup(herd, from, (n) => {
          for (let i = 0; i < n; i++) if (!held[i]) this.tierWrongLoads++;
          done(n);
        });
      },
    };
  }

  isUp(id: string): boolean {
    return this.slot(id).proc?.alive === true;
  }

  /** The engine hangs (a stuck kernel, a wedged process): it answers nothing until resumed. */
  pause(id: string, on: boolean): void {
    const p = this.slot(id).proc;
    if (!p || !p.alive) return;
    p.paused = on;
    if (!on) this.flush(p);
  }

  private flush(p: EngineProc): void {
    const held = p.held;
    p.held = [];
    for (const fn of held) fn();
  }

  /** The engine process dies: its legs end, calls are refused; the supervisor notices after detectMs. */
  kill(id: string): void {
    const s = this.slot(id);
    const p = s.proc;
    if (!p || !p.alive) return;
    p.alive = false;
    p.link.alive = false;
    // Its connections reset: whatever a hung engine held reaches its readers now.
    p.paused = false;
    this.flush(p);
    this.truth.removeWorker(id);
    for (const leg of [...p.legs]) p.sched.abort(leg);
    this.clock.setTimer(this.o.detectMs, () => {
      if (s.proc !== p) return;
      this.setState(s, "failed");
      this.log.add(`supervisor: ${id} failed`);
    });
  }

  /** The supervisor restarts a dead engine: a fresh process, ready after startMs. */
  restart(id: string): void {
    const s = this.slot(id);
    if (s.proc?.alive) return;
    s.restarts++;
    this.spawn(s);
    this.registry.upsert({ ...this.worker(id, "starting", s.restarts) });
    this.consumer.observe(this.registry.get(id)!);
    const p = s.proc;
    this.clock.setTimer(this.o.startMs, () => {
      if (s.proc !== p || !p!.alive) return;
      this.setState(s, "ready");
      this.log.add(`supervisor: ${id} ready (restart ${s.restarts})`);
    });
  }

  /** The stream of a worker caught up with its live engine: nothing lost in flight, no gap open. */
  caughtUp(id: string): boolean {
    const p = this.slot(id).proc;
    if (!p || !p.alive) return false;
    const st = this.consumer.ingest.stream(id)?.status();
    if (!st) return false;
    const last = p.link.lastSeq;
    return st.lastSeq === (last >= 0n ? last.toString() : null) && st.pendingBatches === 0 && !st.replayInFlight;
  }
}

/** The deliberate bug: clears (resync, restart, AllBlocksCleared) never reach the index. */
function ignoreClears(inner: BlockIndex): KvIndex {
  return {
    apply: (w, ev, unchanged) => (ev.kind === "cleared" ? undefined : inner.apply(w, ev, unchanged)),
    clearWorker: () => {},
    removeWorker: (w) => inner.removeWorker(w),
    findMatches: (h) => inner.findMatches(h),
    holds: (w, h, m) => inner.holds(w, h, m),
    size: () => inner.size(),
    stats: () => inner.stats(),
  };
}
