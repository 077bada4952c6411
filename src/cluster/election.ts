// Raft's leader election without a log, for the peers backend (Ongaro 2014, ch. 3 and §9.6).
// What it guarantees: at most one leader per term, because a leader needs votes from a majority of
// the FIXED voter set (the configured seeds, identical on every host) and every voter persists
// {term, votedFor} before answering (StateStore, synchronous: no await between check and grant).
// A minority side never elects (no majority of voters) and a leader that loses contact with a
// majority steps down within one election timeout (CheckQuorum). PreVote keeps a node that was cut
// off from raising the term and deposing a healthy leader when it returns; voters that heard a
// leader within the minimum election timeout refuse votes ("leader stickiness", §9.6).
// What it does NOT guarantee: there is no replicated log, so it elects, it does not store; two nodes
// may both *believe* they lead at one instant (in different terms): only the term, used as a
// fencing token by every host, makes leader duties safe.
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Rng } from "../core/rng.ts";
import type { StateStore } from "./state.ts";

/**
 * The highest term this node accepts, from a peer or from its own state.json. Terms grow by one per
 * election round; 2^40 is 35,000 years of one round per second, yet far below 2^53, so the next term
 * is always a safe integer. Without it, one beat with term 2^53−1 was adopted, persisted, and no leader
 * could be elected again because term+1 is not a safe integer (issue 22, row 2).
 */
export const TERM_MAX = 2 ** 40;
/**
 * A peer's term is adopted only up to TERM_MAX minus this headroom, so this node's own elections
 * always have 2^20 rounds left: accepting a forged term of exactly TERM_MAX made the next campaign
 * persist TERM_MAX + 1, which state.json refuses (an unhandled rejection out of preVote; found by
 * test/fuzz/peer-api.test.ts, issue 22).
 */
export const TERM_HEADROOM = 2 ** 20;
export const isTerm = (t: unknown): t is number => Number.isSafeInteger(t) && (t as number) >= 0 && (t as number) <= TERM_MAX - TERM_HEADROOM;

export interface VoteRequest {
  pre: boolean;
  term: number;
  candidate: string;
  address: string;
  /** Hash of the sorted voter list: a host with a different list must not vote (split majorities). */
  voters: string;
}
export interface VoteReply {
  term: number;
  granted: boolean;
  reason?: string;
}
export interface BeatRequest {
  term: number;
  leader: string;
}
export interface BeatReply {
  term: number;
  ok: boolean;
}

export interface ElectionTiming {
  heartbeat_ms: number;
  /** Minimum election timeout T; each round waits uniformly in [T, 2T) (hashicorp/raft util.go). */
  election_ms: number;
}
export const DEFAULT_ELECTION: ElectionTiming = { heartbeat_ms: 200, election_ms: 1500 };

export interface ElectionPeers {
  /** Voter addresses other than this node. */
  otherVoters(): string[];
  /** Every live member's address other than this node (heartbeats reach non-voters too). */
  others(): string[];
  vote(address: string, req: VoteRequest, timeoutMs: number): Promise<VoteReply>;
  beat(address: string, req: BeatRequest, timeoutMs: number): Promise<BeatReply>;
}

export type Role = "follower" | "precandidate" | "candidate" | "leader";

export class Election {
  role: Role = "follower";
  leader: string | null = null;
  private heardLeaderAt = -Infinity;
  private acks = new Map<string, number>();
  private timer: TimerHandle | null = null;
  private beatTimer: TimerHandle | null = null;
  private round = 0;
  private campaigning = false;
  private stopped = false;

  constructor(
    private readonly o: {
      name: string;
      address: string;
      isVoter: boolean;
      quorum: number;
      votersHash: string;
      store: StateStore;
      peers: ElectionPeers;
      clock: Clock;
      rng: Rng;
      log: Logger;
      timing: ElectionTiming;
      onChange: () => void;
    },
  ) {}

  get term(): number {
    return this.o.store.get().term;
  }

  /**
   * Leader with a majority of voters heard within one election timeout (CheckQuorum), evaluated now:
   * a leader whose process was paused reads false on resume, before its next heartbeat round.
   */
  get isLeader(): boolean {
    return this.role === "leader" && !this.stopped && this.checkQuorum();
  }

  start(): void {
    this.resetTimer();
  }

  campaign(): void {
    this.campaigning = this.o.isVoter;
  }

  resign(): void {
    this.campaigning = false;
    if (this.role === "leader") this.stepDown("resigned");
  }

  stop(): void {
    this.stopped = true;
    this.campaigning = false;
    this.timer?.cancel();
    this.beatTimer?.cancel();
    if (this.role === "leader") this.stepDown("stopping");
  }

  // ---- handlers (synchronous: state is checked, persisted and answered in one turn) ----

  onVote(req: VoteRequest): VoteReply {
    const term = this.term;
    if (!this.o.isVoter) return { term, granted: false, reason: "not a voter" };
    if (req.voters !== this.o.votersHash) {
      this.o.log.error("vote request from a node with a different voter list (cluster.peers.seeds must be identical on every host)", { candidate: req.candidate });
      return { term, granted: false, reason: "voter list mismatch" };
    }
    if (!this.o.peers.otherVoters().includes(req.address)) return { term, granted: false, reason: "candidate is not a voter" };
    const inLease = this.role === "leader" || (this.leader !== null && this.o.clock.now() - this.heardLeaderAt < this.o.timing.election_ms);
    if (inLease && this.leader !== req.candidate) return { term, granted: false, reason: "leader alive" };
    if (req.pre) return { term, granted: req.term > term }; // PreVote never changes our state
    if (req.term < term) return { term, granted: false, reason: "stale term" };
    if (req.term > term) this.adopt(req.term);
    const voted = this.o.store.get().votedFor;
    if (voted !== null && voted !== req.candidate) return { term: this.term, granted: false, reason: `voted for ${voted}` };
    this.o.store.save({ ...this.o.store.get(), votedFor: req.candidate }); // persisted before the reply
    this.resetTimer();
    return { term: this.term, granted: true };
  }

  onBeat(req: BeatRequest): BeatReply {
    if (req.term < this.term) return { term: this.term, ok: false };
    if (req.term > this.term) this.adopt(req.term);
    if (this.role === "leader" && req.leader !== this.o.name) {
      this.o.log.error("two leaders in one term: this is a bug", { term: req.term, other: req.leader });
      this.stepDown("another leader in the same term");
    }
    if (this.role !== "follower") this.role = "follower";
    this.heardLeaderAt = this.o.clock.now();
    if (this.leader !== req.leader) {
      this.leader = req.leader;
      this.o.onChange();
    }
    this.resetTimer();
    return { term: this.term, ok: true };
  }

  // ---- internals ----

  /** A higher term: persist it with no vote, and follow. */
  private adopt(term: number): void {
    this.o.store.save({ ...this.o.store.get(), term, votedFor: null });
    const wasLeader = this.role === "leader";
    this.role = "follower";
    this.round++;
    if (this.leader !== null) {
      this.leader = null;
      this.o.onChange();
    } else if (wasLeader) this.o.onChange();
    this.beatTimer?.cancel();
  }

  private resetTimer(): void {
    if (this.stopped) return;
    this.timer?.cancel();
    const t = this.o.timing.election_ms;
    this.timer = this.o.clock.setTimer(t + this.o.rng.int(t), () => this.onTimeout());
  }

  private onTimeout(): void {
    if (this.stopped) return;
    if (this.role === "leader") return this.resetTimer();
    if (this.leader !== null) {
      this.leader = null; // nothing heard for a full election timeout: we no longer know a leader
      this.o.onChange();
    }
    this.resetTimer();
    if (this.campaigning) void this.preVote();
  }

  private async ask(pre: boolean, term: number): Promise<boolean> {
    const req: VoteRequest = { pre, term, candidate: this.o.name, address: this.o.address, voters: this.o.votersHash };
    let granted = 1; // our own vote (pre: we would vote for ourselves; real: persisted by the caller)
    const need = this.o.quorum;
    if (granted >= need) return true;
    const timeout = this.o.timing.election_ms / 2;
    return new Promise<boolean>((resolve) => {
      const voters = this.o.peers.otherVoters();
      let pending = voters.length;
      if (pending === 0) return resolve(false);
      for (const a of voters) {
        this.o.peers
          .vote(a, req, timeout)
          .then((r) => {
            if (!pre && isTerm(r?.term) && r.term > this.term) this.adopt(r.term);
            if (r.granted) granted++;
          })
          .catch(() => {})
          .finally(() => {
            pending--;
            if (granted >= need) resolve(true);
            else if (pending === 0) resolve(false);
          });
      }
    });
  }

  private async preVote(): Promise<void> {
    if (this.term + 1 > TERM_MAX) {
      // Only reachable after 2^20 rounds above the highest adoptable term: say so, never throw.
      this.o.log.error("election term space exhausted; not campaigning (stop the cluster, remove <data_dir>/cluster/state.json on every node, start again)", { term: this.term, max: TERM_MAX });
      return;
    }
    const round = ++this.round;
    this.role = "precandidate";
    const ok = await this.ask(true, this.term + 1);
    if (round !== this.round || this.role !== "precandidate" || this.stopped) return;
    if (!ok) {
      this.role = "follower";
      return;
    }
    const term = this.term + 1;
    this.o.store.save({ ...this.o.store.get(), term, votedFor: this.o.name }); // persisted before asking
    this.role = "candidate";
    const round2 = ++this.round;
    const won = await this.ask(false, term);
    if (round2 !== this.round || this.role !== "candidate" || this.term !== term || this.stopped) return;
    if (!won) {
      this.role = "follower";
      return;
    }
    this.becomeLeader();
  }

  private becomeLeader(): void {
    this.role = "leader";
    this.leader = this.o.name;
    this.acks.clear();
    const now = this.o.clock.now();
    for (const v of this.o.peers.otherVoters()) this.acks.set(v, now); // the votes just received
    this.o.log.info("leader", { term: this.term });
    this.o.onChange();
    this.sendBeats();
  }

  private sendBeats(): void {
    if (this.role !== "leader" || this.stopped) return;
    const term = this.term;
    const voters = new Set(this.o.peers.otherVoters());
    for (const a of new Set([...voters, ...this.o.peers.others()])) {
      this.o.peers
        .beat(a, { term, leader: this.o.name }, this.o.timing.election_ms / 2)
        .then((r) => {
          if (isTerm(r?.term) && r.term > this.term) this.adopt(r.term);
          else if (r.ok && voters.has(a)) this.acks.set(a, this.o.clock.now());
        })
        .catch(() => {});
    }
    if (!this.checkQuorum()) return this.stepDown("lost contact with a majority of voters");
    this.beatTimer = this.o.clock.setTimer(this.o.timing.heartbeat_ms, () => this.sendBeats());
  }

  private checkQuorum(): boolean {
    const now = this.o.clock.now();
    let live = 1;
    for (const at of this.acks.values()) if (now - at < this.o.timing.election_ms) live++;
    return live >= this.o.quorum;
  }

  private stepDown(why: string): void {
    this.o.log.warn("stepping down", { term: this.term, why });
    this.role = "follower";
    this.leader = null;
    this.beatTimer?.cancel();
    this.round++;
    this.o.onChange();
    this.resetTimer();
  }
}
