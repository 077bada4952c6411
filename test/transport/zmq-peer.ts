// Drives test/fixtures/zmq/peer.py (a real libzmq socket via python3-zmq) from tests.
import { createHash } from "node:crypto";
import { PYTHON } from "../helpers/peers.ts";

export interface PeerFrame {
  b64?: string;
  len?: number;
  sha256?: string;
}

export interface PeerEvent {
  event: string;
  endpoint?: string;
  frames?: PeerFrame[];
  name?: string;
}

const SCRIPT = new URL("../fixtures/zmq/peer.py", import.meta.url).pathname;

export class PyPeer {
  readonly events: PeerEvent[] = [];
  endpoint = "";
  private waiters: (() => void)[] = [];
  private readonly proc: ReturnType<typeof Bun.spawn<"pipe", "pipe", "inherit">>;

  private constructor(args: string[]) {
    this.proc = Bun.spawn([PYTHON, SCRIPT, ...args], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    void this.read();
  }

  static async start(args: string[], timeoutMs = 5000): Promise<PyPeer> {
    const p = new PyPeer(args);
    const ready = await p.waitFor((e) => e.event === "ready", timeoutMs);
    p.endpoint = ready.endpoint!;
    return p;
  }

  private async read(): Promise<void> {
    const dec = new TextDecoder();
    let buf = "";
    for await (const chunk of this.proc.stdout) {
      buf += dec.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) this.events.push(JSON.parse(line) as PeerEvent);
      }
      for (const w of this.waiters.splice(0)) w();
    }
  }

  /** The first event (from the start) matching pred, waiting up to timeoutMs. */
  async waitFor(pred: (e: PeerEvent) => boolean, timeoutMs = 5000, from = 0): Promise<PeerEvent> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const hit = this.events.slice(from).find(pred);
      if (hit) return hit;
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`peer: no matching event within ${timeoutMs} ms; saw ${JSON.stringify(this.events.slice(-5)).slice(0, 500)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  messages(): Uint8Array[][] {
    return this.events.filter((e) => e.event === "msg").map((e) => e.frames!.map(decodeFrame));
  }

  command(cmd: Record<string, unknown>): void {
    this.proc.stdin.write(JSON.stringify(cmd) + "\n");
    this.proc.stdin.flush();
  }

  send(frames: (Uint8Array | string | { fill: number; len: number })[]): void {
    this.command({
      op: "send",
      frames: frames.map((f) => (typeof f === "string" || f instanceof Uint8Array ? { b64: Buffer.from(f).toString("base64") } : f)),
    });
  }

  signal(sig: "SIGSTOP" | "SIGCONT"): void {
    this.proc.kill(sig);
  }

  async kill(): Promise<void> {
    this.proc.kill("SIGKILL");
    await this.proc.exited;
  }
}

/** Frames as bytes; frames over 4096 bytes come back as a marker "len:sha256". */
export function decodeFrame(f: PeerFrame): Uint8Array {
  if (f.b64 !== undefined) return new Uint8Array(Buffer.from(f.b64, "base64"));
  return new TextEncoder().encode(`${f.len}:${f.sha256}`);
}

export function digestMarker(b: Uint8Array): string {
  return `${b.length}:${createHash("sha256").update(b).digest("hex")}`;
}

export const text = (b: Uint8Array | undefined): string => new TextDecoder().decode(b);
