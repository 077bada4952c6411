// `herd bench …` and `herd bench compare A.json B.json`: flags → plan → runs → table / JSON / SVG.
// The imperative shell of src/bench: the only file here that reads or writes files.

import { errorMessage } from "../core/errors.ts";
import type { Target } from "./client.ts";
import { BenchInputError, type Limit, plan } from "../workload/plan.ts";
import { type BenchResult, loadLabel, parseBenchResult, renderCompare, renderTable, type RunResult, toBenchResult, toRunResult } from "../workload/report.ts";
import { type Progress, runOnce } from "./runner.ts";
import { parseDuration, summarize } from "../workload/stats.ts";
import { renderSvg, type PlotRun } from "./svg.ts";
import { resetPrefixCache } from "./reset.ts";
import { arrivalsFor, loadLists, parseWorkloadFlags, positiveList, trueFalse } from "../workload/flags.ts";

export interface BenchIo {
  out(text: string): void;
  err(text: string): void;
  /** Progress: a TTY gets one line rewritten with \r; otherwise a plain line every few seconds. */
  progress(line: string, final: boolean): void;
}

export function processIo(): BenchIo {
  const tty = process.stderr.isTTY === true;
  let lastPlainMs = 0;
  return {
    out: (t) => void process.stdout.write(t.endsWith("\n") ? t : t + "\n"),
    err: (t) => void process.stderr.write(t.endsWith("\n") ? t : t + "\n"),
    progress(line, final) {
      if (tty) {
        const cols = process.stderr.columns && process.stderr.columns >= 20 ? process.stderr.columns : 120; // a pty may report 0
        process.stderr.write(`\r${line.slice(0, cols - 1).padEnd(cols - 1)}${final ? "\n" : ""}`);
      } else if (final || performance.now() - lastPlainMs >= 5000) {
        lastPlainMs = performance.now();
        process.stderr.write(line + "\n");
      }
    },
  };
}

export const BENCH_HELP = `herd bench: measure an OpenAI-compatible endpoint (herd, vLLM, SGLang, …) under a workload

Usage: herd bench --url URL [--model M] --workload W (--rate R[,R…] | --concurrency C[,C…])
                  [--duration S | --requests N] [--seed K] [--warmup S] [--slo ttft=2s,itl=50ms]
                  [--json FILE] [--svg FILE]
       herd bench compare A.json B.json

Options:
  --url URL            base URL (default http://127.0.0.1:8000; a trailing /v1 is fine)
  --model M            model name (default: the first one /v1/models lists)
  --api-key K          bearer token (default $OPENAI_API_KEY)
  --workload W         doc-qa | multi-turn | rag | hot-prefix | fixed | mixed, with options as
                       NAME:key=value,… (e.g. fixed:input=1024,output=64; see src/bench/README.md),
                       or trace:FILE (herd or Mooncake JSONL)
  --rate R[,R…]        Poisson arrivals at R req/s; a list runs a sweep, one run per rate
  --concurrency C[,…]  closed loop: C requests in flight; a list runs a sweep
                       (neither: a trace replays at its own timestamps)
  --duration S         offer requests for S seconds (e.g. 60, 2m)
  --requests N         or send N requests (default 200 when no duration is given)
  --seed K             seed of prompts and arrival times (default 1)
  --warmup S           leave requests sent in the first S seconds out of every figure (default 0)
  --slo LIST           goodput bounds: ttft=2s,itl=50ms,e2e=30s (itl = a request's mean gap)
  --json FILE          write every figure, per-request rows and the config
  --svg FILE           write latency CDFs (and, for a sweep, TTFT p95 and goodput vs load)
  --ignore-eos B       send ignore_eos so outputs run to max_tokens (default true; vLLM/SGLang)
  --session-header H   send each request's session id in header H (default x-session-id, what
                       herd's session policy reads; "" to send none)
  --reset-prefix-cache B  reset the engines' prefix cache before each load level, so no level
                       reuses an earlier one's cache (default true; false keeps the cache): POST
                       URL/reset_prefix_cache (vLLM with VLLM_SERVER_DEV_MODE=1, herd's sim engine),
                       or, when URL is a herd, the same on every engine behind it
  --timeout S          per-request timeout (default 600; 0 = none)
  --max-inflight N     bound on requests in flight (default 4096; beyond it arrivals go late)`;

export const COMPARE_HELP = `herd bench compare: every figure of two \`herd bench --json\` results side by side, and the ratio B/A

Usage: herd bench compare A.json B.json

Options:
  -h, --help           this help`;

const VALUE_FLAGS = new Set(["url", "model", "api-key", "workload", "rate", "concurrency", "duration", "requests", "seed", "warmup", "slo", "json", "svg", "ignore-eos", "timeout", "max-inflight", "session-header", "reset-prefix-cache"]);

function parseFlags(argv: readonly string[]): { flags: Map<string, string>; positionals: string[] } | "help" {
  const flags = new Map<string, string>();
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--help" || a === "-h") return "help";
    if (!a.startsWith("--")) {
      positionals.push(a);
      continue;
    }
    const eq = a.indexOf("=");
    const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
    if (!VALUE_FLAGS.has(name)) throw new BenchInputError(`unknown flag --${name}`);
    const v = eq < 0 ? argv[++i] : a.slice(eq + 1);
    if (v === undefined) throw new BenchInputError(`flag --${name} needs a value`);
    flags.set(name, v);
  }
  return { flags, positionals };
}

async function firstModel(url: string, apiKey: string | null): Promise<string> {
  const base = url.replace(/\/+$/, "").replace(/\/v1$/, "");
  const res = await fetch(`${base}/v1/models`, { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw new Error(`GET ${base}/v1/models: HTTP ${res.status} (give --model)`);
  const body = (await res.json()) as { data?: { id?: unknown }[] };
  const id = body.data?.[0]?.id;
  if (typeof id !== "string") throw new Error(`GET ${base}/v1/models listed no model (give --model)`);
  return id;
}

/** Run `herd bench ARGV…`; returns the exit code (0 ok, 1 failure or no request completed, 2 usage). */
export async function benchMain(argv: readonly string[], io: BenchIo = processIo()): Promise<number> {
  try {
    if (argv[0] === "compare") return await compareMain(argv.slice(1), io);
    const parsed = parseFlags(argv);
    if (parsed === "help") {
      io.out(BENCH_HELP);
      return 0;
    }
    if (parsed.positionals.length) throw new BenchInputError(`unexpected argument ${JSON.stringify(parsed.positionals[0])}`);
    return await benchRun(parsed.flags, io);
  } catch (e) {
    if (e instanceof BenchInputError) {
      io.err(`herd bench: ${e.message}\nRun \`herd bench --help\` for the options.`);
      return 2;
    }
    io.err(`herd bench: ${errorMessage(e)}`);
    return 1;
  }
}

async function compareMain(args: readonly string[], io: BenchIo): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    io.out(COMPARE_HELP);
    return 0;
  }
  if (args.length !== 2) throw new BenchInputError("compare needs two files: herd bench compare A.json B.json");
  const [fa, fb] = args as [string, string];
  const a = parseBenchResult(await Bun.file(fa).text(), fa);
  const b = parseBenchResult(await Bun.file(fb).text(), fb);
  io.out(`A = ${fa}\nB = ${fb}\n\n${renderCompare(a, b)}`);
  return 0;
}

async function benchRun(flags: Map<string, string>, io: BenchIo): Promise<number> {
  const { workload, loads, duration_s, requests, seed, warmup_s, slo, ignoreEos } = await parseWorkloadFlags(flags);
  const limit: Limit = { requests, duration_s };
  const timeout_s = flags.has("timeout") ? parseDuration(flags.get("timeout")!) : 600;
  const maxInflight = flags.has("max-inflight") ? positiveList("max-inflight", flags.get("max-inflight")!, true)[0]! : 4096;
  const url = flags.get("url") ?? "http://127.0.0.1:8000";
  const apiKey = flags.get("api-key") ?? process.env.OPENAI_API_KEY ?? null;
  const model = flags.get("model") ?? (await firstModel(url, apiKey));
  const sessionHeader = (flags.get("session-header") ?? "x-session-id").trim() || null;
  if (sessionHeader !== null && !/^[A-Za-z0-9-]+$/.test(sessionHeader)) throw new BenchInputError(`--session-header: not a header name: ${JSON.stringify(sessionHeader)}`);
  const target: Target = { url, model, apiKey, ignoreEos, timeout_s, sessionHeader };

  const reset = trueFalse(flags, "reset-prefix-cache", true);
  const resetFailures = new Set<string>();
  const runs: RunResult[] = [];
  const plots: PlotRun[] = [];
  for (const load of loads) {
    const arrivals = arrivalsFor(load);
    const label = loadLabel(load);
    if (reset) {
      const r = await resetPrefixCache(url, apiKey);
      // Say each failure once per sweep, not once per level.
      for (const f of r.failed) if (!resetFailures.has(f)) io.err(`herd bench: warning: ${f}; levels may start with a warm prefix cache (--reset-prefix-cache false to not try)`);
      for (const f of r.failed) resetFailures.add(f);
    }
    const started = performance.now();
    const { records, wall_s, dispatchLag_s } = await runOnce({
      target,
      requests: plan(workload, arrivals, load.concurrency !== null ? { ...limit, duration_s: null } : limit, seed),
      concurrency: load.concurrency,
      duration_s: load.concurrency !== null ? duration_s : null,
      ordered: workload.kind === "multi-turn" || workload.kind === "trace",
      maxInflight,
      onProgress: (p: Progress) => io.progress(progressLine(label, p), false),
    });
    const s = summarize(records, { warmup_s, slo });
    io.progress(`${progressLine(label, { elapsed_s: (performance.now() - started) / 1000, sent: records.length, done: records.length, failed: s.errors.total, inflight: 0 })}  done`, true);
    runs.push(toRunResult(s, load, records, wall_s, warmup_s, dispatchLag_s));
    const ok = records.filter((r) => r.start_s >= warmup_s && r.error === null);
    plots.push({
      load, ttft_s: ok.map((r) => r.ttft_s!), itl_s: ok.flatMap((r) => r.itl_s), e2e_s: ok.map((r) => r.e2e_s!),
      ttft_p95_s: s.ttft?.p95 ?? null, goodput_rps: s.goodput.requests_per_s, throughput_rps: s.throughput.requests_per_s,
    });
  }

  const workloadConfig = workload.kind === "trace" ? { kind: "trace", file: workload.file, requests: workload.requests.length } : workload;
  const config = {
    url, model, workload: workloadConfig, ...loadLists(loads), duration_s, requests, seed, warmup_s, slo,
    ignore_eos: target.ignoreEos, reset_prefix_cache: reset, reset_prefix_cache_failures: [...resetFailures], session_header: sessionHeader, timeout_s, max_inflight: maxInflight, started_at: new Date().toISOString(),
  };
  const result: BenchResult = toBenchResult(config, runs);
  io.out(`herd bench: ${model} at ${url}, workload ${flags.get("workload")}, seed ${seed}${warmup_s ? `, warm-up ${warmup_s}s excluded` : ""}\n\n${renderTable(runs)}`);
  const jsonFile = flags.get("json");
  if (jsonFile !== undefined) {
    await Bun.write(jsonFile, JSON.stringify(result, null, 1) + "\n");
    io.err(`wrote ${jsonFile}`);
  }
  const svgFile = flags.get("svg");
  if (svgFile !== undefined) {
    await Bun.write(svgFile, renderSvg(plots, `herd bench — ${model}, ${flags.get("workload")!}`));
    io.err(`wrote ${svgFile}`);
  }
  // Figures are still written, but a run where nothing completed is a failure for scripts.
  if (runs.every((r) => r.requests.completed === 0)) {
    io.err(`herd bench: no request completed (${Object.entries(runs[0]!.errors.by_kind).map(([k, n]) => `${k}: ${n}`).join(", ") || "none measured"})`);
    return 1;
  }
  return 0;
}

function progressLine(label: string, p: Progress): string {
  const rps = p.elapsed_s > 0 ? p.done / p.elapsed_s : 0;
  return `[${label}] ${p.elapsed_s.toFixed(1)}s  sent ${p.sent}  done ${p.done}  failed ${p.failed}  in flight ${p.inflight}  ${rps.toFixed(1)} req/s`;
}
