// `peers` discovery: seed addresses, membership gossip and Raft-style election over the
// authenticated peer API (routes.ts). Membership: every heartbeat each node bumps its own counter
// and pushes its live table to every known member and seed, merging the reply (push/pull); a member
// whose counter stops advancing for dead_after_ms (observer's clock) leaves the view. Joining means
// reaching any one seed. Election: election.ts (voters = the seeds; non-voters follow only).
//
// Who may say what (issue 22, rows 3–4; SWIM's rule that only a member refutes or raises its own
// incarnation, Das et al. 2002 §4.2, as hashicorp/memberlist state.go applies it): a record is taken
// at full value only from the member itself — the reply of the address we dialed. A push whose
// `from` is the record's name, sent from the record's own host, may also announce its leave (the
// farewell in close()). Everything else is relayed hearsay: it may advance a live member's beat by a
// bounded step at the same address and incarnation, but it never admits a member, moves an address,
// raises an incarnation or announces a leave. Such a record only makes its address a candidate that
// the next round dials; the member answers for itself. So a genuine new node is in every view within
// about two heartbeats, and one message of 2000 invented names costs at most CANDIDATES_PER_MESSAGE
// dials instead of filling the member table.
import { createHash } from "node:crypto";
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Rng } from "../core/rng.ts";
import { DEFAULT_TIMING, Emitter, sameView, type ClusterEvent, type DiscoveryBackend, type HeartbeatTiming, type LeaderView, type Member, type NodeMeta, type SelfInfo } from "./backend.ts";
import { DEFAULT_ELECTION, Election, TERM_MAX, isTerm, type BeatReply, type BeatRequest, type ElectionTiming, type VoteReply, type VoteRequest } from "./election.ts";
import { LivenessTable, MEMBERS_MAX, type HeartbeatRecord } from "./liveness.ts";
import type { StateStore } from "./state.ts";
import { LogLimiter } from "../http/log-limit.ts";
import { hostOf } from "./auth.ts";

/** How peers reach each other: POST JSON to another node's peer API (authenticated by the caller). */
export interface PeerClient {
  post<T>(address: string, path: string, body: unknown, timeoutMs: number): Promise<T>;
}

export interface GossipMessage {
  /** The sender's name: its own record in `members` is the one it speaks for. */
  from?: string;
  members: HeartbeatRecord[];
}

/** Addresses learned from hearsay, dialed on the next round (then forgotten). */
export const CANDIDATES_MAX = 64;
export const CANDIDATES_PER_MESSAGE = 16;

/** Who a message comes from: the address we dialed (a reply) or the caller's IP (a push). */
export type Speaker = { dialed: string } | { ip: string | null };

const bareIp = (ip: string) => (ip.startsWith("::ffff:") ? ip.slice(7) : ip);

export interface PeersBackendOptions {
  seeds: string[];
  store: StateStore;
  client: PeerClient;
  clock: Clock;
  rng: Rng;
  log: Logger;
  timing?: HeartbeatTiming;
  election?: ElectionTiming;
}


const outOfRange = (t: unknown) => typeof t === "number" && t > TERM_MAX;

export const votersHash = (seeds: readonly string[]) =>
  createHash("sha256").update([...seeds].sort().join("\n")).digest("hex").slice(0, 16);

export class PeersBackend implements DiscoveryBackend {
  readonly kind = "peers";
  private readonly timing: HeartbeatTiming;
  private readonly table: LivenessTable;
  private readonly events = new Emitter();
  private readonly voters: string[];
  private self!: HeartbeatRecord;
  private election!: Election;
  private timer: TimerHandle | null = null;
  private inFlight = new Set<string>();
  private readonly candidates = new Set<string>();
  private membersKey = "";
  private view: LeaderView = { leader: null, term: 0, self: false };
  private closed = false;
  private readonly refusedLog: LogLimiter;

  constructor(private readonly o: PeersBackendOptions) {
    this.timing = o.timing ?? DEFAULT_TIMING;
    this.table = new LivenessTable(o.clock, this.timing.dead_after_ms);
    this.voters = [...new Set(o.seeds)].sort();
    this.refusedLog = new LogLimiter(o.clock, 10_000);
  }

  async start(self: SelfInfo): Promise<void> {
    const isVoter = this.voters.includes(self.address);
    this.self = { ...self, incarnation: this.o.store.bumpIncarnation(), beat: 0 };
    this.table.observe(this.self);
    this.election = new Election({
      name: self.name,
      address: self.address,
      isVoter,
      quorum: Math.floor(this.voters.length / 2) + 1,
      votersHash: votersHash(this.voters),
      store: this.o.store,
      clock: this.o.clock,
      rng: this.o.rng,
      log: this.o.log,
      timing: this.o.election ?? DEFAULT_ELECTION,
      onChange: () => this.updateView(),
      peers: {
        otherVoters: () => this.voters.filter((a) => a !== self.address),
        others: () => this.table.records().filter((r) => r.name !== self.name).map((r) => r.address),
        vote: (a, req, ms) => this.o.client.post<VoteReply>(a, "vote", req, ms),
        beat: (a, req, ms) => this.o.client.post<BeatReply>(a, "beat", req, ms),
      },
    });
    this.o.log.info("peers discovery", { voters: this.voters.length, voter: isVoter, incarnation: this.self.incarnation });
    this.updateView();
    this.election.start();
    this.gossip();
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
    this.election.campaign();
  }

  async resign(): Promise<void> {
    this.election.resign();
  }

  leader(): LeaderView {
    this.updateView(); // CheckQuorum is evaluated at call time, not only at the last event
    return { ...this.view };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.timer?.cancel();
    this.election.stop();
    // graceful leave: one last push with `left`, so the others drop us without waiting
    this.self = { ...this.self, beat: this.self.beat + 1, left: true };
    await Promise.allSettled(this.targets().map((a) => this.o.client.post(a, "gossip", { from: this.self.name, members: [this.self] }, 500)));
  }

  // ---- peer API handlers (routes.ts) ----

  /** A push from another node; `ip` is the caller's address as the listener saw it (null: unknown). */
  onGossip(msg: GossipMessage, ip: string | null = null): GossipMessage {
    this.merge(msg, { ip });
    return { from: this.self.name, members: this.table.records() };
  }

  onVote(req: VoteRequest): VoteReply {
    if (!isTerm(req?.term) || typeof req.candidate !== "string" || typeof req.address !== "string" || typeof req.voters !== "string")
      return { term: this.election.term, granted: false, reason: outOfRange(req?.term) ? `term beyond ${TERM_MAX} refused` : "malformed vote request" };
    const r = this.election.onVote({ pre: req.pre === true, term: req.term, candidate: req.candidate, address: req.address, voters: req.voters });
    this.updateView();
    return r;
  }

  onBeat(req: BeatRequest): BeatReply {
    if (!isTerm(req?.term) || typeof req.leader !== "string") {
      const line = outOfRange(req?.term) ? this.refusedLog.take() : null;
      if (line) this.o.log.warn("beat with a term beyond the bound refused", { term: req.term, max: TERM_MAX, leader: printable(req?.leader), ...line });
      return { term: this.election.term, ok: false };
    }
    const r = this.election.onBeat({ term: req.term, leader: req.leader });
    this.updateView();
    return r;
  }

  // ---- internals ----

  private merge(msg: GossipMessage, speaker: Speaker): void {
    const list = Array.isArray(msg?.members) ? msg.members.slice(0, MEMBERS_MAX) : [];
    const from = typeof msg?.from === "string" ? msg.from : null;
    let newCandidates = 0;
    const candidate = (address: string) => {
      if (address === this.self.address || this.candidates.has(address)) return;
      if (newCandidates >= CANDIDATES_PER_MESSAGE || this.candidates.size >= CANDIDATES_MAX) return;
      newCandidates++;
      this.candidates.add(address);
    };
    for (const r of list) {
      if (!r || typeof r.name !== "string" || typeof r.address !== "string" || r.name === this.self.name) continue;
      if (!Number.isSafeInteger(r.incarnation) || !Number.isSafeInteger(r.beat) || r.incarnation < 0 || r.beat < 0) continue;
      const rec: HeartbeatRecord = { name: r.name, address: r.address, meta: r.meta ?? {}, incarnation: r.incarnation, beat: r.beat, left: r.left === true };
      const known = this.table.get(rec.name);
      const own = this.speaksForItself(rec, from, speaker);
      if (own === "dialed") {
        this.candidates.delete(rec.address);
        // a live name at another address is a conflict, not a move (memberlist state.go aliveNode):
        // the old entry must die first, so an impostor cannot take over a running node's name
        if (known && known.address !== rec.address) this.conflict(rec, known);
        else this.table.observe(rec);
        continue;
      }
      if (!known || rec.address !== known.address || rec.incarnation !== known.incarnation) {
        // unknown, restarted or moved: only the member itself can tell; ask it next round
        if (!known || rec.incarnation >= known.incarnation) candidate(rec.address);
        continue;
      }
      if (rec.beat > known.beat + this.beatStepMax(rec.name)) continue;
      // a leave only from the member's own push (its farewell, sent from its host), never relayed
      if (rec.left && own !== "pushed") continue;
      this.table.observe(rec);
    }
    this.refreshMembers();
  }

  private conflict(claim: HeartbeatRecord, known: HeartbeatRecord): void {
    const line = this.refusedLog.take();
    if (line) this.o.log.warn("member name claimed from another address while alive: refused", { name: claim.name, address: known.address, claimed: claim.address, ...line });
  }

  /**
   * "dialed": the reply of the member's own address, full authority. "pushed": a push naming itself
   * from the member's host, which may only announce its leave (anything on that host with the token
   * could send it, so it admits nobody and moves no beat beyond hearsay's step). null: hearsay.
   */
  private speaksForItself(r: HeartbeatRecord, from: string | null, speaker: Speaker): "dialed" | "pushed" | null {
    if (from !== null && from !== r.name) return null;
    if ("dialed" in speaker) return r.address === speaker.dialed ? "dialed" : null;
    return from !== null && speaker.ip !== null && bareIp(hostOf(r.address)) === bareIp(speaker.ip) ? "pushed" : null;
  }

  /**
   * How far hearsay may move a live member's beat: the beats it can have sent since we last saw one
   * advance, plus relay delay (≤ dead_after_ms), doubled for timer drift. A forged beat of 1e15 at
   * the right incarnation would otherwise hide every genuine beat after it, and the member would die.
   */
  private beatStepMax(name: string): number {
    const since = this.o.clock.now() - (this.table.advancedAt(name) ?? this.o.clock.now());
    return 2 * Math.ceil((since + this.timing.dead_after_ms) / this.timing.heartbeat_ms) + 8;
  }

  private targets(): string[] {
    const out = new Set<string>(this.o.seeds);
    for (const r of this.table.records()) out.add(r.address);
    for (const a of this.candidates) out.add(a);
    this.candidates.clear(); // dialed once; hearsay must name them again to be retried
    out.delete(this.self.address);
    return [...out];
  }

  private gossip(): void {
    if (this.closed) return;
    this.self = { ...this.self, beat: this.self.beat + 1 };
    this.table.observe(this.self);
    const msg: GossipMessage = { from: this.self.name, members: this.table.records() };
    for (const a of this.targets()) {
      if (this.inFlight.has(a)) continue; // one request per peer at a time (bounded)
      this.inFlight.add(a);
      this.o.client
        .post<GossipMessage>(a, "gossip", msg, this.timing.dead_after_ms / 2)
        .then((reply) => this.merge(reply, { dialed: a }))
        .catch(() => {})
        .finally(() => this.inFlight.delete(a));
    }
    this.refreshMembers();
    this.timer = this.o.clock.setTimer(this.timing.heartbeat_ms, () => this.gossip());
  }

  private refreshMembers(): void {
    this.table.sweep(this.self.name);
    const key = this.table.key();
    if (key === this.membersKey) return;
    this.membersKey = key;
    this.events.emit({ kind: "members", members: this.table.members() });
  }

  private updateView(): void {
    if (!this.election) return;
    const v: LeaderView = { leader: this.election.leader, term: this.election.term, self: this.election.isLeader };
    if (sameView(v, this.view)) return;
    this.view = v;
    this.events.emit({ kind: "leader", view: { ...v } });
  }
}

/**
 * A peer-supplied value for a log line. Not String(x): a JSON body's {"toString": 1} makes String()
 * throw, which turned a refused beat into a 500 (found by test/fuzz/peer-api.test.ts, issue 22).
 */
function printable(x: unknown): string {
  return typeof x === "string" ? x.slice(0, 256) : x === null ? "null" : typeof x;
}
