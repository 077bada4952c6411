// herd's source read as text, for the tests that hold the layout to the docs (test/architecture.test.ts,
// test/folders.test.ts): every .ts file under src/, the folder each belongs to, and the imports
// between folders. Good enough for a lint: comments are stripped, import specifiers are read.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

export const ROOT = resolve(import.meta.dir, "../..");
export const SRC = join(ROOT, "src");

export function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (name.endsWith(".ts")) out.push(p);
  }
  return out;
}

/** `src/router/policies/kv.ts` → `router`; top-level files are their own folder (`cli.ts` → `cli`). */
export function folderOf(file: string): string {
  const rel = relative(SRC, file);
  const first = rel.split("/")[0]!;
  return first.endsWith(".ts") ? first.slice(0, -3) : first;
}

/** Code without comments and string bodies that are not import specifiers (good enough for a lint). */
export function stripComments(src: string): string {
  return src.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

export const IMPORT = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)["'](\.{1,2}\/[^"']+)["']/gm;

export interface Edge {
  from: string;
  to: string;
  /** The importing file, relative to src/. */
  file: string;
  spec: string;
}

/** Imports from one folder of src/ into another (same-folder imports left out). */
export function importEdges(files: readonly string[]): Edge[] {
  const edges: Edge[] = [];
  for (const file of files) {
    const code = stripComments(readFileSync(file, "utf8"));
    for (const m of code.matchAll(IMPORT)) {
      const target = resolve(dirname(file), m[1]!);
      if (!target.startsWith(SRC + "/")) continue; // package.json for the version string
      const from = folderOf(file);
      const to = folderOf(target);
      if (from !== to) edges.push({ from, to, file: relative(SRC, file), spec: m[1]! });
    }
  }
  return edges;
}
