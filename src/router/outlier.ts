// Evidence beats membership: passive outlier detection, as Envoy's outlier_detection does
// (envoyproxy/envoy, source/extensions/outlier_detection_monitors and
// docs "Outlier detection": consecutive gateway failures eject a host for base_ejection_time ×
// number of ejections, capped by max_ejection_time). Here one failure that proves a target cannot
// serve (refused or reset connection, no response head before its deadline, a gateway 5xx) ejects
// it at once: membership takes seconds to notice a dead node (liveness: 3 s) and never notices an
// asymmetric cut, a request costs that much every time it lands there.
//
// Targets are workers and peer nodes: a worker's engine failing ejects the worker; a peer node that
// cannot be reached ejects every worker it owns. When an ejection ends the target is probing: one
// request may go there (the probe); while it is out nobody else does; its success re-admits, its
// failure ejects again for twice as long (capped). A target that stayed healthy for max_ejection_ms
// starts again from the base time. Pure core on the injected Clock; bounded (≤ MAX_TARGETS).
import type { Clock } from "../core/clock.ts";
import type { OutlierConfig } from "../config/types.ts";

export type { OutlierConfig };

export const DEFAULT_OUTLIER: OutlierConfig = { enabled: true, base_ejection_ms: 2000, max_ejection_ms: 30_000 };

export type TargetKind = "worker" | "node";

/** One target's state, as /admin/route/explain and /admin/cluster show it. */
export interface Ejection {
  target: string;
  kind: TargetKind;
  /** ejected: no traffic until `until_ms`; probing: one request may test it. */
  state: "ejected" | "probing";
  /** What failed, e.g. `peer_unreachable: timeout waiting for the response head`. */
  reason: string;
  /** Ejections in a row (1 = first). */
  ejections: number;
  /** Remaining ejection time (0 when probing). */
  remaining_ms: number;
}

interface Entry {
  kind: TargetKind;
  reason: string;
  ejections: number;
  untilMs: number;
  /** A probe request was routed there and has not reported yet (it must within probeMs). */
  probeUntilMs: number;
  /** When the target last answered well after an ejection (for the reset to the base time). */
  healthySinceMs: number | null;
}

/** Targets tracked at once; the oldest healthy ones are forgotten first. */
export const MAX_TARGETS = 4096;

export class OutlierDetector {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly clock: Clock,
    public config: OutlierConfig = DEFAULT_OUTLIER,
  ) {}

  /** Evidence that `target` cannot serve: eject it now (a repeat ejects for longer). */
  failed(kind: TargetKind, target: string, reason: string): void {
    if (!this.config.enabled) return;
    const now = this.clock.now();
    const key = keyOf(kind, target);
    let e = this.entries.get(key);
    if (e && e.untilMs > now) {
      // Already ejected (requests that were in flight when it failed): not a new ejection.
      e.reason = reason;
      return;
    }
    if (e && e.healthySinceMs !== null && now - e.healthySinceMs >= this.config.max_ejection_ms) e.ejections = 0;
    if (!e) {
      this.bound();
      e = { kind, reason, ejections: 0, untilMs: 0, probeUntilMs: 0, healthySinceMs: null };
      this.entries.set(key, e);
    }
    e.ejections++;
    e.reason = reason;
    e.healthySinceMs = null;
    e.probeUntilMs = 0;
    e.untilMs = now + Math.min(this.config.max_ejection_ms, this.config.base_ejection_ms * 2 ** Math.min(20, e.ejections - 1));
  }

  /** Nothing is ejected, probing or remembered healthy: every target is routable (a fast path per request). */
  get empty(): boolean {
    return this.entries.size === 0;
  }

  /** The target answered (first token, or a complete answer): a probe succeeded. */
  succeeded(kind: TargetKind, target: string): void {
    if (this.entries.size === 0) return; // the usual case: nothing ever failed (no key string, no clock read)
    const e = this.entries.get(keyOf(kind, target));
    if (!e || e.untilMs > this.clock.now()) return;
    e.probeUntilMs = 0;
    e.healthySinceMs ??= this.clock.now();
  }

  /**
   * May a request be routed to `target` now? Null = yes; otherwise why not. A probing target is
   * admitted while no probe is out (call `routed` when one is sent there).
   */
  blocked(kind: TargetKind, target: string): string | null {
    if (this.entries.size === 0) return null;
    const e = this.entries.get(keyOf(kind, target));
    if (!e || e.healthySinceMs !== null) return null;
    const now = this.clock.now();
    if (e.untilMs > now) return `ejected for ${Math.ceil(e.untilMs - now)} ms more after ${e.reason}`;
    if (e.probeUntilMs > now) return `a re-admission probe is in flight after ${e.reason}`;
    return null;
  }

  /** A request was routed to `target`: if it is probing, this request is its probe. */
  routed(kind: TargetKind, target: string): void {
    if (this.entries.size === 0) return;
    const e = this.entries.get(keyOf(kind, target));
    const now = this.clock.now();
    if (!e || e.healthySinceMs !== null || e.untilMs > now) return;
    // The probe must report within one base ejection time, or another request may probe.
    e.probeUntilMs = now + this.config.base_ejection_ms;
  }

  /** The target left the registry or the view: forget it. */
  forget(kind: TargetKind, target: string): void {
    this.entries.delete(keyOf(kind, target));
  }

  /** Targets that are ejected or probing now. */
  list(): Ejection[] {
    const now = this.clock.now();
    const out: Ejection[] = [];
    for (const [key, e] of this.entries) {
      if (e.healthySinceMs !== null) continue;
      const remaining = Math.max(0, Math.ceil(e.untilMs - now));
      out.push({ target: key.slice(key.indexOf(":") + 1), kind: e.kind, state: remaining > 0 ? "ejected" : "probing", reason: e.reason, ejections: e.ejections, remaining_ms: remaining });
    }
    return out;
  }

  private bound(): void {
    if (this.entries.size < MAX_TARGETS) return;
    // Forget healthy targets first, then the oldest entry (Map keeps insertion order).
    for (const [k, e] of this.entries) if (e.healthySinceMs !== null) this.entries.delete(k);
    if (this.entries.size >= MAX_TARGETS) this.entries.delete(this.entries.keys().next().value!);
  }
}

const keyOf = (kind: TargetKind, target: string) => `${kind}:${target}`;
