// Every command in README.md's shell blocks runs as written (issue 11): the test reads the README,
// splits each ```sh block into commands (continuation lines joined, trailing comments dropped) and
// runs each one with bash from the checkout's root, against the embedded default started the way
// the README starts it (`npm start`, on a free loopback port instead of :8000, with a private data
// dir; every `127.0.0.1:8000` in a command is read as that port). Commands that need root, a GPU,
// the network or the installed binary are listed in EXPECT with the reason; every other command must
// exit 0, so a command added to the README later is run too unless it is listed here.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseRuntimeInfo, runtimeFilePath } from "../src/ops/runtime.ts";
import { cleanup, tempDir } from "./helpers/herd.ts";
import { freePort } from "./helpers/ports.ts";

const ROOT = join(import.meta.dir, "..");
const README = readFileSync(join(ROOT, "README.md"), "utf8");

/** The commands of every ```sh/```bash block, in README order. */
export function readmeCommands(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/```(?:sh|bash|shell)\n([\s\S]*?)```/g)) {
    const joined = m[1]!.replace(/\\\n\s*/g, " ");
    for (const line of joined.split("\n")) {
      const cmd = stripComment(line).trim();
      if (cmd) out.push(cmd);
    }
  }
  return out;
}

/** Drop a trailing `# comment` (a # after whitespace, outside quotes). */
function stripComment(line: string): string {
  let quote: string | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = null;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]!))) return line.slice(0, i);
  }
  return line;
}

interface Expect {
  /** Not run here, and why. */
  skip?: string;
  stdout?: RegExp;
  /** Files the command reads that an earlier command's output stands in for (README order). */
  setup?: () => void;
}

const made: string[] = []; // files the commands write into the checkout; removed afterwards
const writeOnce = (name: string, fill: () => void) => {
  const p = join(ROOT, name);
  if (existsSync(p)) return;
  made.push(p);
  fill();
};

const yamlBlock = () => /```yaml\n([\s\S]*?)```/.exec(README)![1]!;

/** First matching pattern wins; a command matching none must exit 0. */
const EXPECT: [RegExp, Expect][] = [
  [/^npm install/, { skip: "installs from the npm registry; this test's own daemon is the `npm start` that follows it (beforeAll)" }],
  [/^npm test$/, { skip: "the whole suite, this test included" }],
  [/^npm start -- --config herd\.yaml$/, { skip: "starts vLLM on GPUs 0 and 1 (needs GPUs and vllm); test/ops/preflight.test.ts runs it here and checks it refuses before starting anything" }],
  [/^curl -fsSL <release-url>/, { skip: "downloads a release (network) and installs as root" }],
  [/^sudo/, { skip: "needs root and the installed systemd service" }],
  [/^npm run herd -- top$/, { skip: "a live view until q is pressed; test/observability/top.test.ts runs it under tmux against herd run" }],
  [/^herd /, { skip: "bare `herd` is the installed binary (not on PATH in a checkout); the same command as `npm run herd -- …` runs above" }],
  [/^curl .*\/v1\/chat\/completions/, { stdout: /"choices"/ }],
  [/^curl .*\/admin\/route\/explain/, { stdout: /"workers"|"candidates"|"policy"/ }],
  [/^curl .*\/metrics/, { stdout: /^herd_/m }],
  [/^npm run herd -- doctor\b/, { stdout: /^ok: \d+ ok, \d+ warnings, 0 failed$/m }],
  [/^npm run herd -- status\b/, { stdout: /workers 2\/2 ready/ }],
  [/^npm run herd -- drain sim-0/, { stdout: /\/sim-0: drained/ }],
  [/^npm run herd -- undrain --node/, { stdout: /\/sim-1: undrained/ }],
  [/^npm run herd -- config check herd\.yaml/, { stdout: /herd\.yaml: valid/, setup: () => writeOnce("herd.yaml", () => writeFileSync(join(ROOT, "herd.yaml"), yamlBlock())) }],
  [/^npm run herd -- bench compare before\.json after\.json/, {
    stdout: /A = before\.json/,
    setup: () => {
      // Two results of the README's own bench command (run just before) stand in for before/after.
      for (const f of ["before.json", "after.json"]) writeOnce(f, () => copyFileSync(join(ROOT, "docqa.json"), join(ROOT, f)));
    },
  }],
  [/^npm run herd -- bench /, { stdout: /goodput share/ }],
  [/^npm run herd -- simulate /, { stdout: /How many replicas does the SLO need\?/ }],
];

const commands = readmeCommands(README);
const dataHome = tempDir("herd-readme-");
let port = 0;
let npmStart: ReturnType<typeof Bun.spawn> | null = null;

const env = () => ({ ...process.env, XDG_DATA_HOME: dataHome, NO_COLOR: "1" });

beforeAll(async () => {
  port = await freePort();
  // The README's `npm start`, on a free port: the embedded default (two sim engines).
  npmStart = Bun.spawn(["npm", "start", "--", "--listen", `127.0.0.1:${port}`], { cwd: ROOT, env: env(), stdout: "ignore", stderr: "ignore", stdin: "ignore" });
  const deadline = performance.now() + 60_000;
  for (;;) {
    const view = await fetch(`http://127.0.0.1:${port}/admin/cluster`).then((r) => r.json() as Promise<{ workers: { state: string }[] }>).catch(() => null);
    if (view && view.workers.length === 2 && view.workers.every((w) => w.state === "ready")) break;
    if (performance.now() > deadline || npmStart.exitCode !== null) throw new Error("npm start: the embedded default did not get two ready engines within 60 s");
    await Bun.sleep(100);
  }
}, 90_000);

afterAll(async () => {
  // npm runs herd in a child shell: stop herd itself (its pid is in the runtime file), then npm.
  const info = (() => {
    try {
      return parseRuntimeInfo(readFileSync(runtimeFilePath(join(dataHome, "herd")), "utf8"));
    } catch {
      return null;
    }
  })();
  if (info) {
    try {
      process.kill(info.pid, "SIGTERM");
    } catch {
      // already gone
    }
  }
  if (npmStart) {
    const t = setTimeout(() => npmStart?.kill("SIGKILL"), 15_000);
    await npmStart.exited;
    clearTimeout(t);
  }
  for (const f of [...made, join(ROOT, "docqa.json"), join(ROOT, "docqa.svg")]) rmSync(f, { force: true });
  cleanup(dataHome);
}, 30_000);

test("the README has shell blocks, and every command in them is either run here or skipped with a reason", () => {
  expect(commands.length).toBeGreaterThan(10);
  for (const c of ["npm run herd -- status", "npm run herd -- logs sim-0 -n 20"]) expect(commands).toContain(c);
  // Measure and Operate use the checkout's command, not the installed binary's.
  const section = (name: string) => README.slice(README.indexOf(`## ${name}`), README.indexOf("\n## ", README.indexOf(`## ${name}`) + 3));
  for (const s of ["Measure", "Operate"]) expect(readmeCommands(section(s)).filter((c) => c.startsWith("herd "))).toEqual([]);
});

describe("README commands, in order", () => {
  for (const [i, cmd] of commands.entries()) {
    const rule = EXPECT.find(([re]) => re.test(cmd))?.[1] ?? {};
    const name = `${String(i + 1).padStart(2, "0")}: ${cmd.length > 110 ? cmd.slice(0, 107) + "..." : cmd}`;
    if (rule.skip) {
      test.skip(`${name} — not run: ${rule.skip}`, () => {});
      continue;
    }
    test(name, () => {
      rule.setup?.();
      const run = cmd.replaceAll("127.0.0.1:8000", `127.0.0.1:${port}`);
      const p = Bun.spawnSync(["bash", "-c", `set -o pipefail; ${run}`], { cwd: ROOT, env: env(), stdout: "pipe", stderr: "pipe", timeout: 240_000 });
      const out = p.stdout.toString();
      const err = p.stderr.toString();
      if (p.exitCode !== 0) throw new Error(`exit ${p.exitCode}: ${run}\n--- stdout ---\n${out.slice(-3000)}\n--- stderr ---\n${err.slice(-3000)}`);
      if (rule.stdout) expect(out).toMatch(rule.stdout);
    }, 300_000);
  }
});
