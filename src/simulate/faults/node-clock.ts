// One simulated process's view of the shared VirtualClock: its timers stop firing while the process
// is paused (SIGSTOP, a long GC pause, a VM migration) and fire, in order, when it resumes — late,
// exactly as a real paused process finds them — and vanish when the process is killed. The time it
// reads keeps moving while it is paused, so a resumed ex-leader sees how long it was gone only if it
// looks (election.ts isLeader evaluates CheckQuorum at call time for this reason).
import type { Clock, TimerHandle, VirtualClock } from "../../core/clock.ts";

interface Held {
  fn: () => void;
  cancelled: boolean;
}

export class NodeClock implements Clock {
  private paused = false;
  private dead = false;
  private held: Held[] = [];

  constructor(private readonly base: VirtualClock) {}

  now(): number {
    return this.base.now();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  get isDead(): boolean {
    return this.dead;
  }

  setTimer(ms: number, fn: () => void): TimerHandle {
    const h: Held = { fn, cancelled: false };
    const inner = this.base.setTimer(ms, () => this.fire(h));
    return {
      cancel: () => {
        h.cancelled = true;
        inner.cancel();
      },
    };
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.setTimer(ms, resolve));
  }

  pause(): void {
    if (!this.dead) this.paused = true;
  }

  /** Resume: every timer that came due while paused fires now, in the order it came due. */
  resume(): void {
    if (!this.paused || this.dead) return;
    this.paused = false;
    const due = this.held;
    this.held = [];
    this.base.setTimer(0, () => {
      for (const h of due) this.fire(h);
    });
  }

  /** The process is gone: nothing it scheduled runs again. */
  kill(): void {
    this.dead = true;
    this.paused = false;
    this.held = [];
  }

  private fire(h: Held): void {
    if (this.dead || h.cancelled) return;
    if (this.paused) return void this.held.push(h);
    h.fn();
  }
}
