// The KV tier's thread (issue 22, README "Where the tier runs"): a Bun Worker running the whole tier
// — catalog, media, RESP server, shared-directory scans — as an in-process TierService, so its work
// (parsing 1.5M pipelined PINGs, copying 16 MiB GET replies, SQLite commits) never runs on the
// daemon's event loop. It talks to the daemon only through messages (tier-thread.ts has the other
// end and the message types):
//   in:  start, put, peer-get, entries, figures, remote-found, remote-available, memory, stop
//   out: started, changes (batched per turn), figures (pushed every second and on request), got,
//        entries, remote-get (a local RESP miss for the daemon's peer fetch), memory (this thread's
//        heap, src/core/thread-memory.ts), stopped
import { RealClock } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import { heapStats } from "bun:jsc";
import { measureThreadMemory } from "../core/thread-memory.ts";
import type { TierChange } from "./index-feed.ts";
import type { RemoteTierSource } from "./resp/remote.ts";
import { TierService } from "./service.ts";
import { directRecvLine } from "./resp/direct-recv.ts";
import type { FromTier, ToTier } from "./tier-thread.ts";

declare const self: Worker;

const FIGURES_EVERY_MS = 1000;
const clock = new RealClock({ unref: true });
let svc: TierService | undefined;
let changes: TierChange[] = [];
let remoteAvailable = false;
let nextRemote = 1;
const remoteWaits = new Map<number, (v: Uint8Array | null) => void>();

const post = (m: FromTier, transfer: ArrayBuffer[] = []) => self.postMessage(m, transfer);

function onChange(c: TierChange): void {
  if (changes.length === 0) queueMicrotask(flushChanges);
  changes.push(c);
}

function flushChanges(): void {
  const list = changes;
  changes = [];
  if (list.length > 0) post({ t: "changes", list });
}

const remote: RemoteTierSource = {
  available: () => remoteAvailable,
  get: (key) =>
    new Promise((resolve) => {
      const id = nextRemote++;
      remoteWaits.set(id, resolve);
      post({ t: "remote-get", id, key });
    }),
};

function pushFigures(): void {
  if (!svc) return;
  post({ t: "figures", f: svc.figures() });
  clock.setTimer(FIGURES_EVERY_MS, pushFigures);
}

self.onmessage = async (ev: MessageEvent<ToTier>) => {
  const m = ev.data;
  switch (m.t) {
    case "start": {
      remoteAvailable = m.remoteAvailable;
      try {
        svc = new TierService({ config: m.config, clock, inProcess: true, onChange, ...(m.remote ? { remote } : {}), ...(m.bootId ? { bootId: m.bootId } : {}) });
        await svc.start();
        post({ t: "started", port: svc.resp?.port ?? null, ...(svc.resp ? { direct: directRecvLine(svc.resp.directOff) } : {}) });
        pushFigures();
      } catch (e) {
        post({ t: "started", port: null, error: errorMessage(e) });
      }
      return;
    }
    case "put":
      svc?.put(m.key, m.data);
      return;
    case "peer-get": {
      const hit = (svc?.peerGet(m.key) as { data: Uint8Array; crc32: number } | null | undefined) ?? null;
      post({ t: "got", id: m.id, hit }, hit ? [hit.data.buffer as ArrayBuffer] : []);
      return;
    }
    case "entries":
      post({ t: "entries", id: m.id, list: svc?.tier ? [...svc.tier.entries()] : [] });
      return;
    case "figures":
      if (svc) post({ t: "figures", id: m.id, f: svc.figures() });
      return;
    case "remote-found": {
      const w = remoteWaits.get(m.id);
      remoteWaits.delete(m.id);
      w?.(m.data);
      return;
    }
    case "remote-available":
      remoteAvailable = m.v;
      return;
    case "memory":
      post({ t: "memory", id: m.id, m: measureThreadMemory(m.gc, heapStats) });
      return;
    case "stop":
      flushChanges();
      await svc?.stop();
      svc = undefined;
      for (const w of remoteWaits.values()) w(null);
      remoteWaits.clear();
      post({ t: "stopped" });
      return;
  }
};
