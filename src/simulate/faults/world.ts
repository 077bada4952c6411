// Applying the schedule to the world: each fault starts and ends on the virtual clock, and
// overlapping faults compose (a link is cut while any fault cuts it; the KV loss share is the
// largest active one; a node is paused while any pause holds it), so the end of one fault never
// undoes another. Engine i runs on node i mod N: a node's kill takes its engines with it.
import type { VirtualClock } from "../../core/clock.ts";
import type { ControlPlane } from "./control.ts";
import type { DataPlane } from "./data.ts";
import type { EventLog } from "./event-log.ts";
import type { VirtualNet } from "./net.ts";
import { describeFault, type Fault, type FaultKind } from "./schedule.ts";

export class FaultInjector {
  readonly injected: Record<FaultKind, number> = { kill_engine: 0, pause_engine: 0, kill_node: 0, pause_node: 0, partition: 0, slow_link: 0, lost_kv: 0, disk_full: 0, duplicate: 0 };
  private readonly cuts = new Map<string, number>();
  private readonly slows = new Map<string, number[]>();
  private readonly pauses = new Map<number, number>();
  private readonly stalls = new Map<number, number>();
  private lost: Fault[] = [];
  private dups: number[] = [];
  private full = 0;

  constructor(
    private readonly clock: VirtualClock,
    private readonly net: VirtualNet,
    private readonly control: ControlPlane,
    private readonly data: DataPlane,
    private readonly log: EventLog,
  ) {}

  schedule(faults: readonly Fault[]): void {
    for (const f of faults) {
      this.clock.setTimer(f.atMs, () => {
        this.injected[f.kind]++;
        this.log.add(`FAULT ${describeFault(f)}`);
        this.begin(f);
        this.clock.setTimer(f.durationMs, () => {
          this.log.add(`END ${describeFault(f)}`);
          this.end(f);
        });
      });
    }
  }

  private addr(i: number): string {
    return this.control.addresses[i]!;
  }

  private links(f: Fault): [number, number][] {
    if (f.peer !== null) return [[f.target, f.peer]];
    return this.control.addresses.map((_, i) => [f.target, i] as [number, number]).filter(([, i]) => i !== f.target);
  }

  private cut(a: number, b: number, delta: number): void {
    const k = a < b ? `${a}-${b}` : `${b}-${a}`;
    const n = (this.cuts.get(k) ?? 0) + delta;
    this.cuts.set(k, n);
    this.net.setCut(this.addr(a), this.addr(b), n > 0);
  }

  private slow(a: number, b: number, ms: number, on: boolean): void {
    const k = a < b ? `${a}-${b}` : `${b}-${a}`;
    const list = this.slows.get(k) ?? [];
    if (on) list.push(ms);
    else list.splice(list.indexOf(ms), 1);
    this.slows.set(k, list);
    this.net.setSlow(this.addr(a), this.addr(b), list.length ? Math.max(...list) : 0);
    let kv = 0;
    for (const l of this.slows.values()) for (const x of l) kv = Math.max(kv, x);
    this.data.kvFaults.extraDelayMs = kv;
  }

  private enginesOf(node: number): string[] {
    return this.data.slots.filter((_, i) => i % this.control.addresses.length === node).map((s) => s.id);
  }

  private begin(f: Fault): void {
    switch (f.kind) {
      case "kill_engine":
        return this.data.kill(`e${f.target}`);
      case "pause_engine":
        this.stalls.set(f.target, (this.stalls.get(f.target) ?? 0) + 1);
        return this.data.pause(`e${f.target}`, true);
      case "kill_node":
        this.control.kill(this.addr(f.target));
        for (const e of this.enginesOf(f.target)) this.data.kill(e);
        return;
      case "pause_node":
        this.pauses.set(f.target, (this.pauses.get(f.target) ?? 0) + 1);
        return this.control.pause(this.addr(f.target));
      case "partition":
        for (const [a, b] of this.links(f)) this.cut(a, b, 1);
        return;
      case "slow_link":
        return this.slow(f.target, f.peer!, f.amount, true);
      case "lost_kv":
        this.lost.push(f);
        return this.kvLoss();
      case "disk_full":
        this.full++;
        this.data.tierFull = true;
        return;
      case "duplicate":
        this.dups.push(f.amount);
        this.net.dupShare = Math.max(...this.dups);
        return;
    }
  }

  private kvLoss(): void {
    this.data.kvFaults.dropShare = this.lost.reduce((m, f) => Math.max(m, f.amount), 0);
    this.data.kvFaults.replayDown = this.lost.some((f) => f.replayDown);
  }

  private end(f: Fault): void {
    switch (f.kind) {
      case "kill_engine":
        // An engine whose host is down comes back with the host.
        if (this.control.isUp(this.addr(f.target % this.control.addresses.length))) this.data.restart(`e${f.target}`);
        return;
      case "pause_engine": {
        const n = (this.stalls.get(f.target) ?? 1) - 1;
        this.stalls.set(f.target, n);
        if (n === 0) this.data.pause(`e${f.target}`, false);
        return;
      }
      case "kill_node":
        this.control.restart(this.addr(f.target));
        for (const e of this.enginesOf(f.target)) this.data.restart(e);
        return;
      case "pause_node": {
        const n = (this.pauses.get(f.target) ?? 1) - 1;
        this.pauses.set(f.target, n);
        if (n === 0) this.control.resume(this.addr(f.target));
        return;
      }
      case "partition":
        for (const [a, b] of this.links(f)) this.cut(a, b, -1);
        return;
      case "slow_link":
        return this.slow(f.target, f.peer!, f.amount, false);
      case "lost_kv":
        this.lost = this.lost.filter((x) => x !== f);
        return this.kvLoss();
      case "disk_full":
        this.data.tierFull = --this.full > 0;
        return;
      case "duplicate":
        this.dups.splice(this.dups.indexOf(f.amount), 1);
        this.net.dupShare = this.dups.length ? Math.max(...this.dups) : 0;
        return;
    }
  }
}
