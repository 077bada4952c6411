import { spawn, type Subprocess } from "bun";

/** A port that was free a moment ago (for redis-server, which cannot report the port it bound). */
export function freePort(): number {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const p = l.port;
  l.stop(true);
  return p;
}

/**
 * Send `input` (pieces: one after another, `pauseMs` after each so the server reads them apart), all
 * of it (a write may take only part; the rest follows as the socket drains), and collect replies
 * until `done(bytes)` or the server closes; `waitMs` (5 s) safety bound.
 */
export async function transcript(port: number, input: Uint8Array | string | readonly Uint8Array[], done: (b: Buffer) => boolean = () => false, waitMs = 5000, pauseMs = 0): Promise<{ bytes: Buffer; closed: boolean }> {
  const got: Buffer[] = [];
  let closed = false;
  let resolve!: () => void;
  const finished = new Promise<void>((r) => (resolve = r));
  const sock = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_s, d) {
        got.push(Buffer.from(d));
        if (done(Buffer.concat(got))) resolve();
      },
      close() {
        closed = true;
        resolve();
      },
      error() {
        resolve();
      },
    },
  });
  const parts = typeof input === "string" ? [Buffer.from(input, "latin1")] : input instanceof Uint8Array ? [input] : input;
  for (const p of parts) {
    let rest = p;
    while (rest.length > 0 && !closed) {
      rest = rest.subarray(Math.max(0, sock.write(rest)));
      if (rest.length > 0) await Bun.sleep(1);
    }
    if (pauseMs > 0) await Bun.sleep(pauseMs);
  }
  const guard = Bun.sleep(waitMs).then(() => "timeout");
  await Promise.race([finished, guard]);
  sock.end();
  return { bytes: Buffer.concat(got), closed };
}

export async function startRedis(extra: string[] = []): Promise<{ port: number; proc: Subprocess }> {
  const port = freePort();
  const proc = spawn(["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...extra], {
    stdout: "ignore",
    stderr: "ignore",
  });
  for (let i = 0; i < 200; i++) {
    const r = Bun.spawnSync(["redis-cli", "-p", String(port), ...(extra.includes("--requirepass") ? ["--no-auth-warning", "-a", extra[extra.indexOf("--requirepass") + 1]!] : []), "PING"]);
    if (r.stdout.toString().includes("PONG")) return { port, proc };
    await Bun.sleep(25);
  }
  proc.kill();
  throw new Error("redis-server did not start");
}

/** Encode a command as a RESP multibulk. */
export function cmd(...args: (string | Uint8Array)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = typeof a === "string" ? Buffer.from(a, "latin1") : Buffer.from(a);
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from("\r\n"));
  }
  return Buffer.concat(parts);
}
