// The parser fuzz suites (test/fuzz/, issue 22 "Proof") with many more cases than CI runs: each
// file under `bun test` with HERD_FUZZ_CASES and one or more seeds. A failure prints the suite's
// own replay line (HERD_FUZZ_SEED=… HERD_FUZZ_ONLY=…), which reproduces the case exactly.
// Run: ./node_modules/.bin/bun bench/fuzz.ts [--cases 5000] [--seeds 1,2,3] [--only resp]
import { readdirSync } from "node:fs";
import { join } from "node:path";

const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : dflt;
};
const CASES = Number(arg("cases", "5000"));
const SEEDS = arg("seeds", "1").split(",").map(Number);
const ONLY = arg("only", "");
const root = join(import.meta.dir, "..");
const files = readdirSync(join(root, "test/fuzz"))
  .filter((f) => f.endsWith(".test.ts") && f.includes(ONLY))
  .sort();

let failed = 0;
for (const f of files) {
  for (const seed of SEEDS) {
    const t0 = performance.now();
    const p = Bun.spawnSync([process.execPath, "test", "--timeout", "3600000", join("test/fuzz", f)], {
      cwd: root,
      env: { ...process.env, HERD_FUZZ_CASES: String(CASES), HERD_FUZZ_SEED: String(seed) },
      stdout: "pipe",
      stderr: "pipe",
    });
    const out = p.stdout.toString() + p.stderr.toString();
    const s = ((performance.now() - t0) / 1000).toFixed(1);
    const stats = out.split("\n").filter((l) => / fuzz: \d+ cases/.test(l));
    if (p.exitCode === 0) console.log(`${f.padEnd(24)} seed ${seed}: ok in ${s} s  ${stats.join("; ")}`);
    else {
      failed++;
      console.log(`${f.padEnd(24)} seed ${seed}: FAILED in ${s} s`);
      console.log(out.split("\n").filter((l) => /^error:|replay/.test(l)).slice(0, 6).join("\n"));
    }
  }
}
process.exit(failed > 0 ? 1 : 0);
