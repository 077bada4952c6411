// herd's NIXL metadata store on its own thread (nixl-worker.ts runs NixlMetadataService in a Bun
// Worker), for the same reason as the KV tier's (src/tier/README.md "Where the tier runs"): its
// clients' work must not delay routing, /health or cluster heartbeats. A `Service` with the same
// `port`/`endpoint` as NixlMetadataService, known once start() resolves. A thread that dies is logged
// and started again on the same port after RESTART_DELAY_MS (agents reconnect and publish again; an
// agent that already published must be restarted to be found, as with a restarted etcd).
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Service } from "../core/service.ts";
import type { NixlMetadataOptions } from "./nixl-metadata.ts";
import { type ThreadMemory, type ThreadMemoryAnswer, ThreadMemoryAsker } from "../core/thread-memory.ts";

export type NixlThreadOptions = Omit<NixlMetadataOptions, "clock" | "log">;
export type ToNixl = { t: "start"; options: NixlThreadOptions } | { t: "memory"; id: number; gc: boolean } | { t: "stop" };
export type FromNixl =
  | { t: "started"; port: number; error?: string }
  | { t: "memory"; id: number; m: ThreadMemory }
  | { t: "log"; level: "debug" | "info" | "warn" | "error"; msg: string; fields?: Record<string, unknown> }
  | { t: "stopped" };

export const RESTART_DELAY_MS = 1000;

/** Next to this file from source; in a compiled binary under /$bunfs/root/ (scripts/build.sh lists
 * it) at a path relative to the entry points' common directory: tried in order, as the tokenizer
 * pool does (src/preprocess/pool.ts). */
function workerUrls(): string[] {
  const m = /^(file:\/\/\/\$bunfs\/root\/)/.exec(import.meta.url);
  if (!m) return [new URL("./nixl-worker.ts", import.meta.url).href];
  return ["src/pd/nixl-worker.ts", "pd/nixl-worker.ts", "nixl-worker.ts"].map((p) => m[1] + p);
}

export class NixlMetadataThread implements Service {
  readonly name = "nixl-metadata";
  private worker: Worker | null = null;
  private bound = 0;
  private stopping = false;
  private restartTimer: TimerHandle | null = null;
  restarts = 0;
  /** GET /admin/debug/memory's questions to the thread, each with its own deadline. */
  private readonly mem: ThreadMemoryAsker;

  constructor(private readonly o: NixlThreadOptions & { clock: Clock; log: Logger }) {
    this.mem = ThreadMemoryAsker.overWorker(o.clock, () => this.worker, (id, gc) => ({ t: "memory", id, gc }) satisfies ToNixl);
  }

  /** The thread's own heap (after a GC on it when `gc`); "timeout" when it does not answer in time. */
  memory(gc: boolean, timeoutMs: number): Promise<ThreadMemoryAnswer> {
    return this.mem.ask(gc, timeoutMs);
  }

  get port(): number {
    return this.bound || this.o.port;
  }

  get endpoint(): string {
    const h = this.o.host.includes(":") ? `[${this.o.host}]` : this.o.host;
    return `${h}:${this.port}`;
  }

  async start(): Promise<void> {
    this.stopping = false;
    this.bound = await this.spawn(this.o.port);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.restartTimer?.cancel();
    const w = this.worker;
    this.worker = null;
    this.mem.failAll();
    if (!w) return;
    await new Promise<void>((resolve) => {
      const wedged = this.o.clock.setTimer(2000, resolve); // a wedged thread is terminated anyway
      w.onmessage = (ev: MessageEvent<FromNixl>) => {
        if (ev.data.t !== "stopped") return;
        wedged.cancel();
        resolve();
      };
      w.postMessage({ t: "stop" } satisfies ToNixl);
    });
    w.terminate();
  }

  private spawn(port: number, at = 0): Promise<number> {
    const urls = workerUrls();
    return new Promise((resolve, reject) => {
      const w = new Worker(urls[at]!);
      this.worker = w;
      let started = false;
      w.onmessage = (ev: MessageEvent<FromNixl>) => {
        const m = ev.data;
        if (m.t === "log") this.o.log[m.level](m.msg, m.fields);
        else if (m.t === "memory") this.mem.answer(m.id, m.m);
        else if (m.t === "started") {
          started = true;
          if (m.error) {
            this.worker = null;
            w.terminate();
            reject(new Error(`nixl metadata store: ${m.error}`));
          } else resolve(m.port);
        }
      };
      const died = (why: string) => {
        if (this.worker !== w || this.stopping) return;
        this.worker = null;
        this.mem.failAll();
        if (!started && why.includes("ModuleNotFound") && at + 1 < urls.length) return void this.spawn(port, at + 1).then(resolve, reject);
        if (!started) return reject(new Error(`nixl metadata thread: ${why}`));
        this.o.log.error("nixl metadata thread died; restarting", { reason: why, restart_in_ms: RESTART_DELAY_MS });
        this.restartTimer = this.o.clock.setTimer(RESTART_DELAY_MS, () => {
          if (this.stopping) return;
          this.restarts++;
          this.spawn(this.bound).catch((e: Error) => this.o.log.error("nixl metadata thread did not come back", { error: e.message }));
        });
      };
      w.onerror = (ev) => died(ev.message);
      w.addEventListener("close", () => died("exited"));
      const { clock: _c, log: _l, ...options } = this.o;
      w.postMessage({ t: "start", options: { ...options, port } } satisfies ToNixl);
    });
  }
}
