// `herd simulate --calibrate bench.json[,more.json…] [--save FILE]`: read herd bench --json results, fit the timing
// figures (calibrate.ts), print them as flags, and optionally save them for `--cost FILE`.
import { parseBenchResult, type RecordRow } from "../workload/report.ts";
import { BenchInputError } from "../workload/plan.ts";
import { calibrate } from "./calibrate.ts";

/** `files`: one bench JSON or several, comma-separated (e.g. fixed-length runs at 256, 1024 and 4096 tokens). */
export async function calibrateMain(files: string, save: string | null, io: { out(t: string): void; err(t: string): void }): Promise<number> {
  const runs: RecordRow[][] = [];
  for (const file of files.split(",").map((x) => x.trim()).filter((x) => x !== "")) {
    const f = Bun.file(file);
    if (!(await f.exists())) throw new BenchInputError(`--calibrate: file not found: ${file}`);
    const bench = parseBenchResult(await f.text(), file);
    for (const r of bench.runs) if (r.records?.length) runs.push(r.records);
  }
  const file = files;
  const records = runs.flat();
  if (records.length === 0) throw new BenchInputError(`--calibrate: ${files} holds no per-request records`);
  const fit = calibrate(runs);
  const r2 = (x: number | null) => (x === null ? "n/a" : x.toFixed(3));
  const c = fit.cost;
  io.out([
    `herd simulate --calibrate ${file}: ${records.length} records (${fit.rows.ttft} TTFT rows, ${fit.rows.itl} ITL rows, ${fit.rows.skipped} skipped, ${fit.rows.outliers} outliers left out)`,
    `  request ${c.requestMs.toPrecision(4)} ms, step ${c.stepMs.toPrecision(4)} ms (default kept), weights ${c.weightsMs.toPrecision(4)} ms,`,
    `  token ${c.linearMsPerToken.toPrecision(4)} ms, pair ${c.pairMs.toPrecision(4)} ms, kv-token ${c.kvReadMsPerToken.toPrecision(4)} ms`,
    `  fit R²: TTFT ${r2(fit.r2.ttft)}, ITL ${r2(fit.r2.itl)}; from the data: ${fit.identified.join(", ") || "nothing"}`,
    "",
    fit.flags,
  ].join("\n"));
  if (save !== null) {
    await Bun.write(save, JSON.stringify({ herd_simulate_calibration: 1, source: file, ...fit }, null, 1) + "\n");
    io.err(`wrote ${save}`);
  }
  return 0;
}
