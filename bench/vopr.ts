// The whole-system seeded fault simulation over many seeds (src/simulate/faults, TigerBeetle's VOPR
// habit): each seed draws its faults (engine kill/hang, node kill/pause, partitions, slow links,
// lost KV events, tier disk full, duplicated deliveries) and its workload, runs the real election,
// fenced actuation, request lifecycle, router and KV ingest on the virtual clock, and checks the
// invariants after every instant. Prints seeds/s, faults injected per kind, invariant checks run,
// request outcomes, and every failing seed with its first violations; `--seed N --log` prints one
// seed's full event log (the reproduction: the same seed gives the same log byte for byte).
// `--pd`: engines alternate prefill/decode and every request is a P/D plan (runPd over VirtualPd).
// Exit status 1 when a seed fails. `--bug NAME` runs with a deliberate bug (skipResyncClear,
// forgetVotes, noDedupe) to show the checker catching it.
// Usage: bun bench/vopr.ts [--seeds 2000] [--from 1] [--nodes 3] [--engines 3] [--requests 20]
//          [--faults 8] [--span-ms 6000] [--pd] [--bug NAME] [--json FILE]
//        bun bench/vopr.ts --seed 42 --log
import { writeFileSync } from "node:fs";
import { defaultConfig } from "../src/config/index.ts";
import { runFaultSeed, type FaultRunOptions } from "../src/simulate/faults/run.ts";
import { FAULT_KINDS } from "../src/simulate/faults/schedule.ts";

const argv = process.argv.slice(2);
const flag = (name: string, def: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : def;
};
const bug = flag("bug", "");
const o: FaultRunOptions = {
  nodes: Number(flag("nodes", "3")),
  engines: Number(flag("engines", "3")),
  requests: Number(flag("requests", "20")),
  faults: Number(flag("faults", "8")),
  spanMs: Number(flag("span-ms", "6000")),
  config: defaultConfig({ hostname: "vopr", dataDir: "/tmp/herd-vopr" }),
  pd: argv.includes("--pd"),
  ...(bug ? { bugs: { [bug]: true } } : {}),
};

if (argv.includes("--seed")) {
  const r = await runFaultSeed(Number(flag("seed", "1")), o);
  if (argv.includes("--log")) process.stdout.write(r.log);
  console.log(JSON.stringify({ seed: r.seed, ok: r.ok, violations: r.violations, injected: r.injected, requests: r.requests, checks: r.checks }));
  process.exit(r.ok ? 0 : 1);
}

const seeds = Number(flag("seeds", "2000"));
const from = Number(flag("from", "1"));
const injected: Record<string, number> = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0]));
const outcomes: Record<string, number> = {};
const failures: { seed: number; violations: string[] }[] = [];
let checks = 0;
let instants = 0;
let virtualMs = 0;
let terms = 0;
let actuations = 0;
const kv = { published: 0, dropped: 0, replays: 0, resyncs: 0 };
const pd = { transfers: 0, loadFailures: 0 };
const t0 = performance.now();
for (let s = from; s < from + seeds; s++) {
  const r = await runFaultSeed(s, o);
  for (const [k, n] of Object.entries(r.injected)) injected[k]! += n;
  for (const [k, n] of Object.entries(r.requests)) outcomes[k] = (outcomes[k] ?? 0) + n;
  for (const k of Object.keys(kv) as (keyof typeof kv)[]) kv[k] += r.kv[k];
  pd.transfers += r.pd.transfers;
  pd.loadFailures += r.pd.loadFailures;
  checks += r.checks;
  instants += r.instants;
  virtualMs += r.virtualMs;
  terms += r.terms;
  actuations += r.actuations;
  if (!r.ok) failures.push({ seed: s, violations: r.violations.slice(0, 3).map((v) => `${Math.round(v.atMs)} ms ${v.invariant}: ${v.detail}`) });
}
const wallS = (performance.now() - t0) / 1000;
const summary = {
  seeds, from, options: { ...o, config: undefined }, wall_s: +wallS.toFixed(2), seeds_per_s: +(seeds / wallS).toFixed(1),
  virtual_s_per_seed: +(virtualMs / seeds / 1000).toFixed(1), instants, invariant_checks: checks, faults_injected: injected,
  requests: outcomes, leader_terms: terms, actuations, kv_events: kv, pd_transfers: pd, failures: failures.length, failing_seeds: failures,
};
console.log(`vopr: ${seeds} seeds (${from}..${from + seeds - 1}) in ${wallS.toFixed(1)} s = ${summary.seeds_per_s} seeds/s, ${summary.virtual_s_per_seed} virtual s each${bug ? `, deliberate bug ${bug}` : ""}`);
console.log(`faults injected: ${FAULT_KINDS.map((k) => `${k} ${injected[k]}`).join(", ")}`);
console.log(`invariant checks: ${checks} over ${instants} instants; leader terms ${terms}; actuations ${actuations}`);
console.log(`requests: ${Object.entries(outcomes).map(([k, n]) => `${k} ${n}`).join(", ")}`);
console.log(`kv events: published ${kv.published}, lost ${kv.dropped}, replays ${kv.replays}, resyncs+restarts ${kv.resyncs}`);
if (o.pd) console.log(`P/D: ${pd.transfers} KV transfers, ${pd.loadFailures} decode legs prefilled locally`);
console.log(`failures: ${failures.length}`);
for (const f of failures.slice(0, 20)) console.log(`  seed ${f.seed} (replay: bun bench/vopr.ts --seed ${f.seed} --log${bug ? ` --bug ${bug}` : ""}): ${f.violations.join(" | ")}`);
const json = flag("json", "");
if (json) writeFileSync(json, JSON.stringify(summary, null, 2));
process.exit(failures.length === 0 ? 0 : 1);
