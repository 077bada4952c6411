// The layout is the architecture (docs/architecture.md): folders under src/ sit on layers, and a
// folder may import only from its own layer or a lower one; the folder graph has no cycle; time and
// randomness enter only through src/core (Clock, Rng), so one seed and one virtual clock reproduce
// a run. These tests read the source as text: they fail the moment an import or a call breaks that.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { relative } from "node:path";
import { folderOf, IMPORT, importEdges, SRC, stripComments, walk } from "./helpers/source.ts";

/** Lower lines first. Keep in step with docs/architecture.md and the folder READMEs. */
export const LAYERS: readonly (readonly string[])[] = [
  ["core"],
  ["config", "protocol", "transport", "http", "version"],
  ["tokenizer", "workers"],
  ["kv", "engine", "metrics", "workload"],
  ["preprocess", "router"],
  ["request", "pd", "tier", "cluster", "planner"],
  ["frontend", "admin"],
  ["bench", "simulate", "ops"],
  ["daemon"],
  ["cli"],
];

const rankOf = new Map<string, number>();
LAYERS.forEach((line, i) => line.forEach((f) => rankOf.set(f, i)));

const files = walk(SRC);
const edges = importEdges(files);

describe("architecture", () => {
  test("every folder under src/ is on a layer", () => {
    const unknown = [...new Set(files.map(folderOf))].filter((f) => !rankOf.has(f));
    expect(unknown).toEqual([]);
  });

  test("imports point down the layers (a folder imports only its own layer or lower ones)", () => {
    const upward = edges
      .filter((e) => (rankOf.get(e.to) ?? 99) > (rankOf.get(e.from) ?? -1))
      .map((e) => `src/${e.file} imports ${e.spec} (${e.from} → ${e.to} runs up the layers)`);
    expect(upward).toEqual([]);
  });

  test("the folder graph is acyclic", () => {
    const adj = new Map<string, Set<string>>();
    for (const e of edges) {
      if (!adj.has(e.from)) adj.set(e.from, new Set());
      adj.get(e.from)!.add(e.to);
    }
    const state = new Map<string, "visiting" | "done">();
    const cycles: string[] = [];
    const visit = (n: string, path: string[]) => {
      if (state.get(n) === "done") return;
      if (state.get(n) === "visiting") {
        cycles.push([...path.slice(path.indexOf(n)), n].join(" → "));
        return;
      }
      state.set(n, "visiting");
      for (const m of adj.get(n) ?? []) visit(m, [...path, n]);
      state.set(n, "done");
    };
    for (const n of adj.keys()) visit(n, []);
    const witness = (c: string) => {
      const [a, b] = c.split(" → ");
      return edges.find((e) => e.from === a && e.to === b)?.file ?? "?";
    };
    expect(cycles.map((c) => `${c} (e.g. src/${witness(c)})`)).toEqual([]);
  });

  test("time and randomness enter only through src/core (Clock, Rng)", () => {
    const banned = /\b(Date\.now|setInterval|setTimeout|Math\.random)\b/;
    const leaks: string[] = [];
    for (const file of files) {
      if (folderOf(file) === "core") continue;
      // The status page's script runs in the browser (its polling timer), never in herd.
      if (relative(SRC, file) === "admin/page-js.ts") continue;
      const lines = stripComments(readFileSync(file, "utf8")).split("\n");
      lines.forEach((line, i) => {
        if (banned.test(line)) leaks.push(`src/${relative(SRC, file)}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(leaks).toEqual([]);
  });

  test("an engine kind's name is tested only in its driver (everything else asks a capability)", () => {
    // src/engine/driver.ts: a new kind is its driver file plus one registry line. config sits below
    // engine and knows `external` only as the kind whose schema needs `url` (no port to claim).
    const KIND_TEST = /\bkind\s*[!=]==?\s*["'](sim|vllm|sglang|trtllm|command|external)["']/;
    const allowed = ["engine/drivers/", "engine/sim/"];
    const known = new Set(["config/validate.ts: external"]);
    const hits: string[] = [];
    for (const file of files) {
      const rel = relative(SRC, file);
      if (allowed.some((a) => rel.startsWith(a))) continue;
      stripComments(readFileSync(file, "utf8")).split("\n").forEach((line, i) => {
        const m = KIND_TEST.exec(line);
        if (m && !known.has(`${rel}: ${m[1]}`)) hits.push(`src/${rel}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(hits).toEqual([]);
    expect(KIND_TEST.test(`if (e.kind !== "vllm") return;`)).toBe(true);
  });

  test("the checker itself bites: an upward import and a cycle are caught", () => {
    // Self-test on a synthetic graph, so a broken regex cannot make the real checks vacuous.
    const code = `import { x } from "../daemon/daemon.ts";\nexport { y } from "./local.ts";\nconst m = await import("../cli.ts");`;
    const specs = [...code.matchAll(IMPORT)].map((m) => m[1]);
    expect(specs).toEqual(["../daemon/daemon.ts", "./local.ts", "../cli.ts"]);
    expect(edges.length).toBeGreaterThan(100);
    expect(stripComments("a(); // Date.now()\n/* Math.random() */ b();")).not.toMatch(/Date\.now|Math\.random/);
  });
});
