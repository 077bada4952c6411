// The simulated engine's KV transfer for P/D (vLLM NixlConnector's contract, not NIXL's wire): a
// prefill engine holds a finished request's prompt blocks and serves their bytes over TCP on its
// side channel (VLLM_NIXL_SIDE_CHANNEL_HOST/_PORT); a decode engine pulls them, so a transfer takes
// real time (bytes per block × blocks, optionally paced), then the prefill side frees them. Blocks
// nobody pulls are freed when the lease (kv_lease_duration) expires; expirations are counted.
//
// Wire (sim only): the puller sends one JSON line {"engine_id","request_id","block_ids"}; the
// server answers a 9-byte header — u8 status (0 ok, 1 not held / expired, 2 wrong engine, 3 busy),
// u64 BE payload length — then the payload, and closes. A short payload is a failed transfer.
import type { Socket, TCPSocketListener } from "bun";
import type { Clock, TimerHandle } from "../../core/clock.ts";
import type { Rng } from "../../core/rng.ts";
import type { Block } from "./blocks.ts";

export const STATUS_OK = 0;
export const STATUS_NOT_HELD = 1;
export const STATUS_WRONG_ENGINE = 2;
export const STATUS_BUSY = 3;
const CHUNK = 64 * 1024;
const REQUEST_LINE_MAX = 1 << 20;
const ZEROS = new Uint8Array(CHUNK);

export interface KvFaults {
  /** Share of pulls the server cuts off halfway (the blocks stay held until the lease ends). */
  transferFailRate: number;
  /** Pacing of the payload, bytes per second; 0 = as fast as the socket takes it. */
  bytesPerS: number;
  /** Share of holds that expire at once, before any decode can pull them. */
  leaseExpireRate: number;
}

export interface HoldEvents {
  expired(): void;
  heldBlocksChanged(n: number): void;
  served(bytes: number, ok: boolean): void;
}

interface Held {
  blocks: Block[];
  ids: number[];
  timer: TimerHandle | null;
  busy: boolean;
}

interface Conn {
  buf: string;
  handled: boolean;
  drain: (() => void) | null;
}

/** Prefill side: held blocks and the side-channel server that hands them out. */
export class KvHoldServer {
  private readonly held = new Map<string, Held>();
  private listener: TCPSocketListener<Conn> | null = null;
  private heldBlocks = 0;

  constructor(
    private readonly o: {
      engineId: string;
      leaseMs: number;
      bytesPerBlock: number;
      faults: KvFaults;
      clock: Clock;
      rng: Rng;
      release: (blocks: Block[]) => void;
      events: HoldEvents;
    },
  ) {}

  /** Bind the side channel; returns the bound port (0 asks for an ephemeral one). */
  listen(host: string, port: number): number {
    this.listener = Bun.listen<Conn>({
      hostname: host,
      port,
      socket: {
        open: (s) => void (s.data = { buf: "", handled: false, drain: null }),
        data: (s, chunk) => this.onData(s, chunk),
        drain: (s) => s.data.drain?.(),
        close: (s) => s.data.drain?.(),
        error: () => {},
      },
    });
    return this.listener.port;
  }

  /**
   * Hold a finished prefill's blocks under its request id until pulled or the lease ends. False
   * when the lease-expiry fault fires: the hold expires at once (counted), the caller frees them.
   */
  hold(requestId: string, blocks: Block[]): boolean {
    if (this.o.faults.leaseExpireRate > 0 && this.o.rng.float() < this.o.faults.leaseExpireRate) {
      this.o.events.expired();
      return false;
    }
    const h: Held = { blocks, ids: blocks.map((b) => b.id), timer: null, busy: false };
    this.held.set(requestId, h);
    this.setHeld(this.heldBlocks + blocks.length);
    this.arm(requestId, h, this.o.leaseMs);
    return true;
  }

  get heldRequests(): number {
    return this.held.size;
  }

  /** Free everything (engine stop). */
  close(): void {
    for (const id of [...this.held.keys()]) this.free(id);
    this.listener?.stop(true);
    this.listener = null;
  }

  private arm(id: string, h: Held, ms: number): void {
    h.timer = this.o.clock.setTimer(ms, () => {
      h.timer = null;
      if (h.busy) return this.arm(id, h, Math.max(1, this.o.leaseMs / 3)); // a pull in progress renews it
      if (this.held.get(id) !== h) return;
      this.free(id);
      this.o.events.expired();
    });
  }

  private free(id: string): void {
    const h = this.held.get(id);
    if (h === undefined) return;
    this.held.delete(id);
    h.timer?.cancel();
    this.setHeld(this.heldBlocks - h.blocks.length);
    this.o.release(h.blocks);
  }

  private setHeld(n: number): void {
    this.heldBlocks = n;
    this.o.events.heldBlocksChanged(n);
  }

  private onData(s: Socket<Conn>, chunk: Buffer): void {
    if (s.data.handled) return;
    s.data.buf += chunk.toString("utf8");
    const nl = s.data.buf.indexOf("\n");
    if (nl < 0) {
      if (s.data.buf.length > REQUEST_LINE_MAX) s.end();
      return;
    }
    s.data.handled = true;
    let req: { engine_id?: unknown; request_id?: unknown; block_ids?: unknown };
    try {
      req = JSON.parse(s.data.buf.slice(0, nl));
    } catch {
      s.end();
      return;
    }
    const id = String(req.request_id ?? "");
    const h = this.held.get(id);
    // SGLang pairs name a bootstrap room, not an engine (sim key "room:<n>").
    const status = req.engine_id !== this.o.engineId && !id.startsWith("room:") ? STATUS_WRONG_ENGINE : h === undefined ? STATUS_NOT_HELD : h.busy ? STATUS_BUSY : STATUS_OK;
    if (status !== STATUS_OK || h === undefined) {
      s.write(header(status, 0));
      s.end();
      return;
    }
    const total = h.blocks.length * this.o.bytesPerBlock;
    const fail = this.o.faults.transferFailRate > 0 && this.o.rng.float() < this.o.faults.transferFailRate;
    h.busy = true;
    const n = fail ? Math.floor(total / 2) : total;
    this.send(s, header(STATUS_OK, total), n, (sentAll) => {
      h.busy = false;
      const ok = sentAll && !fail;
      this.o.events.served(n, ok);
      // A cut-off read leaves the blocks held (the decode side never confirmed): the lease frees them.
      if (ok) this.free(id);
    });
  }

  /** Write the header and `n` payload bytes, paced at bytesPerS, then close and call done. */
  private send(s: Socket<Conn>, head: Uint8Array, n: number, done: (sentAll: boolean) => void): void {
    let pending: Uint8Array | null = head;
    let left = n;
    const rate = this.o.faults.bytesPerS;
    let finished = false;
    const finish = (sentAll: boolean) => {
      if (finished) return;
      finished = true;
      s.end();
      done(sentAll);
    };
    const pump = (): void => {
      for (;;) {
        if (pending !== null) {
          const w = s.write(pending);
          if (finished) return;
          if (s.readyState <= 0) return finish(false); // the puller went away
          if (w < pending.length) {
            pending = pending.subarray(w);
            return; // wait for drain
          }
          pending = null;
        }
        if (left === 0) return finish(true);
        const k = Math.min(CHUNK, left);
        left -= k;
        pending = ZEROS.subarray(0, k);
        if (rate > 0) {
          this.o.clock.setTimer((k / rate) * 1000, pump);
          return;
        }
      }
    };
    s.data.drain = pump;
    pump();
  }
}

function header(status: number, len: number): Uint8Array {
  const b = new Uint8Array(9);
  b[0] = status;
  new DataView(b.buffer).setBigUint64(1, BigInt(len));
  return b;
}

export class KvPullError extends Error {
  override name = "KvPullError";
}

/** Decode side: pull a remote prefill's blocks; resolves with the bytes read, rejects on any failure. */
export function pullBlocks(o: {
  host: string;
  port: number;
  engineId: string;
  requestId: string;
  blockIds: number[];
  clock: Clock;
  timeoutMs: number;
  signal?: AbortSignal;
}): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let head = new Uint8Array(0);
    let expected = -1;
    let got = 0;
    let settled = false;
    let sock: Socket<undefined> | null = null;
    const settle = (err: Error | null) => {
      if (settled) return;
      settled = true;
      timer.cancel();
      o.signal?.removeEventListener("abort", onAbort);
      sock?.end();
      if (err) reject(err);
      else resolve(got);
    };
    const timer = o.clock.setTimer(o.timeoutMs, () => settle(new KvPullError(`KV transfer from ${o.host}:${o.port} timed out after ${o.timeoutMs} ms`)));
    const onAbort = () => settle(new KvPullError("KV transfer aborted"));
    o.signal?.addEventListener("abort", onAbort, { once: true });
    Bun.connect({
      hostname: o.host,
      port: o.port,
      socket: {
        open: (s) => {
          sock = s;
          if (settled) return void s.end();
          s.write(JSON.stringify({ engine_id: o.engineId, request_id: o.requestId, block_ids: o.blockIds }) + "\n");
        },
        data: (_s, chunk) => {
          let c: Uint8Array = chunk;
          if (expected < 0) {
            const joined = new Uint8Array(head.length + c.length);
            joined.set(head);
            joined.set(c, head.length);
            if (joined.length < 9) return void (head = joined);
            const status = joined[0]!;
            expected = Number(new DataView(joined.buffer, joined.byteOffset).getBigUint64(1));
            if (status !== STATUS_OK) return settle(new KvPullError(`remote prefill ${o.engineId} refused the transfer (${statusText(status)})`));
            c = joined.subarray(9);
          }
          got += c.length;
          if (got >= expected) settle(null);
        },
        close: () => settle(expected >= 0 && got >= expected ? null : new KvPullError(`KV transfer from ${o.host}:${o.port} cut off after ${got} of ${Math.max(expected, 0)} bytes`)),
        error: (_s, e) => settle(new KvPullError(`KV transfer from ${o.host}:${o.port}: ${e.message}`)),
        connectError: (_s, e) => settle(new KvPullError(`KV transfer: cannot reach ${o.host}:${o.port}: ${e.message}`)),
      },
    }).catch((e: unknown) => settle(new KvPullError(`KV transfer: cannot reach ${o.host}:${o.port}: ${e instanceof Error ? e.message : String(e)}`)));
  });
}

function statusText(s: number): string {
  return s === STATUS_NOT_HELD ? "blocks not held: pulled already or lease expired" : s === STATUS_WRONG_ENGINE ? "engine id mismatch" : s === STATUS_BUSY ? "another pull in progress" : `status ${s}`;
}
