// Host-wide port leases: which herd on this host planned which engine port. Probing by binding
// sees only ports an engine already holds; between one herd planning port P and its engine binding
// it (seconds for the sim, minutes for vLLM, which binds after loading the model; and again during
// every restart backoff) a second herd on the same host — another data_dir, e.g. three `herd run`
// nodes tried on one machine — probes P free and plans it too, and both engines crash-loop on the
// bind. So every herd records the ports it plans as one file per port in a directory every herd on
// the host sees: /dev/shm/herd-ports (shared even under the unit's PrivateTmp=yes and
// ProtectSystem=strict, which leave /dev writable), else $TMPDIR/herd-ports. A lease names its owner
// by pid and start time (/proc/<pid>/stat), so a lease left by a herd that died is taken over, and a
// recycled pid does not keep it alive. Best effort: when the directory cannot be written, leases are
// off and planning relies on the bind probe alone (logged once by the caller).
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readStat } from "./procfs.ts";

export interface LeaseOwner {
  pid: number;
  startTicks: number;
  /** Which PortLeases of that process (several supervisors in one process, e.g. tests): 0 by default. */
  instance?: number;
}

let instances = 0;

/** The directory every herd on this host shares for leases. */
export function defaultLeaseDir(): string {
  return existsSync("/dev/shm") ? "/dev/shm/herd-ports" : join(tmpdir(), "herd-ports");
}

/** This process, as a fresh lease owner (each call a new instance, so two supervisors in one process never share a port). */
export function selfOwner(): LeaseOwner {
  return { pid: process.pid, startTicks: readStat(process.pid)?.startTicks ?? 0, instance: ++instances };
}

/** Whether the process that wrote a lease still runs (same pid and start time). */
export function ownerAlive(o: LeaseOwner): boolean {
  const st = readStat(o.pid);
  return st !== null && st.state !== "Z" && st.state !== "X" && (o.startTicks === 0 || st.startTicks === o.startTicks);
}

export function parseLease(text: string): LeaseOwner | null {
  const m = /^(\d+) (\d+)(?: (\d+))?\s*$/.exec(text);
  return m ? { pid: Number(m[1]), startTicks: Number(m[2]), instance: Number(m[3] ?? 0) } : null;
}

/** The live owner of a lease on port in dir (read only: creates nothing), or null. */
export function leaseHolderAt(dir: string, port: number, alive: (o: LeaseOwner) => boolean = ownerAlive): LeaseOwner | null {
  try {
    const o = parseLease(readFileSync(join(dir, String(port)), "utf8"));
    return o && alive(o) ? o : null;
  } catch {
    return null;
  }
}

export class PortLeases {
  private readonly mine = new Set<number>();
  private usable: boolean;
  /** Why leases are off (the directory could not be created or written), or null. */
  readonly problem: string | null = null;

  constructor(
    readonly dir: string = defaultLeaseDir(),
    private readonly owner: LeaseOwner = selfOwner(),
    private readonly alive: (o: LeaseOwner) => boolean = ownerAlive,
  ) {
    try {
      if (!existsSync(dir)) {
        mkdirSync(dir, { recursive: true });
        // Sticky and world-writable like /tmp: herds of different users share one port space.
        chmodSync(dir, 0o1777);
      }
      this.usable = true;
    } catch (e) {
      this.usable = false;
      this.problem = `cannot use ${dir}: ${(e as Error).message}`;
    }
  }

  /** The live herd (other than this one) holding a lease on port, or null. */
  holder(port: number): LeaseOwner | null {
    if (!this.usable) return null;
    const o = this.read(port);
    if (o === null || this.isSelf(o) || !this.alive(o)) return null;
    return o;
  }

  /**
   * Lease port for this herd: true when it is ours now (fresh, already ours, or taken over from a
   * dead owner), false when another live herd holds it. Exclusive create (`wx`), so of two herds
   * planning at once exactly one wins a fresh port.
   */
  claim(port: number): boolean {
    if (!this.usable) return true;
    if (this.mine.has(port)) return true;
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        writeFileSync(this.path(port), `${this.owner.pid} ${this.owner.startTicks} ${this.owner.instance ?? 0}\n`, { flag: "wx", mode: 0o644 });
        this.mine.add(port);
        return true;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") return true; // unwritable: fall back to the bind probe
      }
      const o = this.read(port);
      if (o !== null && this.isSelf(o)) {
        this.mine.add(port);
        return true;
      }
      if (o !== null && this.alive(o)) return false;
      // Dead owner (or an unreadable, half-written file): remove it and try once more.
      try {
        unlinkSync(this.path(port));
      } catch {
        /* another herd removed it first; the retry decides */
      }
    }
    return false;
  }

  /** Drop this herd's lease on the given ports (all of them by default). */
  release(ports: Iterable<number> = [...this.mine]): void {
    for (const p of ports) {
      if (!this.mine.delete(p)) continue;
      const o = this.read(p);
      if (o === null || !this.isSelf(o)) continue;
      try {
        unlinkSync(this.path(p));
      } catch {
        /* already gone */
      }
    }
  }

  /** Ports this herd holds leases on. */
  held(): number[] {
    return [...this.mine].sort((a, b) => a - b);
  }

  /** Every live lease in the directory (for `herd doctor`): port → owner. */
  list(): Map<number, LeaseOwner> {
    const out = new Map<number, LeaseOwner>();
    if (!this.usable) return out;
    let names: string[] = [];
    try {
      names = readdirSync(this.dir);
    } catch {
      return out;
    }
    for (const n of names) {
      const port = Number(n);
      if (!Number.isInteger(port)) continue;
      const o = this.read(port);
      if (o && this.alive(o)) out.set(port, o);
    }
    return out;
  }

  private isSelf(o: LeaseOwner): boolean {
    return o.pid === this.owner.pid && o.startTicks === this.owner.startTicks && (o.instance ?? 0) === (this.owner.instance ?? 0);
  }

  private read(port: number): LeaseOwner | null {
    try {
      return parseLease(readFileSync(this.path(port), "utf8"));
    } catch {
      return null;
    }
  }

  private path(port: number): string {
    return join(this.dir, String(port));
  }
}
