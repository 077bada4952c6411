// Regenerates the figures README.md shows in "Measure your deployment", by running the README's own
// commands: it starts the embedded default (`herd run`, two simulated engines) on a free loopback
// port with a private data dir, runs the README's `herd bench` command against it (only --url,
// --json and --svg pointed elsewhere) and the README's `herd simulate` command as written, then
// prints the bench table, the simulate table and wall time, the commit and the load average before and after
// — the machine is shared, and the sim engines keep real time, so CPU contention shows in latency.
// Paste the printed block into README.md. Figures only, nothing asserted.
// Usage: nice bun bench/readme-figures.ts
import { loadavg } from "node:os";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { checkoutCommit } from "../src/version.ts";
import { freePort } from "./lib/child.ts";

const ROOT = resolve(import.meta.dir, "..");
const BUN = process.execPath;

/** The `npm run herd -- NAME …` command of README's Measure section, continuation lines joined, as argv after `--`. */
export function readmeCommand(readme: string, name: "bench" | "simulate"): string[] {
  const section = readme.slice(readme.indexOf("## Measure"), readme.indexOf("\n## ", readme.indexOf("## Measure") + 3));
  const text = section.replace(/\\\n\s*/g, " ");
  const line = text.split("\n").find((l) => l.trim().startsWith(`npm run herd -- ${name} --`));
  if (!line) throw new Error(`README's Measure section has no \`npm run herd -- ${name}\` command`);
  const words = line.replace(/#.*$/, "").trim().split(/\s+/);
  return words.slice(words.indexOf("--") + 1);
}

function replaceFlag(argv: string[], flag: string, value: string): string[] {
  const i = argv.indexOf(flag);
  return i < 0 ? argv : [...argv.slice(0, i + 1), value, ...argv.slice(i + 2)];
}

const load = () => loadavg().map((x) => x.toFixed(1)).join(" ");

async function main(): Promise<void> {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const benchArgv = readmeCommand(readme, "bench");
  const simArgv = readmeCommand(readme, "simulate");
  const dir = mkdtempSync(join(tmpdir(), "herd-readme-figures-"));
  const loadBefore = load();
  const port = await freePort("127.0.0.1");
  const daemon = Bun.spawn([BUN, "src/cli.ts", "run", "--listen", `127.0.0.1:${port}`], {
    cwd: ROOT, stdout: "ignore", stderr: "ignore", stdin: "ignore", env: { ...process.env, XDG_DATA_HOME: dir },
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    // Both engines ready, not just the first (herd's "ready" is the first worker).
    for (let i = 0; ; i++) {
      if (i > 600 || daemon.exitCode !== null) throw new Error("herd did not start (two sim engines ready) within 60 s");
      const ok = await fetch(`${url}/admin/cluster`).then((r) => r.json() as Promise<{ workers: { state: string }[] }>).catch(() => null);
      if (ok && ok.workers.length > 0 && ok.workers.every((w) => w.state === "ready")) break;
      await Bun.sleep(100);
    }
    let argv = replaceFlag(benchArgv, "--url", url);
    argv = replaceFlag(argv, "--json", join(dir, "bench.json"));
    argv = replaceFlag(argv, "--svg", join(dir, "bench.svg"));
    const bench = Bun.spawnSync([BUN, "src/cli.ts", ...argv], { cwd: ROOT, stdout: "pipe", stderr: "inherit" });
    if (bench.exitCode !== 0) throw new Error(`herd bench exited ${bench.exitCode}`);
    const table = bench.stdout.toString().split("\n\n").slice(1).join("\n\n").trim();
    const loadAfterBench = load();
    const t0 = performance.now();
    const sim = Bun.spawnSync([BUN, "src/cli.ts", ...simArgv], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const simWall_s = (performance.now() - t0) / 1000;
    if (sim.exitCode !== 0) throw new Error(`herd simulate exited ${sim.exitCode}: ${sim.stderr.toString().slice(-500)}`);
    const simRequests = [...sim.stderr.toString().matchAll(/: (\d+) requests,/g)].reduce((n, m) => n + Number(m[1]), 0);
    console.log(`commit ${checkoutCommit(ROOT) ?? "unknown"}, bun ${Bun.version}, load average (1/5/15 min) before ${loadBefore}, after bench ${loadAfterBench}, after simulate ${load()}`);
    console.log(`\nnpm run herd -- ${benchArgv.join(" ")}\n\n${table}`);
    // The simulate table (virtual time: the same on any machine), without the answers below it.
    const simTable = sim.stdout.toString().split("\n\n")[1]?.trim() ?? "";
    console.log(`\nnpm run herd -- ${simArgv.join(" ")}\n  ${simRequests} simulated requests in ${simWall_s.toFixed(1)} s wall\n\n${simTable}`);
  } finally {
    daemon.kill("SIGTERM");
    await daemon.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await main();
