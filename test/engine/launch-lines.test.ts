// Issue 11, "Real engine command lines": the flags herd adds, checked against the engines' own
// sources (vllm-project/vllm vllm/entrypoints/openai/cli_args.py FrontendArgs, vllm/config/cache.py
// CacheConfig, EngineArgs.shutdown_timeout; sglang's health handler env switch), the checks that
// refuse a mismatched prefix-caching hash, GPU detection and assignment, and `herd run --dry-run`.
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { main, type Io } from "../../src/cli.ts";
import type { Config } from "../../src/config/types.ts";
import { checkEngines } from "../../src/engine/check.ts";
import { detectGpus, parseNvidiaSmiList, type GpuProbe, type HostGpus } from "../../src/engine/gpus.ts";
import { planEngines } from "../../src/engine/plan.ts";
import { preflight } from "../../src/engine/preflight.ts";
import type { EnginePlan } from "../../src/engine/types.ts";
import { engine, model, tempDir, testConfig } from "../fixtures/engines/config.ts";

const NO_GPUS: HostGpus = { ids: [], source: "none" };
const gpus = (n: number): HostGpus => ({ ids: Array.from({ length: n }, (_, i) => i), source: "given" });
const qwen = model({ name: "qwen3-8b", path: "Qwen/Qwen3-8B", max_model_len: 32768 });

function cfg(over: Parameters<typeof testConfig>[0], drainMs = 30_000): Config {
  const c = testConfig({ models: [qwen], ...over, supervisor: { port_range_start: 8103, stop_timeout_ms: 45_000, ...over.supervisor } });
  c.frontend.drain_timeout_ms = drainMs;
  return c;
}
const plan = (c: Config, host: HostGpus = NO_GPUS): EnginePlan[] => planEngines(c, { self: ["/usr/bin/herd"], isPortFree: () => true, hostGpus: host });
const argvOf = (p: EnginePlan) => p.spec!.argv;
function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i < 0 ? undefined : argv[i + 1];
}
const errors = (c: Config, host: HostGpus = NO_GPUS) => checkEngines(c, host).filter((f) => f.severity === "error");

describe("vLLM launch line", () => {
  test("matches the minimal reference line: access log quiet for /health,/metrics, drain as --shutdown-timeout, memory share and hash algo from config", () => {
    const c = cfg({
      models: [{ ...qwen, prefix_caching_hash_algo: "sha256_cbor" }],
      engines: [engine({ kind: "vllm", model: "qwen3-8b", gpus: [3], gpu_memory_utilization: 0.9 })],
    });
    const [p] = plan(c, gpus(4));
    const argv = argvOf(p!);
    // Every flag of the reference 8B/1-GPU vLLM line (`vllm serve Qwen/Qwen3-8B --host … --port 8103 …`).
    expect(argv.slice(0, 3)).toEqual(["vllm", "serve", "Qwen/Qwen3-8B"]);
    expect(flag(argv, "--host")).toBe("127.0.0.1");
    expect(flag(argv, "--port")).toBe("8103");
    expect(flag(argv, "--served-model-name")).toBe("qwen3-8b");
    expect(flag(argv, "--block-size")).toBe("16");
    expect(flag(argv, "--prefix-caching-hash-algo")).toBe("sha256_cbor");
    expect(flag(argv, "--gpu-memory-utilization")).toBe("0.9");
    expect(flag(argv, "--max-model-len")).toBe("32768");
    expect(JSON.parse(flag(argv, "--kv-events-config")!)).toMatchObject({ enable_kv_cache_events: true, publisher: "zmq", endpoint: "tcp://*:8104", replay_endpoint: "tcp://*:8105" });
    expect(flag(argv, "--shutdown-timeout")).toBe("30");
    expect(flag(argv, "--disable-access-log-for-endpoints")).toBe("/health,/metrics");
    expect(p!.spec!.env).toEqual({ CUDA_VISIBLE_DEVICES: "3", PYTHONHASHSEED: "0" });
  });

  test("LoRA adapters: --enable-lora, --max-loras and --lora-modules name=path (SGLang: --lora-paths; sim: --lora-modules)", () => {
    const m = { ...qwen, lora_adapters: [{ name: "sql", path: "/models/sql", on_demand: false }, { name: "chat", path: "/models/chat", on_demand: false }] };
    const [v] = plan(cfg({ models: [m], engines: [engine({ kind: "vllm", model: "qwen3-8b" })] }));
    const argv = argvOf(v!);
    expect(argv).toContain("--enable-lora");
    expect(flag(argv, "--max-loras")).toBe("2");
    expect(argv.slice(argv.indexOf("--lora-modules") + 1, argv.indexOf("--lora-modules") + 3)).toEqual(["sql=/models/sql", "chat=/models/chat"]);
    const [sg] = plan(cfg({ models: [m], engines: [engine({ kind: "sglang", model: "qwen3-8b" })] }));
    expect(argvOf(sg!).slice(argvOf(sg!).indexOf("--lora-paths") + 1).slice(0, 2)).toEqual(["sql=/models/sql", "chat=/models/chat"]);
    const [sim] = plan(cfg({ models: [m], engines: [engine({ kind: "sim", model: "qwen3-8b" })] }));
    expect(argvOf(sim!).filter((a, i, all) => all[i - 1] === "--lora-modules")).toEqual(["sql=/models/sql", "chat=/models/chat"]);
    const [plain] = plan(cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b" })] }));
    expect(argvOf(plain!)).not.toContain("--enable-lora");
  });

  test("on-demand LoRA adapters: not in --lora-modules, room in --max-loras, runtime updating enabled (vLLM and sim)", () => {
    const m = { ...qwen, lora_adapters: [{ name: "sql", path: "/models/sql", on_demand: false }, { name: "chat", path: "/models/chat", on_demand: true }] };
    const [v] = plan(cfg({ models: [m], engines: [engine({ kind: "vllm", model: "qwen3-8b" })] }));
    const argv = argvOf(v!);
    expect(flag(argv, "--max-loras")).toBe("5"); // 1 fixed + frontend.lora.max_per_engine (4)
    expect(argv.filter((a, i, all) => all[i - 1] === "--lora-modules")).toEqual(["sql=/models/sql"]);
    expect(argv).not.toContain("chat=/models/chat");
    expect(v!.spec!.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBe("True");
    const [sim] = plan(cfg({ models: [m], engines: [engine({ kind: "sim", model: "qwen3-8b" })] }));
    expect(argvOf(sim!).filter((a, i, all) => all[i - 1] === "--lora-modules")).toEqual(["sql=/models/sql"]);
    expect(sim!.spec!.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBe("True");
    const [fixed] = plan(cfg({ models: [{ ...qwen, lora_adapters: [{ name: "sql", path: "/models/sql", on_demand: false }] }], engines: [engine({ kind: "vllm", model: "qwen3-8b" })] }));
    expect(fixed!.spec!.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBeUndefined();
  });

  test("unset keys add nothing (engine defaults); --shutdown-timeout rounds the drain up to whole seconds", () => {
    const [p] = plan(cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b" })] }, 1_500));
    const argv = argvOf(p!);
    expect(argv).not.toContain("--gpu-memory-utilization");
    expect(argv).not.toContain("--prefix-caching-hash-algo");
    expect(flag(argv, "--shutdown-timeout")).toBe("2");
  });

  test("tracing: --otlp-traces-endpoint <endpoint>/v1/traces and an http/protobuf exporter when tracing and tracing.engines are on; nothing otherwise", () => {
    const c = cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b" })] });
    const [off] = plan(c);
    expect(argvOf(off!)).not.toContain("--otlp-traces-endpoint");
    expect(off!.spec!.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL).toBeUndefined();
    c.tracing = { ...c.tracing, enabled: true, endpoint: "http://tempo:4318/" };
    const [on] = plan(c);
    expect(flag(argvOf(on!), "--otlp-traces-endpoint")).toBe("http://tempo:4318/v1/traces");
    expect(on!.spec!.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL).toBe("http/protobuf");
    c.tracing.engines = false;
    expect(argvOf(plan(c)[0]!)).not.toContain("--otlp-traces-endpoint");
  });

  test("vLLM KV capacity: --num-gpu-blocks-override from the command line, else num_gpu_blocks from vllm:cache_config_info", async () => {
    const { vllm } = await import("../../src/engine/drivers/vllm.ts");
    const [p] = plan(cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b", args: ["--num-gpu-blocks-override", "123"] })] }));
    expect(vllm.kvCapacity(p!.spec!)).toBe(123);
    const [q] = plan(cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b" })] }));
    expect(vllm.kvCapacity(q!.spec!)).toBeUndefined();
    const info = (e: number, n: number) => `vllm:cache_config_info{block_size="16",engine="${e}",num_gpu_blocks="${n}",prefix_caching_hash_algo="sha256"} 1.0`;
    const body = `vllm:num_requests_running{engine="0"} 1\n${info(0, 27104)}\n${info(1, 27000)}\n`;
    expect(vllm.metrics.read(body)).toEqual({ load: { running: 1, waiting: null, kv_usage: null }, kvBlocks: 54104 });
  });
});

describe("prefix-caching hash: refused when it does not match", () => {
  test("args contradicting the model's prefix_caching_hash_algo", () => {
    const c = cfg({
      models: [{ ...qwen, prefix_caching_hash_algo: "sha256_cbor" }],
      engines: [engine({ kind: "vllm", model: "qwen3-8b", args: ["--prefix-caching-hash-algo", "xxhash"] })],
    });
    expect(errors(c)).toEqual([expect.objectContaining({ path: "engines[0].args", message: expect.stringContaining("contradicts models[0].prefix_caching_hash_algo sha256_cbor") })]);
  });

  test("two entries of one model hashing differently", () => {
    const c = cfg({
      engines: [
        engine({ kind: "vllm", model: "qwen3-8b" }),
        engine({ kind: "vllm", model: "qwen3-8b", args: ["--prefix-caching-hash-algo", "sha256_cbor"] }),
      ],
    });
    expect(errors(c)).toEqual([expect.objectContaining({ path: "engines[1].args", message: expect.stringMatching(/differs from engines\[0\]/) })]);
  });

  test("a legacy algorithm vLLM removed", () => {
    const c = cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b", args: ["--prefix-caching-hash-algo=builtin"] })] });
    expect(errors(c)[0]?.message).toMatch(/herd's router needs one of sha256, sha256_cbor, xxhash, xxhash_cbor/);
  });

  test("config check refuses it (exit 1, the finding with path)", async () => {
    const dir = tempDir("herd-hash-");
    const file = join(dir, "h.yaml");
    writeFileSync(file, "models:\n  - name: m\n    prefix_caching_hash_algo: sha256\nengines:\n  - kind: vllm\n    model: m\n    args: [--prefix-caching-hash-algo, xxhash_cbor]\n");
    const io = capture();
    expect(await main(["config", "check", file], io.io, entries(NO_GPUS))).toBe(1);
    expect(io.err()).toContain(`engines[0].args: --prefix-caching-hash-algo xxhash_cbor contradicts models[0].prefix_caching_hash_algo sha256`);
    expect(io.err()).toContain(`${file}:7`);
  });
});

describe("SGLang and TRT-LLM", () => {
  test("SGLang: health probes do not run a generation", () => {
    const [p] = plan(cfg({ engines: [engine({ kind: "sglang", model: "qwen3-8b" })] }));
    expect(p!.spec!.env.SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION).toBe("false");
    const [q] = plan(cfg({ engines: [engine({ kind: "sglang", model: "qwen3-8b", env: { SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: "true" } })] }));
    expect(q!.spec!.env.SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION).toBe("true");
  });

  test("SGLang KV capacity from /metrics: num_pages, else max_total_num_tokens / page_size; summed over DP ranks", async () => {
    const { sglang } = await import("../../src/engine/drivers/sglang.ts");
    const l = (tp: number, dp?: number) => `{model_name="m",tp_rank="${tp}"${dp !== undefined ? `,dp_rank="${dp}"` : ""}}`;
    const run = `sglang:num_running_reqs${l(0)} 2\n`;
    // Newer builds: pages (one KV event block per page); the TP ranks of one pool say the same.
    expect(sglang.metrics.read(`${run}sglang:num_pages${l(0)} 9000\nsglang:num_pages${l(1)} 9000\n`).kvBlocks).toBe(9000);
    // Tokens over the page size, per label set; each DP rank has its own pool.
    const body = [0, 1].map((dp) => `sglang:max_total_num_tokens${l(0, dp)} 160000\nsglang:page_size${l(0, dp)} 16`).join("\n");
    expect(sglang.metrics.read(`${run}${body}\n`)).toEqual({ load: { running: 2, waiting: null, kv_usage: null }, kvBlocks: 20_000 });
    // Tokens without a page size (older builds): not stated.
    expect(sglang.metrics.read(`${run}sglang:max_total_num_tokens${l(0)} 160000\n`)).toEqual({ load: { running: 2, waiting: null, kv_usage: null } });
    expect(sglang.metrics.read(`${run}sglang:num_pages${l(0)} 0\nsglang:page_size${l(0)} NaN\n`).kvBlocks).toBeUndefined();
  });

  test("TRT-LLM: load from its JSON /metrics (newest stat per attention-DP rank); empty = idle; not JSON = no reading", async () => {
    const { readTrtllmStats } = await import("../../src/engine/drivers/trtllm.ts");
    const stat = (iter: number, rank: number, active: number, queued: number, used: number) => ({
      iter, attentionDpRank: rank, numActiveRequests: active, numQueuedRequests: queued, gpuMemUsage: 1,
      kvCacheStats: { usedNumBlocks: used, maxNumBlocks: 100, freeNumBlocks: 100 - used, tokensPerBlock: 32, cacheHitRate: 0 },
    });
    const body = JSON.stringify([stat(1, 0, 9, 9, 90), stat(2, 0, 2, 1, 20), stat(2, 1, 3, 0, 40)]);
    const r = readTrtllmStats(body);
    expect(r).toMatchObject({ load: { running: 5, waiting: 1 }, kvBlocks: 200 });
    expect(r.load!.kv_usage).toBeCloseTo(0.3, 9);
    expect(readTrtllmStats("[]")).toEqual({ load: { running: 0, waiting: 0, kv_usage: null } });
    expect(readTrtllmStats("vllm:num_requests_running 3")).toEqual({ load: null });
  });
});

describe("GPUs", () => {
  test("detection: nvidia-smi -L, else /proc/driver/nvidia/gpus, else none", () => {
    const smi = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n";
    expect(parseNvidiaSmiList(smi)).toEqual([0, 1]);
    const probe = (s: string | null, p: string[] | null): GpuProbe => ({ nvidiaSmi: () => s, procGpus: () => p });
    expect(detectGpus(probe(smi, null))).toEqual({ ids: [0, 1], source: "nvidia-smi" });
    expect(detectGpus(probe(null, ["0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"]))).toEqual({ ids: [0, 1, 2], source: "procfs" });
    expect(detectGpus(probe(null, null))).toEqual({ ids: [], source: "none" });
  });

  test("count 2 without gpus on a 2-GPU host: one GPU each (no longer both on GPU 0)", () => {
    const c = cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b", count: 2 })] });
    expect(plan(c, gpus(2)).map((p) => p.spec!.env.CUDA_VISIBLE_DEVICES)).toEqual(["0", "1"]);
    expect(errors(c, gpus(2))).toEqual([]);
  });

  test("auto-assignment skips GPUs other entries name", () => {
    const c = cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b", count: 2 }), engine({ kind: "sglang", model: "qwen3-8b", gpus: [0] })] });
    expect(plan(c, gpus(3)).map((p) => p.spec!.gpus)).toEqual([[1], [2], [0]]);
  });

  test("over-subscription is an error at config check; share_gpu makes it a warning", () => {
    const c = cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b", count: 2 })] });
    expect(errors(c, gpus(1))).toEqual([expect.objectContaining({ path: "engines[0].gpus", message: expect.stringContaining("no GPU left for engine 1 of 2") })]);
    expect(() => plan(c, gpus(1))).toThrow(/no GPU left/);
    c.engines[0]!.share_gpu = true;
    expect(errors(c, gpus(1))).toEqual([]);
    expect(checkEngines(c, gpus(1)).map((f) => f.message)).toContainEqual(expect.stringContaining("GPU 0 is shared by 2 engines"));
    expect(plan(c, gpus(1)).map((p) => p.spec!.gpus)).toEqual([[0], [0]]);
  });

  test("two entries naming one GPU: an error unless both opt in", () => {
    const two = (share: boolean) =>
      cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b", gpus: [0], share_gpu: share }), engine({ kind: "vllm", model: "qwen3-8b", gpus: [0], share_gpu: share })] });
    expect(errors(two(false), gpus(1))[0]?.message).toMatch(/GPU 0 would run 2 engines \(engines\[0\], engines\[1\]\).*share_gpu: true/);
    expect(errors(two(true), gpus(1))).toEqual([]);
  });

  test("named GPUs the host lacks: an error on a GPU host, a warning on a machine without GPUs", () => {
    const c = cfg({ engines: [engine({ kind: "vllm", model: "qwen3-8b", gpus: [4, 5] })] });
    expect(errors(c, gpus(2))[0]?.message).toBe("GPUs 4,5 are not present: this host has GPUs 0,1");
    const none = checkEngines(c, NO_GPUS);
    expect(none.filter((f) => f.severity === "error")).toEqual([]);
    expect(none).toContainEqual(expect.objectContaining({ severity: "warning", path: "engines[0].gpus", message: "GPUs 4,5 are not present: no GPU found on this host (none)" }));
  });
});

function capture(): { io: Io; out: () => string; err: () => string } {
  let out = "";
  let err = "";
  return { io: { out: (t) => void (out += t + "\n"), err: (t) => void (err += t + "\n") }, out: () => out, err: () => err };
}
function entries(host: HostGpus) {
  const probe: GpuProbe = { nvidiaSmi: () => (host.ids.length ? host.ids.map((i) => `GPU ${i}: Fake (UUID: GPU-${i})`).join("\n") : null), procGpus: () => null };
  return {
    runDaemon: async () => {
      throw new Error("the daemon must not start");
    },
    simEngineMain: async () => 0,
    preflight: async (c: Config, lineOf?: (p: string) => number) => preflight(c, lineOf, probe),
  };
}

describe("herd run --dry-run", () => {
  const yaml = [
    "supervisor:\n  port_range_start: 41000",
    "models:\n  - name: qwen3-8b\n    path: Qwen/Qwen3-8B\n    prefix_caching_hash_algo: sha256_cbor",
    "engines:\n  - kind: vllm\n    model: qwen3-8b\n    count: 2\n    gpu_memory_utilization: 0.9\n    env: { VLLM_HOST_IP: \"10.0.0.1\" }\n  - kind: sglang\n    model: qwen3-8b\n    gpus: [7]",
  ].join("\n");

  test("prints env, argv, ports and GPUs per engine and exits 0 without starting anything; warns that the named GPUs are absent", async () => {
    const file = join(tempDir("herd-dry-"), "herd.yaml");
    writeFileSync(file, yaml);
    const io = capture();
    expect(await main(["run", "--dry-run", "--config", file], io.io, entries(NO_GPUS))).toBe(0);
    const out = io.out();
    expect(out).toContain("host: no GPU found (none)");
    expect(out).toMatch(/## \S+\/vllm-0 \(vllm, model qwen3-8b, role aggregated\)/);
    expect(out).toContain("  VLLM_HOST_IP=10.0.0.1");
    expect(out).toContain("  SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false");
    expect(out).toMatch(/ports: http \d+, kv-events \d+, kv-replay \d+/);
    expect(out).toContain("gpus:  7");
    // argv is shell-quoted: the KV events JSON is one argument.
    expect(out).toMatch(/vllm serve Qwen\/Qwen3-8B --host 127\.0\.0\.1 --port \d+ .*--prefix-caching-hash-algo sha256_cbor --gpu-memory-utilization 0\.9 .*--kv-events-config '\{"enable_kv_cache_events":true,[^']*\}' --shutdown-timeout \d+ --disable-access-log-for-endpoints \/health,\/metrics/);
    expect(io.err()).toContain("warning: engines[1].gpus: GPU 7 is not present: no GPU found on this host (none)");
    expect(io.err()).toContain("warning: engines[0].gpus: no GPU detected on this host (none); vllm engines start without CUDA_VISIBLE_DEVICES");
  });

  test("on a 2-GPU host the vLLM engines get GPU 0 and 1, and a GPU the host lacks is an error (exit 1)", async () => {
    const file = join(tempDir("herd-dry-"), "herd.yaml");
    writeFileSync(file, yaml.replace("gpus: [7]", "gpus: []\n    share_gpu: true"));
    const io = capture();
    expect(await main(["run", "--dry-run", "--config", file], io.io, entries(gpus(3)))).toBe(0);
    expect(io.out().match(/CUDA_VISIBLE_DEVICES=\d/g)).toEqual(["CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=2"]);
    writeFileSync(file, yaml);
    const bad = capture();
    expect(await main(["run", "--dry-run", "--config", file], bad.io, entries(gpus(2)))).toBe(1);
    expect(bad.err()).toContain("engines[1].gpus: GPU 7 is not present: this host has GPUs 0,1");
    expect(bad.out()).toBe("");
  });
});
