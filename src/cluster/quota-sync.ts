// Carries a node's quota asks to the leader (quota.ts is the counting; this is the I/O): every
// QUOTA_SYNC_MS, and at once when a lease runs low, one ask in flight at a time, over the peer API
// (POST /cluster/v1/quota, token and TLS as every peer call, the body bounded in routes.ts). The
// leader answers its own asks in process, synchronously, so a single node (or the leader) admits
// exactly as one bucket would. A failed ask changes nothing: the lease runs out at its own expiry
// and the node falls back to its local share (quota.ts).
import type { Clock, TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { PeerClient } from "./peers.ts";
import { QuotaLedger, QuotaLeases, parseQuotaAsk, type QuotaReply } from "./quota.ts";

/** Periodic ask (renews the leases well inside QUOTA_LEASE_MS and returns the spent counts). */
export const QUOTA_SYNC_MS = 250;
/** A peer's ask bound: ≤ QUOTA_KEYS_MAX keys of a few numbers each. */
export const QUOTA_ASK_MAX_BYTES = 512 * 1024;
const ASK_TIMEOUT_MS = 1000;

export interface QuotaSyncOptions {
  self: string;
  boot: string;
  clock: Clock;
  log: Logger;
  leadership: () => { leader: string | null; term: number; self: boolean };
  /** Peer API address of a member by name (null: unknown or dead). */
  addressOf: (name: string) => string | null;
  /** Live members, this node included. */
  nodes: () => number;
  client: () => PeerClient;
}

export class QuotaSync {
  readonly leases: QuotaLeases;
  private ledger: QuotaLedger | null = null;
  private timer: TimerHandle | null = null;
  private busy = false;
  private stopped = true;
  /** Counts for /admin and tests: asks answered, failed. */
  readonly stats = { answered: 0, failed: 0 };

  constructor(private readonly o: QuotaSyncOptions) {
    this.leases = new QuotaLeases(o.self, o.boot, o.nodes, () => this.askNow());
  }

  start(): void {
    this.stopped = false;
    this.tick();
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
    this.timer = null;
  }

  /** This node's ledger while it leads (a new term is a new ledger: its buckets start full). */
  private ownLedger(): QuotaLedger | null {
    const l = this.o.leadership();
    if (!l.self) return (this.ledger = null);
    const id = `${this.o.self}/${l.term}/${this.o.boot}`;
    if (this.ledger?.id !== id) this.ledger = new QuotaLedger(id);
    return this.ledger;
  }

  /** POST /cluster/v1/quota on the leader: a peer's ask; null when this node does not lead (→ 409). */
  answer(body: unknown): QuotaReply | null | "bad" {
    const ledger = this.ownLedger();
    if (!ledger) return null;
    const ask = parseQuotaAsk(body);
    if (!ask) return "bad";
    return ledger.handle(ask, this.o.clock.now());
  }

  private tick(): void {
    if (this.stopped) return;
    this.askNow();
    this.timer = this.o.clock.setTimer(QUOTA_SYNC_MS, () => {
      this.timer = null;
      this.tick();
    });
  }

  private askNow(): void {
    if (this.stopped || this.busy) return;
    const now = this.o.clock.now();
    const ledger = this.ownLedger();
    if (ledger) {
      this.leases.onReply(ledger.handle(this.leases.ask(), now), now);
      return;
    }
    const leader = this.o.leadership().leader;
    const address = leader === null ? null : this.o.addressOf(leader);
    if (address === null) return;
    this.busy = true;
    this.o
      .client()
      .post<QuotaReply>(address, "quota", this.leases.ask(), ASK_TIMEOUT_MS)
      .then((reply) => {
        if (reply && typeof reply.ledger === "string" && Array.isArray(reply.keys)) {
          this.leases.onReply(reply, now);
          this.stats.answered++;
        }
      })
      .catch((e) => {
        this.stats.failed++;
        this.o.log.debug("quota ask failed", { leader, err: errorMessage(e) });
      })
      .finally(() => (this.busy = false));
  }
}
