// Seeded failpoints for crash tests: a child process is told "die at the Nth time you reach point P"
// and SIGKILLs itself there, so recovery is tested against real kill -9 at exact protocol steps.
// Production code passes none; every call is then one map lookup.

export const FAILPOINTS = [
  "set.mid_data", // half of the value written to its new location
  "set.after_data", // value written, catalog not yet updated
  "set.after_commit", // catalog points at the new copy, the old copy not yet freed
  "promote.after_copy", // SSD object copied to a CPU slot, catalog not yet updated
  "promote.after_commit", // catalog says CPU, SSD file not yet unlinked
  "demote.after_write", // CPU object written to an SSD file, catalog not yet updated
  "demote.after_commit", // catalog says SSD, CPU slot not yet released
  "evict.after_commit", // catalog row deleted, SSD file not yet unlinked
] as const;
export type FailpointName = (typeof FAILPOINTS)[number];

export class Failpoints {
  private readonly left: Map<string, number>;
  constructor(
    spec: Partial<Record<FailpointName, number>>,
    private readonly action: (name: FailpointName) => void = () => process.kill(process.pid, "SIGKILL"),
  ) {
    this.left = new Map(Object.entries(spec).filter(([, n]) => (n ?? 0) > 0) as [string, number][]);
  }

  hit(name: FailpointName): void {
    const n = this.left.get(name);
    if (n === undefined) return;
    if (n <= 1) {
      this.left.delete(name);
      this.action(name);
    } else this.left.set(name, n - 1);
  }
}

export const NO_FAILPOINTS = new Failpoints({});
