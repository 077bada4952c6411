// One logger for the daemon. Plain `level component: message key=value` lines; a timestamp is
// added unless systemd's journal already stamps each line (JOURNAL_STREAM is set by systemd).
// HERD_LOG=debug|info|warn|error sets the level, HERD_LOG_FORMAT=json switches to JSON lines.

export type Level = "debug" | "info" | "warn" | "error";
const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(component: string): Logger;
  /**
   * False when debug lines are dropped: a hot path may skip building a debug line's fields
   * (the router's per-request "routed" line). Absent (a hand-made logger): assume they are kept.
   */
  readonly debugEnabled?: boolean;
}

export interface LogSink {
  write(line: string): void;
}

const stderrSink: LogSink = { write: (line) => process.stderr.write(line + "\n") };

function envLevel(): Level {
  const v = (process.env.HERD_LOG ?? "info").toLowerCase();
  return v in order ? (v as Level) : "info";
}

function fmtValue(v: unknown): string {
  if (typeof v === "string") return /[\s="]/.test(v) ? JSON.stringify(v) : v;
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Error) return JSON.stringify(v.message);
  return JSON.stringify(v) ?? "undefined";
}

export function createLogger(
  component = "herd",
  opts: { level?: Level; sink?: LogSink; json?: boolean; timestamps?: boolean } = {},
): Logger {
  const level = opts.level ?? envLevel();
  const sink = opts.sink ?? stderrSink;
  const json = opts.json ?? process.env.HERD_LOG_FORMAT === "json";
  const timestamps = opts.timestamps ?? !process.env.JOURNAL_STREAM;
  const emit = (lvl: Level, msg: string, fields?: Record<string, unknown>) => {
    if (order[lvl] < order[level]) return;
    if (json) {
      const rec: Record<string, unknown> = { ts: new Date().toISOString(), level: lvl, component, msg };
      for (const [k, v] of Object.entries(fields ?? {})) rec[k] = typeof v === "bigint" ? v.toString() : v instanceof Error ? v.message : v;
      sink.write(JSON.stringify(rec));
      return;
    }
    let line = `${lvl.padEnd(5)} ${component}: ${msg}`;
    for (const [k, v] of Object.entries(fields ?? {})) line += ` ${k}=${fmtValue(v)}`;
    sink.write(timestamps ? `${new Date().toISOString()} ${line}` : line);
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    child: (c) => createLogger(`${component}.${c}`, { level, sink, json, timestamps }),
    debugEnabled: order.debug >= order[level],
  };
}
