// The shipped files: the example config is valid (as is and with its alternative entries enabled)
// and shows every key; the committed JSON Schema is what scripts/gen-schema.ts generates today.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { herdJsonSchema, renderJsonSchema } from "../../src/config/json-schema.ts";
import { parseConfigText, renderFindings } from "../../src/config/index.ts";

const root = join(import.meta.dir, "..", "..");
const exampleText = readFileSync(join(root, "config", "herd.example.yaml"), "utf8");
const env = { hostname: "test-host", dataDir: "/tmp/herd-test" };

/** Every key path in a JSON Schema, with list items as `[]`. */
function schemaPaths(s: Record<string, unknown>, prefix = ""): string[] {
  const props = s.properties as Record<string, Record<string, unknown>> | undefined;
  const items = s.items as Record<string, unknown> | undefined;
  if (props) return Object.entries(props).flatMap(([k, v]) => [prefix + k, ...schemaPaths(v, `${prefix}${k}.`)]);
  if (items) return schemaPaths(items, prefix.replace(/\.$/, "[]."));
  return [];
}

/** Every key path present in a parsed YAML value, same notation. */
function valuePaths(v: unknown, prefix = ""): string[] {
  if (Array.isArray(v)) return v.flatMap((x) => valuePaths(x, prefix.replace(/\.$/, "[].")));
  if (v && typeof v === "object")
    return Object.entries(v).flatMap(([k, x]) => [prefix + k, ...(k === "env" ? [] : valuePaths(x, `${prefix}${k}.`))]);
  return [];
}

describe("config/herd.example.yaml", () => {
  test("parses with zero findings", () => {
    const r = parseConfigText(exampleText, "herd.example.yaml", env);
    expect(renderFindings(r.findings, "herd.example.yaml")).toBe("");
    expect(r.config?.engines[0]?.kind).toBe("sim");
  });

  test("with its #~ alternative entries enabled it still parses with zero findings", () => {
    const enabled = exampleText.replace(/^#~ /gm, "");
    expect(enabled).not.toBe(exampleText);
    const r = parseConfigText(enabled, "herd.example.yaml", env);
    expect(renderFindings(r.findings, "herd.example.yaml")).toBe("");
    expect(r.config?.engines.map((e) => e.kind)).toEqual(["sim", "vllm", "command", "external"]);
  });

  test("shows every key of the schema", () => {
    const shown = new Set(valuePaths(parseYaml(exampleText.replace(/^#~ /gm, ""))));
    const missing = schemaPaths(herdJsonSchema()).filter((p) => !shown.has(p));
    expect(missing).toEqual([]);
  });
});

describe("config/herd.schema.json", () => {
  test("is up to date with src/config/schema.ts (run: bun scripts/gen-schema.ts)", () => {
    const committed = readFileSync(join(root, "config", "herd.schema.json"), "utf8");
    expect(committed).toBe(renderJsonSchema());
  });

  test("forbids unknown keys and marks required ones, like herd does", () => {
    const s = herdJsonSchema() as { additionalProperties: boolean; properties: Record<string, any> };
    expect(s.additionalProperties).toBe(false);
    const engine = s.properties.engines.items;
    expect(engine.required).toEqual(["kind", "model"]);
    expect(engine.additionalProperties).toBe(false);
    expect(s.properties.router.properties.policy.enum).toEqual(["round-robin", "random", "power-of-two", "least-loaded", "session", "kv", "prefix", "predicted", "approx", "prefixaware"]);
    expect(s.properties.planner.additionalProperties).toBe(false);
    expect(s.properties.cluster.properties.discovery.enum).toEqual(["file", "peers", "etcd"]);
  });
});
