// TierService: the KV tier as one service of the daemon. start() checks sizing against the host,
// opens the catalog and media (recovering after a crash or reboot), starts the RESP server and the
// shared-directory scans; stop() undoes it. figures() is GET /admin/kv-tier; registerMetrics() puts
// the same figures on the daemon's registry. The integrator mounts both; this folder does no HTTP.
// With `thread` (the daemon: kv_tier.thread worker) all of it runs on its own thread (tier-thread.ts,
// tier-worker.ts: this same class, in-process, inside a Worker) and this object forwards by messages.

import { existsSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Registry } from "prom-client";
import type { Clock, TimerHandle } from "../core/clock.ts";
import { parseHostPort, parseSize } from "../config/checks.ts";
import type { Config } from "../config/types.ts";
import { Catalog } from "./catalog.ts";
import { type KvTierFigures, registerTierMetrics } from "./metrics.ts";
import { type RemoteTierSource, RespServer } from "./resp/server.ts";
import { directRecvLine } from "./resp/direct-recv.ts";
import { SharedDir } from "./shared-dir.ts";
import { hostFacts, type SizingFacts, type SizingRequest, sizingProblems } from "./sizing.ts";
import { KvTier } from "./tier.ts";
import type { TierChange } from "./index-feed.ts";
import type { AdminRoute } from "../http/admin-route.ts";
import type { Logger } from "../core/log.ts";
import type { TierName } from "./medium.ts";
import { type PeerHit, TierThread } from "./tier-thread.ts";
import type { ThreadMemorySource } from "../core/thread-memory.ts";

/** How often shared directories are re-scanned and bounded (engines write between scans). */
export const SHARED_SCAN_INTERVAL_MS = 5000;

export interface TierServiceDeps {
  config: Config;
  clock: Clock;
  /** Host facts for the sizing check; default: measured on this host. */
  facts?: (req: SizingRequest) => SizingFacts;
  /** Boot id; default: /proc/sys/kernel/random/boot_id. */
  bootId?: string;
  /** Tier changes, e.g. tier-key.ts tierIndexFeed(...) to tell the router what the tier holds. */
  onChange?: (c: TierChange) => void;
  /** Where the RESP server looks up local misses (the daemon: other nodes' tiers, src/cluster/peer-tier.ts). */
  remote?: RemoteTierSource;
  /** Run the tier on its own thread (a Bun Worker); default false: on the caller's loop (tests, the worker itself). */
  thread?: boolean;
  /** Inside the tier's thread (tier-worker.ts): never start another. */
  inProcess?: boolean;
  log?: Logger;
}

export class TierService {
  tier: KvTier | undefined;
  resp: RespServer | undefined;
  shared: SharedDir[] = [];
  private catalog: Catalog | undefined;
  private scanTimer: TimerHandle | undefined;
  private lockPath: string | undefined;
  private thread: TierThread | undefined;

  constructor(private readonly deps: TierServiceDeps) {}

  /** The RESP server's bound port (its own thread's, or this loop's), or null. */
  get respPort(): number | null {
    return this.thread ? this.thread.port : (this.resp?.port ?? null);
  }

  /** True when kv_tier configures anything. */
  get enabled(): boolean {
    const t = this.deps.config.kv_tier;
    return t.cpu !== null || t.ssd !== null || t.resp !== null || t.shared_dirs.length > 0;
  }

  /** Throws an Error whose message says what to change when the tier cannot start as configured. */
  async start(): Promise<void> {
    if (!this.enabled) return;
    if (this.deps.thread && !this.deps.inProcess) {
      const d = this.deps;
      this.thread = new TierThread({ config: d.config, clock: d.clock, ...(d.log ? { log: d.log } : {}), ...(d.bootId ? { bootId: d.bootId } : {}), ...(d.onChange ? { onChange: d.onChange } : {}), ...(d.remote ? { remote: d.remote } : {}) });
      try {
        await this.thread.start();
      } catch (e) {
        this.thread = undefined;
        throw e;
      }
      return;
    }
    const { config, clock } = this.deps;
    const t = config.kv_tier;
    const req: SizingRequest = {
      ...(t.cpu ? { cpuBytes: parseSize(t.cpu.size)!, cpuPath: t.cpu.path } : {}),
      ...(t.ssd ? { ssdBytes: parseSize(t.ssd.size)!, ssdPath: t.ssd.path } : {}),
    };
    const problems = sizingProblems(req, (this.deps.facts ?? hostFacts)(req));
    if (problems.length > 0) throw new Error(`kv_tier does not fit this host:\n  ${problems.join("\n  ")}`);
    const stateDir = t.ssd ? t.ssd.path : join(config.node.data_dir, "kv-tier");
    mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    this.lock(join(stateDir, "tier.lock"));
    this.catalog = new Catalog(join(stateDir, "catalog.sqlite"));
    if (t.cpu || t.ssd) {
      this.tier = KvTier.open({
        catalogPath: "",
        catalog: this.catalog,
        ...(t.cpu ? { cpu: { path: t.cpu.path, capacityBytes: req.cpuBytes! } } : {}),
        ...(t.ssd ? { ssd: { path: join(t.ssd.path, "data"), capacityBytes: req.ssdBytes! } } : {}),
        clock,
        bootId: this.deps.bootId ?? readBootId(),
        ...(this.deps.onChange ? { onChange: this.deps.onChange } : {}),
      });
    }
    this.shared = t.shared_dirs.map((d) => new SharedDir(this.catalog!, d.path, parseSize(d.size)!));
    if (this.shared.length > 0) this.scan();
    if (t.resp && this.tier) {
      const hp = parseHostPort(t.resp.listen)!;
      const password = t.resp.password_file ? readFileSync(t.resp.password_file, "utf8").replace(/\r?\n$/, "") : undefined;
      if (password === "") throw new Error(`kv_tier.resp.password_file ${t.resp.password_file} is empty`);
      this.resp = new RespServer({
        host: hp.host,
        port: hp.port,
        store: this.tier,
        clock,
        keyBytesMax: t.resp.key_max_bytes,
        outputTotalBytes: t.resp.output_total_max_bytes,
        idleTimeoutMs: t.resp.idle_timeout_ms,
        authTimeoutMs: t.resp.auth_timeout_ms,
        directRecv: t.resp.direct_recv,
        ...(password ? { password } : {}),
        ...(this.deps.remote && t.resp.peer_fetch_max > 0 ? { remote: this.deps.remote, remoteMax: t.resp.peer_fetch_max } : {}),
      });
      this.deps.log?.info(directRecvLine(this.resp.directOff));
      this.resp.start();
    }
  }

  async stop(): Promise<void> {
    if (this.thread) {
      await this.thread.stop();
      this.thread = undefined;
      return;
    }
    this.scanTimer?.cancel();
    this.scanTimer = undefined;
    this.resp?.stop();
    this.resp = undefined;
    this.tier?.close(); // closes the shared catalog too
    if (!this.tier) this.catalog?.close();
    this.tier = undefined;
    this.catalog = undefined;
    this.shared = [];
    if (this.lockPath && existsSync(this.lockPath)) unlinkSync(this.lockPath);
    this.lockPath = undefined;
  }

  /** An object for another node (the peer API's GET /cluster/v1/tier/<key>): a copy and its CRC-32
   * (the stored one, or computed over the copy for a CPU object: it is about to cross the network), or null. */
  peerGet(key: string): PeerHit | null | Promise<PeerHit | null> {
    if (this.thread) return this.thread.peerGet(key);
    const data = this.tier?.get(key);
    if (!data) return null;
    const copy = data.slice(); // get() may return a view into shared memory, valid until the next call
    return { data: copy, crc32: this.tier!.crcOf(key, copy) };
  }

  /** Store an object fetched from another node unless one was stored here meanwhile (a local SET is
   * newer than a copy fetched from a peer); false when the tier is off or it does not fit. */
  put(key: string, data: Uint8Array): boolean {
    if (this.thread) return this.thread.put(key, data);
    if (!this.tier) return false;
    return this.tier.has(key) || this.tier.put(key, data);
  }

  /** Every object's key and tier (router index replay at start). */
  async entries(): Promise<{ key: string; tier: TierName }[]> {
    if (this.thread) return this.thread.entries();
    return this.tier ? [...this.tier.entries()] : [];
  }

  /** The tier's thread, to ask for its own memory (GET /admin/debug/memory); null when the tier runs on this loop. */
  get threadMemory(): ThreadMemorySource | null {
    return this.thread ?? null;
  }

  /** GET /admin/kv-tier: asks the tier's thread when it has one. */
  async freshFigures(): Promise<KvTierFigures> {
    return (this.thread ? await this.thread.freshFigures() : null) ?? this.figures();
  }

  /** The figures now (from the tier's thread: its last snapshot, at most a second old). */
  figures(): KvTierFigures {
    if (this.thread) return this.thread.figures() ?? { enabled: true, tiers: [], shared_dirs: [], corrupt_reads: 0, recovery: null, resp: null };
    const tiers = [];
    if (this.tier) {
      for (const tier of ["cpu", "ssd"] as const) {
        const m = this.tier.media[tier];
        if (!m) continue;
        const c = this.tier.counters[tier];
        tiers.push({ tier, capacity_bytes: m.capacityBytes, used_bytes: m.usedBytes + this.tier.keyBytes[tier], objects: c.objects, hits: c.hits, misses: c.misses, evictions: c.evictions });
      }
    }
    return {
      enabled: this.enabled,
      tiers,
      shared_dirs: this.shared.map((s) => s.figures()),
      corrupt_reads: this.tier?.corrupt ?? 0,
      recovery: this.tier?.recovery ?? null,
      resp: this.resp ? { ...this.resp.stats, listen: `${this.deps.config.kv_tier.resp!.listen.replace(/:\d+$/, "")}:${this.resp.port}`, direct_recv: this.resp.directOff ?? "on" } : null,
    };
  }

  registerMetrics(registry: Registry): void {
    registerTierMetrics(registry, () => (this.thread ? this.freshFigures() : this.figures()));
  }

  private scan(): void {
    for (const s of this.shared) s.sync();
    this.scanTimer = this.deps.clock.setTimer(SHARED_SCAN_INTERVAL_MS, () => this.scan());
  }

  /** One herd per tier: a second one would corrupt the catalog's view of the shm segments. */
  private lock(path: string): void {
    if (existsSync(path)) {
      const pid = Number(readFileSync(path, "utf8").trim());
      if (pid > 0 && pid !== process.pid && alive(pid)) throw new Error(`kv_tier: ${path} is held by running process ${pid} (another herd uses this tier)`);
    }
    writeFileSync(path, `${process.pid}\n`);
    this.lockPath = path;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function readBootId(): string {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    return "unknown-boot";
  }
}

/** GET /admin/kv-tier: per tier capacity, used, objects, hits, misses, evictions (bytes as integers). */
export function tierAdminRoutes(svc: TierService): AdminRoute[] {
  return [{ method: "GET", path: "/kv-tier", handle: async () => Response.json(await svc.freshFigures()) }];
}
