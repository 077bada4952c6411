// A TCP proxy for one directed link between two nodes (A dials B through it), controllable from the
// test: `up`, `delay` (each chunk forwarded after delayMs), `drop` (accepts and swallows bytes: a
// black hole, requests time out), `cut` (closes every connection and refuses new ones).
// The partition tests put one proxy on every directed link (node A's `dial` map points at it).
import type { Socket, TCPSocketListener } from "bun";

export type LinkMode = "up" | "delay" | "drop" | "cut";

interface Pair {
  client: Socket<Pair>;
  upstream: Socket<unknown> | null;
  pending: Uint8Array[];
}

export class LinkProxy {
  mode: LinkMode = "up";
  delayMs = 0;
  private server: TCPSocketListener<Pair> | null = null;
  private readonly pairs = new Set<Pair>();

  constructor(readonly targetPort: number) {}

  get port(): number {
    return this.server!.port;
  }

  set(mode: LinkMode, delayMs = 0): void {
    this.mode = mode;
    this.delayMs = delayMs;
    if (mode === "cut" || mode === "drop") for (const p of this.pairs) this.close(p);
  }

  private close(p: Pair): void {
    this.pairs.delete(p);
    p.client.end();
    p.upstream?.end();
  }

  private forward(to: Socket<any> | null, data: Uint8Array, p: Pair): void {
    if (this.mode === "drop" || this.mode === "cut") return;
    const copy = new Uint8Array(data);
    if (this.mode === "delay" && this.delayMs > 0) setTimeout(() => this.pairs.has(p) && to?.write(copy), this.delayMs);
    else to?.write(copy);
  }

  async start(): Promise<void> {
    const self = this;
    this.server = Bun.listen<Pair>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        async open(client) {
          const p: Pair = { client, upstream: null, pending: [] };
          client.data = p;
          if (self.mode === "cut") return void client.end();
          self.pairs.add(p);
          try {
            p.upstream = await Bun.connect({
              hostname: "127.0.0.1",
              port: self.targetPort,
              socket: {
                data(_s, data) {
                  self.forward(client, data, p);
                },
                close() {
                  self.close(p);
                },
                error() {
                  self.close(p);
                },
              },
            });
            for (const d of p.pending) self.forward(p.upstream, d, p);
            p.pending = [];
          } catch {
            self.close(p);
          }
        },
        data(client, data) {
          const p = client.data;
          if (!p.upstream) p.pending.push(new Uint8Array(data));
          else self.forward(p.upstream, data, p);
        },
        close(client) {
          if (client.data) self.close(client.data);
        },
        error(client) {
          if (client.data) self.close(client.data);
        },
      },
    });
  }

  stop(): void {
    for (const p of this.pairs) this.close(p);
    this.server?.stop(true);
  }
}
