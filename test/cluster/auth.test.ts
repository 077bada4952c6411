// Peer API authentication: the cluster token as Bearer, 401 (logged, rate limited) otherwise, and
// no token → loopback only (the service refuses to start on a non-loopback address).
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { clusterRoutes } from "../../src/cluster/routes.ts";
import { ClusterService } from "../../src/cluster/service.ts";
import { loadToken } from "../../src/cluster/auth.ts";
import { removeDir, tempDir } from "./harness/cluster.ts";

function service(opts: { token?: string; address?: string; seeds?: string[]; discovery?: "file" | "peers"; shared?: boolean } = {}) {
  const dir = tempDir("auth");
  const config = defaultConfig();
  config.node.name = "a";
  config.node.data_dir = dir;
  config.cluster.discovery = opts.discovery ?? "file";
  config.cluster.token = opts.token ?? "";
  config.cluster.peers.seeds = opts.seeds ?? [];
  if (opts.shared) config.cluster.file.dir = join(dir, "shared");
  const log = memoryLogger();
  const clock = new VirtualClock(0);
  const svc = new ClusterService({ config, address: opts.address ?? "127.0.0.1:9", clock, rng: new SeededRng(1), log });
  return { svc, log, clock, dir, app: clusterRoutes(svc) };
}

const view = (app: ReturnType<typeof clusterRoutes>, headers: Record<string, string>, ip: string | null) =>
  app.fetch(new Request("http://x/cluster/v1/view", { headers }), { ip });

describe("peer API auth", () => {
  test("with a token: Bearer required, 401 otherwise, rejections logged at most once per 10 s", async () => {
    const { app, log, clock, dir } = service({ token: "s3cret" });
    expect((await view(app, { authorization: "Bearer s3cret" }, "10.0.0.5")).status).toBe(200);
    expect((await view(app, {}, "127.0.0.1")).status).toBe(401); // loopback does not bypass a token
    expect((await view(app, { authorization: "Bearer wrong" }, "10.0.0.5")).status).toBe(401);
    for (let i = 0; i < 50; i++) await view(app, {}, "10.0.0.6");
    const warned = () => log.lines.filter((l) => l.includes("unauthenticated peer request rejected"));
    expect(warned().length).toBe(1);
    clock.advance(10_000);
    await view(app, {}, "10.0.0.6");
    expect(warned().length).toBe(2);
    expect(warned()[1]).toContain("suppressed=51");
    removeDir(dir);
  });

  test("without a token: loopback callers only", async () => {
    const { app, dir } = service();
    expect((await view(app, {}, "127.0.0.1")).status).toBe(200);
    expect((await view(app, {}, "10.0.0.5")).status).toBe(401);
    expect((await view(app, {}, null)).status).toBe(401);
    removeDir(dir);
  });

  test("without a token, a non-loopback address or seed refuses to start", async () => {
    const a = service({ address: "10.0.0.1:8000", shared: true });
    await expect(a.svc.start()).rejects.toThrow(/refusing to start on non-loopback address 10.0.0.1:8000 without cluster.token/);
    const b = service({ discovery: "peers", seeds: ["127.0.0.1:9", "10.0.0.2:8000"] });
    await expect(b.svc.start()).rejects.toThrow(/10.0.0.2:8000/);
    const c = service({ token: "x", address: "10.0.0.1:8000" });
    await c.svc.start();
    await c.svc.stop();
    // The default (file records in this node's own data dir) is one host: nobody can join, nothing is exposed.
    const d = service({ address: "10.0.0.1:8000" });
    await d.svc.start();
    await d.svc.stop();
    for (const s of [a, b, c, d]) removeDir(s.dir);
  });

  test("token_file: first line, trimmed; empty or missing files are errors", () => {
    const dir = tempDir("tok");
    const f = join(dir, "token");
    writeFileSync(f, "abc123  \nignored\n");
    expect(loadToken({ token: "", token_file: f })).toBe("abc123");
    expect(loadToken({ token: "inline", token_file: "" })).toBe("inline");
    writeFileSync(f, "\n");
    expect(() => loadToken({ token: "", token_file: f })).toThrow(/is empty/);
    expect(() => loadToken({ token: "", token_file: join(dir, "nope") })).toThrow(/cluster.token_file/);
    // issue 22: a device or FIFO is refused at once (it read /dev/zero until ENOMEM, a FIFO blocked)
    expect(() => loadToken({ token: "", token_file: "/dev/zero" })).toThrow(/cluster.token_file \/dev\/zero: not a regular file/);
    const fifo = join(dir, "fifo");
    expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
    expect(() => loadToken({ token: "", token_file: fifo })).toThrow(/not a regular file/);
    writeFileSync(f, "x".repeat(70_000));
    expect(() => loadToken({ token: "", token_file: f })).toThrow(/larger than 65536 bytes/);
    removeDir(dir);
  });
});
