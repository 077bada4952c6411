// JSON Schema (draft-07, what editor YAML plugins read) generated from the spec. herd itself validates
// with resolve.ts + validate.ts; this file only gives editors completion, docs and early red squiggles.

import type { AnySpec } from "./spec.ts";
import { configSpec } from "./schema.ts";

type Json = Record<string, unknown>;

export function toJsonSchema(spec: AnySpec): Json {
  const out: Json = { description: spec.doc };
  // Defaults that depend on the host (node.name, node.data_dir) are described, not stated.
  if (spec.default !== undefined && typeof spec.default !== "function") out.default = spec.default;
  switch (spec.kind) {
    case "string":
      out.type = "string";
      if (spec.nonEmpty) out.minLength = 1;
      if (spec.pattern) out.pattern = spec.pattern;
      break;
    case "int":
    case "number":
      out.type = spec.kind === "int" ? "integer" : "number";
      if (spec.min !== undefined) out.minimum = spec.min;
      if (spec.max !== undefined) out.maximum = spec.max;
      break;
    case "bool":
      out.type = "boolean";
      break;
    case "enum":
      out.enum = [...spec.values];
      break;
    case "list":
      out.type = "array";
      out.items = toJsonSchema(spec.of);
      if (spec.maxItems !== undefined) out.maxItems = spec.maxItems;
      break;
    case "map":
      out.type = "object";
      out.additionalProperties = { type: "string" };
      if (spec.keyPattern) out.propertyNames = { pattern: spec.keyPattern };
      break;
    case "object": {
      out.type = "object";
      const props: Json = {};
      const required: string[] = [];
      for (const [k, f] of Object.entries(spec.fields)) {
        props[k] = toJsonSchema(f);
        const derived = f.kind === "string" && f.defaultFrom !== undefined;
        if (f.default === undefined && f.kind !== "object" && !derived) required.push(k);
      }
      out.properties = props;
      if (required.length) out.required = required;
      out.additionalProperties = false;
      Object.assign(out, spec.jsonSchemaExtra ?? {});
      break;
    }
    case "stringOrObject":
      return { description: spec.doc, anyOf: [toJsonSchema(spec.str), toJsonSchema(spec.obj)] };
    case "nullable":
      return { ...toJsonSchema(spec.of), type: ["object", "null"], description: spec.doc, default: null };
    case "reserved":
      out.type = ["object", "null"];
      out.maxProperties = 0;
      break;
  }
  return out;
}

/** The document written to config/herd.schema.json. */
export function herdJsonSchema(): Json {
  return {
    $schema: "http://json-schema.org/draft-07/schema#",
    title: "herd configuration",
    ...toJsonSchema(configSpec),
    // An empty YAML file is a valid config (everything defaults).
    type: ["object", "null"],
  };
}

export const renderJsonSchema = (): string => JSON.stringify(herdJsonSchema(), null, 2) + "\n";
