// How fast `herd simulate` runs: a fixed scenario (doc-qa at 20 req/s on 10 replicas, one child
// process per policy so each gets its own peak RSS) through the real CLI, printing wall time, CPU
// time, simulated requests per wall second, the virtual-to-wall ratio and peak RSS. Figures only,
// nothing asserted. `--json-dir D` keeps each run's --json output (compare two builds with
// `--compare A B`: every figure except wall_s must be identical for a seed).
// Usage: bun bench/simulate-speed.ts [--minutes 10] [--policies kv,round-robin] [--rate 20]
//          [--replicas 10] [--seed 1] [--json-dir DIR]
//        bun bench/simulate-speed.ts --compare DIR_A DIR_B
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const argv = process.argv.slice(2);
const flag = (name: string, def: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : def;
};

/** A simulate JSON without its wall-clock figures (the only fields allowed to differ between builds). */
function stable(file: string): string {
  return JSON.stringify(JSON.parse(readFileSync(file, "utf8")), (k, v) => (k === "wall_s" ? undefined : v));
}

if (argv[0] === "--compare") {
  const [a, b] = [argv[1]!, argv[2]!];
  let same = true;
  for (const f of readdirSync(a).filter((f) => f.endsWith(".json"))) {
    const eq = stable(join(a, f)) === stable(join(b, f));
    same &&= eq;
    console.log(`${f}: ${eq ? "identical (wall_s aside)" : "DIFFERENT"}`);
  }
  process.exit(same ? 0 : 1);
}

const minutes = Number(flag("minutes", "10"));
const policies = flag("policies", "kv,round-robin").split(",");
const rate = flag("rate", "20");
const replicas = flag("replicas", "10");
const seed = flag("seed", "1");
const dir = flag("json-dir", "") || mkdtempSync(join(tmpdir(), "herd-simspeed-"));
const bun = process.execPath;
const cli = join(import.meta.dir, "../src/cli.ts");

console.log(`herd simulate speed: doc-qa, ${rate} req/s, ${replicas} replicas, ${minutes} virtual min, seed ${seed}; JSON in ${dir}`);
console.log("policy        requests  virtual s   wall s    CPU s  req/s (wall)  virtual/wall  peak RSS MB");
for (const policy of policies) {
  const json = join(dir, `${policy}.json`);
  const t0 = performance.now();
  const p = Bun.spawn(
    [bun, cli, "simulate", "--workload", "doc-qa", "--rate", rate, "--duration", String(minutes * 60), "--replicas", replicas,
      "--policy", policy, "--seed", seed, "--slo", "ttft=500ms,itl=50ms", "--json", json],
    { stdout: "ignore", stderr: "pipe" },
  );
  const err = await new Response(p.stderr).text();
  const code = await p.exited;
  const wall = (performance.now() - t0) / 1000;
  if (code !== 0) {
    console.log(`${policy}: exit ${code}\n${err}`);
    process.exit(1);
  }
  const ru = p.resourceUsage()!;
  const cpu = Number(ru.cpuTime.total) / 1e6;
  // "simulated kv × 10 (20 req/s): 72316 requests, 3602.0 s virtual in 12.34 s"
  const m = /: (\d+) requests, ([\d.]+) s virtual in ([\d.]+) s/.exec(err);
  const n = m ? Number(m[1]) : NaN;
  const virt = m ? Number(m[2]) : NaN;
  console.log(
    `${policy.padEnd(12)} ${String(n).padStart(9)} ${virt.toFixed(0).padStart(10)} ${wall.toFixed(1).padStart(8)} ${cpu.toFixed(1).padStart(8)}` +
      ` ${(n / wall).toFixed(0).padStart(13)} ${(virt / wall).toFixed(0).padStart(13)}× ${(ru.maxRSS / 2 ** 20).toFixed(0).padStart(12)}`,
  );
}
