// The cluster's network in memory, on the virtual clock: every peer call (gossip, vote, beat,
// planner assignment) is a message with a seeded delay, per directed link cut or slowed, dropped
// when its target is dead, held while its target is paused (the kernel buffers it), optionally
// delivered twice (a retransmission). A reply travels back the same way and reaches the caller
// through the caller's own clock, so a paused caller sees it only when it resumes; the caller's
// deadline is its own (PeerClient's timeoutMs). Bodies are copied (JSON), as a wire would.
import type { VirtualClock } from "../../core/clock.ts";
import type { Rng } from "../../core/rng.ts";
import type { PeerClient } from "../../cluster/peers.ts";
import type { NodeClock } from "./node-clock.ts";

/** A process reachable at an address: its clock and its synchronous peer API handler. */
export interface NetEndpoint {
  clock: NodeClock;
  handle(path: string, body: unknown): unknown;
}

export interface NetCounters {
  sent: number;
  delivered: number;
  /** Dropped: a cut link, a dead target, a reply to a dead caller. */
  dropped: number;
  duplicated: number;
}

const link = (a: string, b: string) => `${a}>${b}`;
const copy = (x: unknown) => (x === undefined ? undefined : JSON.parse(JSON.stringify(x)));

export class VirtualNet {
  readonly counters: NetCounters = { sent: 0, delivered: 0, dropped: 0, duplicated: 0 };
  private readonly endpoints = new Map<string, NetEndpoint>();
  private readonly cut = new Set<string>();
  private readonly slow = new Map<string, number>();
  /** Share of requests on `dupPaths` delivered a second time, 1 ms after the first. */
  dupShare = 0;
  dupPaths: ReadonlySet<string> = new Set();

  constructor(
    private readonly clock: VirtualClock,
    private readonly rng: Rng,
    private readonly baseDelayMs = { min: 1, spread: 4 },
  ) {}

  attach(address: string, ep: NetEndpoint): void {
    this.endpoints.set(address, ep);
  }

  detach(address: string): void {
    this.endpoints.delete(address);
  }

  /** Cut (or heal) both directions between a and b. */
  setCut(a: string, b: string, on: boolean): void {
    for (const k of [link(a, b), link(b, a)]) on ? this.cut.add(k) : this.cut.delete(k);
  }

  setSlow(a: string, b: string, extraMs: number): void {
    for (const k of [link(a, b), link(b, a)]) extraMs > 0 ? this.slow.set(k, extraMs) : this.slow.delete(k);
  }

  healAll(): void {
    this.cut.clear();
    this.slow.clear();
  }

  isCut(a: string, b: string): boolean {
    return this.cut.has(link(a, b));
  }

  private delay(a: string, b: string): number {
    return this.baseDelayMs.min + this.rng.int(this.baseDelayMs.spread + 1) + (this.slow.get(link(a, b)) ?? 0);
  }

  /** The PeerClient of the process at `from`. */
  client(from: string): PeerClient {
    return { post: <T>(to: string, path: string, body: unknown, timeoutMs: number) => this.post<T>(from, to, path, body, timeoutMs) };
  }

  private post<T>(from: string, to: string, path: string, body: unknown, timeoutMs: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const caller = this.endpoints.get(from);
      let settled = false;
      const timeout = caller?.clock.setTimer(timeoutMs, () => {
        if (settled) return;
        settled = true;
        reject(new Error(`timeout after ${timeoutMs} ms`));
      });
      const answer = (reply: unknown) => {
        const back = this.endpoints.get(from);
        if (back !== caller || back === undefined || this.cut.has(link(to, from))) return void this.counters.dropped++;
        back.clock.setTimer(0, () => {
          if (settled) return;
          settled = true;
          timeout?.cancel();
          resolve(reply as T);
        });
      };
      const deliver = (first: boolean) => {
        const target = this.endpoints.get(to);
        if (target === undefined || this.cut.has(link(from, to))) return void this.counters.dropped++;
        const msg = copy(body);
        // Delivered into the target's event loop: held while it is paused, gone if it dies first.
        target.clock.setTimer(0, () => {
          if (this.endpoints.get(to) !== target) return void this.counters.dropped++;
          this.counters.delivered++;
          const reply = copy(target.handle(path, msg));
          if (first) this.clock.setTimer(this.delay(to, from), () => answer(reply));
        });
      };
      this.counters.sent++;
      this.clock.setTimer(this.delay(from, to), () => deliver(true));
      if (this.dupShare > 0 && this.dupPaths.has(path) && this.rng.float() < this.dupShare) {
        this.counters.duplicated++;
        this.clock.setTimer(this.delay(from, to) + 1, () => deliver(false));
      }
    });
  }
}
