// A logger that records its lines in memory, for tests that assert on what herd logged.
import { createLogger, type Logger } from "../../src/core/log.ts";

export function memoryLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const l = createLogger("test", { level: "debug", sink: { write: (x) => lines.push(x) }, timestamps: false, json: false });
  return Object.assign(l, { lines });
}
