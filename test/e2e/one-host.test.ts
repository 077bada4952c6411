// Several `herd run` nodes on one host (the way to try a cluster before having the hosts): three
// herds with their own data dirs and the same supervisor.port_range_start, started at the same time,
// bring every engine up with no restart (host-wide port leases, src/engine/port-leases.ts). A
// crash-looping engine's cause shows in `herd status` and in /admin/cluster's `last_error`, and a
// node whose peers refuse its cluster token says so, naming the peer.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { cleanup, herdCli, portBase, startHerd, tempDir, until, type HerdProc } from "../ops/helpers.ts";

const herds: HerdProc[] = [];
const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(herds.map((h) => h.stop()));
  for (const d of dirs) cleanup(d);
});

const admin = async (h: HerdProc): Promise<any> => (await fetch(`${h.url}/admin/cluster`, { signal: AbortSignal.timeout(3000) })).json();

describe("herds on one host", () => {
  test("three nodes started at once, one port range: every engine ready, none restarted, no port shared", async () => {
    const base = portBase();
    const yaml = (dir: string, name: string) => `node: { name: ${name}, data_dir: ${JSON.stringify(join(dir, "data"))} }
supervisor: { port_range_start: ${base}, health_interval_ms: 100, restart_backoff_initial_ms: 100, stop_timeout_ms: 2000 }
models: [{ name: oh-sim }]
engines: [{ kind: sim, model: oh-sim, count: 2, args: ["--time-scale", "50"] }]
`;
    const names = ["oh1", "oh2", "oh3"];
    const started = await Promise.all(
      names.map((n) => {
        const dir = tempDir(`herd-${n}-`);
        dirs.push(dir);
        return startHerd(dir, yaml(dir, n));
      }),
    );
    herds.push(...started);
    const views = await Promise.all(
      started.map(async (h) => {
        let view: any = null;
        await until("both engines ready", async () => {
          view = await admin(h);
          return view.workers.length === 2 && view.workers.every((w: any) => w.state === "ready");
        }, 30_000).catch((e) => {
          throw new Error(`${e.message}\n${h.log().slice(-3000)}`);
        });
        return view;
      }),
    );
    for (const [i, v] of views.entries()) {
      expect(v.workers.map((w: any) => w.restarts)).toEqual([0, 0]);
      expect(v.workers.map((w: any) => w.last_error)).toEqual([null, null]);
      expect(started[i]!.log()).not.toContain("engine down");
    }
    const ports = views.flatMap((v) => v.workers.map((w: any) => Number(new URL(w.url).port)));
    expect(new Set(ports).size).toBe(6);
    for (const p of ports) expect(p).toBeGreaterThanOrEqual(base);
  }, 90_000);

  test("a crash-looping engine's last error line is in herd status, /admin/cluster and the engine-down line", async () => {
    const dir = tempDir("herd-crash-");
    dirs.push(dir);
    const cause = "RuntimeError: CUDA error: no kernel image is available for execution on the device";
    const yaml = `node: { name: cr, data_dir: ${JSON.stringify(join(dir, "data"))} }
supervisor: { port_range_start: ${portBase()}, health_interval_ms: 100, restart_backoff_initial_ms: 200, restart_backoff_max_ms: 400, stop_timeout_ms: 2000 }
models: [{ name: cr-sim }]
engines:
  - { kind: sim, model: cr-sim, count: 1, args: ["--time-scale", "50"] }
  - { kind: command, model: cr-sim, count: 1, command: ["sh", "-c", "echo 'INFO loading weights'; echo '${cause}' >&2; exit 1"] }
`;
    const h = await startHerd(dir, yaml);
    herds.push(h);
    let view: any = null;
    await until("the crash's cause in /admin/cluster", async () => {
      view = await admin(h);
      return view.workers.some((w: any) => w.id === "cr/command-0" && w.last_error === cause);
    }, 20_000);
    expect(view.workers.find((w: any) => w.id === "cr/sim-0").last_error).toBeNull();
    const status = await herdCli(["status", "--url", h.url]);
    expect(status.code).toBe(0);
    const lines = status.out.split("\n");
    const row = lines.findIndex((l) => l.startsWith("cr/command-0"));
    expect(row).toBeGreaterThan(0);
    expect(lines[row + 1]).toBe(`  last error: ${cause}`);
    expect(h.log()).toMatch(/engine down, restarting after backoff worker=cr\/command-0 .*last_error="RuntimeError: CUDA error: no kernel image/);
  }, 60_000);

  test("a peer refusing the cluster token is a warning naming it", async () => {
    const base = portBase();
    const addr = (i: number) => `127.0.0.1:${base + 100 + i}`;
    const yaml = (dir: string, i: number, token: string) => `node: { name: tk${i}, data_dir: ${JSON.stringify(join(dir, "data"))} }
frontend: { listen: ${addr(i)} }
supervisor: { port_range_start: ${base + 200 + i * 10} }
models: [{ name: tk-sim }]
engines: [{ kind: sim, model: tk-sim, count: 1, args: ["--time-scale", "50"] }]
cluster:
  discovery: peers
  token: ${token}
  peers: { seeds: ["${addr(0)}", "${addr(1)}"] }
`;
    const two = await Promise.all(
      [0, 1].map((i) => {
        const dir = tempDir(`herd-tk${i}-`);
        dirs.push(dir);
        return startHerd(dir, yaml(dir, i, i === 0 ? "token-one" : "token-two"), ["--listen", addr(i)]);
      }),
    );
    herds.push(...two);
    const m = await two[0]!.waitLog(/warn .*peer refused our cluster token.*/, 20_000);
    expect(m[0]).toContain(`peer=${addr(1)}`);
    expect(m[0]).toContain("status=401");
    // Rate-limited: gossip and votes retry every beat, the warning does not.
    await Bun.sleep(1500);
    const count = (two[0]!.log().match(/peer refused our cluster token/g) ?? []).length;
    expect(count).toBeLessThanOrEqual(2);
  }, 60_000);
});
