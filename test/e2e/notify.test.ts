// systemd readiness: with NOTIFY_SOCKET set, `herd run` sends READY=1 once it listens and a worker
// is ready, STOPPING=1 on SIGTERM, exits 0 — and engines do not inherit NOTIFY_SOCKET. A python3
// datagram socket stands in for systemd (real systemd-notify is used to send).
import { expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { cleanup, portBase, startHerd, tempDir, type HerdProc } from "../helpers/herd.ts";
import { PYTHON, peer } from "../helpers/peers.ts";

const LISTENER = `
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(0.2)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    sys.stdout.write(d.decode().replace("\\n", " ") + "\\n")
    sys.stdout.flush()
`;

const hasNotify = peer("systemd-notify", ["systemd-notify", "--help"]);

test.skipIf(!hasNotify)("READY=1 after the first ready worker, SIGHUP survives, STOPPING=1 on SIGTERM, exit 0", async () => {
  const dir = tempDir("herd-notify-");
  let h: HerdProc | null = null;
  let listener: ReturnType<typeof Bun.spawn> | null = null;
  try {
    const sock = join(dir, "notify.sock");
    listener = Bun.spawn([PYTHON, "-c", LISTENER, sock, "30"], { stdout: "pipe", stderr: "inherit" });
    for (let i = 0; i < 200 && !existsSync(sock); i++) await Bun.sleep(25);
    expect(existsSync(sock)).toBe(true);
    h = await startHerd(
      dir,
      `node: { name: nt, data_dir: ${JSON.stringify(join(dir, "data"))} }
supervisor: { port_range_start: ${portBase()}, health_interval_ms: 100 }
models: [{ name: nt-sim }]
engines: [{ kind: sim, model: nt-sim, count: 1, args: ["--time-scale", "50"] }]
`,
      { env: { NOTIFY_SOCKET: sock } },
    );
    const herd = h.proc;
    const log = h.log;
    // The engine's environment must not carry NOTIFY_SOCKET (it could otherwise speak for the unit).
    const pid = Number(/engine started worker=\S+ pid=(\d+)/.exec(log())?.[1]);
    expect(pid).toBeGreaterThan(0);
    expect(readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").some((v) => v.startsWith("NOTIFY_SOCKET="))).toBe(false);
    // SIGHUP (a config reload) is logged and herd keeps serving.
    herd.kill("SIGHUP");
    const t1 = performance.now();
    while (!log().includes("SIGHUP") && performance.now() - t1 < 5000) await Bun.sleep(25);
    expect(log()).toContain("received SIGHUP");
    expect((await fetch(`${h.url}/livez`)).status).toBe(200);
    expect(herd.exitCode).toBeNull();
    await Bun.sleep(300); // let systemd-notify deliver READY=1
    herd.kill("SIGTERM");
    expect(await herd.exited).toBe(0);
    await Bun.sleep(300);
    listener.kill();
    const got = await new Response(listener.stdout as ReadableStream<Uint8Array>).text();
    const lines = got.trim().split("\n");
    const ready = lines.findIndex((l) => l.includes("READY=1"));
    const stopping = lines.findIndex((l) => l.includes("STOPPING=1"));
    expect(ready).toBeGreaterThanOrEqual(0);
    expect(stopping).toBeGreaterThan(ready);
  } finally {
    // A failed assertion must not leave herd (and its engines) running after the test.
    await h?.stop();
    listener?.kill();
    cleanup(dir);
  }
}, 40_000);
