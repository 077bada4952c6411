// Folder READMEs tell the truth (issue 19): each folder under src/ has a README.md whose file table
// lists exactly the folder's files and subfolders, and each top-level folder's README has one
// "May import:" sentence naming exactly the folders its code imports. A README that lists a file
// that moved, misses a new one, or promises an import rule the code no longer keeps fails here.
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { importEdges, SRC, walk } from "./helpers/source.ts";

const dirs = (function all(dir: string, out: string[] = []): string[] {
  out.push(dir);
  for (const name of readdirSync(dir)) if (statSync(join(dir, name)).isDirectory()) all(join(dir, name), out);
  return out;
})(SRC).filter((d) => d !== SRC);

/** Names in the first cell of the rows of every table whose header's first cell is "file" (backticked, or bare and comma-separated). */
export function fileTable(readme: string): string[] | null {
  const names: string[] = [];
  let inTable = false;
  let found = false;
  for (const line of readme.split("\n")) {
    if (!line.startsWith("|")) {
      inTable = false;
      continue;
    }
    const first = line.split("|")[1]!.trim();
    if (/^-+$|^:?-+:?$/.test(first)) continue;
    if (!inTable && /^files?$/i.test(first)) {
      inTable = true;
      found = true;
      continue;
    }
    if (!inTable) continue;
    const ticked = [...first.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
    names.push(...(ticked.length > 0 ? ticked : first.split(/,\s*/).filter((n) => n !== "")));
  }
  return found ? names : null;
}

/** `drivers/<kind>.ts`, `policies/*.ts` → a matcher; `x.ts` → itself. */
const matcher = (name: string) => new RegExp(`^${name.replace(/[.+?^${}()|[\]\\]/g, (c) => `\\${c}`).replace(/<[^>]+>|\*/g, "[^/]+")}$`);
const isPattern = (name: string) => name.includes("<") || name.includes("*");

/** Problems of one folder's README file table against the folder, as sentences. */
export function tableProblems(dir: string, readme: string): string[] {
  const where = relative(SRC, dir);
  const table = fileTable(readme);
  if (table === null) return [`src/${where}/README.md has no file table (| file | job |)`];
  const out: string[] = [];
  const entries = readdirSync(dir).filter((n) => n !== "README.md");
  const files = entries.filter((n) => n.endsWith(".ts") && !statSync(join(dir, n)).isDirectory());
  const subdirs = entries.filter((n) => statSync(join(dir, n)).isDirectory());
  const claims = table.map((t) => ({ name: t, re: matcher(t.endsWith("/") ? t.slice(0, -1) : t) }));
  for (const f of files) if (!claims.some((c) => c.re.test(f))) out.push(`src/${where}/${f} is not in src/${where}/README.md's file table`);
  for (const d of subdirs) {
    const own = existsSync(join(dir, d, "README.md"));
    const claimed = claims.some((c) => c.name === `${d}/` || c.name.startsWith(`${d}/`));
    if (!claimed) out.push(`src/${where}/${d}/ is not in src/${where}/README.md's file table`);
    if (!own)
      for (const f of readdirSync(join(dir, d)).filter((n) => n.endsWith(".ts")))
        if (!claims.some((c) => c.re.test(`${d}/${f}`))) out.push(`src/${where}/${d}/${f} is not in src/${where}/README.md's file table (${d}/ has no README)`);
  }
  for (const c of claims) {
    const target = c.name.endsWith("/") ? c.name.slice(0, -1) : c.name;
    const exists = isPattern(target)
      ? (target.includes("/") ? readdirSync(join(dir, target.split("/")[0]!)).map((n) => `${target.split("/")[0]}/${n}`) : entries).some((n) => c.re.test(n))
      : existsSync(join(dir, target));
    if (!exists) out.push(`src/${where}/README.md's file table names ${c.name}, which is not in src/${where}/`);
  }
  return out;
}

/** The folders named in a README's "May import:" sentence (up to its first full stop); null without one. */
export function mayImport(readme: string, folders: ReadonlySet<string>): { names: Set<string>; count: number } | null {
  const found = [...readme.matchAll(/^May import:([\s\S]*?)(?:\.(?:\s|$)|\n\n)/gm)];
  if (found.length === 0) return null;
  const names = new Set<string>();
  for (const m of found[0]![1]!.matchAll(/`([^`]+)`/g)) if (folders.has(m[1]!)) names.add(m[1]!);
  return { names, count: found.length };
}

const topFolders = new Set(readdirSync(SRC).filter((n) => statSync(join(SRC, n)).isDirectory()));
const folderNames = new Set([...topFolders, "cli", "version"]);
const edges = importEdges(walk(SRC));

describe("folder READMEs", () => {
  test("every folder under src/ has a README.md", () => {
    expect(dirs.filter((d) => !existsSync(join(d, "README.md"))).map((d) => `src/${relative(SRC, d)}`)).toEqual([]);
  });

  test("each README's file table lists exactly its folder's files and subfolders", () => {
    const problems = dirs.filter((d) => existsSync(join(d, "README.md"))).flatMap((d) => tableProblems(d, readFileSync(join(d, "README.md"), "utf8")));
    expect(problems).toEqual([]);
  });

  test("each top-level README's \"May import:\" sentence names exactly the folders its code imports", () => {
    const problems: string[] = [];
    for (const f of [...topFolders].sort()) {
      const declared = mayImport(readFileSync(join(SRC, f, "README.md"), "utf8"), folderNames);
      if (declared === null) {
        problems.push(`src/${f}/README.md has no "May import:" sentence`);
        continue;
      }
      if (declared.count > 1) problems.push(`src/${f}/README.md has ${declared.count} "May import:" sentences`);
      const actual = new Set(edges.filter((e) => e.from === f).map((e) => e.to));
      for (const a of [...actual].sort())
        if (!declared.names.has(a)) problems.push(`src/${f} imports ${a} (e.g. src/${edges.find((e) => e.from === f && e.to === a)!.file}) but its README does not say it may`);
      for (const d of [...declared.names].sort()) if (!actual.has(d)) problems.push(`src/${f}/README.md says it may import ${d}, which it does not`);
    }
    expect(problems).toEqual([]);
  });

  test("the checks bite: a moved file, a missing file and a wrong import line are caught", () => {
    const readme = "# x\n\n| file | job |\n|---|---|\n| `gone.ts` | moved |\n| `drivers/<kind>.ts` | one per kind |\n\nMay import: `core`, `config` (types only).\n";
    const engine = join(SRC, "engine");
    const p = tableProblems(engine, readme);
    expect(p).toContain("src/engine/README.md's file table names gone.ts, which is not in src/engine/");
    expect(p).toContain("src/engine/driver.ts is not in src/engine/README.md's file table");
    expect(p.some((x) => x.includes("drivers/"))).toBe(false);
    expect(mayImport(readme, folderNames)).toEqual({ names: new Set(["core", "config"]), count: 1 });
    expect(fileTable("no table here")).toBeNull();
  });
});
