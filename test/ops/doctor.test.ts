// `herd doctor` as a user runs it: fake `nvidia-smi`, `vllm`, `python3` (sglang) and `trtllm-serve`
// scripts on PATH in a temp dir, configs written per test, a port held by the test, a fake peer
// API, and one real `herd run` as a cluster seed. Output: one line per check, exit 1 on any FAIL.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cardMismatches, clockOffsetMs } from "../../src/ops/doctor-cluster.ts";
import { compareVersions, parseVersion } from "../../src/ops/doctor-engines.ts";
import { doctorJson, renderDoctor, runDoctor } from "../../src/ops/doctor.ts";
import { systemProbe, type DoctorProbe } from "../../src/ops/doctor-probe.ts";
import { parseConfigText } from "../../src/config/index.ts";
import { secretFileModeProblem } from "../../src/config/secret-perms.ts";
import { cleanup, herdCli, portBase, startHerd, tempDir, type HerdProc } from "./helpers.ts";

let dir = "";
let bin = "";
beforeAll(() => {
  dir = tempDir("herd-doctor-");
  bin = join(dir, "bin");
  mkdirSync(bin);
});
afterAll(() => cleanup(dir));

/** A fake executable on the test PATH: prints `out` (and `err` on stderr), exits `code`. */
function fake(name: string, out: string, code = 0, err = ""): void {
  const p = join(bin, name);
  writeFileSync(p, `#!/bin/sh\nprintf '%s\\n' '${out}'\n${err ? `printf '%s\\n' '${err}' >&2\n` : ""}exit ${code}\n`);
  chmodSync(p, 0o755);
}
const unfake = (name: string) => rmSync(join(bin, name), { force: true });
const env = () => ({ PATH: `${bin}:/usr/bin:/bin`, XDG_DATA_HOME: join(dir, "xdg") });

let n = 0;
function config(yaml: string, mode = 0o640): string {
  const p = join(dir, `herd-${++n}.yaml`);
  const head = [`node: { name: dr${n}, data_dir: ${JSON.stringify(join(dir, `data-${n}`))} }`];
  if (!/^frontend:/m.test(yaml)) head.push(`frontend: { listen: "127.0.0.1:0" }`);
  if (!/^supervisor:/m.test(yaml)) head.push(`supervisor: { port_range_start: ${portBase()} }`);
  writeFileSync(p, `${head.join("\n")}\n${yaml}`);
  chmodSync(p, mode);
  return p;
}
let lastErr = "";
const doctor = async (...args: string[]) => {
  const r = await herdCli(["doctor", ...args], env(), 60_000);
  lastErr = r.err;
  return r;
};
const line = (out: string, re: RegExp) => out.split("\n").find((l) => re.test(l)) ?? `(no line matching ${re} in)\n${out}\n--- stderr ---\n${lastErr}`;

const VLLM2 = `router: { policy: round-robin }
models: [{ name: q, path: org/q }]
engines: [{ kind: vllm, model: q, gpus: [0, 1], args: ["--tensor-parallel-size", "2"] }]
`;

describe("herd doctor on a GPU host (fake tools on PATH)", () => {
  test("everything in order: ok lines, the GPUs, the engine's version, exit 0", async () => {
    fake("nvidia-smi", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)");
    fake("vllm", "0.20.1");
    const r = await doctor(config(VLLM2));
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    expect(line(r.out, /^ok +gpus:/)).toContain("2 GPUs found (nvidia-smi): 0,1");
    expect(line(r.out, /engine vllm/)).toBe("ok    engine vllm: vllm 0.20.1 (flags checked for 0.18.0-0.26)");
    expect(line(r.out, /^ok +ports:/)).toContain("engine ports would be planned in");
    expect(r.out.trimEnd().split("\n").pop()).toMatch(/^ok: \d+ ok, 0 warnings, 0 failed$/);
  }, 60_000);

  test("too few GPUs, a TP flag the GPUs do not match, an old vLLM: FAIL lines with a fix, exit 1, --json", async () => {
    fake("nvidia-smi", "GPU 0: NVIDIA L4 (UUID: GPU-a)");
    fake("vllm", "0.11.0");
    const p = config(`models: [{ name: q, path: org/q }]
engines: [{ kind: vllm, model: q, gpus: [0, 1], args: ["--tensor-parallel-size", "4"] }]
`);
    const r = await doctor(p);
    expect(r.code).toBe(1);
    expect(line(r.out, /GPU 1 is not present/)).toMatch(/^FAIL  gpus: engines\[0\]\.gpus: GPU 1 is not present: this host has GPUs 0 — fix: /);
    expect(line(r.out, /tensor parallel/)).toMatch(/^FAIL  engines\[0\]: args ask for tensor parallel size 4 but each of its 1 engine\(s\) gets 2 GPUs — fix: list 4 GPUs/);
    expect(line(r.out, /engine vllm/)).toMatch(/^FAIL  engine vllm: vllm 0\.11\.0 is older than 0\.18\.0.* — fix: upgrade vllm to 0\.18\.0 or later$/);
    const j = await doctor("--json", "--config", p);
    expect(j.code).toBe(1);
    const parsed = JSON.parse(j.out);
    expect(parsed.ok).toBe(false);
    expect(parsed.counts.fail).toBeGreaterThanOrEqual(3);
    expect(parsed.checks.find((c: any) => c.check === "engine vllm")).toMatchObject({ status: "fail", fix: "upgrade vllm to 0.18.0 or later" });
  }, 60_000);

  test("no GPU at all, engines missing from PATH or failing, a newer vLLM, SGLang and TRT-LLM versions", async () => {
    unfake("nvidia-smi");
    unfake("vllm");
    const r = await doctor(config(VLLM2));
    expect(r.code).toBe(1);
    expect(line(r.out, /^FAIL +gpus/)).toContain("no GPU found");
    expect(line(r.out, /engine vllm/)).toMatch(/^FAIL  engine vllm: vllm not found on PATH — fix: install vLLM/);
    fake("nvidia-smi", "GPU 0: A (UUID: a)\nGPU 1: B (UUID: b)\nGPU 2: C (UUID: c)");
    fake("vllm", "0.27.0");
    fake("python3", "", 1, "ModuleNotFoundError: No module named sglang");
    fake("trtllm-serve", "trtllm-serve, version 1.4.0rc4");
    const mixed = config(`models: [{ name: q, path: org/q }]
engines:
  - { kind: vllm, model: q, gpus: [0] }
  - { kind: sglang, model: q, gpus: [1] }
  - { kind: trtllm, model: q, gpus: [2] }
  - { kind: command, model: q, command: ["no-such-engine-binary", "--port", "{port}"] }
`);
    const m = await doctor(mixed);
    expect(m.code).toBe(1);
    expect(line(m.out, /engine vllm/)).toMatch(/^warn  engine vllm: vllm 0\.27\.0 is newer than 0\.26/);
    expect(line(m.out, /engine sglang/)).toBe(
      "FAIL  engine sglang: `python3 -c 'import sglang; print(sglang.__version__)'` failed: ModuleNotFoundError: No module named sglang — fix: install SGLang for the python3 herd runs (pip install \"sglang[all]\")",
    );
    expect(line(m.out, /engine trtllm/)).toBe("ok    engine trtllm: trtllm 1.4.0rc4 (flags checked for up to 1.4)");
    expect(m.out).toMatch(/FAIL  (files|engines\[3\]): .*no-such-engine-binary/);
    fake("python3", "0.5.2");
    const s = await doctor(mixed);
    expect(line(s.out, /engine sglang/)).toMatch(/^warn  engine sglang: sglang 0\.5\.2 answers; herd's flags were read from its source without a release number/);
  }, 60_000);

  test("a config that does not resolve: its findings with path and line, exit 1, nothing else checked", async () => {
    const p = config("engines: [{ kind: vlm, model: q }]\n");
    const r = await doctor(p);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^FAIL  config: engines\[0\]\.kind: .*at .*herd-\d+\.yaml:4/m);
    expect(r.out).not.toContain("gpus:");
  }, 30_000);

  test("a port in use: the listener and a fixed engine port FAIL, naming the key", async () => {
    const held = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("busy") });
    const held2 = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("busy") });
    try {
      const p = config(`frontend: { listen: "127.0.0.1:${held.port}" }\nmodels: [{ name: s }]\nengines: [{ kind: sim, model: s, port: ${held2.port} }]\n`);
      const r = await doctor(p);
      expect(r.code).toBe(1);
      expect(line(r.out, /frontend\.listen: /)).toMatch(new RegExp(`^FAIL  ports: frontend\\.listen: 127\\.0\\.0\\.1:${held.port} is already in use — fix: stop what holds it`));
      expect(r.out).toContain(`FAIL  ports: engines[0].port: 127.0.0.1:${held2.port} is already in use`);
    } finally {
      await held.stop(true);
      await held2.stop(true);
    }
  }, 30_000);

  test("secrets: a token file others can read, a missing password file, inline secrets in a world-readable config", async () => {
    const token = join(dir, "token");
    writeFileSync(token, "s3cret\n");
    chmodSync(token, 0o644);
    const p = config(
      `frontend: { admin_token: "inline-admin-token" }\ncluster: { token_file: ${JSON.stringify(token)} }\nkv_tier: { cpu: { size: 1MiB, path: ${JSON.stringify(join(dir, "shm1"))} }, resp: { password_file: ${JSON.stringify(join(dir, "nope"))} } }\n`,
      0o644,
    );
    const r = await doctor(p);
    expect(r.code).toBe(1);
    expect(line(r.out, /cluster\.token_file/)).toBe(`FAIL  secrets: cluster.token_file: ${token}: mode 0644 lets every user on the host read it — fix: chmod 0640 ${token} (owner read/write, group read; e.g. chown root:herd)`);
    expect(line(r.out, /password_file/)).toMatch(/^FAIL  secrets: kv_tier\.resp\.password_file: .*nope does not exist/);
    expect(line(r.out, /inline/)).toMatch(/^FAIL  secrets: .*holds frontend\.admin_token inline and its mode 0644 lets every user/);
    chmodSync(token, 0o640);
    writeFileSync(join(dir, "nope"), "pw\n");
    chmodSync(join(dir, "nope"), 0o600);
    chmodSync(p, 0o640);
    const fixed = await doctor(p);
    expect(line(fixed.out, /secrets/)).toMatch(/^ok    secrets: 2 secret files present and private; inline frontend\.admin_token/);
  }, 60_000);

  test("kv_tier larger than its file system: FAIL with the sizing rule's fix", async () => {
    const p = config(`kv_tier: { cpu: { size: 900TiB, path: ${JSON.stringify(join(dir, "shm"))} } }\n`);
    const r = await doctor(p);
    expect(r.code).toBe(1);
    expect(line(r.out, /kv_tier/)).toMatch(/^FAIL  kv_tier: kv_tier\.cpu\.size \(921600\.0 GiB\) does not fit .* available\. — fix: Lower the size or grow \/dev\/shm/);
  }, 30_000);

  test("--help lists the checks and options; a usage error exits 2", async () => {
    const h = await doctor("--help");
    expect(h.code).toBe(0);
    expect(h.out.split("\n")[2]).toBe("Usage: herd doctor [FILE | --config FILE] [--json]");
    const u = await doctor("a.yaml", "b.yaml");
    expect(u.code).toBe(2);
    expect(u.err).toContain('unexpected argument "b.yaml"');
  }, 30_000);
});

describe("herd doctor: the cluster", () => {
  let seed: HerdProc | null = null;
  afterAll(async () => {
    await seed?.stop();
  });

  test("a real seed answers, accepts the token and agrees; a wrong token FAILs with 401; a mismatched block size FAILs", async () => {
    const base = portBase();
    const a = `127.0.0.1:${base}`;
    const b = `127.0.0.1:${base + 1}`;
    const section = (token: string, blockSize = 16) => `models: [{ name: cl, block_size: ${blockSize} }]
engines: [{ kind: sim, model: cl, args: ["--time-scale", "50"] }]
cluster: { discovery: peers, token: ${token}, peers: { seeds: ["${a}", "${b}"] } }
`;
    const seedDir = join(dir, "seed");
    mkdirSync(seedDir);
    seed = await startHerd(seedDir, `node: { name: seed, data_dir: ${JSON.stringify(join(seedDir, "data"))} }\nsupervisor: { port_range_start: ${base + 10} }\n${section("right-token")}`, ["--listen", a]);
    const mine = (token: string, blockSize?: number) => config(`frontend: { listen: "${b}" }\n${section(token, blockSize)}`, 0o600);
    const good = await doctor(mine("right-token"));
    expect(line(good.out, new RegExp(`cluster ${a}`))).toBe(`ok    cluster ${a}: node seed answers, accepts the token, model cards agree (cl)`);
    expect(good.out).not.toContain(`cluster ${b}`); // itself
    const wrong = await doctor(mine("wrong-token"));
    expect(wrong.code).toBe(1);
    expect(line(wrong.out, new RegExp(`cluster ${a}`))).toBe(`FAIL  cluster ${a}: refuses this node's cluster token (HTTP 401) — fix: set the same cluster.token (or cluster.token_file content) on every node`);
    const blocks = await doctor(mine("right-token", 32));
    expect(line(blocks.out, new RegExp(`cluster ${a}`))).toMatch(/^FAIL  cluster .*: disagrees on cl: block_size 32 here, 16 there/);
  }, 90_000);

  test("a seed that does not answer warns; a clock 30 s off warns; an etcd endpoint that does not answer FAILs", async () => {
    const peer = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: () => Response.json({ node: "far", nodes: [{ name: "far", meta: {} }] }, { headers: { date: new Date(Date.now() + 30_000).toUTCString() } }),
    });
    try {
      const dead = `127.0.0.1:${portBase()}`;
      const r = await doctor(config(`cluster: { discovery: peers, token: t, peers: { seeds: ["127.0.0.1:${peer.port}", "${dead}"] } }\n`, 0o600));
      expect(line(r.out, /clock/)).toMatch(new RegExp(`^warn  cluster 127\\.0\\.0\\.1:${peer.port}: far's clock is (29|30|31)\\.\\d s ahead of this host's — fix: run NTP`));
      expect(line(r.out, new RegExp(dead))).toMatch(/^warn  cluster .*: does not answer: .* — fix: start herd there/);
      const e = await doctor(config(`cluster: { discovery: etcd, etcd: { endpoints: ["http://${dead}"] } }\n`));
      expect(e.code).toBe(1);
      expect(line(e.out, /etcd/)).toMatch(/^FAIL  cluster http:\/\/.*: etcd does not answer: /);
    } finally {
      await peer.stop(true);
    }
  }, 60_000);
});

describe("pure parts", () => {
  test("versions, offsets, card mismatches, permission rules", () => {
    expect(parseVersion("0.11.0\n")).toBe("0.11.0");
    expect(parseVersion("trtllm-serve, version 1.4.0rc4")).toBe("1.4.0rc4");
    expect(parseVersion("no digits")).toBeNull();
    expect(compareVersions("0.18.0", "0.9.1")).toBe(1);
    expect(compareVersions("1.4.0rc4", "1.4")).toBe(0);
    expect(clockOffsetMs({ dateMs: 10_000, sentMs: 10_000, receivedMs: 10_200 })).toBe(400);
    expect(clockOffsetMs({ dateMs: null, sentMs: 0, receivedMs: 0 })).toBeNull();
    const card = { model: "m", block_size: 16, tokenizer_checksum: "abc", hash_seed: 0 };
    expect(cardMismatches([card], [{ ...card, model: "other", block_size: 32 }])).toEqual([]);
    expect(cardMismatches([card], [{ ...card, tokenizer_checksum: "def", hash_seed: 7 }])).toEqual(['m: tokenizer_checksum "abc" here, "def" there', "m: hash_seed 0 here, 7 there"]);
    expect([0o600, 0o640, 0o400, 0o440].map(secretFileModeProblem)).toEqual([null, null, null, null]);
    expect(secretFileModeProblem(0o660)).toBe("mode 0660 lets its group change it");
    expect(secretFileModeProblem(0o100604)).toBe("mode 0604 lets every user on the host read it");
    expect(secretFileModeProblem(0o640)).toBeNull();
    expect(secretFileModeProblem(0o644)).toContain("0644");
  });

  test("ports another herd on this host leases are skipped and named, as herd run skips them", async () => {
    const base = portBase();
    const yaml = `node: { name: lz, data_dir: ${JSON.stringify(join(dir, "lz"))} }\nsupervisor: { port_range_start: ${base} }\nmodels: [{ name: s }]\nengines: [{ kind: sim, model: s }]\n`;
    const real = systemProbe({ PATH: "" });
    const probe: DoctorProbe = { ...real, run: async () => null, procGpus: () => null, portFree: () => true, portLeasedBy: (p) => (p < base + 2 ? 4242 : null) };
    const results = await runDoctor("lz.yaml", probe, async () => parseConfigText(yaml, "lz.yaml"));
    expect(results.find((r) => r.check === "ports")!.message).toBe(`3 engine ports would be planned in ${base + 2}-${base + 4} (supervisor.port_range_start ${base}; other herds on this host lease ports: pid 4242)`);
  });

  test("runDoctor over a fake probe: the rendering and the JSON agree", async () => {
    const real = systemProbe({ PATH: "" });
    const probe: DoctorProbe = { ...real, run: async () => null, procGpus: () => null };
    const results = await runDoctor(null, probe);
    const text = renderDoctor(results);
    expect(text.split("\n").length).toBe(results.length + 1);
    expect(JSON.parse(doctorJson(results)).counts.ok).toBe(results.filter((r) => r.status === "ok").length);
  });
});
