// Entry points for config: text or file → resolved Config plus findings. Phases: YAML parse (syntax
// errors with lines) → resolve against the spec (types, defaults, unknown keys) → semantic checks.
// Every phase collects all its findings; a config is returned only when there is no error.

import { Document, LineCounter, isScalar, parseDocument, visit } from "yaml";
import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { errorMessage } from "../core/errors.ts";
import { checkListen } from "./checks.ts";
import { hasErrors, type Finding } from "./findings.ts";
import { hostDefaults } from "./host.ts";
import { lineOfNode, lineOfPath, resolveValue, type WalkContext } from "./resolve.ts";
import { configSpec } from "./schema.ts";
import type { DefaultsEnv } from "./spec.ts";
import type { Config } from "./types.ts";
import { validateConfig } from "./validate.ts";

export interface ConfigResult {
  /** Present only when there are no error findings. */
  config?: Config;
  findings: Finding[];
  /** The file the findings' lines refer to (for renderFindings); absent for command-line overrides. */
  file?: string;
  /** Line of a key path in that file (0 when unknown), for checks run after loading (engine/check.ts). */
  lineOf?: (path: string) => number;
}

export interface Overrides {
  /** `herd run --listen HOST:PORT` */
  listen?: string;
}

/** Parse and validate YAML text; `fileName` is only used for messages. */
export function parseConfigText(text: string, fileName = "herd.yaml", env: DefaultsEnv = hostDefaults()): ConfigResult {
  try {
    return parseUnsafe(text, fileName, env);
  } catch (e) {
    // Bad input must end as a finding, never as a crash (e.g. a stack overflow on absurd nesting).
    const message = `cannot parse config: ${errorMessage(e)}`;
    return { findings: [{ path: "", line: 0, message, severity: "error" }], file: fileName };
  }
}

/** Config files are small; anything bigger is a mistake (a log, a binary) and is refused unread. */
export const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

const MAX_SYNTAX_FINDINGS = 10;

function parseUnsafe(text: string, file: string, env: DefaultsEnv): ConfigResult {
  if (text.length > MAX_CONFIG_BYTES)
    return { findings: [{ path: "", line: 0, message: `config is larger than ${MAX_CONFIG_BYTES} bytes`, severity: "error" }], file };
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, strict: true });
  const findings: Finding[] = [];
  // An error found at end of input (e.g. an unclosed quote) points at the last line, not past it.
  const lastLine = Math.max(1, text.replace(/\n+$/, "").split("\n").length);
  const at = (pos: readonly [number, number]) => Math.min(lineCounter.linePos(pos[0]).line, lastLine);
  // The first few syntax errors say what is wrong; hundreds (a file that is not YAML) say nothing more.
  for (const e of doc.errors.slice(0, MAX_SYNTAX_FINDINGS))
    findings.push({ path: "", line: at(e.pos), message: `YAML syntax error: ${firstLine(e.message)}`, severity: "error" });
  if (doc.errors.length > MAX_SYNTAX_FINDINGS)
    findings.push({ path: "", line: 0, message: `${doc.errors.length - MAX_SYNTAX_FINDINGS} more YAML syntax errors not shown`, severity: "error" });
  if (findings.length) return { findings, file };
  for (const w of doc.warnings) findings.push({ path: "", line: at(w.pos), message: `YAML: ${firstLine(w.message)}`, severity: "warning" });

  const ctx: WalkContext = { doc, lineCounter, env, findings, lines: new Map([["", 1]]), aliases: 0 };
  const root = doc.contents;
  const value = resolveValue(ctx, configSpec, root, "", lineOfNode(ctx, root) || 1) as Config | undefined;
  if (value === undefined || hasErrors(findings)) return { findings, file };

  // The embedded demo (one sim model, two sim engines) fills in only when neither list is given:
  // a config naming its own models must not silently gain a simulated engine, and vice versa.
  const given = (k: string) => ctx.lines.has(k);
  if (given("models") !== given("engines")) {
    if (!given("models")) value.models = [];
    if (!given("engines")) value.engines = [];
  }
  findings.push(...validateConfig(value, (p) => lineOfPath(ctx.lines, p)));
  return hasErrors(findings) ? { findings, file } : { config: value, findings, file, lineOf: (p) => lineOfPath(ctx.lines, p) };
}

export async function loadConfigFile(path: string, env: DefaultsEnv = hostDefaults()): Promise<ConfigResult> {
  let text: string;
  try {
    const read = await readConfigBytes(path);
    if (typeof read === "string") return { findings: [{ path: "", line: 0, message: read, severity: "error" }], file: path };
    const bytes = read;
    const binary = binaryAt(bytes);
    if (binary !== null) {
      // A binary file as YAML yields hundreds of syntax errors (≈10 KB of echo for /bin/true).
      const message = `not a YAML text file: ${binary}; expected a herd config (YAML)`;
      return { findings: [{ path: "", line: 0, message, severity: "error" }], file: path };
    }
    text = bytes.toString("utf8");
  } catch (e) {
    const code = (e as { code?: string }).code;
    const reason = code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : code === "EISDIR" ? "is a directory" : errorMessage(e);
    const message = `cannot read config file: ${reason}`;
    return { findings: [{ path: "", line: 0, message, severity: "error" }], file: path };
  }
  const result = parseConfigText(text, path, env);
  if (result.config) resolvePaths(result.config, dirname(resolve(path)));
  return result;
}

/**
 * The file's bytes, or why it cannot be a config. Opened non-blocking and checked on the open fd, so
 * neither a FIFO (open and read block forever) nor a device such as /dev/zero (stat size 0, read
 * until ENOMEM) gets past, even if the path is swapped after a check (issue 22); at most
 * MAX_CONFIG_BYTES + 1 bytes are ever read.
 */
async function readConfigBytes(path: string): Promise<Buffer | string> {
  const fh = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = await fh.stat();
    if (st.isDirectory()) return "cannot read config file: is a directory";
    if (!st.isFile()) {
      const kind = st.isFIFO() ? "a FIFO" : st.isCharacterDevice() ? "a character device" : st.isBlockDevice() ? "a block device" : st.isSocket() ? "a socket" : "not a regular file";
      return `cannot read config file: ${kind}; expected a regular file`;
    }
    if (st.size > MAX_CONFIG_BYTES) return `config file is larger than ${MAX_CONFIG_BYTES} bytes (${st.size})`;
    const buf = Buffer.alloc(MAX_CONFIG_BYTES + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n, n);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > MAX_CONFIG_BYTES) return `config file is larger than ${MAX_CONFIG_BYTES} bytes (it grew while read)`;
    }
    return buf.subarray(0, n);
  } finally {
    await fh.close();
  }
}

/** Why `bytes` is not text (a NUL byte or invalid UTF-8, with its offset), or null for text. */
export function binaryAt(bytes: Uint8Array): string | null {
  const nul = bytes.indexOf(0);
  if (nul >= 0) return `NUL byte at offset ${nul}`;
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return "invalid UTF-8";
  }
  return null;
}

/** Relative directories in a config file mean "next to this file", not "wherever herd was started". */
function resolvePaths(config: Config, baseDir: string): void {
  config.node.data_dir = resolve(baseDir, config.node.data_dir);
  for (const m of config.models) if (m.tokenizer !== "") m.tokenizer = resolve(baseDir, m.tokenizer);
  if (config.planner.slo && config.planner.slo.profile !== "") config.planner.slo.profile = resolve(baseDir, config.planner.slo.profile);
  for (const k of config.frontend.api_keys) if (typeof k !== "string" && k.key_file !== "") k.key_file = resolve(baseDir, k.key_file);
}

/** The embedded default: one node named after the host, 127.0.0.1:8000, two sim engines of `herd-sim`. */
export function defaultConfig(env: DefaultsEnv = hostDefaults()): Config {
  const r = parseConfigText("", "<embedded default>", env);
  if (!r.config) throw new Error(`embedded default config is invalid: ${r.findings.map((f) => f.message).join("; ")}`);
  return r.config;
}

/** Command-line overrides on top of a valid config; re-checks what they can break (e.g. a port clash). */
export function applyOverrides(config: Config, overrides: Overrides): ConfigResult {
  const next: Config = structuredClone(config);
  const findings: Finding[] = [];
  if (overrides.listen !== undefined) {
    const bad = checkListen(overrides.listen);
    if (bad) return { findings: [{ path: "--listen", line: 0, message: bad, severity: "error" }] };
    next.frontend.listen = overrides.listen;
    for (const f of validateConfig(next)) {
      if (f.severity === "error" && /port/.test(f.path) && /frontend\.listen/.test(f.message))
        findings.push({ ...f, message: `${f.message} (set by --listen)` });
    }
  }
  return hasErrors(findings) ? { findings } : { config: next, findings };
}

/** The resolved config as YAML (what `herd config check` prints). */
export function configToYaml(config: Config): string {
  const doc = new Document(config);
  // Short lists of scalars (args, gpus, command) read best on one line, as people write them.
  visit(doc, {
    Seq: (_key, node) => {
      if (node.items.every((i) => isScalar(i))) node.flow = true;
    },
  });
  return doc.toString({ lineWidth: 0 });
}

function firstLine(s: string): string {
  return s.split("\n")[0] ?? s;
}
