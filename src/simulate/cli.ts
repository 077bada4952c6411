// `herd simulate …`: bench's workload flags + replica counts, policies and sim-engine figures → runs in
// virtual time → the comparison table, the operator's answers, JSON. `--calibrate bench.json` fits the
// timing model instead (calibrate.ts). The imperative shell of src/simulate: the only file here that
// reads or writes files.
import { errorMessage } from "../core/errors.ts";
import { defaultConfig, loadConfigFile } from "../config/index.ts";
import { POLICIES, type Config, type PolicyName } from "../config/types.ts";
import { parseSimArgs, UsageError as SimUsageError } from "../engine/sim/options.ts";
import { OutputVocabulary } from "../engine/sim/output.ts";
import { BenchInputError, type Limit, type Workload } from "../workload/plan.ts";
import { parseDecisionLog } from "../workload/trace.ts";
import { recordFiles } from "../request/record-file.ts";
import { summarize } from "../workload/stats.ts";
import { arrivalsFor, loadLists, parseWorkloadFlags, positiveList } from "../workload/flags.ts";
import { calibrateMain } from "./calibrate-cli.ts";
import { isPlannerRun, plannerMain } from "./planner-cli.ts";
import { isPdRun, pdSimMain } from "./pd-cli.ts";
import { PromptEncoder } from "./prompts.ts";
import { answers, renderAnswers, renderSimTable, type SimEntry, sloText, toEntry } from "./report.ts";
import { simulateRun } from "./run.ts";
import { searchReplicas } from "./search.ts";

export interface SimIo {
  out(text: string): void;
  err(text: string): void;
}

const stdio: SimIo = {
  out: (t) => void process.stdout.write(t.endsWith("\n") ? t : t + "\n"),
  err: (t) => void process.stderr.write(t.endsWith("\n") ? t : t + "\n"),
};

export const SIMULATE_HELP = `herd simulate: replay a workload against N simulated engines in virtual time, with herd's real router

Usage: herd simulate --workload W (--rate R[,R…] | --concurrency C[,C…]) [--duration S | --requests N]
       herd simulate --trace FILE [--rate R …] [--replicas …] [--policy …]
                     [--replicas N[,N…] | --replicas search[:MAX]] [--policy P[,P…]] [--seed K]
                     [--slo ttft=2s,itl=50ms] [--json FILE] [engine flags]
       herd simulate --calibrate bench.json [--save FILE]

Options:
  -h, --help           this help
Workload (as herd bench): --workload doc-qa|multi-turn|rag|hot-prefix|fixed|mixed[:k=v,…]|trace:FILE,
  --rate, --concurrency, --duration, --requests (default 200), --seed (1), --warmup, --slo, --ignore-eos
  --trace FILE         replay herd's decision log (config decision_log; FILE.N … FILE.1 then FILE) at its
                       recorded times, or re-timed with --rate/--concurrency
Cluster:
  --replicas LIST      replica counts to compare (default 2); search[:MAX] finds the smallest count
                       meeting the SLO for each policy (doubling, then bisection; MAX default 64)
  --policy LIST        routing policies (default round-robin,session,kv): ${POLICIES.join(", ")}
  --slo-share X        a run meets the SLO when this share of requests is good (default 0.99)
  --config FILE        take router.* and frontend.* from a herd YAML config (default: built-in defaults)
  --kv-event-delay-ms N  KV events reach the router's index this late (default 0)
  --kv-tier-blocks N   a CPU KV tier of N blocks on the host (herd's kv_tier): evicted prompt blocks go
                       there, prefix misses load them back (--kv-offload-load-gb-per-s, default 25;
                       --kv-offload-bytes-per-block, default Qwen3-8B's 2.25 MiB); the router's index
                       credits them as cpu (default 0 = no tier)
  --tokenizer DIR      the model's tokenizer.json dir (default: the built-in tokenizer, as sim engines)
Engine (herd sim-engine's flags; defaults model Qwen3-8B on one H100):
  --kv-blocks --block-size --max-num-seqs --max-num-batched-tokens --max-waiting --max-model-len
  --output-len --step-ms --weights-ms --token-ms --pair-ms --kv-token-ms --request-ms --time-scale --zero-delay
  --cost FILE          timing figures from a --calibrate --save file
Calibration:
  --calibrate FILE     fit step/weights/token/pair/kv-token/request figures to a herd bench --json run
  --save FILE          write the fitted figures (JSON, usable with --cost)`;

const VALUE = new Set([
  "trace", "workload", "rate", "concurrency", "duration", "requests", "seed", "warmup", "slo", "ignore-eos", "json", "replicas", "policy",
  "slo-share", "config", "kv-event-delay-ms", "tokenizer", "cost", "calibrate", "save", "kv-tier-blocks",
]);
const ENGINE_VALUE = new Set([
  "kv-blocks", "block-size", "max-num-seqs", "max-num-batched-tokens", "max-waiting", "max-model-len", "output-len", "step-ms",
  "weights-ms", "token-ms", "pair-ms", "kv-token-ms", "request-ms", "time-scale", "kv-offload-bytes-per-block", "kv-offload-load-gb-per-s",
]);

function parseFlags(argv: readonly string[]): { flags: Map<string, string>; engineArgs: string[] } | "help" {
  const flags = new Map<string, string>();
  const engineArgs: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--help" || a === "-h") return "help";
    if (!a.startsWith("--")) throw new BenchInputError(`unexpected argument ${JSON.stringify(a)}`);
    const eq = a.indexOf("=");
    const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
    if (name === "zero-delay") {
      engineArgs.push(a);
      continue;
    }
    if (!VALUE.has(name) && !ENGINE_VALUE.has(name)) throw new BenchInputError(`unknown flag --${name}`);
    const v = eq < 0 ? argv[++i] : a.slice(eq + 1);
    if (v === undefined) throw new BenchInputError(`flag --${name} needs a value`);
    if (ENGINE_VALUE.has(name)) engineArgs.push(`--${name}`, v);
    else flags.set(name, v);
  }
  return { flags, engineArgs };
}

/** Run `herd simulate ARGV…`; returns the exit code (0 ok, 1 failure, 2 usage). */
export async function simulateMain(argv: readonly string[], io: SimIo = stdio): Promise<number> {
  try {
    if (isPlannerRun(argv)) return await plannerMain(argv, io);
    if (isPdRun(argv)) return await pdSimMain(argv, io);
    const parsed = parseFlags(argv);
    if (parsed === "help") {
      io.out(SIMULATE_HELP);
      return 0;
    }
    if (parsed.flags.has("calibrate")) return await calibrateMain(parsed.flags.get("calibrate")!, parsed.flags.get("save") ?? null, io);
    return await simulate(parsed.flags, parsed.engineArgs, io);
  } catch (e) {
    if (e instanceof BenchInputError || e instanceof SimUsageError) {
      io.err(`herd simulate: ${e.message}\nRun \`herd simulate --help\` for the options.`);
      return 2;
    }
    io.err(`herd simulate: ${errorMessage(e)}`);
    return 1;
  }
}

async function simulate(flags: Map<string, string>, engineArgs: string[], io: SimIo): Promise<number> {
  const { workload, loads, duration_s, requests, seed, warmup_s, slo, ignoreEos } = await parseWorkloadFlags(flags, flags.has("trace") ? await decisionLogWorkload(flags) : undefined);
  const targetShare = flags.has("slo-share") ? Number(flags.get("slo-share")) : 0.99;
  if (!(targetShare > 0 && targetShare <= 1)) throw new BenchInputError("--slo-share: a number in (0, 1]");
  const policies = (flags.get("policy") ?? "round-robin,session,kv").split(",").map((s) => s.trim()) as PolicyName[];
  for (const p of policies) if (!POLICIES.includes(p)) throw new BenchInputError(`--policy: unknown policy ${JSON.stringify(p)} (one of ${POLICIES.join(", ")})`);
  const repText = flags.get("replicas") ?? "2";
  const search = /^search(?::(\d+))?$/.exec(repText);
  const replicaList = search ? null : positiveList("replicas", repText, true);
  const searchMax = search?.[1] !== undefined ? Number(search[1]) : 64;
  const delayMs = flags.has("kv-event-delay-ms") ? Number(flags.get("kv-event-delay-ms")) : 0;
  if (!(delayMs >= 0)) throw new BenchInputError("--kv-event-delay-ms: a number ≥ 0");
  const kvTierBlocks = flags.has("kv-tier-blocks") ? Number(flags.get("kv-tier-blocks")) : 0;
  if (!(Number.isInteger(kvTierBlocks) && kvTierBlocks >= 0)) throw new BenchInputError("--kv-tier-blocks: an integer ≥ 0");

  let base: Config = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-simulate" });
  if (flags.has("config")) {
    const r = await loadConfigFile(flags.get("config")!);
    if (!r.config) throw new BenchInputError(`--config: ${r.findings.map((f) => f.message).join("; ")}`);
    base = r.config;
  }
  const engine = parseSimArgs(engineArgs)!;
  engine.seed = seed;
  if (flags.has("cost")) engine.cost = { ...engine.cost, ...(await loadCost(flags.get("cost")!)) };
  const encoder = await PromptEncoder.load(flags.get("tokenizer") ?? null, engine.blockSize);
  const vocab = new OutputVocabulary(encoder.tokenizer);

  const entries: SimEntry[] = [];
  const wall0 = performance.now();
  for (const load of loads) {
    const arrivals = arrivalsFor(load);
    const limit: Limit = load.concurrency !== null ? { requests, duration_s: null } : { requests, duration_s };
    for (const policy of policies) {
      const runOne = (replicas: number): SimEntry => {
        const run = simulateRun(
          { model: "sim", replicas, policy, router: base.router, frontend: base.frontend, engine, kvEventDelayMs: delayMs, seed, kvTierBlocks },
          { workload, arrivals, limit, concurrency: load.concurrency, duration_s: load.concurrency !== null ? duration_s : null, ordered: workload.kind === "multi-turn" || workload.kind === "trace", ignoreEos },
          encoder, vocab,
        );
        const e = toEntry(load, policy, replicas, summarize(run.records, { warmup_s, slo }), run, targetShare);
        io.err(`simulated ${policy} × ${replicas} (${e.load.rate !== null ? `${e.load.rate} req/s` : e.load.concurrency !== null ? `conc ${e.load.concurrency}` : "trace"}): ${run.records.length} requests, ${run.virtual_s.toFixed(1)} s virtual in ${run.wall_s.toFixed(2)} s`);
        return e;
      };
      if (replicaList) for (const n of replicaList) entries.push(runOne(n));
      else entries.push(...searchReplicas(runOne, searchMax));
    }
  }
  const opts = { slo, targetShare };
  const ans = answers(entries, opts);
  io.out(`herd simulate: workload ${flags.get("workload") ?? `decision log ${flags.get("trace")}`}, seed ${seed}, SLO ${sloText(slo)}${warmup_s ? `, warm-up ${warmup_s}s excluded` : ""}\n\n${renderSimTable(entries)}\n\n${renderAnswers(ans, opts)}`);
  const jsonFile = flags.get("json");
  if (jsonFile !== undefined) {
    const workloadConfig = workload.kind === "trace" ? { kind: "trace", file: workload.file, requests: workload.requests.length } : workload;
    const config = {
      workload: workloadConfig, ...loadLists(loads), duration_s, requests, seed, warmup_s, slo, slo_share: targetShare,
      policies, replicas: replicaList ?? `search:${searchMax}`, kv_event_delay_ms: delayMs, kv_tier_blocks: kvTierBlocks, tokenizer: flags.get("tokenizer") ?? null, engine,
      router: base.router, frontend: { max_in_flight: base.frontend.max_in_flight, first_token_timeout_ms: base.frontend.first_token_timeout_ms },
    };
    await Bun.write(jsonFile, JSON.stringify({ herd_simulate: 1, config, runs: entries, answers: ans, wall_s: (performance.now() - wall0) / 1000 }, null, 1) + "\n");
    io.err(`wrote ${jsonFile}`);
  }
  return 0;
}

/** --trace FILE: herd's decision log (FILE and its rotated FILE.1 … FILE.N, oldest first) as a trace workload. */
async function decisionLogWorkload(flags: Map<string, string>): Promise<Workload> {
  if (flags.has("workload")) throw new BenchInputError("give --trace or --workload, not both");
  const file = flags.get("trace")!;
  const files = recordFiles(file);
  if (files.length === 0) throw new BenchInputError(`decision log not found: ${file}`);
  const requests = parseDecisionLog(await Promise.all(files.map(async (f) => ({ text: await Bun.file(f).text(), source: f }))));
  if (requests.length === 0) throw new BenchInputError(`no replayable request in ${files.join(", ")}`);
  return { kind: "trace", file, requests };
}

async function loadCost(file: string): Promise<Record<string, number>> {
  const f = Bun.file(file);
  if (!(await f.exists())) throw new BenchInputError(`--cost: file not found: ${file}`);
  const v = (await f.json()) as { cost?: Record<string, unknown> };
  const out: Record<string, number> = {};
  for (const [k, x] of Object.entries(v.cost ?? {})) if (typeof x === "number" && Number.isFinite(x) && x >= 0) out[k] = x;
  if (Object.keys(out).length === 0) throw new BenchInputError(`--cost: ${file} has no "cost" figures (write one with --calibrate … --save)`);
  return out;
}
