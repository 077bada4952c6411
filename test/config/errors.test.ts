// One case per kind of config mistake: each must name the key path AND the file line, so a user can
// jump straight to it. Lines in the fixtures are counted from 1.

import { describe, expect, test } from "bun:test";
import { parseConfigText, renderFindings, type Finding } from "../../src/config/index.ts";
import { checkEngines } from "../../src/engine/check.ts";

const env = { hostname: "test-host", dataDir: "/tmp/herd-test" };
const yaml = (...lines: string[]) => lines.join("\n") + "\n";
/**
 * What `herd config check` reports: the config's own findings plus, once it resolves, the engine
 * drivers' kind-specific checks (issue 9 moved those out of config/validate.ts), on an 8-GPU host.
 */
function check(text: string): { config?: unknown; findings: Finding[] } {
  const r = parseConfigText(text, "herd.yaml", env);
  if (!r.config) return r;
  const more = checkEngines(r.config, { ids: [0, 1, 2, 3, 4, 5, 6, 7], source: "given" }, r.lineOf);
  const findings = [...r.findings, ...more];
  return findings.some((f) => f.severity === "error") ? { findings } : { config: r.config, findings };
}
const errorsOf = (text: string): Finding[] => check(text).findings.filter((f) => f.severity === "error");

const MODEL = ["models:", "  - name: qwen3-8b"]; // lines 1-2 in fixtures that start with it

interface Case {
  name: string;
  text: string;
  path: string;
  line: number;
  message: RegExp;
}

const cases: Case[] = [
  {
    name: "unknown key, with a suggestion",
    text: yaml("frontend:", "  listen: 127.0.0.1:8000", "  lisen: 127.0.0.1:9000"),
    path: "frontend.lisen",
    line: 3,
    message: /unknown key \(did you mean "listen"\?\)/,
  },
  {
    name: "unknown top-level section",
    text: yaml("node:", "  name: a", "engine:", "  - kind: sim"),
    path: "engine",
    line: 3,
    message: /unknown key \(did you mean "engines"\?\)/,
  },
  {
    name: "unknown key inside a list entry",
    text: yaml(...MODEL, "    blocksize: 16"),
    path: "models[0].blocksize",
    line: 3,
    message: /did you mean "block_size"/,
  },
  {
    name: "wrong type: scalar where a list of integers belongs",
    text: yaml(...MODEL, "engines:", "  - kind: sim", "    model: qwen3-8b", "  - kind: vllm", "    model: qwen3-8b", "    gpus: 0,1"),
    path: "engines[1].gpus",
    line: 8,
    message: /^expected a list of integers, got "0,1"$/,
  },
  {
    name: "wrong type: list item",
    text: yaml(...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b", "    gpus:", "      - 0", "      - one"),
    path: "engines[0].gpus[1]",
    line: 8,
    message: /expected an integer/,
  },
  {
    name: "wrong type: quoted number for an integer",
    text: yaml("frontend:", "  max_in_flight: \"100\""),
    path: "frontend.max_in_flight",
    line: 2,
    message: /expected an integer .*got "100"/,
  },
  {
    name: "wrong type: number where a string argument belongs (hint to quote)",
    text: yaml(...MODEL, "engines:", "  - kind: sim", "    model: qwen3-8b", "    args: [--time-scale, 20]"),
    path: "engines[0].args[1]",
    line: 6,
    message: /expected a string, got number 20 \(quote it: "20"\)/,
  },
  {
    name: "wrong type: map where a section's scalar belongs",
    text: yaml("router:", "  seed:", "    value: 3"),
    path: "router.seed",
    line: 3,
    message: /expected an integer/,
  },
  {
    name: "bad enum value, with a suggestion",
    text: yaml(...MODEL, "engines:", "  - kind: vlm", "    model: qwen3-8b"),
    path: "engines[0].kind",
    line: 4,
    message: /expected one of sim \| vllm .* got "vlm" \(did you mean "vllm"\?\)/,
  },
  {
    name: "KV-aware knob out of range",
    text: yaml("router:", "  policy: kv", "  kv:", "    temperature: -1"),
    path: "router.kv.temperature",
    line: 4,
    message: /expected a number between 0 and 100, got -1/,
  },
  {
    name: "unknown policy",
    text: yaml("router:", "  policy: fastest"),
    path: "router.policy",
    line: 2,
    message: /expected one of round-robin/,
  },
  {
    name: "missing required key in a list entry",
    text: yaml("models:", "  - block_size: 16", "    tokenizer: /x"),
    path: "models[0].name",
    line: 2,
    message: /missing required key/,
  },
  {
    name: "missing engine kind",
    text: yaml(...MODEL, "engines:", "  - model: qwen3-8b", "    count: 2"),
    path: "engines[0].kind",
    line: 4,
    message: /missing required key/,
  },
  {
    name: "external engine without url",
    text: yaml(...MODEL, "engines:", "  - kind: sim", "    model: qwen3-8b", "  - kind: external", "    model: qwen3-8b"),
    path: "engines[1].url",
    line: 6,
    message: /missing required key: kind external/,
  },
  {
    name: "command engine without command",
    text: yaml(...MODEL, "engines:", "  - kind: command", "    model: qwen3-8b"),
    path: "engines[0].command",
    line: 4,
    message: /missing required key: kind command/,
  },
  {
    name: "url on an engine herd starts",
    text: yaml(...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b", "    url: http://10.0.0.1:8000"),
    path: "engines[0].url",
    line: 6,
    message: /only valid for kind external, not vllm/,
  },
  {
    name: "dangling model reference",
    text: yaml(...MODEL, "engines:", "  - kind: sim", "    model: qwen3-8b", "  - kind: sim", "    model: qwen3-8", "    count: 2"),
    path: "engines[1].model",
    line: 7,
    message: /unknown model "qwen3-8" \(did you mean "qwen3-8b"\?\); defined models: qwen3-8b/,
  },
  {
    name: "duplicate model names",
    text: yaml(...MODEL, "  - name: llama", "  - name: qwen3-8b"),
    path: "models[2].name",
    line: 4,
    message: /duplicate model name "qwen3-8b" \(also models\[0\]\)/,
  },
  {
    name: "duplicate explicit ports",
    text: yaml(...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b", "    port: 9000", "  - kind: sglang", "    model: qwen3-8b", "    port: 9000"),
    path: "engines[1].port",
    line: 9,
    message: /port 9000 overlaps engines\[0\] \(port 9000\)/,
  },
  {
    name: "ports overlapping through count",
    text: yaml(...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b", "    count: 3", "    port: 9000", "  - kind: vllm", "    model: qwen3-8b", "    port: 9002"),
    path: "engines[1].port",
    line: 10,
    message: /overlaps engines\[0\] \(ports 9000-9002\)/,
  },
  {
    name: "engine port equal to the frontend's",
    text: yaml("frontend:", "  listen: 0.0.0.0:8000", ...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b", "    port: 8000"),
    path: "engines[0].port",
    line: 8,
    message: /overlaps frontend\.listen/,
  },
  {
    name: "listen without a port",
    text: yaml("frontend:", "  listen: localhost"),
    path: "frontend.listen",
    line: 2,
    message: /expected HOST:PORT .*got "localhost"/,
  },
  {
    name: "listen with a port out of range",
    text: yaml("frontend:", "  listen: 127.0.0.1:99999"),
    path: "frontend.listen",
    line: 2,
    message: /expected HOST:PORT/,
  },
  {
    name: "listen given as a URL",
    text: yaml("frontend:", "  listen: http://127.0.0.1:8000"),
    path: "frontend.listen",
    line: 2,
    message: /expected HOST:PORT/,
  },
  {
    name: "negative duration",
    text: yaml("supervisor:", "  health_interval_ms: 1000", "  stop_timeout_ms: -5"),
    path: "supervisor.stop_timeout_ms",
    line: 3,
    message: /expected an integer between 0 and \d+ \(milliseconds\), got -5/,
  },
  {
    name: "GPUs not divisible by count",
    text: yaml(...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b", "    count: 2", "    gpus: [0, 1, 2]"),
    path: "engines[0].gpus",
    line: 7,
    message: /3 GPUs cannot be split evenly across count 2 engines/,
  },
  {
    name: "backoff start above its cap",
    text: yaml("supervisor:", "  restart_backoff_initial_ms: 5000", "  restart_backoff_max_ms: 1000"),
    path: "supervisor.restart_backoff_initial_ms",
    line: 2,
    message: /must not exceed restart_backoff_max_ms/,
  },
  {
    name: "unknown key inside the planner section, with the keys it takes",
    text: yaml("planner:", "  peers: [a, b]"),
    path: "planner.peers",
    line: 2,
    message: /unknown key; expected one of enabled, dry_run, tick_ms/,
  },
  {
    name: "peers discovery without seeds",
    text: yaml("cluster:", "  discovery: peers"),
    path: "cluster.peers.seeds",
    line: 1, // the missing key points at its nearest present parent
    message: /needs at least one seed/,
  },
  {
    name: "seed that is not HOST:PORT",
    text: yaml("cluster:", "  discovery: peers", "  peers:", "    seeds: [10.0.0.1]"),
    path: "cluster.peers.seeds[0]",
    line: 4,
    message: /expected HOST:PORT/,
  },
  {
    name: "bad environment variable name",
    text: yaml(...MODEL, "engines:", "  - kind: sim", "    model: qwen3-8b", "    env:", "      BAD-NAME: x"),
    path: "engines[0].env.BAD-NAME",
    line: 7,
    message: /invalid name "BAD-NAME"/,
  },
  {
    name: "YAML syntax error",
    text: yaml("node:", "  name: a", "frontend:", "\tlisten: 127.0.0.1:8000", "router:", "  policy: random"),
    path: "",
    line: 4,
    message: /^YAML syntax error: /,
  },
  {
    name: "YAML syntax error at end of input points at the last line",
    text: yaml("node:", "  name: 'gpu-01", "router: {}"),
    path: "",
    line: 3,
    message: /YAML syntax error: Missing closing 'quote/,
  },
  {
    name: "duplicate YAML key",
    text: yaml("router:", "  policy: random", "  policy: session"),
    path: "",
    line: 3,
    message: /YAML syntax error: Map keys must be unique/,
  },
  {
    name: "a list where the top-level map belongs",
    text: yaml("- node", "- frontend"),
    path: "",
    line: 1,
    message: /expected a map/,
  },
];

describe("config mistakes are reported with key path and line", () => {
  test.each(cases)("$name", ({ text, path, line, message }) => {
    const result = check(text);
    expect(result.config).toBeUndefined();
    const errors = result.findings.filter((f) => f.severity === "error");
    const hit = errors.find((f) => f.path === path);
    if (!hit) throw new Error(`no error at ${JSON.stringify(path)}; got:\n${renderFindings(errors, "herd.yaml")}`);
    expect(hit.line).toBe(line);
    expect(hit.message).toMatch(message);
  });
});

describe("finding rendering", () => {
  test("path: message at file:line", () => {
    const text = yaml(...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b", "    gpus: 0,1");
    const out = renderFindings(errorsOf(text), "herd.yaml");
    expect(out).toBe('engines[0].gpus: expected a list of integers, got "0,1" at herd.yaml:6');
  });

  test("every error is collected, not just the first", () => {
    const text = yaml("frontend:", "  listen: nope", "  max_in_flight: 0", "router:", "  policy: fastest", "bogus: 1");
    const got = errorsOf(text).map((f) => `${f.path}@${f.line}`).sort();
    expect(got).toEqual(["bogus@6", "frontend.listen@2", "frontend.max_in_flight@3", "router.policy@5"]);
  });

  test("warnings do not make a config invalid", () => {
    const text = yaml(...MODEL, "engines:", "  - kind: sim", "    model: qwen3-8b", "    gpus: [0]");
    const r = check(text);
    expect(r.config).toBeDefined();
    expect(r.findings).toEqual([
      { path: "engines[0].gpus", line: 6, severity: "warning", message: expect.stringContaining("sim engines use no GPUs") },
    ]);
    expect(renderFindings(r.findings, "herd.yaml")).toStartWith("warning: engines[0].gpus: ");
  });

  test("a per-model SLO for an unknown model is a warning", () => {
    const text = yaml(...MODEL, "router:", "  predicted:", "    models:", "      - {model: qwen3-8, ttft_ms: 500}");
    const r = check(text);
    expect(r.config).toBeDefined();
    const w = r.findings.find((f) => f.path === "router.predicted.models[0].model");
    expect(w?.severity).toBe("warning");
    expect(w?.message).toMatch(/unknown model "qwen3-8" \(did you mean "qwen3-8b"\?\)/);
    expect(check(text.replace("qwen3-8,", "qwen3-8b,")).findings.find((f) => f.path.startsWith("router.predicted"))).toBeUndefined();
  });

  test("a prefix-aware policy warns about a real engine's model without a tokenizer", () => {
    const text = yaml("router:", "  policy: kv", ...MODEL, "engines:", "  - kind: vllm", "    model: qwen3-8b");
    const r = check(text);
    expect(r.config).toBeDefined();
    const w = r.findings.find((f) => f.path === "models[0].tokenizer");
    expect(w?.severity).toBe("warning");
    expect(w?.line).toBe(4);
    const withTok = check(text.replace("qwen3-8b\n", "qwen3-8b\n    tokenizer: /m\n"));
    expect(withTok.findings.find((f) => f.path === "models[0].tokenizer")).toBeUndefined();
  });
});

describe("hostile input never crashes the parser", () => {
  test("alias fan-out is cut off with a finding", () => {
    // 20 engines, each an alias to a map whose args alias 60 strings: 1200 alias uses if walked fully.
    const lines = [
      "models:",
      "  - name: m",
      "x-arg: &s a", // an unknown key, reported on its own; its anchor still resolves
      "engines:",
      "  - &e { kind: sim, model: m, args: [" + Array(60).fill("*s").join(", ") + "] }",
      ...Array(19).fill("  - *e"),
    ];
    const r = parseConfigText(lines.join("\n"), "bomb.yaml", env);
    expect(r.config).toBeUndefined();
    expect(r.findings.some((f) => f.message === "more than 1000 alias uses")).toBe(true);
  });

  test("seeded mutations of a valid file: a config or error findings, never an exception", async () => {
    const { SeededRng } = await import("../../src/core/rng.ts");
    const base = yaml(...MODEL, "engines:", "  - kind: sim", "    model: qwen3-8b", "    args: [--time-scale, '20']", "frontend:", "  listen: 127.0.0.1:8000");
    const junk = [":", "-", "[", "]", "{", "}", "&a", "*a", "\t", "\n", "  ", "'", '"', "#", "!!int", "9".repeat(30), "null", "~"];
    const rng = new SeededRng(20261130);
    for (let i = 0; i < 300; i++) {
      let t = base;
      for (let k = 0; k < 1 + rng.int(4); k++) {
        const at = rng.int(t.length + 1);
        const cut = rng.int(3);
        t = t.slice(0, at) + (junk[rng.int(junk.length)] ?? "") + t.slice(at + cut);
      }
      const r = parseConfigText(t, "fuzz.yaml", env);
      const errors = r.findings.filter((f) => f.severity === "error");
      if (r.config === undefined) expect(errors.length).toBeGreaterThan(0);
      else expect(errors).toEqual([]);
      for (const f of r.findings) expect(f.line).toBeGreaterThanOrEqual(0);
    }
  });
});
