// kv_tier config keys, the sizing refusal, and TierService end to end: RESP on a real port, figures
// for GET /admin/kv-tier, the same figures as metrics (checked by promtool when installed).
import { afterAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Registry } from "prom-client";
import { RealClock, VirtualClock } from "../../src/core/clock.ts";
import { mkdirSync } from "node:fs";
import { parseConfigText, renderFindings } from "../../src/config/index.ts";
import { parseSize } from "../../src/config/checks.ts";
import { sizingProblems } from "../../src/tier/sizing.ts";
import { TierService } from "../../src/tier/service.ts";
import { peer } from "../helpers/peers.ts";
import { cleanupDirs, tempDirs, valueOf } from "./helpers.ts";
import { cmd, transcript } from "./resp-helpers.ts";

afterAll(cleanupDirs);
const env = { hostname: "h", dataDir: "/srv/herd" };
const parse = (yaml: string) => parseConfigText(yaml, "herd.yaml", env);

describe("kv_tier config", () => {
  test("the public contract parses; sizes take binary and decimal units", () => {
    const r = parse(`kv_tier:
  cpu: { size: 64GiB, path: /dev/shm/herd }
  ssd: { size: 1TiB, path: /nvme/herd }
  resp: { listen: 127.0.0.1:6390, password_file: /etc/herd/resp.password }
  shared_dirs: [ { path: /nvme/vllm-fs, size: 2TiB } ]
`);
    expect(renderFindings(r.findings, "herd.yaml")).toBe("");
    expect(r.config!.kv_tier.cpu).toEqual({ size: "64GiB", path: "/dev/shm/herd" });
    expect(parseSize("64GiB")).toBe(64 * 1024 ** 3);
    expect(parseSize("100GB")).toBe(100e9);
    expect(parseSize("4096")).toBe(4096);
    expect(parseSize("1.5MiB")).toBe(1.5 * 1024 ** 2);
    for (const bad of ["", "64 gigs", "-1GiB", "0", "1PiB"]) expect(parseSize(bad)).toBeNull();
  });

  test("findings: a bad size, an exposed RESP without password, overlapping paths", () => {
    const r = parse(`kv_tier:
  cpu: { size: 64 gigs }
  ssd: { size: 1TiB, path: /dev/shm/herd/ssd }
  resp: { listen: 0.0.0.0:6390 }
`);
    const text = renderFindings(r.findings, "herd.yaml");
    expect(text).toContain("kv_tier.cpu.size: expected a size such as 64GiB");
    expect(text).toContain("herd.yaml:2");
    const r2 = parse(`kv_tier:
  ssd: { size: 1TiB, path: /dev/shm/herd/ssd }
  cpu: { size: 1GiB }
  resp: { listen: 0.0.0.0:6390 }
`);
    const t2 = renderFindings(r2.findings, "herd.yaml");
    expect(t2).toContain("kv_tier.resp.password_file: required when kv_tier.resp.listen (0.0.0.0:6390) is not a loopback address");
    expect(t2).toContain("kv_tier.ssd.path: overlaps kv_tier.cpu.path (/dev/shm/herd)");
  });

  test("the old reserved form `kv_tier: {}` still means off", () => {
    const r = parse("kv_tier: {}\n");
    expect(r.findings).toEqual([]);
    expect(r.config!.kv_tier).toEqual({ cpu: null, ssd: null, resp: null, shared_dirs: [], thread: "worker" });
  });
});

describe("sizing", () => {
  test("refuses a CPU tier larger than /dev/shm or the memory limit, an SSD tier larger than the disk", () => {
    const G = 1024 ** 3;
    const p = sizingProblems({ cpuBytes: 64 * G, cpuPath: "/dev/shm/herd", ssdBytes: 2048 * G, ssdPath: "/nvme/herd" }, {
      cpuAvailableBytes: 32 * G,
      memoryMaxBytes: 48 * G,
      ssdAvailableBytes: 1000 * G,
    });
    expect(p).toHaveLength(3);
    expect(p[0]).toContain("kv_tier.cpu.size (64.0 GiB) does not fit /dev/shm/herd: 32.0 GiB available");
    expect(p[1]).toContain("Raise MemoryMax");
    expect(p[2]).toContain("kv_tier.ssd.size (2048.0 GiB) does not fit /nvme/herd");
    expect(sizingProblems({ cpuBytes: G, cpuPath: "/x" }, { cpuAvailableBytes: 2 * G, memoryMaxBytes: 4 * G })).toEqual([]);
  });

  test("TierService.start refuses with the message; nothing is left running", async () => {
    const { shm, disk } = tempDirs();
    const cfg = parse(`node: { data_dir: ${disk} }\nkv_tier:\n  cpu: { size: 64GiB, path: ${shm} }\n`).config!;
    const svc = new TierService({ config: cfg, clock: new RealClock(), facts: () => ({ cpuAvailableBytes: 1024 ** 3 }) });
    await expect(svc.start()).rejects.toThrow(/kv_tier does not fit this host:\n {2}kv_tier.cpu.size \(64.0 GiB\) does not fit/);
    expect(svc.tier).toBeUndefined();
  });
});

describe("TierService", () => {
  test("cpu+ssd+resp+shared dir: RESP works, figures and metrics agree, the lock names this process, data survives stop/start", async () => {
    const { shm, disk } = tempDirs();
    const pw = join(disk, "pw");
    writeFileSync(pw, "s3cret\n");
    const cfg = parse(`node: { data_dir: ${disk} }
kv_tier:
  cpu: { size: 1MiB, path: ${shm} }
  ssd: { size: 4MiB, path: ${disk}/ssd }
  resp: { listen: 127.0.0.1:0, password_file: ${pw} }
  shared_dirs: [ { path: ${disk}/vllm-fs, size: 1MiB } ]
`);
    expect(renderFindings(cfg.findings, "herd.yaml")).toBe("");
    const svc = new TierService({ config: cfg.config!, clock: new RealClock(), bootId: "b1" });
    await svc.start();
    const port = svc.resp!.port;
    const v = valueOf("x", 0, 300 * 1024);
    const r = await transcript(port, Buffer.concat([cmd("AUTH", "s3cret"), ...[0, 1, 2, 3].map((i) => cmd("SET", `k${i}`, v)), cmd("GET", "k0"), cmd("GET", "nope")]), (b) =>
      b.toString("latin1").endsWith("$-1\r\n"),
    );
    expect(r.bytes.subarray(0, 30).toString()).toBe("+OK\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n$307200\r\n".slice(0, 30));
    const f = svc.figures();
    expect(f.tiers.map((t) => t.tier)).toEqual(["cpu", "ssd"]);
    const [cpu, ssd] = f.tiers;
    expect(cpu!.capacity_bytes).toBe(1024 * 1024);
    expect(cpu!.used_bytes).toBeLessThanOrEqual(1024 * 1024);
    expect(cpu!.objects + ssd!.objects).toBe(4);
    expect(cpu!.evictions).toBeGreaterThan(0);
    expect(ssd!.hits + cpu!.hits).toBe(1);
    expect(f.resp!.commands).toBe(7);
    expect(f.shared_dirs[0]!.capacity_bytes).toBe(1024 * 1024);

    const registry = new Registry();
    svc.registerMetrics(registry);
    const text = await registry.metrics();
    expect(text).toContain(`herd_kv_tier_capacity_bytes{tier="cpu"} 1048576`);
    expect(text).toContain(`herd_kv_tier_objects{tier="ssd"} ${ssd!.objects}`);
    expect(text).toContain(`herd_kv_tier_resp_commands_total 7`);
    if (peer("promtool", ["promtool", "--version"])) {
      const p = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: Buffer.from(text) });
      expect(p.stdout.toString() + p.stderr.toString()).not.toMatch(/error/i);
    }
    const second = new TierService({ config: cfg.config!, clock: new RealClock(), bootId: "b1" });
    const fake = (await import("node:fs")).readFileSync(join(disk, "ssd", "tier.lock"), "utf8");
    expect(Number(fake)).toBe(process.pid);
    await svc.stop();
    // After stop the lock is released and the data survives a restart.
    await second.start();
    expect(second.tier!.has("k3")).toBe(true);
    await second.stop();
  });
});

test("shared dirs only: rescanned every SHARED_SCAN_INTERVAL_MS on the injected clock, bounded to capacity", async () => {
  const { disk } = tempDirs();
  const dir = join(disk, "vllm-fs");
  const cfg = parse(`node: { data_dir: ${disk} }\nkv_tier:\n  shared_dirs: [ { path: ${dir}, size: 128KiB } ]\n`).config!;
  const clock = new VirtualClock(0);
  const svc = new TierService({ config: cfg, clock, bootId: "b" });
  await svc.start();
  expect(svc.tier).toBeUndefined();
  mkdirSync(join(dir, "m_0123456789ab_r0", "abc", "de_g0"), { recursive: true });
  for (let i = 0; i < 4; i++) writeFileSync(join(dir, "m_0123456789ab_r0", "abc", "de_g0", `${i}.bin`), valueOf("f", i, 64 * 1024));
  expect(svc.figures().shared_dirs[0]!.objects).toBe(0); // not scanned yet
  clock.advance(5000);
  const f = svc.figures().shared_dirs[0]!;
  expect(f.objects).toBe(2);
  expect(f.used_bytes).toBe(128 * 1024);
  expect(f.evictions).toBe(2);
  await svc.stop();
  expect(clock.pending).toBe(0); // the scan timer is cancelled
});
