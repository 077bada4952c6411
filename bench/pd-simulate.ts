// Aggregated vs P/D in virtual time: the two default workloads of `herd simulate --pd`
// (src/simulate/pd.ts), printed with the commit, for docs/benchmarks.md. Figures only, nothing asserted.
// Usage: bun bench/pd-simulate.ts [herd simulate --pd options]
import { execSync } from "node:child_process";
import { pdSimMain } from "../src/simulate/pd-cli.ts";

const io = { out: (t: string) => void console.log(t), err: (t: string) => void console.error(t) };
await pdSimMain(["--pd", ...process.argv.slice(2)], io);
console.log(`commit ${execSync("git rev-parse --short HEAD", { encoding: "utf8" }).trim()}`);
