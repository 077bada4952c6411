// Walks the YAML tree against the spec: fills defaults, checks types and bounds, rejects unknown keys,
// and records the line of every key path so later (semantic) findings can name their line too.
// It collects every finding instead of stopping at the first, and never throws on bad input.

import { isAlias, isMap, isScalar, isSeq, type Document, type LineCounter, type Node } from "yaml";
import { didYouMean, type Finding } from "./findings.ts";
import { isSecretPath } from "./redact.ts";
import { resolveDefault, type AnySpec, type DefaultsEnv, type ObjectSpec } from "./spec.ts";

export interface WalkContext {
  readonly doc: Document;
  readonly lineCounter: LineCounter;
  readonly env: DefaultsEnv;
  readonly findings: Finding[];
  /** Line of every key path present in the file. */
  readonly lines: Map<string, number>;
  /** Alias dereferences so far; bounded so a "billion laughs" file cannot expand exponentially. */
  aliases: number;
}

export const MAX_ALIASES = 1000;

/** A value that failed its check; the config is discarded when any error exists, so any value will do. */
const INVALID = undefined;

export function lineOfNode(ctx: WalkContext, node: unknown): number {
  const range = (node as Node | null)?.range;
  return range ? ctx.lineCounter.linePos(range[0]).line : 0;
}

/** The line for a path: its own, else its nearest recorded parent's (for keys that are absent). */
export function lineOfPath(lines: ReadonlyMap<string, number>, path: string): number {
  for (let p = path; p !== ""; p = parentPath(p)) {
    const l = lines.get(p);
    if (l !== undefined) return l;
  }
  return lines.get("") ?? 0;
}

export function parentPath(path: string): string {
  const i = Math.max(path.lastIndexOf("."), path.lastIndexOf("["));
  return i <= 0 ? "" : path.slice(0, i);
}

export const joinKey = (path: string, key: string): string =>
  /^[A-Za-z_][A-Za-z0-9_-]*$/.test(key) ? (path ? `${path}.${key}` : key) : `${path}[${JSON.stringify(key)}]`;

function error(ctx: WalkContext, path: string, line: number, message: string): typeof INVALID {
  ctx.findings.push({ path, line, message, severity: "error" });
  return INVALID;
}

function describe(node: unknown): string {
  if (isMap(node)) return "a map";
  if (isSeq(node)) return "a list";
  if (isScalar(node)) {
    const v = node.value;
    if (typeof v === "string") return JSON.stringify(v);
    if (typeof v === "number" || typeof v === "boolean") return `${typeof v} ${String(v)}`;
    return String(v);
  }
  return "something else";
}

function expectedName(spec: AnySpec, plural = false): string {
  switch (spec.kind) {
    case "string":
      return plural ? "strings" : "a string";
    case "int":
      return plural ? "integers" : "an integer";
    case "number":
      return plural ? "numbers" : "a number";
    case "bool":
      return plural ? "booleans" : "true or false";
    case "enum":
      return plural ? "names" : "a name";
    case "list":
      return plural ? "lists" : `a list of ${expectedName(spec.of, true)}`;
    case "map":
    case "object":
    case "nullable":
    case "reserved":
      return plural ? "maps" : "a map";
    case "stringOrObject":
      return plural ? "strings or maps" : "a string or a map";
  }
}

function bounds(spec: { min?: number; max?: number }): string {
  const { min, max } = spec;
  if (min !== undefined && max !== undefined) return ` between ${min} and ${max}`;
  if (min !== undefined) return ` ≥ ${min}`;
  if (max !== undefined) return ` ≤ ${max}`;
  return "";
}

/** Resolve `node` (absent when undefined) against `spec`; `line` is where an absent key would go. */
export function resolveValue(ctx: WalkContext, spec: AnySpec, rawNode: unknown, path: string, line: number): unknown {
  let node = rawNode;
  if (isAlias(rawNode)) {
    if (++ctx.aliases > MAX_ALIASES) return error(ctx, path, lineOfNode(ctx, rawNode) || line, `more than ${MAX_ALIASES} alias uses`);
    node = rawNode.resolve(ctx.doc);
  }
  const absent = node === undefined || node === null || (isScalar(node) && node.value === null);
  if (!absent) line = lineOfNode(ctx, rawNode) || line;
  if (absent) {
    if (spec.kind === "object") return resolveObject(ctx, spec, undefined, path, line);
    if (spec.default !== undefined) return resolveDefault(spec.default as never, ctx.env);
    return error(ctx, path, line, `missing required key (${spec.doc.replace(/\.$/, "")})`);
  }
  // A key's own line (set by resolveObject) wins over its value's, which may start a line later.
  if (!ctx.lines.has(path)) ctx.lines.set(path, line);
  const secret = isSecretPath(path); // a finding must not print a token (issue 22, row 12)
  const got = secret && isScalar(node) ? `a ${typeof node.value} (value not shown: a secret)` : describe(node);
  switch (spec.kind) {
    case "string": {
      if (!isScalar(node) || typeof node.value !== "string") {
        const hint = !secret && isScalar(node) && (typeof node.value === "number" || typeof node.value === "boolean")
          ? ` (quote it: "${String(node.value)}")`
          : "";
        return error(ctx, path, line, `expected a string, got ${got}${hint}`);
      }
      const v = node.value;
      if (spec.nonEmpty && v.trim() === "") return error(ctx, path, line, "expected a non-empty string");
      const bad = spec.check?.(v) ?? null;
      return bad === null ? v : error(ctx, path, line, bad);
    }
    case "int":
    case "number": {
      const v = isScalar(node) ? node.value : undefined;
      const ok = typeof v === "number" && Number.isFinite(v) && (spec.kind === "number" || Number.isInteger(v));
      const unit = path.endsWith("_ms") ? " (milliseconds)" : "";
      const what = `${spec.kind === "int" ? "an integer" : "a number"}${bounds(spec)}${unit}`;
      if (!ok) return error(ctx, path, line, `expected ${what}, got ${got}`);
      if ((spec.min !== undefined && v < spec.min) || (spec.max !== undefined && v > spec.max))
        return error(ctx, path, line, `expected ${what}, got ${v}`);
      return v;
    }
    case "bool":
      if (isScalar(node) && typeof node.value === "boolean") return node.value;
      return error(ctx, path, line, `expected true or false, got ${got}`);
    case "enum": {
      const v = isScalar(node) ? node.value : undefined;
      if (typeof v === "string" && spec.values.includes(v)) return v;
      const later = typeof v === "string" ? spec.later?.[v] : undefined;
      const list = spec.values.join(" | ");
      if (later) return error(ctx, path, line, `${JSON.stringify(v)} is not available yet (${later}); expected one of ${list}`);
      const dym = typeof v === "string" ? didYouMean(v, spec.values) : "";
      return error(ctx, path, line, `expected one of ${list}, got ${got}${dym}`);
    }
    case "list": {
      if (!isSeq(node)) return error(ctx, path, line, `expected ${expectedName(spec)}, got ${got}`);
      if (spec.maxItems !== undefined && node.items.length > spec.maxItems)
        return error(ctx, path, line, `expected at most ${spec.maxItems} entries, got ${node.items.length}`);
      return node.items.map((item, i) => resolveValue(ctx, spec.of, item, `${path}[${i}]`, line));
    }
    case "map": {
      if (!isMap(node)) return error(ctx, path, line, `expected a map of NAME: "value" strings, got ${got}`);
      const out: Record<string, string> = {};
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? pair.key.value : undefined;
        const keyLine = lineOfNode(ctx, pair.key) || line;
        if (typeof key !== "string" && typeof key !== "number") {
          error(ctx, path, keyLine, `expected string keys, got ${describe(pair.key)}`);
          continue;
        }
        const k = String(key);
        const p = joinKey(path, k);
        if (spec.keyPattern && !new RegExp(spec.keyPattern).test(k)) error(ctx, p, keyLine, `invalid name ${JSON.stringify(k)}`);
        const v = resolveValue(ctx, { kind: "string", doc: "A value." }, pair.value, p, keyLine);
        if (typeof v === "string") out[k] = v;
      }
      return out;
    }
    case "object":
      if (!isMap(node)) return error(ctx, path, line, `expected a map, got ${got}`);
      return resolveObject(ctx, spec, node, path, line);
    case "nullable":
      return resolveValue(ctx, spec.of, node, path, line);
    case "stringOrObject":
      return resolveValue(ctx, isMap(node) ? spec.obj : spec.str, node, path, line);
    case "reserved": {
      if (!isMap(node)) return error(ctx, path, line, `expected an empty map, got ${got}`);
      const section = path || "this";
      for (const pair of node.items) {
        const k = isScalar(pair.key) ? String(pair.key.value) : describe(pair.key);
        error(ctx, joinKey(path, k), lineOfNode(ctx, pair.key) || line,
          `unknown key: the ${section} section is reserved (${spec.arrives}); leave it empty`);
      }
      return {};
    }
  }
}

function resolveObject(
  ctx: WalkContext,
  spec: ObjectSpec<unknown>,
  node: unknown,
  path: string,
  line: number,
): Record<string, unknown> {
  const given = new Map<string, unknown>();
  const keyLines = new Map<string, number>();
  const known = Object.keys(spec.fields);
  if (isMap(node)) {
    for (const pair of node.items) {
      const keyLine = lineOfNode(ctx, pair.key) || line;
      const key = isScalar(pair.key) ? pair.key.value : undefined;
      if (typeof key !== "string") {
        error(ctx, path, keyLine, `expected a key name, got ${describe(pair.key)}`);
        continue;
      }
      if (!(key in spec.fields)) {
        error(ctx, joinKey(path, key), keyLine, `unknown key${didYouMean(key, known)}; expected one of ${known.join(", ")}`);
        continue;
      }
      given.set(key, pair.value ?? null);
      keyLines.set(key, keyLine);
    }
  }
  const out: Record<string, unknown> = {};
  const derived: [string, string][] = [];
  for (const [key, fieldSpec] of Object.entries(spec.fields)) {
    const p = joinKey(path, key);
    if (!given.has(key) && fieldSpec.kind === "string" && fieldSpec.defaultFrom) {
      derived.push([key, fieldSpec.defaultFrom]);
      continue;
    }
    const kl = keyLines.get(key);
    if (kl !== undefined) ctx.lines.set(p, kl);
    out[key] = resolveValue(ctx, fieldSpec, given.get(key), p, kl ?? line);
  }
  for (const [key, from] of derived) out[key] = out[from];
  return out;
}
