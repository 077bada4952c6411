// One connect() endpoint of a socket: dials over Bun TCP, and redials with exponential backoff
// (options.ts reconnectDelayMs) after every failed attempt or lost connection, until stopped.
import type { TimerHandle } from "../../core/clock.ts";
import { errorMessage } from "../../core/errors.ts";
import type { ZmtpConnection } from "./connection.ts";
import type { Endpoint } from "./options.ts";
import { reconnectDelayMs } from "./options.ts";
import type { BunSocket, ConnBox, ZmtpSocket } from "./socket.ts";

/** One connect() endpoint: dials, and redials with exponential backoff after every loss. */
export class Dialer {
  private attempt = 0;
  private timer: TimerHandle | undefined;
  private conn: ZmtpConnection | undefined;
  private stopped = false;

  constructor(
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    private readonly owner: ZmtpSocket<any>,
    private readonly endpoint: string,
    private readonly addr: Endpoint,
  ) {}

  dial(): void {
    this.timer = undefined;
    if (this.stopped) return;
    let failed = false;
    const fail = (e: unknown): void => {
      if (failed || this.stopped) return;
      failed = true;
      this.owner.emit({ type: "connect_failed", endpoint: this.endpoint, reason: errorMessage(e) });
      this.schedule(false);
    };
    const base = this.owner.handlers(
      () => this.endpoint,
      (s) => {
        if (this.stopped) return undefined;
        const c = this.owner.newConnection(s, `${this.endpoint} (local :${s.localPort})`);
        this.conn = c;
        return c;
      },
    );
    const handlers = { ...base, connectError: (_s: BunSocket, e: Error) => fail(e) };
    try {
      Bun.connect<ConnBox>({ hostname: this.addr.host, port: this.addr.port, data: {}, socket: handlers }).catch(fail);
    } catch (e) {
      fail(e);
    }
  }

  /** Called by the owner's onReady/onClosed through the connection lifecycle. */
  connectionReady(): void {
    this.attempt = 0;
  }

  connectionClosed(c: ZmtpConnection, protocolError: boolean): void {
    if (c !== this.conn) return;
    this.conn = undefined;
    if (!this.stopped) this.schedule(protocolError);
  }

  owns(c: ZmtpConnection): boolean {
    return c === this.conn;
  }

  private schedule(protocolError: boolean): void {
    if (this.stopped || this.timer) return;
    // After a protocol error wait the longest delay: the peer is likely to refuse us again.
    const o = this.owner.options;
    const delay = protocolError
      ? Math.max(o.reconnectIvlMs, o.reconnectIvlMaxMs)
      : reconnectDelayMs(this.attempt++, o.reconnectIvlMs, o.reconnectIvlMaxMs, this.owner.jitter());
    this.timer = this.owner.timer(delay, () => this.dial());
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
    this.timer = undefined;
    this.conn?.close("socket closed");
    this.conn = undefined;
  }
}
