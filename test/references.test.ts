// Comments cite public sources or docs/ in this repo, never research notes kept outside it
// (docs/references.md says why). Two checks over every text file the rule covers:
// - no citation of a research-note file (its name followed by `.md`, or the notes' folder);
// - every anchor cited as docs/references.md#<anchor> (or a following `#<anchor>` of the same
//   citation) exists in docs/references.md.
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const ROOT = join(import.meta.dir, "..");
const REFERENCES = "docs/references.md";
const SELF = relative(ROOT, import.meta.path);
const SCOPE = ["src", "bench", "test", "scripts", "config", "docs", "systemd", "README.md"];

function* textFiles(path: string): Generator<string> {
  if (!existsSync(path)) return;
  const st = statSync(path);
  if (st.isDirectory()) {
    for (const name of readdirSync(path).sort()) {
      if (name !== "node_modules") yield* textFiles(join(path, name));
    }
  } else if (st.isFile()) {
    const buf = readFileSync(path);
    if (!buf.includes(0)) yield path;
  }
}

const files = SCOPE.flatMap((p) => [...textFiles(join(ROOT, p))])
  .map((abs) => ({ rel: relative(ROOT, abs), text: readFileSync(abs, "utf8") }))
  .filter((f) => f.rel !== REFERENCES && f.rel !== SELF);

// The research notes' file names; spelled out here so that a new citation of one is caught.
const NOTES = ["engines", "routers", "kv-tier", "reliability", "planner", "style-anchors", "cluster-peers",
  "zmtp-etcd-bun", "engine-launch-and-timing"];
const noteFile = new RegExp(`([\\w./-]*?)\\b(${NOTES.join("|")})\\.md\\b`, "g");
const notesFolder = new RegExp(`\\bstyle-anchors\\b|${["shared", "reference"].join("/")}|\\breference §|\\(§[AB]\\.\\d|references\\.md#.*§[AB]?\\d`);

/** Citations of a note in `line`; `docs/<name>.md` is fine when this repository has that file. */
function noteCitations(line: string): string[] {
  const out = [...line.matchAll(noteFile)]
    .filter((m) => !(m[1]!.endsWith("docs/") && existsSync(join(ROOT, "docs", `${m[2]}.md`))))
    .map((m) => m[0]);
  if (notesFolder.test(line)) out.push(line.trim());
  return out;
}

const anchorsDefined = new Set(
  [...readFileSync(join(ROOT, REFERENCES), "utf8").matchAll(/<a id="([^"]+)"><\/a>/g)].map((m) => m[1]!),
);
const anchorCited = /#((?:engines|routers|reliability|timing|style|zmtp)-[A-Za-z0-9.]*[A-Za-z0-9])/g;

function hits(re: (line: string) => string[]): string[] {
  const out: string[] = [];
  for (const f of files) {
    for (const [i, line] of f.text.split("\n").entries()) {
      for (const what of re(line)) out.push(`${f.rel}:${i + 1}: ${what}`);
    }
  }
  return out;
}

describe("citations of outside facts", () => {
  test("docs/references.md defines its anchors", () => {
    expect(anchorsDefined.size).toBeGreaterThan(40);
    expect(anchorsDefined.has("engines-1.4")).toBe(true);
  });

  test("no comment cites a research note that is not in the repository", () => {
    const found = hits(noteCitations);
    expect(found).toEqual([]);
  });

  test("every cited docs/references.md anchor exists", () => {
    const missing = hits((line) =>
      line.includes("references.md") || /#(?:engines|routers|reliability|timing|style|zmtp)-/.test(line)
        ? [...line.matchAll(anchorCited)].map((m) => m[1]!).filter((a) => !anchorsDefined.has(a))
        : [],
    );
    expect(missing).toEqual([]);
  });
});
