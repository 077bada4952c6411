// `herd run` with a kv_tier: the tier starts as one of the daemon's services, LMCache-style clients
// reach its RESP server (redis-cli as the real third-party client), and its figures are herd metrics.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cleanup, startHerd, tempDir, type HerdProc } from "../helpers/herd.ts";
import { peer } from "../helpers/peers.ts";
import { rawConnect } from "../helpers/raw-socket.ts";

const hasRedisCli = () => peer("redis-cli", ["redis-cli", "--version"]);

describe("the KV tier in herd run", () => {
  const dir = tempDir("herd-tier-e2e-");
  const shm = mkdtempSync("/dev/shm/herd-tier-e2e-");
  let herd: HerdProc | null = null;
  let respPort = 0;
  afterAll(async () => {
    await herd?.stop();
    cleanup(dir);
    rmSync(shm, { recursive: true, force: true });
  });

  test.skipIf(!hasRedisCli())("redis-cli stores and reads a block through herd's RESP server; /metrics shows the tier", async () => {
    const port = 23_000 + Math.floor(Math.random() * 5_000);
    respPort = port;
    herd = await startHerd(dir, `node: { data_dir: ${JSON.stringify(join(dir, "data"))} }
kv_tier:
  cpu: { size: 16MiB, path: ${JSON.stringify(join(shm, "cpu"))} }
  ssd: { size: 64MiB, path: ${JSON.stringify(join(dir, "ssd"))} }
  resp: { listen: "127.0.0.1:${port}" }
`);
    const cli = (...args: string[]) => {
      const r = Bun.spawnSync(["redis-cli", "-p", String(port), ...args], { stdout: "pipe", stderr: "pipe" });
      return r.stdout.toString().trim();
    };
    expect(cli("PING")).toBe("PONG");
    expect(cli("SET", "lmcache:block:1", "x".repeat(4096))).toBe("OK");
    expect(cli("GET", "lmcache:block:1")).toBe("x".repeat(4096));
    expect(cli("EXISTS", "lmcache:block:1", "nope")).toBe("1");
    // The sim engine herd started offloads to this tier (its command line names the RESP server).
    const dry = Bun.spawnSync([process.execPath, "src/cli.ts", "run", "--config", herd.configPath, "--dry-run"], { cwd: join(import.meta.dir, "../.."), stdout: "pipe", stderr: "pipe" });
    expect(dry.stdout.toString()).toContain(`--kv-offload-url resp://127.0.0.1:${port}`);
    const metrics = await (await fetch(`${herd.url}/metrics`)).text();
    expect(metrics).toMatch(/herd_kv_tier_objects\{tier="cpu"\} 1/);
    const fig = (await (await fetch(`${herd.url}/admin/kv-tier`)).json()) as { tiers: { tier: string; objects: number; capacity_bytes: number }[] };
    expect(fig.tiers.find((t) => t.tier === "cpu")).toMatchObject({ objects: 1, capacity_bytes: 16 * 1024 * 1024 });
    // The tier's thread answers for its own heap, by name (issue 22); the JSON guard's thread has
    // not started (no large body yet) and says so instead of holding the route.
    const mem = (await (await fetch(`${herd.url}/admin/debug/memory?gc=1`)).json()) as { gc: boolean; threads: Record<string, { gc?: boolean; heap_used_bytes?: number; error?: string }> };
    expect(mem.gc).toBe(true);
    expect(mem.threads["kv-tier"]).toMatchObject({ gc: true });
    expect(mem.threads["kv-tier"]!.heap_used_bytes).toBeGreaterThan(0);
    expect(mem.threads["json-guard"]).toEqual({ error: "not_running" });
    expect(mem.threads["nixl-metadata"]).toBeUndefined(); // no P/D engines: no NIXL store
  }, 60_000);

  // Issue 22: a pipelined PING flood froze the daemon (its RESP server shared the event loop with
  // /health). Asserted as ordering, not time: /health answers while the flood's replies still flow.
  test.skipIf(!hasRedisCli())("1.5M pipelined PINGs on the RESP port: /health is answered while they are being served", async () => {
    expect(herd).not.toBeNull();
    const n = 1_500_000;
    const want = 7 * n;
    const sock = await rawConnect(respPort);
    sock.send(Buffer.from("PING\r\n".repeat(n)));
    const until = (bytes: number) => sock.until(bytes, 120_000);
    await until(7 * 1000);
    const health = await fetch(`${herd!.url}/health`);
    expect(health.status).toBe(200);
    expect(sock.bytes()).toBeLessThan(want); // answered in the middle of the flood
    await until(want);
    expect(sock.bytes()).toBe(want);
    sock.end();
  }, 120_000);
});
