// The `tracing` section: off by default; each empty key falls back to its standard OTEL_* variable
// (signal-specific first), then the OpenTelemetry default; bad values are findings with their path
// and line; a protocol herd cannot speak fails the start with the variable's name. And the seam:
// only src/daemon/tracing.ts names @opentelemetry, and only through type imports and import() — so
// a node with tracing off never loads the SDK.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { defaultConfig, parseConfigText } from "../../src/config/index.ts";
import { otlpProtocol, otlpTracesUrl, serviceName } from "../../src/config/tracing.ts";
import { memoryLogger } from "../helpers/log.ts";
import { startTracing } from "../../src/daemon/tracing.ts";

const env = { hostname: "test-host", dataDir: "/tmp/herd-test" };
const t = () => defaultConfig(env).tracing;

describe("tracing config", () => {
  test("off by default, every key empty (the OTEL_* variables decide)", () => {
    expect(t()).toEqual({ enabled: false, endpoint: "", protocol: "", service_name: "", sampler: "", sampler_arg: -1, engines: true });
  });

  test("URL: the key's base + /v1/traces, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, else localhost:4318", () => {
    expect(otlpTracesUrl({ ...t(), endpoint: "http://tempo:4318/" }, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://x/y" })).toBe("http://tempo:4318/v1/traces");
    expect(otlpTracesUrl(t(), { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://x/custom", OTEL_EXPORTER_OTLP_ENDPOINT: "http://y" })).toBe("http://x/custom");
    expect(otlpTracesUrl(t(), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/base" })).toBe("http://collector:4318/base/v1/traces");
    expect(otlpTracesUrl(t(), {})).toBe("http://localhost:4318/v1/traces");
  });

  test("protocol and service name: key, then the signal's variable, then the general one, then the default", () => {
    expect(otlpProtocol({ ...t(), protocol: "http/json" }, { OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toBe("http/json");
    expect(otlpProtocol(t(), { OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json", OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" })).toBe("http/json");
    expect(otlpProtocol(t(), {})).toBe("http/protobuf");
    expect(otlpProtocol(t(), { OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toEqual({ unsupported: "grpc", from: "OTEL_EXPORTER_OTLP_PROTOCOL" });
    expect(serviceName(t(), { OTEL_SERVICE_NAME: "edge" })).toBe("edge");
    expect(serviceName({ ...t(), service_name: "mine" }, { OTEL_SERVICE_NAME: "edge" })).toBe("mine");
    expect(serviceName(t(), {})).toBe("herd");
  });

  test("bad values are findings at their key's path and line", () => {
    const r = parseConfigText("seed: 1\ntracing:\n  endpoint: tempo:4318\n  protocol: grpc\n  sampler_arg: 2\n", "herd.yaml", env);
    const paths = r.findings.filter((f) => f.severity === "error").map((f) => `${f.path}@${f.line}`);
    expect(paths).toEqual(expect.arrayContaining(["tracing.endpoint@3", "tracing.protocol@4", "tracing.sampler_arg@5"]));
  });

  test("a gRPC protocol from the environment fails the start, naming the variable", async () => {
    const c = defaultConfig(env);
    c.tracing.enabled = true;
    await expect(startTracing(c, memoryLogger(), { OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "grpc" })).rejects.toThrow(/OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc/);
  });

  test("only src/daemon/tracing.ts names @opentelemetry, through type imports and import() only", () => {
    const src = join(import.meta.dir, "../../src");
    const files: string[] = [];
    const walk = (d: string) => {
      for (const f of readdirSync(d)) {
        const p = join(d, f);
        if (statSync(p).isDirectory()) walk(p);
        else if (p.endsWith(".ts")) files.push(p);
      }
    };
    walk(src);
    const naming = files.filter((f) => readFileSync(f, "utf8").includes("@opentelemetry/")).map((f) => relative(src, f));
    expect(naming).toEqual(["daemon/tracing.ts"]);
    const text = readFileSync(join(src, "daemon/tracing.ts"), "utf8");
    const staticImports = text.split("\n").filter((l) => /^import\s/.test(l) && l.includes("@opentelemetry/"));
    for (const l of staticImports) expect(l).toMatch(/^import type /);
  });
});
