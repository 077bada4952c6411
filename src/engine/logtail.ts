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

/** herd's own markers in the tail (`[herd: started …]`, `[herd: pid 12 exited with code 1]`). */
const HERD_MARKER = /^\[herd: /;
/** Words that mark a line as an error in vLLM, SGLang, TensorRT-LLM, Python and the sim's output. */
const ERRORISH = /\b(error|exception|traceback|fatal|failed|failure|cannot|can't|unable|refused|denied|not found|no such|address already in use|out of memory|killed|abort(ed)?)\b|^E\d{4} |\bERROR\b|CRITICAL/i;
/** Lines that only frame an error (a traceback header, a separator) and name no cause. */
const FRAMING = /^(traceback \(most recent call last\):|\s*\^+\s*$|-+$|=+$|\s*file ".*", line \d+)/i;

/**
 * The line of an engine's output that names why it stopped: the last error-looking line (Python
 * prints the exception last, after the traceback), else the last line the engine printed. herd's
 * own markers are skipped. Null when the engine printed nothing.
 */
export function lastErrorLine(lines: readonly string[]): string | null {
  let lastOwn: string | null = null;
  for (let i = lines.length - 1; i >= 0; i--) {
    const l = lines[i]!.trim();
    if (l === "" || HERD_MARKER.test(l)) {
      // Only look back to the start of the last run: an older run's error is not this crash's.
      if (/^\[herd: (started|adopted)/.test(l)) break;
      continue;
    }
    lastOwn ??= l;
    if (!FRAMING.test(l) && ERRORISH.test(l)) return clip(l);
  }
  return lastOwn === null ? null : clip(lastOwn);
}

/** Keep status lines and log fields readable: one error line, at most 300 characters. */
function clip(l: string): string {
  return l.length > 300 ? `${l.slice(0, 299)}…` : l;
}
