// JS cells herd makes per non-stream chat request, by type (bun:jsc heapStats().objectTypeCounts).
// herd (`herd run`, one external zero-delay sim engine, as in bench/frontend-overhead.ts) runs with
// bench/lib/heap-hook.ts preloaded. After a warm-up this process asks herd (SIGUSR2) for its counts
// after a full GC, sends N sequential requests, and asks again without a GC: the difference over N is
// the cells each request made, as long as no collection ran in between (checked: the run is repeated
// and a round whose total fell, or differs from the others by > 5 %, is a collection and is dropped;
// the median of the kept rounds is printed).
// Run: ./node_modules/.bin/bun bench/frontend-allocs.ts [requests=50] [rounds=20]
// (50 requests make well under one eden collection's worth of garbage on this box; more rounds are
// dropped if N is raised.)
import { existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chatOnce, migrationKeys, MODEL, simEngineArgs, stopHerdAndEngine, writeHerdConfig } from "./lib/chat-once.ts";
import { freePort, waitUrl } from "./lib/child.ts";

const N = Number(process.argv[2] ?? 50);
const ROUNDS = Number(process.argv[3] ?? 20);
const ROOT = resolve(import.meta.dir, "..");
const dir = mkdtempSync(join(tmpdir(), "herd-allocs-"));
const hookFile = join(dir, "heap.json");
const simPort = await freePort();
const sim = Bun.spawn([process.execPath, ...simEngineArgs(simPort)], { cwd: ROOT, stdout: "ignore", stderr: "pipe" });
const cfg = writeHerdConfig(dir, `http://127.0.0.1:${simPort}`, migrationKeys(false));
const herd = Bun.spawn([process.execPath, "--preload", join(ROOT, "bench/lib/heap-hook.ts"), "src/cli.ts", "run", "--config", cfg, "--listen", "127.0.0.1:0"], {
  cwd: ROOT,
  stdout: "ignore",
  stderr: "pipe",
  env: { ...process.env, HERD_LOG: "info", HERD_HEAP_HOOK_FILE: hookFile },
});

async function counts(gc: boolean): Promise<Record<string, number>> {
  if (existsSync(hookFile)) unlinkSync(hookFile);
  if (gc) writeFileSync(`${hookFile}.gc`, "");
  else if (existsSync(`${hookFile}.gc`)) unlinkSync(`${hookFile}.gc`);
  herd.kill("SIGUSR2");
  for (let i = 0; i < 500 && !existsSync(hookFile); i++) await Bun.sleep(5);
  return JSON.parse(readFileSync(hookFile, "utf8"));
}

try {
  const url = await waitUrl(herd, /herd ready: listening on (http:\/\/\S+)/, "herd");
  for (let i = 0; i < 500; i++) await chatOnce(url, false); // JIT, connections, lazily made state
  const rounds: Record<string, number>[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const a = await counts(true);
    for (let i = 0; i < N; i++) await chatOnce(url, false);
    const b = await counts(false);
    const d: Record<string, number> = {};
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) d[k] = ((b[k] ?? 0) - (a[k] ?? 0)) / N;
    d.__total = Object.values(b).reduce((s, x) => s + x, 0) / N - Object.values(a).reduce((s, x) => s + x, 0) / N;
    rounds.push(d);
  }
  const totals = rounds.map((d) => d.__total!).sort((x, y) => x - y);
  const med = totals[totals.length >> 1]!;
  const kept = rounds.filter((d) => d.__total! > 0 && Math.abs(d.__total! - med) <= 0.05 * med);
  const median = (k: string) => {
    const v = kept.map((d) => d[k] ?? 0).sort((x, y) => x - y);
    return v[v.length >> 1]!;
  };
  console.log(`herd JS cells per non-stream request: ${N} requests × ${ROUNDS} rounds, totals per round ${totals.map((t) => t.toFixed(1)).join(", ")}; ${kept.length} kept`);
  const keys = Object.keys(kept[0] ?? {}).filter((k) => k !== "__total" && Math.abs(median(k)) >= 0.05).sort((x, y) => median(y) - median(x));
  for (const k of keys) console.log(`  ${k.padEnd(28)} ${median(k).toFixed(2).padStart(8)}`);
  console.log(`  ${"total".padEnd(28)} ${median("__total").toFixed(2).padStart(8)}`);
} finally {
  await stopHerdAndEngine(herd, sim);
  rmSync(dir, { recursive: true, force: true });
}
