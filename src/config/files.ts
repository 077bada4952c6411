// Every file a config names, checked before `herd run` binds its listener or spawns an engine: a
// tokenizer directory that is not there used to surface only after "listening" was logged and vLLM
// had been started. One finding per missing or unusable file, with the key path and the file line
// (looked up in the YAML again, since a resolved Config carries no lines).
//
// Checked: models[].tokenizer (a directory holding tokenizer.json), models[].path when it is a local
// path (absolute, ./ or ../; otherwise it is a Hugging Face repo id the engine downloads) and an
// engine of the model reads it (the driver's `loadsModelPath`, which the caller passes: config sits
// below src/engine), engines[].command[0] (the `command` key, which only kind `command` may set:
// an executable, by path or on $PATH), planner.slo.profile (a file: the SLA mode's step cost). Keys added later that name files (token files, password files) get an entry in fileRefs().
import { accessSync, constants, readFileSync, statSync } from "node:fs";
import { delimiter, isAbsolute, join } from "node:path";
import { LineCounter, isNode, parseDocument } from "yaml";
import type { Finding } from "./findings.ts";
import type { Config, EngineKind } from "./types.ts";

/** What the checks need from the file system; tests inject a fake one. */
export interface FileFacts {
  kind(path: string): "file" | "dir" | "missing" | "unreadable";
  executable(path: string): boolean;
  pathEnv: string;
}

export const realFileFacts = (): FileFacts => ({
  kind(path) {
    try {
      const st = statSync(path);
      accessSync(path, constants.R_OK);
      return st.isDirectory() ? "dir" : "file";
    } catch (e) {
      return (e as { code?: string }).code === "ENOENT" || (e as { code?: string }).code === "ENOTDIR" ? "missing" : "unreadable";
    }
  },
  executable(path) {
    try {
      accessSync(path, constants.X_OK);
      return statSync(path).isFile();
    } catch {
      return false;
    }
  },
  pathEnv: process.env.PATH ?? "",
});

interface FileRef {
  path: string;
  value: string;
  check(f: FileFacts): string | null;
}

const looksLocal = (p: string) => isAbsolute(p) || p.startsWith("./") || p.startsWith("../");

/** Whether engines of a kind read models[].path themselves (src/engine: `driverFor(kind).loadsModelPath`). */
export type LoadsModelPath = (kind: EngineKind) => boolean;

function fileRefs(config: Config, loadsModelPath: LoadsModelPath): FileRef[] {
  const refs: FileRef[] = [];
  config.models.forEach((m, i) => {
    if (m.tokenizer !== "")
      refs.push({
        path: `models[${i}].tokenizer`,
        value: m.tokenizer,
        check(f) {
          const k = f.kind(m.tokenizer);
          if (k === "missing") return `tokenizer directory ${m.tokenizer} does not exist`;
          if (k === "unreadable") return `tokenizer directory ${m.tokenizer} cannot be read (permissions)`;
          if (k === "file") return `tokenizer ${m.tokenizer} is a file; give the directory that holds tokenizer.json`;
          const json = join(m.tokenizer, "tokenizer.json");
          const kj = f.kind(json);
          return kj === "file" ? null : `${json} ${kj === "missing" ? "does not exist" : "cannot be read"}`;
        },
      });
    const loaded = config.engines.some((e) => e.model === m.name && loadsModelPath(e.kind));
    if (loaded && looksLocal(m.path))
      refs.push({
        path: `models[${i}].path`,
        value: m.path,
        check: (f) => (f.kind(m.path) === "missing" ? `model path ${m.path} does not exist` : f.kind(m.path) === "unreadable" ? `model path ${m.path} cannot be read` : null),
      });
  });
  config.frontend.api_keys.forEach((k, i) => {
    if (typeof k === "string" || k.key_file === "") return;
    refs.push({
      path: `frontend.api_keys[${i}].key_file`,
      value: k.key_file,
      check: (f) => {
        const kind = f.kind(k.key_file);
        return kind === "file" ? null : `key file ${k.key_file} ${kind === "missing" ? "does not exist" : kind === "dir" ? "is a directory" : "cannot be read"}`;
      },
    });
  });
  config.engines.forEach((e, i) => {
    const exe = e.command[0];
    if (exe === undefined || exe.includes("{")) return;
    refs.push({
      path: `engines[${i}].command`,
      value: exe,
      check(f) {
        if (exe.includes("/")) return f.executable(exe) ? null : `${exe} is not an executable file`;
        const found = f.pathEnv.split(delimiter).some((d) => d !== "" && f.executable(join(d, exe)));
        return found ? null : `${exe} is not on $PATH`;
      },
    });
  });
  const profile = config.planner.slo?.profile ?? "";
  if (profile !== "")
    refs.push({
      path: "planner.slo.profile",
      value: profile,
      check(f) {
        const k = f.kind(profile);
        if (k === "missing") return `SLA profile ${profile} does not exist (write one with herd simulate --calibrate FILE --save ${profile})`;
        if (k === "unreadable") return `SLA profile ${profile} cannot be read (permissions)`;
        return k === "dir" ? `SLA profile ${profile} is a directory; give the --save file` : null;
      },
    });
  return refs;
}

/** Line of a key path (`models[0].tokenizer`) in YAML text; 0 when not found (a default). */
export function lineOfKey(text: string, path: string): number {
  const keys: (string | number)[] = [];
  for (const m of path.matchAll(/([A-Za-z_][\w-]*)|\[(\d+)\]/g)) keys.push(m[1] ?? Number(m[2]));
  try {
    const lc = new LineCounter();
    const doc = parseDocument(text, { lineCounter: lc });
    for (let n = keys.length; n > 0; n--) {
      const node = doc.getIn(keys.slice(0, n), true);
      if (isNode(node) && node.range) return lc.linePos(node.range[0]).line;
    }
  } catch {
    // Unparseable here means the config never loaded: no line.
  }
  return 0;
}

/**
 * Findings for every file `config` names that is missing or unusable. `configFile` (the YAML the
 * config came from, null for the embedded default) gives the lines.
 */
export function checkConfigFiles(config: Config, configFile: string | null, loadsModelPath: LoadsModelPath, facts: FileFacts = realFileFacts()): Finding[] {
  let text: string | null = null;
  const findings: Finding[] = [];
  for (const ref of fileRefs(config, loadsModelPath)) {
    const message = ref.check(facts);
    if (message === null) continue;
    if (text === null && configFile !== null) {
      try {
        text = readFileSync(configFile, "utf8");
      } catch {
        text = "";
      }
    }
    findings.push({ path: ref.path, line: text ? lineOfKey(text, ref.path) : 0, message, severity: "error" });
  }
  return findings;
}
