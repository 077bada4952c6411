// The run's event log: one line per thing that happened (a fault, a leader, a request's end, an
// assignment applied, a violation), stamped with virtual time. It is the reproduction: the same
// seed gives a byte-identical log (test/simulate/faults.test.ts), so a failing seed's log can be
// diffed against a fixed build's. Bounded: past `maxLines` only a count is kept.
export class EventLog {
  readonly lines: string[] = [];
  omitted = 0;

  constructor(
    private readonly now: () => number,
    private readonly maxLines = 20_000,
  ) {}

  add(what: string): void {
    if (this.lines.length >= this.maxLines) return void this.omitted++;
    this.lines.push(`${this.now().toFixed(0).padStart(7)} ${what}`);
  }

  text(): string {
    return this.lines.join("\n") + (this.omitted > 0 ? `\n… ${this.omitted} more lines` : "") + "\n";
  }
}
