// The node's one live-config handle: what runs now — the start-up config plus the live keys of every
// SIGHUP reload since (src/daemon/reload.ts). Everything the node wires reads `current` when it
// uses a value (per request, per decision) or subscribes with `onChange`, so no part keeps a
// start-up copy of a live key: after a reload aggregated routing, P/D and explain see one config.
import type { Config } from "./types.ts";

export type LiveConfigListener = (next: Config, previous: Config) => void;

export class LiveConfig {
  private readonly listeners = new Set<LiveConfigListener>();

  constructor(private value: Config) {}

  get current(): Config {
    return this.value;
  }

  /** Swap in a reloaded config; listeners run in subscription order, after the swap. */
  set(next: Config): void {
    const previous = this.value;
    this.value = next;
    for (const l of this.listeners) l(next, previous);
  }

  onChange(listener: LiveConfigListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }
}
