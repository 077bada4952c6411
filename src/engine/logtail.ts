// The last N lines of an engine's output, in memory, for `herd logs` and the admin API.
// A fixed-size ring: memory stays bounded however much an engine prints. stdout and stderr keep
// separate partial-line buffers so interleaved chunks never splice two lines together.

/** Lines longer than this are split: one runaway line must not hold unbounded memory. */
export const MAX_LINE_CHARS = 16_384;

export class LogTail {
  private readonly ring: string[];
  private start = 0;
  private size = 0;
  private readonly partial = new Map<string, string>();

  constructor(readonly capacity: number) {
    this.ring = new Array<string>(Math.max(1, capacity));
  }

  /** Append a chunk of text from one stream; complete lines go to the ring. */
  push(stream: string, text: string): void {
    let buf = (this.partial.get(stream) ?? "") + text;
    for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
      this.line(buf.slice(0, nl).replace(/\r$/, ""));
      buf = buf.slice(nl + 1);
    }
    while (buf.length > MAX_LINE_CHARS) {
      this.line(buf.slice(0, MAX_LINE_CHARS));
      buf = buf.slice(MAX_LINE_CHARS);
    }
    this.partial.set(stream, buf);
  }

  /** Emit whatever partial lines remain (the process exited without a final newline). */
  flush(): void {
    for (const [stream, buf] of this.partial) if (buf.length > 0) this.line(buf);
    this.partial.clear();
  }

  /** Add one complete line (also used for herd's own markers such as "exited with code 1"). */
  line(text: string): void {
    if (this.capacity <= 0) return;
    const cut = text.length > MAX_LINE_CHARS ? text.slice(0, MAX_LINE_CHARS) : text;
    if (this.size < this.capacity) {
      this.ring[(this.start + this.size) % this.capacity] = cut;
      this.size++;
    } else {
      this.ring[this.start] = cut;
      this.start = (this.start + 1) % this.capacity;
    }
  }

  lines(): string[] {
    const out: string[] = [];
    for (let i = 0; i < this.size; i++) out.push(this.ring[(this.start + i) % this.capacity]!);
    return out;
  }
}
