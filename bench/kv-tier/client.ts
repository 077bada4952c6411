// The one RESP client both servers are driven by in bench/kv-tier.ts: one connection, one request
// in flight (like LMCache's native client per worker), requests written in one write, replies
// parsed incrementally without concatenating the payload.
import type { Socket } from "bun";

const CRLF = Buffer.from("\r\n");

/** The value both RESP benches send: 64 KiB of random bytes repeated (bench/kv-tier.ts, resp-set.ts). */
export function benchValue(n: number): Uint8Array {
  const b = new Uint8Array(n);
  crypto.getRandomValues(b.subarray(0, Math.min(n, 65536)));
  for (let i = 65536; i < n; i += 65536) b.copyWithin(i, 0, 65536);
  return b;
}

export class BenchClient {
  private pending: { resolve: (n: number) => void; reject: (e: Error) => void } | undefined;
  private header = "";
  private need = -1; // payload bytes + CRLF still to skip for a bulk reply
  private got = 0;

  private constructor(private sock: Socket<undefined>) {}

  static async connect(port: number): Promise<BenchClient> {
    let self!: BenchClient;
    const sock = await Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        data: (_s, d) => self.onData(d),
        drain: () => self.flush(),
        close: () => self.pending?.reject(new Error("closed")),
      },
    });
    self = new BenchClient(sock);
    return self;
  }

  private queue: Uint8Array[] = [];

  set(key: string, v: Uint8Array): Promise<number> {
    const head = Buffer.from(`*3\r\n$3\r\nSET\r\n$${key.length}\r\n${key}\r\n$${v.length}\r\n`);
    // One write per request, as LMCache's native client does with writev: separate small writes
    // would meet Nagle's algorithm and delayed ACKs and measure those instead of the servers.
    return this.send([Buffer.concat([head, v, CRLF])]);
  }

  get(key: string): Promise<number> {
    return this.send([Buffer.from(`*2\r\n$3\r\nGET\r\n$${key.length}\r\n${key}\r\n`)]);
  }

  close(): void {
    this.sock.end();
  }

  private send(parts: Uint8Array[]): Promise<number> {
    this.queue.push(...parts);
    const p = new Promise<number>((resolve, reject) => (this.pending = { resolve, reject }));
    this.flush();
    return p;
  }

  private flush(): void {
    while (this.queue.length > 0) {
      const c = this.queue[0]!;
      const n = this.sock.write(c);
      if (n < c.length) {
        this.queue[0] = c.subarray(Math.max(0, n));
        return;
      }
      this.queue.shift();
    }
  }

  private onData(d: Uint8Array): void {
    let i = 0;
    while (i < d.length) {
      if (this.need >= 0) {
        const take = Math.min(this.need, d.length - i);
        this.need -= take;
        i += take;
        if (this.need === 0) {
          this.need = -1;
          this.done(this.got);
        }
        continue;
      }
      const nl = d.indexOf(10, i);
      if (nl < 0) {
        this.header += Buffer.from(d.subarray(i)).toString("latin1");
        return;
      }
      this.header += Buffer.from(d.subarray(i, nl + 1)).toString("latin1");
      i = nl + 1;
      const h = this.header;
      this.header = "";
      if (h[0] === "$") {
        const n = Number(h.slice(1, -2));
        if (n < 0) this.done(-1);
        else {
          this.got = n;
          this.need = n + 2;
        }
      } else if (h[0] === "-") this.pending?.reject(new Error(h.trim()));
      else this.done(0);
    }
  }

  private done(n: number): void {
    const p = this.pending;
    this.pending = undefined;
    p?.resolve(n);
  }
}
