// The NIXL metadata store's thread (nixl-thread.ts has the other end): the TCPStore server runs in
// a Bun Worker so that parsing and answering its clients (values up to 64 MiB) never runs on the
// daemon's event loop. Its log lines go to the daemon's logger as messages.
//   in:  start {options}, memory {id, gc}, stop
//   out: started {port | error}, log {level, msg, fields}, memory {id, m} (this thread's heap,
//        src/core/thread-memory.ts), stopped
import { RealClock } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import { heapStats } from "bun:jsc";
import { measureThreadMemory } from "../core/thread-memory.ts";
import type { Logger } from "../core/log.ts";
import { NixlMetadataService } from "./nixl-metadata.ts";
import type { FromNixl, ToNixl } from "./nixl-thread.ts";

declare const self: Worker;
const post = (m: FromNixl) => self.postMessage(m);

function forwardingLog(): Logger {
  const at =
    (level: "debug" | "info" | "warn" | "error") =>
    (msg: string, fields?: Record<string, unknown>) =>
      post({ t: "log", level, msg, ...(fields ? { fields } : {}) });
  const log: Logger = { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error"), child: () => log };
  return log;
}

let svc: NixlMetadataService | undefined;

self.onmessage = (ev: MessageEvent<ToNixl>) => {
  const m = ev.data;
  if (m.t === "start") {
    try {
      svc = new NixlMetadataService({ ...m.options, clock: new RealClock({ unref: true }), log: forwardingLog() });
      svc.start();
      post({ t: "started", port: svc.port });
    } catch (e) {
      post({ t: "started", port: 0, error: errorMessage(e) });
    }
  } else if (m.t === "memory") {
    post({ t: "memory", id: m.id, m: measureThreadMemory(m.gc, heapStats) });
  } else {
    svc?.stop();
    svc = undefined;
    post({ t: "stopped" });
  }
};
