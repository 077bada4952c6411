// Peer fetch end to end (issue 14): two `herd run` processes on loopback in one `peers` cluster (a
// token, both seeds), each with a small CPU tier under /dev/shm and a RESP server. redis-cli (the real
// third-party client) SETs a block on a's RESP server; a GET of it on b's RESP server returns the
// bytes, fetched from a over the token-checked peer API and kept in b's tier; a GET of a key nobody
// has is nil (a miss), not an error.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cleanup, portBase, startHerd, tempDir, waitFor, type HerdProc } from "../helpers/herd.ts";
import { peer } from "../helpers/peers.ts";

const hasRedisCli = () => peer("redis-cli", ["redis-cli", "--version"]);
const NAMES = ["a", "b"] as const;
type Name = (typeof NAMES)[number];

(hasRedisCli() ? describe : describe.skip)("peer fetch between two herd run nodes", () => {
  const dir = tempDir("herd-peer-fetch-e2e-");
  const shm = mkdtempSync("/dev/shm/herd-peer-fetch-e2e-");
  const base = portBase();
  const port = (n: Name) => base + NAMES.indexOf(n);
  const respPort = (n: Name) => base + 10 + NAMES.indexOf(n);
  const nodes = new Map<Name, HerdProc>();
  const logs = () => [...nodes].map(([n, h]) => `--- ${n} ---\n${h.log().slice(-2500)}`).join("\n");
  const cli = (n: Name, ...args: string[]) => {
    const r = Bun.spawnSync(["redis-cli", "-p", String(respPort(n)), ...args], { stdout: "pipe", stderr: "pipe" });
    return { out: r.stdout.toString().replace(/\n$/, ""), code: r.exitCode };
  };
  const admin = async (n: Name, path: string): Promise<any> => (await fetch(`http://127.0.0.1:${port(n)}/admin/${path}`, { signal: AbortSignal.timeout(2000) })).json();

  const config = (n: Name) => `node: { name: ${n}, data_dir: ${JSON.stringify(join(dir, n, "data"))} }
kv_tier:
  cpu: { size: 16MiB, path: ${JSON.stringify(join(shm, n))} }
  resp: { listen: "127.0.0.1:${respPort(n)}" }
cluster:
  discovery: peers
  token: e2e-peer-fetch-token
  peers: { seeds: ${JSON.stringify(NAMES.map((m) => `127.0.0.1:${port(m)}`))} }
`;

  beforeAll(async () => {
    await Promise.all(
      NAMES.map(async (n) => {
        mkdirSync(join(dir, n));
        nodes.set(n, await startHerd(join(dir, n), config(n), { args: ["--listen", `127.0.0.1:${port(n)}`], readyTimeoutMs: 30_000 }));
      }),
    );
    for (const n of NAMES)
      await waitFor(`${n} sees the other node alive`, async () => ((await admin(n, "cluster")).nodes as any[]).filter((m) => m.state === "alive").length === 2, 15_000, logs);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([...nodes.values()].map((h) => h.stop(5_000)));
    cleanup(dir);
    rmSync(shm, { recursive: true, force: true });
  });

  test("a block SET on a is read on b (fetched from a, then local); a key nobody has is nil", async () => {
    const key = "llama@1@0@00c0/ffee%2F@bfloat16"; // "/" and "%" travel in one URL path segment
    const value = Array.from({ length: 3000 }, (_, i) => String.fromCharCode(97 + (i % 26))).join("");
    expect(cli("a", "SET", key, value).out).toBe("OK");
    expect(cli("b", "EXISTS", "some-other-key").out).toBe("0");
    const t0 = performance.now();
    expect(cli("b", "GET", key)).toEqual({ out: value, code: 0 });
    const fetchMs = performance.now() - t0;
    const miss = cli("b", "GET", "nobody-has-this-key");
    expect(miss).toEqual({ out: "", code: 0 }); // redis-cli prints nil as an empty line when not on a tty
    expect(cli("b", "EXISTS", key).out).toBe("1"); // kept in b's tier
    const b = await admin("b", "kv-tier");
    expect(b.tiers.find((t: any) => t.tier === "cpu").objects).toBe(1);
    expect(b.resp).toMatchObject({ remote_hits: 1 });
    expect(b.resp.remote_misses).toBeGreaterThanOrEqual(2); // EXISTS some-other-key, GET nobody-has-this-key
    const metrics = await (await fetch(`http://127.0.0.1:${port("b")}/metrics`)).text();
    expect(metrics).toMatch(/herd_kv_tier_resp_remote_lookups_total\{result="hit"\} 1/);
    console.log(`peer fetch: GET of a 3000-byte block on b via a took ${fetchMs.toFixed(1)} ms (redis-cli process included)`);
  }, 30_000);
});
