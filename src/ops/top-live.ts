// `herd top`'s loop: poll the admin API (GET /admin/cluster and /metrics, like `herd status`) every
// interval and redraw the frame (top.ts) in place on the terminal's alternate screen; `q` (or
// Ctrl-C) quits and restores the screen. A failed poll keeps the last frame with the error on it.
// `--once` prints one frame as plain text (two readings one interval apart) for scripts.
import type { Clock } from "../core/clock.ts";
import { wallClockMs } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { AdminClient, ClusterView } from "./client.ts";
import { readMetrics, renderTop, type Reading } from "./top.ts";

/** What the loop needs of a terminal (the process's in production, a fake in tests). */
export interface TopTerminal {
  readonly columns: number;
  readonly rows: number;
  write(text: string): void;
  /** Deliver key presses (raw mode) until the returned function is called. */
  keys(onKey: (key: string) => void): () => void;
}

const ALT_ON = "\x1b[?1049h\x1b[?25l"; // alternate screen, cursor hidden
const ALT_OFF = "\x1b[?25h\x1b[?1049l";
const HOME = "\x1b[H";
const CLEAR_LINE = "\x1b[K";
const CLEAR_BELOW = "\x1b[J";

export interface TopOptions {
  client: Pick<AdminClient, "cluster" | "metrics">;
  clock: Clock;
  intervalMs: number;
}

const hhmmss = () => new Date(wallClockMs()).toTimeString().slice(0, 8);

async function poll(o: TopOptions): Promise<{ view: ClusterView; reading: Reading }> {
  const [view, text] = await Promise.all([o.client.cluster(), o.client.metrics()]);
  return { view, reading: readMetrics(text, o.clock.now()) };
}

/** One frame as plain text: two readings one interval apart (rates need both). */
export async function topOnce(o: TopOptions, columns = 200, rows = 1000): Promise<string> {
  const first = await poll(o);
  await o.clock.sleep(o.intervalMs);
  const second = await poll(o);
  return renderTop({ view: second.view, cur: second.reading, prev: first.reading, intervalMs: o.intervalMs, clock: hhmmss(), columns, rows }).join("\n");
}

/** Redraw until `q`; resolves with the exit code (0). */
export async function topLive(o: TopOptions, term: TopTerminal): Promise<number> {
  let quit = false;
  let wake: () => void = () => {};
  const unkey = term.keys((k) => {
    if (k === "q" || k === "Q" || k === "\x03") {
      quit = true;
      wake();
    }
  });
  term.write(ALT_ON);
  let prev: Reading | null = null;
  let last: { view: ClusterView; reading: Reading } | null = null;
  try {
    while (!quit) {
      let error: string | null = null;
      try {
        const now = await poll(o);
        if (last) prev = last.reading;
        last = now;
      } catch (e) {
        error = errorMessage(e);
      }
      if (quit) break;
      const lines = last
        ? renderTop({ view: last.view, cur: last.reading, prev, intervalMs: o.intervalMs, clock: hhmmss(), columns: term.columns, rows: term.rows, error })
        : [`herd top: ${error ?? "connecting…"}`, "", "q quit"];
      // Raw mode: a line feed does not return the carriage, so every line ends in \r\n.
      term.write(HOME + lines.map((l) => l + CLEAR_LINE).join("\r\n") + CLEAR_BELOW);
      await Promise.race([o.clock.sleep(o.intervalMs), new Promise<void>((r) => (wake = r))]);
    }
  } finally {
    unkey();
    term.write(ALT_OFF);
  }
  return 0;
}

/** The process's own terminal; null when stdin or stdout is not one. */
export function processTerminal(): TopTerminal | null {
  const { stdin, stdout } = process;
  if (!stdin.isTTY || !stdout.isTTY) return null;
  return {
    get columns() {
      return stdout.columns || 80;
    },
    get rows() {
      return stdout.rows || 24;
    },
    write: (t) => void stdout.write(t),
    keys(onKey) {
      const on = (b: Buffer) => {
        for (const ch of b.toString("utf8")) onKey(ch);
      };
      stdin.setRawMode(true);
      stdin.resume();
      stdin.on("data", on);
      return () => {
        stdin.off("data", on);
        stdin.setRawMode(false);
        stdin.pause();
      };
    },
  };
}
