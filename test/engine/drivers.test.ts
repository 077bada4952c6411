// Generated command lines, environments, ports and ids, checked against the flags in
// docs/references.md#timing-A and docs/references.md#engines-1.4, #engines-6.1.
import { describe, expect, test } from "bun:test";
import { planEngines, PortAllocator } from "../../src/engine/plan.ts";
import type { EnginePlan, LaunchSpec } from "../../src/engine/types.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";

const SELF = ["/usr/local/bin/herd"];
const allFree = (_host: string, _port: number) => true;

function plan(cfg: Parameters<typeof testConfig>[0], isPortFree = allFree): EnginePlan[] {
  const c = testConfig({ ...cfg, supervisor: { port_range_start: 9000, python_hash_seed: 7, ...cfg.supervisor } });
  return planEngines(c, { self: SELF, isPortFree, hostGpus: { ids: [], source: "none" } });
}
const specOf = (p: EnginePlan): LaunchSpec => {
  expect(p.spec).not.toBeNull();
  return p.spec!;
};
/** Value following a flag; fails when the flag is absent. */
function flagValue(argv: string[], flag: string): string {
  const i = argv.indexOf(flag);
  expect(i, `${flag} missing in ${argv.join(" ")}`).toBeGreaterThanOrEqual(0);
  return argv[i + 1]!;
}

const qwen = model({ name: "qwen3-8b", path: "Qwen/Qwen3-8B", block_size: 16, max_model_len: 32768 });

describe("vllm", () => {
  const plans = plan({ models: [qwen], engines: [engine({ kind: "vllm", model: "qwen3-8b", count: 2, gpus: [2, 3, 4, 5], args: ["--gpu-memory-utilization", "0.9"], env: { VLLM_HOST_IP: "10.0.0.1" } })] });

  test("vllm serve MODEL with host, port, served name, block size, max len, TP and extra args last", () => {
    const argv = specOf(plans[0]!).argv;
    expect(argv.slice(0, 3)).toEqual(["vllm", "serve", "Qwen/Qwen3-8B"]);
    expect(flagValue(argv, "--host")).toBe("127.0.0.1");
    expect(flagValue(argv, "--port")).toBe("9000");
    expect(flagValue(argv, "--served-model-name")).toBe("qwen3-8b");
    expect(flagValue(argv, "--block-size")).toBe("16");
    expect(flagValue(argv, "--max-model-len")).toBe("32768");
    expect(flagValue(argv, "--tensor-parallel-size")).toBe("2");
    expect(argv).toContain("--enable-prefix-caching");
    expect(argv.slice(-2)).toEqual(["--gpu-memory-utilization", "0.9"]);
  });

  test("--kv-events-config: zmq publisher bound on *, replay endpoint, topic naming the worker", () => {
    const [a, b] = plans.map(specOf);
    const cfgA = JSON.parse(flagValue(a!.argv, "--kv-events-config"));
    expect(cfgA).toEqual({
      enable_kv_cache_events: true,
      publisher: "zmq",
      endpoint: "tcp://*:9001",
      replay_endpoint: "tcp://*:9002",
      topic: "kv@n1/vllm-0@qwen3-8b",
    });
    expect(a!.kvEvents).toEqual({ endpoint: "tcp://127.0.0.1:9001", replayEndpoint: "tcp://127.0.0.1:9002", topic: "kv@n1/vllm-0@qwen3-8b" });
    // Second engine: its own HTTP, publisher and replay ports, none shared.
    expect(b!.port).toBe(9003);
    expect(b!.kvEvents?.endpoint).toBe("tcp://127.0.0.1:9004");
    expect(b!.kvEvents?.replayEndpoint).toBe("tcp://127.0.0.1:9005");
  });

  test("env: each engine's GPU share, one PYTHONHASHSEED for all, entry env", () => {
    const [a, b] = plans.map(specOf);
    expect(a!.env).toEqual({ CUDA_VISIBLE_DEVICES: "2,3", PYTHONHASHSEED: "7", VLLM_HOST_IP: "10.0.0.1" });
    expect(b!.env.CUDA_VISIBLE_DEVICES).toBe("4,5");
    expect(b!.env.PYTHONHASHSEED).toBe(a!.env.PYTHONHASHSEED!);
    expect(a!.gpus).toEqual([2, 3]);
    expect(a!.url).toBe("http://127.0.0.1:9000");
    expect(a!.healthPath).toBe("/health");
  });

  test("one GPU: no TP flag, no max-model-len when 0", () => {
    const [p] = plan({ engines: [engine({ kind: "vllm", gpus: [0] })] });
    const argv = specOf(p!).argv;
    expect(argv).not.toContain("--tensor-parallel-size");
    expect(argv).not.toContain("--max-model-len");
    expect(specOf(p!).env.CUDA_VISIBLE_DEVICES).toBe("0");
  });
});

describe("sglang", () => {
  test("python3 -m sglang.launch_server with --model-path, --page-size, --tp-size, metrics and kv events", () => {
    const [p] = plan({ models: [qwen], engines: [engine({ kind: "sglang", model: "qwen3-8b", gpus: [0, 1], host: "0.0.0.0", port: 30000 })] });
    const s = specOf(p!);
    expect(s.argv.slice(0, 3)).toEqual(["python3", "-m", "sglang.launch_server"]);
    expect(flagValue(s.argv, "--model-path")).toBe("Qwen/Qwen3-8B");
    expect(flagValue(s.argv, "--host")).toBe("0.0.0.0");
    expect(flagValue(s.argv, "--port")).toBe("30000");
    expect(flagValue(s.argv, "--served-model-name")).toBe("qwen3-8b");
    expect(flagValue(s.argv, "--page-size")).toBe("16");
    expect(flagValue(s.argv, "--context-length")).toBe("32768");
    expect(flagValue(s.argv, "--tp-size")).toBe("2");
    expect(s.argv).toContain("--enable-metrics");
    const kv = JSON.parse(flagValue(s.argv, "--kv-events-config"));
    // SGLang's config has no enable_kv_cache_events key and defaults the publisher to "null".
    expect(kv).toEqual({ publisher: "zmq", endpoint: "tcp://*:9000", replay_endpoint: "tcp://*:9001", topic: "kv@n1/sglang-0@qwen3-8b" });
    // A wildcard bind is dialled over loopback.
    expect(s.url).toBe("http://127.0.0.1:30000");
    expect(s.kvEvents?.endpoint).toBe("tcp://127.0.0.1:9000");
  });
});

describe("trtllm", () => {
  test("trtllm-serve MODEL --host --port with --tp_size; answers to the model path", () => {
    const [p] = plan({ models: [qwen], engines: [engine({ kind: "trtllm", model: "qwen3-8b", gpus: [0, 1, 2, 3], args: ["--backend", "pytorch"] })] });
    const s = specOf(p!);
    expect(s.argv.slice(0, 2)).toEqual(["trtllm-serve", "Qwen/Qwen3-8B"]);
    expect(flagValue(s.argv, "--host")).toBe("127.0.0.1");
    expect(flagValue(s.argv, "--port")).toBe("9000");
    expect(flagValue(s.argv, "--tp_size")).toBe("4");
    expect(flagValue(s.argv, "--max_seq_len")).toBe("32768");
    expect(s.argv.slice(-2)).toEqual(["--backend", "pytorch"]);
    expect(s.servedModelName).toBe("Qwen/Qwen3-8B");
    expect(s.kvEvents).toBeUndefined();
  });
});

describe("command, sim, external", () => {
  test("command substitutes {port} {host} {model} {model_path} {block_size}", () => {
    const [p] = plan({ engines: [engine({ kind: "command", command: ["serve", "--listen={host}:{port}", "{model}", "{model_path}", "{block_size}", "{other}"], args: ["-v"] })] });
    expect(specOf(p!).argv).toEqual(["serve", "--listen=127.0.0.1:9000", "m", "org/m", "16", "{other}", "-v"]);
  });

  test("sim re-invokes herd sim-engine with model, block size, model path and tokenizer", () => {
    const [p] = plan({ models: [model({ tokenizer: "/models/q" })], engines: [engine({ kind: "sim", args: ["--time-scale", "20"] })] });
    const s = specOf(p!);
    const kv = flagValue(s.argv, "--kv-events-config");
    expect(s.argv).toEqual([
      "/usr/local/bin/herd", "sim-engine", "--host", "127.0.0.1", "--port", "9000", "--model", "m", "--block-size", "16", "--model-path", "org/m", "--tokenizer", "/models/q",
      "--kv-events-config", kv, "--kv-events-bind-host", "127.0.0.1", "--time-scale", "20",
    ]);
    // The engine learns who supervises it, so it can stop itself if herd is SIGKILLed.
    expect(s.env.HERD_SUPERVISOR_PID).toBe(String(process.pid));
    // The sim publishes KV events like vLLM: same JSON, allocated ports, a topic naming the worker.
    expect(JSON.parse(kv)).toEqual({ enable_kv_cache_events: true, publisher: "zmq", endpoint: "tcp://*:9001", replay_endpoint: "tcp://*:9002", topic: "kv@n1/sim-0@m" });
    expect(s.kvEvents).toEqual({ endpoint: "tcp://127.0.0.1:9001", replayEndpoint: "tcp://127.0.0.1:9002", topic: "kv@n1/sim-0@m" });
  });

  test("external: no process, url and kv endpoints from config", () => {
    const kv = { endpoint: "tcp://10.0.0.12:5557", replay_endpoint: "tcp://10.0.0.12:5558", topic: "" };
    const [p] = plan({ engines: [engine({ kind: "external", url: "http://10.0.0.12:8000/", kv_events: kv })] });
    expect(p!.spec).toBeNull();
    expect(p!.url).toBe("http://10.0.0.12:8000");
    expect(p!.kvEvents).toEqual({ endpoint: "tcp://10.0.0.12:5557", replayEndpoint: "tcp://10.0.0.12:5558", topic: "" });
  });

  test("explicit kv_events on a managed engine are passed verbatim and dialled with wildcards resolved", () => {
    const kv = { endpoint: "tcp://*:6000", replay_endpoint: "tcp://*:6001", topic: "mine" };
    const [p] = plan({ engines: [engine({ kind: "vllm", kv_events: kv })] });
    const s = specOf(p!);
    expect(JSON.parse(flagValue(s.argv, "--kv-events-config"))).toEqual({ enable_kv_cache_events: true, publisher: "zmq", endpoint: "tcp://*:6000", replay_endpoint: "tcp://*:6001", topic: "mine" });
    expect(s.kvEvents).toEqual({ endpoint: "tcp://127.0.0.1:6000", replayEndpoint: "tcp://127.0.0.1:6001", topic: "mine" });
    expect(() => plan({ engines: [engine({ kind: "vllm", count: 2, kv_events: kv })] })).toThrow(/count 1/);
  });
});

describe("planning", () => {
  test("ids are stable per kind; explicit ports are reserved; taken ports are skipped", () => {
    const taken = new Set([9001]);
    const plans = plan(
      {
        engines: [
          engine({ kind: "sim", count: 2 }),
          engine({ kind: "command", command: ["x"], port: 9002 }),
          engine({ kind: "sim" }),
          engine({ kind: "external", url: "http://h:1" }),
        ],
      },
      (_h, p) => !taken.has(p),
    );
    expect(plans.map((p) => p.id)).toEqual(["n1/sim-0", "n1/sim-1", "n1/command-0", "n1/sim-2", "n1/external-0"]);
    // sim engines also take two KV event ports each (9001 is taken, 9002 reserved): 9003-9004, 9006-9007.
    expect(plans.map((p) => p.spec?.port ?? null)).toEqual([9000, 9005, 9002, 9008, null]);
    expect(plans.map((p) => [p.entryIndex, p.index])).toEqual([[0, 0], [0, 1], [1, 0], [2, 0], [3, 0]]);
  });

  test("explicit port + i per engine of an entry", () => {
    const plans = plan({ engines: [engine({ kind: "vllm", count: 3, port: 8100 })] });
    expect(plans.map((p) => p.spec!.port)).toEqual([8100, 8101, 8102]);
  });

  test("errors name the config key", () => {
    expect(() => plan({ engines: [engine({ kind: "vllm", count: 2, gpus: [0, 1, 2] })] })).toThrow(/engines\[0\]\.gpus/);
    expect(() => plan({ engines: [engine({ kind: "vllm", model: "nope" })] })).toThrow(/engines\[0\]\.model/);
    expect(() => plan({ engines: [engine({ kind: "external" })] })).toThrow(/engines\[0\]\.url/);
    expect(() => plan({ engines: [engine({ kind: "command" })] })).toThrow(/non-empty command/);
  });

  test("the allocator refuses to run past 65535", () => {
    const a = new PortAllocator(65535, new Set(), () => true);
    expect(a.take("127.0.0.1")).toBe(65535);
    expect(() => a.take("127.0.0.1")).toThrow(/no free port/);
  });
});
