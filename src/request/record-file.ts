// The decision log (config `decision_log`): decision records (record.ts) as JSON lines appended to
// a file that rotates by size, FILE → FILE.1 → … → FILE.<files> (the oldest is deleted), so the
// disk it takes is at most max_bytes × (files + 1). Lines are buffered and written when the
// buffer reaches buffer_bytes (so it never holds more) or once a second on the injected clock. A
// write error drops that buffer's lines (counted, logged once per failed flush) and never reaches
// a request.
import { closeSync, existsSync, fstatSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import type { Clock, TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { DecisionRecord } from "./record.ts";

export interface RecordFileOptions {
  path: string;
  maxBytes: number;
  files: number;
  bufferBytes: number;
  clock: Clock;
  log: Logger;
  flushEveryMs?: number;
}

export class RecordFile {
  private fd: number | null = null;
  private size = 0;
  private lines: string[] = [];
  private buffered = 0;
  private timer: TimerHandle | null = null;
  private closed = false;
  /** Lines dropped because a write failed. */
  dropped = 0;
  /** Lines written. */
  written = 0;

  constructor(private readonly o: RecordFileOptions) {}

  /** Open (or create) the file and start the flush timer. */
  start(): void {
    mkdirSync(dirname(this.o.path), { recursive: true });
    this.open();
    this.arm();
  }

  readonly write = (r: DecisionRecord): void => {
    if (this.closed) return;
    const line = `${JSON.stringify(r)}\n`;
    this.lines.push(line);
    this.buffered += line.length;
    if (this.buffered >= this.o.bufferBytes) this.flush();
  };

  /** Write what is buffered, rotating first when it would pass max_bytes. */
  flush(): void {
    if (this.lines.length === 0 || this.fd === null) return;
    const lines = this.lines;
    this.lines = [];
    this.buffered = 0;
    try {
      let chunk = "";
      let chunkBytes = 0;
      for (const line of lines) {
        const n = Buffer.byteLength(line);
        // Never rotate an empty file: a line longer than max_bytes gets a file of its own.
        if (this.size + chunkBytes + n > this.o.maxBytes && this.size + chunkBytes > 0) {
          this.append(chunk);
          chunk = "";
          chunkBytes = 0;
          this.rotate();
        }
        chunk += line;
        chunkBytes += n;
      }
      this.append(chunk);
      this.written += lines.length;
    } catch (e) {
      this.dropped += lines.length;
      this.o.log.warn("decision log write failed; lines dropped", { path: this.o.path, lines: lines.length, err: errorMessage(e) });
    }
  }

  /** Flush and close (the daemon's stop). */
  close(): void {
    this.flush();
    this.closed = true;
    this.timer?.cancel();
    this.timer = null;
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private arm(): void {
    if (this.closed) return;
    this.timer = this.o.clock.setTimer(this.o.flushEveryMs ?? 1000, () => {
      this.flush();
      this.arm();
    });
  }

  private open(): void {
    this.fd = openSync(this.o.path, "a", 0o640);
    this.size = fstatSync(this.fd).size;
  }

  private append(text: string): void {
    if (text === "" || this.fd === null) return;
    const b = Buffer.from(text);
    let off = 0;
    while (off < b.length) off += writeSync(this.fd, b, off, b.length - off);
    this.size += b.length;
  }

  private rotate(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    const p = this.o.path;
    if (this.o.files === 0) rmSync(p, { force: true });
    else {
      rmSync(`${p}.${this.o.files}`, { force: true });
      for (let i = this.o.files - 1; i >= 1; i--) if (existsSync(`${p}.${i}`)) renameSync(`${p}.${i}`, `${p}.${i + 1}`);
      if (existsSync(p)) renameSync(p, `${p}.1`);
    }
    this.open();
  }
}

/** The files of a decision log, oldest first (FILE.<n> … FILE.1, FILE): what `herd simulate --trace` reads. */
export function recordFiles(path: string, maxFiles = 100): string[] {
  const out: string[] = [];
  for (let i = maxFiles; i >= 1; i--) if (existsSync(`${path}.${i}`)) out.push(`${path}.${i}`);
  if (existsSync(path)) out.push(path);
  return out;
}
