// Supervisor wiring for the KV tier: what a sim or vLLM engine gets with kv_tier.resp set. The sim's
// own flag parser accepts its flags; vLLM's JSON and LMCache's keys are the ones checked in their
// sources (src/tier/engine-flags.ts cites them).
import { expect, test } from "bun:test";
import { parseSimArgs } from "../../src/engine/sim/options.ts";
import { LMCACHE_KV_TRANSFER_CONFIG, simTierFlags, tierRespUrl, vllmTierLaunch } from "../../src/tier/engine-flags.ts";
import { tierPassword } from "../../src/tier/launch.ts";
import { defaultConfig } from "../../src/config/index.ts";
import type { KvTierConfig } from "../../src/config/types.ts";

const tier = (listen: string | null, password_file = ""): KvTierConfig => ({ cpu: { size: "1GiB", path: "/dev/shm/herd" }, ssd: null, resp: listen === null ? null : { listen, password_file, peer_fetch_max: 64, peer_fetch_timeout_ms: 500, key_max_bytes: 1024, output_total_max_bytes: 256 << 20, idle_timeout_ms: 0, auth_timeout_ms: 10_000, direct_recv: false }, shared_dirs: [], thread: "main" });

test("the URL engines dial: loopback as configured, wildcards → loopback, IPv6 bracketed", () => {
  expect(tierRespUrl(tier("127.0.0.1:6390"))).toBe("resp://127.0.0.1:6390");
  expect(tierRespUrl(tier("0.0.0.0:6390", "/p"))).toBe("resp://127.0.0.1:6390");
  expect(tierRespUrl(tier("[::]:6390", "/p"))).toBe("resp://[::1]:6390");
  expect(tierRespUrl(tier("10.0.0.5:7000", "/p"))).toBe("resp://10.0.0.5:7000");
  expect(tierRespUrl(tier(null))).toBeNull();
});

test("sim: offload flags the sim engine's parser accepts", () => {
  expect(simTierFlags(tier(null))).toEqual([]);
  const argv = simTierFlags(tier("127.0.0.1:6390", "/etc/herd/resp.password"), { bytesPerBlock: 2359296, loadGbPerS: 25 });
  expect(argv).toEqual(["--kv-offload-url", "resp://127.0.0.1:6390", "--kv-offload-password-file", "/etc/herd/resp.password", "--kv-offload-bytes-per-block", "2359296", "--kv-offload-load-gb-per-s", "25"]);
  const o = parseSimArgs(["--model", "m", ...argv])!;
  expect(o).toMatchObject({ kvOffloadUrl: "resp://127.0.0.1:6390", kvOffloadPasswordFile: "/etc/herd/resp.password", kvOffloadBytesPerBlock: 2359296, kvOffloadLoadGbPerS: 25 });
  expect(() => parseSimArgs(["--kv-offload-url", "http://x:1"])).toThrow("--kv-offload-url: expected resp://HOST:PORT");
});

test("vLLM: LMCacheConnectorV1 kv_both, LMCache's remote backend at the tier; the password only in the env, redacted for --dry-run", () => {
  expect(vllmTierLaunch(tier(null), null)).toBeNull();
  const l = vllmTierLaunch(tier("127.0.0.1:6390"), null);
  expect(l).toEqual({
    argv: ["--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'],
    env: { LMCACHE_REMOTE_URL: "resp://127.0.0.1:6390", LMCACHE_REMOTE_SERDE: "naive", LMCACHE_SAVE_UNFULL_CHUNK: "False", LMCACHE_LOCAL_CPU: "False" },
  });
  expect(JSON.parse(LMCACHE_KV_TRANSFER_CONFIG)).toEqual({ kv_connector: "LMCacheConnectorV1", kv_role: "kv_both" });
  const p = vllmTierLaunch(tier("0.0.0.0:6390", "/p"), "s3cret") as { argv: string[]; env: Record<string, string> };
  expect(JSON.parse(p.env.LMCACHE_EXTRA_CONFIG!)).toEqual({ password: "s3cret" });
  expect(p.argv.join(" ")).not.toContain("s3cret");
  // `herd run --dry-run` (src/cli.ts) passes tierPassword(config, true): the file is not even read.
  const c = defaultConfig({ hostname: "h", dataDir: "/tmp/herd-tier-flags" });
  c.kv_tier = tier("0.0.0.0:6390", "/nonexistent/password");
  const shown = vllmTierLaunch(c.kv_tier, tierPassword(c, true)) as { env: Record<string, string> };
  expect(JSON.parse(shown.env.LMCACHE_EXTRA_CONFIG!)).toEqual({ password: "<redacted>" });
});

test("vLLM with P/D's connector already set: a conflict, not a second --kv-transfer-config", () => {
  const r = vllmTierLaunch(tier("127.0.0.1:6390"), null, ["vllm", "serve", "m", "--kv-transfer-config", '{"kv_connector":"NixlConnector"}']);
  expect(r).toEqual({ conflict: expect.stringContaining("vLLM takes one KV connector") });
});
