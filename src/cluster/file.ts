// `file` discovery: heartbeat records and leader terms in one directory (local, or shared by a
// small lab over NFS). Layout under `dir`:
//   nodes/<name>.json   each node's heartbeat record, replaced by atomic rename every heartbeat
//   terms/<N>           created with O_CREAT|O_EXCL by the node that takes term N (content: its name)
//   terms/<N>.beat      the holder's lease heartbeat for term N (only the holder writes it)
// The leader is the holder of the highest term whose beat still advances. A lapsed lease (no beat
// advance for lease_ms on the observer's own clock) is taken over by creating term N+1 exclusively.
//
// SAFETY: this backend is exactly as safe as the filesystem's atomic rename and exclusive create.
// On a local POSIX filesystem both are atomic, so at most one node ever holds a term. On NFS,
// exclusive create is atomic only with NFSv3+ servers honouring O_EXCL (open(2), "O_EXCL");
// on filesystems that do not (some FUSE/SMB mounts) two nodes can take the same term. A stalled
// leader may still act until its next tick sees the newer term: every leader duty must carry the
// term and be refused below the highest term a host has seen (fencing).
//
// Heartbeat and lease-beat files are written asynchronously (latest-writer.ts: a busy disk must not
// stall the event loop), so the holder counts its lease only from writes that have completed: the
// lease runs until `leaseUntil`, the time the newest completed beat was queued (or the term file
// created) plus dead_after_ms less a margin. An observer times a lapse from when it first sees a
// beat, which is after that beat was queued, so it cannot take over before the holder has stopped
// counting itself leader; a lease that ran out is given up (a new term is needed to lead again).
// Creating the term file stays synchronous: it is the one-leader-per-term primitive.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { DEFAULT_TIMING, Emitter, sameView, type ClusterEvent, type DiscoveryBackend, type HeartbeatTiming, type LeaderView, type Member, type NodeMeta, type SelfInfo } from "./backend.ts";
import { createExclusive, readJson } from "./durable.ts";
import { type AsyncDurableFs, LatestWriter, nodeAsyncFs, type WriteResult } from "./latest-writer.ts";
import { LivenessTable, type HeartbeatRecord } from "./liveness.ts";

export interface FileBackendOptions {
  dir: string;
  clock: Clock;
  log: Logger;
  /** Persisted restart counter of this node (see state.ts). */
  incarnation: number;
  timing?: HeartbeatTiming;
  /** The async fs calls of the heartbeat writes (default node:fs/promises; a test holds writes). */
  fs?: AsyncDurableFs;
}

interface TermBeat {
  name: string;
  beat: number;
  resigned?: boolean;
}

/** leader() looks for a newer term at most this often (see there). */
const TERM_CHECK_MS = 20;

/** How many old term files the leader keeps (history for debugging; the rest are removed). */
const TERMS_KEPT = 16;
/** At most one log line per this many ms about failed heartbeat writes (with the count since the last). */
const WRITE_ERROR_LOG_MS = 30_000;

export class FileBackend implements DiscoveryBackend {
  readonly kind = "file";
  private readonly timing: HeartbeatTiming;
  private readonly table: LivenessTable;
  private readonly events = new Emitter();
  private self!: HeartbeatRecord;
  private timer: TimerHandle | null = null;
  private campaigning = false;
  private held: number | null = null; // term this node holds
  private heldBeat = 0;
  private view: LeaderView = { leader: null, term: 0, self: false };
  private watched = { term: -1, beat: "", advancedAt: 0 };
  private membersKey = "";
  private closed = false;
  private readonly fs: AsyncDurableFs;
  private nodeWriter: LatestWriter | null = null;
  private beatWriter: LatestWriter | null = null;
  /** While `held`: the clock time until which completed writes back the lease (see the header). */
  private leaseUntil = 0;
  /** How long a completed beat backs the lease: dead_after_ms less a margin for the observers' read-to-clock gap and clock rates. */
  private readonly leaseMs: number;
  private errors = { total: 0, sinceLog: 0, loggedAt: -Infinity };
  private termCheckedAtMs = -Infinity;

  constructor(private readonly o: FileBackendOptions) {
    this.timing = o.timing ?? DEFAULT_TIMING;
    this.table = new LivenessTable(o.clock, this.timing.dead_after_ms);
    this.fs = o.fs ?? nodeAsyncFs;
    this.leaseMs = this.timing.dead_after_ms - Math.min(this.timing.heartbeat_ms, this.timing.dead_after_ms / 2);
  }

  /** Heartbeat and lease-beat writes that failed since start. */
  get writeErrors(): number {
    return this.errors.total;
  }

  async start(self: SelfInfo): Promise<void> {
    mkdirSync(join(this.o.dir, "nodes"), { recursive: true });
    mkdirSync(join(this.o.dir, "terms"), { recursive: true });
    this.self = { ...self, incarnation: this.o.incarnation, beat: 0 };
    this.nodeWriter = new LatestWriter(this.nodePath(self.name), this.fs, this.onWriteError);
    this.tick();
  }

  setMeta(meta: NodeMeta): void {
    this.self = { ...this.self, meta };
  }

  members(): Member[] {
    return this.table.members();
  }

  watch(fn: (e: ClusterEvent) => void): () => void {
    return this.events.on(fn);
  }

  campaign(): void {
    this.campaigning = true;
    // Started: try for the lease now rather than one heartbeat later (a lone node leads at once).
    if (this.timer === null || this.closed) return;
    try {
      this.lead();
    } catch (e) {
      this.o.log.warn("file discovery campaign failed", { dir: this.o.dir, error: String(e) });
    }
  }

  async resign(): Promise<void> {
    this.campaigning = false;
    if (this.held === null) return;
    const term = this.held;
    this.held = null;
    this.setView({ leader: null, term, self: false });
    // The resigned mark hands the lease over at once; if it cannot be written in time the lease
    // lapses by itself after dead_after_ms.
    const written = await this.bounded(new Promise<WriteResult>((ok) => this.beatWriterFor(term).write(JSON.stringify({ name: this.self.name, beat: ++this.heldBeat, resigned: true }), ok)));
    if (written !== "written") this.o.log.warn("could not mark the lease resigned; it lapses by itself", { term, result: written ?? "timed out" });
  }

  leader(): LeaderView {
    // A takeover creates term held+1; one stat tells a resumed (paused) leader before its next tick.
    // At most once per TERM_CHECK_MS: the router asks on every request (ClusterService.stale), and
    // the stat was ~3 % of herd's samples under bench/frontend-overhead.ts. A pause long enough to
    // lose the lease (dead_after_ms, seconds) moves the monotonic clock past the interval, so the
    // first call after any such pause still stats.
    if (this.held !== null) {
      const now = this.o.clock.now();
      if (now - this.termCheckedAtMs >= TERM_CHECK_MS) {
        this.termCheckedAtMs = now;
        if (existsSync(this.termPath(this.held + 1))) this.stepDown(`term ${this.held + 1} exists`);
      }
    }
    this.checkLease();
    return { ...this.view };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.timer?.cancel();
    await this.resign();
    // A heartbeat renamed after the removal would bring the record back.
    if (this.nodeWriter !== null) await this.bounded(this.nodeWriter.idle());
    rmSync(this.nodePath(this.self.name), { force: true });
  }

  /** `p`, or undefined after dead_after_ms (a stalled disk must not hold a shutdown forever). */
  private bounded<T>(p: Promise<T>): Promise<T | undefined> {
    return new Promise((ok) => {
      const t = this.o.clock.setTimer(this.timing.dead_after_ms, () => ok(undefined));
      void p.then((v) => {
        t.cancel();
        ok(v);
      });
    });
  }

  private nodePath = (name: string) => join(this.o.dir, "nodes", `${encodeURIComponent(name)}.json`);
  private termPath = (n: number) => join(this.o.dir, "terms", String(n));
  private beatPath = (n: number) => join(this.o.dir, "terms", `${n}.beat`);

  private tick(): void {
    if (this.closed) return;
    try {
      this.heartbeat();
      this.readMembers();
      this.lead();
    } catch (e) {
      this.o.log.warn("file discovery tick failed", { dir: this.o.dir, error: String(e) });
      if (this.held !== null) this.stepDown("cannot reach the cluster directory");
    }
    this.timer = this.o.clock.setTimer(this.timing.heartbeat_ms, () => this.tick());
  }

  private heartbeat(): void {
    this.self = { ...this.self, beat: this.self.beat + 1 };
    this.nodeWriter!.write(JSON.stringify(this.self));
    // This node is a member of its own view from its first beat, not from when the write lands.
    this.table.observe(this.self);
  }

  private beatWriterFor(term: number): LatestWriter {
    const path = this.beatPath(term);
    if (this.beatWriter?.path !== path) this.beatWriter = new LatestWriter(path, this.fs, this.onWriteError);
    return this.beatWriter;
  }

  /** Queue a lease beat of the held `term`; once it is written, the lease runs leaseMs from now. */
  private writeBeat(term: number, beat: number): void {
    const queuedAt = this.o.clock.now();
    this.beatWriterFor(term).write(JSON.stringify({ name: this.self.name, beat }), (r) => {
      if (this.held !== term) return; // stepped down meanwhile: a late beat backs nothing
      if (r === "written") this.leaseUntil = Math.max(this.leaseUntil, queuedAt + this.leaseMs);
      else if (r === "failed") this.stepDown("cannot write the lease beat");
    });
  }

  /** Give up a lease no completed write backs any more. */
  private checkLease(): void {
    if (this.held !== null && this.o.clock.now() > this.leaseUntil) this.stepDown(`no lease beat written for ${this.leaseMs} ms`);
  }

  private readonly onWriteError = (e: unknown, path: string): void => {
    this.errors.total++;
    this.errors.sinceLog++;
    const now = this.o.clock.now();
    if (now - this.errors.loggedAt < WRITE_ERROR_LOG_MS) return;
    this.o.log.warn("file discovery: heartbeat writes failing", { dir: this.o.dir, path, error: String(e), failed: this.errors.sinceLog, failed_total: this.errors.total });
    this.errors.loggedAt = now;
    this.errors.sinceLog = 0;
  };

  private readMembers(): void {
    const seen = new Set<string>([this.self.name]);
    for (const f of readdirSync(join(this.o.dir, "nodes"))) {
      if (!f.endsWith(".json") || f.startsWith(".")) continue;
      const rec = readJson<HeartbeatRecord>(join(this.o.dir, "nodes", f));
      if (!rec || typeof rec.name !== "string") continue;
      seen.add(rec.name);
      this.table.observe(rec);
    }
    for (const m of this.table.members()) if (!seen.has(m.name)) this.table.drop(m.name); // file removed: left
    this.table.sweep(this.self.name);
    const key = this.table.key();
    if (key !== this.membersKey) {
      this.membersKey = key;
      this.events.emit({ kind: "members", members: this.table.members() });
    }
  }

  private latestTerm(): { term: number; holder: string | null } {
    let term = 0;
    for (const f of readdirSync(join(this.o.dir, "terms"))) if (/^\d+$/.test(f)) term = Math.max(term, Number(f));
    if (term === 0) return { term: 0, holder: null };
    let holder: string | null = null;
    try {
      holder = readFileSync(this.termPath(term), "utf8").trim() || null;
    } catch {
      holder = null;
    }
    return { term, holder };
  }

  private lead(): void {
    const { term, holder } = this.latestTerm();
    if (this.held !== null) {
      if (term !== this.held) return this.stepDown(`term ${term} was taken by ${holder}`);
      this.checkLease();
      if (this.held === null) return;
      this.writeBeat(term, ++this.heldBeat);
      this.setView({ leader: this.self.name, term, self: true });
      this.prune(term);
      return;
    }
    const lapsed = this.lapsed(term, holder);
    if (!lapsed && holder !== null) this.setView({ leader: holder, term, self: false });
    else this.setView({ leader: null, term, self: false });
    if (this.campaigning && lapsed) this.take(term + 1);
  }

  /** The holder of `term` stopped beating for lease_ms (observer's clock), resigned, or is this node's previous life. */
  private lapsed(term: number, holder: string | null): boolean {
    if (term === 0 || holder === null) return true;
    if (holder === this.self.name) return true; // our own earlier incarnation: it is not running
    const b = readJson<TermBeat>(this.beatPath(term));
    if (b?.resigned) return true;
    const now = this.o.clock.now();
    const beat = b ? String(b.beat) : "";
    if (this.watched.term !== term || this.watched.beat !== beat) this.watched = { term, beat, advancedAt: now };
    return now - this.watched.advancedAt > this.timing.dead_after_ms;
  }

  private take(term: number): void {
    const startedAt = this.o.clock.now();
    if (!createExclusive(this.termPath(term), this.self.name)) return; // another node won this term
    this.held = term;
    this.heldBeat = 0;
    // The term file is a completed write: observers time the new term from when they first see it.
    this.leaseUntil = startedAt + this.leaseMs;
    this.writeBeat(term, 0);
    this.o.log.info("leader", { term });
    this.setView({ leader: this.self.name, term, self: true });
  }

  private stepDown(why: string): void {
    this.o.log.warn("stepping down", { term: this.held, why });
    this.held = null;
    this.setView({ ...this.view, leader: null, self: false });
  }

  private prune(term: number): void {
    if (term % TERMS_KEPT !== 0) return;
    for (const f of readdirSync(join(this.o.dir, "terms"))) {
      const n = Number(f.replace(/\.beat$/, ""));
      if (Number.isInteger(n) && n < term - TERMS_KEPT) rmSync(join(this.o.dir, "terms", f), { force: true });
    }
  }

  private setView(v: LeaderView): void {
    if (sameView(v, this.view)) return;
    this.view = v;
    this.events.emit({ kind: "leader", view: { ...v } });
  }
}
